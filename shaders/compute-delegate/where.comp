#version 450
// kernel: Where
#extension GL_GOOGLE_include_directive : require
// `cond ? a : b` with broadcasting, up to 6 dims: the output index is decomposed over `dims`
// and each operand is read through its own strides (0 on broadcast dims). A mask is f32:
// 0.0 is false, any other value true.
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer C { T c[]; };
layout(std430, set = 0, binding = 1) readonly buffer A { T a[]; };
layout(std430, set = 0, binding = 2) readonly buffer B { T b[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Y { T y[]; };

layout(push_constant) uniform Params {
    uint n;
    uint rank;
    uint dims[6];
    uint sc[6];
    uint sa[6];
    uint sb[6];
} pc;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride) {
        uint rem = i;
        uint ic = 0;
        uint ia = 0;
        uint ib = 0;
        for (int d = int(pc.rank) - 1; d >= 0; --d) {
            uint q = rem / pc.dims[d];
            uint idx = rem - q * pc.dims[d];
            rem = q;
            ic += idx * pc.sc[d];
            ia += idx * pc.sa[d];
            ib += idx * pc.sb[d];
        }
        y[i] = T((float(c[ic]) != 0.0) ? float(a[ia]) : float(b[ib]));
    }
}
