#version 450
// The scene, without vertex buffers: vertices 0-2 are a full-screen triangle carrying a
// gradient, vertices 3-5 a triangle with red, green and blue corners turning about the centre
// by `angle_step` radians per frame (animated by frame index, so a frame is reproducible).
layout(push_constant) uniform Params {
    uint frame;
    float aspect;
    float angle_step;
} pc;

layout(location = 0) out vec3 colour;

const vec2 FULL[3] = vec2[](vec2(-1.0, -1.0), vec2(3.0, -1.0), vec2(-1.0, 3.0));
const vec3 SKY[3] = vec3[](vec3(0.10, 0.12, 0.30), vec3(0.90, 0.50, 0.20), vec3(0.10, 0.70, 0.60));
const vec3 RGB[3] = vec3[](vec3(1.0, 0.1, 0.1), vec3(0.1, 1.0, 0.1), vec3(0.1, 0.2, 1.0));

void main() {
    if (gl_VertexIndex < 3) {
        gl_Position = vec4(FULL[gl_VertexIndex], 0.0, 1.0);
        colour = SKY[gl_VertexIndex];
        return;
    }
    int corner = gl_VertexIndex - 3;
    float a = float(pc.frame) * pc.angle_step + float(corner) * 2.0943951;
    vec2 p = 0.6 * vec2(sin(a), cos(a));
    gl_Position = vec4(p.x / pc.aspect, p.y, 0.0, 1.0);
    colour = RGB[corner];
}
