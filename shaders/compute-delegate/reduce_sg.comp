#version 450
// kernel: ReduceSg
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
// reduce with subgroup reductions (see reduce.glsl).
// variant: f16 -DDTYPE_F16
#define SUBGROUP 1
#include "reduce.glsl"
