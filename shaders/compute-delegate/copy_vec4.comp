#version 450
// kernel: CopyVec4
// Memory-bandwidth baseline for benchmarks: copies `n4` vec4s, grid-stride, with the access
// pattern of the elementwise kernels (two vec4s per thread and iteration, both loads issued
// before the stores), so it streams what the device can stream with that pattern.
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer X { vec4 x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { vec4 y[]; };

layout(push_constant) uniform Params {
    uint n4;
} pc;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint i = gl_GlobalInvocationID.x;
    for (; i + stride < pc.n4; i += 2 * stride) {
        vec4 v0 = x[i];
        vec4 v1 = x[i + stride];
        y[i] = v0;
        y[i + stride] = v1;
    }
    if (i < pc.n4) {
        y[i] = x[i];
    }
}
