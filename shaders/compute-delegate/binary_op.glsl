#ifndef BINARY_OP_GLSL
#define BINARY_OP_GLSL
// The scalar function of the binary kernels (binary.comp, binary_bcast.comp, and
// elementwise.comp's chains), `binary_op(op, u, v)`. Ops: 0 add, 1 sub, 2 mul, 3 div,
// 4 minimum, 5 maximum, 6 pow, 7..12 comparisons as masks, 13 logical and, 14 logical or, 15 floor division, 16 trunc
// division, 17 u * sigmoid(v), 18 u * hardsigmoid(v) (relu6(v + 3) / 6).

#include "power.glsl"

#include "quotient.glsl"

float binary_op(const uint op, float u, float v) {
    if (op == 0) return u + v;
    if (op == 1) return u - v;
    if (op == 2) return u * v;
    if (op == 3) return u / v;
    if (op == 4) return min(u, v);
    if (op == 5) return max(u, v);
    if (op == 6) return power(u, v);
    if (op == 7) return float(u == v);
    if (op == 8) return float(u != v);
    if (op == 9) return float(u > v);
    if (op == 10) return float(u >= v);
    if (op == 11) return float(u < v);
    if (op == 12) return float(u <= v);
    if (op == 13) return float(u != 0.0 && v != 0.0);
    if (op == 14) return float(u != 0.0 || v != 0.0);
    if (op == 17) return u / (1.0 + exp(-v));
    if (op == 18) return u * (clamp(v + 3.0, 0.0, 6.0) / 6.0);
    return rounded_quotient(u, v, op == 15);
}
#endif
