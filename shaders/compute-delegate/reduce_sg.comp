#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
// reduce with subgroup reductions (see reduce.glsl).
#define SUBGROUP 1
#include "reduce.glsl"
