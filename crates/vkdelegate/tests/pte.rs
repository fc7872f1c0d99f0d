//! ExecuTorch programs (`fixtures/pte`, exported with ExecuTorch 1.5.1) run as programs on one
//! device, against PyTorch's outputs: fp32 within 1e-4 + 1e-3 * |ref| per element; fp16
//! (`force_fp16`), computed in fp16 or in its fp32 fallback (fp16 weights, fp32 arithmetic),
//! against the output's scale: every element within 2e-2 * max |ref|, and a classifier's top
//! class among the reference's top five and the other way round (`docs/testing.md`,
//! "Tolerances"). Programs with ops we lack, and broken files, give one named error.

#![cfg(all(feature = "vgf", feature = "compute"))]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use std::path::PathBuf;
use std::sync::Arc;

use vk_core::testing::{self, assert_no_validation_errors_of_ours};
use vk_core::{DType, HostTensor};
use vkdelegate::program::{DeviceChoice, DispatchProfile, VgfPath};
use vkdelegate::pte::{PteError, program_builder};

fn dir(model: &str) -> PathBuf {
    testing::fixture("pte").join(model)
}

/// An f32 or int64 (token ids) `.npy` file.
fn npy(path: PathBuf) -> HostTensor {
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    if matches!(npy.dtype(), npyz::DType::Plain(t) if t.to_string() == "<i8") {
        let ids: Vec<u8> = npy
            .into_vec::<i64>()
            .unwrap()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        return HostTensor::new(DType::I64, shape, ids).unwrap();
    }
    HostTensor::from_f32(shape, &npy.into_vec::<f32>().unwrap()).unwrap()
}

fn bytes(model: &str) -> Arc<[u8]> {
    std::fs::read(dir(model).join("model.pte")).unwrap().into()
}

/// One test of this binary at a time (each makes its own device; see tests/program.rs).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// How an output is judged against PyTorch's (`docs/testing.md`, "Tolerances").
#[derive(Debug, Clone, Copy)]
enum Tolerance {
    /// Every element within `atol + rtol * |ref|` (fp32 programs).
    Elementwise { atol: f32, rtol: f32 },
    /// Every element within `rel * max |ref|`; for a classifier's output (one row of 1000
    /// or more scores), the top class among the reference's top five and the other way round
    /// (fp16 programs).
    Scale { rel: f32 },
}

/// fp32 programs.
const FP32: Tolerance = Tolerance::Elementwise {
    atol: 1e-4,
    rtol: 1e-3,
};
/// `force_fp16` programs, computed in fp16 or in the fp32 fallback.
const FP16: Tolerance = Tolerance::Scale { rel: 2e-2 };

/// The indices of the `k` largest values, largest first.
fn top(values: &[f32], k: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[b].total_cmp(&values[a]));
    order.truncate(k);
    order
}

/// Checks `got` against `want` under `tolerance`; returns the worst error as a fraction of
/// what it allows.
fn judge(model: &str, i: usize, got: &[f32], want: &[f32], tolerance: Tolerance) -> f32 {
    let worst = match tolerance {
        Tolerance::Elementwise { atol, rtol } => got
            .iter()
            .zip(want)
            .map(|(x, y)| (x - y).abs() / (atol + rtol * y.abs()))
            .fold(0.0f32, f32::max),
        Tolerance::Scale { rel } => {
            let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            if want.len() >= 1000 {
                let (ours, theirs) = (top(got, 5), top(want, 5));
                assert!(
                    theirs.contains(&ours[0]) && ours.contains(&theirs[0]),
                    "{model} output {i}: top five {ours:?}, PyTorch's {theirs:?}"
                );
            }
            got.iter()
                .zip(want)
                .map(|(x, y)| (x - y).abs() / (rel * scale))
                .fold(0.0f32, f32::max)
        }
    };
    eprintln!("{model}: output {i}: worst error {worst:.3} of the tolerance ({tolerance:?})");
    worst
}

/// Runs `model` on its committed input and checks every output against PyTorch's.
fn runs_within_tolerance(model: &str, tolerance: Tolerance) {
    runs_on(model, tolerance, DeviceChoice::Standalone);
}

/// As [`runs_within_tolerance`] on `choice`; returns the dispatches the compute steps ran
/// (empty when skipped).
fn runs_on(model: &str, tolerance: Tolerance, choice: DeviceChoice) -> Vec<DispatchProfile> {
    testing::validate_every_instance();
    let built = program_builder(bytes(model), None)
        .unwrap()
        .device(choice)
        .build();
    let mut program = match built {
        Ok(p) => p,
        Err(e) => {
            testing::skip(model, &e.to_string());
            return Vec::new();
        }
    };
    let n = program.inputs().len();
    let inputs: Vec<HostTensor> = (0..n)
        .map(|i| npy(dir(model).join(format!("input_{i}.npy"))))
        .collect();
    for _ in 0..2 {
        let outputs = program
            .execute(&inputs)
            .unwrap_or_else(|e| panic!("{model}: {e}"));
        for (i, out) in outputs.iter().enumerate() {
            let want = npy(dir(model).join(format!("expected_output_{i}.npy")));
            assert_eq!(out.shape(), want.shape(), "{model} output {i}");
            assert_eq!(out.dtype(), DType::F32);
            let (a, b) = (out.to_f32().unwrap(), want.to_f32().unwrap());
            let worst = judge(model, i, &a, &b, tolerance);
            assert!(worst <= 1.0, "{model} output {i}: {worst} x the tolerance");
        }
    }
    let dispatches = program.profile().unwrap();
    let instance = program.device().instance().clone();
    drop(program);
    assert_no_validation_errors_of_ours(&instance);
    dispatches
}

#[test]
fn the_seed_example_runs_as_one_pte_on_one_device_and_queue() {
    let _serial = serial();
    testing::validate_every_instance();
    let mut program = match program_builder(bytes("seed_example"), None)
        .unwrap()
        .vgf_path(VgfPath::DataGraph)
        .build()
    {
        Ok(p) => p,
        Err(e) => return testing::skip("seed_example", &e.to_string()),
    };
    assert_eq!(
        program.steps(),
        vec![
            ("VgfBackend_0", "vgf"),
            ("VulkanBackend_1", "compute"),
            ("VgfBackend_2", "vgf")
        ]
    );
    let handles = program.step_handles();
    assert!(handles.windows(2).all(|w| w[0] == w[1]), "{handles:?}");
    // Device hand-off: the input in, the output out, nothing between the delegates.
    assert_eq!(program.recorded_copies(), Some(2));
    let x = npy(dir("seed_example").join("input_0.npy"));
    let want = npy(dir("seed_example").join("expected_output_0.npy"));
    let out = program.execute(&[x]).unwrap();
    assert_eq!(program.last_timings().submissions, 1);
    let err = out[0]
        .to_f32()
        .unwrap()
        .iter()
        .zip(want.to_f32().unwrap())
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(err <= 1e-5, "{err}");
    let instance = program.device().instance().clone();
    drop(program);
    assert_no_validation_errors_of_ours(&instance);
}

#[test]
fn vulkan_backend_programs_match_pytorch() {
    let _serial = serial();
    for model in [
        "conv_relu_residual",
        "gated_mlp",
        "mobilenet_v2",
        "transformer_encoder",
        "ops_mix",
    ] {
        runs_within_tolerance(model, FP32);
    }
}

/// A plan's delegate calls and the CPU kernels between them (the reduced ViT of the zoo in
/// fp16: five delegates, six `mul.Scalar` and `any` kernels) run as one compute graph step,
/// without most of the casts their f32 staging put at each boundary, and still match PyTorch.
#[test]
fn consecutive_compute_steps_run_as_one_graph() {
    let _serial = serial();
    testing::validate_every_instance();
    let dir = testing::fixture("zoo").join("vit_fp16");
    let file: Arc<[u8]> = std::fs::read(dir.join("model.pte")).unwrap().into();
    let mut program = match program_builder(file, None).unwrap().build() {
        Ok(p) => p,
        Err(e) => return testing::skip("vit_fp16", &e.to_string()),
    };
    let steps = program.steps();
    assert_eq!(steps.len(), 1, "{steps:?}");
    assert!(
        steps[0].0.starts_with("VulkanBackend_0..VulkanBackend_"),
        "{steps:?}"
    );
    let input = npy(dir.join("input_0.npy"));
    let out = program.execute(&[input]).unwrap();
    let want = npy(dir.join("expected_output_0.npy"));
    assert_eq!(out[0].shape(), want.shape());
    let (a, b) = (out[0].to_f32().unwrap(), want.to_f32().unwrap());
    let worst = judge("vit_fp16", 0, &a, &b, FP16);
    assert!(worst <= 1.0, "{worst} x the tolerance");
    // Each of the 11 steps cast its f32 staging inputs to f16 and its outputs back (26
    // casts); joined, the round trips between them are gone, and the CPU kernels' elementwise
    // ops run in f16 between the delegates.
    let casts = program
        .profile()
        .unwrap()
        .iter()
        .filter(|d| d.op.contains("[Cast"))
        .count();
    assert!(casts <= 12, "{casts} casts");
    let instance = program.device().instance().clone();
    drop(program);
    assert_no_validation_errors_of_ours(&instance);
}

/// ExecuTorch's exports of networks that concatenate (the zoo's reduced DenseNet, GoogLeNet
/// and SqueezeNet) run with every concatenation written in place by its producers: no copy
/// dispatch is left, and they still match PyTorch.
#[test]
fn exported_concatenations_are_written_in_place() {
    let _serial = serial();
    testing::validate_every_instance();
    for model in ["densenet", "googlenet", "squeezenet"] {
        let dir = testing::fixture("zoo").join(model);
        let file: Arc<[u8]> = std::fs::read(dir.join("model.pte")).unwrap().into();
        let mut program = match program_builder(file, None).unwrap().build() {
            Ok(p) => p,
            Err(e) => return testing::skip(model, &e.to_string()),
        };
        let input = npy(dir.join("input_0.npy"));
        let out = program.execute(&[input]).unwrap();
        let want = npy(dir.join("expected_output_0.npy"));
        let (a, b) = (out[0].to_f32().unwrap(), want.to_f32().unwrap());
        let worst = judge(model, 0, &a, &b, FP32);
        assert!(worst <= 1.0, "{model}: {worst} x the tolerance");
        let profile = program.profile().unwrap();
        let copies: Vec<_> = profile.iter().filter(|d| d.op.contains("[Copy")).collect();
        assert!(copies.is_empty(), "{model}: {copies:?}");
        let instance = program.device().instance().clone();
        drop(program);
        assert_no_validation_errors_of_ours(&instance);
    }
}

/// A load decodes the program once, decodes and lowers each `VulkanBackend` graph once (its
/// wiring (`io`), requirements and load share that one lowering) and decodes each VGF payload
/// once; also an fp16 graph on a device without the f16 features, which a pass widens to
/// fp32 instead of a second lowering.
#[test]
fn a_load_decodes_the_program_and_lowers_each_graph_once() {
    let _serial = serial();
    testing::validate_every_instance();
    let counts = || {
        let d = vkdelegate::pte::format::decode_counts();
        (d.programs, d.vk_graphs, vkdelegate::pte::lowerings())
    };
    let test = "a_load_decodes_the_program_and_lowers_each_graph_once";
    // A device made from the base requirements has no 16-bit feature enabled.
    let base = testing::device(test, &vkdelegate::compute::requirements());
    let mut cases: Vec<(&str, DeviceChoice)> = [
        "mobilenet_v2",
        "mobilenet_v2_fp16",
        "transformer_encoder",
        "seed_example",
    ]
    .into_iter()
    .map(|m| (m, DeviceChoice::Standalone))
    .collect();
    if let Some((_, device)) = &base {
        cases.push(("mobilenet_v2_fp16", DeviceChoice::Device(device.clone())));
    }
    for (model, device) in cases {
        // Consecutive compute steps are joined into one, so the graphs are counted in the
        // file: each VulkanBackend delegate call of its plan.
        let file = bytes(model);
        let decoded = vkdelegate::pte::format::Program::decode(&file).unwrap();
        let plan = decoded.forward().unwrap();
        let graphs = plan
            .instructions()
            .filter(|i| match i {
                vkdelegate::pte::format::Instruction::DelegateCall { delegate_index, .. } => {
                    plan.delegates[*delegate_index as usize].id == "VulkanBackend"
                }
                _ => false,
            })
            .count() as u64;
        let vgf_before = vkdelegate::vgf::decode_count();
        let before = counts();
        let builder = program_builder(file, None).unwrap().device(device);
        builder.io().unwrap();
        let program = match builder.build() {
            Ok(p) => p,
            Err(e) => return testing::skip(model, &e.to_string()),
        };
        let (p, g, l) = counts();
        let steps = |prefix: &str| {
            program
                .steps()
                .iter()
                .filter(|(name, _)| name.starts_with(prefix))
                .count() as u64
        };
        assert!(graphs > 0, "{model}");
        assert_eq!(
            vkdelegate::vgf::decode_count() - vgf_before,
            steps("VgfBackend_"),
            "{model}: VGF payload decodes"
        );
        assert_eq!(
            (p - before.0, g - before.1, l - before.2),
            (1, graphs, graphs),
            "{model} ({graphs} VulkanBackend graphs): program decodes, VkGraph decodes, lowerings"
        );
        let instance = program.device().instance().clone();
        drop(program);
        assert_no_validation_errors_of_ours(&instance);
    }
}

#[test]
fn force_fp16_programs_compute_in_fp16_and_match_pytorch() {
    let _serial = serial();
    let dispatches = runs_on("mobilenet_v2_fp16", FP16, DeviceChoice::Standalone);
    if dispatches.is_empty() {
        return;
    }
    // A standalone device enables the f16 features where the adapter has them (lavapipe has).
    // fp16 dispatches: the fp16 variants, and the cooperative-matrix kernels on GPUs with them.
    let f16 = dispatches
        .iter()
        .filter(|d| d.float_type == DType::F16)
        .count();
    let probe = vk_core::testing::device(
        "force_fp16_programs_compute_in_fp16_and_match_pytorch",
        &vkdelegate::compute::f16_requirements(),
    );
    if probe.is_some() {
        let ops: Vec<&str> = dispatches.iter().map(|d| d.op.as_str()).collect();
        assert!(
            f16 > 50,
            "{f16} f16 dispatches of {}: {ops:?}",
            dispatches.len()
        );
    }
}

#[test]
fn force_fp16_programs_fall_back_to_fp32_without_the_features() {
    let _serial = serial();
    let test = "force_fp16_programs_fall_back_to_fp32_without_the_features";
    // A device made from the base requirements has no 16-bit feature enabled.
    let Some((_instance, device)) = testing::device(test, &vkdelegate::compute::requirements())
    else {
        return;
    };
    let dispatches = runs_on("mobilenet_v2_fp16", FP16, DeviceChoice::Device(device));
    assert!(!dispatches.is_empty());
    assert!(
        dispatches.iter().all(|d| d.float_type == DType::F32),
        "{:?}",
        dispatches.iter().map(|d| &d.op).collect::<Vec<_>>()
    );
}

#[test]
fn unsupported_ops_are_all_named_at_once_with_where_they_are() {
    use executorch_pte::test_support::{
        build_program, build_vulkan_payload, sample_program, sample_vk_graph,
    };
    // A Vulkan graph node and a CPU kernel we lack, and control flow, in one program.
    let mut graph = sample_vk_graph();
    graph.chain[1].1 = "aten.nonzero.default".to_owned();
    let mut spec = sample_program();
    spec.segments[0] = build_vulkan_payload(&graph);
    spec.plans[0].operators = vec![("aten::nonzero".to_owned(), "out".to_owned())];
    let e = program_builder(build_program(&spec).into(), None).unwrap_err();
    let text = e.to_string();
    let PteError::Unsupported(list) = &e else {
        panic!("{text}")
    };
    for op in [
        "aten.nonzero.default",
        "aten::nonzero.out",
        "MoveCall",
        "JumpFalseCall (control flow)",
    ] {
        assert!(list.iter().any(|u| u.what == op), "{op} missing: {text}");
    }
    assert!(text.contains("instruction 1 (a CPU kernel)"), "{text}");
    assert!(
        text.contains("VulkanBackend delegate 0, node(s) [1]"),
        "{text}"
    );
}

#[test]
fn broken_files_give_named_errors() {
    let good = bytes("conv_relu_residual");
    let e = program_builder(good[..good.len() / 2].into(), None).unwrap_err();
    assert!(matches!(e, PteError::Decode(_)), "{e}");
    let mut bad = good.to_vec();
    bad[4..8].copy_from_slice(b"XX12");
    let e = program_builder(bad.into(), None).unwrap_err();
    assert!(
        e.to_string().contains("not a valid ExecuTorch program"),
        "{e}"
    );
    let e = program_builder(good, Some("backward")).unwrap_err();
    assert!(e.to_string().contains("forward"), "{e}");
}

#[test]
fn a_payload_that_does_not_decode_is_a_decode_error_not_an_unsupported_op() {
    use executorch_pte::test_support::{
        build_program, build_vulkan_payload, sample_program, sample_vk_graph,
    };
    let mut spec = sample_program();
    let payload = build_vulkan_payload(&sample_vk_graph());
    spec.segments[0] = payload[..payload.len() / 2].to_vec();
    let e = program_builder(build_program(&spec).into(), None).unwrap_err();
    let text = e.to_string();
    let PteError::Payload { location, .. } = &e else {
        panic!("{text}")
    };
    assert!(location.contains("VulkanBackend delegate 0"), "{text}");
    assert!(!text.contains("unsupported"), "{text}");
}

/// A lookup ExecuTorch leaves on the CPU in front of a delegate, with a dynamic sequence
/// length (`fixtures/pte/cpu_embedding`, tokens `[1, s]` for s up to 8): the table is a
/// constant of the CPU kernel's step, read where it lies in the file, and the delegate gets
/// the length the tokens have, not the exported bound. The first 3 and all 6 tokens give
/// PyTorch's rows for them.
#[test]
fn a_cpu_lookup_hands_its_delegate_the_tokens_length() {
    let _one = serial();
    testing::validate_every_instance();
    let model = "cpu_embedding";
    let ids = npy(dir(model).join("input_0.npy"));
    let want = npy(dir(model).join("expected_output_0.npy"))
        .to_f32()
        .unwrap();
    assert_eq!(ids.shape(), [1, 6]);
    for s in [3usize, 6] {
        let built =
            vkdelegate::pte::program_builder_with_input_shapes(bytes(model), None, &[vec![1, s]])
                .unwrap()
                .build();
        let mut program = match built {
            Ok(p) => p,
            Err(e) => return testing::skip(model, &e.to_string()),
        };
        assert_eq!(program.inputs().len(), 1, "the table is no program input");
        let first = HostTensor::new(DType::I64, vec![1, s], ids.bytes()[..8 * s].to_vec()).unwrap();
        let out = program.execute(&[first]).unwrap();
        assert_eq!(out[0].shape(), [1, s, 8]);
        let got = out[0].to_f32().unwrap();
        judge(
            model,
            0,
            &got,
            &want[..s * 8],
            Tolerance::Elementwise {
                atol: 1e-4,
                rtol: 1e-3,
            },
        );
        let instance = program.device().instance().clone();
        drop(program);
        assert_no_validation_errors_of_ours(&instance);
    }
}
