//! VGF files run natively: each fp32 corpus model's data graph lowered onto the compute
//! delegate and run on a device without `VK_ARM_data_graph` (no emulation layer), against
//! scenario-runner's output; integer graphs are refused with their operators named.
#![cfg(all(feature = "vgf", feature = "compute"))]
#![allow(clippy::unwrap_used)] // helpers outside #[test] functions

use std::path::{Path, PathBuf};
use std::sync::Arc;
use vk_core::testing::{self, assert_no_validation_errors};
use vk_core::{
    ArmSupport, DType, Device, EmulationPolicy, HostTensor, Instance, InstanceDesc, Requirements,
};
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

/// An f32, f16, int8, int16 or int32 `.npy` file.
fn npy(path: &Path) -> HostTensor {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    if matches!(npy.dtype(), npyz::DType::Plain(t) if t.to_string() == "|i1") {
        let v: Vec<i8> = npy.into_vec().unwrap();
        return HostTensor::new(DType::I8, shape, v.iter().map(|&b| b as u8).collect()).unwrap();
    }
    if matches!(npy.dtype(), npyz::DType::Plain(t) if t.to_string() == "<f2") {
        let v: Vec<half::f16> = npy.into_vec().unwrap();
        let bytes = v.iter().flat_map(|b| b.to_le_bytes()).collect();
        return HostTensor::new(DType::F16, shape, bytes).unwrap();
    }
    if matches!(npy.dtype(), npyz::DType::Plain(t) if t.to_string() == "<i2") {
        let v: Vec<i16> = npy.into_vec().unwrap();
        let bytes = v.iter().flat_map(|b| b.to_le_bytes()).collect();
        return HostTensor::new(DType::I16, shape, bytes).unwrap();
    }
    if matches!(npy.dtype(), npyz::DType::Plain(t) if t.to_string() == "<i4") {
        return HostTensor::from_i32(shape, &npy.into_vec::<i32>().unwrap()).unwrap();
    }
    HostTensor::from_f32(shape, &npy.into_vec::<f32>().unwrap()).unwrap()
}

fn file(model: &str) -> VgfFile {
    let bytes: Arc<[u8]> = std::fs::read(dir(model).join("model.vgf")).unwrap().into();
    VgfFile::decode(bytes).unwrap()
}

/// A device meeting `requirements` on an instance made without Arm's emulation layer, with
/// validation on (lavapipe offers no ARM extension of its own), or `None` after a skip.
fn native_device(test: &str, requirements: &Requirements) -> Option<(Instance, Device)> {
    testing::validate_every_instance();
    let desc = InstanceDesc {
        validation: true,
        emulation: EmulationPolicy::Off,
        ..InstanceDesc::default()
    };
    let instance = match Instance::new(&desc) {
        Ok(i) => i,
        Err(e) => {
            testing::skip(test, &e.to_string());
            return None;
        }
    };
    let adapter = match instance.select_adapter() {
        Ok(a) => a,
        Err(e) => {
            testing::skip(test, &e.to_string());
            return None;
        }
    };
    if adapter.capabilities().arm != ArmSupport::Absent {
        eprintln!("{test}: this device offers VK_ARM_data_graph of its own");
    }
    match adapter.create_device(requirements) {
        Ok(d) => Some((instance, d)),
        Err(e) => {
            testing::skip(test, &e.to_string());
            None
        }
    }
}

/// A corpus model lowered, built and run on its fixture inputs: its kernels, its outputs and
/// scenario-runner's (same shapes, checked).
fn run_natively(dev: &Device, model: &str) -> (Vec<String>, Vec<(HostTensor, HostTensor)>) {
    let g = graph_of(&file(model)).unwrap_or_else(|e| panic!("{model}: {e}"));
    // As a GPU lays kernels out, so that every kernel runs on lavapipe too.
    let options = compute_delegate::BuildOptions {
        gpu_layouts: true,
        ..Default::default()
    };
    let mut built = g
        .build_with(dev, &options)
        .unwrap_or_else(|e| panic!("{model}: {e}"));
    let inputs: Vec<HostTensor> = (0..g.input_specs().len())
        .map(|i| npy(&dir(model).join(format!("input_{i}.npy"))))
        .collect();
    let out = built
        .execute(&inputs)
        .unwrap_or_else(|e| panic!("{model}: {e}"));
    let pairs: Vec<(HostTensor, HostTensor)> = out
        .into_iter()
        .enumerate()
        .map(|(i, got)| {
            let want = npy(&dir(model).join(format!("vgf_output_{i}.npy")));
            assert_eq!(got.shape(), want.shape(), "{model}: output {i}");
            (got, want)
        })
        .collect();
    assert!(!pairs.is_empty(), "{model}: no outputs");
    let kernels = built.kernels().iter().map(|k| k.to_string()).collect();
    (kernels, pairs)
}

/// The worst of `|ours - reference| - RTOL * |reference|` over every output.
fn worst_fp32(model: &str, pairs: &[(HostTensor, HostTensor)]) -> f32 {
    let mut worst = f32::MIN;
    for (i, (out, want)) in pairs.iter().enumerate() {
        let (a, b) = (out.to_f32().unwrap(), want.to_f32().unwrap());
        let w = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs() - RTOL * y.abs())
            .fold(f32::MIN, f32::max);
        assert!(!w.is_nan(), "{model}: output {i} holds NaN");
        worst = worst.max(w);
    }
    worst
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
        "elementwise",
        "movement",
        "gelu_mlp",
        "logical",
        "gather",
        "resize",
        "reductions",
        "attention",
        "conv3d",
    ];
    // Only the compute delegate's needs: no ARM extension.
    let g = graph_of(&file("add")).unwrap();
    let Some((instance, dev)) = native_device("vgf_native", &g.requirements()) else {
        return;
    };
    for model in models {
        let (kernels, pairs) = run_natively(&dev, model);
        // The files' own NCHW-to-NHWC transposes cancel against the NCHW convolutions and
        // pools, and constant weights are laid out at build: no copy is left.
        match model {
            // Its sums are short: one dot product per output.
            "conv" => assert_eq!(kernels, ["ConvDirect"], "{model}"),
            "avgpool" => assert_eq!(kernels, ["Pool2x2"], "{model}"),
            // The stride-2 layers' uneven padding (more at the top and left) is the
            // convolutions' own: no pad copies; the one copy left is the permute to NHWC
            // before the mean.
            // Its narrow 1x1 layers of few pixels share each sum among lanes, as on a GPU.
            "mobilenet_v2" => {
                assert_eq!(
                    kernels.iter().filter(|k| *k == "Copy").count(),
                    1,
                    "{kernels:?}"
                );
                assert!(kernels.iter().any(|k| k == "ConvPwSplit"), "{kernels:?}");
            }
            _ => {}
        }
        let worst = worst_fp32(model, &pairs);
        assert!(worst <= ATOL, "{model}: {worst} over the tolerance");
    }
    assert_no_validation_errors(&instance);
}

/// fp16 files (fp16 inputs, weights and outputs) run natively in fp16, within the fp16
/// tolerance of scenario-runner's output, relative to its scale (docs/testing.md): a
/// convolution, TOSA's float math, data movement and products (an fp16 MATMUL with an fp32
/// result CAST back), and a transformer MLP.
#[test]
fn fp16_vgf_models_run_natively() {
    let g = graph_of(&file("conv_fp16")).unwrap();
    let Some((instance, dev)) = native_device("vgf_native_fp16", &g.requirements()) else {
        return;
    };
    let widen = |t: &HostTensor| -> Vec<f32> {
        assert_eq!(t.dtype(), DType::F16);
        t.bytes()
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect()
    };
    for model in [
        "conv_fp16",
        "elementwise_fp16",
        "movement_fp16",
        "gelu_mlp_fp16",
        "attention_fp16",
        "conv3d_fp16",
        "resize_fp16",
        "reductions_fp16",
        "logical_fp16",
        "gather_fp16",
        "pools_fp16",
        "moves_fp16",
        "argmax_fp16",
    ] {
        let (kernels, pairs) = run_natively(&dev, model);
        if model == "conv_fp16" {
            // One product: the GEMM kernel the device runs best (cooperative matrices where
            // it has them, after a patch matrix on those that take one); without them, its
            // short sums as one dot product per output.
            let (last, before) = kernels.split_last().unwrap();
            let gemm = last.starts_with("Gemm") && before.iter().all(|k| k.starts_with("Im2col"));
            let cooperative = compute_delegate::cooperative_gemm_kernel(&dev).is_some();
            assert!(
                gemm || (!cooperative && kernels == ["ConvDirect_f16"]),
                "{kernels:?}"
            );
        }
        for (out, want) in &pairs {
            // ARGMAX's indices are int32: exact.
            if want.dtype() == DType::I32 {
                assert_eq!(out.bytes(), want.bytes(), "{model}");
                continue;
            }
            let (a, b) = (widen(out), widen(want));
            let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
            let worst = a
                .iter()
                .zip(&b)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max);
            assert!(
                worst <= 1e-2 * scale,
                "{model}: {worst} against a scale of {scale}"
            );
        }
    }
    assert_no_validation_errors(&instance);
}

/// The int16 models (int16 activations, int8 weights: Arm's a16w8 quantization) run natively,
/// bit-exact with scenario-runner: their convolutions' int48 sums and RESCALEs as one op each
/// (`IntConv`), CLAMP, a transformer MLP's int16 TABLEs (513 entries, interpolated), int16
/// data movement (MAX_POOL2D, PAD, SLICE, CONCAT, TILE, REVERSE) and average pools, an
/// attention's int16 MATMULs of two activations (int48 sums rescaled in the same op) and a
/// CONV3D (one 2-D convolution over its depth slices side by side); int32 arithmetic without
/// quantization (bitwise operators, shifts, INTDIV; narrowing CASTs, which wrap); and ARGMAX's
/// int32 indices.
#[test]
fn int16_and_int32_vgf_models_run_natively_bit_exact() {
    let g = graph_of(&file("mlp_int16")).unwrap();
    let Some((instance, dev)) = native_device("vgf_native_int16", &g.requirements()) else {
        return;
    };
    for model in [
        "mlp_int16",
        "conv_int16",
        "gelu_mlp_int16",
        "moves_int16",
        "pools_int16",
        "bitwise",
        "casts",
        "attention_int16",
        "conv3d_int16",
        "elementwise_int16",
        "movement_int16",
        "resize_int16",
        "argmax",
    ] {
        let (kernels, pairs) = run_natively(&dev, model);
        for (out, want) in &pairs {
            assert_eq!(out.dtype(), want.dtype(), "{model}");
            assert_eq!(out.bytes(), want.bytes(), "{model}");
        }
        // ARGMAX of floats: the float kernels' argmax, an int32 index.
        assert!(
            model == "argmax" || kernels.iter().any(|k| k == "IntOps"),
            "{model}: {kernels:?}"
        );
    }
    assert_no_validation_errors(&instance);
}

/// The int8 models run natively, bit-exact with scenario-runner: RESCALEs around an ADD; a
/// CONV2D and its per-channel RESCALE; MobileNetV2's blocks (convolutions, depthwise
/// convolutions, residual additions, the average pool and the classifier) on the int8
/// kernels; an int8 transformer MLP (linear layers, a layer norm, GELU and a softmax as
/// TOSA writes them in integers: standalone RESCALEs, int32 MUL, SUB and ADD, REDUCE_SUM and
/// REDUCE_MAX, and four int8 TABLEs) on TOSA's integer arithmetic; TOSA's int8 elementwise
/// operators (ABS, NEGATE, comparisons and SELECT, MAXIMUM, MINIMUM, CLAMP, TABLEs); and int8
/// data movement and products (MATMUL with zero points, PAD, TILE, TRANSPOSE_CONV2D, the
/// reductions, MAX_POOL2D); RESIZE (nearest, and bilinear's int32 sums rescaled) and REVERSE;
/// an attention (MATMULs of two activations, the softmax's TABLEs) and a CONV3D.
#[test]
fn int8_vgf_models_run_natively_bit_exact() {
    let g = graph_of(&file("add_int8")).unwrap();
    let Some((instance, dev)) = native_device("vgf_native_int8", &g.requirements()) else {
        return;
    };
    for model in [
        "add_int8",
        "conv_int8",
        "mobilenet_v2_small_int8",
        "gelu_mlp_int8",
        "elementwise_int8",
        "movement_int8",
        "resize_int8",
        "pools_int8",
        "attention_int8",
        "conv3d_int8",
        "logical_int8",
    ] {
        let (kernels, pairs) = run_natively(&dev, model);
        for (out, want) in &pairs {
            assert_eq!(out.bytes(), want.bytes(), "{model}");
        }
        let count = |k: &str| kernels.iter().filter(|&n| n == k).count();
        if model == "mobilenet_v2_small_int8" {
            // 52 convolutions and the classifier, 10 additions, 1 pool: nothing else runs.
            // The convolution kernels: the split one (deep sums), the depthwise one (rows of
            // whole words) and the window one (the first layer, depthwise rows of 7 pixels)
            // serve; the pointwise one (1x1 of shallow sums) and the general one (large
            // windows) may.
            let convs = ["QConv", "QConvPw", "QConvSplit", "QConvDw", "QConvWin"];
            assert!(convs[2..].iter().all(|k| count(k) > 0), "{kernels:?}");
            assert_eq!(
                (
                    convs.iter().map(|k| count(k)).sum::<usize>(),
                    count("QAdd"),
                    count("QPool"),
                    kernels.len()
                ),
                (53, 10, 1, 64),
                "{kernels:?}"
            );
        }
        if model == "gelu_mlp_int8" {
            // Its two linear layers on the int8 convolution kernels, the rest in integers.
            assert_eq!(
                kernels.iter().filter(|k| k.starts_with("QConv")).count(),
                2,
                "{kernels:?}"
            );
            assert!(count("IntOps") >= 40, "{kernels:?}");
        }
    }
    assert_no_validation_errors(&instance);
}

/// What the native path cannot lower is named, each operator with its word offset, all at
/// once: the int8 transformer MLP with its four TABLEs turned into RFFT2Ds (an operator of the
/// same operand count that it does not lower), its SPIR-V otherwise intact.
#[test]
fn unsupported_operators_are_named_at_once() {
    let mut bytes = std::fs::read(dir("gelu_mlp_int8").join("model.vgf")).unwrap();
    // OpExtInst of 7 words (its own, result type, id, set, TABLE = 30, two operands).
    let header = (7u32 << 16) | 12;
    let word = |b: &[u8], at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let mut patched = 0;
    for at in (0..bytes.len().saturating_sub(24)).step_by(4) {
        if word(&bytes, at) == header && word(&bytes, at + 16) == 30 {
            bytes[at + 16..at + 20].copy_from_slice(&8u32.to_le_bytes());
            patched += 1;
        }
    }
    assert_eq!(patched, 4, "the fixture's TABLEs");
    let file = VgfFile::decode(bytes.into()).unwrap();
    let Err(NativeError::Unsupported(what)) = graph_of(&file) else {
        panic!("the patched gelu_mlp_int8 lowered");
    };
    let ffts = what
        .iter()
        .filter(|w| w.starts_with("RFFT2D at word "))
        .count();
    assert_eq!((ffts, what.len()), (4, 4), "{what:?}");
    let e = NativeError::Unsupported(what.clone());
    assert!(e.to_string().starts_with("not runnable natively: "), "{e}");
}
