//! Host input and output: the model's input and output descriptions, staging buffers, input
//! checks, the copies of [`Model::execute`], and the device tensors of inputs and outputs.

use std::ptr;

use vk_core::{HostTensor, vk};

use super::objects::{Objects, Staging};
use super::resources::{dims_usize, dtype_of, packed_bytes};
use super::{DeviceTensor, MemoryMode, Model, TensorInfo, unsupported, vkerr};
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
            let staging = create_staging(objects, bytes as u64)?;
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

fn create_staging(objects: &mut Objects, size: u64) -> Result<Staging> {
    let d = objects.device.raw();
    let caps = objects.device.capabilities();
    let info = vk::BufferCreateInfo::default()
        .size(size.max(1))
        .usage(vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST)
        .sharing_mode(vk::SharingMode::EXCLUSIVE);
    // SAFETY: valid create info.
    let buffer = unsafe { d.create_buffer(&info, None) }.map_err(vkerr("vkCreateBuffer"))?;
    // SAFETY: `buffer` is live.
    let req = unsafe { d.get_buffer_memory_requirements(buffer) };
    let prefs = [
        vk::MemoryPropertyFlags::HOST_VISIBLE
            | vk::MemoryPropertyFlags::HOST_COHERENT
            | vk::MemoryPropertyFlags::HOST_CACHED,
        vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_CACHED,
        vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT,
        vk::MemoryPropertyFlags::HOST_VISIBLE,
    ];
    let Some(type_index) = prefs
        .iter()
        .find_map(|f| caps.memory.find(req.memory_type_bits, *f))
    else {
        // SAFETY: created above, unused.
        unsafe { d.destroy_buffer(buffer, None) };
        return Err(vk_core::Error::NoMemoryType {
            type_bits: req.memory_type_bits,
            wanted: vk::MemoryPropertyFlags::HOST_VISIBLE,
        }
        .into());
    };
    let info = vk::MemoryAllocateInfo::default()
        .allocation_size(req.size)
        .memory_type_index(type_index);
    // SAFETY: valid allocate info.
    let memory = match unsafe { d.allocate_memory(&info, None) } {
        Ok(m) => m,
        Err(e) => {
            // SAFETY: created above, unused.
            unsafe { d.destroy_buffer(buffer, None) };
            return Err(vkerr("vkAllocateMemory")(e));
        }
    };
    let cleanup = |e: Error| {
        // SAFETY: created above, unused by the device.
        unsafe {
            d.destroy_buffer(buffer, None);
            d.free_memory(memory, None);
        }
        e
    };
    // SAFETY: buffer and memory are live and compatible.
    unsafe { d.bind_buffer_memory(buffer, memory, 0) }
        .map_err(vkerr("vkBindBufferMemory"))
        .map_err(cleanup)?;
    // SAFETY: host-visible memory, not yet mapped.
    let mapped = unsafe { d.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()) }
        .map_err(vkerr("vkMapMemory"))
        .map_err(cleanup)?;
    Ok(Staging {
        buffer,
        memory,
        mapped: mapped.cast::<u8>(),
        coherent: caps.memory.types[type_index as usize]
            .flags
            .contains(vk::MemoryPropertyFlags::HOST_COHERENT),
    })
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

    /// Host pointer, memory and coherence of where an input or output is read or written.
    fn host_side(&self, io: &Io) -> Result<(*mut u8, vk::DeviceMemory, bool)> {
        if let Some(s) = io.staging {
            let st = &self.objects.staging[s];
            return Ok((st.mapped, st.memory, st.coherent));
        }
        let s = self.resource_storage[io.mrt]
            .ok_or_else(|| unsupported(format!("resource {} has no storage", io.mrt)))?;
        let st = &self.objects.storages[s];
        let p = st
            .mapped
            .ok_or_else(|| unsupported(format!("resource {} is not host-visible", io.mrt)))?;
        Ok((p, st.memory, st.coherent))
    }

    /// Runs the model: copies `inputs` in, executes every segment, copies the outputs out.
    pub fn execute(&mut self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        self.wait()?;
        self.check_inputs(inputs)?;
        self.write_inputs(inputs)?;
        let cb = self.host_cb;
        self.submit_cb(cb, &[], &[])?;
        self.wait()?;
        self.read_outputs()
    }

    fn write_inputs(&self, inputs: &[HostTensor]) -> Result<()> {
        let d = self.objects.device.raw();
        for (t, io) in inputs.iter().zip(&self.input_io) {
            let (p, memory, coherent) = self.host_side(io)?;
            let src = t.bytes();
            // SAFETY: `p` maps at least `src.len()` bytes (checked against the resource's
            // size, which the allocation covers); no GPU work is in flight (waited before).
            unsafe { ptr::copy_nonoverlapping(src.as_ptr(), p, src.len()) };
            if !coherent {
                let range = vk::MappedMemoryRange::default()
                    .memory(memory)
                    .offset(0)
                    .size(vk::WHOLE_SIZE);
                // SAFETY: the memory is mapped in full.
                unsafe { d.flush_mapped_memory_ranges(&[range]) }
                    .map_err(vkerr("vkFlushMappedMemoryRanges"))?;
            }
        }
        Ok(())
    }

    fn read_outputs(&self) -> Result<Vec<HostTensor>> {
        let d = self.objects.device.raw();
        let mut out = Vec::with_capacity(self.outputs.len());
        for (info, io) in self.outputs.iter().zip(&self.output_io) {
            let (p, memory, coherent) = self.host_side(io)?;
            if !coherent {
                let range = vk::MappedMemoryRange::default()
                    .memory(memory)
                    .offset(0)
                    .size(vk::WHOLE_SIZE);
                // SAFETY: the memory is mapped in full.
                unsafe { d.invalidate_mapped_memory_ranges(&[range]) }
                    .map_err(vkerr("vkInvalidateMappedMemoryRanges"))?;
            }
            let mut data = vec![0u8; info.bytes];
            // SAFETY: `p` maps at least `bytes` bytes; the GPU finished (fence waited) and the
            // final barrier made its writes visible to the host.
            unsafe { ptr::copy_nonoverlapping(p, data.as_mut_ptr(), info.bytes) };
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
            memory: self.objects.storages[s].memory,
            offset: 0,
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
