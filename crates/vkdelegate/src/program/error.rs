//! Errors of programs. Messages name the step and tensor involved.

use std::fmt;

use vk_core::{ImageProblem, TensorSpec, vk};

/// Errors of programs.
#[derive(Debug, thiserror::Error)]
pub enum ProgramError {
    /// The program file cannot be read or parsed.
    #[error("program file {path}: {problem}")]
    File {
        /// Its path.
        path: String,
        /// What is wrong.
        problem: String,
    },
    /// A step is malformed or failed to load.
    #[error("step '{step}': {problem}")]
    Step {
        /// Step name.
        step: String,
        /// What is wrong.
        problem: String,
    },
    /// A tensor passes between two steps with different dtypes or shapes.
    #[error("{0}")]
    Mismatch(Box<TensorMismatch>),
    /// The wiring of names is wrong.
    #[error("{0}")]
    Wiring(String),
    /// An application's buffer cannot be bound to a program input or output.
    #[error("{0}")]
    Binding(Box<BindingError>),
    /// Steps ended on different devices.
    #[error("step '{step}' runs on a different VkDevice than step '{first}'")]
    DifferentDevices {
        /// The first step.
        first: String,
        /// The step that differs.
        step: String,
    },
    /// Inputs given to `execute` do not match the program's inputs.
    #[error("program {0}")]
    Input(#[from] vk_core::IoError),
    /// A step of a kind this build does not include.
    #[error("step '{step}' is a {kind} step, but this build lacks the `{feature}` feature")]
    NotCompiled {
        /// Step name.
        step: String,
        /// Kind.
        kind: &'static str,
        /// Cargo feature needed.
        feature: &'static str,
    },
    /// An output cannot be fed back into an input ([`super::ProgramBuilder::feed_back`]).
    #[error("feeding '{output}' back into input '{input}': {problem}")]
    FeedBack {
        /// The tensor fed back.
        output: String,
        /// The program input it becomes.
        input: String,
        /// What is wrong.
        problem: String,
    },
    /// [`super::Program::start`] with as many runs in flight as the program allows, or with
    /// new inputs while runs are in flight.
    #[error(
        "{running} runs in flight of {most} the program allows{}; finish one first",
        if *.with_inputs { " and new inputs given (they need none in flight)" } else { "" }
    )]
    InFlight {
        /// Runs in flight.
        running: usize,
        /// The most the program allows ([`super::ProgramBuilder::runs_in_flight`]).
        most: usize,
        /// Whether the start gave new inputs.
        with_inputs: bool,
    },
    /// [`super::Program::finish`] with no run in flight.
    #[error("no run in flight to finish")]
    NothingInFlight,
    /// Vulkan or device errors.
    #[error(transparent)]
    Vk(#[from] vk_core::Error),
    /// Shared-runtime errors.
    #[cfg(feature = "shared")]
    #[error(transparent)]
    Shared(#[from] shared_runtime::Error),
    /// Errors of the VGF delegate.
    #[cfg(feature = "vgf")]
    #[error("step '{step}': {source}")]
    Vgf {
        /// Step name.
        step: String,
        /// The delegate's error.
        source: Box<vgf_delegate::Error>,
    },
    /// Errors of the compute delegate.
    #[cfg(feature = "compute")]
    #[error("step '{step}': {source}")]
    Compute {
        /// Step name.
        step: String,
        /// The delegate's error.
        source: Box<compute_delegate::Error>,
    },
}

impl ProgramError {
    /// A [`ProgramError::Step`] for `step`.
    pub(crate) fn step(step: &str, problem: impl Into<String>) -> ProgramError {
        ProgramError::Step {
            step: step.to_owned(),
            problem: problem.into(),
        }
    }
}

/// Shorthand for results of this module.
pub type Result<T, E = ProgramError> = std::result::Result<T, E>;

/// Where a tensor comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Producer {
    /// The program's caller gives it to `execute`.
    ProgramInput,
    /// The step of that name produces it.
    Step(String),
}

impl fmt::Display for Producer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Producer::ProgramInput => f.write_str("the program input"),
            Producer::Step(s) => write!(f, "step '{s}'"),
        }
    }
}

/// A tensor passed between two steps with different dtypes or shapes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "tensor '{tensor}': {producer} produces {}{:?} but step '{consumer}' expects {}{:?}",
    produced.dtype, produced.shape, expected.dtype, expected.shape
)]
pub struct TensorMismatch {
    /// Tensor name.
    pub tensor: String,
    /// Where it comes from.
    pub producer: Producer,
    /// What it is.
    pub produced: TensorSpec,
    /// The consuming step.
    pub consumer: String,
    /// What it expects.
    pub expected: TensorSpec,
}

/// An application's buffer that cannot be bound to a program input or output, or a call that
/// does not fit how the program's tensors are bound.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("binding of tensor '{tensor}': {problem}")]
pub struct BindingError {
    /// The tensor.
    pub tensor: String,
    /// What is wrong.
    pub problem: BindingProblem,
}

/// What is wrong with a binding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindingProblem {
    /// No program input has that name.
    #[error("the program has no input of that name (its inputs: {inputs:?})")]
    UnknownInput {
        /// The program's inputs.
        inputs: Vec<String>,
    },
    /// No program output has that name.
    #[error("the program has no output of that name (its outputs: {outputs:?})")]
    UnknownOutput {
        /// The program's outputs.
        outputs: Vec<String>,
    },
    /// The slice holds fewer bytes than the tensor needs.
    #[error("the slice holds {size} bytes, the tensor needs {need}")]
    TooSmall {
        /// The slice's size.
        size: u64,
        /// Bytes needed (padded to whole vec4s where a compute step reads or writes it).
        need: u64,
    },
    /// The buffer lacks a usage the binding needs.
    #[error("the buffer lacks usage {missing:?} (the binding needs {need:?})")]
    MissingUsage {
        /// Usage missing.
        missing: vk::BufferUsageFlags,
        /// All the usage needed.
        need: vk::BufferUsageFlags,
    },
    /// The slice's offset is not a multiple of `minStorageBufferOffsetAlignment`.
    #[error("offset {offset} is not a multiple of minStorageBufferOffsetAlignment ({alignment})")]
    Misaligned {
        /// The slice's offset in its buffer.
        offset: u64,
        /// The device's alignment.
        alignment: u64,
    },
    /// The buffer is owned exclusively by another queue family than the program's queue.
    #[error(
        "the buffer is owned by queue family {owner} (exclusive sharing) and the program runs \
         on family {queue}: transfer its ownership to family {queue} first, or create it with \
         concurrent sharing"
    )]
    QueueFamily {
        /// The family that owns the buffer.
        owner: u32,
        /// The program's queue family.
        queue: u32,
    },
    /// Bindings need device hand-off.
    #[error("application buffers can be bound only in device hand-off")]
    HostHandOff,
    /// Some inputs or outputs are bound to application buffers and this one is bound to
    /// neither a buffer nor an image.
    #[error(
        "this program {} is not bound: bind every input and output (to a buffer or an image), \
         or none to a buffer",
        if *input { "input" } else { "output" }
    )]
    Unbound {
        /// Whether it is an input.
        input: bool,
    },
    /// `execute` on a program whose tensors live in the application's buffers.
    #[error("the program's tensors are bound to application buffers: use submit, not execute")]
    BoundProgram,
    /// `submit` on a program whose tensors are not bound.
    #[error("submit needs every program input and output bound to an application buffer or image")]
    NotBound,
    /// The application's image cannot be converted from or to this tensor (usage, format,
    /// the device's format features, extent, dtype, shape, channels, palette, or a rebound
    /// image of another extent or format class).
    #[error("{0}")]
    Image(ImageProblem),
    /// The tensor is bound to both an application buffer and an image.
    #[error("the tensor is bound to both an application buffer and an image")]
    BoundTwice,
    /// Rebinding an image to a tensor that is not bound to one.
    #[error(
        "this program {} is not bound to an image",
        if *input { "input" } else { "output" }
    )]
    NotImage {
        /// Whether it is an input.
        input: bool,
    },
}
