#version 450
// kernel: UnaryMath
#extension GL_GOOGLE_include_directive : require
// Elementwise math of one float tensor, one invocation per element, computed in fp32.
// op: `math_op.glsl`'s codes.
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer X { T x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { T y[]; };

layout(push_constant) uniform Params {
    uint n;
    uint op;
    float p0;
} pc;

#include "math_op.glsl"

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride) {
        y[i] = T(math_op(pc.op, float(x[i]), pc.p0));
    }
}
