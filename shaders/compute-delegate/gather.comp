#version 450
// kernel: Gather
#extension GL_GOOGLE_include_directive : require
// Row gather (`embedding`): y[i, j] = table[ids[i], j] for a table of `v` rows of `d` 32-bit
// words (f16 values in the f16 variant); an id outside 0..v gives 0.
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer Table { WORD table[]; };
layout(std430, set = 0, binding = 1) readonly buffer I { int ids[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y { WORD y[]; };

layout(push_constant) uniform Params {
    uint n;
    uint d;
    uint v;
} pc;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride) {
        uint row = i / pc.d;
        uint col = i - row * pc.d;
        int id = ids[row];
        bool inside = id >= 0 && uint(id) < pc.v;
        // The row read is always in the table, so that a compiler that loads before it
        // selects stays in the buffer.
        WORD v = table[(inside ? uint(id) : 0u) * pc.d + col];
        y[i] = inside ? v : WORD(0);
    }
}
