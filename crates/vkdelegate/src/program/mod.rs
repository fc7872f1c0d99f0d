//! Programs: several delegates, one device.
//!
//! A [`Program`] is an ordered list of steps, each a VGF model or a compute op, connected by
//! named tensors. [`ProgramBuilder::build`] first checks the wiring without touching a device
//! (every tensor a step consumes has the dtype and shape its producer makes; an error names
//! both steps), then loads every step onto one device (a shared context, whatever the load
//! order, when sharing is chosen). In the default [`HandOff::Device`] mode each step is bound
//! to its producers' device buffers, so nothing is copied between steps, and the whole program
//! is recorded into one command buffer: one execution is one submission and one fence wait.
//! [`HandOff::Host`] instead runs each step on its own and passes tensors through host memory
//! (a submission and a fence wait per step), for comparison and debugging.
//!
//! Code map: `spec.rs` (what a program is made of), `error.rs`, `file.rs` (the TOML file),
//! `ops.rs` (compute ops by name), `wiring.rs` (the device-free check), `step.rs` (the one
//! step interface and its dispatch), `vgf_step.rs` / `compute_step.rs` (one per delegate,
//! each behind its feature; `absent.rs` answers for a missing one), `plan.rs` (the recorded
//! device plan), `bind.rs` (application buffers as inputs and outputs), `image.rs`
//! (application images as inputs and outputs).
//!
//! An application's own buffers can be the program's inputs and outputs
//! ([`ProgramBuilder::bind_input`], [`ProgramBuilder::bind_output`]); such a program runs by
//! [`Program::submit`], ordered by the application's semaphores, with no host wait
//! (`docs/engine.md`). An application's images can be too
//! ([`ProgramBuilder::bind_input_image`], [`ProgramBuilder::bind_output_image`]), converted by
//! small kernels at the start and end of the program's command buffer; they mix with host
//! inputs and outputs and with application buffers (`docs/engine.md`, "The images").

#[cfg(not(all(feature = "vgf", feature = "compute")))]
mod absent;
mod bind;
#[cfg(feature = "compute")]
mod compute_step;
mod error;
mod file;
mod image;
mod ops;
mod plan;
mod runner;
mod spec;
mod step;
mod trace;
#[cfg(feature = "vgf")]
mod vgf_step;
mod wiring;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use vk_core::{
    ArmSupport, BufferSlice, Device, EmulationPolicy, HostTensor, Instance, InstanceDesc,
    Requirements, SemaphoreSignal, SemaphoreWait, TensorSpec, vk,
};

pub use bind::AppBuffer;
pub use error::{BindingError, BindingProblem, Producer, ProgramError, TensorMismatch};
pub use file::ProgramFile;
#[cfg(feature = "compute")]
pub use spec::GraphStep;
pub use spec::{ComputeStep, DeviceChoice, HandOff, StepKind, StepSpec, Timings, VgfPath};
pub use trace::chrome_trace;
pub use vk_core::{AppImage, ColourMap, ImageProblem, ImageToTensor, TensorLayout, TensorToImage};

use bind::Bound;
use error::Result;
use image::BoundImages;
use plan::DevicePlan;
use runner::{Runner, StepBindings};
use step::Prepared;
use wiring::{Source, Wiring};

/// Where a program's load stands, as [`ProgramBuilder::on_progress`] reports it: step `step`
/// (from 0) of `steps`, named `name`, starts loading; `step == steps` when all have loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadProgress<'a> {
    /// The step that starts loading (`steps` once every step has).
    pub step: usize,
    /// The program's steps.
    pub steps: usize,
    /// The step's name (empty once every step has loaded).
    pub name: &'a str,
}

/// A load-progress callback ([`ProgramBuilder::on_progress`]).
#[derive(Clone)]
struct ProgressFn(Arc<dyn Fn(LoadProgress<'_>) + Send + Sync>);

impl fmt::Debug for ProgressFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgressFn")
    }
}

/// Builds a [`Program`].
#[derive(Debug, Clone)]
pub struct ProgramBuilder {
    steps: Vec<StepSpec>,
    outputs: Vec<String>,
    device: DeviceChoice,
    hand_off: HandOff,
    vgf_path: VgfPath,
    bound_inputs: BTreeMap<String, AppBuffer>,
    bound_outputs: BTreeMap<String, AppBuffer>,
    image_inputs: BTreeMap<String, (AppImage, ImageToTensor)>,
    image_outputs: BTreeMap<String, (AppImage, TensorToImage)>,
    #[cfg(feature = "compute")]
    constants: Option<compute_delegate::ConstantPool>,
    progress: Option<ProgressFn>,
    /// (tensor, program input) pairs fed back after each run.
    feedbacks: Vec<(String, String)>,
    /// The most submissions in flight.
    depth: usize,
    /// Runs per submission.
    reps: usize,
}

impl Default for ProgramBuilder {
    fn default() -> Self {
        ProgramBuilder {
            steps: Vec::new(),
            outputs: Vec::new(),
            device: DeviceChoice::Standalone,
            hand_off: HandOff::Device,
            vgf_path: VgfPath::Auto,
            bound_inputs: BTreeMap::new(),
            bound_outputs: BTreeMap::new(),
            image_inputs: BTreeMap::new(),
            image_outputs: BTreeMap::new(),
            #[cfg(feature = "compute")]
            constants: None,
            progress: None,
            feedbacks: Vec::new(),
            depth: 1,
            reps: 1,
        }
    }
}

#[cfg(feature = "shared")]
type Lease = Option<shared_runtime::Lease>;
#[cfg(not(feature = "shared"))]
type Lease = Option<()>;

/// A loaded step.
struct Loaded {
    spec: StepSpec,
    runner: Box<dyn Runner>,
    /// Kept so a shared context stays alive as long as the step.
    _lease: Lease,
}

/// A loaded program.
pub struct Program {
    // Field order is drop order: the plan waits for its last submission before the steps'
    // models and graphs are destroyed.
    plan: Option<DevicePlan>,
    steps: Vec<Loaded>,
    inputs: Vec<TensorSpec>,
    outputs: Vec<TensorSpec>,
    hand_off: HandOff,
    /// The application's buffers, when the program's inputs and outputs are bound to them.
    bound: Bound,
    /// The application's images bound to inputs and outputs.
    images: BoundImages,
    last: Timings,
    /// When each run in flight started, oldest first.
    started: std::collections::VecDeque<Instant>,
}

impl Drop for Program {
    fn drop(&mut self) {
        // The plan first (it waits for its last submission), then the steps from the last:
        // a consumer bound to its producer's memory goes before the producer frees it.
        drop(self.plan.take());
        while self.steps.pop().is_some() {}
    }
}

impl fmt::Debug for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Program")
            .field("steps", &self.steps())
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .field("hand_off", &self.hand_off)
            .finish()
    }
}

impl ProgramBuilder {
    /// An empty program (standalone device, device hand-off).
    pub fn new() -> Self {
        Self::default()
    }

    /// From a parsed program file.
    pub fn from_file(file: ProgramFile) -> Self {
        ProgramBuilder {
            steps: file.steps,
            outputs: file.outputs,
            ..Self::default()
        }
    }

    /// Appends a step.
    pub fn step(mut self, step: StepSpec) -> Self {
        self.steps.push(step);
        self
    }

    /// Declares the program's outputs (default: the last step's outputs).
    pub fn outputs(mut self, names: &[&str]) -> Self {
        self.outputs = names.iter().map(|s| s.to_string()).collect();
        self
    }

    /// The steps rewritten by `f`, given them and the declared outputs (a front end joining
    /// steps it appended into one graph).
    #[cfg(feature = "compute")]
    pub(crate) fn map_steps(
        mut self,
        f: impl FnOnce(Vec<StepSpec>, &[String]) -> Vec<StepSpec>,
    ) -> Self {
        let steps = std::mem::take(&mut self.steps);
        self.steps = f(steps, &self.outputs);
        self
    }

    /// The outputs declared so far, by name.
    pub fn output_names(&self) -> &[String] {
        &self.outputs
    }

    /// Chooses the device.
    pub fn device(mut self, choice: DeviceChoice) -> Self {
        self.device = choice;
        self
    }

    /// Shares the compute steps' constants with every program built with a clone of `pool`
    /// on the same device: weights are uploaded once, and state a step writes in place (a
    /// language model's KV cache) is seen by the others.
    #[cfg(feature = "compute")]
    pub fn constants(mut self, pool: compute_delegate::ConstantPool) -> Self {
        self.constants = Some(pool);
        self
    }

    /// Chooses how tensors pass between steps.
    pub fn hand_off(mut self, hand_off: HandOff) -> Self {
        self.hand_off = hand_off;
        self
    }

    /// Calls `f` as [`ProgramBuilder::build`] starts loading each step, and once all have
    /// loaded: a caller's progress display for long loads (the CLI shows one past a second).
    /// `f` runs on the building thread.
    pub fn on_progress(mut self, f: impl Fn(LoadProgress<'_>) + Send + Sync + 'static) -> Self {
        self.progress = Some(ProgressFn(Arc::new(f)));
        self
    }

    fn report(&self, step: usize, name: &str) {
        if let Some(f) = &self.progress {
            (f.0)(LoadProgress {
                step,
                steps: self.steps.len(),
                name,
            });
        }
    }

    /// After each run, tensor `output` (a step's output, a program output or not) becomes
    /// program input `input` for the next run, copied on the device: runs started by
    /// [`Program::start`] without inputs then follow each other with no host work between
    /// them (a language model feeding its greedy token back). The dtypes must be equal, or
    /// `i32` into `i64`, where each value becomes its element's low word with a zero high
    /// word (the value must be non-negative: a token, a position); the element counts must
    /// be equal. The input must be staged (not bound to a buffer or an image, and small
    /// enough not to be moved by the host transfer). Device hand-off only; checked at
    /// [`ProgramBuilder::build`] as a [`ProgramError::FeedBack`].
    pub fn feed_back(mut self, output: &str, input: &str) -> Self {
        self.feedbacks.push((output.to_owned(), input.to_owned()));
        self
    }

    /// Lets up to `submissions` submissions be in flight at once ([`Program::start`],
    /// [`Program::finish`]; default 1, at least 1, at most 4): the program is recorded once
    /// per submission in flight, each with its own output staging. Every output must then be
    /// staged (small enough not to be moved by the host transfer).
    pub fn runs_in_flight(mut self, submissions: usize) -> Self {
        self.depth = submissions.clamp(1, 4);
        self
    }

    /// Records `runs` runs one after the other in each submission (default 1, at least 1, at
    /// most 16), each with its own output staging, so that the device does not stop between
    /// them: with fed-back outputs ([`ProgramBuilder::feed_back`]), each run reads what the
    /// one before left. [`Program::start`] then starts that many runs at once, and
    /// [`Program::finish`] reads them one at a time; [`Program::execute`] returns the first's
    /// outputs. Every output must be staged, as for [`ProgramBuilder::runs_in_flight`].
    pub fn runs_per_submission(mut self, runs: usize) -> Self {
        self.reps = runs.clamp(1, 16);
        self
    }

    /// Chooses how VGF steps run ([`VgfPath::Auto`] unless chosen).
    pub fn vgf_path(mut self, path: VgfPath) -> Self {
        self.vgf_path = path;
        self
    }

    /// Binds program input `name` to the application's buffer: its consumers read it there,
    /// and the plan records no upload. Bind every input and output (to a buffer, or to an
    /// image: [`ProgramBuilder::bind_input_image`]), or none to a buffer; a bound program
    /// runs by [`Program::submit`], ordered by the application's semaphores. Checked at
    /// [`ProgramBuilder::build`]: the name, device hand-off, the size (the tensor's bytes,
    /// padded to whole vec4s where a compute step reads it), the usage (`STORAGE_BUFFER`, and
    /// `TRANSFER_DST` where a compute step reads it) and the offset alignment
    /// (`minStorageBufferOffsetAlignment`), each failure a [`ProgramError::Binding`].
    ///
    /// # Safety
    /// `buffer.slice` must be a live buffer range of the program's device, created with
    /// `buffer.usage`, with `slice.memory` / `slice.memory_offset` the memory it is bound to
    /// (a memory type a storage buffer allocation gets), and must outlive the program (its
    /// last submission included). The caller orders every other access to those bytes
    /// against the program's submissions by the semaphores it passes to
    /// [`Program::submit`].
    pub unsafe fn bind_input(mut self, name: &str, buffer: AppBuffer) -> Self {
        self.bound_inputs.insert(name.to_owned(), buffer);
        self
    }

    /// Binds program output `name` to the application's buffer: its producer writes it there
    /// (where a producer cannot, a VGF output in an alias group, the plan records one device
    /// copy into it, which needs `TRANSFER_DST` usage). Checked as
    /// [`ProgramBuilder::bind_input`] is, with `TRANSFER_SRC` where a compute step writes it.
    ///
    /// # Safety
    /// As [`ProgramBuilder::bind_input`].
    pub unsafe fn bind_output(mut self, name: &str, buffer: AppBuffer) -> Self {
        self.bound_outputs.insert(name.to_owned(), buffer);
        self
    }

    /// The program's inputs and outputs as the wiring pass finds them, without touching a
    /// device: for reading and checking input files before anything is loaded.
    pub fn io(&self) -> Result<(Vec<TensorSpec>, Vec<TensorSpec>)> {
        let prepared: Vec<Prepared> = self
            .steps
            .iter()
            .map(|spec| step::prepare(spec, self.vgf_path))
            .collect::<Result<_>>()?;
        let w = self.wire(&prepared)?;
        Ok((w.inputs, w.outputs.into_iter().map(|(s, _)| s).collect()))
    }

    fn wire(&self, prepared: &[Prepared]) -> Result<Wiring> {
        wiring::wire(&self.steps, &self.outputs, |k, known| {
            step::io(&self.steps[k].name, &prepared[k], known)
        })
    }

    /// Checks the wiring, loads every step, and (device hand-off) records the program.
    pub fn build(self) -> Result<Program> {
        let (vgf_path, probed) = self.vgf_route()?;
        // Each VGF file is read once.
        let prepared: Vec<Prepared> = self
            .steps
            .iter()
            .map(|spec| step::prepare(spec, vgf_path))
            .collect::<Result<_>>()?;
        let wiring = self.wire(&prepared)?;
        let feedbacks = self.feedback_sources(&wiring)?;
        let bound_any = !self.bound_inputs.is_empty() || !self.bound_outputs.is_empty();
        if (self.depth > 1 || self.reps > 1) && bound_any {
            return Err(ProgramError::Wiring(
                "a program bound to application buffers runs by `submit`, one run at a time: \
                 runs in flight and runs per submission are for host inputs"
                    .into(),
            ));
        }
        let buffers_in = self.bound_inputs.keys().map(String::as_str).collect();
        let buffers_out = self.bound_outputs.keys().map(String::as_str).collect();
        let images = image::resolve(
            &self.image_inputs,
            &self.image_outputs,
            (&buffers_in, &buffers_out),
            &wiring,
            self.hand_off,
        )?;
        let bound = bind::resolve(
            &self.bound_inputs,
            &self.bound_outputs,
            &wiring,
            &prepared,
            self.hand_off,
            &images,
        )?;
        let requirements: Vec<Requirements> = self
            .steps
            .iter()
            .zip(&prepared)
            .map(|(s, p)| step::requirements(&s.name, p))
            .collect::<Result<_>>()?;
        let standalone = match &self.device {
            DeviceChoice::Standalone => {
                Some(standalone_device(probed, &prepared, &union(&requirements))?)
            }
            _ => None,
        };
        let mut steps: Vec<Loaded> = Vec::with_capacity(self.steps.len());
        for (k, spec) in self.steps.iter().enumerate() {
            self.report(k, &spec.name);
            let (device, lease) = self.device_for(spec, &requirements[k], standalone.as_ref())?;
            device.check(&requirements[k])?;
            if k == 0 {
                bound.check_alignment(&wiring, &device)?;
            }
            let external = StepBindings {
                inputs: self.external_inputs(&steps, &wiring, &bound, k),
                outputs: bound.step_outputs(&wiring, k),
                embedded: self.hand_off == HandOff::Device,
                #[cfg(feature = "compute")]
                constants: self.constants.clone(),
            };
            let runner = step::load(
                &spec.name,
                &prepared[k],
                &wiring.steps[k].io,
                &device,
                &external,
            )?;
            if let Some(first) = steps.first() {
                if !first.runner.device().same_as(runner.device()) {
                    return Err(ProgramError::DifferentDevices {
                        first: first.spec.name.clone(),
                        step: spec.name.clone(),
                    });
                }
            }
            steps.push(Loaded {
                spec: spec.clone(),
                runner,
                _lease: lease,
            });
        }
        self.report(steps.len(), "");
        let (depth, hand_off) = (self.depth, self.hand_off);
        let plan = PlanParts {
            feedbacks,
            depth,
            reps: self.reps,
        };
        Program::assemble(steps, wiring, hand_off, (bound, images), plan)
    }

    /// Each fed-back tensor's producer and program input, checked.
    fn feedback_sources(&self, wiring: &Wiring) -> Result<Vec<FedBack>> {
        self.feedbacks
            .iter()
            .enumerate()
            .map(|(at, (output, input))| {
                let problem = |p: &str| ProgramError::FeedBack {
                    output: output.clone(),
                    input: input.clone(),
                    problem: p.to_owned(),
                };
                if self.hand_off != HandOff::Device {
                    return Err(problem("the program is not in device hand-off"));
                }
                let i = wiring
                    .inputs
                    .iter()
                    .position(|s| s.name == *input)
                    .ok_or_else(|| problem("no program input has that name"))?;
                let (k, j) = self
                    .steps
                    .iter()
                    .enumerate()
                    .find_map(|(k, s)| Some((k, s.outputs.iter().position(|n| n == output)?)))
                    .ok_or_else(|| problem("no step produces that tensor"))?;
                let (have, want) = (&wiring.steps[k].io.outputs[j], &wiring.inputs[i]);
                let widen = have.dtype == vk_core::DType::I32 && want.dtype == vk_core::DType::I64;
                if have.dtype != want.dtype && !widen {
                    return Err(problem(&format!(
                        "{} does not become {} (equal dtypes, or i32 into i64)",
                        have.dtype, want.dtype
                    )));
                }
                if self.feedbacks[..at].iter().any(|f| f.1 == *input) {
                    return Err(problem("another tensor is fed back into that input too"));
                }
                if want.bytes().unwrap_or(0) == 0 {
                    return Err(problem("the input has no bytes"));
                }
                if have.shape.iter().product::<usize>() != want.shape.iter().product::<usize>() {
                    return Err(problem(&format!(
                        "{:?} and {:?} have different element counts",
                        have.shape, want.shape
                    )));
                }
                Ok((
                    Source::Step { step: k, output: j },
                    i,
                    widen,
                    output.clone(),
                ))
            })
            .collect()
    }

    /// In device hand-off, where step `k`'s inputs already live: a producer's output, the
    /// application's buffer bound to a program input, or the input buffer of an earlier
    /// consumer of the same program input.
    fn external_inputs(
        &self,
        loaded: &[Loaded],
        wiring: &Wiring,
        bound: &Bound,
        k: usize,
    ) -> Vec<Option<BufferSlice>> {
        let sources = &wiring.steps[k].sources;
        if self.hand_off == HandOff::Host {
            return vec![None; sources.len()];
        }
        sources
            .iter()
            .map(|source| match *source {
                Source::Step { step, output } => loaded[step]
                    .runner
                    .device_outputs()
                    .get(output)
                    .map(|t| t.slice),
                Source::ProgramInput(i) if bound.input(i).is_some() => bound.input(i),
                Source::ProgramInput(i) => {
                    wiring.steps[..k].iter().enumerate().find_map(|(e, w)| {
                        let j = w
                            .sources
                            .iter()
                            .position(|s| *s == Source::ProgramInput(i))?;
                        loaded[e].runner.device_inputs().get(j).map(|t| t.slice)
                    })
                }
            })
            .collect()
    }

    /// How VGF steps run: [`VgfPath::Auto`] becomes [`VgfPath::DataGraph`] where the
    /// program's device has `VK_ARM_data_graph` from its own driver (Arm's emulation layer
    /// does not count). A standalone device's adapter is probed on an instance made without
    /// the emulation layer, which is returned for [`standalone_device`]; a shared context's
    /// device is not known yet, and keeps [`VgfPath::Auto`].
    fn vgf_route(&self) -> Result<(VgfPath, Option<Instance>)> {
        let vgf = self.steps.iter().any(|s| s.kind.is_vgf());
        if self.vgf_path != VgfPath::Auto || !vgf {
            return Ok((self.vgf_path, None));
        }
        let route = |arm: ArmSupport| match arm {
            ArmSupport::Native => VgfPath::DataGraph,
            _ => VgfPath::Auto,
        };
        match &self.device {
            DeviceChoice::Device(d) => Ok((route(d.capabilities().arm), None)),
            DeviceChoice::Standalone => {
                let instance = Instance::new(&without_emulation())?;
                let arm = instance.select_adapter()?.capabilities().arm;
                Ok((route(arm), Some(instance)))
            }
            #[cfg(feature = "shared")]
            DeviceChoice::Shared(_) => Ok((VgfPath::Auto, None)),
        }
    }

    fn device_for(
        &self,
        spec: &StepSpec,
        requirements: &Requirements,
        standalone: Option<&Device>,
    ) -> Result<(Device, Lease)> {
        if let Some(d) = standalone {
            return Ok((d.clone(), None));
        }
        match &self.device {
            DeviceChoice::Device(d) => Ok((d.clone(), None)),
            #[cfg(feature = "shared")]
            DeviceChoice::Shared(options) => {
                let lease = shared_runtime::acquire(options, requirements, &spec.name)?
                    .ok_or_else(|| {
                        ProgramError::Wiring(
                            "DeviceChoice::Shared needs a sharing mode other than disabled".into(),
                        )
                    })?;
                Ok((lease.device().clone(), Some(lease)))
            }
            DeviceChoice::Standalone => {
                let _ = spec;
                Ok((Device::open(requirements)?, None))
            }
        }
    }
}

/// The program's own device. Arm's emulation layer is loaded only for steps that run through
/// `VK_ARM_data_graph` on a driver without it; otherwise the device is made on `probed` (the
/// instance [`ProgramBuilder::vgf_route`] made), or on a new instance, without the layer.
fn standalone_device(
    probed: Option<Instance>,
    prepared: &[Prepared],
    requirements: &Requirements,
) -> Result<Device> {
    let extension = prepared.iter().any(|p| matches!(p, Prepared::Vgf(_)));
    let instance = match probed {
        Some(i) if !extension || i.select_adapter()?.capabilities().arm == ArmSupport::Native => i,
        _ if extension => return Ok(Device::open(requirements)?),
        _ => Instance::new(&without_emulation())?,
    };
    Ok(Device::open_on(&instance, requirements)?)
}

/// An instance's description as by default, without Arm's emulation layer.
fn without_emulation() -> InstanceDesc {
    InstanceDesc {
        emulation: EmulationPolicy::Off,
        ..InstanceDesc::default()
    }
}

fn union(requirements: &[Requirements]) -> Requirements {
    requirements
        .iter()
        .skip(1)
        .fold(requirements[0].clone(), |u, r| u.union(r))
}

/// One dispatch of [`Program::profile`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DispatchProfile {
    /// The step it belongs to.
    pub step: String,
    /// The op and the kernel that ran it, as `op [Kernel]`.
    pub op: String,
    /// The float type the kernel stores and multiplies in (f16 for fp16 variants and for
    /// cooperative-matrix kernels, f32 otherwise).
    pub float_type: vk_core::DType,
    /// Work groups dispatched.
    pub groups: [u32; 3],
    /// The shape of the tensor it writes.
    pub shape: Vec<usize>,
    /// Device time from the previous dispatch's end to its own.
    pub time: std::time::Duration,
    /// Whether a pipeline barrier precedes it within its step.
    pub barrier_before: bool,
}

/// A fed-back tensor: its producer, the program input it becomes, whether it is widened
/// (`i32` into `i64`), and its name.
type FedBack = (Source, usize, bool, String);

/// What the device plan is recorded with beyond the steps and their wiring.
struct PlanParts {
    /// Fed-back tensors.
    feedbacks: Vec<FedBack>,
    /// The most submissions in flight.
    depth: usize,
    /// Runs per submission.
    reps: usize,
}

impl Program {
    fn assemble(
        steps: Vec<Loaded>,
        wiring: Wiring,
        hand_off: HandOff,
        (bound, images): (Bound, BoundImages),
        parts: PlanParts,
    ) -> Result<Program> {
        let mut program = Program {
            plan: None,
            inputs: wiring.inputs.clone(),
            outputs: wiring.outputs.iter().map(|(s, _)| s.clone()).collect(),
            steps,
            hand_off,
            bound,
            images,
            last: Timings::default(),
            started: Default::default(),
        };
        if hand_off == HandOff::Device {
            let runners: Vec<&dyn Runner> = program.steps.iter().map(|s| &*s.runner).collect();
            let feedbacks = parts
                .feedbacks
                .iter()
                .map(|(source, input, widen, name)| {
                    let (source, input, widen) = (*source, *input, *widen);
                    let spec = &wiring.inputs[input];
                    let bytes = spec.bytes().unwrap_or(0) as u64 / if widen { 2 } else { 1 };
                    Ok(plan::FeedBack {
                        name: name.clone(),
                        src: plan::output_source(&runners, source)?,
                        bytes,
                        input,
                        widen,
                    })
                })
                .collect::<Result<_>>()?;
            let plan = DevicePlan::record(
                program.device(),
                &runners,
                &wiring,
                (&program.bound, &program.images),
                feedbacks,
                (parts.depth, parts.reps),
            )?;
            program.plan = Some(plan);
        }
        Ok(program)
    }

    /// Program inputs, in the order `execute` takes them (those not bound to an image, see
    /// [`Program::host_inputs`]).
    pub fn inputs(&self) -> &[TensorSpec] {
        &self.inputs
    }

    /// Program outputs, in the order `execute` returns them.
    pub fn outputs(&self) -> &[TensorSpec] {
        &self.outputs
    }

    /// Step names and kinds (`vgf`, `compute`), in order.
    pub fn steps(&self) -> Vec<(&str, &'static str)> {
        self.steps
            .iter()
            .map(|s| (s.spec.name.as_str(), s.runner.kind()))
            .collect()
    }

    /// The device and queue each step runs on (for identity checks).
    pub fn step_handles(&self) -> Vec<(vk::Device, vk::Queue)> {
        self.steps
            .iter()
            .map(|s| {
                let d = s.runner.device();
                (d.raw().handle(), d.queue().raw())
            })
            .collect()
    }

    /// The device.
    pub fn device(&self) -> &Device {
        self.steps[0].runner.device()
    }

    /// The hand-off mode.
    pub fn hand_off(&self) -> HandOff {
        self.hand_off
    }

    /// Device copies recorded per execution in device hand-off: one per program input and
    /// output not bound to an application buffer (and one per bound output its producer
    /// could not write in place), none between steps (each step reads its producer's
    /// buffer); `None` in host hand-off.
    pub fn recorded_copies(&self) -> Option<usize> {
        self.plan.as_ref().map(DevicePlan::copies)
    }

    /// Device time per dispatch of each step that can time its dispatches (compute steps), from
    /// one device-resident run of each on the tensors the last execution left on the device,
    /// in recording order. Run `execute` first.
    pub fn profile(&mut self) -> Result<Vec<DispatchProfile>> {
        self.settle()?;
        let mut out = Vec::new();
        for step in &mut self.steps {
            let name = step.spec.name.clone();
            out.extend(step.runner.profile(&name)?);
        }
        Ok(out)
    }

    /// Timings of the last execution.
    pub fn last_timings(&self) -> &Timings {
        &self.last
    }

    /// Runs the program on `inputs` (in [`Program::inputs`] order, leaving out the inputs bound
    /// to images: [`Program::host_inputs`]) and returns its outputs (in [`Program::outputs`]
    /// order; an output bound to an image as an empty tensor of shape `[0]`, its values
    /// being in the image). Waits on the host for the work.
    ///
    /// A program bound to application buffers runs by [`Program::submit`] instead.
    pub fn execute(&mut self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        if self.bound.is_bound() {
            return Err(self.binding_error(error::BindingProblem::BoundProgram));
        }
        vk_core::check_inputs(&self.host_inputs(), inputs)?;
        let start = Instant::now();
        let result = match self.hand_off {
            HandOff::Device => self.execute_on_device(inputs),
            HandOff::Host => self.execute_through_host(inputs),
        };
        self.last.total = start.elapsed();
        result
    }

    /// Starts a run (or [`ProgramBuilder::runs_per_submission`] runs) without waiting for
    /// it: on `inputs` (as [`Program::execute`] takes them; no run may be in flight then), or,
    /// with `None`, on the inputs the last run left: the last given, with tensors fed back
    /// ([`ProgramBuilder::feed_back`]) in place of theirs. Up to
    /// [`ProgramBuilder::runs_in_flight`] submissions may be in flight; [`Program::finish`]
    /// reads the oldest run's outputs. A [`ProgramError::InFlight`] says when the start must
    /// wait for a finish. Device hand-off, without application buffers.
    pub fn start(&mut self, inputs: Option<&[HostTensor]>) -> Result<()> {
        if self.bound.is_bound() {
            return Err(self.binding_error(error::BindingProblem::BoundProgram));
        }
        if let Some(inputs) = inputs {
            vk_core::check_inputs(&self.host_inputs(), inputs)?;
        }
        let start = Instant::now();
        let plan = self.device_plan()?;
        let upload = plan.start(inputs)?;
        let runs = plan.reps();
        if inputs.is_some() {
            self.last.host_upload = upload;
        }
        self.started.extend(std::iter::repeat_n(start, runs));
        Ok(())
    }

    /// Waits for the oldest run in flight ([`Program::start`]) and returns its outputs, as
    /// [`Program::execute`] does; [`ProgramError::NothingInFlight`] when none is.
    pub fn finish(&mut self) -> Result<Vec<HostTensor>> {
        let outputs = self.outputs.clone();
        let (out, times, download) = self.device_plan()?.finish(&outputs)?;
        let started = self.started.pop_front();
        self.last.total = started.map_or(Default::default(), |t| t.elapsed());
        self.last.host_download = download;
        self.note_times(times);
        Ok(out)
    }

    fn note_times(&mut self, times: plan::RunTimes) {
        self.last.steps = self
            .steps
            .iter()
            .zip(times.steps)
            .map(|(s, t)| (s.spec.name.clone(), t))
            .collect();
        self.last.device_span = times.span;
        self.last.device_idle = times.idle;
        self.last.submissions = 1;
    }

    /// Runs in flight ([`Program::start`]).
    pub fn running(&self) -> usize {
        self.plan.as_ref().map_or(0, DevicePlan::running)
    }

    /// The most runs in flight at once: submissions in flight times runs per submission.
    pub fn most_running(&self) -> usize {
        self.plan.as_ref().map_or(1, DevicePlan::most_running)
    }

    /// Runs per submission ([`ProgramBuilder::runs_per_submission`]).
    pub fn runs_per_submission(&self) -> usize {
        self.plan.as_ref().map_or(1, DevicePlan::reps)
    }

    /// Waits for every run in flight, leaving their outputs unread.
    pub fn settle(&mut self) -> Result<()> {
        self.started.clear();
        match self.plan.as_mut() {
            Some(plan) => plan.settle(),
            None => Ok(()),
        }
    }

    fn device_plan(&mut self) -> Result<&mut DevicePlan> {
        self.plan.as_mut().ok_or_else(|| {
            ProgramError::Wiring("runs in flight need the device hand-off's recorded plan".into())
        })
    }

    fn binding_error(&self, problem: error::BindingProblem) -> ProgramError {
        let tensor = self.inputs.first().or(self.outputs.first());
        ProgramError::Binding(Box::new(BindingError {
            tensor: tensor.map(|s| s.name.clone()).unwrap_or_default(),
            problem,
        }))
    }

    /// Submits one execution of a program bound to application buffers and images (every
    /// input and output, see [`ProgramBuilder::bind_input`] and
    /// [`ProgramBuilder::bind_input_image`]): the recorded plan, waiting on `waits` and
    /// signalling `signals` (binary or timeline semaphores). Returns once submitted, without
    /// a host wait; [`Program::wait`] waits for it on the host, where needed. Only a submit
    /// while the previous one may still run waits (for it): the plan is one command buffer.
    ///
    /// The application's writes of the inputs must happen before a semaphore in `waits`
    /// is signalled, and its reads of the outputs after one in `signals` is: wait stages
    /// `ALL_COMMANDS` cover every step of the plan.
    ///
    /// # Safety
    /// Every semaphore must be a live semaphore of the program's device whose state allows
    /// the wait or signal, as `vkQueueSubmit` requires (binary waits signalled or with a
    /// pending signal, binary signals unsignalled, timeline values increasing); the bound
    /// buffers are live (the contract of [`ProgramBuilder::bind_input`]), and no other
    /// access to them overlaps this execution unless ordered by these semaphores.
    pub unsafe fn submit(
        &mut self,
        waits: &[SemaphoreWait],
        signals: &[SemaphoreSignal],
    ) -> Result<()> {
        let images_only = self.images.all(self.inputs.len(), self.outputs.len());
        if !self.bound.is_bound() && !images_only {
            return Err(self.binding_error(error::BindingProblem::NotBound));
        }
        if self.running() > 0 {
            return Err(ProgramError::InFlight {
                running: self.running(),
                most: self.most_running(),
                with_inputs: false,
            });
        }
        let plan = self
            .plan
            .as_mut()
            .ok_or_else(|| ProgramError::Wiring("the device plan was not recorded".into()))?;
        // SAFETY: the caller's contract covers the semaphores and bound buffers; the plan's
        // own buffers and the steps live as long as the plan.
        unsafe { plan.submit(waits, signals) }?;
        self.last.submissions = 1;
        Ok(())
    }

    /// Waits on the host for the last [`Program::submit`], if any, and records its step
    /// timings (see [`Program::last_timings`]).
    pub fn wait(&mut self) -> Result<()> {
        let Some(plan) = self.plan.as_mut() else {
            return Ok(());
        };
        let times = plan.wait()?;
        self.last.steps = self
            .steps
            .iter()
            .zip(times)
            .map(|(s, t)| (s.spec.name.clone(), t))
            .collect();
        Ok(())
    }

    fn execute_on_device(&mut self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        let plan = self
            .plan
            .as_mut()
            .ok_or_else(|| ProgramError::Wiring("the device plan was not recorded".into()))?;
        self.started.clear();
        let (outputs, times, [upload, download]) = plan.run(inputs, &self.outputs)?;
        self.last.host_upload = upload;
        self.last.host_download = download;
        self.note_times(times);
        Ok(outputs)
    }

    fn execute_through_host(&mut self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        let mut values: std::collections::BTreeMap<String, HostTensor> = self
            .inputs
            .iter()
            .map(|s| s.name.clone())
            .zip(inputs.iter().cloned())
            .collect();
        let mut timings = Vec::with_capacity(self.steps.len());
        for step in &mut self.steps {
            let args: Vec<HostTensor> =
                step.spec
                    .inputs
                    .iter()
                    .map(|n| {
                        values.get(n).cloned().ok_or_else(|| {
                            ProgramError::Wiring(format!("tensor '{n}' has no value"))
                        })
                    })
                    .collect::<Result<_>>()?;
            let t = Instant::now();
            let outs = step.runner.execute(&step.spec.name, &args)?;
            timings.push((step.spec.name.clone(), t.elapsed()));
            for (n, v) in step.spec.outputs.iter().zip(outs) {
                values.insert(n.clone(), v);
            }
        }
        self.last.steps = timings;
        self.last.submissions = self.steps.len() as u32;
        self.outputs
            .iter()
            .map(|s| {
                values.remove(&s.name).ok_or_else(|| {
                    ProgramError::Wiring(format!("output '{}' has no value", s.name))
                })
            })
            .collect()
    }
}
