#version 450
// kernel: FmaPeak
#extension GL_EXT_control_flow_attributes : require
// Arithmetic peak probe for benchmarks: every thread runs `iters` rounds of 16 independent
// FMA chains and writes one value (so nothing is optimised away). FLOPs = 2 * 16 * iters per
// thread. The rounds are unrolled four at a time so that loop overhead stays out of the
// figure.
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Params {
    uint iters;
    float a;
    float b;
} pc;

void main() {
    float v[16];
    [[unroll]] for (int j = 0; j < 16; ++j) {
        v[j] = float(gl_GlobalInvocationID.x + uint(j)) * 1e-6;
    }
    float a = pc.a;
    float b = pc.b;
    uint i = 0;
    for (; i + 4 <= pc.iters; i += 4) {
        [[unroll]] for (int u = 0; u < 4; ++u) {
            [[unroll]] for (int j = 0; j < 16; ++j) {
                v[j] = fma(v[j], a, b);
            }
        }
    }
    for (; i < pc.iters; ++i) {
        [[unroll]] for (int j = 0; j < 16; ++j) {
            v[j] = fma(v[j], a, b);
        }
    }
    float s = 0.0;
    [[unroll]] for (int j = 0; j < 16; ++j) {
        s += v[j];
    }
    y[gl_GlobalInvocationID.x] = s;
}
