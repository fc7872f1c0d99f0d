#version 450
// kernel: GemvTSg
// kernel: GemvTSg8 variant=rows8
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
// gemv_t.comp with subgroup reductions (see gemv_t.glsl).
// variant: f16 -DDTYPE_F16
// The rows8 variants: products of five to eight rows (ROWS8: room for eight rows' sums).
// variant: rows8 -DROWS8
// variant: rows8_f16 -DROWS8 -DDTYPE_F16
#define SUBGROUP 1
#include "gemv_t.glsl"
