//! The one interface every delegate's step implements, and the dispatch by step kind.
//!
//! Each delegate's side lives in a whole-module `cfg` file (`vgf_step.rs`, `compute_step.rs`);
//! `absent.rs` stands in for a delegate this build lacks, answering every call with
//! [`ProgramError::NotCompiled`].

use vk_core::{BufferSlice, Device, DeviceTensor, HostTensor, Requirements, TensorSpec, vk};

#[cfg(not(feature = "compute"))]
use super::absent::compute;
#[cfg(not(feature = "vgf"))]
use super::absent::vgf;
#[cfg(feature = "compute")]
use super::compute_step as compute;
use super::error::{ProgramError, Result};
use super::spec::{ComputeStep, StepKind, StepSpec, VulkanDelegate};
#[cfg(feature = "vgf")]
use super::vgf_step as vgf;
use super::wiring::StepIo;

/// A loaded step, whatever its delegate.
pub(super) trait Runner: Send {
    /// `vgf` or `compute`.
    fn kind(&self) -> &'static str;
    /// The device it runs on.
    fn device(&self) -> &Device;
    /// Runs the step alone on host tensors (host hand-off).
    fn execute(&mut self, step: &str, inputs: &[HostTensor]) -> Result<Vec<HostTensor>>;
    /// Where its inputs live on the device (its own buffers, or the slices it was bound to).
    fn device_inputs(&self) -> Vec<DeviceTensor>;
    /// Where its outputs live on the device.
    fn device_outputs(&self) -> Vec<DeviceTensor>;
    /// Records its work into `cmd`.
    ///
    /// # Safety
    /// `cmd` is a recording primary command buffer of the step's device, outside a render
    /// pass; the caller orders writes of the inputs before and reads of the outputs after
    /// with barriers, and submits it only while the step is alive and not otherwise running.
    unsafe fn record_into(&self, cmd: vk::CommandBuffer);
    /// Device time per dispatch of one device-resident run on the inputs already on the
    /// device; empty where the delegate cannot time its work dispatch by dispatch.
    fn profile(&mut self, _step: &str) -> Result<Vec<super::DispatchProfile>> {
        Ok(Vec::new())
    }
}

/// A step with its file read (and a VGF file decoded): what loading needs.
#[derive(Debug, Clone)]
pub(super) enum Prepared {
    /// A VGF file, decoded where the build has the VGF delegate.
    Vgf(vgf::Source),
    /// A compute op.
    Compute(ComputeStep),
    /// A `VulkanBackend` delegate, lowered onto the compute delegate.
    Vulkan(VulkanDelegate),
}

/// Reads and decodes a step's VGF file, once (a decoded file is taken as it is).
pub(super) fn prepare(spec: &StepSpec) -> Result<Prepared> {
    match &spec.kind {
        StepKind::Vgf { path } => {
            let bytes = std::fs::read(path).map_err(|e| {
                ProgramError::step(&spec.name, format!("cannot read {}: {e}", path.display()))
            })?;
            vgf::prepare(&spec.name, bytes.into()).map(Prepared::Vgf)
        }
        StepKind::VgfBytes { bytes } => vgf::prepare(&spec.name, bytes.clone()).map(Prepared::Vgf),
        #[cfg(feature = "vgf")]
        StepKind::VgfFile(file) => Ok(Prepared::Vgf(file.clone())),
        StepKind::Compute(c) => Ok(Prepared::Compute(c.clone())),
        StepKind::Vulkan(v) => Ok(Prepared::Vulkan(v.clone())),
    }
}

/// What the step's delegate needs of a device.
pub(super) fn requirements(step: &str, prepared: &Prepared) -> Result<Requirements> {
    match prepared {
        Prepared::Vgf(file) => vgf::requirements(step, file),
        Prepared::Compute(_) => compute::requirements(step),
        Prepared::Vulkan(v) => compute::vulkan_requirements(step, v),
    }
}

/// The step's inputs and outputs, without a device. `known[i]` is the spec of input `i`
/// where an earlier step produces it.
pub(super) fn io(step: &str, prepared: &Prepared, known: &[Option<TensorSpec>]) -> Result<StepIo> {
    match prepared {
        Prepared::Vgf(file) => vgf::io(step, file),
        Prepared::Compute(c) => compute::io(step, c, known),
        Prepared::Vulkan(v) => compute::vulkan_io(step, v),
    }
}

/// Slices a step's inputs and outputs are bound to, by index (`None`: its own buffer).
#[derive(Debug, Clone, Default)]
pub(super) struct StepBindings {
    /// Input `i` reads `inputs[i]` where given.
    pub inputs: Vec<Option<BufferSlice>>,
    /// Output `j` is written to `outputs[j]` where given.
    pub outputs: Vec<Option<BufferSlice>>,
}

/// Loads the step on `device`, bound to `external` (no copy); a VGF output that cannot be
/// bound (alias group) keeps its own memory, which the caller detects in `device_outputs`.
pub(super) fn load(
    step: &str,
    prepared: &Prepared,
    io: &StepIo,
    device: &Device,
    external: &StepBindings,
) -> Result<Box<dyn Runner>> {
    match prepared {
        Prepared::Vgf(file) => vgf::load(step, file, device, external),
        Prepared::Compute(c) => compute::load(step, c, &io.inputs, device, external),
        Prepared::Vulkan(v) => compute::vulkan_load(step, v, device, external),
    }
}
