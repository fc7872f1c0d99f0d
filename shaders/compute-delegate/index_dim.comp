#version 450
// kernel: IndexDim
#extension GL_GOOGLE_include_directive : require
// Elements picked along one dim by an i32 index tensor, one invocation per output element:
// mode 0 `index_select` (the index is 1-D; output coordinate `dim` picks it), mode 1 `gather`
// (the index has the output's shape). The source is the output coordinate with `dim`
// replaced by the index (negative indices count from the end); out of range gives 0.
// Elements are moved without arithmetic (32-bit words, f16 values in the f16 variant).
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer X { WORD x[]; };
layout(std430, set = 0, binding = 1) readonly buffer I { int ids[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y { WORD y[]; };

layout(push_constant) uniform Params {
    uint total;
    uint rank;
    uint dim;
    uint mode;
    uint dims[6];
    uint xs[6];
    uint size;
} pc;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint o = gl_GlobalInvocationID.x; o < pc.total; o += stride) {
        uint rest = o;
        uint src = 0u;
        bool inside = true;
        for (int k = int(pc.rank) - 1; k >= 0; k--) {
            uint c = rest % pc.dims[k];
            rest /= pc.dims[k];
            if (uint(k) == pc.dim) {
                // One load at a chosen position: both loads of a select could read past
                // a 1-D index.
                int id = ids[pc.mode == 0u ? c : o];
                id = id < 0 ? id + int(pc.size) : id;
                inside = inside && id >= 0 && uint(id) < pc.size;
                c = inside ? uint(id) : 0u;
            }
            src += c * pc.xs[k];
        }
        y[o] = inside ? x[src] : WORD(0);
    }
}
