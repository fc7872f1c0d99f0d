//! Programs move large host inputs and outputs through vk-core's host transfer: with
//! `VKDELEGATE_HOST_PATH=staged:64k` (set before any device is made; the one test of this
//! binary) a 1.6 MB input and output of a compute chain go through pipelined staging in 64 KiB
//! chunks, in both hand-off modes, against a CPU reference. Validation is on.

#![cfg(feature = "compute")]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod steps;

use steps::step_op;
use vk_core::testing::{self, assert_no_validation_errors_of_ours};
use vk_core::{HOST_PATH_ENV, HostTensor};
use vkdelegate::program::{DeviceChoice, HandOff, ProgramBuilder};

const SHAPE: [usize; 4] = [1, 32, 112, 112];

#[test]
fn large_program_io_goes_through_the_host_transfer() {
    // SAFETY: the only test of this binary sets the variable before it starts any thread or
    // loads Vulkan, so nothing reads the environment concurrently.
    unsafe { std::env::set_var(HOST_PATH_ENV, "staged:64k") };
    let test = "large_program_io_goes_through_the_host_transfer";
    let Some((instance, device)) = testing::device(test, &vkdelegate::compute::requirements())
    else {
        return;
    };
    let shape = toml::Value::Array(
        SHAPE
            .iter()
            .map(|&d| toml::Value::Integer(d as i64))
            .collect(),
    );
    let n: usize = SHAPE.iter().product();
    let x: Vec<f32> = (0..n).map(|i| (i % 977) as f32 * 0.01).collect();
    let want: Vec<f32> = x.iter().map(|v| v * 0.5 + 0.25).collect();
    let input = HostTensor::from_f32(SHAPE.to_vec(), &x).unwrap();
    for hand_off in [HandOff::Device, HandOff::Host] {
        let mut program = ProgramBuilder::new()
            .step(step_op(
                "scale",
                "mul_scalar",
                ("x", "a"),
                &[
                    ("value", toml::Value::Float(0.5)),
                    ("input_shape", shape.clone()),
                ],
            ))
            .step(step_op(
                "shift",
                "add_scalar",
                ("a", "y"),
                &[("value", toml::Value::Float(0.25))],
            ))
            .outputs(&["y"])
            .hand_off(hand_off)
            .device(DeviceChoice::Device(device.clone()))
            .build()
            .unwrap();
        for _ in 0..2 {
            let out = program.execute(std::slice::from_ref(&input)).unwrap();
            assert_eq!(out[0].to_f32().unwrap(), want, "{hand_off:?}");
        }
        if hand_off == HandOff::Device {
            // Only what the host transfer does not move is recorded: nothing here.
            assert_eq!(program.recorded_copies(), Some(0));
        }
    }
    drop(device);
    assert_no_validation_errors_of_ours(&instance);
}
