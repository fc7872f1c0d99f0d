//! The graph builder, the IR between the front ends and the kernels: tensors, storages,
//! constants, inputs, outputs and the node kinds, with the operand checks the op families
//! share. The ops' own methods (shape and dtype inference) live in their family files,
//! `crate::ops::<family>`.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use vk_core::{DType, HostTensor};

use crate::error::{Error, Result};
use crate::kernels::Kernel;

/// A tensor of a [`GraphBuilder`]. Only meaningful with the builder that made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub(crate) usize);

impl TensorId {
    /// The tensor's index in its builder.
    pub fn index(self) -> usize {
        self.0
    }
}

/// Binary elementwise ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b`.
    Div,
    /// `min(a, b)`.
    Minimum,
    /// `max(a, b)`.
    Maximum,
    /// `a ^ b` (negative bases with whole exponents as PyTorch computes them).
    Pow,
    /// `a == b` as a mask.
    Eq,
    /// `a != b` as a mask.
    Ne,
    /// `a > b` as a mask.
    Gt,
    /// `a >= b` as a mask.
    Ge,
    /// `a < b` as a mask.
    Lt,
    /// `a <= b` as a mask.
    Le,
    /// Both nonzero, as a mask.
    And,
    /// Either nonzero, as a mask.
    Or,
    /// `floor(a / b)`.
    FloorDiv,
    /// `trunc(a / b)`.
    TruncDiv,
    /// `a * sigmoid(b)`: a gate, as squeeze-excite blocks apply theirs (made by a graph pass
    /// from a product with a sigmoid nothing else reads).
    MulSigmoid,
    /// `a * relu6(b + 3) / 6`: a hard gate, as MobileNetV3's squeeze-excite blocks apply
    /// theirs (made by a graph pass from the product and the hard sigmoid's add, clamp and
    /// quotient, which nothing else reads).
    MulHardSigmoid,
}

impl BinaryOp {
    /// Whether the op writes a 0/1 mask (comparisons, logical ops).
    pub(crate) fn is_mask(self) -> bool {
        use BinaryOp as B;
        matches!(
            self,
            B::Eq | B::Ne | B::Gt | B::Ge | B::Lt | B::Le | B::And | B::Or
        )
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Minimum => "minimum",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Pow => "pow",
            BinaryOp::Eq => "eq",
            BinaryOp::Ne => "ne",
            BinaryOp::Gt => "gt",
            BinaryOp::Ge => "ge",
            BinaryOp::Lt => "lt",
            BinaryOp::Le => "le",
            BinaryOp::And => "logical_and",
            BinaryOp::Or => "logical_or",
            BinaryOp::FloorDiv => "div_floor",
            BinaryOp::TruncDiv => "div_trunc",
            BinaryOp::MulSigmoid => "mul_sigmoid",
            BinaryOp::MulHardSigmoid => "mul_hardsigmoid",
        }
    }
    pub(crate) fn code(self) -> u32 {
        self as u32
    }
}

/// Unary elementwise ops (the codes are the shader's).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum UnaryOp {
    /// `max(x, 0)`.
    Relu,
    /// `clamp(x, min, max)` (relu6 is `Clamp(0, 6)`, hardtanh `Clamp(-1, 1)`).
    Clamp(f32, f32),
    /// `1 / (1 + exp(-x))`.
    Sigmoid,
    /// `tanh(x)`.
    Tanh,
    /// GELU with the exact erf form (max error of the erf approximation 1.5e-7).
    Gelu,
    /// GELU, tanh approximation (PyTorch `approximate="tanh"`).
    GeluTanh,
    /// `x * relu6(x + 3) / 6`.
    Hardswish,
    /// `x + s`.
    AddScalar(f32),
    /// `x * s`.
    MulScalar(f32),
    /// `s - x`.
    RSubScalar(f32),
    /// `x / s`.
    DivScalar(f32),
    /// `s / x`.
    RDivScalar(f32),
    /// `x` (a copy).
    Copy,
    /// `x <cmp> p0` as a mask: 1.0 where it holds, else 0.0.
    Compare(Compare, f32),
    /// `x == 0` as a mask: 1.0 where `x` is 0.0 (false), else 0.0.
    LogicalNot,
    /// `x * sigmoid(x)` (SiLU): made by the fusion pass from a sigmoid and a product.
    Silu,
}

/// A comparison with a scalar. Masks are f32: 0.0 is false and any other value true; the ops
/// that make masks write exactly 0.0 or 1.0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compare {
    /// `==`.
    Eq,
    /// `!=`.
    Ne,
    /// `>`.
    Gt,
    /// `>=`.
    Ge,
    /// `<`.
    Lt,
    /// `<=`.
    Le,
}

impl UnaryOp {
    pub(crate) fn name(self) -> &'static str {
        match self {
            UnaryOp::Relu => "relu",
            UnaryOp::Clamp(..) => "clamp",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Gelu | UnaryOp::GeluTanh => "gelu",
            UnaryOp::Hardswish => "hardswish",
            UnaryOp::AddScalar(_) => "add_scalar",
            UnaryOp::MulScalar(_) => "mul_scalar",
            UnaryOp::RSubScalar(_) => "rsub_scalar",
            UnaryOp::DivScalar(_) => "div_scalar",
            UnaryOp::RDivScalar(_) => "rdiv_scalar",
            UnaryOp::Copy => "copy",
            UnaryOp::Compare(..) => "compare_scalar",
            UnaryOp::LogicalNot => "logical_not",
            UnaryOp::Silu => "silu",
        }
    }
    /// Shader code and parameters.
    pub(crate) fn code(self) -> (u32, f32, f32) {
        match self {
            UnaryOp::Relu => (0, 0.0, 0.0),
            UnaryOp::Clamp(lo, hi) => (1, lo, hi),
            UnaryOp::Sigmoid => (2, 0.0, 0.0),
            UnaryOp::Tanh => (3, 0.0, 0.0),
            UnaryOp::Gelu => (4, 0.0, 0.0),
            UnaryOp::GeluTanh => (5, 0.0, 0.0),
            UnaryOp::Hardswish => (6, 0.0, 0.0),
            UnaryOp::AddScalar(s) => (7, s, 0.0),
            UnaryOp::MulScalar(s) => (8, s, 0.0),
            UnaryOp::RSubScalar(s) => (9, s, 0.0),
            UnaryOp::DivScalar(s) => (10, s, 0.0),
            UnaryOp::RDivScalar(s) => (11, s, 0.0),
            UnaryOp::Copy => (12, 0.0, 0.0),
            UnaryOp::Compare(c, s) => (13 + c as u32, s, 0.0),
            UnaryOp::LogicalNot => (19, 0.0, 0.0),
            UnaryOp::Silu => (20, 0.0, 0.0),
        }
    }
}

/// 2-D pooling parameters (PyTorch's `avg_pool2d` / `max_pool2d`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool2d {
    /// Window `[kh, kw]`.
    pub kernel: [usize; 2],
    /// Stride `[sh, sw]` (PyTorch's default is the kernel).
    pub stride: [usize; 2],
    /// Zero padding `[ph, pw]`, at most half the kernel.
    pub padding: [usize; 2],
    /// Output size rounds up instead of down.
    pub ceil_mode: bool,
    /// Average pooling divides by the window including padding (PyTorch default `true`).
    pub count_include_pad: bool,
}

impl Pool2d {
    /// A `k x k` window with stride `s` and no padding.
    pub fn new(k: usize, s: usize) -> Self {
        Pool2d {
            kernel: [k, k],
            stride: [s, s],
            padding: [0, 0],
            ceil_mode: false,
            count_include_pad: true,
        }
    }
}

/// 2-D convolution parameters (PyTorch's `conv2d`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv2d {
    /// Stride `[sh, sw]`.
    pub stride: [usize; 2],
    /// Zero padding `[ph, pw]`.
    pub padding: [usize; 2],
    /// Dilation `[dh, dw]`.
    pub dilation: [usize; 2],
    /// Groups (`c_in` for depthwise).
    pub groups: usize,
}

impl Default for Conv2d {
    fn default() -> Self {
        Conv2d {
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
        }
    }
}

/// A TOSA-style rescale (`RESCALE` with `scale32` and no double rounding):
/// `apply(v) = (v * multiplier + 2^(shift - 1)) >> shift` in 64-bit arithmetic, saturated to
/// i32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rescale {
    /// Multiplier (usually in `[2^30, 2^31)`).
    pub multiplier: i32,
    /// Right shift, 1 to 62.
    pub shift: u32,
}

impl Rescale {
    /// The rescale closest to multiplying by `scale` (> 0): a multiplier in `[2^30, 2^31)` and
    /// a shift; `None` when `scale` is not positive or needs a shift outside 1 to 62.
    pub fn from_scale(scale: f64) -> Option<Rescale> {
        if scale.is_nan() || scale <= 0.0 || !scale.is_finite() {
            return None;
        }
        let mut e = scale.log2().floor() as i32 + 1;
        let mut m = (scale / 2f64.powi(e) * 2f64.powi(31)).round() as i64;
        if m >= 1 << 31 {
            m /= 2;
            e += 1;
        }
        let shift = 31 - e;
        (1..=62).contains(&shift).then_some(Rescale {
            multiplier: m as i32,
            shift: shift as u32,
        })
    }

    /// Applies the rescale on the host (the same arithmetic as the shaders).
    pub fn apply(self, v: i32) -> i32 {
        let r = 1i64 << (self.shift - 1);
        let x = (i64::from(v) * i64::from(self.multiplier) + r) >> self.shift;
        x.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
    }

    pub(crate) fn check(self, op: &'static str) -> Result<()> {
        if !(1..=62).contains(&self.shift) {
            return Err(shape_err(
                op,
                format!("rescale shift {} is outside 1..=62", self.shift),
            ));
        }
        Ok(())
    }
}

/// Parameters of [`GraphBuilder::add_q8`] (the TFLite/TOSA quantized add):
/// `a32 = a.apply((a - a_zp) << left_shift)`, `b32` likewise,
/// `out = clamp(out.apply(a32 + b32) + out_zp, -128, 127)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QAdd {
    /// Zero point of `a`.
    pub a_zp: i32,
    /// Zero point of `b`.
    pub b_zp: i32,
    /// Zero point of the output.
    pub out_zp: i32,
    /// Left shift applied to both inputs before their rescale (TFLite uses 20).
    pub left_shift: u32,
    /// Rescale of `a`.
    pub a: Rescale,
    /// Rescale of `b`.
    pub b: Rescale,
    /// Rescale of the sum.
    pub out: Rescale,
}

/// Parameters of [`GraphBuilder::conv2d_q8`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QConv {
    /// Geometry.
    pub conv: Conv2d,
    /// Input zero point.
    pub x_zp: i32,
    /// Weight zero point.
    pub w_zp: i32,
    /// Output zero point.
    pub out_zp: i32,
    /// The padding at the bottom and right where it is not `conv.padding`'s (which is then
    /// the top and left): TOSA's uneven padding of stride-2 layers. Padding adds no terms to
    /// the sums, so it only sets the output's size.
    pub pad_end: Option<[usize; 2]>,
}

/// A layer norm of each row of a linear layer's input, folded into the layer: its weight
/// (the norm's scale folded in) multiplies the raw rows, and the result is
/// `rstd * (acc - mean * colsum[j]) + bias[j]` with each row's mean and `rstd` computed by
/// the product itself (`gemm_coop2.comp`'s `NORM`). `colsum` (fp32, `[n]`) holds the sums
/// of the weight's rows; the norm's shift is folded into the bias.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RowNorm {
    pub colsum: TensorId,
    pub eps: f32,
}

#[derive(Debug, Clone)]
pub(crate) enum Op {
    Unary {
        op: UnaryOp,
        x: TensorId,
    },
    Binary {
        op: BinaryOp,
        a: TensorId,
        b: TensorId,
    },
    Softmax {
        x: TensorId,
        dim: usize,
        log: bool,
    },
    Pool {
        x: TensorId,
        max: bool,
        p: Pool2d,
    },
    Conv {
        x: TensorId,
        w: TensorId,
        bias: Option<TensorId>,
        p: Conv2d,
        /// The result is written channels last (`[n, oh, ow, c_out]`): a depthwise
        /// convolution whose permute moving channels last is gone
        /// (`with_depthwise_outputs_channels_last`).
        out_last: bool,
        /// `x` is channels last (`[n, h, w, c_in]`): a 1x1 convolution of stride 1 and one
        /// group made of a linear layer over channels-last pixels whose result a permute moved
        /// channels first (`with_products_written_channels_first`).
        in_last: bool,
    },
    /// `a [batch.., m, k] x b` where `b` is `[batch.., k, n]`, or `[n, k]` when `linear`.
    Matmul {
        a: TensorId,
        b: TensorId,
        bias: Option<TensorId>,
        linear: bool,
        /// A layer norm of each row of `a` folded into the product
        /// (`with_norms_folded_into_products`).
        norm: Option<RowNorm>,
    },
    Reduce {
        x: TensorId,
        dims: Vec<usize>,
        mean: bool,
    },
    LayerNorm {
        x: TensorId,
        weight: Option<TensorId>,
        bias: Option<TensorId>,
        d: usize,
        eps: f32,
        /// RMS norm: no mean is subtracted, the variance is the mean square.
        rms: bool,
        /// 0: each row of `d` elements is contiguous in `x`. Else `x` is channels-first,
        /// `[n, d, plane]`, and the result channels-last, `[n, plane, d]`: row `r` normalizes
        /// the `d` channels of pixel `r % plane` of image `r / plane` (a norm over the
        /// channels, read through the permute that moved them last).
        plane: usize,
    },
    Permute {
        x: TensorId,
        perm: Vec<usize>,
    },
    Cat {
        xs: Vec<TensorId>,
        dim: usize,
    },
    Slice {
        x: TensorId,
        dim: usize,
        start: usize,
        step: usize,
    },
    Cast {
        x: TensorId,
        to: DType,
    },
    /// `cond ? a : b`, broadcasting all three.
    Where {
        cond: TensorId,
        a: TensorId,
        b: TensorId,
    },
    /// Rows of `table` `[v, d]` picked by the i32 `ids`.
    Gather {
        table: TensorId,
        ids: TensorId,
    },
    QAdd {
        a: TensorId,
        b: TensorId,
        q: QAdd,
    },
    QConv {
        x: TensorId,
        w: TensorId,
        bias: Option<TensorId>,
        mult: TensorId,
        shift: TensorId,
        q: QConv,
    },
    /// An op family's own kernel (`GraphBuilder::kernel_node`): its operands bound in order,
    /// then the output; one invocation per output element in a grid-stride loop (or, with
    /// `groups`, that many work groups, each looping over its share); push constants from a
    /// `#[repr(C)]` struct.
    Kernel {
        name: &'static str,
        kernel: Kernel,
        inputs: Vec<TensorId>,
        push: Vec<u32>,
        groups: Option<u64>,
        /// The shader variant's precision where it is not the output's (f32 partial results
        /// of an f16 computation).
        precision: Option<DType>,
        /// Specialization constants, by constant id.
        spec: Vec<u32>,
    },
    /// Benchmark probe: arithmetic peak (see `fma_peak.comp`).
    #[cfg(feature = "bench")]
    FmaProbe {
        groups: u32,
        iters: u32,
    },
}

impl Op {
    /// The tensors the op reads, in operand order (`Op::map_inputs` visits them).
    pub(crate) fn inputs(&self) -> Vec<TensorId> {
        let seen = std::cell::RefCell::new(Vec::new());
        self.clone().map_inputs(&|t| {
            seen.borrow_mut().push(t);
            t
        });
        seen.into_inner()
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub op: Op,
    pub out: TensorId,
}

/// What a storage (a device buffer's contents) is for.
#[derive(Debug, Clone)]
pub(crate) enum StorageKind {
    Input,
    Output,
    Const(ConstBytes),
    Temp,
}

/// A constant's bytes: its own, or a range of a buffer it shares with its owner (a model
/// file's weights, used in place rather than copied). Cloning shares either.
#[derive(Clone)]
pub(crate) enum ConstBytes {
    Own(Arc<Vec<u8>>),
    Shared(Arc<[u8]>, Range<usize>),
}

impl From<Vec<u8>> for ConstBytes {
    fn from(v: Vec<u8>) -> Self {
        ConstBytes::Own(Arc::new(v))
    }
}

impl std::ops::Deref for ConstBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            ConstBytes::Own(v) => v,
            ConstBytes::Shared(data, range) => &data[range.clone()],
        }
    }
}

impl fmt::Debug for ConstBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shared = matches!(self, ConstBytes::Shared(..));
        write!(
            f,
            "{} bytes{}",
            self.len(),
            if shared { ", shared" } else { "" }
        )
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Storage {
    pub kind: StorageKind,
    pub bytes: u64,
    /// The tensor that created it (for error messages).
    pub tensor: TensorId,
}

#[derive(Debug, Clone)]
pub(crate) struct TensorInfo {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub storage: usize,
}

impl TensorInfo {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// Builds a compute graph. Every op checks its operands at once and returns an error naming
/// the tensors and the numbers; [`GraphBuilder::build`] turns the graph into an executable
/// [`crate::Graph`] on a device.
#[derive(Clone, Default)]
pub struct GraphBuilder {
    pub(crate) tensors: Vec<TensorInfo>,
    pub(crate) storages: Vec<Storage>,
    pub(crate) nodes: Vec<Node>,
    pub(crate) inputs: Vec<TensorId>,
    pub(crate) outputs: Vec<TensorId>,
    /// Floats made from nothing (`full_like`, masks) are f16 rather than f32.
    pub(crate) f16_floats: bool,
}

impl fmt::Debug for GraphBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GraphBuilder")
            .field("tensors", &self.tensors.len())
            .field("nodes", &self.nodes.len())
            .field("inputs", &self.inputs.len())
            .field("outputs", &self.outputs.len())
            .finish()
    }
}

/// The output of a kernel node ([`GraphBuilder::kernel_node_into`]) and its dispatch.
#[derive(Debug, Clone)]
pub(crate) struct KernelOut {
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// A storage written in place (state, as a KV cache's rows): the output is then a view of
    /// it, of `shape`.
    pub storage: Option<usize>,
    /// Work groups to dispatch (else one invocation per element of `shape`).
    pub groups: Option<u64>,
    /// The shader variant's precision where it is not `dtype`'s.
    pub precision: Option<DType>,
    /// The shader's specialization constants, by constant id (empty: its defaults).
    pub spec: Vec<u32>,
}

/// Bytes of a tensor's storage: whole vec4s, so vectorised shaders stay in bounds.
/// Saturates where the shape's size does not fit 64 bits (nodes refuse such tensors: see
/// [`GraphBuilder::node`]).
pub(crate) fn storage_bytes(dtype: DType, shape: &[usize]) -> u64 {
    let n = shape.iter().fold(1u64, |n, &d| n.saturating_mul(d as u64));
    n.saturating_mul(dtype.size() as u64)
        .div_ceil(16)
        .saturating_mul(16)
}

/// Whether a tensor of `shape` holds at most 2^32 elements, the most a graph's tensor may.
fn within_elements(shape: &[usize]) -> bool {
    shape
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d as u64))
        .is_some_and(|n| n <= u64::from(u32::MAX))
}

pub(crate) fn shape_err(op: &'static str, detail: String) -> Error {
    Error::Shape { op, detail }
}

/// Resolves a possibly negative dim against `rank`.
pub(crate) fn norm_dim(op: &'static str, name: &str, dim: isize, rank: usize) -> Result<usize> {
    let r = rank as isize;
    let d = if dim < 0 { dim + r } else { dim };
    if d < 0 || d >= r.max(1) {
        return Err(shape_err(
            op,
            format!("dim {dim} is out of range for '{name}' of rank {rank}"),
        ));
    }
    Ok(d as usize)
}

impl GraphBuilder {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the float dtype of tensors an op makes from nothing (a fill, a mask): f32 (the
    /// default) or f16, as the front end's graph computes.
    pub fn set_float(&mut self, dtype: DType) {
        self.f16_floats = dtype == DType::F16;
    }

    /// How many nodes (ops) the graph holds.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The float dtype of tensors an op makes from nothing.
    pub fn float(&self) -> DType {
        if self.f16_floats {
            DType::F16
        } else {
            DType::F32
        }
    }

    pub(crate) fn info(&self, op: &'static str, t: TensorId) -> Result<&TensorInfo> {
        self.tensors.get(t.0).ok_or(Error::UnknownTensor {
            op,
            id: t.0,
            count: self.tensors.len(),
        })
    }

    /// Whether an op of the graph computes in f16 (runs an f16 shader variant). Casts and
    /// f16 inputs and outputs alone do not: they move packed 32-bit words.
    pub fn uses_f16(&self) -> bool {
        self.nodes
            .iter()
            .any(|n| !matches!(n.op, Op::Cast { .. }) && self.tensors[n.out.0].dtype == DType::F16)
    }

    /// What this graph needs from a device: [`crate::f16_requirements`] when it
    /// [uses f16](Self::uses_f16), else [`crate::requirements`]; with fp16 GEMMs also,
    /// optionally, [`crate::COOPERATIVE_FEATURES`] (without them the plain kernels run). An
    /// fp32 graph that [reads packed 4-bit weights](Self::reads_packed_four_bit_weights) asks,
    /// optionally, for [`crate::F16_FEATURES`] too: with both, its products of more than four
    /// rows multiply in fp16 (`packed.rs`); without, in fp32.
    pub fn requirements(&self) -> vk_core::Requirements {
        let base = if self.uses_f16() {
            crate::f16_requirements()
        } else {
            crate::requirements()
        };
        if self.has_f16_gemm() {
            base.optional_features(crate::COOPERATIVE_FEATURES)
        } else if self.reads_packed_four_bit_weights() {
            base.optional_features(crate::COOPERATIVE_FEATURES | crate::F16_FEATURES)
        } else {
            base
        }
    }

    /// A tensor's name.
    pub fn name(&self, t: TensorId) -> Option<&str> {
        self.tensors.get(t.0).map(|i| i.name.as_str())
    }

    /// A tensor's shape.
    pub fn shape(&self, t: TensorId) -> Option<&[usize]> {
        self.tensors.get(t.0).map(|i| i.shape.as_slice())
    }

    /// A tensor's dtype.
    pub fn dtype(&self, t: TensorId) -> Option<DType> {
        self.tensors.get(t.0).map(|i| i.dtype)
    }

    /// Renames a tensor (names appear in errors).
    pub fn set_name(&mut self, t: TensorId, name: impl Into<String>) -> Result<()> {
        let count = self.tensors.len();
        let info = self.tensors.get_mut(t.0).ok_or(Error::UnknownTensor {
            op: "set_name",
            id: t.0,
            count,
        })?;
        info.name = name.into();
        Ok(())
    }

    pub(crate) fn new_storage(&mut self, kind: StorageKind, bytes: u64, tensor: TensorId) -> usize {
        self.storages.push(Storage {
            kind,
            bytes,
            tensor,
        });
        self.storages.len() - 1
    }

    /// A new tensor on a new storage of `kind`, or (with `Some(existing)`) a view of an
    /// existing storage (then `kind` is ignored).
    pub(crate) fn push_tensor(
        &mut self,
        name: String,
        dtype: DType,
        shape: Vec<usize>,
        storage: Option<(StorageKind, Option<usize>)>,
    ) -> TensorId {
        let id = TensorId(self.tensors.len());
        let bytes = storage_bytes(dtype, &shape);
        let storage = match storage {
            Some((_, Some(existing))) => existing,
            Some((kind, None)) => self.new_storage(kind, bytes, id),
            None => self.new_storage(StorageKind::Temp, bytes, id),
        };
        self.tensors.push(TensorInfo {
            name,
            dtype,
            shape,
            storage,
        });
        id
    }

    pub(crate) fn check_shape(op: &'static str, name: &str, shape: &[usize]) -> Result<()> {
        if shape.is_empty() || shape.contains(&0) {
            return Err(shape_err(
                op,
                format!("tensor '{name}' has shape {shape:?}: rank 1 or more and no zero dims"),
            ));
        }
        if !within_elements(shape) {
            return Err(shape_err(
                op,
                format!("tensor '{name}' of shape {shape:?} has more than 2^32 elements"),
            ));
        }
        Ok(())
    }

    /// Declares a graph input; inputs are given to `execute` in declaration order.
    pub fn input(&mut self, name: &str, dtype: DType, shape: &[usize]) -> Result<TensorId> {
        Self::check_shape("input", name, shape)?;
        let id = self.push_tensor(
            name.to_string(),
            dtype,
            shape.to_vec(),
            Some((StorageKind::Input, None)),
        );
        self.inputs.push(id);
        Ok(id)
    }

    /// A constant (weights), uploaded to the device once at build.
    pub fn constant(&mut self, name: &str, tensor: HostTensor) -> Result<TensorId> {
        Self::check_shape("constant", name, tensor.shape())?;
        let dtype = tensor.dtype();
        let shape = tensor.shape().to_vec();
        Ok(self.push_tensor(
            name.to_string(),
            dtype,
            shape,
            Some((StorageKind::Const(tensor.into_bytes().into()), None)),
        ))
    }

    /// A constant of `dtype` and `shape` whose bytes are `range` of `data`, used where they
    /// are rather than copied (a model file's weights: the graph keeps `data` alive).
    pub fn constant_shared(
        &mut self,
        name: &str,
        dtype: DType,
        shape: &[usize],
        data: Arc<[u8]>,
        range: Range<usize>,
    ) -> Result<TensorId> {
        Self::check_shape("constant", name, shape)?;
        let want = shape
            .iter()
            .try_fold(dtype.size(), |n, &d| n.checked_mul(d));
        if range.end > data.len() || range.start > range.end || Some(range.len()) != want {
            return Err(shape_err(
                "constant",
                format!(
                    "constant '{name}': bytes {range:?} of a {}-byte buffer, but {dtype:?} {shape:?} \
                     takes {}",
                    data.len(),
                    want.map_or_else(|| "more bytes than there are".to_owned(), |w| w.to_string())
                ),
            ));
        }
        Ok(self.push_tensor(
            name.to_string(),
            dtype,
            shape.to_vec(),
            Some((StorageKind::Const(ConstBytes::Shared(data, range)), None)),
        ))
    }

    /// An f32 constant.
    pub fn constant_f32(
        &mut self,
        name: &str,
        shape: &[usize],
        values: &[f32],
    ) -> Result<TensorId> {
        let t = HostTensor::from_f32(shape.to_vec(), values)
            .map_err(|e| shape_err("constant", format!("constant '{name}': {e}")))?;
        self.constant(name, t)
    }

    /// The values of constant `t` (or of a view of a constant) as f32, where it is f32 or f16:
    /// what an op folds at build.
    pub(crate) fn constant_values(&self, t: TensorId) -> Option<Vec<f32>> {
        let info = self.tensors.get(t.0)?;
        let StorageKind::Const(bytes) = &self.storages[info.storage].kind else {
            return None;
        };
        let v: Vec<f32> = match info.dtype {
            DType::F32 => bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            DType::F16 => bytes
                .chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            DType::I8 => bytes.iter().map(|&b| f32::from(b as i8)).collect(),
            DType::U8 => bytes.iter().map(|&b| f32::from(b)).collect(),
            DType::I32 => bytes
                .chunks_exact(4)
                .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32)
                .collect(),
            _ => return None,
        };
        (v.len() >= info.numel()).then(|| v[..info.numel()].to_vec())
    }

    /// The bytes of constant `t` (or of a view of one), as stored.
    pub(crate) fn constant_bytes(&self, t: TensorId) -> Option<ConstBytes> {
        let info = self.tensors.get(t.0)?;
        match &self.storages[info.storage].kind {
            StorageKind::Const(bytes) => Some(bytes.clone()),
            _ => None,
        }
    }

    /// An f16 constant from f32 values, each rounded to the nearest f16.
    pub fn constant_f16(
        &mut self,
        name: &str,
        shape: &[usize],
        values: &[f32],
    ) -> Result<TensorId> {
        let bytes = values
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
            .collect();
        let t = HostTensor::new(DType::F16, shape.to_vec(), bytes)
            .map_err(|e| shape_err("constant", format!("constant '{name}': {e}")))?;
        self.constant(name, t)
    }

    /// Marks `t` as a graph output; outputs are returned by `execute` in this order.
    pub fn output(&mut self, t: TensorId) -> Result<()> {
        let info = self.info("output", t)?.clone();
        let index = self.outputs.len();
        let needs_copy = !matches!(self.storages[info.storage].kind, StorageKind::Temp);
        let t = if needs_copy {
            let op = match info.dtype {
                DType::F32 | DType::I32 => Op::Permute {
                    x: t,
                    perm: (0..info.shape.len()).collect(),
                },
                DType::F16 | DType::I8 => Op::Cast {
                    x: t,
                    to: info.dtype,
                },
                other => {
                    return Err(Error::DType {
                        op: "output",
                        tensor: info.name.clone(),
                        actual: other,
                        expected: "f32, f16, i32 or i8",
                    });
                }
            };
            let out = self.push_tensor(
                format!("{}_out{index}", info.name),
                info.dtype,
                info.shape.clone(),
                None,
            );
            self.nodes.push(Node { op, out });
            out
        } else {
            t
        };
        let storage = self.tensors[t.0].storage;
        self.storages[storage].kind = StorageKind::Output;
        self.outputs.push(t);
        Ok(())
    }

    /// A node of an op family's own `kernel` (the form ops added in `ops/` take): it reads
    /// `inputs`, writes a new tensor of `dtype` and `shape` with one invocation per element,
    /// and gets `push` as its push constants (a `#[repr(C)]` struct of 32-bit fields, as the
    /// shader's push-constant block declares them).
    pub(crate) fn kernel_node<P: bytemuck::NoUninit>(
        &mut self,
        name: &'static str,
        kernel: Kernel,
        inputs: &[TensorId],
        (dtype, shape): (DType, Vec<usize>),
        push: &P,
    ) -> Result<TensorId> {
        let out = KernelOut {
            dtype,
            shape,
            storage: None,
            groups: None,
            precision: None,
            spec: vec![],
        };
        self.kernel_node_into(name, kernel, inputs, out, push)
    }

    /// [`GraphBuilder::kernel_node`] with the output and the dispatch of `out`.
    pub(crate) fn kernel_node_into<P: bytemuck::NoUninit>(
        &mut self,
        name: &'static str,
        kernel: Kernel,
        inputs: &[TensorId],
        out: KernelOut,
        push: &P,
    ) -> Result<TensorId> {
        let (dtype, shape, storage) = (out.dtype, out.shape.clone(), out.storage);
        for &t in inputs {
            self.info(name, t)?;
        }
        if !within_elements(&shape) {
            return Err(shape_err(
                name,
                format!("a result of shape {shape:?} would hold more than 2^32 elements"),
            ));
        }
        let bytes = bytemuck::bytes_of(push);
        if bytes.len() % 4 != 0 {
            return Err(Error::Graph(format!(
                "internal: {name}'s push constants are {} bytes, not whole words",
                bytes.len()
            )));
        }
        let push = bytes
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        let op = Op::Kernel {
            name,
            kernel,
            inputs: inputs.to_vec(),
            push,
            groups: out.groups,
            precision: out.precision,
            spec: out.spec,
        };
        let Some(storage) = storage else {
            return self.node(op, name, dtype, shape);
        };
        let label = format!("{name}_{}", self.tensors.len());
        let out = self.push_tensor(
            label,
            dtype,
            shape,
            Some((StorageKind::Temp, Some(storage))),
        );
        self.nodes.push(Node { op, out });
        Ok(out)
    }

    /// A node of `op` writing a new tensor of `shape`: an error naming the op where that
    /// tensor would hold more than 2^32 elements (sizes from a malformed model's attributes).
    pub(crate) fn node(
        &mut self,
        op: Op,
        name: &str,
        dtype: DType,
        shape: Vec<usize>,
    ) -> Result<TensorId> {
        let label = format!("{name}_{}", self.tensors.len());
        if !within_elements(&shape) {
            return Err(Error::Shape {
                op: "graph",
                detail: format!("'{label}' of shape {shape:?} would hold more than 2^32 elements"),
            });
        }
        let out = self.push_tensor(label, dtype, shape, None);
        self.nodes.push(Node { op, out });
        Ok(out)
    }

    /// A float operand: f32 or f16 (the op then runs in that precision).
    pub(crate) fn float_operand(&self, op: &'static str, t: TensorId) -> Result<TensorInfo> {
        let info = self.info(op, t)?;
        if !matches!(info.dtype, DType::F32 | DType::F16) {
            return Err(Error::DType {
                op,
                tensor: info.name.clone(),
                actual: info.dtype,
                expected: "f32 or f16",
            });
        }
        Ok(info.clone())
    }

    /// Whether a matmul, bmm, linear or one-group conv2d works on f16 tensors (one that may
    /// run on cooperative matrices).
    pub(crate) fn has_f16_gemm(&self) -> bool {
        self.nodes.iter().any(|n| {
            let gemm = match &n.op {
                Op::Matmul { .. } => true,
                Op::Conv { p, .. } => p.groups == 1,
                _ => false,
            };
            gemm && self.tensors[n.out.0].dtype == DType::F16
        })
    }

    /// Whether an fp16 `attend.comp` node (a fused attention) is in the graph: it may run on
    /// cooperative matrices (`coop_attention.rs`).
    pub(crate) fn has_f16_attention(&self) -> bool {
        self.nodes.iter().any(|n| {
            matches!(
                n.op,
                Op::Kernel {
                    kernel: crate::kernels::Kernel::Attend,
                    ..
                }
            ) && self.tensors[n.out.0].dtype == DType::F16
        })
    }

    /// Another float operand of an op whose first float operand is `first`: the same dtype
    /// (all float operands of one op share it).
    pub(crate) fn same_float(
        &self,
        op: &'static str,
        t: TensorId,
        first: &TensorInfo,
    ) -> Result<TensorInfo> {
        self.typed_operand(op, t, first.dtype)
    }

    pub(crate) fn word_operand(&self, op: &'static str, t: TensorId) -> Result<TensorInfo> {
        let info = self.info(op, t)?;
        if info.dtype.size() != 4 && info.dtype != DType::F16 {
            return Err(Error::DType {
                op,
                tensor: info.name.clone(),
                actual: info.dtype,
                expected: "f32, i32 or f16",
            });
        }
        Ok(info.clone())
    }

    pub(crate) fn typed_operand(
        &self,
        op: &'static str,
        t: TensorId,
        dtype: DType,
    ) -> Result<TensorInfo> {
        let info = self.info(op, t)?;
        if info.dtype != dtype {
            return Err(Error::DType {
                op,
                tensor: info.name.clone(),
                actual: info.dtype,
                expected: dtype.name(),
            });
        }
        Ok(info.clone())
    }

    /// The arithmetic-peak probe of the benchmarks: `groups` work groups of 256 threads, each
    /// running `iters` rounds of 16 FMAs; one f32 output per thread.
    #[cfg(feature = "bench")]
    pub(crate) fn fma_probe(&mut self, groups: u32, iters: u32) -> Result<TensorId> {
        self.node(
            Op::FmaProbe { groups, iters },
            "fma_probe",
            DType::F32,
            vec![groups as usize * 256],
        )
    }
}

pub(crate) fn check_zero_point(op: &'static str, name: &str, zp: i32) -> Result<()> {
    if !(-128..=127).contains(&zp) {
        return Err(shape_err(op, format!("{name} {zp} is outside [-128, 127]")));
    }
    Ok(())
}

pub(crate) fn check_bias(op: &'static str, bi: &TensorInfo, cout: usize) -> Result<()> {
    if bi.shape != [cout] {
        return Err(shape_err(
            op,
            format!(
                "bias '{}' has shape {:?}, expected [{cout}]",
                bi.name, bi.shape
            ),
        ));
    }
    Ok(())
}

/// Output shape of a conv2d, checking ranks, groups, stride, dilation and that the kernel fits.
pub(crate) fn conv_shape(
    op: &'static str,
    xi: &TensorInfo,
    wi: &TensorInfo,
    p: &Conv2d,
) -> Result<Vec<usize>> {
    if xi.shape.len() != 4 || wi.shape.len() != 4 {
        return Err(shape_err(
            op,
            format!(
                "input '{}' {:?} and weight '{}' {:?} must both have rank 4",
                xi.name, xi.shape, wi.name, wi.shape
            ),
        ));
    }
    let (n, cin, h, wd) = (xi.shape[0], xi.shape[1], xi.shape[2], xi.shape[3]);
    let (cout, cin_g, kh, kw) = (wi.shape[0], wi.shape[1], wi.shape[2], wi.shape[3]);
    let g = p.groups;
    if g == 0 || cin % g != 0 || cout % g != 0 || cin / g != cin_g {
        return Err(shape_err(
            op,
            format!(
                "groups {g}: input '{}' has {cin} channels and weight '{}' {:?} needs \
                 c_in / groups = {cin_g} and c_out = {cout} divisible by groups",
                xi.name, wi.name, wi.shape
            ),
        ));
    }
    if p.stride.contains(&0) || p.dilation.contains(&0) {
        return Err(shape_err(
            op,
            format!(
                "stride {:?} and dilation {:?} must be >= 1",
                p.stride, p.dilation
            ),
        ));
    }
    let mut o = [0usize; 2];
    for i in 0..2 {
        let size = [h, wd][i].saturating_add(p.padding[i].saturating_mul(2));
        let span = p.dilation[i]
            .saturating_mul([kh, kw][i].saturating_sub(1))
            .saturating_add(1);
        if span > size {
            return Err(shape_err(
                op,
                format!(
                    "kernel {kh}x{kw} (dilation {:?}) spans {span}, more than the padded \
                     input '{}' {:?} (padding {:?})",
                    p.dilation, xi.name, xi.shape, p.padding
                ),
            ));
        }
        o[i] = (size - span) / p.stride[i] + 1;
    }
    Ok(vec![n, cout, o[0], o[1]])
}

/// The cast shader's code of a dtype.
pub(crate) fn cast_code(d: DType) -> Option<u32> {
    match d {
        DType::F32 => Some(0),
        DType::F16 => Some(1),
        DType::I32 => Some(2),
        DType::I8 => Some(3),
        DType::I64 => Some(4),
        DType::I16 => Some(5),
        _ => None,
    }
}

/// PyTorch's pooling output size, or `None` when the window does not fit.
pub(crate) fn pool_out(size: usize, k: usize, s: usize, pad: usize, ceil: bool) -> Option<usize> {
    let padded = size + 2 * pad;
    if padded < k {
        return None;
    }
    let mut o = (padded - k + if ceil { s - 1 } else { 0 }) / s + 1;
    // The last window must start inside the input or its left padding.
    if ceil && (o - 1) * s >= size + pad {
        o -= 1;
    }
    Some(o)
}

pub(crate) fn broadcast_shape(
    op: &'static str,
    a: &TensorInfo,
    b: &TensorInfo,
) -> Result<Vec<usize>> {
    let r = a.shape.len().max(b.shape.len());
    let mut out = vec![0; r];
    for (i, slot) in out.iter_mut().enumerate() {
        let da = if i + a.shape.len() >= r {
            a.shape[i + a.shape.len() - r]
        } else {
            1
        };
        let db = if i + b.shape.len() >= r {
            b.shape[i + b.shape.len() - r]
        } else {
            1
        };
        *slot = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(shape_err(
                op,
                format!(
                    "shapes of '{}' {:?} and '{}' {:?} do not broadcast: dim {i} of the result \
                     is {da} vs {db}",
                    a.name, a.shape, b.name, b.shape
                ),
            ));
        };
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_constants_are_ranges_checked_against_their_shape() {
        let data: Arc<[u8]> = (0u8..64).collect::<Vec<_>>().into();
        let mut g = GraphBuilder::new();
        let c = g
            .constant_shared("w", DType::F32, &[2, 4], data.clone(), 16..48)
            .unwrap();
        let st = &g.storages[g.tensors[c.0].storage];
        let StorageKind::Const(bytes) = &st.kind else {
            panic!("{:?}", st.kind)
        };
        assert_eq!(&bytes[..], &data[16..48]);
        assert!(matches!(bytes, ConstBytes::Shared(..)), "not copied");
        for range in [16..44, 40..72] {
            let e = g
                .constant_shared("bad", DType::F32, &[2, 4], data.clone(), range)
                .unwrap_err();
            assert!(e.to_string().contains("'bad'"), "{e}");
        }
    }
}
