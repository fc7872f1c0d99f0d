//! Errors of `compute-delegate`: one enum, every message naming the tensor or op and the
//! numbers involved. Vulkan, memory, submission and input-check failures are `vk-core`'s.

use vk_core::{DType, IoError, VkError};

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
        "tensor '{tensor}' ({dtype} {shape:?}) needs {bytes} bytes, over the {limit} bytes one \
         buffer binding may span (maxStorageBufferRange, or BuildOptions::max_binding_bytes)"
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
        /// The most one binding may span: `maxStorageBufferRange`, or
        /// [`crate::BuildOptions::max_binding_bytes`] where that is lower.
        limit: u64,
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
    /// An op's argument is missing, out of range or of the wrong kind ([`crate::ops`]).
    #[error("{op}: argument `{param}`: {problem}")]
    Arg {
        /// The op, by its first name.
        op: &'static str,
        /// The parameter.
        param: &'static str,
        /// What is wrong.
        problem: String,
    },
    /// A front end called an op the registry does not have.
    #[error("op `{0}` is not in the compute delegate's op registry")]
    UnknownOp(String),
    /// The graph is not complete (no outputs, ...).
    #[error("graph: {0}")]
    Graph(String),
    /// Host inputs do not match the graph's inputs (count, dtype, shape).
    #[error("{}", io_message(.0))]
    Io(#[from] IoError),
    /// [`crate::Graph::execute_into`] was given a different number of output tensors than
    /// the graph has.
    #[error("execute_into: the graph has {expected} output(s), got {actual} output tensor(s)")]
    OutputCount {
        /// Outputs the graph has.
        expected: usize,
        /// Output tensors given.
        actual: usize,
    },
    /// An output tensor given to [`crate::Graph::execute_into`] does not match its output.
    #[error("output {index} ('{name}') is {want}, the tensor given for it is {got}")]
    OutputMismatch {
        /// Position.
        index: usize,
        /// Name.
        name: String,
        /// The output's dtype and shape.
        want: String,
        /// The given tensor's dtype and shape.
        got: String,
    },
    /// An input or output index the graph does not have.
    #[error("{io} {index} does not exist: the graph has {count}")]
    NoSuchIo {
        /// `input` or `output`.
        io: &'static str,
        /// The index given.
        index: usize,
        /// How many the graph has.
        count: usize,
    },
    /// A buffer slice bound to an input or output is smaller than the tensor's storage.
    #[error(
        "{io} {index} ('{name}'): the bound buffer slice holds {size} bytes, the tensor needs \
         {need} (its bytes padded to whole vec4s, which the shaders read and write)"
    )]
    BindingTooSmall {
        /// `input` or `output`.
        io: &'static str,
        /// Its index.
        index: usize,
        /// Its name.
        name: String,
        /// The slice's size.
        size: u64,
        /// Bytes the graph reads or writes there.
        need: u64,
    },
    /// A buffer slice bound to an input or output starts at a misaligned offset.
    #[error(
        "{io} {index} ('{name}'): the bound buffer slice starts at offset {offset}, not a \
         multiple of the device's minStorageBufferOffsetAlignment ({alignment})"
    )]
    BindingMisaligned {
        /// `input` or `output`.
        io: &'static str,
        /// Its index.
        index: usize,
        /// Its name.
        name: String,
        /// The slice's offset in its buffer.
        offset: u64,
        /// `minStorageBufferOffsetAlignment`.
        alignment: u64,
    },
    /// `vk-core` failed: a Vulkan call, an allocation, a submission or wait (timeout, device
    /// loss).
    #[error(transparent)]
    Vk(#[from] vk_core::Error),
    /// The device lacks something this operation needs (timestamps, ...).
    #[error("{0}")]
    Unsupported(String),
}

impl From<VkError> for Error {
    fn from(e: VkError) -> Self {
        Error::Vk(e.into())
    }
}

/// Input errors as this crate has always worded them (position first, then the name).
fn io_message(e: &IoError) -> String {
    match e {
        IoError::Count { expected, actual } => {
            format!("execute: the graph has {expected} input(s), got {actual}")
        }
        IoError::Mismatch {
            index,
            name,
            want_dtype,
            want_shape,
            got_dtype,
            got_shape,
        } => format!(
            "input {index} ('{name}') must be {want_dtype} {want_shape:?}, got {got_dtype} \
             {got_shape:?}"
        ),
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
