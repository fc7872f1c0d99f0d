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
float unary_erf(float v) {
    float a = abs(v);
    float t = 1.0 / (1.0 + 0.3275911 * a);
    float poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    return sign(v) * (1.0 - poly * exp(-a * a));
}

float unary_op(const uint op, float v, const float p0, const float p1) {
    if (op == 0) return max(v, 0.0);
    if (op == 1) return clamp(v, p0, p1);
    if (op == 2) return 1.0 / (1.0 + exp(-v));
    if (op == 3) return tanh(clamp(v, -15.0, 15.0));
    if (op == 4) return 0.5 * v * (1.0 + unary_erf(v * 0.70710678118654752));
    if (op == 5) {
        float u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
        return 0.5 * v * (1.0 + tanh(clamp(u, -15.0, 15.0)));
    }
    if (op == 6) return v * clamp(v + 3.0, 0.0, 6.0) / 6.0;
    if (op == 7) return v + p0;
    if (op == 8) return v * p0;
    if (op == 9) return p0 - v;
    if (op == 10) return v / p0;
    if (op == 11) return p0 / v;
    if (op == 13) return float(v == p0);
    if (op == 14) return float(v != p0);
    if (op == 15) return float(v > p0);
    if (op == 16) return float(v >= p0);
    if (op == 17) return float(v < p0);
    if (op == 18) return float(v <= p0);
    if (op == 19) return float(v == 0.0);
    if (op == 20) return v / (1.0 + exp(-v));
    return v;
}
#endif
