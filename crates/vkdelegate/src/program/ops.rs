//! Compute ops a program file can name, mapped onto `compute_delegate::GraphBuilder`.

use std::collections::BTreeMap;

use compute_delegate::{GraphBuilder, Pool2d, TensorId};
use vk_core::DType;

use super::{ProgramError, TensorSpec};

/// Op names a program step may use.
pub const OPS: &[&str] = &[
    "relu",
    "relu6",
    "sigmoid",
    "tanh",
    "gelu",
    "hardswish",
    "clamp",
    "hardtanh",
    "add",
    "sub",
    "mul",
    "div",
    "add_scalar",
    "sub_scalar",
    "mul_scalar",
    "div_scalar",
    "softmax",
    "log_softmax",
    "avg_pool2d",
    "max_pool2d",
    "sum",
    "mean",
    "reshape",
    "permute",
    "transpose",
];

struct Attrs<'a> {
    step: &'a str,
    op: &'a str,
    map: &'a BTreeMap<String, toml::Value>,
    used: Vec<&'static str>,
}

impl<'a> Attrs<'a> {
    fn err(&self, problem: String) -> ProgramError {
        ProgramError::Step {
            step: self.step.to_owned(),
            problem: format!("op {}: {problem}", self.op),
        }
    }

    fn f32(&mut self, key: &'static str, default: Option<f32>) -> Result<f32, ProgramError> {
        self.used.push(key);
        match self.map.get(key) {
            Some(toml::Value::Float(v)) => Ok(*v as f32),
            Some(toml::Value::Integer(v)) => Ok(*v as f32),
            Some(other) => Err(self.err(format!("`{key}` must be a number, found {other}"))),
            None => default.ok_or_else(|| self.err(format!("attribute `{key}` is required"))),
        }
    }

    fn int(&mut self, key: &'static str, default: Option<i64>) -> Result<i64, ProgramError> {
        self.used.push(key);
        match self.map.get(key) {
            Some(toml::Value::Integer(v)) => Ok(*v),
            Some(other) => Err(self.err(format!("`{key}` must be an integer, found {other}"))),
            None => default.ok_or_else(|| self.err(format!("attribute `{key}` is required"))),
        }
    }

    fn boolean(&mut self, key: &'static str, default: bool) -> Result<bool, ProgramError> {
        self.used.push(key);
        match self.map.get(key) {
            Some(toml::Value::Boolean(v)) => Ok(*v),
            Some(other) => Err(self.err(format!("`{key}` must be true or false, found {other}"))),
            None => Ok(default),
        }
    }

    fn ints(
        &mut self,
        key: &'static str,
        default: Option<Vec<i64>>,
    ) -> Result<Vec<i64>, ProgramError> {
        self.used.push(key);
        match self.map.get(key) {
            Some(toml::Value::Integer(v)) => Ok(vec![*v]),
            Some(toml::Value::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_integer()
                        .ok_or_else(|| self.err(format!("`{key}` must hold integers, found {v}")))
                })
                .collect(),
            Some(other) => Err(self.err(format!("`{key}` must be integers, found {other}"))),
            None => default.ok_or_else(|| self.err(format!("attribute `{key}` is required"))),
        }
    }

    fn pair(
        &mut self,
        key: &'static str,
        default: Option<[usize; 2]>,
    ) -> Result<[usize; 2], ProgramError> {
        let v = self.ints(key, default.map(|d| vec![d[0] as i64, d[1] as i64]))?;
        let bad = || self.err(format!("`{key}` must be one or two non-negative integers"));
        let u = |x: i64| usize::try_from(x).map_err(|_| bad());
        match v.as_slice() {
            [a] => Ok([u(*a)?, u(*a)?]),
            [a, b] => Ok([u(*a)?, u(*b)?]),
            _ => Err(bad()),
        }
    }

    fn finish(&self) -> Result<(), ProgramError> {
        let reserved = ["input_shape", "input_dtype"];
        for key in self.map.keys() {
            if !self.used.contains(&key.as_str()) && !reserved.contains(&key.as_str()) {
                return Err(self.err(format!("unknown attribute `{key}`")));
            }
        }
        Ok(())
    }
}

/// Builds the one-op graph of a compute step whose inputs have `inputs` specs.
pub(super) fn build_graph(
    step: &str,
    op: &str,
    attributes: &BTreeMap<String, toml::Value>,
    inputs: &[TensorSpec],
) -> Result<GraphBuilder, ProgramError> {
    let mut a = Attrs {
        step,
        op,
        map: attributes,
        used: Vec::new(),
    };
    let wrap = |e: compute_delegate::Error| ProgramError::Step {
        step: step.to_owned(),
        problem: e.to_string(),
    };
    let arity = match op {
        "add" | "sub" | "mul" | "div" => 2,
        _ if OPS.contains(&op) => 1,
        _ => {
            return Err(ProgramError::Step {
                step: step.to_owned(),
                problem: format!("unknown compute op `{op}`; known: {}", OPS.join(", ")),
            });
        }
    };
    if inputs.len() != arity {
        return Err(a.err(format!(
            "takes {arity} input(s), the step lists {}",
            inputs.len()
        )));
    }
    let mut g = GraphBuilder::new();
    let ids: Vec<TensorId> = inputs
        .iter()
        .enumerate()
        .map(|(i, s)| g.input(&format!("in{i}"), s.dtype, &s.shape))
        .collect::<Result<_, _>>()
        .map_err(wrap)?;
    let x = ids[0];
    let out = match op {
        "relu" => g.relu(x),
        "relu6" => g.relu6(x),
        "sigmoid" => g.sigmoid(x),
        "tanh" => g.tanh(x),
        "hardswish" => g.hardswish(x),
        "gelu" => {
            let approximate = match a.map.get("approximate") {
                None => false,
                Some(toml::Value::String(s)) if s == "tanh" => true,
                Some(toml::Value::String(s)) if s == "none" => false,
                Some(other) => {
                    return Err(a.err(format!(
                        "`approximate` must be \"tanh\" or \"none\", found {other}"
                    )));
                }
            };
            a.used.push("approximate");
            g.gelu(x, approximate)
        }
        "clamp" | "hardtanh" => {
            let (lo, hi) = if op == "hardtanh" {
                (-1.0, 1.0)
            } else {
                (f32::MIN, f32::MAX)
            };
            let min = a.f32("min", Some(lo))?;
            let max = a.f32("max", Some(hi))?;
            g.clamp(x, min, max)
        }
        "add" => g.add(x, ids[1]),
        "sub" => g.sub(x, ids[1]),
        "mul" => g.mul(x, ids[1]),
        "div" => g.div(x, ids[1]),
        "add_scalar" => {
            let v = a.f32("value", None)?;
            g.add_scalar(x, v)
        }
        "sub_scalar" => {
            let v = a.f32("value", None)?;
            g.sub_scalar(x, v)
        }
        "mul_scalar" => {
            let v = a.f32("value", None)?;
            g.mul_scalar(x, v)
        }
        "div_scalar" => {
            let v = a.f32("value", None)?;
            g.div_scalar(x, v)
        }
        "softmax" | "log_softmax" => {
            let dim = a.int("dim", Some(-1))? as isize;
            if op == "softmax" {
                g.softmax(x, dim)
            } else {
                g.log_softmax(x, dim)
            }
        }
        "avg_pool2d" | "max_pool2d" => {
            let kernel = a.pair("kernel", None)?;
            let stride = a.pair("stride", Some(kernel))?;
            let padding = a.pair("padding", Some([0, 0]))?;
            let ceil_mode = a.boolean("ceil_mode", false)?;
            let count_include_pad = a.boolean("count_include_pad", true)?;
            let p = Pool2d {
                kernel,
                stride,
                padding,
                ceil_mode,
                count_include_pad,
            };
            if op == "avg_pool2d" {
                g.avg_pool2d(x, p)
            } else {
                g.max_pool2d(x, p)
            }
        }
        "sum" | "mean" => {
            let dims: Vec<isize> = a
                .ints("dims", None)?
                .into_iter()
                .map(|d| d as isize)
                .collect();
            let keepdim = a.boolean("keepdim", false)?;
            if op == "sum" {
                g.sum(x, &dims, keepdim)
            } else {
                g.mean(x, &dims, keepdim)
            }
        }
        "reshape" => {
            let shape: Vec<isize> = a
                .ints("shape", None)?
                .into_iter()
                .map(|d| d as isize)
                .collect();
            g.reshape(x, &shape)
        }
        "permute" => {
            let perm: Vec<isize> = a
                .ints("perm", None)?
                .into_iter()
                .map(|d| d as isize)
                .collect();
            g.permute(x, &perm)
        }
        "transpose" => {
            let d0 = a.int("dim0", None)? as isize;
            let d1 = a.int("dim1", None)? as isize;
            g.transpose(x, d0, d1)
        }
        _ => unreachable_op(step, op)?,
    }
    .map_err(wrap)?;
    a.finish()?;
    g.output(out).map_err(wrap)?;
    Ok(g)
}

fn unreachable_op(
    step: &str,
    op: &str,
) -> Result<compute_delegate::Result<TensorId>, ProgramError> {
    Err(ProgramError::Step {
        step: step.to_owned(),
        problem: format!("compute op `{op}` is listed but not mapped"),
    })
}

/// Reads `input_shape` / `input_dtype` of a compute step fed by a program input.
pub(super) fn declared_input(
    step: &str,
    attributes: &BTreeMap<String, toml::Value>,
) -> Result<Option<TensorSpec>, ProgramError> {
    let Some(shape) = attributes.get("input_shape") else {
        return Ok(None);
    };
    let err = |problem: String| ProgramError::Step {
        step: step.to_owned(),
        problem,
    };
    let shape: Vec<usize> = shape
        .as_array()
        .ok_or_else(|| err("`input_shape` must be an array of integers".into()))?
        .iter()
        .map(|v| {
            v.as_integer()
                .and_then(|i| usize::try_from(i).ok())
                .ok_or_else(|| {
                    err(format!(
                        "`input_shape` holds {v}, not a non-negative integer"
                    ))
                })
        })
        .collect::<Result<_, _>>()?;
    let dtype = match attributes
        .get("input_dtype")
        .and_then(|v| v.as_str())
        .unwrap_or("f32")
    {
        "f32" | "float32" => DType::F32,
        "f16" | "float16" => DType::F16,
        "i32" | "int32" => DType::I32,
        "i8" | "int8" => DType::I8,
        other => {
            return Err(err(format!(
                "`input_dtype` {other:?} is not one of f32, f16, i32, i8"
            )));
        }
    };
    Ok(Some(TensorSpec { dtype, shape }))
}
