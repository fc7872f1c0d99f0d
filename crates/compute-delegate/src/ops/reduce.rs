//! Reductions over dimensions: sum, mean, any.

use super::{Call, Fallback, Kind, OpDef, Param, one};
use crate::error::Result;
use crate::graph::{Compare, GraphBuilder, Op, TensorId, norm_dim, shape_err};
use crate::kernels::{Kernel, push};
use crate::lower::{Lowerer, ROW_GROUPS, ROW_KERNEL_MIN, Target};

const SELF: Param = Param::tensor("self");
const DIMS: Param = Param::new("dim|dims", Kind::Ints, Fallback::Null);
const KEEPDIM: Param = Param::new("keepdim", Kind::Bool, Fallback::Bool(false));

/// The ops of this family, one registration line each.
#[rustfmt::skip]
pub(super) const OPS: &[OpDef] = &[
    OpDef::new(&["aten.sum.dim_IntList", "aten::sum.IntList_out", "sum"], &[SELF, DIMS, KEEPDIM], |c| reduce(c, GraphBuilder::sum)),
    OpDef::new(&["aten.mean.dim", "aten::mean.out", "mean"], &[SELF, DIMS, KEEPDIM], |c| reduce(c, GraphBuilder::mean)),
    OpDef::new(&["aten.any.dim", "aten.any.dims", "aten::any.out", "aten::any.dims_out", "any"], &[SELF, DIMS, KEEPDIM], any),
    OpDef::new(&["aten.any.default", "aten::any.all_out"], &[SELF], any),
];

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
        Ok(self.node(Op::Reduce { x, dims: ds, mean }, op, xi.dtype, shape))
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
