#version 450
// kernel: ConvDw
#extension GL_GOOGLE_include_directive : require
// Depthwise conv2d (groups == in channels, out channels == m * in channels), one thread per
// output element, grid-stride. Weight layout [c_out, 1, kh, kw] as PyTorch.
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 256) in;
// Fused activation (`epilogue.glsl`'s codes), applied after the bias and the residual.
layout(constant_id = 0) const uint ACT = 0;
// A residual (binding 4, laid out as y) added to (RESID 1) or multiplying (2) each result,
// fused at lowering (`epilogue.glsl`).
layout(constant_id = 1) const uint RESID = 0;

layout(std430, set = 0, binding = 0) readonly buffer X { T x[]; };
layout(std430, set = 0, binding = 1) readonly buffer W { T wt[]; };
layout(std430, set = 0, binding = 2) readonly buffer B { T bias[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Y { T y[]; };
layout(std430, set = 0, binding = 4) readonly buffer R { T resid[]; };

layout(push_constant) uniform Params {
    uint total;
    uint c_in;
    uint h;
    uint w;
    uint c_out;
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
    uint mult = pc.c_out / pc.c_in;
    for (uint i = gl_GlobalInvocationID.x; i < pc.total; i += stride) {
        uint ox = i % pc.ow;
        uint t = i / pc.ow;
        uint oy = t % pc.oh;
        t /= pc.oh;
        uint co = t % pc.c_out;
        uint n = t / pc.c_out;
        uint ci = co / mult;
        uint xbase = (n * pc.c_in + ci) * pc.h * pc.w;
        uint wbase = co * pc.kh * pc.kw;
        ACC acc = (pc.has_bias == 1) ? float(bias[co]) : 0.0;
        int y0 = int(oy * pc.sh) - int(pc.ph);
        int x0 = int(ox * pc.sw) - int(pc.pw);
        for (uint ky = 0; ky < pc.kh; ++ky) {
            int yy = y0 + int(ky * pc.dh);
            if (yy < 0 || yy >= int(pc.h)) continue;
            for (uint kx = 0; kx < pc.kw; ++kx) {
                int xx = x0 + int(kx * pc.dw);
                if (xx < 0 || xx >= int(pc.w)) continue;
                float xv = float(x[xbase + uint(yy) * pc.w + uint(xx)]);
                acc += xv * float(wt[wbase + ky * pc.kw + kx]);
            }
        }
        if (RESID != 0) acc = combine(acc, float(resid[i]));
        y[i] = T(activate(acc));
    }
}
