#version 450
// kernel: DequantQ4
#extension GL_GOOGLE_include_directive : require
// Group-wise 4-bit weights (`linear_q4gsw`'s, as gemv_q4.comp reads them: [n][k / 2] bytes,
// the even column in the low nibble, stored plus 8; scales f32 [n][groups]) unpacked to T and
// transposed: y[c][j] = (q[j][c] - 8) * s[j][c >> group_shift], the [k, n] layout a GEMM's B
// reads best. A prompt's product over such weights unpacks them into a temporary just before
// it, so the model keeps 4 bits a weight between its executions.
//
// One packed word (eight weights of a column, within one group: groups are powers of two of
// at least 8) per iteration, grid-stride. The lanes of a wave take neighbouring columns, so
// each of a word's eight stores is contiguous across them; the loads, a word per column, come
// back through the cache as the next words are taken.
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer W { uint w[]; };
layout(std430, set = 0, binding = 1) readonly buffer S { float s[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y { T y[]; };

// Rust: `kernels::push::DequantQ4Push`, generated from this block.
layout(push_constant) uniform Params {
    uint n;
    uint k;
    uint group_shift;
    uint groups;
} pc;

void main() {
    uint words = pc.k >> 3;
    uint total = words * pc.n;
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < total; i += stride) {
        uint j = i % pc.n;
        uint c = (i / pc.n) << 3;
        uint word = w[j * words + (c >> 3)];
        float scale = s[j * pc.groups + (c >> pc.group_shift)];
        for (uint b = 0; b < 8; ++b) {
            float q = float((word >> (4 * b)) & 15u) - 8.0;
            y[(c + b) * pc.n + j] = T(q * scale);
        }
    }
}
