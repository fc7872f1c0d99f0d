#version 450
// kernel: ReduceDim
#extension GL_GOOGLE_include_directive : require
// The maximum (mode 0), minimum (mode 1) or product (mode 2, in fp32) along one dim of x
// viewed as [outer, d, inner], one invocation per output element [outer, inner]; NaN wins, as
// in PyTorch.
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer X { T x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { T y[]; };

layout(push_constant) uniform Params {
    uint total;
    uint d;
    uint inner;
    uint mode;
} pc;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint o = gl_GlobalInvocationID.x; o < pc.total; o += stride) {
        uint base = (o / pc.inner) * pc.d * pc.inner + o % pc.inner;
        float best = float(x[base]);
        for (uint k = 1u; k < pc.d; k++) {
            float v = float(x[base + k * pc.inner]);
            if (pc.mode == 2u) {
                best *= v;
                continue;
            }
            bool better = pc.mode == 0u ? v > best : v < best;
            if (isnan(v) || (better && !isnan(best))) {
                best = v;
            }
        }
        y[o] = T(best);
    }
}
