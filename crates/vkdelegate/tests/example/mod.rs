//! The example program of `tests/program.rs` for the fault and load tests: avg_pool2d (VGF)
//! -> sigmoid (compute) -> x*x + 0.25 (VGF), [1,3,8,8] -> [1,3,4,4], with its CPU reference.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::PathBuf;

use vk_core::{HostTensor, Requirements};
use vkdelegate::program::{
    ComputeStep, DeviceChoice, HandOff, Program, ProgramBuilder, ProgramError, StepKind, StepSpec,
};

pub fn fixture(rel: &str) -> PathBuf {
    vk_core::testing::fixture("vgf").join(rel)
}

/// What a device needs to run the example: both VGF models and the compute delegate.
pub fn requirements() -> Requirements {
    ["avgpool", "sqplus_1x3x4x4"].iter().fold(
        vkdelegate::vgf::requirements().union(&vkdelegate::compute::requirements()),
        |r, name| {
            let bytes = std::fs::read(fixture(name).join("model.vgf")).unwrap();
            let vgf = vkdelegate::vgf::Vgf::decode(&bytes).unwrap();
            r.union(&vkdelegate::vgf::requirements_for(&vgf).unwrap())
        },
    )
}

/// An input depending on `seed`, values in [-3, 3].
pub fn input(seed: u64) -> HostTensor {
    let v: Vec<f32> = (0..192)
        .map(|i| ((i as f32) * 0.37 + seed as f32 * 0.61).sin() * 3.0)
        .collect();
    HostTensor::from_f32(vec![1, 3, 8, 8], &v).unwrap()
}

/// avg_pool2d(2, 2) -> sigmoid -> x*x + 0.25 on the host.
pub fn reference(x: &HostTensor) -> Vec<f32> {
    let v = x.to_f32().unwrap();
    let (c, h, w) = (3, 8, 8);
    let mut out = Vec::new();
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

/// The largest difference from the reference; panics when over 1e-5.
pub fn check(out: &[HostTensor], want: &[f32]) -> f32 {
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].shape(), &[1, 3, 4, 4]);
    let got = out[0].to_f32().unwrap();
    let err = got
        .iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(err < 1e-5, "max error {err}");
    err
}

fn step_vgf(name: &str, file: &str, input: &str, output: &str) -> StepSpec {
    StepSpec {
        name: name.into(),
        kind: StepKind::Vgf {
            path: fixture(file),
        },
        inputs: vec![input.into()],
        outputs: vec![output.into()],
    }
}

/// Builds the example on `device` with `hand_off`.
pub fn build(hand_off: HandOff, device: DeviceChoice) -> Result<Program, ProgramError> {
    let sigmoid = ComputeStep::from_attributes("gate", "sigmoid", &Default::default())?;
    ProgramBuilder::new()
        .step(step_vgf("pool", "avgpool/model.vgf", "x", "pooled"))
        .step(StepSpec {
            name: "gate".into(),
            kind: StepKind::Compute(sigmoid),
            inputs: vec!["pooled".into()],
            outputs: vec!["gated".into()],
        })
        .step(step_vgf(
            "square_plus",
            "sqplus_1x3x4x4/model.vgf",
            "gated",
            "y",
        ))
        .device(device)
        .hand_off(hand_off)
        .build()
}

/// One test of a binary at a time (see `tests/program.rs`).
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}
