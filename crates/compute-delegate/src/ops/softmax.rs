//! Softmax and log-softmax along one dimension.

use super::{Call, Fallback, Kind, OpDef, Param, one};
use crate::error::Result;
use crate::graph::{GraphBuilder, Op, TensorId, norm_dim};

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

// Shape and dtype inference: the builder's methods of this family, each checking its
// operands and naming the tensor and the numbers on error.

impl GraphBuilder {
    fn softmax_impl(&mut self, x: TensorId, dim: isize, log: bool) -> Result<TensorId> {
        let op = if log { "log_softmax" } else { "softmax" };
        let xi = self.float_operand(op, x)?;
        let dim = norm_dim(op, &xi.name, dim, xi.shape.len())?;
        Ok(self.node(Op::Softmax { x, dim, log }, op, xi.dtype, xi.shape))
    }

    /// Softmax over `dim` (negative counts from the end).
    pub fn softmax(&mut self, x: TensorId, dim: isize) -> Result<TensorId> {
        self.softmax_impl(x, dim, false)
    }

    /// Log-softmax over `dim`.
    pub fn log_softmax(&mut self, x: TensorId, dim: isize) -> Result<TensorId> {
        self.softmax_impl(x, dim, true)
    }
}
