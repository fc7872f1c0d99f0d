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
// x[r][k] * norm_w[k] / sqrt(mean_k(x[r]^2) + eps), as the norm before a product computes it:
// the sums take x * norm_w, and the norm's factor (from the squares of the x the lanes read
// on the way) scales them at the end, so no pass over x comes before the weights' loads.
//
// CACHE, fused by the graph's passes in place of a KV cache write: with cache_rows, the rows
// of y are stored into a KV cache at a position, keys rotated on the way (cache_store.glsl,
// shared with gemv_t.comp). A pair's two columns are in one work group.
//
// A work group is THREADS lanes (64 unless the lowering asks for more: deep products, whose
// rows 64 lanes would walk in several serial steps) and COLS columns (the lowering's choice,
// 4 or 8; with GLU, half of them of each weight). Lane x reads the 16-byte words x, x + THREADS, .. (32
// weights each) of all its packed rows, so that each slice of x it loads serves every column;
// the lanes of a column read it contiguously (two words of a row in flight a lane ran a deep
// product 20% slower on an H200). The lanes' sums then meet in shared memory, one output a
// thread. Work group g of a
// grid-stride loop over the groups of columns. The values are unpacked in their places
// (q4.glsl). Gated products of over a thousand work groups run gemv_q4_teams.comp, which
// keeps more lanes busy per column.
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
#include "q4.glsl"
// Lanes of a work group (THREADS below): 64, 128 or 256.
layout(local_size_x = 64, local_size_x_id = 4) in;
// Rows of x and y (1 to 4).
layout(constant_id = 0) const uint ROWS = 1;
// 1: the gated product of two weights (GLU above).
layout(constant_id = 1) const uint GLU = 0;
// 1: x RMS-normalised first (NORM above).
layout(constant_id = 2) const uint NORM = 0;
// Columns of a work group (with GLU, half of them gated columns, half their up columns).
layout(constant_id = 3) const uint COLS = 8;

const uint THREADS = gl_WorkGroupSize.x;
const uint MAX_ROWS = 4;

layout(std430, set = 0, binding = 0) readonly buffer X4 { T4 x4[]; };
layout(std430, set = 0, binding = 1) readonly buffer W { uvec4 w[]; };
layout(std430, set = 0, binding = 2) readonly buffer S { float s[]; };
layout(std430, set = 0, binding = 3) readonly buffer W2 { uvec4 w2[]; };
layout(std430, set = 0, binding = 4) readonly buffer S2 { float s2[]; };
layout(std430, set = 0, binding = 5) readonly buffer Bias { T bias[]; };
layout(std430, set = 0, binding = 6) readonly buffer NormW { T4 nw4[]; };
layout(std430, set = 0, binding = 7) readonly buffer Pos { int pos[]; };
layout(std430, set = 0, binding = 8) readonly buffer Cos { T cos_[]; };
layout(std430, set = 0, binding = 9) readonly buffer Sin { T sin_[]; };
layout(std430, set = 0, binding = 10) writeonly buffer Y { T y[]; };

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
    // With cache_rows: y is a KV cache [cache_rows, heads, head_d] (CACHE above).
    uint cache_rows;
    uint heads;
    uint head_d;
    int plus;
    uint has_pos;
    // 0: no rotation; 1: tables of [rows, head_d / 2]; 2: of [rows, heads, head_d / 2].
    uint rope;
} pc;

#include "cache_store.glsl"

// Each output's (column c, row r at c * ROWS + r) partial sums, one per lane, and with NORM
// each row r's sums of squares of x at SQUARES + r; rows padded by one word so that the
// summing threads read different banks.
const uint SQUARES = COLS * ROWS;
shared float part[SQUARES + ROWS][THREADS + 1];

float scale(bool up, uint at) {
    return up ? s2[at] : s[at];
}

// The lanes' partial sums of output slot `at`.
float lanes_sum(uint at) {
    vec4 sum = vec4(0.0);
    for (uint l = 0; l < THREADS; l += 4) {
        sum += vec4(part[at][l], part[at][l + 1], part[at][l + 2], part[at][l + 3]);
    }
    return sum.x + sum.y + sum.z + sum.w;
}

// Stores output (column c of this work group, row r) into the cache (CACHE above,
// cache_store.glsl), rotated with its pair's output where `rope` is set; `rs` the norm's
// factor of row r.
void into_cache(float v, uint c, uint r, float rs, uint col0) {
    uint col = col0 + c;
    float other = pc.rope != 0 ? lanes_sum((c ^ 1u) * ROWS + r) * rs : 0.0;
    uint at;
    if (cache_element(col, r, at)) {
        y[at] = T(cache_value(v, other, col, r));
    }
}

void main() {
    uint lane = gl_LocalInvocationID.x;
    uint words = pc.k / 32;
    // Groups of 32 or more: one scale per word; smaller: one per 8 weights.
    bool fine = pc.group_shift < 5;
    const bool glu = GLU != 0;
    // Output columns a work group computes: 8, or 4 gated ones (slots 4..7 the up weights').
    const uint per = GLU != 0 ? COLS / 2 : COLS;
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
        // With NORM, the sums of squares of the x this lane reads: the lanes read all of it
        // once, and the norm scales the sums at the end.
        float ss[MAX_ROWS];
        [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
            ss[r] = 0.0;
        }
        for (uint i = lane; i < words; i += THREADS) {
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
                vec4 sa = Q4_X_LO;
                vec4 sb = Q4_X_HI;
                if (NORM != 0) {
                    sa *= vec4(nw4[kk / 4]);
                    sb *= vec4(nw4[kk / 4 + 1]);
                }
                vec4 xa[MAX_ROWS];
                vec4 xb[MAX_ROWS];
                [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
                    if (r < ROWS) {
                        uint at = (r * pc.k + kk) / 4;
                        xa[r] = vec4(x4[at]);
                        xb[r] = vec4(x4[at + 1]);
                        if (NORM != 0) {
                            ss[r] += dot(xa[r], xa[r]) + dot(xb[r], xb[r]);
                        }
                        xa[r] *= sa;
                        xb[r] *= sb;
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
            [[unroll]] for (uint r = 0; r < ROWS; ++r) {
                part[c * ROWS + r][lane] = acc[c][r];
            }
        }
        if (NORM != 0) {
            [[unroll]] for (uint r = 0; r < ROWS; ++r) {
                part[SQUARES + r][lane] = ss[r];
            }
        }
        barrier();
        if (lane < per * ROWS) {
            uint c = lane / ROWS;
            uint r = lane % ROWS;
            if (col0 + c < pc.n) {
                float rs = 1.0;
                if (NORM != 0) {
                    rs = inversesqrt(lanes_sum(SQUARES + r) / float(pc.k) + pc.eps);
                }
                float v = lanes_sum(lane) * rs;
                if (glu) {
                    float up = lanes_sum((c + per) * ROWS + r) * rs;
                    v = v / (1.0 + exp(-v)) * up;
                }
                if (pc.has_bias != 0) {
                    v += float(bias[r * pc.bias_row + col0 + c]);
                }
                if (pc.cache_rows == 0) {
                    y[r * pc.n + col0 + c] = T(v);
                } else {
                    into_cache(v, c, r, rs, col0);
                }
            }
        }
        barrier();
    }
}
