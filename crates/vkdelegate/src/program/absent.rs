//! Stand-ins for delegates this build lacks: every call is [`ProgramError::NotCompiled`].

#[cfg(not(feature = "vgf"))]
pub(super) mod vgf {
    use vk_core::{Device, Requirements};

    use crate::program::error::{ProgramError, Result};
    use crate::program::runner::{Runner, StepBindings};
    use crate::program::wiring::StepIo;

    fn absent(step: &str) -> ProgramError {
        ProgramError::NotCompiled {
            step: step.to_owned(),
            kind: "VGF",
            feature: "vgf",
        }
    }

    /// A VGF file's bytes, undecoded.
    pub(in crate::program) type Source = std::sync::Arc<[u8]>;

    pub(in crate::program) fn prepare(step: &str, _bytes: Source) -> Result<Source> {
        Err(absent(step))
    }

    pub(in crate::program) fn requirements(step: &str, _file: &Source) -> Result<Requirements> {
        Err(absent(step))
    }

    pub(in crate::program) fn io(step: &str, _file: &Source) -> Result<StepIo> {
        Err(absent(step))
    }

    pub(in crate::program) fn load(
        step: &str,
        _file: &Source,
        _device: &Device,
        _external: &StepBindings,
    ) -> Result<Box<dyn Runner>> {
        Err(absent(step))
    }
}

#[cfg(not(feature = "compute"))]
pub(super) mod compute {
    use vk_core::{Device, Requirements, TensorSpec};

    use crate::program::error::{ProgramError, Result};
    use crate::program::runner::{Runner, StepBindings};
    use crate::program::spec::ComputeStep;
    use crate::program::wiring::StepIo;

    fn absent(step: &str) -> ProgramError {
        ProgramError::NotCompiled {
            step: step.to_owned(),
            kind: "compute",
            feature: "compute",
        }
    }

    pub(in crate::program) fn requirements(step: &str) -> Result<Requirements> {
        Err(absent(step))
    }

    /// Nothing to check against: the op registry is the compute delegate's.
    pub(in crate::program) fn check(_step: &str, _op: &ComputeStep) -> Result<()> {
        Ok(())
    }

    pub(in crate::program) fn io(
        step: &str,
        _op: &ComputeStep,
        _known: &[Option<TensorSpec>],
    ) -> Result<StepIo> {
        Err(absent(step))
    }

    pub(in crate::program) fn load(
        step: &str,
        _op: &ComputeStep,
        _inputs: &[TensorSpec],
        _device: &Device,
        _external: &StepBindings,
    ) -> Result<Box<dyn Runner>> {
        Err(absent(step))
    }
}
