//! Decodes ExecuTorch program files (`.pte`) and the payloads of their Vulkan and VGF
//! delegates, in pure Rust, with no Vulkan.
//!
//! ```no_run
//! # fn main() -> Result<(), executorch_pte::DecodeError> {
//! let bytes = std::fs::read("model.pte").unwrap_or_default();
//! let program = executorch_pte::Program::decode(&bytes)?;
//! let forward = program.forward()?;
//! for (i, delegate) in forward.delegates.iter().enumerate() {
//!     let payload = program.delegate_payload(delegate)?;
//!     if delegate.id == executorch_pte::VULKAN_BACKEND_ID {
//!         let graph = executorch_pte::VkGraph::decode(payload)?;
//!         for (op, nodes) in graph.op_names() {
//!             println!("delegate {i}: {op} at nodes {nodes:?}");
//!         }
//!         for c in 0..graph.constants.len() {
//!             let _weights: &[u8] = graph.constant(c, &program)?;
//!         }
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! # Contract
//!
//! Input is untrusted. [`Program::decode`] checks the `ET12` identifier and the `eh00`
//! extended header (length, program size, segment base offset and segment data size against
//! the file), verifies the program's FlatBuffers data before reading it (depth, table count and
//! expanded size bounded by the buffer's size), checks every segment range, named data entry
//! (segment index, unique keys), constant offset, delegate data reference, and every value,
//! operator, delegate and instruction index of every plan. [`VkGraph::decode`] checks the
//! `VH00` header as ExecuTorch's Vulkan runtime does, verifies the `VK00` FlatBuffers data, and
//! checks every value id, constant id and offset-based constant range. Decoding never panics,
//! and allocates only vectors whose lengths come from verified FlatBuffers vectors. Errors
//! ([`DecodeError`]) name the field and the numbers.
//!
//! The decoded types borrow the file: names, payloads and constant data are slices of it.
//!
//! # What it does not check
//!
//! Whether the ops named exist or their arguments fit their schemas; the values of compile
//! specs; data stored outside the file (`.ptd` files, external tensors); tensor sizes against
//! planned memory. A `VgfBackend` payload is the raw `.vgf` file: this crate hands it over
//! undecoded.
//!
//! # Schemas
//!
//! `schema/` holds ExecuTorch's `program.fbs`, `scalar_type.fbs` and the Vulkan backend's
//! `schema.fbs` (as `vkgraph.fbs`) from ExecuTorch 1.5.0; `src/program_generated.rs` and
//! `src/vkgraph_generated.rs` were generated from them by flatc 25.12.19 for the `flatbuffers`
//! crate 25.12.19 (`flatc --rust --gen-all -o src schema/program.fbs`,
//! `flatc --rust -o src schema/vkgraph.fbs`, then `cargo fmt`). Building needs no flatc.

mod counts;
pub mod error;
pub mod plan;
pub mod program;
pub mod scalar;
mod vectors;
pub mod vulkan;

#[cfg(any(test, feature = "test-support"))]
#[doc(hidden)]
pub mod test_support;

#[allow(
    clippy::all,
    clippy::undocumented_unsafe_blocks,
    clippy::unwrap_used,
    clippy::missing_safety_doc,
    unsafe_op_in_unsafe_fn,
    missing_debug_implementations,
    missing_docs,
    rust_2018_idioms,
    deprecated,
    unused_imports,
    dead_code,
    non_camel_case_types,
    unused_lifetimes,
    mismatched_lifetime_syntaxes
)]
pub(crate) mod program_generated;

#[allow(
    clippy::all,
    clippy::undocumented_unsafe_blocks,
    clippy::unwrap_used,
    clippy::missing_safety_doc,
    unsafe_op_in_unsafe_fn,
    missing_debug_implementations,
    missing_docs,
    rust_2018_idioms,
    deprecated,
    unused_imports,
    dead_code,
    non_camel_case_types,
    unused_lifetimes,
    mismatched_lifetime_syntaxes
)]
pub(crate) mod vkgraph_generated;

pub use counts::{DecodeCounts, decode_counts};
pub use error::{DecodeError, Result};
pub use plan::{
    Allocation, Chain, CompileSpec, DataLocation, DataReference, Delegate, ExecutionPlan,
    ExtraTensorInfo, Instruction, Operator, ShapeDynamism, Tensor, Value,
};
pub use program::{
    Constants, DataSegment, ExtendedHeader, FORWARD, NamedData, PROGRAM_IDENTIFIER, Program,
};
pub use scalar::ScalarType;
pub use vulkan::{
    NAMED_DATA_OFFSET, OperatorCall, VULKAN_BACKEND_ID, VkBytes, VkDataType, VkGraph,
    VkMemoryLayout, VkStorageType, VkTensor, VkValue, VulkanHeader,
};

/// The backend id of VGF delegates; their payload is the raw `.vgf` file.
pub const VGF_BACKEND_ID: &str = "VgfBackend";
