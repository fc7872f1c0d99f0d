#version 450
// Sum over the middle dim of a [outer, r, inner] view, times `scale` (1 for sum, 1/r for mean).
// ROWS = 1 (inner == 1): one work group per row with a shared-memory tree; ROWS = 0: one
// thread per (outer, inner) column.
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint ROWS = 1;

layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Params {
    uint outer;
    uint r;
    uint inner;
    float scale;
} pc;

shared float s_acc[256];

void main() {
    if (ROWS == 1) {
        uint t = gl_LocalInvocationID.x;
        for (uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x; row < pc.outer;
             row += gl_NumWorkGroups.x * gl_NumWorkGroups.y) {
            uint base = row * pc.r;
            float acc = 0.0;
            for (uint j = t; j < pc.r; j += 256) {
                acc += x[base + j];
            }
            s_acc[t] = acc;
            barrier();
            for (uint w = 128; w > 0; w >>= 1) {
                if (t < w) {
                    s_acc[t] += s_acc[t + w];
                }
                barrier();
            }
            if (t == 0) {
                y[row] = s_acc[0] * pc.scale;
            }
            barrier();
        }
    } else {
        uint cols = pc.outer * pc.inner;
        uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
        for (uint c = gl_GlobalInvocationID.x; c < cols; c += stride) {
            uint o = c / pc.inner;
            uint i = c - o * pc.inner;
            uint base = o * pc.r * pc.inner + i;
            float acc = 0.0;
            for (uint j = 0; j < pc.r; ++j) {
                acc += x[base + j * pc.inner];
            }
            y[c] = acc * pc.scale;
        }
    }
}
