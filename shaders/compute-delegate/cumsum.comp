#version 450
// kernel: Cumsum
#extension GL_GOOGLE_include_directive : require
// Running sums along one dim of x viewed as [outer, d, inner], one invocation per [outer,
// inner] line, summed in fp32.
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer X { T x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { T y[]; };

layout(push_constant) uniform Params {
    uint lines;
    uint d;
    uint inner;
} pc;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint o = gl_GlobalInvocationID.x; o < pc.lines; o += stride) {
        uint base = (o / pc.inner) * pc.d * pc.inner + o % pc.inner;
        ACC acc = ACC(0);
        for (uint k = 0u; k < pc.d; k++) {
            acc += ACC(x[base + k * pc.inner]);
            y[base + k * pc.inner] = T(acc);
        }
    }
}
