#version 450
// kernel: Im2col
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// im2col for the cooperative-matrix convolutions: the patch matrix of conv2d input images,
// out[img][k][p] with k = (ci * kh + ky) * kw + kx over the input channels and the kernel
// window, p = oy * ow + ox over the output pixels; zero where the window leaves the padded
// input. The GEMM that follows reads it as B = [K][OH * OW] per image.
//
// Where OH * OW is a multiple of 8, a thread writes 8 consecutive pixels of one row with
// 16-byte stores (the row's indices are decoded once for the 8, and consecutive threads write
// consecutive 8-pixel groups); otherwise one thread per element. Grid-stride either way.
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer X { WORD x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { WORD y[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y4 { uvec4 y4[]; };

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

// The input element of patch row kk (= (ci, ky, kx)) for output pixel (oy, ox), or zero.
WORD patch_value(const uint img, const uint ci, const uint ky, const uint kx, const uint oy,
                 const uint ox) {
    int iy = int(oy * pc.sh + ky * pc.dh) - int(pc.ph);
    int ix = int(ox * pc.sw + kx * pc.dw) - int(pc.pw);
    if (uint(iy) < pc.h && uint(ix) < pc.w) {
        return x[((img * pc.c_in + ci) * pc.h + uint(iy)) * pc.w + uint(ix)];
    }
    return WORD(0);
}

// Eight consecutive pixels of one patch row per thread, stored as 16-byte words.
void by_eight(const uint ohw, const uint khw, const uint k, const uint stride) {
    uint groups = pc.total / 8;
    uint per_row = ohw / 8;
    for (uint g = gl_GlobalInvocationID.x; g < groups; g += stride) {
        uint row = g / per_row;
        uint p = (g - row * per_row) * 8;
        uint kk = row % k;
        uint img = row / k;
        uint ci = kk / khw;
        uint r = kk - ci * khw;
        uint ky = r / pc.kw;
        uint kx = r - ky * pc.kw;
        uint oy = p / pc.ow;
        uint ox = p - oy * pc.ow;
        WORD v[8];
        [[unroll]] for (uint e = 0; e < 8; ++e) {
            v[e] = patch_value(img, ci, ky, kx, oy, ox);
            ox += 1;
            if (ox == pc.ow) {
                ox = 0;
                oy += 1;
            }
        }
#ifdef DTYPE_F16
        // Two halves per 32-bit word, the first in the low bits (little-endian order).
        y4[g] = uvec4(packFloat2x16(f16vec2(v[0], v[1])), packFloat2x16(f16vec2(v[2], v[3])),
                      packFloat2x16(f16vec2(v[4], v[5])), packFloat2x16(f16vec2(v[6], v[7])));
#else
        y4[2 * g] = uvec4(v[0], v[1], v[2], v[3]);
        y4[2 * g + 1] = uvec4(v[4], v[5], v[6], v[7]);
#endif
    }
}

void main() {
    uint ohw = pc.oh * pc.ow;
    uint khw = pc.kh * pc.kw;
    uint k = pc.c_in * khw;
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (ohw % 8 == 0) {
        by_eight(ohw, khw, k, stride);
        return;
    }
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
        y[i] = patch_value(img, ci, ky, kx, oy, ox);
    }
}
