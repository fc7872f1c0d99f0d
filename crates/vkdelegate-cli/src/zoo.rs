//! `vkdelegate zoo`: every model folder of a zoo (`model.pte`, `input_<i>.npy`,
//! `expected_output_<i>.npy`, `meta.json`), loaded, run and compared with PyTorch's outputs,
//! as one table.
//!
//! Tolerances are those of `docs/testing.md` for whole networks: fp32 element by element,
//! `1e-4 * max(1, max |reference|) + 1e-3 * |reference|` (PyTorch's own fp32 result is that far
//! from the exact one on deep networks); `force_fp16` against the output's scale,
//! `5e-2 * max |reference|` (PyTorch's own fp16 run of resnet50 is 3.6% of the scale off its
//! fp32 one), and for a classifier of 1000 or more scores, top-5 agreement. Statically
//! quantized int8 networks: `2.5e-1 * max |reference|` and top-5 agreement (each intermediate
//! value rounded to the other int8 level moves the output by whole steps, and deep networks
//! compound them: ExecuTorch's own XNNPACK run of the zoo's full-size int8 resnet50 and
//! mobilenet_v2 is 15% and 19% of the scale off PyTorch's). Weight-only quantized networks
//! compute in float and are judged as fp32.

use std::path::{Path, PathBuf};
use std::time::Instant;

use vkdelegate::vk_core::HostTensor;
use vkdelegate::vk_core::timing::{median, ms};

use crate::npy;

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

/// One model's row.
struct Row {
    name: String,
    load_ms: Option<f64>,
    run_ms: Option<f64>,
    /// The largest absolute error over every output.
    max_error: Option<f32>,
    /// The worst error as a fraction of its tolerance (pass: at most 1).
    worst: Option<f32>,
    /// Why the model did not load, run or match.
    failure: Option<String>,
}

/// Runs every model folder under `roots` (folders holding `model.pte`, or their parents)
/// whose name contains `filter`, `repeat` times each; prints the table. An error when any
/// model fails. With `torch` (a Python with PyTorch), PyTorch's host-to-host times of the
/// same networks on this machine's CUDA GPU follow, from the same run
/// (`fixtures/tools/torch_zoo.py`, found beside the zoo folder).
pub fn run(roots: &[PathBuf], filter: Option<&str>, repeat: usize, torch: Option<&str>) -> Result {
    let models = model_dirs(roots)?;
    let models: Vec<PathBuf> = models
        .into_iter()
        .filter(|d| filter.is_none_or(|f| name_of(d).contains(f)))
        .collect();
    if models.is_empty() {
        return Err("no model folder (one holding model.pte) found".into());
    }
    #[cfg(feature = "shared")]
    let _device = open_shared_device()?;
    println!(
        "{:<24} {:>10} {:>10} {:>11} {:>9}  result",
        "model", "load ms", "run ms", "max error", "of tol."
    );
    let mut failed = Vec::new();
    let mut ours = Vec::new();
    for dir in &models {
        let row = check(dir, repeat);
        print_row(&row);
        if row.failure.is_some() {
            failed.push(row.name.clone());
        }
        ours.push((row.name, row.run_ms));
    }
    if let Some(python) = torch {
        match peer::times(python, &models, repeat) {
            Ok(theirs) => peer::print(&ours, &theirs),
            Err(e) => println!("PyTorch: no times ({e})"),
        }
    }
    if failed.is_empty() {
        println!("{} of {} models match PyTorch", models.len(), models.len());
        Ok(())
    } else {
        Err(format!(
            "{} of {} models failed: {}",
            failed.len(),
            models.len(),
            failed.join(", ")
        )
        .into())
    }
}

/// The shared device every model runs on, opened before the first one so that no model's load
/// time includes the device's creation (about 150 ms on an NVIDIA H200, once per process); says
/// which device and how long it took.
#[cfg(feature = "shared")]
fn open_shared_device() -> Result<Option<vkdelegate::shared::Lease>> {
    use vkdelegate::shared::{Mode, SharingOptions};
    let t = Instant::now();
    let options = SharingOptions::with_mode(Mode::LookupOrCreate);
    let requirements = vkdelegate::vk_core::Requirements::new("vkdelegate zoo");
    let lease = vkdelegate::shared::acquire(&options, &requirements, "vkdelegate zoo")?;
    if let Some(lease) = &lease {
        println!(
            "device '{}' opened in {:.1} ms (not in the loads below)",
            lease.device().capabilities().name,
            ms(t.elapsed())
        );
    }
    Ok(lease)
}

fn name_of(dir: &Path) -> String {
    dir.file_name()
        .map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into())
}

/// The folders holding `model.pte`: each root itself, or its subfolders, sorted.
fn model_dirs(roots: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut dirs = Vec::new();
    for root in roots {
        if root.join("model.pte").is_file() {
            dirs.push(root.clone());
            continue;
        }
        let entries = std::fs::read_dir(root).map_err(|e| format!("{}: {e}", root.display()))?;
        let mut found: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.join("model.pte").is_file())
            .collect();
        found.sort();
        dirs.extend(found);
    }
    Ok(dirs)
}

fn print_row(row: &Row) {
    let opt = |v: Option<f64>, digits: usize| {
        v.map_or_else(|| "-".to_string(), |v| format!("{v:.digits$}"))
    };
    let result = match &row.failure {
        None => "pass".to_string(),
        Some(why) => format!("FAIL: {why}"),
    };
    println!(
        "{:<24} {:>10} {:>10} {:>11} {:>9}  {result}",
        row.name,
        opt(row.load_ms, 1),
        opt(row.run_ms, 3),
        row.max_error
            .map_or_else(|| "-".to_string(), |e| format!("{e:.3e}")),
        opt(row.worst.map(f64::from), 3),
    );
}

/// Loads, runs and judges one model folder.
fn check(dir: &Path, repeat: usize) -> Row {
    let mut row = Row {
        name: name_of(dir),
        load_ms: None,
        run_ms: None,
        max_error: None,
        worst: None,
        failure: None,
    };
    if let Err(e) = check_into(dir, repeat, &mut row) {
        let text = e.to_string();
        let line = text.lines().next().unwrap_or_default();
        row.failure = Some(line.chars().take(400).collect());
    }
    row
}

fn check_into(dir: &Path, repeat: usize, row: &mut Row) -> Result {
    let inputs = numbered(dir, "input")?;
    let expected = numbered(dir, "expected_output")?;
    let meta = std::fs::read_to_string(dir.join("meta.json")).unwrap_or_default();
    let judged = if meta.contains("quantized int8") {
        Judged::Int8
    } else if meta.contains("force_fp16") {
        Judged::Fp16
    } else {
        Judged::Fp32
    };
    let bytes = std::fs::read(dir.join("model.pte"))?;
    let t = Instant::now();
    let builder = vkdelegate::pte::program_builder(bytes.into(), None)?;
    #[cfg(feature = "shared")]
    let builder = builder.device(vkdelegate::program::DeviceChoice::Shared(
        vkdelegate::shared::SharingOptions::with_mode(vkdelegate::shared::Mode::LookupOrCreate),
    ));
    let mut program = crate::progress::build(builder, &dir.display().to_string())?;
    row.load_ms = Some(ms(t.elapsed()));
    // Timed runs come after a warm-up of at least three runs and half a second (the GPU's
    // clocks ramp up: resnet50 ran in 3.6 ms right after its load and in 1.7 ms warm on an
    // H200); one run alone, as a check, is not timed twice.
    if repeat > 1 {
        let warm = Instant::now();
        for i in 0.. {
            if i >= 3 && warm.elapsed() >= crate::bench::WARM_UP {
                break;
            }
            program.execute(&inputs)?;
        }
    }
    let mut times = Vec::new();
    let mut outputs = Vec::new();
    for _ in 0..repeat.max(1) {
        let t = Instant::now();
        outputs = program.execute(&inputs)?;
        times.push(t.elapsed());
    }
    row.run_ms = Some(ms(median(times)));
    if outputs.len() != expected.len() {
        return Err(format!(
            "{} output(s), PyTorch gave {}",
            outputs.len(),
            expected.len()
        )
        .into());
    }
    let (mut max_error, mut worst) = (0f32, 0f32);
    for (i, (got, want)) in outputs.iter().zip(&expected).enumerate() {
        let (e, w) = judge(i, got, want, judged)?;
        max_error = max_error.max(e);
        worst = worst.max(w);
    }
    row.max_error = Some(max_error);
    row.worst = Some(worst);
    if worst > 1.0 {
        return Err(format!("{worst:.2} x the tolerance").into());
    }
    Ok(())
}

/// `<stem>_0.npy`, `<stem>_1.npy`, ... until one is missing.
fn numbered(dir: &Path, stem: &str) -> Result<Vec<HostTensor>> {
    let mut out = Vec::new();
    loop {
        let path = dir.join(format!("{stem}_{}.npy", out.len()));
        if !path.is_file() {
            break;
        }
        out.push(npy::read(&path)?);
    }
    if out.is_empty() {
        return Err(format!("{}: no {stem}_0.npy", dir.display()).into());
    }
    Ok(out)
}

/// Output `i` against PyTorch's: the largest absolute error and the worst error as a
/// fraction of the tolerance (over 1 when a classifier's top five disagree).
/// How a network's outputs are judged (the module's documentation gives the bounds).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Judged {
    Fp32,
    Fp16,
    Int8,
}

fn judge(i: usize, got: &HostTensor, want: &HostTensor, judged: Judged) -> Result<(f32, f32)> {
    if got.shape() != want.shape() {
        return Err(format!(
            "output {i}: shape {:?}, PyTorch's is {:?}",
            got.shape(),
            want.shape()
        )
        .into());
    }
    let values = |t: &HostTensor| {
        t.to_f32()
            .or_else(|| {
                t.to_i32()
                    .map(|v| v.into_iter().map(|x| x as f32).collect())
            })
            .or_else(|| int64(t))
            .ok_or_else(|| format!("output {i}: dtype {} cannot be compared", t.dtype()))
    };
    let (a, b) = (values(got)?, values(want)?);
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
    let mut max_error = 0f32;
    let mut worst = 0f32;
    for (x, y) in a.iter().zip(&b) {
        let e = (x - y).abs();
        let tolerance = match judged {
            Judged::Fp32 => 1e-4 * scale.max(1.0) + 1e-3 * y.abs(),
            Judged::Fp16 => 5e-2 * scale,
            Judged::Int8 => 2.5e-1 * scale,
        };
        max_error = max_error.max(e);
        worst = worst.max(if e.is_nan() {
            f32::INFINITY
        } else {
            e / tolerance
        });
    }
    if judged != Judged::Fp32 && b.len() >= 1000 && !top5_agree(&a, &b) {
        worst = worst.max(f32::INFINITY);
    }
    Ok((max_error, worst))
}

fn int64(t: &HostTensor) -> Option<Vec<f32>> {
    (t.dtype() == vkdelegate::vk_core::DType::I64).then(|| {
        t.bytes()
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap_or_default()) as f32)
            .collect()
    })
}

/// Our top class is among PyTorch's top five, and PyTorch's among ours.
fn top5_agree(a: &[f32], b: &[f32]) -> bool {
    let top = |v: &[f32]| {
        let mut idx: Vec<usize> = (0..v.len()).collect();
        idx.sort_by(|&i, &j| v[j].total_cmp(&v[i]));
        idx.truncate(5);
        idx
    };
    let (ta, tb) = (top(a), top(b));
    tb.contains(&ta[0]) && ta.contains(&tb[0])
}

/// PyTorch's times of the zoo's networks, from `torch_zoo.py` run by the given Python.
mod peer {
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};

    use super::{Result, name_of};

    /// `(eager ms, CUDA-graph ms)` per model name, as `torch_zoo.py` prints them (`None`:
    /// the network would not build or capture there).
    pub fn times(
        python: &str,
        models: &[PathBuf],
        repeat: usize,
    ) -> Result<BTreeMap<String, Option<(f64, f64)>>> {
        let script = script(models)?;
        let full = models.iter().any(|d| {
            std::fs::read_to_string(d.join("meta.json")).is_ok_and(|m| m.contains("(full)"))
        });
        let mut cmd = std::process::Command::new(python);
        cmd.arg(&script)
            .args(["--iters", &repeat.max(5).to_string()]);
        if full {
            cmd.arg("--full");
        }
        cmd.args(models.iter().map(|d| name_of(d)));
        let out = cmd.output().map_err(|e| format!("{python}: {e}"))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let last = err.lines().last().unwrap_or("").to_owned();
            return Err(format!("{} failed: {last}", script.display()).into());
        }
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut times = BTreeMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if let [name, eager, graph, ..] = f[..] {
                let parsed = eager.parse::<f64>().ok().zip(graph.parse::<f64>().ok());
                if name != "model" {
                    times.insert(name.to_owned(), parsed);
                }
            }
        }
        if let Some(header) = text.lines().find(|l| l.starts_with('#')) {
            println!("{header}");
        }
        Ok(times)
    }

    /// `fixtures/tools/torch_zoo.py` beside the zoo: `<zoo>/../tools/torch_zoo.py` for the
    /// first model's zoo folder or for the folder itself.
    fn script(models: &[PathBuf]) -> Result<PathBuf> {
        let first = models.first().ok_or("no models")?;
        let candidates: Vec<PathBuf> = [first.parent(), first.parent().and_then(Path::parent)]
            .into_iter()
            .flatten()
            .map(|p| p.join("tools").join("torch_zoo.py"))
            .collect();
        candidates
            .iter()
            .find(|p| p.is_file())
            .cloned()
            .ok_or_else(|| format!("torch_zoo.py not found at {}", candidates[0].display()).into())
    }

    /// Our run times beside PyTorch's, with the ratio to its CUDA-graph replay.
    pub fn print(ours: &[(String, Option<f64>)], theirs: &BTreeMap<String, Option<(f64, f64)>>) {
        println!(
            "{:<24} {:>10} {:>14} {:>14} {:>12}",
            "model", "ours ms", "PyTorch eager", "PyTorch graph", "ours / graph"
        );
        for (name, run) in ours {
            let peer = theirs.get(name).copied().flatten();
            let cell = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.3}"));
            let ratio = run.zip(peer).map(|(a, (_, g))| a / g);
            println!(
                "{:<24} {:>10} {:>14} {:>14} {:>12}",
                name,
                cell(*run),
                cell(peer.map(|p| p.0)),
                cell(peer.map(|p| p.1)),
                ratio.map_or_else(|| "-".to_string(), |r| format!("{r:.2}")),
            );
        }
    }
}
