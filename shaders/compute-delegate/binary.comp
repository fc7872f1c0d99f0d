#version 450
// kernel: Binary
#extension GL_GOOGLE_include_directive : require
// Elementwise binary ops on two tensors of the same shape, on vec4s, grid-stride.
// OP: 0 add, 1 sub, 2 mul, 3 div, 4 minimum, 5 maximum, 6 pow, 7..12 ==, !=, >, >=, <, <= as
// a 0.0 / 1.0 mask, 13 logical and, 14 logical or (nonzero is true), 15 div rounded down,
// 16 div rounded toward zero, 17 a * sigmoid(b). With ACT, the result is clamped to [act_lo, act_hi] (a relu,
// relu6 or clamp after the op, fused at lowering: a residual add and its activation).
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint OP = 0;
layout(constant_id = 1) const uint ACT = 0;

layout(std430, set = 0, binding = 0) readonly buffer A { T4 a[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { T4 b[]; };
layout(std430, set = 0, binding = 2) writeonly buffer C { T4 c[]; };

layout(push_constant) uniform Params {
    uint n4;
    float act_lo;
    float act_hi;
} pc;

#include "binary_op.glsl"

float op2(float u, float v) {
    return binary_op(OP, u, v);
}

vec4 op4(vec4 u, vec4 v) {
    if (OP == 0) return u + v;
    if (OP == 1) return u - v;
    if (OP == 2) return u * v;
    if (OP == 3) return u / v;
    return vec4(op2(u.x, v.x), op2(u.y, v.y), op2(u.z, v.z), op2(u.w, v.w));
}

vec4 apply(vec4 u, vec4 v) {
    vec4 r = op4(u, v);
    return ACT != 0 ? clamp(r, pc.act_lo, pc.act_hi) : r;
}

void main() {
    // Two vec4s per thread and iteration, all loads issued before the stores, to keep more
    // bytes in flight.
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint i = gl_GlobalInvocationID.x;
    for (; i + stride < pc.n4; i += 2 * stride) {
        vec4 a0 = vec4(a[i]);
        vec4 b0 = vec4(b[i]);
        vec4 a1 = vec4(a[i + stride]);
        vec4 b1 = vec4(b[i + stride]);
        c[i] = T4(apply(a0, b0));
        c[i + stride] = T4(apply(a1, b1));
    }
    if (i < pc.n4) {
        c[i] = T4(apply(vec4(a[i]), vec4(b[i])));
    }
}
