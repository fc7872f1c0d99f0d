//! Timing of one model on one device: load time, per-inference time, and the host overhead
//! of an execution (input and output copies, checks, submission) over a device-only run of
//! the same recorded work. For `vkdelegate bench` and the criterion benchmarks; behind the
//! feature `bench`.

use std::fmt;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use vk_core::timing::median;
use vk_core::{Device, HostTensor};

use crate::error::Result;
use crate::model::{MemoryMode, Model};

/// What [`bench()`] measured.
#[derive(Debug, Clone)]
pub struct BenchReport {
    /// Decode and load (pipelines, sessions, memory, recording).
    pub load: Duration,
    /// The first execution (it may include lazy driver work).
    pub first_execute: Duration,
    /// Executions timed after the first.
    pub repeats: usize,
    /// Median time of [`Model::execute`].
    pub per_inference: Duration,
    /// Fastest [`Model::execute`].
    pub per_inference_min: Duration,
    /// Median time of a device-only run (submission of the same segments and fence wait,
    /// without host copies).
    pub device_only: Duration,
    /// `per_inference - device_only`: what an execution costs the host beyond the GPU work.
    pub host_overhead: Duration,
    /// Memory placement used.
    pub memory_mode: MemoryMode,
}

/// Deterministic inputs of the model's shapes and dtypes (a byte pattern; for int8 and f32
/// alike, small finite values).
pub fn synthetic_inputs(model: &Model) -> Result<Vec<HostTensor>> {
    model
        .inputs()
        .iter()
        .map(|info| {
            let mut t = HostTensor::zeros(info.dtype, info.shape.clone())
                .map_err(|e| crate::Error::Unsupported(e.to_string()))?;
            if info.dtype == vk_core::DType::F32 {
                for (i, c) in t.bytes_mut().chunks_exact_mut(4).enumerate() {
                    let v = ((i % 97) as f32) / 97.0 - 0.5;
                    c.copy_from_slice(&v.to_le_bytes());
                }
            } else {
                for (i, b) in t.bytes_mut().iter_mut().enumerate() {
                    *b = (i % 61) as u8;
                }
            }
            Ok(t)
        })
        .collect()
}

/// Loads `bytes` on `device` and times it: load, one first execution, then `repeats`
/// executions and `repeats` device-only runs (at least one each). `inputs` default to
/// [`synthetic_inputs`].
pub fn bench(
    bytes: &[u8],
    device: &Device,
    inputs: Option<&[HostTensor]>,
    repeats: usize,
) -> Result<BenchReport> {
    bench_with(bytes, device, inputs, repeats, MemoryMode::Auto)
}

/// As [`bench()`], with the model's input and output memory placed as `memory` says.
pub fn bench_with(
    bytes: &[u8],
    device: &Device,
    inputs: Option<&[HostTensor]>,
    repeats: usize,
    memory: MemoryMode,
) -> Result<BenchReport> {
    let repeats = repeats.max(1);
    let t = Instant::now();
    let options = crate::LoadOptions {
        memory,
        ..Default::default()
    };
    let mut model = Model::load_with(bytes, device, &options)?;
    let load = t.elapsed();
    let owned;
    let inputs = match inputs {
        Some(i) => i,
        None => {
            owned = synthetic_inputs(&model)?;
            &owned
        }
    };
    let t = Instant::now();
    model.execute(inputs)?;
    let first_execute = t.elapsed();
    let mut exec = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let t = Instant::now();
        model.execute(inputs)?;
        exec.push(t.elapsed());
    }
    let mut dev = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let t = Instant::now();
        // SAFETY: no semaphores; inputs were written by the last execution, which was waited
        // for (execute waits before returning).
        unsafe { model.submit(&[], &[]) }?;
        model.wait()?;
        dev.push(t.elapsed());
    }
    let per_inference_min = exec.iter().min().copied().unwrap_or_default();
    let per_inference = median(exec);
    let device_only = median(dev);
    Ok(BenchReport {
        load,
        first_execute,
        repeats,
        per_inference,
        per_inference_min,
        device_only,
        host_overhead: per_inference.saturating_sub(device_only),
        memory_mode: model.memory_mode(),
    })
}

impl BenchReport {
    /// As JSON (times in milliseconds).
    pub fn to_json(&self) -> Value {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        json!({
            "load_ms": ms(self.load),
            "first_execute_ms": ms(self.first_execute),
            "repeats": self.repeats,
            "per_inference_ms": ms(self.per_inference),
            "per_inference_min_ms": ms(self.per_inference_min),
            "device_only_ms": ms(self.device_only),
            "host_overhead_ms": ms(self.host_overhead),
            "memory_mode": format!("{:?}", self.memory_mode),
        })
    }
}

impl fmt::Display for BenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "load {:.1} ms, first execute {:.2} ms, per inference {:.3} ms (median of {}, min \
             {:.3} ms), device-only {:.3} ms, host overhead {:.3} ms per execute, memory {:?}",
            self.load.as_secs_f64() * 1e3,
            self.first_execute.as_secs_f64() * 1e3,
            self.per_inference.as_secs_f64() * 1e3,
            self.repeats,
            self.per_inference_min.as_secs_f64() * 1e3,
            self.device_only.as_secs_f64() * 1e3,
            self.host_overhead.as_secs_f64() * 1e3,
            self.memory_mode
        )
    }
}
