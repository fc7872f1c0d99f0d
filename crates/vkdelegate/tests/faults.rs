//! Faults of programs are errors, never aborts, hangs or leaks: the example program (VGF ->
//! compute -> VGF) on a caller's device, in both hand-off modes. A device lost at submit or
//! at wait fails that execution and every later one of every program on the device (and new
//! builds) with vk-core's `DeviceLost`, while a program on another device keeps working; a
//! wait that times out is a `Timeout` after which the program runs again correctly; builds
//! that run out of memory part-way fail by name and destroy what they made. Each test drops
//! its devices before asserting zero validation errors (of ours), so objects left at
//! `vkDestroyDevice` count as errors.

#![cfg(all(feature = "vgf", feature = "compute"))]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod example;

use example::{build, check, input, reference, requirements, serial};
use vk_core::testing::{self, assert_no_validation_errors_of_ours};
use vk_core::{Device, FaultPoint, Instance, vk};
use vkdelegate::program::{DeviceChoice, HandOff, Program, ProgramError};

fn device(test: &str) -> Option<(Instance, Device)> {
    testing::device(test, &requirements())
}

/// vk-core's error inside a program error, whichever layer reported it.
fn core_error(e: &ProgramError) -> Option<&vk_core::Error> {
    match e {
        ProgramError::Vk(e) => Some(e),
        ProgramError::Vgf { source, .. } => match &**source {
            vkdelegate::vgf::Error::Device(e) => Some(e),
            _ => None,
        },
        ProgramError::Compute { source, .. } => match &**source {
            vkdelegate::compute::Error::Vk(e) => Some(e),
            _ => None,
        },
        _ => None,
    }
}

fn assert_lost(e: &ProgramError, call: &str) {
    assert!(
        matches!(core_error(e), Some(vk_core::Error::DeviceLost { .. })),
        "expected DeviceLost, got {e:?}"
    );
    let text = e.to_string();
    assert!(text.contains("was lost") && text.contains(call), "{text}");
}

fn run(p: &mut Program, seed: u64) {
    let x = input(seed);
    check(
        &p.execute(std::slice::from_ref(&x)).unwrap(),
        &reference(&x),
    );
}

fn device_loss_at(point: FaultPoint, call: &str, failing: HandOff) {
    let _serial = serial();
    let test = format!("program_device_loss_at_{point:?}_{failing:?}");
    let Some((instance, lost)) = device(&test) else {
        return;
    };
    let other = instance
        .select_adapter()
        .unwrap()
        .create_device(&requirements())
        .unwrap();
    let on = |d: &Device, h| build(h, DeviceChoice::Device(d.clone())).unwrap();
    let mut on_device = on(&lost, HandOff::Device);
    let mut via_host = on(&lost, HandOff::Host);
    let mut elsewhere = on(&other, HandOff::Device);
    run(&mut on_device, 0);
    run(&mut via_host, 0);
    run(&mut elsewhere, 0);

    lost.inject_fault(point, vk::Result::ERROR_DEVICE_LOST);
    let x = input(1);
    let (first, second) = match failing {
        HandOff::Device => (&mut on_device, &mut via_host),
        HandOff::Host => (&mut via_host, &mut on_device),
    };
    let e = first.execute(std::slice::from_ref(&x)).unwrap_err();
    assert_lost(&e, call);
    eprintln!("{point:?}, {failing:?} hand-off: {e}");
    assert_lost(&first.execute(std::slice::from_ref(&x)).unwrap_err(), call);
    assert_lost(&second.execute(std::slice::from_ref(&x)).unwrap_err(), call);
    match build(HandOff::Device, DeviceChoice::Device(lost.clone())) {
        Err(e) => assert_lost(&e, call),
        Ok(_) => panic!("a program was built on a lost device"),
    }
    run(&mut elsewhere, 2);
    drop((on_device, via_host));
    drop(lost);
    run(&mut elsewhere, 3);
    assert!(other.lost().is_none());
    drop(elsewhere);
    drop(other);
    assert_no_validation_errors_of_ours(&instance);
}

#[test]
fn a_device_lost_at_submit_fails_every_program_of_that_device_only() {
    device_loss_at(FaultPoint::Submit, "vkQueueSubmit", HandOff::Device);
    device_loss_at(FaultPoint::Submit, "vkQueueSubmit", HandOff::Host);
}

#[test]
fn a_device_lost_at_wait_fails_every_program_of_that_device_only() {
    device_loss_at(FaultPoint::Wait, "vkWaitForFences", HandOff::Device);
    device_loss_at(FaultPoint::Wait, "vkWaitForFences", HandOff::Host);
}

#[test]
fn a_wait_that_times_out_is_an_error_and_the_next_execution_is_correct() {
    let _serial = serial();
    let Some((instance, device)) = device("program_a_wait_that_times_out") else {
        return;
    };
    for hand_off in [HandOff::Device, HandOff::Host] {
        let mut p = build(hand_off, DeviceChoice::Device(device.clone())).unwrap();
        run(&mut p, 0);
        // A time-out at each wait of the execution in turn (host hand-off waits per step).
        for _ in 0..p.steps().len() {
            device.inject_fault(FaultPoint::Wait, vk::Result::TIMEOUT);
            let e = p.execute(&[input(5)]).unwrap_err();
            assert!(
                matches!(core_error(&e), Some(vk_core::Error::Timeout { .. })),
                "{hand_off:?}: expected Timeout, got {e:?}"
            );
            assert!(e.to_string().contains("did not finish within"), "{e}");
            run(&mut p, 6);
            if hand_off == HandOff::Device {
                break;
            }
        }
        device.inject_fault(FaultPoint::Submit, vk::Result::ERROR_OUT_OF_DEVICE_MEMORY);
        let e = p.execute(&[input(7)]).unwrap_err();
        assert!(e.to_string().contains("vkQueueSubmit"), "{e}");
        run(&mut p, 8);
        // A time-out just before the drop: the drop still waits.
        device.inject_fault(FaultPoint::Wait, vk::Result::TIMEOUT);
        assert!(p.execute(&[input(9)]).is_err());
        drop(p);
    }
    assert!(device.lost().is_none());
    drop(device);
    assert_no_validation_errors_of_ours(&instance);
}

#[test]
fn builds_that_run_out_of_memory_part_way_leave_nothing_behind() {
    let _serial = serial();
    let test = "program_builds_that_run_out_of_memory_part_way";
    let Some((instance, device)) = device(test) else {
        return;
    };
    // Each allocation of the build fails in turn (every step's memory, the plan's staging),
    // on any device, one memory heap or several; then the build succeeds and runs correctly.
    for hand_off in [HandOff::Device, HandOff::Host] {
        let scan = testing::scan_allocations(
            &device,
            512,
            || build(hand_off, DeviceChoice::Device(device.clone())),
            core_error,
        );
        eprintln!(
            "{hand_off:?}: {} program builds failed on allocation ({:?}), {} built",
            scan.failed.len(),
            scan.failed,
            scan.done.len()
        );
        assert!(!scan.failed.is_empty());
        for mut p in scan.done {
            run(&mut p, 1);
        }
    }
    drop(device);
    assert_no_validation_errors_of_ours(&instance);
}

#[test]
fn programs_dropped_after_use_leave_nothing_at_device_destruction() {
    let _serial = serial();
    let Some((instance, device)) = device("programs_dropped_after_use_leave_nothing") else {
        return;
    };
    let mut a = build(HandOff::Device, DeviceChoice::Device(device.clone())).unwrap();
    let mut b = build(HandOff::Host, DeviceChoice::Device(device.clone())).unwrap();
    run(&mut a, 1);
    run(&mut b, 1);
    // Dropped in the order of creation, the device last.
    drop(a);
    drop(b);
    drop(device);
    assert_no_validation_errors_of_ours(&instance);
}
