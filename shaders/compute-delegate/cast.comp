#version 450
// kernel: Cast
// Dtype conversion between f32, f16, i32, i16 and i8, four elements (one "quad") per iteration,
// on 32-bit words so that no 8- or 16-bit storage feature is needed: f16 pairs go through
// (un)packHalf2x16, i16 pairs and i8 quads through shifts. Float to integer truncates toward zero and
// saturates to the integer range. SRC == DST copies the words unchanged. An i64 is read as
// its low 32-bit word (narrowing as ExecuTorch's Vulkan backend does for int64 inputs) and
// written sign-extended; its words are bounds-checked, since a quad of i64 spans 32 bytes
// and buffers are padded to 16. Integers narrowed to i16 or i8 saturate.
// Dtype codes: 0 f32, 1 f16, 2 i32, 3 i8, 4 i64, 5 i16.
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint SRC = 0;
layout(constant_id = 1) const uint DST = 0;

layout(std430, set = 0, binding = 0) readonly buffer S { uint src[]; };
layout(std430, set = 0, binding = 1) writeonly buffer D { uint dst[]; };

layout(push_constant) uniform Params {
    uint quads;
} pc;

bool is_int(uint t) {
    return t >= 2;
}

uint words_per_quad(uint t) {
    return (t == 4) ? 8 : ((t == 0 || t == 2) ? 4 : ((t == 1 || t == 5) ? 2 : 1));
}

uint src_word(uint i) {
    return i < uint(src.length()) ? src[i] : 0u;
}

void dst_word(uint i, uint w) {
    if (i < uint(dst.length())) {
        dst[i] = w;
    }
}

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint q = gl_GlobalInvocationID.x; q < pc.quads; q += stride) {
        if (SRC == DST) {
            uint w = words_per_quad(SRC);
            for (uint i = 0; i < w; ++i) {
                dst_word(q * w + i, src_word(q * w + i));
            }
            continue;
        }
        vec4 f = vec4(0.0);
        ivec4 v = ivec4(0);
        if (SRC == 0) {
            f = uintBitsToFloat(uvec4(src[4 * q], src[4 * q + 1], src[4 * q + 2], src[4 * q + 3]));
        } else if (SRC == 1) {
            f = vec4(unpackHalf2x16(src[2 * q]), unpackHalf2x16(src[2 * q + 1]));
        } else if (SRC == 2) {
            v = ivec4(src[4 * q], src[4 * q + 1], src[4 * q + 2], src[4 * q + 3]);
        } else if (SRC == 4) {
            v = ivec4(src_word(8 * q), src_word(8 * q + 2), src_word(8 * q + 4), src_word(8 * q + 6));
        } else if (SRC == 5) {
            uint lo = src[2 * q];
            uint hi = src[2 * q + 1];
            // Sign-extend each half.
            v = ivec4(int(lo << 16) >> 16, int(lo) >> 16, int(hi << 16) >> 16, int(hi) >> 16);
        } else {
            uint w = src[q];
            // Sign-extend each byte.
            v = ivec4(int(w << 24) >> 24, int(w << 16) >> 24, int(w << 8) >> 24, int(w) >> 24);
        }
        if (is_int(SRC)) {
            f = vec4(v);
        } else if (is_int(DST)) {
            // Truncate toward zero, saturating at the i32 range (2147483520 is the largest
            // float below 2^31; 2^31 and above give i32's largest).
            v = ivec4(trunc(clamp(f, -2147483648.0, 2147483520.0)));
            v = mix(v, ivec4(2147483647), greaterThanEqual(f, vec4(2147483648.0)));
        }
        if (DST == 0) {
            uvec4 u = floatBitsToUint(f);
            dst[4 * q] = u.x;
            dst[4 * q + 1] = u.y;
            dst[4 * q + 2] = u.z;
            dst[4 * q + 3] = u.w;
        } else if (DST == 1) {
            dst[2 * q] = packHalf2x16(f.xy);
            dst[2 * q + 1] = packHalf2x16(f.zw);
        } else if (DST == 2) {
            dst[4 * q] = uint(v.x);
            dst[4 * q + 1] = uint(v.y);
            dst[4 * q + 2] = uint(v.z);
            dst[4 * q + 3] = uint(v.w);
        } else if (DST == 4) {
            for (uint k = 0; k < 4; ++k) {
                dst_word(8 * q + 2 * k, uint(v[k]));
                dst_word(8 * q + 2 * k + 1, v[k] < 0 ? 0xFFFFFFFFu : 0u);
            }
        } else if (DST == 5) {
            uvec4 h = uvec4(clamp(v, -32768, 32767)) & 0xFFFFu;
            dst[2 * q] = h.x | (h.y << 16);
            dst[2 * q + 1] = h.z | (h.w << 16);
        } else {
            uvec4 b = uvec4(clamp(v, -128, 127)) & 0xFFu;
            dst[q] = b.x | (b.y << 8) | (b.z << 16) | (b.w << 24);
        }
    }
}
