#version 450
// kernel: Softmax
#extension GL_GOOGLE_include_directive : require
// softmax / log_softmax with shared-memory reductions (see softmax.glsl).
// variant: f16 -DDTYPE_F16
#define SUBGROUP 0
#include "softmax.glsl"
