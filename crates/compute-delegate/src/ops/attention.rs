//! Attention: rotary position embeddings (`et_vk.apply_rotary_emb`, its Hugging Face and
//! pair-interleaved forms), scaled dot-product attention (`et_vk.sdpa`) and attention over a
//! KV cache (`llama::sdpa_with_kv_cache`, `llama::update_cache`, `llama::custom_sdpa`),
//! composed of the other families' ops as ExecuTorch defines them.
//!
//! A KV cache is a constant of the graph (zeros in the program file) that the graph writes in
//! place ([`GraphBuilder::assign`]), so it lives on the device for as long as the built graph
//! does and carries over from one execution to the next. Positions may be known only on the
//! device (a program's `input_pos`): the rows written and the causal mask are computed from
//! them there, so one built graph serves every position.

use super::{Call, Fallback, Kind, OpDef, Param, Position, one};
use crate::error::Result;
use crate::graph::{GraphBuilder, KernelOut, TensorId, shape_err};
use crate::kernels::{Kernel, push};
use vk_core::DType;

/// Cached attention over fewer queries than this splits each query's rows among work groups.
const SPLIT_BELOW: usize = 256;
/// The cache rows of one share of a split attention (on an H200, a 1B Llama's decode step
/// at 128 rows a share ran 12 us an attention, against 13 at 64, 17 at 256 and 18 at 32).
const SPLIT_ROWS: usize = 128;

/// The value rows a split attention's work group loads before its reductions
/// (`attend_cache.glsl`'s `PRELOAD_ROWS`): a whole share of `rows` unless
/// [`ENV_ATTEND_PRELOAD`] asks for 32 or 64.
fn preload_rows(rows: usize) -> u32 {
    match std::env::var(ENV_ATTEND_PRELOAD).as_deref() {
        Ok("32") => 32,
        Ok("64") => 64,
        _ => rows.min(128) as u32,
    }
}

/// Environment variable for tuning the value rows a split attention loads early: `32` or
/// `64` (default: a whole share, up to 128).
pub const ENV_ATTEND_PRELOAD: &str = "VKDELEGATE_ATTEND_PRELOAD";

/// Environment variable for tuning the cache rows of a split attention's share: `32`, `64`,
/// `128` or `256` (default [`SPLIT_ROWS`]).
pub const ENV_ATTEND_SPLIT_ROWS: &str = "VKDELEGATE_ATTEND_SPLIT_ROWS";

/// The ops of this family, one registration line each.
#[rustfmt::skip]
pub(super) const OPS: &[OpDef] = &[
    OpDef::new(&["et_vk.apply_rotary_emb.default", "apply_rotary_emb"], &[Param::tensor("xq"), Param::tensor("xk"), Param::tensor("freqs_cos"), Param::tensor("freqs_sin")], rotary),
    OpDef::new(&["et_vk.apply_rotary_emb_hf.default", "apply_rotary_emb_hf"], &[Param::tensor("xq"), Param::tensor("xk"), Param::tensor("freqs_cos"), Param::tensor("freqs_sin"), Param::new("start_pos", Kind::Int, Fallback::Int(0))], rotary_hf),
    OpDef::new(&["et_vk.apply_rotary_emb_interleaved.default", "apply_rotary_emb_interleaved"], &[Param::tensor("x"), Param::tensor("freqs_cis")], rotary_interleaved),
    OpDef::new(&["llama::sdpa_with_kv_cache", "llama.sdpa_with_kv_cache.default", "sdpa_with_kv_cache.default", "sdpa_with_kv_cache"], &[Param::tensor("query"), Param::tensor("key"), Param::tensor("value"), Param::tensor("key_cache"), Param::tensor("value_cache"), Param::new("start_pos", Kind::Int, Fallback::Required), Param::new("seq_len", Kind::Int, Fallback::Null), Param::opt_tensor("attn_mask"), Param::new("drpout_p|dropout_p", Kind::Float, Fallback::Float(0.0)), Param::new("is_causal", Kind::Bool, Fallback::Bool(false)), Param::new("scale", Kind::Float, Fallback::Null)], sdpa_with_kv_cache),
    OpDef::new(&["llama::update_cache", "llama.update_cache.default", "update_cache.default", "update_cache"], &[Param::tensor("value"), Param::tensor("cache"), Param::new("start_pos", Kind::Int, Fallback::Required)], update_cache),
    OpDef::new(&["llama::custom_sdpa", "llama.custom_sdpa.default", "custom_sdpa.default", "custom_sdpa"], &[Param::tensor("query"), Param::tensor("key_cache"), Param::tensor("value_cache"), Param::new("start_pos", Kind::Int, Fallback::Required), Param::opt_tensor("attn_mask"), Param::new("drpout_p|dropout_p", Kind::Float, Fallback::Float(0.0)), Param::new("is_causal", Kind::Bool, Fallback::Bool(false)), Param::new("scale", Kind::Float, Fallback::Null)], custom_sdpa),
    OpDef::new(&["et_vk.sdpa.default", "et_vk::sdpa", "sdpa"], &[Param::tensor("q"), Param::tensor("k"), Param::tensor("v"), Param::opt_tensor("attn_mask"), Param::new("scale", Kind::Float, Fallback::Null)], sdpa),
];

/// `(xq, xk)` rotated by `freqs_cos` and `freqs_sin` (`[seq, d / 2]`, or `[seq, heads, d / 2]`)
/// in consecutive (real, imaginary) pairs of the last dim of `[batch, seq, heads, d]`: one
/// dispatch each (`rope.comp`).
fn rotary(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (q, k, cos, sin) = (c.tensor(0)?, c.tensor(1)?, c.tensor(2)?, c.tensor(3)?);
    let mut out = Vec::with_capacity(2);
    for (at, x) in [(0, q), (1, k)] {
        let shape = c.shape(x);
        let [_, s, h, d] = shape[..] else {
            return Err(c.err(
                at,
                format!("{shape:?}: [batch, seq, heads, head_dim] is needed"),
            ));
        };
        let per_head = c.shape(cos).len() == 3;
        let want = if per_head {
            s * h * (d / 2)
        } else {
            s * (d / 2)
        };
        for (f, fat) in [(cos, 2), (sin, 3)] {
            let n: usize = c.shape(f).iter().product();
            if d % 2 != 0 || n != want {
                return Err(c.err(
                    fat,
                    format!(
                        "{:?} for {shape:?}: [seq, head_dim / 2] or [seq, heads, head_dim / 2] \
                         of an even head_dim is needed",
                        c.shape(f)
                    ),
                ));
            }
        }
        let dtype = c.g.float_operand("apply_rotary_emb", x)?.dtype;
        let (fc, fs) = (c.g.as_dtype(cos, dtype)?, c.g.as_dtype(sin, dtype)?);
        let word = |v: usize| u32::try_from(v).map_err(|_| c.err(at, format!("{v} is over 2^32")));
        let push = push::RopePush {
            total: word(shape.iter().product())?,
            s: word(s)?,
            h: word(h)?,
            d: word(d)?,
            per_head: u32::from(per_head),
            ..Default::default()
        };
        // The position binding is unused without a cache (`cache_rows` 0).
        out.push(c.g.kernel_node(
            "apply_rotary_emb",
            Kernel::Rope,
            &[x, fc, fs, x],
            (dtype, shape.clone()),
            &push,
        )?);
    }
    Ok(out)
}

/// `x` viewed as `pairs` (its last dim 2: real, imaginary) times `cos + i sin` (which
/// broadcast against `pairs` without its last dim), back in `x`'s shape and dtype.
fn rotate_pairs(
    g: &mut GraphBuilder,
    x: TensorId,
    pairs: &[isize],
    cos: TensorId,
    sin: TensorId,
) -> Result<TensorId> {
    let (shape, dtype) = (g.shape(x).unwrap_or_default().to_vec(), g.dtype(x));
    let xf = g.as_dtype(x, DType::F32)?;
    let (cos, sin) = (g.as_dtype(cos, DType::F32)?, g.as_dtype(sin, DType::F32)?);
    let v = g.reshape(xf, pairs)?;
    let (re, im) = (g.select(v, -1, 0)?, g.select(v, -1, 1)?);
    let (rc, is) = (g.mul(re, cos)?, g.mul(im, sin)?);
    let out_re = g.sub(rc, is)?;
    let (rs, ic) = (g.mul(re, sin)?, g.mul(im, cos)?);
    let out_im = g.add(rs, ic)?;
    let end = pairs.len() - 1;
    let (out_re, out_im) = (g.unsqueeze_at(out_re, end)?, g.unsqueeze_at(out_im, end)?);
    let y = g.cat(&[out_re, out_im], -1)?;
    let to: Vec<isize> = shape.iter().map(|&d| d as isize).collect();
    let y = g.reshape(y, &to)?;
    g.as_dtype(y, dtype.unwrap_or(DType::F32))
}

/// Hugging Face's rotation (`rotate_half`) of `x`'s first `rotary_dim` columns by rows
/// `start_pos .. start_pos + x.shape[1]` of `freqs_cos` and `freqs_sin` (`[.., rotary_dim]`,
/// fewer rows where they end), a dim of 1 inserted after their first and broadcast as
/// PyTorch does: `x` `[batch, seq, heads, d]` with tables `[positions, rotary_dim]` (a Llama's
/// layout), or `[batch, heads, seq, d]` with `[batch, seq, rotary_dim]` (Phi's and GPT-NeoX's,
/// whose partial rotations ExecuTorch matches as this op too). Columns past `rotary_dim` pass
/// unchanged.
fn rotary_hf(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (q, k, cos, sin) = (c.tensor(0)?, c.tensor(1)?, c.tensor(2)?, c.tensor(3)?);
    let start = c.count(4)?;
    let (cs, ss) = (c.shape(cos), c.shape(sin));
    let rot = cs.last().copied().unwrap_or(0);
    if cs.is_empty() || cs != ss || rot % 2 != 0 {
        return Err(c.err(
            2,
            format!("{cs:?} and {ss:?}: tables of one shape, an even rotary_dim last"),
        ));
    }
    // One window for both, from q's second dim, as ExecuTorch slices it.
    let Some(&s) = c.shape(q).get(1) else {
        return Err(c.err(
            0,
            format!("{:?}: a rank of at least 2 is needed", c.shape(q)),
        ));
    };
    let mut out = Vec::with_capacity(2);
    for x in [q, k] {
        let shape = c.shape(x);
        let (Some(_), Some(&d)) = (shape.get(1), shape.last()) else {
            return Err(c.err(0, format!("{shape:?}: a rank of at least 2 is needed")));
        };
        if rot > d {
            return Err(c.err(
                2,
                format!("{cs:?}: a rotary_dim of at most {d} for {shape:?}"),
            ));
        }
        // Rows `start..start + x.shape[1]` of the tables (fewer where they end first), with a
        // dim of 1 after the first, broadcast against `x`'s first `rot` columns.
        let end = (start + s).min(cs[0]).max(start.min(cs[0]));
        let mut window_shape: Vec<isize> = cs.iter().map(|&v| v as isize).collect();
        window_shape[0] = (end - start.min(cs[0])) as isize;
        window_shape.insert(1, 1);
        let g = &mut *c.g;
        let window = |g: &mut GraphBuilder, f: TensorId| -> Result<TensorId> {
            let f = g.slice(f, 0, start.min(cs[0]) as isize, end as isize, 1)?;
            let f = g.as_dtype(f, DType::F32)?;
            g.reshape(f, &window_shape)
        };
        let (fc, fs) = (window(g, cos)?, window(g, sin)?);
        let dtype = g.dtype(x).unwrap_or(DType::F32);
        let xf = g.as_dtype(x, DType::F32)?;
        let head = g.slice(xf, -1, 0, rot as isize, 1)?;
        let x1 = g.slice(head, -1, 0, (rot / 2) as isize, 1)?;
        let x2 = g.slice(head, -1, (rot / 2) as isize, rot as isize, 1)?;
        let neg = g.mul_scalar(x2, -1.0)?;
        let half = g.cat(&[neg, x1], -1)?;
        let (a, b) = (g.mul(head, fc)?, g.mul(half, fs)?);
        let mut y = g.add(a, b)?;
        if rot < d {
            let pass = g.slice(xf, -1, rot as isize, d as isize, 1)?;
            y = g.cat(&[y, pass], -1)?;
        }
        out.push(g.as_dtype(y, dtype)?);
    }
    Ok(out)
}

/// EdgeTAM's rotation of `x` `[batch, n, c]` whose (real, imaginary) pairs interleave along
/// `c`, by `freqs_cis` of any shape holding `[n, c / 2, 2]` (cos, sin) pairs.
fn rotary_interleaved(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, f) = (c.tensor(0)?, c.tensor(1)?);
    let shape = c.shape(x);
    let [b, n, ch] = shape[..] else {
        return Err(c.err(0, format!("{shape:?}: [batch, n, c] is needed")));
    };
    let numel: usize = c.shape(f).iter().product();
    if ch % 2 != 0 || numel != n * ch {
        return Err(c.err(
            1,
            format!("{:?} for x {shape:?}: n * c elements", c.shape(f)),
        ));
    }
    let g = &mut *c.g;
    let cs = g.reshape(f, &[n as isize, (ch / 2) as isize, 2])?;
    let (cos, sin) = (g.select(cs, -1, 0)?, g.select(cs, -1, 1)?);
    let pairs = [b, n, ch / 2, 2].map(|v| v as isize);
    one(rotate_pairs(g, x, &pairs, cos, sin)?)
}

/// `softmax(q @ k^T * scale + attn_mask) @ v` over the last two dims (`scale`: `1 / sqrt(d)`
/// when absent), in f32, given in `q`'s dtype.
fn sdpa(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (q, k, v, mask) = (c.tensor(0)?, c.tensor(1)?, c.tensor(2)?, c.opt_tensor(3)?);
    let d = c.shape(q).last().copied().unwrap_or(0);
    let scale = match c.opt_float(4)? {
        Some(s) => s as f32,
        None => 1.0 / (d as f32).sqrt(),
    };
    one(c.g.attention(q, k, v, mask, scale)?)
}

/// Writes `key` and `value` (`[b, s, kv_heads, d]`) into the caches (`[b, max, kv_heads, d]`)
/// at rows `start_pos ..`, then attends `query` (`[b, s, heads, d]`) over the caches' rows up
/// to each query's own position (`start_pos + i`). ExecuTorch's Vulkan backend takes no
/// attention mask here; neither does this.
fn sdpa_with_kv_cache(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (q, k, v) = (c.tensor(0)?, c.tensor(1)?, c.tensor(2)?);
    let (kc, vc, start) = (c.tensor(3)?, c.tensor(4)?, c.position(5)?);
    if c.opt_tensor(7)?.is_some() {
        return Err(c.err(7, "an attention mask with a KV cache is not supported"));
    }
    let scale = c.opt_float(10)?;
    let kc = c.g.cache_write(kc, k, start)?;
    let vc = c.g.cache_write(vc, v, start)?;
    one(c.g.cached_attention(q, kc, vc, start, scale)?)
}

/// Writes `value` into `cache` at rows `start_pos ..`; the op's own output is the cache as
/// written.
fn update_cache(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (value, cache, start) = (c.tensor(0)?, c.tensor(1)?, c.position(2)?);
    one(c.g.cache_write(cache, value, start)?)
}

/// `query` attending over the caches' rows up to each query's position (`start_pos + i`);
/// with `attn_mask`, over every row with the mask added instead.
fn custom_sdpa(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (q, kc, vc, start) = (c.tensor(0)?, c.tensor(1)?, c.tensor(2)?, c.position(3)?);
    let scale = c.opt_float(7)?;
    match c.opt_tensor(4)? {
        None => one(c.g.cached_attention(q, kc, vc, start, scale)?),
        Some(mask) => {
            let d = c.shape(q).last().copied().unwrap_or(1);
            let scale = scale.map_or(1.0 / (d as f32).sqrt(), |s| s as f32);
            let (qp, kp, vp) = c.g.heads_first(q, kc, vc)?;
            let y = c.g.attention(qp, kp, vp, Some(mask), scale)?;
            one(c.g.permute(y, &[0, 2, 1, 3])?)
        }
    }
}

impl GraphBuilder {
    /// `cache` (`[b, max, h, d]`) with rows `start .. start + s` replaced by `new`
    /// (`[b, s, h, d]`), written in place by one dispatch over the new rows
    /// (`cache_write.comp`); rows past the cache are dropped. Returns the cache as written:
    /// every later read goes through it.
    pub(crate) fn cache_write(
        &mut self,
        cache: TensorId,
        new: TensorId,
        start: Position,
    ) -> Result<TensorId> {
        const OP: &str = "update_cache";
        let ci = self.info(OP, cache)?.clone();
        let ni = self.info(OP, new)?.clone();
        let (&[b, max, h, d], &[nb, s, nh, nd]) = (&ci.shape[..], &ni.shape[..]) else {
            return Err(shape_err(
                OP,
                format!(
                    "cache '{}' {:?} and '{}' {:?}: both [batch, positions, heads, head_dim]",
                    ci.name, ci.shape, ni.name, ni.shape
                ),
            ));
        };
        if (b, h, d) != (nb, nh, nd) || s > max {
            return Err(shape_err(
                OP,
                format!(
                    "'{}' {:?} into cache '{}' {:?}",
                    ni.name, ni.shape, ci.name, ci.shape
                ),
            ));
        }
        let new = self.as_dtype(new, ci.dtype)?;
        let (pos, plus, has_pos) = self.position_operand(OP, start, new)?;
        let word = |v: usize| {
            u32::try_from(v).map_err(|_| shape_err(OP, format!("{v} elements are over 2^32")))
        };
        let push = push::CacheWritePush {
            total: word(ni.numel())?,
            s: word(s)?,
            max_rows: word(max)?,
            hd: word(h * d)?,
            plus,
            has_pos,
        };
        let out = KernelOut {
            dtype: ci.dtype,
            shape: ni.shape.clone(),
            storage: Some(ci.storage),
            groups: None,
            precision: None,
            spec: vec![],
        };
        self.kernel_node_into(OP, Kernel::CacheWrite, &[new, pos], out, &push)?;
        let written = format!("{}'", ci.name);
        Ok(self.push_tensor(
            written,
            ci.dtype,
            ci.shape.clone(),
            Some((crate::graph::StorageKind::Temp, Some(ci.storage))),
        ))
    }

    /// `[b, s, heads, d]` query and `[b, t, kv_heads, d]` keys and values as `[b, heads, s, d]`
    /// and `[b, heads, t, d]`, each key and value head serving `heads / kv_heads` query heads.
    pub(crate) fn heads_first(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
    ) -> Result<(TensorId, TensorId, TensorId)> {
        const OP: &str = "sdpa";
        let (qs, ks) = (
            self.info(OP, q)?.shape.clone(),
            self.info(OP, k)?.shape.clone(),
        );
        let (&[_, _, hq, _], &[b, t, hk, d]) = (&qs[..], &ks[..]) else {
            return Err(shape_err(
                OP,
                format!("query {qs:?} and keys {ks:?}: both rank 4"),
            ));
        };
        if hk == 0 || hq % hk != 0 {
            return Err(shape_err(
                OP,
                format!("{hq} query heads over {hk} key heads"),
            ));
        }
        let qp = self.permute(q, &[0, 2, 1, 3])?;
        let mut kv = [
            self.permute(k, &[0, 2, 1, 3])?,
            self.permute(v, &[0, 2, 1, 3])?,
        ];
        if hq != hk {
            for x in &mut kv {
                let five =
                    self.reshape(*x, &[b as isize, hk as isize, 1, t as isize, d as isize])?;
                let grouped = self.cat(&vec![five; hq / hk], 2)?;
                *x = self.reshape(grouped, &[b as isize, hq as isize, t as isize, d as isize])?;
            }
        }
        Ok((qp, kv[0], kv[1]))
    }

    /// `query` (`[b, s, heads, d]`) attending over the cache rows `j <= start + i` for query
    /// `i` (`[b, max, kv_heads, d]` keys and values), as `[b, s, heads, d]`.
    pub(crate) fn cached_attention(
        &mut self,
        q: TensorId,
        kc: TensorId,
        vc: TensorId,
        start: Position,
        scale: Option<f64>,
    ) -> Result<TensorId> {
        let qs = self.info("sdpa", q)?.shape.clone();
        let max = self.info("sdpa", kc)?.shape.get(1).copied().unwrap_or(0);
        let (s, d) = (
            qs.get(1).copied().unwrap_or(0),
            qs.last().copied().unwrap_or(1),
        );
        let scale = scale.map_or(1.0 / (d as f32).sqrt(), |v| v as f32);
        if let Some(y) = self.attend_cache(q, [kc, vc], start, scale)? {
            return Ok(y);
        }
        // allowed(i, j) = j - i <= start: 0.0 where allowed, a large negative number not.
        let gap: Vec<f32> = (0..s * max)
            .map(|at| (at % max) as f32 - (at / max) as f32)
            .collect();
        let name = format!("causal_gap{}", self.node_count());
        let gap = self.constant_f32(&name, &[s, max], &gap)?;
        let from = self.positions(start, 1)?;
        let from = self.as_dtype(from, DType::F32)?;
        let allowed = self.binary(crate::graph::BinaryOp::Le, gap, from)?;
        let allowed = self.as_dtype(allowed, DType::F32)?;
        let mask = self.add_scalar(allowed, -1.0)?;
        let mask = self.mul_scalar(mask, 1e30)?;
        let (qp, kp, vp) = self.heads_first(q, kc, vc)?;
        let y = self.attention(qp, kp, vp, Some(mask), scale)?;
        self.permute(y, &[0, 2, 1, 3])
    }

    /// A position as a kernel's operands: the i32 tensor to bind (`unused` where the position
    /// is known at build), the constant added to it, and whether the tensor holds a position.
    fn position_operand(
        &mut self,
        op: &'static str,
        start: Position,
        unused: TensorId,
    ) -> Result<(TensorId, i32, u32)> {
        let (t, plus, has_pos) = match start {
            Position::Static(at) => (unused, at, 0),
            Position::Device(t, plus) => (self.as_dtype(t, DType::I32)?, plus, 1),
        };
        let plus = i32::try_from(plus).map_err(|_| shape_err(op, format!("position {plus}")))?;
        Ok((t, plus, has_pos))
    }

    /// [`GraphBuilder::cached_attention`] in one dispatch (`attend_cache.comp`) where its
    /// scores fit in shared memory (at most 4096 cache rows) and the head size divides 128;
    /// `None` elsewhere. Fewer than [`SPLIT_BELOW`] queries (a decode step) take the rows in
    /// shares instead, a work group each (`attend_split.comp`, whose last share of a query
    /// combines them), so that a long cache keeps the GPU busy.
    fn attend_cache(
        &mut self,
        q: TensorId,
        [kc, vc]: [TensorId; 2],
        start: Position,
        scale: f32,
    ) -> Result<Option<TensorId>> {
        const OP: &str = "sdpa";
        let qi = self.float_operand(OP, q)?.clone();
        let ki = self.float_operand(OP, kc)?.clone();
        let vi = self.float_operand(OP, vc)?.clone();
        if ki.dtype != qi.dtype || vi.dtype != qi.dtype || vi.shape != ki.shape {
            return Ok(None);
        }
        let (&[b, s, hq, d], &[kb, max, hk, kd]) = (&qi.shape[..], &ki.shape[..]) else {
            return Ok(None);
        };
        let fits = d % 4 == 0 && 128 % d == 0 && max <= 4096 && hk > 0 && hq % hk == 0;
        if !fits || kb != b || kd != d {
            return Ok(None);
        }
        let (pos, plus, has_pos) = self.position_operand(OP, start, kc)?;
        let word =
            |v: usize| u32::try_from(v).map_err(|_| shape_err(OP, format!("{v} is over 2^32")));
        let groups = b * s * hq;
        let split_rows = match std::env::var(ENV_ATTEND_SPLIT_ROWS).as_deref() {
            Ok("32") => 32,
            Ok("64") => 64,
            Ok("256") => 256,
            _ => SPLIT_ROWS,
        };
        // The rotary tables' bindings are unused until a pass fuses a rotation of `q` in
        // (`ROPE`, specialization constant 0); they are bound to the keys, so that `q` keeps
        // one reader. The head size is specialization constant 1 (`HEAD_D`), the value rows
        // a share loads before its reductions constant 2 (`PRELOAD_ROWS`).
        let operands = [q, kc, vc, pos, kc, kc];
        let out = KernelOut {
            dtype: qi.dtype,
            shape: qi.shape.clone(),
            storage: None,
            groups: Some(groups as u64),
            precision: None,
            spec: vec![0, d as u32, preload_rows(split_rows)],
        };
        // Few queries (a decode step): each query's rows in shares of SPLIT_ROWS, one work
        // group each, the last of a query's shares combining them. Both kernels read one push
        // block (`attend_cache.glsl`).
        let chunks = max.div_ceil(split_rows);
        let split = groups < SPLIT_BELOW && chunks >= 2;
        let (shares, share_rows) = if split {
            (chunks, split_rows)
        } else {
            (1, max)
        };
        let push = push::AttendCachePush {
            groups: word(groups)?,
            s: word(s)?,
            hq: word(hq)?,
            hk: word(hk)?,
            d: word(d)?,
            max_rows: word(max)?,
            plus,
            has_pos,
            scale,
            chunks: word(shares)?,
            chunk_rows: word(share_rows)?,
        };
        if !split {
            return Ok(Some(self.kernel_node_into(
                OP,
                Kernel::AttendCache,
                &operands,
                out,
                &push,
            )?));
        }
        // The shares' partial results and counts are scratch bindings the lowering adds.
        let out = KernelOut {
            groups: Some((groups * chunks) as u64),
            ..out
        };
        Ok(Some(self.kernel_node_into(
            OP,
            Kernel::AttendSplit,
            &operands,
            out,
            &push,
        )?))
    }

    /// `softmax(q @ k^T * scale + mask) @ v` over the last two dims of `q` `[.., s, d]`, `k`
    /// `[.., t, d]` and `v` `[.., t, e]`, computed in f32 and given in `q`'s dtype.
    pub fn attention(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        mask: Option<TensorId>,
        scale: f32,
    ) -> Result<TensorId> {
        const OP: &str = "sdpa";
        let qi = self.float_operand(OP, q)?;
        let ki = self.float_operand(OP, k)?;
        let r = ki.shape.len();
        if r < 2 || qi.shape.len() != r || qi.shape[r - 1] != ki.shape[r - 1] {
            return Err(shape_err(
                OP,
                format!(
                    "q '{}' {:?} and k '{}' {:?} must have one rank of 2 or more and one head size",
                    qi.name, qi.shape, ki.name, ki.shape
                ),
            ));
        }
        let f32 = |g: &mut GraphBuilder, t: TensorId| g.as_dtype(t, DType::F32);
        let (qf, kf, vf) = (f32(self, q)?, f32(self, k)?, f32(self, v)?);
        let mut perm: Vec<isize> = (0..r as isize).collect();
        perm.swap(r - 2, r - 1);
        let kt = self.permute(kf, &perm)?;
        let scores = self.matmul(qf, kt)?;
        let mut scores = self.mul_scalar(scores, scale)?;
        if let Some(m) = mask {
            let m = f32(self, m)?;
            scores = self.add(scores, m)?;
        }
        let p = self.softmax(scores, -1)?;
        let y = self.matmul(p, vf)?;
        self.as_dtype(y, qi.dtype)
    }
}
