//! Errors of `compute-delegate`: one enum, every message naming the tensor or op and the
//! numbers involved.

use vk_core::{DType, VkError, vk};

/// Everything that can go wrong while building or running a compute graph.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An op's operands do not fit together (shapes, attributes).
    #[error("{op}: {detail}")]
    Shape {
        /// The op, e.g. `add`.
        op: &'static str,
        /// What is wrong, naming the tensors and numbers.
        detail: String,
    },
    /// An operand has a dtype the op does not take.
    #[error("{op}: tensor '{tensor}' is {actual}, expected {expected}")]
    DType {
        /// The op.
        op: &'static str,
        /// The operand's name.
        tensor: String,
        /// Its dtype.
        actual: DType,
        /// What the op takes.
        expected: &'static str,
    },
    /// A tensor id that this builder did not make.
    #[error("{op}: unknown tensor id {id} (this graph has {count} tensors)")]
    UnknownTensor {
        /// The op or call.
        op: &'static str,
        /// The id given.
        id: usize,
        /// How many tensors the builder has.
        count: usize,
    },
    /// A tensor is larger than one storage-buffer binding may be on this device.
    #[error(
        "tensor '{tensor}' ({dtype} {shape:?}) needs {bytes} bytes, over the device's \
         maxStorageBufferRange of {limit} bytes"
    )]
    TooLarge {
        /// The tensor's name.
        tensor: String,
        /// Its dtype.
        dtype: DType,
        /// Its shape.
        shape: Vec<usize>,
        /// Bytes it needs (padded to whole vec4s).
        bytes: u64,
        /// `maxStorageBufferRange`.
        limit: u32,
    },
    /// A dispatch needs more work groups than the device allows.
    #[error("{op}: needs {groups} work groups in dimension {dim}, the device allows {limit}")]
    TooManyGroups {
        /// The op.
        op: &'static str,
        /// Dimension (0, 1 or 2).
        dim: usize,
        /// Groups needed.
        groups: u64,
        /// `maxComputeWorkGroupCount[dim]`.
        limit: u32,
    },
    /// The graph is not complete (no outputs, ...).
    #[error("graph: {0}")]
    Graph(String),
    /// `execute` got the wrong number of inputs.
    #[error("execute: the graph has {expected} input(s), got {actual}")]
    InputCount {
        /// Inputs the graph declares.
        expected: usize,
        /// Inputs given.
        actual: usize,
    },
    /// An input does not match its declaration.
    #[error(
        "execute: input {index} ('{name}') must be {want_dtype} {want_shape:?} ({want_bytes} \
         bytes), got {got_dtype} {got_shape:?} ({got_bytes} bytes)"
    )]
    InputMismatch {
        /// Position of the input.
        index: usize,
        /// Its name.
        name: String,
        /// Declared dtype.
        want_dtype: DType,
        /// Declared shape.
        want_shape: Vec<usize>,
        /// Declared bytes.
        want_bytes: usize,
        /// Given dtype.
        got_dtype: DType,
        /// Given shape.
        got_shape: Vec<usize>,
        /// Given bytes.
        got_bytes: usize,
    },
    /// A Vulkan call failed.
    #[error(transparent)]
    Vulkan(#[from] VkError),
    /// `vk-core` failed (device creation, ...).
    #[error(transparent)]
    Core(#[from] vk_core::Error),
    /// A vk-mem allocation failed.
    #[error("vk-mem: allocating {bytes} bytes for {what} failed: {result}")]
    Alloc {
        /// What the memory was for.
        what: String,
        /// Bytes requested.
        bytes: u64,
        /// The Vulkan result.
        result: vk::Result,
    },
    /// The device lacks something this operation needs (timestamps, ...).
    #[error("{0}")]
    Unsupported(String),
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Turns `ash` results into [`VkError`]s naming the call.
pub(crate) trait VkExt<T> {
    fn vk(self, call: &'static str) -> Result<T, VkError>;
}

impl<T> VkExt<T> for std::result::Result<T, vk::Result> {
    fn vk(self, call: &'static str) -> Result<T, VkError> {
        self.map_err(|r| VkError::new(call, r))
    }
}
