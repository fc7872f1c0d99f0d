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
//!
//! A plan may keep several submissions in flight ([`super::ProgramBuilder::runs_in_flight`]):
//! the program is recorded once per slot, each with its own command buffer, fence, timestamps
//! and output staging, so a run's outputs wait on the host while later runs execute. A slot
//! may hold several runs one after the other ([`super::ProgramBuilder::runs_per_submission`]),
//! each with its own output staging, so that the device does not stop between them. Outputs
//! fed back into inputs ([`super::ProgramBuilder::feed_back`]) are copied into those inputs'
//! staging at the end of each run, where the next run's upload reads them: back-to-back runs
//! need no host work between them.

use std::collections::VecDeque;
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

/// Host staging, timestamps and the recorded command buffers of the device hand-off.
pub(super) struct DevicePlan {
    // Field order is drop order: the slots' submissions wait for their work before the
    // buffers they use are destroyed.
    slots: Vec<Slot>,
    transfer: HostTransfer,
    /// Per program input not bound to an application buffer.
    host_in: Vec<HostSide>,
    /// Per program output not bound to an application buffer: moved by the host transfer,
    /// or staged (`None`: the slot's next staging buffer).
    host_out: Vec<Option<BufferSlice>>,
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
    /// Outputs copied into input staging at the end of each run.
    feedbacks: Vec<FeedBack>,
    /// Runs recorded one after the other in each slot.
    reps: usize,
    /// The runs in flight, oldest first: slot, run within it, and whether it was queued
    /// behind another run.
    in_flight: VecDeque<(usize, usize, bool)>,
    /// The device tick at which the last finished run ended.
    last_end: Option<u64>,
}

/// The device times of one finished run.
#[derive(Debug, Clone, Default)]
pub(super) struct RunTimes {
    /// Per step.
    pub steps: Vec<Duration>,
    /// The whole command buffer.
    pub span: Duration,
    /// The idle time before it, for a run queued behind another.
    pub idle: Option<Duration>,
}

/// One recording of the program, with what a run in flight needs for itself.
struct Slot {
    // Field order is drop order: the submission waits for its work first.
    submission: Submission,
    timestamps: Option<Timestamps>,
    /// Per run of the slot, the staged program outputs' buffers, in output order.
    staging_out: Vec<Vec<Buffer>>,
}

/// A tensor copied into a program input's staging after each run.
pub(super) struct FeedBack {
    /// The tensor's name.
    pub name: String,
    /// The tensor's device slice (a step's output).
    pub src: BufferSlice,
    /// Its bytes.
    pub bytes: u64,
    /// The program input (in program input order) it becomes.
    pub input: usize,
    /// Whether it is `i32` fed into an `i64` input: each value lands in the low word of its
    /// element, the high word zero.
    pub widen: bool,
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

pub(super) fn output_source(steps: &[&dyn Runner], source: Source) -> Result<BufferSlice> {
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
    /// application's buffers `bound`) as `wiring` says, `reps` runs in each of `depth`
    /// slots, copying `feedbacks` into their inputs' staging after each run.
    pub(super) fn record(
        device: &Device,
        steps: &[&dyn Runner],
        wiring: &Wiring,
        (bound, images): (&Bound, &BoundImages),
        mut feedbacks: Vec<FeedBack>,
        (depth, reps): (usize, usize),
    ) -> Result<Self> {
        let path = HostPath::for_device(device)?;
        let reps = reps.max(1);
        // Per run: before and after each step, and after its last command.
        let queries = (reps * (steps.len() + 2)) as u32;
        let slots = (0..depth.max(1))
            .map(|_| {
                Ok(Slot {
                    submission: Submission::new(device, 1, "program")?,
                    timestamps: Timestamps::new(device, queries)?,
                    staging_out: (0..reps).map(|_| Vec::new()).collect(),
                })
            })
            .collect::<Result<_>>()?;
        let mut plan = DevicePlan {
            slots,
            transfer: HostTransfer::new(device, path),
            host_in: Vec::new(),
            host_out: Vec::new(),
            app_copies: 0,
            convert_in: Vec::new(),
            convert_out: Vec::new(),
            uploads: Vec::new(),
            downloads: Vec::new(),
            feedbacks: Vec::new(),
            reps,
            in_flight: VecDeque::new(),
            last_end: None,
        };
        let fed: Vec<usize> = feedbacks.iter().map(|f| f.input).collect();
        let staged = plan.plan_inputs(device, steps, wiring, (bound, images), &fed)?;
        for f in &mut feedbacks {
            f.input = staged[f.input].ok_or_else(|| ProgramError::FeedBack {
                output: f.name.clone(),
                input: wiring.inputs[f.input].name.clone(),
                problem: "the input is not staged (bound to a buffer or an image, or moved \
                          by the host transfer)"
                    .into(),
            })?;
        }
        plan.feedbacks = feedbacks;
        plan.plan_outputs(device, steps, wiring, bound, images)?;
        if let Some(o) = plan.host_out.iter().position(Option::is_some) {
            if plan.slots.len() * reps > 1 {
                return Err(ProgramError::Wiring(format!(
                    "output '{}' is moved by the host transfer (large): one run in flight at \
                     most",
                    wiring.outputs[o].0.name
                )));
            }
        }
        plan.record_again(device, steps)?;
        Ok(plan)
    }

    /// Staging and uploads, or conversions, of the program inputs not bound to buffers (with
    /// `TRANSFER_DST` usage for those in `fed`); per program input, the index of its staging
    /// buffer in `host_in` if it has one.
    fn plan_inputs(
        &mut self,
        device: &Device,
        steps: &[&dyn Runner],
        wiring: &Wiring,
        (bound, images): (&Bound, &BoundImages),
        fed: &[usize],
    ) -> Result<Vec<Option<usize>>> {
        let mut staged = vec![None; wiring.inputs.len()];
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
            let mut usage = vk::BufferUsageFlags::TRANSFER_SRC;
            if fed.contains(&i) {
                usage |= vk::BufferUsageFlags::TRANSFER_DST;
            }
            staged[i] = Some(self.host_in.len());
            self.host_in
                .push(HostSide::Staged(staging(device, bytes, usage, &what)?));
            self.uploads.push((target, bytes));
        }
        Ok(staged)
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
                self.host_out.push(Some(produced));
                continue;
            }
            let what = format!("program output '{}'", spec.name);
            for run in self.slots.iter_mut().flat_map(|s| &mut s.staging_out) {
                let usage = vk::BufferUsageFlags::TRANSFER_DST;
                run.push(staging(device, bytes, usage, &what)?);
            }
            self.host_out.push(None);
            self.downloads.push(Download::Staging(produced, bytes));
        }
        Ok(())
    }

    /// Records every slot's command buffer (again) from the plan's parts.
    fn record_again(&mut self, device: &Device, steps: &[&dyn Runner]) -> Result<()> {
        for k in 0..self.slots.len() {
            let cmd = self.slots[k].submission.begin(0)?;
            for run in 0..self.reps {
                // SAFETY: `cmd` is recording; every buffer is live and owned by the plan or
                // the program's steps, which outlive the plan (see `Program`'s field order);
                // the images' contract is the caller's.
                unsafe { self.record_commands(device, cmd, steps, (&self.slots[k], run)) };
            }
            self.slots[k].submission.end(0)?;
        }
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
        let missing = || ProgramError::Wiring(format!("tensor '{name}' has no image conversion"));
        if self.conversion(input, index).ok_or_else(missing)?.image() == image {
            return Ok(());
        }
        // The descriptor set may be rewritten only once no submission uses it.
        self.settle()?;
        let conversion = self.conversion(input, index).ok_or_else(missing)?;
        // SAFETY: the caller's contract; nothing pending uses the set (waited above).
        unsafe { conversion.set_image(image) }.map_err(|e| image_error(name, e))?;
        let device = conversion_device(steps)?;
        self.record_again(&device, steps)
    }

    /// The conversion of program input (or output) `index`.
    fn conversion(&mut self, input: bool, index: usize) -> Option<&mut ImageConversion> {
        let conversions = if input {
            &mut self.convert_in
        } else {
            &mut self.convert_out
        };
        let found = conversions.iter_mut().find(|(k, _)| *k == index);
        found.map(|(_, c)| c)
    }

    /// Records run `run` of `slot`.
    ///
    /// # Safety
    /// `cmd` is recording; the slices are live.
    unsafe fn record_commands(
        &self,
        device: &Device,
        cmd: vk::CommandBuffer,
        steps: &[&dyn Runner],
        (slot, run): (&Slot, usize),
    ) {
        let (uploads, downloads) = (&self.uploads, &self.downloads);
        let d = device.raw();
        let base = (run * (steps.len() + 2)) as u32;
        // SAFETY: the caller's contract; copies stay inside the staging buffers (sized from
        // the same specs) and the steps' slices (checked by their delegates at load).
        unsafe {
            if let Some(ts) = &slot.timestamps {
                if run == 0 {
                    ts.reset(cmd);
                }
                ts.write(cmd, vk::PipelineStageFlags::TOP_OF_PIPE, base);
            }
            // The host's writes of the staging, or an earlier run's feedback copies into it.
            let written = Access::HOST_WRITE.and(Access::TRANSFER_WRITE);
            memory_barrier(device, cmd, written, Access::TRANSFER_READ);
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
                if let Some(ts) = &slot.timestamps {
                    ts.write(
                        cmd,
                        vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                        base + k as u32 + 1,
                    );
                }
            }
            memory_barrier(device, cmd, Access::ANY_WRITE, Access::TRANSFER_READ);
            let mut staging = slot.staging_out[run].iter();
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
            self.record_feedbacks(device, cmd);
            host_read_barrier(device, cmd);
            if let Some(ts) = &slot.timestamps {
                let end = base + steps.len() as u32 + 1;
                ts.write(cmd, vk::PipelineStageFlags::BOTTOM_OF_PIPE, end);
            }
        }
    }

    /// Copies the fed-back tensors into their inputs' staging (after the downloads' barrier:
    /// every step is done with the inputs and has written the tensors).
    ///
    /// # Safety
    /// As [`DevicePlan::record_commands`].
    unsafe fn record_feedbacks(&self, device: &Device, cmd: vk::CommandBuffer) {
        let d = device.raw();
        for f in &self.feedbacks {
            let Some(HostSide::Staged(dst)) = self.host_in.get(f.input) else {
                continue;
            };
            // SAFETY: the caller's contract; `dst` holds the input's bytes (twice the
            // tensor's when widened), with TRANSFER_DST usage (see `plan_inputs`).
            unsafe {
                if !f.widen {
                    let region = [vk::BufferCopy::default()
                        .src_offset(f.src.offset)
                        .size(f.bytes)];
                    d.cmd_copy_buffer(cmd, f.src.buffer, dst.raw(), &region);
                    continue;
                }
                // Zero into each element's high word, then each value into its low word: one
                // element's two words are disjoint (no barrier); more are filled whole first.
                let elements = f.bytes / 4;
                if elements == 1 {
                    d.cmd_fill_buffer(cmd, dst.raw(), 4, 4, 0);
                } else {
                    d.cmd_fill_buffer(cmd, dst.raw(), 0, 2 * f.bytes, 0);
                    let filled = Access::TRANSFER_WRITE;
                    memory_barrier(device, cmd, filled, Access::TRANSFER_WRITE);
                }
                let regions: Vec<vk::BufferCopy> = (0..elements)
                    .map(|k| {
                        vk::BufferCopy::default()
                            .src_offset(f.src.offset + 4 * k)
                            .dst_offset(8 * k)
                            .size(4)
                    })
                    .collect();
                d.cmd_copy_buffer(cmd, f.src.buffer, dst.raw(), &regions);
            }
        }
    }

    /// Copy commands recorded per execution: one per program input and output; none at a
    /// step boundary.
    pub(super) fn copies(&self) -> usize {
        let staged_in = self.host_in.iter().filter(|h| h.staging().is_some());
        let staged_out = self.host_out.iter().filter(|h| h.is_none());
        staged_in.count() + staged_out.count() + self.app_copies
    }

    /// Runs in flight.
    pub(super) fn running(&self) -> usize {
        self.in_flight.len()
    }

    /// The most runs in flight.
    pub(super) fn most_running(&self) -> usize {
        self.slots.len() * self.reps
    }

    /// Runs per submission.
    pub(super) fn reps(&self) -> usize {
        self.reps
    }

    /// Submits the recorded program (its first slot), waiting on `waits` and signalling
    /// `signals`; no host wait, except for an earlier submission still pending.
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
        unsafe { self.slots[0].submission.submit(0, waits, signals) }?;
        Ok(())
    }

    /// Waits for the last submission of the first slot; the device time of each step where
    /// the queue has timestamps.
    pub(super) fn wait(&mut self) -> Result<Vec<Duration>> {
        let pending = self.slots[0].submission.is_pending();
        self.slots[0].submission.wait()?;
        if !pending {
            return Ok(Vec::new());
        }
        Ok(self.run_times((0, 0), false)?.steps)
    }

    /// Waits for every run in flight, leaving their outputs unread.
    pub(super) fn settle(&mut self) -> Result<()> {
        for slot in &mut self.slots {
            slot.submission.wait()?;
        }
        // Only once every wait succeeded: a failed one leaves its runs in flight.
        self.in_flight.clear();
        self.transfer.wait()?;
        Ok(())
    }

    /// The device times of run `run` of `slot`, last finished, `queued` behind the run
    /// before.
    fn run_times(&mut self, (slot, run): (usize, usize), queued: bool) -> Result<RunTimes> {
        let Some(ts) = &self.slots[slot].timestamps else {
            return Ok(RunTimes::default());
        };
        let per_run = ts.count() as usize / self.reps;
        let all = ts.read_ticks(ts.count())?;
        let ticks = &all[run * per_run..(run + 1) * per_run];
        let (start, end) = (ticks[0], ticks[ticks.len() - 1]);
        // A run's first timestamp may be written before the run ahead of it has ended (it
        // waits for nothing): overlaps count as no time.
        let time = |a: u64, b: u64| ts.duration(b.saturating_sub(a));
        let steps = ticks[..ticks.len() - 1]
            .windows(2)
            .map(|w| time(w[0], w[1]));
        let steps = steps.collect();
        let idle = self.last_end.filter(|_| queued).map(|e| time(e, start));
        self.last_end = Some(end);
        Ok(RunTimes {
            steps,
            span: time(start, end),
            idle,
        })
    }

    /// Uploads `inputs`, runs the recorded program, waits, and reads `outputs` back; with the
    /// device time of each step where the queue has timestamps. Runs in flight are waited
    /// for first, their outputs dropped; where a slot holds several runs, the first's
    /// outputs are read and the others' dropped at the next run.
    pub(super) fn run(
        &mut self,
        inputs: &[HostTensor],
        outputs: &[vk_core::TensorSpec],
    ) -> Result<(Vec<HostTensor>, RunTimes, [Duration; 2])> {
        self.settle()?;
        let upload = self.start(Some(inputs))?;
        let (out, times, download) = self.finish(outputs)?;
        Ok((out, times, [upload, download]))
    }

    /// Submits a slot's runs without waiting: the first on `inputs` (uploaded first; no run
    /// may be in flight then), or on the inputs the last run left (the last given, fed-back
    /// outputs in place of theirs), each later one on the inputs the one before left. At most
    /// every slot's runs are in flight. The upload's host time.
    pub(super) fn start(&mut self, inputs: Option<&[HostTensor]>) -> Result<Duration> {
        let running = self.in_flight.len();
        let most = self.slots.len() * self.reps;
        if running + self.reps > most || (inputs.is_some() && running > 0) {
            return Err(ProgramError::InFlight {
                running,
                most,
                with_inputs: inputs.is_some(),
            });
        }
        let slot = (0..self.slots.len())
            .find(|k| !self.in_flight.iter().any(|f| f.0 == *k))
            .unwrap_or(0);
        // An earlier failed wait leaves a submission pending: finish it before reuse, and
        // every one before new inputs overwrite the staging their uploads read.
        let pending = match inputs {
            Some(_) => 0..self.slots.len(),
            None => slot..slot + 1,
        };
        for k in pending {
            self.slots[k].submission.wait()?;
        }
        let copying = std::time::Instant::now();
        if let Some(inputs) = inputs {
            self.write_inputs(inputs)?;
        }
        let upload = copying.elapsed();
        let submission = &mut self.slots[slot].submission;
        // SAFETY: the command buffer is executable; the steps it records are alive (the
        // program drops the plan first); no semaphores.
        unsafe { submission.submit(0, &[], &[]) }?;
        let runs = (0..self.reps).map(|run| (slot, run, running > 0 || run > 0));
        self.in_flight.extend(runs);
        Ok(upload)
    }

    fn write_inputs(&mut self, inputs: &[HostTensor]) -> Result<()> {
        self.transfer.wait()?;
        for (side, t) in self.host_in.iter_mut().zip(inputs) {
            match side {
                HostSide::Staged(buffer) => buffer.write(0, t.bytes())?,
                HostSide::Transfer(s) => {
                    // SAFETY: the slice is a step's input buffer (live while the plan is, with
                    // TRANSFER_DST usage, holding the tensor); no run is in flight.
                    unsafe { self.transfer.upload(t.bytes(), s.buffer, s.offset) }?
                }
            }
        }
        Ok(())
    }

    /// Waits for the oldest run in flight and reads its `outputs`; with the device time of
    /// each step where the queue has timestamps, and the download's host time.
    pub(super) fn finish(
        &mut self,
        outputs: &[vk_core::TensorSpec],
    ) -> Result<(Vec<HostTensor>, RunTimes, Duration)> {
        let (slot, run, queued) = *self
            .in_flight
            .front()
            .ok_or(ProgramError::NothingInFlight)?;
        self.slots[slot].submission.wait()?;
        self.in_flight.pop_front();
        let copying = std::time::Instant::now();
        let mut out = Vec::with_capacity(outputs.len());
        let mut host_out = self.host_out.iter();
        let mut staging = self.slots[slot].staging_out[run].iter();
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
                None => match staging.next() {
                    Some(buffer) => buffer.read(0, &mut bytes)?,
                    None => continue,
                },
                Some(s) => {
                    // SAFETY: the slice is a step's output buffer (live, TRANSFER_SRC usage);
                    // its writers were submitted and waited for, and no other run is in
                    // flight (see `record`).
                    unsafe { self.transfer.download(s.buffer, s.offset, &mut bytes) }?
                }
            }
            out.push(
                HostTensor::new(spec.dtype, spec.shape.clone(), bytes)
                    .map_err(|e| ProgramError::Wiring(e.to_string()))?,
            );
        }
        let download = copying.elapsed();
        Ok((out, self.run_times((slot, run), queued)?, download))
    }
}

/// The device the steps run on (one for the whole program).
fn conversion_device(steps: &[&dyn Runner]) -> Result<Device> {
    steps
        .first()
        .map(|s| s.device().clone())
        .ok_or_else(|| ProgramError::Wiring("the program has no steps".into()))
}
