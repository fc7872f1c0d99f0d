#version 450
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require
// attend.comp's attention on workgroup-scope cooperative matrices (VK_NV_cooperative_matrix2),
// fp16 operands and fp32 scores, sums and output accumulators:
//   y[b, i, :] = sum_j softmax_j(scale * q[b, i, :] . k[b, j, :] + bias0[b, i, j]
//                                + bias1[b, i, j]) v[b, j, :]
// with the same operands, layout table, push block and CAUSAL mode as attend.comp, except that
// every operand but the biases has a column stride of 1 (the graph's pass checks it).
//
// One work group per (b, block of BR queries). Per block of BC keys: the scores S = Q K^T on the
// matrices, masked and biased per element; the running row maximum M (a row reduction), the
// weights P = exp(S - M) and the rescale exp(Mold - M); the row sums L through P times a
// matrix of ones; O = O * rescale + P V. The row statistics are BR x BC matrices whose rows
// repeat one value (reductions "smear" them to BR x VAL_D where O needs them). Scores that are
// masked are -inf, while M starts at -FLT_MAX / 2, so a row masked so far weighs nothing and
// never makes a NaN; a row with every score -inf ends with L = 0: 0 with `guard`, NaN without.

layout(local_size_x_id = 0) in;
// Head sizes of q and k (d) and of v (e), and the block shapes: multiples of 16, fitting the
// device's flexible dimensions (the graph's pass checks them).
layout(constant_id = 1) const uint HEAD_D = 64;
layout(constant_id = 2) const uint VAL_D = 64;
layout(constant_id = 3) const uint BR = 64;
layout(constant_id = 4) const uint BC = 64;
layout(constant_id = 5) const uint BIASES = 0;
layout(constant_id = 6) const uint CAUSAL = 0;

layout(std430, set = 0, binding = 0) readonly buffer Q { float16_t q[]; };
layout(std430, set = 0, binding = 1) readonly buffer K { float16_t k[]; };
layout(std430, set = 0, binding = 2) readonly buffer V { float16_t v[]; };
layout(std430, set = 0, binding = 3) readonly buffer B0 { float16_t bias0[]; };
// CAUSAL: the position.
layout(std430, set = 0, binding = 3) readonly buffer Pos { int pos[]; };
layout(std430, set = 0, binding = 4) readonly buffer B1 { float16_t bias1[]; };
// Per operand (q, k, v, bias0, bias1, y): off, s0, s1, s2, srow, scol.
layout(std430, set = 0, binding = 5) readonly buffer Layout { uint lay[]; };
layout(std430, set = 0, binding = 6) writeonly buffer Y { float16_t y[]; };

// Rust: `kernels::push::AttendCoop2Push`, generated from this block (attend.comp's fields).
layout(push_constant) uniform Params {
    // The batch's items times the query blocks of each.
    uint items;
    uint qblocks;
    uint sq;
    uint sk;
    float scale;
    uint guard;
    // The batch's inner dims (its outer one is the rest).
    uint n1;
    uint n2;
    // CAUSAL: the first query's position, `plus` (+ pos[0] where `has_pos`).
    int plus;
    uint has_pos;
} pc;

const uint OP_Q = 0;
const uint OP_K = 1;
const uint OP_V = 2;
const uint OP_B0 = 3;
const uint OP_B1 = 4;
const uint OP_Y = 5;

// The block being scored: its first query and key, the first query's position (CAUSAL), and
// the biases' element (0, 0) of the batch item. Read by `masked`.
uint g_row0;
uint g_key0;
int g_start;
uint g_b0;
uint g_b1;

// Operand op's element (0, 0) of batch item (i0, i1, i2).
uint base(uint op, uvec3 i) {
    uint o = op * 6;
    return lay[o] + i.x * lay[o + 1] + i.y * lay[o + 2] + i.z * lay[o + 3];
}

// A score, scaled and biased, or -inf where its key is past the keys or unseen (CAUSAL).
float masked(const in uint row, const in uint col, const in float s) {
    const float NEG_INF = uintBitsToFloat(0xff800000u);
    uint query = g_row0 + row;
    uint key = g_key0 + col;
    bool seen = key < pc.sk && (CAUSAL == 0 || int(key) <= g_start + int(query));
    if (!seen) {
        return NEG_INF;
    }
    float a = s * pc.scale;
    if (BIASES > 0 && query < pc.sq) {
        a += float(bias0[g_b0 + query * lay[OP_B0 * 6 + 4] + key * lay[OP_B0 * 6 + 5]]);
    }
    if (BIASES > 1 && query < pc.sq) {
        a += float(bias1[g_b1 + query * lay[OP_B1 * 6 + 4] + key * lay[OP_B1 * 6 + 5]]);
    }
    return a;
}

float max_of(const in float a, const in float b) {
    return max(a, b);
}

float first_of(const in float a, const in float b) {
    return a;
}

float exp_of(const in uint row, const in uint col, const in float x) {
    return exp(x);
}

float max_with(const in uint row, const in uint col, const in float a, const in float b) {
    return max(a, b);
}

void main() {
    const float LOW = uintBitsToFloat(0xfeffffffu);
    if (CAUSAL != 0) {
        g_start = pc.plus + (pc.has_pos != 0 ? pos[0] : 0);
    } else {
        g_start = 0;
    }
    uint q_r = lay[OP_Q * 6 + 4], k_r = lay[OP_K * 6 + 4];
    uint v_r = lay[OP_V * 6 + 4], y_r = lay[OP_Y * 6 + 4];
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lq =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lk =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lv =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> ly =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    lq = setTensorLayoutDimensionNV(lq, pc.sq, HEAD_D);
    lq = setTensorLayoutStrideNV(lq, q_r, 1);
    lk = setTensorLayoutDimensionNV(lk, pc.sk, HEAD_D);
    lk = setTensorLayoutStrideNV(lk, k_r, 1);
    lv = setTensorLayoutDimensionNV(lv, pc.sk, VAL_D);
    lv = setTensorLayoutStrideNV(lv, v_r, 1);
    ly = setTensorLayoutDimensionNV(ly, pc.sq, VAL_D);
    ly = setTensorLayoutStrideNV(ly, y_r, 1);
    tensorViewNV<2, false, 1, 0> transposed = createTensorViewNV(2, false, 1, 0);
    coopmat<float16_t, gl_ScopeWorkgroup, BC, BC, gl_MatrixUseB> ones =
        coopmat<float16_t, gl_ScopeWorkgroup, BC, BC, gl_MatrixUseB>(1.0);

    for (uint item = gl_WorkGroupID.x; item < pc.items; item += gl_NumWorkGroups.x) {
        uint b = item / pc.qblocks;
        uint row0 = (item % pc.qblocks) * BR;
        uvec3 bi = uvec3(b / (pc.n1 * pc.n2), (b / pc.n2) % pc.n1, b % pc.n2);
        uint qb = base(OP_Q, bi), kb = base(OP_K, bi), vb = base(OP_V, bi);
        uint yb = base(OP_Y, bi);
        g_b0 = base(OP_B0, bi);
        g_b1 = base(OP_B1, bi);
        g_row0 = row0;

        coopmat<float16_t, gl_ScopeWorkgroup, BR, HEAD_D, gl_MatrixUseA> fq;
        coopMatLoadTensorNV(fq, q, qb, sliceTensorLayoutNV(lq, row0, BR, 0, HEAD_D));
        coopmat<float, gl_ScopeWorkgroup, BR, VAL_D, gl_MatrixUseAccumulator> o =
            coopmat<float, gl_ScopeWorkgroup, BR, VAL_D, gl_MatrixUseAccumulator>(0.0);
        coopmat<float, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseAccumulator> l =
            coopmat<float, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseAccumulator>(0.0);
        coopmat<float, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseAccumulator> m =
            coopmat<float, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseAccumulator>(LOW);
        // CAUSAL: the keys up to the block's last query's position.
        uint keys = pc.sk;
        if (CAUSAL != 0) {
            keys = uint(clamp(g_start + int(min(row0 + BR, pc.sq)), 0, int(pc.sk)));
        }
        for (uint k0 = 0; k0 < keys; k0 += BC) {
            g_key0 = k0;
            coopmat<float16_t, gl_ScopeWorkgroup, HEAD_D, BC, gl_MatrixUseB> fk;
            coopMatLoadTensorNV(fk, k, kb, sliceTensorLayoutNV(lk, k0, BC, 0, HEAD_D),
                                transposed);
            coopmat<float, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseAccumulator> s =
                coopmat<float, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseAccumulator>(0.0);
            s = coopMatMulAdd(fq, fk, s);
            coopMatPerElementNV(s, s, masked);

            coopmat<float, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseAccumulator> top, p, rescale;
            coopMatReduceNV(top, s, gl_CooperativeMatrixReduceRowNV, max_of);
            coopmat<float, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseAccumulator> old = m;
            coopMatPerElementNV(m, top, max_with, old);
            coopMatPerElementNV(p, s - m, exp_of);
            coopMatPerElementNV(rescale, old - m, exp_of);

            coopmat<float16_t, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseA> pa =
                coopmat<float16_t, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseA>(p);
            coopmat<float, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseAccumulator> sums =
                coopmat<float, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseAccumulator>(0.0);
            sums = coopMatMulAdd(pa, ones, sums);
            l = rescale * l + sums;

            coopmat<float16_t, gl_ScopeWorkgroup, BC, VAL_D, gl_MatrixUseB> fv;
            coopMatLoadTensorNV(fv, v, vb, sliceTensorLayoutNV(lv, k0, BC, 0, VAL_D));
            coopmat<float, gl_ScopeWorkgroup, BR, VAL_D, gl_MatrixUseAccumulator> wide;
            coopMatReduceNV(wide, rescale, gl_CooperativeMatrixReduceRowNV, first_of);
            o *= wide;
            o = coopMatMulAdd(pa, fv, o);
        }
        coopmat<float, gl_ScopeWorkgroup, BR, VAL_D, gl_MatrixUseAccumulator> inv;
        coopMatReduceNV(inv, l, gl_CooperativeMatrixReduceRowNV, first_of);
        const float NAN = uintBitsToFloat(0x7fc00000u);
        [[unroll]] for (int i = 0; i < inv.length(); ++i) {
            float total = inv[i];
            inv[i] = total > 0.0 ? 1.0 / total : (pc.guard != 0 ? 0.0 : NAN);
        }
        o = o * inv;
        coopmat<float16_t, gl_ScopeWorkgroup, BR, VAL_D, gl_MatrixUseAccumulator> res =
            coopmat<float16_t, gl_ScopeWorkgroup, BR, VAL_D, gl_MatrixUseAccumulator>(o);
        coopMatStoreTensorNV(res, y, yb, sliceTensorLayoutNV(ly, row0, BR, 0, VAL_D));
    }
}

// kernel: AttendCoop2 fp16-by-nature
