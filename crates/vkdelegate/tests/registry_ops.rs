//! Program-file compute steps reach every op of the compute delegate's registry by its
//! program-file name: a step with several inputs (`cat`), a kernel of its own
//! (`pixel_shuffle`), optional attributes (`slice`), in both hand-off modes, against a CPU
//! reference.

#![cfg(feature = "compute")]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use std::path::Path;

use vk_core::HostTensor;
use vk_core::testing::{self, assert_no_validation_errors_of_ours};
use vkdelegate::program::{HandOff, ProgramBuilder, ProgramFile};

const PROGRAM: &str = r#"
outputs = ["y"]

[[step]]
name = "double"
op = "mul_scalar"
value = 2.0
input_shape = [1, 2, 3, 3]
inputs = ["x"]
outputs = ["x2"]

[[step]]
name = "join"
op = "cat"
dim = 1
input_shape = [1, 2, 3, 3]
inputs = ["x", "x2"]
outputs = ["c"]

[[step]]
name = "shuffle"
op = "pixel_shuffle"
upscale_factor = 2
inputs = ["c"]
outputs = ["s"]

[[step]]
name = "crop"
op = "slice"
dim = 3
start = 1
step = 2
inputs = ["s"]
outputs = ["y"]
"#;

/// `x` [1, 2, 3, 3] joined with `2x` along channels, pixel-shuffled by 2 to [1, 1, 6, 6], every
/// other column from column 1: [1, 1, 6, 3].
fn reference(x: &[f32]) -> Vec<f32> {
    let c: Vec<f32> = x.iter().copied().chain(x.iter().map(|v| 2.0 * v)).collect();
    let mut y = Vec::new();
    for i in 0..6 {
        for j in (1..6).step_by(2) {
            let ch = (i % 2) * 2 + j % 2;
            y.push(c[(ch * 3 + i / 2) * 3 + j / 2]);
        }
    }
    y
}

#[test]
fn program_steps_call_registry_ops_by_name() {
    let file = ProgramFile::parse(PROGRAM, Path::new(".")).unwrap();
    let x: Vec<f32> = (0..18).map(|i| i as f32 * 0.5 - 3.0).collect();
    let input = HostTensor::from_f32(vec![1, 2, 3, 3], &x).unwrap();
    for hand_off in [HandOff::Device, HandOff::Host] {
        let mut p = match ProgramBuilder::from_file(file.clone())
            .hand_off(hand_off)
            .build()
        {
            Ok(p) => p,
            Err(e) => {
                return testing::skip("program_steps_call_registry_ops_by_name", &e.to_string());
            }
        };
        let out = p.execute(std::slice::from_ref(&input)).unwrap();
        assert_eq!(out[0].shape(), [1, 1, 6, 3]);
        assert_eq!(out[0].to_f32().unwrap(), reference(&x), "{hand_off:?}");
        let instance = p.device().instance().clone();
        drop(p);
        assert_no_validation_errors_of_ours(&instance);
    }
    // A bad attribute is named with the op.
    let bad = PROGRAM.replace("upscale_factor = 2", "upscale_factor = \"two\"");
    let e = ProgramFile::parse(&bad, Path::new("."))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("op pixel_shuffle: `upscale_factor` must be an integer"),
        "{e}"
    );
}
