#version 450
// kernel: AttendCombine
#extension GL_GOOGLE_include_directive : require
// The shares of attend_split.comp brought together: for query g, whose share c holds the
// maximum score m_c, the sum of exponentials l_c and the unnormalised output o_c,
//   y[g] = sum_c exp(m_c - M) o_c / sum_c exp(m_c - M) l_c,   M = max_c m_c,
// and 0 where no share had a row. One work group per query, a thread per output element
// (d <= 128).
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 128) in;

layout(std430, set = 0, binding = 0) readonly buffer P { float part[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { T y[]; };

// Rust: `kernels::push::AttendCombinePush`, generated from this block.
layout(push_constant) uniform Params {
    uint groups;
    uint chunks;
    uint d;
} pc;

void main() {
    uint t = gl_LocalInvocationID.x;
    uint stride = pc.d + 2;
    for (uint g = gl_WorkGroupID.x; g < pc.groups; g += gl_NumWorkGroups.x) {
        if (t >= pc.d) {
            continue;
        }
        uint base = g * pc.chunks * stride;
        float top = -3.0e38;
        for (uint c = 0; c < pc.chunks; ++c) {
            top = max(top, part[base + c * stride]);
        }
        float sum = 0.0;
        float acc = 0.0;
        for (uint c = 0; c < pc.chunks; ++c) {
            uint at = base + c * stride;
            float l = part[at + 1];
            float w = l > 0.0 ? exp(part[at] - top) : 0.0;
            sum += w * l;
            acc += w * part[at + 2 + t];
        }
        y[g * pc.d + t] = T(sum > 0.0 ? acc / sum : 0.0);
    }
}
