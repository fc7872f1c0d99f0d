//! Matrix products: `linear`, `mm`, `bmm`.

use super::{Call, OpDef, Param, one};
use crate::error::Result;
use crate::graph::TensorId;

/// The ops of this family, one registration line each.
#[rustfmt::skip]
pub(super) const OPS: &[OpDef] = &[
    OpDef::new(&["aten.linear.default"], &[Param::tensor("input"), Param::tensor("weight"), Param::opt_tensor("bias")], linear),
    OpDef::new(&["aten.mm.default", "matmul"], &[Param::tensor("self"), Param::tensor("mat2")], matmul),
    OpDef::new(&["aten.bmm.default", "bmm"], &[Param::tensor("self"), Param::tensor("mat2")], bmm),
];

fn linear(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, w, b) = (c.tensor(0)?, c.tensor(1)?, c.opt_tensor(2)?);
    one(c.g.linear(x, w, b)?)
}

fn matmul(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (a, b) = (c.tensor(0)?, c.tensor(1)?);
    one(c.g.matmul(a, b)?)
}

fn bmm(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (a, b) = (c.tensor(0)?, c.tensor(1)?);
    one(c.g.bmm(a, b)?)
}
