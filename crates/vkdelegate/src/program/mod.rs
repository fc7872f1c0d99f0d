//! Programs: several delegates, one device.
//!
//! A [`Program`] is an ordered list of steps, each a VGF model or a compute graph, connected by
//! named tensors. [`ProgramBuilder::build`] loads every step onto one device (a shared context,
//! whatever the load order, when sharing is chosen), checks that every tensor a step consumes
//! has the dtype and shape its producer makes (an error names both steps), and, in the default
//! [`HandOff::Device`] mode, records the whole program into one command buffer: program inputs
//! are copied in from host-visible buffers, each step's commands follow, intermediate tensors are
//! copied from producer to consumer on the device, and the outputs are copied out, with pipeline
//! barriers in between and one final barrier to host reads. One execution is one submission and
//! one fence wait. [`HandOff::Host`] instead runs each step on its own and passes tensors
//! through host memory (a submission and a fence wait per step), for comparison and debugging.

mod file;
#[cfg(feature = "compute")]
mod ops;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use vk_core::{DType, Device, HostTensor, Requirements, vk};

pub use file::ProgramFile;

/// Errors of programs. Messages name the step and tensor involved.
#[derive(Debug, thiserror::Error)]
pub enum ProgramError {
    /// The program file cannot be read or parsed.
    #[error("program file {path}: {problem}")]
    File {
        /// Its path.
        path: String,
        /// What is wrong.
        problem: String,
    },
    /// A step is malformed or failed to load.
    #[error("step '{step}': {problem}")]
    Step {
        /// Step name.
        step: String,
        /// What is wrong.
        problem: String,
    },
    /// A tensor passes between two steps with different dtypes or shapes.
    #[error("{0}")]
    Mismatch(Box<TensorMismatch>),
    /// The wiring of names is wrong.
    #[error("{0}")]
    Wiring(String),
    /// Steps ended on different devices.
    #[error("step '{step}' runs on a different VkDevice than step '{first}'")]
    DifferentDevices {
        /// The first step.
        first: String,
        /// The step that differs.
        step: String,
    },
    /// Inputs given to `execute` do not match the program's inputs.
    #[error("input '{name}': {problem}")]
    Input {
        /// Input name.
        name: String,
        /// What is wrong.
        problem: String,
    },
    /// A step of a kind this build does not include.
    #[error("step '{step}' is a {kind} step, but this build lacks the `{feature}` feature")]
    NotCompiled {
        /// Step name.
        step: String,
        /// Kind.
        kind: &'static str,
        /// Cargo feature needed.
        feature: &'static str,
    },
    /// Vulkan or device errors.
    #[error(transparent)]
    Vk(#[from] vk_core::Error),
    /// Shared-runtime errors.
    #[cfg(feature = "shared")]
    #[error(transparent)]
    Shared(#[from] shared_runtime::Error),
    /// Errors of the VGF delegate.
    #[cfg(feature = "vgf")]
    #[error("step '{step}': {source}")]
    Vgf {
        /// Step name.
        step: String,
        /// The delegate's error.
        source: Box<vgf_delegate::Error>,
    },
    /// Errors of the compute delegate.
    #[cfg(feature = "compute")]
    #[error("step '{step}': {source}")]
    Compute {
        /// Step name.
        step: String,
        /// The delegate's error.
        source: Box<compute_delegate::Error>,
    },
}

type Result<T, E = ProgramError> = std::result::Result<T, E>;

/// A tensor passed between two steps with different dtypes or shapes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "tensor '{tensor}': step '{producer}' produces {produced} but step '{consumer}' expects {expected}"
)]
pub struct TensorMismatch {
    /// Tensor name.
    pub tensor: String,
    /// The producing step (or `program input`).
    pub producer: String,
    /// What it produces.
    pub produced: TensorSpec,
    /// The consuming step.
    pub consumer: String,
    /// What it expects.
    pub expected: TensorSpec,
}

/// A tensor's dtype and shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: Vec<usize>,
}

impl TensorSpec {
    /// Bytes of a contiguous tensor of this spec.
    pub fn bytes(&self) -> usize {
        self.shape.iter().product::<usize>() * self.dtype.size()
    }
}

impl fmt::Display for TensorSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{:?}", self.dtype, self.shape)
    }
}

/// What a step runs.
#[derive(Debug, Clone)]
pub enum StepKind {
    /// A VGF file.
    Vgf {
        /// Its path.
        path: PathBuf,
    },
    /// A VGF model already in memory.
    VgfBytes {
        /// The file's bytes.
        bytes: Arc<[u8]>,
    },
    /// A compute op (see the program file documentation for the op names and attributes).
    Compute {
        /// Op name.
        op: String,
        /// Attributes.
        attributes: BTreeMap<String, toml::Value>,
    },
}

/// One step: what it runs and the tensor names it reads and writes.
#[derive(Debug, Clone)]
pub struct StepSpec {
    /// Name (for messages and timings).
    pub name: String,
    /// What it runs.
    pub kind: StepKind,
    /// Tensor names bound to its inputs, in order.
    pub inputs: Vec<String>,
    /// Names given to its outputs, in order.
    pub outputs: Vec<String>,
}

/// Where a program's steps run.
#[derive(Debug, Clone)]
pub enum DeviceChoice {
    /// One device made for this program: the selected adapter, with every step's requirements.
    Standalone,
    /// A device the caller provides.
    Device(Device),
    /// A shared context: each step, in order, acquires it with its own delegate's requirements.
    #[cfg(feature = "shared")]
    Shared(shared_runtime::SharingOptions),
}

/// How tensors pass between steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HandOff {
    /// On the device, in one command buffer: one submission and one fence wait per execution.
    #[default]
    Device,
    /// Through host memory: each step executes on its own.
    Host,
}

/// Builds a [`Program`].
#[derive(Debug, Clone)]
pub struct ProgramBuilder {
    steps: Vec<StepSpec>,
    outputs: Vec<String>,
    device: DeviceChoice,
    hand_off: HandOff,
}

impl Default for ProgramBuilder {
    fn default() -> Self {
        ProgramBuilder {
            steps: Vec::new(),
            outputs: Vec::new(),
            device: DeviceChoice::Standalone,
            hand_off: HandOff::Device,
        }
    }
}

/// A loaded step (one per step, never moved in a hot path: the size difference is harmless).
#[allow(clippy::large_enum_variant)]
enum Runner {
    #[cfg(feature = "vgf")]
    Vgf(vgf_delegate::Model),
    #[cfg(feature = "compute")]
    Compute(compute_delegate::Graph, Device),
}

/// Where a step's input or output lives on the device.
#[derive(Debug, Clone, Copy)]
struct DeviceSlot {
    buffer: vk::Buffer,
    offset: u64,
}

impl Runner {
    fn device(&self) -> &Device {
        match self {
            #[cfg(feature = "vgf")]
            Runner::Vgf(m) => m.device(),
            #[cfg(feature = "compute")]
            Runner::Compute(_, d) => d,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            #[cfg(feature = "vgf")]
            Runner::Vgf(_) => "vgf",
            #[cfg(feature = "compute")]
            Runner::Compute(..) => "compute",
        }
    }

    fn inputs(&self) -> Vec<TensorSpec> {
        self.specs(false)
    }

    fn outputs(&self) -> Vec<TensorSpec> {
        self.specs(true)
    }

    /// Dtypes and shapes of the step's inputs, or of its outputs.
    fn specs(&self, outputs: bool) -> Vec<TensorSpec> {
        match self {
            #[cfg(feature = "vgf")]
            Runner::Vgf(m) => {
                let infos = if outputs { m.outputs() } else { m.inputs() };
                infos
                    .iter()
                    .map(|t| TensorSpec {
                        dtype: t.dtype,
                        shape: t.shape.clone(),
                    })
                    .collect()
            }
            #[cfg(feature = "compute")]
            Runner::Compute(g, _) => {
                let infos = if outputs { g.outputs() } else { g.inputs() };
                infos
                    .into_iter()
                    .map(|(_, dtype, shape)| TensorSpec {
                        dtype,
                        shape: shape.to_vec(),
                    })
                    .collect()
            }
        }
    }

    fn execute(&mut self, step: &str, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        match self {
            #[cfg(feature = "vgf")]
            Runner::Vgf(m) => m.execute(inputs).map_err(|source| ProgramError::Vgf {
                step: step.to_owned(),
                source: Box::new(source),
            }),
            #[cfg(feature = "compute")]
            Runner::Compute(g, _) => g.execute(inputs).map_err(|source| ProgramError::Compute {
                step: step.to_owned(),
                source: Box::new(source),
            }),
        }
    }

    fn device_input(&self, i: usize) -> Option<DeviceSlot> {
        match self {
            #[cfg(feature = "vgf")]
            Runner::Vgf(m) => m.device_inputs().get(i).map(|t| DeviceSlot {
                buffer: t.buffer,
                offset: 0,
            }),
            #[cfg(feature = "compute")]
            Runner::Compute(g, _) => g.input_buffer(i).map(|t| DeviceSlot {
                buffer: t.buffer,
                offset: t.offset,
            }),
        }
    }

    fn device_output(&self, i: usize) -> Option<DeviceSlot> {
        match self {
            #[cfg(feature = "vgf")]
            Runner::Vgf(m) => m.device_outputs().get(i).map(|t| DeviceSlot {
                buffer: t.buffer,
                offset: 0,
            }),
            #[cfg(feature = "compute")]
            Runner::Compute(g, _) => g.output_buffer(i).map(|t| DeviceSlot {
                buffer: t.buffer,
                offset: t.offset,
            }),
        }
    }

    /// # Safety
    /// `cb` is a recording primary command buffer of this step's device; the caller orders
    /// input writes before and output reads after with barriers.
    unsafe fn record(&self, cb: vk::CommandBuffer) {
        match self {
            // SAFETY: forwarded contract.
            #[cfg(feature = "vgf")]
            Runner::Vgf(m) => unsafe { m.record_segments(cb) },
            // SAFETY: forwarded contract.
            #[cfg(feature = "compute")]
            Runner::Compute(g, _) => unsafe { g.record_into(cb) },
        }
    }
}

struct Step {
    spec: StepSpec,
    runner: Runner,
    /// Kept so a shared context stays alive as long as the step.
    #[cfg(feature = "shared")]
    _lease: Option<shared_runtime::Lease>,
}

/// Host-visible buffers and the recorded command buffer of the device hand-off.
struct DevicePlan {
    device: Device,
    pool: vk::CommandPool,
    cmd: vk::CommandBuffer,
    fence: vk::Fence,
    /// A submission signals `fence` and has not been waited for successfully yet.
    pending: bool,
    queries: vk::QueryPool,
    query_count: u32,
    /// Host buffers of program inputs, then outputs.
    host: Vec<HostBuffer>,
    inputs_at: usize,
    outputs_at: usize,
}

struct HostBuffer {
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    ptr: *mut u8,
    bytes: usize,
}

// SAFETY: the raw pointers are mappings of memory owned by the plan; access goes through
// `&mut Program`.
unsafe impl Send for DevicePlan {}

impl Drop for DevicePlan {
    fn drop(&mut self) {
        let d = self.device.raw();
        if self.pending {
            // SAFETY: the plan's own fence, signaled by its pending submission.
            if let Err(e) = unsafe { self.device.wait_for_fence(self.fence, u64::MAX) } {
                log::error!("program teardown: waiting for the last execution failed: {e}");
            }
        }
        // SAFETY: no submission of the plan is pending (waited above, or the device is lost);
        // every handle was created from `d` and is destroyed once.
        unsafe {
            d.destroy_fence(self.fence, None);
            d.destroy_command_pool(self.pool, None);
            if self.queries != vk::QueryPool::null() {
                d.destroy_query_pool(self.queries, None);
            }
            for h in self.host.drain(..) {
                d.destroy_buffer(h.buffer, None);
                d.free_memory(h.memory, None);
            }
        }
    }
}

/// Timings of one execution.
#[derive(Debug, Clone, Default)]
pub struct Timings {
    /// Per step: name and time (device timestamps in device mode when the queue has them,
    /// wall time in host mode).
    pub steps: Vec<(String, Duration)>,
    /// Wall time of the whole execution, host copies included.
    pub total: Duration,
    /// Submissions made.
    pub submissions: u32,
}

/// A loaded program.
pub struct Program {
    // Field order is drop order: the plan waits for its last submission before the steps'
    // models and graphs are destroyed.
    plan: Option<DevicePlan>,
    steps: Vec<Step>,
    inputs: Vec<(String, TensorSpec)>,
    outputs: Vec<(String, TensorSpec)>,
    hand_off: HandOff,
    last: Timings,
}

impl fmt::Debug for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Program")
            .field(
                "steps",
                &self
                    .steps
                    .iter()
                    .map(|s| format!("{} ({})", s.spec.name, s.runner.kind()))
                    .collect::<Vec<_>>(),
            )
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

    /// Chooses the device.
    pub fn device(mut self, choice: DeviceChoice) -> Self {
        self.device = choice;
        self
    }

    /// Chooses how tensors pass between steps.
    pub fn hand_off(mut self, hand_off: HandOff) -> Self {
        self.hand_off = hand_off;
        self
    }

    /// Loads every step, checks the wiring, and (device hand-off) records the program.
    pub fn build(self) -> Result<Program> {
        if self.steps.is_empty() {
            return Err(ProgramError::Wiring(
                "a program needs at least one step".into(),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for s in &self.steps {
            if !seen.insert(s.name.as_str()) {
                return Err(ProgramError::Wiring(format!(
                    "two steps are named '{}'",
                    s.name
                )));
            }
        }

        // Each VGF file is read once; each step's requirements are derived once.
        let specs: Vec<StepSpec> = self.steps.iter().map(read_once).collect::<Result<_>>()?;
        let requirements: Vec<Requirements> =
            specs.iter().map(step_requirements).collect::<Result<_>>()?;
        let standalone = match &self.device {
            DeviceChoice::Standalone => {
                let union = requirements
                    .iter()
                    .skip(1)
                    .fold(requirements[0].clone(), |u, r| u.union(r));
                Some(Device::open(&union)?)
            }
            _ => None,
        };

        // name -> (spec, producer)
        let mut available: BTreeMap<String, (TensorSpec, String)> = BTreeMap::new();
        let mut program_inputs: Vec<(String, TensorSpec)> = Vec::new();
        let mut steps: Vec<Step> = Vec::new();
        for (spec, requirements) in specs.iter().zip(&requirements) {
            // Specs of this step's inputs as far as producers know them.
            let known: Vec<Option<TensorSpec>> = spec
                .inputs
                .iter()
                .map(|n| available.get(n).map(|(s, _)| s.clone()))
                .collect();
            let (runner, lease) =
                self.load_step(spec, requirements, &known, standalone.as_ref())?;
            let expected = runner.inputs();
            if expected.len() != spec.inputs.len() {
                return Err(ProgramError::Step {
                    step: spec.name.clone(),
                    problem: format!(
                        "takes {} input(s) but the step lists {} ({:?})",
                        expected.len(),
                        spec.inputs.len(),
                        spec.inputs
                    ),
                });
            }
            for (name, want) in spec.inputs.iter().zip(&expected) {
                match available.get(name) {
                    Some((have, producer)) if have != want => {
                        return Err(ProgramError::Mismatch(Box::new(TensorMismatch {
                            tensor: name.clone(),
                            producer: producer.clone(),
                            produced: have.clone(),
                            consumer: spec.name.clone(),
                            expected: want.clone(),
                        })));
                    }
                    Some(_) => {}
                    None => {
                        program_inputs.push((name.clone(), want.clone()));
                        available.insert(name.clone(), (want.clone(), "program input".into()));
                    }
                }
            }
            let produced = runner.outputs();
            if produced.len() != spec.outputs.len() {
                return Err(ProgramError::Step {
                    step: spec.name.clone(),
                    problem: format!(
                        "produces {} output(s) but the step names {} ({:?})",
                        produced.len(),
                        spec.outputs.len(),
                        spec.outputs
                    ),
                });
            }
            for (name, have) in spec.outputs.iter().zip(produced) {
                if let Some((_, producer)) = available.get(name) {
                    return Err(ProgramError::Wiring(format!(
                        "tensor '{name}' is produced by both '{producer}' and '{}'",
                        spec.name
                    )));
                }
                available.insert(name.clone(), (have, spec.name.clone()));
            }
            if let Some(first) = steps.first() {
                if !first.runner.device().same_as(runner.device()) {
                    return Err(ProgramError::DifferentDevices {
                        first: first.spec.name.clone(),
                        step: spec.name.clone(),
                    });
                }
            }
            #[cfg(not(feature = "shared"))]
            let _ = lease;
            steps.push(Step {
                spec: spec.clone(),
                runner,
                #[cfg(feature = "shared")]
                _lease: lease,
            });
        }

        let output_names: Vec<String> = if self.outputs.is_empty() {
            self.steps
                .last()
                .map(|s| s.outputs.clone())
                .unwrap_or_default()
        } else {
            self.outputs.clone()
        };
        let mut outputs = Vec::new();
        for name in output_names {
            match available.get(&name) {
                Some((spec, producer)) if producer != "program input" => {
                    outputs.push((name, spec.clone()))
                }
                _ => {
                    return Err(ProgramError::Wiring(format!(
                        "program output '{name}' is not produced by any step"
                    )));
                }
            }
        }

        let mut program = Program {
            steps,
            inputs: program_inputs,
            outputs,
            hand_off: self.hand_off,
            plan: None,
            last: Timings::default(),
        };
        if self.hand_off == HandOff::Device {
            program.plan = Some(program.record_plan()?);
        }
        Ok(program)
    }

    #[allow(unused_variables)]
    fn load_step(
        &self,
        spec: &StepSpec,
        requirements: &Requirements,
        known_inputs: &[Option<TensorSpec>],
        standalone: Option<&Device>,
    ) -> Result<(Runner, Option<LeaseHolder>)> {
        let (device, lease): (Device, Option<LeaseHolder>) = match (&self.device, standalone) {
            (_, Some(d)) => (d.clone(), None),
            (DeviceChoice::Device(d), _) => (d.clone(), None),
            #[cfg(feature = "shared")]
            (DeviceChoice::Shared(options), _) => {
                let lease = shared_runtime::acquire(options, requirements, &spec.name)?
                    .ok_or_else(|| {
                        ProgramError::Wiring(
                            "DeviceChoice::Shared needs a sharing mode other than disabled".into(),
                        )
                    })?;
                (lease.device().clone(), Some(lease))
            }
            (DeviceChoice::Standalone, None) => Device::open(requirements).map(|d| (d, None))?,
        };
        device.check(requirements)?;
        let runner = match &spec.kind {
            // `read_once` turned every path into bytes.
            StepKind::Vgf { path } => {
                return Err(ProgramError::Step {
                    step: spec.name.clone(),
                    problem: format!("{} was not read", path.display()),
                });
            }
            StepKind::VgfBytes { bytes } => load_vgf(spec, bytes, &device)?,
            StepKind::Compute { op, attributes } => {
                load_compute(spec, op, attributes, known_inputs, &device)?
            }
        };
        Ok((runner, lease))
    }
}

#[cfg(feature = "shared")]
type LeaseHolder = shared_runtime::Lease;
#[cfg(not(feature = "shared"))]
type LeaseHolder = ();

/// The step with its VGF file (if any) read into memory.
fn read_once(spec: &StepSpec) -> Result<StepSpec> {
    match &spec.kind {
        StepKind::Vgf { path } => {
            let bytes = std::fs::read(path).map_err(|e| ProgramError::Step {
                step: spec.name.clone(),
                problem: format!("cannot read {}: {e}", path.display()),
            })?;
            Ok(StepSpec {
                kind: StepKind::VgfBytes {
                    bytes: bytes.into(),
                },
                ..spec.clone()
            })
        }
        _ => Ok(spec.clone()),
    }
}

fn step_requirements(spec: &StepSpec) -> Result<Requirements> {
    match &spec.kind {
        StepKind::Vgf { .. } | StepKind::VgfBytes { .. } => vgf_requirements(spec),
        StepKind::Compute { .. } => compute_requirements(spec),
    }
}

#[cfg(feature = "vgf")]
fn vgf_requirements(spec: &StepSpec) -> Result<Requirements> {
    let bytes: std::borrow::Cow<'_, [u8]> = match &spec.kind {
        StepKind::Vgf { path } => std::fs::read(path)
            .map_err(|e| ProgramError::Step {
                step: spec.name.clone(),
                problem: format!("cannot read {}: {e}", path.display()),
            })?
            .into(),
        StepKind::VgfBytes { bytes } => std::borrow::Cow::Borrowed(&bytes[..]),
        StepKind::Compute { .. } => return compute_requirements(spec),
    };
    let vgf = vgf_delegate::Vgf::decode(&bytes).map_err(|e| ProgramError::Vgf {
        step: spec.name.clone(),
        source: Box::new(e.into()),
    })?;
    vgf_delegate::requirements_for(&vgf).map_err(|source| ProgramError::Vgf {
        step: spec.name.clone(),
        source: Box::new(source),
    })
}

#[cfg(not(feature = "vgf"))]
fn vgf_requirements(spec: &StepSpec) -> Result<Requirements> {
    Err(ProgramError::NotCompiled {
        step: spec.name.clone(),
        kind: "VGF",
        feature: "vgf",
    })
}

#[cfg(feature = "compute")]
fn compute_requirements(_spec: &StepSpec) -> Result<Requirements> {
    Ok(compute_delegate::requirements())
}

#[cfg(not(feature = "compute"))]
fn compute_requirements(spec: &StepSpec) -> Result<Requirements> {
    Err(ProgramError::NotCompiled {
        step: spec.name.clone(),
        kind: "compute",
        feature: "compute",
    })
}

#[cfg(feature = "vgf")]
fn load_vgf(spec: &StepSpec, bytes: &[u8], device: &Device) -> Result<Runner> {
    vgf_delegate::Model::load(bytes, device)
        .map(Runner::Vgf)
        .map_err(|source| ProgramError::Vgf {
            step: spec.name.clone(),
            source: Box::new(source),
        })
}

#[cfg(not(feature = "vgf"))]
fn load_vgf(spec: &StepSpec, _bytes: &[u8], _device: &Device) -> Result<Runner> {
    vgf_requirements(spec).map(|_| unreachable_runner())
}

#[cfg(feature = "compute")]
fn load_compute(
    spec: &StepSpec,
    op: &str,
    attributes: &BTreeMap<String, toml::Value>,
    known_inputs: &[Option<TensorSpec>],
    device: &Device,
) -> Result<Runner> {
    let declared = ops::declared_input(&spec.name, attributes)?;
    let inputs: Vec<TensorSpec> = known_inputs
        .iter()
        .zip(&spec.inputs)
        .map(|(k, name)| {
            k.clone()
                .or_else(|| declared.clone())
                .ok_or_else(|| ProgramError::Step {
                    step: spec.name.clone(),
                    problem: format!(
                        "input '{name}' is a program input: give the step `input_shape` (and \
                     `input_dtype`, default f32) so its graph can be built"
                    ),
                })
        })
        .collect::<Result<_>>()?;
    let builder = ops::build_graph(&spec.name, op, attributes, &inputs)?;
    builder
        .build(device)
        .map(|g| Runner::Compute(g, device.clone()))
        .map_err(|source| ProgramError::Compute {
            step: spec.name.clone(),
            source: Box::new(source),
        })
}

#[cfg(not(feature = "compute"))]
fn load_compute(
    spec: &StepSpec,
    _op: &str,
    _attributes: &BTreeMap<String, toml::Value>,
    _known: &[Option<TensorSpec>],
    _device: &Device,
) -> Result<Runner> {
    compute_requirements(spec).map(|_| unreachable_runner())
}

#[cfg(not(all(feature = "vgf", feature = "compute")))]
fn unreachable_runner() -> Runner {
    // Only reached after a `NotCompiled` error was returned, which `map` never runs on.
    unreachable!("a step kind that is not compiled in produced a runner")
}

fn host_buffer(device: &Device, bytes: usize, usage: vk::BufferUsageFlags) -> Result<HostBuffer> {
    let d = device.raw();
    let size = bytes.max(4) as u64;
    // SAFETY: valid create info.
    let buffer = unsafe {
        d.create_buffer(
            &vk::BufferCreateInfo::default()
                .size(size)
                .usage(usage)
                .sharing_mode(vk::SharingMode::EXCLUSIVE),
            None,
        )
    }
    .map_err(|e| vk_core::VkError::new("vkCreateBuffer", e))
    .map_err(vk_core::Error::from)?;
    // SAFETY: `buffer` is live.
    let req = unsafe { d.get_buffer_memory_requirements(buffer) };
    let flags = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
    let Some(type_index) = device
        .capabilities()
        .memory
        .find(req.memory_type_bits, flags)
    else {
        // SAFETY: unused buffer.
        unsafe { d.destroy_buffer(buffer, None) };
        return Err(vk_core::Error::NoMemoryType {
            type_bits: req.memory_type_bits,
            wanted: flags,
        }
        .into());
    };
    let alloc = vk::MemoryAllocateInfo::default()
        .allocation_size(req.size)
        .memory_type_index(type_index);
    // SAFETY: valid allocation of an existing memory type; on failure the buffer is destroyed.
    let memory = match unsafe { d.allocate_memory(&alloc, None) } {
        Ok(m) => m,
        Err(e) => {
            // SAFETY: unused buffer.
            unsafe { d.destroy_buffer(buffer, None) };
            return Err(vk_core::Error::from(vk_core::VkError::new("vkAllocateMemory", e)).into());
        }
    };
    // SAFETY: fresh buffer and memory of a compatible type; memory is host-visible.
    let mapped = unsafe {
        d.bind_buffer_memory(buffer, memory, 0)
            .and_then(|_| d.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()))
    };
    match mapped {
        Ok(ptr) => Ok(HostBuffer {
            buffer,
            memory,
            ptr: ptr.cast(),
            bytes,
        }),
        Err(e) => {
            // SAFETY: unused buffer and memory.
            unsafe {
                d.destroy_buffer(buffer, None);
                d.free_memory(memory, None);
            }
            Err(vk_core::Error::from(vk_core::VkError::new("vkMapMemory", e)).into())
        }
    }
}

/// A global memory barrier between everything before and everything after.
///
/// # Safety
/// `cb` is recording.
unsafe fn full_barrier(
    d: &ash::Device,
    cb: vk::CommandBuffer,
    dst_stage: vk::PipelineStageFlags,
    dst_access: vk::AccessFlags,
) {
    let barrier = [vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::MEMORY_WRITE)
        .dst_access_mask(dst_access)];
    // SAFETY: forwarded contract.
    unsafe {
        d.cmd_pipeline_barrier(
            cb,
            vk::PipelineStageFlags::ALL_COMMANDS,
            dst_stage,
            vk::DependencyFlags::empty(),
            &barrier,
            &[],
            &[],
        )
    };
}

use vk_core::ash;

impl Program {
    /// Program inputs, in the order `execute` takes them.
    pub fn inputs(&self) -> &[(String, TensorSpec)] {
        &self.inputs
    }

    /// Program outputs, in the order `execute` returns them.
    pub fn outputs(&self) -> &[(String, TensorSpec)] {
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

    /// Timings of the last execution.
    pub fn last_timings(&self) -> &Timings {
        &self.last
    }

    fn record_plan(&self) -> Result<DevicePlan> {
        let device = self.device().clone();
        let d = device.raw();
        let vkerr =
            |call: &'static str| move |e| vk_core::Error::from(vk_core::VkError::new(call, e));
        let family = device.queue().family();
        // SAFETY: valid create info for the device's queue family.
        let pool = unsafe {
            d.create_command_pool(
                &vk::CommandPoolCreateInfo::default().queue_family_index(family),
                None,
            )
        }
        .map_err(vkerr("vkCreateCommandPool"))?;
        let mut plan = DevicePlan {
            device: device.clone(),
            pool,
            cmd: vk::CommandBuffer::null(),
            fence: vk::Fence::null(),
            pending: false,
            queries: vk::QueryPool::null(),
            query_count: 0,
            host: Vec::new(),
            inputs_at: 0,
            outputs_at: 0,
        };
        // SAFETY: valid create info.
        plan.fence = unsafe { d.create_fence(&vk::FenceCreateInfo::default(), None) }
            .map_err(vkerr("vkCreateFence"))?;
        // SAFETY: the pool is live.
        plan.cmd = unsafe {
            d.allocate_command_buffers(
                &vk::CommandBufferAllocateInfo::default()
                    .command_pool(pool)
                    .level(vk::CommandBufferLevel::PRIMARY)
                    .command_buffer_count(1),
            )
        }
        .map_err(vkerr("vkAllocateCommandBuffers"))?[0];
        let timestamps = device
            .capabilities()
            .queue_families
            .get(family as usize)
            .is_some_and(|f| f.timestamp_valid_bits > 0);
        if timestamps {
            plan.query_count = self.steps.len() as u32 + 1;
            // SAFETY: valid create info.
            plan.queries = unsafe {
                d.create_query_pool(
                    &vk::QueryPoolCreateInfo::default()
                        .query_type(vk::QueryType::TIMESTAMP)
                        .query_count(plan.query_count),
                    None,
                )
            }
            .map_err(vkerr("vkCreateQueryPool"))?;
        }
        plan.inputs_at = 0;
        for (_, spec) in &self.inputs {
            plan.host.push(host_buffer(
                &device,
                spec.bytes(),
                vk::BufferUsageFlags::TRANSFER_SRC,
            )?);
        }
        plan.outputs_at = plan.host.len();
        for (_, spec) in &self.outputs {
            plan.host.push(host_buffer(
                &device,
                spec.bytes(),
                vk::BufferUsageFlags::TRANSFER_DST,
            )?);
        }

        // Where each named tensor lives on the device once produced.
        let mut location: BTreeMap<&str, DeviceSlot> = BTreeMap::new();
        for (i, (name, _)) in self.inputs.iter().enumerate() {
            location.insert(
                name.as_str(),
                DeviceSlot {
                    buffer: plan.host[plan.inputs_at + i].buffer,
                    offset: 0,
                },
            );
        }
        let sizes: BTreeMap<&str, u64> = self
            .inputs
            .iter()
            .map(|(n, s)| (n.as_str(), s.bytes() as u64))
            .chain(self.steps.iter().flat_map(|s| {
                s.spec
                    .outputs
                    .iter()
                    .zip(s.runner.outputs())
                    .map(|(n, spec)| (n.as_str(), spec.bytes() as u64))
            }))
            .collect();

        let cb = plan.cmd;
        let missing = |step: &str, what: &str| ProgramError::Step {
            step: step.to_owned(),
            problem: format!("the delegate exposes no device buffer for {what}"),
        };
        // SAFETY: `cb` is a fresh primary command buffer of this device; every copy and step
        // is separated by full barriers; all buffers are live and owned by the program.
        unsafe {
            d.begin_command_buffer(cb, &vk::CommandBufferBeginInfo::default())
                .map_err(vkerr("vkBeginCommandBuffer"))?;
            if timestamps {
                d.cmd_reset_query_pool(cb, plan.queries, 0, plan.query_count);
                d.cmd_write_timestamp(cb, vk::PipelineStageFlags::TOP_OF_PIPE, plan.queries, 0);
            }
            for (k, step) in self.steps.iter().enumerate() {
                // Copy this step's inputs from where they live into the step's own buffers.
                let mut copied = false;
                for (j, name) in step.spec.inputs.iter().enumerate() {
                    let src = location
                        .get(name.as_str())
                        .copied()
                        .ok_or_else(|| missing(&step.spec.name, name))?;
                    let dst = step
                        .runner
                        .device_input(j)
                        .ok_or_else(|| missing(&step.spec.name, &format!("input {j}")))?;
                    let size = sizes.get(name.as_str()).copied().unwrap_or(0);
                    if !copied {
                        full_barrier(
                            d,
                            cb,
                            vk::PipelineStageFlags::TRANSFER,
                            vk::AccessFlags::TRANSFER_READ | vk::AccessFlags::TRANSFER_WRITE,
                        );
                        copied = true;
                    }
                    d.cmd_copy_buffer(
                        cb,
                        src.buffer,
                        dst.buffer,
                        &[vk::BufferCopy::default()
                            .src_offset(src.offset)
                            .dst_offset(dst.offset)
                            .size(size)],
                    );
                }
                full_barrier(
                    d,
                    cb,
                    vk::PipelineStageFlags::ALL_COMMANDS,
                    vk::AccessFlags::MEMORY_READ | vk::AccessFlags::MEMORY_WRITE,
                );
                step.runner.record(cb);
                if timestamps {
                    d.cmd_write_timestamp(
                        cb,
                        vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                        plan.queries,
                        k as u32 + 1,
                    );
                }
                for (j, name) in step.spec.outputs.iter().enumerate() {
                    let slot = step
                        .runner
                        .device_output(j)
                        .ok_or_else(|| missing(&step.spec.name, &format!("output {j}")))?;
                    location.insert(name.as_str(), slot);
                }
            }
            full_barrier(
                d,
                cb,
                vk::PipelineStageFlags::TRANSFER,
                vk::AccessFlags::TRANSFER_READ,
            );
            for (i, (name, spec)) in self.outputs.iter().enumerate() {
                let src = location.get(name.as_str()).copied().ok_or_else(|| {
                    ProgramError::Wiring(format!("output '{name}' has no buffer"))
                })?;
                d.cmd_copy_buffer(
                    cb,
                    src.buffer,
                    plan.host[plan.outputs_at + i].buffer,
                    &[vk::BufferCopy::default()
                        .src_offset(src.offset)
                        .size(spec.bytes() as u64)],
                );
            }
            full_barrier(
                d,
                cb,
                vk::PipelineStageFlags::HOST,
                vk::AccessFlags::HOST_READ,
            );
            d.end_command_buffer(cb)
                .map_err(vkerr("vkEndCommandBuffer"))?;
        }
        Ok(plan)
    }

    fn check_inputs(&self, inputs: &[HostTensor]) -> Result<()> {
        if inputs.len() != self.inputs.len() {
            let names: Vec<&str> = self.inputs.iter().map(|(n, _)| n.as_str()).collect();
            return Err(ProgramError::Input {
                name: names.join(", "),
                problem: format!(
                    "the program takes {} input(s) ({names:?}), {} given",
                    self.inputs.len(),
                    inputs.len()
                ),
            });
        }
        for ((name, spec), t) in self.inputs.iter().zip(inputs) {
            if t.dtype() != spec.dtype || t.shape() != spec.shape.as_slice() {
                return Err(ProgramError::Input {
                    name: name.clone(),
                    problem: format!("expected {spec}, got {}{:?}", t.dtype(), t.shape()),
                });
            }
        }
        Ok(())
    }

    /// Runs the program on `inputs` (in [`Program::inputs`] order) and returns its outputs.
    pub fn execute(&mut self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        self.check_inputs(inputs)?;
        let start = Instant::now();
        let result = match self.hand_off {
            HandOff::Device => self.execute_on_device(inputs),
            HandOff::Host => self.execute_through_host(inputs),
        };
        self.last.total = start.elapsed();
        result
    }

    fn execute_through_host(&mut self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        let mut values: BTreeMap<String, HostTensor> = self
            .inputs
            .iter()
            .map(|(n, _)| n.clone())
            .zip(inputs.iter().cloned())
            .collect();
        let mut timings = Vec::new();
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
            .map(|(n, _)| {
                values
                    .remove(n)
                    .ok_or_else(|| ProgramError::Wiring(format!("output '{n}' has no value")))
            })
            .collect()
    }

    fn execute_on_device(&mut self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        let plan = self
            .plan
            .as_mut()
            .ok_or_else(|| ProgramError::Wiring("the device plan was not recorded".into()))?;
        let device = plan.device.clone();
        let d = device.raw();
        let vkerr =
            |call: &'static str| move |e| vk_core::Error::from(vk_core::VkError::new(call, e));
        if plan.pending {
            // An earlier wait failed: its submission must finish before the buffers are reused.
            // SAFETY: the plan's own fence, signaled by that submission.
            unsafe { device.wait_for_fence(plan.fence, u64::MAX) }.map_err(vk_core::Error::from)?;
            plan.pending = false;
        }
        for (i, t) in inputs.iter().enumerate() {
            let h = &plan.host[plan.inputs_at + i];
            // SAFETY: the mapping holds `h.bytes` bytes (checked against the input's spec); no
            // submission uses it now.
            unsafe { std::ptr::copy_nonoverlapping(t.bytes().as_ptr(), h.ptr, h.bytes) };
        }
        let cmds = [plan.cmd];
        let submit = [vk::SubmitInfo::default().command_buffers(&cmds)];
        {
            let guard = device.queue().lock();
            // SAFETY: the command buffer is executable and not pending; the fence is unsignaled
            // (reset after every successful wait). The guard is held only around the submission.
            unsafe { guard.submit(&submit, plan.fence) }.map_err(vk_core::Error::from)?;
        }
        plan.pending = true;
        // SAFETY: the plan's own fence.
        unsafe { device.wait_for_fence(plan.fence, u64::MAX) }.map_err(vk_core::Error::from)?;
        // SAFETY: the fence is signaled and no submission uses it.
        unsafe { d.reset_fences(&[plan.fence]) }.map_err(vkerr("vkResetFences"))?;
        plan.pending = false;
        let mut outputs = Vec::with_capacity(self.outputs.len());
        for (i, (_, spec)) in self.outputs.iter().enumerate() {
            let h = &plan.host[plan.outputs_at + i];
            // SAFETY: the fence wait and the final host barrier make the copies visible; the
            // memory is coherent and holds `h.bytes` bytes.
            let bytes = unsafe { std::slice::from_raw_parts(h.ptr, h.bytes) }.to_vec();
            outputs.push(
                HostTensor::new(spec.dtype, spec.shape.clone(), bytes)
                    .map_err(|e| ProgramError::Wiring(e.to_string()))?,
            );
        }
        let mut steps = Vec::new();
        if plan.queries != vk::QueryPool::null() {
            let mut stamps = vec![0u64; plan.query_count as usize];
            // SAFETY: every query was written by the completed submission.
            let ok = unsafe {
                d.get_query_pool_results(
                    plan.queries,
                    0,
                    &mut stamps,
                    vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
                )
            };
            if ok.is_ok() {
                let period = f64::from(device.capabilities().limits.timestamp_period());
                for (k, step) in self.steps.iter().enumerate() {
                    let ticks = stamps[k + 1].saturating_sub(stamps[k]);
                    steps.push((
                        step.spec.name.clone(),
                        Duration::from_nanos((ticks as f64 * period) as u64),
                    ));
                }
            }
        }
        self.last.steps = steps;
        self.last.submissions = 1;
        Ok(outputs)
    }
}
