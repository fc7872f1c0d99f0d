#version 450
// kernel: GemvQ4
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
// One to four rows times group-wise 4-bit weights, read packed (`linear_q4gsw` of a decode
// step): y[r][j] = sum_k x[r][k] * (q[j][k] - 8) * scales[j][k >> group_shift], with q packed
// two to a byte as ExecuTorch packs it ([n][k / 2], the even column in the low nibble) and the
// scales in f32, transposed at build to [n][groups] so that a column's scales lie together.
// k is a multiple of 32 and the group a power of two of at least 8.
//
// A work group is 64 lanes and 8 columns. Lane x reads the 16-byte words x, x + 64, .. (32
// weights each) of all 8 packed rows, so that each slice of x it loads serves 8 columns; the
// lanes of a column read it contiguously. The lanes' sums then meet in shared memory, one
// output a thread. Work group g of a grid-stride loop over the groups of 8 columns.
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 64) in;

const uint LANES = 64;
const uint COLS = 8;
const uint MAX_ROWS = 4;

layout(std430, set = 0, binding = 0) readonly buffer X4 { T4 x4[]; };
layout(std430, set = 0, binding = 1) readonly buffer W { uvec4 w[]; };
layout(std430, set = 0, binding = 2) readonly buffer S { float s[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Y { T y[]; };

// Rust: `kernels::push::GemvQ4Push`, generated from this block.
layout(push_constant) uniform Params {
    uint rows;
    uint n;
    uint k;
    uint group_shift;
    uint groups;
    uint col_groups;
} pc;

// Each output's (column c, row r at c * MAX_ROWS + r) partial sums, one per lane; rows padded
// by one word so that the summing threads read different banks.
shared float part[COLS * MAX_ROWS][LANES + 1];

// The eight 4-bit values of a word, low nibble first, minus 8.
void nibbles(uint word, out vec4 lo, out vec4 hi) {
    lo = vec4(word & 15u, (word >> 4) & 15u, (word >> 8) & 15u, (word >> 12) & 15u) - 8.0;
    hi = vec4((word >> 16) & 15u, (word >> 20) & 15u, (word >> 24) & 15u, word >> 28) - 8.0;
}

void main() {
    uint lane = gl_LocalInvocationID.x;
    uint words = pc.k / 32;
    // Groups of 32 or more: one scale per word; smaller: one per 8 weights.
    bool fine = pc.group_shift < 5;
    for (uint g = gl_WorkGroupID.x; g < pc.col_groups; g += gl_NumWorkGroups.x) {
        uint col0 = g * COLS;
        float acc[COLS][MAX_ROWS];
        [[unroll]] for (uint c = 0; c < COLS; ++c) {
            [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
                acc[c][r] = 0.0;
            }
        }
        for (uint i = lane; i < words; i += LANES) {
            uvec4 q[COLS];
            [[unroll]] for (uint c = 0; c < COLS; ++c) {
                q[c] = w[min(col0 + c, pc.n - 1) * words + i];
            }
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
                [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
                    if (r < pc.rows) {
                        uint at = (r * pc.k + kk) / 4;
                        xa[r] = vec4(x4[at]);
                        xb[r] = vec4(x4[at + 1]);
                    }
                }
                [[unroll]] for (uint c = 0; c < COLS; ++c) {
                    float sc = 1.0;
                    if (fine) {
                        sc = s[min(col0 + c, pc.n - 1) * pc.groups + (kk >> pc.group_shift)];
                    }
                    vec4 lo, hi;
                    nibbles(q[c][p], lo, hi);
                    [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
                        if (r < pc.rows) {
                            d[c][r] += sc * (dot(lo, xa[r]) + dot(hi, xb[r]));
                        }
                    }
                }
            }
            [[unroll]] for (uint c = 0; c < COLS; ++c) {
                float sc = 1.0;
                if (!fine) {
                    sc = s[min(col0 + c, pc.n - 1) * pc.groups + ((i * 32) >> pc.group_shift)];
                }
                [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
                    acc[c][r] += sc * d[c][r];
                }
            }
        }
        [[unroll]] for (uint c = 0; c < COLS; ++c) {
            [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
                part[c * MAX_ROWS + r][lane] = acc[c][r];
            }
        }
        barrier();
        if (lane < COLS * MAX_ROWS) {
            uint c = lane / MAX_ROWS;
            uint r = lane % MAX_ROWS;
            if (r < pc.rows && col0 + c < pc.n) {
                vec4 sum = vec4(0.0);
                [[unroll]] for (uint l = 0; l < LANES; l += 4) {
                    sum += vec4(part[lane][l], part[lane][l + 1], part[lane][l + 2],
                                part[lane][l + 3]);
                }
                y[r * pc.n + col0 + c] = T(sum.x + sum.y + sum.z + sum.w);
            }
        }
        barrier();
    }
}
