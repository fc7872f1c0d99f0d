#version 450
// kernel: Gemm
// kernel: GemmWide variant=wide
// kernel: GemmEpi variant=epi
// kernel: GemmWideEpi variant=wide_epi
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
// Tiled GEMM, C[m][n] = act(sum_k A[m][k] * B[k][n] (+ bias) (+ residual)), used for matmul,
// bmm, linear and (as an implicit GEMM) conv2d. A work group computes a BM x BN tile (BM = 8 * TY,
// BN = 4 * CQ * TX), each thread an 8 x 8 register tile (two vec4 rows x two vec4 columns,
// split so that shared-memory reads are conflict-free; WARP_TILE picks the split), or 8 x 16 in
// the wide variant (CQ = 4), stepping K by BK through two shared-memory stages: the next
// tile's global loads are in flight in registers while the current stage is multiplied, then
// stored into the other stage, one barrier per step. Blocks inside A and B with vec4 rows and
// whole K steps take a copy of that loop without bounds tests or conditional loads: on NVIDIA
// the tested loop compiled to about 100 register moves per K step on top of its 1024 FMAs
// (the driver's shader cache holds the machine code), and the untested one to 14, which made
// 4096^3 run in 2.90 ms instead of 3.52 on an H200.
//
// Every loop over registers has a constant trip count and is unrolled in the SPIR-V
// ([[unroll]]), so the accumulators, fragments and prefetch registers are plain registers:
// an array indexed at run time would live in local memory (the cause of a 10x slowdown).
// Loops whose trip count depends on the tile size run to the largest count and test a
// specialization constant, which the driver folds.
//
// MODE 0: matmul with strides; batch index = gl_WorkGroupID.z; bias (if any) per column.
// MODE 1: conv2d as implicit GEMM: A = weights [c_out][c_in/g * kh * kw] of group z,
//         B[k][n] = the input patch element for k = (ci, ky, kx) at output pixel
//         n = (image, oy, ox); C written to NCHW; bias per output channel.
// MODE 2: MODE 1 for 1x1 kernels with stride 1 and no padding (B is the input itself; where
//         sb_n > 0 the input is channels last, B[k][n] at n * sb_n + k * sb_k, one group).
// variant: f16 -DDTYPE_F16
// variant: wide -DGEMM_CQ=4
// variant: wide_f16 -DGEMM_CQ=4 -DDTYPE_F16
// variant: epi -DEPILOGUE
// variant: epi_f16 -DEPILOGUE -DDTYPE_F16
// variant: wide_epi -DGEMM_CQ=4 -DEPILOGUE
// variant: wide_epi_f16 -DGEMM_CQ=4 -DEPILOGUE -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x_id = 0) in;
// Threads per work group (spec constant 0, set to TX * TY; TX and TY are 8 or 16).
const uint WG = gl_WorkGroupSize.x;
layout(constant_id = 1) const uint TX = 16;
layout(constant_id = 2) const uint TY = 16;
layout(constant_id = 3) const uint MODE = 0;
// Kernel height and width baked in for MODE 1 (0: read them from the push constants), so the
// patch index arithmetic divides by constants.
layout(constant_id = 4) const uint KHS = 0;
layout(constant_id = 5) const uint KWS = 0;
// Fused activation: 1 clamps the result to [act_lo, act_hi] (relu, relu6, hardtanh); the
// EPILOGUE variants (GemmEpi, GemmWideEpi) take `epilogue.glsl`'s other codes, applied after
// the bias and the residual. Drivers that inline before they fold specialization constants
// compile the plain variants faster: their stores have no epilogue code.
layout(constant_id = 6) const uint ACT = 0;
// vec4 loads: VEC_A when A rows are contiguous along K with K and the strides multiples of 4;
// VEC_B (MODE 0) when B rows are contiguous along N with N and the strides multiples of 4.
layout(constant_id = 7) const uint VEC_A = 0;
layout(constant_id = 8) const uint VEC_B = 0;
// Split-K partial sums are written in fp32 (binding 3 read as C32) whatever T is, so that the
// summing pass adds fp32 partials.
layout(constant_id = 9) const uint PARTIAL_F32 = 0;
// Which rows and columns a thread computes. 0: thread (tx, ty) takes row quads ty and ty + TY
// and column quads tx and tx + TX (a warp spans 2 row quads by all columns). 1: warp tiles;
// each 32 threads cover a 32 x 64 block as 4 x 8 threads, a thread taking row quads r and
// r + 4 and column quads c and c + 8 of it, so that a warp's shared-memory reads touch half
// the bytes (one 128-byte wavefront for B).
layout(constant_id = 10) const uint WARP_TILE = 0;
// EPILOGUE variants: a residual (binding 4, laid out as C) added to (RESID 1) or multiplying
// (2) each result after its bias, fused at lowering (`epilogue.glsl`). Never with split-K,
// whose summing pass applies it.
layout(constant_id = 11) const uint RESID = 0;

#ifndef GEMM_BK
#define GEMM_BK 8
#endif
// Column quads per thread: 2 (an 8 x 8 register tile), or 4 in the wide variant (8 x 16, as
// 128 x 128 tiles on 128 threads, TX = 8 and TY = 16: twice the multiply-adds per
// shared-memory read). The wide variant needs WG >= BN.
#ifndef GEMM_CQ
#define GEMM_CQ 2
#endif
const uint CQ = GEMM_CQ;
const uint BK = GEMM_BK;
const uint BM = TY * 8;
const uint BN = TX * 4 * CQ;
const uint BM4 = TY * 2;
// A rows are padded by one vec4 so that the transposing stores into As are conflict-free.
#ifndef GEMM_APAD
#define GEMM_APAD 1
#endif
const uint AS_ROW = BM4 + GEMM_APAD;
const uint BN4 = TX * CQ;
// Elements (or vec4s) of A and B each thread loads per K step, and the largest of each
// (TX = TY = 8 on 64 threads; compile-time bounds for the unrolled loops).
const uint LA = (BM * BK) / WG;
const uint LB = (BN * BK) / WG;
const uint LA4 = (BM * BK / 4) / WG;
const uint LB4 = (BN * BK / 4) / WG;
const uint MAX_L = BK;
const uint MAX_L4 = BK / 4;
// A thread's B column is fixed (WG is a multiple of BN); its rows step by RB.
const uint RB = WG / BN;
// Each stage: As is [BK][AS_ROW] vec4, Bs is [BK][BN4] vec4.
const uint AS_STAGE = BK * AS_ROW;
const uint BS_STAGE = BK * BN4;

layout(std430, set = 0, binding = 0) readonly buffer A { T a[]; };
layout(std430, set = 0, binding = 1) readonly buffer Bm { T b[]; };
layout(std430, set = 0, binding = 2) readonly buffer Bias { T bias[]; };
layout(std430, set = 0, binding = 3) writeonly buffer C { T c[]; };
layout(std430, set = 0, binding = 3) writeonly buffer C32 { float c32[]; };
layout(std430, set = 0, binding = 0) readonly buffer A4 { T4 a4[]; };
layout(std430, set = 0, binding = 1) readonly buffer B4 { T4 b4[]; };
#ifdef EPILOGUE
layout(std430, set = 0, binding = 4) readonly buffer R { T resid[]; };
#endif

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

#ifdef EPILOGUE
#include "epilogue.glsl"
#endif

shared vec4 As[2 * AS_STAGE];
shared vec4 Bs[2 * BS_STAGE];

// Per-thread state: B column bookkeeping (fixed across K steps) and the prefetch registers.
uint b_col;
int b_iy;
int b_ix;
bool b_ok;
float ra[MAX_L];
float rb[MAX_L];
vec4 ra4[MAX_L4];
vec4 rb4[MAX_L4];
// The accumulators: 8 rows by CQ column quads.
ACC4 acc[8][CQ];

void store_c(uint i, float v) {
    if (PARTIAL_F32 == 1) {
        c32[i] = v;
    } else {
        c[i] = T(v);
    }
}

void load_tile(uint tid, uint m0, uint n0, uint a_off, uint b_off, uint k0, uint k_end) {
    if (VEC_A == 1) {
        [[unroll]] for (uint r = 0; r < MAX_L4; ++r) {
            if (r < LA4) {
                uint e = tid + r * WG;
                uint mm = m0 + e / (BK / 4);
                uint kk = k0 + (e % (BK / 4)) * 4;
                bool in_a = mm < pc.m && kk < k_end;
                ra4[r] = in_a ? vec4(a4[(a_off + mm * pc.sa_m + kk) / 4]) : vec4(0.0);
            }
        }
    } else {
        [[unroll]] for (uint r = 0; r < MAX_L; ++r) {
            if (r < LA) {
                uint e = tid + r * WG;
                uint mm = m0 + e / BK;
                uint kk = k0 + e % BK;
                bool in_a = mm < pc.m && kk < k_end;
                ra[r] = in_a ? float(a[a_off + mm * pc.sa_m + kk * pc.sa_k]) : 0.0;
            }
        }
    }
    if (VEC_B == 1) {
        [[unroll]] for (uint r = 0; r < MAX_L4; ++r) {
            if (r < LB4) {
                uint e = tid + r * WG;
                uint kk = k0 + e / BN4;
                uint nn = n0 + (e % BN4) * 4;
                bool in_b = nn < pc.n && kk < k_end;
                rb4[r] = in_b ? vec4(b4[(b_off + kk * pc.sb_k + nn) / 4]) : vec4(0.0);
            }
        }
        return;
    }
    uint kw = (KWS > 0) ? KWS : pc.kw;
    uint khw = ((KHS > 0) ? KHS : pc.kh) * kw;
    uint ohw = pc.oh * pc.ow;
    uint hw = pc.h * pc.w;
    [[unroll]] for (uint r = 0; r < MAX_L; ++r) {
        if (r < LB) {
            uint kk = k0 + tid / BN + r * RB;
            float v = 0.0;
            if (b_ok && kk < k_end) {
                if (MODE == 0) {
                    v = float(b[b_col + kk * pc.sb_k]);
                } else if (MODE == 2) {
                    v = float(b[b_col + kk * (pc.sb_n > 0 ? pc.sb_k : ohw)]);
                } else {
                    uint ci = kk / khw;
                    uint rem = kk - ci * khw;
                    uint ky = rem / kw;
                    uint kx = rem - ky * kw;
                    int iy = b_iy + int(ky * pc.dh);
                    int ix = b_ix + int(kx * pc.dw);
                    if (uint(iy) < pc.h && uint(ix) < pc.w) {
                        v = float(b[b_col + ci * hw + uint(iy) * pc.w + uint(ix)]);
                    }
                }
            }
            rb[r] = v;
        }
    }
}

// load_tile for a block inside A and B with vec4 rows (MODE 0, VEC_A, VEC_B): no bounds tests.
void load_tile_inside(uint tid, uint m0, uint n0, uint a_off, uint b_off, uint k0) {
    [[unroll]] for (uint r = 0; r < MAX_L4; ++r) {
        if (r < LA4) {
            uint e = tid + r * WG;
            uint mm = m0 + e / (BK / 4);
            uint kk = k0 + (e % (BK / 4)) * 4;
            ra4[r] = vec4(a4[(a_off + mm * pc.sa_m + kk) / 4]);
        }
    }
    [[unroll]] for (uint r = 0; r < MAX_L4; ++r) {
        if (r < LB4) {
            uint e = tid + r * WG;
            uint kk = k0 + e / BN4;
            uint nn = n0 + (e % BN4) * 4;
            rb4[r] = vec4(b4[(b_off + kk * pc.sb_k + nn) / 4]);
        }
    }
}

void store_tile(uint tid, uint stage) {
    uint as0 = stage * AS_STAGE;
    uint bs0 = stage * BS_STAGE;
    if (VEC_A == 1) {
        [[unroll]] for (uint r = 0; r < MAX_L4; ++r) {
            if (r < LA4) {
                uint e = tid + r * WG;
                uint mm = e / (BK / 4);
                uint kq = (e % (BK / 4)) * 4;
                uint base = as0 + kq * AS_ROW + mm / 4;
                uint lane = mm % 4;
                vec4 v = ra4[r];
                As[base][lane] = v.x;
                As[base + AS_ROW][lane] = v.y;
                As[base + 2 * AS_ROW][lane] = v.z;
                As[base + 3 * AS_ROW][lane] = v.w;
            }
        }
    } else {
        [[unroll]] for (uint r = 0; r < MAX_L; ++r) {
            if (r < LA) {
                uint e = tid + r * WG;
                uint mm = e / BK;
                uint kk = e % BK;
                As[as0 + kk * AS_ROW + mm / 4][mm % 4] = ra[r];
            }
        }
    }
    if (VEC_B == 1) {
        [[unroll]] for (uint r = 0; r < MAX_L4; ++r) {
            if (r < LB4) {
                Bs[bs0 + tid + r * WG] = rb4[r];
            }
        }
    } else {
        uint nn = tid % BN;
        [[unroll]] for (uint r = 0; r < MAX_L; ++r) {
            if (r < LB) {
                uint kk = tid / BN + r * RB;
                Bs[bs0 + kk * BN4 + nn / 4][nn % 4] = rb[r];
            }
        }
    }
}

// acc += the As x Bs products of one stage, for the thread's row quads qa0, qa1 and column
// quads qb0, qb1 (qb0 + j * TX in the wide variant).
void multiply_stage(uint as0, uint bs0, uint qa0, uint qa1, uint qb0, uint qb1) {
    [[unroll]] for (uint kk = 0; kk < BK; ++kk) {
        vec4 a0 = As[as0 + kk * AS_ROW + qa0];
        vec4 a1 = As[as0 + kk * AS_ROW + qa1];
#if GEMM_CQ == 2
        // (Written out: the loop form below compiles to a slower 8 x 8 kernel on NVIDIA.)
        vec4 b0 = Bs[bs0 + kk * BN4 + qb0];
        vec4 b1 = Bs[bs0 + kk * BN4 + qb1];
        [[unroll]] for (uint i = 0; i < 4; ++i) {
            acc[i][0] = fma(vec4(a0[i]), b0, acc[i][0]);
            acc[i][1] = fma(vec4(a0[i]), b1, acc[i][1]);
            acc[i + 4][0] = fma(vec4(a1[i]), b0, acc[i + 4][0]);
            acc[i + 4][1] = fma(vec4(a1[i]), b1, acc[i + 4][1]);
        }
#else
        vec4 bq[CQ];
        [[unroll]] for (uint j = 0; j < CQ; ++j) {
            bq[j] = Bs[bs0 + kk * BN4 + qb0 + j * TX];
        }
        [[unroll]] for (uint i = 0; i < 4; ++i) {
            [[unroll]] for (uint j = 0; j < CQ; ++j) {
                acc[i][j] = fma(vec4(a0[i]), bq[j], acc[i][j]);
                acc[i + 4][j] = fma(vec4(a1[i]), bq[j], acc[i + 4][j]);
            }
        }
#endif
    }
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    // The thread's row quads (vec4 indices into an As row) and column quads (into a Bs row).
    uint qa0 = tid / TX;
    uint qa1 = qa0 + TY;
    uint qb0 = tid % TX;
    uint qb1 = qb0 + TX;
    if (WARP_TILE == 1 && CQ == 2) {
        uint warp = tid / 32;
        uint lane = tid % 32;
        qa0 = (warp / (TX / 8)) * 8 + lane / 8;
        qa1 = qa0 + 4;
        qb0 = (warp % (TX / 8)) * 16 + lane % 8;
        qb1 = qb0 + 8;
    }
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

    {
        uint n = n0 + tid % BN;
        b_ok = n < pc.n;
        b_iy = 0;
        b_ix = 0;
        if (MODE == 0) {
            b_col = z * pc.sb_b + n * pc.sb_n;
        } else {
            uint img = n / ohw;
            uint p = n - img * ohw;
            uint oy = p / pc.ow;
            uint ox = p - oy * pc.ow;
            uint cin = pc.cin_g * (pc.cout / pc.m);
            // Plane base of input channel (z * cin_g) of this image.
            b_col = (img * cin + z * pc.cin_g) * pc.h * pc.w;
            if (MODE == 2) {
                b_col = pc.sb_n > 0 ? n * pc.sb_n : b_col + p;
            }
            b_iy = int(oy * pc.sh) - int(pc.ph);
            b_ix = int(ox * pc.sw) - int(pc.pw);
        }
    }

    [[unroll]] for (uint i = 0; i < 8; ++i) {
        acc[i][0] = vec4(0.0);
        acc[i][1] = vec4(0.0);
#if GEMM_CQ != 2
        [[unroll]] for (uint j = 2; j < CQ; ++j) {
            acc[i][j] = vec4(0.0);
        }
#endif
    }

    uint b_off = z * pc.sb_b;
    // Blocks inside A and B with vec4 rows and whole K steps (most of a large matmul) take a
    // loop without bounds tests or conditional loads: its last step reloads its own tile
    // into the idle stage instead of testing for a next one.
    bool inside = MODE == 0 && VEC_A == 1 && VEC_B == 1 && m0 + BM <= pc.m &&
                  n0 + BN <= pc.n && (k_end - k_begin) % BK == 0 && k_end > k_begin;
    if (inside) {
        uint steps = (k_end - k_begin) / BK;
        load_tile_inside(tid, m0, n0, a_off, b_off, k_begin);
        store_tile(tid, 0);
        barrier();
        uint stage = 0;
        for (uint s = 0; s < steps; ++s) {
            load_tile_inside(tid, m0, n0, a_off, b_off, k_begin + min(s + 1, steps - 1) * BK);
            uint as0 = stage * AS_STAGE;
            uint bs0 = stage * BS_STAGE;
            multiply_stage(as0, bs0, qa0, qa1, qb0, qb1);
            store_tile(tid, stage ^ 1);
            barrier();
            stage ^= 1;
        }
    } else {
        load_tile(tid, m0, n0, a_off, b_off, k_begin, k_end);
        store_tile(tid, 0);
        barrier();
        uint stage = 0;
        for (uint k0 = k_begin; k0 < k_end; k0 += BK) {
            bool more = k0 + BK < k_end;
            // The next tile's global loads are in flight while this stage is multiplied.
            if (more) {
                load_tile(tid, m0, n0, a_off, b_off, k0 + BK, k_end);
            }
            uint as0 = stage * AS_STAGE;
            uint bs0 = stage * BS_STAGE;
            multiply_stage(as0, bs0, qa0, qa1, qb0, qb1);
            // The other stage was last read before the previous barrier.
            if (more) {
                store_tile(tid, stage ^ 1);
            }
            barrier();
            stage ^= 1;
        }
    }

    [[unroll]] for (uint i = 0; i < 8; ++i) {
        uint mm = m0 + ((i < 4) ? (qa0 * 4 + i) : (qa1 * 4 + i - 4));
        [[unroll]] for (uint j = 0; j < CQ; ++j) {
#if GEMM_CQ == 2
            uint nb = n0 + ((j == 0) ? qb0 : qb1) * 4;
#else
            uint nb = n0 + (qb0 + j * TX) * 4;
#endif
#ifdef EPILOGUE
            // Bias and residual per result, the activation on the four at once.
            vec4 v = acc[i][j];
            uvec4 at;
            [[unroll]] for (uint q = 0; q < 4; ++q) {
                uint nn = nb + q;
                if (mm < pc.m && nn < pc.n) {
                    if (MODE == 0) {
                        at[q] = z * pc.sc_b + mm * pc.sc_m + nn;
                        if (add_bias) v[q] += float(bias[nn]);
                    } else {
                        uint co = z * pc.m + mm;
                        uint img = nn / ohw;
                        at[q] = (img * pc.cout + co) * ohw + (nn - img * ohw);
                        if (add_bias) v[q] += float(bias[co]);
                    }
                    if (RESID != 0) v[q] = combine(v[q], float(resid[at[q]]));
                }
            }
            v = activate4(v);
            [[unroll]] for (uint q = 0; q < 4; ++q) {
                if (mm < pc.m && nb + q < pc.n) {
                    store_c(c_off + at[q], v[q]);
                }
            }
#else
            [[unroll]] for (uint q = 0; q < 4; ++q) {
                uint nn = nb + q;
                float v = acc[i][j][q];
                if (mm < pc.m && nn < pc.n) {
                    if (MODE == 0) {
                        if (add_bias) v += float(bias[nn]);
                        if (ACT == 1) v = clamp(v, pc.act_lo, pc.act_hi);
                        store_c(c_off + z * pc.sc_b + mm * pc.sc_m + nn, v);
                    } else {
                        uint co = z * pc.m + mm;
                        if (add_bias) v += float(bias[co]);
                        if (ACT == 1) v = clamp(v, pc.act_lo, pc.act_hi);
                        uint img = nn / ohw;
                        uint p = nn - img * ohw;
                        store_c(c_off + (img * pc.cout + co) * ohw + p, v);
                    }
                }
            }
#endif
        }
    }
}
