#version 450
// Arithmetic peak probe for benchmarks: every thread runs `iters` rounds of 16 independent
// FMA chains and writes one value (so nothing is optimised away). FLOPs = 2 * 16 * iters per
// thread.
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Params {
    uint iters;
    float a;
    float b;
} pc;

void main() {
    float v[16];
    for (int j = 0; j < 16; ++j) {
        v[j] = float(gl_GlobalInvocationID.x + uint(j)) * 1e-6;
    }
    for (uint i = 0; i < pc.iters; ++i) {
        for (int j = 0; j < 16; ++j) {
            v[j] = fma(v[j], pc.a, pc.b);
        }
    }
    float s = 0.0;
    for (int j = 0; j < 16; ++j) {
        s += v[j];
    }
    y[gl_GlobalInvocationID.x] = s;
}
