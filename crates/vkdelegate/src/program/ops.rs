//! Compute steps by name: a program file's `op` and attributes as a [`ComputeStep`]. With the
//! compute delegate, the op is looked up in its registry and every attribute is checked at
//! parse time (unknown op, unknown or ill-typed attribute); without it the step is kept as
//! written and reported as not compiled when the program is built.

use std::collections::BTreeMap;

use vk_core::{DType, TensorSpec};

use super::error::{ProgramError, Result};
use super::spec::ComputeStep;

/// Keys of a compute step that are not the op's attributes.
const RESERVED: [&str; 2] = ["input_shape", "input_dtype"];

impl ComputeStep {
    /// A step of op `op` (its program-file name: `relu`, `max_pool2d`) with no attributes yet;
    /// the op and its attributes are checked when the program is built.
    pub fn new(op: impl Into<String>) -> ComputeStep {
        ComputeStep {
            op: op.into(),
            attributes: BTreeMap::new(),
            declared_input: None,
        }
    }

    /// The step with attribute `key` set to `value` (a number, bool, string or list, as in a
    /// program file).
    pub fn with(mut self, key: &str, value: impl Into<toml::Value>) -> ComputeStep {
        self.attributes.insert(key.to_owned(), value.into());
        self
    }

    /// The step with the spec of its inputs that are program inputs.
    pub fn declared_input(mut self, spec: TensorSpec) -> ComputeStep {
        self.declared_input = Some(spec);
        self
    }

    /// Parses op `op` with TOML `attributes` (the keys of a program file's `[[step]]`) for
    /// the step named `step` (named in errors).
    pub fn from_attributes(
        step: &str,
        op: &str,
        attributes: &BTreeMap<String, toml::Value>,
    ) -> Result<ComputeStep> {
        let declared_input = declared_input(step, attributes)?;
        let attributes: BTreeMap<String, toml::Value> = attributes
            .iter()
            .filter(|(k, _)| !RESERVED.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let c = ComputeStep {
            op: op.to_owned(),
            attributes,
            declared_input,
        };
        super::step::check_compute(step, &c)?;
        Ok(c)
    }
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
            Some("i64" | "int64") => DType::I64,
            _ => {
                return Err(err(format!(
                    "`input_dtype` {v} is not one of \"f32\", \"f16\", \"i32\", \"i8\", \"i64\""
                )));
            }
        },
    };
    Ok(Some(TensorSpec::new("input", dtype, shape)))
}

#[cfg(all(test, feature = "compute"))]
mod tests {
    use super::*;

    fn attrs(text: &str) -> BTreeMap<String, toml::Value> {
        toml::from_str(text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn ops_keep_their_attributes_and_declared_input() {
        let s = ComputeStep::from_attributes("p", "max_pool2d", &attrs("kernel = 3\nstride = 2"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.op, "max_pool2d");
        assert_eq!(s.attributes.len(), 2);
        let s = ComputeStep::from_attributes("g", "sigmoid", &attrs("input_shape = [1, 3]"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(s.attributes.is_empty());
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
        let e = ComputeStep::from_attributes("s", "reshape", &attrs("")).unwrap_err();
        assert!(
            e.to_string().contains("attribute `shape` is required"),
            "{e}"
        );
    }
}
