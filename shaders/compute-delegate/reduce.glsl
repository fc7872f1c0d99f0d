// Sum over the middle dim of a [outer, r, inner] view, times `scale` (1 for sum, 1/r for mean).
// ROWS = 1 (inner == 1): one work group per row (block_sum.glsl); ROWS = 0: one thread per
// (outer, inner) column. Included by reduce.comp and reduce_sg.comp, which define SUBGROUP.
#include "dtype.glsl"
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint ROWS = 1;

layout(std430, set = 0, binding = 0) readonly buffer X { T x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { T y[]; };

layout(push_constant) uniform Params {
    uint outer;
    uint r;
    uint inner;
    float scale;
} pc;

#include "block_sum.glsl"

void main() {
    if (ROWS == 1) {
        uint t = gl_LocalInvocationID.x;
        for (uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x; row < pc.outer;
             row += gl_NumWorkGroups.x * gl_NumWorkGroups.y) {
            uint base = row * pc.r;
            ACC acc = 0.0;
            for (uint j = t; j < pc.r; j += 256) {
                acc += float(x[base + j]);
            }
            float total = block_sum(acc);
            if (t == 0) {
                y[row] = T(total * pc.scale);
            }
        }
    } else {
        uint cols = pc.outer * pc.inner;
        uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
        for (uint c = gl_GlobalInvocationID.x; c < cols; c += stride) {
            uint o = c / pc.inner;
            uint i = c - o * pc.inner;
            uint base = o * pc.r * pc.inner + i;
            ACC acc = 0.0;
            for (uint j = 0; j < pc.r; ++j) {
                acc += float(x[base + j * pc.inner]);
            }
            y[c] = T(acc * pc.scale);
        }
    }
}
