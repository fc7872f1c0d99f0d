//! Program steps for the tests that build programs step by step.
#![allow(dead_code)]

use vkdelegate::program::{ComputeStep, StepKind, StepSpec};

/// A compute step of op `op` with TOML attributes `extra`, reading `io.0` and writing `io.1`.
pub fn step_op(name: &str, op: &str, io: (&str, &str), extra: &[(&str, toml::Value)]) -> StepSpec {
    let attrs = extra
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    StepSpec {
        name: name.into(),
        kind: StepKind::Compute(
            ComputeStep::from_attributes(name, op, &attrs).unwrap_or_else(|e| panic!("{e}")),
        ),
        inputs: vec![io.0.into()],
        outputs: vec![io.1.into()],
    }
}
