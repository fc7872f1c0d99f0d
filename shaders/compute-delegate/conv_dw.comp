#version 450
// kernel: ConvDw
// kernel: ConvDwRow variant=row
// kernel: ConvDirect variant=direct
#extension GL_GOOGLE_include_directive : require
// conv2d read window by window straight from memory, no tiles, shared memory or barriers.
// Depthwise conv2d (groups == in channels, out channels == m * in channels), one thread per
// output element, grid-stride. Weight layout [c_out, c_in / groups, kh, kw] as PyTorch.
// variant: f16 -DDTYPE_F16
// The row variant (DW_ROW) is for windows of up to 7 x 7 without dilation, horizontal stride
// 1 or 2: a thread computes R neighbouring outputs of a row, loading each row of their
// windows once into registers ((R - 1) * SW + KW values, instead of R * KW), with the window
// and stride baked in as specialization constants so that every loop unrolls.
// variant: row -DDW_ROW
// variant: row_f16 -DDW_ROW -DDTYPE_F16
// The direct variant (DIRECT) is for convolutions of one group whose sums are short (a
// network's first layer: 3 input channels by a 3 x 3 window, 27 terms): an invocation
// computes MT output channels of one pixel, so each x it loads serves MT sums; the
// invocations of a subgroup take neighbouring pixels of the same channels, so their x loads
// are neighbours and their weight loads one address. The tiled GEMM's patch arithmetic and
// tile loop cost more than such sums, and on an NVIDIA H200 its pipeline took 240-420 ms to
// compile against this one's 50. `pc.total` counts invocations.
// variant: direct -DDIRECT
// variant: direct_f16 -DDIRECT -DDTYPE_F16
#extension GL_EXT_control_flow_attributes : require
#include "dtype.glsl"
layout(local_size_x = 256) in;
// Fused activation (`epilogue.glsl`'s codes), applied after the bias and the residual.
layout(constant_id = 0) const uint ACT = 0;
// A residual (binding 4, laid out as y) added to (RESID 1) or multiplying (2) each result,
// fused at lowering (`epilogue.glsl`).
layout(constant_id = 1) const uint RESID = 0;
// The plain and row variants: 1 writes the result channels last, [n, oh, ow, c_out] (and
// reads the residual so), in place of a permute that moved the channels last.
layout(constant_id = 6) const uint OUT_LAST = 0;

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

#ifdef DIRECT
// Output channels an invocation computes (1 to MAX_MT).
layout(constant_id = 2) const uint MT = 4;
const uint MAX_MT = 8;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint groups = (pc.c_out + MT - 1) / MT;
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
            uint mm = min(m0 + j, pc.c_out - 1);
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
                        uint mm = min(m0 + j, pc.c_out - 1);
                        acc[j] += float(wt[mm * k + kk]) * xv;
                    }
                }
            }
        }
        [[unroll]] for (uint j = 0; j < MT; ++j) {
            if (m0 + j < pc.c_out) {
                uint at = (n * pc.c_out + m0 + j) * pixels + px;
                ACC a = acc[j];
                if (RESID != 0) a = combine(a, float(resid[at]));
                y[at] = T(activate(a));
            }
        }
    }
}
#elif defined(DW_ROW)
// The window's height and width (1 to MAX_WIN), the horizontal stride (1 or 2) and the
// outputs a thread computes (1 to MAX_R); `pc.total` counts threads.
layout(constant_id = 2) const uint KH = 3;
layout(constant_id = 3) const uint KW = 3;
layout(constant_id = 4) const uint SW = 1;
layout(constant_id = 5) const uint ROW = 4;
const uint MAX_WIN = 7;
const uint MAX_R = 4;
const uint MAX_SPAN = (MAX_R - 1) * 2 + MAX_WIN;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint mult = pc.c_out / pc.c_in;
    uint row_threads = (pc.ow + ROW - 1) / ROW;
    uint span = (ROW - 1) * SW + KW;
    for (uint i = gl_GlobalInvocationID.x; i < pc.total; i += stride) {
        uint ox0 = (i % row_threads) * ROW;
        uint t = i / row_threads;
        uint oy = t % pc.oh;
        t /= pc.oh;
        uint co = t % pc.c_out;
        uint n = t / pc.c_out;
        uint ci = co / mult;
        uint xbase = (n * pc.c_in + ci) * pc.h * pc.w;
        uint wbase = co * KH * KW;
        ACC b = (pc.has_bias == 1) ? float(bias[co]) : 0.0;
        ACC acc[MAX_R];
        [[unroll]] for (uint r = 0; r < MAX_R; ++r) {
            acc[r] = b;
        }
        int y0 = int(oy * pc.sh) - int(pc.ph);
        int x0 = int(ox0 * SW) - int(pc.pw);
        [[unroll]] for (uint ky = 0; ky < MAX_WIN; ++ky) {
            int yy = y0 + int(ky);
            if (ky < KH && yy >= 0 && yy < int(pc.h)) {
                uint rowbase = xbase + uint(yy) * pc.w;
                float v[MAX_SPAN];
                [[unroll]] for (uint s = 0; s < MAX_SPAN; ++s) {
                    int xx = x0 + int(s);
                    v[s] = 0.0;
                    if (s < span && xx >= 0 && xx < int(pc.w)) {
                        v[s] = float(x[rowbase + uint(xx)]);
                    }
                }
                [[unroll]] for (uint kx = 0; kx < MAX_WIN; ++kx) {
                    if (kx < KW) {
                        float wv = float(wt[wbase + ky * KW + kx]);
                        [[unroll]] for (uint r = 0; r < MAX_R; ++r) {
                            if (r < ROW) acc[r] += wv * v[r * SW + kx];
                        }
                    }
                }
            }
        }
        uint obase = ((n * pc.c_out + co) * pc.oh + oy) * pc.ow;
        uint lbase = (n * pc.oh + oy) * pc.ow;
        [[unroll]] for (uint r = 0; r < MAX_R; ++r) {
            if (r < ROW && ox0 + r < pc.ow) {
                uint at = OUT_LAST == 1 ? (lbase + ox0 + r) * pc.c_out + co : obase + ox0 + r;
                ACC a = acc[r];
                if (RESID != 0) a = combine(a, float(resid[at]));
                y[at] = T(activate(a));
            }
        }
    }
}
#else
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
        uint at = OUT_LAST == 1 ? ((n * pc.oh + oy) * pc.ow + ox) * pc.c_out + co : i;
        if (RESID != 0) acc = combine(acc, float(resid[at]));
        y[at] = T(activate(acc));
    }
}
#endif
