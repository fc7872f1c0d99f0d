//! Runs in flight and outputs fed back into inputs (`ProgramBuilder::runs_in_flight`,
//! `ProgramBuilder::feed_back`, `Program::start`, `Program::finish`): chains of compute ops
//! whose results become the next run's inputs on the device, with two runs queued at once,
//! against values computed on the host; the misuses are named errors. Validation is on.

#![cfg(feature = "compute")]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod steps;

use steps::step_op;
use vk_core::testing::{self, assert_no_validation_errors_of_ours};
use vk_core::{DType, HostTensor};
use vkdelegate::program::{DeviceChoice, HandOff, Program, ProgramBuilder, ProgramError};

fn attrs(shape: &[i64], dtype: &str, value: f64) -> Vec<(&'static str, toml::Value)> {
    let shape = shape.iter().map(|&d| toml::Value::Integer(d)).collect();
    vec![
        ("input_shape", toml::Value::Array(shape)),
        ("input_dtype", toml::Value::String(dtype.into())),
        ("value", toml::Value::Float(value)),
    ]
}

/// x -> x + 1 = y -> 2y = z, y fed back into x.
fn counter(device: DeviceChoice) -> ProgramBuilder {
    ProgramBuilder::new()
        .device(device)
        .step(step_op(
            "inc",
            "add_scalar",
            ("x", "y"),
            &attrs(&[4], "f32", 1.0),
        ))
        .step(step_op(
            "double",
            "mul_scalar",
            ("y", "z"),
            &[("value", 2.0.into())],
        ))
        .outputs(&["z"])
        .feed_back("y", "x")
}

fn f32s(out: &[HostTensor]) -> Vec<f32> {
    out[0].to_f32().unwrap()
}

#[test]
fn fed_back_outputs_chain_runs_in_flight() {
    let test = "fed_back_outputs_chain_runs_in_flight";
    let Some((instance, device)) = testing::device(test, &vkdelegate::compute::requirements())
    else {
        return;
    };
    let mut p: Program = counter(DeviceChoice::Device(device.clone()))
        .runs_in_flight(2)
        .build()
        .unwrap();
    let x0 = [0.5f32, -3.0, 10.0, 0.0];
    let x = HostTensor::from_f32(vec![4], &x0).unwrap();
    p.start(Some(std::slice::from_ref(&x))).unwrap();
    p.start(None).unwrap();
    assert_eq!(p.running(), 2);
    // A third run, or new inputs, while two (or one) are in flight: named errors.
    let full = p.start(None).unwrap_err();
    assert!(
        matches!(
            full,
            ProgramError::InFlight {
                running: 2,
                most: 2,
                ..
            }
        ),
        "{full}"
    );
    let mut want = x0;
    let mut got = Vec::new();
    for k in 1..=6 {
        got.push(f32s(&p.finish().unwrap()));
        want.iter_mut().for_each(|v| *v += 1.0);
        assert_eq!(got[k - 1], want.map(|v| 2.0 * v), "run {k}");
        if k <= 4 {
            p.start(None).unwrap();
        }
        if k == 1 {
            let busy = p.start(Some(std::slice::from_ref(&x))).unwrap_err();
            assert!(
                matches!(
                    busy,
                    ProgramError::InFlight {
                        with_inputs: true,
                        ..
                    }
                ),
                "{busy}"
            );
        }
    }
    assert!(matches!(p.finish(), Err(ProgramError::NothingInFlight)));
    // New inputs start the chain again; `execute` runs on them as ever.
    let out = p.execute(std::slice::from_ref(&x)).unwrap();
    assert_eq!(f32s(&out), x0.map(|v| 2.0 * (v + 1.0)));
    p.start(None).unwrap();
    assert_eq!(f32s(&p.finish().unwrap()), x0.map(|v| 2.0 * (v + 2.0)));
    drop(p);
    assert_no_validation_errors_of_ours(&instance);
}

/// Three runs recorded in each submission, two submissions in flight: each run reads what the
/// one before left, within a submission and across them.
#[test]
fn several_runs_in_one_submission_chain_too() {
    let test = "several_runs_in_one_submission_chain_too";
    let Some((instance, device)) = testing::device(test, &vkdelegate::compute::requirements())
    else {
        return;
    };
    let mut p = counter(DeviceChoice::Device(device))
        .runs_in_flight(2)
        .runs_per_submission(3)
        .build()
        .unwrap();
    assert_eq!((p.runs_per_submission(), p.most_running()), (3, 6));
    let x = HostTensor::from_f32(vec![4], &[1.0, 2.0, 3.0, 4.0]).unwrap();
    p.start(Some(std::slice::from_ref(&x))).unwrap();
    p.start(None).unwrap();
    assert_eq!(p.running(), 6);
    let full = p.start(None).unwrap_err();
    assert!(
        matches!(
            full,
            ProgramError::InFlight {
                running: 6,
                most: 6,
                ..
            }
        ),
        "{full}"
    );
    let mut firsts = Vec::new();
    for k in 0..9 {
        firsts.push(f32s(&p.finish().unwrap())[0]);
        // A slot is free once its three runs are read.
        if k == 2 {
            p.start(None).unwrap();
        }
    }
    let want: Vec<f32> = (1..=9).map(|k| 2.0 * (1.0 + k as f32)).collect();
    assert_eq!(firsts, want);
    drop(p);
    assert_no_validation_errors_of_ours(&instance);
}

/// An `i32` result fed into an `i64` input (a position counting up), one run in flight: each
/// run sees the last one's result.
#[test]
fn an_i32_result_feeds_an_i64_input() {
    let test = "an_i32_result_feeds_an_i64_input";
    let Some((instance, device)) = testing::device(test, &vkdelegate::compute::requirements())
    else {
        return;
    };
    let mut p = ProgramBuilder::new()
        .device(DeviceChoice::Device(device))
        .step(step_op(
            "next",
            "add_scalar",
            ("pos", "next"),
            &attrs(&[1], "i64", 1.0),
        ))
        .step(step_op("int", "to", ("next", "n"), &[("dtype", 3.into())]))
        .feed_back("n", "pos")
        .build()
        .unwrap();
    assert_eq!(p.outputs()[0].dtype, DType::I32);
    let pos = HostTensor::new(DType::I64, vec![1], 5i64.to_le_bytes().to_vec()).unwrap();
    p.start(Some(&[pos])).unwrap();
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(p.finish().unwrap()[0].to_i32().unwrap()[0]);
        p.start(None).unwrap();
    }
    seen.push(p.finish().unwrap()[0].to_i32().unwrap()[0]);
    assert_eq!(seen, [6, 7, 8, 9, 10]);
    drop(p);
    assert_no_validation_errors_of_ours(&instance);
}

#[test]
fn feedbacks_that_cannot_be_are_named() {
    let test = "feedbacks_that_cannot_be_are_named";
    let Some((instance, device)) = testing::device(test, &vkdelegate::compute::requirements())
    else {
        return;
    };
    let on = || DeviceChoice::Device(device.clone());
    let problem = |b: ProgramBuilder| match b.build() {
        Err(e @ ProgramError::FeedBack { .. }) => e.to_string(),
        other => panic!("{other:?}"),
    };
    let unknown = problem(counter(on()).feed_back("y", "nothing"));
    assert!(
        unknown.contains("'nothing'") && unknown.contains("no program input"),
        "{unknown}"
    );
    let unmade = problem(counter(on()).feed_back("w", "x"));
    assert!(unmade.contains("no step produces"), "{unmade}");
    let twice = problem(counter(on()).feed_back("z", "x"));
    assert!(twice.contains("another tensor"), "{twice}");
    let host = problem(counter(on()).hand_off(HandOff::Host));
    assert!(host.contains("device hand-off"), "{host}");
    let dtype = ProgramBuilder::new()
        .device(on())
        .step(step_op(
            "next",
            "add_scalar",
            ("pos", "next"),
            &attrs(&[2], "f32", 1.0),
        ))
        .step(step_op("int", "to", ("next", "n"), &[("dtype", 3.into())]))
        .step(step_op(
            "more",
            "add_scalar",
            ("count", "c"),
            &attrs(&[2], "f32", 1.0),
        ))
        .outputs(&["c"])
        .feed_back("n", "count");
    let dtype = problem(dtype);
    assert!(dtype.contains("i32 does not become f32"), "{dtype}");
    drop(device);
    assert_no_validation_errors_of_ours(&instance);
}
