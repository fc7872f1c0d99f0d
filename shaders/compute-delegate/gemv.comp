#version 450
// kernel: Gemv
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
// GEMM for products of one to four rows (a vector, or a few, times a matrix), which are bound
// by reading B once: C[z][r][j] = sum_k A[z][r][k] * B[z][k][j] (+ bias[j]), r < ROWS.
// B is row-major [K][N] with N, its row stride and its batch stride multiples of 4, read as
// vec4 rows; A and C are row-major with any row stride (C's a multiple of 4).
//
// A work group is 64 column lanes by 4 K slices: lane x owns the vec4 of columns
// 4 * (64 * gl_WorkGroupID.x + x), slice y the rows k = k_begin + y + 4 * i of its split, so
// the 64 lanes of a row read 1 KiB contiguously and each lane keeps four rows in flight. The
// slices are summed through shared memory. gl_WorkGroupID.y is the split of K
// ([y * k_split, (y + 1) * k_split)); with PARTIAL each split writes fp32 partial sums c_split
// elements further on (a later pass sums them, clamps and narrows) and split 0 adds the bias.
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 64, local_size_y = 4) in;
// Rows of A and C (1 to 4).
layout(constant_id = 0) const uint ROWS = 1;
// Fused activation (`epilogue.glsl`'s codes) when the result is final.
layout(constant_id = 1) const uint ACT = 0;
// Write fp32 partial sums (split-K) instead of C.
layout(constant_id = 2) const uint PARTIAL = 0;

const uint LANES = 64;
const uint SLICES = 4;
const uint MAX_ROWS = 4;

layout(std430, set = 0, binding = 0) readonly buffer A { T a[]; };
layout(std430, set = 0, binding = 1) readonly buffer B4 { T4 b4[]; };
layout(std430, set = 0, binding = 2) readonly buffer Bias { T bias[]; };
layout(std430, set = 0, binding = 3) writeonly buffer C4 { T4 c4[]; };
layout(std430, set = 0, binding = 3) writeonly buffer P4 { vec4 p4[]; };

layout(push_constant) uniform Params {
    uint m;
    uint n;
    uint k;
    uint sa_b;
    uint sa_m;
    uint sb_b;
    uint sb_k;
    uint sc_b;
    uint sc_m;
    uint has_bias;
    uint k_split;
    uint c_split;
    float act_lo;
    float act_hi;
} pc;

// Its epilogue applies activations only: no residual is bound.
const uint RESID = 0;
#include "epilogue.glsl"

shared vec4 partial_rows[SLICES - 1][MAX_ROWS][LANES];

vec4 acc[MAX_ROWS];

// Adds A[row][kk] * B[kk][col..col + 3] for the rows, four K rows at a time.
void accumulate(const uint a_base, const uint b_base, const uint sb4, inout uint kk,
                const uint k_end) {
    for (; kk + 3 * SLICES < k_end; kk += 4 * SLICES) {
        vec4 bv[4];
        [[unroll]] for (uint u = 0; u < 4; ++u) {
            bv[u] = vec4(b4[b_base + (kk + u * SLICES) * sb4]);
        }
        [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
            if (r < ROWS) {
                [[unroll]] for (uint u = 0; u < 4; ++u) {
                    acc[r] += float(a[a_base + r * pc.sa_m + kk + u * SLICES]) * bv[u];
                }
            }
        }
    }
    for (; kk < k_end; kk += SLICES) {
        vec4 bv = vec4(b4[b_base + kk * sb4]);
        [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
            if (r < ROWS) {
                acc[r] += float(a[a_base + r * pc.sa_m + kk]) * bv;
            }
        }
    }
}

// The final value of one row's four columns: bias, then the activation.
vec4 epilogue(vec4 v, const uint col, const bool add_bias) {
    if (add_bias) {
        v += vec4(float(bias[col]), float(bias[col + 1]), float(bias[col + 2]),
                  float(bias[col + 3]));
    }
    return PARTIAL == 0 ? activate4(v) : v;
}

void main() {
    uint lane = gl_LocalInvocationID.x;
    uint slice = gl_LocalInvocationID.y;
    uint col = (gl_WorkGroupID.x * LANES + lane) * 4;
    uint split = gl_WorkGroupID.y;
    uint z = gl_WorkGroupID.z;
    bool inside = col < pc.n;
    [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
        acc[r] = vec4(0.0);
    }
    if (inside) {
        uint k_begin = split * pc.k_split;
        uint k_end = min(pc.k, k_begin + pc.k_split);
        uint kk = k_begin + slice;
        accumulate(z * pc.sa_b, (z * pc.sb_b + col) / 4, pc.sb_k / 4, kk, k_end);
    }
    if (slice > 0) {
        [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
            partial_rows[slice - 1][r][lane] = acc[r];
        }
    }
    barrier();
    if (slice > 0 || !inside) {
        return;
    }
    bool add_bias = pc.has_bias == 1 && split == 0;
    [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
        if (r < ROWS) {
            vec4 v = acc[r];
            [[unroll]] for (uint s = 0; s < SLICES - 1; ++s) {
                v += partial_rows[s][r][lane];
            }
            v = epilogue(v, col, add_bias);
            uint i = z * pc.sc_b + r * pc.sc_m + col;
            if (PARTIAL == 1) {
                p4[(split * pc.c_split + i) / 4] = v;
            } else {
                c4[i / 4] = T4(v);
            }
        }
    }
}
