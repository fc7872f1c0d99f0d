//! A `VulkanBackend` delegate's `VkGraph` lowered onto a `compute_delegate::GraphBuilder`, node
//! by node, by each op's ExecuTorch name, with ExecuTorch's argument order (the output last).
//!
//! Storage types and memory layouts (texture or buffer, channels- or width-packed) are hints
//! for ExecuTorch's own runtime; the compute delegate keeps every tensor in a buffer, packed
//! row-major, which does not change results. Graphs exported with `force_fp16` hold fp16
//! constants and tensors: on a device with `compute_delegate::F16_FEATURES` enabled they are
//! computed in fp16 (the compute delegate's f16 shaders, fp32 accumulation), else in fp32
//! (constants widened at load). Their inputs and outputs keep the delegate's fp32 staging
//! dtype either way, cast to and from f16 inside the graph, so a program's wiring does not
//! depend on the device.
//!
//! Boolean tensors are masks in the graph's float dtype (0.0 false, any other value true;
//! comparisons write 0.0 or 1.0), passed between delegates and CPU kernels as f32. An input
//! the plan holds as int64 where the graph holds int32 (token ids) is taken as i64 and
//! narrowed to its low 32 bits inside the graph, as ExecuTorch's Vulkan backend does.

use std::fmt;
use std::sync::Arc;

use compute_delegate::{Compare, Conv2d, GraphBuilder, Pool2d, TensorId};
use executorch_pte::{
    ExecutionPlan, Instruction, Program as Pte, ScalarType, Value, VkDataType, VkGraph, VkTensor,
    VkValue,
};
use vk_core::{DType, HostTensor};

/// The ops this lowering implements, by ExecuTorch name.
pub(crate) const SUPPORTED: &[&str] = &[
    "et_vk.conv_with_clamp.default",
    "aten.convolution.default",
    "et_vk.prepack.default",
    "aten.add.Tensor",
    "aten.sub.Tensor",
    "aten.mul.Tensor",
    "aten.div.Tensor",
    "aten.sigmoid.default",
    "aten.relu.default",
    "aten.tanh.default",
    "aten.hardswish.default",
    "aten.gelu.default",
    "aten.clamp.default",
    "aten.hardtanh.default",
    "aten.mean.dim",
    "aten.sum.dim_IntList",
    "aten.clone.default",
    "aten.view_copy.default",
    "aten.squeeze_copy.dims",
    "aten.unsqueeze_copy.default",
    "aten.permute_copy.default",
    "aten.linear.default",
    "aten.bmm.default",
    "aten._softmax.default",
    "aten.native_layer_norm.default",
    "aten.eq.Scalar",
    "aten.ne.Scalar",
    "aten.gt.Scalar",
    "aten.ge.Scalar",
    "aten.lt.Scalar",
    "aten.le.Scalar",
    "aten.logical_not.default",
    "aten.where.self",
    "aten.full_like.default",
    "aten.select_copy.int",
    "aten.slice_copy.Tensor",
    "aten.split_with_sizes_copy.default",
    "aten.cat.default",
    "aten.embedding.default",
    "aten.max_pool2d_with_indices.default",
    "aten.native_group_norm.default",
];

/// Why a graph cannot be lowered.
#[derive(Debug)]
pub(crate) struct LowerError(String);

impl fmt::Display for LowerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

type Result<T> = std::result::Result<T, LowerError>;

fn err(problem: impl Into<String>) -> LowerError {
    LowerError(problem.into())
}

/// A delegate's graph, lowered once when the program is made.
pub(crate) struct Lowered {
    /// The graph at its own precision: an fp16 graph computes in fp16.
    pub graph: GraphBuilder,
    /// Whether the graph holds fp16 tensors (it then computes in fp16 where the device has
    /// the f16 features, and is lowered again in fp32 where it has not).
    pub f16: bool,
}

/// Lowers delegate `index` of `plan`, whose payload decoded to `vk`, at the graph's own
/// precision; `file` is the program's bytes (`pte` was decoded from it), whose weights the
/// graph uses in place where they need no conversion.
pub(crate) fn lower(
    pte: &Pte<'_>,
    plan: &ExecutionPlan<'_>,
    index: usize,
    vk: &VkGraph<'_>,
    file: &Arc<[u8]>,
) -> Result<Lowered> {
    let f16 = has_f16_tensor(vk);
    let float = if f16 { DType::F16 } else { DType::F32 };
    let graph = Lowering::new(pte, vk, float, file).run(&long_inputs(plan, index))?;
    Ok(Lowered { graph, f16 })
}

/// Delegate `delegate` of plan `plan` of the program file `program`, decoded and lowered
/// again with fp32 arithmetic (fp16 constants widened): an fp16 graph on a device without the
/// f16 features.
pub(crate) fn lower_fp32(program: &Arc<[u8]>, plan: &str, delegate: usize) -> Result<GraphBuilder> {
    let pte = Pte::decode(program).map_err(|e| err(e.to_string()))?;
    let plan = pte.plan(plan).map_err(|e| err(e.to_string()))?;
    let d = plan
        .delegates
        .get(delegate)
        .ok_or_else(|| err(format!("no delegate {delegate}")))?;
    let payload = pte.delegate_payload(d).map_err(|e| err(e.to_string()))?;
    let vk = VkGraph::decode(payload).map_err(|e| err(e.to_string()))?;
    Lowering::new(&pte, &vk, DType::F32, program).run(&long_inputs(plan, delegate))
}

fn has_f16_tensor(vk: &VkGraph<'_>) -> bool {
    vk.values
        .iter()
        .any(|v| matches!(v, VkValue::Tensor(t) if t.datatype == VkDataType::Float16))
}

/// Which of the delegate's inputs the plan holds as int64.
fn long_inputs(plan: &ExecutionPlan<'_>, delegate: usize) -> Vec<bool> {
    let args = plan.instructions().find_map(|i| match i {
        Instruction::DelegateCall {
            delegate_index,
            args,
        } if *delegate_index as usize == delegate => Some(args),
        _ => None,
    });
    args.map(|args| {
        args.iter()
            .map(|&v| {
                matches!(plan.values.get(v as usize),
                    Some(Value::Tensor(t)) if t.scalar_type == ScalarType::Long)
            })
            .collect()
    })
    .unwrap_or_default()
}

/// The state of one lowering: the builder and the tensor each graph value became.
struct Lowering<'p, 'a> {
    pte: &'p Pte<'a>,
    vk: &'p VkGraph<'a>,
    g: GraphBuilder,
    tensors: Vec<Option<TensorId>>,
    /// The dtype float tensors and masks compute in (f16 only for fp16 graphs on devices that
    /// have the features).
    float: DType,
    /// The program file's bytes, which constants that need no conversion are ranges of.
    file: &'p Arc<[u8]>,
}

/// A tensor's dtype in a graph computing floats in `float`; with `staging`, its dtype at the
/// graph's edge (fp16 edges are f32 staging, as ExecuTorch's runtime stages them).
fn dtype_of(t: &VkTensor, staging: bool, float: DType) -> Result<DType> {
    let d = if staging && t.staging_datatype != VkDataType::Unset {
        t.staging_datatype
    } else {
        t.datatype
    };
    match d {
        // Masks are floats too; at the edges, f32 whatever the graph computes in.
        VkDataType::Float32 | VkDataType::Float16 | VkDataType::Bool if staging => Ok(DType::F32),
        VkDataType::Float32 | VkDataType::Float16 | VkDataType::Bool => Ok(float),
        VkDataType::Int32 => Ok(DType::I32),
        VkDataType::Int8 => Ok(DType::I8),
        other => Err(err(format!("tensor dtype {other:?} is not supported"))),
    }
}

/// A tensor's sizes; a scalar (rank 0) is held as `[1]`, which broadcasts the same.
fn dims(t: &VkTensor) -> Vec<usize> {
    if t.dims.is_empty() {
        return vec![1];
    }
    t.dims.iter().map(|&d| d as usize).collect()
}

/// IEEE half to single precision.
fn f16_to_f32(h: u16) -> f32 {
    half::f16::from_bits(h).to_f32()
}

impl<'p, 'a> Lowering<'p, 'a> {
    fn new(pte: &'p Pte<'a>, vk: &'p VkGraph<'a>, float: DType, file: &'p Arc<[u8]>) -> Self {
        Lowering {
            pte,
            vk,
            g: GraphBuilder::new(),
            tensors: vec![None; vk.values.len()],
            float,
            file,
        }
    }

    /// Where `bytes` lie in the program file, if they are part of it.
    fn file_range(&self, bytes: &[u8]) -> Option<std::ops::Range<usize>> {
        let base = self.file.as_ptr() as usize;
        let start = (bytes.as_ptr() as usize).checked_sub(base)?;
        let end = start.checked_add(bytes.len())?;
        (end <= self.file.len()).then_some(start..end)
    }

    fn run(mut self, long: &[bool]) -> Result<GraphBuilder> {
        super::count_lowering();
        let ge = |e: compute_delegate::Error| err(e.to_string());
        for (i, &id) in self.vk.input_ids.iter().enumerate() {
            let t = self.tensor_value(id)?;
            let dtype = dtype_of(t, true, self.float)?;
            let inner = dtype_of(t, false, self.float)?;
            let name = format!("in{i}");
            let x = if dtype == DType::I32 && long.get(i) == Some(&true) {
                let wide = self.g.input(&name, DType::I64, &dims(t)).map_err(ge)?;
                self.g.cast(wide, DType::I32).map_err(ge)?
            } else {
                let x = self.g.input(&name, dtype, &dims(t)).map_err(ge)?;
                if inner == dtype {
                    x
                } else {
                    self.g.cast(x, inner).map_err(ge)?
                }
            };
            self.tensors[id as usize] = Some(x);
        }
        for node in &self.vk.chain {
            self.node(node.name, &node.args)
                .map_err(|e| err(format!("node {} ({}): {e}", node.node_id, node.name)))?;
        }
        for &id in &self.vk.output_ids {
            let mut t = self.tensor(id)?;
            let edge = dtype_of(self.tensor_value(id)?, true, self.float)?;
            if self.g.dtype(t) != Some(edge) {
                t = self.g.cast(t, edge).map_err(ge)?;
            }
            self.g.output(t).map_err(|e| err(e.to_string()))?;
        }
        Ok(self.g)
    }

    fn value(&self, id: u32) -> Result<&'p VkValue<'a>> {
        self.vk
            .values
            .get(id as usize)
            .ok_or_else(|| err(format!("value {id} does not exist")))
    }

    fn tensor_value(&self, id: u32) -> Result<&'p VkTensor> {
        match self.value(id)? {
            VkValue::Tensor(t) => Ok(t),
            other => Err(err(format!(
                "value {id} is a {}, not a tensor",
                other.kind()
            ))),
        }
    }

    /// The tensor of value `id`: produced earlier, or a constant made now.
    fn tensor(&mut self, id: u32) -> Result<TensorId> {
        if let Some(t) = self.tensors.get(id as usize).copied().flatten() {
            return Ok(t);
        }
        let t = self.tensor_value(id)?;
        let Some(c) = t.constant_id else {
            return Err(err(format!(
                "tensor value {id} is used before it is produced"
            )));
        };
        let bytes = self
            .vk
            .constant(c as usize, self.pte)
            .map_err(|e| err(e.to_string()))?;
        // Weights stored as the graph computes them are used in place, from the file.
        let as_stored = match (t.datatype, self.float) {
            (VkDataType::Float16, DType::F16) => Some(DType::F16),
            (VkDataType::Float32, DType::F32) => Some(DType::F32),
            (VkDataType::Int32, _) => Some(DType::I32),
            (VkDataType::Int8, _) => Some(DType::I8),
            _ => None,
        };
        if let (Some(dtype), Some(range)) = (as_stored, self.file_range(bytes)) {
            let x = self
                .g
                .constant_shared(&format!("c{c}"), dtype, &dims(t), self.file.clone(), range)
                .map_err(|e| err(format!("constant {c}: {e}")))?;
            self.tensors[id as usize] = Some(x);
            return Ok(x);
        }
        let host = match t.datatype {
            VkDataType::Float16 if self.float == DType::F16 => {
                HostTensor::new(DType::F16, dims(t), bytes.to_vec())
            }
            VkDataType::Float32 if self.float == DType::F16 => {
                let v: Vec<u8> = bytes
                    .chunks_exact(4)
                    .flat_map(|b| {
                        let v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                        half::f16::from_f32(v).to_le_bytes()
                    })
                    .collect();
                HostTensor::new(DType::F16, dims(t), v)
            }
            VkDataType::Bool if self.float == DType::F16 => {
                let one = half::f16::ONE.to_le_bytes();
                let v: Vec<u8> = bytes
                    .iter()
                    .flat_map(|&b| if b != 0 { one } else { [0, 0] })
                    .collect();
                HostTensor::new(DType::F16, dims(t), v)
            }
            VkDataType::Float16 => {
                let v: Vec<f32> = bytes
                    .chunks_exact(2)
                    .map(|b| f16_to_f32(u16::from_le_bytes([b[0], b[1]])))
                    .collect();
                HostTensor::from_f32(dims(t), &v)
            }
            VkDataType::Bool => {
                let v: Vec<f32> = bytes.iter().map(|&b| f32::from(u8::from(b != 0))).collect();
                HostTensor::from_f32(dims(t), &v)
            }
            _ => HostTensor::new(dtype_of(t, false, self.float)?, dims(t), bytes.to_vec()),
        }
        .map_err(|e| err(format!("constant {c}: {e}")))?;
        let x = self
            .g
            .constant(&format!("c{c}"), host)
            .map_err(|e| err(e.to_string()))?;
        self.tensors[id as usize] = Some(x);
        Ok(x)
    }

    fn opt_tensor(&mut self, id: u32) -> Result<Option<TensorId>> {
        match self.value(id)? {
            VkValue::Null => Ok(None),
            _ => self.tensor(id).map(Some),
        }
    }

    fn int(&self, id: u32) -> Result<i64> {
        match self.value(id)? {
            VkValue::Int(v) => Ok(*v),
            VkValue::SymInt(v) => Ok(i64::from(*v)),
            VkValue::Bool(b) => Ok(i64::from(*b)),
            // Exporters write some integer arguments (indices) as doubles.
            VkValue::Double(v) if v.fract() == 0.0 && v.abs() < 9e15 => Ok(*v as i64),
            other => Err(err(format!("value {id} is a {}, not an int", other.kind()))),
        }
    }

    /// A number, or `default` for `Null`.
    fn number(&self, id: u32, default: f64) -> Result<f64> {
        match self.value(id)? {
            VkValue::Null => Ok(default),
            VkValue::Double(v) => Ok(*v),
            VkValue::Int(v) => Ok(*v as f64),
            other => Err(err(format!(
                "value {id} is a {}, not a number",
                other.kind()
            ))),
        }
    }

    fn ints(&self, id: u32) -> Result<Vec<i64>> {
        match self.value(id)? {
            VkValue::IntList(v) => Ok(v.clone()),
            VkValue::Int(v) => Ok(vec![*v]),
            other => Err(err(format!(
                "value {id} is a {}, not an int list",
                other.kind()
            ))),
        }
    }

    fn bool(&self, id: u32) -> Result<bool> {
        match self.value(id)? {
            VkValue::Bool(b) => Ok(*b),
            other => Err(err(format!("value {id} is a {}, not a bool", other.kind()))),
        }
    }

    fn pair(&self, id: u32) -> Result<[usize; 2]> {
        let v = self.ints(id)?;
        let u = |x: i64| usize::try_from(x).map_err(|_| err(format!("{x} is negative")));
        match v.as_slice() {
            [a] => Ok([u(*a)?, u(*a)?]),
            [a, b] => Ok([u(*a)?, u(*b)?]),
            _ => Err(err(format!(
                "value {id}: expected one or two ints, got {v:?}"
            ))),
        }
    }

    /// The id of the node's output tensor: its last argument, or the first of a value list.
    fn out_id(&self, args: &[u32]) -> Result<u32> {
        let last = *args
            .last()
            .ok_or_else(|| err("the node has no arguments"))?;
        match self.value(last)? {
            VkValue::ValueList(ids) => ids
                .first()
                .copied()
                .ok_or_else(|| err("an empty output list")),
            _ => Ok(last),
        }
    }

    fn arg(args: &[u32], i: usize) -> Result<u32> {
        args.get(i)
            .copied()
            .ok_or_else(|| err(format!("argument {i} is missing ({} given)", args.len())))
    }

    fn set_out(&mut self, args: &[u32], t: TensorId) -> Result<()> {
        let out = self.out_id(args)?;
        self.tensors[out as usize] = Some(t);
        Ok(())
    }

    fn node(&mut self, name: &str, args: &[u32]) -> Result<()> {
        let a = |i| Self::arg(args, i);
        let ge = |e: compute_delegate::Error| err(e.to_string());
        let t = match name {
            "et_vk.conv_with_clamp.default" | "aten.convolution.default" => {
                self.conv(name, args)?
            }
            "et_vk.prepack.default" | "aten.clone.default" => self.tensor(a(0)?)?,
            "aten.cat.default"
            | "aten.split_with_sizes_copy.default"
            | "aten.max_pool2d_with_indices.default"
            | "aten.native_group_norm.default"
            | "aten.full_like.default" => return self.node_lists(name, args),
            "aten.add.Tensor" | "aten.sub.Tensor" => {
                let x = self.tensor(a(0)?)?;
                let mut y = self.tensor(a(1)?)?;
                let alpha = if args.len() > 3 {
                    self.number(a(2)?, 1.0)?
                } else {
                    1.0
                };
                if alpha != 1.0 {
                    y = self.g.mul_scalar(y, alpha as f32).map_err(ge)?;
                }
                if name == "aten.add.Tensor" {
                    self.g.add(x, y)
                } else {
                    self.g.sub(x, y)
                }
                .map_err(ge)?
            }
            "aten.mul.Tensor" | "aten.div.Tensor" => {
                let x = self.tensor(a(0)?)?;
                let y = self.tensor(a(1)?)?;
                if name == "aten.mul.Tensor" {
                    self.g.mul(x, y)
                } else {
                    self.g.div(x, y)
                }
                .map_err(ge)?
            }
            _ => return self.node_unary_or_shape(name, args),
        };
        self.set_out(args, t)
    }

    fn node_unary_or_shape(&mut self, name: &str, args: &[u32]) -> Result<()> {
        let a = |i| Self::arg(args, i);
        let ge = |e: compute_delegate::Error| err(e.to_string());
        let x = self.tensor(a(0)?)?;
        let t = match name {
            "aten.sigmoid.default" => self.g.sigmoid(x),
            "aten.relu.default" => self.g.relu(x),
            "aten.tanh.default" => self.g.tanh(x),
            "aten.hardswish.default" => self.g.hardswish(x),
            "aten.gelu.default" => {
                let tanh = matches!(self.value(a(1)?)?, VkValue::String("tanh"));
                self.g.gelu(x, tanh)
            }
            "aten.clamp.default" | "aten.hardtanh.default" => {
                let (lo, hi) = if name == "aten.hardtanh.default" {
                    (-1.0, 1.0)
                } else {
                    (f64::from(f32::MIN), f64::from(f32::MAX))
                };
                let min = self.number(a(1)?, lo)?;
                let max = self.number(a(2)?, hi)?;
                self.g.clamp(x, min as f32, max as f32)
            }
            "aten.mean.dim" | "aten.sum.dim_IntList" => {
                let dims: Vec<isize> = self.ints(a(1)?)?.iter().map(|&d| d as isize).collect();
                let keepdim = self.bool(a(2)?)?;
                if name == "aten.mean.dim" {
                    self.g.mean(x, &dims, keepdim)
                } else {
                    self.g.sum(x, &dims, keepdim)
                }
            }
            "aten.view_copy.default" | "aten.squeeze_copy.dims" | "aten.unsqueeze_copy.default" => {
                // The output's sizes say the result; every one of these is a reshape.
                let out = self.tensor_value(self.out_id(args)?)?;
                let shape: Vec<isize> = out.dims.iter().map(|&d| d as isize).collect();
                self.g.reshape(x, &shape)
            }
            "aten.permute_copy.default" => {
                let perm: Vec<isize> = self.ints(a(1)?)?.iter().map(|&d| d as isize).collect();
                self.g.permute(x, &perm)
            }
            "aten._softmax.default" => self.g.softmax(x, self.int(a(1)?)? as isize),
            _ => return self.node_linear(name, args, x),
        }
        .map_err(ge)?;
        self.set_out(args, t)
    }

    fn node_linear(&mut self, name: &str, args: &[u32], x: TensorId) -> Result<()> {
        let a = |i| Self::arg(args, i);
        let ge = |e: compute_delegate::Error| err(e.to_string());
        let t = match name {
            "aten.linear.default" => {
                let w = self.tensor(a(1)?)?;
                let b = self.opt_tensor(a(2)?)?;
                self.g.linear(x, w, b)
            }
            "aten.bmm.default" => {
                let y = self.tensor(a(1)?)?;
                self.g.bmm(x, y)
            }
            "aten.native_layer_norm.default" => {
                let shape: Vec<usize> = self.ints(a(1)?)?.iter().map(|&d| d as usize).collect();
                let w = self.opt_tensor(a(2)?)?;
                let b = self.opt_tensor(a(3)?)?;
                let eps = self.number(a(4)?, 1e-5)?;
                self.g.layer_norm(x, &shape, w, b, eps as f32)
            }
            _ => return self.node_mask_or_index(name, args, x),
        }
        .map_err(ge)?;
        self.set_out(args, t)
    }

    /// Masks, `where`, index selection and `embedding`: one tensor out.
    fn node_mask_or_index(&mut self, name: &str, args: &[u32], x: TensorId) -> Result<()> {
        let a = |i| Self::arg(args, i);
        let ge = |e: compute_delegate::Error| err(e.to_string());
        let cmp = match name {
            "aten.eq.Scalar" => Some(Compare::Eq),
            "aten.ne.Scalar" => Some(Compare::Ne),
            "aten.gt.Scalar" => Some(Compare::Gt),
            "aten.ge.Scalar" => Some(Compare::Ge),
            "aten.lt.Scalar" => Some(Compare::Lt),
            "aten.le.Scalar" => Some(Compare::Le),
            _ => None,
        };
        let t = match name {
            _ if cmp.is_some() => {
                let s = self.number(a(1)?, 0.0)? as f32;
                self.g.compare_scalar(x, cmp.unwrap_or(Compare::Eq), s)
            }
            "aten.logical_not.default" => self.g.logical_not(x),
            "aten.where.self" => {
                let y = self.tensor(a(1)?)?;
                let z = self.tensor(a(2)?)?;
                self.g.where_(x, y, z)
            }
            "aten.select_copy.int" => {
                let dim = self.int(a(1)?)? as isize;
                let index = self.int(a(2)?)? as isize;
                self.g.select(x, dim, index)
            }
            "aten.slice_copy.Tensor" => {
                // (input, dim, start, end, step, out); start and end may be None.
                let dim = self.int(a(1)?)? as isize;
                let start = self.opt_int(a(2)?, 0)?;
                let end = self.opt_int(a(3)?, i64::MAX)?;
                let step = usize::try_from(self.int(a(4)?)?).map_err(|_| err("negative step"))?;
                let clamp = |v: i64| v.clamp(isize::MIN as i64, isize::MAX as i64) as isize;
                self.g.slice(x, dim, clamp(start), clamp(end), step)
            }
            "aten.embedding.default" => {
                // (weight, indices, padding_idx, scale_grad_by_freq, sparse, out).
                let ids = self.tensor(a(1)?)?;
                self.g.embedding(x, ids)
            }
            other => return Err(err(format!("op {other} is not lowered"))),
        }
        .map_err(ge)?;
        self.set_out(args, t)
    }

    /// An int, or `default` for `Null`.
    fn opt_int(&self, id: u32, default: i64) -> Result<i64> {
        match self.value(id)? {
            VkValue::Null => Ok(default),
            _ => self.int(id),
        }
    }

    /// The ids of a value list.
    fn list(&self, id: u32) -> Result<Vec<u32>> {
        match self.value(id)? {
            VkValue::ValueList(ids) => Ok(ids.clone()),
            other => Err(err(format!(
                "value {id} is a {}, not a value list",
                other.kind()
            ))),
        }
    }

    /// Refuses a graph that reads value `id` (an output this lowering does not compute).
    fn unused(&self, id: u32, what: &str) -> Result<()> {
        let read = self.vk.output_ids.contains(&id)
            || self.vk.chain.iter().any(|n| {
                // Every argument but the last (the output) is read.
                let inputs = &n.args[..n.args.len().saturating_sub(1)];
                inputs.iter().any(|&v| {
                    v == id || matches!(self.value(v), Ok(VkValue::ValueList(l)) if l.contains(&id))
                })
            });
        if read {
            return Err(err(format!(
                "{what} (value {id}) is used; it is not computed"
            )));
        }
        Ok(())
    }

    /// Ops with value lists in or out, and constant fills.
    fn node_lists(&mut self, name: &str, args: &[u32]) -> Result<()> {
        let a = |i| Self::arg(args, i);
        let ge = |e: compute_delegate::Error| err(e.to_string());
        let t = match name {
            "aten.cat.default" => {
                let xs = self
                    .list(a(0)?)?
                    .into_iter()
                    .map(|v| self.tensor(v))
                    .collect::<Result<Vec<_>>>()?;
                self.g.cat(&xs, self.int(a(1)?)? as isize).map_err(ge)?
            }
            "aten.split_with_sizes_copy.default" => {
                let x = self.tensor(a(0)?)?;
                let sizes = self
                    .ints(a(1)?)?
                    .iter()
                    .map(|&s| usize::try_from(s).map_err(|_| err(format!("split size {s}"))))
                    .collect::<Result<Vec<_>>>()?;
                let parts = self
                    .g
                    .split(x, &sizes, self.int(a(2)?)? as isize)
                    .map_err(ge)?;
                let outs = self.list(*args.last().ok_or_else(|| err("no arguments"))?)?;
                if outs.len() != parts.len() {
                    return Err(err(format!(
                        "{} outputs for {} parts",
                        outs.len(),
                        parts.len()
                    )));
                }
                for (o, p) in outs.into_iter().zip(parts) {
                    self.tensors[o as usize] = Some(p);
                }
                return Ok(());
            }
            "aten.max_pool2d_with_indices.default" => self.max_pool(args)?,
            "aten.native_group_norm.default" => {
                // (input, weight, bias, N, C, HxW, group, eps, [out, mean, rstd]).
                let outs = self.list(a(8)?)?;
                for &o in outs.iter().skip(1) {
                    self.unused(o, "group_norm's mean or rstd")?;
                }
                let x = self.tensor(a(0)?)?;
                let w = self.opt_tensor(a(1)?)?;
                let b = self.opt_tensor(a(2)?)?;
                let groups =
                    usize::try_from(self.int(a(6)?)?).map_err(|_| err("negative groups"))?;
                let eps = self.number(a(7)?, 1e-5)? as f32;
                self.g.group_norm(x, groups, w, b, eps).map_err(ge)?
            }
            "aten.full_like.default" => {
                // (input, fill_value, dtype, layout, device, pin_memory, memory_format, out).
                let out = self.out_id(args)?;
                let shape = dims(self.tensor_value(out)?);
                let value = self.number(a(1)?, 0.0)? as f32;
                self.g
                    .full_as(&format!("full{out}"), &shape, value, self.float)
                    .map_err(ge)?
            }
            other => return Err(err(format!("op {other} is not lowered"))),
        };
        self.set_out(args, t)
    }

    /// `(input, kernel, stride, padding, dilation, ceil_mode, [out, indices])`: the values only.
    fn max_pool(&mut self, args: &[u32]) -> Result<TensorId> {
        let a = |i| Self::arg(args, i);
        if let Some(&indices) = self.list(a(6)?)?.get(1) {
            self.unused(indices, "max_pool2d's indices")?;
        }
        if self.pair(a(4)?)? != [1, 1] {
            return Err(err("dilated pooling is not supported"));
        }
        let x = self.tensor(a(0)?)?;
        let kernel = self.pair(a(1)?)?;
        let stride = if self.ints(a(2)?)?.is_empty() {
            kernel
        } else {
            self.pair(a(2)?)?
        };
        let p = Pool2d {
            kernel,
            stride,
            padding: self.pair(a(3)?)?,
            ceil_mode: self.bool(a(5)?)?,
            count_include_pad: true,
        };
        self.g.max_pool2d(x, p).map_err(|e| err(e.to_string()))
    }

    /// `(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups
    /// [, output_min, output_max], out)`.
    fn conv(&mut self, name: &str, args: &[u32]) -> Result<TensorId> {
        let a = |i| Self::arg(args, i);
        let ge = |e: compute_delegate::Error| err(e.to_string());
        if self.bool(a(6)?)? {
            return Err(err("transposed convolution is not supported"));
        }
        let x = self.tensor(a(0)?)?;
        let w = self.tensor(a(1)?)?;
        let b = self.opt_tensor(a(2)?)?;
        let groups = usize::try_from(self.int(a(8)?)?).map_err(|_| err("negative groups"))?;
        let p = Conv2d {
            stride: self.pair(a(3)?)?,
            padding: self.pair(a(4)?)?,
            dilation: self.pair(a(5)?)?,
            groups,
        };
        let y = self.g.conv2d(x, w, b, p).map_err(ge)?;
        if name != "et_vk.conv_with_clamp.default" {
            return Ok(y);
        }
        let min = self.number(a(9)?, f64::from(f32::MIN))?;
        let max = self.number(a(10)?, f64::from(f32::MAX))?;
        let (min, max) = (
            min.max(f64::from(f32::MIN)) as f32,
            max.min(f64::from(f32::MAX)) as f32,
        );
        self.g.clamp(y, min, max).map_err(ge)
    }
}

#[cfg(test)]
mod tests {
    use super::f16_to_f32;

    #[test]
    fn half_floats_widen_exactly() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x3555), 0.333_251_95);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert!(f16_to_f32(0x7c00).is_infinite());
        assert!(f16_to_f32(0x7e00).is_nan());
    }
}
