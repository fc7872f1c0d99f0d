#ifndef UNARY_OP_GLSL
#define UNARY_OP_GLSL
// The scalar functions of `unary.comp`'s ops, shared with the kernels that apply them as part
// of their own work (`epilogue.glsl`'s activations, `elementwise.comp`'s chains):
// 0 relu, 1 clamp(p0, p1), 2 sigmoid, 3 tanh, 4 gelu (erf), 5 gelu (tanh approximation),
// 6 hardswish, 7 x + p0, 8 x * p0, 9 p0 - x, 10 x / p0, 11 p0 / x, 12 copy,
// 13..18 x == p0, !=, >, >=, <, <= p0 as a 0.0 / 1.0 mask, 19 logical not (x == 0.0),
// 20 silu (x * sigmoid(x)).
// Callers pass `op` as a (specialization) constant, so each call compiles to its one case.

// Abramowitz and Stegun 7.1.26 (max abs error 1.5e-7).
vec4 unary_erf4(vec4 v) {
    vec4 a = abs(v);
    vec4 t = 1.0 / (1.0 + 0.3275911 * a);
    vec4 poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    return sign(v) * (1.0 - poly * exp(-a * a));
}

float unary_erf(float v) {
    return unary_erf4(vec4(v)).x;
}

// The activations kernels apply to their results as they store them (`epilogue.glsl`'s ACT
// codes: 1 clamp to [lo, hi], 2 GELU, 3 GELU's tanh approximation, 4 SiLU, 5 hardswish; 0
// none), on four values at once. Small, since kernels inline it once per four results before
// the driver folds `act`.
vec4 activation4(const uint act, vec4 v, const float lo, const float hi) {
    if (act == 1) return clamp(v, vec4(lo), vec4(hi));
    if (act == 2) return 0.5 * v * (1.0 + unary_erf4(v * 0.70710678118654752));
    if (act == 3) {
        vec4 u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
        return 0.5 * v * (1.0 + tanh(clamp(u, -15.0, 15.0)));
    }
    if (act == 4) return v / (1.0 + exp(-v));
    if (act == 5) return v * clamp(v + 3.0, 0.0, 6.0) / 6.0;
    return v;
}

// On four values at once.
vec4 unary_op4(const uint op, vec4 v, const float p0, const float p1) {
    if (op == 0) return max(v, vec4(0.0));
    if (op == 1) return activation4(1, v, p0, p1);
    if (op == 2) return 1.0 / (1.0 + exp(-v));
    if (op == 3) return tanh(clamp(v, -15.0, 15.0));
    if (op == 4) return activation4(2, v, p0, p1);
    if (op == 5) return activation4(3, v, p0, p1);
    if (op == 6) return activation4(5, v, p0, p1);
    if (op == 7) return v + p0;
    if (op == 8) return v * p0;
    if (op == 9) return p0 - v;
    if (op == 10) return v / p0;
    if (op == 11) return p0 / v;
    if (op == 13) return vec4(equal(v, vec4(p0)));
    if (op == 14) return vec4(notEqual(v, vec4(p0)));
    if (op == 15) return vec4(greaterThan(v, vec4(p0)));
    if (op == 16) return vec4(greaterThanEqual(v, vec4(p0)));
    if (op == 17) return vec4(lessThan(v, vec4(p0)));
    if (op == 18) return vec4(lessThanEqual(v, vec4(p0)));
    if (op == 19) return vec4(equal(v, vec4(0.0)));
    if (op == 20) return activation4(4, v, p0, p1);
    return v;
}

float unary_op(const uint op, float v, const float p0, const float p1) {
    return unary_op4(op, vec4(v), p0, p1).x;
}
#endif
