//! Quantization: `quantized_decomposed`'s quantize and dequantize per tensor, channel and
//! token (composed of elementwise ops: `round(x / scale) + zero_point` clamped, and
//! `(q - zero_point) * scale`), and int8 add and conv2d with per-tensor scales and zero
//! points, requantized through fixed-point multipliers (the Rust API).

use vk_core::{DType, HostTensor};

use super::{Arg, Call, Fallback, Kind, Math, OpDef, Param, one};
use crate::error::Result;
use crate::graph::{
    GraphBuilder, KernelOut, Op, Pool2d, QAdd, QConv, Rescale, TensorId, check_bias,
    check_zero_point, conv_shape, shape_err,
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
const DTYPE: Param = Param::new("dtype", Kind::Int, Fallback::Null);
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
    OpDef::new(&["quantized_decomposed.choose_qparams.tensor", "choose_qparams"], &[INPUT, QMIN, QMAX, real("eps"), DTYPE], choose_qparams),
    OpDef::new(&["quantized_decomposed.choose_qparams_per_token_asymmetric.default", "choose_qparams_per_token_asymmetric"], &[INPUT, DTYPE], choose_qparams_per_token),
    OpDef::new(&["et_vk.q8ta_add.default", "q8ta_add"], &[Param::tensor("input_a"), Param::tensor("input_b"), real("input_a_scale"), int("input_a_zero_point"), real("input_b_scale"), int("input_b_zero_point"), real("output_scale"), int("output_zero_point"), Param::new("alpha", Kind::Float, Fallback::Float(1.0))], q8ta_add),
    OpDef::new(&["et_vk.q8ta_relu.default", "q8ta_relu"], &[INPUT, real("input_scale"), int("input_zero_point"), real("output_scale"), int("output_zero_point")], q8ta_relu),
    OpDef::new(&["et_vk.q8ta_pixel_shuffle.default", "q8ta_pixel_shuffle"], &[INPUT, real("input_scale"), int("input_zero_point"), real("output_inv_scale"), int("output_zero_point"), int("upscale_factor")], q8ta_pixel_shuffle),
    OpDef::new(&["et_vk.q8ta_linear.default", "et_vk.q8ta_linear_gemv.default", "q8ta_linear"], &[Param::tensor("x"), real("input_scale"), int("input_zero_point"), Param::tensor("weights"), Param::tensor("weight_sums"), Param::tensor("weight_scales"), real("output_scale"), int("output_zero_point"), Param::opt_tensor("bias"), ACTIVATION], q8ta_linear),
    OpDef::new(&["aten._weight_int8pack_mm.default", "aten::_weight_int8pack_mm.out", "weight_int8pack_mm"], &[INPUT, Param::tensor("mat2|weights"), Param::tensor("scales")], weight_int8pack_mm),
    OpDef::new(&["et_vk.linear_qcs4w.default", "linear_qcs4w"], &[INPUT, Param::tensor("weight|weights"), Param::tensor("scales")], linear_qcs4w),
    OpDef::new(&["et_vk.linear_q8csw.default", "linear_q8csw"], &[Param::tensor("x|input"), Param::tensor("weights"), Param::tensor("weight_scales"), Param::opt_tensor("bias")], linear_q8csw),
    OpDef::new(&["et_vk.conv2d_q8csw.default", "conv2d_q8csw"], &[Param::tensor("x|input"), Param::tensor("weights"), Param::tensor("weight_scales"), Param::opt_tensor("bias"), ints("kernel_size"), ints("stride"), ints("padding"), ints("dilation"), int("groups")], conv2d_q8csw),
    OpDef::new(&["et_vk.linear_q4gsw.default", "linear_q4gsw"], &[INPUT, Param::tensor("weights"), Param::tensor("weight_scales"), int("group_size"), Param::opt_tensor("bias")], |c| linear_q4gsw(c, [1, 2, 3, 4])),
    OpDef::new(&["et_vk.linear_dq8ca_q4gsw.default", "linear_dq8ca_q4gsw"], &[INPUT, Param::tensor("input_scale"), Param::tensor("input_zero_point"), Param::tensor("weights"), Param::tensor("weight_sums"), Param::tensor("weight_scales"), int("group_size"), Param::opt_tensor("bias")], |c| linear_q4gsw(c, [3, 5, 6, 7])),
    OpDef::new(&["et_vk.embedding_q4gsw.default", "embedding_q4gsw"], &[Param::tensor("weight"), Param::tensor("weight_scales"), int("group_size"), Param::tensor("indices"), Param::new("is_linear_weight", Kind::Bool, Fallback::Bool(false))], embedding_q4gsw),
    OpDef::new(&["torchao.choose_qparams_affine.default", "choose_qparams_affine"], &[INPUT, Param::new("mapping_type", Kind::Str, Fallback::Str("ASYMMETRIC")), ints("block_size"), Param::new("target_dtype", Kind::Int, Fallback::Null), Param::new("quant_min", Kind::Int, Fallback::Null), Param::new("quant_max", Kind::Int, Fallback::Null), Param::new("eps", Kind::Float, Fallback::Null), Param::new("scale_dtype", Kind::Int, Fallback::Null), Param::new("zero_point_dtype", Kind::Int, Fallback::Null), Param::new("keepdim", Kind::Bool, Fallback::Bool(false))], choose_qparams_affine),
    OpDef::new(&["torchao.quantize_affine.default", "quantize_affine"], &[INPUT, ints("block_size"), Param::tensor("scale"), Param::opt_tensor("zero_point"), Param::new("output_dtype", Kind::Int, Fallback::Null), Param::new("quant_min", Kind::Int, Fallback::Null), Param::new("quant_max", Kind::Int, Fallback::Null)], |c| affine(c, true)),
    OpDef::new(&["torchao.dequantize_affine.default", "dequantize_affine"], &[INPUT, ints("block_size"), Param::tensor("scale"), Param::opt_tensor("zero_point"), Param::new("input_dtype", Kind::Int, Fallback::Null), Param::new("quant_min", Kind::Int, Fallback::Null), Param::new("quant_max", Kind::Int, Fallback::Null), Param::new("output_dtype", Kind::Int, Fallback::Null)], |c| affine(c, false)),
    OpDef::new(&["quantized_decomposed.embedding_4bit.dtype", "quantized_decomposed.embedding_4bit.default", "quantized_decomposed::embedding_4bit.dtype_out", "quantized_decomposed::embedding_4bit.out", "embedding_4bit"], &[Param::tensor("weight"), Param::tensor("weight_scales"), Param::opt_tensor("weight_zero_points"), int("weight_quant_min"), int("weight_quant_max"), Param::tensor("indices"), Param::new("dtype", Kind::Int, Fallback::Null)], embedding_4bit),
    OpDef::new(&["et_vk.linear_q8ta_q8csw.default", "linear_q8ta_q8csw"], &[Param::tensor("x"), real("input_scale"), int("input_zero_point"), Param::tensor("weights"), Param::tensor("weight_sums"), Param::tensor("weight_scales"), Param::opt_tensor("bias")], linear_q8ta_q8csw),
    OpDef::new(&["et_vk.q8ta_conv2d.default", "et_vk.q8ta_conv2d_pw.default", "q8ta_conv2d"], Q8TA_CONV, |c| q8ta_conv2d(c, false)),
    OpDef::new(&["et_vk.q8ta_conv2d_dw.default", "q8ta_conv2d_dw"], Q8TA_CONV, |c| q8ta_conv2d(c, true)),
    OpDef::new(&["et_vk.q8ta_conv2d_transposed.default", "q8ta_conv2d_transposed"], Q8TA_CONV_T, q8ta_conv2d_transposed),
    OpDef::new(&["quantized_decomposed.dequantize_per_token.default", "quantized_decomposed::dequantize_per_token.out", "dequantize_per_token"], &[INPUT, SCALES, ZERO_POINTS, QMIN, QMAX, DTYPE, OUT_DTYPE], |c| dequantize(c, Scales::Token)),
];

const fn real(names: &'static str) -> Param {
    Param::new(names, Kind::Float, Fallback::Required)
}

const fn int(names: &'static str) -> Param {
    Param::new(names, Kind::Int, Fallback::Required)
}

const fn ints(names: &'static str) -> Param {
    Param::new(names, Kind::Ints, Fallback::Required)
}

const ACTIVATION: Param = Param::new("activation", Kind::Str, Fallback::Str("none"));

/// The int8 convolutions' parameters: the quantized input, weights `[c_out, k]` (k padded up
/// to a multiple of 4) or, depthwise, `[kh, kw, c_out]`, per-channel weight scales (padded),
/// the output's quantization, bias, geometry and activation.
const Q8TA_CONV: &[Param] = &[
    Param::tensor("x"),
    real("input_scale"),
    int("input_zero_point"),
    Param::tensor("weights"),
    Param::tensor("weight_sums"),
    Param::tensor("weight_scales"),
    real("output_scale"),
    int("output_zero_point"),
    Param::opt_tensor("bias"),
    ints("kernel_size"),
    ints("stride"),
    ints("padding"),
    ints("dilation"),
    int("groups"),
    ACTIVATION,
];

/// `q8ta_conv2d_transposed`'s parameters: those of [`Q8TA_CONV`] with `output_padding` before
/// `dilation`.
const Q8TA_CONV_T: &[Param] = &[
    Param::tensor("x"),
    real("input_scale"),
    int("input_zero_point"),
    Param::tensor("weights"),
    Param::tensor("weight_sums"),
    Param::tensor("weight_scales"),
    real("output_scale"),
    int("output_zero_point"),
    Param::opt_tensor("bias"),
    ints("kernel_size"),
    ints("stride"),
    ints("padding"),
    ints("output_padding"),
    ints("dilation"),
    int("groups"),
    ACTIVATION,
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
fn quantized_dtype(c: &Call<'_>, i: usize, (qmin, qmax): (i64, i64)) -> Result<DType> {
    match c.opt_int(i)? {
        Some(1) => Ok(DType::I8),
        Some(3) => Ok(DType::I32),
        // ExecuTorch's Vulkan serializer writes a dtype argument as None: the range says.
        None if qmin >= -128 && qmax <= 127 => Ok(DType::I8),
        None if qmin >= i64::from(i32::MIN) && qmax <= i64::from(i32::MAX) => Ok(DType::I32),
        None => Err(c.err(
            i,
            format!("None, and [{qmin}, {qmax}] fits neither int8 nor int32"),
        )),
        Some(other) => Err(c.err(
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
            let f = c.g.as_dtype(scale, DType::F32)?;
            c.g.math(Math::Reciprocal, f, 0.0)?
        }
        _ => c.g.as_dtype(scale, DType::F32)?,
    };
    let scale = c.g.reshape(scale, &to)?;
    let zero = match c.opt_tensor(2)? {
        Some(z) => {
            let z = c.g.as_dtype(z, DType::F32)?;
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
    let (qmin, qmax) = (c.int(at)?, c.int(at + 1)?);
    let dtype = quantized_dtype(c, at + 2, (qmin, qmax))?;
    let xf = c.g.as_dtype(x, DType::F32)?;
    let q = match broadcast_params(c, x, how, true)? {
        None => {
            let (scale, zero) = (c.float(1)?, c.int(2)?);
            return one(quantize_tensor(c.g, xf, scale, zero, (qmin, qmax), dtype)?);
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

/// `x` (f32) quantized per tensor, as `quantize_per_tensor` computes it.
fn quantize_tensor(
    g: &mut GraphBuilder,
    x: TensorId,
    scale: f64,
    zero: i64,
    (qmin, qmax): (i64, i64),
    dtype: DType,
) -> Result<TensorId> {
    let y = g.mul_scalar(x, (1.0 / scale) as f32)?;
    let y = g.math(Math::Round, y, 0.0)?;
    let y = g.add_scalar(y, zero as f32)?;
    let y = g.clamp(y, qmin as f32, qmax as f32)?;
    g.cast(y, dtype)
}

/// `q` dequantized per tensor to f32: `(q - zero) * scale`.
fn dequantize_tensor(g: &mut GraphBuilder, q: TensorId, scale: f32, zero: i64) -> Result<TensorId> {
    let y = g.as_dtype(q, DType::F32)?;
    let y = g.add_scalar(y, -(zero as f32))?;
    g.mul_scalar(y, scale)
}

/// `(input - zero_point) * scale`, in f32 (f16 where `out_dtype` is `torch.float16`).
fn dequantize(c: &mut Call<'_>, how: Scales) -> Result<Vec<TensorId>> {
    let x = c.tensor(0)?;
    let out = if how == Scales::Channel { 7 } else { 6 };
    let y = match broadcast_params(c, x, how, false)? {
        None => dequantize_tensor(c.g, x, c.f32(1)?, c.int(2)?)?,
        Some((scale, zero)) => {
            let xf = c.g.as_dtype(x, DType::F32)?;
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
        self.node(Op::QAdd { a, b, q: *q }, OP, DType::I8, ai.shape)
    }

    /// int8 average pooling of `x` `[n, c, h, w]` as TOSA's AVG_POOL2D computes it: the sum
    /// of `x - in_zp` over the window's positions inside the input (padding neither adds nor
    /// counts), scaled by TOSA's reciprocal of that count with one rounding, plus `out_zp`,
    /// saturated to int8.
    pub fn avg_pool2d_q8(
        &mut self,
        x: TensorId,
        p: Pool2d,
        in_zp: i32,
        out_zp: i32,
    ) -> Result<TensorId> {
        self.avg_pool_int("avg_pool2d_q8", x, p, (in_zp, out_zp), None)
    }

    /// [`GraphBuilder::avg_pool2d_q8`] of an i32 tensor of int8 or int16 values, the result
    /// saturated to `range` (TOSA's AVG_POOL2D on int16, with its int32 sums).
    pub fn avg_pool2d_int(
        &mut self,
        x: TensorId,
        p: Pool2d,
        (in_zp, out_zp): (i32, i32),
        range: (i32, i32),
    ) -> Result<TensorId> {
        self.avg_pool_int("avg_pool2d_int", x, p, (in_zp, out_zp), Some(range))
    }

    /// TOSA's integer AVG_POOL2D on `qpool.comp`: int8 packed (`range` `None`), or i32 words
    /// saturated to `range`.
    fn avg_pool_int(
        &mut self,
        op: &'static str,
        x: TensorId,
        p: Pool2d,
        (in_zp, out_zp): (i32, i32),
        range: Option<(i32, i32)>,
    ) -> Result<TensorId> {
        let dtype = if range.is_some() {
            DType::I32
        } else {
            DType::I8
        };
        let (lo, hi) = range.unwrap_or((-128, 127));
        // Wide: zero points of at most 2^16 and windows of at most 2^14 positions, so that the
        // int32 sums of int16 values never wrap.
        let wide_zp = |zp: i32| zp.unsigned_abs() > 1 << 16;
        let wide_window = p.kernel[0].saturating_mul(p.kernel[1]) > 1 << 14;
        if lo > hi || range.is_some() && (wide_zp(in_zp) || wide_zp(out_zp) || wide_window) {
            return Err(shape_err(
                op,
                format!("zero points {in_zp}, {out_zp} and range {lo}..={hi}"),
            ));
        }
        let xi = self.typed_operand(op, x, dtype)?;
        let &[_, _, h, w] = &xi.shape[..] else {
            return Err(shape_err(
                op,
                format!("'{}' {:?} is not [n, c, h, w]", xi.name, xi.shape),
            ));
        };
        if p.ceil_mode || p.count_include_pad {
            return Err(shape_err(
                op,
                "rounds its size down and counts only the input's positions".into(),
            ));
        }
        let shape = super::pool::pool_shape(op, &xi, &p)?;
        if range.is_none() {
            for (name, zp) in [("in_zp", in_zp), ("out_zp", out_zp)] {
                check_zero_point(op, name, zp)?;
            }
        }
        let most = p.kernel[0].saturating_mul(p.kernel[1]);
        if most > QPOOL_MOST {
            return Err(shape_err(
                op,
                format!("a window of {:?}: at most {QPOOL_MOST} positions", p.kernel),
            ));
        }
        let table: Vec<i32> = (0..=most as u32)
            .flat_map(|count| {
                let r = reciprocal_scale(count.max(1));
                [r.multiplier, r.shift as i32]
            })
            .collect();
        let table = HostTensor::from_i32(vec![table.len()], &table)
            .map_err(|e| shape_err(op, format!("reciprocal scales: {e}")))?;
        let scale = self.constant(&format!("{}_pool_scales", xi.name), table)?;
        let total = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| shape_err(op, format!("{shape:?}: over 2^32 elements")))?;
        let push = push::QPoolPush {
            total,
            h: h as u32,
            w: w as u32,
            oh: shape[2] as u32,
            ow: shape[3] as u32,
            kh: p.kernel[0] as u32,
            kw: p.kernel[1] as u32,
            sh: p.stride[0] as u32,
            sw: p.stride[1] as u32,
            ph: p.padding[0] as u32,
            pw: p.padding[1] as u32,
            in_zp,
            out_zp,
            lo,
            hi,
        };
        // Packed: a thread an output word; wide: a thread an output.
        let words = match range {
            Some(_) => u64::from(total),
            None => u64::from(total).div_ceil(4),
        };
        let out = KernelOut {
            dtype,
            shape,
            storage: None,
            groups: Some(words.div_ceil(256).max(1)),
            precision: None,
            spec: vec![u32::from(range.is_some())],
        };
        self.kernel_node_into(op, Kernel::QPool, &[x, scale], out, &push)
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
        // The size as if padded by `conv.padding` on both sides.
        let mut padded = xi.clone();
        if let (Some(end), [.., h, w]) = (q.pad_end, &mut padded.shape[..]) {
            for (d, (e, p)) in [h, w].into_iter().zip(end.into_iter().zip(q.conv.padding)) {
                *d = (*d + e).checked_sub(p).ok_or_else(|| {
                    shape_err(
                        OP,
                        format!(
                            "padding {:?} then {end:?} of '{}' {:?}",
                            q.conv.padding, xi.name, xi.shape
                        ),
                    )
                })?;
            }
        }
        let shape = conv_shape(OP, &padded, &wi, &q.conv)?;
        let fits = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .is_some_and(|n| n <= u32::MAX as usize);
        if !fits {
            return Err(shape_err(
                OP,
                format!("an output of {shape:?}: over 2^32 elements"),
            ));
        }
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
        self.node(
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
        )
    }
}

/// The most positions of an int8 average pool's window: its reciprocal scales are a table of
/// one entry a count.
const QPOOL_MOST: usize = 1 << 20;

/// Below this many threads (one per output word, or per four words of four channels on the
/// pointwise kernel) an int8 convolution of deep sums (32 terms or more) runs on
/// `qconv.comp`'s split variant: [`split_lanes`] lanes a word. On an H100, MobileNetV2 int8
/// took 0.645 ms host to host with this bound and [`QCONV_SPLIT_PW_DEPTH`], 0.802 with 32768
/// and 192, 0.680 with 262144 and 32.
const QCONV_SPLIT_BELOW: usize = 128 * 1024;

/// The lanes that share one output word's sums on the split kernel, for sums of `depth`
/// terms: about 16 terms a lane, 8 to 64 lanes (on an H200, 64 lanes a word for 160 terms
/// left most lanes idle and made a work group per word: 43 us for MobileNetV2's 160 to 960
/// channels at 7 x 7).
fn split_lanes(depth: usize) -> usize {
    let terms = std::env::var(ENV_QCONV_LANE_TERMS)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&t| t > 0)
        .unwrap_or(16);
    depth.div_ceil(terms).next_power_of_two().clamp(8, 64)
}

/// Environment variable for tuning [`split_lanes`]: the terms a lane of the split kernel sums
/// (16 by default).
pub const ENV_QCONV_LANE_TERMS: &str = "VKDELEGATE_QCONV_LANE_TERMS";

/// Environment variable for tuning [`QCONV_SPLIT_BELOW`]: `THREADS[,DEPTH]`, the thread count
/// below which deep int8 convolutions run split (`0`: never), and the least depth of a
/// pointwise layer that does ([`QCONV_SPLIT_PW_DEPTH`]).
pub const ENV_QCONV_SPLIT_BELOW: &str = "VKDELEGATE_QCONV_SPLIT_BELOW";

/// The least sum depth of a 1x1 layer over whole-word planes that the pointwise kernel leaves
/// to the split kernel (the split kernel's neighbouring words make it the faster of the two
/// from 32 terms on: 0.654 ms against 0.802 with 192 on MobileNetV2 int8 on an H100).
const QCONV_SPLIT_PW_DEPTH: usize = 32;

/// The thread count below which deep int8 convolutions run split, and the least depth of a
/// pointwise one that does: [`ENV_QCONV_SPLIT_BELOW`] if set, else none on a CPU driver (whose
/// work groups run their lanes in turn, so a shared sum costs more than the few threads it
/// would keep busy), else [`QCONV_SPLIT_BELOW`] and [`QCONV_SPLIT_PW_DEPTH`].
fn qconv_split_below(cpu: bool) -> (usize, usize) {
    let var = std::env::var(ENV_QCONV_SPLIT_BELOW).ok();
    match var.as_deref().and_then(parse_split_below) {
        Some(v) => v,
        None if cpu => (0, QCONV_SPLIT_PW_DEPTH),
        None => (QCONV_SPLIT_BELOW, QCONV_SPLIT_PW_DEPTH),
    }
}

/// [`ENV_QCONV_SPLIT_BELOW`]'s value: `THREADS` or `THREADS,DEPTH`.
fn parse_split_below(v: &str) -> Option<(usize, usize)> {
    match crate::options::tuning_numbers::<usize>(v)?[..] {
        [below] => Some((below, QCONV_SPLIT_PW_DEPTH)),
        [below, depth] => Some((below, depth)),
        _ => None,
    }
}

/// The most positions of a window that the win kernel unrolls.
const QCONV_WINDOW_MOST: usize = 25;

/// The win kernel's specialization constants (window height and width, horizontal stride and
/// dilation) for a window of at most [`QCONV_WINDOW_MOST`] positions.
fn window_spec(w: &[usize], p: &crate::graph::Conv2d) -> Option<Vec<u32>> {
    let (kh, kw) = (w[2], w[3]);
    (kh * kw <= QCONV_WINDOW_MOST).then(|| {
        [kh, kw, p.stride[1], p.dilation[1]]
            .map(|v| v as u32)
            .to_vec()
    })
}

/// The dw kernel's specialization constants (window width, horizontal stride, dilation and
/// left padding) for a depthwise layer it can run: one input and one output channel a group,
/// input and output rows of whole words, and a window row's span over four outputs within
/// four words.
fn depthwise_spec(
    x: &[usize],
    w: &[usize],
    out: &[usize],
    p: &crate::graph::Conv2d,
) -> Option<Vec<u32>> {
    let (c_in, width, c_out, ow, kw) = (x[1], x[3], out[1], out[3], w[3]);
    let (sw, dw, pw) = (p.stride[1], p.dilation[1], p.padding[1]);
    let skew = (4 - pw % 4) % 4;
    let span = 3 * sw + (kw - 1) * dw + 1;
    let fits = p.groups == c_in && c_in == c_out && w[1] == 1;
    let words = width % 4 == 0 && ow % 4 == 0 && skew + span <= 16;
    (fits && words).then(|| vec![kw as u32, sw as u32, dw as u32, pw as u32])
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
                // 1x1, stride 1, unpadded, one group, planes of whole words: four output
                // channels a thread, each word of x read once for them.
                let plane = xi.shape[2] * xi.shape[3];
                let pointwise = wi.shape[2..] == [1, 1]
                    && p.stride == [1, 1]
                    && p.padding == [0, 0]
                    && q.pad_end.is_none()
                    && p.groups == 1
                    && plane % 4 == 0;
                let threads = match pointwise {
                    true => xi.shape[0] * oi.shape[1].div_ceil(4) * plane / 4,
                    false => packed,
                };
                // Depthwise layers of whole-word rows first; then too few threads to fill a
                // GPU, each with a deep sum: 8 to 64 lanes an output word share its sums
                // instead (1x1 layers over whole-word planes from `pw_depth` terms, below
                // which the pointwise kernel keeps them); then windows the win kernel unrolls.
                let depth = wi.shape[1] * wi.shape[2] * wi.shape[3];
                let (below, pw_depth) = qconv_split_below(self.cpu);
                let deep = depth >= if pointwise { pw_depth } else { 32 };
                let dw_spec = depthwise_spec(&xi.shape, &wi.shape, &oi.shape, &p);
                let (kernel, g, spec) = if let Some(spec) = dw_spec {
                    let words = n / 4;
                    (
                        Kernel::QConvDw,
                        [self.linear_groups(words as u64), 1, 1],
                        spec,
                    )
                } else if threads < below && deep {
                    // About 16 terms a lane: 8 to 64 lanes an output word, 256 / that many
                    // words a work group, in rows of at most 65535 work groups.
                    let lanes = split_lanes(depth);
                    let wgs = packed.div_ceil(256 / lanes);
                    let rows = wgs.div_ceil(65535);
                    let g = self.check_groups([wgs.div_ceil(rows) as u64, rows as u64, 1])?;
                    (Kernel::QConvSplit, g, vec![lanes as u32])
                } else if pointwise {
                    (
                        Kernel::QConvPw,
                        [self.linear_groups(threads as u64), 1, 1],
                        vec![],
                    )
                } else if let Some(spec) = window_spec(&wi.shape, &p) {
                    (Kernel::QConvWin, [g, 1, 1], spec)
                } else {
                    (Kernel::QConv, [g, 1, 1], vec![])
                };
                self.push(
                    kernel,
                    spec,
                    vec![
                        (xi.storage, false),
                        (wi.storage, false),
                        (b.unwrap_or(sm), false),
                        (sm, false),
                        (ss, false),
                        (o, true),
                    ],
                    &push,
                    g,
                );
            }
            _ => return Err(self.not_in_family()),
        }
        Ok(())
    }
}

// The int8 `et_vk` ops, as ExecuTorch defines them: dequantize (per tensor; weights per output
// channel, symmetric), the float op, quantize the output per tensor. Composed of the ops above
// and the float kernels.

fn q8ta_add(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (a, b) = (c.tensor(0)?, c.tensor(1)?);
    let a = dequantize_tensor(c.g, a, c.f32(2)?, c.int(3)?)?;
    let b = dequantize_tensor(c.g, b, c.f32(4)?, c.int(5)?)?;
    let alpha = c.f32(8)?;
    let b = if alpha == 1.0 {
        b
    } else {
        c.g.mul_scalar(b, alpha)?
    };
    let y = c.g.add(a, b)?;
    one(int8_output(c, y, 6)?)
}

fn q8ta_relu(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let x = dequantize_tensor(c.g, c.tensor(0)?, c.f32(1)?, c.int(2)?)?;
    let y = c.g.relu(x)?;
    one(int8_output(c, y, 3)?)
}

fn q8ta_pixel_shuffle(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let x = dequantize_tensor(c.g, c.tensor(0)?, c.f32(1)?, c.int(2)?)?;
    let shuffle =
        super::find("aten.pixel_shuffle.default").ok_or_else(|| c.err(5, "no pixel_shuffle"))?;
    let y = shuffle.call(c.g, vec![Arg::Tensor(x), Arg::Int(c.int(5)?)])?[0];
    let scale = 1.0 / c.float(3)?;
    one(quantize_tensor(
        c.g,
        y,
        scale,
        c.int(4)?,
        (-128, 127),
        DType::I8,
    )?)
}

/// The first `n` entries of `x` along `dim` (ExecuTorch pads some int8 operands to a multiple
/// of 4).
fn first(g: &mut GraphBuilder, x: TensorId, dim: usize, n: usize) -> Result<TensorId> {
    match g.shape(x) {
        Some(s) if s.get(dim).is_some_and(|&len| len > n) => {
            g.slice(x, dim as isize, 0, n as isize, 1)
        }
        _ => Ok(x),
    }
}

/// Int8 weights `[c_out, ..]` times their per-channel scales (the first `c_out`), in f32.
fn channel_weights(
    g: &mut GraphBuilder,
    w: TensorId,
    scales: TensorId,
    c_out: usize,
    dims: usize,
) -> Result<TensorId> {
    let w = match g.dtype(w) {
        Some(DType::F32) => w,
        _ => g.as_dtype(w, DType::F32)?,
    };
    let scales = g.as_dtype(scales, DType::F32)?;
    let scales = first(g, scales, 0, c_out)?;
    let mut to = vec![1isize; dims];
    to[0] = c_out as isize;
    let scales = g.reshape(scales, &to)?;
    g.mul(w, scales)
}

/// The activation after an int8 op's float result: `"none"` or `"relu"`.
fn activate(c: &mut Call<'_>, i: usize, y: TensorId) -> Result<TensorId> {
    match c.str(i)? {
        None | Some("none") => Ok(y),
        Some("relu") => c.g.relu(y),
        Some(other) => Err(c.err(i, format!("{other:?}: \"none\" and \"relu\" are supported"))),
    }
}

fn q8ta_linear(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let x = dequantize_tensor(c.g, c.tensor(0)?, c.f32(1)?, c.int(2)?)?;
    let y = q8csw_linear(c, x, [3, 5, 8])?;
    let y = activate(c, 9, y)?;
    one(int8_output(c, y, 6)?)
}

/// `x [.., k] @ (mat2 [n, k] * scales [n])^T` in `x`'s float type: int8 weights with
/// per-channel scales, the product in f32.
fn weight_int8pack_mm(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, w, scales) = (c.tensor(0)?, c.tensor(1)?, c.tensor(2)?);
    let n = c.shape(w).first().copied().unwrap_or(0);
    let w = channel_weights(c.g, w, scales, n, 2)?;
    linear_in_f32(c.g, x, w)
}

/// `x @ w^T` for an f32 `w`, computed in f32 and given in `x`'s float type.
fn linear_in_f32(g: &mut GraphBuilder, x: TensorId, w: TensorId) -> Result<Vec<TensorId>> {
    let float = g.float_operand("linear", x)?.dtype;
    let x = g.as_dtype(x, DType::F32)?;
    let y = g.linear(x, w, None)?;
    one(g.as_dtype(y, float)?)
}

/// `x [.., k] @ (weights * scales)^T` for 4-bit weights packed two to a byte (`[n, k / 2]`
/// uint8, the even column in the high nibble, each stored plus 8, as ExecuTorch packs them)
/// with per-channel scales. Both must be constants. Where `k` is a multiple of 8 the device
/// reads them packed, as one group-wise product of one group ([`qcs4w_packed`]); otherwise
/// they are unpacked and scaled at build.
fn linear_qcs4w(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, w, scales) = (c.tensor(0)?, c.tensor(1)?, c.tensor(2)?);
    let k = c.shape(x).last().copied().unwrap_or(0);
    let (Some(wv), Some(sv)) = (c.g.constant_values(w), c.g.constant_values(scales)) else {
        return Err(c.err(1, "the packed weights and their scales must be constants"));
    };
    let ws = c.shape(w);
    let [n, half] = ws[..] else {
        return Err(c.err(1, format!("{ws:?}: [n, k / 2] is needed")));
    };
    if half != k.div_ceil(2) || sv.len() < n {
        return Err(c.err(1, format!("{ws:?} with {} scales for k = {k}", sv.len())));
    }
    if let Some(p) = qcs4w_packed(c, w, &sv[..n], n, k)? {
        if let Some(y) = packed_q4_product(c, "linear_qcs4w", x, &p, k)? {
            return one(y);
        }
    }
    let q = unpack4(&wv, n, half, true);
    let mut t = vec![0f32; n * k];
    for (at, v) in t.iter_mut().enumerate() {
        let (r, j) = (at / k, at % k);
        *v = q[r * half * 2 + j] * sv[r];
    }
    let name = format!("qcs4w_weights{}", w.index());
    let w = c.g.constant_f32(&name, &[n, k], &t)?;
    linear_in_f32(c.g, x, w)
}

/// 4-bit values packed two to a byte (each stored plus 8), `rows` rows of `half` bytes, as
/// signed values: the even column from the high nibble (`high_first`) or the low one.
fn unpack4(bytes: &[f32], rows: usize, half: usize, high_first: bool) -> Vec<f32> {
    let mut out = vec![0f32; rows * half * 2];
    for (at, v) in out.iter_mut().enumerate() {
        let byte = bytes[at / 2] as u8;
        let high = (at % 2 == 0) == high_first;
        let q = if high { byte >> 4 } else { byte & 15 };
        *v = f32::from(q) - 8.0;
    }
    out
}

/// Group-wise 4-bit weights as `dtype` (f32 or f16) `[n, k]`: packed `[n, k / 2]` (k padded; the even column
/// in the low nibble, as ExecuTorch's q4gsw pattern packs them) times `scales[k / group][n]` (ExecuTorch
/// stores the scales transposed, `[groups, n]`). Both must be constants; the weights, scales
/// and group size are the arguments at `[w_at, scales_at, group_at]`.
fn group_weights(
    c: &mut Call<'_>,
    [w_at, scales_at, group_at]: [usize; 3],
    k: usize,
    dtype: DType,
) -> Result<TensorId> {
    let (w, scales) = (c.tensor(w_at)?, c.tensor(scales_at)?);
    let group = c.count(group_at)?.max(1);
    let one_byte = c.g.dtype(w).is_some_and(|d| d.size() == 1);
    let (Some(packed), Some(sv), true) =
        (c.g.constant_bytes(w), c.g.constant_values(scales), one_byte)
    else {
        return Err(c.err(
            w_at,
            "the packed weights (one byte each) and their scales must be constants",
        ));
    };
    let (ws, ss) = (c.shape(w), c.shape(scales));
    let (&[n, half], &[groups, sn]) = (&ws[..], &ss[..]) else {
        return Err(c.err(
            w_at,
            format!("{ws:?} and scales {ss:?}: [n, k / 2] and [groups, n]"),
        ));
    };
    if half * 2 < k || sn != n || groups.checked_mul(group).is_none_or(|c| c < k) {
        return Err(c.err(
            w_at,
            format!("{ws:?} and scales {ss:?} for k = {k} in groups of {group}"),
        ));
    }
    // Rows dequantized on threads, straight from the packed bytes (the even column in the low
    // nibble), into the constant's bytes.
    let f16 = dtype == DType::F16;
    let es = if f16 { 2 } else { 4 };
    let mut t = vec![0u8; n * k * es];
    crate::threads::fill_on_threads(&mut t, k * es, |r, row| {
        let bytes = packed.get(r * half..(r + 1) * half).unwrap_or(&[]);
        for (j, v) in row.chunks_exact_mut(es).enumerate() {
            let b = bytes.get(j / 2).copied().unwrap_or(8 | 8 << 4);
            let q = if j % 2 == 0 { b & 15 } else { b >> 4 };
            let x = (f32::from(q) - 8.0) * sv[(j / group) * n + r];
            match f16 {
                true => v.copy_from_slice(&half::f16::from_f32(x).to_le_bytes()),
                false => v.copy_from_slice(&x.to_le_bytes()),
            }
        }
    });
    let name = format!("q4gsw_weights{}", w.index());
    let dtype = if f16 { DType::F16 } else { DType::F32 };
    let t =
        vk_core::HostTensor::new(dtype, vec![n, k], t).map_err(|e| c.err(w_at, e.to_string()))?;
    c.g.constant(&name, t)
}

/// `x @ dequantized(weights)^T + bias` for group-wise 4-bit weights; `at`: where the
/// weights, their scales, the group size and the bias are. `linear_dq8ca_q4gsw` (weights at
/// 3) first rounds `x` to int8 with its per-token `input_scale` and `input_zero_point`
/// (arguments 1 and 2), as the dynamically quantized model computes.
fn linear_q4gsw(c: &mut Call<'_>, [w, scales, group, bias]: [usize; 4]) -> Result<Vec<TensorId>> {
    let mut x = c.tensor(0)?;
    if w == 3 {
        x = per_token_fake_quant(c, x)?;
    }
    let k = c.shape(x).last().copied().unwrap_or(0);
    let packed = packed_q4(c, [w, scales, group], k)?;
    let product = match &packed {
        Some(p) => packed_q4_product(c, "linear_q4gsw", x, p, k)?,
        None => None,
    };
    let y = match product {
        Some(y) => y,
        None => {
            // Unpacked at build in the graph's precision (an fp16 graph's longer products on
            // fp16 weights, as ExecuTorch computes them).
            let dtype = c.g.float_operand("linear_q4gsw", x)?.dtype;
            let w = group_weights(c, [w, scales, group], k, dtype)?;
            c.g.linear(x, w, None)?
        }
    };
    match c.opt_tensor(bias)? {
        Some(b) => {
            let dtype = c.g.dtype(y).unwrap_or(DType::F32);
            let b = c.g.as_dtype(b, dtype)?;
            one(c.g.add(y, b)?)
        }
        None => one(y),
    }
}

/// `x @ dequantized(weights)^T` with the weights read packed: one to four rows of `x` by
/// [`packed_q4_rows`], longer products by [`unpacked_on_device`] where the weights fit one
/// binding; `None` where neither applies (the caller unpacks them at build).
fn packed_q4_product(
    c: &mut Call<'_>,
    op: &'static str,
    x: TensorId,
    p: &PackedQ4,
    k: usize,
) -> Result<Option<TensorId>> {
    if let Some(y) = packed_q4_rows(c, op, x, p, k)? {
        return Ok(Some(y));
    }
    if c.shape(x).len() >= 2 && p.n * k <= UNPACKED_MAX {
        return unpacked_on_device(c, op, x, p, k).map(Some);
    }
    Ok(None)
}

/// `linear_qcs4w`'s weights `w` (`[n, k / 2]` bytes, the even column in the high nibble) and
/// per-channel scales as [`PackedQ4`]: the nibbles swapped into the group-wise layout (the
/// even column in the low nibble), one group as wide as `k`. `None` where `k` is not a
/// multiple of 8 or the weights are not one byte each.
fn qcs4w_packed(
    c: &mut Call<'_>,
    w: TensorId,
    scales: &[f32],
    n: usize,
    k: usize,
) -> Result<Option<PackedQ4>> {
    let one_byte = c.g.dtype(w).is_some_and(|d| d.size() == 1);
    let fits = k % 8 == 0 && (n as u64) * (k as u64) <= u64::from(u32::MAX);
    let Some(bytes) = c.g.constant_bytes(w).filter(|_| one_byte && fits) else {
        return Ok(None);
    };
    let swapped: Vec<u8> = bytes.iter().map(|b| b.rotate_left(4)).collect();
    let t = vk_core::HostTensor::new(DType::U8, vec![n, k / 2], swapped)
        .map_err(|e| c.err(1, e.to_string()))?;
    let packed = c.g.constant(&format!("qcs4w_packed{}", w.index()), t)?;
    let scales =
        c.g.constant_f32(&format!("qcs4w_scales{}", w.index()), &[n, 1], scales)?;
    Ok(Some(PackedQ4 {
        w: packed,
        scales,
        n,
        groups: 1,
        group: k.next_power_of_two().max(8),
    }))
}

/// The most weights a product unpacks on the device: 128 MiB in f32, the smallest
/// `maxStorageBufferRange` Vulkan allows. Larger ones are unpacked at build, where a
/// constant too large for one binding is cut into pieces that fit.
const UNPACKED_MAX: usize = 1 << 25;

/// Group-wise 4-bit weights that the device reads packed: constant bytes `[n, k / 2]` (the
/// even column in the low nibble), constant scales `[groups, n]` that cover `k`, groups of a
/// power of two of at least 8 columns, `k` a multiple of 8 and `n * k` under 2^32.
struct PackedQ4 {
    w: TensorId,
    /// The scales transposed to an f32 constant `[n][groups]`, a column's scales together.
    scales: TensorId,
    n: usize,
    groups: usize,
    group: usize,
}

/// The weights at `[w_at, scales_at, group_at]` as [`PackedQ4`] for products of depth `k`;
/// `None` where they do not fit it (they are then unpacked at build).
fn packed_q4(
    c: &mut Call<'_>,
    [w_at, scales_at, group_at]: [usize; 3],
    k: usize,
) -> Result<Option<PackedQ4>> {
    let (w, scales) = (c.tensor(w_at)?, c.tensor(scales_at)?);
    let (ws, ss) = (c.shape(w), c.shape(scales));
    let (&[n, half], &[groups, sn]) = (&ws[..], &ss[..]) else {
        return Ok(None);
    };
    // A group of k or more columns is one group: the kernels shift by the group's log2, which
    // must stay below 32.
    let group = c.count(group_at)?.clamp(1, k.next_power_of_two().max(8));
    let one_byte = c.g.dtype(w).is_some_and(|d| d.size() == 1);
    let fits = k % 8 == 0 && half * 2 == k && (n as u64) * (k as u64) <= u64::from(u32::MAX);
    let group_fits = group >= 8 && group.is_power_of_two();
    let (Some(_), Some(sv)) = (c.g.constant_bytes(w), c.g.constant_values(scales)) else {
        return Ok(None);
    };
    let covers = groups.checked_mul(group).is_some_and(|c| c >= k);
    if !fits || !group_fits || !one_byte || sn != n || !covers {
        return Ok(None);
    }
    let mut by_column = vec![0f32; n * groups];
    for (j, column) in by_column.chunks_exact_mut(groups).enumerate() {
        for (gi, v) in column.iter_mut().enumerate() {
            *v = sv.get(gi * n + j).copied().unwrap_or(0.0);
        }
    }
    let name = format!("q4gsw_scales_by_column{}", scales.index());
    let scales = c.g.constant_f32(&name, &[n, groups], &by_column)?;
    Ok(Some(PackedQ4 {
        w,
        scales,
        n,
        groups,
        group,
    }))
}

/// `x @ dequantized(weights)^T` for one to four rows of `x`, the weights read packed on the
/// device (`gemv_q4.comp`: 4 bits a weight, as a decode step reads them), where `k` is a
/// multiple of 32; `None` elsewhere.
fn packed_q4_rows(
    c: &mut Call<'_>,
    op: &'static str,
    x: TensorId,
    p: &PackedQ4,
    k: usize,
) -> Result<Option<TensorId>> {
    let xs = c.shape(x);
    let rows = xs.iter().product::<usize>() / k.max(1);
    if !(1..=4).contains(&rows) || k % 32 != 0 {
        return Ok(None);
    }
    let (n, groups) = (p.n, p.groups);
    let dtype = c.g.float_operand(op, x)?.dtype;
    let word = |v: usize| u32::try_from(v).map_err(|_| c.err(0, format!("{v} is over 2^32")));
    let push = push::GemvQ4Push {
        n: word(n)?,
        k: word(k)?,
        group_shift: p.group.trailing_zeros(),
        groups: word(groups)?,
        col_groups: word(n.div_ceil(8))?,
        has_bias: 0,
        bias_row: 0,
        eps: 0.0,
        cache_rows: 0,
        heads: 0,
        head_d: 0,
        plus: 0,
        has_pos: 0,
        rope: 0,
    };
    let mut shape = xs.clone();
    if let Some(last) = shape.last_mut() {
        *last = n;
    }
    let out = KernelOut {
        dtype,
        shape,
        storage: None,
        groups: Some(n.div_ceil(8) as u64),
        precision: None,
        spec: vec![word(rows)?, 0, 0],
    };
    // The second weights, the bias, the norm's weights and a cache's position and rotary
    // tables are bound to the first weights and to `x` until a fusion pass gives them (see
    // `fusion.rs`).
    let (w, scales) = (p.w, p.scales);
    let inputs = [x, w, scales, w, scales, x, x, x, x, x];
    let y =
        c.g.kernel_node_into(op, Kernel::GemvQ4, &inputs, out, &push)?;
    Ok(Some(y))
}

/// `x @ dequantized(weights)^T` for longer products (a prompt's): the weights are unpacked on
/// the device into a temporary `[k, n]` in `x`'s precision (`dequant_q4.comp`) that a GEMM
/// then reads, so the model keeps 4 bits a weight between executions. Graphs in fp32 may
/// multiply them in fp16 where the device's fp16 GEMMs are fast (`packed.rs`).
fn unpacked_on_device(
    c: &mut Call<'_>,
    op: &'static str,
    x: TensorId,
    p: &PackedQ4,
    k: usize,
) -> Result<TensorId> {
    let dtype = c.g.float_operand(op, x)?.dtype;
    // `packed_q4` checked that n * k, and so every count below, fits 32 bits.
    let push = push::DequantQ4Push {
        n: p.n as u32,
        k: k as u32,
        group_shift: p.group.trailing_zeros(),
        groups: p.groups as u32,
    };
    let out = KernelOut {
        dtype,
        shape: vec![k, p.n],
        storage: None,
        groups: Some((p.n * k / 8).div_ceil(256) as u64),
        precision: None,
        spec: vec![],
    };
    let inputs = [p.w, p.scales];
    let wt =
        c.g.kernel_node_into(op, Kernel::DequantQ4, &inputs, out, &push)?;
    c.g.matmul(x, wt)
}

/// `x` rounded to int8 and back with the scale and zero point of arguments 1 and 2: one per
/// row of `x`'s last dim (of any shape holding that many), or one for all.
fn per_token_fake_quant(c: &mut Call<'_>, x: TensorId) -> Result<TensorId> {
    let (scale, zero) = (c.tensor(1)?, c.tensor(2)?);
    let shape = c.shape(x);
    let mut rows: Vec<isize> = shape.iter().map(|&d| d as isize).collect();
    if let Some(last) = rows.last_mut() {
        *last = 1;
    }
    let per_row = |c: &Call<'_>, t: TensorId| match c.shape(t).iter().product::<usize>() {
        1 => vec![1],
        _ => rows.clone(),
    };
    let (scale_shape, zero_shape) = (per_row(c, scale), per_row(c, zero));
    let g = &mut *c.g;
    let xf = g.as_dtype(x, DType::F32)?;
    let scale = g.as_dtype(scale, DType::F32)?;
    let scale = g.reshape(scale, &scale_shape)?;
    let zero = g.as_dtype(zero, DType::F32)?;
    let zero = g.reshape(zero, &zero_shape)?;
    let q = g.div(xf, scale)?;
    let q = g.math(Math::Round, q, 0.0)?;
    let q = g.add(q, zero)?;
    let q = g.clamp(q, -128.0, 127.0)?;
    let q = g.sub(q, zero)?;
    let y = g.mul(q, scale)?;
    let dtype = g.dtype(x).unwrap_or(DType::F32);
    g.as_dtype(y, dtype)
}

/// torchao's `choose_qparams_affine`: per block of `block_size` (each entry 1 or the whole
/// dim), `(scale f32, zero_point i32)` from the block's range widened to include 0:
/// `ASYMMETRIC`, `scale = max(range / (qmax - qmin), eps)` and `zero_point = clamp(qmin -
/// round(min / scale))`; `SYMMETRIC`, `scale = max(max(-min, max) / ((qmax - qmin) / 2), eps)`
/// and the range's middle as zero point. Reduced dims are dropped unless `keepdim`.
fn choose_qparams_affine(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let x = c.tensor(0)?;
    let shape = c.shape(x);
    let block = c.counts(2)?;
    if block.len() != shape.len() {
        return Err(c.err(2, format!("{block:?} for {shape:?}: one entry per dim")));
    }
    let mut dims = Vec::new();
    for (i, (&b, &n)) in block.iter().zip(&shape).enumerate() {
        match (b, n) {
            (1, _) => {}
            (b, n) if b == n => dims.push(i as isize),
            _ => {
                return Err(c.err(
                    2,
                    format!("{block:?} for {shape:?}: each 1 or the whole dim"),
                ));
            }
        }
    }
    let (qmin, qmax) = (
        c.opt_int(4)?.unwrap_or(-128) as f32,
        c.opt_int(5)?.unwrap_or(127) as f32,
    );
    let eps = c.opt_float(6)?.map_or(f32::MIN_POSITIVE, |e| e as f32);
    let keepdim = c.bool(9)?;
    let symmetric = match c.str(1)? {
        Some("SYMMETRIC" | "SYMMETRIC_NO_CLIPPING_ERR") => true,
        None | Some("ASYMMETRIC") => false,
        Some(other) => {
            return Err(c.err(
                1,
                format!("{other:?}: SYMMETRIC and ASYMMETRIC are supported"),
            ));
        }
    };
    let g = &mut *c.g;
    let xf = g.as_dtype(x, DType::F32)?;
    let (low, high) = if dims.is_empty() {
        (xf, xf)
    } else {
        (
            g.extreme(xf, &dims, true, true)?,
            g.extreme(xf, &dims, true, false)?,
        )
    };
    let low = g.clamp(low, f32::MIN, 0.0)?;
    let high = g.clamp(high, 0.0, f32::MAX)?;
    let (scale, zero) = if symmetric {
        let neg = g.mul_scalar(low, -1.0)?;
        let m = g.binary(crate::graph::BinaryOp::Maximum, neg, high)?;
        let scale = g.div_scalar(m, (qmax - qmin) / 2.0)?;
        let scale = g.clamp(scale, eps, f32::MAX)?;
        let zero = g.mul_scalar(scale, 0.0)?;
        let zero = g.add_scalar(zero, ((qmax + qmin + 1.0) / 2.0).trunc())?;
        (scale, zero)
    } else {
        let range = g.sub(high, low)?;
        let scale = g.div_scalar(range, qmax - qmin)?;
        let scale = g.clamp(scale, eps, f32::MAX)?;
        let z = g.div(low, scale)?;
        let z = g.math(Math::Round, z, 0.0)?;
        let z = g.rsub_scalar(z, qmin)?;
        (scale, g.clamp(z, qmin, qmax)?)
    };
    let zero = g.as_dtype(zero, DType::I32)?;
    if keepdim || dims.is_empty() {
        return Ok(vec![scale, zero]);
    }
    let kept: Vec<isize> = shape
        .iter()
        .enumerate()
        .filter(|(i, _)| !dims.contains(&(*i as isize)))
        .map(|(_, &d)| d as isize)
        .collect();
    let kept = if kept.is_empty() { vec![1] } else { kept };
    Ok(vec![g.reshape(scale, &kept)?, g.reshape(zero, &kept)?])
}

/// torchao's `quantize_affine` (`quantize`) and `dequantize_affine`: per block of
/// `block_size` (1 keeps a dim, the whole dim or a divisor of it groups along it), `q =
/// clamp(round(x * (1 / scale)) + zero_point, qmin, qmax)` as int8 (int32 beyond int8's
/// range), or `(q - zero_point) * scale` as f32.
fn affine(c: &mut Call<'_>, quantize: bool) -> Result<Vec<TensorId>> {
    let (x, scale, zero) = (c.tensor(0)?, c.tensor(2)?, c.opt_tensor(3)?);
    let (shape, block) = (c.shape(x), c.counts(1)?);
    if block.len() != shape.len()
        || block
            .iter()
            .zip(&shape)
            .any(|(&b, &n)| b == 0 || n % b != 0)
    {
        return Err(c.err(1, format!("{block:?} for {shape:?}: one divisor per dim")));
    }
    // The input as [.., n / b, b, ..] per grouped dim; scale and zero point broadcast over b.
    let (mut grouped, mut per_block) = (Vec::new(), Vec::new());
    for (&b, &n) in block.iter().zip(&shape) {
        if b == 1 {
            grouped.push(n as isize);
            per_block.push(n as isize);
        } else {
            grouped.extend([(n / b) as isize, b as isize]);
            per_block.extend([(n / b) as isize, 1]);
        }
    }
    let back: Vec<isize> = shape.iter().map(|&d| d as isize).collect();
    let (qmin, qmax) = (c.opt_int(5)?.unwrap_or(-128), c.opt_int(6)?.unwrap_or(127));
    let g = &mut *c.g;
    let xf = g.as_dtype(x, DType::F32)?;
    let xv = g.reshape(xf, &grouped)?;
    let s = g.as_dtype(scale, DType::F32)?;
    let s = g.reshape(s, &per_block)?;
    let z = match zero {
        Some(z) => {
            let z = g.as_dtype(z, DType::F32)?;
            Some(g.reshape(z, &per_block)?)
        }
        None => None,
    };
    let y = if quantize {
        let one = g.full_as("one", &[1], 1.0, DType::F32)?;
        let inv = g.div(one, s)?;
        let q = g.mul(xv, inv)?;
        let q = g.math(Math::Round, q, 0.0)?;
        let q = match z {
            Some(z) => g.add(q, z)?,
            None => q,
        };
        let q = g.clamp(q, qmin as f32, qmax as f32)?;
        let q = g.reshape(q, &back)?;
        let dtype = if qmin >= -128 && qmax <= 127 {
            DType::I8
        } else {
            DType::I32
        };
        g.as_dtype(q, dtype)?
    } else {
        let v = match z {
            Some(z) => g.sub(xv, z)?,
            None => xv,
        };
        let v = g.mul(v, s)?;
        g.reshape(v, &back)?
    };
    one(y)
}

/// `quantized_decomposed.embedding_4bit`: rows of a 4-bit table packed `[v, d / 2]` (the even
/// column in the high nibble, each stored plus 8) with per-group scales `[v, groups]` (or
/// `[v]`) and optional zero points, picked by `indices`. The table, scales and zero points
/// must be constants: dequantized at build, `(q - zero_point) * scale`.
fn embedding_4bit(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let zeros = match c.opt_tensor(2)? {
        Some(z) => Some(
            c.g.constant_values(z)
                .ok_or_else(|| c.err(2, "the zero points must be constants"))?,
        ),
        None => None,
    };
    let table = four_bit_table(c, zeros, None, true)?;
    let ids = c.tensor(5)?;
    let ids = c.g.as_dtype(ids, DType::I32)?;
    one(c.g.embedding(table, ids)?)
}

/// Rows of a group-wise 4-bit table `[v, d / 2]` with scales `[v, groups]`, picked by
/// `indices`; `is_linear_weight`: the even column in the low nibble. The table and scales
/// must be constants: dequantized at build.
fn embedding_q4gsw(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let group = c.count(2)?.max(1);
    let table = four_bit_table(c, None, Some(group), !c.bool(4)?)?;
    let ids = c.tensor(3)?;
    let ids = c.g.as_dtype(ids, DType::I32)?;
    one(c.g.embedding(table, ids)?)
}

/// The 4-bit table of arguments 0 and 1 (packed `[v, d / 2]`, each value stored plus 8, the
/// even column in the high nibble where `high_first`; scales `[v, groups]` or `[v]`),
/// dequantized at build as an f32 `[v, d]`: `(q - zero_point) * scale` per group of a row.
/// `group`: the group size the op names, checked against the scales.
fn four_bit_table(
    c: &mut Call<'_>,
    zeros: Option<Vec<f32>>,
    group: Option<usize>,
    high_first: bool,
) -> Result<TensorId> {
    let (w, scales) = (c.tensor(0)?, c.tensor(1)?);
    let (Some(wv), Some(sv)) = (c.g.constant_values(w), c.g.constant_values(scales)) else {
        return Err(c.err(0, "the packed table and its scales must be constants"));
    };
    let ws = c.shape(w);
    let [v, half] = ws[..] else {
        return Err(c.err(0, format!("{ws:?}: [v, d / 2] is needed")));
    };
    let d = half * 2;
    let groups = sv.len() / v.max(1);
    let size = group.unwrap_or(d.checked_div(groups).unwrap_or(0));
    if groups * size != d || sv.len() != v * groups {
        return Err(c.err(
            1,
            format!(
                "{:?} for a [{v}, {d}] table in groups of {size}",
                c.shape(scales)
            ),
        ));
    }
    if zeros.as_ref().is_some_and(|z| z.len() != sv.len()) {
        return Err(c.err(2, format!("zero points for {} scales", sv.len())));
    }
    let q = unpack4(&wv, v, half, high_first);
    let t: Vec<f32> = q
        .iter()
        .enumerate()
        .map(|(at, q)| {
            let k = (at / d) * groups + (at % d) / size;
            (q - zeros.as_ref().map_or(0.0, |z| z[k])) * sv[k]
        })
        .collect();
    let name = format!("four_bit_table{}", w.index());
    c.g.constant_f32(&name, &[v, d], &t)
}

/// A float input times int8 weights with per-channel scales (the output stays float).
fn linear_q8ta_q8csw(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let x = c.tensor(0)?;
    let x = c.g.as_dtype(x, DType::F32)?;
    one(q8csw_linear(c, x, [3, 5, 6])?)
}

/// `et_vk.linear_q8csw`: a float input times int8 weights `[n, k]` with per-channel scales,
/// computed in f32 and given in the input's float type.
fn linear_q8csw(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let x = c.tensor(0)?;
    let float = c.g.float_operand("linear_q8csw", x)?.dtype;
    let x = c.g.as_dtype(x, DType::F32)?;
    let y = q8csw_linear(c, x, [1, 2, 3])?;
    one(c.g.as_dtype(y, float)?)
}

/// `x @ dequantized(weights)^T + bias[..c_out]`; the weights, their scales and the bias are
/// the arguments at `[w, scales, bias]`.
fn q8csw_linear(
    c: &mut Call<'_>,
    x: TensorId,
    [w_at, scales_at, bias_at]: [usize; 3],
) -> Result<TensorId> {
    let (w, scales) = (c.tensor(w_at)?, c.tensor(scales_at)?);
    let c_out = c.shape(w).first().copied().unwrap_or(0);
    let dims = c.shape(w).len();
    let w = channel_weights(c.g, w, scales, c_out, dims)?;
    let y = c.g.linear(x, w, None)?;
    match padded_bias(c, bias_at, c_out)? {
        Some(b) => c.g.add(y, b),
        None => Ok(y),
    }
}

/// Argument `i`, an optional bias, as f32 and cut to `c_out` (ExecuTorch pads it).
fn padded_bias(c: &mut Call<'_>, i: usize, c_out: usize) -> Result<Option<TensorId>> {
    let Some(b) = c.opt_tensor(i)? else {
        return Ok(None);
    };
    let b = c.g.as_dtype(b, DType::F32)?;
    Ok(Some(first(c.g, b, 0, c_out)?))
}

/// `y` quantized to int8 with the scale and zero point in arguments `at` and `at + 1`.
fn int8_output(c: &mut Call<'_>, y: TensorId, at: usize) -> Result<TensorId> {
    quantize_tensor(c.g, y, c.float(at)?, c.int(at + 1)?, (-128, 127), DType::I8)
}

/// Where a quantized convolution's arguments are: its weights, their scales, the bias, and
/// the kernel size followed by stride, padding, dilation and groups.
struct ConvAt {
    w: usize,
    scales: usize,
    bias: usize,
    kernel: usize,
}

/// An int8 convolution: weights `[c_out, k]`, each row `[kh, kw, c_in / groups]` padded;
/// `depthwise`: weights `[kh, kw, c_out]`.
fn q8ta_conv2d(c: &mut Call<'_>, depthwise: bool) -> Result<Vec<TensorId>> {
    let x = dequantize_tensor(c.g, c.tensor(0)?, c.f32(1)?, c.int(2)?)?;
    let at = ConvAt {
        w: 3,
        scales: 5,
        bias: 8,
        kernel: 9,
    };
    let y = packed_conv2d(c, x, &at, depthwise)?;
    let y = activate(c, 14, y)?;
    one(int8_output(c, y, 6)?)
}

/// A float convolution with int8 weights packed as `q8ta_conv2d`'s and per-channel scales
/// (`et_vk.conv2d_q8csw`), computed in f32 and given in the input's float type.
fn conv2d_q8csw(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let x = c.tensor(0)?;
    let float = c.g.float_operand("conv2d_q8csw", x)?.dtype;
    let x = c.g.as_dtype(x, DType::F32)?;
    let at = ConvAt {
        w: 1,
        scales: 2,
        bias: 3,
        kernel: 4,
    };
    let y = packed_conv2d(c, x, &at, false)?;
    one(c.g.as_dtype(y, float)?)
}

/// The convolution of the f32 `x` with the packed int8 weights at `at`, dequantized, plus the
/// (padded) bias.
fn packed_conv2d(c: &mut Call<'_>, x: TensorId, at: &ConvAt, depthwise: bool) -> Result<TensorId> {
    let (w, scales) = (c.tensor(at.w)?, c.tensor(at.scales)?);
    // Slices and permutes move words: the int8 weights, in f32 (exact) first.
    let w = c.g.as_dtype(w, DType::F32)?;
    let [kh, kw] = c.pair(at.kernel)?;
    let p = crate::graph::Conv2d {
        stride: c.pair(at.kernel + 1)?,
        padding: c.pair(at.kernel + 2)?,
        dilation: c.pair(at.kernel + 3)?,
        groups: c.count(at.kernel + 4)?,
    };
    let (xs, ws) = (c.shape(x), c.shape(w));
    let c_in = xs.get(1).copied().unwrap_or(0);
    let w = if depthwise {
        let [h, wd, c_out] = ws[..] else {
            return Err(c.err(at.w, format!("{ws:?}: [kh, kw, c_out] is needed")));
        };
        let w = c.g.permute(w, &[2, 0, 1])?;
        let w =
            c.g.reshape(w, &[c_out as isize, 1, h as isize, wd as isize])?;
        channel_weights(c.g, w, scales, c_out, 4)?
    } else {
        let [c_out, k] = ws[..] else {
            return Err(c.err(at.w, format!("{ws:?}: [c_out, k] is needed")));
        };
        let per_group = c_in / p.groups.max(1);
        let k0 = kh * kw * per_group;
        if k0 > k || k0 == 0 {
            return Err(c.err(
                at.w,
                format!("{ws:?} for {per_group} input channels per group and a {kh}x{kw} kernel"),
            ));
        }
        // Rows laid out as ExecuTorch's pattern packs them: [kh, kw, c_in / groups].
        let w = first(c.g, w, 1, k0)?;
        let w = c.g.reshape(
            w,
            &[c_out as isize, kh as isize, kw as isize, per_group as isize],
        )?;
        let w = c.g.permute(w, &[0, 3, 1, 2])?;
        channel_weights(c.g, w, scales, c_out, 4)?
    };
    let c_out = c.shape(w)[0];
    let bias = padded_bias(c, at.bias, c_out)?;
    c.g.conv2d(x, w, bias, p)
}

/// An int8 transposed convolution. Its weights `[c_out, k]` (k = `kh * kw * c_in / groups`,
/// padded) and scales must be constants: they are dequantized and laid out as
/// `conv_transpose2d`'s `[c_in, c_out / groups, kh, kw]` at build, each output channel `o`
/// of a group scaled by `scales[o]` as ExecuTorch's definition does.
fn q8ta_conv2d_transposed(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let x = dequantize_tensor(c.g, c.tensor(0)?, c.f32(1)?, c.int(2)?)?;
    let (w, scales) = (c.tensor(3)?, c.tensor(5)?);
    let [kh, kw] = c.pair(9)?;
    let groups = c.count(14)?.max(1);
    let p = crate::graph::Conv2d {
        stride: c.pair(10)?,
        padding: c.pair(11)?,
        dilation: c.pair(13)?,
        groups,
    };
    let output_padding = c.pair(12)?;
    let (Some(wv), Some(sv)) = (c.g.constant_values(w), c.g.constant_values(scales)) else {
        return Err(c.err(3, "the weights and their scales must be constants"));
    };
    let (ws, c_in) = (c.shape(w), c.shape(x).get(1).copied().unwrap_or(0));
    let [c_out, k] = ws[..] else {
        return Err(c.err(3, format!("{ws:?}: [c_out, k] is needed")));
    };
    let (in_g, out_g) = (c_in / groups, c_out / groups);
    let k0 = in_g * kh * kw;
    if k0 == 0 || k0 > k || out_g == 0 || sv.len() < out_g {
        return Err(c.err(
            3,
            format!("{ws:?} for {in_g} input channels per group and a {kh}x{kw} kernel"),
        ));
    }
    // [groups, out_g, kh, kw, in_g] (as ExecuTorch's pattern packs them) to
    // [groups * in_g, out_g, kh, kw].
    let mut t = vec![0f32; c_in * out_g * kh * kw];
    for (at, v) in t.iter_mut().enumerate() {
        let (ic, o, r) = (
            at / (out_g * kh * kw),
            (at / (kh * kw)) % out_g,
            at % (kh * kw),
        );
        let (g, i) = (ic / in_g, ic % in_g);
        let src = (g * out_g + o) * k + r * in_g + i;
        *v = wv[src] * sv[o];
    }
    let name = format!("q8ta_transposed_weights{}", w.index());
    let w = c.g.constant_f32(&name, &[c_in, out_g, kh, kw], &t)?;
    let bias = padded_bias(c, 8, c_out)?;
    let y = c.g.conv_transpose2d(x, w, bias, p, output_padding)?;
    let y = activate(c, 15, y)?;
    one(int8_output(c, y, 6)?)
}

// Dynamic quantization: the scale and zero point chosen from a tensor's range, as
// `torch.ao.quantization`'s `determine_qparams` and XNNPACK's per-token rule compute them.

/// `(scale, zero_point)` of `input` as one `[1]` f32 and one `[1]` i32 tensor: the range
/// widened to include 0, `scale = max(range / (qmax - qmin), eps)`, `zero_point = clamp(qmin -
/// round(min / scale), qmin, qmax)`.
fn choose_qparams(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let x = c.tensor(0)?;
    let (qmin, qmax, eps) = (c.int(1)? as f32, c.int(2)? as f32, c.f32(3)?);
    let x = c.g.as_dtype(x, DType::F32)?;
    let flat = c.g.reshape(x, &[-1])?;
    let (low, _, scale) = widened_range(c.g, flat, qmax - qmin, eps)?;
    let z = c.g.div(low, scale)?;
    let z = c.g.math(Math::Round, z, 0.0)?;
    let z = c.g.rsub_scalar(z, qmin)?;
    let z = c.g.clamp(z, qmin, qmax)?;
    Ok(vec![scale, c.g.cast(z, DType::I32)?])
}

/// Per row of the last dim: scales and zero points `[.., 1]` (XNNPACK's asymmetric rule, int8
/// range): the zero point from whichever end of the range rounds with less error.
fn choose_qparams_per_token(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let x = c.tensor(0)?;
    let (qmin, qmax) = (-128f32, 127f32);
    let x = c.g.as_dtype(x, DType::F32)?;
    let (low, high, scale) = widened_range(c.g, x, qmax - qmin, f32::EPSILON)?;
    let dmin = c.g.div(low, scale)?;
    let dmax = c.g.div(high, scale)?;
    let from_min = c.g.add_scalar(dmin, qmin)?;
    let from_max = c.g.add_scalar(dmax, qmax)?;
    let both = c.g.add(from_min, from_max)?;
    let use_min = c.g.gt_scalar(both, 0.0)?;
    let z_min = c.g.rsub_scalar(dmin, qmin)?;
    let z_max = c.g.rsub_scalar(dmax, qmax)?;
    let z = c.g.where_(use_min, z_min, z_max)?;
    let z = c.g.clamp(z, qmin, qmax)?;
    let z = c.g.math(Math::Round, z, 0.0)?;
    Ok(vec![scale, c.g.cast(z, DType::I32)?])
}

/// The minimum and maximum of `x` over its last dim (kept), widened to include 0, and
/// `max((max - min) / steps, eps)`.
fn widened_range(
    g: &mut GraphBuilder,
    x: TensorId,
    steps: f32,
    eps: f32,
) -> Result<(TensorId, TensorId, TensorId)> {
    let low = g.extreme(x, &[-1], true, true)?;
    let high = g.extreme(x, &[-1], true, false)?;
    let low = g.clamp(low, f32::MIN, 0.0)?;
    let high = g.clamp(high, 0.0, f32::MAX)?;
    let range = g.sub(high, low)?;
    let scale = g.div_scalar(range, steps)?;
    let scale = g.clamp(scale, eps, f32::MAX)?;
    Ok((low, high, scale))
}

/// TOSA's `reciprocal_scale`: a multiplier in `[2^30, 2^31)` and a shift such that
/// `apply_scale_32(v, multiplier, shift)` is `v / count` rounded (AVG_POOL2D's division).
pub(crate) fn reciprocal_scale(count: u32) -> Rescale {
    let k = 32 - (count - 1).leading_zeros();
    let numerator = ((1i64 << 30) + 1) << k;
    Rescale {
        multiplier: (numerator / i64::from(count)) as i32,
        shift: 30 + k,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Conv2d;

    #[test]
    fn split_tuning_takes_a_thread_count_and_an_optional_depth() {
        assert_eq!(
            parse_split_below("4096"),
            Some((4096, QCONV_SPLIT_PW_DEPTH))
        );
        assert_eq!(parse_split_below("0, 96"), Some((0, 96)));
        assert_eq!(parse_split_below("1,2,3"), None);
        assert_eq!(parse_split_below("many"), None);
    }

    #[test]
    fn windows_of_up_to_25_positions_take_the_win_kernel() {
        let p = Conv2d {
            stride: [2, 2],
            ..Conv2d::default()
        };
        assert_eq!(window_spec(&[32, 3, 3, 3], &p), Some(vec![3, 3, 2, 1]));
        assert_eq!(window_spec(&[8, 1, 5, 5], &p), Some(vec![5, 5, 2, 1]));
        assert_eq!(window_spec(&[8, 1, 7, 7], &p), None);
    }

    #[test]
    fn depthwise_layers_with_rows_of_whole_words_take_the_dw_kernel() {
        let dw = |c, wd, ow, stride, padding| {
            let p = Conv2d {
                stride: [1, stride],
                padding: [1, padding],
                groups: c,
                ..Conv2d::default()
            };
            depthwise_spec(&[1, c, 8, wd], &[c, 1, 3, 3], &[1, c, 8, ow], &p)
        };
        // MobileNetV2's: stride 1 and 2, padding 1.
        assert_eq!(dw(32, 112, 112, 1, 1), Some(vec![3, 1, 1, 1]));
        assert_eq!(dw(96, 112, 56, 2, 1), Some(vec![3, 2, 1, 1]));
        // Rows of 7 pixels are not whole words.
        assert_eq!(dw(960, 7, 7, 1, 1), None);
        // A span over four words and more: stride 4 with a skew of 3.
        assert_eq!(dw(8, 16, 4, 4, 1), None);
        // Grouped but not depthwise.
        let p = Conv2d {
            groups: 2,
            ..Conv2d::default()
        };
        assert_eq!(
            depthwise_spec(&[1, 4, 8, 8], &[4, 2, 3, 3], &[1, 4, 6, 8], &p),
            None
        );
    }
}
