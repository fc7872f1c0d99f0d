//! The executable graph: its buffers, pipelines, descriptor sets and recorded command buffers;
//! host execution, the device-side API and profiling. `build.rs` makes it.

use std::fmt;
use std::time::{Duration, Instant};

use vk_core::barrier::{self, Access};
use vk_core::{
    Buffer, BufferSlice, Device, DeviceTensor, HostTensor, HostTransfer, MemoryLocation,
    SemaphoreSignal, SemaphoreWait, Submission, TensorSpec, Timestamps, check_inputs, vk,
};

use crate::error::{Error, Result};
use crate::kernels::Shader;

/// Command buffers of a graph's [`Submission`].
pub(crate) mod cmd {
    /// Host execution: staging copies in, the dispatches, copies out, the host barrier.
    pub const HOST: usize = 0;
    /// The dispatches alone (device-resident use).
    pub const RESIDENT: usize = 1;
    /// Staging buffers to the input slices (device-resident use).
    pub const UPLOAD: usize = 2;
    /// Output slices to staging buffers, then the host barrier.
    pub const READBACK: usize = 3;
    /// Recorded when needed: weight uploads at build, profiling.
    pub const SCRATCH: usize = 4;
    /// How many.
    pub const COUNT: u32 = 5;
}

/// A host staging buffer of `bytes` for tensor `name`.
pub(crate) fn staging_buffer(device: &Device, bytes: u64, name: &str) -> Result<Buffer> {
    Ok(Buffer::new(
        device,
        bytes,
        MemoryLocation::Host,
        vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST,
        &format!("staging for '{name}'"),
    )?)
}

/// Device memory a graph holds, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryReport {
    /// Constants (weights, after prepacking).
    pub weights: u64,
    /// Graph inputs and outputs in buffers of the graph's own (not those bound externally).
    pub io: u64,
    /// Intermediate tensors, with buffers reused across tensors whose lifetimes do not overlap.
    pub intermediates: u64,
    /// What intermediates would take with one buffer each (for comparison).
    pub intermediates_unshared: u64,
    /// Host staging buffers (discrete GPUs, and externally bound inputs and outputs).
    pub staging: u64,
}

impl MemoryReport {
    /// Peak device memory of the graph: weights, inputs and outputs, intermediates.
    pub fn peak_device_bytes(&self) -> u64 {
        self.weights + self.io + self.intermediates
    }
}

/// One dispatch's share of the device time (see [`Graph::profile`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DispatchTime {
    /// The op the dispatch belongs to.
    pub op: &'static str,
    /// The shader (`Gemm`; `Gemm_f16` for its fp16 variant).
    pub kernel: String,
    /// The float type the shader stores and multiplies in: [`vk_core::DType::F16`] for fp16 variants
    /// and for the cooperative-matrix kernels (fp16 by nature), [`vk_core::DType::F32`] otherwise.
    pub float_type: vk_core::DType,
    /// Work groups dispatched.
    pub groups: [u32; 3],
    /// The shape of the tensor its node writes.
    pub shape: Vec<usize>,
    /// Time from the previous timestamp to the one after this dispatch.
    pub time: Duration,
    /// Whether a pipeline barrier precedes it (it reads or writes what the dispatches since
    /// the last barrier wrote or read).
    pub barrier_before: bool,
}

/// A graph input or output.
#[derive(Debug, Clone)]
pub(crate) struct Io {
    /// Bytes of the tensor's data.
    pub bytes: u64,
    /// Bytes the shaders touch (padded to whole vec4s).
    pub need: u64,
    /// Its slot (see [`Graph::slots`]).
    pub slot: usize,
    /// Index in `buffers` of its own buffer (`None` when bound externally).
    pub own: Option<usize>,
    /// Index in `buffers` of its host staging buffer, if it has one.
    pub staging: Option<usize>,
    /// Moved by the graph's [`HostTransfer`] (a large staged tensor): no staging buffer of
    /// its own and no copy in the recorded command buffers.
    pub transfer: bool,
}

impl Io {
    /// The buffer the host writes or reads: the staging buffer, else the mapped own buffer.
    fn host_buffer(&self) -> Option<usize> {
        self.staging.or(self.own)
    }
}

/// Vulkan objects of a graph other than memory and command buffers, destroyed in `Drop`.
/// Its pipelines and layouts are the device's (`crate::pipelines`), except the pipelines of a
/// build given pipeline-cache data.
pub(crate) struct Objects {
    pub device: Device,
    /// Pipelines of this graph alone.
    pub pipelines: Vec<vk::Pipeline>,
    /// How many pipelines the build compiled (the others were the device's already).
    pub compiled: usize,
    pub cache: vk::PipelineCache,
    pub descriptor_pool: vk::DescriptorPool,
}

impl Objects {
    pub fn new(device: &Device) -> Self {
        Objects {
            device: device.clone(),
            pipelines: Vec::new(),
            compiled: 0,
            cache: vk::PipelineCache::null(),
            descriptor_pool: vk::DescriptorPool::null(),
        }
    }
}

impl Drop for Objects {
    fn drop(&mut self) {
        let d = self.device.raw();
        // SAFETY: every handle was created from this device, is null or live, is destroyed
        // once, and no submitted work uses it: the graph's submission, dropped first, waited
        // for its work (see the field order of `Graph`).
        unsafe {
            d.destroy_descriptor_pool(self.descriptor_pool, None);
            for p in self.pipelines.drain(..) {
                d.destroy_pipeline(p, None);
            }
            d.destroy_pipeline_cache(self.cache, None);
        }
    }
}

/// One recorded dispatch.
#[derive(Debug, Clone)]
pub(crate) struct Recorded {
    pub op: &'static str,
    pub kernel: Shader,
    pub pipeline: vk::Pipeline,
    pub layout: vk::PipelineLayout,
    pub set: vk::DescriptorSet,
    /// The slot of each binding.
    pub slots: Vec<usize>,
    pub push: Vec<u8>,
    pub groups: [u32; 3],
    pub barrier_before: bool,
    /// The shape of the tensor the dispatch's node writes.
    pub shape: Vec<usize>,
}

/// An executable compute graph on one device.
///
/// Built once ([`crate::GraphBuilder::build`]): weights uploaded, pipelines created in one
/// batch, descriptor sets written and command buffers recorded. [`Graph::execute`] then
/// copies inputs in, replays the command buffer, waits for the graph's own fence and copies
/// outputs out.
pub struct Graph {
    // Field order is drop order: the submission (its drop waits for pending work) before the
    // objects and buffers that work uses.
    pub(crate) submission: Submission,
    /// Host transfers of large inputs and outputs, along the device's host path (its
    /// submissions, too, finish before the buffers they copy go).
    pub(crate) transfer: HostTransfer,
    pub(crate) timestamps: Option<Timestamps>,
    /// Built with [`crate::BuildOptions::embedded`]: recorded only into its owner's command
    /// buffers.
    pub(crate) embedded: bool,
    pub(crate) objects: Objects,
    pub(crate) buffers: Vec<Buffer>,
    /// Constant buffers of a [`crate::ConstantPool`] the graph binds, kept alive with it.
    pub(crate) _pooled: Vec<std::sync::Arc<Buffer>>,
    /// What each planned buffer is: a slice of one of `buffers`, or an external slice.
    pub(crate) slots: Vec<BufferSlice>,
    pub(crate) recorded: Vec<Recorded>,
    pub(crate) inputs: Vec<Io>,
    pub(crate) outputs: Vec<Io>,
    pub(crate) input_specs: Vec<TensorSpec>,
    pub(crate) output_specs: Vec<TensorSpec>,
    pub(crate) device_inputs: Vec<DeviceTensor>,
    pub(crate) device_outputs: Vec<DeviceTensor>,
    pub(crate) memory: MemoryReport,
    pub(crate) staging: bool,
    pub(crate) last_device_time: Option<Duration>,
    pub(crate) barriers: usize,
    /// The pending submission writes the two timestamps.
    pub(crate) timed: bool,
}

impl fmt::Debug for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Graph")
            .field("inputs", &self.inputs.len())
            .field("outputs", &self.outputs.len())
            .field("dispatches", &self.recorded.len())
            .field("barriers", &self.barriers)
            .field("memory", &self.memory)
            .finish()
    }
}

/// Copies of `bytes` from the start of a staging buffer into a slice, or back.
fn copy_region(bytes: u64, slice: &BufferSlice, to_slice: bool) -> [vk::BufferCopy; 1] {
    let (src, dst) = if to_slice {
        (0, slice.offset)
    } else {
        (slice.offset, 0)
    };
    [vk::BufferCopy::default()
        .src_offset(src)
        .dst_offset(dst)
        .size(bytes)]
}

impl Graph {
    /// The device the graph runs on.
    pub fn device(&self) -> &Device {
        &self.objects.device
    }

    /// Writes the descriptors of every dispatch that binds a slot in `only` (all when `None`).
    pub(crate) fn write_descriptors(&self, only: Option<usize>) {
        let infos: Vec<(vk::DescriptorSet, u32, [vk::DescriptorBufferInfo; 1])> = self
            .recorded
            .iter()
            .flat_map(|r| {
                r.slots
                    .iter()
                    .enumerate()
                    .filter(move |&(_, &slot)| only.is_none_or(|o| o == slot))
                    .map(move |(b, &slot)| {
                        let s = &self.slots[slot];
                        let info = vk::DescriptorBufferInfo::default()
                            .buffer(s.buffer)
                            .offset(s.offset)
                            .range(s.size);
                        (r.set, b as u32, [info])
                    })
            })
            .collect();
        let writes: Vec<vk::WriteDescriptorSet<'_>> = infos
            .iter()
            .map(|(set, binding, info)| {
                vk::WriteDescriptorSet::default()
                    .dst_set(*set)
                    .dst_binding(*binding)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(info)
            })
            .collect();
        // SAFETY: the writes name live sets of this graph and live buffers (own, or external
        // under `ExternalBindings`' contract) within their ranges; no pending submission uses
        // the sets (callers wait first).
        unsafe { self.device().raw().update_descriptor_sets(&writes, &[]) };
    }

    /// Records the dispatches (with their barriers) into `cmd`.
    ///
    /// # Safety
    /// `cmd` must be a primary command buffer of this device in the recording state, outside a
    /// render pass, on a queue family with compute.
    unsafe fn record_dispatches(&self, cmd: vk::CommandBuffer) {
        // SAFETY: forwarded contract.
        unsafe { self.record_dispatches_with(cmd, &|_| {}) }
    }

    /// As [`Graph::record_dispatches`], calling `after(i)` after recording dispatch `i`.
    ///
    /// # Safety
    /// As [`Graph::record_dispatches`]; `after` records only valid commands into `cmd`.
    unsafe fn record_dispatches_with(&self, cmd: vk::CommandBuffer, after: &dyn Fn(usize)) {
        let dev = self.device();
        let d = dev.raw();
        let mut bound = vk::Pipeline::null();
        for (i, r) in self.recorded.iter().enumerate() {
            // SAFETY: the caller's contract; every handle is live and owned by this graph.
            unsafe {
                if r.barrier_before {
                    barrier::memory_barrier(
                        dev,
                        cmd,
                        Access::SHADER_WRITE,
                        Access::SHADER_READ_WRITE,
                    );
                }
                if r.pipeline != bound {
                    d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, r.pipeline);
                    bound = r.pipeline;
                }
                d.cmd_bind_descriptor_sets(
                    cmd,
                    vk::PipelineBindPoint::COMPUTE,
                    r.layout,
                    0,
                    &[r.set],
                    &[],
                );
                if !r.push.is_empty() {
                    d.cmd_push_constants(cmd, r.layout, vk::ShaderStageFlags::COMPUTE, 0, &r.push);
                }
                d.cmd_dispatch(cmd, r.groups[0], r.groups[1], r.groups[2]);
            }
            after(i);
        }
    }

    /// Records the dispatches between the two timestamps, if the queue has them.
    ///
    /// # Safety
    /// As [`Graph::record_dispatches`].
    unsafe fn record_timed(&self, cmd: vk::CommandBuffer) {
        // SAFETY: the caller's contract; the pool has two queries, reset here first.
        unsafe {
            if let Some(ts) = &self.timestamps {
                ts.reset(cmd);
                ts.write(cmd, vk::PipelineStageFlags::TOP_OF_PIPE, 0);
            }
            self.record_dispatches(cmd);
            if let Some(ts) = &self.timestamps {
                ts.write(cmd, vk::PipelineStageFlags::BOTTOM_OF_PIPE, 1);
            }
        }
    }

    /// `(staging, slice, bytes)` of the staged inputs or outputs.
    fn staged(&self, outputs: bool) -> Vec<(vk::Buffer, BufferSlice, u64)> {
        let list = if outputs { &self.outputs } else { &self.inputs };
        list.iter()
            .filter_map(|io| {
                io.staging
                    .map(|s| (self.buffers[s].raw(), self.slots[io.slot], io.bytes))
            })
            .collect()
    }

    /// Records every command buffer of the graph (again, after a rebinding).
    pub(crate) fn record_all(&mut self) -> Result<()> {
        if self.embedded {
            return Ok(());
        }
        self.record_host()?;
        let c = self.submission.begin(cmd::RESIDENT)?;
        // SAFETY: `c` is recording; the graph's handles are live.
        unsafe { self.record_timed(c) };
        self.submission.end(cmd::RESIDENT)?;
        self.record_transfers()
    }

    fn record_host(&mut self) -> Result<()> {
        let staged_in = self.staged(false);
        let staged_out = self.staged(true);
        let c = self.submission.begin(cmd::HOST)?;
        let dev = self.device();
        let d = dev.raw();
        // SAFETY: recording with live handles; copies stay within the staging buffers (sized
        // for the tensors) and the slices (checked to hold them).
        unsafe {
            for (src, slice, size) in &staged_in {
                d.cmd_copy_buffer(c, *src, slice.buffer, &copy_region(*size, slice, true));
            }
            // Kernels read the inputs, and some write them in place (a KV cache given as an
            // input): both wait for the copies.
            if !staged_in.is_empty() {
                barrier::memory_barrier(dev, c, Access::TRANSFER_WRITE, Access::SHADER_READ_WRITE);
            }
            self.record_timed(c);
            if !staged_out.is_empty() {
                barrier::memory_barrier(dev, c, Access::SHADER_WRITE, Access::TRANSFER_READ);
            }
            for (dst, slice, size) in &staged_out {
                d.cmd_copy_buffer(c, slice.buffer, *dst, &copy_region(*size, slice, false));
            }
            // Output visibility: a fence wait alone does not make device writes visible to
            // the host.
            barrier::host_read_barrier(dev, c);
        }
        self.submission.end(cmd::HOST)?;
        Ok(())
    }

    /// Records the stand-alone upload (staging -> input slices) and readback (output slices
    /// -> staging, then the host barrier) command buffers.
    fn record_transfers(&mut self) -> Result<()> {
        for (index, outputs) in [(cmd::UPLOAD, false), (cmd::READBACK, true)] {
            let staged = self.staged(outputs);
            let c = self.submission.begin(index)?;
            let dev = self.device();
            // SAFETY: recording with live handles; copies stay within the buffers.
            unsafe {
                for (staging, slice, size) in &staged {
                    let region = copy_region(*size, slice, !outputs);
                    let (src, dst) = if outputs {
                        (slice.buffer, *staging)
                    } else {
                        (*staging, slice.buffer)
                    };
                    dev.raw().cmd_copy_buffer(c, src, dst, &region);
                }
                barrier::host_read_barrier(dev, c);
            }
            self.submission.end(index)?;
        }
        Ok(())
    }

    /// Refuses a host-side call on an embedded graph, naming it.
    fn host_side(&self, call: &'static str) -> Result<()> {
        if self.embedded {
            return Err(Error::Graph(format!(
                "{call}: this graph was built to run only inside its owner's command buffers \
                 (BuildOptions::embedded); it has no host path"
            )));
        }
        Ok(())
    }

    /// Submits command buffer `index` and waits for it.
    fn run_and_wait(&mut self, index: usize) -> Result<()> {
        // SAFETY: the graph's command buffers are executable (recorded at build or after a
        // rebinding) and use only the graph's live objects and its bound slices.
        unsafe { self.submission.submit(index, &[], &[]) }?;
        self.submission.wait()?;
        Ok(())
    }

    /// Writes host data into input `index`'s device buffer (for device-resident use: the
    /// first graph of a chain). Waits for this graph's own work first.
    pub fn write_input(&mut self, index: usize, tensor: &HostTensor) -> Result<()> {
        self.host_side("write_input")?;
        self.wait()?;
        let (io, spec) = match (self.inputs.get(index), self.input_specs.get(index)) {
            (Some(io), Some(spec)) => (io.clone(), spec),
            _ => return Err(self.no_such("input", index)),
        };
        spec.check(index, tensor)?;
        if io.transfer {
            return self.upload(&io, tensor);
        }
        let host = io
            .host_buffer()
            .ok_or_else(|| internal("input without a host buffer"))?;
        self.buffers[host].write(0, tensor.bytes())?;
        if io.staging.is_some() {
            self.run_and_wait(cmd::UPLOAD)?;
        }
        Ok(())
    }

    /// Uploads `tensor` into the slice of input `io` through the graph's [`HostTransfer`].
    fn upload(&mut self, io: &Io, tensor: &HostTensor) -> Result<()> {
        let slice = self.slots[io.slot];
        // SAFETY: the slice is the graph's own buffer or a bound one (live under
        // `ExternalBindings`' contract, with TRANSFER_DST usage) holding the tensor's bytes;
        // the graph's own work was waited for.
        unsafe {
            self.transfer
                .upload(tensor.bytes(), slice.buffer, slice.offset)
        }?;
        Ok(())
    }

    /// Reads output `index` from its device buffer (for device-resident use: the last graph
    /// of a chain, after [`Graph::wait`]). Waits for this graph's own work first.
    pub fn read_output(&mut self, index: usize) -> Result<HostTensor> {
        self.host_side("read_output")?;
        self.wait()?;
        if index >= self.outputs.len() {
            return Err(self.no_such("output", index));
        }
        // The readback command buffer ends with the host barrier; run it even without staging.
        self.run_and_wait(cmd::READBACK)?;
        self.read_host(index)
    }

    fn read_host(&mut self, index: usize) -> Result<HostTensor> {
        let mut data = vk_core::zeroed_bytes(self.outputs[index].bytes as usize);
        self.read_host_into(index, &mut data)?;
        let spec = &self.output_specs[index];
        HostTensor::new(spec.dtype, spec.shape.clone(), data)
            .map_err(|e| internal(&format!("output '{}': {e}", spec.name)))
    }

    /// Reads output `index` into `data` (exactly its bytes), after the graph's work.
    fn read_host_into(&mut self, index: usize, data: &mut [u8]) -> Result<()> {
        let io = &self.outputs[index];
        if data.len() as u64 != io.bytes {
            return Err(internal("output read into a range of another size"));
        }
        if io.transfer {
            let slice = self.slots[io.slot];
            // SAFETY: the slice is live (own, or bound under `ExternalBindings`' contract,
            // with TRANSFER_SRC usage) and holds the tensor; its writers were submitted.
            unsafe { self.transfer.download(slice.buffer, slice.offset, data) }?;
        } else {
            let host = io
                .host_buffer()
                .ok_or_else(|| internal("output without a host buffer"))?;
            self.buffers[host].read(0, data)?;
        }
        Ok(())
    }

    fn no_such(&self, io: &'static str, index: usize) -> Error {
        let count = if io == "input" {
            self.inputs.len()
        } else {
            self.outputs.len()
        };
        Error::NoSuchIo { io, index, count }
    }

    /// Runs the graph: checks the inputs (count, dtype, shape, bytes), copies them in, replays
    /// the recorded command buffer, waits for this graph's fence and returns the outputs.
    pub fn execute(&mut self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        self.run_host(inputs)?;
        (0..self.outputs.len()).map(|i| self.read_host(i)).collect()
    }

    /// As [`Graph::execute`], but writes the outputs into `outputs`, one tensor per output of
    /// its dtype and shape, instead of returning new ones. A caller that runs a graph again
    /// and again keeps its output memory: the host pages of large outputs are then written,
    /// not first mapped (on an NVIDIA H200 host, mapping a fresh 1 GiB output cost about as
    /// much as downloading it). Checks the outputs before running anything.
    pub fn execute_into(
        &mut self,
        inputs: &[HostTensor],
        outputs: &mut [HostTensor],
    ) -> Result<()> {
        self.check_outputs(outputs)?;
        self.run_host(inputs)?;
        for (i, out) in outputs.iter_mut().enumerate() {
            self.read_host_into(i, out.bytes_mut())?;
        }
        Ok(())
    }

    /// Whether `outputs` match the graph's outputs: count, then each one's dtype and shape.
    fn check_outputs(&self, outputs: &[HostTensor]) -> Result<()> {
        if outputs.len() != self.output_specs.len() {
            return Err(Error::OutputCount {
                expected: self.output_specs.len(),
                actual: outputs.len(),
            });
        }
        for (index, (spec, t)) in self.output_specs.iter().zip(outputs).enumerate() {
            if t.dtype() != spec.dtype || t.shape() != spec.shape.as_slice() {
                return Err(Error::OutputMismatch {
                    index,
                    name: spec.name.clone(),
                    want: format!("{}{:?}", spec.dtype, spec.shape),
                    got: format!("{}{:?}", t.dtype(), t.shape()),
                });
            }
        }
        Ok(())
    }

    /// Checks the inputs, copies them in, replays the host command buffer and waits.
    fn run_host(&mut self, inputs: &[HostTensor]) -> Result<()> {
        self.host_side("execute")?;
        self.wait()?;
        check_inputs(&self.input_specs, inputs)?;
        for (i, t) in inputs.iter().enumerate() {
            let io = self.inputs[i].clone();
            if io.transfer {
                self.upload(&io, t)?;
                continue;
            }
            let host = io
                .host_buffer()
                .ok_or_else(|| internal("input without a host buffer"))?;
            self.buffers[host].write(0, t.bytes())?;
        }
        // SAFETY: the host command buffer is executable and uses only the graph's live objects
        // and its bound slices.
        unsafe { self.submission.submit(cmd::HOST, &[], &[]) }?;
        self.timed = true;
        self.wait()
    }

    /// Submits the dispatches alone (inputs and outputs stay on the device, see
    /// [`Graph::device_inputs`]), waiting on `waits` and signalling `signals`. Returns at
    /// once; [`Graph::wait`] (or the next call, or drop) waits for completion. Device writes
    /// are made available by the signal operation; the consumer's semaphore wait makes them
    /// visible.
    ///
    /// # Safety
    /// Every semaphore must be a live semaphore of this device whose state allows the wait or
    /// signal, as `vkQueueSubmit` requires (binary waits signaled or with a pending signal,
    /// binary signals unsignaled, timeline values increasing). Whoever wrote the inputs must
    /// have finished (or be ordered before this submission by `waits`).
    pub unsafe fn submit(
        &mut self,
        waits: &[SemaphoreWait],
        signals: &[SemaphoreSignal],
    ) -> Result<()> {
        self.host_side("submit")?;
        self.wait()?;
        // SAFETY: the resident command buffer is executable; the semaphores are the caller's
        // contract.
        unsafe { self.submission.submit(cmd::RESIDENT, waits, signals) }?;
        self.timed = true;
        Ok(())
    }

    /// Waits for the graph's last submission, if any (a failed wait leaves it pending, so
    /// that drop still waits before destroying what it uses).
    pub fn wait(&mut self) -> Result<()> {
        self.submission.wait()?;
        if std::mem::take(&mut self.timed) {
            if let Some(ts) = &self.timestamps {
                self.last_device_time = ts.elapsed(&[(0, 1)])?.first().copied();
            }
        }
        Ok(())
    }

    /// Records the graph's dispatches, with the barriers between them, into a caller's
    /// command buffer (no input or output copies, no host barrier).
    ///
    /// # Safety
    /// `cmd` must be a primary command buffer of this graph's device, recording, outside a
    /// render pass, for a queue family with compute. The caller orders writes of the inputs
    /// before, and reads of the outputs after, with its own barriers; it must not submit the
    /// command buffer after this graph is dropped or rebound, nor while another submission of
    /// this graph runs.
    pub unsafe fn record_into(&self, cmd: vk::CommandBuffer) {
        // SAFETY: forwarded contract.
        unsafe { self.record_dispatches(cmd) };
    }

    /// Binds input `index` to `slice` instead of its current buffer, rewriting the
    /// descriptors and re-recording the graph's command buffers (waiting for its work first).
    /// Command buffers the caller recorded with [`Graph::record_into`] still name the old
    /// descriptors' contents only until this returns: record them again.
    ///
    /// # Safety
    /// As [`crate::ExternalBindings::bind_input`].
    pub unsafe fn rebind_input(&mut self, index: usize, slice: BufferSlice) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.rebind(false, index, slice) }
    }

    /// Binds output `index` to `slice`, as [`Graph::rebind_input`] does for inputs.
    ///
    /// # Safety
    /// As [`crate::ExternalBindings::bind_output`].
    pub unsafe fn rebind_output(&mut self, index: usize, slice: BufferSlice) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.rebind(true, index, slice) }
    }

    /// # Safety
    /// As [`crate::ExternalBindings::bind_input`] / [`crate::ExternalBindings::bind_output`].
    unsafe fn rebind(&mut self, outputs: bool, index: usize, slice: BufferSlice) -> Result<()> {
        self.wait()?;
        let kind = if outputs { "output" } else { "input" };
        let (io, spec) = if outputs {
            (self.outputs.get(index), self.output_specs.get(index))
        } else {
            (self.inputs.get(index), self.input_specs.get(index))
        };
        let (Some(io), Some(spec)) = (io.cloned(), spec) else {
            return Err(self.no_such(kind, index));
        };
        let alignment = self
            .device()
            .capabilities()
            .limits
            .min_storage_buffer_offset_alignment;
        let slice = check_binding(kind, index, &spec.name, slice, io.need, alignment)?;
        let staging = match io.staging {
            _ if io.transfer => None,
            Some(s) => Some(s),
            None => Some({
                let b = staging_buffer(self.device(), io.bytes, &spec.name)?;
                self.memory.staging += b.size();
                self.buffers.push(b);
                self.buffers.len() - 1
            }),
        };
        let list = if outputs {
            &mut self.outputs
        } else {
            &mut self.inputs
        };
        list[index].staging = staging;
        self.slots[io.slot] = slice;
        let tensor = DeviceTensor {
            spec: spec.clone(),
            slice,
        };
        if outputs {
            self.device_outputs[index] = tensor;
        } else {
            self.device_inputs[index] = tensor;
        }
        self.write_descriptors(Some(io.slot));
        self.record_all()
    }

    /// The inputs' names, dtypes and shapes, in order.
    pub fn inputs(&self) -> &[TensorSpec] {
        &self.input_specs
    }

    /// The outputs' names, dtypes and shapes, in order.
    pub fn outputs(&self) -> &[TensorSpec] {
        &self.output_specs
    }

    /// The inputs on the device: where another delegate writes them (valid while the graph
    /// lives and until a rebinding).
    pub fn device_inputs(&self) -> &[DeviceTensor] {
        &self.device_inputs
    }

    /// The outputs on the device: where another delegate reads them.
    pub fn device_outputs(&self) -> &[DeviceTensor] {
        &self.device_outputs
    }

    /// Device memory the graph holds.
    pub fn memory(&self) -> MemoryReport {
        self.memory
    }

    /// Number of dispatches per execution.
    pub fn dispatch_count(&self) -> usize {
        self.recorded.len()
    }

    /// Number of pipeline barriers between dispatches per execution.
    pub fn barrier_count(&self) -> usize {
        self.barriers
    }

    /// Whether inputs and outputs go through staging buffers (device memory not mapped).
    pub fn uses_staging(&self) -> bool {
        self.staging
    }

    /// Device time of the dispatches of the last execution (timestamp queries), when the
    /// queue supports timestamps.
    pub fn last_device_time(&self) -> Option<Duration> {
        self.last_device_time
    }

    /// How many pipelines building this graph compiled. Graphs built on one device share its
    /// pipelines, so a graph whose kernels and specializations an earlier graph on the device
    /// already used compiles none; a build given [`crate::BuildOptions::pipeline_cache`] data
    /// compiles all of its own.
    pub fn compiled_pipelines(&self) -> usize {
        self.objects.compiled
    }

    /// The pipeline cache's data, to pass to [`crate::BuildOptions::pipeline_cache`] next time:
    /// what the disk cache or the caller gave, and the pipelines this build compiled.
    pub fn pipeline_cache_data(&self) -> Result<Vec<u8>> {
        // SAFETY: the cache is live.
        let data = unsafe {
            self.device()
                .raw()
                .get_pipeline_cache_data(self.objects.cache)
        };
        Ok(vk_core::VkResultExt::vk(data, "vkGetPipelineCacheData")?)
    }

    /// The kernel of each dispatch, in recording order (`Gemm`; `Gemm_f16` for an fp16
    /// variant), as [`DispatchTime::kernel`] names them.
    pub fn kernels(&self) -> Vec<String> {
        self.recorded.iter().map(|r| r.kernel.to_string()).collect()
    }

    /// The float type of each dispatch, in [`Graph::kernels`] order (see
    /// [`DispatchTime::float_type`]).
    pub fn float_types(&self) -> Vec<vk_core::DType> {
        self.recorded
            .iter()
            .map(|r| r.kernel.float_type())
            .collect()
    }

    /// Runs the dispatches once (device-resident, on the inputs already on the device) with a
    /// timestamp after each, and returns each dispatch's share of the device time. Dispatches
    /// without a barrier between them may overlap on the device, so their shares are
    /// approximate.
    pub fn profile(&mut self) -> Result<Vec<DispatchTime>> {
        self.profile_dispatches()
    }

    fn profile_dispatches(&mut self) -> Result<Vec<DispatchTime>> {
        self.wait()?;
        let n = self.recorded.len() as u32;
        let ts = Timestamps::new(self.device(), n + 1)?.ok_or_else(|| {
            Error::Unsupported("profile: the queue family has no timestamps".into())
        })?;
        let c = self.submission.begin(cmd::SCRATCH)?;
        // SAFETY: `c` is recording; the pool has n + 1 queries, reset first.
        unsafe {
            ts.reset(c);
            ts.write(c, vk::PipelineStageFlags::TOP_OF_PIPE, 0);
            self.record_dispatches_with(c, &|i| {
                ts.write(c, vk::PipelineStageFlags::BOTTOM_OF_PIPE, i as u32 + 1)
            });
        }
        self.submission.end(cmd::SCRATCH)?;
        self.run_and_wait(cmd::SCRATCH)?;
        let ticks = ts.read_ticks(n + 1)?;
        let period = f64::from(self.device().capabilities().limits.timestamp_period());
        Ok(self
            .recorded
            .iter()
            .enumerate()
            .map(|(i, r)| DispatchTime {
                op: r.op,
                kernel: r.kernel.to_string(),
                float_type: r.kernel.float_type(),
                groups: r.groups,
                shape: r.shape.clone(),
                time: Duration::from_nanos(
                    (ticks[i + 1].saturating_sub(ticks[i]) as f64 * period) as u64,
                ),
                barrier_before: r.barrier_before,
            })
            .collect())
    }

    /// Runs `execute` and returns the outputs with the wall time of the call.
    pub fn execute_timed(&mut self, inputs: &[HostTensor]) -> Result<(Vec<HostTensor>, Duration)> {
        let start = Instant::now();
        let out = self.execute(inputs)?;
        Ok((out, start.elapsed()))
    }
}

/// Checks a slice bound to input or output `index` (`kind`): size and alignment.
pub(crate) fn check_binding(
    kind: &'static str,
    index: usize,
    name: &str,
    slice: BufferSlice,
    need: u64,
    alignment: u64,
) -> Result<BufferSlice> {
    if slice.size < need {
        return Err(Error::BindingTooSmall {
            io: kind,
            index,
            name: name.to_owned(),
            size: slice.size,
            need,
        });
    }
    if alignment > 0 && slice.offset % alignment != 0 {
        return Err(Error::BindingMisaligned {
            io: kind,
            index,
            name: name.to_owned(),
            offset: slice.offset,
            alignment,
        });
    }
    // The graph binds exactly what it touches (a larger range could pass
    // maxStorageBufferRange).
    Ok(BufferSlice {
        size: need,
        ..slice
    })
}

pub(crate) fn internal(what: &str) -> Error {
    Error::Graph(format!("internal: {what}"))
}
