#version 450
// kernel: QAdd
#extension GL_GOOGLE_include_directive : require
// int8 add with TOSA-style rescales, four elements (one packed word) per iteration:
//   a32 = apply_scale_32((a - a_zp) << left_shift, ma, sa)
//   b32 = apply_scale_32((b - b_zp) << left_shift, mb, sb)
//   out = clamp(apply_scale_32(a32 + b32, mo, so) + out_zp, -128, 127)
// apply_scale_32(v, m, s) = (v * m + 2^(s-1)) >> s in 64-bit arithmetic, saturated to i32
// (TOSA RESCALE with scale32 and no double rounding), computed with 32-bit operations.
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer A { uint a[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { uint b[]; };
layout(std430, set = 0, binding = 2) writeonly buffer C { uint c[]; };

layout(push_constant) uniform Params {
    uint words;
    int a_zp;
    int b_zp;
    int out_zp;
    uint left_shift;
    int ma;
    uint sa;
    int mb;
    uint sb;
    int mo;
    uint so;
} pc;

#include "requantize.glsl"

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint q = gl_GlobalInvocationID.x; q < pc.words; q += stride) {
        uint wa = a[q];
        uint wb = b[q];
        uint r = 0;
        for (uint i = 0; i < 4; ++i) {
            int x = apply_scale_32((byte_at(wa, i) - pc.a_zp) << pc.left_shift, pc.ma, pc.sa);
            int y = apply_scale_32((byte_at(wb, i) - pc.b_zp) << pc.left_shift, pc.mb, pc.sb);
            int o = clamp(apply_scale_32(x + y, pc.mo, pc.so) + pc.out_zp, -128, 127);
            r |= (uint(o) & 0xFFu) << (8 * i);
        }
        c[q] = r;
    }
}
