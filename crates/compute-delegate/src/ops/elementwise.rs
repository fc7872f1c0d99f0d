//! Arithmetic of two tensors or a tensor and a scalar, comparisons, logical ops and `where`.
//! Masks are tensors of the graph's float dtype: 0 is false, anything else true; comparisons
//! write 0 or 1.

use super::{Call, Fallback, Kind, OpDef, Param, one};
use crate::error::Result;
use crate::graph::{Compare, TensorId};

const SELF: Param = Param::tensor("self");
const OTHER: Param = Param::tensor("other");
const ALPHA: Param = Param::new("alpha", Kind::Float, Fallback::Float(1.0));
const SCALAR: Param = Param::new("other|value", Kind::Float, Fallback::Required);

/// The ops of this family, one registration line each.
#[rustfmt::skip]
pub(super) const OPS: &[OpDef] = &[
    OpDef::new(&["aten.add.Tensor", "add"], &[SELF, OTHER, ALPHA], add),
    OpDef::new(&["aten.sub.Tensor", "sub"], &[SELF, OTHER, ALPHA], sub),
    OpDef::new(&["aten.mul.Tensor", "mul"], &[SELF, OTHER], mul),
    OpDef::new(&["aten.div.Tensor", "div"], &[SELF, OTHER], div),
    OpDef::new(&["aten.add.Scalar", "aten::add.Scalar_out", "add_scalar"], &[SELF, SCALAR, ALPHA], add_scalar),
    OpDef::new(&["aten.sub.Scalar", "aten::sub.Scalar_out", "sub_scalar"], &[SELF, SCALAR, ALPHA], sub_scalar),
    OpDef::new(&["aten.mul.Scalar", "aten::mul.Scalar_out", "mul_scalar"], &[SELF, SCALAR], mul_scalar),
    OpDef::new(&["aten.div.Scalar", "aten::div.Scalar_out", "div_scalar"], &[SELF, SCALAR], div_scalar),
    OpDef::new(&["aten.eq.Scalar", "eq_scalar"], &[SELF, SCALAR], eq),
    OpDef::new(&["aten.ne.Scalar", "ne_scalar"], &[SELF, SCALAR], ne),
    OpDef::new(&["aten.gt.Scalar", "gt_scalar"], &[SELF, SCALAR], gt),
    OpDef::new(&["aten.ge.Scalar", "ge_scalar"], &[SELF, SCALAR], ge),
    OpDef::new(&["aten.lt.Scalar", "lt_scalar"], &[SELF, SCALAR], lt),
    OpDef::new(&["aten.le.Scalar", "le_scalar"], &[SELF, SCALAR], le),
    OpDef::new(&["aten.logical_not.default", "logical_not"], &[SELF], logical_not),
    OpDef::new(&["aten.where.self", "where"], &[Param::tensor("condition"), SELF, OTHER], where_),
];

/// `other * alpha`, leaving it alone for alpha 1.
fn scaled_other(c: &mut Call<'_>) -> Result<TensorId> {
    let y = c.tensor(1)?;
    let alpha = c.f32(2)?;
    if alpha == 1.0 {
        return Ok(y);
    }
    c.g.mul_scalar(y, alpha)
}

fn add(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, y) = (c.tensor(0)?, scaled_other(c)?);
    one(c.g.add(x, y)?)
}

fn sub(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, y) = (c.tensor(0)?, scaled_other(c)?);
    one(c.g.sub(x, y)?)
}

fn mul(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, y) = (c.tensor(0)?, c.tensor(1)?);
    one(c.g.mul(x, y)?)
}

fn div(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, y) = (c.tensor(0)?, c.tensor(1)?);
    one(c.g.div(x, y)?)
}

/// The scalar operand times alpha.
fn scalar(c: &Call<'_>) -> Result<f32> {
    let alpha = if c.def.params.len() > 2 {
        c.float(2)?
    } else {
        1.0
    };
    let v = c.float(1)? * alpha;
    Ok(v.clamp(f64::from(f32::MIN), f64::from(f32::MAX)) as f32)
}

fn add_scalar(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, s) = (c.tensor(0)?, scalar(c)?);
    one(c.g.add_scalar(x, s)?)
}

fn sub_scalar(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, s) = (c.tensor(0)?, scalar(c)?);
    one(c.g.sub_scalar(x, s)?)
}

fn mul_scalar(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, s) = (c.tensor(0)?, scalar(c)?);
    one(c.g.mul_scalar(x, s)?)
}

fn div_scalar(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, s) = (c.tensor(0)?, scalar(c)?);
    one(c.g.div_scalar(x, s)?)
}

fn compare(c: &mut Call<'_>, cmp: Compare) -> Result<Vec<TensorId>> {
    let (x, s) = (c.tensor(0)?, c.f32(1)?);
    one(c.g.compare_scalar(x, cmp, s)?)
}

fn eq(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    compare(c, Compare::Eq)
}

fn ne(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    compare(c, Compare::Ne)
}

fn gt(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    compare(c, Compare::Gt)
}

fn ge(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    compare(c, Compare::Ge)
}

fn lt(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    compare(c, Compare::Lt)
}

fn le(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    compare(c, Compare::Le)
}

fn logical_not(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let x = c.tensor(0)?;
    one(c.g.logical_not(x)?)
}

fn where_(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (cond, a, b) = (c.tensor(0)?, c.tensor(1)?, c.tensor(2)?);
    one(c.g.where_(cond, a, b)?)
}
