//! Benchmarks: per op and shape, device time (timestamp queries, median of several runs, each
//! after untimed work that brings the GPU's clocks up), end-to-end time (host inputs to host
//! outputs), throughput, and the ratio to a baseline measured in the same run on the same
//! device: the device's `vkCmdCopyBuffer` bandwidth for memory-bound ops, and the device's fp32
//! FMA peak (a register-only FMA probe) for conv and matmul.

use std::sync::Arc;
use std::time::{Duration, Instant};

use vk_core::{Device, HostTensor, vk};

use crate::error::{Error, Result, VkExt};
use crate::graph::{Conv2d, GraphBuilder, Pool2d};
use crate::memory::{Allocator, Buffer, MemKind};
use crate::runtime::Graph;

/// One benchmark result.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchRow {
    /// Op name (`add`, `conv3x3`, ..., or a baseline: `copy`, `fma_peak`).
    pub op: String,
    /// Shape description.
    pub shape: String,
    /// Median device time in milliseconds (timestamps around the dispatches).
    pub device_ms: f64,
    /// Median wall time of one `execute` in milliseconds (host copies included); 0 for
    /// baselines.
    pub end_to_end_ms: f64,
    /// Throughput in `unit`, from the device time.
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
}

impl BenchRow {
    /// One line: op, shape, device ms, end-to-end ms, throughput, ratio.
    pub fn line(&self) -> String {
        if let Some(e) = &self.error {
            return format!("{:<12} {:<26} FAILED: {e}", self.op, self.shape);
        }
        format!(
            "{:<12} {:<26} device {:>10.3} ms  e2e {:>10.3} ms  {:>10.1} {:<7}  {:>6.1}% of {} ({:.1} {})",
            self.op,
            self.shape,
            self.device_ms,
            self.end_to_end_ms,
            self.throughput,
            self.unit,
            self.ratio * 100.0,
            self.baseline_name,
            self.baseline,
            self.unit
        )
    }
}

const COPY_BASELINE: &str = "vkCmdCopyBuffer bandwidth";
const FMA_BASELINE: &str = "fp32 FMA peak";

/// How long each measurement first submits untimed work, so that the GPU's clocks are up
/// (see `time_graph`).
const WARM_UP: Duration = Duration::from_millis(200);

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn pattern(shape: &[usize], seed: usize) -> Result<HostTensor> {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| ((i * 7 + seed * 13) % 1021) as f32 / 1021.0 - 0.5)
        .collect();
    HostTensor::from_f32(shape.to_vec(), &v).map_err(|e| Error::Graph(format!("bench input: {e}")))
}

/// Device and end-to-end medians of a graph: `e2e_runs` host executions, then
/// `device_runs` device-resident submissions timed by timestamps.
///
/// The GPU drops its clocks while it idles (an H200 falls from 1980 to 345 MHz during the
/// host-side runs of the large cases) and short dispatches separated by host waits do not bring
/// them back up. So before timing, and again before each timed submission, `warmer` (a graph
/// that keeps the GPU busy for a few milliseconds: the FMA probe) runs untimed; without one,
/// the graph itself is submitted untimed for a while first.
fn time_graph(
    g: &mut Graph,
    inputs: &[HostTensor],
    e2e_runs: usize,
    device_runs: usize,
    mut warmer: Option<&mut Graph>,
) -> Result<(f64, f64)> {
    let mut e2e = Vec::new();
    for _ in 0..e2e_runs.max(1) {
        let start = Instant::now();
        g.execute(inputs)?;
        e2e.push(ms(start.elapsed()));
    }
    let warm = Instant::now();
    while warm.elapsed() < WARM_UP {
        let w = match warmer.as_deref_mut() {
            Some(w) => w,
            None => &mut *g,
        };
        // SAFETY: no semaphores.
        unsafe { w.submit_resident(&[], &[]) }?;
        w.wait()?;
    }
    let mut dev = Vec::new();
    for _ in 0..device_runs.max(1) {
        if let Some(w) = warmer.as_deref_mut() {
            // SAFETY: no semaphores.
            unsafe { w.submit_resident(&[], &[]) }?;
            w.wait()?;
        }
        // SAFETY: no semaphores.
        unsafe { g.submit_resident(&[], &[]) }?;
        g.wait()?;
        let t = g.last_device_time().ok_or_else(|| {
            Error::Unsupported("the queue family has no timestamps: no device time".into())
        })?;
        dev.push(ms(t));
    }
    Ok((median(dev), median(e2e)))
}

/// Raw `vkCmdCopyBuffer` between two device buffers, timed by timestamps.
fn copy_bandwidth(device: &Device, bytes: u64, runs: usize) -> Result<f64> {
    let alloc: Arc<Allocator> = Allocator::new(device)?;
    let usage = vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST;
    let src = Buffer::new(
        &alloc,
        bytes,
        MemKind::Device,
        usage,
        "copy baseline source",
    )?;
    let dst = Buffer::new(
        &alloc,
        bytes,
        MemKind::Device,
        usage,
        "copy baseline destination",
    )?;
    let d = device.raw();
    let mut pool = vk::CommandPool::null();
    let mut qp = vk::QueryPool::null();
    let mut fence = vk::Fence::null();
    let result = (|| -> Result<f64> {
        // SAFETY: valid create infos; objects destroyed below after the last fence wait.
        unsafe {
            pool = d
                .create_command_pool(
                    &vk::CommandPoolCreateInfo::default()
                        .queue_family_index(device.queue().family()),
                    None,
                )
                .vk("vkCreateCommandPool")?;
            qp = d
                .create_query_pool(
                    &vk::QueryPoolCreateInfo::default()
                        .query_type(vk::QueryType::TIMESTAMP)
                        .query_count(2),
                    None,
                )
                .vk("vkCreateQueryPool")?;
            fence = d
                .create_fence(&vk::FenceCreateInfo::default(), None)
                .vk("vkCreateFence")?;
        }
        // SAFETY: the pool is live.
        let cmd = unsafe {
            d.allocate_command_buffers(
                &vk::CommandBufferAllocateInfo::default()
                    .command_pool(pool)
                    .level(vk::CommandBufferLevel::PRIMARY)
                    .command_buffer_count(1),
            )
        }
        .vk("vkAllocateCommandBuffers")?[0];
        // SAFETY: recording with live handles; the copy stays within both buffers.
        unsafe {
            d.begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default())
                .vk("vkBeginCommandBuffer")?;
            d.cmd_reset_query_pool(cmd, qp, 0, 2);
            d.cmd_write_timestamp(cmd, vk::PipelineStageFlags::TOP_OF_PIPE, qp, 0);
            d.cmd_copy_buffer(
                cmd,
                src.raw(),
                dst.raw(),
                &[vk::BufferCopy::default().size(bytes)],
            );
            d.cmd_write_timestamp(cmd, vk::PipelineStageFlags::BOTTOM_OF_PIPE, qp, 1);
            d.end_command_buffer(cmd).vk("vkEndCommandBuffer")?;
        }
        let period = f64::from(device.capabilities().limits.timestamp_period());
        let mut times = Vec::new();
        let warm = Instant::now();
        let mut warming = true;
        while warming || times.len() < runs.max(1) {
            let cmds = [cmd];
            let info = [vk::SubmitInfo::default().command_buffers(&cmds)];
            {
                let guard = device.queue().lock();
                // SAFETY: executable command buffer, unsignaled fence; guard held only here.
                unsafe { guard.submit(&info, fence) }?;
            }
            // SAFETY: our fence.
            unsafe { device.wait_for_fence(fence, u64::MAX) }?;
            // SAFETY: signaled, unused fence.
            unsafe { d.reset_fences(&[fence]) }.vk("vkResetFences")?;
            let mut ts = [0u64; 2];
            // SAFETY: both queries were written by the finished submission.
            unsafe {
                d.get_query_pool_results(
                    qp,
                    0,
                    &mut ts,
                    vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
                )
            }
            .vk("vkGetQueryPoolResults")?;
            if warming {
                // Untimed until the clocks have come up (see `time_graph`).
                warming = warm.elapsed() < WARM_UP;
            } else {
                times.push(ts[1].wrapping_sub(ts[0]) as f64 * period * 1e-6);
            }
        }
        Ok(median(times))
    })();
    // SAFETY: created above from this device (or null); the last submission was waited for.
    unsafe {
        d.destroy_fence(fence, None);
        d.destroy_query_pool(qp, None);
        d.destroy_command_pool(pool, None);
    }
    result
}

/// What an op moves or computes per run.
enum Work {
    /// Bytes read plus written.
    Bytes(f64),
    /// Floating-point operations.
    Flops(f64),
}

type MakeGraph<'a> = Box<dyn FnOnce() -> Result<(GraphBuilder, Vec<HostTensor>)> + 'a>;

/// One benchmark: its graph is made only when the filter selects it.
struct Case<'a> {
    op: &'static str,
    shape: String,
    work: Work,
    make: MakeGraph<'a>,
}

struct Sizes {
    big: Vec<usize>,
    conv: [(usize, usize); 2],
    matmul: usize,
    softmax: [usize; 2],
    copy_bytes: u64,
    fma: (u32, u32),
    e2e_runs: usize,
    device_runs: usize,
}

/// Runs the benchmarks whose op name contains `filter` (all when `None`). `quick` uses small
/// shapes (seconds on a CPU driver); the full shapes are add 2 x `[256,1024,1024]`, sigmoid
/// and avg_pool 2x2 on `[256,1024,1024]`, conv3x3 64->64 on `[1,64,224,224]` and 256->256 on
/// `[1,256,56,56]`, matmul 4096^3 and softmax `[16384,4096]`.
pub fn bench(device: &Device, filter: Option<&str>, quick: bool) -> Result<Vec<BenchRow>> {
    let s = if quick {
        Sizes {
            big: vec![4, 256, 256],
            conv: [(16, 32), (32, 16)],
            matmul: 256,
            softmax: [256, 1024],
            copy_bytes: 16 << 20,
            fma: (64, 256),
            e2e_runs: 3,
            device_runs: 5,
        }
    } else {
        Sizes {
            big: vec![256, 1024, 1024],
            conv: [(64, 224), (256, 56)],
            matmul: 4096,
            softmax: [16384, 4096],
            copy_bytes: 1 << 30,
            fma: (8192, 4096),
            e2e_runs: 3,
            device_runs: 10,
        }
    };
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
    let wanted = |op: &str| filter.is_none_or(|f| op.contains(f));
    let mut rows = Vec::new();

    let copy_ms = copy_bandwidth(device, s.copy_bytes, s.device_runs)?;
    let copy_gbs = 2.0 * s.copy_bytes as f64 / (copy_ms * 1e6);
    rows.push(BenchRow {
        op: "copy".into(),
        shape: format!("{} MiB", s.copy_bytes >> 20),
        device_ms: copy_ms,
        end_to_end_ms: 0.0,
        throughput: copy_gbs,
        unit: "GB/s",
        baseline: copy_gbs,
        baseline_name: COPY_BASELINE,
        ratio: 1.0,
        error: None,
    });

    let mut g = GraphBuilder::new();
    let probe = g.fma_probe(s.fma.0, s.fma.1);
    g.output(probe)?;
    let mut probe_graph = g.build(device)?;
    let (fma_ms, _) = time_graph(&mut probe_graph, &[], 1, s.device_runs, None)?;
    let fma_flops = f64::from(s.fma.0) * 256.0 * 16.0 * 2.0 * f64::from(s.fma.1);
    let peak = fma_flops / (fma_ms * 1e6);
    rows.push(BenchRow {
        op: "fma_peak".into(),
        shape: format!("{} x 256 threads x {} x 16 FMA", s.fma.0, s.fma.1),
        device_ms: fma_ms,
        end_to_end_ms: 0.0,
        throughput: peak,
        unit: "GFLOP/s",
        baseline: peak,
        baseline_name: FMA_BASELINE,
        ratio: 1.0,
        error: None,
    });

    let shape_str = |v: &[usize]| format!("{v:?}").replace(' ', "");
    let big = s.big.clone();
    let n_big = big.iter().product::<usize>() as f64;
    let f32_t = vk_core::DType::F32;
    let mut cases: Vec<Case<'_>> = Vec::new();
    cases.push(Case {
        op: "add",
        shape: format!("2 x {}", shape_str(&big)),
        work: Work::Bytes(3.0 * n_big * 4.0),
        make: Box::new(|| {
            let mut g = GraphBuilder::new();
            let a = g.input("a", f32_t, &big)?;
            let b = g.input("b", f32_t, &big)?;
            let c = g.add(a, b)?;
            g.output(c)?;
            Ok((g, vec![pattern(&big, 1)?, pattern(&big, 2)?]))
        }),
    });
    cases.push(Case {
        op: "sigmoid",
        shape: shape_str(&big),
        work: Work::Bytes(2.0 * n_big * 4.0),
        make: Box::new(|| {
            let mut g = GraphBuilder::new();
            let a = g.input("x", f32_t, &big)?;
            let c = g.sigmoid(a)?;
            g.output(c)?;
            Ok((g, vec![pattern(&big, 1)?]))
        }),
    });
    cases.push(Case {
        op: "avg_pool2x2",
        shape: shape_str(&big),
        work: Work::Bytes(1.25 * n_big * 4.0),
        make: Box::new(|| {
            let mut g = GraphBuilder::new();
            let a = g.input("x", f32_t, &big)?;
            let c = g.avg_pool2d(a, Pool2d::new(2, 2))?;
            g.output(c)?;
            Ok((g, vec![pattern(&big, 1)?]))
        }),
    });
    let sm = s.softmax.to_vec();
    cases.push(Case {
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
        let xs = [1, c, hw, hw];
        cases.push(Case {
            op: "conv3x3",
            shape: format!("{c}->{c} {}", shape_str(&xs)),
            work: Work::Flops(2.0 * (c * c * 9 * hw * hw) as f64),
            make: Box::new(move || {
                let ws = [c, c, 3, 3];
                let mut g = GraphBuilder::new();
                let x = g.input("x", f32_t, &xs)?;
                let w = g.constant("w", pattern(&ws, 3)?)?;
                let b = g.constant("b", pattern(&[c], 4)?)?;
                let p = Conv2d {
                    padding: [1, 1],
                    ..Conv2d::default()
                };
                let y = g.conv2d(x, w, Some(b), p)?;
                g.output(y)?;
                Ok((g, vec![pattern(&xs, 1)?]))
            }),
        });
    }
    let n = s.matmul;
    cases.push(Case {
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

    for case in cases.into_iter().filter(|c| wanted(c.op)) {
        let measured = (case.make)().and_then(|(g, inputs)| {
            let mut graph = g.build(device)?;
            time_graph(
                &mut graph,
                &inputs,
                s.e2e_runs,
                s.device_runs,
                Some(&mut probe_graph),
            )
        });
        let (unit, baseline, baseline_name, amount) = match case.work {
            Work::Bytes(b) => ("GB/s", copy_gbs, COPY_BASELINE, b),
            Work::Flops(f) => ("GFLOP/s", peak, FMA_BASELINE, f),
        };
        let row = match measured {
            Ok((dev, e2e)) => {
                let throughput = amount / (dev * 1e6);
                BenchRow {
                    op: case.op.into(),
                    shape: case.shape,
                    device_ms: dev,
                    end_to_end_ms: e2e,
                    throughput,
                    unit,
                    baseline,
                    baseline_name,
                    ratio: throughput / baseline,
                    error: None,
                }
            }
            Err(e) => {
                log::error!("bench {} {}: {e}", case.op, case.shape);
                BenchRow {
                    op: case.op.into(),
                    shape: case.shape,
                    device_ms: f64::NAN,
                    end_to_end_ms: f64::NAN,
                    throughput: f64::NAN,
                    unit,
                    baseline,
                    baseline_name,
                    ratio: f64::NAN,
                    error: Some(e.to_string()),
                }
            }
        };
        rows.push(row);
    }
    Ok(rows)
}
