//! The wiring pass: every name, dtype and shape checked before any device is touched.
//!
//! Steps are visited in order. A name no earlier step produces is a program input; its spec
//! is what its first consumer expects. Each step states the specs of its inputs and outputs
//! (a VGF file declares them; a compute op derives its outputs from its inputs), and every
//! tensor a step consumes must have the dtype and shape its producer makes.

use std::collections::{BTreeMap, HashSet};

use vk_core::TensorSpec;

use super::error::{Producer, ProgramError, Result, TensorMismatch};
use super::spec::StepSpec;

/// Where a step's input comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Source {
    /// Program input `i`.
    ProgramInput(usize),
    /// Output `output` of step `step`.
    Step {
        /// Producing step.
        step: usize,
        /// Its output index.
        output: usize,
    },
}

/// What one step takes and makes, as its delegate declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct StepIo {
    /// Its inputs, in order.
    pub inputs: Vec<TensorSpec>,
    /// Its outputs, in order.
    pub outputs: Vec<TensorSpec>,
}

/// One wired step.
#[derive(Debug, Clone)]
pub(super) struct StepWiring {
    /// What the step takes and makes.
    pub io: StepIo,
    /// Where each input comes from.
    pub sources: Vec<Source>,
}

/// A checked program.
#[derive(Debug, Clone)]
pub(super) struct Wiring {
    /// Program inputs (named as in the program).
    pub inputs: Vec<TensorSpec>,
    /// Program outputs (named as in the program) and where each comes from.
    pub outputs: Vec<(TensorSpec, Source)>,
    /// Per step.
    pub steps: Vec<StepWiring>,
}

/// Checks `steps` and `output_names` (empty: the last step's outputs). `io(k, known)` gives
/// step `k`'s inputs and outputs, where `known[i]` is the spec of its input `i` if an earlier
/// step produces it.
pub(super) fn wire(
    steps: &[StepSpec],
    output_names: &[String],
    mut io: impl FnMut(usize, &[Option<TensorSpec>]) -> Result<StepIo>,
) -> Result<Wiring> {
    check_names(steps)?;
    // name -> (spec, source)
    let mut available: BTreeMap<&str, (TensorSpec, Source)> = BTreeMap::new();
    let mut inputs: Vec<TensorSpec> = Vec::new();
    let mut wired = Vec::with_capacity(steps.len());
    for (k, step) in steps.iter().enumerate() {
        let known: Vec<Option<TensorSpec>> = step
            .inputs
            .iter()
            .map(|n| available.get(n.as_str()).map(|(s, _)| s.clone()))
            .collect();
        let step_io = io(k, &known)?;
        check_counts(step, &step_io)?;
        let mut sources = Vec::with_capacity(step.inputs.len());
        for (name, want) in step.inputs.iter().zip(&step_io.inputs) {
            let source = match available.get(name.as_str()) {
                Some((have, source)) => {
                    check_match(name, have, *source, steps, step, want)?;
                    *source
                }
                None => {
                    let source = Source::ProgramInput(inputs.len());
                    let spec = TensorSpec::new(name.clone(), want.dtype, want.shape.clone());
                    inputs.push(spec.clone());
                    available.insert(name, (spec, source));
                    source
                }
            };
            sources.push(source);
        }
        for (j, (name, have)) in step.outputs.iter().zip(&step_io.outputs).enumerate() {
            if let Some((_, source)) = available.get(name.as_str()) {
                return Err(ProgramError::Wiring(format!(
                    "tensor '{name}' is produced by both {} and step '{}'",
                    producer(*source, steps),
                    step.name
                )));
            }
            let spec = TensorSpec::new(name.clone(), have.dtype, have.shape.clone());
            available.insert(name, (spec, Source::Step { step: k, output: j }));
        }
        wired.push(StepWiring {
            io: step_io,
            sources,
        });
    }
    let outputs = program_outputs(steps, output_names, &available)?;
    Ok(Wiring {
        inputs,
        outputs,
        steps: wired,
    })
}

fn check_names(steps: &[StepSpec]) -> Result<()> {
    if steps.is_empty() {
        return Err(ProgramError::Wiring(
            "a program needs at least one step".into(),
        ));
    }
    let mut seen = HashSet::new();
    for s in steps {
        if !seen.insert(s.name.as_str()) {
            return Err(ProgramError::Wiring(format!(
                "two steps are named '{}'",
                s.name
            )));
        }
    }
    Ok(())
}

fn check_counts(step: &StepSpec, io: &StepIo) -> Result<()> {
    if io.inputs.len() != step.inputs.len() {
        return Err(ProgramError::step(
            &step.name,
            format!(
                "takes {} input(s) but the step lists {} ({:?})",
                io.inputs.len(),
                step.inputs.len(),
                step.inputs
            ),
        ));
    }
    if io.outputs.len() != step.outputs.len() {
        return Err(ProgramError::step(
            &step.name,
            format!(
                "produces {} output(s) but the step names {} ({:?})",
                io.outputs.len(),
                step.outputs.len(),
                step.outputs
            ),
        ));
    }
    Ok(())
}

fn producer(source: Source, steps: &[StepSpec]) -> Producer {
    match source {
        Source::ProgramInput(_) => Producer::ProgramInput,
        Source::Step { step, .. } => Producer::Step(steps[step].name.clone()),
    }
}

fn check_match(
    name: &str,
    have: &TensorSpec,
    source: Source,
    steps: &[StepSpec],
    consumer: &StepSpec,
    want: &TensorSpec,
) -> Result<()> {
    if have.same_layout(want) {
        return Ok(());
    }
    Err(ProgramError::Mismatch(Box::new(TensorMismatch {
        tensor: name.to_owned(),
        producer: producer(source, steps),
        produced: have.clone(),
        consumer: consumer.name.clone(),
        expected: want.clone(),
    })))
}

fn program_outputs(
    steps: &[StepSpec],
    output_names: &[String],
    available: &BTreeMap<&str, (TensorSpec, Source)>,
) -> Result<Vec<(TensorSpec, Source)>> {
    let last: Vec<String> = steps.last().map(|s| s.outputs.clone()).unwrap_or_default();
    let names = if output_names.is_empty() {
        &last[..]
    } else {
        output_names
    };
    names
        .iter()
        .map(|name| match available.get(name.as_str()) {
            Some((spec, source @ Source::Step { .. })) => Ok((spec.clone(), *source)),
            _ => Err(ProgramError::Wiring(format!(
                "program output '{name}' is not produced by any step"
            ))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::spec::{ComputeStep, StepKind};
    use vk_core::DType;

    fn step(name: &str, inputs: &[&str], outputs: &[&str]) -> StepSpec {
        StepSpec {
            name: name.into(),
            kind: StepKind::Compute(ComputeStep {
                op: "relu".into(),
                attributes: Default::default(),
                declared_input: None,
            }),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: outputs.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn spec(shape: &[usize]) -> TensorSpec {
        TensorSpec::new("t", DType::F32, shape.to_vec())
    }

    /// Step 0 maps [4] -> [4], step 1 expects [2, 2].
    fn io(k: usize, _known: &[Option<TensorSpec>]) -> Result<StepIo> {
        Ok(match k {
            0 => StepIo {
                inputs: vec![spec(&[4])],
                outputs: vec![spec(&[4])],
            },
            _ => StepIo {
                inputs: vec![spec(&[2, 2])],
                outputs: vec![spec(&[2, 2])],
            },
        })
    }

    #[test]
    fn wiring_finds_inputs_sources_and_outputs() {
        let steps = [step("a", &["x"], &["y"])];
        let w = wire(&steps, &[], io).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(w.inputs[0].name, "x");
        assert_eq!(w.steps[0].sources, vec![Source::ProgramInput(0)]);
        assert_eq!(w.outputs[0].1, Source::Step { step: 0, output: 0 });
    }

    #[test]
    fn wiring_errors_name_steps_tensors_and_shapes() {
        let e = wire(
            &[step("a", &["x"], &["y"]), step("b", &["y"], &["z"])],
            &[],
            io,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("step 'a'") && e.contains("step 'b'"), "{e}");
        assert!(e.contains("f32[4]") && e.contains("f32[2, 2]"), "{e}");
        let e = wire(
            &[step("a", &["x"], &["y"]), step("a", &["y"], &["z"])],
            &[],
            io,
        )
        .unwrap_err();
        assert!(e.to_string().contains("two steps are named 'a'"), "{e}");
        let e = wire(&[step("a", &["x"], &["y"])], &["q".into()], io).unwrap_err();
        assert!(e.to_string().contains("'q' is not produced"), "{e}");
        let e = wire(&[step("a", &["x"], &["x"])], &[], io).unwrap_err();
        assert!(e.to_string().contains("produced by both"), "{e}");
    }
}
