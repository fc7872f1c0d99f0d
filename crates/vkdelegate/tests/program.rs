//! The example program: avg_pool2d (VGF) -> sigmoid (compute) -> x*x + 0.25 (VGF), [1,3,8,8]
//! -> [1,3,4,4], on one device, in both hand-off modes, against a CPU reference.

#![cfg(all(feature = "vgf", feature = "compute", feature = "shared"))]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod steps;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use shared_runtime::{Mode, SharingOptions};
use steps::step_op;
use vk_core::testing::{self, assert_no_validation_errors_of_ours as assert_no_validation_errors};
use vk_core::{ArmSupport, HostTensor};
use vkdelegate::program::{
    DeviceChoice, HandOff, Program, ProgramBuilder, ProgramError, ProgramFile, StepKind, StepSpec,
    VgfPath,
};

fn fixture(rel: &str) -> PathBuf {
    vk_core::testing::fixture("vgf").join(rel)
}

fn read_npy_f32(path: PathBuf) -> HostTensor {
    let bytes = std::fs::read(&path).unwrap();
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    let data: Vec<f32> = npy.into_vec().unwrap();
    HostTensor::from_f32(shape, &data).unwrap()
}

/// avg_pool2d(2, 2) -> sigmoid -> x*x + 0.25 on the host.
fn reference(x: &HostTensor) -> Vec<f32> {
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

fn unique_token() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("program-test-{}", N.fetch_add(1, Ordering::SeqCst))
}

fn shared(token: &str) -> DeviceChoice {
    DeviceChoice::Shared(SharingOptions {
        mode: Mode::LookupOrCreate,
        token: token.into(),
        group_id: 0,
    })
}

fn example(hand_off: HandOff, device: DeviceChoice) -> Program {
    example_on(hand_off, device, VgfPath::DataGraph)
}

/// The example with its VGF steps on `path`.
fn example_on(hand_off: HandOff, device: DeviceChoice, path: VgfPath) -> Program {
    ProgramBuilder::new()
        .step(step_vgf("pool", "avgpool/model.vgf", "x", "pooled"))
        .step(step_op("gate", "sigmoid", ("pooled", "gated"), &[]))
        .step(step_vgf(
            "square_plus",
            "sqplus_1x3x4x4/model.vgf",
            "gated",
            "y",
        ))
        .device(device)
        .hand_off(hand_off)
        .vgf_path(path)
        .build()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// One test of this binary at a time: each builds its own shared context (its own device), and
/// Arm's emulation layer 0.11 was seen to crash the process on the NVIDIA driver when two
/// devices were used from two threads at once (lavapipe is unaffected).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Validation on (for every instance of this process), the ARM extensions present (natively or emulated), or a visible skip.
fn ready(test: &str) -> bool {
    // Contexts created through shared-runtime use InstanceDesc::default(): this makes them
    // validate, as every instance of this test binary does.
    testing::validate_every_instance();
    let Some(instance) = testing::instance(test) else {
        return false;
    };
    match instance.select_adapter() {
        Ok(a) if a.capabilities().arm != ArmSupport::Absent => true,
        Ok(_) => {
            testing::skip(
                test,
                "no VK_ARM_tensors/VK_ARM_data_graph, native or emulated",
            );
            false
        }
        Err(e) => {
            testing::skip(test, &e.to_string());
            false
        }
    }
}

fn check(out: &[HostTensor], want: &[f32]) -> f32 {
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

/// By default the example's VGF steps run on the compute delegate's kernels (their graphs
/// lower), with no ARM extension: the same result in both hand-off modes.
#[test]
fn the_example_runs_natively_by_default() {
    let _serial = serial();
    testing::validate_every_instance();
    let x = read_npy_f32(fixture("avgpool/input_0.npy"));
    let want = reference(&x);
    for hand_off in [HandOff::Device, HandOff::Host] {
        let mut p = example_on(hand_off, DeviceChoice::Standalone, VgfPath::Auto);
        assert_eq!(
            p.steps(),
            vec![
                ("pool", "compute"),
                ("gate", "compute"),
                ("square_plus", "compute")
            ]
        );
        check(&p.execute(std::slice::from_ref(&x)).unwrap(), &want);
        // Nothing runs through VK_ARM_data_graph, so Arm's emulation layer is not loaded.
        assert!(!p.device().instance().emulation_enabled());
        let instance = p.device().instance().clone();
        drop(p);
        assert_no_validation_errors(&instance);
    }
}

/// `on_progress` hears each step as it starts loading, in order, then the end of the load.
#[test]
fn a_load_reports_each_step() {
    let _serial = serial();
    testing::validate_every_instance();
    let heard = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = heard.clone();
    let p = ProgramBuilder::new()
        .step(step_vgf("pool", "avgpool/model.vgf", "x", "pooled"))
        .step(step_op("gate", "sigmoid", ("pooled", "gated"), &[]))
        .on_progress(move |p| {
            log.lock()
                .unwrap()
                .push((p.step, p.steps, p.name.to_string()));
        })
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let want = [(0, 2, "pool"), (1, 2, "gate"), (2, 2, "")]
        .map(|(k, n, s)| (k, n, s.to_string()))
        .to_vec();
    assert_eq!(*heard.lock().unwrap(), want);
    let instance = p.device().instance().clone();
    drop(p);
    assert_no_validation_errors(&instance);
}

#[test]
fn the_example_runs_on_one_device_in_both_hand_off_modes() {
    let _serial = serial();
    if !ready("the_example_runs_on_one_device_in_both_hand_off_modes") {
        return;
    }
    let x = read_npy_f32(fixture("avgpool/input_0.npy"));
    let want = reference(&x);
    let token = unique_token();
    let mut on_device = example(HandOff::Device, shared(&token));
    let mut via_host = example(HandOff::Host, shared(&token));
    assert_eq!(
        on_device.steps(),
        vec![("pool", "vgf"), ("gate", "compute"), ("square_plus", "vgf")]
    );
    // All three steps of both programs on one VkDevice and one VkQueue.
    let handles: Vec<_> = on_device
        .step_handles()
        .into_iter()
        .chain(via_host.step_handles())
        .collect();
    assert!(handles.windows(2).all(|w| w[0] == w[1]), "{handles:?}");
    // Device hand-off copies the program input in and the output out, nothing between steps.
    assert_eq!(on_device.recorded_copies(), Some(2));
    assert_eq!(via_host.recorded_copies(), None);

    for _ in 0..3 {
        let a = on_device.execute(std::slice::from_ref(&x)).unwrap();
        check(&a, &want);
        assert_eq!(on_device.last_timings().submissions, 1);
        let b = via_host.execute(std::slice::from_ref(&x)).unwrap();
        check(&b, &want);
        assert_eq!(via_host.last_timings().submissions, 3);
        assert_eq!(a[0].to_f32(), b[0].to_f32());
    }
    // Arm's scenario-runner output for the last step agrees too.
    let sr = read_npy_f32(fixture("sqplus_1x3x4x4/vgf_output_0.npy"));
    let sq_in = read_npy_f32(fixture("sqplus_1x3x4x4/input_0.npy"));
    let mut single = ProgramBuilder::new()
        .step(step_vgf("sq", "sqplus_1x3x4x4/model.vgf", "x", "y"))
        .device(shared(&token))
        .build()
        .unwrap();
    assert_eq!(single.execute(&[sq_in]).unwrap()[0].to_f32(), sr.to_f32());
    let instance = on_device.device().instance().clone();
    drop((on_device, via_host, single));
    assert_no_validation_errors(&instance);
}

#[test]
fn load_order_does_not_matter() {
    let _serial = serial();
    if !ready("load_order_does_not_matter") {
        return;
    }
    // Compute first: the compute delegate creates the shared device, and must ask for what the
    // VGF delegate (compiled in) needs.
    let token = unique_token();
    let mut compute_first = ProgramBuilder::new()
        .step(step_op(
            "gate",
            "sigmoid",
            ("x", "gated"),
            &[(
                "input_shape",
                toml::Value::Array(vec![1.into(), 3.into(), 4.into(), 4.into()]),
            )],
        ))
        .step(step_vgf(
            "square_plus",
            "sqplus_1x3x4x4/model.vgf",
            "gated",
            "y",
        ))
        .device(shared(&token))
        .build()
        .unwrap_or_else(|e| panic!("compute-first program: {e}"));
    let x = HostTensor::from_f32(
        vec![1, 3, 4, 4],
        &(0..48).map(|i| i as f32 / 10.0 - 2.4).collect::<Vec<_>>(),
    )
    .unwrap();
    let y = compute_first.execute(std::slice::from_ref(&x)).unwrap();
    for (v, out) in x.to_f32().unwrap().iter().zip(y[0].to_f32().unwrap()) {
        let s = 1.0 / (1.0 + (-v).exp());
        assert!((out - (s * s + 0.25)).abs() < 1e-5);
    }
    // VGF first on a fresh key.
    let vgf_first = example(HandOff::Device, shared(&unique_token()));
    let h = compute_first.step_handles();
    assert!(h.windows(2).all(|w| w[0] == w[1]));
    let h = vgf_first.step_handles();
    assert!(h.windows(2).all(|w| w[0] == w[1]));
    let instance = compute_first.device().instance().clone();
    drop(compute_first);
    assert_no_validation_errors(&instance);
}

#[test]
fn a_shape_mismatch_between_steps_names_both_steps() {
    let _serial = serial();
    if !ready("a_shape_mismatch_between_steps_names_both_steps") {
        return;
    }
    let err = ProgramBuilder::new()
        .step(step_vgf("pool", "avgpool/model.vgf", "x", "pooled"))
        .step(step_op(
            "flatten",
            "reshape",
            ("pooled", "flat"),
            &[(
                "shape",
                toml::Value::Array(vec![1.into(), 3.into(), 16.into()]),
            )],
        ))
        .step(step_vgf(
            "square_plus",
            "sqplus_1x3x4x4/model.vgf",
            "flat",
            "y",
        ))
        .device(shared(&unique_token()))
        .build()
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, ProgramError::Mismatch(_)), "{text}");
    assert!(
        text.contains("'flatten'") && text.contains("'square_plus'"),
        "{text}"
    );
    assert!(
        text.contains("f32[1, 3, 16]") && text.contains("f32[1, 3, 4, 4]"),
        "{text}"
    );
}

#[test]
fn two_programs_on_two_threads_share_one_device() {
    let _serial = serial();
    if !ready("two_programs_on_two_threads_share_one_device") {
        return;
    }
    let x = read_npy_f32(fixture("avgpool/input_0.npy"));
    let want = reference(&x);
    let token = unique_token();
    let programs: Vec<Program> = (0..2)
        .map(|i| {
            example(
                if i == 0 {
                    HandOff::Device
                } else {
                    HandOff::Host
                },
                shared(&token),
            )
        })
        .collect();
    assert_eq!(programs[0].step_handles()[0], programs[1].step_handles()[0]);
    std::thread::scope(|s| {
        for mut p in programs {
            let (x, want) = (&x, &want);
            s.spawn(move || {
                for _ in 0..10 {
                    check(&p.execute(std::slice::from_ref(x)).unwrap(), want);
                }
            });
        }
    });
}

#[test]
fn a_program_file_runs() {
    let _serial = serial();
    if !ready("a_program_file_runs") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("vkdelegate-program-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = format!(
        r#"
outputs = ["y"]

[[step]]
name = "pool"
vgf = "{pool}"
inputs = ["x"]
outputs = ["pooled"]

[[step]]
name = "gate"
op = "sigmoid"
inputs = ["pooled"]
outputs = ["gated"]

[[step]]
name = "square_plus"
vgf = "{sq}"
inputs = ["gated"]
outputs = ["y"]
"#,
        pool = fixture("avgpool/model.vgf").display(),
        sq = fixture("sqplus_1x3x4x4/model.vgf").display()
    );
    let path = dir.join("program.toml");
    std::fs::write(&path, text).unwrap();
    let file = ProgramFile::read(&path).unwrap();
    let mut p = ProgramBuilder::from_file(file)
        .device(shared(&unique_token()))
        .build()
        .unwrap();
    assert_eq!(p.inputs()[0].name, "x");
    let x = read_npy_f32(fixture("avgpool/input_0.npy"));
    check(
        &p.execute(std::slice::from_ref(&x)).unwrap(),
        &reference(&x),
    );
    // Wrong inputs are refused with the numbers.
    let bad = HostTensor::from_f32(vec![1, 3, 4, 4], &[0.0; 48]).unwrap();
    let e = p.execute(&[bad]).unwrap_err().to_string();
    assert!(
        e.contains("input 'x'") && e.contains("f32[1, 3, 8, 8]"),
        "{e}"
    );
}
