// What a product or convolution applies to a result before storing it, fused at lowering from
// the nodes that read it: a residual (RESID 1: added; 2: multiplied, a gated product's other
// half), then an activation (ACT, `lower::Activation`'s codes). The including shader declares
// the specialization constants ACT and RESID and a push block `pc` with act_lo and act_hi.
//   ACT: 0 none, 1 clamp to [act_lo, act_hi] (relu, relu6, hardtanh), 2 GELU (erf form),
//        3 GELU (tanh approximation), 4 SiLU, 5 hardswish.
// The formulas are `unary_op.glsl`'s (`activation4`), so a fused activation and an unfused one
// agree.

#include "unary_op.glsl"

// On four results at once: kernels whose stores are unrolled call it once per four.
vec4 activate4(vec4 v) {
    return activation4(ACT, v, pc.act_lo, pc.act_hi);
}

float activate(float v) {
    return activate4(vec4(v)).x;
}

// The result `v` with the residual `r` applied (RESID 0: none).
float combine(float v, float r) {
    if (RESID == 1) return v + r;
    if (RESID == 2) return v * r;
    return v;
}

vec4 combine4(vec4 v, vec4 r) {
    if (RESID == 1) return v + r;
    if (RESID == 2) return v * r;
    return v;
}
