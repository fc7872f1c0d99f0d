//! `vgf-delegate`: decodes Arm VGF files and runs them on Vulkan through `VK_ARM_tensors` and
//! `VK_ARM_data_graph`.
//!
//! # Decoding
//! [`Vgf::decode`] reads VGF 0.4.x and 0.5.x: the 128-byte header, the module table (SPIR-V;
//! GLSL or HLSL code is [`DecodeError::UnsupportedModuleCode`]), the model sequence table
//! (segments, descriptor sets, bindings, constants, dispatch shapes, push constant ranges and
//! 0.5's graph constant bindings), the model resource table (formats, descriptor types,
//! shapes, strides, alias groups, sampler configuration) and the constants (`CONST00` and the
//! legacy FlatBuffers layout). Every FlatBuffers section is verified before use; every count,
//! offset and index is checked; errors name the field and the numbers. SPIR-V code, constant
//! data and names are borrowed from the file. [`inspect_json`] describes a decoded file.
//!
//! # Running
//! [`requirements()`] is what any VGF model needs of a device; [`requirements_for`] what one
//! model needs (from its modules' SPIR-V capabilities). [`Model::load`] builds a model on a
//! [`vk_core::Device`] the caller supplies (checked against those requirements, with an error
//! naming what is missing); [`Model::load_standalone`] opens its own device.
//! [`Model::inputs`] / [`Model::outputs`] are [`vk_core::TensorSpec`]s;
//! [`Model::execute`] takes and returns [`vk_core::HostTensor`]s, checked by
//! [`vk_core::check_inputs`]. For work that stays on the device, [`Model::device_inputs`] /
//! [`Model::device_outputs`] give [`vk_core::DeviceTensor`]s (a buffer over each tensor's
//! bytes, with its memory), [`Model::record_into`] records the model into a caller's command
//! buffer, [`Model::submit`] submits it with wait and signal semaphores and [`Model::wait`]
//! waits for it. [`LoadOptions::external`] binds an input or output tensor to memory the
//! caller provides ([`External`]: e.g. another model's output on the same device), so that
//! a producer hands its result to a VGF consumer with no copy. `bench::bench` (feature `bench`)
//! times a model.
//!
//! Submission, fence and waits are one [`vk_core::Submission`]: queue access only around
//! `vkQueueSubmit`, fence waits after the guard is released, on this model's own fence only.
//! Memory comes from the device's allocator (`vk_core::memory`).
//!
//! # Features
//! - `shared`: registers this crate's device requirements with `shared-runtime` (module `shared`),
//!   so that whoever creates a shared device asks for what VGF models need. Whether a model
//!   runs on a shared or its own device is the caller's run-time choice: [`Model::load`] takes
//!   any [`vk_core::Device`].
//!
//! # What this crate does not check
//! The SPIR-V of a module beyond its preamble (the driver or layer validates it); that
//! graph constant ids and bindings in the file match the module's `OpGraphConstantARM`s and
//! interface (the data-graph implementation does); push constant values (the format declares
//! ranges, not values: they are zero-filled). Sparse constants, non-tensor descriptor types and
//! strided model inputs/outputs are reported as unsupported.

#[cfg(feature = "bench")]
pub mod bench;
pub mod error;
pub mod format;
pub mod inspect;

#[allow(
    clippy::all,
    clippy::undocumented_unsafe_blocks,
    clippy::unwrap_used,
    clippy::missing_safety_doc,
    unsafe_op_in_unsafe_fn,
    missing_debug_implementations,
    rust_2018_idioms,
    deprecated,
    unused_imports,
    dead_code,
    non_camel_case_types,
    unused_lifetimes,
    mismatched_lifetime_syntaxes
)]
mod vgf_generated;

pub mod model;
pub mod requirements;
#[cfg(feature = "shared")]
pub mod shared;
pub mod tosa;
mod version;

pub use error::{BindError, DecodeError, Error, Result};
pub use format::{Category, ModuleType, Vgf, VgfFile, decode_count};
pub use inspect::inspect_json;
pub use model::{
    DeviceTensor, External, IoRef, IoTensor, LoadOptions, MemoryMode, Model, TensorSpec,
    model_specs,
};
pub use requirements::{requirements, requirements_for};
