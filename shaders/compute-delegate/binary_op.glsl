// The scalar function of the binary kernels (binary.comp, binary_bcast.comp), selected by
// their OP specialization constant: 0 add, 1 sub, 2 mul, 3 div, 4 minimum, 5 maximum, 6 pow,
// 7..12 comparisons as masks, 13 logical and, 14 logical or, 15 floor division, 16 trunc
// division, 17 u * sigmoid(v), 18 u * hardsigmoid(v) (relu6(v + 3) / 6).

#include "power.glsl"

#include "quotient.glsl"

float op2(float u, float v) {
    if (OP == 0) return u + v;
    if (OP == 1) return u - v;
    if (OP == 2) return u * v;
    if (OP == 3) return u / v;
    if (OP == 4) return min(u, v);
    if (OP == 5) return max(u, v);
    if (OP == 6) return power(u, v);
    if (OP == 7) return float(u == v);
    if (OP == 8) return float(u != v);
    if (OP == 9) return float(u > v);
    if (OP == 10) return float(u >= v);
    if (OP == 11) return float(u < v);
    if (OP == 12) return float(u <= v);
    if (OP == 13) return float(u != 0.0 && v != 0.0);
    if (OP == 14) return float(u != 0.0 || v != 0.0);
    if (OP == 17) return u / (1.0 + exp(-v));
    if (OP == 18) return u * (clamp(v + 3.0, 0.0, 6.0) / 6.0);
    return rounded_quotient(u, v, OP == 15);
}
