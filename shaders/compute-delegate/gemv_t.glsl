// The body of gemv_t.comp and, with SUBGROUP defined, of gemv_t_sg.comp (the lanes' sums
// added by subgroup operations, then across a column's subgroups: two barriers instead of a
// tree of six): see gemv_t.comp's header.
#include "dtype.glsl"
// Lanes of a column (LANES below): 64 unless the lowering asks for 32 or 128.
layout(local_size_x = 64, local_size_x_id = 5, local_size_y = 4) in;
// Rows of A and C (1 to 4; 5 to 8 in the rows8 variants, ROWS8).
layout(constant_id = 0) const uint ROWS = 1;
// Fused activation (`epilogue.glsl`'s codes).
layout(constant_id = 1) const uint ACT = 0;
// 1: the gated product of B and B2.
layout(constant_id = 2) const uint GLU = 0;
// 1: A RMS-normalised first (NORM above).
layout(constant_id = 3) const uint NORM = 0;
// 1 (f16 only): B (and B2) read in 16-byte words of 8 elements (WIDE in gemv_t.comp).
layout(constant_id = 4) const uint WIDE = 0;

const uint LANES = gl_WorkGroupSize.x;
const uint COLS = 4;
#ifdef ROWS8
const uint MAX_ROWS = 8;
#else
const uint MAX_ROWS = 4;
#endif
// Words of B a lane has in flight: a column's lanes load 256 at once.
const uint UNROLL = 256 / LANES;

layout(std430, set = 0, binding = 0) readonly buffer A4 { T4 a4[]; };
layout(std430, set = 0, binding = 1) readonly buffer B4 { T4 b4[]; };
layout(std430, set = 0, binding = 2) readonly buffer Bias { T bias[]; };
layout(std430, set = 0, binding = 3) readonly buffer B24 { T4 b24[]; };
layout(std430, set = 0, binding = 4) readonly buffer NormW { T4 nw4[]; };
layout(std430, set = 0, binding = 5) readonly buffer Pos { int pos[]; };
layout(std430, set = 0, binding = 6) readonly buffer Cos { T cos_[]; };
layout(std430, set = 0, binding = 7) readonly buffer Sin { T sin_[]; };
layout(std430, set = 0, binding = 8) writeonly buffer C { T c[]; };
#ifdef DTYPE_F16
// B and B2 again, as 16-byte words (WIDE).
layout(std430, set = 0, binding = 1) readonly buffer B8 { uvec4 b8[]; };
layout(std430, set = 0, binding = 3) readonly buffer B28 { uvec4 b28[]; };
#endif

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
    // With cache_rows: C is a KV cache [cache_rows, heads, head_d] (CACHE in gemv_t.comp).
    uint cache_rows;
    uint heads;
    uint head_d;
    int plus;
    uint has_pos;
    // 0: no rotation; 1: tables of [rows, head_d / 2]; 2: of [rows, heads, head_d / 2].
    uint rope;
} pc;

#include "cache_store.glsl"
// Its epilogue applies activations only: no residual is bound.
const uint RESID = 0;
#include "epilogue.glsl"

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

#ifdef DTYPE_F16
// accumulate() of the 8 elements of B's (and B2's) 16-byte word `i` (vec4s 2i and 2i + 1).
void accumulate8(uint a, uint sa4, uint i, uvec4 bw, uvec4 uw, inout float acc[MAX_ROWS],
                 inout float up[MAX_ROWS], inout float ss[MAX_ROWS]) {
    vec4 lo = vec4(unpackHalf2x16(bw.x), unpackHalf2x16(bw.y));
    vec4 hi = vec4(unpackHalf2x16(bw.z), unpackHalf2x16(bw.w));
    vec4 ulo = vec4(unpackHalf2x16(uw.x), unpackHalf2x16(uw.y));
    vec4 uhi = vec4(unpackHalf2x16(uw.z), unpackHalf2x16(uw.w));
    accumulate(a, sa4, 2 * i, lo, ulo, acc, up, ss);
    accumulate(a, sa4, 2 * i + 1, hi, uhi, acc, up, ss);
}
#endif

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
#ifdef DTYPE_F16
    if (WIDE != 0 && col < pc.n) {
        uint k8 = pc.k / 8;
        uint b = (z * pc.sb_b + col * pc.sb_n) / 8;
        uint a = z * pc.sa_b / 4;
        uint sa4 = pc.sa_m / 4;
        uint i = lane;
        for (; i + (UNROLL - 1) * LANES < k8; i += UNROLL * LANES) {
            uvec4 bw[UNROLL];
            uvec4 uw[UNROLL];
            [[unroll]] for (uint u = 0; u < UNROLL; ++u) {
                bw[u] = b8[b + i + u * LANES];
                uw[u] = GLU != 0 ? b28[b + i + u * LANES] : uvec4(0);
            }
            [[unroll]] for (uint u = 0; u < UNROLL; ++u) {
                accumulate8(a, sa4, i + u * LANES, bw[u], uw[u], acc, up, ss);
            }
        }
        for (; i < k8; i += LANES) {
            uvec4 uw = GLU != 0 ? b28[b + i] : uvec4(0);
            accumulate8(a, sa4, i, b8[b + i], uw, acc, up, ss);
        }
    }
    if (WIDE == 0 && col < pc.n) {
#else
    if (col < pc.n) {
#endif
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
    // Each subgroup's sums (a subgroup holds lanes of one column: LANES is a multiple of its
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
            v = activate(v);
            if (pc.cache_rows == 0) {
                c[z * pc.sc_b + r * pc.sc_m + col] = T(v);
            } else {
                // The pair's column, as this one (no GLU or clamp with a cache).
                uint pair = col ^ 1u;
                float other = sums[y ^ 1u][r][0] * rstd;
                if (pc.has_bias == 1) {
                    other += float(bias[pair]);
                }
                uint at;
                if (cache_element(col, r, at)) {
                    c[at] = T(cache_value(v, other, col, r));
                }
            }
        }
    }
}
