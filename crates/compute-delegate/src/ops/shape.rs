//! Shape and copy ops: views, permutes, concatenation, splits, selects and slices.

use super::{Call, Fallback, Kind, OpDef, Param, one};
use crate::error::Result;
use crate::graph::TensorId;
use crate::kernels::Kernel;
use vk_core::DType;

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
];

/// The tensor itself: buffers are never aliased by a later write, so no copy is needed.
fn clone(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    one(c.tensor(0)?)
}

fn view(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, size) = (c.tensor(0)?, c.dims(1)?);
    one(c.g.reshape(x, &size)?)
}

/// Drops the listed dims that have size 1 (others stay, as in PyTorch).
fn squeeze(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, dims) = (c.tensor(0)?, c.dims(1)?);
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
    let clamp = |v: i64| v.clamp(isize::MIN as i64, isize::MAX as i64) as isize;
    let start = clamp(c.opt_int(2)?.unwrap_or(0));
    let end = clamp(c.opt_int(3)?.unwrap_or(i64::MAX));
    let step = c.count(4)?;
    one(c.g.slice(x, dim, start, end, step)?)
}

/// `pixel_shuffle.comp`'s push constants.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::NoUninit)]
struct PixelShufflePush {
    total: u32,
    c: u32,
    h: u32,
    w: u32,
    r: u32,
}

/// `[.., c*r*r, h, w]` to `[.., c, h*r, w*r]`: each group of `r*r` channels becomes an
/// `r x r` block of pixels.
fn pixel_shuffle(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, r) = (c.tensor(0)?, c.count(1)?);
    let shape = c.shape(x);
    let [lead @ .., ch, h, w] = shape.as_slice() else {
        return Err(c.err(0, format!("must have at least 3 dims, found {shape:?}")));
    };
    if r == 0 || ch % (r * r) != 0 {
        return Err(c.err(
            1,
            format!("{r}: {ch} channels are not a multiple of {r}*{r}"),
        ));
    }
    let mut out = lead.to_vec();
    out.extend([ch / (r * r), h * r, w * r]);
    let total = out.iter().product::<usize>();
    let word = |v: usize| u32::try_from(v).map_err(|_| c.err(0, format!("{v} is over 2^32")));
    let push = PixelShufflePush {
        total: word(total)?,
        c: word(ch / (r * r))?,
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
