//! Activations: functions of one tensor, element by element.

use super::{Call, Fallback, Kind, OpDef, Param, one};
use crate::error::Result;
use crate::graph::{GraphBuilder, TensorId, UnaryOp};

const SELF: Param = Param::tensor("self");
const F32_MIN: f64 = f32::MIN as f64;
const F32_MAX: f64 = f32::MAX as f64;

/// The ops of this family, one registration line each.
#[rustfmt::skip]
pub(super) const OPS: &[OpDef] = &[
    OpDef::new(&["aten.relu.default", "relu"], &[SELF], |c| unary(c, UnaryOp::Relu)),
    OpDef::new(&["relu6"], &[SELF], |c| unary(c, UnaryOp::Clamp(0.0, 6.0))),
    OpDef::new(&["aten.sigmoid.default", "sigmoid"], &[SELF], |c| unary(c, UnaryOp::Sigmoid)),
    OpDef::new(&["aten.tanh.default", "tanh"], &[SELF], |c| unary(c, UnaryOp::Tanh)),
    OpDef::new(&["aten.hardswish.default", "hardswish"], &[SELF], |c| unary(c, UnaryOp::Hardswish)),
    OpDef::new(&["aten.gelu.default", "gelu"], &[SELF, Param::new("approximate", Kind::Str, Fallback::Str("none"))], gelu),
    OpDef::new(&["aten.clamp.default", "clamp"], &[SELF, Param::new("min", Kind::Float, Fallback::Float(F32_MIN)), Param::new("max", Kind::Float, Fallback::Float(F32_MAX))], clamp),
    OpDef::new(&["aten.hardtanh.default", "hardtanh"], &[SELF, Param::new("min_val|min", Kind::Float, Fallback::Float(-1.0)), Param::new("max_val|max", Kind::Float, Fallback::Float(1.0))], clamp),
];

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
