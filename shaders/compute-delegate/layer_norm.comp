#version 450
// kernel: LayerNorm
#extension GL_GOOGLE_include_directive : require
// layer_norm with shared-memory reductions (see layer_norm.glsl).
// variant: f16 -DDTYPE_F16
#define SUBGROUP 0
#include "layer_norm.glsl"
