//! `vkdelegate run`.

// Builds without any delegate use none of the helpers below.
#![cfg_attr(
    not(any(feature = "vgf", feature = "compute")),
    allow(dead_code, unused_imports)
)]

use std::path::Path;
use std::time::Duration;

use vkdelegate::vk_core::{HostTensor, TensorSpec};

use crate::VgfPathArg;
use crate::npy;

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

use vkdelegate::vk_core::timing::{median, ms};

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

/// Runs a VGF file (as a one-step program) or a program file: one path for both. Every input
/// file is read and checked against the program's inputs before a device is opened.
#[cfg(any(feature = "vgf", feature = "compute"))]
pub fn run(
    model: &Path,
    method: Option<&str>,
    inputs: &[String],
    [output_dir, trace]: [Option<&Path>; 2],
    repeat: usize,
    (hand_off_host, vgf_path): (bool, VgfPathArg),
) -> Result {
    use std::time::Instant;
    use vkdelegate::program::{HandOff, VgfPath};

    let path = match vgf_path {
        VgfPathArg::Auto => VgfPath::Auto,
        VgfPathArg::Native => VgfPath::Native,
        VgfPathArg::DataGraph => VgfPath::DataGraph,
    };
    let builder = builder_for(model, method)?
        .hand_off(if hand_off_host {
            HandOff::Host
        } else {
            HandOff::Device
        })
        .vgf_path(path);
    #[cfg(feature = "shared")]
    let builder = builder.device(vkdelegate::program::DeviceChoice::Shared(
        vkdelegate::shared::SharingOptions::with_mode(vkdelegate::shared::Mode::LookupOrCreate),
    ));
    let (declared, _) = builder.io()?;
    let tensors = read_inputs(model, inputs, &declared, &mut npy::read)?;
    let t = Instant::now();
    let mut program = crate::progress::build(builder, &model.display().to_string())?;
    println!(
        "device '{}'; {} loaded in {:.2} ms",
        program.device().capabilities().name,
        model.display(),
        ms(t.elapsed())
    );
    let steps: Vec<String> = program
        .steps()
        .iter()
        .map(|(n, k)| format!("{n} ({k})"))
        .collect();
    println!("steps: {}", steps.join(" -> "));
    let outputs = run_and_report(&mut program, &tensors, repeat, hand_off_host)?;
    if let Some(dir) = output_dir {
        let names: Vec<String> = program.outputs().iter().map(|s| s.name.clone()).collect();
        write_outputs(dir, &outputs, Some(&names))?;
    }
    if let Some(path) = trace {
        let timeline = program.trace()?;
        let n = timeline["traceEvents"]
            .as_array()
            .map_or(0, |e| e.iter().filter(|e| e["ph"] == "X").count());
        std::fs::write(path, serde_json::to_vec(&timeline)?)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        println!("wrote {} ({n} dispatches)", path.display());
    }
    Ok(())
}

#[cfg(not(any(feature = "vgf", feature = "compute")))]
pub fn run(
    model: &Path,
    _: Option<&str>,
    _: &[String],
    _: [Option<&Path>; 2],
    _: usize,
    _: (bool, VgfPathArg),
) -> Result {
    Err(format!(
        "{}: running models needs the `vgf` or `compute` feature, which this build lacks",
        model.display()
    )
    .into())
}

/// A program file, an ExecuTorch program, or a VGF file as a one-step program named after the
/// file.
#[cfg(any(feature = "vgf", feature = "compute"))]
fn builder_for(model: &Path, method: Option<&str>) -> Result<vkdelegate::program::ProgramBuilder> {
    use vkdelegate::program::{ProgramBuilder, ProgramFile};
    match model.extension().and_then(|e| e.to_str()) {
        Some("toml") => return Ok(ProgramBuilder::from_file(ProgramFile::read(model)?)),
        Some("pte") => {
            let bytes = std::fs::read(model).map_err(|e| format!("{}: {e}", model.display()))?;
            return vkdelegate::pte::program_builder(bytes.into(), method)
                .map_err(|e| format!("{}: {e}", model.display()).into());
        }
        _ => {}
    }
    vgf_step(model).map(|s| ProgramBuilder::new().step(s))
}

#[cfg(feature = "vgf")]
fn vgf_step(model: &Path) -> Result<vkdelegate::program::StepSpec> {
    let bytes = std::fs::read(model).map_err(|e| format!("{}: {e}", model.display()))?;
    let name = model
        .file_stem()
        .map_or("model".into(), |s| s.to_string_lossy().into_owned());
    Ok(vkdelegate::program::StepSpec::vgf_model(name, bytes.into())
        .map_err(|e| format!("{}: {e}", model.display()))?)
}

#[cfg(all(feature = "compute", not(feature = "vgf")))]
fn vgf_step(model: &Path) -> Result<vkdelegate::program::StepSpec> {
    Err(format!(
        "{}: running VGF files needs the `vgf` feature, which this build lacks",
        model.display()
    )
    .into())
}

/// Runs `repeat` times and prints the per-step and total timings; returns the last outputs.
#[cfg(any(feature = "vgf", feature = "compute"))]
fn run_and_report(
    program: &mut vkdelegate::program::Program,
    tensors: &[HostTensor],
    repeat: usize,
    hand_off_host: bool,
) -> Result<Vec<HostTensor>> {
    let mut totals = Vec::new();
    let mut per_step: Vec<Vec<Duration>> = Vec::new();
    let mut outputs = Vec::new();
    for _ in 0..repeat.max(1) {
        outputs = program.execute(tensors)?;
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
        "per run: median {:.3} ms, first {:.3} ms, min {:.3} ms ({} run(s), {} submission(s) \
         per run, {} hand-off)",
        ms(median(totals.clone())),
        ms(totals[0]),
        ms(totals.iter().min().copied().unwrap_or_default()),
        totals.len(),
        timings.submissions,
        if hand_off_host { "host" } else { "device" }
    );
    Ok(outputs)
}

/// Why the `--input` files do not fit the model.
#[derive(Debug)]
enum InputError {
    /// More `--input` files than the model has inputs.
    Count {
        model: String,
        expected: usize,
        got: usize,
        listing: String,
    },
    /// `NAME=FILE` names no input.
    UnknownName {
        model: String,
        name: String,
        listing: String,
    },
    /// An input has no file.
    Missing {
        index: usize,
        name: String,
        wanted: String,
    },
    /// The file could not be read or parsed (the message names the file).
    Read {
        index: usize,
        name: String,
        detail: String,
    },
    /// The file's dtype or shape is not the input's.
    Mismatch {
        index: usize,
        name: String,
        file: String,
        what: &'static str,
        expected: String,
        got: String,
    },
}

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InputError::Count {
                model,
                expected,
                got,
                listing,
            } => write!(
                f,
                "{model} takes {expected} input(s) ({listing}); {got} --input file(s) given"
            ),
            InputError::UnknownName {
                model,
                name,
                listing,
            } => write!(f, "{model} has no input '{name}' (inputs: {listing})"),
            InputError::Missing {
                index,
                name,
                wanted,
            } => write!(
                f,
                "input {index} '{name}' ({wanted}) has no file: add --input {name}=FILE.npy"
            ),
            InputError::Read {
                index,
                name,
                detail,
            } => write!(f, "input {index} '{name}': {detail}"),
            InputError::Mismatch {
                index,
                name,
                file,
                what,
                expected,
                got,
            } => write!(
                f,
                "input {index} '{name}' from {file}: wrong {what}: expected {expected}, got {got}"
            ),
        }
    }
}

impl std::error::Error for InputError {}

/// Reads the `--input` files (`FILE` in input order, or `NAME=FILE`) through `load` and checks
/// each against what `model` expects: count, dtype, shape.
fn read_inputs(
    model: &Path,
    args: &[String],
    wanted: &[TensorSpec],
    load: &mut dyn FnMut(&Path) -> std::result::Result<HostTensor, String>,
) -> std::result::Result<Vec<HostTensor>, InputError> {
    let listing = || {
        let items: Vec<String> = wanted
            .iter()
            .map(|w| format!("{}: {}", w.name, w.layout()))
            .collect();
        items.join(", ")
    };
    if args.len() > wanted.len() {
        return Err(InputError::Count {
            model: model.display().to_string(),
            expected: wanted.len(),
            got: args.len(),
            listing: listing(),
        });
    }
    let mut files: Vec<Option<&str>> = vec![None; wanted.len()];
    for (position, arg) in args.iter().enumerate() {
        let (slot, file) = match arg.split_once('=') {
            Some((name, file)) => {
                let slot = wanted.iter().position(|w| w.name == name).ok_or_else(|| {
                    InputError::UnknownName {
                        model: model.display().to_string(),
                        name: name.to_string(),
                        listing: listing(),
                    }
                })?;
                (slot, file)
            }
            None => (position, arg.as_str()),
        };
        if let Some(f) = files.get_mut(slot) {
            *f = Some(file);
        }
    }
    wanted
        .iter()
        .zip(files)
        .enumerate()
        .map(|(index, (w, file))| {
            let file = file.ok_or_else(|| InputError::Missing {
                index,
                name: w.name.clone(),
                wanted: w.layout(),
            })?;
            let file = Path::new(file);
            let t = load(file).map_err(|detail| InputError::Read {
                index,
                name: w.name.clone(),
                detail,
            })?;
            check_one(index, w, file, t)
        })
        .collect()
}

fn check_one(
    index: usize,
    w: &TensorSpec,
    file: &Path,
    t: HostTensor,
) -> std::result::Result<HostTensor, InputError> {
    let mismatch = |what, got: String| InputError::Mismatch {
        index,
        name: w.name.clone(),
        file: file.display().to_string(),
        what,
        expected: w.layout(),
        got,
    };
    let got = format!("{}{:?}", t.dtype(), t.shape());
    if w.dtype != t.dtype() {
        return Err(mismatch("dtype", got));
    }
    if w.shape != t.shape() {
        return Err(mismatch("shape", got));
    }
    Ok(t)
}
