//! Compute ops by name: TOML attributes parsed into [`ComputeStep`], with every problem named
//! at parse time (unknown op, unknown or ill-typed attribute). Needs no compute delegate.

use std::collections::BTreeMap;

use vk_core::{DType, TensorSpec};

use super::error::{ProgramError, Result};
use super::spec::{Arith, ComputeOp, ComputeStep, PoolParams, UnaryFn};

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

/// Attributes of one step, tracking which were read.
struct Attrs<'a> {
    step: &'a str,
    op: &'a str,
    map: &'a BTreeMap<String, toml::Value>,
    used: Vec<&'static str>,
}

impl Attrs<'_> {
    fn err(&self, problem: String) -> ProgramError {
        ProgramError::step(self.step, format!("op {}: {problem}", self.op))
    }

    fn f32(&mut self, key: &'static str, default: Option<f32>) -> Result<f32> {
        self.used.push(key);
        match self.map.get(key) {
            Some(toml::Value::Float(v)) => Ok(*v as f32),
            Some(toml::Value::Integer(v)) => Ok(*v as f32),
            Some(other) => Err(self.err(format!("`{key}` must be a number, found {other}"))),
            None => default.ok_or_else(|| self.err(format!("attribute `{key}` is required"))),
        }
    }

    fn int(&mut self, key: &'static str, default: Option<i64>) -> Result<isize> {
        self.used.push(key);
        let v = match self.map.get(key) {
            Some(toml::Value::Integer(v)) => *v,
            Some(other) => {
                return Err(self.err(format!("`{key}` must be an integer, found {other}")));
            }
            None => default.ok_or_else(|| self.err(format!("attribute `{key}` is required")))?,
        };
        isize::try_from(v).map_err(|_| self.err(format!("`{key}` = {v} is out of range")))
    }

    fn boolean(&mut self, key: &'static str, default: bool) -> Result<bool> {
        self.used.push(key);
        match self.map.get(key) {
            Some(toml::Value::Boolean(v)) => Ok(*v),
            Some(other) => Err(self.err(format!("`{key}` must be true or false, found {other}"))),
            None => Ok(default),
        }
    }

    fn ints(&mut self, key: &'static str, default: Option<Vec<isize>>) -> Result<Vec<isize>> {
        self.used.push(key);
        let bad = |v: &toml::Value| self.err(format!("`{key}` must hold integers, found {v}"));
        let one = |v: &toml::Value| {
            v.as_integer()
                .and_then(|i| isize::try_from(i).ok())
                .ok_or_else(|| bad(v))
        };
        match self.map.get(key) {
            Some(v @ toml::Value::Integer(_)) => Ok(vec![one(v)?]),
            Some(toml::Value::Array(a)) => a.iter().map(one).collect(),
            Some(other) => Err(bad(other)),
            None => default.ok_or_else(|| self.err(format!("attribute `{key}` is required"))),
        }
    }

    fn pair(&mut self, key: &'static str, default: Option<[usize; 2]>) -> Result<[usize; 2]> {
        let v = self.ints(key, default.map(|d| vec![d[0] as isize, d[1] as isize]))?;
        let bad = || self.err(format!("`{key}` must be one or two non-negative integers"));
        let u = |x: isize| usize::try_from(x).map_err(|_| bad());
        match v.as_slice() {
            [a] => Ok([u(*a)?, u(*a)?]),
            [a, b] => Ok([u(*a)?, u(*b)?]),
            _ => Err(bad()),
        }
    }

    fn string(&mut self, key: &'static str) -> Result<Option<String>> {
        self.used.push(key);
        match self.map.get(key) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.err(format!("`{key}` must be a string, found {other}"))),
        }
    }

    /// Every attribute must have been read.
    fn finish(&self) -> Result<()> {
        let reserved = ["input_shape", "input_dtype"];
        let unknown: Vec<&str> = self
            .map
            .keys()
            .map(String::as_str)
            .filter(|k| !self.used.contains(k) && !reserved.contains(k))
            .collect();
        match unknown.as_slice() {
            [] => Ok(()),
            keys => Err(self.err(format!("unknown attribute(s) {keys:?}"))),
        }
    }
}

impl ComputeStep {
    /// Parses op `op` with TOML `attributes` (the keys of a program file's `[[step]]`) for
    /// the step named `step` (named in errors).
    pub fn from_attributes(
        step: &str,
        op: &str,
        attributes: &BTreeMap<String, toml::Value>,
    ) -> Result<ComputeStep> {
        let mut a = Attrs {
            step,
            op,
            map: attributes,
            used: Vec::new(),
        };
        let op = parse_op(&mut a)?;
        a.finish()?;
        Ok(ComputeStep {
            op,
            declared_input: declared_input(step, attributes)?,
        })
    }
}

fn arith(name: &str) -> Option<Arith> {
    Some(match name {
        "add" => Arith::Add,
        "sub" => Arith::Sub,
        "mul" => Arith::Mul,
        "div" => Arith::Div,
        _ => return None,
    })
}

fn parse_op(a: &mut Attrs<'_>) -> Result<ComputeOp> {
    let op = a.op;
    let unary = |f| Ok(ComputeOp::Unary(f));
    match op {
        "relu" => unary(UnaryFn::Relu),
        "relu6" => unary(UnaryFn::Relu6),
        "sigmoid" => unary(UnaryFn::Sigmoid),
        "tanh" => unary(UnaryFn::Tanh),
        "hardswish" => unary(UnaryFn::Hardswish),
        "gelu" => match a.string("approximate")?.as_deref() {
            None | Some("none") => Ok(ComputeOp::Gelu {
                approximate_tanh: false,
            }),
            Some("tanh") => Ok(ComputeOp::Gelu {
                approximate_tanh: true,
            }),
            Some(other) => Err(a.err(format!(
                "`approximate` must be \"tanh\" or \"none\", found {other:?}"
            ))),
        },
        "clamp" | "hardtanh" => {
            let (lo, hi) = if op == "hardtanh" {
                (-1.0, 1.0)
            } else {
                (f32::MIN, f32::MAX)
            };
            let min = a.f32("min", Some(lo))?;
            let max = a.f32("max", Some(hi))?;
            Ok(ComputeOp::Clamp { min, max })
        }
        "softmax" | "log_softmax" => Ok(ComputeOp::Softmax {
            dim: a.int("dim", Some(-1))?,
            log: op == "log_softmax",
        }),
        "avg_pool2d" | "max_pool2d" => parse_pool(a),
        "sum" | "mean" => Ok(ComputeOp::Reduce {
            mean: op == "mean",
            dims: a.ints("dims", None)?,
            keepdim: a.boolean("keepdim", false)?,
        }),
        "reshape" => Ok(ComputeOp::Reshape {
            shape: a.ints("shape", None)?,
        }),
        "permute" => Ok(ComputeOp::Permute {
            perm: a.ints("perm", None)?,
        }),
        "transpose" => Ok(ComputeOp::Transpose {
            dim0: a.int("dim0", None)?,
            dim1: a.int("dim1", None)?,
        }),
        _ => parse_arith(a),
    }
}

fn parse_arith(a: &mut Attrs<'_>) -> Result<ComputeOp> {
    if let Some(op) = arith(a.op) {
        return Ok(ComputeOp::Binary(op));
    }
    if let Some(op) = a.op.strip_suffix("_scalar").and_then(arith) {
        let value = a.f32("value", None)?;
        return Ok(ComputeOp::Scalar { op, value });
    }
    Err(ProgramError::step(
        a.step,
        format!("unknown compute op `{}`; known: {}", a.op, OPS.join(", ")),
    ))
}

fn parse_pool(a: &mut Attrs<'_>) -> Result<ComputeOp> {
    let kernel = a.pair("kernel", None)?;
    let params = PoolParams {
        kernel,
        stride: a.pair("stride", Some(kernel))?,
        padding: a.pair("padding", Some([0, 0]))?,
        ceil_mode: a.boolean("ceil_mode", false)?,
        count_include_pad: a.boolean("count_include_pad", true)?,
    };
    Ok(ComputeOp::Pool2d {
        max: a.op == "max_pool2d",
        params,
    })
}

/// Reads `input_shape` / `input_dtype` of a compute step fed by a program input.
fn declared_input(
    step: &str,
    attributes: &BTreeMap<String, toml::Value>,
) -> Result<Option<TensorSpec>> {
    let Some(shape) = attributes.get("input_shape") else {
        return Ok(None);
    };
    let err = |problem: String| ProgramError::step(step, problem);
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
        .collect::<Result<_>>()?;
    let dtype = match attributes.get("input_dtype") {
        None => DType::F32,
        Some(v) => match v.as_str() {
            Some("f32" | "float32") => DType::F32,
            Some("f16" | "float16") => DType::F16,
            Some("i32" | "int32") => DType::I32,
            Some("i8" | "int8") => DType::I8,
            _ => {
                return Err(err(format!(
                    "`input_dtype` {v} is not one of \"f32\", \"f16\", \"i32\", \"i8\""
                )));
            }
        },
    };
    Ok(Some(TensorSpec::new("input", dtype, shape)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(text: &str) -> BTreeMap<String, toml::Value> {
        toml::from_str(text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn ops_parse_into_typed_attributes() {
        let s = ComputeStep::from_attributes("p", "max_pool2d", &attrs("kernel = 3\nstride = 2"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            s.op,
            ComputeOp::Pool2d {
                max: true,
                params: PoolParams {
                    kernel: [3, 3],
                    stride: [2, 2],
                    padding: [0, 0],
                    ceil_mode: false,
                    count_include_pad: true,
                }
            }
        );
        let s = ComputeStep::from_attributes("s", "mul_scalar", &attrs("value = 2"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            s.op,
            ComputeOp::Scalar {
                op: Arith::Mul,
                value: 2.0
            }
        );
        let s = ComputeStep::from_attributes("g", "sigmoid", &attrs("input_shape = [1, 3]"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.declared_input.map(|d| d.shape), Some(vec![1, 3]));
    }

    #[test]
    fn bad_ops_and_attributes_are_named() {
        let e = ComputeStep::from_attributes("s", "frobnicate", &attrs("")).unwrap_err();
        assert!(
            e.to_string().contains("unknown compute op `frobnicate`"),
            "{e}"
        );
        let e = ComputeStep::from_attributes("s", "relu", &attrs("scale = 2")).unwrap_err();
        assert!(
            e.to_string().contains("unknown attribute(s) [\"scale\"]"),
            "{e}"
        );
        let e = ComputeStep::from_attributes("s", "clamp", &attrs("min = 'a'")).unwrap_err();
        assert!(e.to_string().contains("`min` must be a number"), "{e}");
        let e = ComputeStep::from_attributes("s", "sum", &attrs("")).unwrap_err();
        assert!(e.to_string().contains("`dims` is required"), "{e}");
    }
}
