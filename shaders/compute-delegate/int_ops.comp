#version 450
// kernel: IntOps
#extension GL_GOOGLE_include_directive : require
// TOSA's integer arithmetic on int32 words (int8 and int16 values held widened), one output
// element per iteration, grid-stride. OP:
//   0 add, 1 sub (wrapping), 2 mul: (a * b + 2^(shift-1)) >> shift in 64-bit arithmetic,
//     low word kept (a plain product for shift 0), 3 maximum, 4 minimum, 5 a == b, 6 a > b,
//     7 a >= b (1 or 0), 13 select: b where a != 0, else c, 40 a & b, 41 a | b, 42 a ^ b,
//     43 a << b, 44 a >> b on the type's `hi` bits unsigned (sign-extended back), 45 a >> b
//     arithmetic (rounded where `shift` is 1), 46 a / b truncated; the operands broadcast to
//     the output through their strides (0 along a dim of size 1);
//   8 rescale: clamp(apply_scale_32(a - in_zp, m[c], s[c]) + out_zp, lo, hi) (double
//     rounding where `shift` is 1), c the
//     element's index along the last dim when `channels` > 1, the (multiplier, shift) pairs
//     at b;
//   9 table: b[a + 128] (TOSA's int8 TABLE, the 256 entries widened at b);
//   10 abs (wrapping), 11 negate: clamp(out_zp - (a - in_zp), lo, hi), 12 clamp(a, lo, hi),
//     15 ~a, 47 the leading zeros of a's 32 bits, 48 a's low `hi` bits sign-extended (a
//     narrowing CAST, which wraps);
//   16 sum, 17 maximum, 18 minimum along one dim: the output [outer, inner] from a
//     [outer, len, inner], len = d1 and inner = d2 (sums wrap);
//   14 int16 table: (b[i] << 7) + (b[i + 1] - b[i]) * f for a + 32768 = 128 i + f (TOSA's
//     interpolating TABLE of 513 entries, an int32 result);
//   24 matmul: y[n, h, w] = sum_c (a[n, h, c] - in_zp) (b[n, c, w] - out_zp) for a
//     [N, H, C] and b [N, C, W], H = d1, W = d2, C = d3 (wrapping);
//   25 the matmul of 24, its products and sums in 64 bits (TOSA's int48
//     accumulators) and rescaled: clamp(scale(sum, m, s) + out_zp, lo, hi), as mode 32
//     scales; c holds [out_zp, lo, hi, per column, then (m, s) per column or one pair];
//   32 a convolution and the RESCALE of its accumulators in one: a CONV2D or
//     DEPTHWISE_CONV2D of NHWC input a and weights b (int8 or int16 values held widened),
//     its sums, the bias added, in 64 bits (TOSA's int48 accumulators), then
//     clamp(scale(sum, m, s) + out_zp, lo, hi), scale = (v * m + 2^(s-1)) >> s in 64 bits;
//     the geometry and each output channel's bias and scale at c (see `conv_at`).
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
    if (OP == 40) return x & w;
    if (OP == 41) return x | w;
    if (OP == 42) return x ^ w;
    if (OP == 43) return x << w;
    if (OP == 44) {
        uint bits = uint(pc.hi);
        uint mask = bits >= 32 ? 0xffffffffu : (1u << bits) - 1u;
        uint r = (uint(x) & mask) >> uint(w);
        return bits >= 32 ? int(r) : (int(r << (32 - bits)) >> (32 - bits));
    }
    if (OP == 45) {
        int r = x >> w;
        if (pc.shift != 0 && w > 0) {
            r += (x >> (w - 1)) & 1;
        }
        return r;
    }
    if (OP == 46) return x / w;
    if (OP == 0) return x + w;
    if (OP == 1) return x - w;
    if (OP == 2) return mul_shift(x, w, pc.shift);
    if (OP == 3) return max(x, w);
    if (OP == 4) return min(x, w);
    if (OP == 5) return x == w ? 1 : 0;
    if (OP == 6) return x > w ? 1 : 0;
    return x >= w ? 1 : 0;
}

// The convolution's parameters at c: the header's words, then four words an output channel
// (the bias's low and high words, the multiplier, the shift) from word 24.
const uint C_IH = 0, C_IW = 1, C_IC = 2, C_OH = 3, C_OW = 4, C_OC = 5, C_KH = 6, C_KW = 7;
const uint C_SY = 8, C_SX = 9, C_PT = 10, C_PL = 11, C_DY = 12, C_DX = 13, C_XZP = 14;
const uint C_WZP = 15, C_OUTZP = 16, C_LO = 17, C_HI = 18, C_MULT = 19, C_CHANNELS = 24;

// (hi, lo) + p, in 64 bits.
void add64(inout int hi, inout uint lo, int p) {
    uint carry;
    lo = uaddCarry(lo, uint(p), carry);
    hi += int(carry) + (p < 0 ? -1 : 0);
}

// (hi, lo) + x * y, the product in 64 bits.
void add_product64(inout int hi, inout uint lo, int x, int y) {
    int phi;
    int plo;
    imulExtended(x, y, phi, plo);
    uint carry;
    lo = uaddCarry(lo, uint(plo), carry);
    hi += phi + int(carry);
}

// (v * m + 2^(s-1)) >> s for the 64-bit v = (hi, lo), m >= 0 and s in 1..62: the low word of
// a 64-bit result (TOSA's scales never leave 32 bits).
int scale64(int hi, uint lo, int m, uint s) {
    uint phi;
    uint plo;
    umulExtended(lo, uint(m), phi, plo);
    phi += uint(hi * m);
    uint carry;
    if (s <= 32) {
        plo = uaddCarry(plo, 1u << (s - 1), carry);
        phi += carry;
    } else {
        phi += 1u << (s - 33);
    }
    if (s < 32) {
        return int((plo >> s) | (phi << (32 - s)));
    }
    if (s == 32) {
        return int(phi);
    }
    return int(phi) >> (s - 32);
}

// Mode 32: one output element of the convolution and its rescale.
int conv(uint e) {
    uint oc_n = uint(c[C_OC]);
    uint oc = e % oc_n;
    uint r = e / oc_n;
    uint ox = r % uint(c[C_OW]);
    r /= uint(c[C_OW]);
    uint oy = r % uint(c[C_OH]);
    uint nb = r / uint(c[C_OH]);
    uint ih = uint(c[C_IH]), iw = uint(c[C_IW]), ic_n = uint(c[C_IC]);
    uint kh = uint(c[C_KH]), kw = uint(c[C_KW]);
    uint mult = uint(c[C_MULT]);
    uint at = C_CHANNELS + 4 * oc;
    int hi = c[at + 1];
    uint lo = uint(c[at]);
    for (uint ky = 0; ky < kh; ++ky) {
        int iy = int(oy) * c[C_SY] - c[C_PT] + int(ky) * c[C_DY];
        if (iy < 0 || iy >= int(ih)) {
            continue;
        }
        for (uint kx = 0; kx < kw; ++kx) {
            int ix = int(ox) * c[C_SX] - c[C_PL] + int(kx) * c[C_DX];
            if (ix < 0 || ix >= int(iw)) {
                continue;
            }
            uint row = ((nb * ih + uint(iy)) * iw + uint(ix)) * ic_n;
            if (mult > 0) {
                // Depthwise: weights [KH, KW, C, M], output channel c M + m.
                uint ic = oc / mult;
                int x = a[row + ic] - c[C_XZP];
                int w = b[((ky * kw + kx) * ic_n + ic) * mult + oc % mult] - c[C_WZP];
                add64(hi, lo, x * w);
            } else {
                // Weights [OC, KH, KW, IC].
                uint wrow = ((oc * kh + ky) * kw + kx) * ic_n;
                for (uint ic = 0; ic < ic_n; ++ic) {
                    add64(hi, lo, (a[row + ic] - c[C_XZP]) * (b[wrow + ic] - c[C_WZP]));
                }
            }
        }
    }
    int v = scale64(hi, lo, c[at + 2], uint(c[at + 3])) + c[C_OUTZP];
    return clamp(v, c[C_LO], c[C_HI]);
}

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint e = gl_GlobalInvocationID.x; e < pc.n; e += stride) {
        if (OP < 8 || OP == 13 || (OP >= 40 && OP < 47)) {
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
            int v = apply_scale_32_rounded(a[e] - pc.in_zp, b[2 * ch], uint(b[2 * ch + 1]),
                                           pc.shift != 0) + pc.out_zp;
            y[e] = clamp(v, pc.lo, pc.hi);
        } else if (OP == 9) {
            y[e] = b[clamp(a[e] + 128, 0, 255)];
        } else if (OP == 10) {
            y[e] = a[e] < 0 ? -a[e] : a[e];
        } else if (OP == 11) {
            y[e] = clamp(pc.out_zp - (a[e] - pc.in_zp), pc.lo, pc.hi);
        } else if (OP == 12) {
            y[e] = clamp(a[e], pc.lo, pc.hi);
        } else if (OP == 15) {
            y[e] = ~a[e];
        } else if (OP == 47) {
            y[e] = a[e] == 0 ? 32 : 31 - findMSB(uint(a[e]));
        } else if (OP == 48) {
            uint drop = 32 - uint(pc.hi);
            y[e] = (a[e] << drop) >> drop;
        } else if (OP == 14) {
            int i = clamp(a[e], -32768, 32767) + 32768;
            int base = b[i >> 7];
            int next = b[min((i >> 7) + 1, 512)];
            y[e] = (base << 7) + (next - base) * (i & 127);
        } else if (OP == 32) {
            y[e] = conv(e);
        } else if (OP == 25) {
            uint w = e % pc.d2;
            uint h = (e / pc.d2) % pc.d1;
            uint n = e / (pc.d2 * pc.d1);
            uint at = (n * pc.d1 + h) * pc.d3;
            uint bt = n * pc.d3 * pc.d2 + w;
            int hi = 0;
            uint lo = 0;
            for (uint k = 0; k < pc.d3; ++k) {
                add_product64(hi, lo, a[at + k] - pc.in_zp, b[bt + k * pc.d2] - pc.out_zp);
            }
            uint ch = c[3] != 0 ? 4 + 2 * w : 4;
            int v = scale64(hi, lo, c[ch], uint(c[ch + 1])) + c[0];
            y[e] = clamp(v, c[1], c[2]);
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
