//! 2-D convolution (any groups, dilation and padding), with an optional clamp
//! (`et_vk.conv_with_clamp`). Transposed convolution is refused by name.

use super::{Call, Fallback, Kind, OpDef, Param, one};
use crate::error::Result;
use crate::graph::{Conv2d, TensorId};

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
