//! Compute steps: a [`ComputeStep`] built into a one-op `compute_delegate::Graph` through the
//! op registry, and graph steps a front end made.

use compute_delegate::ops::{self, Arg, Kind, OpDef, Param};
use compute_delegate::{BuildOptions, Graph, GraphBuilder, TensorId};
use vk_core::{Device, DeviceTensor, HostTensor, Requirements, TensorSpec, vk};

use super::error::{ProgramError, Result};
use super::runner::{Runner, StepBindings};
use super::spec::{ComputeStep, GraphStep};
use super::wiring::StepIo;

fn wrap(step: &str) -> impl Fn(compute_delegate::Error) -> ProgramError + '_ {
    move |source| ProgramError::Compute {
        step: step.to_owned(),
        source: Box::new(source),
    }
}

pub(super) fn requirements(_step: &str) -> Result<Requirements> {
    Ok(compute_delegate::requirements())
}

/// A graph step's requirements: the compute delegate's, and for fp16 graphs its f16
/// features as optional (enabled where the device has them; fp32 otherwise). So too for
/// graphs that read packed 4-bit weights: their products of more rows multiply in fp16 where
/// the device has those features, and the same program built for a longer input (a language
/// model's prompt) runs on the device its one-token build opened.
pub(super) fn graph_requirements(g: &GraphStep) -> Requirements {
    let base = compute_delegate::requirements();
    if g.f16 || g.graph.reads_packed_four_bit_weights() {
        base.optional_features(
            compute_delegate::F16_FEATURES | compute_delegate::COOPERATIVE_FEATURES,
        )
    } else {
        base
    }
}

/// The op a step names, or an error listing the program file's op names.
fn def_of(step: &str, op: &str) -> Result<&'static OpDef> {
    ops::find(op).ok_or_else(|| {
        let known: Vec<&str> = ops::all()
            .flat_map(|d| d.names.iter().copied())
            .filter(|n| !n.contains(['.', ':']))
            .collect();
        ProgramError::step(
            step,
            format!("unknown compute op `{op}`; known: {}", known.join(", ")),
        )
    })
}

/// Checks a step's op and attributes against the registry: every attribute answers to a
/// parameter that is not a tensor, has that parameter's kind, and every required one is given.
pub(super) fn check(step: &str, c: &ComputeStep) -> Result<()> {
    let def = def_of(step, &c.op)?;
    let unknown: Vec<&str> = c
        .attributes
        .keys()
        .map(String::as_str)
        .filter(|k| !def.params.iter().any(|p| !p.is_tensor() && p.answers_to(k)))
        .collect();
    if !unknown.is_empty() {
        return Err(attr_err(
            step,
            def,
            format!("unknown attribute(s) {unknown:?}"),
        ));
    }
    for p in def.params.iter().filter(|p| !p.is_tensor()) {
        attribute(step, def, p, c)?;
    }
    Ok(())
}

fn attr_err(step: &str, def: &OpDef, problem: String) -> ProgramError {
    ProgramError::step(
        step,
        format!("op {}: {problem}", def.names.last().unwrap_or(&"?")),
    )
}

/// The step's attribute for parameter `p` as an argument (`Arg::None`: absent, the
/// parameter's fallback applies).
fn attribute(step: &str, def: &OpDef, p: &Param, c: &ComputeStep) -> Result<Arg> {
    let key = p.file_name();
    let Some(v) = c
        .attributes
        .iter()
        .find(|(k, _)| p.answers_to(k))
        .map(|kv| kv.1)
    else {
        if p.fallback == ops::Fallback::Required {
            return Err(attr_err(
                step,
                def,
                format!("attribute `{key}` is required"),
            ));
        }
        return Ok(Arg::None);
    };
    let bad = |what: &str| attr_err(step, def, format!("`{key}` must be {what}, found {v}"));
    Ok(match (p.kind, v) {
        (Kind::Int, toml::Value::Integer(i)) => Arg::Int(*i),
        (Kind::Int, _) => return Err(bad("an integer")),
        (Kind::Float, toml::Value::Integer(i)) => Arg::Float(*i as f64),
        (Kind::Float, toml::Value::Float(f)) => Arg::Float(*f),
        (Kind::Float, _) => return Err(bad("a number")),
        (Kind::Bool, toml::Value::Boolean(b)) => Arg::Bool(*b),
        (Kind::Bool, _) => return Err(bad("true or false")),
        (Kind::Str, toml::Value::String(s)) => Arg::Str(s.clone()),
        (Kind::Str, _) => return Err(bad("a string")),
        (Kind::Ints, toml::Value::Integer(i)) => Arg::Ints(vec![*i]),
        (Kind::Ints, toml::Value::Array(a)) => Arg::Ints(
            a.iter()
                .map(|x| x.as_integer().ok_or_else(|| bad("integers")))
                .collect::<Result<_>>()?,
        ),
        (Kind::Ints, _) => return Err(bad("integers")),
        (Kind::Floats, toml::Value::Integer(i)) => Arg::Floats(vec![*i as f64]),
        (Kind::Floats, toml::Value::Float(f)) => Arg::Floats(vec![*f]),
        (Kind::Floats, toml::Value::Array(a)) => Arg::Floats(
            a.iter()
                .map(|x| match x {
                    toml::Value::Integer(i) => Ok(*i as f64),
                    toml::Value::Float(f) => Ok(*f),
                    _ => Err(bad("numbers")),
                })
                .collect::<Result<_>>()?,
        ),
        (Kind::Floats, _) => return Err(bad("numbers")),
        (Kind::Tensor | Kind::Tensors | Kind::OptTensors, _) => Arg::None,
    })
}

/// How many tensors the op takes: its tensor parameters, the optional ones at most (a list
/// parameter takes any number).
fn arity(def: &OpDef) -> (usize, Option<usize>) {
    let tensors = def.params.iter().filter(|p| p.is_tensor());
    let required = tensors
        .clone()
        .filter(|p| p.fallback == ops::Fallback::Required && p.kind == Kind::Tensor)
        .count();
    let list = tensors
        .clone()
        .any(|p| matches!(p.kind, Kind::Tensors | Kind::OptTensors));
    (required, (!list).then(|| tensors.count()))
}

/// Input specs: what producers make, else the step's declared input.
fn input_specs(
    step: &str,
    op: &ComputeStep,
    known: &[Option<TensorSpec>],
) -> Result<Vec<TensorSpec>> {
    let (min, max) = arity(def_of(step, &op.op)?);
    if known.len() < min || max.is_some_and(|m| known.len() > m) {
        return Err(ProgramError::step(
            step,
            format!(
                "takes {} input(s), the step lists {}",
                max.unwrap_or(min),
                known.len()
            ),
        ));
    }
    known
        .iter()
        .enumerate()
        .map(|(i, k)| {
            k.clone()
                .or_else(|| op.declared_input.clone())
                .map(|s| TensorSpec::new(format!("in{i}"), s.dtype, s.shape))
                .ok_or_else(|| {
                    ProgramError::step(
                        step,
                        format!(
                            "input {i} is a program input: give the step `input_shape` (and \
                             `input_dtype`, default f32) so its graph can be built"
                        ),
                    )
                })
        })
        .collect()
}

pub(super) fn io(step: &str, op: &ComputeStep, known: &[Option<TensorSpec>]) -> Result<StepIo> {
    let inputs = input_specs(step, op, known)?;
    let g = build_graph(step, op, &inputs)?;
    Ok(StepIo {
        inputs,
        outputs: g.output_specs(),
    })
}

pub(super) fn load(
    step: &str,
    op: &ComputeStep,
    inputs: &[TensorSpec],
    device: &Device,
    external: &StepBindings,
) -> Result<Box<dyn Runner>> {
    let options = options(external);
    let graph = build_graph(step, op, inputs)?
        .build_with(device, &options)
        .map_err(wrap(step))?;
    Ok(Box::new(ComputeRunner {
        graph,
        device: device.clone(),
    }))
}

/// The graph a step runs on `device`: its own, or for an fp16 graph on a device without the
/// f16 features, the same graph widened to fp32 by the compute delegate's pass (logged).
fn graph_on<'g>(
    step: &str,
    g: &'g GraphStep,
    device: &Device,
) -> std::borrow::Cow<'g, GraphBuilder> {
    if !g.f16 || compute_delegate::supports_f16(device) {
        return std::borrow::Cow::Borrowed(&g.graph);
    }
    log::info!(
        "step '{step}': fp16 graph computed in fp32: device '{}' has no shaderFloat16 and \
         storageBuffer16BitAccess enabled",
        device.capabilities().name
    );
    std::borrow::Cow::Owned(g.graph.widened_to_f32())
}

/// A graph step's inputs and outputs (its edges, whatever precision it computes in).
pub(super) fn graph_io(g: &GraphStep) -> StepIo {
    StepIo {
        inputs: g.graph.input_specs(),
        outputs: g.graph.output_specs(),
    }
}

pub(super) fn graph_load(
    step: &str,
    g: &GraphStep,
    device: &Device,
    external: &StepBindings,
) -> Result<Box<dyn Runner>> {
    let graph = graph_on(step, g, device)
        .build_with(device, &options(external))
        .map_err(wrap(step))?;
    Ok(Box::new(ComputeRunner {
        graph,
        device: device.clone(),
    }))
}

/// Build options binding input `i` to `external.inputs[i]` and output `j` to
/// `external.outputs[j]` where given; a step of the program's recorded plan builds no host
/// path of its own.
fn options(external: &StepBindings) -> BuildOptions {
    let mut options = BuildOptions {
        embedded: external.embedded,
        constants: external.constants.clone(),
        ..BuildOptions::default()
    };
    for (i, slice) in external.inputs.iter().enumerate() {
        if let Some(slice) = slice {
            // SAFETY: the slice is a producer's output (or an earlier consumer's input) on the
            // same device, a storage buffer with transfer usage owned by a step the program
            // keeps alive as long as this one, or an application's buffer under the contract
            // of `ProgramBuilder::bind_input` (usage checked); the program orders every access
            // by barriers, and the application by its semaphores.
            unsafe { options.external.bind_input(i, *slice) };
        }
    }
    for (j, slice) in external.outputs.iter().enumerate() {
        if let Some(slice) = slice {
            // SAFETY: an application's buffer under the contract of
            // `ProgramBuilder::bind_output` (storage and transfer-source usage checked).
            unsafe { options.external.bind_output(j, *slice) };
        }
    }
    options
}

/// The one-op graph of the step's op on inputs of `inputs` specs: tensors fill the op's
/// tensor parameters in order (a list parameter takes the rest), attributes the others.
fn build_graph(step: &str, c: &ComputeStep, inputs: &[TensorSpec]) -> Result<GraphBuilder> {
    let err = wrap(step);
    let def = def_of(step, &c.op)?;
    let mut g = GraphBuilder::new();
    let ids: Vec<TensorId> = inputs
        .iter()
        .map(|s| g.input(&s.name, s.dtype, &s.shape))
        .collect::<Result<_, _>>()
        .map_err(&err)?;
    let mut rest = ids.into_iter();
    let mut args = Vec::with_capacity(def.params.len());
    for p in def.params {
        args.push(match p.kind {
            Kind::Tensor => rest.next().map_or(Arg::None, Arg::Tensor),
            Kind::Tensors | Kind::OptTensors => Arg::Tensors(rest.by_ref().collect()),
            _ => attribute(step, def, p, c)?,
        });
    }
    for out in def.call(&mut g, args).map_err(&err)? {
        g.output(out).map_err(&err)?;
    }
    Ok(g)
}

struct ComputeRunner {
    graph: Graph,
    device: Device,
}

impl Runner for ComputeRunner {
    fn kind(&self) -> &'static str {
        "compute"
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn execute(&mut self, step: &str, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        self.graph.execute(inputs).map_err(wrap(step))
    }

    fn device_inputs(&self) -> Vec<DeviceTensor> {
        self.graph.device_inputs().to_vec()
    }

    fn device_outputs(&self) -> Vec<DeviceTensor> {
        self.graph.device_outputs().to_vec()
    }

    unsafe fn record_into(&self, cmd: vk::CommandBuffer) {
        // SAFETY: forwarded contract.
        unsafe { self.graph.record_into(cmd) }
    }

    fn profile(&mut self, step: &str) -> Result<Vec<super::DispatchProfile>> {
        let times = self.graph.profile().map_err(wrap(step))?;
        Ok(times
            .into_iter()
            .map(|d| super::DispatchProfile {
                step: step.to_string(),
                op: format!("{} [{}]", d.op, d.kernel),
                float_type: d.float_type,
                groups: d.groups,
                shape: d.shape,
                time: d.time,
                barrier_before: d.barrier_before,
            })
            .collect())
    }
}
