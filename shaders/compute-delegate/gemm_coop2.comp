#version 450
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
// GEMM on workgroup-scope cooperative matrices (VK_NV_cooperative_matrix2): the same contract
// as gemm_coop.comp (A, B fp16, fp32 accumulation, C fp16, bias per column or per row), and
// `epilogue.glsl`'s whole epilogue (a residual laid out as C, then an activation), with the tiling inside a work group left to the driver. A work group computes a BM x BN block of
// C, stepping K by BK; tensor layouts bound each load and store, so rows and columns outside
// the matrices read as zero and are not written.
//
// A is row-major (row stride sa_m). B is row-major [K][N] (row stride sb_k) or, with B_T, a
// row-major [N][K] read through a transposing view.
//
// NORM: a layer norm of each row of A folded in (never split, never with a residual): the
// work group first computes its rows' mean and 1 / sqrt(variance + EPS) over all of K, and
// each result is rstd * (acc - mean * colsum[col]) before its bias, where B holds the norm's
// scale already and colsum (binding 4, fp32) the sums of B along K.
//
// Split-K (PARTIAL): gl_WorkGroupID.z = batch * splits + split; split s covers
// k in [s * k_split, (s + 1) * k_split) and writes its fp32 partial sums c_split elements
// further on (binding 3 read as fp32; a later pass sums, clamps and narrows them); split 0
// adds the bias.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint BM = 128;
layout(constant_id = 2) const uint BN = 128;
layout(constant_id = 3) const uint BK = 32;
layout(constant_id = 4) const uint B_T = 0;
// `epilogue.glsl`'s activation code (0 none, 1 clamp, 2-5 GELU, GELU tanh, SiLU, hardswish).
layout(constant_id = 5) const uint ACT = 0;
// The bias is per row (conv2d: per output channel) instead of per column.
layout(constant_id = 6) const uint BIAS_ROW = 0;
// K steps unrolled in the fast path.
layout(constant_id = 7) const uint UNROLL = 4;
layout(constant_id = 8) const uint PARTIAL = 0;
// `epilogue.glsl`'s residual (binding 4, laid out as C): 1 added, 2 multiplying. Never with
// PARTIAL, whose summing pass applies the epilogue.
layout(constant_id = 9) const uint RESID = 0;
layout(constant_id = 10) const uint NORM = 0;
layout(constant_id = 11) const float EPS = 1e-5;

layout(std430, set = 0, binding = 0) readonly buffer A { float16_t a[]; };
layout(std430, set = 0, binding = 0) readonly buffer A8 { uvec4 a8[]; };
layout(std430, set = 0, binding = 1) readonly buffer Bm { float16_t b[]; };
layout(std430, set = 0, binding = 2) readonly buffer Bias { float16_t bias[]; };
layout(std430, set = 0, binding = 3) writeonly buffer C { float16_t c[]; };
layout(std430, set = 0, binding = 3) writeonly buffer C32 { float c32[]; };
layout(std430, set = 0, binding = 4) readonly buffer R { float16_t resid[]; };
layout(std430, set = 0, binding = 4) readonly buffer CS { float colsum[]; };

const uint WG = gl_WorkGroupSize.x;
// NORM: each row's mean and rstd, and the threads' partial sums they come from.
shared float row_mean[NORM == 1 ? BM : 1];
shared float row_rstd[NORM == 1 ? BM : 1];
shared float part_s[NORM == 1 ? WG : 1];
shared float part_q[NORM == 1 ? WG : 1];

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
    uint splits;
    uint k_split;
    uint c_split;
} pc;

#include "epilogue.glsl"

// The epilogue per element: bias of the element's column (or row), then (final results only)
// the residual of its position in C and the activation.
float epilogue(const in uint row, const in uint col, const in float v, const in uint m0,
               const in uint n0, const in uint add_bias, const in uint c_off) {
    float r = v;
    uint i = m0 + row;
    uint j = n0 + col;
    if (NORM == 1) {
        float cs = j < pc.n ? colsum[j] : 0.0;
        r = row_rstd[row] * (v - row_mean[row] * cs);
    }
    if (add_bias == 1) {
        uint at = (BIAS_ROW == 1) ? i : j;
        if (at < ((BIAS_ROW == 1) ? pc.m : pc.n)) {
            r += float(bias[at]);
        }
    }
    if (PARTIAL == 0) {
        if (RESID != 0 && i < pc.m && j < pc.n) {
            r = combine(r, float(resid[c_off + i * pc.sc_m + j]));
        }
        if (ACT != 0) {
            r = activate(r);
        }
    }
    return r;
}

// Adds the eight halves of `u` to the sum `s` and their squares to `q`.
void add8(const in uvec4 u, inout float s, inout float q) {
    [[unroll]] for (uint w = 0; w < 4; ++w) {
        vec2 h = unpackHalf2x16(u[w]);
        s += h.x + h.y;
        q += h.x * h.x + h.y * h.y;
    }
}

// NORM: the mean and rstd of rows m0.. m0 + BM of A (of batch offset a_off) over its k
// columns, into row_mean and row_rstd; T invocations a row (reading 16 bytes each at a time
// where rows start on 16 bytes), their sums combined in shared memory.
void row_stats(const in uint m0, const in uint a_off) {
    const uint T = WG >= BM ? WG / BM : 1;
    const uint R = WG / T;
    uint tid = gl_LocalInvocationIndex;
    uint lane = tid % T;
    for (uint r0 = 0; r0 < BM; r0 += R) {
        uint r = r0 + tid / T;
        uint i = m0 + r;
        float s = 0.0;
        float q = 0.0;
        if (r < BM && i < pc.m) {
            uint base = a_off + i * pc.sa_m;
            if ((base | pc.k) % 8 == 0) {
                for (uint c = lane; c < pc.k / 8; c += T) {
                    add8(a8[base / 8 + c], s, q);
                }
            } else {
                for (uint kk = lane; kk < pc.k; kk += T) {
                    float v = float(a[base + kk]);
                    s += v;
                    q += v * v;
                }
            }
        }
        part_s[tid] = s;
        part_q[tid] = q;
        barrier();
        if (lane == 0 && r < BM) {
            float ts = 0.0;
            float tq = 0.0;
            for (uint l = 0; l < T; ++l) {
                ts += part_s[tid + l];
                tq += part_q[tid + l];
            }
            float mean = ts / float(pc.k);
            float var = max(tq / float(pc.k) - mean * mean, 0.0);
            row_mean[r] = mean;
            row_rstd[r] = inversesqrt(var + EPS);
        }
        barrier();
    }
}

void main() {
    uint m0 = gl_WorkGroupID.y * BM;
    uint n0 = gl_WorkGroupID.x * BN;
    // Without PARTIAL: one split over all of K (the branch folds away).
    uint z = gl_WorkGroupID.z;
    uint split = 0;
    uint k_begin = 0;
    uint k_end = pc.k;
    if (PARTIAL == 1) {
        z = gl_WorkGroupID.z / pc.splits;
        split = gl_WorkGroupID.z - z * pc.splits;
        k_begin = split * pc.k_split;
        k_end = min(pc.k, k_begin + pc.k_split);
    }

    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> la =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lb =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lc =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    la = setTensorLayoutDimensionNV(la, pc.m, k_end);
    la = setTensorLayoutStrideNV(la, pc.sa_m, 1);
    if (B_T == 1) {
        lb = setTensorLayoutDimensionNV(lb, pc.n, k_end);
    } else {
        lb = setTensorLayoutDimensionNV(lb, k_end, pc.n);
    }
    lb = setTensorLayoutStrideNV(lb, pc.sb_k, 1);
    lc = setTensorLayoutDimensionNV(lc, pc.m, pc.n);
    lc = setTensorLayoutStrideNV(lc, pc.sc_m, 1);
    tensorViewNV<2, false, 1, 0> transposed = createTensorViewNV(2, false, 1, 0);

    uint a_off = z * pc.sa_b;
    uint b_off = z * pc.sb_b;
    if (NORM == 1) {
        row_stats(m0, a_off);
    }
    coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc =
        coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(0.0);
    // The fast path: the block and every K step lie inside A and B, and every row starts on 16
    // bytes, so the loads need no clamping and may be 16-byte wide. Most blocks of a large
    // product take it; the edge blocks and odd shapes take the clamped loop below.
    bool inside = m0 + BM <= pc.m && n0 + BN <= pc.n && (k_end - k_begin) % BK == 0 &&
                  (pc.sa_m | pc.sb_k | a_off | b_off | k_begin) % 8 == 0;
    if (inside) {
        tensorLayoutNV<2> ua = createTensorLayoutNV(2);
        tensorLayoutNV<2> ub = createTensorLayoutNV(2);
        ua = setTensorLayoutDimensionNV(ua, pc.m, k_end);
        // The masks tell the compiler what the test above established.
        ua = setTensorLayoutStrideNV(ua, pc.sa_m & ~7u, 1);
        if (B_T == 1) {
            ub = setTensorLayoutDimensionNV(ub, pc.n, k_end);
        } else {
            ub = setTensorLayoutDimensionNV(ub, k_end, pc.n);
        }
        ub = setTensorLayoutStrideNV(ub, pc.sb_k & ~7u, 1);
        a_off &= ~7u;
        b_off &= ~7u;
        uint k0 = k_begin & ~7u;
        for (; k0 + UNROLL * BK <= k_end; k0 += UNROLL * BK) {
            [[unroll]] for (uint u = 0; u < UNROLL; ++u) {
                uint kk = k0 + u * BK;
                coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> fa;
                coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> fb;
                coopMatLoadTensorNV(fa, a, a_off, sliceTensorLayoutNV(ua, m0, BM, kk, BK));
                if (B_T == 1) {
                    coopMatLoadTensorNV(fb, b, b_off, sliceTensorLayoutNV(ub, n0, BN, kk, BK),
                                        transposed);
                } else {
                    coopMatLoadTensorNV(fb, b, b_off, sliceTensorLayoutNV(ub, kk, BK, n0, BN));
                }
                acc = coopMatMulAdd(fa, fb, acc);
            }
        }
        for (; k0 < k_end; k0 += BK) {
            coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> fa;
            coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> fb;
            coopMatLoadTensorNV(fa, a, a_off, sliceTensorLayoutNV(ua, m0, BM, k0, BK));
            if (B_T == 1) {
                coopMatLoadTensorNV(fb, b, b_off, sliceTensorLayoutNV(ub, n0, BN, k0, BK),
                                    transposed);
            } else {
                coopMatLoadTensorNV(fb, b, b_off, sliceTensorLayoutNV(ub, k0, BK, n0, BN));
            }
            acc = coopMatMulAdd(fa, fb, acc);
        }
    } else {
        for (uint k0 = k_begin; k0 < k_end; k0 += BK) {
            coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> fa;
            coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> fb;
            coopMatLoadTensorNV(fa, a, a_off, sliceTensorLayoutNV(la, m0, BM, k0, BK));
            if (B_T == 1) {
                coopMatLoadTensorNV(fb, b, b_off, sliceTensorLayoutNV(lb, n0, BN, k0, BK),
                                    transposed);
            } else {
                coopMatLoadTensorNV(fb, b, b_off, sliceTensorLayoutNV(lb, k0, BK, n0, BN));
            }
            acc = coopMatMulAdd(fa, fb, acc);
        }
    }
    uint add_bias = (pc.has_bias == 1 && split == 0) ? 1 : 0;
    if (add_bias == 1 || NORM == 1 || ((ACT != 0 || RESID != 0) && PARTIAL == 0)) {
        coopMatPerElementNV(acc, acc, epilogue, m0, n0, add_bias, z * pc.sc_b);
    }
    if (PARTIAL == 1) {
        coopMatStoreTensorNV(acc, c32, split * pc.c_split + z * pc.sc_b,
                             sliceTensorLayoutNV(lc, m0, BM, n0, BN));
        return;
    }
    coopmat<float16_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> res =
        coopmat<float16_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(acc);
    coopMatStoreTensorNV(res, c, z * pc.sc_b, sliceTensorLayoutNV(lc, m0, BM, n0, BN));
}

// kernel: GemmCoop2 fp16-by-nature
