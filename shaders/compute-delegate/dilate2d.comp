#version 450
// kernel: Dilate2d
#extension GL_GOOGLE_include_directive : require
// The input of a transposed convolution as a plain one's: x [planes, h, w] spread to
// [planes, oh, ow] with `stride - 1` zeros between elements and shifted by (`top`, `left`)
// (negative: cut), one invocation per output element; elsewhere 0. Elements are moved
// without arithmetic.
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer X { WORD x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { WORD y[]; };

layout(push_constant) uniform Params {
    uint total;
    uint h;
    uint w;
    uint oh;
    uint ow;
    uint sh;
    uint sw;
    int top;
    int left;
} pc;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint o = gl_GlobalInvocationID.x; o < pc.total; o += stride) {
        int j = int(o % pc.ow) - pc.left;
        int i = int((o / pc.ow) % pc.oh) - pc.top;
        uint plane = o / (pc.ow * pc.oh);
        bool hit = i >= 0 && j >= 0 && i % int(pc.sh) == 0 && j % int(pc.sw) == 0;
        uint si = uint(max(i, 0)) / pc.sh;
        uint sj = uint(max(j, 0)) / pc.sw;
        hit = hit && si < pc.h && sj < pc.w;
        // Clamped, so that a compiler that loads before it selects stays in the buffer.
        uint at = (plane * pc.h + min(si, pc.h - 1u)) * pc.w + min(sj, pc.w - 1u);
        WORD v = x[at];
        y[o] = hit ? v : WORD(0);
    }
}
