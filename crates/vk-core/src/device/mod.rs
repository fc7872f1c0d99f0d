//! The device layer: loading Vulkan and creating an instance, physical devices and their
//! capabilities, the features and requirements a delegate declares, the device and its queue,
//! and the extension bindings they need (`VK_ARM_tensors`, `VK_ARM_data_graph`, NVIDIA's
//! cooperative matrix 2). Imports nothing of [`crate::gpu`] or [`crate::io`].

pub mod adapter;
pub mod arm;
pub mod caps;
pub mod conv;
// `vk_core::device::Device` stays valid through the re-export below.
#[allow(clippy::module_inception)]
pub mod device;
pub mod emulation;
pub mod fault;
pub mod features;
pub mod instance;
pub mod nv;
pub mod queue;
pub mod requirements;

pub use self::device::{Device, DropCallback};
