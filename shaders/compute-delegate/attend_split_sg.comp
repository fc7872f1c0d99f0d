#version 450
// kernel: AttendSplitSg
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
// attend_split.comp with subgroup reductions (see attend_cache.glsl).
// variant: f16 -DDTYPE_F16
#define SPLIT 1
#define SUBGROUP 1
#include "attend_cache.glsl"
