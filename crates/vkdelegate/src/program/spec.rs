//! What a program is made of: steps, their typed compute ops, device and hand-off choices.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use vk_core::{Device, TensorSpec};

/// What a step runs (some kinds exist only with the feature of their delegate, so a match
/// needs a wildcard arm).
#[derive(Debug, Clone)]
#[non_exhaustive]
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
    /// A compute graph a front end made (`crate::pte` lowers ExecuTorch's `VulkanBackend`
    /// delegates into these).
    #[cfg(feature = "compute")]
    Graph(GraphStep),
}

impl StepKind {
    /// Whether the step is a VGF model (from a file, bytes, or decoded).
    pub fn is_vgf(&self) -> bool {
        match self {
            StepKind::Vgf { .. } | StepKind::VgfBytes { .. } => true,
            #[cfg(feature = "vgf")]
            StepKind::VgfFile(_) => true,
            _ => false,
        }
    }
}

/// A compute graph made once by a front end, at its own precision: the program's wiring, its
/// device requirements and the load all use it.
#[cfg(feature = "compute")]
#[derive(Clone)]
pub struct GraphStep {
    /// The graph.
    pub graph: Arc<compute_delegate::GraphBuilder>,
    /// Whether it computes in fp16: it then asks for the compute delegate's f16 features, as
    /// optional, and computes in fp16 where the device has them enabled, else in fp32
    /// (`GraphBuilder::widened_to_f32`, a pass over the same graph).
    pub f16: bool,
}

#[cfg(feature = "compute")]
impl std::fmt::Debug for GraphStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphStep")
            .field("inputs", &self.graph.input_specs())
            .field("outputs", &self.graph.output_specs())
            .field("f16", &self.f16)
            .finish()
    }
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

/// A compute step: an op of the compute delegate's registry by its program-file name
/// (`relu`, `max_pool2d`), its attributes, and the spec of its input where that is a program
/// input (no step produces it, so nothing else says its shape). Its one-op graph is made once
/// its inputs' specs are known.
#[derive(Debug, Clone, PartialEq)]
pub struct ComputeStep {
    /// The op's name.
    pub op: String,
    /// Its attributes by parameter name (a program file's keys).
    pub attributes: std::collections::BTreeMap<String, toml::Value>,
    /// Dtype and shape of every input that is a program input (`input_shape`, `input_dtype`).
    pub declared_input: Option<TensorSpec>,
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

/// How a VGF file's step runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VgfPath {
    /// Through `VK_ARM_data_graph` where the device's own driver offers it (Arm's emulation
    /// layer does not count); else on the compute delegate's kernels where the build has them
    /// and every operator of the file's data graph lowers onto them (`crate::vgf_native`),
    /// through the extension otherwise.
    #[default]
    Auto,
    /// On the compute delegate's kernels; a file whose graph does not lower is an error that
    /// names each operator in the way.
    Native,
    /// Through `VK_ARM_data_graph` (a driver's, or Arm's emulation layer).
    DataGraph,
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
    /// Device time of the whole recorded execution, its copies included (device mode, where
    /// the queue has timestamps).
    pub device_span: Duration,
    /// For a run started while the one before it was in flight ([`super::Program::start`]):
    /// how long the device was idle between the two (from the end of the one before to the
    /// start of this one; device mode, where the queue has timestamps).
    pub device_idle: Option<Duration>,
}
