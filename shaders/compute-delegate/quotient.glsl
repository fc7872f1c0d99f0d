#ifndef QUOTIENT_GLSL
#define QUOTIENT_GLSL
// Whole quotients (binary_op.glsl's floor and trunc division, unary_math.comp's fmod).

// u / v rounded toward zero (or down, when `down`), exact where the quotient is whole: a GPU's
// division may be a few ulps off (6 / 2 as 2.9999998), so the truncated quotient is corrected
// by its remainder, computed with one rounding by fma.
float rounded_quotient(float u, float v, bool down) {
    float q = u / v;
    if (isinf(q) || isnan(q) || v == 0.0) return down ? floor(q) : trunc(q);
    float t = trunc(q);
    float r = fma(-t, v, u);
    float s = sign(u) * sign(v);
    if (r != 0.0 && sign(r) != sign(u)) {
        t -= s;
    } else if (abs(r) >= abs(v)) {
        t += s;
    }
    if (down && s < 0.0 && fma(-t, v, u) != 0.0) t -= 1.0;
    return t;
}
#endif
