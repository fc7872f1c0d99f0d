#version 450
// kernel: Pool
#extension GL_GOOGLE_include_directive : require
// avg_pool2d / max_pool2d over the last two dims of a [planes, h, w] view, one thread per
// output element, grid-stride. Padding and ceil_mode follow PyTorch: max ignores padded
// positions; avg divides by the window clipped to the padded input (count_include_pad) or to
// the input.
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint MAX = 0;

layout(std430, set = 0, binding = 0) readonly buffer X { T x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { T y[]; };

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
    uint include_pad;
} pc;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < pc.total; i += stride) {
        uint ox = i % pc.ow;
        uint t = i / pc.ow;
        uint oy = t % pc.oh;
        uint plane = t / pc.oh;
        int y0 = int(oy * pc.sh) - int(pc.ph);
        int x0 = int(ox * pc.sw) - int(pc.pw);
        int y1 = min(y0 + int(pc.kh), int(pc.h + pc.ph));
        int x1 = min(x0 + int(pc.kw), int(pc.w + pc.pw));
        int pool = (y1 - y0) * (x1 - x0);
        int ya = max(y0, 0);
        int xa = max(x0, 0);
        int yb = min(y1, int(pc.h));
        int xb = min(x1, int(pc.w));
        uint base = plane * pc.h * pc.w;
        ACC acc = (MAX == 1) ? -1.0 / 0.0 : 0.0;
        for (int yy = ya; yy < yb; ++yy) {
            uint row = base + uint(yy) * pc.w;
            for (int xx = xa; xx < xb; ++xx) {
                float v = float(x[row + uint(xx)]);
                if (MAX == 1) acc = max(acc, v);
                else acc += v;
            }
        }
        if (MAX == 0) {
            int div = (pc.include_pad == 1) ? pool : (yb - ya) * (xb - xa);
            acc /= float(max(div, 1));
        }
        y[i] = T(acc);
    }
}
