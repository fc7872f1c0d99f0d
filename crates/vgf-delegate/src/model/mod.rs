//! The executor: a decoded VGF file made into Vulkan objects on a caller's device, and run.
//!
//! Per model resource (other than constants) one tensor (`VK_ARM_tensors`, linear tiling) and
//! one tensor view; resources of one alias group share one allocation. Model inputs and
//! outputs also get a `VkBuffer` bound to the same memory (linear, packed tensors have the
//! buffer's byte layout), through which the host path copies and through which callers can
//! reach the data on the device ([`Model::device_inputs`]).
//!
//! Memory per device: where device memory is host-visible ([`MemoryMode::Direct`]: integrated
//! GPUs, lavapipe) every storage is mapped and written or read in place; elsewhere
//! ([`MemoryMode::Staged`]: discrete GPUs) storage is device-local and inputs and outputs go
//! through host-visible staging buffers, copied by the recorded command buffer.
//!
//! GRAPH segments become data-graph pipelines (SPIR-V module + graph constants from the
//! constants section), each with a pipeline session and its bind-point memory; COMPUTE
//! segments become compute pipelines with their push constant ranges (zero-filled) and
//! dispatch shape. One command buffer is recorded at load and replayed by every execution:
//! [staging in] segments, separated by barriers, [staging out], then a barrier from
//! ALL_COMMANDS / MEMORY_WRITE to HOST / HOST_READ.
//!
//! Queue access: only around `vkQueueSubmit2`, through [`vk_core::QueueGuard`]; the fence wait
//!
//! Files: `objects.rs` (every Vulkan object, destroyed in order), `resources.rs` (tensors,
//! views, alias-group memory), `pipelines.rs` (segments, sessions, descriptor sets),
//! `record.rs` (command recording), `io.rs` (host input and output, staging, device tensors).

mod io;
mod objects;
mod pipelines;
mod record;
mod resources;

use std::path::Path;

use vk_core::arm::{self, DataGraphFns, TensorFns};
use vk_core::{DType, Device, vk};

use crate::error::{Error, Result};
use crate::format::{ModuleType, Vgf};
use crate::requirements::requirements_for;
use io::Io;
use objects::Objects;
use pipelines::SegmentRun;

/// How long an execution may take before it is reported as an error.
const FENCE_TIMEOUT_NS: u64 = 600_000_000_000;

/// Where tensor memory lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemoryMode {
    /// Direct where the device's memory is unified (a host-visible, device-local, coherent
    /// heap holding at least half of its device-local memory: integrated GPUs, CPU drivers,
    /// resizable BAR), staged otherwise (discrete GPUs with a small BAR window).
    #[default]
    Auto,
    /// Every storage mapped; the host reads and writes tensors in place.
    Direct,
    /// Device-local storage; inputs and outputs through host-visible staging buffers.
    Staged,
}

/// Options of [`Model::load_with`].
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Memory placement.
    pub memory: MemoryMode,
}

/// A model input or output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Name (from the file; `input_<i>` / `output_<i>` when it has none).
    pub name: String,
    /// Shape.
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: DType,
    /// Index in the model resource table.
    pub mrt_index: u32,
    /// Size in bytes.
    pub bytes: usize,
}

/// Where an input or output lives on the device: a tensor, its view, and a buffer over the
/// same bytes (packed, row-major).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceTensor {
    /// The tensor.
    pub tensor: arm::TensorARM,
    /// Its view.
    pub view: arm::TensorViewARM,
    /// A buffer bound to the same memory (usage: storage, transfer source and destination).
    pub buffer: vk::Buffer,
    /// The memory.
    pub memory: vk::DeviceMemory,
    /// Offset of the tensor in `memory`.
    pub offset: vk::DeviceSize,
    /// Size in bytes.
    pub size: vk::DeviceSize,
}

/// A VGF model loaded on a device, ready to execute.
#[derive(Debug)]
pub struct Model {
    objects: Objects,
    inputs: Vec<TensorInfo>,
    outputs: Vec<TensorInfo>,
    input_io: Vec<Io>,
    output_io: Vec<Io>,
    /// Per resource: the storage it lives in (None for constants).
    resource_storage: Vec<Option<usize>>,
    memory_mode: MemoryMode,
    host_cb: vk::CommandBuffer,
    device_cb: vk::CommandBuffer,
    in_flight: bool,
    runs: Vec<SegmentRun>,
    sets: Vec<Vec<vk::DescriptorSet>>,
}

// SAFETY: the raw pointers are mappings of memory this model owns; all access to them goes
// through `&mut self` (execute) or `&self` reads that do not race with GPU writes (the fence
// is waited before outputs are read).
unsafe impl Send for Model {}

fn unsupported(msg: impl Into<String>) -> Error {
    Error::Unsupported(msg.into())
}

fn vkerr(call: &'static str) -> impl Fn(vk::Result) -> Error {
    move |r| Error::Vk(vk_core::VkError::new(call, r))
}

/// The ARM entry points a model needs of `device`, after checking its requirements.
fn arm_fns(vgf: &Vgf<'_>, device: &Device) -> Result<(TensorFns, Option<DataGraphFns>)> {
    device.check(&requirements_for(vgf)?)?;
    let arm_fns = device.arm().ok_or_else(|| {
        unsupported("the device has neither VK_ARM_tensors nor VK_ARM_data_graph enabled")
    })?;
    let tensor_fns = arm_fns
        .tensors
        .ok_or_else(|| unsupported("the device has VK_ARM_tensors disabled"))?;
    let has_graph = vgf
        .sequence
        .segments
        .iter()
        .any(|s| s.kind == ModuleType::Graph);
    let data_graph_fns = arm_fns.data_graph;
    if has_graph && data_graph_fns.is_none() {
        return Err(unsupported(
            "the model has GRAPH segments but VK_ARM_data_graph is not enabled",
        ));
    }
    Ok((tensor_fns, data_graph_fns))
}

impl Model {
    /// Loads a model from VGF bytes on `device` with default options.
    pub fn load(bytes: &[u8], device: &Device) -> Result<Model> {
        Model::load_with(bytes, device, &LoadOptions::default())
    }

    /// Loads a model from a file on `device`.
    pub fn from_file(path: impl AsRef<Path>, device: &Device) -> Result<Model> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| Error::Io {
            path: path.display().to_string(),
            source,
        })?;
        Model::load(&bytes, device)
    }

    /// Opens a standalone device meeting this model's requirements and loads it there.
    pub fn load_standalone(bytes: &[u8]) -> Result<Model> {
        let vgf = Vgf::decode(bytes)?;
        let device = Device::open(&requirements_for(&vgf)?)?;
        Model::from_decoded(&vgf, &device, &LoadOptions::default())
    }

    /// Loads a model from VGF bytes on `device`.
    pub fn load_with(bytes: &[u8], device: &Device, options: &LoadOptions) -> Result<Model> {
        let vgf = Vgf::decode(bytes)?;
        Model::from_decoded(&vgf, device, options)
    }

    /// The model's inputs, in order.
    pub fn inputs(&self) -> &[TensorInfo] {
        &self.inputs
    }

    /// The model's outputs, in order.
    pub fn outputs(&self) -> &[TensorInfo] {
        &self.outputs
    }

    /// The memory placement in use (never `Auto`).
    pub fn memory_mode(&self) -> MemoryMode {
        self.memory_mode
    }

    /// The device the model runs on.
    pub fn device(&self) -> &Device {
        &self.objects.device
    }

    /// Builds a model from a decoded file: resources and their memory, inputs and outputs,
    /// segments, descriptor sets, then the two recorded command buffers.
    pub fn from_decoded(vgf: &Vgf<'_>, device: &Device, options: &LoadOptions) -> Result<Model> {
        let (tensor_fns, data_graph_fns) = arm_fns(vgf, device)?;
        let mut objects = Objects::new(device, tensor_fns, data_graph_fns, vgf.resources.len());
        let usage = resources::Usage::of(vgf)?;
        let tensors = resources::create_tensors(&mut objects, vgf, &usage)?;
        let memory_mode = resources::choose_memory_mode(&objects, &tensors, options.memory);
        let (resource_storage, storage_reqs) = resources::plan_storages(vgf, &tensors);
        resources::allocate_storages(&mut objects, &storage_reqs, memory_mode)?;
        resources::bind_resources(&mut objects, vgf, &resource_storage)?;
        let seq = &vgf.sequence;
        let (inputs, input_io) = io::describe(
            &mut objects,
            vgf,
            (&seq.inputs, &seq.input_names, "input"),
            memory_mode,
        )?;
        let (outputs, output_io) = io::describe(
            &mut objects,
            vgf,
            (&seq.outputs, &seq.output_names, "output"),
            memory_mode,
        )?;
        let (runs, tensor_descriptors) =
            pipelines::create_segments(&mut objects, vgf, &tensors.descs)?;
        let sets = pipelines::create_descriptor_sets(&mut objects, &runs, tensor_descriptors)?;
        let [host_cb, device_cb] = create_command_buffers(&mut objects)?;
        let model = Model {
            objects,
            inputs,
            outputs,
            input_io,
            output_io,
            resource_storage,
            memory_mode,
            host_cb,
            device_cb,
            in_flight: false,
            runs,
            sets,
        };
        model.record(model.host_cb, true)?;
        model.record(model.device_cb, false)?;
        Ok(model)
    }

    fn submit_cb(
        &mut self,
        cb: vk::CommandBuffer,
        waits: &[vk::SemaphoreSubmitInfo<'_>],
        signals: &[vk::SemaphoreSubmitInfo<'_>],
    ) -> Result<()> {
        let cbs = [vk::CommandBufferSubmitInfo::default().command_buffer(cb)];
        let submit = vk::SubmitInfo2::default()
            .wait_semaphore_infos(waits)
            .command_buffer_infos(&cbs)
            .signal_semaphore_infos(signals);
        {
            let guard = self.objects.device.queue().lock();
            // SAFETY: `cb` is executable and not pending (the fence was waited); the fence is
            // unsignaled; semaphores are the caller's contract (`submit_on_device`).
            unsafe { guard.submit2(&[submit], self.objects.fence) }?;
        }
        self.in_flight = true;
        Ok(())
    }

    /// Waits for this model's submitted work (if any) to finish. Waits on this model's own
    /// fence only, never on the whole queue.
    pub fn wait(&mut self) -> Result<()> {
        if !self.in_flight {
            return Ok(());
        }
        let fence = self.objects.fence;
        // SAFETY: the fence belongs to this model's device.
        unsafe { self.objects.device.wait_for_fence(fence, FENCE_TIMEOUT_NS) }?;
        self.in_flight = false;
        // SAFETY: the fence is signaled and not in use.
        unsafe { self.objects.device.raw().reset_fences(&[fence]) }
            .map_err(vkerr("vkResetFences"))?;
        Ok(())
    }

    /// Submits the model's segments alone (no host copies), waiting on and signaling the
    /// given semaphores. Inputs are read from, and outputs written to, the device tensors of
    /// [`Model::device_inputs`] / [`Model::device_outputs`]. Call [`Model::wait`] (or
    /// [`Model::execute`], which waits first) before the next submission.
    ///
    /// # Safety
    /// The semaphores must be valid for this device and usable as
    /// `vkQueueSubmit2` requires (binary ones: a signal pending for each wait, unsignaled for
    /// each signal). Whoever writes the inputs must have made those writes available and
    /// visible to the segment stages (the semaphore wait's stage mask covers them), and the
    /// caller must not touch the outputs before the signaled semaphore or [`Model::wait`].
    pub unsafe fn submit_on_device(
        &mut self,
        waits: &[vk::SemaphoreSubmitInfo<'_>],
        signals: &[vk::SemaphoreSubmitInfo<'_>],
    ) -> Result<()> {
        self.wait()?;
        let cb = self.device_cb;
        self.submit_cb(cb, waits, signals)
    }

    /// The pipeline stages the segments run in (for barriers and semaphore waits around
    /// [`Model::record_segments`] and [`Model::submit_on_device`]).
    ///
    /// Arm's emulation layer (0.11) translates the data-graph stage bit in the barriers it sees
    /// recorded, but passes the stage masks of `vkQueueSubmit2` semaphores through to a driver
    /// that does not know that bit: there, use `ALL_COMMANDS` for semaphores.
    pub fn stages(&self) -> vk::PipelineStageFlags2 {
        self.segment_stages()
    }
}

/// The command pool, the host and device-only command buffers, and the fence.
fn create_command_buffers(objects: &mut Objects) -> Result<[vk::CommandBuffer; 2]> {
    let device = objects.device.clone();
    let d = device.raw();
    let info = vk::CommandPoolCreateInfo::default().queue_family_index(device.queue().family());
    // SAFETY: valid create info.
    objects.command_pool =
        unsafe { d.create_command_pool(&info, None) }.map_err(vkerr("vkCreateCommandPool"))?;
    let info = vk::CommandBufferAllocateInfo::default()
        .command_pool(objects.command_pool)
        .level(vk::CommandBufferLevel::PRIMARY)
        .command_buffer_count(2);
    // SAFETY: valid allocate info.
    let cbs =
        unsafe { d.allocate_command_buffers(&info) }.map_err(vkerr("vkAllocateCommandBuffers"))?;
    // SAFETY: valid create info.
    objects.fence = unsafe { d.create_fence(&vk::FenceCreateInfo::default(), None) }
        .map_err(vkerr("vkCreateFence"))?;
    Ok([cbs[0], cbs[1]])
}

impl Drop for Model {
    fn drop(&mut self) {
        if self.in_flight {
            let fence = self.objects.fence;
            // SAFETY: the fence belongs to this model's device.
            if let Err(e) = unsafe { self.objects.device.wait_for_fence(fence, FENCE_TIMEOUT_NS) } {
                log::error!("vgf-delegate: waiting for the model's fence on drop failed: {e}");
            }
        }
        // `objects` drops next and destroys everything.
    }
}
