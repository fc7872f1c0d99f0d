//! 2-D convolution (any groups, dilation and padding), with an optional clamp
//! (`et_vk.conv_with_clamp`). Transposed convolution is refused by name.

use super::{Call, Fallback, Kind, OpDef, Param, one};
use crate::error::Result;
use crate::graph::{Conv2d, GraphBuilder, Op, TensorId, check_bias, conv_shape};
use crate::kernels::{Kernel, push};
use crate::lower::{Lowerer, Target};

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

// Recording: what this family's nodes become, dispatches of the op library.
impl Lowerer<'_> {
    /// Records a node of this family.
    pub(crate) fn record_conv(&mut self, op: &Op, t: &Target) -> Result<()> {
        let (out, o, act, oi, n) = (t.out, t.o, t.act, &t.info, t.info.numel());
        match op {
            Op::Conv { x, w, bias, p } => {
                let (xi, wi) = (self.t(*x).clone(), self.t(*w).clone());
                let (nb, cin, h, wd) = (xi.shape[0], xi.shape[1], xi.shape[2], xi.shape[3]);
                let (cout, cin_g, kh, kw) = (wi.shape[0], wi.shape[1], wi.shape[2], wi.shape[3]);
                let (oh, ow) = (oi.shape[2], oi.shape[3]);
                let b = bias.map(|b| self.st(b));
                let has_bias = usize::from(b.is_some());
                let bindings = vec![
                    (xi.storage, false),
                    (wi.storage, false),
                    (b.unwrap_or(xi.storage), false),
                    (o, true),
                ];
                if p.groups == cin && p.groups > 1 {
                    let g = self.linear_groups(n as u64);
                    let (act_lo, act_hi) = act.unwrap_or((0.0, 0.0));
                    let push = push::ConvDwPush {
                        total: n as u32,
                        c_in: cin as u32,
                        h: h as u32,
                        w: wd as u32,
                        c_out: cout as u32,
                        oh: oh as u32,
                        ow: ow as u32,
                        kh: kh as u32,
                        kw: kw as u32,
                        sh: p.stride[0] as u32,
                        sw: p.stride[1] as u32,
                        ph: p.padding[0] as u32,
                        pw: p.padding[1] as u32,
                        dh: p.dilation[0] as u32,
                        dw: p.dilation[1] as u32,
                        has_bias: has_bias as u32,
                        act_lo,
                        act_hi,
                    };
                    self.push(
                        Kernel::ConvDw,
                        vec![u32::from(act.is_some())],
                        bindings,
                        &push,
                        [g, 1, 1],
                    );
                } else {
                    let pointwise = kh == 1 && kw == 1 && p.stride == [1, 1] && p.padding == [0, 0];
                    let m = cout / p.groups;
                    let nn = nb * oh * ow;
                    let k = cin_g * kh * kw;
                    // Gemm bindings: A = weights, B = input, bias, C.
                    let gb = vec![bindings[1], bindings[0], bindings[2], bindings[3]];
                    let with_bias = b.is_some();
                    if self.coop_conv(&xi, &wi.shape, p, (oh, ow), &gb, with_bias, out, act)? {
                        return Ok(());
                    }
                    let params = [
                        m,
                        nn,
                        k,
                        m * k,
                        k,
                        1,
                        0,
                        0,
                        0,
                        0,
                        0,
                        has_bias,
                        cin_g,
                        h,
                        wd,
                        oh,
                        ow,
                        kh,
                        kw,
                        p.stride[0],
                        p.stride[1],
                        p.padding[0],
                        p.padding[1],
                        p.dilation[0],
                        p.dilation[1],
                        cout,
                    ];
                    self.gemm(
                        m,
                        nn,
                        k,
                        p.groups,
                        if pointwise { 2 } else { 1 },
                        params,
                        gb,
                        out,
                        act,
                    )?;
                }
            }
            _ => return Err(self.not_in_family()),
        }
        Ok(())
    }
}
