//! ExecuTorch programs (`.pte`) as [`crate::program`]s.
//!
//! An execution plan's instructions become program steps, in order: a `DelegateCall` to
//! `VgfBackend` runs its VGF bytes on the VGF delegate; one to `VulkanBackend` runs its graph,
//! lowered onto the compute delegate (`lower.rs`); a `KernelCall` (an op ExecuTorch left on the
//! CPU) whose op the compute delegate implements runs on the GPU too. Tensors are named by
//! their value index (`v<i>`; the plan's inputs `input_<i>`, its outputs `output_<i>`), so the
//! program's wiring pass checks every hand-off, and device hand-off keeps them on the device.
//!
//! Before anything is loaded, every op the build cannot run (a Vulkan graph node, a CPU
//! kernel, a delegate of another backend, control flow) is collected and reported at once,
//! with where it is.

#[cfg(feature = "compute")]
pub(crate) mod join;
#[cfg(feature = "compute")]
pub(crate) mod lower;

#[cfg(feature = "compute")]
use compute_delegate::ops::Arg;

/// The decoder of `.pte` files and their Vulkan payloads.
pub use executorch_pte as format;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use executorch_pte::{
    DecodeError, ExecutionPlan, Instruction, Program as Pte, VGF_BACKEND_ID, VULKAN_BACKEND_ID,
    Value, VkGraph,
};

use crate::program::{ProgramBuilder, StepKind, StepSpec};

/// What cannot become a program, with every reason.
#[derive(Debug, thiserror::Error)]
pub enum PteError {
    /// The file is not a valid ExecuTorch program.
    #[error("not a valid ExecuTorch program: {0}")]
    Decode(#[from] DecodeError),
    /// A delegate's payload (its VkGraph, its data) is not valid.
    #[error("{location}: not a valid delegate payload: {source}")]
    Payload {
        /// Where: plan, instruction, delegate.
        location: String,
        /// What is wrong with it.
        source: DecodeError,
    },
    /// Ops or constructs this build cannot run, each with where it is.
    #[error("{} unsupported op(s): {}", .0.len(), list(.0))]
    Unsupported(Vec<Unsupported>),
}

/// Why one instruction has no step: what it needs is unsupported (collected over the whole
/// plan), or its payload is invalid (reported at once).
enum Refused {
    Ops(Vec<Unsupported>),
    Payload(PteError),
}

impl From<Vec<Unsupported>> for Refused {
    fn from(ops: Vec<Unsupported>) -> Self {
        Self::Ops(ops)
    }
}

fn list(items: &[Unsupported]) -> String {
    items
        .iter()
        .map(|u| u.to_string())
        .collect::<Vec<_>>()
        .join("; ")
}

/// One op or construct that cannot run, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported {
    /// The op (`aten.any.dim`, `aten::mul.Scalar_out`) or construct (`JumpFalseCall`).
    pub what: String,
    /// Where: plan, instruction, delegate, node ids.
    pub location: String,
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.what, self.location)
    }
}

/// The name a value gets in the program.
fn value_name(plan: &ExecutionPlan<'_>, index: u32) -> String {
    if let Some(i) = plan.inputs.iter().position(|&v| v == index) {
        return format!("input_{i}");
    }
    if let Some(i) = plan.outputs.iter().position(|&v| v == index) {
        return format!("output_{i}");
    }
    format!("v{index}")
}

thread_local! {
    static LOWERINGS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many `VulkanBackend` graphs the calling thread has lowered onto the compute delegate
/// (subtract two readings to count those of one load; with
/// [`format::decode_counts`], a load decodes and lowers each graph once).
pub fn lowerings() -> u64 {
    LOWERINGS.with(std::cell::Cell::get)
}

#[cfg(feature = "compute")]
fn count_lowering() {
    LOWERINGS.with(|c| c.set(c.get() + 1));
}

/// Builds the program of plan `method` (default `forward`) of the `.pte` file `bytes`: the
/// program is decoded once, and each `VulkanBackend` graph decoded and lowered once.
pub fn program_builder(bytes: Arc<[u8]>, method: Option<&str>) -> Result<ProgramBuilder, PteError> {
    program_builder_with_input_shapes(bytes, method, &[])
}

/// [`program_builder`] for inputs of other shapes than the program declares: `shapes`, one
/// per plan input in order (or none: the declared ones). A program exported with dynamic
/// shapes declares each input at its upper bound (a language model's tokens `[1, max]`); its
/// graphs are lowered for the given shapes, their symbolic sizes evaluated from them.
pub fn program_builder_with_input_shapes(
    bytes: Arc<[u8]>,
    method: Option<&str>,
    shapes: &[Vec<usize>],
) -> Result<ProgramBuilder, PteError> {
    let pte = Pte::decode(&bytes)?;
    builder_of(&pte, &bytes, method, shapes)
}

/// [`program_builder_with_input_shapes`] of a program already decoded from `bytes`.
pub(crate) fn builder_of(
    pte: &Pte<'_>,
    bytes: &Arc<[u8]>,
    method: Option<&str>,
    shapes: &[Vec<usize>],
) -> Result<ProgramBuilder, PteError> {
    let plan = match method {
        Some(m) => pte.plan(m)?,
        None => pte.forward()?,
    };
    if !shapes.is_empty() && shapes.len() != plan.inputs.len() {
        return Err(PteError::Unsupported(vec![Unsupported {
            what: format!(
                "{} input shapes for {} inputs",
                shapes.len(),
                plan.inputs.len()
            ),
            location: format!("plan '{}'", plan.name),
        }]));
    }
    let mut unsupported = Vec::new();
    let mut steps = Vec::new();
    // The shapes values take at these input shapes, as the steps make them.
    let mut known: Known = plan
        .inputs
        .iter()
        .copied()
        .zip(shapes.iter().cloned())
        .collect();
    for (k, instruction) in plan.instructions().enumerate() {
        let at = format!("plan '{}', instruction {k}", plan.name);
        match step_of(pte, plan, instruction, &at, bytes, &mut known) {
            Ok(Some(step)) => steps.push(step),
            Ok(None) => {}
            Err(Refused::Ops(mut u)) => unsupported.append(&mut u),
            Err(Refused::Payload(e)) => return Err(e),
        }
    }
    match constant_step(plan) {
        Ok(Some(step)) => steps.push(step),
        Ok(None) => {}
        Err(mut u) => unsupported.append(&mut u),
    }
    for (i, &v) in plan.inputs.iter().enumerate() {
        if !matches!(plan.values.get(v as usize), Some(Value::Tensor(_))) {
            unsupported.push(Unsupported {
                what: "a plan input that is not a tensor".into(),
                location: format!("plan '{}', input {i} (value {v})", plan.name),
            });
        }
    }
    if !unsupported.is_empty() {
        return Err(PteError::Unsupported(unsupported));
    }
    let outputs: Vec<String> = plan.outputs.iter().map(|&v| value_name(plan, v)).collect();
    #[cfg(feature = "compute")]
    let steps = join::joined(steps, &outputs);
    let names: Vec<&str> = outputs.iter().map(String::as_str).collect();
    Ok(steps
        .into_iter()
        .fold(ProgramBuilder::new(), ProgramBuilder::step)
        .outputs(&names))
}

/// The shape of each plan value known so far (a value declared at its upper bound takes the
/// shape its producer makes from the given inputs).
type Known = BTreeMap<u32, Vec<usize>>;

/// The step of one instruction (`None`: nothing to run, e.g. `FreeCall`).
fn step_of(
    pte: &Pte<'_>,
    plan: &ExecutionPlan<'_>,
    instruction: &Instruction,
    at: &str,
    bytes: &Arc<[u8]>,
    known: &mut Known,
) -> Result<Option<StepSpec>, Refused> {
    let unsupported = |what: String| {
        Refused::Ops(vec![Unsupported {
            what,
            location: at.to_owned(),
        }])
    };
    match instruction {
        Instruction::DelegateCall {
            delegate_index,
            args,
        } => delegate_step(pte, plan, *delegate_index as usize, args, at, bytes, known).map(Some),
        Instruction::KernelCall { op_index, args } => {
            let op = plan
                .operators
                .get(*op_index as usize)
                .map_or_else(|| format!("operator {op_index}"), |o| o.to_string());
            Ok(Some(kernel_step((pte, plan, bytes), &op, args, at, known)?))
        }
        Instruction::FreeCall { .. } => Ok(None),
        Instruction::MoveCall { .. } => Err(unsupported("MoveCall".into())),
        Instruction::JumpFalseCall { .. } => {
            Err(unsupported("JumpFalseCall (control flow)".into()))
        }
    }
}

fn delegate_step(
    pte: &Pte<'_>,
    plan: &ExecutionPlan<'_>,
    index: usize,
    args: &[u32],
    at: &str,
    bytes: &Arc<[u8]>,
    known: &mut Known,
) -> Result<StepSpec, Refused> {
    let fail = |what: String| {
        Refused::Ops(vec![Unsupported {
            what,
            location: format!("{at}, delegate {index}"),
        }])
    };
    let delegate = plan.delegates.get(index).ok_or_else(|| {
        fail(format!(
            "delegate {index} (the plan has {})",
            plan.delegates.len()
        ))
    })?;
    let invalid = |source| {
        Refused::Payload(PteError::Payload {
            location: format!("{at}, {} delegate {index}", delegate.id),
            source,
        })
    };
    let payload = pte.delegate_payload(delegate).map_err(invalid)?;
    let name = format!("{}_{index}", delegate.id);
    let (kind, inputs) = match delegate.id {
        VULKAN_BACKEND_ID => {
            let graph = VkGraph::decode(payload).map_err(invalid)?;
            let at = format!("{at}, VulkanBackend delegate {index}");
            check_vulkan_ops(&graph, &at)?;
            (
                graph_step(
                    pte,
                    plan,
                    index,
                    &graph,
                    bytes,
                    &at,
                    &args
                        .iter()
                        .map(|v| known.get(v).cloned())
                        .collect::<Vec<_>>(),
                )?,
                graph.input_ids.len(),
            )
        }
        VGF_BACKEND_ID => vgf_step_kind(payload).map_err(fail)?,
        other => return Err(fail(format!("delegate backend '{other}'"))),
    };
    if inputs > args.len() {
        return Err(fail(format!(
            "{} takes {inputs} input(s) but the call passes {} value(s)",
            delegate.id,
            args.len()
        )));
    }
    learn_outputs(&kind, &args[inputs..], known);
    Ok(StepSpec {
        name,
        kind,
        inputs: args[..inputs]
            .iter()
            .map(|&v| value_name(plan, v))
            .collect(),
        outputs: args[inputs..]
            .iter()
            .map(|&v| value_name(plan, v))
            .collect(),
    })
}

/// A `VulkanBackend` graph as a compute-graph step: lowered once, at its own precision (an
/// fp16 graph is widened to fp32 by a pass on a device without the f16 features), without
/// the nodes nothing reads.
#[cfg(feature = "compute")]
fn graph_step(
    pte: &Pte<'_>,
    plan: &ExecutionPlan<'_>,
    index: usize,
    graph: &VkGraph<'_>,
    bytes: &Arc<[u8]>,
    at: &str,
    shapes: &[Option<Vec<usize>>],
) -> Result<StepKind, Vec<Unsupported>> {
    let lowered = lower::lower(pte, plan, index, graph, bytes, shapes).map_err(|e| {
        vec![Unsupported {
            what: format!("a graph that cannot be lowered: {e}"),
            location: at.to_owned(),
        }]
    })?;
    Ok(StepKind::Graph(crate::program::GraphStep {
        graph: Arc::new(lowered.graph.without_dead_nodes()),
        f16: lowered.f16,
    }))
}

#[cfg(not(feature = "compute"))]
fn graph_step(
    _pte: &Pte<'_>,
    _plan: &ExecutionPlan<'_>,
    _index: usize,
    _graph: &VkGraph<'_>,
    _bytes: &Arc<[u8]>,
    at: &str,
    _shapes: &[Option<Vec<usize>>],
) -> Result<StepKind, Vec<Unsupported>> {
    Err(vec![Unsupported {
        what: "a VulkanBackend delegate, but this build lacks the `compute` feature".into(),
        location: at.to_owned(),
    }])
}

/// A constant argument of a CPU kernel as a constant of its graph, its bytes used where they
/// lie in the program file (`None`: the value is not a constant). Integers become i32 and
/// fp16 f32, as staged values are.
#[cfg(feature = "compute")]
fn kernel_constant(
    (pte, plan, bytes): (&Pte<'_>, &ExecutionPlan<'_>, &Arc<[u8]>),
    v: u32,
    g: &mut compute_delegate::GraphBuilder,
) -> Result<Option<compute_delegate::TensorId>, String> {
    use executorch_pte::ScalarType;
    use vk_core::DType;
    let Some(Value::Tensor(t)) = plan.values.get(v as usize) else {
        return Ok(None);
    };
    let Some(data) = pte.constant_data(t).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let dtype = match t.scalar_type {
        ScalarType::Float => DType::F32,
        ScalarType::Half => DType::F16,
        ScalarType::Int => DType::I32,
        ScalarType::Long => DType::I64,
        ScalarType::Char => DType::I8,
        other => return Err(format!("constant value {v} is a {other:?} tensor")),
    };
    let start = (data.as_ptr() as usize).wrapping_sub(bytes.as_ptr() as usize);
    if start
        .checked_add(data.len())
        .is_none_or(|end| end > bytes.len())
    {
        return Err(format!("constant value {v} lies outside the program"));
    }
    let mut shape: Vec<usize> = t.sizes.iter().map(|&d| d.max(0) as usize).collect();
    if shape.is_empty() {
        shape.push(1);
    }
    let name = value_name(plan, v);
    let c = g
        .constant_shared(
            &name,
            dtype,
            &shape,
            bytes.clone(),
            start..start + data.len(),
        )
        .map_err(|e| e.to_string())?;
    let staged = match dtype {
        DType::F16 => Some(DType::F32),
        DType::I64 => Some(DType::I32),
        _ => None,
    };
    match staged {
        Some(to) => g.cast(c, to).map(Some).map_err(|e| e.to_string()),
        None => Ok(Some(c)),
    }
}

/// Records the shapes a compute step's outputs take (`outputs`: their plan values).
#[cfg(feature = "compute")]
fn learn_outputs(kind: &StepKind, outputs: &[u32], known: &mut Known) {
    if let StepKind::Graph(g) = kind {
        for (&v, spec) in outputs.iter().zip(g.graph.output_specs()) {
            known.insert(v, spec.shape);
        }
    }
}

#[cfg(not(feature = "compute"))]
fn learn_outputs(_kind: &StepKind, _outputs: &[u32], _known: &mut Known) {}

/// A VGF payload as a step, decoded once, and its number of inputs.
#[cfg(feature = "vgf")]
fn vgf_step_kind(payload: &[u8]) -> Result<(StepKind, usize), String> {
    let file =
        vgf_delegate::VgfFile::decode(payload.into()).map_err(|e| format!("VGF payload: {e}"))?;
    let inputs = vgf_delegate::inspect::model_inputs(file.vgf()).len();
    Ok((StepKind::VgfFile(Arc::new(file)), inputs))
}

#[cfg(not(feature = "vgf"))]
fn vgf_step_kind(_payload: &[u8]) -> Result<(StepKind, usize), String> {
    Err("a VgfBackend delegate, but this build lacks the `vgf` feature".into())
}

#[cfg(feature = "compute")]
fn check_vulkan_ops(graph: &VkGraph<'_>, at: &str) -> Result<(), Vec<Unsupported>> {
    let missing: Vec<Unsupported> = graph
        .op_names()
        .into_iter()
        .filter(|(name, _)| {
            compute_delegate::ops::find(name).is_none() && !lower::SYMINT_OPS.contains(name)
        })
        .map(|(name, nodes)| Unsupported {
            what: name.to_owned(),
            location: format!("{at}, node(s) {nodes:?}"),
        })
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(missing)
    }
}

#[cfg(not(feature = "compute"))]
fn check_vulkan_ops(_graph: &VkGraph<'_>, at: &str) -> Result<(), Vec<Unsupported>> {
    Err(vec![Unsupported {
        what: "a VulkanBackend delegate, but this build lacks the `compute` feature".into(),
        location: at.to_owned(),
    }])
}

/// The dtype and shape a CPU kernel's tensor value `v` has between steps, as delegates stage
/// them: floats and masks as f32, int64 as i32 (int64 where the plan's caller passes it), 32-
/// and 8-bit integers as they are, a 0-d tensor as `[1]`.
#[cfg(feature = "compute")]
fn staged_spec(plan: &ExecutionPlan<'_>, v: u32) -> Result<vk_core::TensorSpec, String> {
    use executorch_pte::ScalarType;
    let Some(Value::Tensor(t)) = plan.values.get(v as usize) else {
        return Err(format!("value {v} is not a tensor"));
    };
    let dtype = match t.scalar_type {
        ScalarType::Float | ScalarType::Half | ScalarType::Bool => vk_core::DType::F32,
        ScalarType::Long if plan.inputs.contains(&v) => vk_core::DType::I64,
        ScalarType::Int | ScalarType::Long => vk_core::DType::I32,
        ScalarType::Char => vk_core::DType::I8,
        other => return Err(format!("value {v} is a {other:?} tensor")),
    };
    let mut shape = t
        .sizes
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("value {v} has size {d}")))
        .collect::<Result<Vec<_>, _>>()?;
    if shape.is_empty() {
        shape.push(1);
    }
    Ok(vk_core::TensorSpec::new(value_name(plan, v), dtype, shape))
}

/// The plan's outputs that are constants (the metadata methods of a language-model export:
/// `get_max_seq_len` returns an int, `use_kv_cache` a bool), as one step that writes them: an
/// int or a list of ints as i32 (`[1]` or `[n]`, as the program holds int64 values), a bool
/// as f32 1.0 or 0.0 (as it holds masks), a double as f32. `None` when every output is a
/// tensor.
#[cfg(feature = "compute")]
fn constant_step(plan: &ExecutionPlan<'_>) -> Result<Option<StepSpec>, Vec<Unsupported>> {
    let mut g = compute_delegate::GraphBuilder::new();
    let mut outputs = Vec::new();
    for (i, &v) in plan.outputs.iter().enumerate() {
        let host = match plan.values.get(v as usize) {
            Some(Value::Int(n)) => i32::try_from(*n)
                .ok()
                .map(|n| vk_core::HostTensor::from_i32(vec![1], &[n])),
            Some(Value::IntList(l)) if !l.is_empty() => l
                .iter()
                .map(|&n| i32::try_from(n).ok())
                .collect::<Option<Vec<i32>>>()
                .map(|l| vk_core::HostTensor::from_i32(vec![l.len()], &l)),
            Some(Value::Bool(b)) => Some(vk_core::HostTensor::from_f32(
                vec![1],
                &[f32::from(u8::from(*b))],
            )),
            Some(Value::Double(x)) => Some(vk_core::HostTensor::from_f32(vec![1], &[*x as f32])),
            _ => continue,
        };
        let made = host
            .ok_or_else(|| "an int beyond i32".to_owned())
            .and_then(|t| t.map_err(|e| e.to_string()))
            .and_then(|t| {
                let dtype = t.dtype();
                let c = g.constant(&format!("c{i}"), t).map_err(|e| e.to_string())?;
                // A copy: a program's outputs are written by a step.
                let y = g.cast(c, dtype).map_err(|e| e.to_string())?;
                g.output(y).map_err(|e| e.to_string())
            });
        made.map_err(|e| {
            vec![Unsupported {
                what: format!("a constant output: {e}"),
                location: format!("plan '{}', output {i} (value {v})", plan.name),
            }]
        })?;
        outputs.push(value_name(plan, v));
    }
    if outputs.is_empty() {
        return Ok(None);
    }
    Ok(Some(StepSpec {
        name: "constants".into(),
        kind: StepKind::Graph(crate::program::GraphStep {
            graph: Arc::new(g),
            f16: false,
        }),
        inputs: Vec::new(),
        outputs,
    }))
}

#[cfg(not(feature = "compute"))]
fn constant_step(plan: &ExecutionPlan<'_>) -> Result<Option<StepSpec>, Vec<Unsupported>> {
    let constant = plan
        .outputs
        .iter()
        .position(|&v| !matches!(plan.values.get(v as usize), Some(Value::Tensor(_))));
    match constant {
        None => Ok(None),
        Some(i) => Err(vec![Unsupported {
            what: "a constant output; this build lacks the `compute` feature".into(),
            location: format!("plan '{}', output {i}", plan.name),
        }]),
    }
}

/// A CPU kernel the op registry implements (`aten::mul.Scalar_out`), as a one-op compute
/// graph: its tensor arguments are the step's inputs, its last argument the output.
#[cfg(feature = "compute")]
fn kernel_step(
    (pte, plan, bytes): (&Pte<'_>, &ExecutionPlan<'_>, &Arc<[u8]>),
    op: &str,
    args: &[u32],
    at: &str,
    known: &mut Known,
) -> Result<StepSpec, Vec<Unsupported>> {
    let fail = |why: String| {
        vec![Unsupported {
            what: op.to_owned(),
            location: format!("{at} (a CPU kernel{why})"),
        }]
    };
    let def = compute_delegate::ops::find_kernel(op).ok_or_else(|| fail(String::new()))?;
    // An out-variant kernel's arguments: the schema's (the out tensors last), then the value
    // it returns: the out tensor again, or the list of them (a batch norm's output and
    // statistics).
    let (&ret, params) = args
        .split_last()
        .ok_or_else(|| fail(": no arguments".into()))?;
    let (outs, params): (Vec<u32>, &[u32]) = match plan.values.get(ret as usize) {
        Some(Value::TensorList(l)) if !l.is_empty() && params.ends_with(l) => {
            (l.clone(), &params[..params.len() - l.len()])
        }
        _ => match params.split_last() {
            Some((&o, rest)) if o == ret => (vec![ret], rest),
            _ => (vec![ret], params),
        },
    };
    let mut g = compute_delegate::GraphBuilder::new();
    let mut inputs = Vec::new();
    let mut call = Vec::new();
    let mut input = |v: u32, g: &mut compute_delegate::GraphBuilder| {
        if let Some(t) =
            kernel_constant((pte, plan, bytes), v, g).map_err(|e| fail(format!(": {e}")))?
        {
            return Ok(t);
        }
        let mut spec = staged_spec(plan, v).map_err(|e| fail(format!(": {e}")))?;
        if let Some(shape) = known.get(&v) {
            spec.shape.clone_from(shape);
        }
        let name = format!("in{}", inputs.len());
        let t = g
            .input(&name, spec.dtype, &spec.shape)
            .and_then(|t| match spec.dtype {
                vk_core::DType::I64 => g.cast(t, vk_core::DType::I32),
                _ => Ok(t),
            })
            .map_err(|e| fail(format!(": {e}")))?;
        inputs.push(spec.name);
        Ok::<_, Vec<Unsupported>>(t)
    };
    for &v in params.iter().take(def.params.len()) {
        let arg = match plan.values.get(v as usize) {
            Some(Value::Tensor(_)) => Arg::Tensor(input(v, &mut g)?),
            Some(Value::TensorList(l)) => Arg::Tensors(
                l.iter()
                    .map(|&t| input(t, &mut g))
                    .collect::<Result<_, _>>()?,
            ),
            Some(Value::OptionalTensorList(l)) => Arg::OptTensors(
                l.iter()
                    .map(|t| t.map(|t| input(t, &mut g)).transpose())
                    .collect::<Result<_, _>>()?,
            ),
            Some(Value::Null) => Arg::None,
            Some(Value::Int(n)) => Arg::Int(*n),
            Some(Value::Double(d)) => Arg::Float(*d),
            Some(Value::Bool(b)) => Arg::Bool(*b),
            Some(Value::IntList(l)) => Arg::Ints(l.clone()),
            Some(other) => return Err(fail(format!(": value {v} is a {}", other.kind()))),
            None => return Err(fail(format!(": value {v} does not exist"))),
        };
        call.push(arg);
    }
    // Each output in the dtype the plan's value is staged as (an integer cumsum computes in
    // f32, an integer out value holds i32). Outputs the op does not compute (a batch norm's
    // statistics) are left unmade: a later read of one is refused where the plan is wired.
    let results = def.call(&mut g, call).map_err(|e| fail(format!(": {e}")))?;
    if results.len() > outs.len() {
        return Err(fail(format!(
            ": {} outputs for {}",
            results.len(),
            outs.len()
        )));
    }
    for (&y, &out) in results.iter().zip(&outs) {
        let staged = staged_spec(plan, out).map_err(|e| fail(format!(": {e}")))?;
        let made = match g.dtype(y) {
            Some(d) if d != staged.dtype => g.cast(y, staged.dtype).and_then(|y| g.output(y)),
            _ => g.output(y),
        };
        made.map_err(|e| fail(format!(": {e}")))?;
    }
    for (spec, &out) in g.output_specs().into_iter().zip(&outs) {
        known.insert(out, spec.shape);
    }
    Ok(StepSpec {
        name: format!("{op}@{}", at.rsplit(' ').next().unwrap_or("")),
        kind: StepKind::Graph(crate::program::GraphStep {
            graph: Arc::new(g),
            f16: false,
        }),
        inputs,
        outputs: outs[..results.len()]
            .iter()
            .map(|&o| value_name(plan, o))
            .collect(),
    })
}

#[cfg(not(feature = "compute"))]
fn kernel_step(
    _program: (&Pte<'_>, &ExecutionPlan<'_>, &Arc<[u8]>),
    op: &str,
    _args: &[u32],
    at: &str,
    _known: &mut Known,
) -> Result<StepSpec, Vec<Unsupported>> {
    Err(vec![Unsupported {
        what: op.to_owned(),
        location: format!("{at} (a CPU kernel; this build lacks the `compute` feature)"),
    }])
}
