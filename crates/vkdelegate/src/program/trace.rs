//! The device timeline of one execution as Chrome trace JSON (the format Perfetto and
//! `chrome://tracing` open): one complete event per dispatch, laid end to end in recording
//! order, each step a track of its own, with the dispatch's op, kernel, output shape, work
//! groups and float type as arguments.

use serde_json::{Value, json};

use super::DispatchProfile;

/// The trace of `dispatches` (from [`super::Program::profile`]).
pub fn chrome_trace(dispatches: &[DispatchProfile]) -> Value {
    let mut steps: Vec<&str> = Vec::new();
    let mut events = Vec::with_capacity(dispatches.len() + 4);
    let mut at = 0.0f64;
    for d in dispatches {
        let track = match steps.iter().position(|s| *s == d.step) {
            Some(i) => i,
            None => {
                steps.push(&d.step);
                steps.len() - 1
            }
        };
        let dur = d.time.as_secs_f64() * 1e6;
        let (op, kernel) = match d.op.split_once(" [") {
            Some((op, k)) => (op, k.trim_end_matches(']')),
            None => (d.op.as_str(), ""),
        };
        events.push(json!({
            "name": op,
            "cat": kernel,
            "ph": "X",
            "ts": at,
            "dur": dur,
            "pid": 1,
            "tid": track,
            "args": {
                "step": d.step,
                "kernel": kernel,
                "shape": d.shape,
                "groups": d.groups,
                "float": d.float_type.to_string(),
            },
        }));
        at += dur;
    }
    for (i, s) in steps.iter().enumerate() {
        events.push(
            json!({"name": "thread_name", "ph": "M", "pid": 1, "tid": i, "args": {"name": s}}),
        );
    }
    json!({"traceEvents": events, "displayTimeUnit": "ns"})
}

impl super::Program {
    /// The device timeline of one execution on the tensors the last execution left on the
    /// device ([`super::Program::profile`]) as Chrome trace JSON. Run `execute` first.
    pub fn trace(&mut self) -> super::Result<Value> {
        Ok(chrome_trace(&self.profile()?))
    }
}
