//! `vkdelegate bench`: figures as ratios to baselines measured in the same run on the same
//! device.

// Builds without any delegate use none of the helpers below.
#![cfg_attr(
    not(any(feature = "vgf", feature = "compute")),
    allow(dead_code, unused_imports)
)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

/// What to benchmark.
pub struct BenchArgs {
    pub quick: bool,
    pub filter: Option<String>,
    pub vgf: Vec<PathBuf>,
    pub program: Option<PathBuf>,
    pub pte: Vec<PathBuf>,
    pub scenario_runner: Option<PathBuf>,
    pub repeat: usize,
    pub json: Option<PathBuf>,
    pub skip_ops: bool,
    /// Without the host I/O rows.
    pub skip_host_io: bool,
    /// Print every dispatch of each `.pte` program's profile, in order.
    pub dispatches: bool,
}

#[cfg(any(feature = "vgf", feature = "compute"))]
use vkdelegate::vk_core::timing::ms;

pub fn run(args: &BenchArgs) -> Result {
    let mut report = serde_json::Map::new();
    let device = open_device(args)?;
    println!(
        "device: {} ({}, driver {} {})",
        device.capabilities().name,
        device.capabilities().device_type,
        device.capabilities().driver_name,
        device.capabilities().driver_version_string
    );
    report.insert("device".into(), json!(device.capabilities().name));
    if !args.skip_ops {
        report.insert("ops".into(), ops(&device, args)?);
        if host_io_wanted(args) {
            report.insert("host_io".into(), crate::hostio::rows(&device, args.quick)?);
        }
    }
    if !args.vgf.is_empty() {
        report.insert("vgf".into(), vgf(&device, args)?);
    }
    if !args.pte.is_empty() {
        report.insert("pte".into(), pte(&args.pte, args.repeat, args.dispatches)?);
    }
    if let Some(p) = &args.program {
        report.insert("program".into(), program(p, args.repeat)?);
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&Value::Object(report))?)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// The host I/O rows run unless skipped, or a filter names op rows only: they run under a
/// filter only where it is part of `host_io` (`--filter host`).
fn host_io_wanted(args: &BenchArgs) -> bool {
    !args.skip_host_io && args.filter.as_deref().is_none_or(|f| "host_io".contains(f))
}

fn open_device(args: &BenchArgs) -> Result<vkdelegate::vk_core::Device> {
    let req = vkdelegate::vk_core::Requirements::new("vkdelegate bench");
    #[cfg(feature = "compute")]
    let req = req.union(&vkdelegate::compute::bench_requirements());
    #[cfg(feature = "vgf")]
    let mut req = req;
    #[cfg(feature = "vgf")]
    for path in &args.vgf {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let vgf =
            vkdelegate::vgf::Vgf::decode(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        req = req.union(&vkdelegate::vgf::requirements_for(&vgf)?);
    }
    let _ = args;
    Ok(vkdelegate::vk_core::Device::open(&req)?)
}

#[cfg(feature = "compute")]
fn ops(device: &vkdelegate::vk_core::Device, args: &BenchArgs) -> Result<Value> {
    use vkdelegate::compute::bench::{BenchRow, NOISY_SPREAD};
    println!(
        "\ncompute ops ({} shapes; device and end-to-end ms as min / median / max of the timed \
         runs; ratios to this device's copy-shader bandwidth or fp32 FMA peak, same run; \
         fp16 rows also as a speed-up over their fp32 case; the kernels that ran; NOISY: a \
         spread (max - min) / median over {:.0}%):",
        if args.quick { "quick" } else { "full" },
        NOISY_SPREAD * 100.0
    );
    let rows = vkdelegate::compute::bench(device, args.filter.as_deref(), args.quick)?;
    println!("  {}", BenchRow::header());
    let mut out = Vec::new();
    for r in &rows {
        println!("  {}", r.line());
        out.push(row_json(r));
    }
    Ok(Value::Array(out))
}

/// One row as JSON: the medians under the names they had before (`device_ms`,
/// `end_to_end_ms`), min / max / spread beside them, and `noisy` (a spread over
/// `NOISY_SPREAD`). Figures that are NaN (a failed case) become `null`.
#[cfg(feature = "compute")]
fn row_json(r: &vkdelegate::compute::BenchRow) -> Value {
    use vkdelegate::compute::bench::NOISY_SPREAD;
    // Summaries hold milliseconds.
    let spread = |s: &vkdelegate::vk_core::Summary| {
        json!({
            "min_ms": s.min, "median_ms": s.median, "max_ms": s.max, "runs": s.runs,
            "spread": s.spread(), "noisy": s.is_noisy(NOISY_SPREAD),
        })
    };
    json!({
        "op": r.op, "shape": r.shape, "device_ms": r.device_ms, "end_to_end_ms": r.end_to_end_ms,
        "device": spread(&r.device), "end_to_end": r.end_to_end.as_ref().map(spread),
        "noisy": r.noisy(), "throughput": r.throughput, "unit": r.unit, "baseline": r.baseline,
        "baseline_name": r.baseline_name, "ratio": r.ratio, "error": r.error,
        "kernels": r.kernels, "vs_f32": r.vs_f32, "dispatches": r.dispatches,
    })
}

#[cfg(not(feature = "compute"))]
fn ops(_: &vkdelegate::vk_core::Device, args: &BenchArgs) -> Result<Value> {
    let _ = (args.quick, &args.filter);
    println!("compute ops: not in this build (feature `compute`)");
    Ok(Value::Null)
}

#[cfg(feature = "vgf")]
/// Runs Arm's scenario-runner on the `scenario.json` beside `model`, returning the median GPU
/// time of its graph dispatch (its own timestamps) and its process wall time.
fn scenario_runner(runner: &Path, model: &Path, repeat: usize) -> Result<(f64, f64)> {
    let model = std::fs::canonicalize(model).map_err(|e| format!("{}: {e}", model.display()))?;
    let dir = model.parent().unwrap_or(Path::new("/"));
    let scenario = dir.join("scenario.json");
    if !scenario.is_file() {
        return Err(format!("no scenario.json beside {}", model.display()).into());
    }
    let out = std::env::temp_dir().join(format!("vkdelegate-sr-{}", std::process::id()));
    std::fs::create_dir_all(&out)?;
    let profile = out.join("profile.json");
    // Resolved before the child's working directory changes.
    let runner = std::fs::canonicalize(runner).map_err(|e| format!("{}: {e}", runner.display()))?;
    let mut cmd = std::process::Command::new(&runner);
    // scenario-runner finds Arm's emulation layers only through the loader's environment:
    // give it the same layers, graph above tensor, that vk-core found for us.
    if let Ok(Some(layers)) = vkdelegate::vk_core::EmulationPolicy::from_env().locate() {
        let paths = std::env::join_paths([&layers.graph_dir, &layers.tensor_dir])?;
        cmd.env("VK_ADD_LAYER_PATH", paths).env(
            "VK_INSTANCE_LAYERS",
            "VK_LAYER_ML_Graph_Emulation:VK_LAYER_ML_Tensor_Emulation",
        );
    }
    let t = std::time::Instant::now();
    let status = cmd
        .current_dir(dir)
        .arg("--scenario")
        .arg(&scenario)
        .arg("--output")
        .arg(&out)
        .arg("--profiling-dump-path")
        .arg(&profile)
        .arg("--repeat")
        .arg(repeat.max(2).to_string())
        .arg("--log-level")
        .arg("error")
        .status()?;
    let wall = t.elapsed();
    if !status.success() {
        return Err(format!("{} failed: {status}", runner.display()).into());
    }
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&profile)?)?;
    let mut times: Vec<f64> = doc["Timestamps"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|e| e["Command type"] == "DataGraphDispatch")
                .filter(|e| e["Iteration"].as_u64().unwrap_or(0) > 0)
                .filter_map(|e| e["Time for command [ms]"].as_f64())
                .collect()
        })
        .unwrap_or_default();
    if times.is_empty() {
        return Err("scenario-runner's profile has no DataGraphDispatch timestamps".into());
    }
    times.sort_by(f64::total_cmp);
    Ok((times[times.len() / 2], wall.as_secs_f64() * 1e3))
}

#[cfg(feature = "vgf")]
fn vgf(device: &vkdelegate::vk_core::Device, args: &BenchArgs) -> Result<Value> {
    let mut out = Vec::new();
    let runner = args
        .scenario_runner
        .clone()
        .or_else(|| std::env::var_os("VKDELEGATE_SCENARIO_RUNNER").map(PathBuf::from));
    for path in &args.vgf {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let r = vkdelegate::vgf::bench::bench(&bytes, device, None, args.repeat.max(1))?;
        println!("\nVGF {}:\n  {r}", path.display());
        let mut entry = json!({"model": path.display().to_string(), "ours": r.to_json()});
        // Both placements of inputs and outputs, for the host I/O rule.
        for mode in [
            vkdelegate::vgf::MemoryMode::Direct,
            vkdelegate::vgf::MemoryMode::Staged,
        ] {
            match vkdelegate::vgf::bench::bench_with(&bytes, device, None, args.repeat.max(1), mode)
            {
                Ok(m) => {
                    println!("  {mode:?}: {m}");
                    entry[format!("{mode:?}").to_lowercase()] = m.to_json();
                }
                Err(e) => println!("  {mode:?}: not measured: {e}"),
            }
        }
        #[cfg(feature = "compute")]
        match native(path, &bytes, args) {
            Ok(n) => {
                let ratio = n["median_ms"].as_f64().unwrap_or(f64::NAN) / ms(r.per_inference);
                println!(
                    "  native / data graph, host to host medians: {ratio:.2} (below 1 is faster)"
                );
                entry["native"] = n;
            }
            Err(e) => println!("  native: not measured: {e}"),
        }
        if let Some(runner) = &runner {
            match scenario_runner(runner, path, args.repeat) {
                Ok((gpu_ms, wall_ms)) => {
                    let ours = ms(r.device_only);
                    println!(
                        "  scenario-runner: graph dispatch {gpu_ms:.3} ms (GPU timestamps, median), \
                         process {wall_ms:.0} ms; ours, device-only submit+wait {ours:.3} ms: \
                         ratio ours/scenario-runner {:.2} (below 1 is faster)",
                        ours / gpu_ms
                    );
                    entry["scenario_runner"] = json!({
                        "graph_dispatch_ms": gpu_ms, "process_wall_ms": wall_ms,
                        "ratio_ours_device_only_to_theirs": ours / gpu_ms,
                    });
                }
                Err(e) => println!("  scenario-runner: not measured: {e}"),
            }
        }
        out.push(entry);
    }
    Ok(Value::Array(out))
}

/// A VGF file run natively, on the compute delegate's kernels, timed as a program.
#[cfg(all(feature = "vgf", feature = "compute"))]
fn native(path: &Path, bytes: &[u8], args: &BenchArgs) -> Result<Value> {
    use vkdelegate::program::{ProgramBuilder, StepSpec, VgfPath};
    let t = std::time::Instant::now();
    let step = StepSpec::vgf_model("native", bytes.to_vec().into())?;
    let builder = ProgramBuilder::new().step(step).vgf_path(VgfPath::Native);
    let label = format!("  native {}", path.display());
    time_program(
        builder,
        &label,
        (t, t.elapsed()),
        args.repeat,
        args.dispatches,
    )
}

#[cfg(not(feature = "vgf"))]
fn vgf(_: &vkdelegate::vk_core::Device, args: &BenchArgs) -> Result<Value> {
    let _ = &args.scenario_runner;
    Err("VGF benchmarks need the `vgf` feature, which this build lacks".into())
}

#[cfg(any(feature = "vgf", feature = "compute"))]
fn program(path: &Path, repeat: usize) -> Result<Value> {
    use vkdelegate::program::{HandOff, ProgramBuilder, ProgramFile};
    use vkdelegate::vk_core::HostTensor;

    let mut medians = Vec::new();
    let mut result = serde_json::Map::new();
    for hand_off in [HandOff::Device, HandOff::Host] {
        let builder = ProgramBuilder::from_file(ProgramFile::read(path)?).hand_off(hand_off);
        #[cfg(feature = "shared")]
        let builder = builder.device(vkdelegate::program::DeviceChoice::Shared(
            vkdelegate::shared::SharingOptions::with_mode(vkdelegate::shared::Mode::LookupOrCreate),
        ));
        let mut p = builder.build()?;
        let inputs: Vec<HostTensor> = p
            .inputs()
            .iter()
            .map(|spec| {
                let mut t = HostTensor::zeros(spec.dtype, spec.shape.clone())?;
                for (i, b) in t.bytes_mut().iter_mut().enumerate() {
                    *b = (i % 7) as u8;
                }
                Ok::<_, vkdelegate::vk_core::HostTensorError>(t)
            })
            .collect::<std::result::Result<_, _>>()?;
        p.execute(&inputs)?;
        let mut times = Vec::new();
        let mut overheads = Vec::new();
        for _ in 0..repeat.max(5) {
            p.execute(&inputs)?;
            let t = p.last_timings();
            times.push(t.total);
            let device: Duration = t.steps.iter().map(|(_, d)| *d).sum();
            overheads.push(t.total.saturating_sub(device));
        }
        times.sort();
        overheads.sort();
        let median = times[times.len() / 2];
        let overhead = overheads[overheads.len() / 2];
        println!(
            "\nprogram {} ({:?} hand-off): end-to-end min {:.3} / median {:.3} / max {:.3} ms over {} runs, {} submission(s) per run{}",
            path.display(),
            hand_off,
            ms(times[0]),
            ms(median),
            ms(times[times.len() - 1]),
            times.len(),
            p.last_timings().submissions,
            if hand_off == HandOff::Device {
                format!(
                    ", host overhead (end-to-end minus step device time) median {:.1} us",
                    overhead.as_secs_f64() * 1e6
                )
            } else {
                String::new()
            }
        );
        result.insert(
            format!("{hand_off:?}").to_lowercase(),
            json!({
                "min_ms": ms(times[0]),
                "median_ms": ms(median),
                "max_ms": ms(times[times.len() - 1]),
                "host_overhead_us": overhead.as_secs_f64() * 1e6,
                "submissions": p.last_timings().submissions
            }),
        );
        medians.push(median);
    }
    let ratio = medians[0].as_secs_f64() / medians[1].as_secs_f64();
    println!("  device / host hand-off latency ratio: {ratio:.2}");
    result.insert("device_to_host_ratio".into(), json!(ratio));
    Ok(Value::Object(result))
}

/// How long programs run before they are timed.
#[cfg(any(feature = "vgf", feature = "compute"))]
pub(crate) const WARM_UP: Duration = Duration::from_millis(500);

/// ExecuTorch programs: load time, per-inference time (host input to host output), device time
/// per delegate, host overhead.
#[cfg(any(feature = "vgf", feature = "compute"))]
fn pte(paths: &[PathBuf], repeat: usize, dispatches: bool) -> Result<Value> {
    use std::time::Instant;
    let mut out = Vec::new();
    for path in paths {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        // Load: decoding and lowering (the program builder), then the build (device, memory,
        // pipelines, weight uploads).
        let t = Instant::now();
        let builder = vkdelegate::pte::program_builder(bytes.into(), None)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let label = format!("ExecuTorch program {}", path.display());
        let mut entry = time_program(builder, &label, (t, t.elapsed()), repeat, dispatches)?;
        entry["program"] = json!(path.display().to_string());
        out.push(entry);
    }
    Ok(Value::Array(out))
}

/// A program built from `builder` (on its own device) and timed: `(start, decode)` is when
/// its load began and how long decoding and lowering took. Prints and returns load time,
/// per-inference time (host input to host output), device time per step, host overhead and
/// the top ops.
#[cfg(any(feature = "vgf", feature = "compute"))]
fn time_program(
    builder: vkdelegate::program::ProgramBuilder,
    label: &str,
    (t, decode): (std::time::Instant, Duration),
    repeat: usize,
    dispatches: bool,
) -> Result<Value> {
    use std::time::Instant;
    use vkdelegate::vk_core::{HostTensor, Summary};
    // Each program on its own device, made with its own requirements (a shared context
    // keeps the features of whichever program made it: an fp32 program's would leave an
    // fp16 one computing in fp32).
    let builder = builder.device(vkdelegate::program::DeviceChoice::Standalone);
    let mut p = crate::progress::build(builder, label)?;
    let load = t.elapsed();
    let inputs: Vec<HostTensor> = p
        .inputs()
        .iter()
        .map(|s| HostTensor::zeros(s.dtype, s.shape.clone()))
        .collect::<std::result::Result<_, _>>()?;
    // Warm-up: at least three runs and half a second, so that the GPU's clocks have
    // ramped up (right after a fast load, the first hundreds of runs of a small program
    // ran at half speed on an NVIDIA H200).
    let warm = Instant::now();
    for i in 0.. {
        if i >= 3 && warm.elapsed() >= WARM_UP {
            break;
        }
        p.execute(&inputs)?;
    }
    let (mut totals, mut overheads) = (Vec::new(), Vec::new());
    let (mut ups, mut downs) = (Vec::new(), Vec::new());
    let mut per_step: Vec<Vec<Duration>> = vec![Vec::new(); p.steps().len()];
    for _ in 0..repeat.max(10) {
        p.execute(&inputs)?;
        let t = p.last_timings();
        let device: Duration = t.steps.iter().map(|(_, d)| *d).sum();
        totals.push(t.total);
        ups.push(t.host_upload);
        downs.push(t.host_download);
        overheads.push(t.total.saturating_sub(device));
        for (k, (_, d)) in t.steps.iter().enumerate() {
            per_step[k].push(*d);
        }
    }
    let total = Summary::of_durations(&totals).ok_or("no runs")?;
    let overhead = Summary::of_durations(&overheads).ok_or("no runs")?;
    let up = Summary::of_durations(&ups).ok_or("no runs")?;
    let down = Summary::of_durations(&downs).ok_or("no runs")?;
    println!(
        "\n{label}: load {:.1} ms (decode and lower {:.1} ms, build {:.1} ms); host input to host output min {:.3} / median {:.3} / max {:.3} ms over {} runs{}; host overhead median {:.1} us (host side of the copies: in {:.1} us, out {:.1} us)",
        ms(load),
        ms(decode),
        ms(load.saturating_sub(decode)),
        total.min,
        total.median,
        total.max,
        total.runs,
        if total.is_noisy(0.10) { " NOISY" } else { "" },
        overhead.median * 1e3,
        up.median * 1e3,
        down.median * 1e3
    );
    let top = top_ops(&mut p, dispatches)?;
    let mut steps = Vec::new();
    for ((name, kind), ds) in p.steps().iter().zip(&per_step) {
        if let Some(s) = Summary::of_durations(ds) {
            println!("  {name:<20} ({kind:<7}) device median {:.3} ms", s.median);
            steps.push(json!({"step": name, "kind": kind, "device_median_ms": s.median}));
        }
    }
    Ok(json!({
        "load_ms": ms(load),
        "decode_lower_ms": ms(decode), "build_ms": ms(load.saturating_sub(decode)),
        "min_ms": total.min, "median_ms": total.median, "max_ms": total.max,
        "host_overhead_us": overhead.median * 1e3, "host_upload_us": up.median * 1e3, "host_download_us": down.median * 1e3,
        "steps": steps, "ops": top,
    }))
}

/// The per-op device profile of a program's compute steps, summed by op and kernel, largest
/// first; prints the top five and, with `dispatches`, every dispatch in recording order.
#[cfg(any(feature = "vgf", feature = "compute"))]
fn top_ops(p: &mut vkdelegate::program::Program, dispatches: bool) -> Result<Value> {
    let mut by_op: std::collections::BTreeMap<String, (Duration, usize)> = Default::default();
    let mut total = Duration::ZERO;
    let profile = p.profile()?;
    if dispatches {
        println!("  dispatches (step, op [kernel], work groups, device time):");
    }
    for d in profile {
        if dispatches {
            let [x, y, z] = d.groups;
            println!(
                "    {:<18} {:<28} {:>14} {:>8.3} ms",
                d.step,
                d.op,
                format!("{x}x{y}x{z}"),
                ms(d.time)
            );
        }
        let e = by_op.entry(d.op).or_default();
        e.0 += d.time;
        e.1 += 1;
        total += d.time;
    }
    let mut rows: Vec<(String, Duration, usize)> =
        by_op.into_iter().map(|(op, (t, n))| (op, t, n)).collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.1));
    if !rows.is_empty() {
        println!(
            "  per-op device profile ({} dispatches, {:.3} ms summed); top five:",
            rows.iter().map(|r| r.2).sum::<usize>(),
            ms(total)
        );
    }
    for (op, t, n) in rows.iter().take(5) {
        println!(
            "    {op:<28} {:>8.3} ms  {:>5.1}%  ({n} dispatches)",
            ms(*t),
            100.0 * t.as_secs_f64() / total.as_secs_f64().max(1e-12)
        );
    }
    Ok(json!(
        rows.iter()
            .map(|(op, t, n)| json!({"op": op, "ms": ms(*t), "dispatches": n}))
            .collect::<Vec<_>>()
    ))
}

#[cfg(not(any(feature = "vgf", feature = "compute")))]
fn pte(_: &[PathBuf], _: usize, _: bool) -> Result<Value> {
    Err("ExecuTorch programs need the `vgf` or `compute` feature, which this build lacks".into())
}

#[cfg(not(any(feature = "vgf", feature = "compute")))]
fn program(_: &Path, _: usize) -> Result<Value> {
    Err("programs need the `vgf` or `compute` feature, which this build lacks".into())
}
