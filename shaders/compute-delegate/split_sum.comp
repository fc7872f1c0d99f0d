#version 450
// kernel: SplitSum
#extension GL_GOOGLE_include_directive : require
// The summing pass of a split-K GEMM in one dispatch: out[i] = sum over the splits of the fp32
// partial sums p[s * stride + i], with the fused residual (RESID: binding 2, laid out as the
// output, added or multiplying), through the fused activation (ACT, `epilogue.glsl`'s codes), narrowed to the
// output's type once. Four elements per thread and iteration, grid-stride; the partial
// stride is a multiple of 4 and the output is padded to 16 bytes, so the vec4 tail stays in
// bounds (its extra lanes land in the padding).
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint ACT = 0;
layout(constant_id = 1) const uint RESID = 0;

layout(std430, set = 0, binding = 0) readonly buffer P { vec4 p[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { T4 y[]; };
layout(std430, set = 0, binding = 2) readonly buffer R { T4 resid[]; };

layout(push_constant) uniform Params {
    // Output elements / 4, rounded up.
    uint quads;
    uint splits;
    // Distance between two splits' partial sums, in vec4s.
    uint stride4;
    float act_lo;
    float act_hi;
} pc;

#include "epilogue.glsl"

void main() {
    uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < pc.quads; i += step) {
        vec4 s = vec4(0.0);
        for (uint j = 0; j < pc.splits; ++j) {
            s += p[j * pc.stride4 + i];
        }
        if (RESID != 0) {
            s = combine4(s, vec4(resid[i]));
        }
        y[i] = T4(activate4(s));
    }
}
