//! `vkdelegate run` and `vkdelegate inspect`.

// Builds without any delegate use none of the helpers below.
#![cfg_attr(
    not(any(feature = "vgf", feature = "compute")),
    allow(dead_code, unused_imports)
)]

use std::path::Path;
use std::time::Duration;

use vkdelegate::vk_core::HostTensor;

use crate::npy;

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn write_outputs(dir: &Path, outputs: &[HostTensor], names: Option<&[String]>) -> Result {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for (i, t) in outputs.iter().enumerate() {
        let path = dir.join(format!("output_{i}.npy"));
        npy::write(&path, t)?;
        let name = names
            .and_then(|n| n.get(i))
            .map(String::as_str)
            .unwrap_or("");
        println!(
            "wrote {} {name} {}{:?}",
            path.display(),
            t.dtype(),
            t.shape()
        );
    }
    Ok(())
}

/// Runs a VGF file or a program file.
pub fn run(
    model: &Path,
    inputs: &[String],
    output_dir: Option<&Path>,
    repeat: usize,
    hand_off_host: bool,
) -> Result {
    match model.extension().and_then(|e| e.to_str()) {
        Some("toml") => run_program(model, inputs, output_dir, repeat, hand_off_host),
        _ => run_vgf(model, inputs, output_dir, repeat),
    }
}

#[cfg(feature = "vgf")]
fn run_vgf(model: &Path, inputs: &[String], output_dir: Option<&Path>, repeat: usize) -> Result {
    use std::time::Instant;
    use vkdelegate::vgf::{Model, Vgf, requirements_for};
    use vkdelegate::vk_core::Device;

    let bytes = std::fs::read(model).map_err(|e| format!("{}: {e}", model.display()))?;
    let t = Instant::now();
    let vgf = Vgf::decode(&bytes).map_err(|e| format!("{}: {e}", model.display()))?;
    let device = Device::open(&requirements_for(&vgf)?)?;
    let device_time = t.elapsed();
    let t = Instant::now();
    let mut m = Model::load(&bytes, &device)?;
    let load = t.elapsed();
    println!(
        "device '{}' ({} ms to open); model {} loaded in {:.2} ms",
        device.capabilities().name,
        device_time.as_millis(),
        model.display(),
        ms(load)
    );
    let tensors: Vec<HostTensor> = inputs
        .iter()
        .map(|p| npy::read(Path::new(p.split_once('=').map_or(p.as_str(), |(_, f)| f))))
        .collect::<std::result::Result<_, _>>()?;
    let mut times = Vec::new();
    let mut outputs = Vec::new();
    for _ in 0..repeat.max(1) {
        let t = Instant::now();
        outputs = m.execute(&tensors)?;
        times.push(t.elapsed());
    }
    println!(
        "per run: median {:.3} ms, first {:.3} ms, min {:.3} ms ({} run(s))",
        ms(median(times.clone())),
        ms(times[0]),
        ms(times.iter().min().copied().unwrap_or_default()),
        times.len()
    );
    if let Some(dir) = output_dir {
        let names: Vec<String> = m.outputs().iter().map(|o| o.name.clone()).collect();
        write_outputs(dir, &outputs, Some(&names))?;
    }
    Ok(())
}

#[cfg(not(feature = "vgf"))]
fn run_vgf(model: &Path, _: &[String], _: Option<&Path>, _: usize) -> Result {
    Err(format!(
        "{}: running VGF files needs the `vgf` feature, which this build lacks",
        model.display()
    )
    .into())
}

#[cfg(any(feature = "vgf", feature = "compute"))]
fn run_program(
    path: &Path,
    inputs: &[String],
    output_dir: Option<&Path>,
    repeat: usize,
    hand_off_host: bool,
) -> Result {
    use std::time::Instant;
    use vkdelegate::program::{HandOff, ProgramBuilder, ProgramFile};

    let file = ProgramFile::read(path)?;
    let t = Instant::now();
    let builder = ProgramBuilder::from_file(file).hand_off(if hand_off_host {
        HandOff::Host
    } else {
        HandOff::Device
    });
    #[cfg(feature = "shared")]
    let builder = builder.device(vkdelegate::program::DeviceChoice::Shared(
        vkdelegate::shared::SharingOptions::with_mode(vkdelegate::shared::Mode::LookupOrCreate),
    ));
    let mut program = builder.build()?;
    let load = t.elapsed();
    println!(
        "device '{}'; program {} loaded in {:.2} ms",
        program.device().capabilities().name,
        path.display(),
        ms(load)
    );
    let steps: Vec<String> = program
        .steps()
        .iter()
        .map(|(n, k)| format!("{n} ({k})"))
        .collect();
    println!("steps: {}", steps.join(" -> "));
    // Inputs: NAME=FILE, or FILE for the inputs in order.
    let mut by_name: Vec<Option<HostTensor>> = vec![None; program.inputs().len()];
    for (i, arg) in inputs.iter().enumerate() {
        let (slot, file) = match arg.split_once('=') {
            Some((name, file)) => (
                program
                    .inputs()
                    .iter()
                    .position(|(n, _)| n == name)
                    .ok_or_else(|| {
                        let names: Vec<&str> =
                            program.inputs().iter().map(|(n, _)| n.as_str()).collect();
                        format!(
                            "--input {arg}: the program has no input '{name}' (inputs: {names:?})"
                        )
                    })?,
                file,
            ),
            None => (i, arg.as_str()),
        };
        if slot >= by_name.len() {
            return Err(format!(
                "--input {arg}: the program takes {} input(s)",
                by_name.len()
            )
            .into());
        }
        by_name[slot] = Some(npy::read(Path::new(file))?);
    }
    let tensors: Vec<HostTensor> = by_name
        .into_iter()
        .zip(program.inputs())
        .map(|(t, (name, spec))| {
            t.ok_or_else(|| format!("missing --input {name}=FILE.npy ({spec})"))
        })
        .collect::<std::result::Result<_, _>>()?;
    let mut totals = Vec::new();
    let mut per_step: Vec<Vec<Duration>> = Vec::new();
    let mut outputs = Vec::new();
    for _ in 0..repeat.max(1) {
        outputs = program.execute(&tensors)?;
        let t = program.last_timings();
        totals.push(t.total);
        for (i, (_, d)) in t.steps.iter().enumerate() {
            if per_step.len() <= i {
                per_step.push(Vec::new());
            }
            per_step[i].push(*d);
        }
    }
    let timings = program.last_timings().clone();
    let kind = if hand_off_host {
        "wall time per step"
    } else {
        "device time per step (timestamps)"
    };
    println!("{kind}, median of {} run(s):", totals.len());
    for ((name, _), ds) in timings.steps.iter().zip(per_step) {
        println!("  {name:<20} {:>10.3} ms", ms(median(ds)));
    }
    println!(
        "total: median {:.3} ms, first {:.3} ms ({} submission(s) per run, {} hand-off)",
        ms(median(totals.clone())),
        ms(totals[0]),
        timings.submissions,
        if hand_off_host { "host" } else { "device" }
    );
    if let Some(dir) = output_dir {
        let names: Vec<String> = program.outputs().iter().map(|(n, _)| n.clone()).collect();
        write_outputs(dir, &outputs, Some(&names))?;
    }
    Ok(())
}

#[cfg(not(any(feature = "vgf", feature = "compute")))]
fn run_program(path: &Path, _: &[String], _: Option<&Path>, _: usize, _: bool) -> Result {
    Err(format!(
        "{}: programs need the `vgf` or `compute` feature, which this build lacks",
        path.display()
    )
    .into())
}

/// `vkdelegate inspect MODEL.vgf [--json]`.
#[cfg(feature = "vgf")]
pub fn inspect(model: &Path, json: bool) -> Result {
    use vkdelegate::vgf::{Vgf, inspect_json};
    let bytes = std::fs::read(model).map_err(|e| format!("{}: {e}", model.display()))?;
    let vgf = Vgf::decode(&bytes).map_err(|e| format!("{}: {e}", model.display()))?;
    let doc = inspect_json(&vgf);
    if json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    // A readable summary of the same facts.
    println!("{}: {} bytes", model.display(), bytes.len());
    for key in ["header", "version"] {
        if let Some(v) = doc.get(key) {
            println!("{key}: {v}");
        }
    }
    if let Some(obj) = doc.as_object() {
        for (key, value) in obj {
            if matches!(key.as_str(), "header" | "version") {
                continue;
            }
            match value {
                serde_json::Value::Array(items) => {
                    println!("{key}: {} item(s)", items.len());
                    for (i, item) in items.iter().enumerate() {
                        println!("  [{i}] {}", summarize(item));
                    }
                }
                other => println!("{key}: {}", summarize(other)),
            }
        }
    }
    Ok(())
}

#[cfg(feature = "vgf")]
fn summarize(v: &serde_json::Value) -> String {
    let mut s = v.to_string();
    if s.len() > 160 {
        s.truncate(157);
        s.push_str("...");
    }
    s
}

#[cfg(not(feature = "vgf"))]
pub fn inspect(model: &Path, _json: bool) -> Result {
    Err(format!(
        "{}: inspecting VGF files needs the `vgf` feature, which this build lacks",
        model.display()
    )
    .into())
}
