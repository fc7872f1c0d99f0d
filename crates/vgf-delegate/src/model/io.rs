//! Host input and output: the model's input and output descriptions, staging buffers, input
//! checks, the copies of [`Model::execute`], and the device tensors of inputs and outputs.

use vk_core::{Buffer, BufferSlice, HostPath, HostTensor, MemoryLocation, vk};

use super::external::io_name;
use super::objects::Objects;
use super::resources::{dims_usize, dtype_of, packed_bytes};
use super::{DeviceTensor, HOST_CB, IoTensor, MemoryMode, Model, TensorSpec, unsupported};
use crate::error::Result;
use crate::format::{Binding, Vgf};

/// Where an input or output lives: its resource, packed size, and staging buffer when staged.
#[derive(Debug, Clone, Copy)]
pub(super) struct Io {
    pub(super) mrt: usize,
    pub(super) bytes: usize,
    pub(super) staging: Option<usize>,
    /// Moved by the model's [`vk_core::HostTransfer`] (a large staged tensor): no staging
    /// buffer and no recorded copy.
    pub(super) transfer: bool,
}

/// The specs of a decoded file's model inputs and outputs, as a loaded [`Model`] reports them
/// (`inputs()`, `outputs()`), without a device: each a single-channel tensor format and a
/// fixed shape, or an error naming the resource.
pub fn model_specs(vgf: &Vgf<'_>) -> Result<(Vec<TensorSpec>, Vec<TensorSpec>)> {
    let seq = &vgf.sequence;
    let specs = |slots: &[Binding], names: &[&str], prefix: &str| {
        slots
            .iter()
            .enumerate()
            .map(|(i, b)| spec_of(vgf, b, io_name(names, i, prefix)))
            .collect::<Result<Vec<_>>>()
    };
    Ok((
        specs(&seq.inputs, &seq.input_names, "input")?,
        specs(&seq.outputs, &seq.output_names, "output")?,
    ))
}

/// The spec of the resource `b` binds, named `name`.
fn spec_of(vgf: &Vgf<'_>, b: &Binding, name: String) -> Result<TensorSpec> {
    let r = vgf
        .resource(b.mrt_index)
        .ok_or_else(|| unsupported(format!("no resource {}", b.mrt_index)))?;
    Ok(TensorSpec::new(name, dtype_of(r)?, dims_usize(r)?))
}

/// Describes the inputs (or outputs) in `slots`, creating their staging buffers when staged
/// (except for those `path` moves through the model's host transfer).
pub(super) fn describe(
    objects: &mut Objects,
    vgf: &Vgf<'_>,
    (slots, names, prefix): (&[Binding], &[&str], &str),
    (memory_mode, path, external, embedded): (MemoryMode, HostPath, &[Option<BufferSlice>], bool),
) -> Result<(Vec<TensorSpec>, Vec<Io>)> {
    let mut specs = Vec::with_capacity(slots.len());
    let mut ios = Vec::with_capacity(slots.len());
    for (i, b) in slots.iter().enumerate() {
        let r = &vgf.resources[b.mrt_index as usize];
        let bytes = packed_bytes(r)?;
        // External memory is not ours to map: the host reaches it through staging; an
        // embedded model has no host path.
        let staged =
            !embedded && (memory_mode == MemoryMode::Staged || external[r.index].is_some());
        let transfer = staged && path.transfers(bytes as u64);
        let staging = if staged && !transfer {
            let usage = vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST;
            let what = format!("staging of {prefix} {i}");
            let staging = Buffer::new(
                &objects.device,
                bytes as u64,
                MemoryLocation::Host,
                usage,
                &what,
            )?;
            objects.staging.push(staging);
            Some(objects.staging.len() - 1)
        } else {
            None
        };
        specs.push(spec_of(vgf, b, io_name(names, i, prefix))?);
        ios.push(Io {
            mrt: r.index,
            bytes,
            staging,
            transfer,
        });
    }
    Ok((specs, ios))
}

impl Model {
    /// The storage of resource `mrt`.
    fn storage_of(&self, mrt: usize) -> Result<usize> {
        self.resource_storage[mrt]
            .ok_or_else(|| unsupported(format!("resource {mrt} has no storage")))
    }

    /// Runs the model: copies `inputs` in, executes every segment, copies the outputs out.
    pub fn execute(&mut self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        self.host_side("execute")?;
        self.wait()?;
        vk_core::check_inputs(&self.inputs, inputs)?;
        self.write_inputs(inputs)?;
        // SAFETY: the host command buffer is executable and uses only this model's objects,
        // alive until the wait below; no semaphores.
        unsafe { self.submission.submit(HOST_CB, &[], &[]) }?;
        self.wait()?;
        self.read_outputs()
    }

    /// Writes the inputs into their staging buffers or (direct) their mapped storage; the
    /// allocator's mapping is flushed where it is not coherent.
    fn write_inputs(&mut self, inputs: &[HostTensor]) -> Result<()> {
        for (t, io) in inputs.iter().zip(&self.input_io) {
            if io.transfer {
                let dst = self.objects.buffers[io.mrt];
                // SAFETY: the model's buffer over the input (TRANSFER_DST usage, `bytes`
                // long) lives with the model; the model's own work was waited for.
                unsafe { self.transfer.upload(t.bytes(), dst, 0) }?;
                continue;
            }
            match io.staging {
                Some(s) => self.objects.staging[s].write(0, t.bytes())?,
                None => {
                    let s = self.resource_storage[io.mrt].ok_or_else(|| {
                        unsupported(format!("resource {} has no storage", io.mrt))
                    })?;
                    self.objects.storages[s].write(0, t.bytes())?;
                }
            }
        }
        Ok(())
    }

    /// Reads the outputs from their staging buffers or (direct) their mapped storage, after
    /// the fence wait and the recorded host-read barrier.
    fn read_outputs(&mut self) -> Result<Vec<HostTensor>> {
        let mut out = Vec::with_capacity(self.outputs.len());
        for (spec, io) in self.outputs.iter().zip(&self.output_io) {
            let mut data = vk_core::zeroed_bytes(io.bytes);
            if io.transfer {
                let src = self.objects.buffers[io.mrt];
                // SAFETY: the model's buffer over the output (TRANSFER_SRC usage) lives with
                // the model; its writers were submitted and waited for.
                unsafe { self.transfer.download(src, 0, &mut data) }?;
                out.push(
                    HostTensor::new(spec.dtype, spec.shape.clone(), data)
                        .map_err(|e| unsupported(e.to_string()))?,
                );
                continue;
            }
            match io.staging {
                Some(s) => self.objects.staging[s].read(0, &mut data)?,
                None => self.objects.storages[self.storage_of(io.mrt)?].read(0, &mut data)?,
            }
            out.push(
                HostTensor::new(spec.dtype, spec.shape.clone(), data)
                    .map_err(|e| unsupported(e.to_string()))?,
            );
        }
        Ok(out)
    }

    fn device_tensor(&self, spec: &TensorSpec, io: &Io) -> Option<DeviceTensor> {
        let (memory, memory_offset) = match self.external[io.mrt] {
            Some(e) => (e.memory, e.memory_offset),
            None => {
                let block = &self.objects.storages[self.resource_storage[io.mrt]?];
                (block.memory(), block.offset())
            }
        };
        let slice = BufferSlice {
            buffer: self.objects.buffers[io.mrt],
            offset: 0,
            size: io.bytes as u64,
            memory,
            memory_offset,
        };
        Some(DeviceTensor {
            spec: spec.clone(),
            slice,
        })
    }

    /// The inputs on the device, in order: each a buffer of this model's over the input
    /// tensor's bytes (packed, row-major), with the memory it is bound to (the caller's, for
    /// an input bound to [`super::External`] memory).
    pub fn device_inputs(&self) -> Vec<DeviceTensor> {
        self.inputs
            .iter()
            .zip(&self.input_io)
            .filter_map(|(spec, io)| self.device_tensor(spec, io))
            .collect()
    }

    /// The outputs on the device, in order (as [`Model::device_inputs`]).
    pub fn device_outputs(&self) -> Vec<DeviceTensor> {
        self.outputs
            .iter()
            .zip(&self.output_io)
            .filter_map(|(spec, io)| self.device_tensor(spec, io))
            .collect()
    }

    fn io_tensor(&self, io: &Io) -> IoTensor {
        IoTensor {
            mrt_index: io.mrt as u32,
            tensor: self.objects.tensors[io.mrt],
            view: self.objects.views[io.mrt],
        }
    }

    /// The tensors and views of the inputs, in order.
    pub fn input_tensors(&self) -> Vec<IoTensor> {
        self.input_io.iter().map(|io| self.io_tensor(io)).collect()
    }

    /// The tensors and views of the outputs, in order.
    pub fn output_tensors(&self) -> Vec<IoTensor> {
        self.output_io.iter().map(|io| self.io_tensor(io)).collect()
    }
}
