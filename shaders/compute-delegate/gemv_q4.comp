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
// Epilogues, fused by the graph's passes: with `has_bias`, y[r][j] += bias[r * bias_row + j]
// (a bias with bias_row 0, a residual of y's shape with bias_row n); with GLU, the gated
// product of two such weights, w (the gate) and w2 (the up): y = silu(x w^T) * (x w2^T), as a
// language model's MLP computes it. A prologue too: with NORM, x is first RMS-normalised,
// x[r][k] * norm_w[k] / sqrt(mean_k(x[r]^2) + eps), as the norm before a product computes it.
//
// A work group is 64 lanes and 8 columns (with GLU, 4 columns of each weight). Lane x reads
// the 16-byte words x, x + 64, .. (32 weights each) of all 8 packed rows, so that each slice
// of x it loads serves 8 columns; the lanes of a column read it contiguously. The lanes' sums
// then meet in shared memory, one output a thread. Work group g of a grid-stride loop over
// the groups of columns. This layout suits products of few work groups (n up to a few
// thousand): each lane has all of its weights in flight at once for k up to 2048. Wider
// products run gemv_q4_teams.comp, which keeps more lanes busy per column.
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 64) in;
// Rows of x and y (1 to 4).
layout(constant_id = 0) const uint ROWS = 1;
// 1: the gated product of two weights (GLU above).
layout(constant_id = 1) const uint GLU = 0;
// 1: x RMS-normalised first (NORM above).
layout(constant_id = 2) const uint NORM = 0;

const uint LANES = 64;
const uint COLS = 8;
const uint MAX_ROWS = 4;

layout(std430, set = 0, binding = 0) readonly buffer X4 { T4 x4[]; };
layout(std430, set = 0, binding = 1) readonly buffer W { uvec4 w[]; };
layout(std430, set = 0, binding = 2) readonly buffer S { float s[]; };
layout(std430, set = 0, binding = 3) readonly buffer W2 { uvec4 w2[]; };
layout(std430, set = 0, binding = 4) readonly buffer S2 { float s2[]; };
layout(std430, set = 0, binding = 5) readonly buffer Bias { T bias[]; };
layout(std430, set = 0, binding = 6) readonly buffer NormW { T4 nw4[]; };
layout(std430, set = 0, binding = 7) writeonly buffer Y { T y[]; };

// Rust: `kernels::push::GemvQ4Push`, generated from this block.
layout(push_constant) uniform Params {
    uint n;
    uint k;
    uint group_shift;
    uint groups;
    uint col_groups;
    uint has_bias;
    uint bias_row;
    float eps;
} pc;

// Each output's (column c, row r at c * MAX_ROWS + r) partial sums, one per lane; rows padded
// by one word so that the summing threads read different banks.
shared float part[COLS * MAX_ROWS][LANES + 1];

// The eight 4-bit values q of a word, low nibble first, minus 8: each nibble is set into the
// mantissa of 2^23 (so the float is 2^23 + q exactly) and 2^23 + 8 subtracted, which costs no
// integer-to-float conversion.
void nibbles(uint word, out vec4 lo, out vec4 hi) {
    const uint BASE = 0x4B000000u;
    const float OFFSET = 8388616.0;
    lo = uintBitsToFloat((uvec4(word, word >> 4, word >> 8, word >> 12) & 15u) | BASE) - OFFSET;
    hi = uintBitsToFloat((uvec4(word >> 16, word >> 20, word >> 24, word >> 28) & 15u) | BASE)
        - OFFSET;
}

float scale(bool up, uint at) {
    return up ? s2[at] : s[at];
}

// The 64 lanes' partial sums of output slot `at`.
float lanes_sum(uint at) {
    vec4 sum = vec4(0.0);
    [[unroll]] for (uint l = 0; l < LANES; l += 4) {
        sum += vec4(part[at][l], part[at][l + 1], part[at][l + 2], part[at][l + 3]);
    }
    return sum.x + sum.y + sum.z + sum.w;
}

void main() {
    uint lane = gl_LocalInvocationID.x;
    uint words = pc.k / 32;
    // Groups of 32 or more: one scale per word; smaller: one per 8 weights.
    bool fine = pc.group_shift < 5;
    const bool glu = GLU != 0;
    // Output columns a work group computes: 8, or 4 gated ones (slots 4..7 the up weights').
    const uint per = GLU != 0 ? COLS / 2 : COLS;
    // With NORM, each row's 1 / sqrt(mean square + eps), from the lanes' sums of the slices
    // of x they read.
    float rstd[MAX_ROWS];
    [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
        rstd[r] = 1.0;
    }
    if (NORM != 0) {
        [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
            if (r < ROWS) {
                float ss = 0.0;
                for (uint i = lane; i < words; i += LANES) {
                    [[unroll]] for (uint v = 0; v < 8; ++v) {
                        vec4 xv = vec4(x4[(r * pc.k) / 4 + i * 8 + v]);
                        ss += dot(xv, xv);
                    }
                }
                part[r][lane] = ss;
            }
        }
        barrier();
        [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
            if (r < ROWS) {
                rstd[r] = inversesqrt(lanes_sum(r) / float(pc.k) + pc.eps);
            }
        }
        barrier();
    }
    for (uint g = gl_WorkGroupID.x; g < pc.col_groups; g += gl_NumWorkGroups.x) {
        uint col0 = g * per;
        // The weight row of each slot (clamped into range; such slots' sums are not stored).
        uint row[COLS];
        [[unroll]] for (uint c = 0; c < COLS; ++c) {
            row[c] = min(col0 + (c < per ? c : c - per), pc.n - 1);
        }
        float acc[COLS][MAX_ROWS];
        [[unroll]] for (uint c = 0; c < COLS; ++c) {
            [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
                acc[c][r] = 0.0;
            }
        }
        for (uint i = lane; i < words; i += LANES) {
            uvec4 q[COLS];
            [[unroll]] for (uint c = 0; c < COLS; ++c) {
                q[c] = (glu && c >= per) ? w2[row[c] * words + i] : w[row[c] * words + i];
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
                    if (r < ROWS) {
                        uint at = (r * pc.k + kk) / 4;
                        xa[r] = vec4(x4[at]);
                        xb[r] = vec4(x4[at + 1]);
                        if (NORM != 0) {
                            xa[r] *= rstd[r] * vec4(nw4[kk / 4]);
                            xb[r] *= rstd[r] * vec4(nw4[kk / 4 + 1]);
                        }
                    }
                }
                [[unroll]] for (uint c = 0; c < COLS; ++c) {
                    float sc = 1.0;
                    if (fine) {
                        sc = scale(glu && c >= per, row[c] * pc.groups + (kk >> pc.group_shift));
                    }
                    vec4 lo, hi;
                    nibbles(q[c][p], lo, hi);
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
                    sc = scale(glu && c >= per, row[c] * pc.groups + ((i * 32) >> pc.group_shift));
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
        if (lane < per * MAX_ROWS) {
            uint c = lane / MAX_ROWS;
            uint r = lane % MAX_ROWS;
            if (r < ROWS && col0 + c < pc.n) {
                float v = lanes_sum(lane);
                if (glu) {
                    float up = lanes_sum((c + per) * MAX_ROWS + r);
                    v = v / (1.0 + exp(-v)) * up;
                }
                if (pc.has_bias != 0) {
                    v += float(bias[r * pc.bias_row + col0 + c]);
                }
                y[r * pc.n + col0 + c] = T(v);
            }
        }
        barrier();
    }
}
