//! Softmax and log-softmax along one dimension.

use super::{Call, Fallback, Kind, OpDef, Param, one};
use crate::error::Result;
use crate::graph::{GraphBuilder, Op, TensorId, norm_dim};
use crate::kernels::{Kernel, push};
use crate::lower::{Lowerer, ROW_GROUPS, ROW_KERNEL_MIN, Target};

const PARAMS: &[Param] = &[
    Param::tensor("self"),
    Param::new("dim", Kind::Int, Fallback::Int(-1)),
    Param::new("half_to_float", Kind::Bool, Fallback::Bool(false)),
];

/// The ops of this family, one registration line each.
#[rustfmt::skip]
pub(super) const OPS: &[OpDef] = &[
    OpDef::new(&["aten._softmax.default", "softmax"], PARAMS, |c| softmax(c, false)),
    OpDef::new(&["aten._log_softmax.default", "log_softmax"], PARAMS, |c| softmax(c, true)),
];

/// Softmax, or log-softmax, along `dim`.
fn softmax(c: &mut Call<'_>, log: bool) -> Result<Vec<TensorId>> {
    let (x, dim) = (c.tensor(0)?, c.dim(1)?);
    one(c.g.softmax_impl(x, dim, log)?)
}

// Shape and dtype inference: the builder's methods of this family, each checking its
// operands and naming the tensor and the numbers on error.

impl GraphBuilder {
    fn softmax_impl(&mut self, x: TensorId, dim: isize, log: bool) -> Result<TensorId> {
        let op = if log { "log_softmax" } else { "softmax" };
        let xi = self.float_operand(op, x)?;
        let dim = norm_dim(op, &xi.name, dim, xi.shape.len())?;
        self.node(Op::Softmax { x, dim, log }, op, xi.dtype, xi.shape)
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

// Recording: what this family's nodes become, dispatches of the op library.
impl Lowerer<'_> {
    /// Records a node of this family.
    pub(crate) fn record_softmax(&mut self, op: &Op, t: &Target) -> Result<()> {
        let (o, oi) = (t.o, &t.info);
        match op {
            Op::Softmax { x, dim, log } => {
                let s = &oi.shape;
                let outer: usize = s[..*dim].iter().product();
                let inner: usize = s[dim + 1..].iter().product();
                let rows = inner == 1 && s[*dim] >= ROW_KERNEL_MIN;
                let vec4 = rows && s[*dim] % 4 == 0;
                // vec4s per thread kept in registers (rows up to 8192 elements).
                let per_thread = (s[*dim] / 4).div_ceil(256);
                let cache = if vec4 && per_thread <= 8 {
                    per_thread as u32
                } else {
                    0
                };
                let g = if rows {
                    outer.min(ROW_GROUPS) as u32
                } else {
                    self.linear_groups((outer * inner) as u64)
                };
                let x = self.st(*x);
                let kernel = if rows && self.subgroups {
                    Kernel::SoftmaxSg
                } else {
                    Kernel::Softmax
                };
                self.push(
                    kernel,
                    vec![u32::from(*log), u32::from(rows), u32::from(vec4), cache],
                    vec![(x, false), (o, true)],
                    &push::SoftmaxPush {
                        outer: outer as u32,
                        d: s[*dim] as u32,
                        inner: inner as u32,
                    },
                    [g, 1, 1],
                );
            }
            _ => return Err(self.not_in_family()),
        }
        Ok(())
    }
}
