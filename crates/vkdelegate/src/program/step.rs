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
use super::spec::{ComputeStep, StepKind, StepSpec, VgfPath};
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

/// Reads and decodes a step's VGF file, once (a decoded file is taken as it is), and
/// chooses its path.
pub(super) fn prepare(spec: &StepSpec, path: VgfPath) -> Result<Prepared> {
    match &spec.kind {
        StepKind::Vgf { path: file } => {
            let bytes = std::fs::read(file).map_err(|e| {
                ProgramError::step(&spec.name, format!("cannot read {}: {e}", file.display()))
            })?;
            let file = vgf::prepare(&spec.name, bytes.into())?;
            vgf_path(&spec.name, file, path)
        }
        StepKind::VgfBytes { bytes } => {
            let file = vgf::prepare(&spec.name, bytes.clone())?;
            vgf_path(&spec.name, file, path)
        }
        #[cfg(feature = "vgf")]
        StepKind::VgfFile(file) => vgf_path(&spec.name, file.clone(), path),
        StepKind::Compute(c) => Ok(Prepared::Compute(c.clone())),
        #[cfg(feature = "compute")]
        StepKind::Graph(g) => Ok(Prepared::Graph(g.clone())),
    }
}

/// A VGF file's step on the path chosen: natively where asked or where it lowers
/// ([`VgfPath::Auto`]), else through the data-graph extension.
#[cfg(all(feature = "vgf", feature = "compute"))]
fn vgf_path(step: &str, file: vgf::Source, path: VgfPath) -> Result<Prepared> {
    if path == VgfPath::DataGraph {
        return Ok(Prepared::Vgf(file));
    }
    match crate::vgf_native::graph_of(&file) {
        Ok(g) => Ok(Prepared::Graph(GraphStep {
            graph: std::sync::Arc::new(g),
            f16: false,
        })),
        Err(e) if path == VgfPath::Native => Err(ProgramError::step(step, e.to_string())),
        Err(_) => Ok(Prepared::Vgf(file)),
    }
}

/// A VGF file's step: through the data-graph extension, the only path of a build without
/// the compute delegate.
#[cfg(not(all(feature = "vgf", feature = "compute")))]
fn vgf_path(step: &str, file: vgf::Source, path: VgfPath) -> Result<Prepared> {
    match path {
        VgfPath::Native => Err(ProgramError::step(
            step,
            "running a VGF file natively needs the compute delegate (features vgf and compute)",
        )),
        _ => Ok(Prepared::Vgf(file)),
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
