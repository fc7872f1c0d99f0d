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

use compute_delegate::ops::{self, Arg, Kind, Param};
use compute_delegate::{GraphBuilder, TensorId};
use executorch_pte::{
    ExecutionPlan, Instruction, Program as Pte, ScalarType, Value, VkDataType, VkGraph, VkTensor,
    VkValue,
};
use vk_core::{DType, HostTensor};

/// The ops that compute a SymInt, evaluated by the lowering itself (`Lowering::symint`).
pub(crate) const SYMINT_OPS: &[&str] = &[
    "sym_size.int",
    "aten.sym_size.int",
    "et_vk.select_as_symint.default",
    "et_vk::select_as_symint",
    "add",
    "sub",
    "mul",
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
    /// the f16 features, and in fp32, widened by a pass, where it has not).
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
    shapes: &[Option<Vec<usize>>],
) -> Result<Lowered> {
    let f16 = has_f16_tensor(vk);
    let float = if f16 { DType::F16 } else { DType::F32 };
    let graph = Lowering::new(pte, vk, float, file).run(&long_inputs(plan, index), shapes)?;
    Ok(Lowered { graph, f16 })
}

fn has_f16_tensor(vk: &VkGraph<'_>) -> bool {
    vk.values
        .iter()
        .any(|v| matches!(v, VkValue::Tensor(t) if t.datatype == VkDataType::Float16))
}

/// Which of the delegate's inputs are int64 inputs of the plan, which the caller passes as
/// int64 (between steps, int64 values are held as i32, as every step stages them).
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
                plan.inputs.contains(&v)
                    && matches!(plan.values.get(v as usize),
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
    /// The SymInt values the graph's nodes computed, by value id.
    syms: Vec<Option<Arg>>,
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
        // int64 is held as i32, as ExecuTorch's Vulkan backend holds it.
        VkDataType::Int32 | VkDataType::Int64 => Ok(DType::I32),
        VkDataType::Int8 => Ok(DType::I8),
        // Packed 4-bit weights.
        VkDataType::UInt8 => Ok(DType::U8),
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
        let mut g = GraphBuilder::new();
        g.set_float(float);
        Lowering {
            pte,
            vk,
            g,
            tensors: vec![None; vk.values.len()],
            float,
            file,
            syms: vec![None; vk.values.len()],
        }
    }

    /// Where `bytes` lie in the program file, if they are part of it.
    fn file_range(&self, bytes: &[u8]) -> Option<std::ops::Range<usize>> {
        let base = self.file.as_ptr() as usize;
        let start = (bytes.as_ptr() as usize).checked_sub(base)?;
        let end = start.checked_add(bytes.len())?;
        (end <= self.file.len()).then_some(start..end)
    }

    fn run(mut self, long: &[bool], shapes: &[Option<Vec<usize>>]) -> Result<GraphBuilder> {
        super::count_lowering();
        let ge = |e: compute_delegate::Error| err(e.to_string());
        for (i, &id) in self.vk.input_ids.iter().enumerate() {
            let t = self.tensor_value(id)?;
            let dtype = dtype_of(t, true, self.float)?;
            let inner = dtype_of(t, false, self.float)?;
            let name = format!("in{i}");
            let shape = match shapes.get(i) {
                Some(Some(s)) => {
                    // The declared sizes are the exported upper bounds of dynamic dims.
                    let bound = dims(t);
                    if s.len() != bound.len() || s.iter().zip(&bound).any(|(a, b)| a > b) {
                        return Err(err(format!(
                            "input {i}: shape {s:?} is beyond the exported bound {bound:?}"
                        )));
                    }
                    s.clone()
                }
                _ => dims(t),
            };
            let x = if dtype == DType::I32 && long.get(i) == Some(&true) {
                let wide = self.g.input(&name, DType::I64, &shape).map_err(ge)?;
                self.g.cast(wide, DType::I32).map_err(ge)?
            } else {
                let x = self.g.input(&name, dtype, &shape).map_err(ge)?;
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
            VkDataType::Int64 => {
                let v = bytes
                    .chunks_exact(8)
                    .map(|b| {
                        let v =
                            i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
                        i32::try_from(v)
                            .map_err(|_| err(format!("constant {c}: {v} does not fit i32")))
                    })
                    .collect::<Result<Vec<i32>>>()?;
                HostTensor::from_i32(dims(t), &v)
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

    /// The scalar or list value `id` as an op argument (tensors are read by [`Self::arg`]).
    fn scalar_arg(&self, id: u32) -> Result<Arg> {
        Ok(match self.value(id)? {
            VkValue::Null => Arg::None,
            VkValue::Int(v) => Arg::Int(*v),
            // Evaluated by the node that computes it; else the value exported.
            VkValue::SymInt(v) => match self.syms.get(id as usize).cloned().flatten() {
                Some(a) => a,
                None => Arg::Int(i64::from(*v)),
            },
            VkValue::Double(v) => Arg::Float(*v),
            VkValue::Bool(v) => Arg::Bool(*v),
            VkValue::IntList(v) => Arg::Ints(v.clone()),
            VkValue::DoubleList(v) => Arg::Floats(v.clone()),
            VkValue::String(s) => Arg::Str((*s).to_owned()),
            // Sizes with symbolic entries: a list of int or SymInt values.
            VkValue::ValueList(ids) => Arg::Ints(
                ids.iter()
                    .map(|&v| match self.scalar_arg(v)? {
                        Arg::Int(i) => Ok(i),
                        Arg::DeviceInt { .. } => Err(err(format!(
                            "value {id}: list entry {v} is known only on the device"
                        ))),
                        _ => Err(err(format!("value {id}: list entry {v} is not an int"))),
                    })
                    .collect::<Result<_>>()?,
            ),
            other => return Err(err(format!("value {id} is a {}", other.kind()))),
        })
    }

    /// Value `id` as the argument of parameter `p`.
    fn arg(&mut self, p: &Param, id: u32) -> Result<Arg> {
        let what = |e: LowerError| err(format!("argument `{}`: {e}", p.name()));
        match (p.kind, self.value(id).map_err(what)?) {
            (_, VkValue::Null) => Ok(Arg::None),
            (Kind::Tensor, _) => self.tensor(id).map(Arg::Tensor).map_err(what),
            (Kind::Tensors, VkValue::ValueList(ids)) => ids
                .iter()
                .map(|&v| self.tensor(v))
                .collect::<Result<_>>()
                .map(Arg::Tensors)
                .map_err(what),
            (Kind::OptTensors, VkValue::ValueList(ids)) => ids
                .iter()
                .map(|&v| match self.value(v)? {
                    VkValue::Null => Ok(None),
                    _ => self.tensor(v).map(Some),
                })
                .collect::<Result<_>>()
                .map(Arg::OptTensors)
                .map_err(what),
            _ => self.scalar_arg(id).map_err(what),
        }
    }

    /// One node through the op registry: its arguments in the op's parameter order, its last
    /// argument the output (a tensor, or a list of them).
    fn node(&mut self, name: &str, args: &[u32]) -> Result<()> {
        if let Some(&out) = args.last() {
            if matches!(self.value(out)?, VkValue::SymInt(_)) {
                let value = self.symint(name, &args[..args.len() - 1])?;
                self.syms[out as usize] = Some(value);
                return Ok(());
            }
        }
        let def = ops::find(name).ok_or_else(|| err(format!("op {name} is not registered")))?;
        let (&out, inputs) = args
            .split_last()
            .ok_or_else(|| err("the node has no arguments"))?;
        let mut call = Vec::with_capacity(def.params.len());
        for (p, &id) in def.params.iter().zip(inputs) {
            call.push(self.arg(p, id)?);
        }
        let results = def
            .call(&mut self.g, call)
            .map_err(|e| err(e.to_string()))?;
        self.set_outputs(out, &results)
    }

    /// A node that computes a SymInt: a tensor's size (`sym_size.int`), an element of a tensor
    /// (`et_vk.select_as_symint`: known only on the device, as an i32 `[1]`), or the sum,
    /// difference or product of two (one of them known at build when the other is not).
    fn symint(&mut self, name: &str, args: &[u32]) -> Result<Arg> {
        let ge = |e: compute_delegate::Error| err(e.to_string());
        let int = |this: &Self, i: usize| -> Result<Arg> {
            let id = *args
                .get(i)
                .ok_or_else(|| err(format!("argument {i} is missing")))?;
            this.scalar_arg(id)
        };
        let static_int = |a: Arg| match a {
            Arg::Int(v) => Ok(v),
            other => Err(err(format!("{other:?} where an integer is needed"))),
        };
        match name {
            _ if !SYMINT_OPS.contains(&name) => Err(err(format!(
                "op {name} computing a SymInt is not supported"
            ))),
            "sym_size.int" | "aten.sym_size.int" => {
                let t = self.tensor(args.first().copied().unwrap_or(u32::MAX))?;
                let shape = self.g.shape(t).map(<[usize]>::to_vec).unwrap_or_default();
                let d = static_int(int(self, 1)?)?;
                let d = if d < 0 { d + shape.len() as i64 } else { d };
                let size = shape
                    .get(d as usize)
                    .ok_or_else(|| err(format!("dim {d} of {shape:?}")))?;
                Ok(Arg::Int(*size as i64))
            }
            "et_vk.select_as_symint.default" | "et_vk::select_as_symint" => {
                let t = self.tensor(args.first().copied().unwrap_or(u32::MAX))?;
                let (d, i) = (static_int(int(self, 1)?)?, static_int(int(self, 2)?)?);
                let shape = self.g.shape(t).map(<[usize]>::to_vec).unwrap_or_default();
                let d = if d < 0 { d + shape.len() as i64 } else { d };
                let n = shape.get(d as usize).copied().unwrap_or(0) as i64;
                let i = if i < 0 { i + n } else { i };
                // A one-element tensor (a position input) is read as it is.
                let one = match shape.iter().product::<usize>() {
                    1 if i == 0 => t,
                    _ => self
                        .g
                        .slice(t, d as isize, i as isize, i as isize + 1, 1)
                        .map_err(ge)?,
                };
                let one = self.g.reshape(one, &[1]).map_err(ge)?;
                let value = match self.g.dtype(one) {
                    Some(DType::I32) => one,
                    _ => self.g.cast(one, DType::I32).map_err(ge)?,
                };
                Ok(Arg::DeviceInt { value, plus: 0 })
            }
            "add" | "sub" | "mul" => {
                let (a, b) = (int(self, 0)?, int(self, 1)?);
                match (name, a, b) {
                    ("add", Arg::Int(x), Arg::Int(y)) => Ok(Arg::Int(x + y)),
                    ("sub", Arg::Int(x), Arg::Int(y)) => Ok(Arg::Int(x - y)),
                    ("mul", Arg::Int(x), Arg::Int(y)) => Ok(Arg::Int(x * y)),
                    ("add", Arg::DeviceInt { value, plus }, Arg::Int(y))
                    | ("add", Arg::Int(y), Arg::DeviceInt { value, plus }) => Ok(Arg::DeviceInt {
                        value,
                        plus: plus + y,
                    }),
                    ("sub", Arg::DeviceInt { value, plus }, Arg::Int(y)) => Ok(Arg::DeviceInt {
                        value,
                        plus: plus - y,
                    }),
                    (_, a, b) => Err(err(format!(
                        "SymInt {name} of {a:?} and {b:?}: one side known only on the device \
                         is supported for add and sub with an integer"
                    ))),
                }
            }
            other => Err(err(format!(
                "op {other} computing a SymInt is not supported"
            ))),
        }
    }

    /// Binds the op's results to the node's output value(s); outputs the op does not compute
    /// (max pooling's indices, a norm's statistics) must not be read.
    fn set_outputs(&mut self, out: u32, results: &[TensorId]) -> Result<()> {
        let ids = match self.value(out)? {
            VkValue::ValueList(ids) => ids.clone(),
            _ => vec![out],
        };
        if results.len() > ids.len() {
            return Err(err(format!(
                "the op makes {} outputs, the node names {}",
                results.len(),
                ids.len()
            )));
        }
        for (k, &id) in ids.iter().enumerate() {
            match results.get(k) {
                Some(&t) => {
                    let t = self.as_declared(id, t)?;
                    let slot = self
                        .tensors
                        .get_mut(id as usize)
                        .ok_or_else(|| err(format!("output value {id} does not exist")))?;
                    *slot = Some(t);
                }
                None => self.unused(id, &format!("output {k}"))?,
            }
        }
        Ok(())
    }

    /// `t`, the result bound to value `id`, cast where the graph declares the value an integer
    /// and `t` holds floats, or the other way round: a dtype conversion serialized without its
    /// dtype argument (`_to_dim_order_copy` of positions to float, of a mask to long) takes
    /// the declared one. Booleans stay masks in the graph's float dtype.
    fn as_declared(&mut self, id: u32, t: TensorId) -> Result<TensorId> {
        let Ok(VkValue::Tensor(v)) = self.value(id) else {
            return Ok(t);
        };
        let declared = v.datatype;
        let held = self.g.dtype(t);
        let float = |d: Option<DType>| matches!(d, Some(DType::F32 | DType::F16));
        let ge = |e: compute_delegate::Error| err(e.to_string());
        match declared {
            VkDataType::Float32 | VkDataType::Float16 if held == Some(DType::I32) => {
                self.g.cast(t, self.float).map_err(ge)
            }
            VkDataType::Int32 | VkDataType::Int64 if float(held) => {
                self.g.cast(t, DType::I32).map_err(ge)
            }
            _ => Ok(t),
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
