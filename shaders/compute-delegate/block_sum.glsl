// block_sum(v): the sum of v over the 256 invocations of a work group, returned to all of
// them. With SUBGROUP, subgroup additions and a second level by the first subgroup (two
// barriers); without, a tree in shared memory. Included by reduce.glsl, layer_norm.glsl and
// (subgroup form only) softmax.glsl.
#if SUBGROUP
shared float s_part[64];
shared float s_res;

float block_sum(float v) {
    v = subgroupAdd(v);
    if (subgroupElect()) {
        s_part[gl_SubgroupID] = v;
    }
    barrier();
    if (gl_SubgroupID == 0) {
        float r = 0.0;
        for (uint i = gl_SubgroupInvocationID; i < gl_NumSubgroups; i += gl_SubgroupSize) {
            r += s_part[i];
        }
        r = subgroupAdd(r);
        if (subgroupElect()) {
            s_res = r;
        }
    }
    barrier();
    return s_res;
}
#else
shared float s_acc[256];

float block_sum(float v) {
    uint t = gl_LocalInvocationID.x;
    s_acc[t] = v;
    barrier();
    for (uint w = 128; w > 0; w >>= 1) {
        if (t < w) {
            s_acc[t] += s_acc[t + w];
        }
        barrier();
    }
    float r = s_acc[0];
    barrier();
    return r;
}
#endif
