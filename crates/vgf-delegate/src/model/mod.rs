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
//! ([`MemoryMode::Staged`]: discrete GPUs) storage is device-local and small inputs and outputs
//! go through host-visible staging buffers, copied by the recorded command buffer; large ones
//! through the model's [`vk_core::HostTransfer`] (pipelined staging or imported host memory,
//! [`LoadOptions::host_path`]) before and after it.
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
//! `record.rs` (command recording), `io.rs` (host input and output, staging, device tensors),
//! `external.rs` (inputs and outputs bound to the caller's memory).

mod external;
mod io;
mod objects;
mod pipelines;
mod record;
mod resources;

use std::path::Path;

use vk_core::arm;
use vk_core::arm::{DataGraphFns, TensorFns};
use vk_core::{
    BufferSlice, Device, HostPath, HostTransfer, SemaphoreSignal, SemaphoreWait, Submission, vk,
};
pub use vk_core::{DeviceTensor, TensorSpec};

use crate::error::{Error, Result};
use crate::format::{ModuleType, Vgf};
use crate::requirements::requirements_for;
pub use external::{External, IoRef};
use io::Io;
pub use io::model_specs;
use objects::Objects;
use pipelines::SegmentRun;

/// The submission's command buffer with host copies and the host-read barrier.
const HOST_CB: usize = 0;
/// The submission's command buffer with the segments alone.
const DEVICE_CB: usize = 1;

/// Where tensor memory lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemoryMode {
    /// As the host path says ([`LoadOptions::host_path`], else
    /// [`vk_core::HostPath::for_device`]): direct where device memory is the host's own (CPU
    /// drivers, integrated GPUs), staged on discrete GPUs.
    #[default]
    Auto,
    /// Input and output storage mapped (device-local where the device has such memory
    /// host-visible, host memory otherwise); the host reads and writes tensors in place.
    Direct,
    /// Device-local storage; inputs and outputs through host-visible staging buffers.
    Staged,
}

/// Options of [`Model::load_with`].
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Memory placement.
    pub memory: MemoryMode,
    /// Inputs and outputs bound to memory the caller provides instead of their own (the
    /// host path of [`Model::execute`] reaches them through staging buffers).
    pub external: Vec<External>,
    /// How host inputs and outputs of staged memory move (`None`:
    /// [`vk_core::HostPath::for_device`], the device's rule unless `VKDELEGATE_HOST_PATH`
    /// overrides it). With [`MemoryMode::Auto`] it also decides the placement
    /// ([`vk_core::HostPath::io`]).
    pub host_path: Option<HostPath>,
    /// The model runs only inside its owner's command buffers ([`Model::record_into`], as a
    /// program's device hand-off records it): no staging buffers and no command buffers of its
    /// own are made, and `execute` and `submit` fail with a named error.
    pub embedded: bool,
}

/// The `VK_ARM_tensors` objects of a model input or output (for work beyond the buffers of
/// [`Model::device_inputs`] / [`Model::device_outputs`], such as binding the tensor view in a
/// descriptor set of one's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoTensor {
    /// Index in the model resource table.
    pub mrt_index: u32,
    /// The tensor.
    pub tensor: arm::TensorARM,
    /// Its view.
    pub view: arm::TensorViewARM,
}

/// A VGF model loaded on a device, ready to execute.
#[derive(Debug)]
pub struct Model {
    objects: Objects,
    inputs: Vec<TensorSpec>,
    outputs: Vec<TensorSpec>,
    input_io: Vec<Io>,
    output_io: Vec<Io>,
    /// Per resource: the storage it lives in (None for constants and external memory).
    resource_storage: Vec<Option<usize>>,
    /// Per resource: the caller's memory it is bound to, if any.
    external: Vec<Option<BufferSlice>>,
    memory_mode: MemoryMode,
    /// Host transfers of large staged inputs and outputs.
    transfer: HostTransfer,
    /// The command pool, the host ([`HOST_CB`]) and device-only ([`DEVICE_CB`]) command
    /// buffers, the fence and the pending state.
    submission: Submission,
    runs: Vec<SegmentRun>,
    sets: Vec<Vec<vk::DescriptorSet>>,
    /// Loaded with [`LoadOptions::embedded`]: recorded only into its owner's command buffers.
    embedded: bool,
}

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
        let bytes = std::fs::read(path).map_err(|source| Error::File {
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

    /// The model's inputs, in order (names from the file; `input_<i>` where it has none).
    pub fn inputs(&self) -> &[TensorSpec] {
        &self.inputs
    }

    /// The model's outputs, in order (names from the file; `output_<i>` where it has none).
    pub fn outputs(&self) -> &[TensorSpec] {
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
        let external = external::resolve(vgf, device, &options.external, &tensors)?;
        let (memory_mode, path) = resources::choose_memory_mode(device, options)?;
        let plan = resources::plan_storages(vgf, &tensors, &usage, &external);
        resources::allocate_storages(&mut objects, &plan, memory_mode)?;
        resources::bind_resources(&mut objects, vgf, &plan, &external)?;
        let seq = &vgf.sequence;
        let (inputs, input_io) = io::describe(
            &mut objects,
            vgf,
            (&seq.inputs, &seq.input_names, "input"),
            (memory_mode, path, &external, options.embedded),
        )?;
        let (outputs, output_io) = io::describe(
            &mut objects,
            vgf,
            (&seq.outputs, &seq.output_names, "output"),
            (memory_mode, path, &external, options.embedded),
        )?;
        let (runs, tensor_descriptors) =
            pipelines::create_segments(&mut objects, vgf, &tensors.descs)?;
        let sets = pipelines::create_descriptor_sets(&mut objects, &runs, tensor_descriptors)?;
        let submission = Submission::new(device, 2, "VGF model")?;
        let mut model = Model {
            objects,
            inputs,
            outputs,
            input_io,
            output_io,
            resource_storage: plan.resource_storage,
            external,
            memory_mode,
            transfer: HostTransfer::new(device, path),
            submission,
            runs,
            sets,
            embedded: options.embedded,
        };
        if !model.embedded {
            model.record(HOST_CB)?;
            model.record(DEVICE_CB)?;
        }
        Ok(model)
    }

    /// Waits for this model's submitted work (if any) to finish, under the submission's wait
    /// policy (600 s by default). Waits on this model's own fence only, never on the whole
    /// queue; a timed-out wait leaves the work pending.
    pub fn wait(&mut self) -> Result<()> {
        Ok(self.submission.wait()?)
    }

    /// Submits the model's segments alone (no host copies), waiting on and signalling the
    /// given semaphores. Inputs are read from, and outputs written to, the device tensors of
    /// [`Model::device_inputs`] / [`Model::device_outputs`]. Waits for earlier work first;
    /// [`Model::wait`] waits for this one ([`Model::execute`] waits first too).
    ///
    /// # Safety
    /// Every semaphore must be a live semaphore of this device whose state allows the wait or
    /// signal, as `vkQueueSubmit` requires (binary waits with a pending signal, binary
    /// signals unsignaled, timeline values increasing). Whoever writes the inputs must have
    /// made those writes available and visible to the segment stages (the semaphore wait's
    /// stage mask covers them), and the caller must not touch the outputs before the signalled
    /// semaphore or [`Model::wait`].
    pub unsafe fn submit(
        &mut self,
        waits: &[SemaphoreWait],
        signals: &[SemaphoreSignal],
    ) -> Result<()> {
        self.host_side("submit")?;
        // SAFETY: the device command buffer is executable and uses only this model's objects
        // (alive until a wait); the semaphores are the caller's contract.
        unsafe { self.submission.submit(DEVICE_CB, waits, signals) }?;
        Ok(())
    }

    /// Refuses a call that needs the model's own command buffers on an embedded model.
    fn host_side(&self, call: &str) -> Result<()> {
        if self.embedded {
            return Err(unsupported(format!(
                "{call}: this model was loaded to run only inside its owner's command buffers \
                 (LoadOptions::embedded)"
            )));
        }
        Ok(())
    }

    /// The pipeline stages the segments run in (for barriers and semaphore waits around
    /// [`Model::record_into`] and [`Model::submit`]).
    ///
    /// Arm's emulation layer (0.11) translates the data-graph stage bit in the barriers it sees
    /// recorded, but passes the stage masks of semaphore waits through to a driver
    /// that does not know that bit: there, use `ALL_COMMANDS` for semaphores.
    pub fn stages(&self) -> vk::PipelineStageFlags2 {
        self.segment_stages()
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        // Objects may be destroyed only once the GPU is done with them (or the device is
        // lost: then no work runs again); otherwise they are leaked.
        match self.submission.wait().and_then(|()| self.transfer.wait()) {
            Ok(()) | Err(vk_core::Error::DeviceLost { .. }) => {}
            Err(e) => {
                log::error!("vgf-delegate: waiting for the model on drop failed: {e}");
                self.objects.leak = self.submission.is_pending() || self.transfer.is_pending();
            }
        }
        // `objects` drops next and destroys everything, then `submission` its pool and fence.
    }
}
