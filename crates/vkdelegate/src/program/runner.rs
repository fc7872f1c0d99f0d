//! The one interface every delegate's step implements, and what a step is bound to.

use vk_core::{BufferSlice, Device, DeviceTensor, HostTensor, vk};

use super::error::Result;

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

/// Slices a step's inputs and outputs are bound to, by index (`None`: its own buffer).
#[derive(Debug, Clone, Default)]
pub(super) struct StepBindings {
    /// Input `i` reads `inputs[i]` where given.
    pub inputs: Vec<Option<BufferSlice>>,
    /// Output `j` is written to `outputs[j]` where given.
    pub outputs: Vec<Option<BufferSlice>>,
    /// The step runs only inside the program's recorded plan (device hand-off): it needs no
    /// host path of its own.
    pub embedded: bool,
    /// Constants shared with other programs (compute steps).
    #[cfg(feature = "compute")]
    pub constants: Option<compute_delegate::ConstantPool>,
}
