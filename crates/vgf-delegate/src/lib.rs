//! `vgf-delegate`: decodes Arm VGF files and runs them on Vulkan.
//!
//! - [`Vgf::decode`] reads a VGF 0.4.x / 0.5.x file (header, module table, model sequence
//!   table, model resource table, constants) into borrowed views, checking every count,
//!   offset and index; a malformed file is a [`DecodeError`] naming the field, never a panic.
//! - [`inspect_json`] describes a decoded file as JSON.

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

pub use error::{DecodeError, Error, Result};
pub use format::{Category, ModuleType, Vgf};
pub use inspect::inspect_json;
pub mod model;
pub mod requirements;

pub use model::{DeviceTensor, LoadOptions, MemoryMode, Model, TensorInfo};
pub use requirements::{requirements, requirements_for};
