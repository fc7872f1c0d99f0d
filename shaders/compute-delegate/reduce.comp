#version 450
// kernel: Reduce
#extension GL_GOOGLE_include_directive : require
// reduce with shared-memory reductions (see reduce.glsl).
// variant: f16 -DDTYPE_F16
#define SUBGROUP 0
#include "reduce.glsl"
