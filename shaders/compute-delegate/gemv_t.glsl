// The body of gemv_t.comp and, with SUBGROUP defined, of gemv_t_sg.comp (the lanes' sums
// added by subgroup operations, then across a column's subgroups: two barriers instead of a
// tree of six): see gemv_t.comp's header.
#include "dtype.glsl"
layout(local_size_x = 64, local_size_y = 4) in;
// Rows of A and C (1 to 4).
layout(constant_id = 0) const uint ROWS = 1;
// Fused clamp (relu, relu6, hardtanh).
layout(constant_id = 1) const uint ACT = 0;
// 1: the gated product of B and B2.
layout(constant_id = 2) const uint GLU = 0;
// 1: A RMS-normalised first (NORM above).
layout(constant_id = 3) const uint NORM = 0;

const uint LANES = 64;
const uint COLS = 4;
const uint MAX_ROWS = 4;
// vec4s of B a lane has in flight.
const uint UNROLL = 4;

layout(std430, set = 0, binding = 0) readonly buffer A4 { T4 a4[]; };
layout(std430, set = 0, binding = 1) readonly buffer B4 { T4 b4[]; };
layout(std430, set = 0, binding = 2) readonly buffer Bias { T bias[]; };
layout(std430, set = 0, binding = 3) readonly buffer B24 { T4 b24[]; };
layout(std430, set = 0, binding = 4) readonly buffer NormW { T4 nw4[]; };
layout(std430, set = 0, binding = 5) writeonly buffer C { T c[]; };

// Rust: `kernels::push::GemvTPush`, generated from this block.
layout(push_constant) uniform Params {
    uint m;
    uint n;
    uint k;
    uint sa_b;
    uint sa_m;
    uint sb_b;
    uint sb_n;
    uint sc_b;
    uint sc_m;
    uint has_bias;
    float act_lo;
    float act_hi;
    float eps;
} pc;

shared float sums[COLS][MAX_ROWS][LANES];
shared float ups[COLS][MAX_ROWS][GLU != 0 ? LANES : 1];
// With NORM, column 0's lanes' sums of squares (every column reads the same A).
shared float squares[MAX_ROWS][NORM != 0 ? LANES : 1];

// The products of B's (and B2's) vec4 `bv` (`uv`) at vec4 `i` of k with the rows of A.
void accumulate(uint a, uint sa4, uint i, vec4 bv, vec4 uv, inout float acc[MAX_ROWS],
                inout float up[MAX_ROWS], inout float ss[MAX_ROWS]) {
    vec4 nw = NORM != 0 ? vec4(nw4[i]) : vec4(1.0);
    [[unroll]] for (uint r = 0; r < ROWS; ++r) {
        vec4 x = vec4(a4[a + r * sa4 + i]);
        if (NORM != 0) {
            ss[r] += dot(x, x);
            x *= nw;
        }
        acc[r] += dot(x, bv);
        if (GLU != 0) {
            up[r] += dot(x, uv);
        }
    }
}

void main() {
    uint lane = gl_LocalInvocationID.x;
    uint y = gl_LocalInvocationID.y;
    uint col = gl_WorkGroupID.x * COLS + y;
    uint z = gl_WorkGroupID.z;
    float acc[MAX_ROWS];
    float up[MAX_ROWS];
    float ss[MAX_ROWS];
    [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
        acc[r] = 0.0;
        up[r] = 0.0;
        ss[r] = 0.0;
    }
    if (col < pc.n) {
        uint k4 = pc.k / 4;
        uint b = (z * pc.sb_b + col * pc.sb_n) / 4;
        uint a = z * pc.sa_b / 4;
        uint sa4 = pc.sa_m / 4;
        uint i = lane;
        for (; i + (UNROLL - 1) * LANES < k4; i += UNROLL * LANES) {
            vec4 bv[UNROLL];
            vec4 uv[UNROLL];
            [[unroll]] for (uint u = 0; u < UNROLL; ++u) {
                bv[u] = vec4(b4[b + i + u * LANES]);
                uv[u] = GLU != 0 ? vec4(b24[b + i + u * LANES]) : vec4(0.0);
            }
            [[unroll]] for (uint u = 0; u < UNROLL; ++u) {
                accumulate(a, sa4, i + u * LANES, bv[u], uv[u], acc, up, ss);
            }
        }
        for (; i < k4; i += LANES) {
            vec4 uv = GLU != 0 ? vec4(b24[b + i]) : vec4(0.0);
            accumulate(a, sa4, i, vec4(b4[b + i]), uv, acc, up, ss);
        }
    }
#ifdef SUBGROUP
    // Each subgroup's sums (a subgroup holds lanes of one column: 64 is a multiple of its
    // size), then the first lane of a column adds its subgroups'.
    uint per_column = LANES / gl_SubgroupSize;
    uint slot = lane / gl_SubgroupSize;
    [[unroll]] for (uint r = 0; r < ROWS; ++r) {
        float sv = subgroupAdd(acc[r]);
        float uv = GLU != 0 ? subgroupAdd(up[r]) : 0.0;
        float qv = NORM != 0 ? subgroupAdd(ss[r]) : 0.0;
        if (subgroupElect()) {
            sums[y][r][slot] = sv;
            if (GLU != 0) {
                ups[y][r][slot] = uv;
            }
            if (NORM != 0 && y == 0) {
                squares[r][slot] = qv;
            }
        }
    }
    barrier();
    if (lane == 0) {
        [[unroll]] for (uint r = 0; r < ROWS; ++r) {
            for (uint p = 1; p < per_column; ++p) {
                sums[y][r][0] += sums[y][r][p];
                if (GLU != 0) {
                    ups[y][r][0] += ups[y][r][p];
                }
            }
            if (NORM != 0 && y == 0) {
                for (uint p = 1; p < per_column; ++p) {
                    squares[r][0] += squares[r][p];
                }
            }
        }
    }
    barrier();
#else
    [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
        sums[y][r][lane] = acc[r];
        if (GLU != 0) {
            ups[y][r][lane] = up[r];
        }
        if (NORM != 0 && y == 0) {
            squares[r][lane] = ss[r];
        }
    }
    barrier();
    [[unroll]] for (uint s = LANES / 2; s > 0; s >>= 1) {
        if (lane < s) {
            [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
                if (r < ROWS) {
                    sums[y][r][lane] += sums[y][r][lane + s];
                    if (GLU != 0) {
                        ups[y][r][lane] += ups[y][r][lane + s];
                    }
                    if (NORM != 0 && y == 0) {
                        squares[r][lane] += squares[r][lane + s];
                    }
                }
            }
        }
        barrier();
    }
#endif
    if (lane != 0 || col >= pc.n) {
        return;
    }
    [[unroll]] for (uint r = 0; r < MAX_ROWS; ++r) {
        if (r < ROWS) {
            float rstd = 1.0;
            if (NORM != 0) {
                rstd = inversesqrt(squares[r][0] / float(pc.k) + pc.eps);
            }
            float v = sums[y][r][0] * rstd;
            if (GLU != 0) {
                v = v / (1.0 + exp(-v)) * (ups[y][r][0] * rstd);
            }
            if (pc.has_bias == 1) {
                v += float(bias[col]);
            }
            if (ACT == 1) {
                v = clamp(v, pc.act_lo, pc.act_hi);
            }
            c[z * pc.sc_b + r * pc.sc_m + col] = T(v);
        }
    }
}
