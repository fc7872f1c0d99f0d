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
#include "attend_cache.glsl"
