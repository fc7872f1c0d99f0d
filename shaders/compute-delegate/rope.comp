#version 450
// kernel: Rope
#extension GL_GOOGLE_include_directive : require
// Rotary embedding in consecutive (real, imaginary) pairs of the last dim (`et_vk.apply_rotary_emb`):
// for x [batch, s, h, d] and cos, sin [s, d / 2] (or [s, h, d / 2] with per_head), one
// invocation per output element:
//   y[.., 2i]     = x[.., 2i] cos[i] - x[.., 2i + 1] sin[i]
//   y[.., 2i + 1] = x[.., 2i] sin[i] + x[.., 2i + 1] cos[i]
// in fp32, stored in x's precision.
//
// With cache_rows (a KV cache's rows, fused by the graph's passes), y is that cache
// ([batch, cache_rows, h, d]) and row j of x is stored at its row start + j, as
// cache_write.comp stores it: start = pos[0] + plus where the position is on the device
// (has_pos), else plus; rows outside the cache are dropped.
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer X { T x[]; };
layout(std430, set = 0, binding = 1) readonly buffer Cos { T cos_[]; };
layout(std430, set = 0, binding = 2) readonly buffer Sin { T sin_[]; };
layout(std430, set = 0, binding = 3) readonly buffer Pos { int pos[]; };
layout(std430, set = 0, binding = 4) writeonly buffer Y { T y[]; };

// Rust: `kernels::push::RopePush`, generated from this block.
layout(push_constant) uniform Params {
    uint total;
    uint s;
    uint h;
    uint d;
    uint per_head;
    uint cache_rows;
    int plus;
    uint has_pos;
} pc;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint half_d = pc.d / 2;
    int start = pc.plus + (pc.has_pos == 1 ? pos[0] : 0);
    for (uint o = gl_GlobalInvocationID.x; o < pc.total; o += stride) {
        uint e = o % pc.d;
        uint head = (o / pc.d) % pc.h;
        uint row = o / (pc.d * pc.h);
        uint at = (row % pc.s) * pc.h + head;
        uint i = e / 2;
        uint f = (pc.per_head == 1 ? at : row % pc.s) * half_d + i;
        float c = float(cos_[f]);
        float sn = float(sin_[f]);
        float re = float(x[o - (e & 1u)]);
        float im = float(x[o - (e & 1u) + 1]);
        T v = T((e & 1u) == 0u ? re * c - im * sn : re * sn + im * c);
        if (pc.cache_rows == 0) {
            y[o] = v;
        } else {
            int r = start + int(row % pc.s);
            if (r >= 0 && r < int(pc.cache_rows)) {
                uint b = row / pc.s;
                y[((b * pc.cache_rows + uint(r)) * pc.h + head) * pc.d + e] = v;
            }
        }
    }
}
