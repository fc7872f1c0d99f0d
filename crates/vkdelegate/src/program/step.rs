//! The dispatch by step kind onto each delegate's side.
//!
//! Each delegate's side lives in a whole-module `cfg` file (`vgf_step.rs`, `compute_step.rs`)
//! implementing `runner.rs`'s interface;
//! `absent.rs` stands in for a delegate this build lacks, answering every call with
//! [`ProgramError::NotCompiled`].

use vk_core::{Device, Requirements, TensorSpec};

#[cfg(not(feature = "compute"))]
use super::absent::compute;
#[cfg(not(feature = "vgf"))]
use super::absent::vgf;
#[cfg(feature = "compute")]
use super::compute_step as compute;
use super::error::{ProgramError, Result};
use super::runner::{Runner, StepBindings};
#[cfg(feature = "compute")]
use super::spec::GraphStep;
use super::spec::{ComputeStep, StepKind, StepSpec};
#[cfg(feature = "vgf")]
use super::vgf_step as vgf;
use super::wiring::StepIo;

/// A step with its file read (and a VGF file decoded): what loading needs.
#[derive(Debug, Clone)]
pub(super) enum Prepared {
    /// A VGF file, decoded where the build has the VGF delegate.
    Vgf(vgf::Source),
    /// A compute op.
    Compute(ComputeStep),
    /// A compute graph a front end made.
    #[cfg(feature = "compute")]
    Graph(GraphStep),
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
        #[cfg(feature = "compute")]
        StepKind::Graph(g) => Ok(Prepared::Graph(g.clone())),
    }
}

/// Checks a compute step's op and attributes where the build has the compute delegate (its
/// registry knows them); without it, the step is reported as not compiled when it loads.
pub(super) fn check_compute(step: &str, c: &ComputeStep) -> Result<()> {
    compute::check(step, c)
}

/// What the step's delegate needs of a device.
pub(super) fn requirements(step: &str, prepared: &Prepared) -> Result<Requirements> {
    match prepared {
        Prepared::Vgf(file) => vgf::requirements(step, file),
        Prepared::Compute(_) => compute::requirements(step),
        #[cfg(feature = "compute")]
        Prepared::Graph(g) => Ok(compute::graph_requirements(g)),
    }
}

/// The step's inputs and outputs, without a device. `known[i]` is the spec of input `i`
/// where an earlier step produces it.
pub(super) fn io(step: &str, prepared: &Prepared, known: &[Option<TensorSpec>]) -> Result<StepIo> {
    match prepared {
        Prepared::Vgf(file) => vgf::io(step, file),
        Prepared::Compute(c) => compute::io(step, c, known),
        #[cfg(feature = "compute")]
        Prepared::Graph(g) => Ok(compute::graph_io(g)),
    }
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
        #[cfg(feature = "compute")]
        Prepared::Graph(g) => compute::graph_load(step, g, device, external),
    }
}
