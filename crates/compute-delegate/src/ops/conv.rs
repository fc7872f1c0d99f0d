//! 2-D convolution (any groups, dilation and padding), with an optional clamp
//! (`et_vk.conv_with_clamp`). Transposed convolution is refused by name.

use super::{Call, Fallback, Kind, OpDef, Param, one};
use crate::error::Result;
use crate::graph::{Conv2d, GraphBuilder, Op, TensorId, check_bias, conv_shape};

const CONV: &[Param] = &[
    Param::tensor("input"),
    Param::tensor("weight"),
    Param::opt_tensor("bias"),
    Param::new("stride", Kind::Ints, Fallback::Ints(&[1])),
    Param::new("padding", Kind::Ints, Fallback::Ints(&[0])),
    Param::new("dilation", Kind::Ints, Fallback::Ints(&[1])),
    Param::new("transposed", Kind::Bool, Fallback::Bool(false)),
    Param::new("output_padding", Kind::Ints, Fallback::Ints(&[0])),
    Param::new("groups", Kind::Int, Fallback::Int(1)),
    Param::new("output_min", Kind::Float, Fallback::Float(f32::MIN as f64)),
    Param::new("output_max", Kind::Float, Fallback::Float(f32::MAX as f64)),
];

/// The ops of this family, one registration line each.
#[rustfmt::skip]
pub(super) const OPS: &[OpDef] = &[
    OpDef::new(&["aten.convolution.default"], CONV.split_at(9).0, convolution),
    OpDef::new(&["et_vk.conv_with_clamp.default"], CONV, convolution),
];

fn convolution(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    if c.bool(6)? {
        return Err(c.err(6, "transposed convolution is not supported"));
    }
    let (x, w, b) = (c.tensor(0)?, c.tensor(1)?, c.opt_tensor(2)?);
    let p = Conv2d {
        stride: c.pair(3)?,
        padding: c.pair(4)?,
        dilation: c.pair(5)?,
        groups: c.count(8)?,
    };
    let y = c.g.conv2d(x, w, b, p)?;
    if c.def.params.len() <= 9 {
        return one(y);
    }
    let (min, max) = (c.f32(9)?, c.f32(10)?);
    one(c.g.clamp(y, min, max)?)
}

// Shape and dtype inference: the builder's methods of this family, each checking its
// operands and naming the tensor and the numbers on error.

impl GraphBuilder {
    /// `conv2d(x [n, c_in, h, w], w [c_out, c_in / groups, kh, kw], bias [c_out])`.
    pub fn conv2d(
        &mut self,
        x: TensorId,
        w: TensorId,
        bias: Option<TensorId>,
        p: Conv2d,
    ) -> Result<TensorId> {
        const OP: &str = "conv2d";
        let xi = self.float_operand(OP, x)?;
        let wi = self.same_float(OP, w, &xi)?;
        let shape = conv_shape(OP, &xi, &wi, &p)?;
        if let Some(b) = bias {
            let bi = self.same_float(OP, b, &xi)?;
            check_bias(OP, &bi, shape[1])?;
        }
        Ok(self.node(Op::Conv { x, w, bias, p }, OP, xi.dtype, shape))
    }
}
