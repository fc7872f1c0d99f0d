#version 450
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
// GEMM on cooperative matrices (VK_KHR_cooperative_matrix): C[m][n] = sum_k A[m][k] * B[k][n]
// (+ bias per column, or per row with BIAS_ROW, then `epilogue.glsl`'s residual and
// activation), A and B fp16, accumulation in fp32, C fp16. Used for matmul, bmm and linear on
// fp16 tensors.
//
// A work group of four subgroups computes a BM x BN block, stepping K by BK through two
// shared-memory stages (the next block's global loads are in flight in registers while the
// current stage is multiplied). The subgroups form a 2 x 2 grid; each owns a
// (BM / 2) x (BN / 2) tile of FM x FN accumulator fragments of TM x TN, the fragment shape
// the device reports (spec constants 1-3). Fragments of A and B are loaded from shared
// memory; global loads are 16 bytes (8 halves) where rows allow it (VEC), else scalar.
//
// A is row-major (K contiguous, row stride sa_m). B is row-major (N contiguous, row stride
// sb_k) or, with B_T, the transpose of a row-major [N][K] matrix (linear's weight: K
// contiguous, row stride sb_k): its block is then stored N-major and loaded column-major.
// Out-of-range rows and columns of A and B load as zero, so any M, N, K works; the epilogue
// writes through a per-subgroup shared fragment with bounds checks (fragments inside C with
// 16-byte rows: one 16-byte store per lane).
//
// CONV: conv2d with stride 1 as an implicit GEMM over conv_pack.comp's operands (per image
// z): A = the weights as [c_out][tap][cp] (K = taps * cp), B^T row n = output pixel
// (oy, ox) = (n / ow, n % ow), whose K = (tap, c) element is the padded channels-last input at
// pixel (oy + ky * dh, ox + kx * dw), channel c; C = [c_out][oh * ow] per image (NCHW). The
// lowering sets B_T, VEC and BIAS_ROW with it.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint TM = 16;
layout(constant_id = 2) const uint TN = 16;
layout(constant_id = 3) const uint TK = 16;
layout(constant_id = 4) const uint B_T = 0;
layout(constant_id = 5) const uint VEC = 0;
layout(constant_id = 6) const uint ACT = 0;
// The bias is per row (conv2d: per output channel) instead of per column.
layout(constant_id = 7) const uint BIAS_ROW = 0;
layout(constant_id = 8) const uint CONV = 0;
// The block: BM x BN (multiples of 32, at most 128; 128 x 128 in CONV mode).
layout(constant_id = 9) const uint BM = 128;
layout(constant_id = 10) const uint BN = 128;
// `epilogue.glsl`'s residual (binding 4, laid out as C): 1 added, 2 multiplying.
layout(constant_id = 11) const uint RESID = 0;
// Threads per work group (spec constant 0): four subgroups.
const uint WG = gl_WorkGroupSize.x;

const uint BK = 32;
const uint WM = BM / 2;
const uint WN = BN / 2;
const uint FM = WM / TM;
const uint FN = WN / TN;
// Shared rows are padded by 8 halves (16 bytes): fragment loads stay 16-byte aligned and
// rows fall on different banks.
const uint PAD = 8;
// A stage: BM rows of BK halves. B stage: BK rows of BN halves, or with B_T BN rows of BK.
const uint A_ROW = BK + PAD;
const uint B_ROW = (B_T == 1) ? (BK + PAD) : (BN + PAD);
const uint A_STAGE = BM * A_ROW;
const uint B_STAGE = (B_T == 1) ? (BN * (BK + PAD)) : (BK * (BN + PAD));
// 16-byte chunks of a block each thread loads per K step.
const uint LA = (BM * BK / 8) / WG;
const uint LB = (BN * BK / 8) / WG;
// Work groups have at least 64 threads (four subgroups of 16 or more).
const uint MAX_L = (128 * 32 / 8) / 64;

layout(std430, set = 0, binding = 0) readonly buffer A { float16_t a[]; };
layout(std430, set = 0, binding = 1) readonly buffer Bm { float16_t b[]; };
layout(std430, set = 0, binding = 2) readonly buffer Bias { float16_t bias[]; };
layout(std430, set = 0, binding = 3) writeonly buffer C { float16_t c[]; };
layout(std430, set = 0, binding = 3) writeonly buffer C8 { uvec4 c8[]; };
layout(std430, set = 0, binding = 0) readonly buffer A8 { uvec4 a8[]; };
layout(std430, set = 0, binding = 1) readonly buffer B8 { uvec4 b8[]; };
layout(std430, set = 0, binding = 4) readonly buffer R { float16_t resid[]; };

layout(push_constant) uniform Params {
    uint m;
    uint n;
    uint k;
    uint sa_b;
    uint sa_m;
    uint sb_b;
    uint sb_k;
    uint sc_b;
    uint sc_m;
    uint has_bias;
    float act_lo;
    float act_hi;
    // CONV: channels per padded pixel, padded image width, output width, kernel width,
    // dilation.
    uint cp;
    uint wp;
    uint ow;
    uint kw;
    uint dh;
    uint dw;
} pc;

#include "epilogue.glsl"

// Stages of A and B as 16-byte chunks (8 halves each).
shared uvec4 As[2 * A_STAGE / 8];
shared uvec4 Bs[2 * B_STAGE / 8];
// One TM x TN fp32 fragment per subgroup, for the epilogue.
shared float Cs[4 * TM * TN];

uvec4 ra[MAX_L];
uvec4 rb[MAX_L];
coopmat<float, gl_ScopeSubgroup, TM, TN, gl_MatrixUseAccumulator> acc[FM * FN];

// Eight halves of row `row` from column `col` of a row-major matrix with `rows` x `cols`
// elements, zero outside it.
uvec4 load8(bool is_a, uint base, uint stride, uint row, uint col, uint rows, uint cols) {
    if (row >= rows || col >= cols) {
        return uvec4(0);
    }
    uint at = base + row * stride + col;
    if (VEC == 1 && col + 8 <= cols) {
        return is_a ? a8[at / 8] : b8[at / 8];
    }
    float16_t h[8];
    [[unroll]] for (uint i = 0; i < 8; ++i) {
        bool ok = col + i < cols;
        h[i] = ok ? (is_a ? a[at + i] : b[at + i]) : float16_t(0.0);
    }
    return uvec4(packFloat2x16(f16vec2(h[0], h[1])), packFloat2x16(f16vec2(h[2], h[3])),
                 packFloat2x16(f16vec2(h[4], h[5])), packFloat2x16(f16vec2(h[6], h[7])));
}

// CONV: eight channels of B^T row n (an output pixel) at K index kk (a multiple of 8, within
// one tap since cp is a multiple of 8), zero outside the product.
uvec4 load_pixel8(uint base, uint n, uint kk) {
    if (n >= pc.n || kk >= pc.k) {
        return uvec4(0);
    }
    uint tap = kk / pc.cp;
    uint c = kk - tap * pc.cp;
    uint ky = tap / pc.kw;
    uint kx = tap - ky * pc.kw;
    uint oy = n / pc.ow;
    uint ox = n - oy * pc.ow;
    return b8[(base + ((oy + ky * pc.dh) * pc.wp + ox + kx * pc.dw) * pc.cp + c) / 8];
}

void load_block(uint tid, uint m0, uint n0, uint a_off, uint b_off, uint k0) {
    [[unroll]] for (uint r = 0; r < MAX_L; ++r) {
        if (r < LA) {
            uint e = tid + r * WG;
            uint row = e / (BK / 8);
            uint col = (e % (BK / 8)) * 8;
            ra[r] = load8(true, a_off, pc.sa_m, m0 + row, k0 + col, pc.m, pc.k);
        }
        if (r < LB) {
            uint e = tid + r * WG;
            if (CONV == 1) {
                uint row = e / (BK / 8);
                uint col = (e % (BK / 8)) * 8;
                rb[r] = load_pixel8(b_off, n0 + row, k0 + col);
            } else if (B_T == 1) {
                uint row = e / (BK / 8);
                uint col = (e % (BK / 8)) * 8;
                rb[r] = load8(false, b_off, pc.sb_k, n0 + row, k0 + col, pc.n, pc.k);
            } else {
                uint row = e / (BN / 8);
                uint col = (e % (BN / 8)) * 8;
                rb[r] = load8(false, b_off, pc.sb_k, k0 + row, n0 + col, pc.k, pc.n);
            }
        }
    }
}

// load_block for a block inside A and B with 16-byte rows (not CONV, VEC): no bounds tests.
void load_block_inside(uint tid, uint m0, uint n0, uint a_off, uint b_off, uint k0) {
    [[unroll]] for (uint r = 0; r < MAX_L; ++r) {
        if (r < LA) {
            uint e = tid + r * WG;
            uint row = e / (BK / 8);
            uint col = (e % (BK / 8)) * 8;
            ra[r] = a8[(a_off + (m0 + row) * pc.sa_m + k0 + col) / 8];
        }
        if (r < LB) {
            uint e = tid + r * WG;
            if (B_T == 1) {
                uint row = e / (BK / 8);
                uint col = (e % (BK / 8)) * 8;
                rb[r] = b8[(b_off + (n0 + row) * pc.sb_k + k0 + col) / 8];
            } else {
                uint row = e / (BN / 8);
                uint col = (e % (BN / 8)) * 8;
                rb[r] = b8[(b_off + (k0 + row) * pc.sb_k + n0 + col) / 8];
            }
        }
    }
}

void store_block(uint tid, uint stage) {
    [[unroll]] for (uint r = 0; r < MAX_L; ++r) {
        if (r < LA) {
            uint e = tid + r * WG;
            uint row = e / (BK / 8);
            uint chunk = e % (BK / 8);
            As[(stage * A_STAGE + row * A_ROW) / 8 + chunk] = ra[r];
        }
        if (r < LB) {
            uint e = tid + r * WG;
            uint per_row = (B_T == 1) ? (BK / 8) : (BN / 8);
            uint row = e / per_row;
            uint chunk = e % per_row;
            Bs[(stage * B_STAGE + row * B_ROW) / 8 + chunk] = rb[r];
        }
    }
}

// acc += the products of one stage of As and Bs for subgroup (wm, wn) of the 2 x 2 grid.
void multiply_stage(uint stage, uint wm, uint wn) {
    [[unroll]] for (uint kk = 0; kk < BK; kk += TK) {
        coopmat<float16_t, gl_ScopeSubgroup, TM, TK, gl_MatrixUseA> fa[FM];
        coopmat<float16_t, gl_ScopeSubgroup, TK, TN, gl_MatrixUseB> fb[FN];
        [[unroll]] for (uint i = 0; i < FM; ++i) {
            uint at = stage * A_STAGE + (wm * WM + i * TM) * A_ROW + kk;
            coopMatLoad(fa[i], As, at / 8, A_ROW / 8, gl_CooperativeMatrixLayoutRowMajor);
        }
        [[unroll]] for (uint j = 0; j < FN; ++j) {
            if (B_T == 1) {
                uint at = stage * B_STAGE + (wn * WN + j * TN) * B_ROW + kk;
                coopMatLoad(fb[j], Bs, at / 8, B_ROW / 8, gl_CooperativeMatrixLayoutColumnMajor);
            } else {
                uint at = stage * B_STAGE + kk * B_ROW + wn * WN + j * TN;
                coopMatLoad(fb[j], Bs, at / 8, B_ROW / 8, gl_CooperativeMatrixLayoutRowMajor);
            }
        }
        [[unroll]] for (uint i = 0; i < FM; ++i) {
            [[unroll]] for (uint j = 0; j < FN; ++j) {
                acc[i * FN + j] = coopMatMulAdd(fa[i], fb[j], acc[i * FN + j]);
            }
        }
    }
}

// An output element's final value: the accumulator `v` of C[row][col] (at `at` in C), plus
// its bias, then `epilogue.glsl`'s residual and activation.
float finish(float v, uint row, uint col, uint at) {
    if (pc.has_bias == 1) {
        v += float(bias[(BIAS_ROW == 1) ? row : col]);
    }
    if (RESID != 0) {
        v = combine(v, float(resid[at]));
    }
    if (ACT != 0) {
        v = activate(v);
    }
    return v;
}

void main() {
    // The block is split among exactly four subgroups; a driver that picked another subgroup
    // size than the one the work group was sized for computes nothing (the per-device check
    // then fails) rather than indexing past the block.
    if (gl_NumSubgroups != 4u) {
        return;
    }
    uint tid = gl_LocalInvocationID.x;
    uint sg = gl_SubgroupID;
    uint wm = sg / 2;
    uint wn = sg % 2;
    uint m0 = gl_WorkGroupID.y * BM;
    uint n0 = gl_WorkGroupID.x * BN;
    uint z = gl_WorkGroupID.z;
    uint a_off = z * pc.sa_b;
    uint b_off = z * pc.sb_b;

    [[unroll]] for (uint i = 0; i < FM * FN; ++i) {
        acc[i] = coopmat<float, gl_ScopeSubgroup, TM, TN, gl_MatrixUseAccumulator>(0.0);
    }

    // Blocks inside A and B with 16-byte rows and whole K steps take a loop without bounds
    // tests or conditional loads (its last step reloads its own block into the idle stage):
    // the tests cost more instructions than the products on NVIDIA.
    bool inside = CONV == 0 && VEC == 1 && m0 + BM <= pc.m && n0 + BN <= pc.n &&
                  pc.k % BK == 0 && pc.k > 0;
    if (inside) {
        uint steps = pc.k / BK;
        load_block_inside(tid, m0, n0, a_off, b_off, 0);
        store_block(tid, 0);
        barrier();
        uint stage = 0;
        for (uint s = 0; s < steps; ++s) {
            load_block_inside(tid, m0, n0, a_off, b_off, min(s + 1, steps - 1) * BK);
            multiply_stage(stage, wm, wn);
            store_block(tid, stage ^ 1);
            barrier();
            stage ^= 1;
        }
    } else {
        load_block(tid, m0, n0, a_off, b_off, 0);
        store_block(tid, 0);
        barrier();
        uint stage = 0;
        for (uint k0 = 0; k0 < pc.k; k0 += BK) {
            bool more = k0 + BK < pc.k;
            if (more) {
                load_block(tid, m0, n0, a_off, b_off, k0 + BK);
            }
            multiply_stage(stage, wm, wn);
            // The other stage was last read before the previous barrier.
            if (more) {
                store_block(tid, stage ^ 1);
            }
            barrier();
            stage ^= 1;
        }
    }

    // Epilogue: each fragment through this subgroup's shared slot, bias and clamp, bounds.
    uint lane = gl_SubgroupInvocationID;
    uint lanes = gl_SubgroupSize;
    uint slot = sg * TM * TN;
    [[unroll]] for (uint i = 0; i < FM; ++i) {
        [[unroll]] for (uint j = 0; j < FN; ++j) {
            uint r0 = m0 + wm * WM + i * TM;
            uint c0 = n0 + wn * WN + j * TN;
            if (r0 >= pc.m || c0 >= pc.n) {
                continue;
            }
            coopMatStore(acc[i * FN + j], Cs, slot, TN, gl_CooperativeMatrixLayoutRowMajor);
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            // A fragment inside C whose rows start on 16 bytes, eight elements a lane: one
            // 16-byte store each.
            bool whole = r0 + TM <= pc.m && c0 + TN <= pc.n && TN % 8 == 0 &&
                         lanes * 8 == TM * TN && (pc.sc_m | (z * pc.sc_b + c0)) % 8 == 0;
            if (CONV == 0 && whole) {
                uint e0 = lane * 8;
                uint row = r0 + e0 / TN;
                uint col = c0 + e0 % TN;
                float h[8];
                uint at = z * pc.sc_b + row * pc.sc_m + col;
                [[unroll]] for (uint q = 0; q < 8; ++q) {
                    h[q] = finish(Cs[slot + e0 + q], row, col + q, at + q);
                }
                c8[(z * pc.sc_b + row * pc.sc_m + col) / 8] =
                    uvec4(packFloat2x16(f16vec2(h[0], h[1])), packFloat2x16(f16vec2(h[2], h[3])),
                          packFloat2x16(f16vec2(h[4], h[5])), packFloat2x16(f16vec2(h[6], h[7])));
            } else {
                for (uint e = lane; e < TM * TN; e += lanes) {
                    uint row = r0 + e / TN;
                    uint col = c0 + e % TN;
                    if (row < pc.m && col < pc.n) {
                        uint at = z * pc.sc_b + row * pc.sc_m + col;
                        c[at] = float16_t(finish(Cs[slot + e], row, col, at));
                    }
                }
            }
            subgroupMemoryBarrierShared();
            subgroupBarrier();
        }
    }
}

// kernel: GemmCoop fp16-by-nature
