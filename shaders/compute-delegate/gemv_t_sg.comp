#version 450
// kernel: GemvTSg
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
// gemv_t.comp with subgroup reductions (see gemv_t.glsl).
// variant: f16 -DDTYPE_F16
#define SUBGROUP 1
#include "gemv_t.glsl"
