//! Error types of `vk-core`.
//!
//! One small enum per concern, every message carrying the numbers or names involved.

use std::fmt;

use ash::vk;

use crate::device::arm;
use crate::device::conv::{QueueCaps, Version};
use crate::gpu::host::DType;

/// A failed Vulkan call, with the entry point that returned it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{call} failed: {result}")]
pub struct VkError {
    /// The Vulkan entry point, e.g. `vkCreateDevice`.
    pub call: &'static str,
    /// The result code it returned.
    pub result: vk::Result,
}

impl VkError {
    /// Wraps `result` as returned by `call`.
    pub fn new(call: &'static str, result: vk::Result) -> Self {
        Self { call, result }
    }

    /// Whether the device was lost (`VK_ERROR_DEVICE_LOST`): nothing on it can be used further.
    pub fn is_device_lost(&self) -> bool {
        self.result == vk::Result::ERROR_DEVICE_LOST
    }

    /// Whether the call ran out of host or device memory.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(
            self.result,
            vk::Result::ERROR_OUT_OF_HOST_MEMORY | vk::Result::ERROR_OUT_OF_DEVICE_MEMORY
        )
    }
}

/// Extension trait turning `ash` results into [`VkError`]s that name the call: the one
/// `VkResult` mapping every crate of the workspace uses.
pub trait VkResultExt<T> {
    /// Maps the error code to a [`VkError`] naming `call`.
    fn vk(self, call: &'static str) -> Result<T, VkError>;
}

impl<T> VkResultExt<T> for Result<T, vk::Result> {
    fn vk(self, call: &'static str) -> Result<T, VkError> {
        self.map_err(|result| VkError::new(call, result))
    }
}

/// Everything that can go wrong in `vk-core`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Vulkan loader library could not be opened.
    #[error(
        "the Vulkan loader (libvulkan) could not be loaded: {detail}; install a Vulkan loader \
         and a driver (Debian/Ubuntu: `apt-get install libvulkan1 mesa-vulkan-drivers`, \
         which includes the lavapipe CPU driver)"
    )]
    LoaderNotFound {
        /// What the dynamic loader said.
        detail: String,
    },
    /// The loader found no driver it could load.
    #[error(
        "the Vulkan loader found no driver it could load: install one (Debian/Ubuntu: \
         `apt-get install mesa-vulkan-drivers` for lavapipe, or your GPU vendor's driver), or \
         point VK_DRIVER_FILES at the driver's ICD manifest; `VK_LOADER_DEBUG=driver` shows \
         what the loader tried"
    )]
    NoDriver,
    /// The loader works but no driver exposes a physical device.
    #[error(
        "the Vulkan loader found no physical device: install a driver (Debian/Ubuntu: \
         `apt-get install mesa-vulkan-drivers` for lavapipe, or your GPU vendor's driver); \
         `VK_LOADER_DEBUG=all` shows where the loader looked"
    )]
    NoPhysicalDevice,
    /// `VKDELEGATE_DEVICE_INDEX` (or an explicit index) is out of range or not a number.
    #[error("device index {requested} is not valid: {available} device(s) available:\n{listing}")]
    DeviceIndexOutOfRange {
        /// The index as given.
        requested: String,
        /// How many devices there are.
        available: usize,
        /// One line per device: index, type and name.
        listing: String,
    },
    /// Validation was asked for but the Khronos validation layer is not installed.
    #[error(
        "validation was requested but the layer VK_LAYER_KHRONOS_validation is not installed \
         (Debian/Ubuntu: `apt-get install vulkan-validationlayers`)"
    )]
    ValidationLayerMissing,
    /// The emulation layer directory given does not hold both emulation layers.
    #[error("emulation layer directory {dir}: {problem}")]
    EmulationLayer {
        /// The directory searched.
        dir: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A device does not meet declared requirements. When `VK_ARM_tensors` or
    /// `VK_ARM_data_graph` is missing, the message says how to get Arm's emulation layer
    /// ([`missing_arm_hint`]).
    #[error(
        "device '{device}' does not meet the requirements of {requester}: {missing}{hint}",
        hint = hint_suffix(missing)
    )]
    Unsupported {
        /// Device name.
        device: String,
        /// Who declared the requirements (e.g. `vgf-delegate`).
        requester: String,
        /// Each missing item.
        missing: Missing,
    },
    /// A device-level entry point resolved to NULL.
    #[error(
        "entry point {name} resolved to NULL through vkGetDeviceProcAddr: the extension that \
         provides it is not enabled, or a layer that should provide it was not loaded \
         (`VK_LOADER_DEBUG=all` shows dropped layers)"
    )]
    MissingEntryPoint {
        /// The entry point name.
        name: &'static str,
    },
    /// An argument is invalid; the message names it.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// No memory type satisfies a request.
    #[error(
        "no memory type has the properties {wanted:?} among the types allowed by mask {type_bits:#x}"
    )]
    NoMemoryType {
        /// Allowed memory types from the requirements.
        type_bits: u32,
        /// Wanted property flags.
        wanted: vk::MemoryPropertyFlags,
    },
    /// Device or host memory could not be allocated.
    #[error("allocating {bytes} bytes for {what} failed: {result}")]
    Allocation {
        /// What the memory was for.
        what: String,
        /// Bytes asked for.
        bytes: u64,
        /// What the allocator returned.
        result: vk::Result,
    },
    /// Submitted work did not finish within the wait timeout; it stays pending.
    #[error(
        "{what} did not finish within {timeout:?} (the work stays pending; a later wait may \
         still see it finish)"
    )]
    Timeout {
        /// What was waited for.
        what: String,
        /// How long the wait took before giving up.
        timeout: std::time::Duration,
    },
    /// An earlier call lost the device (`VK_ERROR_DEVICE_LOST`): nothing on it works any more.
    #[error(
        "device '{device}' was lost (VK_ERROR_DEVICE_LOST) {when}; models on it cannot run \
         again: drop them and create a new device"
    )]
    DeviceLost {
        /// Device name.
        device: String,
        /// Where the loss was first seen, e.g. `in vkQueueSubmit`.
        when: String,
    },
    /// An input or output does not match what a model declares.
    #[error(transparent)]
    Io(#[from] IoError),
    /// A Vulkan call failed.
    #[error(transparent)]
    Vk(#[from] VkError),
}

/// Shorthand for `Result<T, vk_core::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every required item a device lacks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Missing {
    /// `(device's, required)` when the API version is too low.
    pub api_version: Option<(Version, Version)>,
    /// Missing extensions.
    pub extensions: Vec<String>,
    /// Missing features, by Vulkan field name.
    pub features: Vec<&'static str>,
    /// Required queue capabilities no single family has.
    pub queue: Option<QueueCaps>,
}

impl Missing {
    /// Whether nothing is missing.
    pub fn is_empty(&self) -> bool {
        self.api_version.is_none()
            && self.extensions.is_empty()
            && self.features.is_empty()
            && self.queue.is_none()
    }
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some((have, want)) = self.api_version {
            parts.push(format!("API version {want} (device has {have})"));
        }
        for e in &self.extensions {
            parts.push(format!("extension {e}"));
        }
        for feat in &self.features {
            parts.push(format!("feature {feat}"));
        }
        if let Some(q) = self.queue {
            parts.push(format!("a queue family with {}", q.describe()));
        }
        write!(f, "missing {}", parts.join(", "))
    }
}

/// What to do when a device lacks `VK_ARM_tensors` or `VK_ARM_data_graph`: where Arm's ML
/// emulation layer comes from. `None` when `missing` names neither extension.
pub fn missing_arm_hint(missing: &Missing) -> Option<&'static str> {
    let arm = [arm::TENSORS_EXTENSION_NAME, arm::DATA_GRAPH_EXTENSION_NAME];
    missing
        .extensions
        .iter()
        .any(|e| arm.iter().any(|a| a.to_bytes() == e.as_bytes()))
        .then_some(
            "no device offers VK_ARM_tensors / VK_ARM_data_graph natively and Arm's ML \
             emulation layer, which adds them, was not loaded: run `cargo xtask setup` (it \
             installs the layer into target/vk-emulation-layer, found beside the executables \
             built there), or set VKDELEGATE_EMULATION_LAYER_DIR to a directory holding the \
             layers as graph/VkLayer_Graph.json and tensor/VkLayer_Tensor.json; \
             VKDELEGATE_EMULATION_LAYER=off disables the layer",
        )
}

/// `"; <hint>"` for an error message, or nothing.
pub(crate) fn hint_suffix(missing: &Missing) -> String {
    missing_arm_hint(missing).map_or_else(String::new, |h| format!("; {h}"))
}

/// An input or output that does not match its spec.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IoError {
    /// Wrong number of inputs.
    #[error("expected {expected} input(s), got {actual}")]
    Count {
        /// Inputs declared.
        expected: usize,
        /// Inputs given.
        actual: usize,
    },
    /// An input's dtype or shape differs from its spec.
    #[error(
        "input '{name}' (#{index}): expected {want_dtype}{want_shape:?}, got {got_dtype}{got_shape:?}"
    )]
    Mismatch {
        /// Position.
        index: usize,
        /// Name.
        name: String,
        /// Declared dtype.
        want_dtype: DType,
        /// Declared shape.
        want_shape: Vec<usize>,
        /// Given dtype.
        got_dtype: DType,
        /// Given shape.
        got_shape: Vec<usize>,
    },
}
