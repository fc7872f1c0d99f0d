#version 450
// An RGBA8 storage image as an f32 [1, 3, height, width] tensor (NCHW, values in [0, 1]),
// one thread per pixel; alpha is dropped.
layout(local_size_x = 8, local_size_y = 8) in;

layout(set = 0, binding = 0, rgba8) uniform readonly image2D src;
layout(std430, set = 0, binding = 1) writeonly buffer Dst { float dst[]; };

layout(push_constant) uniform Params {
    uint width;
    uint height;
} pc;

void main() {
    uvec2 p = gl_GlobalInvocationID.xy;
    if (p.x >= pc.width || p.y >= pc.height) {
        return;
    }
    vec4 c = imageLoad(src, ivec2(p));
    uint plane = pc.width * pc.height;
    uint i = p.y * pc.width + p.x;
    dst[i] = c.r;
    dst[plane + i] = c.g;
    dst[2u * plane + i] = c.b;
}
