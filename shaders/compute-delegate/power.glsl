#ifndef POWER_GLSL
#define POWER_GLSL
// x^e as PyTorch computes it (binary_op.glsl's pow, unary_math.comp's pow(x, p0)).

// PyTorch's pow: negative bases with whole exponents keep their sign rule; a zero base gives 0
// or infinity (GLSL leaves pow(0, e <= 0) undefined).
float power(float v, float e) {
    if (e == 0.0) return 1.0;
    if (e == 1.0) return v;
    if (e == 2.0) return v * v;
    if (e == 0.5) return sqrt(v);
    if (v == 0.0) return e > 0.0 ? 0.0 : uintBitsToFloat(0x7f800000u);
    if (v >= 0.0) return pow(v, e);
    if (fract(e) != 0.0) return uintBitsToFloat(0x7fc00000u);
    float m = pow(-v, e);
    return mod(e, 2.0) == 1.0 ? -m : m;
}
#endif
