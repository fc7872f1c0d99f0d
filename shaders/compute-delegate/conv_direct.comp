#version 450
// kernel: ConvDirect
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// conv2d of one group whose sums are short (a network's first layer: 3 input channels by a
// 3 x 3 window, 27 terms), each output a dot product read straight from memory:
//   y[n, m, oy, ox] = bias[m] + sum_{c, ky, kx} w[m, c, ky, kx] x[n, c, iy, ix]
// An invocation computes MT output channels of one pixel, so each x it loads serves MT sums;
// the invocations of a subgroup take neighbouring pixels of the same channels, so their x
// loads are neighbours and their weight loads one address. No tiles, shared memory or
// barriers: the tiled GEMM's patch arithmetic and tile loop cost more than such sums, and on
// an NVIDIA H200 its pipeline took 240-420 ms to compile against this one's 50.
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 256) in;
// Fused activation (`epilogue.glsl`'s codes), applied after the bias and the residual.
layout(constant_id = 0) const uint ACT = 0;
// Output channels an invocation computes (1 to MAX_MT).
layout(constant_id = 1) const uint MT = 4;
const uint MAX_MT = 8;
// A residual (binding 4, laid out as y) added to (RESID 1) or multiplying (2) each result,
// fused at lowering (`epilogue.glsl`).
layout(constant_id = 2) const uint RESID = 0;

layout(std430, set = 0, binding = 0) readonly buffer X { T x[]; };
layout(std430, set = 0, binding = 1) readonly buffer W { T wt[]; };
layout(std430, set = 0, binding = 2) readonly buffer B { T bias[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Y { T y[]; };
layout(std430, set = 0, binding = 4) readonly buffer R { T resid[]; };

// Rust: `kernels::push::ConvDirectPush`, generated from this block.
layout(push_constant) uniform Params {
    // Images times channel groups (of MT) times output pixels.
    uint total;
    uint m;
    uint c_in;
    uint h;
    uint w;
    uint oh;
    uint ow;
    uint kh;
    uint kw;
    uint sh;
    uint sw;
    uint ph;
    uint pw;
    uint dh;
    uint dw;
    uint has_bias;
    float act_lo;
    float act_hi;
} pc;

#include "epilogue.glsl"

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint groups = (pc.m + MT - 1) / MT;
    uint pixels = pc.oh * pc.ow;
    uint window = pc.kh * pc.kw;
    uint k = pc.c_in * window;
    for (uint i = gl_GlobalInvocationID.x; i < pc.total; i += stride) {
        uint px = i % pixels;
        uint t = i / pixels;
        uint m0 = (t % groups) * MT;
        uint n = t / groups;
        int y0 = int((px / pc.ow) * pc.sh) - int(pc.ph);
        int x0 = int((px % pc.ow) * pc.sw) - int(pc.pw);
        ACC acc[MAX_MT];
        [[unroll]] for (uint j = 0; j < MT; ++j) {
            // Channels past the last compute the last one again and are not stored.
            uint mm = min(m0 + j, pc.m - 1);
            acc[j] = pc.has_bias == 1 ? float(bias[mm]) : 0.0;
        }
        for (uint c = 0; c < pc.c_in; ++c) {
            uint xb = (n * pc.c_in + c) * pc.h * pc.w;
            for (uint ky = 0; ky < pc.kh; ++ky) {
                int yy = y0 + int(ky * pc.dh);
                if (yy < 0 || yy >= int(pc.h)) continue;
                for (uint kx = 0; kx < pc.kw; ++kx) {
                    int xx = x0 + int(kx * pc.dw);
                    if (xx < 0 || xx >= int(pc.w)) continue;
                    float xv = float(x[xb + uint(yy) * pc.w + uint(xx)]);
                    uint kk = c * window + ky * pc.kw + kx;
                    [[unroll]] for (uint j = 0; j < MT; ++j) {
                        uint mm = min(m0 + j, pc.m - 1);
                        acc[j] += float(wt[mm * k + kk]) * xv;
                    }
                }
            }
        }
        [[unroll]] for (uint j = 0; j < MT; ++j) {
            if (m0 + j < pc.m) {
                uint at = (n * pc.m + m0 + j) * pixels + px;
                ACC a = acc[j];
                if (RESID != 0) a = combine(a, float(resid[at]));
                y[at] = T(activate(a));
            }
        }
    }
}
