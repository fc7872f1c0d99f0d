#version 450
// kernel: SoftmaxSg
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
// softmax / log_softmax with subgroup reductions (see softmax.glsl).
// variant: f16 -DDTYPE_F16
#define SUBGROUP 1
#include "softmax.glsl"
