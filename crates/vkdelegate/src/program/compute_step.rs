//! Compute steps: a [`ComputeStep`] built into a one-op `compute_delegate::Graph`.

use compute_delegate::{BuildOptions, Graph, GraphBuilder, Pool2d, TensorId};
use vk_core::{Device, DeviceTensor, HostTensor, Requirements, TensorSpec, vk};

use super::error::{ProgramError, Result};
use super::runner::{Runner, StepBindings};
use super::spec::{Arith, ComputeOp, ComputeStep, GraphStep, PoolParams, UnaryFn};
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
/// features as optional (enabled where the device has them; fp32 otherwise).
pub(super) fn graph_requirements(g: &GraphStep) -> Requirements {
    let base = compute_delegate::requirements();
    if g.f16 {
        base.optional_features(
            compute_delegate::F16_FEATURES | compute_delegate::COOPERATIVE_FEATURES,
        )
    } else {
        base
    }
}

/// Input specs: what producers make, else the step's declared input.
fn input_specs(
    step: &str,
    op: &ComputeStep,
    known: &[Option<TensorSpec>],
) -> Result<Vec<TensorSpec>> {
    if known.len() != op.op.arity() {
        return Err(ProgramError::step(
            step,
            format!(
                "takes {} input(s), the step lists {}",
                op.op.arity(),
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
    let g = build_graph(step, &op.op, &inputs)?;
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
    let graph = build_graph(step, &op.op, inputs)?
        .build_with(device, &options)
        .map_err(wrap(step))?;
    Ok(Box::new(ComputeRunner {
        graph,
        device: device.clone(),
    }))
}

/// The graph a step runs on `device`: its own, or for an fp16 graph on a device without the
/// f16 features, the graph made again in fp32 (and logged).
fn graph_on<'g>(
    step: &str,
    g: &'g GraphStep,
    device: &Device,
) -> Result<std::borrow::Cow<'g, GraphBuilder>> {
    if !g.f16 || compute_delegate::supports_f16(device) {
        return Ok(std::borrow::Cow::Borrowed(&g.graph));
    }
    log::info!(
        "step '{step}': fp16 graph computed in fp32: device '{}' has no shaderFloat16 and \
         storageBuffer16BitAccess enabled",
        device.capabilities().name
    );
    let fp32 = g.fp32.as_ref().ok_or_else(|| {
        ProgramError::step(
            step,
            format!(
                "an fp16 graph, and device '{}' has no f16 features enabled",
                device.capabilities().name
            ),
        )
    })?;
    fp32()
        .map(std::borrow::Cow::Owned)
        .map_err(|e| ProgramError::step(step, e))
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
    let graph = graph_on(step, g, device)?
        .build_with(device, &options(external))
        .map_err(wrap(step))?;
    Ok(Box::new(ComputeRunner {
        graph,
        device: device.clone(),
    }))
}

/// Build options binding input `i` to `external.inputs[i]` and output `j` to
/// `external.outputs[j]` where given.
fn options(external: &StepBindings) -> BuildOptions {
    let mut options = BuildOptions::default();
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

/// The one-op graph of `op` on inputs of `inputs` specs.
fn build_graph(step: &str, op: &ComputeOp, inputs: &[TensorSpec]) -> Result<GraphBuilder> {
    let err = wrap(step);
    let mut g = GraphBuilder::new();
    let ids: Vec<TensorId> = inputs
        .iter()
        .map(|s| g.input(&s.name, s.dtype, &s.shape))
        .collect::<Result<_, _>>()
        .map_err(&err)?;
    let out = add_op(&mut g, op, &ids).map_err(&err)?;
    g.output(out).map_err(&err)?;
    Ok(g)
}

fn add_op(
    g: &mut GraphBuilder,
    op: &ComputeOp,
    ids: &[TensorId],
) -> compute_delegate::Result<TensorId> {
    let x = ids[0];
    match op {
        ComputeOp::Unary(f) => match f {
            UnaryFn::Relu => g.relu(x),
            UnaryFn::Relu6 => g.relu6(x),
            UnaryFn::Sigmoid => g.sigmoid(x),
            UnaryFn::Tanh => g.tanh(x),
            UnaryFn::Hardswish => g.hardswish(x),
        },
        ComputeOp::Gelu { approximate_tanh } => g.gelu(x, *approximate_tanh),
        ComputeOp::Clamp { min, max } => g.clamp(x, *min, *max),
        ComputeOp::Binary(a) => match a {
            Arith::Add => g.add(x, ids[1]),
            Arith::Sub => g.sub(x, ids[1]),
            Arith::Mul => g.mul(x, ids[1]),
            Arith::Div => g.div(x, ids[1]),
        },
        ComputeOp::Scalar { op, value } => match op {
            Arith::Add => g.add_scalar(x, *value),
            Arith::Sub => g.sub_scalar(x, *value),
            Arith::Mul => g.mul_scalar(x, *value),
            Arith::Div => g.div_scalar(x, *value),
        },
        ComputeOp::Softmax { dim, log: false } => g.softmax(x, *dim),
        ComputeOp::Softmax { dim, log: true } => g.log_softmax(x, *dim),
        ComputeOp::Pool2d { max, params } => {
            let p = pool(params);
            if *max {
                g.max_pool2d(x, p)
            } else {
                g.avg_pool2d(x, p)
            }
        }
        ComputeOp::Reduce {
            mean,
            dims,
            keepdim,
        } => {
            if *mean {
                g.mean(x, dims, *keepdim)
            } else {
                g.sum(x, dims, *keepdim)
            }
        }
        ComputeOp::Reshape { shape } => g.reshape(x, shape),
        ComputeOp::Permute { perm } => g.permute(x, perm),
        ComputeOp::Transpose { dim0, dim1 } => g.transpose(x, *dim0, *dim1),
    }
}

fn pool(p: &PoolParams) -> Pool2d {
    Pool2d {
        kernel: p.kernel,
        stride: p.stride,
        padding: p.padding,
        ceil_mode: p.ceil_mode,
        count_include_pad: p.count_include_pad,
    }
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
                time: d.time,
            })
            .collect())
    }
}
