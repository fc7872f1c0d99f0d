#version 450
// kernel: QPool
#extension GL_GOOGLE_include_directive : require
// Integer average pooling, NCHW, as TOSA's AVG_POOL2D computes it: acc = sum (x - in_zp) over
// the window's positions inside the input (padding neither adds nor counts), then
// out = clamp(apply_scale_32(acc, m, s) + out_zp, lo, hi) with (m, s) TOSA's
// reciprocal_scale of the count, looked up in `scale` (multiplier at 2 * count, shift after
// it). int8 values packed, one thread per output word (four outputs); with WIDE, int8 or
// int16 values held in int32 words, one thread per output.
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint WIDE = 0;

layout(std430, set = 0, binding = 0) readonly buffer X { uint x[]; };
layout(std430, set = 0, binding = 0) readonly buffer XI { int xi[]; };
layout(std430, set = 0, binding = 1) readonly buffer Scale { int scale[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y { uint y[]; };
layout(std430, set = 0, binding = 2) writeonly buffer YI { int yi[]; };

layout(push_constant) uniform Params {
    uint total;
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
    int in_zp;
    int out_zp;
    // The output type's range.
    int lo;
    int hi;
} pc;

#include "requantize.glsl"

// Output i's average, rescaled and clamped.
int pooled(uint i) {
    uint ox = i % pc.ow;
    uint t = i / pc.ow;
    uint oy = t % pc.oh;
    uint plane = (t / pc.oh) * pc.h * pc.w;
    int y0 = int(oy * pc.sh) - int(pc.ph);
    int x0 = int(ox * pc.sw) - int(pc.pw);
    int acc = 0;
    uint count = 0;
    for (uint ky = 0; ky < pc.kh; ++ky) {
        int yy = y0 + int(ky);
        if (yy < 0 || yy >= int(pc.h)) continue;
        for (uint kx = 0; kx < pc.kw; ++kx) {
            int xx = x0 + int(kx);
            if (xx < 0 || xx >= int(pc.w)) continue;
            uint at = plane + uint(yy) * pc.w + uint(xx);
            int v = WIDE != 0 ? xi[at] : byte_at(x[at >> 2], at & 3u);
            acc += v - pc.in_zp;
            count += 1;
        }
    }
    int o = pc.out_zp;
    if (count > 0) {
        o += apply_scale_32(acc, scale[2 * count], uint(scale[2 * count + 1]));
    }
    return clamp(o, pc.lo, pc.hi);
}

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (WIDE != 0) {
        for (uint i = gl_GlobalInvocationID.x; i < pc.total; i += stride) {
            yi[i] = pooled(i);
        }
        return;
    }
    uint words = (pc.total + 3) / 4;
    for (uint q = gl_GlobalInvocationID.x; q < words; q += stride) {
        uint r = 0;
        for (uint e = 0; e < 4; ++e) {
            uint i = q * 4 + e;
            if (i >= pc.total) break;
            r |= (uint(pooled(i)) & 0xFFu) << (8 * e);
        }
        y[q] = r;
    }
}
