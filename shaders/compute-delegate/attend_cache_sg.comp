#version 450
// kernel: AttendCacheSg
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
// attend_cache.comp with subgroup reductions (see attend_cache.glsl).
// variant: f16 -DDTYPE_F16
#define SUBGROUP 1
#include "attend_cache.glsl"
