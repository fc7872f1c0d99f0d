//! An application's images as a program's inputs and outputs: real images (37x23, so the
//! conversion kernels' work groups are partial at both edges) through a compute chain and a
//! VGF model, image to image and image to host output, against CPU references; rebinding to
//! second images; `submit` ordered by the application's timeline semaphore, mixed with an
//! application buffer; and each named binding error. Validation (core and synchronization) is
//! on; every test ends asserting no validation error of ours.

#![cfg(all(feature = "vgf", feature = "compute", feature = "shared"))]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod example;
mod steps;

use example::{fixture, serial};
use steps::step_op;
use vk_core::testing::{self, TestImage, assert_no_validation_errors_of_ours};
use vk_core::{
    ArmSupport, Buffer, Device, Features, HostTensor, Instance, MemoryLocation, SemaphoreSignal,
    SemaphoreWait, vk,
};
use vkdelegate::program::{
    AppBuffer, AppImage, BindingProblem, ColourMap, DeviceChoice, HandOff, ImageProblem,
    ImageToTensor, Program, ProgramBuilder, ProgramError, ProgramFile, StepKind, StepSpec,
    TensorLayout, TensorToImage,
};

const W: u32 = 37;
const H: u32 = 23;
const RGBA8: vk::Format = vk::Format::R8G8B8A8_UNORM;
const BGRA8: vk::Format = vk::Format::B8G8R8A8_UNORM;
const RGBA32F: vk::Format = vk::Format::R32G32B32A32_SFLOAT;

/// A device with timeline semaphores (and the ARM extensions for `vgf`), or a visible skip.
fn device(test: &str, vgf: bool) -> Option<(Instance, Device)> {
    testing::validate_every_instance();
    let mut r = if vgf {
        // The example's models (those of the seed `.pte` too) and sqplus.
        let bytes = std::fs::read(fixture("sqplus/model.vgf")).unwrap();
        let model = vkdelegate::vgf::Vgf::decode(&bytes).unwrap();
        example::requirements().union(&vkdelegate::vgf::requirements_for(&model).unwrap())
    } else {
        vkdelegate::compute::requirements()
    };
    r.required_features |= Features::TIMELINE_SEMAPHORE;
    let (instance, device) = testing::device(test, &r)?;
    if vgf && device.capabilities().arm == ArmSupport::Absent {
        testing::skip(
            test,
            "no VK_ARM_tensors/VK_ARM_data_graph, native or emulated",
        );
        return None;
    }
    Some((instance, device))
}

/// The test pattern's texel (RGBA in [0, 1], exact in RGBA8 and f32).
fn texel(seed: u32, x: u32, y: u32) -> [f32; 4] {
    let b = |c: u32| ((x * 7 + y * 13 + c * 61 + seed * 29) % 256) as f32 / 255.0;
    [b(0), b(1), b(2), b(3)]
}

fn encode(format: vk::Format, t: [f32; 4]) -> Vec<u8> {
    match format {
        RGBA8 => t.map(|v| (v * 255.0).round() as u8).to_vec(),
        BGRA8 => [t[2], t[1], t[0], t[3]]
            .map(|v| (v * 255.0).round() as u8)
            .to_vec(),
        _ => t.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

/// An image of `format` holding the pattern of `seed`.
fn image(device: &Device, format: vk::Format, (w, h): (u32, u32), seed: u32) -> TestImage {
    let img = TestImage::new(device, format, w, h, vk::ImageUsageFlags::STORAGE);
    let bytes: Vec<u8> = (0..h)
        .flat_map(|y| (0..w).flat_map(move |x| encode(format, texel(seed, x, y))))
        .collect();
    img.write(&bytes);
    img
}

/// An RGBA32F image's texels.
fn read_rgba32f(img: &TestImage) -> Vec<[f32; 4]> {
    img.read()
        .chunks_exact(16)
        .map(|t| [0, 1, 2, 3].map(|i| f32::from_le_bytes(t[4 * i..4 * i + 4].try_into().unwrap())))
        .collect()
}

fn shape_value(shape: &[usize]) -> toml::Value {
    toml::Value::Array(shape.iter().map(|&d| (d as i64).into()).collect())
}

/// x * 0.5 -> sigmoid -> + 0.25 on an f32 input of `shape`.
fn chain(device: &Device, shape: &[usize]) -> ProgramBuilder {
    ProgramBuilder::new()
        .step(step_op(
            "scale",
            "mul_scalar",
            ("x", "a"),
            &[("value", 0.5.into()), ("input_shape", shape_value(shape))],
        ))
        .step(step_op("gate", "sigmoid", ("a", "b"), &[]))
        .step(step_op(
            "shift",
            "add_scalar",
            ("b", "y"),
            &[("value", 0.25.into())],
        ))
        .device(DeviceChoice::Device(device.clone()))
}

fn chain_of(v: f32) -> f32 {
    1.0 / (1.0 + (-v * 0.5).exp()) + 0.25
}

const NCHW3: [usize; 4] = [1, 3, H as usize, W as usize];

/// The input conversion of the tests: NCHW, C = 3, per-channel mean and scale.
fn to_tensor() -> ImageToTensor {
    ImageToTensor {
        layout: TensorLayout::Nchw,
        scale: [4.0, -2.0, 1.5, 1.0],
        mean: [0.5, 0.25, 0.0, 0.0],
    }
}

/// What the program's input conversion makes of texel channel `c`.
fn converted(t: [f32; 4], c: usize) -> f32 {
    let conv = to_tensor();
    (t[c] - conv.mean[c]) * conv.scale[c]
}

/// Checks an RGBA32F output image written by `Channels` (scale 1, bias 0, C = 3) from the
/// chain run on the image of `seed`.
fn check_chain_image(out: &TestImage, seed: u32) {
    let got = read_rgba32f(out);
    let mut worst = 0.0f32;
    for y in 0..H {
        for x in 0..W {
            let t = texel(seed, x, y);
            let g = got[(y * W + x) as usize];
            for (c, v) in g.iter().take(3).enumerate() {
                worst = worst.max((v - chain_of(converted(t, c)).clamp(0.0, 1.0)).abs());
            }
            assert_eq!(g[3], 1.0, "alpha at ({x},{y})");
        }
    }
    assert!(worst < 1e-5, "seed {seed}: max error {worst}");
}

fn app(img: &TestImage) -> AppImage {
    img.app()
}

#[test]
fn an_image_runs_through_a_compute_chain_into_an_image_and_rebinds() {
    let _serial = serial();
    let test = "an_image_runs_through_a_compute_chain_into_an_image_and_rebinds";
    let Some((instance, device)) = device(test, false) else {
        return;
    };
    let input = image(&device, RGBA8, (W, H), 0);
    let output = TestImage::new(&device, RGBA32F, W, H, vk::ImageUsageFlags::STORAGE);
    // SAFETY: the test's images, on the program's device, in GENERAL, outliving the program;
    // the test touches them only between host-waited executions.
    let mut program = unsafe {
        chain(&device, &NCHW3)
            .bind_input_image("x", app(&input), to_tensor())
            .bind_output_image("y", app(&output), TensorToImage::default())
    }
    .build()
    .unwrap();
    assert!(program.host_inputs().is_empty());
    assert_eq!(program.recorded_copies(), Some(0));
    let out = program.execute(&[]).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(
        out[0].shape(),
        &[0],
        "an image-bound output comes back empty"
    );
    check_chain_image(&output, 0);

    // Rebinding: another input of the other RGBA8-class format, another output image.
    let second_in = image(&device, BGRA8, (W, H), 1);
    let second_out = TestImage::new(&device, RGBA32F, W, H, vk::ImageUsageFlags::STORAGE);
    // SAFETY: as above.
    unsafe {
        program.rebind_input_image("x", app(&second_in)).unwrap();
        program.rebind_output_image("y", app(&second_out)).unwrap();
        // The image already bound: nothing to do.
        program.rebind_output_image("y", app(&second_out)).unwrap();
    }
    program.execute(&[]).unwrap();
    check_chain_image(&second_out, 1);
    check_chain_image(&output, 0);
    // Back to the first input, still into the second output.
    // SAFETY: as above.
    unsafe { program.rebind_input_image("x", app(&input)) }.unwrap();
    program.execute(&[]).unwrap();
    check_chain_image(&second_out, 0);
    drop(program);
    drop((input, output, second_in, second_out));
    drop(device);
    assert_no_validation_errors_of_ours(&instance);
}

#[test]
fn an_image_feeds_a_host_output_in_nhwc_with_a_host_input_beside_it() {
    let _serial = serial();
    let test = "an_image_feeds_a_host_output_in_nhwc_with_a_host_input_beside_it";
    let Some((instance, device)) = device(test, false) else {
        return;
    };
    let input = image(&device, RGBA32F, (W, H), 2);
    let nhwc = [1, H as usize, W as usize, 4];
    // Two chains: one from the image (NHWC, C = 4), one from a host input.
    let builder = chain(&device, &nhwc)
        .step(step_op(
            "host_scale",
            "mul_scalar",
            ("h", "h2"),
            &[("value", 3.0.into()), ("input_shape", shape_value(&[1, 5]))],
        ))
        .outputs(&["y", "h2"]);
    let conv = ImageToTensor {
        layout: TensorLayout::Nhwc,
        ..ImageToTensor::default()
    };
    // SAFETY: as in the first test.
    let mut program = unsafe { builder.bind_input_image("x", app(&input), conv) }
        .build()
        .unwrap();
    let host = program.host_inputs();
    assert_eq!(host.len(), 1);
    assert_eq!(host[0].name, "h");
    // The wrong count is refused: execute takes the host inputs only.
    let h = HostTensor::from_f32(vec![1, 5], &[1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
    assert!(program.execute(&[h.clone(), h.clone()]).is_err());
    let out = program.execute(std::slice::from_ref(&h)).unwrap();
    let y = out[0].to_f32().unwrap();
    assert_eq!(out[0].shape(), &nhwc);
    let mut worst = 0.0f32;
    for yy in 0..H {
        for x in 0..W {
            let t = texel(2, x, yy);
            for c in 0..4 {
                let got = y[((yy * W + x) * 4) as usize + c];
                worst = worst.max((got - chain_of(t[c])).abs());
            }
        }
    }
    assert!(worst < 1e-5, "max error {worst}");
    assert_eq!(out[1].to_f32().unwrap(), vec![3.0, 6.0, 9.0, 12.0, 15.0]);
    drop(program);
    drop(input);
    drop(device);
    assert_no_validation_errors_of_ours(&instance);
}

/// sqplus (VGF): x * x + 0.25 on f32[1, 3, 8, 8], from an RGBA8 image into a class-mapped
/// image.
#[test]
fn an_image_runs_through_a_vgf_model_into_an_image() {
    let _serial = serial();
    let test = "an_image_runs_through_a_vgf_model_into_an_image";
    let Some((instance, device)) = device(test, true) else {
        return;
    };
    let input = image(&device, RGBA8, (8, 8), 3);
    let output = TestImage::new(&device, RGBA32F, 8, 8, vk::ImageUsageFlags::STORAGE);
    let step = StepSpec {
        name: "square_plus".into(),
        kind: StepKind::Vgf {
            path: fixture("sqplus/model.vgf"),
        },
        inputs: vec!["x".into()],
        outputs: vec!["y".into()],
    };
    let palette = vec![
        [1.0, 0.0, 0.0, 1.0],
        [0.0, 1.0, 0.0, 1.0],
        [0.0, 0.0, 1.0, 1.0],
    ];
    let conv = TensorToImage {
        colour_map: ColourMap::Classes(palette.clone()),
        ..TensorToImage::default()
    };
    // SAFETY: as in the first test.
    let mut program = unsafe {
        ProgramBuilder::new()
            .step(step)
            .device(DeviceChoice::Device(device.clone()))
            .bind_input_image("x", app(&input), ImageToTensor::default())
            .bind_output_image("y", app(&output), conv)
    }
    .build()
    .unwrap();
    let check = |output: &TestImage, seed: u32| {
        let got = read_rgba32f(output);
        for y in 0..8 {
            for x in 0..8 {
                let t = texel(seed, x, y);
                let v: Vec<f32> = (0..3).map(|c| t[c] * t[c] + 0.25).collect();
                let best = (0..3).fold(0, |b, c| if v[c] > v[b] { c } else { b });
                assert_eq!(got[(y * 8 + x) as usize], palette[best], "({x},{y}): {v:?}");
            }
        }
    };
    program.execute(&[]).unwrap();
    check(&output, 3);
    // Rebinding records the VGF step's commands again, into the same command buffer.
    let second_in = image(&device, RGBA8, (8, 8), 7);
    let second_out = TestImage::new(&device, RGBA32F, 8, 8, vk::ImageUsageFlags::STORAGE);
    // SAFETY: as in the first test.
    unsafe {
        program.rebind_input_image("x", app(&second_in)).unwrap();
        program.rebind_output_image("y", app(&second_out)).unwrap();
    }
    program.execute(&[]).unwrap();
    check(&second_out, 7);
    drop(program);
    drop((input, output, second_in, second_out));
    drop(device);
    assert_no_validation_errors_of_ours(&instance);
}

/// A timeline semaphore of the application's.
struct Timeline {
    device: Device,
    raw: vk::Semaphore,
}

impl Timeline {
    fn new(device: &Device) -> Timeline {
        let mut kind = vk::SemaphoreTypeCreateInfo::default()
            .semaphore_type(vk::SemaphoreType::TIMELINE)
            .initial_value(0);
        let info = vk::SemaphoreCreateInfo::default().push_next(&mut kind);
        // SAFETY: valid create info; destroyed in `Drop`.
        let raw = unsafe { device.raw().create_semaphore(&info, None) }.unwrap();
        Timeline {
            device: device.clone(),
            raw,
        }
    }

    fn signal(&self, value: u64) {
        let info = vk::SemaphoreSignalInfo::default()
            .semaphore(self.raw)
            .value(value);
        // SAFETY: a live timeline; values increase.
        unsafe { self.device.raw().signal_semaphore(&info) }.unwrap();
    }

    fn wait(&self, value: u64) {
        let semaphores = [self.raw];
        let values = [value];
        let info = vk::SemaphoreWaitInfo::default()
            .semaphores(&semaphores)
            .values(&values);
        // SAFETY: a live timeline with a pending signal of `value`.
        unsafe { self.device.raw().wait_semaphores(&info, 10_000_000_000) }.unwrap();
    }

    fn waits(&self, value: u64) -> [SemaphoreWait; 1] {
        [SemaphoreWait {
            semaphore: self.raw,
            stage: vk::PipelineStageFlags::ALL_COMMANDS,
            value,
        }]
    }

    fn signals(&self, value: u64) -> [SemaphoreSignal; 1] {
        [SemaphoreSignal {
            semaphore: self.raw,
            value,
        }]
    }
}

impl Drop for Timeline {
    fn drop(&mut self) {
        // SAFETY: every submission using it was waited for (the tests wait before dropping).
        unsafe { self.device.raw().destroy_semaphore(self.raw, None) };
    }
}

#[test]
fn submit_orders_image_programs_by_the_applications_timeline() {
    let _serial = serial();
    let test = "submit_orders_image_programs_by_the_applications_timeline";
    let Some((instance, device)) = device(test, false) else {
        return;
    };
    let timeline = Timeline::new(&device);
    let input = image(&device, RGBA8, (W, H), 4);
    let output = TestImage::new(&device, RGBA32F, W, H, vk::ImageUsageFlags::STORAGE);
    // Images only: every input and output bound, so `submit` runs it.
    // SAFETY: as in the first test; the test orders its image accesses by the timeline.
    let mut program = unsafe {
        chain(&device, &NCHW3)
            .bind_input_image("x", app(&input), to_tensor())
            .bind_output_image("y", app(&output), TensorToImage::default())
    }
    .build()
    .unwrap();
    // Round 1: the application wrote the input image, then signals 1; the program waits for
    // 1 and signals 2; the application reads the output once 2 is reached.
    timeline.signal(1);
    // SAFETY: live timeline on the program's device; values increase.
    unsafe { program.submit(&timeline.waits(1), &timeline.signals(2)) }.unwrap();
    timeline.wait(2);
    check_chain_image(&output, 4);
    program.wait().unwrap();
    // Round 2, on a second input image.
    let next = image(&device, RGBA8, (W, H), 5);
    // SAFETY: as above; nothing is pending.
    unsafe { program.rebind_input_image("x", app(&next)) }.unwrap();
    timeline.signal(3);
    // SAFETY: as above.
    unsafe { program.submit(&timeline.waits(3), &timeline.signals(4)) }.unwrap();
    timeline.wait(4);
    check_chain_image(&output, 5);
    program.wait().unwrap();

    // Mixed with an application buffer: x in the application's buffer, y into an image.
    let usage = vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::TRANSFER_DST;
    let floats = NCHW3.iter().product::<usize>();
    let mut x_buf = Buffer::new(
        &device,
        (floats * 4).div_ceil(16) as u64 * 16,
        MemoryLocation::DeviceMapped,
        usage,
        "app x",
    )
    .unwrap();
    let values: Vec<f32> = (0..floats).map(|i| (i % 17) as f32 / 8.0 - 1.0).collect();
    let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    x_buf.write(0, &raw).unwrap();
    let x_app = AppBuffer::new(x_buf.slice(None), usage);
    // SAFETY: as above; the buffer was written before the timeline's signal.
    let mut mixed = unsafe {
        chain(&device, &NCHW3)
            .bind_input("x", x_app)
            .bind_output_image("y", app(&output), TensorToImage::default())
    }
    .build()
    .unwrap();
    let e = mixed.execute(&[]).unwrap_err();
    assert!(
        matches!(&e, ProgramError::Binding(b) if b.problem == BindingProblem::BoundProgram),
        "{e}"
    );
    timeline.signal(5);
    // SAFETY: as above.
    unsafe { mixed.submit(&timeline.waits(5), &timeline.signals(6)) }.unwrap();
    timeline.wait(6);
    mixed.wait().unwrap();
    let got = read_rgba32f(&output);
    let plane = (W * H) as usize;
    for (p, g) in got.iter().enumerate() {
        for c in 0..3 {
            let want = chain_of(values[c * plane + p]).clamp(0.0, 1.0);
            assert!(
                (g[c] - want).abs() < 1e-5,
                "texel {p} c{c}: {} != {want}",
                g[c]
            );
        }
    }
    drop((program, mixed));
    drop((input, next, output, x_buf, timeline));
    drop(device);
    assert_no_validation_errors_of_ours(&instance);
}

/// The problem `builder` fails with, for `tensor`.
fn binding_problem(builder: ProgramBuilder, tensor: &str) -> BindingProblem {
    match builder.build() {
        Ok(_) => panic!("built a program with a bad binding of '{tensor}'"),
        Err(ProgramError::Binding(b)) => {
            eprintln!("{b}");
            assert_eq!(b.tensor, tensor, "{b}");
            b.problem
        }
        Err(e) => panic!("not a binding error: {e}"),
    }
}

fn image_problem(p: BindingProblem) -> ImageProblem {
    match p {
        BindingProblem::Image(i) => i,
        p => panic!("not an image problem: {p}"),
    }
}

#[test]
fn each_bad_image_binding_is_a_named_error() {
    let _serial = serial();
    let Some((instance, device)) = device("each_bad_image_binding_is_a_named_error", false) else {
        return;
    };
    let img = TestImage::new(&device, RGBA8, W, H, vk::ImageUsageFlags::STORAGE);
    let good = app(&img);
    let conv = to_tensor();
    let out = TensorToImage::default();
    // Each builder below is only built (and fails) or dropped: nothing is submitted.
    let bind_in = |b: ProgramBuilder, image: AppImage| {
        // SAFETY: the test's image, live for the whole test; nothing is submitted.
        unsafe { b.bind_input_image("x", image, conv) }
    };
    // SAFETY: as above.
    let p = binding_problem(
        unsafe { chain(&device, &NCHW3).bind_input_image("z", good, conv) },
        "z",
    );
    assert!(matches!(p, BindingProblem::UnknownInput { ref inputs } if inputs == &["x"]));
    // SAFETY: as above.
    let p = binding_problem(
        unsafe { chain(&device, &NCHW3).bind_output_image("b", good, out.clone()) },
        "b",
    );
    assert!(matches!(p, BindingProblem::UnknownOutput { ref outputs } if outputs == &["y"]));
    let sampled = AppImage {
        usage: vk::ImageUsageFlags::SAMPLED,
        ..good
    };
    let p = image_problem(binding_problem(
        bind_in(chain(&device, &NCHW3), sampled),
        "x",
    ));
    assert!(matches!(p, ImageProblem::MissingStorageUsage { .. }), "{p}");
    let srgb = AppImage {
        format: vk::Format::R8G8B8A8_SRGB,
        ..good
    };
    let p = image_problem(binding_problem(bind_in(chain(&device, &NCHW3), srgb), "x"));
    assert!(matches!(p, ImageProblem::UnsupportedFormat { .. }), "{p}");
    let family = device.queue().family();
    let elsewhere = good.exclusive_to(family + 1);
    let p = image_problem(binding_problem(
        bind_in(chain(&device, &NCHW3), elsewhere),
        "x",
    ));
    assert_eq!(
        p,
        ImageProblem::QueueFamily {
            owner: family + 1,
            queue: family
        }
    );
    let p = image_problem(binding_problem(
        bind_in(chain(&device, &[1, 3, H as usize, W as usize + 1]), good),
        "x",
    ));
    assert!(
        matches!(p, ImageProblem::Extent { tensor_width, .. } if tensor_width == W as usize + 1)
    );
    let p = image_problem(binding_problem(
        bind_in(chain(&device, &[1, 5, H as usize, W as usize]), good),
        "x",
    ));
    assert!(
        matches!(p, ImageProblem::Channels { channels: 5, .. }),
        "{p}"
    );
    let p = image_problem(binding_problem(
        bind_in(chain(&device, &[3, H as usize, W as usize]), good),
        "x",
    ));
    assert!(matches!(p, ImageProblem::Shape { .. }), "{p}");
    let i32_input = ProgramBuilder::new()
        .step(step_op(
            "flat",
            "reshape",
            ("x", "y"),
            &[
                ("input_shape", shape_value(&NCHW3)),
                ("input_dtype", "i32".into()),
                ("shape", shape_value(&[NCHW3.iter().product()])),
            ],
        ))
        .device(DeviceChoice::Device(device.clone()));
    if let Err(e) = i32_input.io() {
        panic!("an i32 input: {e}");
    }
    {
        let p = image_problem(binding_problem(bind_in(i32_input, good), "x"));
        assert!(matches!(p, ImageProblem::DType { .. }), "{p}");
    }
    let palette = TensorToImage {
        colour_map: ColourMap::Classes(vec![[0.0; 4]; 2]),
        ..TensorToImage::default()
    };
    // SAFETY: as above.
    let p = image_problem(binding_problem(
        unsafe { chain(&device, &NCHW3).bind_output_image("y", good, palette) },
        "y",
    ));
    assert_eq!(
        p,
        ImageProblem::PaletteTooShort {
            colours: 2,
            channels: 3
        }
    );
    let p = binding_problem(
        bind_in(chain(&device, &NCHW3), good).hand_off(HandOff::Host),
        "x",
    );
    assert_eq!(p, BindingProblem::HostHandOff);
    // A tensor bound twice; and buffers need every other input and output bound.
    let usage = vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::TRANSFER_DST;
    let buf = Buffer::new(&device, 1 << 14, MemoryLocation::Device, usage, "x").unwrap();
    let x_app = AppBuffer::new(buf.slice(None), usage);
    // SAFETY: as above.
    let p = binding_problem(
        unsafe { bind_in(chain(&device, &NCHW3), good).bind_input("x", x_app) },
        "x",
    );
    assert_eq!(p, BindingProblem::BoundTwice);
    // SAFETY: as above.
    let p = binding_problem(
        unsafe { chain(&device, &NCHW3).bind_input("x", x_app) },
        "y",
    );
    assert_eq!(p, BindingProblem::Unbound { input: false });

    // Rebinding: names, kinds, extent and format class; submit needs no host I/O.
    let mut program = bind_in(chain(&device, &NCHW3), good).build().unwrap();
    let small = TestImage::new(&device, RGBA8, W, H - 1, vk::ImageUsageFlags::STORAGE);
    let float = TestImage::new(&device, RGBA32F, W, H, vk::ImageUsageFlags::STORAGE);
    let rebind = |program: &mut Program, name: &str, image: AppImage, input: bool| {
        // SAFETY: the test's images; nothing is pending (execute waits).
        let r = unsafe {
            if input {
                program.rebind_input_image(name, image)
            } else {
                program.rebind_output_image(name, image)
            }
        };
        match r {
            Err(ProgramError::Binding(b)) => {
                assert_eq!(b.tensor, name, "{b}");
                b.problem
            }
            r => panic!("rebinding '{name}': {r:?}"),
        }
    };
    let p = image_problem(rebind(&mut program, "x", app(&small), true));
    assert!(matches!(p, ImageProblem::ExtentChanged { .. }), "{p}");
    let p = image_problem(rebind(&mut program, "x", app(&float), true));
    assert!(matches!(p, ImageProblem::FormatChanged { .. }), "{p}");
    let p = image_problem(rebind(&mut program, "x", sampled, true));
    assert!(matches!(p, ImageProblem::MissingStorageUsage { .. }), "{p}");
    let p = rebind(&mut program, "y", good, false);
    assert_eq!(p, BindingProblem::NotImage { input: false });
    let p = rebind(&mut program, "q", good, true);
    assert!(matches!(p, BindingProblem::UnknownInput { .. }), "{p}");
    // SAFETY: no semaphores; refused before anything is submitted.
    let e = unsafe { program.submit(&[], &[]) }.unwrap_err();
    assert!(
        matches!(&e, ProgramError::Binding(b) if b.problem == BindingProblem::NotBound),
        "{e}"
    );
    // Still runs after the refused rebinds, with its host output.
    let y = program.execute(&[]).unwrap();
    assert_eq!(y[0].shape(), &NCHW3);
    drop(program);
    drop((img, small, float, buf));
    drop(device);
    assert_no_validation_errors_of_ours(&instance);
}

/// An f32 `.npy` fixture.
fn npy_f32(path: std::path::PathBuf) -> (Vec<usize>, Vec<f32>) {
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
    let shape = npy.shape().iter().map(|&d| d as usize).collect();
    (shape, npy.into_vec::<f32>().unwrap())
}

/// The seed ExecuTorch program (VgfBackend -> VulkanBackend -> VgfBackend, f32[1, 3, 8, 8] ->
/// f32[1, 3, 4, 4]) from an RGBA32F image holding its committed input into an RGBA32F image,
/// against PyTorch's output.
#[test]
fn a_pte_program_runs_from_image_to_image() {
    let _serial = serial();
    let test = "a_pte_program_runs_from_image_to_image";
    let Some((instance, device)) = device(test, true) else {
        return;
    };
    let dir = vk_core::testing::fixture("pte/seed_example");
    let (shape, x) = npy_f32(dir.join("input_0.npy"));
    assert_eq!(shape, [1, 3, 8, 8]);
    let (_, want) = npy_f32(dir.join("expected_output_0.npy"));
    let input = TestImage::new(&device, RGBA32F, 8, 8, vk::ImageUsageFlags::STORAGE);
    let texels: Vec<u8> = (0..64)
        .flat_map(|p| [x[p], x[64 + p], x[128 + p], 1.0])
        .flat_map(f32::to_le_bytes)
        .collect();
    input.write(&texels);
    let output = TestImage::new(&device, RGBA32F, 4, 4, vk::ImageUsageFlags::STORAGE);
    // The outputs lie in (0.25, 1.25): halved, within the clamp to [0, 1].
    let conv = TensorToImage {
        scale: 0.5,
        ..TensorToImage::default()
    };
    let bytes: std::sync::Arc<[u8]> = std::fs::read(dir.join("model.pte")).unwrap().into();
    let builder = vkdelegate::pte::program_builder(bytes, None)
        .unwrap()
        .device(DeviceChoice::Device(device.clone()));
    // SAFETY: as in the first test.
    let mut program = unsafe {
        builder
            .bind_input_image("input_0", app(&input), ImageToTensor::default())
            .bind_output_image("output_0", app(&output), conv)
    }
    .build()
    .unwrap();
    program.execute(&[]).unwrap();
    let got = read_rgba32f(&output);
    let mut worst = 0.0f32;
    for (p, g) in got.iter().enumerate() {
        for (c, v) in g.iter().take(3).enumerate() {
            worst = worst.max((v - 0.5 * want[c * 16 + p]).abs());
        }
    }
    assert!(worst < 1e-5, "max error {worst}");
    drop(program);
    drop((input, output));
    drop(device);
    assert_no_validation_errors_of_ours(&instance);
}

/// A TOML program (mul_scalar -> sigmoid) from the red channel of a BGRA8 image (C = 1) into
/// a heat-mapped RGBA8 image.
#[test]
fn a_toml_program_runs_from_a_bgra8_image_into_a_heat_map() {
    let _serial = serial();
    let test = "a_toml_program_runs_from_a_bgra8_image_into_a_heat_map";
    let Some((instance, device)) = device(test, false) else {
        return;
    };
    let text = format!(
        r#"
outputs = ["y"]

[[step]]
name = "scale"
op = "mul_scalar"
value = 4.0
input_shape = [1, 1, {H}, {W}]
inputs = ["x"]
outputs = ["a"]

[[step]]
name = "gate"
op = "sigmoid"
inputs = ["a"]
outputs = ["y"]
"#
    );
    let file = ProgramFile::parse(&text, std::path::Path::new(".")).unwrap();
    let input = image(&device, BGRA8, (W, H), 6);
    let output = TestImage::new(&device, RGBA8, W, H, vk::ImageUsageFlags::STORAGE);
    let conv = ImageToTensor {
        mean: [0.5; 4],
        ..ImageToTensor::default()
    };
    let heat = TensorToImage {
        colour_map: ColourMap::Heat,
        ..TensorToImage::default()
    };
    // SAFETY: as in the first test.
    let mut program = unsafe {
        ProgramBuilder::from_file(file)
            .device(DeviceChoice::Device(device.clone()))
            .bind_input_image("x", app(&input), conv)
            .bind_output_image("y", app(&output), heat)
    }
    .build()
    .unwrap();
    program.execute(&[]).unwrap();
    let got = output.read();
    for y in 0..H {
        for x in 0..W {
            let v = 1.0 / (1.0 + (-(texel(6, x, y)[0] - 0.5) * 4.0).exp());
            let ch = |k: f32| (1.5 - (4.0 * v - k).abs()).clamp(0.0, 1.0);
            let want = [ch(3.0), ch(2.0), ch(1.0), 1.0];
            let at = ((y * W + x) * 4) as usize;
            for c in 0..4 {
                let g = f32::from(got[at + c]) / 255.0;
                assert!(
                    (g - want[c]).abs() <= 0.5 / 255.0 + 1e-4,
                    "({x},{y}) c{c}: {g} != {}",
                    want[c]
                );
            }
        }
    }
    drop(program);
    drop((input, output));
    drop(device);
    assert_no_validation_errors_of_ours(&instance);
}
