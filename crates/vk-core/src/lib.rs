//! `vk-core`: the Vulkan layer every vkdelegate crate stands on.
//!
//! - Loads Vulkan at run time (`ash`, loaded): no link-time dependency on a loader; a missing
//!   loader or driver is an [`Error`] that says what to install.
//! - Creates an [`Instance`] with the highest API version the loader offers, up to 1.3, with
//!   the Khronos validation layer on request (`VKDELEGATE_VALIDATION=1`; messages go to the
//!   `log` facade and are counted in [`ValidationLog`]).
//! - Enumerates physical devices as [`Adapter`]s with their [`Capabilities`], ranks them
//!   (discrete > integrated > virtual > other > CPU) and selects one
//!   (`VKDELEGATE_DEVICE_INDEX` overrides).
//! - Creates a [`Device`] from the [`Requirements`] a delegate declares: a missing required
//!   item is an error naming each missing item, optional items are enabled only when present,
//!   and one table ([`Features`]) builds the pNext feature chain. The same requirements can be
//!   checked against an existing device ([`Device::check`]).
//! - Adopts application-owned handles ([`Instance::from_raw`], [`Device::from_raw`]) without
//!   destroying them, and owns what it creates: children hold their parent in an `Arc`, so
//!   destruction order is right whatever the user drops first.
//! - Binds `VK_ARM_tensors` and `VK_ARM_data_graph` ([`arm`]), and finds Arm's ML emulation
//!   layers when no device has those extensions natively ([`emulation`]).
//!
//! - Provides the plumbing every delegate uses, once: [`Submission`] (command pool, command
//!   buffers, fence, pending state, semaphores, one [`WaitPolicy`], device loss), memory from one
//!   vk-mem allocator per device ([`Buffer`], [`MemoryBlock`], the [`HostIo`] rule), host
//!   transfers along a [`HostPath`] ([`HostTransfer`]: pipelined staging or imported host
//!   memory), barriers by name ([`barrier`]), [`Timestamps`], the shared vocabulary of
//!   tensors ([`TensorSpec`], [`check_inputs`], [`DeviceTensor`], [`BufferSlice`]), and the
//!   kernels converting an application's images from and to tensors ([`image_io`]).
//!
//! Queue access goes through [`Queue::lock`], a scoped guard; an application sharing a queue
//! supplies its lock through [`QueueLock`].
//!
//! What `vk-core` does not check: the validity of raw handles given to the `unsafe`
//! constructors and submission functions (their `# Safety` sections say what the caller
//! guarantees), and anything about delegates: it knows nothing of VGF files or compute graphs.

pub mod device;
pub mod error;
pub mod gpu;
pub mod io;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use device::{
    adapter, arm, caps, conv, emulation, fault, features, instance, nv, queue, requirements,
};
pub use gpu::{
    barrier, command, host, memory, pipeline_cache, pipeline_stats, query, selftest, timing,
    transfer,
};
pub use io::{image_io, tensor};

pub use adapter::{Adapter, DeviceSummary, rank, select_index};
pub use barrier::Access;
pub use caps::{
    ArmSupport, Capabilities, CoopComponent, CoopFlexibleShape, CoopMatrixShape, Limits,
    MemoryHeap, MemoryInfo, MemoryType, QueueFamily,
};
pub use command::{SemaphoreSignal, SemaphoreWait, Submission, WaitPolicy};
pub use conv::{DeviceType, QueueCaps, Version};
pub use device::{Device, DropCallback};
pub use emulation::EmulationPolicy;
pub use error::{Error, Result, VkError, VkResultExt};
pub use fault::FaultPoint;
pub use features::Features;
pub use gpu::kernel::compute_layouts;
pub use host::{DType, HostTensor, HostTensorError, zeroed_bytes};
pub use image_io::{
    AppImage, ColourMap, FormatClass, ImageConversion, ImageError, ImageProblem, ImageToTensor,
    TensorLayout, TensorToImage,
};
pub use instance::{Instance, InstanceDesc, ValidationLog};
pub use memory::{Buffer, COPY_THREADS_ENV, HostIo, MemoryBlock, MemoryLocation};
pub use pipeline_cache::{CacheFile, DiskCache, PIPELINE_CACHE_ENV, RecordFile};
pub use query::Timestamps;
pub use queue::{DefaultQueueLock, Queue, QueueGuard, QueueLock, QueueStats};
pub use requirements::{Enabled, Missing, Requirements};
pub use tensor::{BufferSlice, DeviceTensor, IoError, TensorSpec, check_inputs};
pub use timing::Summary;
pub use transfer::{HOST_PATH_ENV, HostPath, HostTransfer, TransferRoute};

pub use ash;
pub use ash::vk;
pub use vk_mem;
