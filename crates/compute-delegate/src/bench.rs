//! Benchmarks: per op and shape, device time (timestamp queries; min, median and max of
//! several runs, a [`vk_core::timing::Summary`] in milliseconds), end-to-end time (host
//! inputs to host outputs; the same), throughput, and the ratio to a baseline measured in the
//! same run on the same device: a vec4 copy shader's bandwidth (what the device's shaders can
//! stream) for memory-bound ops, and the fp32 FMA peak (a register-only FMA probe) for conv
//! and matmul. `vkCmdCopyBuffer` is measured as an extra row (`copy_buffer`): some drivers
//! run it far below what shaders stream, so it is no baseline.
//!
//! The timed runs of a case follow an untimed warm-up (the FMA probe, for about
//! [`WARM_UP`]) in the same command buffer, each run between two timestamps of one query pool,
//! so the host does not wait between warm-up and timed runs and the GPU's clocks stay up.
//! A case whose spread (`(max - min) / median`) exceeds [`NOISY_SPREAD`] is flagged.
//!
//! fp16 rows (`add_f16`, `softmax_f16`, `conv3x3_f16`, `matmul_f16`) run the f16 variants on
//! the same shapes as their fp32 rows and also give their speed-up over them
//! ([`BenchRow::vs_f32`]); on a device without `crate::F16_FEATURES` enabled they fail with a
//! named error and the other rows still run ([`bench_requirements`] asks for the features
//! where the device has them). Every row names the kernels that ran.

use std::time::{Duration, Instant};

use vk_core::barrier::{self, Access};
use vk_core::timing::{Summary, ms};
use vk_core::{
    Buffer, DType, Device, HostTensor, MemoryLocation, Submission, Timestamps, VkResultExt, vk,
};

use crate::error::{Error, Result};
use crate::graph::{Conv2d, GraphBuilder, Pool2d, TensorId};
use crate::kernels::{Kernel, Precision, Shader};
use crate::ops::Arg;
use crate::runtime::Graph;

/// A row whose device or end-to-end spread, `(max - min) / median`, is above this is flagged
/// as noisy.
pub const NOISY_SPREAD: f64 = 0.10;

/// How long the untimed warm-up before each case's timed runs keeps the GPU busy.
pub const WARM_UP: Duration = Duration::from_millis(200);

/// At most this many warm-up dispatches are recorded (for a very fast probe).
const MAX_WARM_UP_DISPATCHES: usize = 10_000;

/// One benchmark result.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchRow {
    /// Op name (`add`, `conv3x3`, ..., `copy_buffer` for `vkCmdCopyBuffer`, or a baseline:
    /// `copy` for the copy shader, `fma_peak`).
    pub op: String,
    /// Shape description.
    pub shape: String,
    /// Median device time in milliseconds (`device.median`).
    pub device_ms: f64,
    /// Median wall time of one `execute` in milliseconds (host copies included); 0 where
    /// not measured (baselines, `copy_buffer`).
    pub end_to_end_ms: f64,
    /// Device time of the timed runs in milliseconds (timestamps around each run's
    /// dispatches; the median of an even count is the mean of the two middle runs);
    /// [`Summary::NAN`] where the op failed.
    pub device: Summary,
    /// Wall time of the `execute` calls in milliseconds (median as for `device`); `None`
    /// where not measured.
    pub end_to_end: Option<Summary>,
    /// Throughput in `unit`, from the median device time.
    pub throughput: f64,
    /// `GB/s` (bytes read + written) or `GFLOP/s`.
    pub unit: &'static str,
    /// The baseline's throughput in the same unit.
    pub baseline: f64,
    /// What the baseline is.
    pub baseline_name: &'static str,
    /// `throughput / baseline`.
    pub ratio: f64,
    /// Why this op could not be measured (its figures are NaN); the other rows still are.
    pub error: Option<String>,
    /// The kernels of the op's dispatches, in order, repeats dropped (`Gemm_f16`, ...); empty
    /// for the baselines.
    pub kernels: Vec<String>,
    /// The float type of each of [`BenchRow::kernels`] (f16 for fp16 variants and for the
    /// cooperative-matrix kernels).
    pub float_types: Vec<DType>,
    /// For an fp16 row: the median device time of the same fp32 case over this row's (its
    /// speed-up), where both ran.
    pub vs_f32: Option<f64>,
    /// For an op of several dispatches: each dispatch's kernel and device time in ms, from one
    /// profiled run (a share of the row's time; dispatches without a barrier between them may
    /// overlap).
    pub dispatches: Vec<(String, f64)>,
}

impl BenchRow {
    /// Whether the device or the end-to-end spread is above [`NOISY_SPREAD`].
    pub fn noisy(&self) -> bool {
        self.device.is_noisy(NOISY_SPREAD)
            || self.end_to_end.is_some_and(|s| s.is_noisy(NOISY_SPREAD))
    }

    /// One line: op, shape, device ms (min / median / max), end-to-end ms (same), throughput,
    /// ratio, and a `NOISY` flag naming the spreads above [`NOISY_SPREAD`].
    pub fn line(&self) -> String {
        if let Some(e) = &self.error {
            return format!("{:<12} {:<26} FAILED: {e}", self.op, self.shape);
        }
        let three = |s: &Summary| format!("{:>9.3} {:>9.3} {:>9.3}", s.min, s.median, s.max);
        let e2e = self
            .end_to_end
            .as_ref()
            .map_or_else(|| format!("{:>29}", "-"), three);
        let mut flags = Vec::new();
        if self.device.is_noisy(NOISY_SPREAD) {
            flags.push(format!(
                "device spread {:.0}%",
                self.device.spread() * 100.0
            ));
        }
        if let Some(s) = self.end_to_end.filter(|s| s.is_noisy(NOISY_SPREAD)) {
            flags.push(format!("e2e spread {:.0}%", s.spread() * 100.0));
        }
        let flag = if flags.is_empty() {
            String::new()
        } else {
            format!("  NOISY ({})", flags.join(", "))
        };
        let vs_f32 = self
            .vs_f32
            .map_or_else(String::new, |r| format!("  {r:.2}x the f32 case"));
        let kernels = if self.kernels.is_empty() {
            String::new()
        } else {
            format!("  [{}]", self.kernels.join(" "))
        };
        let split = if self.dispatches.is_empty() {
            String::new()
        } else {
            let parts: Vec<String> = self
                .dispatches
                .iter()
                .map(|(k, t)| format!("{k} {t:.3}"))
                .collect();
            format!("  (ms: {})", parts.join(", "))
        };
        format!(
            "{:<12} {:<26} device {} ms  e2e {} ms  {:>10.1} {:<7}  {:>6.1}% of {} ({:.1} {})\
             {vs_f32}{kernels}{split}{flag}",
            self.op,
            self.shape,
            three(&self.device),
            e2e,
            self.throughput,
            self.unit,
            self.ratio * 100.0,
            self.baseline_name,
            self.baseline,
            self.unit
        )
    }

    /// The header matching [`BenchRow::line`]'s columns.
    pub fn header() -> String {
        format!(
            "{:<12} {:<26} device {:>9} {:>9} {:>9} ms  e2e {:>9} {:>9} {:>9} ms",
            "op", "shape", "min", "median", "max", "min", "median", "max"
        )
    }
}

const COPY_BASELINE: &str = "copy shader bandwidth";
const FMA_BASELINE: &str = "fp32 FMA peak";

/// What the benchmarks need of a device: [`crate::requirements`], and the f16 features as
/// optional (the fp16 rows run where the device has them).
pub fn bench_requirements() -> vk_core::Requirements {
    crate::requirements().optional_features(crate::F16_FEATURES | crate::COOPERATIVE_FEATURES)
}

fn pattern(shape: &[usize], seed: usize) -> Result<HostTensor> {
    pattern_as(shape, seed, DType::F32)
}

/// A deterministic pattern in [-0.5, 0.5) as an f32 or f16 tensor.
fn pattern_as(shape: &[usize], seed: usize, dtype: DType) -> Result<HostTensor> {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| ((i * 7 + seed * 13) % 1021) as f32 / 1021.0 - 0.5)
        .collect();
    let t = if dtype == DType::F16 {
        let bytes = v
            .iter()
            .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
            .collect();
        HostTensor::new(DType::F16, shape.to_vec(), bytes)
    } else {
        HostTensor::from_f32(shape.to_vec(), &v)
    };
    t.map_err(|e| Error::Graph(format!("bench input: {e}")))
}

/// Records commands into a command buffer: `cmd` is a primary command buffer of the timer's
/// device, recording, outside a render pass, on a queue family with compute.
type Record<'a> = &'a dyn Fn(vk::CommandBuffer);

/// What [`Timer::time`] measured.
struct Timed {
    /// Device time of each timed run, in milliseconds.
    runs: Vec<f64>,
    /// Device time of the warm-up, in milliseconds.
    warm_up_ms: f64,
}

/// Times recorded work on the device. One command buffer holds an untimed warm-up and then
/// the timed runs, each between two timestamps (two queries per run, two more around the
/// warm-up), separated by full barriers; it is submitted once and the host waits only at the
/// end, so the GPU stays busy from the warm-up to the last timed run.
struct Timer {
    // Field order is drop order: the submission (its drop waits for pending work) first.
    submission: Submission,
    queries: Timestamps,
    /// Timed runs the query pool has room for.
    capacity: usize,
    /// `timestamp_valid_bits` of the queue family, as a mask.
    mask: u64,
}

impl Timer {
    fn new(device: &Device, capacity: usize, valid_bits: u32) -> Result<Timer> {
        let capacity = capacity.max(1);
        let count = u32::try_from(2 * capacity + 2).map_err(|_| {
            Error::Unsupported(format!("bench: {capacity} timed runs are too many"))
        })?;
        let queries = Timestamps::new(device, count)?.ok_or_else(|| {
            Error::Unsupported("bench: the queue family has no timestamps: no device time".into())
        })?;
        Ok(Timer {
            submission: Submission::new(device, 1, "compute bench")?,
            queries,
            capacity,
            mask: if valid_bits >= 64 {
                u64::MAX
            } else {
                (1u64 << valid_bits) - 1
            },
        })
    }

    /// Records `warm` `warm_count` times, then `runs` timed runs of `run`, submits them at
    /// once and waits for the end.
    ///
    /// # Safety
    /// `warm` and `run` record only valid commands into the command buffer they are given
    /// (see [`Record`]), using objects of this device that stay alive until this returns and
    /// that no other pending submission uses. The timer puts a full barrier before each
    /// recorded segment.
    unsafe fn time(
        &mut self,
        warm: Record<'_>,
        warm_count: usize,
        run: Record<'_>,
        runs: usize,
    ) -> Result<Timed> {
        if self.submission.is_pending() {
            return Err(Error::Unsupported(
                "bench: an earlier timed submission never finished".into(),
            ));
        }
        let runs = runs.clamp(1, self.capacity);
        let count = 2 * runs as u32 + 2;
        let cmd = self.submission.begin(0)?;
        let device = self.submission.device().clone();
        let qp = &self.queries;
        let stamp = |stage, query| {
            // SAFETY: `cmd` is recording; `query` is below `count`, reset at the start.
            unsafe { qp.write(cmd, stage, query) }
        };
        let full_barrier = || {
            // SAFETY: `cmd` is recording, outside a render pass; a global memory barrier
            // needs no resources.
            unsafe { barrier::memory_barrier(&device, cmd, Access::ANY_WRITE, Access::ANY) }
        };
        // SAFETY: recording with live handles; the closures' commands are the caller's
        // contract.
        unsafe {
            qp.reset(cmd);
            stamp(vk::PipelineStageFlags::TOP_OF_PIPE, 0);
            for _ in 0..warm_count {
                full_barrier();
                warm(cmd);
            }
            stamp(vk::PipelineStageFlags::BOTTOM_OF_PIPE, 1);
            for i in 0..runs as u32 {
                full_barrier();
                // After the barrier, at the bottom of the pipe: when everything before has
                // finished, i.e. when this run can start.
                stamp(vk::PipelineStageFlags::BOTTOM_OF_PIPE, 2 + 2 * i);
                run(cmd);
                stamp(vk::PipelineStageFlags::BOTTOM_OF_PIPE, 3 + 2 * i);
            }
        }
        self.submission.end(0)?;
        // SAFETY: the command buffer is executable; what it uses is the caller's contract.
        unsafe { self.submission.submit(0, &[], &[]) }?;
        self.submission.wait()?;
        let ts = self.queries.read_ticks(count)?;
        let period = f64::from(device.capabilities().limits.timestamp_period());
        let span =
            |a: usize, b: usize| (ts[b].wrapping_sub(ts[a]) & self.mask) as f64 * period * 1e-6;
        Ok(Timed {
            runs: (0..runs).map(|i| span(2 + 2 * i, 3 + 2 * i)).collect(),
            warm_up_ms: span(0, 1),
        })
    }
}

/// How many warm-up dispatches of a probe taking `probe_ms` last about [`WARM_UP`].
fn warm_up_count(probe_ms: f64) -> usize {
    if probe_ms.is_finite() && probe_ms > 0.0 {
        ((ms(WARM_UP) / probe_ms).ceil() as usize).clamp(1, MAX_WARM_UP_DISPATCHES)
    } else {
        MAX_WARM_UP_DISPATCHES
    }
}

/// Two device buffers and the vec4 copy shader between them (`copy_vec4.comp`), for the
/// copy-shader baseline and the `vkCmdCopyBuffer` row.
struct CopyBaseline {
    device: Device,
    src: Buffer,
    dst: Buffer,
    /// Bytes copied per run.
    bytes: u64,
    groups: u32,
    module: vk::ShaderModule,
    set_layout: vk::DescriptorSetLayout,
    layout: vk::PipelineLayout,
    pipeline: vk::Pipeline,
    descriptor_pool: vk::DescriptorPool,
    set: vk::DescriptorSet,
}

impl CopyBaseline {
    /// Buffers of `bytes` (rounded down to whole vec4s and to what one storage binding may
    /// hold) and the pipeline.
    fn new(device: &Device, bytes: u64) -> Result<CopyBaseline> {
        let lim = &device.capabilities().limits;
        let bytes = bytes.min(u64::from(lim.max_storage_buffer_range)) / 16 * 16;
        let n4 = u32::try_from(bytes / 16).map_err(|_| {
            Error::Unsupported(format!("bench: a copy of {bytes} bytes has too many vec4s"))
        })?;
        if n4 == 0 {
            return Err(Error::Unsupported(format!(
                "bench: a copy baseline of {bytes} bytes (maxStorageBufferRange {})",
                lim.max_storage_buffer_range
            )));
        }
        let usage = vk::BufferUsageFlags::STORAGE_BUFFER
            | vk::BufferUsageFlags::TRANSFER_SRC
            | vk::BufferUsageFlags::TRANSFER_DST;
        let buffer = |what| Buffer::new(device, bytes, MemoryLocation::Device, usage, what);
        let cap = u64::from(lim.max_compute_work_group_count[0].min(65535));
        let mut c = CopyBaseline {
            device: device.clone(),
            src: buffer("copy baseline source")?,
            dst: buffer("copy baseline destination")?,
            bytes,
            // Two vec4s per thread and iteration, as in the elementwise kernels.
            groups: u64::from(n4).div_ceil(2).div_ceil(256).clamp(1, cap) as u32,
            module: vk::ShaderModule::null(),
            set_layout: vk::DescriptorSetLayout::null(),
            layout: vk::PipelineLayout::null(),
            pipeline: vk::Pipeline::null(),
            descriptor_pool: vk::DescriptorPool::null(),
            set: vk::DescriptorSet::null(),
        };
        c.create_pipeline()?;
        c.create_descriptors()?;
        Ok(c)
    }

    fn create_pipeline(&mut self) -> Result<()> {
        let d = self.device.raw();
        let code = Shader {
            kernel: Kernel::CopyVec4,
            precision: Precision::F32,
        }
        .words()?;
        let types = vec![vk::DescriptorType::STORAGE_BUFFER; Kernel::CopyVec4.bindings()];
        // SAFETY: `d` is the probe's live device; `Drop` destroys both layouts.
        (self.set_layout, self.layout) = unsafe { vk_core::compute_layouts(d, &types, 4) }?;
        // SAFETY: valid create infos; every object is destroyed once, in `Drop`.
        unsafe {
            self.module = d
                .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&code), None)
                .vk("vkCreateShaderModule")?;
            let info = [vk::ComputePipelineCreateInfo::default()
                .stage(
                    vk::PipelineShaderStageCreateInfo::default()
                        .stage(vk::ShaderStageFlags::COMPUTE)
                        .module(self.module)
                        .name(c"main"),
                )
                .layout(self.layout)];
            self.pipeline = d
                .create_compute_pipelines(vk::PipelineCache::null(), &info, None)
                .map_err(|(_, r)| r)
                .vk("vkCreateComputePipelines")?[0];
        }
        Ok(())
    }

    fn create_descriptors(&mut self) -> Result<()> {
        let d = self.device.raw();
        let sizes = [vk::DescriptorPoolSize::default()
            .ty(vk::DescriptorType::STORAGE_BUFFER)
            .descriptor_count(2)];
        let infos = [self.src.raw(), self.dst.raw()].map(|b| {
            [vk::DescriptorBufferInfo::default()
                .buffer(b)
                .offset(0)
                .range(self.bytes)]
        });
        // SAFETY: valid create and allocate infos; the pool is destroyed once, in `Drop`; the
        // writes name live buffers within their sizes and the set's two bindings.
        unsafe {
            self.descriptor_pool = d
                .create_descriptor_pool(
                    &vk::DescriptorPoolCreateInfo::default()
                        .max_sets(1)
                        .pool_sizes(&sizes),
                    None,
                )
                .vk("vkCreateDescriptorPool")?;
            let layouts = [self.set_layout];
            self.set = d
                .allocate_descriptor_sets(
                    &vk::DescriptorSetAllocateInfo::default()
                        .descriptor_pool(self.descriptor_pool)
                        .set_layouts(&layouts),
                )
                .vk("vkAllocateDescriptorSets")?[0];
            let writes: Vec<_> = infos
                .iter()
                .enumerate()
                .map(|(i, info)| {
                    vk::WriteDescriptorSet::default()
                        .dst_set(self.set)
                        .dst_binding(i as u32)
                        .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                        .buffer_info(info)
                })
                .collect();
            d.update_descriptor_sets(&writes, &[]);
        }
        Ok(())
    }

    /// Records one run of the copy shader.
    ///
    /// # Safety
    /// `cmd` is as [`Record`] says; it is not submitted after `self` drops.
    unsafe fn record_shader(&self, cmd: vk::CommandBuffer) {
        let d = self.device.raw();
        let n4 = (self.bytes / 16) as u32;
        // SAFETY: the caller's contract; the pipeline, layout and set are live and match.
        unsafe {
            d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, self.pipeline);
            d.cmd_bind_descriptor_sets(
                cmd,
                vk::PipelineBindPoint::COMPUTE,
                self.layout,
                0,
                &[self.set],
                &[],
            );
            d.cmd_push_constants(
                cmd,
                self.layout,
                vk::ShaderStageFlags::COMPUTE,
                0,
                &n4.to_le_bytes(),
            );
            d.cmd_dispatch(cmd, self.groups, 1, 1);
        }
    }

    /// Records one `vkCmdCopyBuffer` of the same bytes.
    ///
    /// # Safety
    /// As [`CopyBaseline::record_shader`].
    unsafe fn record_copy_buffer(&self, cmd: vk::CommandBuffer) {
        let region = [vk::BufferCopy::default().size(self.bytes)];
        // SAFETY: the caller's contract; the copy stays within both buffers.
        unsafe {
            self.device
                .raw()
                .cmd_copy_buffer(cmd, self.src.raw(), self.dst.raw(), &region)
        };
    }
}

impl Drop for CopyBaseline {
    fn drop(&mut self) {
        let d = self.device.raw();
        // SAFETY: created from this device (or null), destroyed once; every submission that
        // used them was waited for by the timer. The buffers drop after this.
        unsafe {
            d.destroy_descriptor_pool(self.descriptor_pool, None);
            d.destroy_pipeline(self.pipeline, None);
            d.destroy_pipeline_layout(self.layout, None);
            d.destroy_descriptor_set_layout(self.set_layout, None);
            d.destroy_shader_module(self.module, None);
        }
    }
}

/// Runs `run` (the probe itself when `None`) `runs` times after `warm_count` runs of the FMA
/// probe, all in one submission (see [`Timer`]).
///
/// # Safety
/// `run` as [`Timer::time`] requires; `probe` has no pending submission.
unsafe fn time_after_probe(
    timer: &mut Timer,
    probe: &Graph,
    warm_count: usize,
    runs: usize,
    run: Option<Record<'_>>,
) -> Result<Summary> {
    let warm = |cmd| {
        // SAFETY: `cmd` is the timer's recording command buffer; the probe is not pending,
        // outlives the timing and writes only its own output buffer.
        unsafe { probe.record_into(cmd) }
    };
    // SAFETY: `warm` as above; `run` is the caller's contract.
    let t = unsafe { timer.time(&warm, warm_count, run.unwrap_or(&warm), runs) }?;
    log::debug!(
        "bench: warm-up of {warm_count} probe dispatches took {:.1} ms of device time",
        t.warm_up_ms
    );
    Ok(summary(&t.runs))
}

/// The summary of timed runs in milliseconds, the median of an even count being the mean of
/// the two middle runs ([`Summary::NAN`] when there are none).
fn summary(runs_ms: &[f64]) -> Summary {
    Summary::of_mean_median(runs_ms).unwrap_or(Summary::NAN)
}

/// The timer, the FMA probe that warms the GPU up, and how often to run things.
struct Bench {
    timer: Timer,
    probe: Graph,
    /// Probe dispatches that keep the GPU busy for about [`WARM_UP`].
    warm_count: usize,
    device_runs: usize,
    e2e_runs: usize,
}

impl Bench {
    fn new(device: &Device, s: &Sizes, valid_bits: u32) -> Result<Bench> {
        let mut g = GraphBuilder::new();
        let probe = g.fma_probe(s.fma.0, s.fma.1)?;
        g.output(probe)?;
        Ok(Bench {
            timer: Timer::new(device, s.device_runs, valid_bits)?,
            probe: g.build(device)?,
            warm_count: 1,
            device_runs: s.device_runs,
            e2e_runs: s.e2e_runs,
        })
    }

    /// Times the FMA probe and sets the warm-up from its time: a first pass, sized from one
    /// lone run (at whatever clocks the GPU had), only calibrates.
    fn measure_probe(&mut self) -> Result<Summary> {
        // SAFETY: no semaphores.
        unsafe { self.probe.submit(&[], &[]) }?;
        self.probe.wait()?;
        let lone = self.probe.last_device_time().ok_or_else(|| {
            Error::Unsupported("bench: the queue family has no timestamps: no device time".into())
        })?;
        self.warm_count = warm_up_count(ms(lone));
        let mut spread = Summary::NAN;
        for _ in 0..2 {
            // SAFETY: the probe is not pending (waited above, and by each timing).
            spread = unsafe {
                time_after_probe(
                    &mut self.timer,
                    &self.probe,
                    self.warm_count,
                    self.device_runs,
                    None,
                )
            }?;
            self.warm_count = warm_up_count(spread.median);
        }
        Ok(spread)
    }

    /// Times `run` after the warm-up.
    ///
    /// # Safety
    /// As [`Timer::time`] requires of `run`.
    unsafe fn time(&mut self, run: Record<'_>) -> Result<Summary> {
        // SAFETY: the caller's contract for `run`; the probe is never left pending.
        unsafe {
            time_after_probe(
                &mut self.timer,
                &self.probe,
                self.warm_count,
                self.device_runs,
                Some(run),
            )
        }
    }

    /// Device and end-to-end spreads of a graph: `e2e_runs` host executions, then the timed
    /// device-resident runs after the warm-up.
    fn time_graph(&mut self, g: &mut Graph, inputs: &[HostTensor]) -> Result<(Summary, Summary)> {
        let mut e2e = Vec::new();
        for _ in 0..self.e2e_runs.max(1) {
            let start = Instant::now();
            g.execute(inputs)?;
            e2e.push(ms(start.elapsed()));
        }
        g.wait()?;
        let graph = &*g;
        let run = |cmd| {
            // SAFETY: `cmd` is the timer's recording command buffer; the graph is not pending
            // (waited above), its inputs were written by a finished execution, the timer's
            // barriers order the runs, and the graph outlives the timing.
            unsafe { graph.record_into(cmd) }
        };
        // SAFETY: `run` as above.
        let device = unsafe { self.time(&run) }?;
        Ok((device, summary(&e2e)))
    }
}

/// What an op moves or computes per run.
enum Work {
    /// Bytes read plus written.
    Bytes(f64),
    /// Floating-point operations.
    Flops(f64),
}

type MakeGraph = Box<dyn FnOnce() -> Result<(GraphBuilder, Vec<HostTensor>)>>;

/// One benchmark: its graph is made only when the filter selects it.
struct Case {
    op: &'static str,
    /// For an fp16 case, the op of the fp32 case of the same shape.
    f32_op: Option<&'static str>,
    shape: String,
    work: Work,
    make: MakeGraph,
}

/// A shape as `[1,64,224,224]`.
fn shape_str(v: &[usize]) -> String {
    format!("{v:?}").replace(' ', "")
}

/// The conv3x3 case in `dtype`: `c` to `c` channels at `hw` x `hw`, padding 1, with a bias;
/// fp16 cases name the fp32 one.
fn conv3x3_case(c: usize, hw: usize, dtype: vk_core::DType) -> Case {
    let xs = [1, c, hw, hw];
    let f16 = dtype == vk_core::DType::F16;
    Case {
        op: if f16 { "conv3x3_f16" } else { "conv3x3" },
        f32_op: f16.then_some("conv3x3"),
        shape: format!("{c}->{c} {}", shape_str(&xs)),
        work: Work::Flops(2.0 * (c * c * 9 * hw * hw) as f64),
        make: Box::new(move || {
            let ws = [c, c, 3, 3];
            let mut g = GraphBuilder::new();
            let x = g.input("x", dtype, &xs)?;
            let w = g.constant("w", pattern_as(&ws, 3, dtype)?)?;
            let b = g.constant("b", pattern_as(&[c], 4, dtype)?)?;
            let p = Conv2d {
                padding: [1, 1],
                ..Conv2d::default()
            };
            let y = g.conv2d(x, w, Some(b), p)?;
            g.output(y)?;
            Ok((g, vec![pattern_as(&xs, 1, dtype)?]))
        }),
    }
}

/// The fp16 attention case: `heads` heads of `tokens` queries and keys of `d`, as a model
/// spells it (the fusion makes it one attention).
fn attention_case(heads: usize, tokens: usize, d: usize) -> Case {
    let h = vk_core::DType::F16;
    let qs = [heads, tokens, d];
    Case {
        op: "attention_f16",
        f32_op: None,
        shape: shape_str(&qs),
        work: Work::Flops(4.0 * (heads * tokens * tokens * d) as f64),
        make: Box::new(move || {
            let mut g = GraphBuilder::new();
            let q = g.input("q", h, &qs)?;
            let k = g.input("k", h, &qs)?;
            let v = g.input("v", h, &qs)?;
            let kt = g.permute(k, &[0, 2, 1])?;
            let scores = g.matmul(q, kt)?;
            let scores = g.mul_scalar(scores, 1.0 / (d as f32).sqrt())?;
            let p = g.softmax(scores, -1)?;
            let y = g.matmul(p, v)?;
            g.output(y)?;
            let inputs = (1..=3).map(|seed| pattern_as(&qs, seed, h));
            Ok((g, inputs.collect::<Result<_>>()?))
        }),
    }
}

struct Sizes {
    big: Vec<usize>,
    conv: [(usize, usize); 2],
    matmul: usize,
    /// More GEMM shapes: `(batch, m, k, n)`.
    gemms: Vec<(usize, usize, usize, usize)>,
    softmax: [usize; 2],
    /// 4-bit products of one row, `(n, k, chain)`, as a decode step runs them (a square one
    /// as a chain of products, each reading the last: the time of dependent dispatches) ...
    q4: Vec<(usize, usize, usize)>,
    /// ... and a gated MLP `(hidden, dim)` on an RMS norm, with its residual.
    mlp_q4: (usize, usize),
    /// 4-bit products of a prompt, `(rows, n, k)`: the weights unpacked on the device, then
    /// a GEMM (in fp16 where `VKDELEGATE_PACKED_F16` or the device says so).
    q4_prompt: Vec<(usize, usize, usize)>,
    /// fp16 products of a `[n, k]` activation by a constant `[m, k]` weight, `(m, k, ns)`: the
    /// shapes of llama.cpp's `test-backend-ops perf -o MUL_MAT`.
    mul_mat: (usize, usize, Vec<usize>),
    /// fp16 attentions `softmax(q k^T / sqrt(d)) v`, `(heads, tokens, d)`: ViT-B/16's and a
    /// long sequence's.
    attention: Vec<(usize, usize, usize)>,
    copy_bytes: u64,
    fma: (u32, u32),
    e2e_runs: usize,
    device_runs: usize,
}

impl Sizes {
    fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                big: vec![4, 256, 256],
                conv: [(16, 32), (32, 16)],
                matmul: 256,
                gemms: vec![(1, 1, 256, 256), (1, 256, 256, 16), (4, 64, 64, 64)],
                softmax: [256, 1024],
                q4: vec![(64, 256, 1), (64, 64, 4), (8200, 64, 1)],
                mlp_q4: (512, 128),
                q4_prompt: vec![(64, 2048, 512)],
                mul_mat: (256, 512, vec![1, 8, 64]),
                attention: vec![(2, 80, 64)],
                copy_bytes: 16 << 20,
                fma: (64, 256),
                e2e_runs: 5,
                device_runs: 7,
            }
        } else {
            Sizes {
                big: vec![256, 1024, 1024],
                conv: [(64, 224), (256, 56)],
                matmul: 4096,
                gemms: vec![(1, 1, 4096, 4096), (1, 4096, 4096, 64), (16, 256, 256, 256)],
                softmax: [16384, 4096],
                // Llama-3.2-1B's: q and o, k and v, down, the output matrix.
                // The first: the floor of a dependent dispatch.
                q4: vec![
                    (64, 64, 16),
                    (2048, 2048, 16),
                    (512, 2048, 1),
                    (2048, 8192, 1),
                    (128256, 2048, 1),
                ],
                mlp_q4: (8192, 2048),
                // Llama-3.2-1B's q and o, and its up, on prompts of 128 and 512 tokens.
                q4_prompt: vec![(128, 2048, 2048), (512, 2048, 2048), (512, 8192, 2048)],
                mul_mat: (4096, 14336, vec![1, 2, 3, 4, 5, 8, 512]),
                attention: vec![(12, 197, 64), (32, 1024, 64)],
                copy_bytes: 1 << 30,
                fma: (8192, 4096),
                e2e_runs: 3,
                device_runs: 20,
            }
        }
    }
}

/// Throughput in units per second (`amount` per run over the median device time, giga).
fn throughput(amount: f64, device: &Summary) -> f64 {
    amount / (device.median * 1e6)
}

/// A row of a measured (or failed) case against a baseline.
fn row(
    op: &str,
    shape: String,
    work: &Work,
    measured: Result<(Summary, Option<Summary>)>,
    baseline: (f64, &'static str),
) -> BenchRow {
    let (unit, amount) = match *work {
        Work::Bytes(b) => ("GB/s", b),
        Work::Flops(f) => ("GFLOP/s", f),
    };
    let (device, end_to_end, error) = match measured {
        Ok((d, e)) => (d, e, None),
        Err(e) => {
            log::error!("bench {op} {shape}: {e}");
            (Summary::NAN, None, Some(e.to_string()))
        }
    };
    let throughput = throughput(amount, &device);
    BenchRow {
        op: op.into(),
        shape,
        device_ms: device.median,
        end_to_end_ms: match (&end_to_end, &error) {
            (Some(e), _) => e.median,
            (None, None) => 0.0,
            (None, Some(_)) => f64::NAN,
        },
        device,
        end_to_end,
        throughput,
        unit,
        baseline: baseline.0,
        baseline_name: baseline.1,
        ratio: throughput / baseline.0,
        error,
        kernels: Vec::new(),
        float_types: Vec::new(),
        vs_f32: None,
        dispatches: Vec::new(),
    }
}

fn check_timestamps(device: &Device) -> Result<u32> {
    let family = device.queue().family() as usize;
    let ts_bits = device
        .capabilities()
        .queue_families
        .get(family)
        .map_or(0, |f| f.timestamp_valid_bits);
    if ts_bits == 0 {
        return Err(Error::Unsupported(format!(
            "bench: queue family {family} of '{}' has no timestamps, so no device time",
            device.capabilities().name
        )));
    }
    Ok(ts_bits)
}

/// The copy-shader baseline row and, when `with_copy_buffer`, the `vkCmdCopyBuffer` row, of
/// `bytes` each.
fn copy_rows(
    b: &mut Bench,
    device: &Device,
    bytes: u64,
    with_copy_buffer: bool,
) -> Result<Vec<BenchRow>> {
    let copy = CopyBaseline::new(device, bytes)?;
    let shape = format!("{} MiB", copy.bytes >> 20);
    let amount = 2.0 * copy.bytes as f64;
    let work = Work::Bytes(amount);
    let shader = |cmd| {
        // SAFETY: `cmd` is the timer's recording command buffer; `copy` outlives the timing.
        unsafe { copy.record_shader(cmd) }
    };
    // SAFETY: `shader` as above.
    let spread = unsafe { b.time(&shader) }?;
    let gbs = throughput(amount, &spread);
    let mut rows = vec![row(
        "copy",
        format!("{shape} vec4 shader"),
        &work,
        Ok((spread, None)),
        (gbs, COPY_BASELINE),
    )];
    if with_copy_buffer {
        let copy_buffer = |cmd| {
            // SAFETY: as for `shader`.
            unsafe { copy.record_copy_buffer(cmd) }
        };
        // SAFETY: `copy_buffer` as above.
        let measured = unsafe { b.time(&copy_buffer) }.map(|s| (s, None));
        rows.push(row(
            "copy_buffer",
            format!("{shape} vkCmdCopyBuffer"),
            &work,
            measured,
            (gbs, COPY_BASELINE),
        ));
    }
    Ok(rows)
}

/// Runs the benchmarks whose op name contains `filter` (all when `None`; the `copy` and
/// `fma_peak` baselines always run). `quick` uses small shapes (seconds on a CPU driver);
/// the full shapes are a 1 GiB copy, add 2 x `[256,1024,1024]`, sigmoid and avg_pool 2x2 on
/// `[256,1024,1024]`, conv3x3 64->64 on `[1,64,224,224]` and 256->256 on `[1,256,56,56]`,
/// matmul 4096^3 and softmax `[16384,4096]`.
pub fn bench(device: &Device, filter: Option<&str>, quick: bool) -> Result<Vec<BenchRow>> {
    let s = Sizes::new(quick);
    let ts_bits = check_timestamps(device)?;
    let wanted = |op: &str| filter.is_none_or(|f| op.contains(f));
    let mut b = Bench::new(device, &s, ts_bits)?;

    let fma = b.measure_probe()?;
    let fma_flops = f64::from(s.fma.0) * 256.0 * 16.0 * 2.0 * f64::from(s.fma.1);
    let peak = throughput(fma_flops, &fma);
    let mut rows = copy_rows(&mut b, device, s.copy_bytes, wanted("copy_buffer"))?;
    let copy_gbs = rows[0].throughput;
    rows.push(row(
        "fma_peak",
        format!("{} x 256 threads x {} x 16 FMA", s.fma.0, s.fma.1),
        &Work::Flops(fma_flops),
        Ok((fma, None)),
        (peak, FMA_BASELINE),
    ));

    for case in cases(&s).into_iter().filter(|c| wanted(c.op)) {
        let (mut kernels, mut float_types, mut dispatches) = (Vec::new(), Vec::new(), Vec::new());
        let measured = (case.make)().and_then(|(g, inputs)| {
            let mut graph = g.build(device)?;
            let mut pairs: Vec<(String, DType)> = graph
                .kernels()
                .into_iter()
                .zip(graph.float_types())
                .collect();
            let several = pairs.len() > 1;
            pairs.dedup();
            (kernels, float_types) = pairs.into_iter().unzip();
            let (dev, e2e) = b.time_graph(&mut graph, &inputs)?;
            if several {
                dispatches = graph
                    .profile()?
                    .into_iter()
                    .map(|d| (d.kernel, ms(d.time)))
                    .collect();
            }
            Ok((dev, Some(e2e)))
        });
        let baseline = match case.work {
            Work::Bytes(_) => (copy_gbs, COPY_BASELINE),
            Work::Flops(_) => (peak, FMA_BASELINE),
        };
        let mut r = row(case.op, case.shape, &case.work, measured, baseline);
        r.kernels = kernels;
        r.float_types = float_types;
        r.dispatches = dispatches;
        r.vs_f32 = case.f32_op.and_then(|op| {
            rows.iter()
                .find(|f| f.op == op && f.shape == r.shape && f.error.is_none())
                .map(|f| f.device.median / r.device.median)
                .filter(|v| v.is_finite())
        });
        rows.push(r);
    }
    Ok(rows)
}

/// The op cases of the sizes `s`.
fn cases(s: &Sizes) -> Vec<Case> {
    let big = s.big.clone();
    let n_big = big.iter().product::<usize>() as f64;
    let f32_t = vk_core::DType::F32;
    let mut cases: Vec<Case> = Vec::new();
    let b = big.clone();
    cases.push(Case {
        f32_op: None,
        op: "add",
        shape: format!("2 x {}", shape_str(&big)),
        work: Work::Bytes(3.0 * n_big * 4.0),
        make: Box::new(move || {
            let mut g = GraphBuilder::new();
            let x = g.input("a", f32_t, &b)?;
            let y = g.input("b", f32_t, &b)?;
            let c = g.add(x, y)?;
            g.output(c)?;
            Ok((g, vec![pattern(&b, 1)?, pattern(&b, 2)?]))
        }),
    });
    let b = big.clone();
    cases.push(Case {
        f32_op: None,
        op: "sigmoid",
        shape: shape_str(&big),
        work: Work::Bytes(2.0 * n_big * 4.0),
        make: Box::new(move || {
            let mut g = GraphBuilder::new();
            let a = g.input("x", f32_t, &b)?;
            let c = g.sigmoid(a)?;
            g.output(c)?;
            Ok((g, vec![pattern(&b, 1)?]))
        }),
    });
    let b = big.clone();
    cases.push(Case {
        f32_op: None,
        op: "avg_pool2x2",
        shape: shape_str(&big),
        work: Work::Bytes(1.25 * n_big * 4.0),
        make: Box::new(move || {
            let mut g = GraphBuilder::new();
            let a = g.input("x", f32_t, &b)?;
            let c = g.avg_pool2d(a, Pool2d::new(2, 2))?;
            g.output(c)?;
            Ok((g, vec![pattern(&b, 1)?]))
        }),
    });
    let sm = s.softmax.to_vec();
    cases.push(Case {
        f32_op: None,
        op: "softmax",
        shape: shape_str(&sm),
        work: Work::Bytes(2.0 * sm.iter().product::<usize>() as f64 * 4.0),
        make: Box::new(move || {
            let mut g = GraphBuilder::new();
            let a = g.input("x", f32_t, &sm)?;
            let c = g.softmax(a, -1)?;
            g.output(c)?;
            Ok((g, vec![pattern(&sm, 1)?]))
        }),
    });
    for (c, hw) in s.conv {
        cases.push(conv3x3_case(c, hw, f32_t));
    }
    let n = s.matmul;
    cases.push(Case {
        f32_op: None,
        op: "matmul",
        shape: format!("{n}^3"),
        work: Work::Flops(2.0 * (n as f64).powi(3)),
        make: Box::new(move || {
            let mut g = GraphBuilder::new();
            let a = g.input("a", f32_t, &[n, n])?;
            let b = g.input("b", f32_t, &[n, n])?;
            let c = g.matmul(a, b)?;
            g.output(c)?;
            Ok((g, vec![pattern(&[n, n], 1)?, pattern(&[n, n], 2)?]))
        }),
    });
    for &(batch, m, k, n) in &s.gemms {
        let (sa, sb) = if batch == 1 {
            (vec![m, k], vec![k, n])
        } else {
            (vec![batch, m, k], vec![batch, k, n])
        };
        cases.push(Case {
            op: "matmul",
            f32_op: None,
            shape: format!("{}@{}", shape_str(&sa), shape_str(&sb)),
            work: Work::Flops(2.0 * (batch * m * k * n) as f64),
            make: Box::new(move || {
                let mut g = GraphBuilder::new();
                let a = g.input("a", f32_t, &sa)?;
                let b = g.input("b", f32_t, &sb)?;
                let c = g.matmul(a, b)?;
                g.output(c)?;
                Ok((g, vec![pattern(&sa, 1)?, pattern(&sb, 2)?]))
            }),
        });
    }
    cases.extend(f16_cases(s));
    cases.extend(decode_cases(s));
    cases
}

/// Bytes of a 4-bit weight `[n, k]` in groups of 32 with its f32 scales.
fn q4_bytes(n: usize, k: usize) -> f64 {
    (n * k / 2 + n * k / 32 * 4) as f64
}

/// A 4-bit product `x W^T` of `et_vk.linear_q4gsw`, `W` `[n, k]` in groups of 32, with
/// patterned weights and scales.
fn q4_linear(
    g: &mut GraphBuilder,
    x: TensorId,
    seed: usize,
    n: usize,
    k: usize,
) -> Result<TensorId> {
    let packed: Vec<u8> = (0..n * k / 2)
        .map(|i| ((i * 7 + seed * 13) % 251) as u8)
        .collect();
    let w = HostTensor::new(DType::U8, vec![n, k / 2], packed)
        .map_err(|e| Error::Graph(format!("bench weights: {e}")))?;
    let w = g.constant(&format!("w{seed}"), w)?;
    let scales: Vec<f32> = (0..n * k / 32)
        .map(|i| 0.01 + ((i * 3 + seed) % 17) as f32 * 1e-3)
        .collect();
    let s = g.constant_f32(&format!("s{seed}"), &[k / 32, n], &scales)?;
    let args = vec![
        Arg::Tensor(x),
        Arg::Tensor(w),
        Arg::Tensor(s),
        Arg::Int(32),
        Arg::None,
    ];
    let op = crate::ops::find("et_vk.linear_q4gsw.default")
        .ok_or_else(|| Error::Graph("bench: no et_vk.linear_q4gsw".into()))?;
    Ok(op.call(g, args)?[0])
}

/// A language model's decode step: 4-bit products of one row (weights, scales, x and y in
/// the bytes), and a gated MLP on an RMS norm with its residual (two dispatches once fused).
fn decode_cases(s: &Sizes) -> Vec<Case> {
    let f32_t = DType::F32;
    let mut cases = Vec::new();
    for &(n, k, chain) in &s.q4 {
        let chain = if n == k { chain.max(1) } else { 1 };
        let times = if chain > 1 {
            format!(" x{chain}")
        } else {
            String::new()
        };
        cases.push(Case {
            op: "linear_q4",
            f32_op: None,
            shape: format!("[1,{k}]x[{n},{k}]^T{times}"),
            work: Work::Bytes(chain as f64 * (q4_bytes(n, k) + 4.0 * (n + k) as f64)),
            make: Box::new(move || {
                let mut g = GraphBuilder::new();
                let mut y = g.input("x", f32_t, &[1, k])?;
                for seed in 0..chain {
                    y = q4_linear(&mut g, y, seed + 1, n, k)?;
                }
                g.output(y)?;
                Ok((g, vec![pattern(&[1, k], 1)?]))
            }),
        });
    }
    for &(rows, n, k) in &s.q4_prompt {
        cases.push(Case {
            op: "linear_q4_prompt",
            f32_op: None,
            shape: format!("[{rows},{k}]x[{n},{k}]^T"),
            work: Work::Flops(2.0 * (rows * n * k) as f64),
            make: Box::new(move || {
                let mut g = GraphBuilder::new();
                let x = g.input("x", f32_t, &[rows, k])?;
                let y = q4_linear(&mut g, x, 1, n, k)?;
                g.output(y)?;
                Ok((g, vec![pattern(&[rows, k], 1)?]))
            }),
        });
    }
    let (hidden, dim) = s.mlp_q4;
    cases.push(Case {
        op: "norm_linear_q4",
        f32_op: None,
        shape: format!("rms_norm [1,{dim}] x[{dim},{dim}]^T"),
        work: Work::Bytes(q4_bytes(dim, dim)),
        make: Box::new(move || {
            let mut g = GraphBuilder::new();
            let x = g.input("x", f32_t, &[1, dim])?;
            let nw = g.constant("nw", pattern(&[dim], 5)?)?;
            let n = g.rms_norm(x, nw, 1e-5)?;
            let y = q4_linear(&mut g, n, 6, dim, dim)?;
            g.output(y)?;
            Ok((g, vec![pattern(&[1, dim], 1)?]))
        }),
    });
    cases.push(Case {
        op: "gated_q4",
        f32_op: None,
        shape: format!("rms_norm [1,{dim}] silu(x[{hidden},{dim}]^T) * x[{hidden},{dim}]^T"),
        work: Work::Bytes(2.0 * q4_bytes(hidden, dim)),
        make: Box::new(move || {
            let mut g = GraphBuilder::new();
            let x = g.input("x", f32_t, &[1, dim])?;
            let nw = g.constant("nw", pattern(&[dim], 5)?)?;
            let n = g.rms_norm(x, nw, 1e-5)?;
            let gate = q4_linear(&mut g, n, 2, hidden, dim)?;
            let up = q4_linear(&mut g, n, 3, hidden, dim)?;
            let silu = crate::ops::find("aten.silu.default")
                .ok_or_else(|| Error::Graph("bench: no aten.silu".into()))?;
            let act = silu.call(&mut g, vec![Arg::Tensor(gate)])?[0];
            let h = g.mul(act, up)?;
            g.output(h)?;
            Ok((g, vec![pattern(&[1, dim], 1)?]))
        }),
    });
    cases.push(Case {
        op: "mlp_q4",
        f32_op: None,
        shape: format!("{dim}->2x{hidden}->{dim}"),
        work: Work::Bytes(3.0 * q4_bytes(hidden, dim)),
        make: Box::new(move || {
            let mut g = GraphBuilder::new();
            let x = g.input("x", f32_t, &[1, dim])?;
            let nw = g.constant("nw", pattern(&[dim], 5)?)?;
            let n = g.rms_norm(x, nw, 1e-5)?;
            let gate = q4_linear(&mut g, n, 2, hidden, dim)?;
            let up = q4_linear(&mut g, n, 3, hidden, dim)?;
            let silu = crate::ops::find("aten.silu.default")
                .ok_or_else(|| Error::Graph("bench: no aten.silu".into()))?;
            let act = silu.call(&mut g, vec![Arg::Tensor(gate)])?[0];
            let h = g.mul(act, up)?;
            let d = q4_linear(&mut g, h, 4, dim, hidden)?;
            let y = g.add(x, d)?;
            g.output(y)?;
            Ok((g, vec![pattern(&[1, dim], 1)?]))
        }),
    });
    cases
}

/// The fp16 cases: add, softmax, both conv3x3 and matmul, on the fp32 cases' shapes; linear on
/// llama.cpp's MUL_MAT shapes.
fn f16_cases(s: &Sizes) -> Vec<Case> {
    let h = DType::F16;
    let mut cases = Vec::new();
    let b = s.big.clone();
    let n_big = b.iter().product::<usize>() as f64;
    cases.push(Case {
        op: "add_f16",
        f32_op: Some("add"),
        shape: format!("2 x {}", shape_str(&b)),
        work: Work::Bytes(3.0 * n_big * 2.0),
        make: Box::new(move || {
            let mut g = GraphBuilder::new();
            let x = g.input("a", h, &b)?;
            let y = g.input("b", h, &b)?;
            let c = g.add(x, y)?;
            g.output(c)?;
            Ok((g, vec![pattern_as(&b, 1, h)?, pattern_as(&b, 2, h)?]))
        }),
    });
    let sm = s.softmax.to_vec();
    cases.push(Case {
        op: "softmax_f16",
        f32_op: Some("softmax"),
        shape: shape_str(&sm),
        work: Work::Bytes(2.0 * sm.iter().product::<usize>() as f64 * 2.0),
        make: Box::new(move || {
            let mut g = GraphBuilder::new();
            let a = g.input("x", h, &sm)?;
            let c = g.softmax(a, -1)?;
            g.output(c)?;
            Ok((g, vec![pattern_as(&sm, 1, h)?]))
        }),
    });
    for &(c, hw) in &s.conv {
        cases.push(conv3x3_case(c, hw, h));
    }
    for &(heads, tokens, d) in &s.attention {
        cases.push(attention_case(heads, tokens, d));
    }
    let n = s.matmul;
    cases.push(Case {
        op: "matmul_f16",
        f32_op: Some("matmul"),
        shape: format!("{n}^3"),
        work: Work::Flops(2.0 * (n as f64).powi(3)),
        make: Box::new(move || {
            let mut g = GraphBuilder::new();
            let a = g.input("a", h, &[n, n])?;
            let b = g.input("b", h, &[n, n])?;
            let c = g.matmul(a, b)?;
            g.output(c)?;
            Ok((
                g,
                vec![pattern_as(&[n, n], 1, h)?, pattern_as(&[n, n], 2, h)?],
            ))
        }),
    });
    // linear with its weight as an input: B read through the transposing view.
    cases.push(Case {
        op: "linear_f16",
        f32_op: None,
        shape: format!("{n}^3, weight [n,k]"),
        work: Work::Flops(2.0 * (n as f64).powi(3)),
        make: Box::new(move || {
            let mut g = GraphBuilder::new();
            let x = g.input("x", h, &[n, n])?;
            let w = g.input("w", h, &[n, n])?;
            let y = g.linear(x, w, None)?;
            g.output(y)?;
            Ok((
                g,
                vec![pattern_as(&[n, n], 1, h)?, pattern_as(&[n, n], 2, h)?],
            ))
        }),
    });
    let (m, k) = (s.mul_mat.0, s.mul_mat.1);
    for &rows in &s.mul_mat.2 {
        cases.push(Case {
            op: "linear_f16",
            f32_op: None,
            shape: format!("[{rows},{k}] x [{m},{k}]^T const"),
            work: Work::Flops(2.0 * (rows * m * k) as f64),
            make: Box::new(move || {
                let mut g = GraphBuilder::new();
                let x = g.input("x", h, &[rows, k])?;
                let w = g.constant("w", pattern_as(&[m, k], 2, h)?)?;
                let y = g.linear(x, w, None)?;
                g.output(y)?;
                Ok((g, vec![pattern_as(&[rows, k], 1, h)?]))
            }),
        });
    }
    // The few-row shape of the fp32 cases.
    if let Some(&(1, m, k, nn)) = s.gemms.first() {
        cases.push(Case {
            op: "matmul_f16",
            f32_op: Some("matmul"),
            shape: format!("[{m},{k}]@[{k},{nn}]"),
            work: Work::Flops(2.0 * (m * k * nn) as f64),
            make: Box::new(move || {
                let mut g = GraphBuilder::new();
                let a = g.input("a", h, &[m, k])?;
                let b = g.input("b", h, &[k, nn])?;
                let c = g.matmul(a, b)?;
                g.output(c)?;
                Ok((
                    g,
                    vec![pattern_as(&[m, k], 1, h)?, pattern_as(&[k, nn], 2, h)?],
                ))
            }),
        });
    }
    cases
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timed_runs_order_min_median_max_and_flag_noise() {
        let s = summary(&[3.0, 1.0, 2.0]);
        assert_eq!((s.min, s.median, s.max, s.runs), (1.0, 2.0, 3.0, 3));
        assert!(s.is_noisy(NOISY_SPREAD));
        let even = summary(&[1.0, 1.02, 1.04, 1.06]);
        assert!(even.min <= even.median && even.median <= even.max);
        assert!((even.median - 1.03).abs() < 1e-12);
        assert!(!even.is_noisy(NOISY_SPREAD), "{even:?}");
        let none = summary(&[]);
        assert_eq!(none.runs, 0);
        assert!(none.median.is_nan() && !none.is_noisy(NOISY_SPREAD));
    }

    #[test]
    fn a_noisy_row_says_so() {
        let tight = summary(&[1.0, 1.0, 1.01]);
        let wide = summary(&[1.0, 1.5, 2.0]);
        let work = Work::Bytes(1e6);
        let quiet = row(
            "add",
            "[4]".into(),
            &work,
            Ok((tight, Some(tight))),
            (1.0, "x"),
        );
        assert!(
            !quiet.noisy() && !quiet.line().contains("NOISY"),
            "{}",
            quiet.line()
        );
        let noisy = row(
            "add",
            "[4]".into(),
            &work,
            Ok((tight, Some(wide))),
            (1.0, "x"),
        );
        assert!(noisy.noisy() && noisy.line().contains("NOISY (e2e spread 67%)"));
        let failed = row(
            "add",
            "[4]".into(),
            &work,
            Err(Error::Graph("no".into())),
            (1.0, "x"),
        );
        assert!(failed.error.is_some() && failed.device_ms.is_nan());
    }

    #[test]
    fn warm_up_count_covers_the_warm_up_time() {
        assert_eq!(warm_up_count(ms(WARM_UP) / 4.0), 4);
        assert_eq!(warm_up_count(1e9), 1);
        assert_eq!(warm_up_count(0.0), MAX_WARM_UP_DISPATCHES);
    }
}
