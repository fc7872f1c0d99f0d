#version 450
// An f32 [1, 3, height, width] tensor (NCHW) written into an RGBA8 storage image, clamped to
// [0, 1], alpha 1; one thread per pixel.
layout(local_size_x = 8, local_size_y = 8) in;

layout(std430, set = 0, binding = 0) readonly buffer Src { float src[]; };
layout(set = 0, binding = 1, rgba8) uniform writeonly image2D dst;

layout(push_constant) uniform Params {
    uint width;
    uint height;
} pc;

void main() {
    uvec2 p = gl_GlobalInvocationID.xy;
    if (p.x >= pc.width || p.y >= pc.height) {
        return;
    }
    uint plane = pc.width * pc.height;
    uint i = p.y * pc.width + p.x;
    vec3 c = clamp(vec3(src[i], src[plane + i], src[2u * plane + i]), 0.0, 1.0);
    imageStore(dst, ivec2(p), vec4(c, 1.0));
}
