//! The graph builder: tensors, constants, inputs, outputs and ops, validated as they are added.

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
}

impl BinaryOp {
    pub(crate) fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
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

    fn check(self, op: &'static str) -> Result<()> {
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
    },
    /// `a [batch.., m, k] x b` where `b` is `[batch.., k, n]`, or `[n, k]` when `linear`.
    Matmul {
        a: TensorId,
        b: TensorId,
        bias: Option<TensorId>,
        linear: bool,
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
    /// then the output; one invocation per output element in a grid-stride loop; push
    /// constants from a `#[repr(C)]` struct.
    Kernel {
        name: &'static str,
        kernel: Kernel,
        inputs: Vec<TensorId>,
        push: Vec<u32>,
    },
    /// Benchmark probe: arithmetic peak (see `fma_peak.comp`).
    #[cfg(feature = "bench")]
    FmaProbe {
        groups: u32,
        iters: u32,
    },
}

impl Op {
    /// The tensors the op reads.
    pub(crate) fn inputs(&self) -> Vec<TensorId> {
        match self {
            Op::Unary { x, .. }
            | Op::Softmax { x, .. }
            | Op::Pool { x, .. }
            | Op::Reduce { x, .. }
            | Op::Permute { x, .. }
            | Op::Slice { x, .. }
            | Op::Cast { x, .. } => vec![*x],
            Op::Binary { a, b, .. } | Op::QAdd { a, b, .. } => vec![*a, *b],
            Op::Where { cond, a, b } => vec![*cond, *a, *b],
            Op::Gather { table, ids } => vec![*table, *ids],
            Op::Conv { x, w, bias, .. } => {
                [Some(*x), Some(*w), *bias].into_iter().flatten().collect()
            }
            Op::Matmul { a, b, bias, .. } => {
                [Some(*a), Some(*b), *bias].into_iter().flatten().collect()
            }
            Op::LayerNorm {
                x, weight, bias, ..
            } => [Some(*x), *weight, *bias].into_iter().flatten().collect(),
            Op::Cat { xs, .. } | Op::Kernel { inputs: xs, .. } => xs.clone(),
            Op::QConv {
                x,
                w,
                bias,
                mult,
                shift,
                ..
            } => [Some(*x), Some(*w), *bias, Some(*mult), Some(*shift)]
                .into_iter()
                .flatten()
                .collect(),
            #[cfg(feature = "bench")]
            Op::FmaProbe { .. } => vec![],
        }
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

/// Bytes of a tensor's storage: whole vec4s, so vectorised shaders stay in bounds.
pub(crate) fn storage_bytes(dtype: DType, shape: &[usize]) -> u64 {
    let n: u64 = shape.iter().map(|&d| d as u64).product();
    (n * dtype.size() as u64).div_ceil(16) * 16
}

fn shape_err(op: &'static str, detail: String) -> Error {
    Error::Shape { op, detail }
}

/// Resolves a possibly negative dim against `rank`.
fn norm_dim(op: &'static str, name: &str, dim: isize, rank: usize) -> Result<usize> {
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
    /// optionally, [`crate::COOPERATIVE_FEATURES`] (without them the plain kernels run).
    pub fn requirements(&self) -> vk_core::Requirements {
        let base = if self.uses_f16() {
            crate::f16_requirements()
        } else {
            crate::requirements()
        };
        if self.has_f16_gemm() {
            base.optional_features(crate::COOPERATIVE_FEATURES)
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

    fn new_storage(&mut self, kind: StorageKind, bytes: u64, tensor: TensorId) -> usize {
        self.storages.push(Storage {
            kind,
            bytes,
            tensor,
        });
        self.storages.len() - 1
    }

    /// A new tensor on a new storage of `kind`, or (with `Some(existing)`) a view of an
    /// existing storage (then `kind` is ignored).
    fn push_tensor(
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

    fn check_shape(op: &'static str, name: &str, shape: &[usize]) -> Result<()> {
        if shape.is_empty() || shape.contains(&0) {
            return Err(shape_err(
                op,
                format!("tensor '{name}' has shape {shape:?}: rank 1 or more and no zero dims"),
            ));
        }
        if shape
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d as u64))
            .is_none_or(|n| n > u64::from(u32::MAX))
        {
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
        for &t in inputs {
            self.info(name, t)?;
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
        };
        Ok(self.node(op, name, dtype, shape))
    }

    fn node(&mut self, op: Op, name: &str, dtype: DType, shape: Vec<usize>) -> TensorId {
        let label = format!("{name}_{}", self.tensors.len());
        let out = self.push_tensor(label, dtype, shape, None);
        self.nodes.push(Node { op, out });
        out
    }

    /// A float operand: f32 or f16 (the op then runs in that precision).
    fn float_operand(&self, op: &'static str, t: TensorId) -> Result<TensorInfo> {
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

    /// Another float operand of an op whose first float operand is `first`: the same dtype
    /// (all float operands of one op share it).
    fn same_float(&self, op: &'static str, t: TensorId, first: &TensorInfo) -> Result<TensorInfo> {
        self.typed_operand(op, t, first.dtype)
    }

    fn word_operand(&self, op: &'static str, t: TensorId) -> Result<TensorInfo> {
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

    // ----- elementwise -----

    /// A unary elementwise op.
    pub fn unary(&mut self, op: UnaryOp, x: TensorId) -> Result<TensorId> {
        let xi = self.float_operand(op.name(), x)?;
        if let UnaryOp::Clamp(lo, hi) = op {
            if lo > hi || lo.is_nan() || hi.is_nan() {
                return Err(shape_err(
                    "clamp",
                    format!("min {lo} must not exceed max {hi} (tensor '{}')", xi.name),
                ));
            }
        }
        Ok(self.node(Op::Unary { op, x }, op.name(), xi.dtype, xi.shape))
    }

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

    /// A binary elementwise op with PyTorch broadcasting.
    pub fn binary(&mut self, op: BinaryOp, a: TensorId, b: TensorId) -> Result<TensorId> {
        let name = op.name();
        let ai = self.float_operand(name, a)?;
        let bi = self.same_float(name, b, &ai)?;
        let shape = broadcast_shape(name, &ai, &bi)?;
        Ok(self.node(Op::Binary { op, a, b }, name, ai.dtype, shape))
    }

    /// `a + b`, broadcasting.
    pub fn add(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(BinaryOp::Add, a, b)
    }
    /// `a - b`, broadcasting.
    pub fn sub(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(BinaryOp::Sub, a, b)
    }
    /// `a * b`, broadcasting.
    pub fn mul(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(BinaryOp::Mul, a, b)
    }
    /// `a / b`, broadcasting.
    pub fn div(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(BinaryOp::Div, a, b)
    }
    /// `x + s`.
    pub fn add_scalar(&mut self, x: TensorId, s: f32) -> Result<TensorId> {
        self.unary(UnaryOp::AddScalar(s), x)
    }
    /// `x - s`.
    pub fn sub_scalar(&mut self, x: TensorId, s: f32) -> Result<TensorId> {
        self.unary(UnaryOp::AddScalar(-s), x)
    }
    /// `s - x`.
    pub fn rsub_scalar(&mut self, x: TensorId, s: f32) -> Result<TensorId> {
        self.unary(UnaryOp::RSubScalar(s), x)
    }
    /// `x * s`.
    pub fn mul_scalar(&mut self, x: TensorId, s: f32) -> Result<TensorId> {
        self.unary(UnaryOp::MulScalar(s), x)
    }
    /// `x / s`.
    pub fn div_scalar(&mut self, x: TensorId, s: f32) -> Result<TensorId> {
        self.unary(UnaryOp::DivScalar(s), x)
    }
    /// `s / x`.
    pub fn rdiv_scalar(&mut self, x: TensorId, s: f32) -> Result<TensorId> {
        self.unary(UnaryOp::RDivScalar(s), x)
    }

    // ----- normalisation and reductions -----

    fn softmax_impl(&mut self, x: TensorId, dim: isize, log: bool) -> Result<TensorId> {
        let op = if log { "log_softmax" } else { "softmax" };
        let xi = self.float_operand(op, x)?;
        let dim = norm_dim(op, &xi.name, dim, xi.shape.len())?;
        Ok(self.node(Op::Softmax { x, dim, log }, op, xi.dtype, xi.shape))
    }

    /// Softmax over `dim` (negative counts from the end).
    pub fn softmax(&mut self, x: TensorId, dim: isize) -> Result<TensorId> {
        self.softmax_impl(x, dim, false)
    }

    /// Log-softmax over `dim`.
    pub fn log_softmax(&mut self, x: TensorId, dim: isize) -> Result<TensorId> {
        self.softmax_impl(x, dim, true)
    }

    fn reduce_impl(
        &mut self,
        op: &'static str,
        x: TensorId,
        dims: &[isize],
        keepdim: bool,
        mean: bool,
    ) -> Result<TensorId> {
        let xi = self.float_operand(op, x)?;
        let rank = xi.shape.len();
        let mut ds = Vec::new();
        for &d in dims {
            let d = norm_dim(op, &xi.name, d, rank)?;
            if ds.contains(&d) {
                return Err(shape_err(
                    op,
                    format!("dim {d} appears twice in {dims:?} for '{}'", xi.name),
                ));
            }
            ds.push(d);
        }
        if ds.is_empty() {
            ds = (0..rank).collect();
        }
        ds.sort_unstable();
        let mut shape: Vec<usize> = Vec::new();
        for (i, &s) in xi.shape.iter().enumerate() {
            if ds.contains(&i) {
                if keepdim {
                    shape.push(1);
                }
            } else {
                shape.push(s);
            }
        }
        if shape.is_empty() {
            shape.push(1);
        }
        Ok(self.node(Op::Reduce { x, dims: ds, mean }, op, xi.dtype, shape))
    }

    /// Sum over `dims` (all dims when empty).
    pub fn sum(&mut self, x: TensorId, dims: &[isize], keepdim: bool) -> Result<TensorId> {
        self.reduce_impl("sum", x, dims, keepdim, false)
    }

    /// Mean over `dims` (all dims when empty).
    pub fn mean(&mut self, x: TensorId, dims: &[isize], keepdim: bool) -> Result<TensorId> {
        self.reduce_impl("mean", x, dims, keepdim, true)
    }

    /// `layer_norm` over the trailing `normalized_shape`, with optional elementwise weight and
    /// bias of that shape.
    pub fn layer_norm(
        &mut self,
        x: TensorId,
        normalized_shape: &[usize],
        weight: Option<TensorId>,
        bias: Option<TensorId>,
        eps: f32,
    ) -> Result<TensorId> {
        const OP: &str = "layer_norm";
        let xi = self.float_operand(OP, x)?;
        let k = normalized_shape.len();
        if k == 0 || k > xi.shape.len() || xi.shape[xi.shape.len() - k..] != *normalized_shape {
            return Err(shape_err(
                OP,
                format!(
                    "normalized_shape {normalized_shape:?} is not the trailing dims of '{}' {:?}",
                    xi.name, xi.shape
                ),
            ));
        }
        for p in [weight, bias].into_iter().flatten() {
            let pi = self.same_float(OP, p, &xi)?;
            if pi.shape != normalized_shape {
                return Err(shape_err(
                    OP,
                    format!(
                        "'{}' has shape {:?}, expected normalized_shape {normalized_shape:?}",
                        pi.name, pi.shape
                    ),
                ));
            }
        }
        let d = normalized_shape.iter().product();
        Ok(self.node(
            Op::LayerNorm {
                x,
                weight,
                bias,
                d,
                eps,
            },
            OP,
            xi.dtype,
            xi.shape,
        ))
    }

    // ----- pooling and convolution -----

    fn pool_impl(&mut self, x: TensorId, p: Pool2d, max: bool) -> Result<TensorId> {
        let op = if max { "max_pool2d" } else { "avg_pool2d" };
        let xi = self.float_operand(op, x)?;
        let r = xi.shape.len();
        if r < 3 {
            return Err(shape_err(
                op,
                format!(
                    "'{}' {:?} needs rank 3 or 4 ([c, h, w] or [n, c, h, w])",
                    xi.name, xi.shape
                ),
            ));
        }
        let (h, w) = (xi.shape[r - 2], xi.shape[r - 1]);
        let mut out = xi.shape.clone();
        for i in 0..2 {
            let (k, s, pad) = (p.kernel[i], p.stride[i], p.padding[i]);
            if k == 0 || s == 0 || pad * 2 > k {
                return Err(shape_err(
                    op,
                    format!(
                        "kernel {:?}, stride {:?}, padding {:?}: need kernel and stride >= 1 \
                         and padding at most half the kernel",
                        p.kernel, p.stride, p.padding
                    ),
                ));
            }
            let size = [h, w][i];
            let o = pool_out(size, k, s, pad, p.ceil_mode).ok_or_else(|| {
                shape_err(
                    op,
                    format!(
                        "'{}' {:?}: kernel {k} with padding {pad} does not fit a dim of {size}",
                        xi.name, xi.shape
                    ),
                )
            })?;
            out[r - 2 + i] = o;
        }
        Ok(self.node(Op::Pool { x, max, p }, op, xi.dtype, out))
    }

    /// Average pooling over the last two dims.
    pub fn avg_pool2d(&mut self, x: TensorId, p: Pool2d) -> Result<TensorId> {
        self.pool_impl(x, p, false)
    }

    /// Max pooling over the last two dims.
    pub fn max_pool2d(&mut self, x: TensorId, p: Pool2d) -> Result<TensorId> {
        self.pool_impl(x, p, true)
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
        Ok(self.node(Op::Conv { x, w, bias, p }, OP, xi.dtype, shape))
    }

    fn typed_operand(&self, op: &'static str, t: TensorId, dtype: DType) -> Result<TensorInfo> {
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

    // ----- matrix products -----

    /// `x [.., k] @ w[n, k]^T + bias[n]` (PyTorch `linear`). Constant weights are transposed
    /// once at build.
    pub fn linear(&mut self, x: TensorId, w: TensorId, bias: Option<TensorId>) -> Result<TensorId> {
        const OP: &str = "linear";
        let xi = self.float_operand(OP, x)?;
        let wi = self.same_float(OP, w, &xi)?;
        let k = *xi.shape.last().unwrap_or(&0);
        if wi.shape.len() != 2 || wi.shape[1] != k {
            return Err(shape_err(
                OP,
                format!(
                    "weight '{}' {:?} must be [out_features, {k}] for input '{}' {:?}",
                    wi.name, wi.shape, xi.name, xi.shape
                ),
            ));
        }
        let n = wi.shape[0];
        if let Some(b) = bias {
            let bi = self.same_float(OP, b, &xi)?;
            if bi.shape != [n] {
                return Err(shape_err(
                    OP,
                    format!(
                        "bias '{}' has shape {:?}, expected [{n}]",
                        bi.name, bi.shape
                    ),
                ));
            }
        }
        let mut shape = xi.shape.clone();
        if let Some(last) = shape.last_mut() {
            *last = n;
        }
        Ok(self.node(
            Op::Matmul {
                a: x,
                b: w,
                bias,
                linear: true,
            },
            OP,
            xi.dtype,
            shape,
        ))
    }

    /// `a [.., m, k] @ b [.., k, n]`; batch dims must be equal, or one side's all 1.
    pub fn matmul(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.matmul_impl("matmul", a, b)
    }

    /// `a [b, m, k] @ b [b, k, n]`.
    pub fn bmm(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        const OP: &str = "bmm";
        let ai = self.float_operand(OP, a)?;
        let bi = self.same_float(OP, b, &ai)?;
        if ai.shape.len() != 3 || bi.shape.len() != 3 || ai.shape[0] != bi.shape[0] {
            return Err(shape_err(
                OP,
                format!(
                    "'{}' {:?} and '{}' {:?} must both be rank 3 with the same batch",
                    ai.name, ai.shape, bi.name, bi.shape
                ),
            ));
        }
        self.matmul_impl(OP, a, b)
    }

    fn matmul_impl(&mut self, op: &'static str, a: TensorId, b: TensorId) -> Result<TensorId> {
        let ai = self.float_operand(op, a)?;
        let bi = self.same_float(op, b, &ai)?;
        let (ra, rb) = (ai.shape.len(), bi.shape.len());
        if ra < 2 || rb < 2 {
            return Err(shape_err(
                op,
                format!(
                    "'{}' {:?} and '{}' {:?} must have rank 2 or more",
                    ai.name, ai.shape, bi.name, bi.shape
                ),
            ));
        }
        let (m, k) = (ai.shape[ra - 2], ai.shape[ra - 1]);
        let (k2, n) = (bi.shape[rb - 2], bi.shape[rb - 1]);
        if k != k2 {
            return Err(shape_err(
                op,
                format!(
                    "inner dims differ: '{}' {:?} has k = {k}, '{}' {:?} has k = {k2}",
                    ai.name, ai.shape, bi.name, bi.shape
                ),
            ));
        }
        let ba = &ai.shape[..ra - 2];
        let bb = &bi.shape[..rb - 2];
        let pa: usize = ba.iter().product();
        let pb: usize = bb.iter().product();
        let batch = if ba == bb {
            ba.to_vec()
        } else if pa == 1 && ba.len() <= bb.len() {
            bb.to_vec()
        } else if pb == 1 && bb.len() <= ba.len() {
            ba.to_vec()
        } else {
            return Err(shape_err(
                op,
                format!(
                    "batch dims {ba:?} of '{}' and {bb:?} of '{}' must be equal or one side all 1",
                    ai.name, bi.name
                ),
            ));
        };
        let mut shape = batch;
        shape.push(m);
        shape.push(n);
        Ok(self.node(
            Op::Matmul {
                a,
                b,
                bias: None,
                linear: false,
            },
            op,
            ai.dtype,
            shape,
        ))
    }

    /// Converts between f32, f16, i32, i8 and i64 (float to integer truncates toward zero and
    /// saturates; i64 to a narrower type keeps the low 32 bits, as ExecuTorch's Vulkan backend
    /// narrows int64 inputs).
    pub fn cast(&mut self, x: TensorId, to: DType) -> Result<TensorId> {
        const OP: &str = "cast";
        let xi = self.info(OP, x)?.clone();
        for (t, dtype) in [(&xi.name, xi.dtype), (&"(target)".to_string(), to)] {
            if cast_code(dtype).is_none() {
                return Err(Error::DType {
                    op: OP,
                    tensor: t.clone(),
                    actual: dtype,
                    expected: "f32, f16, i32, i8 or i64",
                });
            }
        }
        Ok(self.node(Op::Cast { x, to }, OP, to, xi.shape))
    }

    /// The arithmetic-peak probe of the benchmarks: `groups` work groups of 256 threads, each
    /// running `iters` rounds of 16 FMAs; one f32 output per thread.
    #[cfg(feature = "bench")]
    pub(crate) fn fma_probe(&mut self, groups: u32, iters: u32) -> TensorId {
        self.node(
            Op::FmaProbe { groups, iters },
            "fma_probe",
            DType::F32,
            vec![groups as usize * 256],
        )
    }

    // ----- data movement -----

    /// A view with another shape (one dim may be -1); no data moves.
    pub fn reshape(&mut self, x: TensorId, shape: &[isize]) -> Result<TensorId> {
        const OP: &str = "reshape";
        let xi = self.info(OP, x)?.clone();
        let n = xi.numel();
        let known: usize = shape
            .iter()
            .filter(|&&d| d >= 0)
            .map(|&d| d as usize)
            .product();
        let infer = shape.iter().filter(|&&d| d == -1).count();
        let bad = shape.is_empty() || shape.iter().any(|&d| d < -1 || d == 0) || infer > 1;
        let mut out: Vec<usize> = Vec::with_capacity(shape.len());
        if !bad {
            for &d in shape {
                out.push(if d == -1 {
                    n / known.max(1)
                } else {
                    d as usize
                });
            }
        }
        if bad || out.iter().product::<usize>() != n {
            return Err(shape_err(
                OP,
                format!(
                    "cannot view '{}' {:?} ({n} elements) as {shape:?}",
                    xi.name, xi.shape
                ),
            ));
        }
        let label = format!("reshape_{}", self.tensors.len());
        Ok(self.push_tensor(
            label,
            xi.dtype,
            out,
            Some((StorageKind::Temp, Some(xi.storage))),
        ))
    }

    /// Same as [`GraphBuilder::reshape`].
    pub fn view(&mut self, x: TensorId, shape: &[isize]) -> Result<TensorId> {
        self.reshape(x, shape)
    }

    /// Reorders dims: output dim `i` is input dim `perm[i]`.
    pub fn permute(&mut self, x: TensorId, perm: &[isize]) -> Result<TensorId> {
        const OP: &str = "permute";
        let xi = self.word_operand(OP, x)?;
        let r = xi.shape.len();
        let mut p = Vec::with_capacity(r);
        for &d in perm {
            p.push(norm_dim(OP, &xi.name, d, r)?);
        }
        let mut seen = p.clone();
        seen.sort_unstable();
        if p.len() != r || seen != (0..r).collect::<Vec<_>>() {
            return Err(shape_err(
                OP,
                format!(
                    "{perm:?} is not a permutation of the {r} dims of '{}'",
                    xi.name
                ),
            ));
        }
        let shape = p.iter().map(|&d| xi.shape[d]).collect();
        Ok(self.node(Op::Permute { x, perm: p }, OP, xi.dtype, shape))
    }

    /// Swaps two dims.
    pub fn transpose(&mut self, x: TensorId, d0: isize, d1: isize) -> Result<TensorId> {
        let xi = self.word_operand("transpose", x)?;
        let r = xi.shape.len();
        let a = norm_dim("transpose", &xi.name, d0, r)?;
        let b = norm_dim("transpose", &xi.name, d1, r)?;
        let mut perm: Vec<isize> = (0..r as isize).collect();
        perm.swap(a, b);
        self.permute(x, &perm)
    }

    /// Concatenates along `dim`.
    pub fn cat(&mut self, xs: &[TensorId], dim: isize) -> Result<TensorId> {
        const OP: &str = "cat";
        let first = match xs.first() {
            Some(&f) => self.word_operand(OP, f)?,
            None => return Err(shape_err(OP, "needs at least one tensor".into())),
        };
        let r = first.shape.len();
        let d = norm_dim(OP, &first.name, dim, r)?;
        let mut shape = first.shape.clone();
        shape[d] = 0;
        for &t in xs {
            let ti = self.word_operand(OP, t)?;
            if ti.dtype != first.dtype {
                return Err(Error::DType {
                    op: OP,
                    tensor: ti.name,
                    actual: ti.dtype,
                    expected: first.dtype.name(),
                });
            }
            let same =
                ti.shape.len() == r && (0..r).all(|i| i == d || ti.shape[i] == first.shape[i]);
            if !same {
                return Err(shape_err(
                    OP,
                    format!(
                        "'{}' {:?} does not match '{}' {:?} outside dim {d}",
                        ti.name, ti.shape, first.name, first.shape
                    ),
                ));
            }
            shape[d] += ti.shape[d];
        }
        Ok(self.node(
            Op::Cat {
                xs: xs.to_vec(),
                dim: d,
            },
            OP,
            first.dtype,
            shape,
        ))
    }

    /// `x[.., start:end:step, ..]` along `dim` (negative `start`/`end` count from the end and
    /// are clamped as in PyTorch).
    pub fn slice(
        &mut self,
        x: TensorId,
        dim: isize,
        start: isize,
        end: isize,
        step: usize,
    ) -> Result<TensorId> {
        const OP: &str = "slice";
        let xi = self.word_operand(OP, x)?;
        let d = norm_dim(OP, &xi.name, dim, xi.shape.len())?;
        let size = xi.shape[d] as isize;
        let fix = |v: isize| {
            if v < 0 {
                (v + size).max(0)
            } else {
                v.min(size)
            }
        };
        let (s, e) = (fix(start), fix(end));
        if step == 0 || e <= s {
            return Err(shape_err(
                OP,
                format!(
                    "[{start}:{end}:{step}] of dim {d} (size {size}) of '{}' is empty or has \
                     step 0",
                    xi.name
                ),
            ));
        }
        let len = ((e - s) as usize).div_ceil(step);
        let mut shape = xi.shape.clone();
        shape[d] = len;
        Ok(self.node(
            Op::Slice {
                x,
                dim: d,
                start: s as usize,
                step,
            },
            OP,
            xi.dtype,
            shape,
        ))
    }

    // ----- masks, gathers and compositions -----

    /// `x <cmp> s` as an f32 mask (1.0 where it holds, else 0.0).
    pub fn compare_scalar(&mut self, x: TensorId, cmp: Compare, s: f32) -> Result<TensorId> {
        self.unary(UnaryOp::Compare(cmp, s), x)
    }

    /// `x == s` as a mask.
    pub fn eq_scalar(&mut self, x: TensorId, s: f32) -> Result<TensorId> {
        self.compare_scalar(x, Compare::Eq, s)
    }

    /// `x > s` as a mask.
    pub fn gt_scalar(&mut self, x: TensorId, s: f32) -> Result<TensorId> {
        self.compare_scalar(x, Compare::Gt, s)
    }

    /// The mask's negation: 1.0 where `x` is 0.0, else 0.0.
    pub fn logical_not(&mut self, x: TensorId) -> Result<TensorId> {
        self.unary(UnaryOp::LogicalNot, x)
    }

    /// `cond ? a : b` elementwise (`cond` a mask: nonzero is true), all three broadcasting.
    pub fn where_(&mut self, cond: TensorId, a: TensorId, b: TensorId) -> Result<TensorId> {
        const OP: &str = "where";
        let ai = self.float_operand(OP, a)?;
        let ci = self.same_float(OP, cond, &ai)?;
        let bi = self.same_float(OP, b, &ai)?;
        let ab = TensorInfo {
            shape: broadcast_shape(OP, &ai, &bi)?,
            name: format!("{} and {}", ai.name, bi.name),
            ..ai
        };
        let shape = broadcast_shape(OP, &ci, &ab)?;
        Ok(self.node(Op::Where { cond, a, b }, OP, ai.dtype, shape))
    }

    /// `any(x != 0)` over `dims` as a mask (all dims when empty).
    pub fn any(&mut self, x: TensorId, dims: &[isize], keepdim: bool) -> Result<TensorId> {
        let ne = self.compare_scalar(x, Compare::Ne, 0.0)?;
        let n = self.sum(ne, dims, keepdim)?;
        self.compare_scalar(n, Compare::Ne, 0.0)
    }

    /// `table[ids]`: rows of the 32-bit or f16 `table` `[v, d]` picked by the i32 `ids` (any
    /// shape); the result has shape `ids.shape + [d]`. An id outside `0..v` gives a row of
    /// zeros.
    pub fn embedding(&mut self, table: TensorId, ids: TensorId) -> Result<TensorId> {
        const OP: &str = "embedding";
        let ti = self.word_operand(OP, table)?;
        let ii = self.info(OP, ids)?.clone();
        if ii.dtype != DType::I32 {
            return Err(Error::DType {
                op: OP,
                tensor: ii.name,
                actual: ii.dtype,
                expected: "i32",
            });
        }
        if ti.shape.len() != 2 {
            return Err(shape_err(
                OP,
                format!("table '{}' {:?} must be [v, d]", ti.name, ti.shape),
            ));
        }
        let mut shape = ii.shape.clone();
        shape.push(ti.shape[1]);
        Self::check_shape(OP, &ii.name, &shape)?;
        Ok(self.node(Op::Gather { table, ids }, OP, ti.dtype, shape))
    }

    /// A constant f32 tensor of `shape` filled with `value`.
    pub fn full(&mut self, name: &str, shape: &[usize], value: f32) -> Result<TensorId> {
        self.full_as(name, shape, value, DType::F32)
    }

    /// A constant float tensor (f32 or f16) of `shape` filled with `value`.
    pub fn full_as(
        &mut self,
        name: &str,
        shape: &[usize],
        value: f32,
        dtype: DType,
    ) -> Result<TensorId> {
        Self::check_shape("full", name, shape)?;
        let n = shape.iter().product();
        match dtype {
            DType::F32 => self.constant_f32(name, shape, &vec![value; n]),
            DType::F16 => self.constant_f16(name, shape, &vec![value; n]),
            other => Err(Error::DType {
                op: "full",
                tensor: name.to_string(),
                actual: other,
                expected: "f32 or f16",
            }),
        }
    }

    /// `x.select(dim, index)`: the slice at `index` of `dim` (negative counts from the end),
    /// with `dim` removed.
    pub fn select(&mut self, x: TensorId, dim: isize, index: isize) -> Result<TensorId> {
        const OP: &str = "select";
        let xi = self.word_operand(OP, x)?;
        let d = norm_dim(OP, &xi.name, dim, xi.shape.len())?;
        let size = xi.shape[d] as isize;
        let i = if index < 0 { index + size } else { index };
        if i < 0 || i >= size {
            return Err(shape_err(
                OP,
                format!(
                    "index {index} is out of range for dim {d} (size {size}) of '{}'",
                    xi.name
                ),
            ));
        }
        let s = self.slice(x, d as isize, i, i + 1, 1)?;
        let mut shape: Vec<isize> = xi.shape.iter().map(|&v| v as isize).collect();
        shape.remove(d);
        if shape.is_empty() {
            shape.push(1);
        }
        self.reshape(s, &shape)
    }

    /// Splits `x` along `dim` into pieces of `sizes` (which sum to the dim's size).
    pub fn split(&mut self, x: TensorId, sizes: &[usize], dim: isize) -> Result<Vec<TensorId>> {
        const OP: &str = "split";
        let xi = self.word_operand(OP, x)?;
        let d = norm_dim(OP, &xi.name, dim, xi.shape.len())?;
        if sizes.iter().sum::<usize>() != xi.shape[d] || sizes.contains(&0) {
            return Err(shape_err(
                OP,
                format!(
                    "sizes {sizes:?} do not split dim {d} (size {}) of '{}'",
                    xi.shape[d], xi.name
                ),
            ));
        }
        let mut start = 0;
        let mut out = Vec::with_capacity(sizes.len());
        for &s in sizes {
            out.push(self.slice(x, d as isize, start as isize, (start + s) as isize, 1)?);
            start += s;
        }
        Ok(out)
    }

    /// `group_norm` of `x` `[n, c, ..]` over `groups` groups of channels, with optional
    /// per-channel weight and bias `[c]`: a layer norm of each group, then the affine.
    pub fn group_norm(
        &mut self,
        x: TensorId,
        groups: usize,
        weight: Option<TensorId>,
        bias: Option<TensorId>,
        eps: f32,
    ) -> Result<TensorId> {
        const OP: &str = "group_norm";
        let xi = self.float_operand(OP, x)?;
        let (n, c) = match xi.shape.as_slice() {
            [n, c, ..] => (*n, *c),
            _ => (0, 0),
        };
        if c == 0 || groups == 0 || c % groups != 0 {
            return Err(shape_err(
                OP,
                format!(
                    "'{}' {:?} must be [n, c, ..] with c divisible by {groups} groups",
                    xi.name, xi.shape
                ),
            ));
        }
        let per = xi.numel() / (n * groups);
        let g = self.reshape(x, &[n as isize, groups as isize, per as isize])?;
        let y = self.layer_norm(g, &[per], None, None, eps)?;
        let full: Vec<isize> = xi.shape.iter().map(|&v| v as isize).collect();
        let mut y = self.reshape(y, &full)?;
        // Per-channel parameters as [c, 1, ..] broadcast over the spatial dims.
        let mut pshape = vec![c as isize];
        pshape.resize(xi.shape.len() - 1, 1);
        for (p, mul) in [(weight, true), (bias, false)] {
            let Some(p) = p else { continue };
            let pi = self.same_float(OP, p, &xi)?;
            if pi.shape != [c] {
                return Err(shape_err(
                    OP,
                    format!("'{}' has shape {:?}, expected [{c}]", pi.name, pi.shape),
                ));
            }
            let p = self.reshape(p, &pshape)?;
            y = if mul {
                self.mul(y, p)?
            } else {
                self.add(y, p)?
            };
        }
        Ok(y)
    }
}

fn check_zero_point(op: &'static str, name: &str, zp: i32) -> Result<()> {
    if !(-128..=127).contains(&zp) {
        return Err(shape_err(op, format!("{name} {zp} is outside [-128, 127]")));
    }
    Ok(())
}

fn check_bias(op: &'static str, bi: &TensorInfo, cout: usize) -> Result<()> {
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
fn conv_shape(
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
        let size = [h, wd][i] + 2 * p.padding[i];
        let span = p.dilation[i] * ([kh, kw][i] - 1) + 1;
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

fn broadcast_shape(op: &'static str, a: &TensorInfo, b: &TensorInfo) -> Result<Vec<usize>> {
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
