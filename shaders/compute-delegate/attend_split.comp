#version 450
// kernel: AttendSplit
#extension GL_GOOGLE_include_directive : require
// attend_cache.comp over shares of the cache rows, for few queries (a decode step), where one
// work group per query would leave most of the GPU idle: work group (query g, share c) takes
// the rows [c * chunk_rows, (c + 1) * chunk_rows) of g's, and writes the maximum score, the
// sum of the exponentials and the unnormalised output of its rows to `part`. It then counts
// itself in `done[g]`; the work group that counts last combines g's shares into y and sets
// the count back to 0, so that one dispatch gives y. `part` and `done` are scratch the
// lowering binds (`done` zeroed at build).
// variant: f16 -DDTYPE_F16
#define SPLIT 1
#include "attend_cache.glsl"
