#version 450
// kernel: Unary
#extension GL_GOOGLE_include_directive : require
// Elementwise unary ops on vec4s, grid-stride. Buffers are padded to whole vec4s, so the last
// vec4 may hold up to three padding lanes that are computed and never read back.
// OP: 0 relu, 1 clamp(p0, p1), 2 sigmoid, 3 tanh, 4 gelu (erf), 5 gelu (tanh approximation),
//     6 hardswish, 7 x + p0, 8 x * p0, 9 p0 - x, 10 x / p0, 11 p0 / x, 12 copy,
//     13..18 x == p0, !=, >, >=, <, <= p0 as a 0.0 / 1.0 mask, 19 logical not (x == 0.0),
//     20 silu (x * sigmoid(x)).
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint OP = 0;

layout(std430, set = 0, binding = 0) readonly buffer X { T4 x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { T4 y[]; };

layout(push_constant) uniform Params {
    uint n4;
    float p0;
    float p1;
} pc;

// Abramowitz and Stegun 7.1.26 (max abs error 1.5e-7).
vec4 erf4(vec4 v) {
    vec4 s = sign(v);
    vec4 a = abs(v);
    vec4 t = 1.0 / (1.0 + 0.3275911 * a);
    vec4 poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    return s * (1.0 - poly * exp(-a * a));
}

vec4 apply(vec4 v) {
    if (OP == 0) return max(v, vec4(0.0));
    if (OP == 1) return clamp(v, vec4(pc.p0), vec4(pc.p1));
    if (OP == 2) return 1.0 / (1.0 + exp(-v));
    if (OP == 3) return tanh(clamp(v, -15.0, 15.0));
    if (OP == 4) return 0.5 * v * (1.0 + erf4(v * 0.70710678118654752));
    if (OP == 5) {
        vec4 u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
        return 0.5 * v * (1.0 + tanh(clamp(u, -15.0, 15.0)));
    }
    if (OP == 6) return v * clamp(v + 3.0, 0.0, 6.0) / 6.0;
    if (OP == 7) return v + pc.p0;
    if (OP == 8) return v * pc.p0;
    if (OP == 9) return pc.p0 - v;
    if (OP == 10) return v / pc.p0;
    if (OP == 11) return pc.p0 / v;
    if (OP == 13) return vec4(equal(v, vec4(pc.p0)));
    if (OP == 14) return vec4(notEqual(v, vec4(pc.p0)));
    if (OP == 15) return vec4(greaterThan(v, vec4(pc.p0)));
    if (OP == 16) return vec4(greaterThanEqual(v, vec4(pc.p0)));
    if (OP == 17) return vec4(lessThan(v, vec4(pc.p0)));
    if (OP == 18) return vec4(lessThanEqual(v, vec4(pc.p0)));
    if (OP == 19) return vec4(equal(v, vec4(0.0)));
    if (OP == 20) return v / (1.0 + exp(-v));
    return v;
}

void main() {
    // Two vec4s per thread and iteration, both loads issued before either store, to keep
    // more bytes in flight.
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint i = gl_GlobalInvocationID.x;
    for (; i + stride < pc.n4; i += 2 * stride) {
        vec4 u = vec4(x[i]);
        vec4 v = vec4(x[i + stride]);
        y[i] = T4(apply(u));
        y[i + stride] = T4(apply(v));
    }
    if (i < pc.n4) {
        y[i] = T4(apply(vec4(x[i])));
    }
}
