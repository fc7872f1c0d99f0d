#version 450
// kernel: Unary
#extension GL_GOOGLE_include_directive : require
// Elementwise unary ops on vec4s, grid-stride. Buffers are padded to whole vec4s, so the last
// vec4 may hold up to three padding lanes that are computed and never read back.
// OP: `unary_op.glsl`'s codes.
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint OP = 0;

layout(std430, set = 0, binding = 0) readonly buffer X { T4 x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { T4 y[]; };

layout(push_constant) uniform Params {
    uint n4;
    float p0;
    float p1;
} pc;

#include "unary_op.glsl"

vec4 apply(vec4 v) {
    return unary_op4(OP, v, pc.p0, pc.p1);
}

void main() {
    // Two vec4s per thread and iteration, both loads issued before either store, to keep
    // more bytes in flight.
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint i = gl_GlobalInvocationID.x;
    for (; i + stride < pc.n4; i += 2 * stride) {
        vec4 u = vec4(x[i]);
        vec4 v = vec4(x[i + stride]);
        y[i] = T4(apply(u));
        y[i + stride] = T4(apply(v));
    }
    if (i < pc.n4) {
        y[i] = T4(apply(vec4(x[i])));
    }
}
