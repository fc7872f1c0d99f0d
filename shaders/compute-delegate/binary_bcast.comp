#version 450
// kernel: BinaryBcast
#extension GL_GOOGLE_include_directive : require
// Elementwise binary ops with broadcasting, up to 6 dims: the output index is decomposed over
// `dims` and each operand is read through its own strides (0 on broadcast dims).
// OP: as binary.comp's: 0 add, 1 sub, 2 mul, 3 div, 4 minimum, 5 maximum, 6 pow, 7..12
// comparisons as masks, 13 logical and, 14 logical or, 15 floor division, 16 trunc division,
// 17 a * sigmoid(b).
// With ACT, the result is clamped to [act_lo, act_hi], as in binary.comp.
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint OP = 0;
layout(constant_id = 1) const uint ACT = 0;

layout(std430, set = 0, binding = 0) readonly buffer A { T a[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { T b[]; };
layout(std430, set = 0, binding = 2) writeonly buffer C { T c[]; };

layout(push_constant) uniform Params {
    uint n;
    uint rank;
    uint dims[6];
    uint sa[6];
    uint sb[6];
    float act_lo;
    float act_hi;
} pc;

#include "binary_op.glsl"

float op2(float u, float v) {
    return binary_op(OP, u, v);
}

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride) {
        uint rem = i;
        uint ia = 0;
        uint ib = 0;
        for (int d = int(pc.rank) - 1; d >= 0; --d) {
            uint q = rem / pc.dims[d];
            uint idx = rem - q * pc.dims[d];
            rem = q;
            ia += idx * pc.sa[d];
            ib += idx * pc.sb[d];
        }
        float u = float(a[ia]);
        float v = float(b[ib]);
        float r = op2(u, v);
        c[i] = T(ACT != 0 ? clamp(r, pc.act_lo, pc.act_hi) : r);
    }
}
