// The CACHE epilogue of the one- to four-row products (gemv_q4.comp, gemv_t.glsl): output
// row r is stored as row start + r of a KV cache [cache_rows, heads, head_d] (start =
// pos[0] + plus where the position is on the device, has_pos, else plus; rows outside the
// cache dropped), each (even, odd) pair of a head first rotated by the rotary tables cos_
// and sin_ as rope.comp rotates it where `rope` is set (1: tables of [rows, head_d / 2];
// 2: of [rows, heads, head_d / 2]). The including shader declares those push fields
// (pc.cache_rows, heads, head_d, plus, has_pos, rope) and the buffers pos, cos_ and sin_.

// Column col's output v of row r as the cache holds it: rotated with its pair's output
// `other` (column col ^ 1) where `rope` is set.
float cache_value(float v, float other, uint col, uint r) {
    if (pc.rope == 0) {
        return v;
    }
    uint e = col % pc.head_d;
    uint head = col / pc.head_d;
    bool even = (e & 1u) == 0u;
    float re = even ? v : other;
    float im = even ? other : v;
    uint f = (pc.rope == 2 ? r * pc.heads + head : r) * (pc.head_d / 2) + e / 2;
    float cs = float(cos_[f]);
    float sn = float(sin_[f]);
    return even ? re * cs - im * sn : re * sn + im * cs;
}

// Whether column col of row r falls inside the cache, and then its element there.
bool cache_element(uint col, uint r, out uint element) {
    int at = pc.plus + (pc.has_pos == 1 ? pos[0] : 0) + int(r);
    element = (uint(at) * pc.heads + col / pc.head_d) * pc.head_d + col % pc.head_d;
    return at >= 0 && at < int(pc.cache_rows);
}
