#version 450
// kernel: ConvPack fp16-by-nature
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
// The operands of the implicit-GEMM conv2d (conv_coop2.comp), fp16, in one pass:
// - the input as zero-padded channels-last images, p[img][yp][xp][c] =
//   x[img][c][yp - ph][xp - pw], zero outside the input and for c >= c_in, with hp x wp
//   pixels and cp channels per image (cp a multiple of 8);
// - the weights per tap, wk[tap][c][co] = w[co][c][tap], zero for c >= c_in or co >= c_out,
//   cp x coutp per tap (coutp a multiple of 8), for conv_coop2.comp; or (w_layout 1) per
//   output channel, wk[co][tap][c], zero for c >= c_in, taps x cp per output channel, for
//   gemm_coop.comp's CONV mode.
// Each thread writes eight consecutive elements with one 16-byte store: the first `groups_p`
// groups of eight are the input's, the next `groups_w` the weights'. Grid-stride.
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer X { float16_t x[]; };
layout(std430, set = 0, binding = 1) readonly buffer W { float16_t w[]; };
layout(std430, set = 0, binding = 2) writeonly buffer P { uvec4 p[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Wk { uvec4 wk[]; };

layout(push_constant) uniform Params {
    uint c_in;
    uint h;
    uint w;
    uint cp;
    uint hp;
    uint wp;
    uint ph;
    uint pw;
    uint c_out;
    uint coutp;
    uint taps;
    uint groups_p;
    uint groups_w;
    uint w_layout;
} pc;

uvec4 pack8(const float16_t v[8]) {
    // Two halves per 32-bit word, the first in the low bits (little-endian order).
    return uvec4(packFloat2x16(f16vec2(v[0], v[1])), packFloat2x16(f16vec2(v[2], v[3])),
                 packFloat2x16(f16vec2(v[4], v[5])), packFloat2x16(f16vec2(v[6], v[7])));
}

// Eight channels of one padded pixel.
void input_group(const uint g) {
    uint per_pixel = pc.cp / 8;
    uint pixel = g / per_pixel;
    uint c = (g - pixel * per_pixel) * 8;
    uint xp = pixel % pc.wp;
    uint rest = pixel / pc.wp;
    uint yp = rest % pc.hp;
    uint img = rest / pc.hp;
    int iy = int(yp) - int(pc.ph);
    int ix = int(xp) - int(pc.pw);
    bool inside = uint(iy) < pc.h && uint(ix) < pc.w;
    uint plane = pc.h * pc.w;
    uint base = (img * pc.c_in + c) * plane + uint(iy) * pc.w + uint(ix);
    float16_t v[8];
    for (uint e = 0; e < 8; ++e) {
        v[e] = (inside && c + e < pc.c_in) ? x[base + e * plane] : float16_t(0);
    }
    p[g] = pack8(v);
}

// Eight output channels of one tap and input channel.
void weight_group(const uint g) {
    uint per_row = pc.coutp / 8;
    uint row = g / per_row;
    uint co = (g - row * per_row) * 8;
    uint c = row % pc.cp;
    uint tap = row / pc.cp;
    float16_t v[8];
    for (uint e = 0; e < 8; ++e) {
        bool real = c < pc.c_in && co + e < pc.c_out;
        v[e] = real ? w[((co + e) * pc.c_in + c) * pc.taps + tap] : float16_t(0);
    }
    wk[g] = pack8(v);
}

// Eight input channels of one output channel and tap (w_layout 1).
void weight_group_co_major(const uint g) {
    uint per_row = pc.cp / 8;
    uint row = g / per_row;
    uint c = (g - row * per_row) * 8;
    uint tap = row % pc.taps;
    uint co = row / pc.taps;
    float16_t v[8];
    for (uint e = 0; e < 8; ++e) {
        bool real = c + e < pc.c_in;
        v[e] = real ? w[(co * pc.c_in + c + e) * pc.taps + tap] : float16_t(0);
    }
    wk[g] = pack8(v);
}

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint total = pc.groups_p + pc.groups_w;
    for (uint g = gl_GlobalInvocationID.x; g < total; g += stride) {
        if (g < pc.groups_p) {
            input_group(g);
        } else if (pc.w_layout == 1) {
            weight_group_co_major(g - pc.groups_p);
        } else {
            weight_group(g - pc.groups_p);
        }
    }
}
