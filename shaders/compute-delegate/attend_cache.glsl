// The body of attend_cache.comp and, with SPLIT defined, of attend_split.comp: see their
// headers. With SUBGROUP (the _sg kernels), the group's reductions use subgroup operations.
// With ROPE (fused by the graph's passes), each query is first rotated as rope.comp rotates
// it, by cos and sin ([s, d / 2], or with ROPE 2 [s, hq, d / 2]).
#extension GL_EXT_control_flow_attributes : require
#include "dtype.glsl"
layout(local_size_x = 128) in;
// 0: q as given; 1: q rotated by tables of [s, d / 2]; 2: by tables of [s, hq, d / 2].
layout(constant_id = 0) const uint ROPE = 0;
// The head size d (pc.d), known when the pipeline is made so that the loops over a row
// unroll: a row's loads are all in flight at once.
layout(constant_id = 1) const uint HEAD_D = 64;
const uint D4 = HEAD_D / 4;

const uint THREADS = 128;
const uint MAX_ROWS = 4096;
// SPLIT: the rows of a share whose values are loaded early, before the reductions (the
// lowering's whole share of 128 unless told otherwise; rows past them are read after).
layout(constant_id = 2) const uint PRELOAD_ROWS = 64;
// SPLIT: the shares whose partial results the combining work group loads at once.
const uint COMBINE = 16;

layout(std430, set = 0, binding = 0) readonly buffer Q { T q[]; };
layout(std430, set = 0, binding = 1) readonly buffer K4 { T4 k4[]; };
layout(std430, set = 0, binding = 2) readonly buffer V4 { T4 v4[]; };
layout(std430, set = 0, binding = 3) readonly buffer Pos { int pos[]; };
layout(std430, set = 0, binding = 4) readonly buffer Cos { T cos_[]; };
layout(std430, set = 0, binding = 5) readonly buffer Sin { T sin_[]; };
#ifdef SPLIT
// Per (query, share of rows): the maximum score, the sum of exponentials, then the output's
// d sums, unnormalised (scratch the lowering adds).
layout(std430, set = 0, binding = 6) coherent buffer P { float part[]; };
// Per query: its shares done so far; zero between dispatches (scratch the lowering adds,
// zeroed at build; the last share sets it back).
layout(std430, set = 0, binding = 7) coherent buffer Done { uint done[]; };
layout(std430, set = 0, binding = 8) writeonly buffer Y { T y[]; };
#else
layout(std430, set = 0, binding = 6) writeonly buffer Y { T y[]; };
#endif

// Rust: `kernels::push::AttendCachePush`, generated from this block.
layout(push_constant) uniform Params {
    uint groups;
    uint s;
    uint hq;
    uint hk;
    uint d;
    uint max_rows;
    int plus;
    uint has_pos;
    float scale;
    // SPLIT: shares of the rows per query, and the rows of a share (at most MAX_ROWS).
    uint chunks;
    uint chunk_rows;
} pc;

shared float scores[MAX_ROWS];
shared vec4 qs[THREADS / 4];
shared float red[THREADS];
shared vec4 red4[THREADS];
// SPLIT: whether this work group wrote its query's last share.
shared bool last_share;

// The maximum (max_op) or the sum of v over the group: with SUBGROUP, by subgroup
// operations and the subgroups' results in shared memory (two barriers); without, a tree in
// shared memory (one barrier a level).
#ifdef SUBGROUP
float reduce(float v, bool max_op) {
    v = max_op ? subgroupMax(v) : subgroupAdd(v);
    if (subgroupElect()) {
        red[gl_SubgroupID] = v;
    }
    barrier();
    float r = red[0];
    for (uint s = 1; s < gl_NumSubgroups; ++s) {
        r = max_op ? max(r, red[s]) : r + red[s];
    }
    barrier();
    return r;
}
#else
float reduce(float v, bool max_op) {
    uint t = gl_LocalInvocationID.x;
    red[t] = v;
    barrier();
    for (uint w = THREADS / 2; w > 0; w >>= 1) {
        if (t < w) {
            red[t] = max_op ? max(red[t], red[t + w]) : red[t] + red[t + w];
        }
        barrier();
    }
    float r = red[0];
    barrier();
    return r;
}
#endif

void main() {
    uint t = gl_LocalInvocationID.x;
    int start = pc.plus + (pc.has_pos == 1 ? pos[0] : 0);
    const uint d4 = D4;
#ifdef SPLIT
    uint items = pc.groups * pc.chunks;
#else
    uint items = pc.groups;
#endif
    for (uint item = gl_WorkGroupID.x; item < items; item += gl_NumWorkGroups.x) {
#ifdef SPLIT
        uint g = item / pc.chunks;
        uint first = (item % pc.chunks) * pc.chunk_rows;
#else
        uint g = item;
        uint first = 0;
#endif
        uint h = g % pc.hq;
        uint i = (g / pc.hq) % pc.s;
        uint b = g / (pc.hq * pc.s);
        uint kv = h / (pc.hq / pc.hk);
        uint qbase = g * pc.d;
        if (t < d4) {
            vec4 qv = vec4(float(q[qbase + 4 * t]), float(q[qbase + 4 * t + 1]),
                           float(q[qbase + 4 * t + 2]), float(q[qbase + 4 * t + 3]));
            if (ROPE != 0) {
                // Pairs 2t and 2t + 1 of the query's row of the tables.
                uint f = (ROPE == 2 ? i * pc.hq + h : i) * (pc.d / 2) + 2 * t;
                vec2 c = vec2(float(cos_[f]), float(cos_[f + 1]));
                vec2 sn = vec2(float(sin_[f]), float(sin_[f + 1]));
                qv = vec4(qv.x * c.x - qv.y * sn.x, qv.x * sn.x + qv.y * c.x,
                          qv.z * c.y - qv.w * sn.y, qv.z * sn.y + qv.w * c.y);
            }
            qs[t] = qv;
        }
        barrier();
        int last = min(start + int(i), int(pc.max_rows) - 1);
        uint rows = last < 0 ? 0 : uint(last) + 1;
#ifdef SPLIT
        uint end = min(rows, first + pc.chunk_rows);
#else
        uint end = rows;
#endif
        float top = -3.0e38;
        for (uint r = first + t; r < end; r += THREADS) {
            uint kbase = ((b * pc.max_rows + r) * pc.hk + kv) * d4;
            vec4 a = vec4(0.0);
            [[unroll]] for (uint j = 0; j < D4; ++j) {
                a += qs[j] * vec4(k4[kbase + j]);
            }
            float acc = (a.x + a.y + a.z + a.w) * pc.scale;
            scores[r - first] = acc;
            top = max(top, acc);
        }
        // Thread t sums the vec4 t % (d / 4) of the output over every share-th row from
        // t / (d / 4); the shares meet in `red4`.
        uint e4 = t % d4;
        const uint share = THREADS / D4;
#ifdef SPLIT
        // A share's value rows (up to PRE of them a thread) are loaded before the reductions,
        // so that the loads overlap them; rows past those are read after, two in flight.
        const uint PRE = (PRELOAD_ROWS * D4 + THREADS - 1) / THREADS;
        vec4 vpre[PRE];
        [[unroll]] for (uint m = 0; m < PRE; ++m) {
            uint r = first + t / d4 + m * share;
            vpre[m] = r < end ? vec4(v4[((b * pc.max_rows + r) * pc.hk + kv) * d4 + e4])
                              : vec4(0.0);
        }
#endif
        top = reduce(top, true);
        float sum = 0.0;
        for (uint r = first + t; r < end; r += THREADS) {
            float p = exp(scores[r - first] - top);
            scores[r - first] = p;
            sum += p;
        }
        sum = reduce(sum, false);
        vec4 acc = vec4(0.0);
        uint r = first + t / d4;
#ifdef SPLIT
        [[unroll]] for (uint m = 0; m < PRE; ++m) {
            if (r < end) {
                acc += scores[r - first] * vpre[m];
            }
            r += share;
        }
#endif
        for (; r + share < end; r += 2 * share) {
            vec4 v0 = vec4(v4[((b * pc.max_rows + r) * pc.hk + kv) * d4 + e4]);
            vec4 v1 = vec4(v4[((b * pc.max_rows + r + share) * pc.hk + kv) * d4 + e4]);
            acc += scores[r - first] * v0 + scores[r + share - first] * v1;
        }
        if (r < end) {
            acc += scores[r - first] * vec4(v4[((b * pc.max_rows + r) * pc.hk + kv) * d4 + e4]);
        }
        red4[t] = acc;
        barrier();
        if (t < d4) {
            vec4 total = vec4(0.0);
            for (uint k = 0; k < share; ++k) {
                total += red4[t + k * d4];
            }
#ifdef SPLIT
            uint at = item * (pc.d + 2);
            if (t == 0) {
                part[at] = first < end ? top : -3.0e38;
                part[at + 1] = first < end ? sum : 0.0;
            }
            part[at + 2 + 4 * t] = total.x;
            part[at + 3 + 4 * t] = total.y;
            part[at + 4 + 4 * t] = total.z;
            part[at + 5 + 4 * t] = total.w;
            memoryBarrierBuffer();
#else
            total = rows == 0 ? vec4(0.0) : total / sum;
            y[qbase + 4 * t] = T(total.x);
            y[qbase + 4 * t + 1] = T(total.y);
            y[qbase + 4 * t + 2] = T(total.z);
            y[qbase + 4 * t + 3] = T(total.w);
#endif
        }
#ifdef SPLIT
        // The work group that writes a query's last share combines the shares: for share c
        // with maximum m_c, sum l_c and unnormalised output o_c,
        //   y[g] = sum_c exp(m_c - M) o_c / sum_c exp(m_c - M) l_c,   M = max_c m_c,
        // and 0 where no share had a row. Only the shares that hold rows are read, in one
        // pass (the maximum so far rescales the sums), COMBINE shares' loads in flight at
        // once: a 2048-row cache's 16 shares in one round trip.
        barrier();
        if (t == 0) {
            last_share = atomicAdd(done[g], 1u) == pc.chunks - 1;
        }
        barrier();
        if (last_share) {
            memoryBarrierBuffer();
            if (t < pc.d) {
                uint stride = pc.d + 2;
                uint base = g * pc.chunks * stride;
                uint used = min(pc.chunks, (rows + pc.chunk_rows - 1) / pc.chunk_rows);
                float m = -3.0e38;
                float l = 0.0;
                float o = 0.0;
                for (uint c0 = 0; c0 < used; c0 += COMBINE) {
                    float mc[COMBINE];
                    float lc[COMBINE];
                    float oc[COMBINE];
                    [[unroll]] for (uint u = 0; u < COMBINE; ++u) {
                        uint at = base + min(c0 + u, used - 1) * stride;
                        mc[u] = part[at];
                        lc[u] = part[at + 1];
                        oc[u] = part[at + 2 + t];
                    }
                    [[unroll]] for (uint u = 0; u < COMBINE; ++u) {
                        if (c0 + u < used && lc[u] > 0.0) {
                            float top = max(m, mc[u]);
                            float was = exp(m - top);
                            float now = exp(mc[u] - top);
                            l = l * was + lc[u] * now;
                            o = o * was + oc[u] * now;
                            m = top;
                        }
                    }
                }
                y[qbase + t] = T(l > 0.0 ? o / l : 0.0);
            }
            if (t == 0) {
                done[g] = 0u;
            }
        }
#endif
        barrier();
    }
}
