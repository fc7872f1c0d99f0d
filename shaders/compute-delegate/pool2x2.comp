#version 450
// kernel: Pool2x2
#extension GL_GOOGLE_include_directive : require
// avg_pool2d / max_pool2d with a 2x2 window, stride 2, no padding, on rows of a multiple of 4
// floats: each thread reads one vec4 from each of two input rows and writes two outputs.
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint MAX = 0;

layout(std430, set = 0, binding = 0) readonly buffer X { T4 x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { T2 y[]; };

layout(push_constant) uniform Params {
    uint total;  // planes * oh * (w / 4)
    uint w4;     // w / 4
    uint oh;
} pc;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < pc.total; i += stride) {
        uint c = i % pc.w4;
        uint row = i / pc.w4;  // plane * oh + oy
        uint top = (row * 2) * pc.w4 + c;
        vec4 a = vec4(x[top]);
        vec4 b = vec4(x[top + pc.w4]);
        vec2 r;
        if (MAX == 1) {
            vec4 m = max(a, b);
            r = vec2(max(m.x, m.y), max(m.z, m.w));
        } else {
            vec4 s = a + b;
            r = vec2(s.x + s.y, s.z + s.w) * 0.25;
        }
        y[i] = T2(r);
    }
}
