//! Convolution: 2-D (any groups, dilation and padding), 1-D (as 2-D of height 1) and
//! transposed (the input spread with zeros by `dilate2d.comp`, then a plain convolution with
//! the constant weights flipped and transposed at build), with an optional clamp
//! (`et_vk.conv_with_clamp`).

use super::{Call, Fallback, Kind, OpDef, Param, one};
use crate::error::Result;
use crate::graph::{Conv2d, GraphBuilder, Op, TensorId, check_bias, conv_shape, shape_err};
use crate::kernels::{Kernel, push};
use crate::lower::{Lowerer, Target};
use crate::runtime::internal;
use vk_core::DType;

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
    let (mut x, mut w, b) = (c.tensor(0)?, c.tensor(1)?, c.opt_tensor(2)?);
    if c.shape(x).len() == 5 {
        return convolution3d(c, x, w, b);
    }
    // 1-D: [n, c, l] as [n, c, 1, l], each parameter's one value for the width.
    let one_d = c.shape(x).len() == 3;
    let pair = |c: &Call<'_>, i: usize, h: usize| -> Result<[usize; 2]> {
        match (one_d, c.counts(i)?.as_slice()) {
            (true, [v]) => Ok([h, *v]),
            (true, other) => Err(c.err(
                i,
                format!("a 1-D convolution takes one value, found {other:?}"),
            )),
            (false, _) => c.pair(i),
        }
    };
    let p = Conv2d {
        stride: pair(c, 3, 1)?,
        padding: pair(c, 4, 0)?,
        dilation: pair(c, 5, 1)?,
        groups: c.count(8)?,
    };
    if one_d {
        x = c.g.unsqueeze_at(x, 2)?;
        w = c.g.unsqueeze_at(w, 2)?;
    }
    let mut y = if c.bool(6)? {
        let output_padding = pair(c, 7, 0)?;
        c.g.conv_transpose2d(x, w, b, p, output_padding)?
    } else {
        c.g.conv2d(x, w, b, p)?
    };
    if one_d {
        let mut shape: Vec<isize> = c.shape(y).iter().map(|&s| s as isize).collect();
        shape.remove(2);
        y = c.g.reshape(y, &shape)?;
    }
    if c.def.params.len() <= 9 {
        return one(y);
    }
    let (min, max) = (c.f32(9)?, c.f32(10)?);
    one(c.g.clamp(y, min, max)?)
}

/// A 3-D convolution (`x` `[n, c, d, h, w]`), of one group, not transposed.
fn convolution3d(
    c: &mut Call<'_>,
    x: TensorId,
    w: TensorId,
    b: Option<TensorId>,
) -> Result<Vec<TensorId>> {
    let triple = |c: &Call<'_>, i: usize| -> Result<[usize; 3]> {
        match c.counts(i)?.as_slice() {
            &[v] => Ok([v; 3]),
            &[d, h, w] => Ok([d, h, w]),
            other => Err(c.err(i, format!("one or three sizes, found {other:?}"))),
        }
    };
    if c.bool(6)? || c.count(8)? != 1 {
        return Err(c.err(
            6,
            "a 3-D convolution transposed or of several groups is not supported",
        ));
    }
    let p = Conv3d {
        stride: triple(c, 3)?,
        padding: triple(c, 4)?,
        dilation: triple(c, 5)?,
    };
    let y = c.g.conv3d(x, w, b, &p)?;
    if c.def.params.len() <= 9 {
        return one(y);
    }
    let (min, max) = (c.f32(9)?, c.f32(10)?);
    one(c.g.clamp(y, min, max)?)
}

/// A 3-D convolution's geometry, per dim `[d, h, w]`: padding on both sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv3d {
    /// Strides.
    pub stride: [usize; 3],
    /// Padding, before and after.
    pub padding: [usize; 3],
    /// Dilations.
    pub dilation: [usize; 3],
}

// Shape and dtype inference: the builder's methods of this family, each checking its
// operands and naming the tensor and the numbers on error.

impl GraphBuilder {
    /// `t` with a dim of size 1 inserted at `dim`.
    pub(crate) fn unsqueeze_at(&mut self, t: TensorId, dim: usize) -> Result<TensorId> {
        let mut shape: Vec<isize> = self
            .info("unsqueeze", t)?
            .shape
            .iter()
            .map(|&s| s as isize)
            .collect();
        shape.insert(dim.min(shape.len()), 1);
        self.reshape(t, &shape)
    }

    /// The transposed convolution of `x [n, c_in, h, w]` with constant weights
    /// `w [c_in, c_out / groups, kh, kw]`: `x` spread by the stride with zeros, padded by
    /// `dilation * (k - 1) - padding` (and `output_padding` after), then a plain convolution
    /// of stride 1 with the weights flipped and transposed to `[c_out, c_in / groups, kh, kw]`.
    pub fn conv_transpose2d(
        &mut self,
        x: TensorId,
        w: TensorId,
        bias: Option<TensorId>,
        p: Conv2d,
        output_padding: [usize; 2],
    ) -> Result<TensorId> {
        const OP: &str = "conv_transpose2d";
        let xi = self.float_operand(OP, x)?;
        let wi = self.same_float(OP, w, &xi)?;
        let ([_, cin, h, wd], [wcin, cout_g, kh, kw]) = (
            <[usize; 4]>::try_from(xi.shape.as_slice()).map_err(|_| {
                shape_err(
                    OP,
                    format!("'{}' {:?} is not [n, c, h, w]", xi.name, xi.shape),
                )
            })?,
            <[usize; 4]>::try_from(wi.shape.as_slice()).map_err(|_| {
                shape_err(
                    OP,
                    format!(
                        "'{}' {:?} is not [c_in, c_out / groups, kh, kw]",
                        wi.name, wi.shape
                    ),
                )
            })?,
        );
        let g = p.groups.max(1);
        if wcin != cin || cin % g != 0 {
            return Err(shape_err(
                OP,
                format!(
                    "'{}' {:?} does not fit {cin} input channels in {g} groups",
                    wi.name, wi.shape
                ),
            ));
        }
        let values = self.constant_values(w).ok_or_else(|| {
            shape_err(
                OP,
                format!("'{}' must be a constant f32 or f16 tensor", wi.name),
            )
        })?;
        // w'[gi * cout_g + co][ci][i][j] = w[gi * cin_g + ci][co][kh - 1 - i][kw - 1 - j].
        let cin_g = cin / g;
        let mut flipped = vec![0f32; values.len()];
        for (o, v) in flipped.iter_mut().enumerate() {
            let (j, i) = (o % kw, (o / kw) % kh);
            let ci = (o / (kw * kh)) % cin_g;
            let oc = o / (kw * kh * cin_g);
            let (gi, co) = (oc / cout_g, oc % cout_g);
            *v = values[(((gi * cin_g + ci) * cout_g + co) * kh + kh - 1 - i) * kw + kw - 1 - j];
        }
        let shape = [cout_g * g, cin_g, kh, kw];
        let name = format!("{}_flipped", wi.name);
        let w2 = match xi.dtype {
            DType::F16 => self.constant_f16(&name, &shape, &flipped)?,
            _ => self.constant_f32(&name, &shape, &flipped)?,
        };
        // The spread input: before = d(k - 1) - p, after = before + output_padding.
        let mut out = [0usize; 2];
        let mut before = [0i64; 2];
        for (a, (size, k)) in [(h, kh), (wd, kw)].into_iter().enumerate() {
            let b = (p.dilation[a] * (k - 1)) as i64 - p.padding[a] as i64;
            let len = ((size - 1) * p.stride[a] + 1) as i64 + 2 * b + output_padding[a] as i64;
            if len < (p.dilation[a] * (k - 1) + 1) as i64 {
                return Err(shape_err(
                    OP,
                    format!(
                        "padding {:?} leaves no output for '{}' {:?}",
                        p.padding, xi.name, xi.shape
                    ),
                ));
            }
            (out[a], before[a]) = (len as usize, b);
        }
        let spread = self.spread2d(x, p.stride, before, out)?;
        let plain = Conv2d {
            stride: [1, 1],
            padding: [0, 0],
            dilation: p.dilation,
            groups: g,
        };
        self.conv2d(spread, w2, bias, plain)
    }

    /// `x` `[n, c, h, w]` (f32, f16 or i32) spread to `[n, c, out[0], out[1]]`: element `(i,
    /// j)` moved to `(i * stride[0] + before[0], j * stride[1] + before[1])`, zeros elsewhere
    /// (a negative `before` cuts): a transposed convolution's input as a plain one reads it.
    pub fn spread2d(
        &mut self,
        x: TensorId,
        stride: [usize; 2],
        before: [i64; 2],
        out: [usize; 2],
    ) -> Result<TensorId> {
        const OP: &str = "spread2d";
        let xi = self.info(OP, x)?;
        let Ok([n, c, h, w]) = <[usize; 4]>::try_from(xi.shape.as_slice()) else {
            return Err(shape_err(
                OP,
                format!("'{}' {:?} is not [n, c, h, w]", xi.name, xi.shape),
            ));
        };
        if !matches!(xi.dtype, DType::F32 | DType::F16 | DType::I32) {
            return Err(crate::Error::DType {
                op: OP,
                tensor: xi.name.clone(),
                actual: xi.dtype,
                expected: "f32, f16 or i32",
            });
        }
        let total = [n, c, out[0], out[1]]
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d));
        let word = |v: Option<usize>| {
            v.and_then(|v| u32::try_from(v).ok())
                .ok_or_else(|| shape_err(OP, format!("{:?} is over 2^32", [n, c, out[0], out[1]])))
        };
        let shift = |v: i64| {
            i32::try_from(v).map_err(|_| shape_err(OP, format!("a shift of {v} is over 2^31")))
        };
        if stride.contains(&0) {
            return Err(shape_err(OP, format!("a stride of {stride:?}")));
        }
        let push = push::Dilate2dPush {
            total: word(total)?,
            h: word(Some(h))?,
            w: word(Some(w))?,
            oh: word(Some(out[0]))?,
            ow: word(Some(out[1]))?,
            sh: word(Some(stride[0]))?,
            sw: word(Some(stride[1]))?,
            top: shift(before[0])?,
            left: shift(before[1])?,
        };
        self.kernel_node(
            OP,
            Kernel::Dilate2d,
            &[x],
            (xi.dtype, vec![n, c, out[0], out[1]]),
            &push,
        )
    }

    /// `conv3d(x [n, c, d, h, w], w [c_out, c, kd, kh, kw], bias [c_out])`, one group: one 2-D
    /// convolution over `[n * od, kd * c, h, w]`, the `kd` depth slices each output depth reads
    /// side by side along channels (the input padded along depth with zeros first), the weights
    /// laid out to match, `[c_out, kd * c, kh, kw]`.
    pub fn conv3d(
        &mut self,
        x: TensorId,
        w: TensorId,
        bias: Option<TensorId>,
        p: &Conv3d,
    ) -> Result<TensorId> {
        const OP: &str = "conv3d";
        let xi = self.float_operand(OP, x)?;
        let wi = self.same_float(OP, w, &xi)?;
        let bad = |why: String| {
            shape_err(
                OP,
                format!(
                    "'{}' {:?} by '{}' {:?}: {why}",
                    xi.name, xi.shape, wi.name, wi.shape
                ),
            )
        };
        let (Ok([n, c, d, h, wd]), Ok([oc, wc, kd, kh, kw])) = (
            <[usize; 5]>::try_from(xi.shape.as_slice()),
            <[usize; 5]>::try_from(wi.shape.as_slice()),
        ) else {
            return Err(bad("not [n, c, d, h, w] and [c_out, c, kd, kh, kw]".into()));
        };
        let [sd, sh, sw] = p.stride;
        let [pd, ph, pw] = p.padding;
        let [dd, dh, dw] = p.dilation;
        if wc != c || kd == 0 || [sd, sh, sw, dd, dh, dw].contains(&0) {
            return Err(bad(format!("{p:?}")));
        }
        let padded = pd.checked_mul(2).and_then(|p| p.checked_add(d));
        let span = dd.checked_mul(kd - 1).and_then(|s| s.checked_add(1));
        let Some(od) = padded
            .zip(span)
            .and_then(|(p, s)| p.checked_sub(s))
            .map(|v| v / sd + 1)
        else {
            return Err(bad(format!(
                "a window of {p:?} deeper than the padded input"
            )));
        };
        let mut x = x;
        if pd > 0 {
            let zeros = self.full_as(
                &format!("{}_depth_pad", xi.name),
                &[n, c, pd, h, wd],
                0.0,
                xi.dtype,
            )?;
            x = self.cat(&[zeros, x, zeros], 2)?;
        }
        let mut parts = Vec::with_capacity(kd);
        for k in 0..kd {
            let start = (k * dd) as isize;
            let end = start + ((od - 1) * sd + 1) as isize;
            parts.push(self.slice(x, 2, start, end, sd)?);
        }
        let x = self.cat(&parts, 1)?;
        let x = self.permute(x, &[0, 2, 1, 3, 4])?;
        let x = self.reshape(
            x,
            &[
                (n * od) as isize,
                (kd * c) as isize,
                h as isize,
                wd as isize,
            ],
        )?;
        let w = self.permute(w, &[0, 2, 1, 3, 4])?;
        let w = self.reshape(
            w,
            &[oc as isize, (kd * c) as isize, kh as isize, kw as isize],
        )?;
        let plain = Conv2d {
            stride: [sh, sw],
            padding: [ph, pw],
            dilation: [dh, dw],
            groups: 1,
        };
        let y = self.conv2d(x, w, bias, plain)?;
        let ys = self.info(OP, y)?.shape.clone();
        let y = self.reshape(
            y,
            &[
                n as isize,
                od as isize,
                oc as isize,
                ys[2] as isize,
                ys[3] as isize,
            ],
        )?;
        self.permute(y, &[0, 2, 1, 3, 4])
    }

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
        self.node(
            Op::Conv {
                x,
                w,
                bias,
                p,
                out_last: false,
                in_last: false,
            },
            OP,
            xi.dtype,
            shape,
        )
    }
}

// Recording: what this family's nodes become, dispatches of the op library.
impl Lowerer<'_> {
    /// Records a node of this family.
    pub(crate) fn record_conv(&mut self, op: &Op, t: &Target) -> Result<()> {
        let (out, o, act, oi, n) = (t.out, t.o, t.act, &t.info, t.info.numel());
        match op {
            Op::Conv {
                x,
                w,
                bias,
                p,
                out_last,
                in_last,
            } => {
                let (mut xi, wi) = (self.t(*x).clone(), self.t(*w).clone());
                if *in_last {
                    // The shape as channels first; the strides below read channels last.
                    xi.shape = vec![xi.shape[0], xi.shape[3], xi.shape[1], xi.shape[2]];
                }
                let (nb, cin, h, wd) = (xi.shape[0], xi.shape[1], xi.shape[2], xi.shape[3]);
                let (cout, cin_g, kh, kw) = (wi.shape[0], wi.shape[1], wi.shape[2], wi.shape[3]);
                let (oh, ow) = match out_last {
                    true => (oi.shape[1], oi.shape[2]),
                    false => (oi.shape[2], oi.shape[3]),
                };
                let depthwise = p.groups == cin && p.groups > 1;
                if *out_last && !depthwise {
                    return Err(internal(
                        "a channels-last result of a convolution not depthwise",
                    ));
                }
                let pointwise = kh == 1 && kw == 1 && p.stride == [1, 1] && p.padding == [0, 0];
                if *in_last && !(pointwise && p.groups == 1) {
                    return Err(internal(
                        "a channels-last input of a convolution not 1x1 of one group",
                    ));
                }
                let b = bias.map(|b| self.st(b));
                let has_bias = usize::from(b.is_some());
                let bindings = vec![
                    (xi.storage, false),
                    (wi.storage, false),
                    (b.unwrap_or(xi.storage), false),
                    (o, true),
                ];
                if depthwise {
                    let row = dw_row(n, ow, [kh, kw], p, self.cpu);
                    let threads = n.div_ceil(ow) * ow.div_ceil(row.max(1));
                    let g = self.linear_groups(threads as u64);
                    let (spec, act_lo, act_hi, bindings) = self.with_epilogue(bindings);
                    let dims = [cin, h, wd, cout, oh, ow, kh, kw];
                    let push = window_push(threads, dims, p, has_bias, [act_lo, act_hi]);
                    let (kernel, mut spec) = match row {
                        0 => (Kernel::ConvDw, spec.to_vec()),
                        _ => {
                            let window = [kh as u32, kw as u32, p.stride[1] as u32, row as u32];
                            (Kernel::ConvDwRow, [spec.as_slice(), &window].concat())
                        }
                    };
                    if *out_last {
                        // OUT_LAST is constant 6 (2-5: the row variant's window).
                        spec.resize(6, 0);
                        spec.push(1);
                    }
                    self.push(kernel, spec, bindings, &push, [g, 1, 1]);
                } else {
                    let m = cout / p.groups;
                    let nn = nb * oh * ow;
                    let k = cin_g * kh * kw;
                    if pointwise && p.groups == 1 && nn == 1 {
                        // One pixel (a squeeze-excite block's layers): a linear layer's
                        // product of one row, the weights `[cout, cin]` read as they are.
                        let mut params = [0; 26];
                        let linear = [1, cout, k, 0, k, 1, 0, 1, k, 0, cout, has_bias];
                        params[..linear.len()].copy_from_slice(&linear);
                        return self.gemm(1, cout, k, 1, 0, params, bindings, out, act);
                    }
                    // fp16 layers take the cooperative GEMMs where the device has them.
                    let dot_products =
                        xi.dtype == DType::F32 || self.coop.is_none() || f16_dot_products();
                    if pointwise
                        && p.groups == 1
                        && dot_products
                        && !in_last
                        && direct_pointwise(m, nn, k, self.cpu)
                    {
                        let groups = m.div_ceil(PW_CHANNELS);
                        let total = nb * groups * oh * ow;
                        let ([act, resid], act_lo, act_hi, bindings) = self.with_epilogue(bindings);
                        let lanes = pw_lanes(total, k, self.cpu);
                        let g = self.linear_groups((total * lanes) as u64);
                        let (kernel, mut spec) = match lanes {
                            1 => (Kernel::ConvPw, vec![]),
                            _ => (Kernel::ConvPwSplit, vec![lanes as u32]),
                        };
                        spec.splice(0..0, [act, PW_CHANNELS as u32, resid]);
                        self.push(
                            kernel,
                            spec,
                            bindings,
                            &push::ConvPwPush {
                                total: total as u32,
                                m: m as u32,
                                k: k as u32,
                                pixels: (oh * ow) as u32,
                                has_bias: has_bias as u32,
                                act_lo,
                                act_hi,
                            },
                            [g, 1, 1],
                        );
                        return Ok(());
                    }
                    if p.groups == 1 && dot_products && !pointwise && direct_conv(k) {
                        let groups = m.div_ceil(PW_CHANNELS);
                        let total = nb * groups * oh * ow;
                        let ([act, resid], act_lo, act_hi, bindings) = self.with_epilogue(bindings);
                        let g = self.linear_groups(total as u64);
                        let dims = [cin, h, wd, cout, oh, ow, kh, kw];
                        let push = window_push(total, dims, p, has_bias, [act_lo, act_hi]);
                        let spec = vec![act, resid, PW_CHANNELS as u32];
                        self.push(Kernel::ConvDirect, spec, bindings, &push, [g, 1, 1]);
                        return Ok(());
                    }
                    // Gemm bindings: A = weights, B = input, bias, C.
                    let gb = vec![bindings[1], bindings[0], bindings[2], bindings[3]];
                    let with_bias = b.is_some();
                    let on = (&xi, *in_last);
                    if self.coop_conv(on, &wi.shape, p, (oh, ow), &gb, with_bias, out, act)? {
                        return Ok(());
                    }
                    // MODE 2 reads a channels-last input at `pixel * sb_n + channel * sb_k`.
                    let (sb_k, sb_n) = if *in_last { (1, cin) } else { (0, 0) };
                    let params = [
                        m,
                        nn,
                        k,
                        m * k,
                        k,
                        1,
                        0,
                        sb_k,
                        sb_n,
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

/// `conv_dw.comp`'s push constants (every variant's): `total` threads, the layer's
/// `[c_in, h, w, c_out, oh, ow, kh, kw]`, its stride, padding and dilation, and the clamp.
fn window_push(
    total: usize,
    dims: [usize; 8],
    p: &Conv2d,
    has_bias: usize,
    [act_lo, act_hi]: [f32; 2],
) -> push::ConvDwPush {
    let [c_in, h, w, c_out, oh, ow, kh, kw] = dims.map(|d| d as u32);
    push::ConvDwPush {
        total: total as u32,
        c_in,
        h,
        w,
        c_out,
        oh,
        ow,
        kh,
        kw,
        sh: p.stride[0] as u32,
        sw: p.stride[1] as u32,
        ph: p.padding[0] as u32,
        pw: p.padding[1] as u32,
        dh: p.dilation[0] as u32,
        dw: p.dilation[1] as u32,
        has_bias: has_bias as u32,
        act_lo,
        act_hi,
    }
}

impl Lowerer<'_> {
    /// The node's epilogue for `conv_dw.comp` or `conv_pw.comp`: their `[ACT, RESID]`
    /// specialization constants, the clamp's bounds, and `bindings` with the residual (or a
    /// stand-in) bound fifth.
    fn with_epilogue(
        &mut self,
        mut bindings: Vec<(usize, bool)>,
    ) -> ([u32; 2], f32, f32, Vec<(usize, bool)>) {
        let e = self.take_epilogue();
        let resid = e.and_then(|e| e.residual);
        bindings.push((resid.unwrap_or(bindings[0].0), false));
        let (act, lo, hi) = e.map_or((0, 0.0, 0.0), |e| (e.act, e.lo, e.hi));
        ([act, e.map_or(0, |e| e.resid)], lo, hi, bindings)
    }
}

/// Environment variable for tuning the outputs of a row a thread of `conv_dw.comp`'s row
/// variant computes: 1, 2 or 4, `auto` (as many as leave enough threads, [`dw_row_fill`]), or
/// `0` (the plain kernel, one output a thread). Unset: `auto`.
pub const ENV_CONV_DW_ROW: &str = "VKDELEGATE_CONV_DW_ROW";

/// Threads below which a GPU's depthwise layer gives each thread fewer outputs of a row: a
/// layer of few outputs needs its threads to hide their loads.
const DW_FILL: usize = 32768;

/// The outputs of a row each thread of a depthwise convolution of `outputs` outputs, rows
/// `ow` wide, computes on `conv_dw.comp`'s row variant (windows of up to 7 x 7, no
/// dilation, horizontal stride 1 or 2), or 0 for the plain kernel: [`dw_row_fill`] unless
/// [`ENV_CONV_DW_ROW`] says otherwise. On a CPU driver that is 4, which took lavapipe's
/// MobileNetV2 from 624-709 to 514-517 ms a run. On an NVIDIA H100 (min of 30 runs, host to
/// host, against the plain kernel in the same run) it took ConvNeXt-Tiny fp16 from 1.066 to
/// 1.030 ms, mobilenet_v2 from 0.451 to 0.435, MobileNetV3-Small from 0.396 to 0.389 and
/// ShuffleNetV2 from 0.457 to 0.452, and 4 outputs a thread everywhere was no faster.
fn dw_row(outputs: usize, ow: usize, window: [usize; 2], p: &Conv2d, cpu: bool) -> usize {
    let fits = window.iter().all(|&k| (1..=7).contains(&k))
        && p.dilation == [1, 1]
        && (1..=2).contains(&p.stride[1]);
    if !fits {
        return 0;
    }
    match std::env::var(ENV_CONV_DW_ROW).as_deref().map(str::trim) {
        Ok("auto") => dw_row_fill(outputs, ow, cpu),
        Ok(v) => match v.parse::<usize>() {
            Ok(r) if [0, 1, 2, 4].contains(&r) => r,
            _ => {
                log::warn!("{ENV_CONV_DW_ROW}={v}: expected 0, 1, 2, 4 or `auto`");
                if cpu { 4 } else { 0 }
            }
        },
        Err(_) => dw_row_fill(outputs, ow, cpu),
    }
}

/// 4 outputs a thread where that leaves at least [`DW_FILL`] threads (always on a CPU
/// driver, whose lanes run in turn), else 2 where that does, else 1.
fn dw_row_fill(outputs: usize, ow: usize, cpu: bool) -> usize {
    let threads = |r: usize| outputs.div_ceil(ow.max(1)) * ow.div_ceil(r);
    match () {
        _ if cpu || threads(4) >= DW_FILL => 4,
        _ if threads(2) >= DW_FILL => 2,
        _ => 1,
    }
}

/// Output channels an invocation of `conv_pw.comp` computes.
const PW_CHANNELS: usize = 4;

/// Environment variable that tunes which pointwise convolutions run on `conv_pw.comp` (one
/// dot product per output) rather than the tiled GEMM: `MAX_K,MAX_OUTPUTS[,MAX_MACS]` (`0`:
/// none; `MAX_MACS` applies on GPUs only).
pub const ENV_CONV_PW: &str = "VKDELEGATE_CONV_PW";

/// Which pointwise convolutions run on `conv_pw.comp` ([`ENV_CONV_PW`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PwLimits {
    /// Layers at most this deep...
    max_k: usize,
    /// ...with at most this many outputs.
    max_outputs: usize,
    /// On a GPU, also layers of at most this many multiply-adds, whatever their depth: lanes
    /// share their sums there (the split variant).
    max_macs: usize,
}

/// The defaults of [`PwLimits`].
const PW_LIMITS: PwLimits = PwLimits {
    max_k: 128,
    max_outputs: 1 << 20,
    max_macs: 1 << 25,
};

/// Whether an fp32 pointwise convolution of `m` output channels, `pixels` output pixels (of
/// every image) and depth `k` runs as one dot product per output: shallow and small, where
/// the tiled GEMM's few tiles leave the GPU idle while its K loop walks. On an H200 this
/// won up to a depth of 128 before lanes shared sums (MobileNetV3-Large 10% faster,
/// MobileNetV2 and MnasNet 3-6%). With lanes sharing them, small layers of any depth win on a
/// GPU (MobileNetV2's 960-deep projection at 7 x 7): on an H200, host to host, up to 2^25
/// multiply-adds took MobileNetV2 from 0.59 to 0.44 ms, MobileNetV3-Small 0.435 to 0.384,
/// ShuffleNetV2 0.547 to 0.455 and RegNet-Y-400MF 1.19-1.22 to 0.973, and left ResNet-50 as it
/// was (its deep layers are larger); 2^23 helped less (RegNet not at all) and 2^27 no more.
/// MobileNetV2 then needs no GEMM pipeline, whose compile bounded its cold load. On a CPU
/// driver, which never splits, deeper layers keep the GEMM (MobileNetV2 a third slower on
/// lavapipe without it). fp16 layers keep the cooperative GEMMs where the device has them
/// (faster on every fp16 network measured); without them they take the same kernels as fp32
/// layers, this rule and [`direct_conv`]'s (on lavapipe the zoo's reduced mobilenet_v2 fp16
/// then loaded in 92 ms instead of 334-441 and ran in 14 ms instead of 23-25).
fn direct_pointwise(m: usize, pixels: usize, k: usize, cpu: bool) -> bool {
    let l = pw_limits();
    let outputs = m * pixels;
    (k <= l.max_k && outputs <= l.max_outputs) || (!cpu && outputs * k <= l.max_macs)
}

fn pw_limits() -> PwLimits {
    let Ok(v) = std::env::var(ENV_CONV_PW) else {
        return PW_LIMITS;
    };
    let parsed: Option<Vec<usize>> = crate::options::tuning_numbers(&v);
    match parsed.as_deref() {
        Some([0, ..]) => PwLimits {
            max_k: 0,
            max_outputs: 0,
            max_macs: 0,
        },
        Some([k]) => PwLimits {
            max_k: *k,
            ..PW_LIMITS
        },
        Some([k, n]) => PwLimits {
            max_k: *k,
            max_outputs: *n,
            ..PW_LIMITS
        },
        Some([k, n, macs]) => PwLimits {
            max_k: *k,
            max_outputs: *n,
            max_macs: *macs,
        },
        _ => {
            log::warn!("{ENV_CONV_PW}={v}: expected `MAX_K,MAX_OUTPUTS[,MAX_MACS]`");
            PW_LIMITS
        }
    }
}

/// Invocations of `conv_pw.comp` (four channels of a pixel each) below which a GPU runs too
/// few to hide each one's chain of loads: lanes then share each sum (its split variant).
const PW_FILL: usize = 65536;
/// The fewest terms a lane of the split variant sums.
const PW_LANE_TERMS: usize = 8;

/// Environment variable for tuning the lanes that share a `conv_pw.comp` sum: the most (1:
/// never split; default 8).
pub const ENV_CONV_PW_LANES: &str = "VKDELEGATE_CONV_PW_LANES";

/// The lanes that share each of `total` invocations' sums of `k` terms: a power of two up to
/// 8 that brings the invocations' lanes to about [`PW_FILL`], each summing at least
/// [`PW_LANE_TERMS`] terms; 1 on a CPU driver, whose work groups run their lanes in turn. On an
/// H100, ShuffleNetV2's 116-channel layers at 14 x 14 (5684 invocations of 116 terms) took
/// 21 us each unsplit.
fn pw_lanes(total: usize, k: usize, cpu: bool) -> usize {
    let most = std::env::var(ENV_CONV_PW_LANES)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(8)
        .clamp(1, 8);
    if cpu {
        return 1;
    }
    let mut lanes = PW_FILL
        .div_ceil(total.max(1))
        .next_power_of_two()
        .min(most.next_power_of_two());
    while lanes > 1 && k < lanes * PW_LANE_TERMS {
        lanes /= 2;
    }
    lanes.min(most)
}

/// Environment variable: `0` keeps depthwise convolutions' results channels first, with the
/// permute that moves them channels last after them, for tuning (default: such a convolution
/// writes the permute's result itself, `with_depthwise_outputs_channels_last`).
pub const ENV_DW_CHANNELS_LAST: &str = "VKDELEGATE_DW_CHANNELS_LAST";

/// Whether [`ENV_DW_CHANNELS_LAST`] leaves depthwise results channels last (the default).
pub(crate) fn depthwise_outputs_channels_last() -> bool {
    std::env::var(ENV_DW_CHANNELS_LAST).map_or(true, |v| v.trim() != "0")
}

/// Environment variable: `1` sends fp16 first and pointwise layers to the dot-product kernels
/// ([`direct_pointwise`], [`direct_conv`]) on devices with cooperative matrices too (default
/// `0`: they take the cooperative GEMMs there).
pub const ENV_CONV_F16_DOT: &str = "VKDELEGATE_CONV_F16_DOT";

/// Whether [`ENV_CONV_F16_DOT`] asks for dot products in fp16 whatever the device has.
fn f16_dot_products() -> bool {
    std::env::var(ENV_CONV_F16_DOT).is_ok_and(|v| v.trim() == "1")
}

/// Environment variable for the deepest sum of an fp32 convolution of one group that
/// `conv_dw.comp`'s direct variant computes (0: none).
pub const ENV_CONV_DIRECT: &str = "VKDELEGATE_CONV_DIRECT";

/// The default of [`ENV_CONV_DIRECT`]: a first layer's 3 channels by a 3 x 3 window (27
/// terms) and a little more; ResNet's 7 x 7 stem (147) stays on the GEMM.
const DIRECT_MAX_K: usize = 32;

/// Whether an fp32 convolution of one group with sums of `k` terms (not pointwise) runs as one
/// dot product per output (`conv_dw.comp`'s direct variant).
fn direct_conv(k: usize) -> bool {
    let most = std::env::var(ENV_CONV_DIRECT)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(DIRECT_MAX_K);
    k <= most
}

#[cfg(test)]
mod tests {
    use super::{direct_conv, direct_pointwise, dw_row, dw_row_fill, pw_lanes};
    use crate::graph::Conv2d;

    #[test]
    fn depthwise_threads_take_rows_of_outputs_while_enough_threads_remain() {
        // MobileNetV2's 96 channels at 112 x 112: four outputs a thread.
        assert_eq!(dw_row_fill(96 * 112 * 112, 112, false), 4);
        // 960 channels at 7 x 7: two a thread would leave 960 * 7 * 4 threads, too few.
        assert_eq!(dw_row_fill(960 * 49, 7, false), 1);
        assert_eq!(dw_row_fill(960 * 49, 7, true), 4);
        // 576 channels at 14 x 14: two.
        assert_eq!(dw_row_fill(576 * 14 * 14, 14, false), 2);
    }

    #[test]
    fn depthwise_rows_by_default_and_windows_that_fit() {
        let p = Conv2d {
            padding: [1, 1],
            groups: 96,
            ..Conv2d::default()
        };
        assert_eq!(dw_row(96 * 112 * 112, 112, [3, 3], &p, true), 4);
        // On a GPU as many as leave enough threads.
        assert_eq!(dw_row(96 * 112 * 112, 112, [3, 3], &p, false), 4);
        assert_eq!(dw_row(576 * 14 * 14, 14, [3, 3], &p, false), 2);
        // Dilated, or wider than 7: the plain kernel.
        let dilated = Conv2d {
            dilation: [2, 2],
            ..p
        };
        assert_eq!(dw_row(96 * 112 * 112, 112, [3, 3], &dilated, true), 0);
        assert_eq!(dw_row(96 * 112 * 112, 112, [9, 9], &p, true), 0);
    }

    #[test]
    fn pointwise_layers_run_as_dot_products_up_to_a_depth_or_on_a_gpu_a_size() {
        // MobileNetV2's 960-deep projection at 7 x 7 to 160 channels: a GPU only.
        assert!(direct_pointwise(160, 49, 960, false));
        assert!(!direct_pointwise(160, 49, 960, true));
        // Its 16-deep expansion at 112 x 112 to 96 channels: past the CPU's output limit.
        assert!(direct_pointwise(96, 12544, 16, false));
        assert!(!direct_pointwise(96, 12544, 16, true));
        // Shallow and small: both.
        assert!(direct_pointwise(24, 784, 16, true));
        // ResNet-50's 1024-deep layers at 14 x 14 to 256 channels: the GEMM.
        assert!(!direct_pointwise(256, 196, 1024, false));
    }

    #[test]
    fn first_layers_run_as_dot_products() {
        assert!(direct_conv(27));
        assert!(!direct_conv(147));
    }

    #[test]
    fn few_invocations_of_deep_enough_sums_share_them_among_lanes() {
        // ShuffleNetV2's 116 channels at 14 x 14: 5684 invocations of 116 terms.
        assert_eq!(pw_lanes(5684, 116, false), 8);
        // Shallow sums keep at least 8 terms a lane.
        assert_eq!(pw_lanes(4704, 16, false), 2);
        assert_eq!(pw_lanes(4704, 12, false), 1);
        // Enough invocations, or a CPU driver: no split.
        assert_eq!(pw_lanes(50176, 32, false), 2);
        assert_eq!(pw_lanes(65536, 128, false), 1);
        assert_eq!(pw_lanes(5684, 116, true), 1);
    }
}
