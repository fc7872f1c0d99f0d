#version 450
// kernel: ArgPairs
// The second pass of arg_part.comp: each of `rows` rows (over the work groups in a
// grid-stride loop) has its `chunks` pairs of (value bits, index) reduced to the index of the
// maximum (mode 0) or minimum (mode 1), as i32.
#include "arg_part.glsl"
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer Part { uint part[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { int y[]; };

layout(push_constant) uniform Params {
    uint chunks;
    uint mode;
    uint rows;
} pc;

void main() {
    for (uint row = gl_WorkGroupID.x; row < pc.rows; row += gl_NumWorkGroups.x) {
        float best = arg_empty(pc.mode);
        uint at = 0xFFFFFFFFu;
        for (uint c = gl_LocalInvocationID.x; c < pc.chunks; c += 256u) {
            uint p = 2u * (row * pc.chunks + c);
            float v = uintBitsToFloat(part[p]);
            if (arg_better(v, part[p + 1u], best, at, pc.mode)) {
                best = v;
                at = part[p + 1u];
            }
        }
        arg_reduce_group(best, at, pc.mode);
        if (gl_LocalInvocationID.x == 0u) {
            y[row] = int(at);
        }
    }
}
