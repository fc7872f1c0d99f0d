// Image -> tensor: one invocation per texel; tensor = (texel - mean) * scale per channel.
// The including file defines FORMAT, the image's storage format qualifier.
layout(local_size_x = 8, local_size_y = 8) in;

layout(FORMAT, set = 0, binding = 0) uniform readonly image2D src;
#ifdef TENSOR_F16
// fp16 tensors (the `f16` variants): 16-bit stores, so neighbouring texels never share a word.
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(std430, set = 0, binding = 1) writeonly buffer Tensor { float16_t t[]; };
#define STORE(v) float16_t(v)
#else
layout(std430, set = 0, binding = 1) writeonly buffer Tensor { float t[]; };
#define STORE(v) (v)
#endif

layout(push_constant) uniform Params {
    vec4 scale;
    vec4 mean;
    uint width;
    uint height;
    uint channels;
    // bit 0: NHWC (else NCHW); bit 1: the image is BGRA (swap red and blue).
    uint flags;
} p;

void main() {
    uvec2 xy = gl_GlobalInvocationID.xy;
    if (xy.x >= p.width || xy.y >= p.height) {
        return;
    }
    vec4 v = imageLoad(src, ivec2(xy));
    if ((p.flags & 2u) != 0u) {
        v = v.bgra;
    }
    v = (v - p.mean) * p.scale;
    uint pixel = xy.y * p.width + xy.x;
    uint plane = p.width * p.height;
    bool nhwc = (p.flags & 1u) != 0u;
    for (uint c = 0u; c < p.channels; ++c) {
        t[nhwc ? pixel * p.channels + c : c * plane + pixel] = STORE(v[c]);
    }
}
