//! Quantization: `quantized_decomposed`'s quantize and dequantize per tensor, channel and
//! token (composed of elementwise ops: `round(x / scale) + zero_point` clamped, and
//! `(q - zero_point) * scale`), and int8 add and conv2d with per-tensor scales and zero
//! points, requantized through fixed-point multipliers (the Rust API).

use vk_core::{DType, HostTensor};

use super::{Call, Fallback, Kind, Math, OpDef, Param, one};
use crate::error::Result;
use crate::graph::{
    GraphBuilder, Op, QAdd, QConv, Rescale, TensorId, check_bias, check_zero_point, conv_shape,
    shape_err,
};
use crate::kernels::{Kernel, push};
use crate::lower::{Lowerer, Target};

const INPUT: Param = Param::tensor("input");
const SCALE: Param = Param::new("scale", Kind::Float, Fallback::Required);
const ZERO_POINT: Param = Param::new("zero_point", Kind::Int, Fallback::Required);
const SCALES: Param = Param::tensor("scales|scale");
const ZERO_POINTS: Param = Param::tensor("zero_points|zero_point");
const AXIS: Param = Param::new("axis", Kind::Int, Fallback::Required);
const QMIN: Param = Param::new("quant_min", Kind::Int, Fallback::Required);
const QMAX: Param = Param::new("quant_max", Kind::Int, Fallback::Required);
const DTYPE: Param = Param::new("dtype", Kind::Int, Fallback::Required);
const OUT_DTYPE: Param = Param::new("out_dtype|output_dtype", Kind::Int, Fallback::Null);

/// The ops of this family, one registration line each.
#[rustfmt::skip]
pub(super) const OPS: &[OpDef] = &[
    OpDef::new(&["quantized_decomposed.quantize_per_tensor.default", "quantized_decomposed::quantize_per_tensor.out", "quantize_per_tensor"], &[INPUT, SCALE, ZERO_POINT, QMIN, QMAX, DTYPE], |c| quantize(c, Scales::Scalar)),
    OpDef::new(&["quantized_decomposed.quantize_per_tensor.tensor", "quantized_decomposed::quantize_per_tensor.tensor_out"], &[INPUT, SCALES, ZERO_POINTS, QMIN, QMAX, DTYPE], |c| quantize(c, Scales::Tensor)),
    OpDef::new(&["quantized_decomposed.quantize_per_channel.default", "quantized_decomposed::quantize_per_channel.out", "quantize_per_channel"], &[INPUT, SCALES, ZERO_POINTS, AXIS, QMIN, QMAX, DTYPE], |c| quantize(c, Scales::Channel)),
    OpDef::new(&["quantized_decomposed.quantize_per_token.default", "quantized_decomposed::quantize_per_token.out", "quantize_per_token"], &[INPUT, SCALES, ZERO_POINTS, QMIN, QMAX, DTYPE], |c| quantize(c, Scales::Token)),
    OpDef::new(&["quantized_decomposed.dequantize_per_tensor.default", "quantized_decomposed::dequantize_per_tensor.out", "dequantize_per_tensor"], &[INPUT, SCALE, ZERO_POINT, QMIN, QMAX, DTYPE, OUT_DTYPE], |c| dequantize(c, Scales::Scalar)),
    OpDef::new(&["quantized_decomposed.dequantize_per_tensor.tensor", "quantized_decomposed::dequantize_per_tensor.tensor_out"], &[INPUT, SCALES, ZERO_POINTS, QMIN, QMAX, DTYPE, OUT_DTYPE], |c| dequantize(c, Scales::Tensor)),
    OpDef::new(&["quantized_decomposed.dequantize_per_channel.default", "quantized_decomposed::dequantize_per_channel.out", "dequantize_per_channel"], &[INPUT, SCALES, Param::opt_tensor("zero_points|zero_point"), AXIS, QMIN, QMAX, DTYPE, OUT_DTYPE], |c| dequantize(c, Scales::Channel)),
    OpDef::new(&["quantized_decomposed.dequantize_per_token.default", "quantized_decomposed::dequantize_per_token.out", "dequantize_per_token"], &[INPUT, SCALES, ZERO_POINTS, QMIN, QMAX, DTYPE, OUT_DTYPE], |c| dequantize(c, Scales::Token)),
];

/// How an op's scales and zero points are given.
#[derive(Clone, Copy, PartialEq)]
enum Scales {
    /// Two numbers.
    Scalar,
    /// Two one-element tensors.
    Tensor,
    /// Tensors of `input.shape[axis]` elements.
    Channel,
    /// Tensors of one element per token: `input.shape[..-1]` and 1.
    Token,
}

/// The quantized dtype of ExecuTorch's `ScalarType` code (`torch.int8`: 1, `torch.int32`: 3).
fn quantized_dtype(c: &Call<'_>, i: usize) -> Result<DType> {
    match c.int(i)? {
        1 => Ok(DType::I8),
        3 => Ok(DType::I32),
        other => Err(c.err(
            i,
            format!("ScalarType {other}: int8 (1) and int32 (3) are supported"),
        )),
    }
}

/// `(scale, zero_point)` as tensors that broadcast against `x` (for `Scalar`, `None`); the
/// scale's reciprocal where `reciprocal`, computed on the host when the scales are constants
/// (as PyTorch computes `1 / scale` before multiplying).
fn broadcast_params(
    c: &mut Call<'_>,
    x: TensorId,
    how: Scales,
    reciprocal: bool,
) -> Result<Option<(TensorId, Option<TensorId>)>> {
    if how == Scales::Scalar {
        return Ok(None);
    }
    let shape = c.shape(x);
    let mut to: Vec<isize> = vec![1; shape.len().max(1)];
    match how {
        Scales::Channel => {
            let axis = c.dim(3)?;
            let rank = shape.len() as isize;
            let a = if axis < 0 { axis + rank } else { axis };
            if !(0..rank).contains(&a) {
                return Err(c.err(3, format!("axis {axis} of a rank-{rank} input")));
            }
            to[a as usize] = shape[a as usize] as isize;
        }
        Scales::Token => {
            for (t, &d) in to.iter_mut().zip(&shape[..shape.len().saturating_sub(1)]) {
                *t = d as isize;
            }
        }
        _ => {}
    }
    let scale = c.tensor(1)?;
    let scale = match c.g.constant_values(scale) {
        Some(v) if reciprocal => {
            let inv: Vec<f32> = v.iter().map(|s| 1.0 / s).collect();
            let name = format!("inv_scale_{}", scale.index());
            let dims = c.shape(scale);
            c.g.constant_f32(&name, &dims, &inv)?
        }
        _ if reciprocal => {
            let f = c.g.cast(scale, DType::F32)?;
            c.g.math(Math::Reciprocal, f, 0.0)?
        }
        _ => c.g.cast(scale, DType::F32)?,
    };
    let scale = c.g.reshape(scale, &to)?;
    let zero = match c.opt_tensor(2)? {
        Some(z) => {
            let z = c.g.cast(z, DType::F32)?;
            Some(c.g.reshape(z, &to)?)
        }
        None => None,
    };
    Ok(Some((scale, zero)))
}

/// `clamp(round(input * (1 / scale)) + zero_point, quant_min, quant_max)` in the quantized
/// dtype (rounding halves to even, as `torch.round`).
fn quantize(c: &mut Call<'_>, how: Scales) -> Result<Vec<TensorId>> {
    let x = c.tensor(0)?;
    let at = if how == Scales::Channel { 4 } else { 3 };
    let (qmin, qmax, dtype) = (c.int(at)?, c.int(at + 1)?, quantized_dtype(c, at + 2)?);
    let xf = c.g.cast(x, DType::F32)?;
    let q = match broadcast_params(c, x, how, true)? {
        None => {
            let inv = (1.0 / c.float(1)?) as f32;
            let y = c.g.mul_scalar(xf, inv)?;
            let y = c.g.math(Math::Round, y, 0.0)?;
            c.g.add_scalar(y, c.int(2)? as f32)?
        }
        Some((inv, zero)) => {
            let y = c.g.mul(xf, inv)?;
            let y = c.g.math(Math::Round, y, 0.0)?;
            match zero {
                Some(z) => c.g.add(y, z)?,
                None => y,
            }
        }
    };
    let q = c.g.clamp(q, qmin as f32, qmax as f32)?;
    one(c.g.cast(q, dtype)?)
}

/// `(input - zero_point) * scale`, in f32 (f16 where `out_dtype` is `torch.float16`).
fn dequantize(c: &mut Call<'_>, how: Scales) -> Result<Vec<TensorId>> {
    let x = c.tensor(0)?;
    let out = if how == Scales::Channel { 7 } else { 6 };
    let xf = c.g.cast(x, DType::F32)?;
    let y = match broadcast_params(c, x, how, false)? {
        None => {
            let (scale, zero) = (c.f32(1)?, c.int(2)? as f32);
            let y = c.g.add_scalar(xf, -zero)?;
            c.g.mul_scalar(y, scale)?
        }
        Some((scale, zero)) => {
            let y = match zero {
                Some(z) => c.g.sub(xf, z)?,
                None => xf,
            };
            c.g.mul(y, scale)?
        }
    };
    match c.opt_int(out)? {
        Some(5) => one(c.g.cast(y, DType::F16)?),
        _ => one(y),
    }
}

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
