#version 450
// kernel: Attend
#extension GL_GOOGLE_include_directive : require
// Scaled dot-product attention in one dispatch, the score matrix never in memory (what the
// graph's attention fusion makes of matmul, scale, added biases, softmax and matmul):
//   y[b, i, :] = sum_j softmax_j(scale * q[b, i, :] . k[b, j, :] + bias0[b, i, j]
//                                + bias1[b, i, j]) v[b, j, :]
// for i < sq query rows and j < sk keys of each of the batch's items b. Every operand is read
// (and y written) through strides from the parameter buffer, so views, permutes and slices
// of its sources cost nothing: the batch index b splits into three dims (n0, n1, n2), and an
// operand's element (b, row, col) is at
//   off + i0 * s0 + i1 * s1 + i2 * s2 + row * srow + col * scol
// (q: (query, d); k: (key, d); v: (key, e); biases: (query, key); y: (query, e)).
// One work group per (b, block of BQ queries), looping over blocks of BK keys held in shared
// memory, with the running maximum and sum of each row (an online softmax). LANES threads
// share a query row: each scores BK / LANES keys of a block and sums VAL_D / LANES columns
// of the output, four at a time. A row whose scores are all -inf gives 0 with `guard` (PyTorch's safe
// softmax), NaN without (its plain softmax). fp32 arithmetic in both precisions.
//
// CAUSAL (a prompt's attention over a KV cache, placed by the graph's passes in place of
// attend_cache.comp): query row i sits at position start + i, where start is `plus`, plus the
// device's position (the one int at binding 3, where `has_pos`; no biases then), and sees
// the keys up to it; key blocks past a query block's last position are not loaded.
// variant: f16 -DDTYPE_F16
#extension GL_EXT_control_flow_attributes : require
#include "dtype.glsl"
layout(local_size_x = 128) in;
// The head sizes of q and k (d) and of v (e), multiples of 4 up to 128; the keys of a block
// (at most 32, a multiple of LANES, small enough for the device's shared memory); the biases
// (0 to 2).
layout(constant_id = 0) const uint HEAD_D = 64;
layout(constant_id = 1) const uint VAL_D = 64;
layout(constant_id = 2) const uint BK = 32;
layout(constant_id = 3) const uint BIASES = 0;
layout(constant_id = 4) const uint CAUSAL = 0;

const uint THREADS = 128;
const uint LANES = 4;
const uint BQ = THREADS / LANES;
const uint MAX_VCOLS = 8;
const uint MAX_KEYS = 8;
const uint D4 = HEAD_D / 4;
const uint E4 = VAL_D / 4;
// Rows of q and k in shared memory, padded by a vec4 against bank conflicts.
const uint QK_ROW = D4 + 1;

layout(std430, set = 0, binding = 0) readonly buffer Q { T q[]; };
layout(std430, set = 0, binding = 1) readonly buffer K { T k[]; };
layout(std430, set = 0, binding = 2) readonly buffer V { T v[]; };
layout(std430, set = 0, binding = 3) readonly buffer B0 { T bias0[]; };
// CAUSAL: the position.
layout(std430, set = 0, binding = 3) readonly buffer Pos { int pos[]; };
layout(std430, set = 0, binding = 4) readonly buffer B1 { T bias1[]; };
// Per operand (q, k, v, bias0, bias1, y): off, s0, s1, s2, srow, scol.
layout(std430, set = 0, binding = 5) readonly buffer Layout { uint lay[]; };
layout(std430, set = 0, binding = 6) writeonly buffer Y { T y[]; };

// Rust: `kernels::push::AttendPush`, generated from this block.
layout(push_constant) uniform Params {
    // The batch's items times the query blocks of each.
    uint items;
    uint qblocks;
    uint sq;
    uint sk;
    float scale;
    uint guard;
    // The batch's inner dims (its outer one is the rest).
    uint n1;
    uint n2;
    // CAUSAL: the first query's position, `plus` (+ pos[0] where `has_pos`).
    int plus;
    uint has_pos;
} pc;

shared vec4 qs[BQ * QK_ROW];
shared vec4 ks[BK * QK_ROW];
shared vec4 vs[BK * E4];
shared float ps[BQ * BK];

const uint OP_Q = 0;
const uint OP_K = 1;
const uint OP_V = 2;
const uint OP_B0 = 3;
const uint OP_B1 = 4;
const uint OP_Y = 5;

// Operand op's element (0, 0) of batch item (i0, i1, i2).
uint base(uint op, uvec3 i) {
    uint o = op * 6;
    return lay[o] + i.x * lay[o + 1] + i.y * lay[o + 2] + i.z * lay[o + 3];
}

void main() {
    uint t = gl_LocalInvocationID.x;
    uint r = t / LANES;
    uint lane = t % LANES;
    const float NEG_INF = uintBitsToFloat(0xff800000u);
    const uint KEYS = BK / LANES;
    const uint VCOLS = (E4 + LANES - 1) / LANES;
    uint q_r = lay[OP_Q * 6 + 4], q_c = lay[OP_Q * 6 + 5];
    uint k_r = lay[OP_K * 6 + 4], k_c = lay[OP_K * 6 + 5];
    uint v_r = lay[OP_V * 6 + 4], v_c = lay[OP_V * 6 + 5];
    uint b0_r = lay[OP_B0 * 6 + 4], b0_c = lay[OP_B0 * 6 + 5];
    uint b1_r = lay[OP_B1 * 6 + 4], b1_c = lay[OP_B1 * 6 + 5];
    uint y_r = lay[OP_Y * 6 + 4], y_c = lay[OP_Y * 6 + 5];
    // CAUSAL: the first query's position (rows before position 0 see no key).
    int start = 0;
    if (CAUSAL != 0) {
        start = pc.plus + (pc.has_pos != 0 ? pos[0] : 0);
    }
    for (uint item = gl_WorkGroupID.x; item < pc.items; item += gl_NumWorkGroups.x) {
        uint b = item / pc.qblocks;
        uint row0 = (item % pc.qblocks) * BQ;
        uvec3 bi = uvec3(b / (pc.n1 * pc.n2), (b / pc.n2) % pc.n1, b % pc.n2);
        uint qb = base(OP_Q, bi), kb = base(OP_K, bi), vb = base(OP_V, bi);
        uint b0b = base(OP_B0, bi), b1b = base(OP_B1, bi), yb = base(OP_Y, bi);
        uint row = row0 + r;
        // The previous item's reads of shared memory are done.
        barrier();
        for (uint e = t; e < BQ * D4; e += THREADS) {
            uint i = row0 + e / D4, c = 4 * (e % D4);
            uint at = qb + i * q_r + c * q_c;
            vec4 x = vec4(0.0);
            if (i < pc.sq) {
                x = vec4(float(q[at]), float(q[at + q_c]), float(q[at + 2 * q_c]),
                         float(q[at + 3 * q_c])) * pc.scale;
            }
            qs[(e / D4) * QK_ROW + e % D4] = x;
        }
        float m = NEG_INF;
        float l = 0.0;
        vec4 acc[MAX_VCOLS];
        [[unroll]] for (uint c = 0; c < VCOLS; ++c) {
            acc[c] = vec4(0.0);
        }
        // CAUSAL: the keys up to the block's last query's position.
        uint keys = pc.sk;
        if (CAUSAL != 0) {
            keys = uint(clamp(start + int(min(row0 + BQ, pc.sq)), 0, int(pc.sk)));
        }
        for (uint k0 = 0; k0 < keys; k0 += BK) {
            barrier();
            for (uint e = t; e < BK * D4; e += THREADS) {
                uint j = e / D4, c = 4 * (e % D4);
                uint key = k0 + j;
                uint at = kb + key * k_r + c * k_c;
                vec4 x = vec4(0.0);
                if (key < pc.sk) {
                    x = vec4(float(k[at]), float(k[at + k_c]), float(k[at + 2 * k_c]),
                             float(k[at + 3 * k_c]));
                }
                ks[j * QK_ROW + e % D4] = x;
            }
            for (uint e = t; e < BK * E4; e += THREADS) {
                uint j = e / E4, c = 4 * (e % E4);
                uint key = k0 + j;
                uint at = vb + key * v_r + c * v_c;
                vec4 x = vec4(0.0);
                if (key < pc.sk) {
                    x = vec4(float(v[at]), float(v[at + v_c]), float(v[at + 2 * v_c]),
                             float(v[at + 3 * v_c]));
                }
                vs[e] = x;
            }
            barrier();
            // Each element of the query row is loaded once for the thread's keys.
            vec4 a4[MAX_KEYS];
            [[unroll]] for (uint jj = 0; jj < KEYS; ++jj) {
                a4[jj] = vec4(0.0);
            }
            [[unroll]] for (uint i = 0; i < D4; ++i) {
                vec4 qv = qs[r * QK_ROW + i];
                [[unroll]] for (uint jj = 0; jj < KEYS; ++jj) {
                    a4[jj] += qv * ks[(lane + LANES * jj) * QK_ROW + i];
                }
            }
            float sc[MAX_KEYS];
            [[unroll]] for (uint jj = 0; jj < KEYS; ++jj) {
                uint j = lane + LANES * jj;
                uint key = k0 + j;
                float a = (a4[jj].x + a4[jj].y) + (a4[jj].z + a4[jj].w);
                bool seen = key < pc.sk && (CAUSAL == 0 || int(key) <= start + int(row));
                bool live = seen && row < pc.sq;
                if (BIASES > 0 && live) {
                    a += float(bias0[b0b + row * b0_r + key * b0_c]);
                }
                if (BIASES > 1 && live) {
                    a += float(bias1[b1b + row * b1_r + key * b1_c]);
                }
                sc[jj] = seen ? a : NEG_INF;
                ps[r * BK + j] = sc[jj];
            }
            barrier();
            float top = m;
            for (uint j = 0; j < BK; ++j) {
                top = max(top, ps[r * BK + j]);
            }
            // Every score of the row so far -inf: nothing to weigh yet.
            bool none = top == NEG_INF;
            float corr = none ? 1.0 : exp(m - top);
            barrier();
            float part = 0.0;
            [[unroll]] for (uint jj = 0; jj < KEYS; ++jj) {
                float p = none ? 0.0 : exp(sc[jj] - top);
                ps[r * BK + lane + LANES * jj] = p;
                part += p;
            }
            l = l * corr + part;
            m = top;
            [[unroll]] for (uint c = 0; c < VCOLS; ++c) {
                acc[c] *= corr;
            }
            barrier();
            for (uint j = 0; j < BK; ++j) {
                float p = ps[r * BK + j];
                [[unroll]] for (uint c = 0; c < VCOLS; ++c) {
                    uint c4 = lane + LANES * c;
                    if (c4 < E4) {
                        acc[c] += p * vs[j * E4 + c4];
                    }
                }
            }
        }
        // The row's sum is its lanes' sums.
        barrier();
        ps[t] = l;
        barrier();
        float total = 0.0;
        [[unroll]] for (uint x = 0; x < LANES; ++x) {
            total += ps[r * LANES + x];
        }
        if (row < pc.sq) {
            float inv = total > 0.0 ? 1.0 / total : 0.0;
            bool nan = total == 0.0 && pc.guard == 0;
            [[unroll]] for (uint c = 0; c < VCOLS; ++c) {
                uint c4 = lane + LANES * c;
                if (c4 < E4) {
                    vec4 o = nan ? vec4(uintBitsToFloat(0x7fc00000u)) : acc[c] * inv;
                    uint at = yb + row * y_r + 4 * c4 * y_c;
                    y[at] = T(o.x);
                    y[at + y_c] = T(o.y);
                    y[at + 2 * y_c] = T(o.z);
                    y[at + 3 * y_c] = T(o.w);
                }
            }
        }
    }
}
