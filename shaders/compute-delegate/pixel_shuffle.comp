#version 450
// kernel: PixelShuffle
#extension GL_GOOGLE_include_directive : require
// `pixel_shuffle`: x [b, c*r*r, h, w] to y [b, c, h*r, w*r], one invocation per output
// element: y[b, k, i*r + p, j*r + q] = x[b, k*r*r + p*r + q, i, j]. Elements are moved
// without arithmetic (32-bit words, f16 values in the f16 variant).
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer X { WORD x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { WORD y[]; };

// Rust: `kernels::push::PixelShufflePush`, generated from this block.
layout(push_constant) uniform Params {
    uint total;
    uint c;
    uint h;
    uint w;
    uint r;
} pc;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint ow = pc.w * pc.r;
    uint oh = pc.h * pc.r;
    for (uint o = gl_GlobalInvocationID.x; o < pc.total; o += stride) {
        uint col = o % ow;
        uint row = (o / ow) % oh;
        uint plane = o / (ow * oh);
        uint k = plane % pc.c;
        uint b = plane / pc.c;
        uint channel = (k * pc.r + row % pc.r) * pc.r + col % pc.r;
        uint src = ((b * pc.c * pc.r * pc.r + channel) * pc.h + row / pc.r) * pc.w + col / pc.r;
        y[o] = x[src];
    }
}
