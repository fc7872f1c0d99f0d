#version 450
// kernel: UnaryMath
#extension GL_GOOGLE_include_directive : require
// Elementwise math of one float tensor, one invocation per element, computed in fp32.
// op: 0 abs, 1 neg, 2 exp, 3 log, 4 log10, 5 sqrt, 6 rsqrt, 7 sin, 8 cos, 9 tan,
//     10 round (halves to even), 11 floor, 12 ceil, 13 reciprocal, 14 pow(x, p0),
//     15 leaky_relu (slope p0), 16 hardshrink (lambda p0), 17 hardsigmoid, 18 fmod(x, p0)
//     (the remainder of a division rounded toward zero, the sign of x), 19 erf, 20 log1p
//     (log(u) * x / (u - 1) for u = 1 + x, exact for small x: Kahan's form).
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer X { T x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { T y[]; };

layout(push_constant) uniform Params {
    uint n;
    uint op;
    float p0;
} pc;

#include "power.glsl"
#include "quotient.glsl"

// Abramowitz and Stegun 7.1.26 (max abs error 1.5e-7), as unary.comp's GELU has it.
float erf1(float v) {
    float a = abs(v);
    float t = 1.0 / (1.0 + 0.3275911 * a);
    float poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    return sign(v) * (1.0 - poly * exp(-a * a));
}

float apply(float v) {
    switch (pc.op) {
        case 0u: return abs(v);
        case 1u: return -v;
        case 2u: return exp(v);
        case 3u: return log(v);
        case 4u: return log2(v) * 0.30102999566398120;
        case 5u: return sqrt(v);
        case 6u: return inversesqrt(v);
        case 7u: return sin(v);
        case 8u: return cos(v);
        case 9u: return tan(v);
        case 10u: return roundEven(v);
        case 11u: return floor(v);
        case 12u: return ceil(v);
        case 13u: return 1.0 / v;
        case 14u: return power(v, pc.p0);
        case 15u: return v >= 0.0 ? v : v * pc.p0;
        case 16u: return abs(v) > pc.p0 ? v : 0.0;
        case 17u: return clamp(v + 3.0, 0.0, 6.0) / 6.0;
        case 18u: return fma(-rounded_quotient(v, pc.p0, false), pc.p0, v);
        case 19u: return erf1(v);
        case 20u: {
            float u = 1.0 + v;
            return u == 1.0 ? v : log(u) * (v / (u - 1.0));
        }
    }
    return v;
}

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride) {
        y[i] = T(apply(float(x[i])));
    }
}
