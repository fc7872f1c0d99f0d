//! Matrix products: `linear`, `mm`, `bmm`, `addmm`.

use super::{Call, Fallback, Kind, OpDef, Param, one};
use crate::error::Result;
use crate::graph::{GraphBuilder, Op, TensorId, shape_err};

/// The ops of this family, one registration line each.
#[rustfmt::skip]
pub(super) const OPS: &[OpDef] = &[
    OpDef::new(&["aten.linear.default"], &[Param::tensor("input"), Param::tensor("weight"), Param::opt_tensor("bias")], linear),
    OpDef::new(&["aten.mm.default", "matmul"], &[Param::tensor("self"), Param::tensor("mat2")], |c| product(c, GraphBuilder::matmul)),
    OpDef::new(&["aten.bmm.default", "bmm"], &[Param::tensor("self"), Param::tensor("mat2")], |c| product(c, GraphBuilder::bmm)),
    OpDef::new(&["aten.addmm.default", "addmm"], &[Param::tensor("self"), Param::tensor("mat1"), Param::tensor("mat2"), Param::new("beta", Kind::Float, Fallback::Float(1.0)), Param::new("alpha", Kind::Float, Fallback::Float(1.0))], addmm),
];

/// `beta * self + alpha * (mat1 @ mat2)`, `self` broadcasting.
fn addmm(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (bias, a, b) = (c.tensor(0)?, c.tensor(1)?, c.tensor(2)?);
    let (beta, alpha) = (c.f32(3)?, c.f32(4)?);
    let mut y = c.g.matmul(a, b)?;
    if alpha != 1.0 {
        y = c.g.mul_scalar(y, alpha)?;
    }
    if beta == 0.0 {
        return one(y);
    }
    let bias = if beta == 1.0 {
        bias
    } else {
        c.g.mul_scalar(bias, beta)?
    };
    one(c.g.add(y, bias)?)
}

fn linear(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, w, b) = (c.tensor(0)?, c.tensor(1)?, c.opt_tensor(2)?);
    one(c.g.linear(x, w, b)?)
}

/// `self x mat2`.
fn product(
    c: &mut Call<'_>,
    op: fn(&mut GraphBuilder, TensorId, TensorId) -> Result<TensorId>,
) -> Result<Vec<TensorId>> {
    let (a, b) = (c.tensor(0)?, c.tensor(1)?);
    one(op(c.g, a, b)?)
}

// Shape and dtype inference: the builder's methods of this family, each checking its
// operands and naming the tensor and the numbers on error.

impl GraphBuilder {
    /// `x [.., k] @ w[n, k]^T + bias[n]` (PyTorch `linear`). Constant weights are transposed
    /// once at build.
    pub fn linear(&mut self, x: TensorId, w: TensorId, bias: Option<TensorId>) -> Result<TensorId> {
        const OP: &str = "linear";
        let xi = self.float_operand(OP, x)?;
        let wi = self.same_float(OP, w, &xi)?;
        let k = *xi.shape.last().unwrap_or(&0);
        if wi.shape.len() != 2 || wi.shape[1] != k {
            return Err(shape_err(
                OP,
                format!(
                    "weight '{}' {:?} must be [out_features, {k}] for input '{}' {:?}",
                    wi.name, wi.shape, xi.name, xi.shape
                ),
            ));
        }
        let n = wi.shape[0];
        if let Some(b) = bias {
            let bi = self.same_float(OP, b, &xi)?;
            if bi.shape != [n] {
                return Err(shape_err(
                    OP,
                    format!(
                        "bias '{}' has shape {:?}, expected [{n}]",
                        bi.name, bi.shape
                    ),
                ));
            }
        }
        let mut shape = xi.shape.clone();
        if let Some(last) = shape.last_mut() {
            *last = n;
        }
        self.node(
            Op::Matmul {
                a: x,
                b: w,
                bias,
                linear: true,
                norm: None,
            },
            OP,
            xi.dtype,
            shape,
        )
    }

    /// `a [.., m, k] @ b [.., k, n]`; batch dims must be equal, or one side's all 1.
    pub fn matmul(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.matmul_impl("matmul", a, b)
    }

    /// `a [b, m, k] @ b [b, k, n]`.
    pub fn bmm(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        const OP: &str = "bmm";
        let ai = self.float_operand(OP, a)?;
        let bi = self.same_float(OP, b, &ai)?;
        if ai.shape.len() != 3 || bi.shape.len() != 3 || ai.shape[0] != bi.shape[0] {
            return Err(shape_err(
                OP,
                format!(
                    "'{}' {:?} and '{}' {:?} must both be rank 3 with the same batch",
                    ai.name, ai.shape, bi.name, bi.shape
                ),
            ));
        }
        self.matmul_impl(OP, a, b)
    }

    fn matmul_impl(&mut self, op: &'static str, a: TensorId, b: TensorId) -> Result<TensorId> {
        let ai = self.float_operand(op, a)?;
        let bi = self.same_float(op, b, &ai)?;
        let (ra, rb) = (ai.shape.len(), bi.shape.len());
        if ra < 2 || rb < 2 {
            return Err(shape_err(
                op,
                format!(
                    "'{}' {:?} and '{}' {:?} must have rank 2 or more",
                    ai.name, ai.shape, bi.name, bi.shape
                ),
            ));
        }
        let (m, k) = (ai.shape[ra - 2], ai.shape[ra - 1]);
        let (k2, n) = (bi.shape[rb - 2], bi.shape[rb - 1]);
        if k != k2 {
            return Err(shape_err(
                op,
                format!(
                    "inner dims differ: '{}' {:?} has k = {k}, '{}' {:?} has k = {k2}",
                    ai.name, ai.shape, bi.name, bi.shape
                ),
            ));
        }
        let ba = &ai.shape[..ra - 2];
        let bb = &bi.shape[..rb - 2];
        let pa: usize = ba.iter().product();
        let pb: usize = bb.iter().product();
        let batch = if ba == bb {
            ba.to_vec()
        } else if pa == 1 && ba.len() <= bb.len() {
            bb.to_vec()
        } else if pb == 1 && bb.len() <= ba.len() {
            ba.to_vec()
        } else {
            return Err(shape_err(
                op,
                format!(
                    "batch dims {ba:?} of '{}' and {bb:?} of '{}' must be equal or one side all 1",
                    ai.name, bi.name
                ),
            ));
        };
        let mut shape = batch;
        shape.push(m);
        shape.push(n);
        self.node(
            Op::Matmul {
                a,
                b,
                bias: None,
                linear: false,
                norm: None,
            },
            op,
            ai.dtype,
            shape,
        )
    }
}
