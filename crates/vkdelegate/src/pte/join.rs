//! A plan's consecutive compute steps joined into one graph step: the delegate calls and the
//! CPU kernels between them (which the op registry runs on the device) become one compute
//! graph, so that the program records them as one sequence with one memory plan, the graph
//! passes see across what were step boundaries, and the casts at those boundaries
//! (f16 -> f32 staging -> f16) go. Values no later step and no program output reads stop
//! being outputs of the joined graph.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use compute_delegate::TensorId;

use crate::program::{GraphStep, StepKind, StepSpec};

/// `steps` with each run of consecutive graph steps joined into one; `outputs` are the
/// program's outputs. A step whose inputs do not match what the run so far holds (dtype or
/// element count) starts a new run.
pub(crate) fn joined(steps: Vec<StepSpec>, outputs: &[String]) -> Vec<StepSpec> {
    let mut out: Vec<StepSpec> = Vec::new();
    for step in steps {
        if !out.last_mut().is_some_and(|prev| join(prev, &step)) {
            out.push(step);
        }
    }
    let mut read: HashSet<String> = outputs.iter().cloned().collect();
    for step in out.iter_mut().rev() {
        trim_outputs(step, &read);
        read.extend(step.inputs.iter().cloned());
    }
    out
}

/// Appends graph step `next` to graph step `prev`; `false` where either is another kind of
/// step or the graphs do not join.
fn join(prev: &mut StepSpec, next: &StepSpec) -> bool {
    let (StepKind::Graph(p), StepKind::Graph(n)) = (&mut prev.kind, &next.kind) else {
        return false;
    };
    let mut g = (*p.graph).clone();
    let held: HashMap<&str, TensorId> = prev
        .inputs
        .iter()
        .zip(g.input_tensors())
        .chain(prev.outputs.iter().zip(g.output_tensors()))
        .map(|(name, &t)| (name.as_str(), t))
        .collect();
    let bind: Vec<Option<TensorId>> = next
        .inputs
        .iter()
        .map(|name| held.get(name.as_str()).copied())
        .collect();
    if g.append(&n.graph, &bind).is_err() {
        return false;
    }
    let fresh = next.inputs.iter().zip(&bind).filter(|(_, b)| b.is_none());
    prev.inputs.extend(fresh.map(|(name, _)| name.clone()));
    prev.outputs.extend(next.outputs.iter().cloned());
    let first = prev.name.split("..").next().unwrap_or_default().to_owned();
    prev.name = format!("{first}..{}", next.name);
    *p = GraphStep {
        graph: Arc::new(g),
        f16: p.f16 || n.f16,
    };
    true
}

/// A joined graph step without the outputs nothing after it reads (`read`).
fn trim_outputs(step: &mut StepSpec, read: &HashSet<String>) {
    let StepKind::Graph(g) = &mut step.kind else {
        return;
    };
    if !step.name.contains("..") {
        return;
    }
    let keep: Vec<bool> = step.outputs.iter().map(|o| read.contains(o)).collect();
    if keep.iter().all(|&k| k) {
        return;
    }
    let mut graph = (*g.graph).clone();
    graph.keep_outputs(&keep);
    g.graph = Arc::new(graph.without_dead_nodes());
    let mut k = keep.iter();
    step.outputs.retain(|_| k.next().copied().unwrap_or(true));
}
