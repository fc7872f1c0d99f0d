#version 450
// kernel: QPool
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
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
    uint plane = pc.h * pc.w;
    if (pc.oh == 1 && pc.ow == 1 && pc.kh == pc.h && pc.kw == pc.w && pc.ph == 0
        && pc.pw == 0) {
        // A window over the whole plane (global pooling): a word's four outputs average four
        // neighbouring planes, read as the words that cover them (the loads independent of
        // one another), each byte counted for the output whose plane holds it.
        for (uint q = gl_GlobalInvocationID.x; q < words; q += stride) {
            uint first = q * 4 * plane;
            uint last = min(q * 4 + 4, pc.total) * plane;
            int acc[4] = int[4](0, 0, 0, 0);
            for (uint b = first & ~3u; b < last; b += 4) {
                uint v = x[b >> 2];
                [[unroll]] for (uint j = 0; j < 4; ++j) {
                    uint at = b + j;
                    int add = (at >= first && at < last) ? byte_at(v, j) - pc.in_zp : 0;
                    uint e = (max(at, first) - first) / plane;
                    [[unroll]] for (uint o = 0; o < 4; ++o) {
                        acc[o] += (e == o) ? add : 0;
                    }
                }
            }
            uint r = 0;
            [[unroll]] for (uint e = 0; e < 4; ++e) {
                int o = pc.out_zp
                    + apply_scale_32(acc[e], scale[2 * plane], uint(scale[2 * plane + 1]));
                r |= (q * 4 + e < pc.total) ? (uint(clamp(o, pc.lo, pc.hi)) & 0xFFu) << (8 * e)
                                            : 0u;
            }
            y[q] = r;
        }
        return;
    }
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
