// softmax / log_softmax over the middle dim of a [outer, d, inner] view, included by
// softmax.comp (shared-memory reductions) and softmax_sg.comp (subgroup reductions, for
// devices with subgroup arithmetic in compute shaders), which define SUBGROUP.
// ROWS = 1 (inner == 1): one work group per row, an online max/sum per thread, then a
// work-group reduction of (max, sum). ROWS = 0: one thread per (outer, inner) column.
#include "dtype.glsl"
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint LOG = 0;
layout(constant_id = 1) const uint ROWS = 1;
// Rows of a multiple of 4 elements (ROWS = 1 only): vec4 loads and stores.
layout(constant_id = 2) const uint VEC4 = 0;
// Rows of at most 256 * 8 vec4s (VEC4 = 1 only): each thread keeps its CACHE vec4s of the row
// in registers, so the row is read from memory once.
layout(constant_id = 3) const uint CACHE = 0;
const uint CACHE_LEN = (CACHE > 0) ? CACHE : 1;

layout(std430, set = 0, binding = 0) readonly buffer X { T x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { T y[]; };
layout(std430, set = 0, binding = 0) readonly buffer X4 { T4 x4[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y4 { T4 y4[]; };

layout(push_constant) uniform Params {
    uint outer;
    uint d;
    uint inner;
} pc;

#if SUBGROUP
// block_sum and the subgroup partials it reduces through (s_part, s_res), shared with
// block_max below.
#include "block_sum.glsl"

// Subgroup reduction, then the first subgroup reduces the partials; two barriers.
float block_max(float v) {
    v = subgroupMax(v);
    if (subgroupElect()) {
        s_part[gl_SubgroupID] = v;
    }
    barrier();
    if (gl_SubgroupID == 0) {
        float r = -1.0 / 0.0;
        for (uint i = gl_SubgroupInvocationID; i < gl_NumSubgroups; i += gl_SubgroupSize) {
            r = max(r, s_part[i]);
        }
        r = subgroupMax(r);
        if (subgroupElect()) {
            s_res = r;
        }
    }
    barrier();
    return s_res;
}

// The row's max and sum of exp(x - max) from each thread's (max, sum).
void block_reduce(uint t, float m, float s, out float gm, out float gs) {
    gm = block_max(m);
    gs = block_sum(m == -1.0 / 0.0 ? 0.0 : s * exp(m - gm));
}
#else
shared float s_max[256];
shared float s_sum[256];

void combine(inout float m, inout float s, float m2, float s2) {
    float mm = max(m, m2);
    if (mm == -1.0 / 0.0) {
        return;
    }
    s = s * exp(m - mm) + s2 * exp(m2 - mm);
    m = mm;
}

// The row's max and sum of exp(x - max) from each thread's (max, sum): a tree in shared memory.
void block_reduce(uint t, float m, float s, out float gm, out float gs) {
    s_max[t] = m;
    s_sum[t] = s;
    barrier();
    for (uint w = 128; w > 0; w >>= 1) {
        if (t < w) {
            float mm = s_max[t];
            float ss = s_sum[t];
            combine(mm, ss, s_max[t + w], s_sum[t + w]);
            s_max[t] = mm;
            s_sum[t] = ss;
        }
        barrier();
    }
    gm = s_max[0];
    gs = s_sum[0];
    barrier();
}
#endif

void main() {
    if (ROWS == 1) {
        uint t = gl_LocalInvocationID.x;
        for (uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x; row < pc.outer;
             row += gl_NumWorkGroups.x * gl_NumWorkGroups.y) {
            uint base = row * pc.d;
            float m = -1.0 / 0.0;
            float s = 0.0;
            vec4 cache[CACHE_LEN];
            if (CACHE > 0) {
                uint base4 = base / 4;
                uint d4 = pc.d / 4;
                for (uint k = 0; k < CACHE; ++k) {
                    uint j = t + k * 256;
                    cache[k] = (j < d4) ? vec4(x4[base4 + j]) : vec4(-1.0 / 0.0);
                    m = max(m, max(max(cache[k].x, cache[k].y), max(cache[k].z, cache[k].w)));
                }
                if (m != -1.0 / 0.0) {
                    for (uint k = 0; k < CACHE; ++k) {
                        vec4 e = exp(cache[k] - m);
                        s += (e.x + e.y) + (e.z + e.w);
                    }
                }
            } else if (VEC4 == 1) {
                uint base4 = base / 4;
                for (uint j = t; j < pc.d / 4; j += 256) {
                    vec4 v = vec4(x4[base4 + j]);
                    float vm = max(max(v.x, v.y), max(v.z, v.w));
                    float mm = max(m, vm);
                    // Nothing to add while every element so far is -inf.
                    if (mm != -1.0 / 0.0) {
                        vec4 e = exp(v - mm);
                        s = s * exp(m - mm) + (e.x + e.y) + (e.z + e.w);
                        m = mm;
                    }
                }
            } else {
                for (uint j = t; j < pc.d; j += 256) {
                    float v = float(x[base + j]);
                    if (v > m) {
                        s = s * exp(m - v) + 1.0;
                        m = v;
                    } else if (m != -1.0 / 0.0) {
                        s += exp(v - m);
                    }
                }
            }
            float gm;
            float gs;
            block_reduce(t, m, s, gm, gs);
            if (CACHE > 0) {
                uint base4 = base / 4;
                uint d4 = pc.d / 4;
                float l = gm + log(gs);
                float r = 1.0 / gs;
                for (uint k = 0; k < CACHE; ++k) {
                    uint j = t + k * 256;
                    if (j < d4) {
                        y4[base4 + j] = T4((LOG == 1) ? cache[k] - l : exp(cache[k] - gm) * r);
                    }
                }
            } else if (VEC4 == 1) {
                uint base4 = base / 4;
                float l = gm + log(gs);
                float r = 1.0 / gs;
                for (uint j = t; j < pc.d / 4; j += 256) {
                    vec4 v = vec4(x4[base4 + j]);
                    y4[base4 + j] = T4((LOG == 1) ? v - l : exp(v - gm) * r);
                }
            } else if (LOG == 1) {
                float l = gm + log(gs);
                for (uint j = t; j < pc.d; j += 256) {
                    y[base + j] = T(float(x[base + j]) - l);
                }
            } else {
                float r = 1.0 / gs;
                for (uint j = t; j < pc.d; j += 256) {
                    y[base + j] = T(exp(float(x[base + j]) - gm) * r);
                }
            }
        }
    } else {
        uint cols = pc.outer * pc.inner;
        uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
        for (uint c = gl_GlobalInvocationID.x; c < cols; c += stride) {
            uint o = c / pc.inner;
            uint i = c - o * pc.inner;
            uint base = o * pc.d * pc.inner + i;
            float m = -1.0 / 0.0;
            float s = 0.0;
            for (uint j = 0; j < pc.d; ++j) {
                float v = float(x[base + j * pc.inner]);
                if (v > m) {
                    s = s * exp(m - v) + 1.0;
                    m = v;
                } else if (m != -1.0 / 0.0) {
                    s += exp(v - m);
                }
            }
            if (LOG == 1) {
                float l = m + log(s);
                for (uint j = 0; j < pc.d; ++j) {
                    y[base + j * pc.inner] = T(float(x[base + j * pc.inner]) - l);
                }
            } else {
                float r = 1.0 / s;
                for (uint j = 0; j < pc.d; ++j) {
                    y[base + j * pc.inner] = T(exp(float(x[base + j * pc.inner]) - m) * r);
                }
            }
        }
    }
}
