#version 450
// kernel: BinaryBcast
#extension GL_GOOGLE_include_directive : require
// Elementwise binary ops with broadcasting, up to 6 dims: the output index is decomposed over
// `dims` and each operand is read through its own strides (0 on broadcast dims).
// OP: as binary.comp's: 0 add, 1 sub, 2 mul, 3 div, 4 minimum, 5 maximum, 6 pow, 7..12
// comparisons as masks, 13 logical and, 14 logical or, 15 floor division, 16 trunc division.
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint OP = 0;

layout(std430, set = 0, binding = 0) readonly buffer A { T a[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { T b[]; };
layout(std430, set = 0, binding = 2) writeonly buffer C { T c[]; };

layout(push_constant) uniform Params {
    uint n;
    uint rank;
    uint dims[6];
    uint sa[6];
    uint sb[6];
} pc;

// PyTorch's pow: negative bases with whole exponents keep their sign rule.
float power(float v, float e) {
    if (e == 0.0) return 1.0;
    if (e == 1.0) return v;
    if (e == 2.0) return v * v;
    if (v >= 0.0) return pow(v, e);
    if (fract(e) != 0.0) return uintBitsToFloat(0x7fc00000u);
    float m = pow(-v, e);
    return mod(e, 2.0) == 1.0 ? -m : m;
}

float op2(float u, float v) {
    if (OP == 0) return u + v;
    if (OP == 1) return u - v;
    if (OP == 2) return u * v;
    if (OP == 3) return u / v;
    if (OP == 4) return min(u, v);
    if (OP == 5) return max(u, v);
    if (OP == 6) return power(u, v);
    if (OP == 7) return float(u == v);
    if (OP == 8) return float(u != v);
    if (OP == 9) return float(u > v);
    if (OP == 10) return float(u >= v);
    if (OP == 11) return float(u < v);
    if (OP == 12) return float(u <= v);
    if (OP == 13) return float(u != 0.0 && v != 0.0);
    if (OP == 14) return float(u != 0.0 || v != 0.0);
    if (OP == 15) return floor(u / v);
    return trunc(u / v);
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
        c[i] = T(op2(u, v));
    }
}
