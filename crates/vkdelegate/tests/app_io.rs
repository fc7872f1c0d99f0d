//! An engine's own buffers as a program's inputs and outputs, ordered by the engine's timeline
//! semaphore: the engine uploads (signal 1), the program runs (wait 1, signal 2), the engine
//! reads back (wait 2); no host wait between them. The example program (VGF -> compute ->
//! VGF) and a compute-only chain, against CPU references; and each named binding error.

#![cfg(all(feature = "vgf", feature = "compute", feature = "shared"))]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod example;
mod steps;

use example::{fixture, input, reference, requirements, serial};
use steps::step_op;
use vk_core::testing::{self, assert_no_validation_errors_of_ours};
use vk_core::{
    ArmSupport, Buffer, Device, Features, HostTensor, Instance, MemoryLocation, SemaphoreSignal,
    SemaphoreWait, Submission, barrier, vk,
};
use vkdelegate::program::{
    AppBuffer, BindingProblem, DeviceChoice, HandOff, Program, ProgramBuilder, ProgramError,
    StepKind, StepSpec,
};

const STORAGE: vk::BufferUsageFlags = vk::BufferUsageFlags::STORAGE_BUFFER;
const SRC: vk::BufferUsageFlags = vk::BufferUsageFlags::TRANSFER_SRC;
const DST: vk::BufferUsageFlags = vk::BufferUsageFlags::TRANSFER_DST;

/// A device for `test` with timeline semaphores (and the ARM extensions for `vgf`), or a
/// visible skip.
fn device(test: &str, vgf: bool) -> Option<(Instance, Device)> {
    testing::validate_every_instance();
    let mut r = if vgf {
        requirements()
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

/// The engine: its own buffers, timeline semaphore and submissions on the program's device.
struct Engine {
    device: Device,
    timeline: vk::Semaphore,
    upload: Submission,
    read_back: Submission,
    staging_in: Buffer,
    staging_out: Buffer,
}

impl Engine {
    fn new(device: &Device) -> Engine {
        let mut kind = vk::SemaphoreTypeCreateInfo::default()
            .semaphore_type(vk::SemaphoreType::TIMELINE)
            .initial_value(0);
        let info = vk::SemaphoreCreateInfo::default().push_next(&mut kind);
        // SAFETY: valid create info; destroyed in `Drop`.
        let timeline = unsafe { device.raw().create_semaphore(&info, None) }.unwrap();
        Engine {
            device: device.clone(),
            timeline,
            upload: Submission::new(device, 1, "engine upload").unwrap(),
            read_back: Submission::new(device, 1, "engine read-back").unwrap(),
            staging_in: Buffer::new(device, 1 << 16, MemoryLocation::Host, SRC, "in").unwrap(),
            staging_out: Buffer::new(device, 1 << 16, MemoryLocation::Host, DST, "out").unwrap(),
        }
    }

    /// A buffer of the engine's, and the binding that states its usage.
    fn buffer(&self, bytes: u64, usage: vk::BufferUsageFlags) -> (Buffer, AppBuffer) {
        let b = Buffer::new(
            &self.device,
            bytes,
            MemoryLocation::DeviceMapped,
            usage,
            "app",
        )
        .unwrap();
        let app = AppBuffer::new(b.slice(Some(bytes)), usage);
        (b, app)
    }

    /// Copies `data` into `dst` on the GPU, signalling the timeline at `signal`.
    fn upload(&mut self, dst: &Buffer, data: &[u8], signal: u64) {
        self.staging_in.write(0, data).unwrap();
        let cmd = self.upload.begin(0).unwrap();
        let region = [vk::BufferCopy::default().size(data.len() as u64)];
        // SAFETY: `cmd` is recording; both buffers are live and hold `data.len()` bytes.
        unsafe {
            let d = self.device.raw();
            d.cmd_copy_buffer(cmd, self.staging_in.raw(), dst.raw(), &region);
        }
        self.upload.end(0).unwrap();
        let signals = [SemaphoreSignal {
            semaphore: self.timeline,
            value: signal,
        }];
        // SAFETY: executable command buffer; the timeline's values increase.
        unsafe { self.upload.submit(0, &[], &signals) }.unwrap();
    }

    /// Copies `bytes` of `src` back once the timeline reaches `wait`, and waits for that.
    fn read_back(&mut self, src: &Buffer, bytes: usize, wait: u64) -> Vec<u8> {
        let cmd = self.read_back.begin(0).unwrap();
        let region = [vk::BufferCopy::default().size(bytes as u64)];
        // SAFETY: `cmd` is recording; both buffers are live and hold `bytes` bytes.
        unsafe {
            let d = self.device.raw();
            d.cmd_copy_buffer(cmd, src.raw(), self.staging_out.raw(), &region);
            barrier::host_read_barrier(&self.device, cmd);
        }
        self.read_back.end(0).unwrap();
        let waits = [SemaphoreWait {
            semaphore: self.timeline,
            stage: vk::PipelineStageFlags::TRANSFER,
            value: wait,
        }];
        // SAFETY: executable command buffer; the wait's value is signalled by a submission
        // already made.
        unsafe { self.read_back.submit(0, &waits, &[]) }.unwrap();
        self.read_back.wait().unwrap();
        let mut out = vec![0u8; bytes];
        self.staging_out.read(0, &mut out).unwrap();
        out
    }

    /// Runs `program` once, bound to `x_buf` and `y_buf`: upload (signal `base + 1`), the
    /// program (wait `base + 1`, signal `base + 2`), read-back (wait `base + 2`).
    fn run(
        &mut self,
        program: &mut Program,
        (x_buf, y_buf): (&Buffer, &Buffer),
        x: &HostTensor,
        base: u64,
    ) -> Vec<f32> {
        self.upload(x_buf, x.bytes(), base + 1);
        let waits = [SemaphoreWait {
            semaphore: self.timeline,
            stage: vk::PipelineStageFlags::ALL_COMMANDS,
            value: base + 1,
        }];
        let signals = [SemaphoreSignal {
            semaphore: self.timeline,
            value: base + 2,
        }];
        // SAFETY: the timeline is live on the program's device, its values increase; the
        // engine touches the bound buffers only ordered by it.
        unsafe { program.submit(&waits, &signals) }.unwrap();
        let bytes = program.outputs()[0].bytes().unwrap();
        let out = self.read_back(y_buf, bytes, base + 2);
        program.wait().unwrap();
        out.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.upload.wait();
        let _ = self.read_back.wait();
        // SAFETY: no pending submission uses the semaphore (both waited above; the program's
        // submissions were waited by the read-backs that waited on their signals).
        unsafe { self.device.raw().destroy_semaphore(self.timeline, None) };
    }
}

fn step_vgf(name: &str, file: &str, input: &str, output: &str) -> StepSpec {
    StepSpec {
        name: name.into(),
        kind: StepKind::Vgf {
            path: fixture(file),
        },
        inputs: vec![input.into()],
        outputs: vec![output.into()],
    }
}

/// The example program, unbuilt: avg_pool2d (VGF) -> sigmoid (compute) -> x*x + 0.25 (VGF).
fn example(device: &Device) -> ProgramBuilder {
    ProgramBuilder::new()
        .step(step_vgf("pool", "avgpool/model.vgf", "x", "pooled"))
        .step(step_op("gate", "sigmoid", ("pooled", "gated"), &[]))
        .step(step_vgf(
            "square_plus",
            "sqplus_1x3x4x4/model.vgf",
            "gated",
            "y",
        ))
        .device(DeviceChoice::Device(device.clone()))
}

/// The compute chain of `examples/large_chain.toml` on f32`SHAPE` (105 elements: not whole
/// vec4s): x * 0.5 -> sigmoid -> + 0.25.
const SHAPE: [usize; 4] = [1, 3, 5, 7];

fn chain(device: &Device) -> ProgramBuilder {
    let shape = toml::Value::Array(SHAPE.iter().map(|&d| (d as i64).into()).collect());
    ProgramBuilder::new()
        .step(step_op(
            "scale",
            "mul_scalar",
            ("x", "a"),
            &[("value", 0.5.into()), ("input_shape", shape)],
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

fn chain_input(seed: u64) -> HostTensor {
    let v: Vec<f32> = (0..105)
        .map(|i| ((i as f32) * 0.29 + seed as f32).cos() * 4.0)
        .collect();
    HostTensor::from_f32(SHAPE.to_vec(), &v).unwrap()
}

fn chain_reference(x: &HostTensor) -> Vec<f32> {
    let v = x.to_f32().unwrap();
    v.iter()
        .map(|x| 1.0 / (1.0 + (-x * 0.5).exp()) + 0.25)
        .collect()
}

fn max_error(got: &[f32], want: &[f32]) -> f32 {
    assert!(got.len() >= want.len(), "{} < {}", got.len(), want.len());
    got.iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max)
}

#[test]
fn the_example_reads_and_writes_the_engines_buffers_ordered_by_its_timeline() {
    let _serial = serial();
    let test = "the_example_reads_and_writes_the_engines_buffers_ordered_by_its_timeline";
    let Some((instance, device)) = device(test, true) else {
        return;
    };
    let mut engine = Engine::new(&device);
    let (x_buf, x_app) = engine.buffer(768, STORAGE | DST);
    let (y_buf, y_app) = engine.buffer(192, STORAGE | SRC);
    // SAFETY: both buffers are the engine's, on the program's device, outliving the program;
    // the engine orders its access by the timeline it passes to `submit`.
    let mut program = unsafe {
        example(&device)
            .bind_input("x", x_app)
            .bind_output("y", y_app)
    }
    .build()
    .unwrap();
    assert_eq!(program.recorded_copies(), Some(0));
    for round in 0..3 {
        let x = input(round);
        let y = engine.run(&mut program, (&x_buf, &y_buf), &x, 2 * round);
        let err = max_error(&y, &reference(&x));
        assert!(err < 1e-5, "round {round}: max error {err}");
    }
    assert_eq!(program.last_timings().submissions, 1);
    // A bound program runs by submit only.
    let e = program.execute(&[input(0)]).unwrap_err();
    assert!(
        matches!(&e, ProgramError::Binding(b) if b.problem == BindingProblem::BoundProgram),
        "{e}"
    );
    drop(program);
    drop((engine, x_buf, y_buf));
    drop(device);
    assert_no_validation_errors_of_ours(&instance);
}

#[test]
fn a_compute_chain_reads_and_writes_the_engines_buffers() {
    let _serial = serial();
    let test = "a_compute_chain_reads_and_writes_the_engines_buffers";
    let Some((instance, device)) = device(test, false) else {
        return;
    };
    let mut engine = Engine::new(&device);
    // 105 f32 are 420 bytes; the compute shaders touch whole vec4s: 432.
    let (x_buf, x_app) = engine.buffer(432, STORAGE | DST);
    let (y_buf, y_app) = engine.buffer(432, STORAGE | SRC);
    // SAFETY: as in the example's test.
    let mut program = unsafe {
        chain(&device)
            .bind_input("x", x_app)
            .bind_output("y", y_app)
    }
    .build()
    .unwrap();
    assert_eq!(program.recorded_copies(), Some(0));
    for round in 0..2 {
        let x = chain_input(round);
        let y = engine.run(&mut program, (&x_buf, &y_buf), &x, 2 * round);
        let err = max_error(&y, &chain_reference(&x));
        assert!(err < 1e-5, "round {round}: max error {err}");
    }
    // The same program unbound still executes through its own staging.
    let mut unbound = chain(&device).build().unwrap();
    assert_eq!(unbound.recorded_copies(), Some(2));
    let x = chain_input(7);
    let y = unbound.execute(std::slice::from_ref(&x)).unwrap();
    assert!(max_error(&y[0].to_f32().unwrap(), &chain_reference(&x)) < 1e-5);
    // SAFETY: no semaphores; refused before anything is submitted.
    let e = unsafe { unbound.submit(&[], &[]) }.unwrap_err();
    assert!(
        matches!(&e, ProgramError::Binding(b) if b.problem == BindingProblem::NotBound),
        "{e}"
    );
    drop((program, unbound));
    drop((engine, x_buf, y_buf));
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

#[test]
fn each_bad_binding_is_a_named_error() {
    let _serial = serial();
    let Some((instance, device)) = device("each_bad_binding_is_a_named_error", false) else {
        return;
    };
    let engine = Engine::new(&device);
    let (_x, x) = engine.buffer(432, STORAGE | DST);
    let (_y, y) = engine.buffer(432, STORAGE | SRC);
    let (_big, big) = engine.buffer(4096, STORAGE | SRC | DST);
    let both = |b: ProgramBuilder, x: AppBuffer, y: AppBuffer| {
        // SAFETY: the engine's buffers, live for the whole test; nothing is submitted.
        unsafe { b.bind_input("x", x).bind_output("y", y) }
    };
    // SAFETY: as above.
    let p = binding_problem(unsafe { chain(&device).bind_input("z", x) }, "z");
    assert!(matches!(p, BindingProblem::UnknownInput { ref inputs } if inputs == &["x"]));
    // SAFETY: as above.
    let p = binding_problem(unsafe { chain(&device).bind_output("a", y) }, "a");
    assert!(matches!(p, BindingProblem::UnknownOutput { ref outputs } if outputs == &["y"]));
    // Bind all or none.
    // SAFETY: as above.
    let p = binding_problem(unsafe { chain(&device).bind_input("x", x) }, "y");
    assert_eq!(p, BindingProblem::Unbound { input: false });
    // 420 bytes: the tensor's, but not whole vec4s.
    let short = AppBuffer::new(
        vk_core::BufferSlice {
            size: 420,
            ..x.slice
        },
        x.usage,
    );
    let p = binding_problem(both(chain(&device), short, y), "x");
    assert_eq!(
        p,
        BindingProblem::TooSmall {
            size: 420,
            need: 432
        }
    );
    // A compute step reads x: storage and transfer-destination usage.
    let no_dst = AppBuffer::new(x.slice, STORAGE);
    let p = binding_problem(both(chain(&device), no_dst, y), "x");
    assert_eq!(
        p,
        BindingProblem::MissingUsage {
            missing: DST,
            need: STORAGE | DST
        }
    );
    let no_storage = AppBuffer::new(y.slice, SRC);
    let p = binding_problem(both(chain(&device), x, no_storage), "y");
    assert_eq!(
        p,
        BindingProblem::MissingUsage {
            missing: STORAGE,
            need: STORAGE | SRC
        }
    );
    // Owned exclusively by another queue family: refused, naming both families.
    let family = device.queue().family();
    let elsewhere = x.exclusive_to(family + 1);
    let p = binding_problem(both(chain(&device), elsewhere, y), "x");
    assert_eq!(
        p,
        BindingProblem::QueueFamily {
            owner: family + 1,
            queue: family
        }
    );
    // Owned by the program's own family: accepted as any buffer.
    // SAFETY: as above.
    let own = unsafe {
        chain(&device)
            .bind_input("x", x.exclusive_to(family))
            .bind_output("y", y)
    };
    assert!(own.build().is_ok());
    let alignment = device
        .capabilities()
        .limits
        .min_storage_buffer_offset_alignment;
    if alignment > 4 {
        let slice = vk_core::BufferSlice {
            offset: 4,
            size: 432,
            memory_offset: big.slice.memory_offset + 4,
            ..big.slice
        };
        let p = binding_problem(
            both(chain(&device), x, AppBuffer::new(slice, big.usage)),
            "y",
        );
        assert_eq!(
            p,
            BindingProblem::Misaligned {
                offset: 4,
                alignment
            }
        );
    } else {
        eprintln!("minStorageBufferOffsetAlignment is {alignment}: no misaligned offset");
    }
    let p = binding_problem(both(chain(&device).hand_off(HandOff::Host), x, y), "x");
    assert_eq!(p, BindingProblem::HostHandOff);
    drop(engine);
    drop(device);
    assert_no_validation_errors_of_ours(&instance);
}
