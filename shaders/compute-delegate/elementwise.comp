#version 450
// kernel: Elementwise
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// A chain of elementwise ops as one dispatch (`chains.rs`): up to 4 input tensors, each read
// at the output's index or through its own offset and (broadcast, permuted or sliced)
// strides, and up to 12 steps, each an op
// of `unary_op.glsl`, `binary_op.glsl` or `math_op.glsl` on earlier values, kept in
// registers; the last step's value is stored. One invocation per output element, grid-stride;
// fp32 arithmetic in both precisions.
//
// The chain's steps are specialization constants, so the driver compiles each chain to
// straight-line code: step k's word S<k> holds its kind (bits 0-1: 1 unary op, 2 binary op,
// 3 math op; with bit 18, a binary op's second operand, or with bit 19 its first, is the
// immediate p[2k]), its op code (bits 2-7) and its operands (bits 8-12 and 13-17: registers
// 0-3 are the inputs, 4 + j step j's value); p[2k] and p[2k + 1] are its parameters. The
// parameters are a buffer (binding 4), not constants, so that chains differing only in them
// (a quantized model's scales and zero points, one set a layer) share one pipeline.
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint INPUTS = 1;
layout(constant_id = 1) const uint STEPS = 1;
// Bit k: input k is read through its offset and strides (else at the output's index).
layout(constant_id = 2) const uint STRIDED = 0;
layout(constant_id = 3) const uint S0 = 0;
layout(constant_id = 4) const uint S1 = 0;
layout(constant_id = 5) const uint S2 = 0;
layout(constant_id = 6) const uint S3 = 0;
layout(constant_id = 7) const uint S4 = 0;
layout(constant_id = 8) const uint S5 = 0;
layout(constant_id = 9) const uint S6 = 0;
layout(constant_id = 10) const uint S7 = 0;
layout(constant_id = 11) const uint S8 = 0;
layout(constant_id = 12) const uint S9 = 0;
layout(constant_id = 13) const uint S10 = 0;
layout(constant_id = 14) const uint S11 = 0;
// Bit k: input k is a split-K product's result, read as the sum of its SPLITS fp32 partial
// sums (binding 5, `split_stride` elements apart) in place of its summing pass.
layout(constant_id = 15) const uint SPLIT_MASK = 0;
layout(constant_id = 16) const uint SPLITS = 1;

const uint MAX_INPUTS = 4;
const uint MAX_STEPS = 12;
const uint MAX_RANK = 4;

layout(std430, set = 0, binding = 0) readonly buffer X0 { T x0[]; };
layout(std430, set = 0, binding = 1) readonly buffer X1 { T x1[]; };
layout(std430, set = 0, binding = 2) readonly buffer X2 { T x2[]; };
layout(std430, set = 0, binding = 3) readonly buffer X3 { T x3[]; };
layout(std430, set = 0, binding = 4) readonly buffer P { float p[]; };
layout(std430, set = 0, binding = 5) readonly buffer S { float part[]; };
layout(std430, set = 0, binding = 6) writeonly buffer Y { T y[]; };

// Rust: `kernels::push::ElementwisePush`, generated from this block.
layout(push_constant) uniform Params {
    uint n;
    uint rank;
    // The output's dims, collapsed, and each input's strides over them (input k at 4 k) and
    // offset (a slice's start).
    uint dims[4];
    uint strides[16];
    uint offsets[4];
    uint split_stride;
} pc;

#include "unary_op.glsl"
#include "binary_op.glsl"
#include "math_op.glsl"

uint step_word(const uint k) {
    if (k == 0) return S0;
    if (k == 1) return S1;
    if (k == 2) return S2;
    if (k == 3) return S3;
    if (k == 4) return S4;
    if (k == 5) return S5;
    if (k == 6) return S6;
    if (k == 7) return S7;
    if (k == 8) return S8;
    if (k == 9) return S9;
    if (k == 10) return S10;
    if (k == 11) return S11;
    return 0;
}

// Where input k's element for output element i lies.
uint input_index(const uint k, uint i) {
    if ((STRIDED & (1u << k)) == 0) {
        return i;
    }
    uint rem = i;
    uint at = pc.offsets[k];
    for (int d = int(pc.rank) - 1; d >= 0; --d) {
        uint q = rem / pc.dims[d];
        at += (rem - q * pc.dims[d]) * pc.strides[k * MAX_RANK + uint(d)];
        rem = q;
    }
    return at;
}

float load_input(const uint k, uint i) {
    uint at = input_index(k, i);
    if ((SPLIT_MASK & (1u << k)) != 0) {
        float sum = 0.0;
        for (uint j = 0; j < SPLITS; ++j) {
            sum += part[j * pc.split_stride + at];
        }
        return sum;
    }
    if (k == 0) return float(x0[at]);
    if (k == 1) return float(x1[at]);
    if (k == 2) return float(x2[at]);
    return float(x3[at]);
}

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    float prm[2 * MAX_STEPS];
    [[unroll]] for (uint k = 0; k < 2 * MAX_STEPS; ++k) {
        prm[k] = k < 2 * STEPS ? p[k] : 0.0;
    }
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride) {
        float r[MAX_INPUTS + MAX_STEPS];
        [[unroll]] for (uint k = 0; k < MAX_INPUTS; ++k) {
            r[k] = k < INPUTS ? load_input(k, i) : 0.0;
        }
        // Unrolled, so that the values stay in registers: a loop left to the driver ran a
        // GPT-2 chain 14x slower on lavapipe, though it compiled faster (each op's code is
        // inlined once a step here, before the unused ones fold away).
        [[unroll]] for (uint k = 0; k < MAX_STEPS; ++k) {
            if (k < STEPS) {
                uint w = step_word(k);
                uint kind = w & 3u;
                uint op = (w >> 2) & 63u;
                float p0 = prm[2 * k];
                float a = (w & (1u << 19)) != 0 ? p0 : r[(w >> 8) & 31u];
                float b = (w & (1u << 18)) != 0 ? p0 : r[(w >> 13) & 31u];
                float v;
                if (kind == 1) {
                    v = unary_op(op, a, p0, prm[2 * k + 1]);
                } else if (kind == 2) {
                    v = binary_op(op, a, b);
                } else {
                    v = math_op(op, a, p0);
                }
                r[MAX_INPUTS + k] = v;
            }
        }
        y[i] = T(r[MAX_INPUTS + STEPS - 1]);
    }
}
