#ifndef MATH_OP_GLSL
#define MATH_OP_GLSL
// The scalar functions of `unary_math.comp`'s ops, shared with `elementwise.comp`'s chains:
// 0 abs, 1 neg, 2 exp, 3 log, 4 log10, 5 sqrt, 6 rsqrt, 7 sin, 8 cos, 9 tan,
// 10 round (halves to even), 11 floor, 12 ceil, 13 reciprocal, 14 pow(x, p0),
// 15 leaky_relu (slope p0), 16 hardshrink (lambda p0), 17 hardsigmoid, 18 fmod(x, p0)
// (the remainder of a division rounded toward zero, the sign of x), 19 erf, 20 log1p
// (log(u) * x / (u - 1) for u = 1 + x, exact for small x: Kahan's form).
// Includes `power.glsl`, `quotient.glsl` and `unary_op.glsl` (its erf).

#include "power.glsl"
#include "quotient.glsl"
#include "unary_op.glsl"


float math_op(const uint op, float v, const float p0) {
    switch (op) {
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
        case 14u: return power(v, p0);
        case 15u: return v >= 0.0 ? v : v * p0;
        case 16u: return abs(v) > p0 ? v : 0.0;
        case 17u: return clamp(v + 3.0, 0.0, 6.0) / 6.0;
        case 18u: return fma(-rounded_quotient(v, p0, false), p0, v);
        case 19u: return unary_erf(v);
        case 20u: {
            float u = 1.0 + v;
            return u == 1.0 ? v : log(u) * (v / (u - 1.0));
        }
    }
    return v;
}
#endif
