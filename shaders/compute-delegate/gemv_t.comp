#version 450
// kernel: GemvT
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
// GEMM of one to four rows by a matrix stored transposed, as a linear layer's weights are
// ([N][K]): C[z][r][j] = sum_k A[z][r][k] * B[z][j][k] (+ bias[j]), r < ROWS. Such products
// (a language model's decode step) are bound by reading B once. K, A's and B's row and batch
// strides are multiples of 4 (both read as vec4s); C is row-major with any strides.
//
// A work group is 64 lanes by 4 columns: column j = 4 * gl_WorkGroupID.x + y is the dot
// product of B's row j with the rows of A, lane x reading the vec4s x, x + 64, ... of it (the
// 64 lanes of a column read 1 KiB of B contiguously), two in flight; the lanes' sums are then
// added through shared memory.
//
// With GLU, each column is the gated product of two such matrices, B (the gate) and B2 (the
// up): C = silu(A B^T) * (A B2^T), as a language model's MLP computes it (made by the graph's
// fusion pass; no bias).
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 64, local_size_y = 4) in;
// Rows of A and C (1 to 4).
layout(constant_id = 0) const uint ROWS = 1;
// Fused clamp (relu, relu6, hardtanh).
layout(constant_id = 1) const uint ACT = 0;
// 1: the gated product of B and B2.
layout(constant_id = 2) const uint GLU = 0;

const uint LANES = 64;
const uint COLS = 4;
const uint MAX_ROWS = 4;

layout(std430, set = 0, binding = 0) readonly buffer A4 { T4 a4[]; };
layout(std430, set = 0, binding = 1) readonly buffer B4 { T4 b4[]; };
layout(std430, set = 0, binding = 2) readonly buffer Bias { T bias[]; };
layout(std430, set = 0, binding = 3) readonly buffer B24 { T4 b24[]; };
layout(std430, set = 0, binding = 4) writeonly buffer C { T c[]; };

layout(push_constant) uniform Params {
    uint m;
    uint n;
    uint k;
    uint sa_b;
    uint sa_m;
    uint sb_b;
    uint sb_n;
    uint sc_b;
    uint sc_m;
    uint has_bias;
    float act_lo;
    float act_hi;
} pc;

shared float sums[COLS][MAX_ROWS][LANES];
shared float ups[COLS][MAX_ROWS][GLU != 0 ? LANES : 1];

void main() {
    uint lane = gl_LocalInvocationID.x;
    uint y = gl_LocalInvocationID.y;
    uint col = gl_WorkGroupID.x * COLS + y;
    uint z = gl_WorkGroupID.z;
    float acc[MAX_ROWS];
    float up[MAX_ROWS];
    [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
        acc[r] = 0.0;
        up[r] = 0.0;
    }
    if (col < pc.n) {
        uint k4 = pc.k / 4;
        uint b = (z * pc.sb_b + col * pc.sb_n) / 4;
        uint a = z * pc.sa_b / 4;
        uint sa4 = pc.sa_m / 4;
        uint i = lane;
        for (; i + LANES < k4; i += 2 * LANES) {
            vec4 b0 = vec4(b4[b + i]);
            vec4 b1 = vec4(b4[b + i + LANES]);
            vec4 u0 = vec4(0.0);
            vec4 u1 = vec4(0.0);
            if (GLU != 0) {
                u0 = vec4(b24[b + i]);
                u1 = vec4(b24[b + i + LANES]);
            }
            [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
                if (r < ROWS) {
                    vec4 x0 = vec4(a4[a + r * sa4 + i]);
                    vec4 x1 = vec4(a4[a + r * sa4 + i + LANES]);
                    acc[r] += dot(x0, b0) + dot(x1, b1);
                    if (GLU != 0) {
                        up[r] += dot(x0, u0) + dot(x1, u1);
                    }
                }
            }
        }
        if (i < k4) {
            vec4 b0 = vec4(b4[b + i]);
            vec4 u0 = vec4(0.0);
            if (GLU != 0) {
                u0 = vec4(b24[b + i]);
            }
            [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
                if (r < ROWS) {
                    vec4 x0 = vec4(a4[a + r * sa4 + i]);
                    acc[r] += dot(x0, b0);
                    if (GLU != 0) {
                        up[r] += dot(x0, u0);
                    }
                }
            }
        }
    }
    [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
        sums[y][r][lane] = acc[r];
        if (GLU != 0) {
            ups[y][r][lane] = up[r];
        }
    }
    barrier();
    [[unroll]] for (uint s = LANES / 2; s > 0; s >>= 1) {
        if (lane < s) {
            [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
                if (r < ROWS) {
                    sums[y][r][lane] += sums[y][r][lane + s];
                    if (GLU != 0) {
                        ups[y][r][lane] += ups[y][r][lane + s];
                    }
                }
            }
        }
        barrier();
    }
    if (lane != 0 || col >= pc.n) {
        return;
    }
    [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
        if (r < ROWS) {
            float v = sums[y][r][0];
            if (GLU != 0) {
                v = v / (1.0 + exp(-v)) * ups[y][r][0];
            }
            if (pc.has_bias == 1) {
                v += float(bias[col]);
            }
            if (ACT == 1) {
                v = clamp(v, pc.act_lo, pc.act_hi);
            }
            c[z * pc.sc_b + r * pc.sc_m + col] = T(v);
        }
    }
}
