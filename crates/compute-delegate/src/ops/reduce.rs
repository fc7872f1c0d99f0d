//! Reductions over dimensions: sum, mean, any, amax, amin, argmax, argmin, var, and the
//! running sum `cumsum`.

use super::{Call, Fallback, Kind, OpDef, Param, one};
use crate::error::Result;
use crate::graph::{Compare, GraphBuilder, KernelOut, Op, TensorId, norm_dim, shape_err};
use crate::kernels::{Kernel, push};
use crate::lower::{Lowerer, ROW_GROUPS, ROW_KERNEL_MIN, Target};
use vk_core::DType;

const SELF: Param = Param::tensor("self");
const DIMS: Param = Param::new("dim|dims", Kind::Ints, Fallback::Null);
/// Rows at least this long (along the last dim) take the two-pass argmax and argmin.
const ARG_SPLIT_FROM: usize = 4096;
/// Elements of a row that one work group of the first pass reduces.
const ARG_CHUNK: usize = 2048;

const KEEPDIM: Param = Param::new("keepdim", Kind::Bool, Fallback::Bool(false));

/// The ops of this family, one registration line each.
#[rustfmt::skip]
pub(super) const OPS: &[OpDef] = &[
    OpDef::new(&["aten.sum.dim_IntList", "aten::sum.IntList_out", "sum"], &[SELF, DIMS, KEEPDIM], |c| reduce(c, GraphBuilder::sum)),
    OpDef::new(&["aten.mean.dim", "aten::mean.out", "mean"], &[SELF, DIMS, KEEPDIM], |c| reduce(c, GraphBuilder::mean)),
    OpDef::new(&["aten.any.dim", "aten.any.dims", "aten::any.out", "aten::any.dims_out", "any"], &[SELF, DIMS, KEEPDIM], any),
    OpDef::new(&["aten.any.default", "aten::any.all_out"], &[SELF], any),
    OpDef::new(&["aten.amax.default", "amax"], &[SELF, DIMS, KEEPDIM], |c| extreme(c, false)),
    OpDef::new(&["aten.amin.default", "amin"], &[SELF, DIMS, KEEPDIM], |c| extreme(c, true)),
    OpDef::new(&["aten.argmax.default", "argmax"], &[SELF, Param::new("dim", Kind::Int, Fallback::Null), KEEPDIM], |c| arg(c, false)),
    OpDef::new(&["aten.argmin.default", "argmin"], &[SELF, Param::new("dim", Kind::Int, Fallback::Null), KEEPDIM], |c| arg(c, true)),
    OpDef::new(&["aten.var.dim", "var"], &[SELF, DIMS, Param::new("unbiased", Kind::Bool, Fallback::Bool(true)), KEEPDIM], var),
    OpDef::new(&["aten.cumsum.default", "aten::cumsum.out", "cumsum"], &[SELF, Param::new("dim", Kind::Int, Fallback::Required), Param::new("dtype", Kind::Int, Fallback::Null)], cumsum),
    OpDef::new(&["aten.var.correction"], &[SELF, DIMS, Param::new("correction", Kind::Float, Fallback::Float(1.0)), KEEPDIM], var),
];

/// The maximum (`min` false) or minimum over `dim` (every dim when none is given).
fn extreme(c: &mut Call<'_>, min: bool) -> Result<Vec<TensorId>> {
    let (x, dims, keepdim) = (c.tensor(0)?, c.dims(1)?, c.bool(2)?);
    one(c.g.extreme(x, &dims, keepdim, min)?)
}

/// The index of the maximum (`min` false) or minimum along `dim`, as i32 (of the flattened
/// tensor when `dim` is None).
fn arg(c: &mut Call<'_>, min: bool) -> Result<Vec<TensorId>> {
    let (mut x, keepdim) = (c.tensor(0)?, c.bool(2)?);
    let dim = match c.opt_int(1)? {
        Some(_) => c.dim(1)?,
        None => {
            x = c.g.reshape(x, &[-1])?;
            0
        }
    };
    one(c.g.arg_extreme(x, dim, keepdim, min)?)
}

/// Running sums along `dim` (`cumsum.comp`), in `self`'s float dtype.
fn cumsum(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, dim) = (c.tensor(0)?, c.dim(1)?);
    one(c.g.cumsum(x, dim)?)
}

/// The variance over `dim`: the mean of squared deviations, times `n / (n - correction)`
/// (`unbiased`: correction 1).
fn var(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, dims, keepdim) = (c.tensor(0)?, c.dims(1)?, c.bool(3)?);
    let correction = match c.def.params[2].kind {
        Kind::Bool => f64::from(u8::from(c.bool(2)?)),
        _ => c.float(2)?,
    };
    let shape = c.shape(x);
    let rank = shape.len() as isize;
    let n: usize = if dims.is_empty() {
        shape.iter().product()
    } else {
        dims.iter()
            .map(|&d| {
                shape
                    .get((if d < 0 { d + rank } else { d }) as usize)
                    .copied()
                    .unwrap_or(1)
            })
            .product()
    };
    if n as f64 <= correction {
        return Err(c.err(
            2,
            format!("{correction} leaves no degrees of freedom over {n} elements"),
        ));
    }
    let m = c.g.mean(x, &dims, true)?;
    let d = c.g.sub(x, m)?;
    let sq = c.g.mul(d, d)?;
    let v = c.g.mean(sq, &dims, keepdim)?;
    let scale = n as f64 / (n as f64 - correction);
    if scale == 1.0 {
        return one(v);
    }
    one(c.g.mul_scalar(v, scale as f32)?)
}

/// A reduction over `dim` (every dim when none is given).
fn reduce(
    c: &mut Call<'_>,
    op: fn(&mut GraphBuilder, TensorId, &[isize], bool) -> Result<TensorId>,
) -> Result<Vec<TensorId>> {
    let (x, dims, keepdim) = (c.tensor(0)?, c.dims(1)?, c.bool(2)?);
    one(op(c.g, x, &dims, keepdim)?)
}

/// Whether any element along the dims is true (all dims when none are given).
fn any(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let x = c.tensor(0)?;
    let dims = if c.def.params.len() > 1 {
        c.dims(1)?
    } else {
        Vec::new()
    };
    let keepdim = c.def.params.len() > 2 && c.bool(2)?;
    one(c.g.any(x, &dims, keepdim)?)
}

// Shape and dtype inference: the builder's methods of this family, each checking its
// operands and naming the tensor and the numbers on error.

impl GraphBuilder {
    /// Running sums of float `x` along `dim`, summed in fp32.
    pub fn cumsum(&mut self, x: TensorId, dim: isize) -> Result<TensorId> {
        const OP: &str = "cumsum";
        let xi = self.float_operand(OP, x)?;
        let d = norm_dim(OP, &xi.name, dim, xi.shape.len())?;
        let s = &xi.shape;
        let (outer, inner): (usize, usize) = (s[..d].iter().product(), s[d + 1..].iter().product());
        let word = |v: usize| {
            u32::try_from(v).map_err(|_| shape_err(OP, format!("{v} elements are over 2^32")))
        };
        let push = push::CumsumPush {
            lines: word(outer * inner)?,
            d: word(s[d])?,
            inner: word(inner)?,
        };
        self.kernel_node(OP, Kernel::Cumsum, &[x], (xi.dtype, s.clone()), &push)
    }

    /// The maximum (`min` false) or minimum of float `x` over `dims` (every dim when empty),
    /// one dim at a time on `reduce_dim.comp`.
    pub fn extreme(
        &mut self,
        x: TensorId,
        dims: &[isize],
        keepdim: bool,
        min: bool,
    ) -> Result<TensorId> {
        let op = if min { "amin" } else { "amax" };
        self.along_dims(op, x, dims, keepdim, u32::from(min))
    }

    /// The product of float `x` over `dims` (every dim when empty), one dim at a time on
    /// `reduce_dim.comp`, in fp32.
    pub fn prod(&mut self, x: TensorId, dims: &[isize], keepdim: bool) -> Result<TensorId> {
        self.along_dims("prod", x, dims, keepdim, 2)
    }

    /// `reduce_dim.comp` in `mode` over `dims` of float `x` (every dim when empty), one dim
    /// at a time.
    fn along_dims(
        &mut self,
        op: &'static str,
        x: TensorId,
        dims: &[isize],
        keepdim: bool,
        mode: u32,
    ) -> Result<TensorId> {
        let xi = self.float_operand(op, x)?;
        let rank = xi.shape.len();
        let mut ds: Vec<usize> = dims
            .iter()
            .map(|&d| norm_dim(op, &xi.name, d, rank))
            .collect::<Result<_>>()?;
        if ds.is_empty() {
            ds = (0..rank).collect();
        }
        ds.sort_unstable();
        ds.dedup();
        let mut y = x;
        let mut shape = xi.shape.clone();
        for &d in ds.iter().rev() {
            let (outer, inner) = (shape[..d].iter().product(), shape[d + 1..].iter().product());
            y = self.reduce_dim(op, Kernel::ReduceDim, y, [outer, shape[d], inner], mode)?;
            shape[d] = 1;
            y = self.reshape(y, &shape.iter().map(|&s| s as isize).collect::<Vec<_>>())?;
        }
        self.reduced_shape(y, &xi.shape, &ds, keepdim)
    }

    /// The index of the maximum (`min` false) or minimum of `x` along `dim`, as i32, on
    /// `arg_reduce.comp` (f16 inputs widened first).
    pub fn arg_extreme(
        &mut self,
        x: TensorId,
        dim: isize,
        keepdim: bool,
        min: bool,
    ) -> Result<TensorId> {
        let op = if min { "argmin" } else { "argmax" };
        let xi = self.float_operand(op, x)?;
        let d = norm_dim(op, &xi.name, dim, xi.shape.len())?;
        let s = &xi.shape;
        if d + 1 == s.len() && s[d] >= ARG_SPLIT_FROM && s[..d].iter().all(|&r| r > 0) {
            let y = self.arg_extreme_rows(op, x, xi.dtype, s, min)?;
            return self.reduced_shape(y, s, &[d], keepdim);
        }
        let x = if xi.dtype == DType::F16 {
            self.cast(x, DType::F32)?
        } else {
            x
        };
        let s = &xi.shape;
        let (outer, inner) = (s[..d].iter().product(), s[d + 1..].iter().product());
        let y = self.reduce_dim(
            op,
            Kernel::ArgReduce,
            x,
            [outer, s[d], inner],
            u32::from(min),
        )?;
        self.reduced_shape(y, s, &[d], keepdim)
    }

    /// [`GraphBuilder::arg_extreme`] along the last dim of `x` (shape `s`) in two passes,
    /// for long rows: `arg_part.comp`'s work groups each reduce `ARG_CHUNK` elements of a row
    /// to a (value, index) pair, `arg_pairs.comp` a row's pairs to its index. One invocation
    /// a row would read a language model's logits (128256 a row) alone.
    fn arg_extreme_rows(
        &mut self,
        op: &'static str,
        x: TensorId,
        dtype: DType,
        s: &[usize],
        min: bool,
    ) -> Result<TensorId> {
        let d = s[s.len() - 1];
        let rows: usize = s[..s.len() - 1].iter().product();
        let chunks = d.div_ceil(ARG_CHUNK);
        let word = |v: usize| {
            u32::try_from(v).map_err(|_| shape_err(op, format!("{v} elements are over 2^32")))
        };
        let mode = u32::from(min);
        // Both kernels loop over their items, so the work groups may be capped.
        let items = word(rows * chunks)?;
        let part = push::ArgPartPush {
            d: word(d)?,
            chunk: ARG_CHUNK as u32,
            chunks: word(chunks)?,
            mode,
            items,
        };
        let out = KernelOut {
            dtype: DType::I32,
            shape: vec![2 * items as usize],
            storage: None,
            groups: Some(u64::from(items)),
            precision: Some(dtype),
            spec: vec![],
        };
        let p = self.kernel_node_into(op, Kernel::ArgPart, &[x], out, &part)?;
        let push = push::ArgPairsPush {
            chunks: part.chunks,
            mode,
            rows: word(rows)?,
        };
        let out = KernelOut {
            dtype: DType::I32,
            shape: vec![rows],
            storage: None,
            groups: Some(rows as u64),
            precision: None,
            spec: vec![],
        };
        self.kernel_node_into(op, Kernel::ArgPairs, &[p], out, &push)
    }

    /// One `[outer, d, inner] -> [outer, inner]` pass of `kernel` (its mode `mode`); the
    /// output is i32 for `ArgReduce`, else `x`'s dtype.
    fn reduce_dim(
        &mut self,
        op: &'static str,
        kernel: Kernel,
        x: TensorId,
        [outer, d, inner]: [usize; 3],
        mode: u32,
    ) -> Result<TensorId> {
        let total = outer * inner;
        let word = |v: usize| {
            u32::try_from(v).map_err(|_| shape_err(op, format!("{v} elements are over 2^32")))
        };
        let (total, d, inner) = (word(total)?, word(d)?, word(inner)?);
        let shape = vec![(total as usize).max(1)];
        if kernel == Kernel::ArgReduce {
            let push = push::ArgReducePush {
                total,
                d,
                inner,
                mode,
            };
            return self.kernel_node(op, kernel, &[x], (DType::I32, shape), &push);
        }
        let push = push::ReduceDimPush {
            total,
            d,
            inner,
            mode,
        };
        let dtype = self.info(op, x)?.dtype;
        self.kernel_node(op, kernel, &[x], (dtype, shape), &push)
    }

    /// `y` (the reduced elements, in order) shaped as `shape` reduced over `dims`: those dims
    /// kept as 1 or dropped (a scalar as `[1]`).
    fn reduced_shape(
        &mut self,
        y: TensorId,
        shape: &[usize],
        dims: &[usize],
        keepdim: bool,
    ) -> Result<TensorId> {
        let mut out: Vec<isize> = Vec::new();
        for (i, &s) in shape.iter().enumerate() {
            match (dims.contains(&i), keepdim) {
                (true, true) => out.push(1),
                (true, false) => {}
                (false, _) => out.push(s as isize),
            }
        }
        if out.is_empty() {
            out.push(1);
        }
        self.reshape(y, &out)
    }

    fn reduce_impl(
        &mut self,
        op: &'static str,
        x: TensorId,
        dims: &[isize],
        keepdim: bool,
        mean: bool,
    ) -> Result<TensorId> {
        let xi = self.float_operand(op, x)?;
        let rank = xi.shape.len();
        let mut ds = Vec::new();
        for &d in dims {
            let d = norm_dim(op, &xi.name, d, rank)?;
            if ds.contains(&d) {
                return Err(shape_err(
                    op,
                    format!("dim {d} appears twice in {dims:?} for '{}'", xi.name),
                ));
            }
            ds.push(d);
        }
        if ds.is_empty() {
            ds = (0..rank).collect();
        }
        ds.sort_unstable();
        let mut shape: Vec<usize> = Vec::new();
        for (i, &s) in xi.shape.iter().enumerate() {
            if ds.contains(&i) {
                if keepdim {
                    shape.push(1);
                }
            } else {
                shape.push(s);
            }
        }
        if shape.is_empty() {
            shape.push(1);
        }
        self.node(Op::Reduce { x, dims: ds, mean }, op, xi.dtype, shape)
    }

    /// Sum over `dims` (all dims when empty).
    pub fn sum(&mut self, x: TensorId, dims: &[isize], keepdim: bool) -> Result<TensorId> {
        self.reduce_impl("sum", x, dims, keepdim, false)
    }

    /// Mean over `dims` (all dims when empty).
    pub fn mean(&mut self, x: TensorId, dims: &[isize], keepdim: bool) -> Result<TensorId> {
        self.reduce_impl("mean", x, dims, keepdim, true)
    }

    /// `any(x != 0)` over `dims` as a mask (all dims when empty).
    pub fn any(&mut self, x: TensorId, dims: &[isize], keepdim: bool) -> Result<TensorId> {
        let ne = self.compare_scalar(x, Compare::Ne, 0.0)?;
        let n = self.sum(ne, dims, keepdim)?;
        self.compare_scalar(n, Compare::Ne, 0.0)
    }
}

// Recording: what this family's nodes become, dispatches of the op library.
impl Lowerer<'_> {
    /// Records a node of this family.
    pub(crate) fn record_reduce(&mut self, op: &Op, t: &Target) -> Result<()> {
        let (out, o) = (t.out, t.o);
        match op {
            Op::Reduce { x, dims, mean } => {
                let xi = self.t(*x).clone();
                let mut cur = xi.shape.clone();
                // Runs of consecutive reduced dims, reduced last run first.
                let mut runs: Vec<(usize, usize)> = Vec::new();
                for &d in dims {
                    match runs.last_mut() {
                        Some((_, end)) if *end == d => *end += 1,
                        _ => runs.push((d, d + 1)),
                    }
                }
                let mut src = xi.storage;
                for (i, &(start, end)) in runs.iter().enumerate().rev() {
                    let outer: usize = cur[..start].iter().product();
                    let r: usize = cur[start..end].iter().product();
                    let inner: usize = cur[end..].iter().product();
                    for c in &mut cur[start..end] {
                        *c = 1;
                    }
                    let dst = if i == 0 {
                        o
                    } else {
                        self.temp(out, outer * inner)
                    };
                    let scale = if *mean { 1.0 / r as f32 } else { 1.0 };
                    let rows = inner == 1 && r >= ROW_KERNEL_MIN;
                    let g = if rows {
                        outer.min(ROW_GROUPS) as u32
                    } else {
                        self.linear_groups((outer * inner) as u64)
                    };
                    let kernel = if rows && self.subgroups {
                        Kernel::ReduceSg
                    } else {
                        Kernel::Reduce
                    };
                    self.push(
                        kernel,
                        vec![u32::from(rows)],
                        vec![(src, false), (dst, true)],
                        &push::ReducePush {
                            outer: outer as u32,
                            r: r as u32,
                            inner: inner as u32,
                            scale,
                        },
                        [g, 1, 1],
                    );
                    src = dst;
                }
            }
            _ => return Err(self.not_in_family()),
        }
        Ok(())
    }
}
