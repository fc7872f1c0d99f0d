//! VGF steps: the file's bytes loaded into a `vgf_delegate::Model`.

use vgf_delegate::{External, IoRef, LoadOptions, Model, VgfFile};
use vk_core::{Device, DeviceTensor, HostTensor, Requirements, vk};

use std::sync::Arc;

use super::error::{ProgramError, Result};
use super::runner::{Runner, StepBindings};
use super::spec::{StepKind, StepSpec};
use super::wiring::StepIo;

fn wrap(step: &str) -> impl Fn(vgf_delegate::Error) -> ProgramError + '_ {
    move |source| ProgramError::Vgf {
        step: step.to_owned(),
        source: Box::new(source),
    }
}

/// A VGF step's file, decoded once.
pub(super) type Source = Arc<VgfFile>;

/// Decodes a VGF file's bytes.
pub(super) fn prepare(step: &str, bytes: Arc<[u8]>) -> Result<Source> {
    VgfFile::decode(bytes)
        .map(Arc::new)
        .map_err(|e| wrap(step)(e.into()))
}

pub(super) fn requirements(step: &str, file: &VgfFile) -> Result<Requirements> {
    vgf_delegate::requirements_for(file.vgf()).map_err(wrap(step))
}

pub(super) fn io(step: &str, file: &VgfFile) -> Result<StepIo> {
    let (inputs, outputs) = vgf_delegate::model_specs(file.vgf()).map_err(wrap(step))?;
    Ok(StepIo { inputs, outputs })
}

impl StepSpec {
    /// A step that runs a whole VGF file, its tensors named as the file names its inputs and
    /// outputs (a `.vgf` run as a one-step program).
    pub fn vgf_model(name: impl Into<String>, bytes: Arc<[u8]>) -> Result<StepSpec> {
        let name = name.into();
        let file = prepare(&name, bytes)?;
        let io = io(&name, &file)?;
        Ok(StepSpec {
            inputs: io.inputs.into_iter().map(|s| s.name).collect(),
            outputs: io.outputs.into_iter().map(|s| s.name).collect(),
            kind: StepKind::VgfFile(file),
            name,
        })
    }
}

pub(super) fn load(
    step: &str,
    file: &VgfFile,
    device: &Device,
    external: &StepBindings,
) -> Result<Box<dyn Runner>> {
    match load_bound(step, file, device, external, true) {
        // An output in an alias group keeps the model's memory: the program copies it.
        Err(ProgramError::Vgf { source, .. })
            if matches!(
                *source,
                vgf_delegate::Error::Bind(vgf_delegate::BindError::Aliased { .. })
            ) && external.outputs.iter().any(Option::is_some) =>
        {
            load_bound(step, file, device, external, false)
        }
        other => other,
    }
}

fn load_bound(
    step: &str,
    file: &VgfFile,
    device: &Device,
    external: &StepBindings,
    outputs: bool,
) -> Result<Box<dyn Runner>> {
    let inputs = external.inputs.iter().enumerate().filter_map(|(i, slice)| {
        // SAFETY: the slice is a producer's output (or an earlier consumer's input) on the
        // same device, owned by a step the program keeps alive as long as this one (steps
        // drop after the plan, together), or an application's buffer under the contract of
        // `ProgramBuilder::bind_input`; the program orders every access by barriers, the
        // application by its semaphores.
        slice.map(|s| unsafe { External::new(IoRef::Input(i), s, device) })
    });
    let outs = external
        .outputs
        .iter()
        .enumerate()
        .filter(|_| outputs)
        .filter_map(|(j, slice)| {
            // SAFETY: an application's buffer under the contract of
            // `ProgramBuilder::bind_output`; the application orders other access by its
            // semaphores.
            slice.map(|s| unsafe { External::new(IoRef::Output(j), s, device) })
        });
    let options = LoadOptions {
        external: inputs.chain(outs).collect(),
        embedded: external.embedded,
        ..LoadOptions::default()
    };
    let model = Model::from_decoded(file.vgf(), device, &options).map_err(wrap(step))?;
    Ok(Box::new(VgfRunner(model)))
}

struct VgfRunner(Model);

impl Runner for VgfRunner {
    fn kind(&self) -> &'static str {
        "vgf"
    }

    fn device(&self) -> &Device {
        self.0.device()
    }

    fn execute(&mut self, step: &str, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        self.0.execute(inputs).map_err(wrap(step))
    }

    fn device_inputs(&self) -> Vec<DeviceTensor> {
        self.0.device_inputs()
    }

    fn device_outputs(&self) -> Vec<DeviceTensor> {
        self.0.device_outputs()
    }

    unsafe fn record_into(&self, cmd: vk::CommandBuffer) {
        // SAFETY: forwarded contract.
        unsafe { self.0.record_into(cmd) }
    }
}
