//! The device plan: the whole program recorded once into one command buffer.
//!
//! Program inputs are copied from host staging buffers into the buffers of their first
//! consumers; each step's commands follow, separated by barriers; steps read their producers'
//! buffers directly (they were loaded bound to them), so no copy is recorded at a step
//! boundary; program outputs are copied to host staging buffers, and one final barrier makes
//! them visible to host reads. One execution is one submission and one fence wait.
//!
//! Large program inputs and outputs (as [`vk_core::HostPath::transfers`] says for the device's
//! host path) are not copied by the recorded command buffer: the plan's
//! [`vk_core::HostTransfer`] moves them before the submission and after its wait (pipelined
//! staging or imported host memory), ordered by its own barriers.
//!
//! Inputs and outputs bound to application buffers get no staging and no copy: their steps
//! read and write the application's slices; only a bound output its producer could not write
//! in place is copied into the application's slice. Such a plan runs by `submit`, ordered by
//! the application's semaphores.
//!
//! Inputs and outputs bound to application images get no staging either: a conversion kernel
//! (`vk_core::ImageConversion`) reads an input image into its first consumer's buffer before
//! the first step, and writes an output's producer buffer into its image after the last.
//! Rebinding an image rewrites its conversion's descriptor set and records the command
//! buffer again from the same parts.

use std::time::Duration;

use vk_core::barrier::{Access, host_read_barrier, memory_barrier};
use vk_core::{
    AppImage, Buffer, BufferSlice, Device, HostPath, HostTensor, HostTransfer, ImageConversion,
    MemoryLocation, Submission, Timestamps, vk,
};

use super::bind::{Bound, written_in_place};
use super::error::{ProgramError, Result};
use super::image::{BoundImages, image_error};
use super::runner::Runner;
use super::wiring::{Source, Wiring};

/// Host staging, timestamps and the recorded command buffer of the device hand-off.
pub(super) struct DevicePlan {
    // Field order is drop order: the submission waits for its work before the buffers and
    // queries it uses are destroyed.
    submission: Submission,
    transfer: HostTransfer,
    timestamps: Option<Timestamps>,
    /// Per program input not bound to an application buffer.
    host_in: Vec<HostSide>,
    /// Per program output not bound to an application buffer.
    host_out: Vec<HostSide>,
    /// Copies into application buffers (bound outputs not written in place).
    app_copies: usize,
    /// Conversions of image-bound inputs, with the program input's index.
    convert_in: Vec<(usize, ImageConversion)>,
    /// Conversions of image-bound outputs, with the program output's index.
    convert_out: Vec<(usize, ImageConversion)>,
    /// Copies into the program (destination, bytes), kept for recording again.
    uploads: Vec<(BufferSlice, u64)>,
    /// Copies out of the program, kept for recording again.
    downloads: Vec<Download>,
}

/// How the host reaches a program input or output.
enum HostSide {
    /// A staging buffer the recorded command buffer copies from or into.
    Staged(Buffer),
    /// The step's slice, reached by the plan's host transfer (large tensors).
    Transfer(BufferSlice),
}

impl HostSide {
    fn staging(&self) -> Option<&Buffer> {
        match self {
            HostSide::Staged(b) => Some(b),
            HostSide::Transfer(_) => None,
        }
    }
}

/// Copies out of the program: to host staging buffer `k` of the plan, or into an application
/// slice.
#[derive(Clone, Copy)]
enum Download {
    Staging(BufferSlice, u64),
    App(BufferSlice, BufferSlice, u64),
}

/// Where program input `i` is uploaded: the input buffer of its first consumer.
fn input_target(steps: &[&dyn Runner], wiring: &Wiring, i: usize) -> Result<BufferSlice> {
    for (k, w) in wiring.steps.iter().enumerate() {
        if let Some(j) = w.sources.iter().position(|s| *s == Source::ProgramInput(i)) {
            return device_slice(steps[k].device_inputs().get(j).map(|t| t.slice), k, "input");
        }
    }
    Err(ProgramError::Wiring(format!(
        "program input {i} has no consumer"
    )))
}

fn output_source(steps: &[&dyn Runner], source: Source) -> Result<BufferSlice> {
    match source {
        Source::Step { step, output } => device_slice(
            steps[step].device_outputs().get(output).map(|t| t.slice),
            step,
            "output",
        ),
        Source::ProgramInput(i) => Err(ProgramError::Wiring(format!(
            "program input {i} is not a step output"
        ))),
    }
}

fn device_slice(slice: Option<BufferSlice>, step: usize, what: &str) -> Result<BufferSlice> {
    slice.ok_or_else(|| {
        ProgramError::Wiring(format!(
            "step {step} exposes no device buffer for an {what}"
        ))
    })
}

fn staging(device: &Device, bytes: u64, usage: vk::BufferUsageFlags, what: &str) -> Result<Buffer> {
    Ok(Buffer::new(
        device,
        bytes,
        MemoryLocation::Host,
        usage,
        what,
    )?)
}

impl DevicePlan {
    /// Records `steps` (loaded in device hand-off, bound to their producers and to the
    /// application's buffers `bound`) as `wiring` says.
    pub(super) fn record(
        device: &Device,
        steps: &[&dyn Runner],
        wiring: &Wiring,
        bound: &Bound,
        images: &BoundImages,
    ) -> Result<Self> {
        let path = HostPath::for_device(device)?;
        let mut plan = DevicePlan {
            submission: Submission::new(device, 1, "program")?,
            transfer: HostTransfer::new(device, path),
            timestamps: Timestamps::new(device, steps.len() as u32 + 1)?,
            host_in: Vec::new(),
            host_out: Vec::new(),
            app_copies: 0,
            convert_in: Vec::new(),
            convert_out: Vec::new(),
            uploads: Vec::new(),
            downloads: Vec::new(),
        };
        plan.plan_inputs(device, steps, wiring, bound, images)?;
        plan.plan_outputs(device, steps, wiring, bound, images)?;
        plan.record_again(device, steps)?;
        Ok(plan)
    }

    /// Staging and uploads, or conversions, of the program inputs not bound to buffers.
    fn plan_inputs(
        &mut self,
        device: &Device,
        steps: &[&dyn Runner],
        wiring: &Wiring,
        bound: &Bound,
        images: &BoundImages,
    ) -> Result<()> {
        for (i, spec) in wiring.inputs.iter().enumerate() {
            if bound.input(i).is_some() {
                continue;
            }
            let target = input_target(steps, wiring, i)?;
            if let Some(Some((image, conv))) = images.inputs.get(i) {
                // SAFETY: the image's contract is the caller's (`bind_input_image`); the
                // target is the first consumer's input buffer, alive as long as the plan.
                let c =
                    unsafe { ImageConversion::image_to_tensor(device, *image, spec, target, conv) }
                        .map_err(|e| image_error(&spec.name, e))?;
                self.convert_in.push((i, c));
                continue;
            }
            let bytes = spec.bytes().unwrap_or(0) as u64;
            if self.transfer.path().transfers(bytes) {
                self.host_in.push(HostSide::Transfer(target));
                continue;
            }
            let what = format!("program input '{}'", spec.name);
            self.host_in.push(HostSide::Staged(staging(
                device,
                bytes,
                vk::BufferUsageFlags::TRANSFER_SRC,
                &what,
            )?));
            self.uploads.push((target, bytes));
        }
        Ok(())
    }

    /// Staging and downloads, copies or conversions of the program outputs.
    fn plan_outputs(
        &mut self,
        device: &Device,
        steps: &[&dyn Runner],
        wiring: &Wiring,
        bound: &Bound,
        images: &BoundImages,
    ) -> Result<()> {
        for (o, (spec, source)) in wiring.outputs.iter().enumerate() {
            let bytes = spec.bytes().unwrap_or(0) as u64;
            let produced = output_source(steps, *source)?;
            if let Some(Some(app)) = bound.outputs.get(o) {
                if !written_in_place(&produced, &app.slice) {
                    bound.check_copy_target(wiring, o)?;
                    self.downloads
                        .push(Download::App(produced, app.slice, bytes));
                    self.app_copies += 1;
                }
                continue;
            }
            if let Some(Some((image, conv))) = images.outputs.get(o) {
                // SAFETY: as for the inputs; the producer's buffer lives as long as the plan.
                let c = unsafe {
                    ImageConversion::tensor_to_image(device, spec, produced, *image, conv)
                }
                .map_err(|e| image_error(&spec.name, e))?;
                self.convert_out.push((o, c));
                continue;
            }
            if self.transfer.path().transfers(bytes) {
                self.host_out.push(HostSide::Transfer(produced));
                continue;
            }
            let what = format!("program output '{}'", spec.name);
            self.host_out.push(HostSide::Staged(staging(
                device,
                bytes,
                vk::BufferUsageFlags::TRANSFER_DST,
                &what,
            )?));
            self.downloads.push(Download::Staging(produced, bytes));
        }
        Ok(())
    }

    /// Records the command buffer (again) from the plan's parts.
    fn record_again(&mut self, device: &Device, steps: &[&dyn Runner]) -> Result<()> {
        let cmd = self.submission.begin(0)?;
        // SAFETY: `cmd` is recording; every buffer is live and owned by the plan or the
        // program's steps, which outlive the plan (see `Program`'s field order); the images'
        // contract is the caller's.
        unsafe { self.record_commands(device, cmd, steps) };
        self.submission.end(0)?;
        Ok(())
    }

    /// Binds another image to the conversion of program input (or output) `index`, and
    /// records the command buffer again.
    ///
    /// # Safety
    /// As `ProgramBuilder::bind_input_image` for `image`; `steps` are the plan's steps.
    pub(super) unsafe fn rebind_image(
        &mut self,
        steps: &[&dyn Runner],
        name: &str,
        input: bool,
        index: usize,
        image: AppImage,
    ) -> Result<()> {
        let conversions = if input {
            &mut self.convert_in
        } else {
            &mut self.convert_out
        };
        let Some((_, conversion)) = conversions.iter_mut().find(|(k, _)| *k == index) else {
            return Err(ProgramError::Wiring(format!(
                "tensor '{name}' has no image conversion"
            )));
        };
        if conversion.image() == image {
            return Ok(());
        }
        // The descriptor set may be rewritten only once no submission uses it.
        self.submission.wait()?;
        // SAFETY: the caller's contract; nothing pending uses the set (waited above).
        unsafe { conversion.set_image(image) }.map_err(|e| image_error(name, e))?;
        let device = conversion_device(steps)?;
        self.record_again(&device, steps)
    }

    /// # Safety
    /// `cmd` is recording; the slices are live.
    unsafe fn record_commands(
        &self,
        device: &Device,
        cmd: vk::CommandBuffer,
        steps: &[&dyn Runner],
    ) {
        let (uploads, downloads) = (&self.uploads, &self.downloads);
        let d = device.raw();
        // SAFETY: the caller's contract; copies stay inside the staging buffers (sized from
        // the same specs) and the steps' slices (checked by their delegates at load).
        unsafe {
            if let Some(ts) = &self.timestamps {
                ts.reset(cmd);
                ts.write(cmd, vk::PipelineStageFlags::TOP_OF_PIPE, 0);
            }
            memory_barrier(device, cmd, Access::HOST_WRITE, Access::TRANSFER_READ);
            let staged_in = self.host_in.iter().filter_map(HostSide::staging);
            for (src, (dst, bytes)) in staged_in.zip(uploads) {
                let region = [vk::BufferCopy::default()
                    .dst_offset(dst.offset)
                    .size(*bytes)];
                d.cmd_copy_buffer(cmd, src.raw(), dst.buffer, &region);
            }
            for (_, c) in &self.convert_in {
                c.record(cmd);
            }
            for (k, step) in steps.iter().enumerate() {
                // Everything before (uploads, earlier steps) is visible to this step.
                memory_barrier(device, cmd, Access::ANY_WRITE, Access::ANY);
                step.record_into(cmd);
                if let Some(ts) = &self.timestamps {
                    ts.write(cmd, vk::PipelineStageFlags::BOTTOM_OF_PIPE, k as u32 + 1);
                }
            }
            memory_barrier(device, cmd, Access::ANY_WRITE, Access::TRANSFER_READ);
            let mut staging = self.host_out.iter().filter_map(HostSide::staging);
            for download in downloads {
                let (src, dst, dst_offset, bytes) = match download {
                    Download::Staging(src, bytes) => match staging.next() {
                        Some(dst) => (src, dst.raw(), 0, bytes),
                        None => continue,
                    },
                    Download::App(src, dst, bytes) => (src, dst.buffer, dst.offset, bytes),
                };
                let region = [vk::BufferCopy::default()
                    .src_offset(src.offset)
                    .dst_offset(dst_offset)
                    .size(*bytes)];
                d.cmd_copy_buffer(cmd, src.buffer, dst, &region);
            }
            for (_, c) in &self.convert_out {
                c.record(cmd);
            }
            host_read_barrier(device, cmd);
        }
    }

    /// Copy commands recorded per execution: one per program input and output; none at a
    /// step boundary.
    pub(super) fn copies(&self) -> usize {
        let staged = |v: &[HostSide]| v.iter().filter(|h| h.staging().is_some()).count();
        staged(&self.host_in) + staged(&self.host_out) + self.app_copies
    }

    /// Submits the recorded program, waiting on `waits` and signalling `signals`; no host
    /// wait, except for an earlier submission still pending.
    ///
    /// # Safety
    /// As [`Submission::submit`] for the semaphores; the application buffers the plan was
    /// recorded with are live.
    pub(super) unsafe fn submit(
        &mut self,
        waits: &[vk_core::SemaphoreWait],
        signals: &[vk_core::SemaphoreSignal],
    ) -> Result<()> {
        // SAFETY: the command buffer is executable; the steps it records are alive (the
        // program drops the plan first); the caller's contract covers the semaphores and the
        // application's buffers.
        unsafe { self.submission.submit(0, waits, signals) }?;
        Ok(())
    }

    /// Waits for the last submission; the device time of each step where the queue has
    /// timestamps.
    pub(super) fn wait(&mut self) -> Result<Vec<Duration>> {
        let pending = self.submission.is_pending();
        self.submission.wait()?;
        if !pending {
            return Ok(Vec::new());
        }
        self.step_times()
    }

    fn step_times(&self) -> Result<Vec<Duration>> {
        Ok(match &self.timestamps {
            Some(ts) => {
                let pairs: Vec<(u32, u32)> = (0..ts.count() - 1).map(|k| (k, k + 1)).collect();
                ts.elapsed(&pairs)?
            }
            None => Vec::new(),
        })
    }

    /// Uploads `inputs`, runs the recorded program, waits, and reads `outputs` back; with the
    /// device time of each step where the queue has timestamps.
    pub(super) fn run(
        &mut self,
        inputs: &[HostTensor],
        outputs: &[vk_core::TensorSpec],
    ) -> Result<(Vec<HostTensor>, Vec<Duration>, [Duration; 2])> {
        // An earlier failed wait leaves the submission pending: finish it before reuse.
        self.submission.wait()?;
        self.transfer.wait()?;
        let copying = std::time::Instant::now();
        for (side, t) in self.host_in.iter_mut().zip(inputs) {
            match side {
                HostSide::Staged(buffer) => buffer.write(0, t.bytes())?,
                HostSide::Transfer(s) => {
                    // SAFETY: the slice is a step's input buffer (live while the plan is, with
                    // TRANSFER_DST usage, holding the tensor); the plan's work was waited for.
                    unsafe { self.transfer.upload(t.bytes(), s.buffer, s.offset) }?
                }
            }
        }
        let upload = copying.elapsed();
        // SAFETY: the command buffer is executable; the steps it records are alive (the
        // program drops the plan first); no semaphores.
        unsafe { self.submission.submit(0, &[], &[]) }?;
        self.submission.wait()?;
        let copying = std::time::Instant::now();
        let mut out = Vec::with_capacity(outputs.len());
        let mut host_out = self.host_out.iter();
        for (o, spec) in outputs.iter().enumerate() {
            // An image-bound output's values are in its image: an empty tensor stands in.
            if self.convert_out.iter().any(|(k, _)| *k == o) {
                out.push(
                    HostTensor::new(spec.dtype, vec![0], Vec::new())
                        .map_err(|e| ProgramError::Wiring(e.to_string()))?,
                );
                continue;
            }
            let Some(side) = host_out.next() else {
                continue;
            };
            let mut bytes = vk_core::zeroed_bytes(spec.bytes().unwrap_or(0));
            match side {
                HostSide::Staged(buffer) => buffer.read(0, &mut bytes)?,
                HostSide::Transfer(s) => {
                    // SAFETY: the slice is a step's output buffer (live, TRANSFER_SRC usage);
                    // its writers were submitted and waited for.
                    unsafe { self.transfer.download(s.buffer, s.offset, &mut bytes) }?
                }
            }
            out.push(
                HostTensor::new(spec.dtype, spec.shape.clone(), bytes)
                    .map_err(|e| ProgramError::Wiring(e.to_string()))?,
            );
        }
        let download = copying.elapsed();
        Ok((out, self.step_times()?, [upload, download]))
    }
}

/// The device the steps run on (one for the whole program).
fn conversion_device(steps: &[&dyn Runner]) -> Result<Device> {
    steps
        .first()
        .map(|s| s.device().clone())
        .ok_or_else(|| ProgramError::Wiring("the program has no steps".into()))
}
