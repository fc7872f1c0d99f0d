#version 450
// kernel: Copy
#extension GL_GOOGLE_include_directive : require
// Strided copy of 32-bit elements (f16 ones in the f16 variant), up to 6 dims: for every
// index of `dims` (row-major),
// dst[dst_off + sum(idx * dst_stride)] = src[src_off + sum(idx * src_stride)].
// Permute, transpose, slice and cat are all this copy with different strides and offsets.
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer S { WORD src[]; };
layout(std430, set = 0, binding = 1) buffer D { WORD dst[]; };

layout(push_constant) uniform Params {
    uint n;
    uint rank;
    uint src_off;
    uint dst_off;
    uint dims[6];
    uint ss[6];
    uint ds[6];
} pc;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride) {
        uint rem = i;
        uint is = pc.src_off;
        uint id = pc.dst_off;
        for (int d = int(pc.rank) - 1; d >= 0; --d) {
            uint q = rem / pc.dims[d];
            uint idx = rem - q * pc.dims[d];
            rem = q;
            is += idx * pc.ss[d];
            id += idx * pc.ds[d];
        }
        dst[id] = src[is];
    }
}
