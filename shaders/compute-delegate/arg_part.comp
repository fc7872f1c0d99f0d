#version 450
// kernel: ArgPart
// The first pass of the index of the maximum (mode 0) or minimum (mode 1) along the last dim
// of x viewed as [rows, d], for long rows (a language model's logits): item
// row * chunks + c (of `items`, over the work groups in a grid-stride loop) reduces the row's
// chunk c (`chunk` elements) to its best value and index, the pair of words (value bits,
// index) at 2 * (row * chunks + c) of `part`. arg_pairs.comp reduces each row's pairs.
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
#include "arg_part.glsl"
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer X { T x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Part { uint part[]; };

layout(push_constant) uniform Params {
    uint d;
    uint chunk;
    uint chunks;
    uint mode;
    uint items;
} pc;

void main() {
    for (uint item = gl_WorkGroupID.x; item < pc.items; item += gl_NumWorkGroups.x) {
        uint row = item / pc.chunks;
        uint first = (item % pc.chunks) * pc.chunk;
        uint end = min(first + pc.chunk, pc.d);
        float best = arg_empty(pc.mode);
        uint at = 0xFFFFFFFFu;
        uint base = row * pc.d;
        for (uint k = first + gl_LocalInvocationID.x; k < end; k += 256u) {
            float v = float(x[base + k]);
            if (arg_better(v, k, best, at, pc.mode)) {
                best = v;
                at = k;
            }
        }
        arg_reduce_group(best, at, pc.mode);
        if (gl_LocalInvocationID.x == 0u) {
            part[2u * item] = floatBitsToUint(best);
            part[2u * item + 1u] = at;
        }
    }
}
