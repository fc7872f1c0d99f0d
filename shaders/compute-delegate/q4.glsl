// The 4-bit weights of `linear_q4gsw`, eight to a 32-bit word (the even column in the low
// nibble of each byte), as the packed products read them.
//
// `nibbles` gives a word's eight values minus 8, each times a power of 2 that its place in
// the word leaves: each nibble is masked in place and set into the mantissa of 2^23, so the
// float is 2^23 + q * 2^(4 p) exactly for the nibble's place p in the word (the top three
// nibbles are shifted down first, so that all fit below the exponent), and 2^23 + 8 * 2^(4 p)
// is subtracted, exactly. One mask-and-or and one subtraction a weight: no shift or
// integer-to-float conversion for most. The x that each value multiplies is scaled by
// Q4_X_LO / Q4_X_HI beforehand (once for all the columns that share it), which undoes the
// power of 2 exactly, so each product (q - 8) * x is the same float as without the places.
const vec4 Q4_X_LO = vec4(1.0, 0.0625, 0.00390625, 0.000244140625);
const vec4 Q4_X_HI = vec4(0.0000152587890625, 1.0, 0.0625, 0.00390625);

void nibbles(uint word, out vec4 lo, out vec4 hi) {
    const uint BASE = 0x4B000000u;
    uint top = word >> 20;
    lo = uintBitsToFloat((uvec4(word) & uvec4(0xFu, 0xF0u, 0xF00u, 0xF000u)) | BASE)
        - vec4(8388616.0, 8388736.0, 8390656.0, 8421376.0);
    hi = uintBitsToFloat((uvec4(word, top, top, top) & uvec4(0xF0000u, 0xFu, 0xF0u, 0xF00u)) | BASE)
        - vec4(8912896.0, 8388616.0, 8388736.0, 8390656.0);
}
