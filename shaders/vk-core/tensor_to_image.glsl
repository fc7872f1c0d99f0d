// Tensor -> image: one invocation per texel, through a colour map.
// The including file defines FORMAT, the image's storage format qualifier, and for
// normalized fixed-point formats UNORM_LEVELS, the largest stored level (255 for 8 bits).
layout(local_size_x = 8, local_size_y = 8) in;

#ifdef TENSOR_F16
// fp16 tensors (the `f16` variants).
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(std430, set = 0, binding = 0) readonly buffer Tensor { float16_t t[]; };
#else
layout(std430, set = 0, binding = 0) readonly buffer Tensor { float t[]; };
#endif
layout(FORMAT, set = 0, binding = 1) uniform writeonly image2D dst;
layout(std430, set = 0, binding = 2) readonly buffer Palette { vec4 palette[]; };

layout(push_constant) uniform Params {
    float scale;
    float bias;
    uint width;
    uint height;
    uint channels;
    // bit 0: NHWC (else NCHW); bit 1: the image is BGRA (swap red and blue).
    uint flags;
    // 0: channels (1 grey, 2 grey + alpha, 3 RGB, 4 RGBA); 1: heat (C = 1); 2: classes.
    uint mode;
} p;

float value(uint pixel, uint c) {
    uint plane = p.width * p.height;
    return float(t[(p.flags & 1u) != 0u ? pixel * p.channels + c : c * plane + pixel]);
}

vec4 channels(uint pixel) {
    vec4 v = vec4(0.0, 0.0, 0.0, 1.0);
    for (uint c = 0u; c < min(p.channels, 4u); ++c) {
        v[c] = clamp(value(pixel, c) * p.scale + p.bias, 0.0, 1.0);
    }
    if (p.channels == 1u) {
        return vec4(v.xxx, 1.0);
    }
    if (p.channels == 2u) {
        return v.xxxy;
    }
    return v;
}

vec4 heat(uint pixel) {
    float x = clamp(value(pixel, 0u) * p.scale + p.bias, 0.0, 1.0);
    // Blue through cyan, green and yellow to red.
    vec3 rgb = clamp(vec3(1.5) - abs(vec3(4.0 * x - 3.0, 4.0 * x - 2.0, 4.0 * x - 1.0)), 0.0, 1.0);
    return vec4(rgb, 1.0);
}

vec4 classes(uint pixel) {
    uint best = 0u;
    float top = value(pixel, 0u);
    for (uint c = 1u; c < p.channels; ++c) {
        float v = value(pixel, c);
        if (v > top) {
            top = v;
            best = c;
        }
    }
    return palette[best];
}

void main() {
    uvec2 xy = gl_GlobalInvocationID.xy;
    if (xy.x >= p.width || xy.y >= p.height) {
        return;
    }
    uint pixel = xy.y * p.width + xy.x;
    vec4 v = p.mode == 0u ? channels(pixel) : p.mode == 1u ? heat(pixel) : classes(pixel);
    if ((p.flags & 2u) != 0u) {
        v = v.bgra;
    }
#ifdef UNORM_LEVELS
    // Vulkan lets a store to a UNORM image write either of the two levels nearest to the
    // value. Round to the nearest level here (halves up) and store a value 1/64 of a level
    // above it, which every driver, rounding to nearest or toward zero, writes as that level.
    v = (floor(v * UNORM_LEVELS + 0.5) + 1.0 / 64.0) / UNORM_LEVELS;
#endif
    imageStore(dst, ivec2(xy), v);
}
