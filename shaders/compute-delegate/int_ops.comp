#version 450
// kernel: IntOps
#extension GL_GOOGLE_include_directive : require
// TOSA's integer arithmetic on int32 words (int8 and int16 values held widened), one output
// element per iteration, grid-stride. OP:
//   0 add, 1 sub (wrapping), 2 mul: (a * b + 2^(shift-1)) >> shift in 64-bit arithmetic,
//     low word kept (a plain product for shift 0), 3 maximum, 4 minimum, 5 a == b, 6 a > b,
//     7 a >= b (1 or 0), 13 select: b where a != 0, else c; the operands broadcast to the
//     output through their strides (0 along a dim of size 1);
//   8 rescale: clamp(apply_scale_32(a - in_zp, m[c], s[c]) + out_zp, lo, hi), c the
//     element's index along the last dim when `channels` > 1, the (multiplier, shift) pairs
//     at b;
//   9 table: b[a + 128] (TOSA's int8 TABLE, the 256 entries widened at b);
//   10 abs (wrapping), 11 negate: clamp(out_zp - (a - in_zp), lo, hi), 12 clamp(a, lo, hi);
//   16 sum, 17 maximum, 18 minimum along one dim: the output [outer, inner] from a
//     [outer, len, inner], len = d1 and inner = d2 (sums wrap);
//   24 matmul: y[n, h, w] = sum_c (a[n, h, c] - in_zp) (b[n, c, w] - out_zp) for a
//     [N, H, C] and b [N, C, W], H = d1, W = d2, C = d3 (wrapping).
// apply_scale_32 is TOSA's single-rounding scale (requantize.glsl).
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint OP = 0;

layout(std430, set = 0, binding = 0) readonly buffer A { int a[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { int b[]; };
layout(std430, set = 0, binding = 2) readonly buffer C { int c[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Y { int y[]; };

// Rust: `kernels::push::IntOpsPush`, generated from this block.
layout(push_constant) uniform Params {
    // Output elements.
    uint n;
    // The output's inner dims (of 4; the outer one is the rest); reductions: len, inner.
    uint d1;
    uint d2;
    uint d3;
    // Strides of a, b and c per output dim (elementwise ops of several operands).
    uint sa0;
    uint sa1;
    uint sa2;
    uint sa3;
    uint sb0;
    uint sb1;
    uint sb2;
    uint sb3;
    uint sc0;
    uint sc1;
    uint sc2;
    uint sc3;
    // mul: the shift; rescale, negate, clamp, matmul: the zero points, the output's range
    // and the channels.
    uint shift;
    int in_zp;
    int out_zp;
    int lo;
    int hi;
    uint channels;
} pc;

#include "requantize.glsl"

// (a * b + 2^(s-1)) >> s, the low word of the 64-bit result.
int mul_shift(int x, int w, uint s) {
    if (s == 0) {
        return x * w;
    }
    int hi;
    int lo_s;
    imulExtended(x, w, hi, lo_s);
    uint lo = uint(lo_s);
    uint carry;
    if (s <= 32) {
        lo = uaddCarry(lo, 1u << (s - 1), carry);
        hi += int(carry);
    } else {
        hi += 1 << (s - 33);
    }
    if (s < 32) {
        return int((lo >> s) | (uint(hi) << (32 - s)));
    }
    if (s == 32) {
        return hi;
    }
    return hi >> (s - 32);
}

int binary(int x, int w) {
    if (OP == 0) return x + w;
    if (OP == 1) return x - w;
    if (OP == 2) return mul_shift(x, w, pc.shift);
    if (OP == 3) return max(x, w);
    if (OP == 4) return min(x, w);
    if (OP == 5) return x == w ? 1 : 0;
    if (OP == 6) return x > w ? 1 : 0;
    return x >= w ? 1 : 0;
}

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint e = gl_GlobalInvocationID.x; e < pc.n; e += stride) {
        if (OP < 8 || OP == 13) {
            uint i3 = e % pc.d3;
            uint r = e / pc.d3;
            uint i2 = r % pc.d2;
            r /= pc.d2;
            uint i1 = r % pc.d1;
            uint i0 = r / pc.d1;
            uint ia = i0 * pc.sa0 + i1 * pc.sa1 + i2 * pc.sa2 + i3 * pc.sa3;
            uint ib = i0 * pc.sb0 + i1 * pc.sb1 + i2 * pc.sb2 + i3 * pc.sb3;
            if (OP == 13) {
                uint ic = i0 * pc.sc0 + i1 * pc.sc1 + i2 * pc.sc2 + i3 * pc.sc3;
                y[e] = a[ia] != 0 ? b[ib] : c[ic];
            } else {
                y[e] = binary(a[ia], b[ib]);
            }
        } else if (OP == 8) {
            uint ch = pc.channels > 1 ? e % pc.channels : 0;
            int v = apply_scale_32(a[e] - pc.in_zp, b[2 * ch], uint(b[2 * ch + 1])) + pc.out_zp;
            y[e] = clamp(v, pc.lo, pc.hi);
        } else if (OP == 9) {
            y[e] = b[clamp(a[e] + 128, 0, 255)];
        } else if (OP == 10) {
            y[e] = a[e] < 0 ? -a[e] : a[e];
        } else if (OP == 11) {
            y[e] = clamp(pc.out_zp - (a[e] - pc.in_zp), pc.lo, pc.hi);
        } else if (OP == 12) {
            y[e] = clamp(a[e], pc.lo, pc.hi);
        } else if (OP == 24) {
            uint w = e % pc.d2;
            uint h = (e / pc.d2) % pc.d1;
            uint n = e / (pc.d2 * pc.d1);
            uint at = (n * pc.d1 + h) * pc.d3;
            uint bt = n * pc.d3 * pc.d2 + w;
            int acc = 0;
            for (uint k = 0; k < pc.d3; ++k) {
                acc += (a[at + k] - pc.in_zp) * (b[bt + k * pc.d2] - pc.out_zp);
            }
            y[e] = acc;
        } else {
            uint len = pc.d1;
            uint inner = pc.d2;
            uint at = (e / inner) * len * inner + e % inner;
            int acc = a[at];
            for (uint k = 1; k < len; ++k) {
                int x = a[at + k * inner];
                acc = OP == 16 ? acc + x : (OP == 17 ? max(acc, x) : min(acc, x));
            }
            y[e] = acc;
        }
    }
}
