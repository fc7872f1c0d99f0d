//! Integer arithmetic as TOSA defines it, on i32 tensors (int8 and int16 values held widened),
//! on `int_ops.comp`: elementwise add, sub, mul with a rounding shift, maximum, minimum and
//! comparisons, and select, with broadcasting; abs, negate with zero points and clamp;
//! RESCALE per tensor or per channel; int8 TABLE lookups; sums and extremes along a dim; and
//! batched products with zero points. The Rust API only (a front end such as a VGF file's TOSA graph calls it); no
//! ExecuTorch op answers to these.

use vk_core::{DType, HostTensor};

use crate::error::{Error, Result};
use crate::graph::{GraphBuilder, Rescale, TensorId, shape_err};
use crate::kernels::{Kernel, push::IntOpsPush};

/// An elementwise integer op of two operands (TOSA's ADD, SUB, MUL, MAXIMUM, MINIMUM on i32).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntBinary {
    /// Wrapping sum.
    Add,
    /// Wrapping difference.
    Sub,
    /// `(a * b + 2^(shift - 1)) >> shift` in 64-bit arithmetic, the low 32 bits kept (the
    /// plain product for a shift of 0); the shift is 0 to 63.
    Mul {
        /// The right shift.
        shift: u32,
    },
    /// The larger.
    Maximum,
    /// The smaller.
    Minimum,
    /// 1 where equal, else 0.
    Equal,
    /// 1 where `a > b`, else 0.
    Greater,
    /// 1 where `a >= b`, else 0.
    GreaterEqual,
    /// Bitwise and.
    BitAnd,
    /// Bitwise or.
    BitOr,
    /// Bitwise exclusive or.
    BitXor,
    /// `a << b` (TOSA requires `b` in 0..=31).
    ShiftLeft,
    /// `a >> b` on the low `bits` bits of `a` taken unsigned, the result sign-extended from
    /// `bits` (TOSA's LOGICAL_RIGHT_SHIFT on int8, int16 or int32).
    ShiftRightLogical {
        /// The type's width: 8, 16 or 32.
        bits: u32,
    },
    /// `a >> b` arithmetic, plus the last bit shifted out where `round`.
    ShiftRightArithmetic {
        /// TOSA's round flag.
        round: bool,
    },
    /// `a / b` truncated toward zero (TOSA's INTDIV; `b` nonzero).
    Div,
}

/// An elementwise integer op of one operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntUnary {
    /// `|x|` (wrapping at `i32::MIN`).
    Abs,
    /// TOSA's NEGATE: `clamp(out_zp - (x - in_zp), lo, hi)`.
    Negate {
        /// The input's zero point.
        in_zp: i32,
        /// The output's zero point.
        out_zp: i32,
        /// The output type's range.
        range: (i32, i32),
    },
    /// `clamp(x, lo, hi)`.
    Clamp {
        /// The bounds.
        range: (i32, i32),
    },
    /// Bitwise not.
    BitNot,
    /// The leading zero bits of the 32-bit value (32 for 0).
    LeadingZeros,
    /// The low `bits` bits (1 to 32), sign-extended: TOSA's CAST to a narrower integer, which
    /// wraps.
    Wrap {
        /// The narrower type's width.
        bits: u32,
    },
}

/// A reduction of integers along a dim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntReduce {
    /// Wrapping sum.
    Sum,
    /// The largest.
    Max,
    /// The smallest.
    Min,
}

/// TOSA's RESCALE on integers held in i32: `clamp(apply_scale(x - in_zp) + out_zp, lo, hi)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntRescale {
    /// One scale, or one per element of the last dim.
    pub scales: Vec<Rescale>,
    /// The input's zero point.
    pub in_zp: i32,
    /// The output's zero point.
    pub out_zp: i32,
    /// The output type's range (`-128..=127` for int8).
    pub range: (i32, i32),
    /// TOSA's DOUBLE_ROUND: for shifts past 31, 2^30 more rounding for values of 0 or more and
    /// 2^30 less below (standalone RESCALEs only: `int_matmul_rescaled` refuses it).
    pub double_round: bool,
}

/// A CONV2D or DEPTHWISE_CONV2D of integers (int8 or int16 values held widened, NHWC) and the
/// RESCALE of its accumulators, as one op: TOSA's int48 sums never leave the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntConv {
    /// Padding: top, bottom, left, right.
    pub padding: [usize; 4],
    /// Stride: y, x.
    pub stride: [usize; 2],
    /// Dilation: y, x.
    pub dilation: [usize; 2],
    /// `Some(m)` for a depthwise convolution of weights `[KH, KW, C, m]`; `None` for weights
    /// `[OC, KH, KW, IC]`.
    pub depth_multiplier: Option<usize>,
    /// The input's zero point.
    pub x_zp: i32,
    /// The weights' zero point.
    pub w_zp: i32,
    /// The bias: one, or one per output channel.
    pub bias: Vec<i64>,
    /// The rescale: one, or one per output channel (16- or 32-bit multipliers).
    pub scales: Vec<Rescale>,
    /// The output's zero point.
    pub out_zp: i32,
    /// The output type's range.
    pub range: (i32, i32),
}

const OP: &str = "int_ops";

/// Kernel modes (`int_ops.comp`'s `OP`).
const RESCALE: u32 = 8;
const TABLE: u32 = 9;
const TABLE16: u32 = 14;

impl GraphBuilder {
    /// `op` on i32 tensors `a` and `b` of one rank (at most 4) whose dims are equal or 1 (TOSA's
    /// broadcasting): the result has the larger of each.
    pub fn int_binary(&mut self, op: IntBinary, a: TensorId, b: TensorId) -> Result<TensorId> {
        let (mode, shift) = match op {
            IntBinary::Add => (0, 0),
            IntBinary::Sub => (1, 0),
            IntBinary::Mul { shift } if shift < 64 => (2, shift),
            IntBinary::Mul { shift } => {
                return Err(Error::Graph(format!("{OP}: a shift of {shift}")));
            }
            IntBinary::Maximum => (3, 0),
            IntBinary::Minimum => (4, 0),
            IntBinary::Equal => (5, 0),
            IntBinary::Greater => (6, 0),
            IntBinary::GreaterEqual => (7, 0),
            IntBinary::BitAnd => (40, 0),
            IntBinary::BitOr => (41, 0),
            IntBinary::BitXor => (42, 0),
            IntBinary::ShiftLeft => (43, 0),
            IntBinary::ShiftRightLogical { bits } if matches!(bits, 8 | 16 | 32) => (44, bits),
            IntBinary::ShiftRightLogical { bits } => {
                return Err(Error::Graph(format!(
                    "{OP}: a logical shift of {bits}-bit values"
                )));
            }
            IntBinary::ShiftRightArithmetic { round } => (45, u32::from(round)),
            IntBinary::Div => (46, 0),
        };
        // The logical shift's width travels as the output range's upper bound.
        if mode == 44 {
            return self.int_elementwise_with(mode, &[a, b], 0, shift as i32);
        }
        self.int_elementwise(mode, &[a, b], shift)
    }

    /// `a` where `cond` is nonzero, else `b`: i32 tensors of one rank (at most 4) broadcast as
    /// in [`GraphBuilder::int_binary`] (TOSA's SELECT).
    pub fn int_select(&mut self, cond: TensorId, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.int_elementwise(13, &[cond, a, b], 0)
    }

    /// `op` of i32 tensor `x`, elementwise.
    pub fn int_unary(&mut self, op: IntUnary, x: TensorId) -> Result<TensorId> {
        let xi = self.typed_operand(OP, x, DType::I32)?;
        let (mode, in_zp, out_zp, (lo, hi)) = match op {
            IntUnary::Abs => (10, 0, 0, (0, 0)),
            IntUnary::Negate {
                in_zp,
                out_zp,
                range,
            } => (11, in_zp, out_zp, range),
            IntUnary::Clamp { range } => (12, 0, 0, range),
            IntUnary::BitNot => (15, 0, 0, (0, 0)),
            IntUnary::LeadingZeros => (47, 0, 0, (0, 0)),
            IntUnary::Wrap { bits } if (1..=32).contains(&bits) => (48, 0, 0, (0, bits as i32)),
            IntUnary::Wrap { bits } => {
                return Err(Error::Graph(format!("{OP}: a wrap to {bits} bits")));
            }
        };
        if lo > hi {
            return Err(Error::Graph(format!("{OP}: an empty range {:?}", (lo, hi))));
        }
        let push = IntOpsPush {
            n: words_of(&xi.shape)?,
            in_zp,
            out_zp,
            lo,
            hi,
            ..IntOpsPush::default()
        };
        self.int_node(mode, &[x], xi.shape, &push)
    }

    /// TOSA's MATMUL of i32 tensors `a` `[N, H, C]` and `b` `[N, C, W]` with zero points:
    /// `[N, H, W]` sums of `(a - a_zp) (b - b_zp)` (wrapping).
    pub fn int_matmul(
        &mut self,
        a: TensorId,
        b: TensorId,
        (a_zp, b_zp): (i32, i32),
    ) -> Result<TensorId> {
        let ([n, h, w], push) = self.int_product(a, b, (a_zp, b_zp))?;
        self.int_node(24, &[a, b], vec![n, h, w], &push)
    }

    /// TOSA's MATMUL of i32 tensors `a` `[N, H, C]` and `b` `[N, C, W]` (an int16 MATMUL's
    /// values held widened) and the RESCALE of its sums, as one op: the products and sums are
    /// kept in 64 bits (TOSA's int48 accumulators) and scaled to `r`'s range, per tensor or
    /// per element of the last dim. `r.in_zp` must be 0 (TOSA's rule for int48 inputs).
    pub fn int_matmul_rescaled(
        &mut self,
        a: TensorId,
        b: TensorId,
        zps: (i32, i32),
        r: &IntRescale,
    ) -> Result<TensorId> {
        let ([n, h, w], push) = self.int_product(a, b, zps)?;
        let bad = |why: String| Error::Graph(format!("{OP}: a rescaled product: {why}"));
        if r.in_zp != 0 {
            return Err(bad(format!("an input zero point of {}", r.in_zp)));
        }
        if r.double_round {
            return Err(bad("double rounding of int48 sums".into()));
        }
        if r.scales.len() != 1 && r.scales.len() != w {
            return Err(bad(format!("{} scales for {w} columns", r.scales.len())));
        }
        check_scales(&r.scales)?;
        let (lo, hi) = r.range;
        if lo > hi {
            return Err(bad(format!("an empty range {:?}", r.range)));
        }
        let mut params = vec![r.out_zp, lo, hi, i32::from(r.scales.len() > 1)];
        for s in &r.scales {
            params.extend([s.multiplier, s.shift as i32]);
        }
        let name = format!("matmul_rescale_{}", self.tensors.len());
        let t = HostTensor::from_i32(vec![params.len()], &params)
            .map_err(|e| Error::Graph(format!("{OP}: {e}")))?;
        let c = self.constant(&name, t)?;
        self.int_node(25, &[a, b, c], vec![n, h, w], &push)
    }

    /// The output `[N, H, W]` and push block of a product of `a` `[N, H, C]` and `b`
    /// `[N, C, W]` (i32 tensors) with zero points.
    fn int_product(
        &self,
        a: TensorId,
        b: TensorId,
        (a_zp, b_zp): (i32, i32),
    ) -> Result<([usize; 3], IntOpsPush)> {
        let ai = self.typed_operand(OP, a, DType::I32)?;
        let bi = self.typed_operand(OP, b, DType::I32)?;
        let bad = || {
            shape_err(
                OP,
                format!("a product of {:?} and {:?}", ai.shape, bi.shape),
            )
        };
        let (&[n, h, c], &[n2, c2, w]) = (&ai.shape[..], &bi.shape[..]) else {
            return Err(bad());
        };
        if n != n2 || c != c2 {
            return Err(bad());
        }
        let push = IntOpsPush {
            n: words_of(&[n, h, w])?,
            d1: words(h)?,
            d2: words(w)?,
            d3: words(c)?,
            in_zp: a_zp,
            out_zp: b_zp,
            ..IntOpsPush::default()
        };
        Ok(([n, h, w], push))
    }

    /// An elementwise `int_ops.comp` node of two or three i32 operands of one rank (at most 4)
    /// broadcast to the largest of each dim.
    fn int_elementwise(&mut self, mode: u32, xs: &[TensorId], shift: u32) -> Result<TensorId> {
        self.int_elementwise_with(mode, xs, shift, 0)
    }

    /// [`GraphBuilder::int_elementwise`] with `hi` in the push block.
    fn int_elementwise_with(
        &mut self,
        mode: u32,
        xs: &[TensorId],
        shift: u32,
        hi: i32,
    ) -> Result<TensorId> {
        let infos = xs
            .iter()
            .map(|&x| self.typed_operand(OP, x, DType::I32))
            .collect::<Result<Vec<_>>>()?;
        let shapes: Vec<&[usize]> = infos.iter().map(|i| &i.shape[..]).collect();
        let bad = |why: &str| shape_err(OP, format!("operands {shapes:?}: {why}"));
        let rank = shapes[0].len();
        if shapes.iter().any(|s| s.len() != rank) || rank > 4 {
            return Err(bad("not one rank of at most 4"));
        }
        let mut out = vec![1usize; rank];
        for s in &shapes {
            for (o, &d) in out.iter_mut().zip(s.iter()) {
                if d != *o && d != 1 && *o != 1 {
                    return Err(bad("dims neither equal nor 1"));
                }
                *o = (*o).max(d);
            }
        }
        let d = padded4(&out);
        let st = |k: usize| shapes.get(k).map_or([0; 4], |s| broadcast_strides(s));
        let (sa, sb, sc) = (st(0), st(1), st(2));
        let push = IntOpsPush {
            n: words_of(&out)?,
            d1: words(d[1])?,
            d2: words(d[2])?,
            d3: words(d[3])?,
            sa0: sa[0],
            sa1: sa[1],
            sa2: sa[2],
            sa3: sa[3],
            sb0: sb[0],
            sb1: sb[1],
            sb2: sb[2],
            sb3: sb[3],
            sc0: sc[0],
            sc1: sc[1],
            sc2: sc[2],
            sc3: sc[3],
            shift,
            hi,
            ..IntOpsPush::default()
        };
        self.int_node(mode, xs, out, &push)
    }

    /// TOSA's RESCALE of i32 tensor `x` (see [`IntRescale`]); per-channel scales go along the
    /// last dim.
    pub fn int_rescale(&mut self, x: TensorId, r: &IntRescale) -> Result<TensorId> {
        let xi = self.typed_operand(OP, x, DType::I32)?;
        let last = xi.shape.last().copied().unwrap_or(1);
        if r.scales.is_empty() || (r.scales.len() != 1 && r.scales.len() != last) {
            return Err(shape_err(
                OP,
                format!(
                    "{} scales for a last dim of {last} in {:?}",
                    r.scales.len(),
                    xi.shape
                ),
            ));
        }
        check_scales(&r.scales)?;
        if r.range.0 > r.range.1 {
            return Err(Error::Graph(format!("{OP}: an empty range {:?}", r.range)));
        }
        let words: Vec<i32> = r
            .scales
            .iter()
            .flat_map(|s| [s.multiplier, s.shift as i32])
            .collect();
        let name = format!("rescale_{}", self.tensors.len());
        let table = HostTensor::from_i32(vec![words.len()], &words)
            .map_err(|e| Error::Graph(format!("{OP}: {e}")))?;
        let params = self.constant(&name, table)?;
        let push = IntOpsPush {
            n: words_of(&xi.shape)?,
            in_zp: r.in_zp,
            out_zp: r.out_zp,
            lo: r.range.0,
            hi: r.range.1,
            channels: r.scales.len() as u32,
            shift: u32::from(r.double_round),
            ..IntOpsPush::default()
        };
        self.int_node(RESCALE, &[x, params], xi.shape, &push)
    }

    /// TOSA's int8 TABLE on i32 tensor `x` of int8 values: entry `x + 128` of `table`.
    pub fn int_table(&mut self, x: TensorId, table: &[i32; 256]) -> Result<TensorId> {
        self.table_node(TABLE, x, table)
    }

    /// TOSA's int16 TABLE on i32 tensor `x` of int16 values: 513 entries interpolated, an
    /// int32 result (`(t[i] << 7) + (t[i + 1] - t[i]) f` for `x + 32768 = 128 i + f`).
    pub fn int_table16(&mut self, x: TensorId, table: &[i32; 513]) -> Result<TensorId> {
        self.table_node(TABLE16, x, table)
    }

    /// A TABLE mode's node: `table` a constant, an output per element of `x`.
    fn table_node(&mut self, mode: u32, x: TensorId, table: &[i32]) -> Result<TensorId> {
        let xi = self.typed_operand(OP, x, DType::I32)?;
        let name = format!("table_{}", self.tensors.len());
        let t = HostTensor::from_i32(vec![table.len()], table)
            .map_err(|e| Error::Graph(format!("{OP}: {e}")))?;
        let entries = self.constant(&name, t)?;
        let push = IntOpsPush {
            n: words_of(&xi.shape)?,
            ..IntOpsPush::default()
        };
        self.int_node(mode, &[x, entries], xi.shape, &push)
    }

    /// The convolution of i32 tensors `x` `[N, IH, IW, IC]` (NHWC) and `w`, rescaled (see
    /// [`IntConv`]): `[N, OH, OW, OC]`.
    pub fn int_conv_rescaled(&mut self, x: TensorId, w: TensorId, p: &IntConv) -> Result<TensorId> {
        let xi = self.typed_operand(OP, x, DType::I32)?;
        let wi = self.typed_operand(OP, w, DType::I32)?;
        let bad = |why: String| {
            shape_err(
                OP,
                format!("conv of {:?} by {:?}: {why}", xi.shape, wi.shape),
            )
        };
        let (&[n, ih, iw, ic], &[w0, w1, w2, w3]) = (&xi.shape[..], &wi.shape[..]) else {
            return Err(bad("not 4-D".into()));
        };
        let (oc, kh, kw, mult) = match p.depth_multiplier {
            Some(m) if w2 == ic && w3 == m && m > 0 => (ic * m, w0, w1, m),
            None if w3 == ic => (w0, w1, w2, 0),
            _ => return Err(bad("weights of another depth".into())),
        };
        let [pt, pb, pl, pr] = p.padding;
        let [sy, sx] = p.stride;
        let [dy, dx] = p.dilation;
        let out =
            |size: usize, pad: Option<usize>, k: usize, d: usize, s: usize| -> Option<usize> {
                let span = (k.checked_sub(1)?).checked_mul(d)?.checked_add(1)?;
                size.checked_add(pad?)?
                    .checked_sub(span)
                    .map(|v| v / s.max(1) + 1)
            };
        let (Some(oh), Some(ow)) = (
            out(ih, pt.checked_add(pb), kh, dy, sy),
            out(iw, pl.checked_add(pr), kw, dx, sx),
        ) else {
            return Err(bad("a window larger than the padded input".into()));
        };
        if sy == 0 || sx == 0 || dy == 0 || dx == 0 {
            return Err(bad("a stride or dilation of 0".into()));
        }
        let per = |len: usize, what: &str| -> Result<()> {
            match len == 1 || len == oc {
                true => Ok(()),
                false => Err(bad(format!("{len} {what} for {oc} output channels"))),
            }
        };
        per(p.bias.len(), "biases")?;
        per(p.scales.len(), "scales")?;
        check_scales(&p.scales)?;
        let word = |v: usize| i32::try_from(v).map_err(|_| bad(format!("{v} exceeds 31 bits")));
        let mut params = vec![0i32; 24];
        for (at, v) in [ih, iw, ic, oh, ow, oc, kh, kw, sy, sx, pt, pl, dy, dx]
            .into_iter()
            .enumerate()
        {
            params[at] = word(v)?;
        }
        params[14] = p.x_zp;
        params[15] = p.w_zp;
        params[16] = p.out_zp;
        (params[17], params[18]) = p.range;
        params[19] = word(mult)?;
        for k in 0..oc {
            let b = p.bias[if p.bias.len() == 1 { 0 } else { k }];
            let s = p.scales[if p.scales.len() == 1 { 0 } else { k }];
            params.extend([b as i32, (b >> 32) as i32, s.multiplier, s.shift as i32]);
        }
        let name = format!("conv_params_{}", self.tensors.len());
        let t = HostTensor::from_i32(vec![params.len()], &params)
            .map_err(|e| Error::Graph(format!("{OP}: {e}")))?;
        let c = self.constant(&name, t)?;
        let shape = vec![n, oh, ow, oc];
        let push = IntOpsPush {
            n: words_of(&shape)?,
            ..IntOpsPush::default()
        };
        self.int_node(32, &[x, w, c], shape, &push)
    }

    /// `op` of i32 tensor `x` along `dim`, kept as a dim of 1.
    pub fn int_reduce(&mut self, x: TensorId, dim: isize, op: IntReduce) -> Result<TensorId> {
        let xi = self.typed_operand(OP, x, DType::I32)?;
        let rank = xi.shape.len() as isize;
        let d = if dim < 0 { dim + rank } else { dim };
        if !(0..rank).contains(&d) {
            return Err(shape_err(OP, format!("dim {dim} of {:?}", xi.shape)));
        }
        let d = d as usize;
        let (len, inner) = (xi.shape[d], xi.shape[d + 1..].iter().product::<usize>());
        if len == 0 {
            return Err(shape_err(
                OP,
                format!("a reduction over an empty dim of {:?}", xi.shape),
            ));
        }
        let mut out = xi.shape.clone();
        out[d] = 1;
        let push = IntOpsPush {
            n: words_of(&out)?,
            d1: words(len)?,
            d2: words(inner)?,
            ..IntOpsPush::default()
        };
        let mode = match op {
            IntReduce::Sum => 16,
            IntReduce::Max => 17,
            IntReduce::Min => 18,
        };
        self.int_node(mode, &[x], out, &push)
    }

    /// An `int_ops.comp` node in `mode` (operands past those given bound to the first).
    fn int_node(
        &mut self,
        mode: u32,
        inputs: &[TensorId],
        shape: Vec<usize>,
        push: &IntOpsPush,
    ) -> Result<TensorId> {
        let at = |k: usize| inputs.get(k).copied().unwrap_or(inputs[0]);
        let out = crate::graph::KernelOut {
            dtype: DType::I32,
            shape,
            storage: None,
            groups: None,
            precision: None,
            spec: vec![mode],
        };
        self.kernel_node_into(OP, Kernel::IntOps, &[at(0), at(1), at(2)], out, push)
    }
}

/// Scales TOSA's RESCALE takes: nonnegative multipliers, shifts 1 to 62.
fn check_scales(scales: &[Rescale]) -> Result<()> {
    match scales
        .iter()
        .find(|s| !(1..=62).contains(&s.shift) || s.multiplier < 0)
    {
        Some(s) => Err(Error::Graph(format!(
            "{OP}: rescale multiplier {} with shift {} (multipliers are nonnegative, shifts 1 to 62)",
            s.multiplier, s.shift
        ))),
        None => Ok(()),
    }
}

/// `shape` right-aligned in 4 dims.
fn padded4(shape: &[usize]) -> [usize; 4] {
    let mut d = [1; 4];
    d[4 - shape.len()..].copy_from_slice(shape);
    d
}

/// The strides of a row-major `shape` right-aligned in 4 dims, 0 along dims of 1.
fn broadcast_strides(shape: &[usize]) -> [u32; 4] {
    let d = padded4(shape);
    let mut s = [0u32; 4];
    let mut acc = 1usize;
    for i in (0..4).rev() {
        s[i] = if d[i] == 1 { 0 } else { acc as u32 };
        acc *= d[i];
    }
    s
}

fn words(v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::Graph(format!("{OP}: {v} elements exceed 32 bits")))
}

fn words_of(shape: &[usize]) -> Result<u32> {
    let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    n.map_or_else(
        || {
            Err(Error::Graph(format!(
                "{OP}: {shape:?} exceeds the address space"
            )))
        },
        words,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_dims_step_by_zero() {
        assert_eq!(broadcast_strides(&[2, 1, 3]), [0, 3, 0, 1]);
        assert_eq!(broadcast_strides(&[4]), [0, 0, 0, 1]);
        assert_eq!(padded4(&[5, 6]), [1, 1, 5, 6]);
    }
}
