//! Host input and output: the model's input and output descriptions, staging buffers, input
//! checks, the copies of [`Model::execute`], and the device tensors of inputs and outputs.

use vk_core::{Buffer, HostTensor, MemoryLocation, vk};

use super::objects::Objects;
use super::resources::{dims_usize, dtype_of, packed_bytes};
use super::{DeviceTensor, HOST_CB, MemoryMode, Model, TensorInfo, unsupported};
use crate::error::{Error, Result};
use crate::format::{Binding, Vgf};

/// Where an input or output lives: its resource, and its staging buffer when staged.
#[derive(Debug, Clone, Copy)]
pub(super) struct Io {
    pub(super) mrt: usize,
    pub(super) staging: Option<usize>,
}

/// Describes the inputs (or outputs) in `slots`, creating their staging buffers when staged.
pub(super) fn describe(
    objects: &mut Objects,
    vgf: &Vgf<'_>,
    (slots, names, prefix): (&[Binding], &[&str], &str),
    memory_mode: MemoryMode,
) -> Result<(Vec<TensorInfo>, Vec<Io>)> {
    let mut infos = Vec::with_capacity(slots.len());
    let mut ios = Vec::with_capacity(slots.len());
    for (i, b) in slots.iter().enumerate() {
        let r = &vgf.resources[b.mrt_index as usize];
        let bytes = packed_bytes(r)?;
        let staging = if memory_mode == MemoryMode::Staged {
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
        infos.push(TensorInfo {
            name: names
                .get(i)
                .filter(|n| !n.is_empty())
                .map(|n| n.to_string())
                .unwrap_or_else(|| format!("{prefix}_{i}")),
            shape: dims_usize(r)?,
            dtype: dtype_of(r)?,
            mrt_index: b.mrt_index,
            bytes,
        });
        ios.push(Io {
            mrt: r.index,
            staging,
        });
    }
    Ok((infos, ios))
}

impl Model {
    /// Checks inputs against the model: count, dtype, shape, byte size.
    fn check_inputs(&self, inputs: &[HostTensor]) -> Result<()> {
        if inputs.len() != self.inputs.len() {
            return Err(Error::InputCount {
                expected: self.inputs.len(),
                got: inputs.len(),
            });
        }
        for (index, (t, info)) in inputs.iter().zip(&self.inputs).enumerate() {
            if t.dtype() != info.dtype {
                return Err(Error::InputDType {
                    index,
                    name: info.name.clone(),
                    expected: info.dtype,
                    got: t.dtype(),
                });
            }
            if t.shape() != info.shape.as_slice() {
                return Err(Error::InputShape {
                    index,
                    name: info.name.clone(),
                    expected: info.shape.clone(),
                    got: t.shape().to_vec(),
                });
            }
            if t.bytes().len() != info.bytes {
                return Err(Error::InputBytes {
                    index,
                    name: info.name.clone(),
                    expected: info.bytes,
                    got: t.bytes().len(),
                });
            }
        }
        Ok(())
    }

    /// The storage of resource `mrt`.
    fn storage_of(&self, mrt: usize) -> Result<usize> {
        self.resource_storage[mrt]
            .ok_or_else(|| unsupported(format!("resource {mrt} has no storage")))
    }

    /// Runs the model: copies `inputs` in, executes every segment, copies the outputs out.
    pub fn execute(&mut self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        self.wait()?;
        self.check_inputs(inputs)?;
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
    fn read_outputs(&self) -> Result<Vec<HostTensor>> {
        let mut out = Vec::with_capacity(self.outputs.len());
        for (info, io) in self.outputs.iter().zip(&self.output_io) {
            let mut data = vec![0u8; info.bytes];
            match io.staging {
                Some(s) => self.objects.staging[s].read(0, &mut data)?,
                None => self.objects.storages[self.storage_of(io.mrt)?].read(0, &mut data)?,
            }
            out.push(
                HostTensor::new(info.dtype, info.shape.clone(), data)
                    .map_err(|e| unsupported(e.to_string()))?,
            );
        }
        Ok(out)
    }

    fn device_tensor(&self, io: &Io, bytes: usize) -> Option<DeviceTensor> {
        let s = self.resource_storage[io.mrt]?;
        Some(DeviceTensor {
            tensor: self.objects.tensors[io.mrt],
            view: self.objects.views[io.mrt],
            buffer: self.objects.buffers[io.mrt],
            memory: self.objects.storages[s].memory(),
            offset: self.objects.storages[s].offset(),
            size: bytes as u64,
        })
    }

    /// The device tensors of the inputs, in order (for chaining on the device).
    pub fn device_inputs(&self) -> Vec<DeviceTensor> {
        self.input_io
            .iter()
            .zip(&self.inputs)
            .filter_map(|(io, info)| self.device_tensor(io, info.bytes))
            .collect()
    }

    /// The device tensors of the outputs, in order (for chaining on the device).
    pub fn device_outputs(&self) -> Vec<DeviceTensor> {
        self.output_io
            .iter()
            .zip(&self.outputs)
            .filter_map(|(io, info)| self.device_tensor(io, info.bytes))
            .collect()
    }
}
