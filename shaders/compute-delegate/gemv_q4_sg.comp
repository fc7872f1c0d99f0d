#version 450
// kernel: GemvQ4Sg
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
// gemv_q4.comp's product (the same bindings, push block, specialization constants and
// epilogues: see there) with subgroup reductions and no shared memory or barrier. Each
// subgroup computes 4 columns (with GLU, 2 gate columns and their 2 up columns) on its own:
// lane l reads the 16-byte words l, l + S, .. (S the subgroup's size; 32 weights each) of the
// 4 packed rows, two words of each in flight, with the slices of x they need, and the lanes'
// sums meet by `subgroupAdd`. With NORM, the sums of squares of the x a subgroup reads (all of
// it, once) give the norm, applied to the sums at the end. Subgroup s of the dispatch takes the
// columns' groups s, s + (all subgroups), ..
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
#include "q4.glsl"
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint ROWS = 1;
layout(constant_id = 1) const uint GLU = 0;
layout(constant_id = 2) const uint NORM = 0;

const uint COLS = 4;
const uint MAX_ROWS = 4;
// Words of each column a lane has in flight at once.
const uint DEPTH = 2;

layout(std430, set = 0, binding = 0) readonly buffer X4 { T4 x4[]; };
layout(std430, set = 0, binding = 1) readonly buffer W { uvec4 w[]; };
layout(std430, set = 0, binding = 2) readonly buffer S { float s[]; };
layout(std430, set = 0, binding = 3) readonly buffer W2 { uvec4 w2[]; };
layout(std430, set = 0, binding = 4) readonly buffer S2 { float s2[]; };
layout(std430, set = 0, binding = 5) readonly buffer Bias { T bias[]; };
layout(std430, set = 0, binding = 6) readonly buffer NormW { T4 nw4[]; };
// Bindings 7 to 9 (a KV cache's position and rotary tables) are gemv_q4.comp's alone.
layout(std430, set = 0, binding = 7) readonly buffer Pos { int pos[]; };
layout(std430, set = 0, binding = 8) readonly buffer Cos { T cos_[]; };
layout(std430, set = 0, binding = 9) readonly buffer Sin { T sin_[]; };
layout(std430, set = 0, binding = 10) writeonly buffer Y { T y[]; };

layout(push_constant) uniform Params {
    uint n;
    uint k;
    uint group_shift;
    uint groups;
    uint col_groups;
    uint has_bias;
    uint bias_row;
    float eps;
    // gemv_q4.comp's KV cache epilogue, which this layout does not take (cache_rows 0).
    uint cache_rows;
    uint heads;
    uint head_d;
    int plus;
    uint has_pos;
    uint rope;
} pc;

void main() {
    uint lane = gl_SubgroupInvocationID;
    uint size = gl_SubgroupSize;
    uint words = pc.k / 32;
    bool fine = pc.group_shift < 5;
    const bool glu = GLU != 0;
    const uint per = GLU != 0 ? COLS / 2 : COLS;
    uint col_groups = (pc.n + per - 1) / per;
    uint first = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID;
    uint stride = gl_NumWorkGroups.x * gl_NumSubgroups;
    for (uint g = first; g < col_groups; g += stride) {
        uint col0 = g * per;
        uint row[COLS];
        [[unroll]] for (uint c = 0; c < COLS; ++c) {
            row[c] = min(col0 + (c < per ? c : c - per), pc.n - 1);
        }
        float acc[COLS][MAX_ROWS];
        float ss[MAX_ROWS];
        [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
            ss[r] = 0.0;
            [[unroll]] for (uint c = 0; c < COLS; ++c) {
                acc[c][r] = 0.0;
            }
        }
        for (uint i0 = lane; i0 < words; i0 += size * DEPTH) {
            uvec4 q[DEPTH][COLS];
            [[unroll]] for (uint u = 0; u < DEPTH; ++u) {
                uint i = min(i0 + u * size, words - 1);
                [[unroll]] for (uint c = 0; c < COLS; ++c) {
                    q[u][c] = (glu && c >= per) ? w2[row[c] * words + i] : w[row[c] * words + i];
                }
            }
            [[unroll]] for (uint u = 0; u < DEPTH; ++u) {
                uint i = i0 + u * size;
                if (i < words) {
                    float d[COLS][MAX_ROWS];
                    [[unroll]] for (uint c = 0; c < COLS; ++c) {
                        [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
                            d[c][r] = 0.0;
                        }
                    }
                    [[unroll]] for (uint p = 0; p < 4; ++p) {
                        uint kk = i * 32 + p * 8;
                        vec4 xa[MAX_ROWS];
                        vec4 xb[MAX_ROWS];
                        vec4 nwa = NORM != 0 ? vec4(nw4[kk / 4]) * Q4_X_LO : Q4_X_LO;
                        vec4 nwb = NORM != 0 ? vec4(nw4[kk / 4 + 1]) * Q4_X_HI : Q4_X_HI;
                        [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
                            if (r < ROWS) {
                                uint at = (r * pc.k + kk) / 4;
                                xa[r] = vec4(x4[at]);
                                xb[r] = vec4(x4[at + 1]);
                                if (NORM != 0) {
                                    ss[r] += dot(xa[r], xa[r]) + dot(xb[r], xb[r]);
                                }
                                xa[r] *= nwa;
                                xb[r] *= nwb;
                            }
                        }
                        [[unroll]] for (uint c = 0; c < COLS; ++c) {
                            float sc = 1.0;
                            if (fine) {
                                uint at = row[c] * pc.groups + (kk >> pc.group_shift);
                                sc = (glu && c >= per) ? s2[at] : s[at];
                            }
                            vec4 lo, hi;
                            nibbles(q[u][c][p], lo, hi);
                            [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
                                if (r < ROWS) {
                                    d[c][r] += sc * (dot(lo, xa[r]) + dot(hi, xb[r]));
                                }
                            }
                        }
                    }
                    [[unroll]] for (uint c = 0; c < COLS; ++c) {
                        float sc = 1.0;
                        if (!fine) {
                            uint at = row[c] * pc.groups + ((i * 32) >> pc.group_shift);
                            sc = (glu && c >= per) ? s2[at] : s[at];
                        }
                        [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
                            acc[c][r] += sc * d[c][r];
                        }
                    }
                }
            }
        }
        [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
            if (r < ROWS) {
                float rs = 1.0;
                if (NORM != 0) {
                    rs = inversesqrt(subgroupAdd(ss[r]) / float(pc.k) + pc.eps);
                }
                float sum[COLS];
                [[unroll]] for (uint c = 0; c < COLS; ++c) {
                    sum[c] = subgroupAdd(acc[c][r]) * rs;
                }
                [[unroll]] for (uint c = 0; c < per; ++c) {
                    if (lane == c % size && col0 + c < pc.n) {
                        float v = sum[c];
                        if (glu) {
                            v = v / (1.0 + exp(-v)) * sum[c + per];
                        }
                        if (pc.has_bias != 0) {
                            v += float(bias[r * pc.bias_row + col0 + c]);
                        }
                        y[r * pc.n + col0 + c] = T(v);
                    }
                }
            }
        }
    }
}
