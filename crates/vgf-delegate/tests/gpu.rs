//! GPU tests (lavapipe + Arm's emulation layer, validation on): every corpus model against
//! Arm's scenario-runner output and PyTorch's, the staged memory path, input checks, and the
//! device-side API.
#![allow(clippy::unwrap_used)] // helpers outside #[test] functions

mod common;

use std::path::Path;
use std::time::Instant;

use vgf_delegate::{LoadOptions, MemoryMode, Model, Vgf, requirements_for};
// The corpus models have no COMPUTE segments, so this crate creates no compute pipeline in
// those tests: the validation errors `assert_no_validation_errors_of_ours` excuses
// (`VUID-VkComputePipelineCreateInfo-layout-00703`) come from the emulation layer's own
// pipelines. The COMPUTE test below uses the strict assertion.
use vk_core::testing::{assert_no_validation_errors, assert_no_validation_errors_of_ours, device};
use vk_core::{DType, HostPath, HostTensor, Requirements};

/// Tolerance of fp32 outputs against either reference (PyTorch on the CPU, scenario-runner on
/// lavapipe): `|ours - reference| <= FP32_ATOL + FP32_RTOL * |reference|` for every element.
/// Real GPUs sum in other orders than the CPU references do (mobilenet_v2 on an NVIDIA H200 is
/// 1.1e-5 from scenario-runner); docs/testing.md states these numbers.
const FP32_ATOL: f32 = 1e-4;
/// See [`FP32_ATOL`].
const FP32_RTOL: f32 = 1e-3;

/// The first element outside `atol + rtol * |reference|`, as (index, ours, reference).
fn outside_tolerance(ours: &HostTensor, reference: &HostTensor) -> Option<(usize, f32, f32)> {
    assert_eq!(ours.shape(), reference.shape());
    let (a, b) = (ours.to_f32().unwrap(), reference.to_f32().unwrap());
    a.iter()
        .zip(&b)
        .position(|(x, y)| (x - y).abs() > FP32_ATOL + FP32_RTOL * y.abs() || x.is_nan())
        .map(|i| (i, a[i], b[i]))
}

fn load_npy(path: &Path) -> HostTensor {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    let dtype = match npy.dtype() {
        npyz::DType::Plain(t) => t.to_string(),
        other => panic!("{}: unsupported dtype {other:?}", path.display()),
    };
    match dtype.as_str() {
        "<f4" => HostTensor::from_f32(shape, &npy.into_vec::<f32>().unwrap()).unwrap(),
        "|i1" => HostTensor::from_i8(shape, &npy.into_vec::<i8>().unwrap()).unwrap(),
        "<f2" => {
            let v: Vec<half::f16> = npy.into_vec().unwrap();
            let bytes = v.iter().flat_map(|b| b.to_le_bytes()).collect();
            HostTensor::new(DType::F16, shape, bytes).unwrap()
        }
        "<i4" => HostTensor::from_i32(shape, &npy.into_vec::<i32>().unwrap()).unwrap(),
        "<i2" => {
            let v: Vec<i16> = npy.into_vec().unwrap();
            let bytes = v.iter().flat_map(|b| b.to_le_bytes()).collect();
            HostTensor::new(DType::I16, shape, bytes).unwrap()
        }
        other => panic!("{}: unsupported dtype {other}", path.display()),
    }
}

/// An fp16 tensor's values, widened.
fn f16_values(t: &HostTensor) -> Vec<f32> {
    t.bytes()
        .chunks_exact(2)
        .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
        .collect()
}

fn max_abs_diff(a: &HostTensor, b: &HostTensor) -> f32 {
    assert_eq!(a.dtype(), b.dtype());
    assert_eq!(a.shape(), b.shape());
    match a.dtype() {
        DType::F16 => f16_values(a)
            .iter()
            .zip(f16_values(b))
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max),
        DType::F32 => a
            .to_f32()
            .unwrap()
            .iter()
            .zip(b.to_f32().unwrap())
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max),
        DType::I8 => a
            .to_i8()
            .unwrap()
            .iter()
            .zip(b.to_i8().unwrap())
            .map(|(x, y)| (*x as f32 - y as f32).abs())
            .fold(0.0, f32::max),
        DType::I32 => a
            .to_i32()
            .unwrap()
            .iter()
            .zip(b.to_i32().unwrap())
            .map(|(x, y)| (*x as f32 - y as f32).abs())
            .fold(0.0, f32::max),
        DType::I16 => {
            let values = |t: &HostTensor| -> Vec<f32> {
                t.bytes()
                    .chunks_exact(2)
                    .map(|b| f32::from(i16::from_le_bytes([b[0], b[1]])))
                    .collect()
            };
            values(a)
                .iter()
                .zip(values(b))
                .map(|(x, y)| (x - y).abs())
                .fold(0.0, f32::max)
        }
        other => panic!("unexpected dtype {other}"),
    }
}

/// The union of every corpus model's requirements.
fn corpus_requirements() -> Requirements {
    let mut req = vgf_delegate::requirements();
    for dir in common::corpus_models() {
        let bytes = std::fs::read(dir.join("model.vgf")).unwrap();
        req = req.union(&requirements_for(&Vgf::decode(&bytes).unwrap()).unwrap());
    }
    req
}

fn inputs_of(dir: &Path, n: usize) -> Vec<HostTensor> {
    (0..n)
        .map(|i| load_npy(&dir.join(format!("input_{i}.npy"))))
        .collect()
}

#[test]
fn every_corpus_model_matches_scenario_runner_and_pytorch() {
    let test = "every_corpus_model_matches_scenario_runner_and_pytorch";
    let Some((instance, device)) = device(test, &corpus_requirements()) else {
        return;
    };
    for dir in common::corpus_models() {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let bytes = std::fs::read(dir.join("model.vgf")).unwrap();
        let t0 = Instant::now();
        let mut model = Model::load(&bytes, &device).unwrap_or_else(|e| panic!("{name}: {e}"));
        let load = t0.elapsed();
        let inputs = inputs_of(&dir, model.inputs().len());
        let t1 = Instant::now();
        let outputs = model
            .execute(&inputs)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let run = t1.elapsed();
        assert_eq!(outputs.len(), model.outputs().len());
        for (i, out) in outputs.iter().enumerate() {
            let reference = load_npy(&dir.join(format!("vgf_output_{i}.npy")));
            let pytorch = load_npy(&dir.join(format!("expected_output_{i}.npy")));
            let vs_ref = max_abs_diff(out, &reference);
            let vs_torch = max_abs_diff(out, &pytorch);
            eprintln!(
                "{name}: output {i} {} {:?}: max |ours - scenario-runner| = {vs_ref:e}, \
                 max |ours - PyTorch| = {vs_torch:e}; load {load:?}, execute {run:?}, memory {:?}",
                out.dtype(),
                out.shape(),
                model.memory_mode()
            );
            match out.dtype() {
                DType::F32 => {
                    for (what, r) in [("scenario-runner", &reference), ("PyTorch", &pytorch)] {
                        if let Some((at, got, want)) = outside_tolerance(out, r) {
                            panic!(
                                "{name}: output {i}[{at}] = {got} vs {what} {want}: outside \
                                 {FP32_ATOL:e} + {FP32_RTOL:e} * |{what}|"
                            );
                        }
                    }
                }
                DType::F16 => {
                    // fp16 tolerance, relative to the output's scale (docs/testing.md).
                    let scale = f16_values(&reference)
                        .iter()
                        .fold(0f32, |m, v| m.max(v.abs()));
                    for (what, d) in [("scenario-runner", vs_ref), ("PyTorch", vs_torch)] {
                        assert!(d <= 1e-2 * scale, "{name}: {d} from {what}, scale {scale}");
                    }
                }
                DType::I8 | DType::I16 | DType::I32 => {
                    assert_eq!(out.bytes(), reference.bytes(), "{name}: not bit-exact");
                    // PyTorch simulates quantization in float: a deep network drifts by
                    // as many steps from it as scenario-runner does, one step otherwise.
                    let drift = max_abs_diff(&reference, &pytorch).max(1.0);
                    assert!(vs_torch <= drift, "{name}: {vs_torch} steps from PyTorch");
                }
                other => panic!("{name}: unexpected output dtype {other}"),
            }
        }
        // Replaying the recorded command buffer gives the same result.
        if name != "mobilenet_v2" {
            let again = model.execute(&inputs).unwrap();
            assert_eq!(again, outputs, "{name}: second execution differs");
        }
    }
    assert_no_validation_errors_of_ours(&instance);
}

#[test]
fn the_staged_memory_path_gives_the_same_results() {
    let test = "the_staged_memory_path_gives_the_same_results";
    let Some((instance, device)) = device(test, &corpus_requirements()) else {
        return;
    };
    for name in ["add", "conv_int8", "mlp"] {
        let dir = common::corpus_dir().join(name);
        let bytes = std::fs::read(dir.join("model.vgf")).unwrap();
        let options = LoadOptions {
            memory: MemoryMode::Staged,
            ..Default::default()
        };
        let mut model = Model::load_with(&bytes, &device, &options).unwrap();
        assert_eq!(model.memory_mode(), MemoryMode::Staged);
        let inputs = inputs_of(&dir, model.inputs().len());
        let out = model.execute(&inputs).unwrap();
        let reference = load_npy(&dir.join("vgf_output_0.npy"));
        match out[0].dtype() {
            DType::I8 => assert_eq!(out[0].bytes(), reference.bytes(), "{name}"),
            _ => assert_eq!(outside_tolerance(&out[0], &reference), None, "{name}"),
        }
    }
    assert_no_validation_errors_of_ours(&instance);
}

#[test]
fn an_embedded_model_has_no_host_path_and_says_so() {
    let test = "an_embedded_model_has_no_host_path_and_says_so";
    let Some((instance, device)) = device(test, &corpus_requirements()) else {
        return;
    };
    let dir = common::corpus_dir().join("add");
    let bytes = std::fs::read(dir.join("model.vgf")).unwrap();
    let options = LoadOptions {
        memory: MemoryMode::Staged,
        embedded: true,
        ..Default::default()
    };
    let mut model = Model::load_with(&bytes, &device, &options).unwrap();
    let inputs = inputs_of(&dir, model.inputs().len());
    let e = model.execute(&inputs).unwrap_err().to_string();
    assert!(
        e.contains("execute: this model was loaded to run only inside"),
        "{e}"
    );
    // SAFETY: no semaphores; the call is refused before anything is submitted.
    let e = unsafe { model.submit(&[], &[]) }.unwrap_err().to_string();
    assert!(e.contains("submit:"), "{e}");
    assert_eq!(model.device_inputs().len(), model.inputs().len());
    drop(model);
    assert_no_validation_errors_of_ours(&instance);
}

#[test]
fn inputs_are_checked_and_io_is_described() {
    let test = "inputs_are_checked_and_io_is_described";
    let Some((instance, device)) = device(test, &corpus_requirements()) else {
        return;
    };
    let dir = common::corpus_dir().join("add");
    let mut model = Model::from_file(dir.join("model.vgf"), &device).unwrap();
    assert_eq!(model.inputs().len(), 2);
    assert_eq!(model.inputs()[0].name, "input_0");
    assert_eq!(model.inputs()[1].shape, vec![1, 3, 8, 8]);
    assert_eq!(model.outputs()[0].dtype, DType::F32);
    assert_eq!(model.outputs()[0].name, "output_0");
    let good = inputs_of(&dir, 2);

    let e = model.execute(&good[..1]).unwrap_err();
    assert!(
        matches!(
            e,
            vgf_delegate::Error::Io(vk_core::IoError::Count {
                expected: 2,
                actual: 1
            })
        ),
        "{e}"
    );
    let wrong_dtype = HostTensor::zeros(DType::I8, vec![1, 3, 8, 8]).unwrap();
    let e = model.execute(&[good[0].clone(), wrong_dtype]).unwrap_err();
    assert!(
        matches!(
            e,
            vgf_delegate::Error::Io(vk_core::IoError::Mismatch { index: 1, .. })
        ),
        "{e}"
    );
    let wrong_shape = HostTensor::zeros(DType::F32, vec![1, 3, 8, 9]).unwrap();
    let e = model.execute(&[wrong_shape, good[1].clone()]).unwrap_err();
    let message = e.to_string();
    assert!(
        message.contains("'input_0'") && message.contains("expected f32[1, 3, 8, 8]"),
        "{e}"
    );
    // Still usable after refused inputs.
    let out = model.execute(&good).unwrap();
    assert_eq!(out[0].shape(), &[1, 3, 8, 8]);

    // The device-side API: tensors and buffers exist; a device-only submission runs.
    let ins = model.device_inputs();
    let outs = model.device_outputs();
    assert_eq!((ins.len(), outs.len()), (2, 1));
    let tensors = model.input_tensors();
    assert!(
        ins.iter()
            .chain(&outs)
            .zip(tensors.iter().chain(&model.output_tensors()))
            .all(|(t, arm)| !arm.tensor.is_null() && t.slice.size == 3 * 64 * 4)
    );
    // SAFETY: no semaphores; the inputs were written by the previous execution, which was
    // waited for.
    unsafe { model.submit(&[], &[]) }.unwrap();
    model.wait().unwrap();
    drop(model);

    // A missing file is an error naming it.
    let e = Model::from_file("/nonexistent/model.vgf", &device).unwrap_err();
    assert!(e.to_string().contains("/nonexistent/model.vgf"), "{e}");
    assert_no_validation_errors_of_ours(&instance);
}

#[test]
fn large_io_moves_along_every_host_path() {
    use vgf_delegate::format::test_support::{Options, compute_file};
    let test = "large_io_moves_along_every_host_path";
    let Some((instance, device)) = device(test, &vgf_delegate::requirements()) else {
        return;
    };
    let spirv = include_bytes!("fixtures/noop.comp.spv");
    let words: Vec<u32> = spirv
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    // 2 MiB + 12 bytes: above the recorded-copy limit, several 64 KiB chunks and a remainder.
    let n = (2 << 20) / 4 + 3;
    let file = compute_file(Options {
        spirv: words,
        alias_io: true,
        io_elements: n as i64,
        ..Default::default()
    });
    let values: Vec<f32> = (0..n).map(|i| (i % 4099) as f32 - 7.5).collect();
    let x = HostTensor::from_f32(vec![n], &values).unwrap();
    for host_path in [
        HostPath::Staged { chunk: 64 << 10 },
        HostPath::staged(),
        HostPath::Imported,
        HostPath::Direct,
    ] {
        let options = LoadOptions {
            memory: MemoryMode::Staged,
            host_path: Some(host_path),
            ..Default::default()
        };
        let mut model = Model::load_with(&file, &device, &options).unwrap();
        // The shader writes nothing: the output is the input, through the shared memory.
        let y = model.execute(std::slice::from_ref(&x)).unwrap();
        assert_eq!(y[0], x, "{host_path:?}");
    }
    assert_no_validation_errors(&instance);
}

#[test]
fn compute_segments_run_with_push_constants_and_alias_groups_share_memory() {
    use vgf_delegate::format::test_support::{Options, compute_file};
    let test = "compute_segments_run_with_push_constants_and_alias_groups_share_memory";
    let Some((instance, device)) = device(test, &vgf_delegate::requirements()) else {
        return;
    };
    let spirv = include_bytes!("fixtures/noop.comp.spv");
    let words: Vec<u32> = spirv
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    for memory in [MemoryMode::Direct, MemoryMode::Staged] {
        let file = compute_file(Options {
            spirv: words.clone(),
            alias_io: true,
            ..Default::default()
        });
        let mut model = Model::load_with(
            &file,
            &device,
            &LoadOptions {
                memory,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(model.inputs()[0].name, "x");
        assert_eq!(model.outputs()[0].name, "y");
        let ins = model.device_inputs();
        let outs = model.device_outputs();
        assert_eq!(
            (ins[0].slice.memory, ins[0].slice.memory_offset),
            (outs[0].slice.memory, outs[0].slice.memory_offset),
            "alias group 5 shares one allocation"
        );
        // The shader writes nothing: the output is the input, through the shared memory.
        let x = HostTensor::from_f32(vec![4], &[1.0, -2.0, 3.5, 4.25]).unwrap();
        let y = model.execute(std::slice::from_ref(&x)).unwrap();
        assert_eq!(y[0], x, "{memory:?}");
    }
    // Without the alias, input and output have their own memory.
    let file = compute_file(Options {
        spirv: words,
        ..Default::default()
    });
    let model = Model::load(&file, &device).unwrap();
    // (One allocator: separate storages may be blocks of one `VkDeviceMemory`.)
    let (i, o) = (&model.device_inputs()[0], &model.device_outputs()[0]);
    assert_ne!(
        (i.slice.memory, i.slice.memory_offset),
        (o.slice.memory, o.slice.memory_offset)
    );
    drop(model);
    assert_no_validation_errors(&instance);
}

#[test]
fn the_bench_reports_load_inference_and_host_overhead() {
    let test = "the_bench_reports_load_inference_and_host_overhead";
    let Some((instance, device)) = device(test, &corpus_requirements()) else {
        return;
    };
    let bytes = std::fs::read(common::corpus_dir().join("sqplus/model.vgf")).unwrap();
    let report = vgf_delegate::bench::bench(&bytes, &device, None, 3).unwrap();
    eprintln!("sqplus: {report}");
    assert_eq!(report.repeats, 3);
    assert!(report.per_inference >= report.per_inference_min);
    let json = report.to_json();
    assert!(json["host_overhead_ms"].as_f64().unwrap() >= 0.0);
    assert_no_validation_errors_of_ours(&instance);
}

#[test]
fn a_standalone_model_opens_its_own_device() {
    let test = "a_standalone_model_opens_its_own_device";
    // Skips (visibly) where no device qualifies.
    let Some((instance, _device)) = device(test, &corpus_requirements()) else {
        return;
    };
    let dir = common::corpus_dir().join("sqplus");
    let bytes = std::fs::read(dir.join("model.vgf")).unwrap();
    let mut model = Model::load_standalone(&bytes).unwrap();
    let out = model.execute(&inputs_of(&dir, 1)).unwrap();
    let reference = load_npy(&dir.join("vgf_output_0.npy"));
    assert_eq!(out[0], reference);
    assert_no_validation_errors_of_ours(&instance);
}

#[test]
fn device_submissions_wait_on_and_signal_semaphores() {
    let test = "device_submissions_wait_on_and_signal_semaphores";
    let Some((instance, device)) = device(test, &corpus_requirements()) else {
        return;
    };
    let dir = common::corpus_dir().join("sqplus");
    let mut model = Model::from_file(dir.join("model.vgf"), &device).unwrap();
    let inputs = inputs_of(&dir, 1);
    let expected = model.execute(&inputs).unwrap();
    let d = device.raw();
    // SAFETY: a plain binary semaphore on this device, destroyed below after the work that
    // uses it has completed.
    let semaphore =
        unsafe { d.create_semaphore(&vk_core::vk::SemaphoreCreateInfo::default(), None) }.unwrap();
    // Not `model.stages()`: Arm's emulation layer passes semaphore stage masks through to
    // a driver that does not know the data-graph stage bit.
    let wait = [vk_core::SemaphoreWait::binary(
        semaphore,
        vk_core::vk::PipelineStageFlags::ALL_COMMANDS,
    )];
    let signal = [vk_core::SemaphoreSignal::binary(semaphore)];
    // SAFETY: the first submission signals the unsignaled semaphore; the second (after the
    // first's fence, which `submit` waits for) waits on it. Inputs were written by
    // the execution above.
    unsafe {
        model.submit(&[], &signal).unwrap();
        model.submit(&wait, &[]).unwrap();
    }
    model.wait().unwrap();
    // SAFETY: no pending work uses the semaphore any more.
    unsafe { d.destroy_semaphore(semaphore, None) };
    // The host path still works after device-only runs.
    assert_eq!(model.execute(&inputs).unwrap(), expected);
    assert_no_validation_errors_of_ours(&instance);
}

#[test]
fn an_input_bound_to_another_models_output_memory_reads_it_with_no_copy() {
    use vgf_delegate::{BindError, Error, External, IoRef};
    use vk_core::vk;
    let test = "an_input_bound_to_another_models_output_memory_reads_it_with_no_copy";
    let Some((instance, device)) = device(test, &corpus_requirements()) else {
        return;
    };
    let dir = common::corpus_dir().join("sqplus");
    let bytes = std::fs::read(dir.join("model.vgf")).unwrap();
    let x = inputs_of(&dir, 1);
    // Separately: y1 = f(x), y2 = f(y1).
    let mut alone = Model::load(&bytes, &device).unwrap();
    let y1 = alone.execute(&x).unwrap();
    let y2 = alone.execute(&y1).unwrap();
    drop(alone);

    let mut producer = Model::load(&bytes, &device).unwrap();
    let out = producer.device_outputs()[0].slice;
    // SAFETY: the producer's output memory lives on this device and outlives the consumer
    // (dropped first below); its accesses are ordered by the barriers recorded below.
    let external = unsafe { External::new(IoRef::Input(0), out, &device) };
    let options = LoadOptions {
        external: vec![external.clone()],
        ..Default::default()
    };
    let mut consumer = Model::load_with(&bytes, &device, &options).unwrap();
    let input = consumer.device_inputs()[0].slice;
    assert_eq!(
        (input.memory, input.memory_offset),
        (out.memory, out.memory_offset)
    );

    // The producer's input holds x; the shared bytes are then overwritten with zeros by the
    // consumer's host path, so the consumer sees y1 only if the producer writes it there.
    producer.execute(&x).unwrap();
    let zeros = HostTensor::zeros(x[0].dtype(), x[0].shape().to_vec()).unwrap();
    let from_zeros = consumer.execute(std::slice::from_ref(&zeros)).unwrap();
    assert_ne!(from_zeros, y2);

    // One command buffer: producer, barrier, consumer, copy of the consumer's output.
    let result = consumer.device_outputs()[0].slice;
    let readback = vk_core::Buffer::new(
        &device,
        result.size,
        vk_core::MemoryLocation::Host,
        vk::BufferUsageFlags::TRANSFER_DST,
        "readback",
    )
    .unwrap();
    let mut submission = vk_core::Submission::new(&device, 1, "chain").unwrap();
    let cmd = submission.begin(0).unwrap();
    let stages = producer.stages() | consumer.stages();
    let barrier = |src: (vk::PipelineStageFlags2, vk::AccessFlags2),
                   dst: (vk::PipelineStageFlags2, vk::AccessFlags2)| {
        let mb = [vk::MemoryBarrier2::default()
            .src_stage_mask(src.0)
            .src_access_mask(src.1)
            .dst_stage_mask(dst.0)
            .dst_access_mask(dst.1)];
        // SAFETY: `cmd` is recording on this device.
        unsafe {
            device
                .raw()
                .cmd_pipeline_barrier2(cmd, &vk::DependencyInfo::default().memory_barriers(&mb))
        };
    };
    let rw = vk::AccessFlags2::MEMORY_READ | vk::AccessFlags2::MEMORY_WRITE;
    // SAFETY: `cmd` is a recording primary command buffer of this device's queue family;
    // the barriers order the consumer's execution above, the producer, the consumer and the
    // copy; both models outlive the submission (waited below).
    unsafe {
        producer.record_into(cmd);
        barrier((stages, vk::AccessFlags2::MEMORY_WRITE), (stages, rw));
        consumer.record_into(cmd);
        barrier(
            (stages, vk::AccessFlags2::MEMORY_WRITE),
            (
                vk::PipelineStageFlags2::COPY,
                vk::AccessFlags2::TRANSFER_READ,
            ),
        );
        let region = [vk::BufferCopy::default()
            .src_offset(result.offset)
            .size(result.size)];
        device
            .raw()
            .cmd_copy_buffer(cmd, result.buffer, readback.raw(), &region);
        vk_core::barrier::host_read_barrier(&device, cmd);
    }
    submission.end(0).unwrap();
    // SAFETY: the command buffer is executable; everything it uses lives until the wait.
    unsafe { submission.submit(0, &[], &[]) }.unwrap();
    submission.wait().unwrap();
    let mut data = vec![0u8; result.size as usize];
    readback.read(0, &mut data).unwrap();
    let chained = HostTensor::new(y2[0].dtype(), y2[0].shape().to_vec(), data).unwrap();
    assert_eq!(chained, y2[0], "chained on the device = run separately");
    // The host path of a model with external memory still works.
    assert_eq!(consumer.execute(&y1).unwrap(), y2);

    // Named errors: unknown tensor, too small, twice.
    let bad = |e: External| {
        let options = LoadOptions {
            external: vec![e],
            ..Default::default()
        };
        Model::load_with(&bytes, &device, &options).unwrap_err()
    };
    // SAFETY: these loads fail before binding anything.
    let (unknown, small) = unsafe {
        (
            External::new("no_such_tensor", out, &device),
            External::new(
                IoRef::Input(0),
                vk_core::BufferSlice { size: 4, ..out },
                &device,
            ),
        )
    };
    assert!(
        matches!(bad(unknown), Error::Bind(BindError::UnknownIo { .. })),
        "unknown"
    );
    assert!(
        matches!(bad(small), Error::Bind(BindError::TooSmall { size: 4, .. })),
        "too small"
    );
    let options = LoadOptions {
        external: vec![external.clone(), external],
        ..Default::default()
    };
    let e = Model::load_with(&bytes, &device, &options).unwrap_err();
    assert!(matches!(e, Error::Bind(BindError::Twice { .. })), "{e}");
    drop(readback);
    drop(submission);
    drop(consumer);
    drop(producer);
    assert_no_validation_errors_of_ours(&instance);
}
