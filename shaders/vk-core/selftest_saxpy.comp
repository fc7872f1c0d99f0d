#version 450
// Self-test: y[i] = a * x[i] + y[i] for i < n. Used by vk-core's dispatch round-trip.
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) buffer Y { float y[]; };

layout(push_constant) uniform Params {
    float a;
    uint n;
} params;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < params.n) {
        y[i] = params.a * x[i] + y[i];
    }
}
