//! Normalisations: layer norm and group norm (inference: no running statistics are updated,
//! and the mean and reciprocal deviation outputs are not computed).

use super::{Call, Fallback, Kind, OpDef, Param, one};
use crate::error::Result;
use crate::graph::TensorId;

const EPS: Param = Param::new("eps", Kind::Float, Fallback::Float(1e-5));

/// The ops of this family, one registration line each.
#[rustfmt::skip]
pub(super) const OPS: &[OpDef] = &[
    OpDef::new(&["aten.native_layer_norm.default", "layer_norm"], &[Param::tensor("input"), Param::new("normalized_shape", Kind::Ints, Fallback::Required), Param::opt_tensor("weight"), Param::opt_tensor("bias"), EPS], layer_norm),
    OpDef::new(&["aten.native_group_norm.default"], &[Param::tensor("input"), Param::opt_tensor("weight"), Param::opt_tensor("bias"), Param::new("N", Kind::Int, Fallback::Null), Param::new("C", Kind::Int, Fallback::Null), Param::new("HxW", Kind::Int, Fallback::Null), Param::new("group", Kind::Int, Fallback::Required), EPS], group_norm),
];

fn layer_norm(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, shape) = (c.tensor(0)?, c.counts(1)?);
    let (w, b, eps) = (c.opt_tensor(2)?, c.opt_tensor(3)?, c.f32(4)?);
    one(c.g.layer_norm(x, &shape, w, b, eps)?)
}

fn group_norm(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, w, b) = (c.tensor(0)?, c.opt_tensor(1)?, c.opt_tensor(2)?);
    let (groups, eps) = (c.count(6)?, c.f32(7)?);
    one(c.g.group_norm(x, groups, w, b, eps)?)
}
