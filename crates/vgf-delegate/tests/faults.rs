//! Faults of VGF models are errors, never aborts, hangs or leaks: a device lost at submit or
//! at wait fails every later execution of every model on that device (and new loads) with
//! vk-core's `DeviceLost`, while models on another device keep working; a wait that times out
//! is a `Timeout` after which the model runs again correctly; loads that run out of memory
//! part-way fail by name and destroy what they made. Each test drops its devices before
//! asserting zero validation errors (of ours: see `assert_no_validation_errors_of_ours`), so
//! objects left at `vkDestroyDevice` count as errors.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod common;

use std::sync::{Mutex, MutexGuard};

use vgf_delegate::{Error, LoadOptions, MemoryMode, Model, Vgf, requirements_for};
use vk_core::testing::{self, assert_no_validation_errors_of_ours};
use vk_core::{Device, FaultPoint, HostTensor, Instance, Requirements, vk};

/// One test at a time: Arm's emulation layer 0.11 was seen to crash on the NVIDIA driver
/// when two devices were used from two threads at once.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

fn bytes_of(name: &str) -> Vec<u8> {
    std::fs::read(common::corpus_dir().join(name).join("model.vgf")).unwrap()
}

fn requirements() -> Requirements {
    ["add", "avgpool"]
        .iter()
        .fold(vgf_delegate::requirements(), |r, name| {
            let bytes = bytes_of(name);
            r.union(&requirements_for(&Vgf::decode(&bytes).unwrap()).unwrap())
        })
}

fn load_npy(path: std::path::PathBuf) -> HostTensor {
    let bytes = std::fs::read(&path).unwrap();
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    HostTensor::from_f32(shape, &npy.into_vec::<f32>().unwrap()).unwrap()
}

/// The `add` model with its fixture inputs scaled by `k`, and the expected sum.
fn add_inputs(k: f32) -> (Vec<HostTensor>, Vec<f32>) {
    let dir = common::corpus_dir().join("add");
    let a = load_npy(dir.join("input_0.npy")).to_f32().unwrap();
    let b = load_npy(dir.join("input_1.npy")).to_f32().unwrap();
    let scale = |v: &[f32]| v.iter().map(|x| x * k).collect::<Vec<f32>>();
    let (a, b) = (scale(&a), scale(&b));
    let want = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    let t = |v: &[f32]| HostTensor::from_f32(vec![1, 3, 8, 8], v).unwrap();
    (vec![t(&a), t(&b)], want)
}

fn run_add(model: &mut Model, k: f32) {
    let (inputs, want) = add_inputs(k);
    let out = model.execute(&inputs).unwrap();
    let got = out[0].to_f32().unwrap();
    assert_eq!(got.len(), want.len());
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
        assert!(
            (a - b).abs() <= 1e-5 + 1e-5 * b.abs(),
            "element {i}: {a} vs {b}"
        );
    }
}

fn run_avgpool(model: &mut Model) {
    let dir = common::corpus_dir().join("avgpool");
    let out = model.execute(&[load_npy(dir.join("input_0.npy"))]).unwrap();
    let want = load_npy(dir.join("vgf_output_0.npy"));
    let (a, b) = (out[0].to_f32().unwrap(), want.to_f32().unwrap());
    assert!(
        a.iter()
            .zip(&b)
            .all(|(x, y)| (x - y).abs() <= 1e-4 + 1e-3 * y.abs())
    );
}

fn assert_lost(e: &Error, call: &str) {
    assert!(
        matches!(e, Error::Device(vk_core::Error::DeviceLost { .. })),
        "expected DeviceLost, got {e:?}"
    );
    let text = e.to_string();
    assert!(text.contains("was lost") && text.contains(call), "{text}");
}

fn device(test: &str) -> Option<(Instance, Device)> {
    testing::device(test, &requirements())
}

fn device_loss_at(point: FaultPoint, call: &str) {
    let _serial = serial();
    let test = format!("vgf_device_loss_at_{point:?}");
    let Some((instance, lost)) = device(&test) else {
        return;
    };
    let other = instance
        .select_adapter()
        .unwrap()
        .create_device(&requirements())
        .unwrap();
    let mut add = Model::load(&bytes_of("add"), &lost).unwrap();
    let mut pool = Model::load(&bytes_of("avgpool"), &lost).unwrap();
    let mut elsewhere = Model::load(&bytes_of("add"), &other).unwrap();
    run_add(&mut add, 1.0);
    run_avgpool(&mut pool);
    run_add(&mut elsewhere, 1.0);

    lost.inject_fault(point, vk::Result::ERROR_DEVICE_LOST);
    let (inputs, _) = add_inputs(2.0);
    let e = add.execute(&inputs).unwrap_err();
    assert_lost(&e, call);
    eprintln!("{point:?}: {e}");
    // Every later call on that device fails clearly: this model, another, a new load.
    assert_lost(&add.execute(&inputs).unwrap_err(), call);
    let x = load_npy(common::corpus_dir().join("avgpool/input_0.npy"));
    assert_lost(&pool.execute(&[x]).unwrap_err(), call);
    // SAFETY: no semaphores.
    assert_lost(&unsafe { pool.submit(&[], &[]) }.unwrap_err(), call);
    match Model::load(&bytes_of("avgpool"), &lost) {
        Err(e) => assert_lost(&e, call),
        Ok(_) => panic!("a model was loaded on a lost device"),
    }
    // The other device keeps working, before and after the lost one is torn down.
    run_add(&mut elsewhere, 3.0);
    drop((add, pool));
    drop(lost);
    run_add(&mut elsewhere, 4.0);
    assert!(other.lost().is_none());
    drop(elsewhere);
    drop(other);
    assert_no_validation_errors_of_ours(&instance);
}

#[test]
fn a_device_lost_at_submit_fails_every_model_of_that_device_only() {
    device_loss_at(FaultPoint::Submit, "vkQueueSubmit");
}

#[test]
fn a_device_lost_at_wait_fails_every_model_of_that_device_only() {
    device_loss_at(FaultPoint::Wait, "vkWaitForFences");
}

#[test]
fn a_wait_that_times_out_is_an_error_and_the_next_execution_is_correct() {
    let _serial = serial();
    let Some((instance, device)) = device("vgf_a_wait_that_times_out") else {
        return;
    };
    for memory in [MemoryMode::Direct, MemoryMode::Staged] {
        let options = LoadOptions {
            memory,
            ..Default::default()
        };
        let mut model = Model::load_with(&bytes_of("add"), &device, &options).unwrap();
        run_add(&mut model, 1.0);
        device.inject_fault(FaultPoint::Wait, vk::Result::TIMEOUT);
        let (inputs, _) = add_inputs(5.0);
        let e = model.execute(&inputs).unwrap_err();
        assert!(
            matches!(e, Error::Device(vk_core::Error::Timeout { .. })),
            "expected Timeout, got {e:?}"
        );
        assert!(e.to_string().contains("did not finish within"), "{e}");
        run_add(&mut model, 6.0);
        run_add(&mut model, -7.0);
        // A submit refused for memory; then a time-out just before the drop (which waits).
        device.inject_fault(FaultPoint::Submit, vk::Result::ERROR_OUT_OF_DEVICE_MEMORY);
        let e = model.execute(&inputs).unwrap_err();
        assert!(e.to_string().contains("vkQueueSubmit"), "{e}");
        run_add(&mut model, 8.0);
        device.inject_fault(FaultPoint::Wait, vk::Result::TIMEOUT);
        assert!(model.execute(&inputs).is_err());
        drop(model);
    }
    assert!(device.lost().is_none());
    drop(device);
    assert_no_validation_errors_of_ours(&instance);
}

#[test]
fn loads_that_run_out_of_memory_part_way_fail_by_name_and_leave_nothing_behind() {
    let _serial = serial();
    let test = "vgf_loads_that_run_out_of_memory_part_way";
    let Some((instance, device)) = device(test) else {
        return;
    };
    // Each allocation of the load fails in turn (storages, staging, session memory), on any
    // device, one memory heap or several; then the load succeeds and runs correctly.
    for memory in [MemoryMode::Direct, MemoryMode::Staged] {
        let options = LoadOptions {
            memory,
            ..Default::default()
        };
        let scan = testing::scan_allocations(
            &device,
            256,
            || Model::load_with(&bytes_of("add"), &device, &options),
            |e| match e {
                Error::Device(v) => Some(v),
                _ => None,
            },
        );
        eprintln!(
            "{memory:?}: {} loads failed on allocation ({:?}), {} loaded",
            scan.failed.len(),
            scan.failed,
            scan.done.len()
        );
        // A load either fails by name or recovers (a direct load falls back to staging).
        assert!(
            scan.failed.len() + scan.done.len() > 1,
            "nothing was allocated"
        );
        for mut model in scan.done {
            run_add(&mut model, 1.5);
        }
    }
    drop(device);
    assert_no_validation_errors_of_ours(&instance);
}

#[test]
fn models_dropped_after_use_leave_nothing_at_device_destruction() {
    let _serial = serial();
    let Some((instance, device)) = device("vgf_models_dropped_after_use_leave_nothing") else {
        return;
    };
    for memory in [MemoryMode::Direct, MemoryMode::Staged] {
        let options = LoadOptions {
            memory,
            ..Default::default()
        };
        let mut add = Model::load_with(&bytes_of("add"), &device, &options).unwrap();
        let mut pool = Model::load_with(&bytes_of("avgpool"), &device, &options).unwrap();
        run_add(&mut add, 1.0);
        run_avgpool(&mut pool);
        // Device-side use too: submitted and dropped without a wait (drop waits).
        // SAFETY: no semaphores; the inputs were written by the execution above.
        unsafe { add.submit(&[], &[]) }.unwrap();
        drop(pool);
        drop(add);
    }
    drop(device);
    assert_no_validation_errors_of_ours(&instance);
}
