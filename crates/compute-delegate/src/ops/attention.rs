//! Attention: rotary position embeddings (`et_vk.apply_rotary_emb`, its Hugging Face and
//! pair-interleaved forms) and scaled dot-product attention (`et_vk.sdpa`), composed of the
//! other families' ops as ExecuTorch defines them.

use super::{Call, Fallback, Kind, OpDef, Param, one};
use crate::error::Result;
use crate::graph::{GraphBuilder, TensorId, shape_err};
use vk_core::DType;

/// The ops of this family, one registration line each.
#[rustfmt::skip]
pub(super) const OPS: &[OpDef] = &[
    OpDef::new(&["et_vk.apply_rotary_emb.default", "apply_rotary_emb"], &[Param::tensor("xq"), Param::tensor("xk"), Param::tensor("freqs_cos"), Param::tensor("freqs_sin")], rotary),
    OpDef::new(&["et_vk.apply_rotary_emb_hf.default", "apply_rotary_emb_hf"], &[Param::tensor("xq"), Param::tensor("xk"), Param::tensor("freqs_cos"), Param::tensor("freqs_sin"), Param::new("start_pos", Kind::Int, Fallback::Int(0))], rotary_hf),
    OpDef::new(&["et_vk.apply_rotary_emb_interleaved.default", "apply_rotary_emb_interleaved"], &[Param::tensor("x"), Param::tensor("freqs_cis")], rotary_interleaved),
    OpDef::new(&["et_vk.sdpa.default", "et_vk::sdpa", "sdpa"], &[Param::tensor("q"), Param::tensor("k"), Param::tensor("v"), Param::opt_tensor("attn_mask"), Param::new("scale", Kind::Float, Fallback::Null)], sdpa),
];

/// `(xq, xk)` rotated by `freqs_cos` and `freqs_sin` (`[seq, d / 2]`, or `[seq, heads, d / 2]`)
/// in consecutive (real, imaginary) pairs of the last dim of `[batch, seq, heads, d]`.
fn rotary(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (q, k, cos, sin) = (c.tensor(0)?, c.tensor(1)?, c.tensor(2)?, c.tensor(3)?);
    let mut out = Vec::with_capacity(2);
    for x in [q, k] {
        let shape = c.shape(x);
        let [b, s, h, d] = shape[..] else {
            return Err(c.err(
                0,
                format!("{shape:?}: [batch, seq, heads, head_dim] is needed"),
            ));
        };
        let freq = |c: &mut Call<'_>, f: TensorId| -> Result<TensorId> {
            let to = match c.shape(f).len() {
                3 => [1, s, h, d / 2],
                _ => [1, s, 1, d / 2],
            };
            let to = to.map(|v| v as isize);
            c.g.reshape(f, &to)
        };
        let (fc, fs) = (freq(c, cos)?, freq(c, sin)?);
        let pairs = [b, s, h, d / 2, 2].map(|v| v as isize);
        out.push(rotate_pairs(c.g, x, &pairs, fc, fs)?);
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
    let xf = g.cast(x, DType::F32)?;
    let (cos, sin) = (g.cast(cos, DType::F32)?, g.cast(sin, DType::F32)?);
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
    g.cast(y, dtype.unwrap_or(DType::F32))
}

/// Hugging Face's rotation (`rotate_half`) of `[batch, seq, heads, d]` by rows `start_pos ..
/// start_pos + seq` of `freqs_cos` and `freqs_sin` (`[positions, rotary_dim]`); dims past
/// `rotary_dim` pass unchanged.
fn rotary_hf(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (q, k, cos, sin) = (c.tensor(0)?, c.tensor(1)?, c.tensor(2)?, c.tensor(3)?);
    let start = c.count(4)?;
    let mut out = Vec::with_capacity(2);
    for x in [q, k] {
        let shape = c.shape(x);
        let (Some(&s), Some(&d)) = (shape.get(1), shape.last()) else {
            return Err(c.err(
                0,
                format!("{shape:?}: [batch, seq, heads, head_dim] is needed"),
            ));
        };
        let rot = c.shape(cos).last().copied().unwrap_or(0);
        let positions = c.shape(cos).first().copied().unwrap_or(0);
        if shape.len() != 4 || rot > d || rot % 2 != 0 || start + s > positions {
            return Err(c.err(
                2,
                format!(
                    "{:?} for {shape:?} from position {start}: [positions >= {}, even rotary_dim <= {d}] is needed",
                    c.shape(cos),
                    start + s
                ),
            ));
        }
        let g = &mut *c.g;
        let window = |g: &mut GraphBuilder, f: TensorId| -> Result<TensorId> {
            let f = g.slice(f, 0, start as isize, (start + s) as isize, 1)?;
            let f = g.cast(f, DType::F32)?;
            g.reshape(f, &[s as isize, 1, rot as isize])
        };
        let (fc, fs) = (window(g, cos)?, window(g, sin)?);
        let dtype = g.dtype(x).unwrap_or(DType::F32);
        let xf = g.cast(x, DType::F32)?;
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
        out.push(g.cast(y, dtype)?);
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

impl GraphBuilder {
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
        let f32 = |g: &mut GraphBuilder, t: TensorId| g.cast(t, DType::F32);
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
        self.cast(y, qi.dtype)
    }
}
