//! `vkdelegate demo`: the devices, a compute dispatch, the example program avg_pool2d (VGF) ->
//! sigmoid (compute) -> x*x + 0.25 (VGF) against a CPU reference, and the same example and
//! mobilenet_v2 from their ExecuTorch programs against PyTorch.

use std::path::Path;

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

pub fn run(root: &Path) -> Result {
    crate::devices::demo_devices()?;
    println!(
        "delegates compiled in: {}{}",
        vkdelegate::compiled_delegates().join(", "),
        if vkdelegate::SHARED {
            " (+ shared runtime)"
        } else {
            ""
        }
    );
    example(root)?;
    executorch_programs(root)
}

/// The seed example and mobilenet_v2 from their ExecuTorch programs, against PyTorch's outputs.
#[cfg(all(feature = "vgf", feature = "compute"))]
fn executorch_programs(root: &Path) -> Result {
    for model in ["seed_example", "mobilenet_v2"] {
        let dir = root.join("fixtures/pte").join(model);
        let bytes = std::fs::read(dir.join("model.pte"))?;
        let builder = vkdelegate::pte::program_builder(bytes.into(), None)?;
        #[cfg(feature = "shared")]
        let builder = builder.device(vkdelegate::program::DeviceChoice::Shared(
            vkdelegate::shared::SharingOptions::with_mode(vkdelegate::shared::Mode::LookupOrCreate),
        ));
        let t = std::time::Instant::now();
        let mut program = builder.build()?;
        let load = t.elapsed();
        let x = crate::npy::read(&dir.join("input_0.npy"))?;
        let want = crate::npy::read(&dir.join("expected_output_0.npy"))?;
        let out = program.execute(std::slice::from_ref(&x))?;
        let mut totals = Vec::new();
        for _ in 0..5 {
            program.execute(std::slice::from_ref(&x))?;
            totals.push(program.last_timings().total);
        }
        totals.sort();
        let (got, want) = (
            out[0].to_f32().ok_or("output is not f32")?,
            want.to_f32().ok_or("reference is not f32")?,
        );
        let err = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        let seq: Vec<String> = program
            .steps()
            .iter()
            .map(|(n, k)| format!("{n} [{k}]"))
            .collect();
        let handles = program.step_handles();
        println!(
            "\nExecuTorch program {}\n  delegates: {}\n  one VkDevice and VkQueue: {}\n  \
             load {:.1} ms, host to host median {:.3} ms; max |error| vs PyTorch {err:.2e}",
            dir.join("model.pte").display(),
            seq.join(" -> "),
            if handles.windows(2).all(|w| w[0] == w[1]) {
                "yes"
            } else {
                "NO"
            },
            load.as_secs_f64() * 1e3,
            totals[totals.len() / 2].as_secs_f64() * 1e3,
        );
        if err > 1e-4 + 1e-3 * want.iter().fold(0.0f32, |m, v| m.max(v.abs())) {
            return Err(format!("{model}: the output differs from PyTorch's by {err}").into());
        }
    }
    Ok(())
}

#[cfg(not(all(feature = "vgf", feature = "compute")))]
fn executorch_programs(_root: &Path) -> Result {
    println!("ExecuTorch programs: need the `vgf` and `compute` features, which this build lacks");
    Ok(())
}

#[cfg(all(feature = "vgf", feature = "compute"))]
fn example(root: &Path) -> Result {
    use std::time::Duration;
    use vkdelegate::program::{HandOff, ProgramBuilder, ProgramFile};

    let program_path = root.join("examples/pool_sigmoid_sqplus.toml");
    let input_path = root.join("fixtures/vgf/avgpool/input_0.npy");
    let x = crate::npy::read(&input_path)?;
    let want = reference(&x.to_f32().ok_or("the example input is not f32")?);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mut programs = Vec::new();
    for hand_off in [HandOff::Device, HandOff::Host] {
        let builder =
            ProgramBuilder::from_file(ProgramFile::read(&program_path)?).hand_off(hand_off);
        #[cfg(feature = "shared")]
        let builder = builder.device(vkdelegate::program::DeviceChoice::Shared(
            vkdelegate::shared::SharingOptions::with_mode(vkdelegate::shared::Mode::LookupOrCreate),
        ));
        let t = std::time::Instant::now();
        let program = builder.build()?;
        programs.push((hand_off, program, t.elapsed()));
    }
    let (_, device_program, _) = &programs[0];
    let seq: Vec<String> = device_program
        .steps()
        .iter()
        .map(|(n, k)| format!("{n} [{k}]"))
        .collect();
    println!(
        "\nexample program {}\n  device: {}\n  delegates: {}",
        program_path.display(),
        device_program.device().capabilities().name,
        seq.join(" -> ")
    );
    let handles = device_program.step_handles();
    let one = handles.windows(2).all(|w| w[0] == w[1]);
    println!(
        "  every step on VkDevice {:?}, VkQueue {:?}: {}",
        handles[0].0,
        handles[0].1,
        if one { "yes" } else { "NO" }
    );
    // Both hand-offs are warmed up (a CPU driver compiles each pipeline at its first
    // dispatch), then timed in alternation, so that both see the same machine: timed one
    // after the other, a few runs each, the first would take the driver's warm-up and any
    // load on the machine alone.
    let mut totals = vec![Vec::new(); programs.len()];
    let mut outs = vec![Vec::new(); programs.len()];
    for round in 0..EXAMPLE_WARM_UP + EXAMPLE_RUNS {
        for (i, (_, program, _)) in programs.iter_mut().enumerate() {
            outs[i] = program.execute(std::slice::from_ref(&x))?;
            if round >= EXAMPLE_WARM_UP {
                totals[i].push(program.last_timings().total);
            }
        }
    }
    let mut medians = Vec::new();
    for (((hand_off, program, load), times), out) in programs.iter().zip(&mut totals).zip(&outs) {
        times.sort();
        let got = out[0].to_f32().ok_or("the example output is not f32")?;
        let err = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        let steps: Vec<String> = program
            .last_timings()
            .steps
            .iter()
            .map(|(n, d)| format!("{n} {:.3} ms", ms(*d)))
            .collect();
        println!(
            "  {:?} hand-off: load {:.1} ms, run median {:.3} ms of {EXAMPLE_RUNS} ({} \
             submission(s)); last run's steps: {}; max |error| vs CPU reference {err:.2e}",
            hand_off,
            ms(*load),
            ms(times[times.len() / 2]),
            program.last_timings().submissions,
            steps.join(", ")
        );
        if err > 1e-5 {
            return Err(format!("the example's output differs from the reference by {err}").into());
        }
        medians.push(times[times.len() / 2]);
    }
    println!(
        "  device / host hand-off end-to-end latency: {:.2}",
        medians[0].as_secs_f64() / medians[1].as_secs_f64()
    );
    Ok(())
}

/// Untimed runs of each hand-off before the timed ones.
#[cfg(all(feature = "vgf", feature = "compute"))]
const EXAMPLE_WARM_UP: usize = 5;
/// Timed runs of each hand-off, in alternation.
#[cfg(all(feature = "vgf", feature = "compute"))]
const EXAMPLE_RUNS: usize = 50;

/// avg_pool2d(2, 2) -> sigmoid -> x*x + 0.25 over [1, 3, 8, 8].
#[cfg(all(feature = "vgf", feature = "compute"))]
fn reference(v: &[f32]) -> Vec<f32> {
    let (c, h, w) = (3, 8, 8);
    let mut out = Vec::with_capacity(c * h * w / 4);
    for ch in 0..c {
        for i in 0..h / 2 {
            for j in 0..w / 2 {
                let at = |di: usize, dj: usize| v[ch * h * w + (2 * i + di) * w + 2 * j + dj];
                let p = (at(0, 0) + at(0, 1) + at(1, 0) + at(1, 1)) / 4.0;
                let s = 1.0 / (1.0 + (-p).exp());
                out.push(s * s + 0.25);
            }
        }
    }
    out
}

#[cfg(not(all(feature = "vgf", feature = "compute")))]
fn example(_root: &Path) -> Result {
    println!("example program: needs the `vgf` and `compute` features, which this build lacks");
    Ok(())
}
