#version 450
// kernel: Resize
#extension GL_GOOGLE_include_directive : require
// TOSA's RESIZE of NHWC [n, ih, iw, c] to [n, oh, ow, c], one invocation per output element,
// with TOSA's integer coordinates: y = oy * scale_y_d + offset_y, iy = floor(y / scale_y_n),
// ry = y - iy * scale_y_n (and so along x); the four neighbours iy and iy + 1 clamped to the
// input. NEAREST takes iy + 1 where 2 ry >= scale_y_n; BILINEAR weighs the neighbours by
// ry / scale_y_n (floats) or by ry and scale_y_n - ry (INT: integer words, an int32 sum that
// TOSA's RESCALE divides afterwards).
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint BILINEAR = 0;
layout(constant_id = 1) const uint INT = 0;

layout(std430, set = 0, binding = 0) readonly buffer X { T x[]; };
layout(std430, set = 0, binding = 0) readonly buffer XI { int xi[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { T y[]; };
layout(std430, set = 0, binding = 1) writeonly buffer YI { int yi[]; };

// Rust: `kernels::push::ResizePush`, generated from this block.
layout(push_constant) uniform Params {
    uint total;
    uint ih;
    uint iw;
    uint c;
    uint oh;
    uint ow;
    int scale_y_n;
    int scale_y_d;
    int scale_x_n;
    int scale_x_d;
    int offset_y;
    int offset_x;
} pc;

// floor(a / b) for b > 0.
int floor_div(int a, int b) {
    return a >= 0 ? a / b : -((-a + b - 1) / b);
}

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint e = gl_GlobalInvocationID.x; e < pc.total; e += stride) {
        uint ch = e % pc.c;
        uint r = e / pc.c;
        uint ox = r % pc.ow;
        r /= pc.ow;
        uint oy = r % pc.oh;
        uint nb = r / pc.oh;
        int ys = int(oy) * pc.scale_y_d + pc.offset_y;
        int xs = int(ox) * pc.scale_x_d + pc.offset_x;
        int iy = floor_div(ys, pc.scale_y_n);
        int ix = floor_div(xs, pc.scale_x_n);
        int ry = ys - iy * pc.scale_y_n;
        int rx = xs - ix * pc.scale_x_n;
        // Both neighbours inside the input whatever the parameters (TOSA's rules keep
        // -1 <= iy < ih; a file that breaks them must not read past the tensor).
        uint iy0 = uint(clamp(iy, 0, int(pc.ih) - 1));
        uint iy1 = uint(clamp(iy + 1, 0, int(pc.ih) - 1));
        uint ix0 = uint(clamp(ix, 0, int(pc.iw) - 1));
        uint ix1 = uint(clamp(ix + 1, 0, int(pc.iw) - 1));
        uint base = nb * pc.ih;
        uint a00 = ((base + iy0) * pc.iw + ix0) * pc.c + ch;
        uint a01 = ((base + iy0) * pc.iw + ix1) * pc.c + ch;
        uint a10 = ((base + iy1) * pc.iw + ix0) * pc.c + ch;
        uint a11 = ((base + iy1) * pc.iw + ix1) * pc.c + ch;
        if (BILINEAR == 0) {
            uint sy = 2 * ry >= pc.scale_y_n ? iy1 : iy0;
            uint sx = 2 * rx >= pc.scale_x_n ? ix1 : ix0;
            uint at = ((base + sy) * pc.iw + sx) * pc.c + ch;
            if (INT != 0) {
                yi[e] = xi[at];
            } else {
                y[e] = x[at];
            }
        } else if (INT != 0) {
            int uy = pc.scale_y_n - ry;
            int ux = pc.scale_x_n - rx;
            yi[e] = xi[a00] * uy * ux + xi[a01] * uy * rx + xi[a10] * ry * ux + xi[a11] * ry * rx;
        } else {
            float dy = float(ry) / float(pc.scale_y_n);
            float dx = float(rx) / float(pc.scale_x_n);
            float v = float(x[a00]) * (1.0 - dy) * (1.0 - dx) + float(x[a01]) * (1.0 - dy) * dx
                      + float(x[a10]) * dy * (1.0 - dx) + float(x[a11]) * dy * dx;
            y[e] = T(v);
        }
    }
}
