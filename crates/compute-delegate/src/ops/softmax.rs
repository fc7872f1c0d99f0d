//! Softmax and log-softmax along one dimension.

use super::{Call, Fallback, Kind, OpDef, Param, one};
use crate::error::Result;
use crate::graph::TensorId;

const PARAMS: &[Param] = &[
    Param::tensor("self"),
    Param::new("dim", Kind::Int, Fallback::Int(-1)),
    Param::new("half_to_float", Kind::Bool, Fallback::Bool(false)),
];

/// The ops of this family, one registration line each.
#[rustfmt::skip]
pub(super) const OPS: &[OpDef] = &[
    OpDef::new(&["aten._softmax.default", "softmax"], PARAMS, softmax),
    OpDef::new(&["aten._log_softmax.default", "log_softmax"], PARAMS, log_softmax),
];

fn softmax(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, dim) = (c.tensor(0)?, c.dim(1)?);
    one(c.g.softmax(x, dim)?)
}

fn log_softmax(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, dim) = (c.tensor(0)?, c.dim(1)?);
    one(c.g.log_softmax(x, dim)?)
}
