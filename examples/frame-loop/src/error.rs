//! The example's one error type.

use ash::vk;

/// Everything the frame loop can fail with; each message names the call, the file or the
/// option involved.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Vulkan call of the engine's own failed.
    #[error("{call} failed: {result:?}")]
    Vk {
        /// The Vulkan function.
        call: &'static str,
        /// Its result.
        result: vk::Result,
    },
    /// vk-core refused or failed (adoption, submission, memory).
    #[error(transparent)]
    Core(#[from] vk_core::Error),
    /// The model's program could not be built or run.
    #[error("model: {0}")]
    Program(#[from] vkdelegate::program::ProgramError),
    /// Registering the engine's device with shared-runtime failed.
    #[error("shared-runtime: {0}")]
    Shared(#[from] shared_runtime::Error),
    /// The device lacks something the example needs.
    #[error("device '{device}' cannot run the example: {problem}")]
    Unsuitable {
        /// The device's name.
        device: String,
        /// What it lacks.
        problem: String,
    },
    /// A host tensor of the host path could not be made or read.
    #[error("host path: {0}")]
    HostTensor(String),
    /// The window system failed.
    #[error("window: {0}")]
    Window(String),
    /// Reading or writing a file failed.
    #[error("{path}: {problem}")]
    File {
        /// The file.
        path: String,
        /// What went wrong.
        problem: String,
    },
}

/// The example's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Maps a `VkResult` error to [`Error::Vk`] naming the call.
pub(crate) trait VkCall<T> {
    /// Names the call in the error.
    fn vk(self, call: &'static str) -> Result<T>;
}

impl<T> VkCall<T> for std::result::Result<T, vk::Result> {
    fn vk(self, call: &'static str) -> Result<T> {
        self.map_err(|result| Error::Vk { call, result })
    }
}
