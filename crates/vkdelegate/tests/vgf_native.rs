//! VGF files run natively: each fp32 corpus model's data graph lowered onto the compute
//! delegate and run on a device without `VK_ARM_data_graph` (no emulation layer), against
//! scenario-runner's output; integer graphs are refused with their operators named.
#![cfg(all(feature = "vgf", feature = "compute"))]
#![allow(clippy::unwrap_used)] // helpers outside #[test] functions

use std::path::{Path, PathBuf};
use std::sync::Arc;
use vk_core::testing::{self, assert_no_validation_errors};
use vk_core::{ArmSupport, EmulationPolicy, HostTensor, Instance, InstanceDesc};
use vkdelegate::vgf::VgfFile;
use vkdelegate::vgf_native::{NativeError, graph_of};

/// `|ours - reference| <= ATOL + RTOL * |reference|`: the VGF tests' fp32 tolerance
/// (docs/testing.md).
const ATOL: f32 = 1e-4;
/// See [`ATOL`].
const RTOL: f32 = 1e-3;

fn dir(model: &str) -> PathBuf {
    testing::fixture("vgf").join(model)
}

fn npy(path: &Path) -> HostTensor {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    HostTensor::from_f32(shape, &npy.into_vec::<f32>().unwrap()).unwrap()
}

fn file(model: &str) -> VgfFile {
    let bytes: Arc<[u8]> = std::fs::read(dir(model).join("model.vgf")).unwrap().into();
    VgfFile::decode(bytes).unwrap()
}

#[test]
fn fp32_vgf_models_run_natively_as_scenario_runner() {
    let models = [
        "add",
        "sqplus",
        "sqplus_1x3x4x4",
        "avgpool",
        "conv",
        "mlp",
        "mobilenet_v2",
    ];
    // Only the compute delegate's needs, on an instance without Arm's emulation layer: the
    // device offers no ARM extension (lavapipe has none of its own).
    let g = graph_of(&file("add")).unwrap();
    testing::validate_every_instance();
    let desc = InstanceDesc {
        validation: true,
        emulation: EmulationPolicy::Off,
        ..InstanceDesc::default()
    };
    let instance = match Instance::new(&desc) {
        Ok(i) => i,
        Err(e) => return testing::skip("vgf_native", &e.to_string()),
    };
    let adapter = match instance.select_adapter() {
        Ok(a) => a,
        Err(e) => return testing::skip("vgf_native", &e.to_string()),
    };
    if adapter.capabilities().arm != ArmSupport::Absent {
        eprintln!("vgf_native: this device offers VK_ARM_data_graph of its own");
    }
    let dev = adapter.create_device(&g.requirements()).unwrap();
    for model in models {
        let g = graph_of(&file(model)).unwrap_or_else(|e| panic!("{model}: {e}"));
        let mut built = g.build(&dev).unwrap_or_else(|e| panic!("{model}: {e}"));
        // The files' own NCHW-to-NHWC transposes cancel against the NCHW convolutions and
        // pools, and constant weights are laid out at build: no copy is left.
        match model {
            "conv" => assert_eq!(built.kernels(), ["Gemm"], "{model}"),
            "avgpool" => assert_eq!(built.kernels(), ["Pool2x2"], "{model}"),
            _ => {}
        }
        let inputs: Vec<HostTensor> = (0..g.input_specs().len())
            .map(|i| npy(&dir(model).join(format!("input_{i}.npy"))))
            .collect();
        let out = built
            .execute(&inputs)
            .unwrap_or_else(|e| panic!("{model}: {e}"));
        let want = npy(&dir(model).join("vgf_output_0.npy"));
        assert_eq!(out[0].shape(), want.shape(), "{model}");
        let (a, b) = (out[0].to_f32().unwrap(), want.to_f32().unwrap());
        let worst = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs() - RTOL * y.abs())
            .fold(f32::MIN, f32::max);
        assert!(worst <= ATOL, "{model}: {worst} over the tolerance");
    }
    assert_no_validation_errors(&instance);
}

#[test]
fn integer_graphs_are_refused_with_their_operators_named() {
    for (model, names) in [
        ("add_int8", &["RESCALE", "ADD"][..]),
        ("conv_int8", &["CONV2D", "RESCALE"][..]),
    ] {
        let e = graph_of(&file(model)).map(|_| ()).unwrap_err();
        let NativeError::Unsupported(what) = &e else {
            panic!("{model}: {e}");
        };
        for name in names {
            assert!(
                what.iter()
                    .any(|w| w.starts_with(name) && w.contains("at word")),
                "{model}: {e}"
            );
        }
    }
}
