#version 450
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
// conv2d with stride 1 and one group as an implicit GEMM on workgroup-scope cooperative
// matrices (VK_NV_cooperative_matrix2): fp16 operands, fp32 accumulation, bias per output
// channel, `epilogue.glsl`'s residual (laid out as the output) and activation, fp16 output in
// NCHW. No patch matrix is written.
//
// The operands are conv_pack.comp's: the input as zero-padded channels-last images
// p[img][yp][xp][c] (hp x wp pixels, cp channels) and the weights per tap wk[tap][c][co]
// (cp x coutp). Output pixel (oy, ox) of tap (ky, kx) reads padded pixel
// (oy + ky * dh, ox + kx * dw), so every load lies inside the packed operands and needs no
// clamping, and every row of a load is BK contiguous channels.
//
// A work group computes a TH x TW patch of output pixels (BM = TH * TW rows) for BN output
// channels: per tap and per BK channels, A = the BM x BK window of the padded input shifted
// by the tap, B = BK x BN weights of the tap. The result is stored through a view that
// transposes the pixels x channels block into NCHW; the store's clamp drops pixels past the
// output and channels past c_out.
//
// Grid: x = tiles_x * tiles_y pixel patches (x fastest), y = output-channel blocks, z = images.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint BM = 128;
layout(constant_id = 2) const uint BN = 64;
layout(constant_id = 3) const uint TW = 32;
layout(constant_id = 4) const uint TH = 4;
layout(constant_id = 5) const uint BK = 32;
// `epilogue.glsl`'s activation code and residual (binding 4: 1 added, 2 multiplying).
layout(constant_id = 6) const uint ACT = 0;
layout(constant_id = 7) const uint RESID = 0;

layout(std430, set = 0, binding = 0) readonly buffer P { float16_t p[]; };
layout(std430, set = 0, binding = 1) readonly buffer Wk { float16_t wk[]; };
layout(std430, set = 0, binding = 2) readonly buffer Bias { float16_t bias[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Y { float16_t y[]; };
layout(std430, set = 0, binding = 4) readonly buffer R { float16_t resid[]; };

layout(push_constant) uniform Params {
    uint images;
    uint cp;
    uint hp;
    uint wp;
    uint coutp;
    uint c_out;
    uint oh;
    uint ow;
    uint kh;
    uint kw;
    uint dh;
    uint dw;
    uint has_bias;
    float act_lo;
    float act_hi;
    uint tiles_x;
} pc;

#include "epilogue.glsl"

// Bias of the element's output channel, then the residual at its place in the output and the
// activation. Row = pixel (y, x) of the TH x TW patch at (oy0, ox0), column = channel.
float epilogue(const in uint row, const in uint col, const in float v, const in uint co0,
               const in uint oy0, const in uint ox0, const in uint img) {
    float r = v;
    uint co = co0 + col;
    if (pc.has_bias == 1 && co < pc.c_out) {
        r += float(bias[co]);
    }
    if (RESID != 0) {
        uint oy = oy0 + row / TW;
        uint ox = ox0 + row % TW;
        if (co < pc.c_out && oy < pc.oh && ox < pc.ow) {
            r = combine(r, float(resid[((img * pc.c_out + co) * pc.oh + oy) * pc.ow + ox]));
        }
    }
    if (ACT != 0) {
        r = activate(r);
    }
    return r;
}

void main() {
    uint ty = gl_WorkGroupID.x / pc.tiles_x;
    uint tx = gl_WorkGroupID.x - ty * pc.tiles_x;
    uint oy0 = ty * TH;
    uint ox0 = tx * TW;
    uint co0 = gl_WorkGroupID.y * BN;
    uint img = gl_WorkGroupID.z;
    // cp and coutp are multiples of 8: the masks tell the compiler every row starts on 16
    // bytes.
    uint cp = pc.cp & ~7u;
    uint coutp = pc.coutp & ~7u;

    tensorLayoutNV<3> lp = createTensorLayoutNV(3);
    lp = setTensorLayoutDimensionNV(lp, pc.hp, pc.wp, cp);
    lp = setTensorLayoutStrideNV(lp, pc.wp * cp, cp, 1);
    tensorLayoutNV<3> lw = createTensorLayoutNV(3);
    lw = setTensorLayoutDimensionNV(lw, pc.kh * pc.kw, cp, coutp);
    lw = setTensorLayoutStrideNV(lw, cp * coutp, coutp, 1);
    uint p_off = img * pc.hp * pc.wp * cp;

    coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc =
        coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(0.0);
    uint per_tap = cp / BK;
    uint steps = pc.kh * pc.kw * per_tap;
    for (uint s = 0; s < steps; ++s) {
        uint tap = s / per_tap;
        uint c0 = (s - tap * per_tap) * BK;
        uint ky = tap / pc.kw;
        uint kx = tap - ky * pc.kw;
        coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> fa;
        coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> fb;
        coopMatLoadTensorNV(fa, p, p_off,
                            sliceTensorLayoutNV(lp, oy0 + ky * pc.dh, TH, ox0 + kx * pc.dw, TW,
                                                c0, BK));
        coopMatLoadTensorNV(fb, wk, 0, sliceTensorLayoutNV(lw, tap, 1, c0, BK, co0, BN));
        acc = coopMatMulAdd(fa, fb, acc);
    }
    if (pc.has_bias == 1 || ACT != 0 || RESID != 0) {
        coopMatPerElementNV(acc, acc, epilogue, co0, oy0, ox0, img);
    }
    coopmat<float16_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> res =
        coopmat<float16_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(acc);
    tensorLayoutNV<4, gl_CooperativeMatrixClampModeConstantNV> ly =
        createTensorLayoutNV(4, gl_CooperativeMatrixClampModeConstantNV);
    ly = setTensorLayoutDimensionNV(ly, pc.images, pc.c_out, pc.oh, pc.ow);
    // Matrix row = pixel (y, x) of the patch, column = channel: the view orders the
    // coordinates [img][channel][y][x].
    tensorViewNV<4, false, 0, 2, 3, 1> to_nchw = createTensorViewNV(4, false, 0, 2, 3, 1);
    coopMatStoreTensorNV(res, y, 0,
                         sliceTensorLayoutNV(ly, img, 1, co0, BN, oy0, TH, ox0, TW), to_nchw);
}

// kernel: ConvCoop2 fp16-by-nature
