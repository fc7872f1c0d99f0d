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

use std::time::Duration;

use vk_core::barrier::{Access, host_read_barrier, memory_barrier};
use vk_core::{
    Buffer, BufferSlice, Device, HostPath, HostTensor, HostTransfer, MemoryLocation, Submission,
    Timestamps, vk,
};

use super::bind::{Bound, written_in_place};
use super::error::{ProgramError, Result};
use super::step::Runner;
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
    ) -> Result<Self> {
        let path = HostPath::for_device(device)?;
        let mut plan = DevicePlan {
            submission: Submission::new(device, 1, "program")?,
            transfer: HostTransfer::new(device, path),
            timestamps: Timestamps::new(device, steps.len() as u32 + 1)?,
            host_in: Vec::new(),
            host_out: Vec::new(),
            app_copies: 0,
        };
        let mut uploads = Vec::new();
        for (i, spec) in wiring.inputs.iter().enumerate() {
            if bound.input(i).is_some() {
                continue;
            }
            let bytes = spec.bytes().unwrap_or(0) as u64;
            let target = input_target(steps, wiring, i)?;
            if path.transfers(bytes) {
                plan.host_in.push(HostSide::Transfer(target));
                continue;
            }
            let what = format!("program input '{}'", spec.name);
            plan.host_in.push(HostSide::Staged(staging(
                device,
                bytes,
                vk::BufferUsageFlags::TRANSFER_SRC,
                &what,
            )?));
            uploads.push((target, bytes));
        }
        let mut downloads = Vec::new();
        for (o, (spec, source)) in wiring.outputs.iter().enumerate() {
            let bytes = spec.bytes().unwrap_or(0) as u64;
            if let Some(Some(app)) = bound.outputs.get(o) {
                let produced = output_source(steps, *source)?;
                if !written_in_place(&produced, &app.slice) {
                    bound.check_copy_target(wiring, o)?;
                    downloads.push(Download::App(produced, app.slice, bytes));
                    plan.app_copies += 1;
                }
                continue;
            }
            let produced = output_source(steps, *source)?;
            if path.transfers(bytes) {
                plan.host_out.push(HostSide::Transfer(produced));
                continue;
            }
            let what = format!("program output '{}'", spec.name);
            plan.host_out.push(HostSide::Staged(staging(
                device,
                bytes,
                vk::BufferUsageFlags::TRANSFER_DST,
                &what,
            )?));
            downloads.push(Download::Staging(produced, bytes));
        }
        let cmd = plan.submission.begin(0)?;
        // SAFETY: `cmd` is recording; every buffer is live and owned by the plan or the
        // program's steps, which outlive the plan (see `Program`'s field order).
        unsafe { plan.record_commands(device, cmd, steps, &uploads, &downloads) };
        plan.submission.end(0)?;
        Ok(plan)
    }

    /// # Safety
    /// `cmd` is recording; the slices are live.
    unsafe fn record_commands(
        &self,
        device: &Device,
        cmd: vk::CommandBuffer,
        steps: &[&dyn Runner],
        uploads: &[(BufferSlice, u64)],
        downloads: &[Download],
    ) {
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
    ) -> Result<(Vec<HostTensor>, Vec<Duration>)> {
        // An earlier failed wait leaves the submission pending: finish it before reuse.
        self.submission.wait()?;
        self.transfer.wait()?;
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
        // SAFETY: the command buffer is executable; the steps it records are alive (the
        // program drops the plan first); no semaphores.
        unsafe { self.submission.submit(0, &[], &[]) }?;
        self.submission.wait()?;
        let mut out = Vec::with_capacity(outputs.len());
        for (side, spec) in self.host_out.iter().zip(outputs) {
            let mut bytes = vec![0u8; spec.bytes().unwrap_or(0)];
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
        Ok((out, self.step_times()?))
    }
}
