// The order of arg_part.comp and arg_pairs.comp: candidate (va, ia) beats (vb, ib) for the
// maximum (mode 0) or the minimum (mode 1). The first of equal values, and the first NaN,
// win, as in PyTorch (and arg_reduce.comp). An empty candidate has index 0xFFFFFFFF and the
// value every real one ties or beats.
bool arg_better(float va, uint ia, float vb, uint ib, uint mode) {
    bool na = isnan(va);
    bool nb = isnan(vb);
    if (na || nb) {
        return na && (!nb || ia < ib);
    }
    if (va == vb) {
        return ia < ib;
    }
    return mode == 0u ? va > vb : va < vb;
}

float arg_empty(uint mode) {
    return mode == 0u ? uintBitsToFloat(0xFF800000u) : uintBitsToFloat(0x7F800000u);
}

// The work group's 256 candidates, reduced in shared memory; every thread ends with the best.
shared float arg_v[256];
shared uint arg_i[256];

void arg_reduce_group(inout float v, inout uint i, uint mode) {
    uint t = gl_LocalInvocationID.x;
    arg_v[t] = v;
    arg_i[t] = i;
    barrier();
    for (uint half_ = 128u; half_ > 0u; half_ >>= 1) {
        if (t < half_ && arg_better(arg_v[t + half_], arg_i[t + half_], arg_v[t], arg_i[t], mode)) {
            arg_v[t] = arg_v[t + half_];
            arg_i[t] = arg_i[t + half_];
        }
        barrier();
    }
    v = arg_v[0];
    i = arg_i[0];
    // The slots are written again by the next reduction.
    barrier();
}
