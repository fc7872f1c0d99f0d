#version 450
// kernel: GemvQ4Teams
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
// gemv_q4.comp's product (the same bindings, push block, specialization constants and
// epilogues: see there) with another division of the work, for wide products (a language
// model's gated MLP and its output matrix: over a thousand work groups). A work group is 4
// teams of 32 lanes and 8 columns, each team 2 of them (with GLU, a gate column and its up
// column); a lane reads one 4-byte word of each of its 2 packed rows (8 weights) a step, four
// steps in flight, so that a team reads x contiguously and a column's work is spread over 32
// lanes. With NORM each team sums the squares of the x it reads (team 0's sums are used) and
// the sums are scaled at the end. The teams' sums meet in shared memory, one output a thread.
// variant: f16 -DDTYPE_F16
#include "dtype.glsl"
#include "q4.glsl"
layout(local_size_x = 128) in;
layout(constant_id = 0) const uint ROWS = 1;
layout(constant_id = 1) const uint GLU = 0;
layout(constant_id = 2) const uint NORM = 0;

// Lanes of a team, teams of a work group; columns of a work group; steps in flight.
const uint TEAM = 32;
const uint TEAMS = 4;
const uint COLS = 8;
const uint MAX_ROWS = 4;
const uint UNROLL = 4;

layout(std430, set = 0, binding = 0) readonly buffer X4 { T4 x4[]; };
layout(std430, set = 0, binding = 1) readonly buffer W { uint w[]; };
layout(std430, set = 0, binding = 2) readonly buffer S { float s[]; };
layout(std430, set = 0, binding = 3) readonly buffer W2 { uint w2[]; };
layout(std430, set = 0, binding = 4) readonly buffer S2 { float s2[]; };
layout(std430, set = 0, binding = 5) readonly buffer Bias { T bias[]; };
layout(std430, set = 0, binding = 6) readonly buffer NormW { T4 nw4[]; };
// Bindings 7 to 9 (a KV cache's position and rotary tables) are gemv_q4.comp's alone.
layout(std430, set = 0, binding = 7) readonly buffer Pos { int pos[]; };
layout(std430, set = 0, binding = 8) readonly buffer Cos { T cos_[]; };
layout(std430, set = 0, binding = 9) readonly buffer Sin { T sin_[]; };
layout(std430, set = 0, binding = 10) writeonly buffer Y { T y[]; };

layout(push_constant) uniform Params {
    uint n;
    uint k;
    uint group_shift;
    uint groups;
    uint col_groups;
    uint has_bias;
    uint bias_row;
    float eps;
    // gemv_q4.comp's KV cache epilogue, which this layout does not take (cache_rows 0).
    uint cache_rows;
    uint heads;
    uint head_d;
    int plus;
    uint has_pos;
    uint rope;
} pc;

// The partial sums of each (column slot c, row r) at c * ROWS + r, one per lane of its
// team; with NORM, row r's sums of squares at (8 + r) * ROWS.
shared float part[(COLS + MAX_ROWS) * MAX_ROWS][TEAM + 1];

// A team's partial sums of slot `at`.
float team_sum(uint at) {
    vec4 sum = vec4(0.0);
    [[unroll]] for (uint l = 0; l < TEAM; l += 4) {
        sum += vec4(part[at][l], part[at][l + 1], part[at][l + 2], part[at][l + 3]);
    }
    return sum.x + sum.y + sum.z + sum.w;
}

void main() {
    uint lane = gl_LocalInvocationID.x % TEAM;
    uint team = gl_LocalInvocationID.x / TEAM;
    uint words = pc.k / 8;
    const bool glu = GLU != 0;
    const uint per = GLU != 0 ? COLS / 2 : COLS;
    for (uint g = gl_WorkGroupID.x; g < pc.col_groups; g += gl_NumWorkGroups.x) {
        uint col0 = g * per;
        // The team's two slots: 2 team, 2 team + 1; with GLU, gate column team and its up.
        uint slot[2];
        uint row[2];
        bool up[2];
        [[unroll]] for (uint c = 0; c < 2; ++c) {
            slot[c] = glu ? (c == 0 ? team : team + per) : 2 * team + c;
            up[c] = glu && c == 1;
            uint col = glu ? team : 2 * team + c;
            row[c] = min(col0 + col, pc.n - 1);
        }
        float acc[2][MAX_ROWS];
        float ss[MAX_ROWS];
        [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
            ss[r] = 0.0;
            acc[0][r] = 0.0;
            acc[1][r] = 0.0;
        }
        for (uint i0 = lane; i0 < words; i0 += TEAM * UNROLL) {
            uint q[UNROLL][2];
            float sc[UNROLL][2];
            [[unroll]] for (uint u = 0; u < UNROLL; ++u) {
                uint i = min(i0 + u * TEAM, words - 1);
                [[unroll]] for (uint c = 0; c < 2; ++c) {
                    uint at = row[c] * pc.groups + ((i * 8) >> pc.group_shift);
                    q[u][c] = up[c] ? w2[row[c] * words + i] : w[row[c] * words + i];
                    sc[u][c] = up[c] ? s2[at] : s[at];
                }
            }
            [[unroll]] for (uint u = 0; u < UNROLL; ++u) {
                uint i = i0 + u * TEAM;
                if (i < words) {
                    vec4 nwa = NORM != 0 ? vec4(nw4[i * 2]) * Q4_X_LO : Q4_X_LO;
                    vec4 nwb = NORM != 0 ? vec4(nw4[i * 2 + 1]) * Q4_X_HI : Q4_X_HI;
                    vec4 lo[2], hi[2];
                    [[unroll]] for (uint c = 0; c < 2; ++c) {
                        nibbles(q[u][c], lo[c], hi[c]);
                    }
                    [[unroll]] for (uint r = 0; r < ROWS; ++r) {
                        uint at = (r * pc.k) / 4 + i * 2;
                        vec4 xa = vec4(x4[at]);
                        vec4 xb = vec4(x4[at + 1]);
                        if (NORM != 0) {
                            ss[r] += dot(xa, xa) + dot(xb, xb);
                        }
                        xa *= nwa;
                        xb *= nwb;
                        [[unroll]] for (uint c = 0; c < 2; ++c) {
                            acc[c][r] += sc[u][c] * (dot(lo[c], xa) + dot(hi[c], xb));
                        }
                    }
                }
            }
        }
        [[unroll]] for (uint r = 0; r < ROWS; ++r) {
            [[unroll]] for (uint c = 0; c < 2; ++c) {
                part[slot[c] * ROWS + r][lane] = acc[c][r];
            }
            if (NORM != 0 && team == 0) {
                part[(COLS + r) * ROWS][lane] = ss[r];
            }
        }
        barrier();
        uint t = gl_LocalInvocationID.x;
        if (t < per * ROWS) {
            uint c = t / ROWS;
            uint r = t % ROWS;
            if (col0 + c < pc.n) {
                float rs = 1.0;
                if (NORM != 0) {
                    rs = inversesqrt(team_sum((COLS + r) * ROWS) / float(pc.k) + pc.eps);
                }
                float v = team_sum(t) * rs;
                if (glu) {
                    float u = team_sum((c + per) * ROWS + r) * rs;
                    v = v / (1.0 + exp(-v)) * u;
                }
                if (pc.has_bias != 0) {
                    v += float(bias[r * pc.bias_row + col0 + c]);
                }
                y[r * pc.n + col0 + c] = T(v);
            }
        }
        barrier();
    }
}
