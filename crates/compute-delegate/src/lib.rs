//! `compute-delegate`: a compute graph of GLSL shaders on Vulkan.
//!
//! Build a graph with [`GraphBuilder`] (inputs, constants, ops, outputs; every op checks its
//! operands at once and errors name the tensors and numbers), then [`GraphBuilder::build`] it
//! on a [`vk_core::Device`] that meets [`requirements`]. [`Graph::execute`] takes and returns
//! [`vk_core::HostTensor`]s (contiguous, row-major / NCHW).
//!
//! Runtime contract:
//! - Memory from the device's one vk-mem allocator (`vk_core::Buffer`). Devices whose memory
//!   is the host's (CPU drivers, integrated GPUs) map input and output buffers directly;
//!   others copy small tensors through host staging buffers recorded into the same command
//!   buffer and large ones through the graph's `vk_core::HostTransfer` (pipelined staging or
//!   imported host memory); the rule is `vk_core::HostPath::for_device`, overridden by
//!   `VKDELEGATE_HOST_PATH` or [`BuildOptions::host_path`].
//! - Weights are uploaded (and prepacked: `linear` weights transposed) once at build.
//! - One batched pipeline creation at build through a pipeline cache that can be saved
//!   ([`Graph::pipeline_cache_data`]) and loaded ([`BuildOptions::pipeline_cache`]).
//! - The command buffer is recorded once and replayed. Barriers come from how dispatches use
//!   buffers (none between independent dispatches); every execution ends with a global
//!   `ALL_COMMANDS / MEMORY_WRITE -> HOST / HOST_READ` barrier; non-coherent memory is flushed
//!   after host writes and invalidated before host reads.
//! - Every tensor's size is checked in bytes against `maxStorageBufferRange` at build.
//! - Intermediate buffers are reused across tensors whose lifetimes do not overlap;
//!   [`Graph::memory`] reports the peak.
//! - Submissions go through one `vk_core::Submission` per graph (the device's queue guard,
//!   held only around `vkQueueSubmit`, and `vk-core`'s wait policy); each graph waits only on
//!   its own fence.
//! - Device-resident chaining, in the vocabulary every delegate shares: [`Graph::inputs`] /
//!   [`Graph::outputs`] are `vk_core::TensorSpec`s, [`Graph::device_inputs`] /
//!   [`Graph::device_outputs`] `vk_core::DeviceTensor`s; [`Graph::submit`] submits the
//!   dispatches alone with wait and signal semaphores, [`Graph::wait`] waits,
//!   [`Graph::record_into`] records them into a caller's command buffer;
//!   [`Graph::write_input`] and [`Graph::read_output`] move host data at the ends of a chain
//!   (the readback also ends with the host barrier).
//! - External bindings ([`BuildOptions::external`], [`Graph::rebind_input`],
//!   [`Graph::rebind_output`]): an input read from, or an output written to, another
//!   delegate's buffer slice on the same device, with no buffer of the graph's own and no copy.
//! - [`GraphBuilder::input_specs`] / [`GraphBuilder::output_specs`] describe the graph's
//!   inputs and outputs before any device is involved.
//! - [`BuildOptions::force_staging`] takes the discrete-GPU staging path on any device (the
//!   tests run every op both ways).
//!
//! Benchmarks (feature `bench`): `bench()` measures each op's device time (timestamps,
//! median), end-to-end time and throughput against baselines measured in the same run on the
//! same device (`vkCmdCopyBuffer` bandwidth; an fp32 FMA peak probe). `examples/bench.rs`
//! prints them:
//! `cargo run --release -p compute-delegate --example bench -- [--quick] [FILTER]`.
//!
//! Ops (each a GLSL shader in `shaders/compute-delegate/`):
//! - elementwise: `add`, `sub`, `mul`, `div` with PyTorch broadcasting (vec4 path for equal
//!   shapes) and scalar forms; `relu`, `clamp` / `relu6` / `hardtanh`, `sigmoid`, `tanh`,
//!   `gelu` (erf or tanh form), `hardswish`;
//! - `softmax` and `log_softmax` over any dim; `sum` and `mean` over any dims; `layer_norm`;
//! - `avg_pool2d` and `max_pool2d` (kernel, stride, padding, ceil_mode, count_include_pad;
//!   vectorised 2x2 / stride 2 path);
//! - `conv2d` (groups, stride, padding, dilation, bias) as a tiled implicit GEMM, with a
//!   pointwise path and a depthwise kernel; `linear`, `matmul` (batch broadcasting), `bmm`:
//!   one register-tiled GEMM shader (8x8 per thread, up to 128x128 per work group), split
//!   along K when the output has too few tiles to fill the device;
//! - `reshape` / `view` (no copy), `permute` / `transpose`, `cat`, `slice` (strided copies of
//!   32-bit or f16 elements), `cast` between f32, f16, i32 and i8;
//! - int8 `add_q8` and `conv2d_q8` with TOSA-style rescales (per tensor or per channel).
//!
//! Dtypes: the graph's dtype decides. Float ops take f32 or f16 operands (all float operands
//! of one op the same dtype; mixing is an [`Error::DType`] naming the tensor) and their
//! outputs keep it. f16 ops run the f16 variant of their shader: fp16 storage, fp32
//! arithmetic and accumulation (reductions, softmax, norms, GEMM and conv accumulators), on
//! devices with [`F16_FEATURES`]; a graph with such an op needs [`f16_requirements`] and its
//! build fails on a device without them with an error naming the missing features. Graphs
//! without f16 ops ask for nothing 16-bit: `cast` (f32, f16, i32, i8, i64) and f16 graph
//! inputs and outputs move packed 32-bit words. int8 ops compute in i8/i32.
//!
//! What it does not check: the validity of handles given to its `unsafe` functions; that the
//! device passed to `build` has what [`requirements`] lists (a device made from them does).
//! Subgroup arithmetic is used where the physical device offers it in compute shaders (queried
//! at build; [`BuildOptions::disable_subgroups`] turns it off) for the row reductions of
//! softmax, sum/mean and layer_norm; it is never required. Cooperative matrices are not used.
//! It never names a symbol of the ARM ML extensions and knows nothing of VGF files.

mod attention_fusion;
#[cfg(feature = "bench")]
pub mod bench;
mod build;
mod chains;
mod constants;
mod coop;
mod coop_attention;
mod error;
mod fold;
mod graph;
mod kernels;
mod layout;
mod lower;
mod merge;
pub mod ops;
pub use ops::{Conv3d, IntBinary, IntConv, IntReduce, IntRescale, IntUnary, Math, Pool3d, Resize};
mod fusion;
mod options;
mod packed;
mod passes;
mod pipelines;
mod placement;
mod runtime;
mod threads;

pub use attention_fusion::PROMPT_ATTENTION_ENV;
#[cfg(feature = "bench")]
pub use bench::{BenchRow, bench, bench_requirements};
pub use constants::ConstantPool;
pub use coop::{
    COOPERATIVE_FEATURES, CoopPolicy, cooperative_conv_kernel, cooperative_gemm_kernel,
};
pub use coop_attention::{ATTENTION_COOP2_ENV, cooperative_attention_kernel};
pub use error::{Error, Result};
pub use graph::{
    BinaryOp, Compare, Conv2d, GraphBuilder, Pool2d, QAdd, QConv, Rescale, TensorId, UnaryOp,
};
pub use options::{BuildOptions, ExternalBindings, FUSION_ENV};
pub use packed::PACKED_F16_ENV;
pub use runtime::{DispatchTime, Graph, MemoryReport};

use vk_core::{Device, Features, QueueCaps, Requirements, Version};

/// What the delegate needs from a device for any graph: a compute queue on Vulkan 1.1.
/// Nothing optional is asked for: f32 graphs' shaders use 32-bit types only (f16 and i8
/// tensors at their edges are packed into 32-bit words) and subgroup operations, which are
/// core and queried from the device's properties, so no 8/16/64-bit, subgroup-size or
/// cooperative-matrix feature is enabled on the delegate's behalf. Graphs that compute in f16
/// need [`f16_requirements`] ([`GraphBuilder::requirements`] says which a graph needs).
pub fn requirements() -> Requirements {
    Requirements::new("compute-delegate")
        .min_api(Version::V1_1)
        .require_queue(QueueCaps::COMPUTE)
}

/// The features an fp16 graph's shaders use: `shaderFloat16` and
/// `storageBuffer16BitAccess`.
pub const F16_FEATURES: Features = Features::SHADER_FLOAT16.union(Features::STORAGE_BUFFER_16BIT);

/// What a graph that computes in f16 needs: [`requirements`] and [`F16_FEATURES`].
pub fn f16_requirements() -> Requirements {
    Requirements::new("compute-delegate (f16 graph)")
        .min_api(Version::V1_1)
        .require_queue(QueueCaps::COMPUTE)
        .require_features(F16_FEATURES)
}

/// Whether `device` has [`F16_FEATURES`] enabled, so that fp16 graphs build on it.
pub fn supports_f16(device: &Device) -> bool {
    device.check(&f16_requirements()).is_ok()
}

#[cfg(feature = "shared")]
mod shared;
