//! Arithmetic of two tensors or a tensor and a scalar, comparisons, logical ops and `where`.
//! Masks are tensors of the graph's float dtype: 0 is false, anything else true; comparisons
//! write 0 or 1.

use super::{Call, Fallback, Kind, OpDef, Param, one};
use crate::error::{Error, Result};
use crate::graph::{
    BinaryOp, Compare, GraphBuilder, Op, TensorId, TensorInfo, UnaryOp, broadcast_shape, shape_err,
};
use crate::kernels::{Kernel, push};
use crate::lower::{Lowerer, MAX_RANK, Target, collapse, contiguous_strides, rank6};
use vk_core::DType;

const SELF: Param = Param::tensor("self");
const OTHER: Param = Param::tensor("other");
const ALPHA: Param = Param::new("alpha", Kind::Float, Fallback::Float(1.0));
const SCALAR: Param = Param::new("other|value", Kind::Float, Fallback::Required);

/// The ops of this family, one registration line each.
#[rustfmt::skip]
pub(super) const OPS: &[OpDef] = &[
    OpDef::new(&["aten.add.Tensor", "add"], &[SELF, OTHER, ALPHA], |c| binary(c, BinaryOp::Add)),
    OpDef::new(&["aten.sub.Tensor", "sub"], &[SELF, OTHER, ALPHA], |c| binary(c, BinaryOp::Sub)),
    OpDef::new(&["aten.mul.Tensor", "mul"], &[SELF, OTHER], |c| binary(c, BinaryOp::Mul)),
    OpDef::new(&["aten.div.Tensor", "div"], &[SELF, OTHER], |c| binary(c, BinaryOp::Div)),
    OpDef::new(&["aten.add.Scalar", "aten::add.Scalar_out", "add_scalar"], &[SELF, SCALAR, ALPHA], |c| scalar(c, UnaryOp::AddScalar)),
    OpDef::new(&["aten.sub.Scalar", "aten::sub.Scalar_out", "sub_scalar"], &[SELF, SCALAR, ALPHA], |c| scalar(c, |s| UnaryOp::AddScalar(-s))),
    OpDef::new(&["aten.mul.Scalar", "aten::mul.Scalar_out", "mul_scalar"], &[SELF, SCALAR], |c| scalar(c, UnaryOp::MulScalar)),
    OpDef::new(&["aten.div.Scalar", "aten::div.Scalar_out", "div_scalar"], &[SELF, SCALAR], |c| scalar(c, UnaryOp::DivScalar)),
    OpDef::new(&["aten.rsub.Scalar", "rsub_scalar"], &[SELF, SCALAR, ALPHA], rsub),
    OpDef::new(&["aten.eq.Scalar", "eq_scalar"], &[SELF, SCALAR], |c| scalar(c, |s| UnaryOp::Compare(Compare::Eq, s))),
    OpDef::new(&["aten.ne.Scalar", "ne_scalar"], &[SELF, SCALAR], |c| scalar(c, |s| UnaryOp::Compare(Compare::Ne, s))),
    OpDef::new(&["aten.gt.Scalar", "gt_scalar"], &[SELF, SCALAR], |c| scalar(c, |s| UnaryOp::Compare(Compare::Gt, s))),
    OpDef::new(&["aten.ge.Scalar", "ge_scalar"], &[SELF, SCALAR], |c| scalar(c, |s| UnaryOp::Compare(Compare::Ge, s))),
    OpDef::new(&["aten.lt.Scalar", "lt_scalar"], &[SELF, SCALAR], |c| scalar(c, |s| UnaryOp::Compare(Compare::Lt, s))),
    OpDef::new(&["aten.le.Scalar", "le_scalar"], &[SELF, SCALAR], |c| scalar(c, |s| UnaryOp::Compare(Compare::Le, s))),
    OpDef::new(&["aten.logical_not.default", "aten.bitwise_not.default", "logical_not"], &[SELF], logical_not),
    OpDef::new(&["aten.minimum.default", "minimum"], &[SELF, OTHER], |c| binary(c, BinaryOp::Minimum)),
    OpDef::new(&["aten.maximum.default", "maximum"], &[SELF, OTHER], |c| binary(c, BinaryOp::Maximum)),
    OpDef::new(&["aten.pow.Tensor_Tensor", "pow"], &[SELF, Param::tensor("exponent")], |c| binary(c, BinaryOp::Pow)),
    OpDef::new(&["aten.eq.Tensor", "eq"], &[SELF, OTHER], |c| binary(c, BinaryOp::Eq)),
    OpDef::new(&["aten.ne.Tensor", "ne"], &[SELF, OTHER], |c| binary(c, BinaryOp::Ne)),
    OpDef::new(&["aten.gt.Tensor", "gt"], &[SELF, OTHER], |c| binary(c, BinaryOp::Gt)),
    OpDef::new(&["aten.ge.Tensor", "ge"], &[SELF, OTHER], |c| binary(c, BinaryOp::Ge)),
    OpDef::new(&["aten.lt.Tensor", "lt"], &[SELF, OTHER], |c| binary(c, BinaryOp::Lt)),
    OpDef::new(&["aten.le.Tensor", "le"], &[SELF, OTHER], |c| binary(c, BinaryOp::Le)),
    OpDef::new(&["aten.logical_and.default", "aten.bitwise_and.Tensor", "logical_and"], &[SELF, OTHER], |c| binary(c, BinaryOp::And)),
    OpDef::new(&["aten.logical_or.default", "aten.bitwise_or.Tensor", "logical_or"], &[SELF, OTHER], |c| binary(c, BinaryOp::Or)),
    OpDef::new(&["aten.div.Tensor_mode", "div_mode"], &[SELF, OTHER, Param::new("rounding_mode", Kind::Str, Fallback::Null)], div_mode),
    OpDef::new(&["aten.where.self", "where"], &[Param::tensor("condition"), SELF, OTHER], where_),
];

/// The op's `alpha` (the third parameter of add and sub), 1 for ops without one.
fn alpha(c: &Call<'_>) -> Result<f64> {
    match c.def.params.get(2) {
        Some(p) if p.name() == "alpha" => c.float(2),
        _ => Ok(1.0),
    }
}

/// `self op other`, broadcasting; `other` scaled by `alpha` first where the op has one.
/// Integer operands (positions, sizes) are computed in f32, exact below 2^24, and the
/// arithmetic ops cast back to the integer dtype; true division and comparisons keep float.
fn binary(c: &mut Call<'_>, op: BinaryOp) -> Result<Vec<TensorId>> {
    let (x, y) = (c.tensor(0)?, c.tensor(1)?);
    let int = integer_pair(c.g, x, y)?;
    let (x, mut y) = match int {
        Some(_) => (c.g.cast(x, DType::F32)?, c.g.cast(y, DType::F32)?),
        None => promoted(c.g, x, y)?,
    };
    let alpha = alpha(c)? as f32;
    if alpha != 1.0 {
        y = c.g.mul_scalar(y, alpha)?;
    }
    let z = c.g.binary(op, x, y)?;
    let keeps_int = !matches!(op, BinaryOp::Div) && !op.is_mask();
    match int {
        Some(dtype) if keeps_int => one(c.g.cast(z, dtype)?),
        _ => one(z),
    }
}

/// The integer dtype both operands share, if neither is float.
fn integer_pair(g: &GraphBuilder, a: TensorId, b: TensorId) -> Result<Option<DType>> {
    let (da, db) = (g.info("binary", a)?.dtype, g.info("binary", b)?.dtype);
    let float = |d| matches!(d, DType::F32 | DType::F16);
    Ok((!float(da) && !float(db)).then_some(if da == db { da } else { DType::I32 }))
}

/// A function of `self` and the scalar `other` (times `alpha` where the op has one).
fn scalar(c: &mut Call<'_>, op: fn(f32) -> UnaryOp) -> Result<Vec<TensorId>> {
    // Infinities stay infinite (`x == -inf` is PyTorch's safe-softmax test); other values
    // past f32's range clamp to it.
    let v = c.float(1)? * alpha(c)?;
    let s = if v.is_infinite() {
        v as f32
    } else {
        v.clamp(f64::from(f32::MIN), f64::from(f32::MAX)) as f32
    };
    let x = c.tensor(0)?;
    let dtype = c.g.info("scalar", x)?.dtype;
    if matches!(dtype, DType::F32 | DType::F16) {
        return one(c.g.unary(op(s), x)?);
    }
    // An integer tensor, in f32 (exact below 2^24); arithmetic back to its dtype.
    let op = op(s);
    let x = c.g.cast(x, DType::F32)?;
    let y = c.g.unary(op, x)?;
    match op {
        UnaryOp::AddScalar(_) | UnaryOp::MulScalar(_) => one(c.g.cast(y, dtype)?),
        _ => one(y),
    }
}

/// `self / other` rounded as `rounding_mode` says: none, `"floor"` or `"trunc"`.
fn div_mode(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let op = match c.str(2)? {
        None => BinaryOp::Div,
        Some("floor") => BinaryOp::FloorDiv,
        Some("trunc") => BinaryOp::TruncDiv,
        Some(other) => {
            let why = format!("must be \"floor\", \"trunc\" or None, found {other:?}");
            return Err(c.err(2, why));
        }
    };
    binary(c, op)
}

/// `other - alpha * self`.
fn rsub(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, s, alpha) = (c.tensor(0)?, c.f32(1)?, c.f32(2)?);
    let x = if alpha == 1.0 {
        x
    } else {
        c.g.mul_scalar(x, alpha)?
    };
    one(c.g.rsub_scalar(x, s)?)
}

fn logical_not(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let x = c.tensor(0)?;
    one(c.g.logical_not(x)?)
}

fn where_(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let cond = c.tensor(0)?;
    let (x, y) = (c.tensor(1)?, c.tensor(2)?);
    // Integers pick through f32, as the other integer elementwise ops compute (exact to 2^24).
    if let Some(dtype) = integer_pair(c.g, x, y)? {
        let (x, y) = (c.g.cast(x, DType::F32)?, c.g.cast(y, DType::F32)?);
        let cond = c.g.as_dtype(cond, DType::F32)?;
        let z = c.g.where_(cond, x, y)?;
        return one(c.g.cast(z, dtype)?);
    }
    let (a, b) = promoted(c.g, x, y)?;
    one(c.g.where_(cond, a, b)?)
}

/// `a` and `b` in one dtype, as PyTorch promotes them: an integer operand (a 0-d constant
/// such as hardsigmoid's `3`) takes the float operand's dtype; fp16 meets fp32 in fp32.
fn promoted(g: &mut GraphBuilder, a: TensorId, b: TensorId) -> Result<(TensorId, TensorId)> {
    let (da, db) = (g.info("promote", a)?.dtype, g.info("promote", b)?.dtype);
    let float = |d| matches!(d, DType::F32 | DType::F16);
    let to = match (float(da), float(db)) {
        _ if da == db => return Ok((a, b)),
        (true, false) => da,
        (false, true) => db,
        (true, true) => DType::F32,
        (false, false) => return Ok((a, b)),
    };
    let a = if da == to { a } else { g.cast(a, to)? };
    let b = if db == to { b } else { g.cast(b, to)? };
    Ok((a, b))
}

// Shape and dtype inference: the builder's methods of this family, each checking its
// operands and naming the tensor and the numbers on error.

impl GraphBuilder {
    /// A unary elementwise op.
    pub fn unary(&mut self, op: UnaryOp, x: TensorId) -> Result<TensorId> {
        let xi = self.float_operand(op.name(), x)?;
        if let UnaryOp::Clamp(lo, hi) = op {
            if lo > hi || lo.is_nan() || hi.is_nan() {
                return Err(shape_err(
                    "clamp",
                    format!("min {lo} must not exceed max {hi} (tensor '{}')", xi.name),
                ));
            }
        }
        self.node(Op::Unary { op, x }, op.name(), xi.dtype, xi.shape)
    }

    /// A binary elementwise op with PyTorch broadcasting.
    pub fn binary(&mut self, op: BinaryOp, a: TensorId, b: TensorId) -> Result<TensorId> {
        let name = op.name();
        let ai = self.float_operand(name, a)?;
        let bi = self.same_float(name, b, &ai)?;
        let shape = broadcast_shape(name, &ai, &bi)?;
        self.node(Op::Binary { op, a, b }, name, ai.dtype, shape)
    }

    /// `a + b`, broadcasting.
    pub fn add(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(BinaryOp::Add, a, b)
    }

    /// `a - b`, broadcasting.
    pub fn sub(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(BinaryOp::Sub, a, b)
    }

    /// `a * b`, broadcasting.
    pub fn mul(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(BinaryOp::Mul, a, b)
    }

    /// `a / b`, broadcasting.
    pub fn div(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(BinaryOp::Div, a, b)
    }

    /// `x + s`.
    pub fn add_scalar(&mut self, x: TensorId, s: f32) -> Result<TensorId> {
        self.unary(UnaryOp::AddScalar(s), x)
    }

    /// `x - s`.
    pub fn sub_scalar(&mut self, x: TensorId, s: f32) -> Result<TensorId> {
        self.unary(UnaryOp::AddScalar(-s), x)
    }

    /// `s - x`.
    pub fn rsub_scalar(&mut self, x: TensorId, s: f32) -> Result<TensorId> {
        self.unary(UnaryOp::RSubScalar(s), x)
    }

    /// `x * s`.
    pub fn mul_scalar(&mut self, x: TensorId, s: f32) -> Result<TensorId> {
        self.unary(UnaryOp::MulScalar(s), x)
    }

    /// `x / s`.
    pub fn div_scalar(&mut self, x: TensorId, s: f32) -> Result<TensorId> {
        self.unary(UnaryOp::DivScalar(s), x)
    }

    /// `s / x`.
    pub fn rdiv_scalar(&mut self, x: TensorId, s: f32) -> Result<TensorId> {
        self.unary(UnaryOp::RDivScalar(s), x)
    }

    /// `x <cmp> s` as an f32 mask (1.0 where it holds, else 0.0).
    pub fn compare_scalar(&mut self, x: TensorId, cmp: Compare, s: f32) -> Result<TensorId> {
        self.unary(UnaryOp::Compare(cmp, s), x)
    }

    /// `x == s` as a mask.
    pub fn eq_scalar(&mut self, x: TensorId, s: f32) -> Result<TensorId> {
        self.compare_scalar(x, Compare::Eq, s)
    }

    /// `x > s` as a mask.
    pub fn gt_scalar(&mut self, x: TensorId, s: f32) -> Result<TensorId> {
        self.compare_scalar(x, Compare::Gt, s)
    }

    /// The mask's negation: 1.0 where `x` is 0.0, else 0.0.
    pub fn logical_not(&mut self, x: TensorId) -> Result<TensorId> {
        self.unary(UnaryOp::LogicalNot, x)
    }

    /// `cond ? a : b` elementwise (`cond` a mask: nonzero is true), all three broadcasting.
    pub fn where_(&mut self, cond: TensorId, a: TensorId, b: TensorId) -> Result<TensorId> {
        const OP: &str = "where";
        let ai = self.float_operand(OP, a)?;
        let ci = self.same_float(OP, cond, &ai)?;
        let bi = self.same_float(OP, b, &ai)?;
        let ab = TensorInfo {
            shape: broadcast_shape(OP, &ai, &bi)?,
            name: format!("{} and {}", ai.name, bi.name),
            ..ai
        };
        let shape = broadcast_shape(OP, &ci, &ab)?;
        self.node(Op::Where { cond, a, b }, OP, ai.dtype, shape)
    }
}

/// Strides of `t` read as a tensor of rank `r`: 0 on broadcast (size-1 or missing) dims.
fn bcast_strides(t: &TensorInfo, r: usize) -> Vec<usize> {
    let cs = contiguous_strides(&t.shape);
    let off = r - t.shape.len();
    (0..r)
        .map(|i| {
            if i < off || t.shape[i - off] == 1 {
                0
            } else {
                cs[i - off]
            }
        })
        .collect()
}

// Recording: what this family's nodes become, dispatches of the op library.
impl Lowerer<'_> {
    /// The dims of an output of shape `out` and the strides of each of `ins` read as that
    /// shape (0 on broadcast dims), contiguous dims merged; at most [`MAX_RANK`] remain.
    fn broadcast(
        &self,
        out: &[usize],
        ins: &[&TensorInfo],
    ) -> Result<(Vec<usize>, Vec<Vec<usize>>)> {
        let strides: Vec<Vec<usize>> = ins.iter().map(|t| bcast_strides(t, out.len())).collect();
        let (d, s) = collapse(out, &strides);
        if d.len() > MAX_RANK {
            let operands: Vec<String> = ins
                .iter()
                .map(|t| format!("'{}' {:?}", t.name, t.shape))
                .collect();
            return Err(Error::Shape {
                op: self.op,
                detail: format!(
                    "broadcasting {} to {out:?} needs {} dims; at most {MAX_RANK}",
                    operands.join(", "),
                    d.len()
                ),
            });
        }
        Ok((d, s))
    }

    /// Records a node of this family.
    pub(crate) fn record_elementwise(&mut self, op: &Op, t: &Target) -> Result<()> {
        let (o, oi, n) = (t.o, &t.info, t.info.numel());
        match op {
            Op::Unary { op, x } => {
                let (code, p0, p1) = op.code();
                let n4 = n.div_ceil(4);
                let g = self.linear_groups(n4.div_ceil(2) as u64); // two vec4s per thread
                let x = self.st(*x);
                self.push(
                    Kernel::Unary,
                    vec![code],
                    vec![(x, false), (o, true)],
                    &push::UnaryPush {
                        n4: n4 as u32,
                        p0,
                        p1,
                    },
                    [g, 1, 1],
                );
            }
            Op::Binary { op, a, b } => {
                let (ai, bi) = (self.t(*a).clone(), self.t(*b).clone());
                let (sa, sb) = (ai.storage, bi.storage);
                // A relu or clamp fused at lowering (see `fuse_activations`).
                let spec = vec![op.code(), u32::from(t.act.is_some())];
                let (act_lo, act_hi) = t.act.unwrap_or((0.0, 0.0));
                if ai.shape == bi.shape {
                    let n4 = n.div_ceil(4);
                    let g = self.linear_groups(n4.div_ceil(2) as u64); // two vec4s per thread
                    self.push(
                        Kernel::Binary,
                        spec,
                        vec![(sa, false), (sb, false), (o, true)],
                        &push::BinaryPush {
                            n4: n4 as u32,
                            act_lo,
                            act_hi,
                        },
                        [g, 1, 1],
                    );
                } else {
                    let (d, s) = self.broadcast(&oi.shape, &[&ai, &bi])?;
                    let push = push::BinaryBcastPush {
                        n: n as u32,
                        rank: d.len() as u32,
                        dims: rank6(&d),
                        sa: rank6(&s[0]),
                        sb: rank6(&s[1]),
                        act_lo,
                        act_hi,
                    };
                    let g = self.linear_groups(n as u64);
                    self.push(
                        Kernel::BinaryBcast,
                        spec,
                        vec![(sa, false), (sb, false), (o, true)],
                        &push,
                        [g, 1, 1],
                    );
                }
            }
            Op::Where { cond, a, b } => {
                let ins = [
                    self.t(*cond).clone(),
                    self.t(*a).clone(),
                    self.t(*b).clone(),
                ];
                let (d, s) = self.broadcast(&oi.shape, &[&ins[0], &ins[1], &ins[2]])?;
                let push = push::WherePush {
                    n: n as u32,
                    rank: d.len() as u32,
                    dims: rank6(&d),
                    sc: rank6(&s[0]),
                    sa: rank6(&s[1]),
                    sb: rank6(&s[2]),
                };
                let g = self.linear_groups(n as u64);
                let bindings = ins
                    .iter()
                    .map(|t| (t.storage, false))
                    .chain([(o, true)])
                    .collect();
                self.push(Kernel::Where, vec![], bindings, &push, [g, 1, 1]);
            }
            _ => return Err(self.not_in_family()),
        }
        Ok(())
    }
}
