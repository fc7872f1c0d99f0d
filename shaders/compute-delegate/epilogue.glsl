// The activation a product or convolution applies to a result before storing it, fused at
// lowering from the node that read it (`lower::Activation`'s codes). The including shader
// declares the specialization constant ACT and a push block `pc` with act_lo and act_hi.
//   ACT: 0 none, 1 clamp to [act_lo, act_hi] (relu, relu6, hardtanh), 2 GELU (erf form),
//        3 GELU (tanh approximation), 4 SiLU, 5 hardswish.
// The formulas are `unary.comp`'s, so a fused activation and an unfused one agree.

// Abramowitz and Stegun 7.1.26 (max abs error 1.5e-7).
float epilogue_erf(float v) {
    float a = abs(v);
    float t = 1.0 / (1.0 + 0.3275911 * a);
    float poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    return sign(v) * (1.0 - poly * exp(-a * a));
}

float activate(float v) {
    if (ACT == 1) return clamp(v, pc.act_lo, pc.act_hi);
    if (ACT == 2) return 0.5 * v * (1.0 + epilogue_erf(v * 0.70710678118654752));
    if (ACT == 3) {
        float u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
        return 0.5 * v * (1.0 + tanh(clamp(u, -15.0, 15.0)));
    }
    if (ACT == 4) return v / (1.0 + exp(-v));
    if (ACT == 5) return v * clamp(v + 3.0, 0.0, 6.0) / 6.0;
    return v;
}

vec4 activate4(vec4 v) {
    return vec4(activate(v.x), activate(v.y), activate(v.z), activate(v.w));
}
