#version 450
// kernel: LayerNormSg
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
// layer_norm with subgroup reductions (see layer_norm.glsl).
// variant: f16 -DDTYPE_F16
#define SUBGROUP 1
#include "layer_norm.glsl"
