#version 450
#extension GL_GOOGLE_include_directive : require
// im2col for the cooperative-matrix convolutions: the patch matrix of conv2d input images,
// out[img][k][p] with k = (ci * kh + ky) * kw + kx over the input channels and the kernel
// window, p = oy * ow + ox over the output pixels; zero where the window leaves the padded
// input. One thread per output element, grid-stride (consecutive threads write consecutive
// pixels). The GEMM that follows reads it as B = [K][OH * OW] per image.
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer X { WORD x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { WORD y[]; };

layout(push_constant) uniform Params {
    uint total;
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
} pc;

void main() {
    uint ohw = pc.oh * pc.ow;
    uint khw = pc.kh * pc.kw;
    uint k = pc.c_in * khw;
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < pc.total; i += stride) {
        uint p = i % ohw;
        uint rest = i / ohw;
        uint kk = rest % k;
        uint img = rest / k;
        uint ci = kk / khw;
        uint r = kk - ci * khw;
        uint ky = r / pc.kw;
        uint kx = r - ky * pc.kw;
        uint oy = p / pc.ow;
        uint ox = p - oy * pc.ow;
        int iy = int(oy * pc.sh + ky * pc.dh) - int(pc.ph);
        int ix = int(ox * pc.sw + kx * pc.dw) - int(pc.pw);
        WORD v = WORD(0);
        if (uint(iy) < pc.h && uint(ix) < pc.w) {
            v = x[((img * pc.c_in + ci) * pc.h + uint(iy)) * pc.w + uint(ix)];
        }
        y[i] = v;
    }
}
