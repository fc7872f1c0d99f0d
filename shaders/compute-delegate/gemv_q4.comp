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
// A work group is 64 lanes and 8 columns (with GLU, 4 columns of each weight); k goes by
// chunks of 64 words of 32 weights (32 words for two rows, 16 for three or four, so that the
// staged rows take 9 KiB). For each chunk the lanes first load their 16-byte words of the 8
// packed rows (lane x the word x of the chunk), then stage the chunk of x in shared memory,
// read contiguously (times the norm's weights with NORM), so that the slices of x a lane needs
// come from shared memory, each lane's 32 values padded by one vec4 so that the lanes of a
// load hit different banks. The lanes' sums then meet in shared memory (the staging area,
// reused), one output a thread.
// With NORM the sums are scaled by each row's 1 / sqrt(mean square + eps) at the end, from
// the squares summed while staging. Work group g of a grid-stride loop over the groups of
// columns.
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
// Words (of 32 weights) in a chunk of k: one a lane of the first CHUNK_WORDS.
const uint CHUNK_WORDS = ROWS == 1 ? 64 : (ROWS == 2 ? 32 : 16);
// A staged word: its 8 vec4 and one of padding.
const uint STRIDE = 9;

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

// The chunk of x, row r's word i at (r * CHUNK_WORDS + i) * STRIDE; after the last chunk,
// each output's (column c, row r: slot c * ROWS + r) partial sums, one per computing lane,
// slots padded by one float so that the summing threads read different banks.
shared vec4 xs[ROWS * CHUNK_WORDS * STRIDE];
// With NORM, each row's sums of squares, one per lane.
shared float sq[ROWS][LANES + 1];

void put_part(uint slot, uint l, float v) {
    uint at = slot * (CHUNK_WORDS + 1) + l;
    xs[at / 4][at % 4] = v;
}

float get_part(uint slot, uint l) {
    uint at = slot * (CHUNK_WORDS + 1) + l;
    return xs[at / 4][at % 4];
}

// The eight 4-bit values of a word, low nibble first, minus 8.
void nibbles(uint word, out vec4 lo, out vec4 hi) {
    lo = vec4(word & 15u, (word >> 4) & 15u, (word >> 8) & 15u, (word >> 12) & 15u) - 8.0;
    hi = vec4((word >> 16) & 15u, (word >> 20) & 15u, (word >> 24) & 15u, word >> 28) - 8.0;
}

float scale(bool up, uint at) {
    return up ? s2[at] : s[at];
}

// The computing lanes' partial sums of slot `at`.
float lanes_sum(uint at) {
    vec4 sum = vec4(0.0);
    [[unroll]] for (uint l = 0; l < CHUNK_WORDS; l += 4) {
        sum += vec4(get_part(at, l), get_part(at, l + 1), get_part(at, l + 2), get_part(at, l + 3));
    }
    return sum.x + sum.y + sum.z + sum.w;
}

// Row r's squares summed over the 64 lanes.
float squares_sum(uint r) {
    vec4 sum = vec4(0.0);
    [[unroll]] for (uint l = 0; l < LANES; l += 4) {
        sum += vec4(sq[r][l], sq[r][l + 1], sq[r][l + 2], sq[r][l + 3]);
    }
    return sum.x + sum.y + sum.z + sum.w;
}

// Stages the `count` words of x's chunk at word `first` (times the norm's weights with
// NORM), adding the squares of x to `ss`.
void stage(uint lane, uint first, uint count, inout float ss[MAX_ROWS]) {
    [[unroll]] for (uint r = 0; r < ROWS; ++r) {
        for (uint v = lane; v < count * 8; v += LANES) {
            uint at = (r * pc.k) / 4 + first * 8 + v;
            vec4 xv = vec4(x4[at]);
            if (NORM != 0) {
                ss[r] += dot(xv, xv);
                xv *= vec4(nw4[first * 8 + v]);
            }
            xs[(r * CHUNK_WORDS + v / 8) * STRIDE + v % 8] = xv;
        }
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
        float ss[MAX_ROWS];
        [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
            ss[r] = 0.0;
            [[unroll]] for (uint c = 0; c < COLS; ++c) {
                acc[c][r] = 0.0;
            }
        }
        for (uint first = 0; first < words; first += CHUNK_WORDS) {
            uint count = min(CHUNK_WORDS, words - first);
            uint i = first + min(lane, count - 1);
            uvec4 q[COLS];
            [[unroll]] for (uint c = 0; c < COLS; ++c) {
                q[c] = (glu && c >= per) ? w2[row[c] * words + i] : w[row[c] * words + i];
            }
            barrier();
            stage(lane, first, count, ss);
            barrier();
            if (lane >= count) {
                continue;
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
                [[unroll]] for (uint r = 0; r < ROWS; ++r) {
                    uint at = (r * CHUNK_WORDS + lane) * STRIDE + p * 2;
                    xa[r] = xs[at];
                    xb[r] = xs[at + 1];
                }
                [[unroll]] for (uint c = 0; c < COLS; ++c) {
                    float sc = 1.0;
                    if (fine) {
                        sc = scale(glu && c >= per, row[c] * pc.groups + (kk >> pc.group_shift));
                    }
                    vec4 lo, hi;
                    nibbles(q[c][p], lo, hi);
                    [[unroll]] for (uint r = 0; r < ROWS; ++r) {
                        d[c][r] += sc * (dot(lo, xa[r]) + dot(hi, xb[r]));
                    }
                }
            }
            [[unroll]] for (uint c = 0; c < COLS; ++c) {
                float sc = 1.0;
                if (!fine) {
                    sc = scale(glu && c >= per, row[c] * pc.groups + ((i * 32) >> pc.group_shift));
                }
                [[unroll]] for (uint r = 0; r < ROWS; ++r) {
                    acc[c][r] += sc * d[c][r];
                }
            }
        }
        // Each row's 1 / sqrt(mean square + eps) with NORM.
        float rstd[MAX_ROWS];
        [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
            rstd[r] = 1.0;
        }
        if (NORM != 0) {
            [[unroll]] for (uint r = 0; r < ROWS; ++r) {
                sq[r][lane] = ss[r];
            }
        }
        barrier();
        if (NORM != 0) {
            [[unroll]] for (uint r = 0; r < ROWS; ++r) {
                rstd[r] = inversesqrt(squares_sum(r) / float(pc.k) + pc.eps);
            }
        }
        if (lane < CHUNK_WORDS) {
            [[unroll]] for (uint c = 0; c < COLS; ++c) {
                [[unroll]] for (uint r = 0; r < ROWS; ++r) {
                    put_part(c * ROWS + r, lane, acc[c][r]);
                }
            }
        }
        barrier();
        if (lane < per * ROWS) {
            uint c = lane / ROWS;
            uint r = lane % ROWS;
            if (col0 + c < pc.n) {
                float rs = 1.0;
                [[unroll]] for (uint t = 0; t < ROWS; ++t) {
                    rs = t == r ? rstd[t] : rs;
                }
                float v = lanes_sum(lane) * rs;
                if (glu) {
                    float up = lanes_sum((c + per) * ROWS + r) * rs;
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
