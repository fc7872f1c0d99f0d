//! Shape and copy ops: views, permutes, concatenation, splits, selects and slices.

use vk_core::DType;

use super::{Call, Fallback, Kind, OpDef, Param, Position, one};
use crate::error::{Error, Result};
use crate::graph::{
    Compare, GraphBuilder, Op, StorageKind, TensorId, cast_code, norm_dim, shape_err,
};
use crate::kernels::{Kernel, push};
use crate::lower::{Lowerer, Target, contiguous_strides};

const SELF: Param = Param::tensor("self");

/// The ops of this family, one registration line each.
#[rustfmt::skip]
pub(super) const OPS: &[OpDef] = &[
    OpDef::new(&["aten.clone.default", "et_vk.prepack.default", "clone"], &[SELF], clone),
    OpDef::new(&["aten.view_copy.default", "reshape"], &[SELF, Param::new("size|shape", Kind::Ints, Fallback::Required)], view),
    OpDef::new(&["aten.squeeze_copy.dims"], &[SELF, Param::new("dim", Kind::Ints, Fallback::Required)], squeeze),
    OpDef::new(&["aten.unsqueeze_copy.default"], &[SELF, Param::new("dim", Kind::Int, Fallback::Required)], unsqueeze),
    OpDef::new(&["aten.permute_copy.default", "permute"], &[SELF, Param::new("dims|perm", Kind::Ints, Fallback::Required)], permute),
    OpDef::new(&["aten.transpose_copy.int", "transpose"], &[SELF, Param::new("dim0", Kind::Int, Fallback::Required), Param::new("dim1", Kind::Int, Fallback::Required)], transpose),
    OpDef::new(&["aten.cat.default", "cat"], &[Param::new("tensors", Kind::Tensors, Fallback::Required), Param::new("dim", Kind::Int, Fallback::Int(0))], cat),
    OpDef::new(&["aten.split_with_sizes_copy.default"], &[SELF, Param::new("split_sizes", Kind::Ints, Fallback::Required), Param::new("dim", Kind::Int, Fallback::Int(0))], split),
    OpDef::new(&["aten.select_copy.int", "select"], &[SELF, Param::new("dim", Kind::Int, Fallback::Required), Param::new("index", Kind::Int, Fallback::Required)], select),
    OpDef::new(&["aten.slice_copy.Tensor", "slice"], &[SELF, Param::new("dim", Kind::Int, Fallback::Int(0)), Param::new("start", Kind::Int, Fallback::Null), Param::new("end", Kind::Int, Fallback::Null), Param::new("step", Kind::Int, Fallback::Int(1))], slice),
    OpDef::new(&["aten.pixel_shuffle.default", "pixel_shuffle"], &[SELF, Param::new("upscale_factor", Kind::Int, Fallback::Required)], pixel_shuffle),
    OpDef::new(&["aten.permute.default"], &[SELF, Param::new("dims", Kind::Ints, Fallback::Required)], permute),
    OpDef::new(&["aten.t_copy.default", "t"], &[SELF], t_copy),
    OpDef::new(&["aten.alias_copy.default", "dim_order_ops._clone_dim_order.default"], &[SELF], clone),
    OpDef::new(&["aten._to_copy.default", "dim_order_ops._to_dim_order_copy.default", "to"], &[SELF, Param::new("dtype", Kind::Int, Fallback::Null)], to_copy),
    OpDef::new(&["aten.repeat.default", "repeat"], &[SELF, Param::new("repeats", Kind::Ints, Fallback::Required)], repeat),
    OpDef::new(&["aten.expand_copy.default", "expand"], &[SELF, Param::new("size", Kind::Ints, Fallback::Required), Param::new("implicit", Kind::Bool, Fallback::Bool(false))], expand),
    OpDef::new(&["aten.repeat_interleave.self_int", "repeat_interleave"], &[SELF, Param::new("repeats", Kind::Int, Fallback::Required), Param::new("dim", Kind::Int, Fallback::Null)], repeat_interleave),
    OpDef::new(&["aten.flip.default", "flip"], &[SELF, Param::new("dims", Kind::Ints, Fallback::Required)], flip),
    OpDef::new(&["aten.squeeze_copy.dim"], &[SELF, Param::new("dim", Kind::Ints, Fallback::Required)], squeeze),
    OpDef::new(&["aten.squeeze_copy.default"], &[SELF, Param::new("dim", Kind::Ints, Fallback::Null)], squeeze),
    OpDef::new(&["aten.slice_scatter.default", "aten::slice_scatter.out", "slice_scatter"], &[SELF, Param::tensor("src"), Param::new("dim", Kind::Int, Fallback::Int(0)), Param::new("start", Kind::Int, Fallback::Null), Param::new("end", Kind::Int, Fallback::Null), Param::new("step", Kind::Int, Fallback::Int(1))], slice_scatter),
    OpDef::new(&["aten.unfold_copy.default", "aten::unfold_copy.out", "unfold"], &[SELF, Param::new("dimension|dim", Kind::Int, Fallback::Required), Param::new("size", Kind::Int, Fallback::Required), Param::new("step", Kind::Int, Fallback::Required)], unfold),
    OpDef::new(&["aten.as_strided_copy.default", "aten::as_strided_copy.out", "as_strided"], &[SELF, Param::new("size", Kind::Ints, Fallback::Required), Param::new("stride", Kind::Ints, Fallback::Required), Param::new("storage_offset", Kind::Int, Fallback::Null)], as_strided),
    OpDef::new(&["aten.copy.default", "aten::copy.out", "copy"], &[SELF, Param::tensor("src"), Param::new("non_blocking", Kind::Bool, Fallback::Bool(false))], copy),
    OpDef::new(&["aten.constant_pad_nd.default", "pad"], &[SELF, Param::new("pad", Kind::Ints, Fallback::Required), Param::new("value", Kind::Float, Fallback::Float(0.0))], constant_pad),
];

/// `self.repeat(repeats)`: tiled `repeats[i]` times along each dim (leading dims added where
/// `repeats` is longer than the shape).
fn repeat(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, repeats) = (c.tensor(0)?, c.counts(1)?);
    let shape = c.shape(x);
    if repeats.len() < shape.len() || repeats.contains(&0) {
        return Err(c.err(1, format!("{repeats:?} for a tensor of shape {shape:?}")));
    }
    one(tile(c, x, &repeats)?)
}

/// `x` (of rank at most `repeats.len()`, leading dims of 1 added) tiled `repeats[i]` times
/// along each dim: dims of size 1 of a float tensor broadcast by a product with ones, the
/// others by concatenation.
fn tile(c: &mut Call<'_>, x: TensorId, repeats: &[usize]) -> Result<TensorId> {
    let shape = c.shape(x);
    let total = shape
        .iter()
        .chain(repeats)
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= u32::MAX as usize);
    if total.is_none() {
        return Err(c.err(1, format!("{repeats:?} of {shape:?}: over 2^32 elements")));
    }
    if let Some(r) = repeats.iter().find(|&&r| r > REPEAT_MOST) {
        return Err(c.err(1, format!("{r} copies along a dim: at most {REPEAT_MOST}")));
    }
    let mut full: Vec<isize> = vec![1; repeats.len() - shape.len()];
    full.extend(shape.iter().map(|&s| s as isize));
    let mut y = c.g.reshape(x, &full)?;
    // A float tensor's dims of size 1 are broadcast by a product with ones of the repeated
    // sizes (exact, -0.0 and NaN included): one elementwise node, which the chains take in,
    // instead of a copy per repeat.
    let float = matches!(c.g.dtype(y), Some(DType::F32 | DType::F16));
    let ones: Vec<usize> = (0..repeats.len())
        .map(|d| if float && full[d] == 1 { repeats[d] } else { 1 })
        .collect();
    let count: usize = ones.iter().product();
    let multiplied = count > 1 && count <= BROADCAST_ONES_MOST;
    if multiplied {
        let dtype = c.g.dtype(y).unwrap_or(DType::F32);
        let ones = c.g.full_as("expand", &ones, 1.0, dtype)?;
        y = c.g.mul(y, ones)?;
    }
    for (dim, &r) in repeats.iter().enumerate() {
        if r > 1 && !(multiplied && ones[dim] > 1) {
            y = c.g.cat(&vec![y; r], dim as isize)?;
        }
    }
    Ok(y)
}

/// `self.expand(size)`: dims of size 1 repeated to `size` (-1 keeps a dim; leading dims may
/// be added).
fn expand(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, size) = (c.tensor(0)?, c.ints(1)?);
    let shape = c.shape(x);
    if size.len() < shape.len() {
        return Err(c.err(1, format!("{size:?} has fewer dims than {shape:?}")));
    }
    let lead = size.len() - shape.len();
    let mut repeats = Vec::with_capacity(size.len());
    for (i, &s) in size.iter().enumerate() {
        let have = if i < lead { 1 } else { shape[i - lead] };
        repeats.push(match s {
            -1 if i >= lead => 1,
            s if s >= 0 && s as usize == have => 1,
            s if s > 0 && have == 1 => s as usize,
            _ => return Err(c.err(1, format!("{size:?} does not expand {shape:?}"))),
        });
    }
    one(tile(c, x, &repeats)?)
}

/// Each element repeated `repeats` times in a row along `dim` (of the flattened tensor
/// when `dim` is None).
fn repeat_interleave(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (mut x, r) = (c.tensor(0)?, c.count(1)?);
    let dim = match c.opt_int(2)? {
        Some(_) => c.dim(2)?,
        None => {
            x = c.g.reshape(x, &[-1])?;
            0
        }
    };
    let shape = c.shape(x);
    let rank = shape.len() as isize;
    let d = if dim < 0 { dim + rank } else { dim };
    if d < 0 || d >= rank || r == 0 {
        return Err(c.err(2, format!("dim {dim} or {r} repeats for shape {shape:?}")));
    }
    let d = d as usize;
    let y = c.g.unsqueeze_at(x, d + 1)?;
    let y = c.g.cat(&vec![y; r], d as isize + 1)?;
    let mut out: Vec<isize> = shape.iter().map(|&s| s as isize).collect();
    out[d] *= r as isize;
    one(c.g.reshape(y, &out)?)
}

/// The most elements along a flipped dim: its index is a constant made at build, one word an
/// element (a declared size alone must not take the host's memory).
const FLIP_MOST: usize = 1 << 18;

/// The most copies of a tensor along one dim in a repeat (one concatenation of them).
const REPEAT_MOST: usize = 1 << 12;
/// The most values of the ones a broadcast multiplies by (else copies).
const BROADCAST_ONES_MOST: usize = 1 << 20;

/// The elements in reverse along each of `dims` (an index select by a constant reversed
/// index per dim).
fn flip(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (mut x, dims) = (c.tensor(0)?, c.dims(1)?);
    let rank = c.shape(x).len() as isize;
    for dim in dims {
        let d = if dim < 0 { dim + rank } else { dim };
        if d < 0 || d >= rank {
            return Err(c.err(1, format!("dim {dim} of a tensor of rank {rank}")));
        }
        let n = c.shape(x)[d as usize];
        if n > FLIP_MOST {
            return Err(c.err(1, format!("a flip of a dim of {n}: at most {FLIP_MOST}")));
        }
        let index: Vec<i32> = (0..n as i32).rev().collect();
        let t =
            vk_core::HostTensor::from_i32(vec![n], &index).map_err(|e| c.err(1, e.to_string()))?;
        let index = c.g.constant(&format!("flip{}_{d}", x.index()), t)?;
        x = c.g.index_along(x, d as usize, index, false)?;
    }
    one(x)
}

/// `self` with `src` written over `self[start:end]` along `dim` (step 1): the parts of `self`
/// before and after, and `src`, concatenated.
fn slice_scatter(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, src, dim) = (c.tensor(0)?, c.tensor(1)?, c.dim(2)?);
    if c.int(5)? != 1 {
        return Err(c.err(5, "a step other than 1 is not supported"));
    }
    let shape = c.shape(x);
    let rank = shape.len() as isize;
    let d = if dim < 0 { dim + rank } else { dim };
    if d < 0 || d >= rank {
        return Err(c.err(2, format!("dim {dim} of {shape:?}")));
    }
    let n = shape[d as usize] as i64;
    let clamp = |v: i64| (if v < 0 { v + n } else { v }).clamp(0, n);
    let start = clamp(c.opt_int(3)?.unwrap_or(0));
    let end = clamp(c.opt_int(4)?.unwrap_or(n)).max(start);
    let mut parts = Vec::new();
    if start > 0 {
        parts.push(c.g.slice(x, d, 0, start as isize, 1)?);
    }
    parts.push(src);
    if end < n {
        parts.push(c.g.slice(x, d, end as isize, n as isize, 1)?);
    }
    let y = if parts.len() == 1 {
        src
    } else {
        c.g.cat(&parts, d)?
    };
    if c.shape(y) != shape {
        let got = c.shape(src);
        return Err(c.err(
            1,
            format!("{got:?} does not fill {start}..{end} of dim {d} of {shape:?}"),
        ));
    }
    one(y)
}

/// The view of `self`'s elements (row-major, from `storage_offset`) with `size` and
/// `stride`, copied.
fn as_strided(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, size, stride) = (c.tensor(0)?, c.counts(1)?, c.counts(2)?);
    let offset = c.opt_int(3)?.unwrap_or(0);
    if size.len() != stride.len() {
        return Err(c.err(2, format!("{stride:?} for size {size:?}")));
    }
    one(strided_copy(c, x, &size, &stride, offset)?)
}

/// Windows of `size` elements every `step` along `dimension`, as a new last dim (a copy of
/// `Tensor.unfold`'s view).
fn unfold(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, dim, size, step) = (c.tensor(0)?, c.dim(1)?, c.count(2)?, c.count(3)?);
    let shape = c.shape(x);
    let rank = shape.len().max(1) as isize;
    let d = if dim < 0 { dim + rank } else { dim };
    if !(0..rank).contains(&d) {
        return Err(c.err(1, format!("dim {dim} of a rank-{rank} tensor")));
    }
    let d = d as usize;
    let len = shape.get(d).copied().unwrap_or(1);
    if step == 0 || size > len {
        let why = format!("windows of {size} every {step} along a dim of {len}");
        return Err(c.err(2, why));
    }
    let mut strides = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    let (mut sizes, mut st) = (shape.clone(), strides.clone());
    if sizes.is_empty() {
        (sizes, st) = (vec![1], vec![1]);
    }
    sizes[d] = (len - size) / step + 1;
    st[d] = strides.get(d).copied().unwrap_or(1) * step;
    sizes.push(size);
    st.push(strides.get(d).copied().unwrap_or(1));
    one(strided_copy(c, x, &sizes, &st, 0)?)
}

/// `x`'s elements (row-major, from `offset`) with `size` and `stride`, copied: a gather of
/// the flattened tensor by a constant index made at build.
fn strided_copy(
    c: &mut Call<'_>,
    x: TensorId,
    size: &[usize],
    stride: &[usize],
    offset: i64,
) -> Result<TensorId> {
    let numel: usize = c.shape(x).iter().product();
    // The index is built on the host: at most `FULL_MAX` entries, counted with checks.
    let count = size
        .iter()
        .try_fold(1usize, |n, &s| n.checked_mul(s))
        .filter(|&n| n <= super::index::FULL_MAX)
        .ok_or_else(|| {
            c.err(
                1,
                format!("{size:?}: more than 2^26 elements to index on the host"),
            )
        })?;
    let mut index = Vec::with_capacity(count);
    for o in 0..count {
        let (mut rest, mut at) = (o, Some(offset));
        for (&s, &st) in size.iter().zip(stride).rev() {
            let step = i64::try_from(rest % s).ok().zip(i64::try_from(st).ok());
            at = at
                .zip(step)
                .and_then(|(at, (r, st))| r.checked_mul(st)?.checked_add(at));
            rest /= s;
        }
        let inside = at.filter(|a| (0..numel as i64).contains(a));
        match inside.and_then(|a| i32::try_from(a).ok()) {
            Some(v) => index.push(v),
            None => {
                let why = format!(
                    "element {o} (offset {offset}, strides {stride:?}) falls outside the \
                     {numel} elements"
                );
                return Err(c.err(2, why));
            }
        }
    }
    let n = index.len();
    let t = vk_core::HostTensor::from_i32(vec![n], &index).map_err(|e| c.err(1, e.to_string()))?;
    let index = c.g.constant(&format!("strided{}", x.index()), t)?;
    let flat = c.g.reshape(x, &[-1])?;
    let y = c.g.index_along(flat, 0, index, false)?;
    let out: Vec<isize> = size.iter().map(|&s| s as isize).collect();
    c.g.reshape(y, &out)
}

/// `src` in `self`'s shape (broadcast) and dtype.
fn copy(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, src) = (c.tensor(0)?, c.tensor(1)?);
    let (shape, sshape) = (c.shape(x), c.shape(src));
    let mut y = src;
    if sshape != shape {
        if sshape.len() > shape.len() {
            return Err(c.err(1, format!("{sshape:?} does not broadcast to {shape:?}")));
        }
        let lead = shape.len() - sshape.len();
        let mut repeats = Vec::with_capacity(shape.len());
        for (i, &s) in shape.iter().enumerate() {
            let have = if i < lead { 1 } else { sshape[i - lead] };
            match have {
                h if h == s => repeats.push(1),
                1 => repeats.push(s),
                _ => return Err(c.err(1, format!("{sshape:?} does not broadcast to {shape:?}"))),
            }
        }
        y = tile(c, y, &repeats)?;
    }
    let (to, from) = (
        c.g.dtype(x).unwrap_or(DType::F32),
        c.g.dtype(y).unwrap_or(DType::F32),
    );
    if to != from {
        y = c.g.cast(y, to)?;
    }
    one(y)
}

/// `self.t()`: a 2-D tensor transposed; fewer dims stay as they are.
fn t_copy(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let x = c.tensor(0)?;
    match c.shape(x).len() {
        0 | 1 => one(x),
        2 => one(c.g.transpose(x, 0, 1)?),
        r => Err(c.err(0, format!("has {r} dims; t() takes at most 2"))),
    }
}

/// A copy in another dtype (ExecuTorch's `ScalarType` code; none: the same). Floats stay in
/// the graph's float dtype (a front end's fp16 graph computes every float in f16); integers
/// become i32; bools become masks of the graph's float dtype.
fn to_copy(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let x = c.tensor(0)?;
    let from = c.g.dtype(x).unwrap_or(DType::F32);
    let float = matches!(from, DType::F32 | DType::F16);
    match c.opt_int(1)? {
        None => one(x),
        // Half, Float, Double.
        Some(5..=7) if float => one(x),
        Some(5..=7) => {
            let to = c.g.float();
            one(c.g.cast(x, to)?)
        }
        // Int, Long.
        Some(3 | 4) if from == DType::I32 => one(x),
        Some(3 | 4) => one(c.g.cast(x, DType::I32)?),
        // Bool: nonzero is true.
        Some(11) if float => one(c.g.compare_scalar(x, Compare::Ne, 0.0)?),
        Some(code) => Err(c.err(1, format!("ScalarType {code} from {from} is not supported"))),
    }
}

/// `constant_pad_nd`: `pad` holds (before, after) pairs from the last dim backwards; positive
/// amounts add `value`, negative ones cut.
fn constant_pad(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (mut x, pad, value) = (c.tensor(0)?, c.ints(1)?, c.f32(2)?);
    let rank = c.shape(x).len();
    if pad.len() % 2 != 0 || pad.len() / 2 > rank {
        return Err(c.err(
            1,
            format!("{pad:?} is not (before, after) pairs for {rank} dims"),
        ));
    }
    let dtype = c.g.dtype(x).unwrap_or(DType::F32);
    for (k, pair) in pad.chunks_exact(2).enumerate() {
        let dim = rank - 1 - k;
        let size = c.shape(x)[dim] as i64;
        let (before, after) = (pair[0], pair[1]);
        if before < 0 || after < 0 {
            let start = before.saturating_neg().max(0) as isize;
            let end = (size - after.saturating_neg().max(0)) as isize;
            if end < start {
                return Err(c.err(1, format!("{pad:?} cuts more than dim {dim}'s {size}")));
            }
            x = c.g.slice(x, dim as isize, start, end, 1)?;
        }
        let mut parts = Vec::new();
        for (amount, at_end) in [(before, false), (after, true)] {
            if amount <= 0 {
                continue;
            }
            let mut shape = c.shape(x);
            shape[dim] = amount as usize;
            let name = format!("pad{}_{dim}_{}", x.index(), u8::from(at_end));
            parts.push((at_end, c.g.full_as(&name, &shape, value, dtype)?));
        }
        if parts.is_empty() {
            continue;
        }
        let mut xs: Vec<TensorId> = parts.iter().filter(|p| !p.0).map(|p| p.1).collect();
        xs.push(x);
        xs.extend(parts.iter().filter(|p| p.0).map(|p| p.1));
        x = c.g.cat(&xs, dim as isize)?;
    }
    one(x)
}

/// The tensor itself: buffers are never aliased by a later write, so no copy is needed.
fn clone(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    one(c.tensor(0)?)
}

fn view(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, size) = (c.tensor(0)?, c.dims(1)?);
    one(c.g.reshape(x, &size)?)
}

/// Drops the listed dims that have size 1 (others stay, as in PyTorch); every dim of size 1
/// when none are listed.
fn squeeze(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let x = c.tensor(0)?;
    let dims = match c.def.params.get(1).map(|p| p.fallback) {
        Some(Fallback::Null) if c.ints(1)?.is_empty() => (0..c.shape(x).len() as isize).collect(),
        _ => c.dims(1)?,
    };
    let shape = c.shape(x);
    let rank = shape.len() as isize;
    let mut drop = vec![false; shape.len()];
    for d in dims {
        let i = if d < 0 { d + rank } else { d };
        if i < 0 || i >= rank {
            return Err(c.err(1, format!("dim {d} is out of range for rank {rank}")));
        }
        drop[i as usize] = shape[i as usize] == 1;
    }
    let kept: Vec<isize> = shape
        .iter()
        .zip(&drop)
        .filter(|(_, d)| !**d)
        .map(|(&s, _)| s as isize)
        .collect();
    one(c.g.reshape(x, &kept)?)
}

/// Inserts a dim of size 1 at `dim` (negative counts from the end of the result).
fn unsqueeze(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, d) = (c.tensor(0)?, c.dim(1)?);
    let mut shape: Vec<isize> = c.shape(x).iter().map(|&s| s as isize).collect();
    let rank = shape.len() as isize + 1;
    let i = if d < 0 { d + rank } else { d };
    if i < 0 || i >= rank {
        return Err(c.err(1, format!("dim {d} is out of range for rank {rank}")));
    }
    shape.insert(i as usize, 1);
    one(c.g.reshape(x, &shape)?)
}

fn permute(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, perm) = (c.tensor(0)?, c.dims(1)?);
    one(c.g.permute(x, &perm)?)
}

fn transpose(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, d0, d1) = (c.tensor(0)?, c.dim(1)?, c.dim(2)?);
    one(c.g.transpose(x, d0, d1)?)
}

fn cat(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (xs, dim) = (c.tensors(0)?, c.dim(1)?);
    one(c.g.cat(&xs, dim)?)
}

fn split(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, sizes, dim) = (c.tensor(0)?, c.counts(1)?, c.dim(2)?);
    c.g.split(x, &sizes, dim)
}

fn select(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, dim, index) = (c.tensor(0)?, c.dim(1)?, c.dim(2)?);
    one(c.g.select(x, dim, index)?)
}

/// `x[start:end:step]` along `dim`; an absent start or end is the dim's start or end.
fn slice(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, dim) = (c.tensor(0)?, c.dim(1)?);
    // A window whose start is known only on the device (a language model's rotary tables
    // from its position): `end` must be the same device value plus a constant, the length.
    if let Position::Device(at, from) = c.position(2).unwrap_or(Position::Static(0)) {
        let to = match c.position(3)? {
            Position::Device(t, to) if t == at && to >= from => to,
            other => {
                return Err(c.err(
                    3,
                    format!("{other:?}: the start's device value plus a length"),
                ));
            }
        };
        if c.count(4)? != 1 {
            return Err(c.err(
                4,
                "a step other than 1 with a start known only on the device",
            ));
        }
        let rank = c.shape(x).len();
        let d = crate::graph::norm_dim("slice", "input", dim, rank)?;
        let index =
            c.g.positions(Position::Device(at, from), (to - from) as usize)?;
        return one(c.g.index_along(x, d, index, false)?);
    }
    let clamp = |v: i64| v.clamp(isize::MIN as i64, isize::MAX as i64) as isize;
    let start = clamp(c.opt_int(2)?.unwrap_or(0));
    let end = clamp(c.opt_int(3)?.unwrap_or(i64::MAX));
    let step = c.count(4)?;
    one(c.g.slice(x, dim, start, end, step)?)
}

/// `[.., c*r*r, h, w]` to `[.., c, h*r, w*r]`: each group of `r*r` channels becomes an
/// `r x r` block of pixels.
fn pixel_shuffle(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, r) = (c.tensor(0)?, c.count(1)?);
    let shape = c.shape(x);
    let [lead @ .., ch, h, w] = shape.as_slice() else {
        return Err(c.err(0, format!("must have at least 3 dims, found {shape:?}")));
    };
    let rr = r.checked_mul(r).filter(|&rr| rr != 0 && ch % rr == 0);
    let (Some(rr), Some(oh), Some(ow)) = (rr, h.checked_mul(r), w.checked_mul(r)) else {
        return Err(c.err(
            1,
            format!("{r}: {ch} channels are not a multiple of {r}*{r}"),
        ));
    };
    let mut out = lead.to_vec();
    out.extend([ch / rr, oh, ow]);
    let total = out.iter().product::<usize>();
    let word = |v: usize| u32::try_from(v).map_err(|_| c.err(0, format!("{v} is over 2^32")));
    let push = push::PixelShufflePush {
        total: word(total)?,
        c: word(ch / rr)?,
        h: word(*h)?,
        w: word(*w)?,
        r: word(r)?,
    };
    let dtype = c.g.dtype(x).unwrap_or(DType::F32);
    if !matches!(dtype, DType::F32 | DType::F16 | DType::I32) {
        return Err(c.err(0, format!("is {dtype}; f32, f16 or i32 is required")));
    }
    one(c.g.kernel_node(
        "pixel_shuffle",
        Kernel::PixelShuffle,
        &[x],
        (dtype, out),
        &push,
    )?)
}

// Shape and dtype inference: the builder's methods of this family, each checking its
// operands and naming the tensor and the numbers on error.

impl GraphBuilder {
    /// Writes `value` into `target`'s storage in place (the same dtype and element count):
    /// state the graph keeps between executions, as a language model's KV cache held by a
    /// constant. Returns `target` as written; every later read must go through that tensor
    /// or another view of the same storage, which the write is ordered before.
    pub fn assign(&mut self, target: TensorId, value: TensorId) -> Result<TensorId> {
        const OP: &str = "assign";
        let ti = self.info(OP, target)?.clone();
        let vi = self.info(OP, value)?.clone();
        if ti.dtype != vi.dtype || ti.numel() != vi.numel() {
            return Err(shape_err(
                OP,
                format!(
                    "'{}' {} {:?} into '{}' {} {:?}: the same dtype and element count",
                    vi.name, vi.dtype, vi.shape, ti.name, ti.dtype, ti.shape
                ),
            ));
        }
        let out = self.push_tensor(
            format!("{}'", ti.name),
            ti.dtype,
            ti.shape.clone(),
            Some((crate::graph::StorageKind::Temp, Some(ti.storage))),
        );
        let x = if vi.shape == ti.shape {
            value
        } else {
            let to: Vec<isize> = ti.shape.iter().map(|&d| d as isize).collect();
            self.reshape(value, &to)?
        };
        self.nodes.push(crate::graph::Node {
            op: Op::Cast { x, to: ti.dtype },
            out,
        });
        Ok(out)
    }

    /// `start + [0, 1, .., len)` as i32 `[len]`, `start` known at build or on the device.
    pub(crate) fn positions(&mut self, start: Position, len: usize) -> Result<TensorId> {
        let (base, plus) = match start {
            Position::Static(s) => (None, s),
            // A decode step's one position: the device's own tensor, no arithmetic.
            Position::Device(t, 0) if len == 1 => return self.as_dtype(t, DType::I32),
            Position::Device(t, plus) => (Some(t), plus),
        };
        let steps: Vec<i32> = (0..len as i64).map(|i| (i + plus) as i32).collect();
        let host = vk_core::HostTensor::from_i32(vec![len], &steps)
            .map_err(|e| shape_err("positions", e.to_string()))?;
        let steps = self.constant(&format!("positions{}", self.node_count()), host)?;
        match base {
            None => Ok(steps),
            // In f32, exact for positions below 2^24.
            Some(t) => {
                let (steps, t) = (self.cast(steps, DType::F32)?, self.as_dtype(t, DType::F32)?);
                let sum = self.add(steps, t)?;
                self.cast(sum, DType::I32)
            }
        }
    }

    /// `x` in `to`: `x` itself where it already is, else [`GraphBuilder::cast`] (which always
    /// writes a new tensor).
    pub(crate) fn as_dtype(&mut self, x: TensorId, to: DType) -> Result<TensorId> {
        match self.info("cast", x)?.dtype == to {
            true => Ok(x),
            false => self.cast(x, to),
        }
    }

    /// Converts between f32, f16, i32, i16, i8 and i64 (float to integer truncates toward zero
    /// and saturates, as do integers narrowed to i16 or i8; i64 to a narrower type keeps the
    /// low 32 bits, as ExecuTorch's Vulkan backend narrows int64 inputs).
    pub fn cast(&mut self, x: TensorId, to: DType) -> Result<TensorId> {
        const OP: &str = "cast";
        let xi = self.info(OP, x)?.clone();
        for (t, dtype) in [(&xi.name, xi.dtype), (&"(target)".to_string(), to)] {
            if cast_code(dtype).is_none() {
                return Err(Error::DType {
                    op: OP,
                    tensor: t.clone(),
                    actual: dtype,
                    expected: "f32, f16, i32, i16, i8 or i64",
                });
            }
        }
        self.node(Op::Cast { x, to }, OP, to, xi.shape)
    }

    /// A view with another shape (one dim may be -1); no data moves.
    pub fn reshape(&mut self, x: TensorId, shape: &[isize]) -> Result<TensorId> {
        const OP: &str = "reshape";
        let xi = self.info(OP, x)?.clone();
        let n = xi.numel();
        // Sizes whose product overflows name no view of any tensor.
        let known = shape
            .iter()
            .filter(|&&d| d >= 0)
            .try_fold(1usize, |a, &d| a.checked_mul(d as usize));
        let infer = shape.iter().filter(|&&d| d == -1).count();
        let bad = shape.is_empty()
            || shape.iter().any(|&d| d < -1 || d == 0)
            || infer > 1
            || known.is_none();
        let known = known.unwrap_or(1);
        let mut out: Vec<usize> = Vec::with_capacity(shape.len());
        if !bad {
            for &d in shape {
                out.push(if d == -1 {
                    n / known.max(1)
                } else {
                    d as usize
                });
            }
        }
        if bad || out.iter().try_fold(1usize, |a, &d| a.checked_mul(d)) != Some(n) {
            return Err(shape_err(
                OP,
                format!(
                    "cannot view '{}' {:?} ({n} elements) as {shape:?}",
                    xi.name, xi.shape
                ),
            ));
        }
        let label = format!("reshape_{}", self.tensors.len());
        Ok(self.push_tensor(
            label,
            xi.dtype,
            out,
            Some((StorageKind::Temp, Some(xi.storage))),
        ))
    }

    /// Same as [`GraphBuilder::reshape`].
    pub fn view(&mut self, x: TensorId, shape: &[isize]) -> Result<TensorId> {
        self.reshape(x, shape)
    }

    /// Reorders dims: output dim `i` is input dim `perm[i]`.
    pub fn permute(&mut self, x: TensorId, perm: &[isize]) -> Result<TensorId> {
        const OP: &str = "permute";
        let xi = self.word_operand(OP, x)?;
        let r = xi.shape.len();
        let mut p = Vec::with_capacity(r);
        for &d in perm {
            p.push(norm_dim(OP, &xi.name, d, r)?);
        }
        let mut seen = p.clone();
        seen.sort_unstable();
        if p.len() != r || seen != (0..r).collect::<Vec<_>>() {
            return Err(shape_err(
                OP,
                format!(
                    "{perm:?} is not a permutation of the {r} dims of '{}'",
                    xi.name
                ),
            ));
        }
        let shape = p.iter().map(|&d| xi.shape[d]).collect();
        self.node(Op::Permute { x, perm: p }, OP, xi.dtype, shape)
    }

    /// Swaps two dims.
    pub fn transpose(&mut self, x: TensorId, d0: isize, d1: isize) -> Result<TensorId> {
        let xi = self.word_operand("transpose", x)?;
        let r = xi.shape.len();
        let a = norm_dim("transpose", &xi.name, d0, r)?;
        let b = norm_dim("transpose", &xi.name, d1, r)?;
        let mut perm: Vec<isize> = (0..r as isize).collect();
        perm.swap(a, b);
        self.permute(x, &perm)
    }

    /// Concatenates along `dim`.
    pub fn cat(&mut self, xs: &[TensorId], dim: isize) -> Result<TensorId> {
        const OP: &str = "cat";
        let first = match xs.first() {
            Some(&f) => self.word_operand(OP, f)?,
            None => return Err(shape_err(OP, "needs at least one tensor".into())),
        };
        let r = first.shape.len();
        let d = norm_dim(OP, &first.name, dim, r)?;
        let mut shape = first.shape.clone();
        shape[d] = 0;
        for &t in xs {
            let ti = self.word_operand(OP, t)?;
            if ti.dtype != first.dtype {
                return Err(Error::DType {
                    op: OP,
                    tensor: ti.name,
                    actual: ti.dtype,
                    expected: first.dtype.name(),
                });
            }
            let same =
                ti.shape.len() == r && (0..r).all(|i| i == d || ti.shape[i] == first.shape[i]);
            if !same {
                return Err(shape_err(
                    OP,
                    format!(
                        "'{}' {:?} does not match '{}' {:?} outside dim {d}",
                        ti.name, ti.shape, first.name, first.shape
                    ),
                ));
            }
            shape[d] += ti.shape[d];
        }
        self.node(
            Op::Cat {
                xs: xs.to_vec(),
                dim: d,
            },
            OP,
            first.dtype,
            shape,
        )
    }

    /// `x[.., start:end:step, ..]` along `dim` (negative `start`/`end` count from the end and
    /// are clamped as in PyTorch).
    pub fn slice(
        &mut self,
        x: TensorId,
        dim: isize,
        start: isize,
        end: isize,
        step: usize,
    ) -> Result<TensorId> {
        const OP: &str = "slice";
        let xi = self.word_operand(OP, x)?;
        let d = norm_dim(OP, &xi.name, dim, xi.shape.len())?;
        let size = xi.shape[d] as isize;
        let fix = |v: isize| {
            if v < 0 {
                (v + size).max(0)
            } else {
                v.min(size)
            }
        };
        let (s, e) = (fix(start), fix(end));
        if step == 0 || e <= s {
            return Err(shape_err(
                OP,
                format!(
                    "[{start}:{end}:{step}] of dim {d} (size {size}) of '{}' is empty or has \
                     step 0",
                    xi.name
                ),
            ));
        }
        let len = ((e - s) as usize).div_ceil(step);
        let mut shape = xi.shape.clone();
        shape[d] = len;
        if s == 0 && len as isize == size {
            // The whole dim (a decode step's "last position" of one): a view, no copy.
            let same: Vec<isize> = shape.iter().map(|&v| v as isize).collect();
            return self.reshape(x, &same);
        }
        self.node(
            Op::Slice {
                x,
                dim: d,
                start: s as usize,
                step,
            },
            OP,
            xi.dtype,
            shape,
        )
    }

    /// `x.select(dim, index)`: the slice at `index` of `dim` (negative counts from the end),
    /// with `dim` removed.
    pub fn select(&mut self, x: TensorId, dim: isize, index: isize) -> Result<TensorId> {
        const OP: &str = "select";
        let xi = self.word_operand(OP, x)?;
        let d = norm_dim(OP, &xi.name, dim, xi.shape.len())?;
        let size = xi.shape[d] as isize;
        let i = if index < 0 { index + size } else { index };
        if i < 0 || i >= size {
            return Err(shape_err(
                OP,
                format!(
                    "index {index} is out of range for dim {d} (size {size}) of '{}'",
                    xi.name
                ),
            ));
        }
        let s = self.slice(x, d as isize, i, i + 1, 1)?;
        let mut shape: Vec<isize> = xi.shape.iter().map(|&v| v as isize).collect();
        shape.remove(d);
        if shape.is_empty() {
            shape.push(1);
        }
        self.reshape(s, &shape)
    }

    /// Splits `x` along `dim` into pieces of `sizes` (which sum to the dim's size).
    pub fn split(&mut self, x: TensorId, sizes: &[usize], dim: isize) -> Result<Vec<TensorId>> {
        const OP: &str = "split";
        let xi = self.word_operand(OP, x)?;
        let d = norm_dim(OP, &xi.name, dim, xi.shape.len())?;
        let total = sizes.iter().try_fold(0usize, |t, &s| t.checked_add(s));
        if total != Some(xi.shape[d]) || sizes.contains(&0) {
            return Err(shape_err(
                OP,
                format!(
                    "sizes {sizes:?} do not split dim {d} (size {}) of '{}'",
                    xi.shape[d], xi.name
                ),
            ));
        }
        let mut start = 0;
        let mut out = Vec::with_capacity(sizes.len());
        for &s in sizes {
            out.push(self.slice(x, d as isize, start as isize, (start + s) as isize, 1)?);
            start += s;
        }
        Ok(out)
    }
}

// Recording: what this family's nodes become, dispatches of the op library.
impl Lowerer<'_> {
    /// Records a node of this family.
    pub(crate) fn record_shape(&mut self, op: &Op, t: &Target) -> Result<()> {
        let (o, oi, n) = (t.o, &t.info, t.info.numel());
        match op {
            Op::Permute { x, perm } => {
                let xi = self.t(*x).clone();
                let cs = contiguous_strides(&xi.shape);
                let ss = perm.iter().map(|&p| cs[p]).collect();
                let ds = contiguous_strides(&oi.shape);
                self.copy(xi.storage, o, &oi.shape, ss, ds, 0, 0)?;
            }
            Op::Cat { xs, dim } => {
                let ds = contiguous_strides(&oi.shape);
                let (root, at) = self.placement.root(o);
                let mut off = 0;
                for &x in xs {
                    let xi = self.t(x).clone();
                    // A part its producer wrote in place (`placement.rs`) needs no copy.
                    let bytes = (off * ds[*dim] * oi.dtype.size()) as u64;
                    if self.placement.root(xi.storage) != (root, at + bytes) {
                        // A part sliced or permuted out of another tensor is copied from it.
                        let (src, ss, src_off) = self.cat_source(x);
                        self.copy(src, o, &xi.shape, ss, ds.clone(), src_off, off * ds[*dim])?;
                    }
                    off += xi.shape[*dim];
                }
            }
            Op::Cast { x, to } => {
                let xi = self.t(*x).clone();
                let code = |d| {
                    crate::graph::cast_code(d).ok_or_else(|| Error::DType {
                        op: "cast",
                        tensor: xi.name.clone(),
                        actual: d,
                        expected: "f32, f16, i32, i16, i8 or i64",
                    })
                };
                let (src, dst) = (code(xi.dtype)?, code(*to)?);
                let quads = n.div_ceil(4);
                let g = self.linear_groups(quads as u64);
                self.push(
                    Kernel::Cast,
                    vec![src, dst],
                    vec![(xi.storage, false), (o, true)],
                    &push::CastPush {
                        quads: quads as u32,
                    },
                    [g, 1, 1],
                );
            }
            Op::Slice {
                x,
                dim,
                start,
                step,
            } => {
                let xi = self.t(*x).clone();
                let cs = contiguous_strides(&xi.shape);
                let mut ss = cs.clone();
                ss[*dim] *= step;
                let ds = contiguous_strides(&oi.shape);
                self.copy(xi.storage, o, &oi.shape, ss, ds, start * cs[*dim], 0)?;
            }
            _ => return Err(self.not_in_family()),
        }
        Ok(())
    }
}
