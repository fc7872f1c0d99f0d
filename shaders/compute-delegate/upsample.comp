#version 450
// kernel: Upsample
#extension GL_GOOGLE_include_directive : require
// 2-D resampling of [planes, h, w] to [planes, oh, ow], one invocation per output element,
// as PyTorch's upsample_nearest2d (mode 0: source floor(dst * scale)) and upsample_bilinear2d
// (mode 1; align_corners: dst * (in - 1) / (out - 1), else (dst + 0.5) * scale - 0.5, at
// least 0), computed in fp32. `scale_h` / `scale_w`: input size over output size, or one over
// the given scale factor.
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer X { T x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { T y[]; };

layout(push_constant) uniform Params {
    uint total;
    uint h;
    uint w;
    uint oh;
    uint ow;
    uint mode;
    uint align_corners;
    float scale_h;
    float scale_w;
} pc;

// The source coordinate of output coordinate `d` along a dim of `n` inputs and `m` outputs.
float source(uint d, uint n, uint m, float scale) {
    if (pc.align_corners == 1u) {
        return m > 1u ? float(d) * float(n - 1u) / float(m - 1u) : 0.0;
    }
    return max((float(d) + 0.5) * scale - 0.5, 0.0);
}

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint o = gl_GlobalInvocationID.x; o < pc.total; o += stride) {
        uint j = o % pc.ow;
        uint i = (o / pc.ow) % pc.oh;
        uint base = (o / (pc.ow * pc.oh)) * pc.h * pc.w;
        if (pc.mode == 0u) {
            uint si = min(uint(floor(float(i) * pc.scale_h)), pc.h - 1u);
            uint sj = min(uint(floor(float(j) * pc.scale_w)), pc.w - 1u);
            y[o] = x[base + si * pc.w + sj];
            continue;
        }
        float sy = source(i, pc.h, pc.oh, pc.scale_h);
        float sx = source(j, pc.w, pc.ow, pc.scale_w);
        uint y0 = min(uint(sy), pc.h - 1u);
        uint x0 = min(uint(sx), pc.w - 1u);
        uint y1 = min(y0 + 1u, pc.h - 1u);
        uint x1 = min(x0 + 1u, pc.w - 1u);
        float fy = sy - float(y0);
        float fx = sx - float(x0);
        float top = mix(float(x[base + y0 * pc.w + x0]), float(x[base + y0 * pc.w + x1]), fx);
        float bottom = mix(float(x[base + y1 * pc.w + x0]), float(x[base + y1 * pc.w + x1]), fx);
        y[o] = T(mix(top, bottom, fy));
    }
}
