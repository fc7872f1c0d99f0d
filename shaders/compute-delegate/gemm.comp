#version 450
// Tiled GEMM, C[m][n] = sum_k A[m][k] * B[k][n] (+ bias), used for matmul, bmm, linear and
// (as an implicit GEMM) conv2d. A work group computes a BM x BN tile (BM = 8 * TY,
// BN = 8 * TX), each thread an 8 x 8 register tile (two vec4 rows x two vec4 columns, split so
// that shared-memory reads are conflict-free), stepping K by 8 with the next tile prefetched
// into registers while the current one is multiplied from shared memory.
//
// MODE 0: matmul with strides; batch index = gl_WorkGroupID.z; bias (if any) per column.
// MODE 1: conv2d as implicit GEMM: A = weights [c_out][c_in/g * kh * kw] of group z,
//         B[k][n] = the input patch element for k = (ci, ky, kx) at output pixel
//         n = (image, oy, ox); C written to NCHW; bias per output channel.
// MODE 2: MODE 1 for 1x1 kernels with stride 1 and no padding (B is the input itself).
layout(local_size_x_id = 0) in;
// Threads per work group (spec constant 0, set to TX * TY).
const uint WG = gl_WorkGroupSize.x;
layout(constant_id = 1) const uint TX = 16;
layout(constant_id = 2) const uint TY = 16;
layout(constant_id = 3) const uint MODE = 0;
// Kernel height and width baked in for MODE 1 (0: read them from the push constants), so the
// patch index arithmetic divides by constants.
layout(constant_id = 4) const uint KHS = 0;
layout(constant_id = 5) const uint KWS = 0;
// Fused activation: 1 clamps the result to [act_lo, act_hi] (relu, relu6, hardtanh).
layout(constant_id = 6) const uint ACT = 0;
// vec4 loads: VEC_A when A rows are contiguous along K with K and the strides multiples of 4;
// VEC_B (MODE 0) when B rows are contiguous along N with N and the strides multiples of 4.
layout(constant_id = 7) const uint VEC_A = 0;
layout(constant_id = 8) const uint VEC_B = 0;

const uint BK = 8;
const uint BM = TY * 8;
const uint BN = TX * 8;
const uint BM4 = TY * 2;
// A rows are padded by one vec4 so that the transposing stores into As are conflict-free.
const uint AS_ROW = BM4 + 1;
const uint BN4 = TX * 2;
const uint LA = (BM * BK) / WG;
const uint LB = (BN * BK) / WG;
const uint LA4 = (BM * BK / 4) / WG;
const uint LB4 = (BN * BK / 4) / WG;

layout(std430, set = 0, binding = 0) readonly buffer A { float a[]; };
layout(std430, set = 0, binding = 1) readonly buffer Bm { float b[]; };
layout(std430, set = 0, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, set = 0, binding = 3) writeonly buffer C { float c[]; };
layout(std430, set = 0, binding = 0) readonly buffer A4 { vec4 a4[]; };
layout(std430, set = 0, binding = 1) readonly buffer B4 { vec4 b4[]; };

layout(push_constant) uniform Params {
    uint m;
    uint n;
    uint k;
    uint sa_b;
    uint sa_m;
    uint sa_k;
    uint sb_b;
    uint sb_k;
    uint sb_n;
    uint sc_b;
    uint sc_m;
    uint has_bias;
    uint cin_g;
    uint h;
    uint w;
    uint oh;
    uint ow;
    uint kh;
    uint kw;
    uint sh;
    uint sw;
    uint ph;
    uint pw;
    uint dh;
    uint dw;
    uint cout;
    // Split-K: gl_WorkGroupID.z = batch * splits + split; split s covers
    // k in [s * k_split, (s + 1) * k_split) and writes its partial sums c_split elements
    // further on (a later dispatch sums them).
    uint splits;
    uint k_split;
    uint c_split;
    float act_lo;
    float act_hi;
} pc;

shared vec4 As[BK * AS_ROW];
shared vec4 Bs[BK * BN4];

// Per-thread state: B column bookkeeping (fixed across K steps) and the prefetch registers.
uint b_col[LB];
int b_iy[LB];
int b_ix[LB];
bool b_ok[LB];
float ra[LA];
float rb[LB];
vec4 ra4[LA4];
vec4 rb4[LB4];

void load_tile(uint tid, uint m0, uint n0, uint a_off, uint b_off, uint k0, uint k_end) {
    if (VEC_A == 1) {
        for (uint r = 0; r < LA4; ++r) {
            uint e = tid + r * WG;
            uint mm = m0 + e / 2;
            uint kk = k0 + (e % 2) * 4;
            ra4[r] = (mm < pc.m && kk < k_end) ? a4[(a_off + mm * pc.sa_m + kk) / 4] : vec4(0.0);
        }
    } else {
        for (uint r = 0; r < LA; ++r) {
            uint e = tid + r * WG;
            uint mm = m0 + e / BK;
            uint kk = k0 + e % BK;
            ra[r] = (mm < pc.m && kk < k_end) ? a[a_off + mm * pc.sa_m + kk * pc.sa_k] : 0.0;
        }
    }
    if (VEC_B == 1) {
        for (uint r = 0; r < LB4; ++r) {
            uint e = tid + r * WG;
            uint kk = k0 + e / BN4;
            uint nn = n0 + (e % BN4) * 4;
            rb4[r] = (nn < pc.n && kk < k_end) ? b4[(b_off + kk * pc.sb_k + nn) / 4] : vec4(0.0);
        }
        return;
    }
    uint kw = (KWS > 0) ? KWS : pc.kw;
    uint khw = ((KHS > 0) ? KHS : pc.kh) * kw;
    uint ohw = pc.oh * pc.ow;
    for (uint r = 0; r < LB; ++r) {
        uint e = tid + r * WG;
        uint kk = k0 + e / BN;
        float v = 0.0;
        if (b_ok[r] && kk < k_end) {
            if (MODE == 0) {
                v = b[b_col[r] + kk * pc.sb_k];
            } else if (MODE == 2) {
                v = b[b_col[r] + kk * ohw];
            } else {
                uint ci = kk / khw;
                uint rem = kk - ci * khw;
                uint ky = rem / kw;
                uint kx = rem - ky * kw;
                int iy = b_iy[r] + int(ky * pc.dh);
                int ix = b_ix[r] + int(kx * pc.dw);
                if (iy >= 0 && iy < int(pc.h) && ix >= 0 && ix < int(pc.w)) {
                    v = b[b_col[r] + ci * pc.h * pc.w + uint(iy) * pc.w + uint(ix)];
                }
            }
        }
        rb[r] = v;
    }
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint tx = tid % TX;
    uint ty = tid / TX;
    uint m0 = gl_WorkGroupID.y * BM;
    uint n0 = gl_WorkGroupID.x * BN;
    uint z = gl_WorkGroupID.z / pc.splits;
    uint split = gl_WorkGroupID.z - z * pc.splits;
    uint k_begin = split * pc.k_split;
    uint k_end = min(pc.k, k_begin + pc.k_split);
    uint c_off = split * pc.c_split;
    bool add_bias = pc.has_bias == 1 && split == 0;
    uint a_off = z * pc.sa_b;
    uint ohw = pc.oh * pc.ow;

    for (uint r = 0; r < LB; ++r) {
        uint e = tid + r * WG;
        uint n = n0 + e % BN;
        b_ok[r] = n < pc.n;
        b_iy[r] = 0;
        b_ix[r] = 0;
        if (MODE == 0) {
            b_col[r] = z * pc.sb_b + n * pc.sb_n;
        } else {
            uint img = n / ohw;
            uint p = n - img * ohw;
            uint oy = p / pc.ow;
            uint ox = p - oy * pc.ow;
            uint cin = pc.cin_g * (pc.cout / pc.m);
            // Plane base of input channel (z * cin_g) of this image.
            b_col[r] = (img * cin + z * pc.cin_g) * pc.h * pc.w;
            if (MODE == 2) {
                b_col[r] += p;
            }
            b_iy[r] = int(oy * pc.sh) - int(pc.ph);
            b_ix[r] = int(ox * pc.sw) - int(pc.pw);
        }
    }

    vec4 acc[8][2];
    for (uint i = 0; i < 8; ++i) {
        acc[i][0] = vec4(0.0);
        acc[i][1] = vec4(0.0);
    }

    uint b_off = z * pc.sb_b;
    load_tile(tid, m0, n0, a_off, b_off, k_begin, k_end);
    for (uint k0 = k_begin; k0 < k_end; k0 += BK) {
        barrier();
        if (VEC_A == 1) {
            for (uint r = 0; r < LA4; ++r) {
                uint e = tid + r * WG;
                uint mm = e / 2;
                uint kq = (e % 2) * 4;
                for (uint i = 0; i < 4; ++i) {
                    As[(kq + i) * AS_ROW + mm / 4][mm % 4] = ra4[r][i];
                }
            }
        } else {
            for (uint r = 0; r < LA; ++r) {
                uint e = tid + r * WG;
                uint mm = e / BK;
                uint kk = e % BK;
                As[kk * AS_ROW + mm / 4][mm % 4] = ra[r];
            }
        }
        if (VEC_B == 1) {
            for (uint r = 0; r < LB4; ++r) {
                uint e = tid + r * WG;
                Bs[(e / BN4) * BN4 + e % BN4] = rb4[r];
            }
        } else {
            for (uint r = 0; r < LB; ++r) {
                uint e = tid + r * WG;
                uint kk = e / BN;
                uint nn = e % BN;
                Bs[kk * BN4 + nn / 4][nn % 4] = rb[r];
            }
        }
        barrier();
        // The next tile's global loads are in flight while this one is multiplied.
        if (k0 + BK < k_end) {
            load_tile(tid, m0, n0, a_off, b_off, k0 + BK, k_end);
        }
        for (uint kk = 0; kk < BK; ++kk) {
            vec4 a0 = As[kk * AS_ROW + ty];
            vec4 a1 = As[kk * AS_ROW + ty + TY];
            vec4 b0 = Bs[kk * BN4 + tx];
            vec4 b1 = Bs[kk * BN4 + tx + TX];
            for (uint i = 0; i < 4; ++i) {
                acc[i][0] += a0[i] * b0;
                acc[i][1] += a0[i] * b1;
                acc[i + 4][0] += a1[i] * b0;
                acc[i + 4][1] += a1[i] * b1;
            }
        }
    }

    for (uint i = 0; i < 8; ++i) {
        uint mm = m0 + ((i < 4) ? (ty * 4 + i) : ((ty + TY) * 4 + i - 4));
        if (mm >= pc.m) continue;
        for (uint j = 0; j < 2; ++j) {
            uint nb = n0 + ((j == 0) ? tx : (tx + TX)) * 4;
            for (uint q = 0; q < 4; ++q) {
                uint nn = nb + q;
                if (nn >= pc.n) continue;
                float v = acc[i][j][q];
                if (MODE == 0) {
                    if (add_bias) v += bias[nn];
                    if (ACT == 1) v = clamp(v, pc.act_lo, pc.act_hi);
                    c[c_off + z * pc.sc_b + mm * pc.sc_m + nn] = v;
                } else {
                    uint co = z * pc.m + mm;
                    if (add_bias) v += bias[co];
                    if (ACT == 1) v = clamp(v, pc.act_lo, pc.act_hi);
                    uint img = nn / ohw;
                    uint p = nn - img * ohw;
                    c[c_off + (img * pc.cout + co) * ohw + p] = v;
                }
            }
        }
    }
}
