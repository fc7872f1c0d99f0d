//! Index and create ops: embedding lookups and fills.

use super::{Call, Fallback, Kind, OpDef, Param, one};
use crate::error::Result;
use crate::graph::TensorId;

/// The ops of this family, one registration line each.
#[rustfmt::skip]
pub(super) const OPS: &[OpDef] = &[
    OpDef::new(&["aten.embedding.default", "embedding"], &[Param::tensor("weight"), Param::tensor("indices")], embedding),
    OpDef::new(&["aten.full_like.default", "full_like"], &[Param::tensor("self"), Param::new("fill_value|value", Kind::Float, Fallback::Required)], full_like),
];

/// Rows of `weight` picked by `indices` (padding index and sparsity only matter to training).
fn embedding(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (table, ids) = (c.tensor(0)?, c.tensor(1)?);
    one(c.g.embedding(table, ids)?)
}

/// A constant of `self`'s shape in the graph's float dtype.
fn full_like(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, value) = (c.tensor(0)?, c.f32(1)?);
    let shape = c.shape(x);
    let name = format!("full_like_{}", x.index());
    let dtype = c.g.float();
    one(c.g.full_as(&name, &shape, value, dtype)?)
}
