#version 450
// kernel: AttendCache
#extension GL_GOOGLE_include_directive : require
// Attention of queries over a KV cache in one dispatch, without the score matrix in memory:
// for q [b, s, hq, d] and caches k, v [b, max, hk, d] (each key and value head serving
// hq / hk query heads), query i of head h attends over the cache rows t <= start + i:
//   y[b, i, h] = sum_t softmax_t(q[b, i, h] . k[b, t, h / (hq / hk)] * scale) v[b, t, ..]
// One work group per (b, i, h): its scores stay in shared memory (max <= MAX_ROWS), the
// maximum and the sum are reduced across the group, then each thread sums a vec4 of the
// output over a share of the rows. start = pos[0] + plus where the position is on the
// device (has_pos), else plus. d divides 128. fp32 arithmetic in both precisions.
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 128) in;

const uint THREADS = 128;
const uint MAX_ROWS = 4096;

layout(std430, set = 0, binding = 0) readonly buffer Q { T q[]; };
layout(std430, set = 0, binding = 1) readonly buffer K4 { T4 k4[]; };
layout(std430, set = 0, binding = 2) readonly buffer V4 { T4 v4[]; };
layout(std430, set = 0, binding = 3) readonly buffer Pos { int pos[]; };
layout(std430, set = 0, binding = 4) writeonly buffer Y { T y[]; };

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
} pc;

shared float scores[MAX_ROWS];
shared vec4 qs[THREADS / 4];
shared float red[THREADS];
shared vec4 red4[THREADS];

// The maximum (max_op) or the sum of v over the group.
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

void main() {
    uint t = gl_LocalInvocationID.x;
    int start = pc.plus + (pc.has_pos == 1 ? pos[0] : 0);
    uint d4 = pc.d / 4;
    for (uint g = gl_WorkGroupID.x; g < pc.groups; g += gl_NumWorkGroups.x) {
        uint h = g % pc.hq;
        uint i = (g / pc.hq) % pc.s;
        uint b = g / (pc.hq * pc.s);
        uint kv = h / (pc.hq / pc.hk);
        uint qbase = g * pc.d;
        if (t < d4) {
            qs[t] = vec4(float(q[qbase + 4 * t]), float(q[qbase + 4 * t + 1]),
                         float(q[qbase + 4 * t + 2]), float(q[qbase + 4 * t + 3]));
        }
        barrier();
        int last = min(start + int(i), int(pc.max_rows) - 1);
        uint rows = last < 0 ? 0 : uint(last) + 1;
        float top = -3.0e38;
        for (uint r = t; r < rows; r += THREADS) {
            uint kbase = ((b * pc.max_rows + r) * pc.hk + kv) * d4;
            float acc = 0.0;
            for (uint j = 0; j < d4; ++j) {
                acc += dot(qs[j], vec4(k4[kbase + j]));
            }
            acc *= pc.scale;
            scores[r] = acc;
            top = max(top, acc);
        }
        top = reduce(top, true);
        float sum = 0.0;
        for (uint r = t; r < rows; r += THREADS) {
            float p = exp(scores[r] - top);
            scores[r] = p;
            sum += p;
        }
        sum = reduce(sum, false);
        // Thread t sums the vec4 t % (d / 4) of the output over every share-th row from
        // t / (d / 4), two rows in flight; the shares meet in `red4`.
        uint e4 = t % d4;
        uint share = THREADS / d4;
        vec4 acc = vec4(0.0);
        uint r = t / d4;
        for (; r + share < rows; r += 2 * share) {
            vec4 v0 = vec4(v4[((b * pc.max_rows + r) * pc.hk + kv) * d4 + e4]);
            vec4 v1 = vec4(v4[((b * pc.max_rows + r + share) * pc.hk + kv) * d4 + e4]);
            acc += scores[r] * v0 + scores[r + share] * v1;
        }
        if (r < rows) {
            acc += scores[r] * vec4(v4[((b * pc.max_rows + r) * pc.hk + kv) * d4 + e4]);
        }
        red4[t] = acc;
        barrier();
        if (t < d4) {
            vec4 total = vec4(0.0);
            for (uint k = 0; k < share; ++k) {
                total += red4[t + k * d4];
            }
            total = rows == 0 ? vec4(0.0) : total / sum;
            y[qbase + 4 * t] = T(total.x);
            y[qbase + 4 * t + 1] = T(total.y);
            y[qbase + 4 * t + 2] = T(total.z);
            y[qbase + 4 * t + 3] = T(total.w);
        }
        barrier();
    }
}
