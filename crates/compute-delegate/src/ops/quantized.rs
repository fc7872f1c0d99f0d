//! Quantized int8 ops: add and conv2d with per-tensor scales and zero points, requantized
//! through fixed-point multipliers (no front end names them yet; the Rust API does).

use vk_core::{DType, HostTensor};

use super::OpDef;
use crate::error::Result;
use crate::graph::{
    GraphBuilder, Op, QAdd, QConv, Rescale, TensorId, check_bias, check_zero_point, conv_shape,
    shape_err,
};
use crate::kernels::{Kernel, push};
use crate::lower::{Lowerer, Target};

/// The ops of this family, one registration line each.
#[rustfmt::skip]
pub(super) const OPS: &[OpDef] = &[];

// Shape and dtype inference: the builder's methods of this family, each checking its
// operands and naming the tensor and the numbers on error.

impl GraphBuilder {
    /// int8 add of two tensors of one shape with TOSA-style rescales (see [`QAdd`]).
    pub fn add_q8(&mut self, a: TensorId, b: TensorId, q: &QAdd) -> Result<TensorId> {
        const OP: &str = "add_q8";
        let ai = self.typed_operand(OP, a, DType::I8)?;
        let bi = self.typed_operand(OP, b, DType::I8)?;
        if ai.shape != bi.shape {
            return Err(shape_err(
                OP,
                format!(
                    "'{}' {:?} and '{}' {:?} must have the same shape",
                    ai.name, ai.shape, bi.name, bi.shape
                ),
            ));
        }
        for (name, zp) in [("a_zp", q.a_zp), ("b_zp", q.b_zp), ("out_zp", q.out_zp)] {
            check_zero_point(OP, name, zp)?;
        }
        for r in [q.a, q.b, q.out] {
            r.check(OP)?;
        }
        if q.left_shift > 20 {
            return Err(shape_err(
                OP,
                format!("left_shift {} is over 20", q.left_shift),
            ));
        }
        Ok(self.node(Op::QAdd { a, b, q: *q }, OP, DType::I8, ai.shape))
    }

    /// int8 conv2d: `x` and `w` i8, `bias` i32 `[c_out]`, accumulation in i32 and a TOSA-style
    /// rescale per output channel (`rescale` has one entry, for every channel, or `c_out`).
    pub fn conv2d_q8(
        &mut self,
        x: TensorId,
        w: TensorId,
        bias: Option<TensorId>,
        rescale: &[Rescale],
        q: &QConv,
    ) -> Result<TensorId> {
        const OP: &str = "conv2d_q8";
        let xi = self.typed_operand(OP, x, DType::I8)?;
        let wi = self.typed_operand(OP, w, DType::I8)?;
        let shape = conv_shape(OP, &xi, &wi, &q.conv)?;
        let cout = shape[1];
        if let Some(b) = bias {
            let bi = self.typed_operand(OP, b, DType::I32)?;
            check_bias(OP, &bi, cout)?;
        }
        for (name, zp) in [("x_zp", q.x_zp), ("w_zp", q.w_zp), ("out_zp", q.out_zp)] {
            check_zero_point(OP, name, zp)?;
        }
        if rescale.len() != 1 && rescale.len() != cout {
            return Err(shape_err(
                OP,
                format!(
                    "{} rescales for weight '{}' with {cout} output channels: give 1 or {cout}",
                    rescale.len(),
                    wi.name
                ),
            ));
        }
        for r in rescale {
            r.check(OP)?;
        }
        let per_channel = |f: &dyn Fn(&Rescale) -> i32| -> Vec<i32> {
            (0..cout)
                .map(|c| f(&rescale[if rescale.len() == 1 { 0 } else { c }]))
                .collect()
        };
        let mult = per_channel(&|r| r.multiplier);
        let shift = per_channel(&|r| r.shift as i32);
        let label = format!("{}_rescale", wi.name);
        let mk = |v: &[i32]| {
            HostTensor::from_i32(vec![cout], v)
                .map_err(|e| shape_err(OP, format!("rescale constants: {e}")))
        };
        let mult = self.constant(&format!("{label}_multiplier"), mk(&mult)?)?;
        let shift = self.constant(&format!("{label}_shift"), mk(&shift)?)?;
        Ok(self.node(
            Op::QConv {
                x,
                w,
                bias,
                mult,
                shift,
                q: *q,
            },
            OP,
            DType::I8,
            shape,
        ))
    }
}

// Recording: what this family's nodes become, dispatches of the op library.
impl Lowerer<'_> {
    /// Records a node of this family.
    pub(crate) fn record_quantized(&mut self, op: &Op, t: &Target) -> Result<()> {
        let (o, oi, n) = (t.o, &t.info, t.info.numel());
        match op {
            Op::QAdd { a, b, q } => {
                let packed = n.div_ceil(4);
                let g = self.linear_groups(packed as u64);
                let (sa, sb) = (self.st(*a), self.st(*b));
                let push = push::QAddPush {
                    words: packed as u32,
                    a_zp: q.a_zp,
                    b_zp: q.b_zp,
                    out_zp: q.out_zp,
                    left_shift: q.left_shift,
                    ma: q.a.multiplier,
                    sa: q.a.shift,
                    mb: q.b.multiplier,
                    sb: q.b.shift,
                    mo: q.out.multiplier,
                    so: q.out.shift,
                };
                self.push(
                    Kernel::QAdd,
                    vec![],
                    vec![(sa, false), (sb, false), (o, true)],
                    &push,
                    [g, 1, 1],
                );
            }
            Op::QConv {
                x,
                w,
                bias,
                mult,
                shift,
                q,
            } => {
                let (xi, wi) = (self.t(*x).clone(), self.t(*w).clone());
                let p = q.conv;
                let packed = n.div_ceil(4);
                let g = self.linear_groups(packed as u64);
                let b = bias.map(|b| self.st(b));
                let push = push::QConvPush {
                    total: n as u32,
                    c_in: xi.shape[1] as u32,
                    h: xi.shape[2] as u32,
                    w: xi.shape[3] as u32,
                    c_out: oi.shape[1] as u32,
                    oh: oi.shape[2] as u32,
                    ow: oi.shape[3] as u32,
                    kh: wi.shape[2] as u32,
                    kw: wi.shape[3] as u32,
                    sh: p.stride[0] as u32,
                    sw: p.stride[1] as u32,
                    ph: p.padding[0] as u32,
                    pw: p.padding[1] as u32,
                    dh: p.dilation[0] as u32,
                    dw: p.dilation[1] as u32,
                    groups: p.groups as u32,
                    x_zp: q.x_zp,
                    w_zp: q.w_zp,
                    out_zp: q.out_zp,
                    has_bias: u32::from(b.is_some()),
                };
                let (sm, ss) = (self.st(*mult), self.st(*shift));
                self.push(
                    Kernel::QConv,
                    vec![],
                    vec![
                        (xi.storage, false),
                        (wi.storage, false),
                        (b.unwrap_or(sm), false),
                        (sm, false),
                        (ss, false),
                        (o, true),
                    ],
                    &push,
                    [g, 1, 1],
                );
            }
            _ => return Err(self.not_in_family()),
        }
        Ok(())
    }
}
