// TOSA's integer requantization (qadd.comp, qconv.comp, qpool.comp).
//
// apply_scale_32(v, m, s) = (v * m + 2^(s-1)) >> s in 64-bit arithmetic, saturated to i32
// (RESCALE with scale32 and single rounding; apply_scale_32_rounded also double rounding),
// computed with 32-bit operations. byte_at reads
// the signed byte i of a packed word.

// With `double_round` (RESCALE's DOUBLE_ROUND, for shifts past 31): 2^30 more is added to
// the rounding constant for v >= 0, and 2^30 less for v < 0, as TOSA's apply_scale_32 does.
int apply_scale_32_rounded(int v, int m, uint s, bool double_round) {
    int hi;
    int lo_s;
    imulExtended(v, m, hi, lo_s);
    uint lo = uint(lo_s);
    if (double_round && s > 31) {
        uint carry;
        lo = uaddCarry(lo, v >= 0 ? 0x40000000u : 0xC0000000u, carry);
        hi += int(carry) + (v >= 0 ? 0 : -1);
    }
    // + 2^(s-1)
    if (s <= 32) {
        uint carry;
        lo = uaddCarry(lo, 1u << (s - 1), carry);
        hi += int(carry);
    } else {
        hi += 1 << (s - 33);
    }
    uint rlo;
    int rhi;
    if (s < 32) {
        rlo = (lo >> s) | (uint(hi) << (32 - s));
        rhi = hi >> s;
    } else if (s == 32) {
        rlo = uint(hi);
        rhi = hi >> 31;
    } else {
        rlo = uint(hi >> (s - 32));
        rhi = hi >> 31;
    }
    // Saturate when the 64-bit result does not fit in 32 bits.
    if (rhi != (int(rlo) >> 31)) {
        return rhi < 0 ? -2147483647 - 1 : 2147483647;
    }
    return int(rlo);
}

int apply_scale_32(int v, int m, uint s) {
    return apply_scale_32_rounded(v, m, s, false);
}

int byte_at(uint w, uint i) {
    return int(w << (24 - 8 * i)) >> 24;
}
