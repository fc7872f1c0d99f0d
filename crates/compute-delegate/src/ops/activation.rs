//! Activations and unary math: functions of one tensor, element by element. The
//! activations run on `unary.comp` (vec4s, fused into convolutions where they follow one);
//! the math functions on `unary_math.comp`.

use super::{Call, Fallback, Kind, OpDef, Param, one};
use crate::error::Result;
use crate::graph::{GraphBuilder, TensorId, UnaryOp};
use crate::kernels::{Kernel, push};
use vk_core::DType;

const SELF: Param = Param::tensor("self");
const F32_MIN: f64 = f32::MIN as f64;
const F32_MAX: f64 = f32::MAX as f64;

/// The ops of this family, one registration line each.
#[rustfmt::skip]
pub(super) const OPS: &[OpDef] = &[
    OpDef::new(&["aten.relu.default", "relu"], &[SELF], |c| unary(c, UnaryOp::Relu)),
    OpDef::new(&["aten.relu6.default", "relu6"], &[SELF], |c| unary(c, UnaryOp::Clamp(0.0, 6.0))),
    OpDef::new(&["aten.sigmoid.default", "sigmoid"], &[SELF], |c| unary(c, UnaryOp::Sigmoid)),
    OpDef::new(&["aten.tanh.default", "tanh"], &[SELF], |c| unary(c, UnaryOp::Tanh)),
    OpDef::new(&["aten.hardswish.default", "hardswish"], &[SELF], |c| unary(c, UnaryOp::Hardswish)),
    OpDef::new(&["aten.silu.default", "silu"], &[SELF], |c| unary(c, UnaryOp::Silu)),
    OpDef::new(&["aten.gelu.default", "gelu"], &[SELF, Param::new("approximate", Kind::Str, Fallback::Str("none"))], gelu),
    OpDef::new(&["aten.clamp.default", "clamp"], &[SELF, Param::new("min", Kind::Float, Fallback::Float(F32_MIN)), Param::new("max", Kind::Float, Fallback::Float(F32_MAX))], clamp),
    OpDef::new(&["aten.hardtanh.default", "hardtanh"], &[SELF, Param::new("min_val|min", Kind::Float, Fallback::Float(-1.0)), Param::new("max_val|max", Kind::Float, Fallback::Float(1.0))], clamp),
    OpDef::new(&["aten.abs.default", "abs"], &[SELF], |c| math(c, Math::Abs)),
    OpDef::new(&["aten.neg.default", "neg"], &[SELF], |c| math(c, Math::Neg)),
    OpDef::new(&["aten.exp.default", "exp"], &[SELF], |c| math(c, Math::Exp)),
    OpDef::new(&["aten.log.default", "log"], &[SELF], |c| math(c, Math::Log)),
    OpDef::new(&["aten.log10.default", "log10"], &[SELF], |c| math(c, Math::Log10)),
    OpDef::new(&["aten.sqrt.default", "sqrt"], &[SELF], |c| math(c, Math::Sqrt)),
    OpDef::new(&["aten.rsqrt.default", "rsqrt"], &[SELF], |c| math(c, Math::Rsqrt)),
    OpDef::new(&["aten.sin.default", "sin"], &[SELF], |c| math(c, Math::Sin)),
    OpDef::new(&["aten.erf.default", "erf"], &[SELF], |c| math(c, Math::Erf)),
    OpDef::new(&["aten.log1p.default", "log1p"], &[SELF], |c| math(c, Math::Log1p)),
    OpDef::new(&["aten.cos.default", "cos"], &[SELF], |c| math(c, Math::Cos)),
    OpDef::new(&["aten.tan.default", "tan"], &[SELF], |c| math(c, Math::Tan)),
    OpDef::new(&["aten.round.default", "round"], &[SELF], |c| math(c, Math::Round)),
    OpDef::new(&["aten.floor.default", "floor"], &[SELF], |c| math(c, Math::Floor)),
    OpDef::new(&["aten.ceil.default", "ceil"], &[SELF], |c| math(c, Math::Ceil)),
    OpDef::new(&["aten.reciprocal.default", "reciprocal"], &[SELF], |c| math(c, Math::Reciprocal)),
    OpDef::new(&["aten.pow.Tensor_Scalar", "pow_scalar"], &[SELF, Param::new("exponent", Kind::Float, Fallback::Required)], |c| math(c, Math::Pow)),
    OpDef::new(&["aten.leaky_relu.default", "leaky_relu"], &[SELF, Param::new("negative_slope", Kind::Float, Fallback::Float(0.01))], |c| math(c, Math::LeakyRelu)),
    OpDef::new(&["aten.hardshrink.default", "hardshrink"], &[SELF, Param::new("lambd", Kind::Float, Fallback::Float(0.5))], |c| math(c, Math::Hardshrink)),
    OpDef::new(&["aten.hardsigmoid.default", "hardsigmoid"], &[SELF], |c| math(c, Math::Hardsigmoid)),
    OpDef::new(&["aten.fmod.Scalar", "aten::fmod.Scalar_out", "fmod_scalar"], &[SELF, Param::new("other|value", Kind::Float, Fallback::Required)], |c| math(c, Math::Fmod)),
];

/// The functions of `unary_math.comp`, by its `op` code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Math {
    /// `|x|`.
    Abs,
    /// `-x`.
    Neg,
    /// `e^x`.
    Exp,
    /// Natural logarithm.
    Log,
    /// Base-10 logarithm.
    Log10,
    /// Square root.
    Sqrt,
    /// `1 / sqrt(x)`.
    Rsqrt,
    /// Sine.
    Sin,
    /// Cosine.
    Cos,
    /// Tangent.
    Tan,
    /// Round, halves to even.
    Round,
    /// Round down.
    Floor,
    /// Round up.
    Ceil,
    /// `1 / x`.
    Reciprocal,
    /// `x^p` (negative bases with whole exponents as PyTorch computes them).
    Pow,
    /// `x` where `x >= 0`, else `p * x`.
    LeakyRelu,
    /// `x` where `|x| > p`, else 0.
    Hardshrink,
    /// `relu6(x + 3) / 6`.
    Hardsigmoid,
    /// `x - trunc(x / p) * p` (C's `fmod`: the sign of `x`).
    Fmod,
    /// The error function (max abs error 1.5e-7).
    Erf,
    /// `log(1 + x)`, accurate for small `x`.
    Log1p,
}

impl Math {
    fn name(self) -> &'static str {
        match self {
            Math::Abs => "abs",
            Math::Neg => "neg",
            Math::Exp => "exp",
            Math::Log => "log",
            Math::Log10 => "log10",
            Math::Sqrt => "sqrt",
            Math::Rsqrt => "rsqrt",
            Math::Sin => "sin",
            Math::Cos => "cos",
            Math::Tan => "tan",
            Math::Round => "round",
            Math::Floor => "floor",
            Math::Ceil => "ceil",
            Math::Reciprocal => "reciprocal",
            Math::Pow => "pow",
            Math::LeakyRelu => "leaky_relu",
            Math::Hardshrink => "hardshrink",
            Math::Hardsigmoid => "hardsigmoid",
            Math::Fmod => "fmod",
            Math::Erf => "erf",
            Math::Log1p => "log1p",
        }
    }
}

/// A math function of `self`, its parameter (if any) the op's second argument. An integer
/// tensor is computed in f32 (exact below 2^24); the ops that keep integers whole (abs, neg,
/// rounding, fmod) give its dtype back.
fn math(c: &mut Call<'_>, op: Math) -> Result<Vec<TensorId>> {
    let x = c.tensor(0)?;
    let p = if c.def.params.len() > 1 {
        c.f32(1)?
    } else {
        0.0
    };
    let dtype = c.g.info("math", x)?.dtype;
    if matches!(dtype, DType::F32 | DType::F16) {
        return one(c.g.math(op, x, p)?);
    }
    let xf = c.g.cast(x, DType::F32)?;
    let y = c.g.math(op, xf, p)?;
    let whole = matches!(
        op,
        Math::Abs | Math::Neg | Math::Round | Math::Floor | Math::Ceil | Math::Fmod
    ) && (op != Math::Fmod || p.fract() == 0.0);
    one(if whole { c.g.cast(y, dtype)? } else { y })
}

/// A function of `self`, element by element.
fn unary(c: &mut Call<'_>, op: UnaryOp) -> Result<Vec<TensorId>> {
    let x = c.tensor(0)?;
    one(c.g.unary(op, x)?)
}

fn gelu(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let x = c.tensor(0)?;
    let tanh = match c.str(1)? {
        None | Some("none") => false,
        Some("tanh") => true,
        Some(other) => {
            return Err(c.err(1, format!("must be \"tanh\" or \"none\", found {other:?}")));
        }
    };
    one(c.g.gelu(x, tanh)?)
}

fn clamp(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, min, max) = (c.tensor(0)?, c.f32(1)?, c.f32(2)?);
    one(c.g.clamp(x, min, max)?)
}

// Shape and dtype inference: the builder's methods of this family, each checking its
// operands and naming the tensor and the numbers on error.

impl GraphBuilder {
    /// `op` of `x`, element by element (`p`: the exponent of `Pow`, the slope of
    /// `LeakyRelu`, the threshold of `Hardshrink`); f32 or f16, as `x`.
    pub fn math(&mut self, op: Math, x: TensorId, p: f32) -> Result<TensorId> {
        let xi = self.float_operand(op.name(), x)?;
        let push = push::UnaryMathPush {
            n: u32::try_from(xi.numel()).unwrap_or(u32::MAX),
            op: op as u32,
            p0: p,
        };
        let out = (xi.dtype, xi.shape);
        self.kernel_node(op.name(), Kernel::UnaryMath, &[x], out, &push)
    }

    /// `max(x, 0)`.
    pub fn relu(&mut self, x: TensorId) -> Result<TensorId> {
        self.unary(UnaryOp::Relu, x)
    }

    /// `clamp(x, 0, 6)`.
    pub fn relu6(&mut self, x: TensorId) -> Result<TensorId> {
        self.unary(UnaryOp::Clamp(0.0, 6.0), x)
    }

    /// `clamp(x, min, max)` (PyTorch `hardtanh`).
    pub fn hardtanh(&mut self, x: TensorId, min: f32, max: f32) -> Result<TensorId> {
        self.unary(UnaryOp::Clamp(min, max), x)
    }

    /// `clamp(x, min, max)`.
    pub fn clamp(&mut self, x: TensorId, min: f32, max: f32) -> Result<TensorId> {
        self.unary(UnaryOp::Clamp(min, max), x)
    }

    /// Logistic sigmoid.
    pub fn sigmoid(&mut self, x: TensorId) -> Result<TensorId> {
        self.unary(UnaryOp::Sigmoid, x)
    }

    /// Hyperbolic tangent.
    pub fn tanh(&mut self, x: TensorId) -> Result<TensorId> {
        self.unary(UnaryOp::Tanh, x)
    }

    /// GELU (`approximate_tanh` selects PyTorch's `approximate="tanh"`).
    pub fn gelu(&mut self, x: TensorId, approximate_tanh: bool) -> Result<TensorId> {
        let op = if approximate_tanh {
            UnaryOp::GeluTanh
        } else {
            UnaryOp::Gelu
        };
        self.unary(op, x)
    }

    /// Hardswish.
    pub fn hardswish(&mut self, x: TensorId) -> Result<TensorId> {
        self.unary(UnaryOp::Hardswish, x)
    }
}
