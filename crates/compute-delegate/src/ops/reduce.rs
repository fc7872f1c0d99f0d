//! Reductions over dimensions: sum, mean, any.

use super::{Call, Fallback, Kind, OpDef, Param, one};
use crate::error::Result;
use crate::graph::TensorId;

const SELF: Param = Param::tensor("self");
const DIMS: Param = Param::new("dim|dims", Kind::Ints, Fallback::Null);
const KEEPDIM: Param = Param::new("keepdim", Kind::Bool, Fallback::Bool(false));

/// The ops of this family, one registration line each.
#[rustfmt::skip]
pub(super) const OPS: &[OpDef] = &[
    OpDef::new(&["aten.sum.dim_IntList", "aten::sum.IntList_out", "sum"], &[SELF, DIMS, KEEPDIM], sum),
    OpDef::new(&["aten.mean.dim", "aten::mean.out", "mean"], &[SELF, DIMS, KEEPDIM], mean),
    OpDef::new(&["aten.any.dim", "aten.any.dims", "aten::any.out", "aten::any.dims_out", "any"], &[SELF, DIMS, KEEPDIM], any),
    OpDef::new(&["aten.any.default", "aten::any.all_out"], &[SELF], any),
];

fn sum(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, dims, keepdim) = (c.tensor(0)?, c.dims(1)?, c.bool(2)?);
    one(c.g.sum(x, &dims, keepdim)?)
}

fn mean(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, dims, keepdim) = (c.tensor(0)?, c.dims(1)?, c.bool(2)?);
    one(c.g.mean(x, &dims, keepdim)?)
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
