#version 450
// kernel: CacheWrite
#extension GL_GOOGLE_include_directive : require
// A KV cache's rows written in place: new [b, s, hd] into cache [b, max, hd] at rows
// start .. start + s, one invocation per new element; rows outside the cache are dropped.
// start = pos[0] + plus where the position is on the device (has_pos), else plus.
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer New { WORD new_[]; };
layout(std430, set = 0, binding = 1) readonly buffer Pos { int pos[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Cache { WORD cache[]; };

// Rust: `kernels::push::CacheWritePush`, generated from this block.
layout(push_constant) uniform Params {
    uint total;
    uint s;
    uint max_rows;
    uint hd;
    int plus;
    uint has_pos;
} pc;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    int start = pc.plus + (pc.has_pos == 1 ? pos[0] : 0);
    for (uint o = gl_GlobalInvocationID.x; o < pc.total; o += stride) {
        uint e = o % pc.hd;
        uint j = (o / pc.hd) % pc.s;
        uint b = o / (pc.hd * pc.s);
        int row = start + int(j);
        if (row >= 0 && row < int(pc.max_rows)) {
            cache[(b * pc.max_rows + uint(row)) * pc.hd + e] = new_[o];
        }
    }
}
