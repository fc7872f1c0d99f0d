#version 450
// kernel: ConvPw
// kernel: ConvPwSplit variant=split
#extension GL_GOOGLE_include_directive : require
// Pointwise conv2d of a narrow layer (1x1, stride 1, no padding, one group), each output a dot
// product read straight from memory:
//   y[n, m, p] = bias[m] + sum_k w[m, k] x[n, k, p]
// An invocation computes MT output channels of one pixel, so each x it loads serves MT sums;
// the invocations of a subgroup take neighbouring pixels of the same channels, so their x
// loads coalesce and their weight loads are one address. No tiles, shared memory or
// barriers: the tiled GEMM leaves most of the GPU idle on such layers while its K loop walks
// (ShuffleNet's and MobileNet's 1x1 layers of 7x7 to 56x56 pixels).
// variant: f16 -DDTYPE_F16
// The split variant (SPLIT_K) is for layers of too few invocations to fill a GPU: SPLIT
// neighbouring lanes share an invocation's sum (every SPLIT-th term each), added up in shared
// memory, so that each lane's chain of loads is SPLIT times shorter.
// variant: split -DSPLIT_K
// variant: split_f16 -DSPLIT_K -DDTYPE_F16
#extension GL_EXT_control_flow_attributes : require
#include "dtype.glsl"
layout(local_size_x = 256) in;
// Fused activation (`epilogue.glsl`'s codes), applied after the bias and the residual.
layout(constant_id = 0) const uint ACT = 0;
// Output channels an invocation computes (1 to MAX_MT).
layout(constant_id = 1) const uint MT = 4;
const uint MAX_MT = 8;
// A residual (binding 4, laid out as y) added to (RESID 1) or multiplying (2) each result,
// fused at lowering (`epilogue.glsl`).
layout(constant_id = 2) const uint RESID = 0;

layout(std430, set = 0, binding = 0) readonly buffer X { T x[]; };
layout(std430, set = 0, binding = 1) readonly buffer W { T wt[]; };
layout(std430, set = 0, binding = 2) readonly buffer B { T bias[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Y { T y[]; };
layout(std430, set = 0, binding = 4) readonly buffer R { T resid[]; };

// Rust: `kernels::push::ConvPwPush`, generated from this block.
layout(push_constant) uniform Params {
    // Images times channel groups (of MT) times pixels.
    uint total;
    uint m;
    uint k;
    uint pixels;
    uint has_bias;
    float act_lo;
    float act_hi;
} pc;

#include "epilogue.glsl"

#ifdef SPLIT_K
// Lanes an invocation's sum (2 to 8).
layout(constant_id = 3) const uint SPLIT = 4;
shared float partial[MAX_MT][256];

void main() {
    uint lid = gl_LocalInvocationID.x;
    uint lane = lid % SPLIT;
    uint per_group = gl_WorkGroupSize.x / SPLIT;
    uint groups = (pc.m + MT - 1) / MT;
    // Every lane of a work group takes the same steps, so that the barriers are uniform.
    for (uint base = gl_WorkGroupID.x * per_group; base < pc.total;
         base += gl_NumWorkGroups.x * per_group) {
        uint i = base + lid / SPLIT;
        uint ii = min(i, pc.total - 1);
        uint px = ii % pc.pixels;
        uint t = ii / pc.pixels;
        uint m0 = (t % groups) * MT;
        uint n = t / groups;
        float acc[MAX_MT];
        [[unroll]] for (uint j = 0; j < MT; ++j) {
            acc[j] = 0.0;
        }
        uint xb = n * pc.k * pc.pixels + px;
        for (uint kk = lane; kk < pc.k; kk += SPLIT) {
            float xv = float(x[xb + kk * pc.pixels]);
            [[unroll]] for (uint j = 0; j < MT; ++j) {
                uint mm = min(m0 + j, pc.m - 1);
                acc[j] += float(wt[mm * pc.k + kk]) * xv;
            }
        }
        [[unroll]] for (uint j = 0; j < MT; ++j) {
            partial[j][lid] = acc[j];
        }
        barrier();
        if (lane == 0 && i < pc.total && lid < per_group * SPLIT) {
            [[unroll]] for (uint j = 0; j < MT; ++j) {
                if (m0 + j < pc.m) {
                    float a = pc.has_bias == 1 ? float(bias[m0 + j]) : 0.0;
                    for (uint l = 0; l < SPLIT; ++l) {
                        a += partial[j][lid + l];
                    }
                    uint at = (n * pc.m + m0 + j) * pc.pixels + px;
                    if (RESID != 0) a = combine(a, float(resid[at]));
                    y[at] = T(activate(a));
                }
            }
        }
        barrier();
    }
}
#else
void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint groups = (pc.m + MT - 1) / MT;
    for (uint i = gl_GlobalInvocationID.x; i < pc.total; i += stride) {
        uint px = i % pc.pixels;
        uint t = i / pc.pixels;
        uint m0 = (t % groups) * MT;
        uint n = t / groups;
        ACC acc[MAX_MT];
        [[unroll]] for (uint j = 0; j < MT; ++j) {
            // Channels past the last compute the last one again and are not stored.
            uint mm = min(m0 + j, pc.m - 1);
            acc[j] = pc.has_bias == 1 ? float(bias[mm]) : 0.0;
        }
        uint xb = n * pc.k * pc.pixels + px;
        for (uint kk = 0; kk < pc.k; ++kk) {
            float xv = float(x[xb + kk * pc.pixels]);
            [[unroll]] for (uint j = 0; j < MT; ++j) {
                uint mm = min(m0 + j, pc.m - 1);
                acc[j] += float(wt[mm * pc.k + kk]) * xv;
            }
        }
        [[unroll]] for (uint j = 0; j < MT; ++j) {
            if (m0 + j < pc.m) {
                uint at = (n * pc.m + m0 + j) * pc.pixels + px;
                ACC a = acc[j];
                if (RESID != 0) a = combine(a, float(resid[at]));
                y[at] = T(activate(a));
            }
        }
    }
}
#endif
