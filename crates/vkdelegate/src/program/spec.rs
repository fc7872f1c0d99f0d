//! What a program is made of: steps, their typed compute ops, device and hand-off choices.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use vk_core::{Device, TensorSpec};

/// What a step runs.
#[derive(Debug, Clone)]
pub enum StepKind {
    /// A VGF file, read when the program is built.
    Vgf {
        /// Its path.
        path: PathBuf,
    },
    /// A VGF model already in memory.
    VgfBytes {
        /// The file's bytes.
        bytes: Arc<[u8]>,
    },
    /// A VGF model already decoded ([`StepSpec::vgf_model`], a `.pte`'s `VgfBackend`
    /// delegate): wired, checked and loaded without decoding it again.
    #[cfg(feature = "vgf")]
    VgfFile(Arc<vgf_delegate::VgfFile>),
    /// A compute op.
    Compute(ComputeStep),
    /// A `VulkanBackend` delegate of an ExecuTorch program: its graph, lowered onto the compute
    /// delegate.
    Vulkan(VulkanDelegate),
}

/// Where a `VulkanBackend` delegate lives: the whole `.pte` program (its named data holds the
/// graph's weights), the plan and the delegate's index in it; and its graph, lowered once when
/// [`crate::pte::program_builder`] made the step (the program's wiring, requirements and load
/// all use that one lowering).
#[derive(Debug, Clone)]
pub struct VulkanDelegate {
    /// The program file's bytes.
    pub program: Arc<[u8]>,
    /// The execution plan's name.
    pub plan: String,
    /// The delegate's index in the plan.
    pub delegate: usize,
    /// The graph lowered at its own precision, or why it could not be (reported when the
    /// program is built); `None`: lowered from `program` when needed.
    #[cfg(feature = "compute")]
    pub(crate) lowered: Option<Arc<Result<crate::pte::lower::Lowered, String>>>,
}

/// One step: what it runs and the tensor names it reads and writes.
#[derive(Debug, Clone)]
pub struct StepSpec {
    /// Name (for messages and timings).
    pub name: String,
    /// What it runs.
    pub kind: StepKind,
    /// Tensor names bound to its inputs, in order.
    pub inputs: Vec<String>,
    /// Names given to its outputs, in order.
    pub outputs: Vec<String>,
}

/// A compute step: the op, and the spec of its input where that is a program input (no step
/// produces it, so nothing else says its shape).
#[derive(Debug, Clone, PartialEq)]
pub struct ComputeStep {
    /// The op with its attributes.
    pub op: ComputeOp,
    /// Dtype and shape of every input that is a program input (`input_shape`, `input_dtype`).
    pub declared_input: Option<TensorSpec>,
}

/// Element-wise functions of one input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnaryFn {
    /// `max(x, 0)`.
    Relu,
    /// `clamp(x, 0, 6)`.
    Relu6,
    /// Logistic sigmoid.
    Sigmoid,
    /// Hyperbolic tangent.
    Tanh,
    /// `x * relu6(x + 3) / 6`.
    Hardswish,
}

/// Element-wise arithmetic of two operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arith {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b`.
    Div,
}

/// 2-D pooling parameters (NCHW).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolParams {
    /// Window height and width.
    pub kernel: [usize; 2],
    /// Strides.
    pub stride: [usize; 2],
    /// Zero padding on each side.
    pub padding: [usize; 2],
    /// Round the output size up.
    pub ceil_mode: bool,
    /// Average pooling counts padding in the divisor.
    pub count_include_pad: bool,
}

/// The compute ops a program step can name, with typed attributes (see the program file
/// documentation for their names in TOML).
#[derive(Debug, Clone, PartialEq)]
pub enum ComputeOp {
    /// `relu`, `relu6`, `sigmoid`, `tanh`, `hardswish`.
    Unary(UnaryFn),
    /// `gelu` (`approximate = "tanh"` or `"none"`).
    Gelu {
        /// The tanh approximation.
        approximate_tanh: bool,
    },
    /// `clamp` (`min`, `max`) and `hardtanh` (default -1, 1).
    Clamp {
        /// Lower bound.
        min: f32,
        /// Upper bound.
        max: f32,
    },
    /// `add`, `sub`, `mul`, `div` of two tensors, broadcasting.
    Binary(Arith),
    /// `add_scalar`, ... (`value`).
    Scalar {
        /// The operation, tensor on the left.
        op: Arith,
        /// The scalar.
        value: f32,
    },
    /// `softmax` and `log_softmax` (`dim`, default -1).
    Softmax {
        /// The axis.
        dim: isize,
        /// `log_softmax`.
        log: bool,
    },
    /// `avg_pool2d` and `max_pool2d` (`kernel`, `stride`, `padding`, `ceil_mode`,
    /// `count_include_pad`).
    Pool2d {
        /// Max pooling (else average).
        max: bool,
        /// Window, strides, padding.
        params: PoolParams,
    },
    /// `sum` and `mean` (`dims`, `keepdim`).
    Reduce {
        /// `mean` (else `sum`).
        mean: bool,
        /// Axes.
        dims: Vec<isize>,
        /// Keep reduced axes as size 1.
        keepdim: bool,
    },
    /// `reshape` (`shape`, one entry may be -1).
    Reshape {
        /// The new shape.
        shape: Vec<isize>,
    },
    /// `permute` (`perm`).
    Permute {
        /// The axis order.
        perm: Vec<isize>,
    },
    /// `transpose` (`dim0`, `dim1`).
    Transpose {
        /// First axis.
        dim0: isize,
        /// Second axis.
        dim1: isize,
    },
}

impl ComputeOp {
    /// How many tensor inputs the op takes.
    pub fn arity(&self) -> usize {
        match self {
            ComputeOp::Binary(_) => 2,
            _ => 1,
        }
    }
}

/// Where a program's steps run.
#[derive(Debug, Clone)]
pub enum DeviceChoice {
    /// One device made for this program: the selected adapter, with every step's requirements.
    Standalone,
    /// A device the caller provides.
    Device(Device),
    /// A shared context: each step, in order, acquires it with its own delegate's requirements.
    #[cfg(feature = "shared")]
    Shared(shared_runtime::SharingOptions),
}

/// How tensors pass between steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HandOff {
    /// On the device, in one command buffer: each step reads its producer's buffer directly
    /// (no copy at a step boundary); one submission and one fence wait per execution.
    #[default]
    Device,
    /// Through host memory: each step executes on its own.
    Host,
}

/// Timings of one execution.
#[derive(Debug, Clone, Default)]
pub struct Timings {
    /// Per step: name and time (device timestamps in device mode when the queue has them,
    /// wall time in host mode).
    pub steps: Vec<(String, Duration)>,
    /// Wall time of the whole execution, host copies included.
    pub total: Duration,
    /// Wall time of the host side of the input copies in device mode: into staging memory, or
    /// their transfers, before the submit.
    pub host_upload: Duration,
    /// Wall time of the host side of the output copies in device mode, after the wait.
    pub host_download: Duration,
    /// Submissions made.
    pub submissions: u32,
}
