#version 450
// kernel: ArgReduce
// The index of the maximum (mode 0) or minimum (mode 1) along one dim of an f32 x viewed as
// [outer, d, inner], as i32, one invocation per output element [outer, inner]; the first of
// equal values, and the first NaN, win, as in PyTorch.
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { int y[]; };

layout(push_constant) uniform Params {
    uint total;
    uint d;
    uint inner;
    uint mode;
} pc;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint o = gl_GlobalInvocationID.x; o < pc.total; o += stride) {
        uint base = (o / pc.inner) * pc.d * pc.inner + o % pc.inner;
        float best = x[base];
        int at = 0;
        for (uint k = 1u; k < pc.d && !isnan(best); k++) {
            float v = x[base + k * pc.inner];
            bool better = pc.mode == 0u ? v > best : v < best;
            if (isnan(v) || better) {
                best = v;
                at = int(k);
            }
        }
        y[o] = at;
    }
}
