#version 450
// kernel: GemvQ4
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
// One to four rows times group-wise 4-bit weights, read packed (`linear_q4gsw` of a decode
// step): y[r][j] = sum_k x[r][k] * (q[j][k] - 8) * scales[k / group][j], with q packed two to
// a byte as ExecuTorch packs it ([n][k / 2], the even column in the low nibble) and scales
// [groups][n] in f32. k is a multiple of 32 and group of 8: a lane reads 16 bytes (32
// weights) at a time, 8 weights per scale.
//
// A work group is 64 lanes by 4 columns, as `gemv_t.comp`: column j = 4 * g + y, lane x reading
// the 16-byte words x, x + 64, .. of its packed row; the lanes' sums meet in shared memory.
// Work group g of a grid-stride loop over the columns' groups of four.
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
layout(local_size_x = 64, local_size_y = 4) in;

const uint LANES = 64;
const uint COLS = 4;
const uint MAX_ROWS = 4;

layout(std430, set = 0, binding = 0) readonly buffer X4 { T4 x4[]; };
layout(std430, set = 0, binding = 1) readonly buffer W { uvec4 w[]; };
layout(std430, set = 0, binding = 2) readonly buffer S { float s[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Y { T y[]; };

// Rust: `kernels::push::GemvQ4Push`, generated from this block.
layout(push_constant) uniform Params {
    uint rows;
    uint n;
    uint k;
    uint group_size;
    uint col_groups;
} pc;

shared float sums[COLS][MAX_ROWS][LANES];

// The eight 4-bit values of a word, low nibble first, minus 8.
void nibbles(uint word, out vec4 lo, out vec4 hi) {
    lo = vec4(word & 15u, (word >> 4) & 15u, (word >> 8) & 15u, (word >> 12) & 15u) - 8.0;
    hi = vec4((word >> 16) & 15u, (word >> 20) & 15u, (word >> 24) & 15u, word >> 28) - 8.0;
}

void main() {
    uint lane = gl_LocalInvocationID.x;
    uint yc = gl_LocalInvocationID.y;
    uint words = pc.k / 32;
    for (uint g = gl_WorkGroupID.x; g < pc.col_groups; g += gl_NumWorkGroups.x) {
        uint col = g * COLS + yc;
        float acc[MAX_ROWS];
        [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
            acc[r] = 0.0;
        }
        if (col < pc.n) {
            for (uint i = lane; i < words; i += LANES) {
                uvec4 q = w[col * words + i];
                [[unroll]] for (uint c = 0; c < 4; ++c) {
                    uint kk = i * 32 + c * 8;
                    float sc = s[(kk / pc.group_size) * pc.n + col];
                    vec4 lo, hi;
                    nibbles(q[c], lo, hi);
                    [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
                        if (r < pc.rows) {
                            uint at = (r * pc.k + kk) / 4;
                            acc[r] += sc * (dot(lo, vec4(x4[at])) + dot(hi, vec4(x4[at + 1])));
                        }
                    }
                }
            }
        }
        [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
            sums[yc][r][lane] = acc[r];
        }
        barrier();
        [[unroll]] for (uint step = LANES / 2; step > 0; step >>= 1) {
            if (lane < step) {
                [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
                    sums[yc][r][lane] += sums[yc][r][lane + step];
                }
            }
            barrier();
        }
        if (lane == 0 && col < pc.n) {
            for (uint r = 0; r < pc.rows; ++r) {
                y[r * pc.n + col] = T(sums[yc][r][0]);
            }
        }
        barrier();
    }
}
