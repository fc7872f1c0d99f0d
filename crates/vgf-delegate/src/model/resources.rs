//! Resources: which model resources are used and how, one tensor (linear tiling) and one view
//! per used resource, a buffer over the same bytes for inputs and outputs, and one storage per
//! alias group (or per resource outside any group).

use std::ptr;

use vk_core::arm;
use vk_core::host::element_count;
use vk_core::{DType, vk};

use super::objects::{Objects, Storage};
use super::{MemoryMode, unsupported, vkerr};
use crate::error::Result;
use crate::format::{Category, DESCRIPTOR_TYPE_TENSOR_ARM, ModuleType, Resource, Vgf};

/// Per-resource tensor description, kept alive while Vulkan structures point into it.
pub(super) struct Desc {
    pub(super) dims: Vec<i64>,
    pub(super) strides: Vec<i64>,
    pub(super) format: vk::Format,
    pub(super) usage: arm::TensorUsageFlagsARM,
}

impl Desc {
    /// The description of resource `r` with `usage`.
    pub(super) fn of(r: &Resource, usage: arm::TensorUsageFlagsARM) -> Desc {
        Desc {
            dims: r.shape.clone(),
            strides: r.strides.clone(),
            format: vk::Format::from_raw(r.vk_format as i32),
            usage,
        }
    }

    pub(super) fn vk(&self) -> arm::TensorDescriptionARM {
        arm::TensorDescriptionARM {
            tiling: arm::TENSOR_TILING_LINEAR_ARM,
            format: self.format,
            dimension_count: self.dims.len() as u32,
            p_dimensions: self.dims.as_ptr(),
            p_strides: if self.strides.is_empty() {
                ptr::null()
            } else {
                self.strides.as_ptr()
            },
            usage: self.usage,
            ..Default::default()
        }
    }
}

/// Shape as `usize`, every dimension at least 1.
pub(super) fn dims_usize(r: &Resource) -> Result<Vec<usize>> {
    r.shape
        .iter()
        .map(|&d| {
            usize::try_from(d).ok().filter(|&d| d > 0).ok_or_else(|| {
                unsupported(format!(
                    "resource {} has shape {:?}: dimensions must be positive",
                    r.index, r.shape
                ))
            })
        })
        .collect()
}

pub(super) fn dtype_of(r: &Resource) -> Result<DType> {
    DType::from_vk_format(vk::Format::from_raw(r.vk_format as i32)).ok_or_else(|| {
        unsupported(format!(
            "resource {} has format {} ({}), which is not a single-channel tensor format",
            r.index,
            r.vk_format,
            crate::inspect::format_name(r.vk_format)
        ))
    })
}

/// Packed size in bytes of resource `r`.
pub(super) fn packed_bytes(r: &Resource) -> Result<usize> {
    let shape = dims_usize(r)?;
    let dtype = dtype_of(r)?;
    element_count(&shape)
        .and_then(|n| n.checked_mul(dtype.size()))
        .ok_or_else(|| unsupported(format!("resource {} is too large", r.index)))
}

/// Whether `strides` (bytes) are those of a packed row-major tensor.
fn is_packed(shape: &[usize], strides: &[i64], elem: usize) -> bool {
    if strides.is_empty() {
        return true;
    }
    let mut expect = elem as i64;
    for (d, s) in shape.iter().zip(strides).rev() {
        if *s != expect {
            return false;
        }
        expect = expect.saturating_mul(*d as i64);
    }
    true
}

/// How each resource is used: by GRAPH segments, by COMPUTE segments, as a model input or
/// output.
pub(super) struct Usage {
    by_graph: Vec<bool>,
    by_compute: Vec<bool>,
    pub(super) is_io: Vec<bool>,
}

impl Usage {
    /// Scans the segments' bindings and the model's inputs and outputs; only tensor
    /// descriptors of non-constant resources are supported.
    pub(super) fn of(vgf: &Vgf<'_>) -> Result<Usage> {
        let n_res = vgf.resources.len();
        let mut usage = Usage {
            by_graph: vec![false; n_res],
            by_compute: vec![false; n_res],
            is_io: vec![false; n_res],
        };
        for seg in &vgf.sequence.segments {
            for set in &seg.descriptor_sets {
                for b in &set.bindings {
                    let r = &vgf.resources[b.mrt_index as usize];
                    if r.vk_descriptor_type != Some(DESCRIPTOR_TYPE_TENSOR_ARM) {
                        return Err(unsupported(format!(
                            "segment '{}' binds resource {} of descriptor type {}: only tensors \
                             (VK_DESCRIPTOR_TYPE_TENSOR_ARM) are supported",
                            seg.name,
                            r.index,
                            crate::inspect::descriptor_type_name(r.vk_descriptor_type)
                        )));
                    }
                    if r.category == Category::Constant {
                        return Err(unsupported(format!(
                            "segment '{}' binds constant resource {} as a descriptor: constants \
                             are supported as graph constants only",
                            seg.name, r.index
                        )));
                    }
                    match seg.kind {
                        ModuleType::Graph => usage.by_graph[r.index] = true,
                        ModuleType::Compute => usage.by_compute[r.index] = true,
                    }
                }
            }
        }
        for b in vgf.sequence.inputs.iter().chain(&vgf.sequence.outputs) {
            usage.is_io[b.mrt_index as usize] = true;
        }
        Ok(usage)
    }

    /// The tensor usage flags of resource `i`, or `None` when it needs no tensor.
    fn tensor_usage(&self, r: &Resource) -> Option<arm::TensorUsageFlagsARM> {
        let i = r.index;
        let wanted = self.by_graph[i] || self.by_compute[i] || self.is_io[i];
        if r.category == Category::Constant || !wanted {
            return None;
        }
        let mut usage = 0;
        if self.by_graph[i] {
            usage |= arm::TENSOR_USAGE_DATA_GRAPH_BIT_ARM;
        }
        if self.by_compute[i] || usage == 0 {
            usage |= arm::TENSOR_USAGE_SHADER_BIT_ARM;
        }
        Some(usage)
    }
}

/// The tensors of a model's resources, with what their memory must satisfy.
pub(super) struct Tensors {
    /// Per resource: its description (None: no tensor).
    pub(super) descs: Vec<Option<Desc>>,
    /// Per resource: the memory requirements of its tensor and buffer (None: no tensor).
    pub(super) reqs: Vec<Option<vk::MemoryRequirements>>,
}

/// Creates a tensor per used resource, and a buffer over the same bytes per input and output.
pub(super) fn create_tensors(
    objects: &mut Objects,
    vgf: &Vgf<'_>,
    usage: &Usage,
) -> Result<Tensors> {
    let n_res = vgf.resources.len();
    let mut out = Tensors {
        descs: Vec::with_capacity(n_res),
        reqs: vec![None; n_res],
    };
    for r in &vgf.resources {
        let Some(tensor_usage) = usage.tensor_usage(r) else {
            out.descs.push(None);
            continue;
        };
        let shape = dims_usize(r)?;
        let dtype = dtype_of(r)?;
        if usage.is_io[r.index] && !is_packed(&shape, &r.strides, dtype.size()) {
            return Err(unsupported(format!(
                "resource {} is a model input or output with strides {:?}: only packed \
                 tensors are supported there",
                r.index, r.strides
            )));
        }
        let desc = Desc::of(r, tensor_usage);
        let mut req = create_tensor(objects, r.index, &desc)?;
        if usage.is_io[r.index] {
            let breq = create_io_buffer(objects, r.index, packed_bytes(r)? as u64)?;
            req.size = req.size.max(breq.size);
            req.alignment = req.alignment.max(breq.alignment);
            req.memory_type_bits &= breq.memory_type_bits;
        }
        out.reqs[r.index] = Some(req);
        out.descs.push(Some(desc));
    }
    Ok(out)
}

/// Creates the tensor of resource `index`; returns its memory requirements.
fn create_tensor(
    objects: &mut Objects,
    index: usize,
    desc: &Desc,
) -> Result<vk::MemoryRequirements> {
    let h = objects.device.raw().handle();
    let fns = objects.tensor_fns;
    let vk_desc = desc.vk();
    let info = arm::TensorCreateInfoARM {
        p_description: &vk_desc,
        sharing_mode: vk::SharingMode::EXCLUSIVE,
        ..Default::default()
    };
    let mut tensor = arm::TensorARM::NULL;
    // SAFETY: `info` and the description it points to are valid for the call.
    let res = unsafe { (fns.create_tensor)(h, &info, ptr::null(), &mut tensor) };
    if res != vk::Result::SUCCESS {
        return Err(vkerr("vkCreateTensorARM")(res));
    }
    objects.tensors[index] = tensor;
    let mut req2 = vk::MemoryRequirements2::default();
    let req_info = arm::TensorMemoryRequirementsInfoARM {
        tensor,
        ..Default::default()
    };
    // SAFETY: `tensor` is live; `req2` is a valid output structure.
    unsafe { (fns.get_tensor_memory_requirements)(h, &req_info, &mut req2) };
    Ok(req2.memory_requirements)
}

/// Creates the buffer over input or output resource `index`; returns its memory requirements.
fn create_io_buffer(
    objects: &mut Objects,
    index: usize,
    bytes: u64,
) -> Result<vk::MemoryRequirements> {
    let d = objects.device.raw();
    let info = vk::BufferCreateInfo::default()
        .size(bytes)
        .usage(
            vk::BufferUsageFlags::STORAGE_BUFFER
                | vk::BufferUsageFlags::TRANSFER_SRC
                | vk::BufferUsageFlags::TRANSFER_DST,
        )
        .sharing_mode(vk::SharingMode::EXCLUSIVE);
    // SAFETY: valid create info.
    let buffer = unsafe { d.create_buffer(&info, None) }.map_err(vkerr("vkCreateBuffer"))?;
    objects.buffers[index] = buffer;
    // SAFETY: `buffer` is live.
    Ok(unsafe { d.get_buffer_memory_requirements(buffer) })
}

/// Where inputs and outputs live, from the option and the device.
pub(super) fn choose_memory_mode(
    objects: &Objects,
    tensors: &Tensors,
    wanted: MemoryMode,
) -> MemoryMode {
    let caps = objects.device.capabilities();
    let total: u64 = tensors.reqs.iter().flatten().map(|r| r.size).sum();
    match wanted {
        MemoryMode::Auto => {
            // Unified: a device-local, host-visible, coherent heap holding at least half the
            // device-local memory (integrated GPUs, CPU drivers, resizable BAR) and these
            // tensors. A small BAR window on a discrete GPU does not count.
            let half = caps.memory.device_local_bytes() / 2;
            if caps.memory.has_unified(total.max(half).max(1)) {
                MemoryMode::Direct
            } else {
                MemoryMode::Staged
            }
        }
        m => m,
    }
}

/// Groups resources into storages (an alias group shares one, merging requirements).
/// Returns, per resource, its storage (None: no tensor), and each storage's requirements.
pub(super) fn plan_storages(
    vgf: &Vgf<'_>,
    tensors: &Tensors,
) -> (Vec<Option<usize>>, Vec<vk::MemoryRequirements>) {
    let mut resource_storage: Vec<Option<usize>> = vec![None; vgf.resources.len()];
    let mut group_storage: Vec<(u32, usize)> = Vec::new();
    let mut storage_reqs: Vec<vk::MemoryRequirements> = Vec::new();
    for r in &vgf.resources {
        let Some(req) = tensors.reqs[r.index] else {
            continue;
        };
        let existing = r
            .alias_group
            .and_then(|g| group_storage.iter().find(|(id, _)| *id == g).map(|x| x.1));
        let s = match existing {
            Some(s) => {
                let sr = &mut storage_reqs[s];
                sr.size = sr.size.max(req.size);
                sr.alignment = sr.alignment.max(req.alignment);
                sr.memory_type_bits &= req.memory_type_bits;
                s
            }
            None => {
                storage_reqs.push(req);
                let s = storage_reqs.len() - 1;
                if let Some(g) = r.alias_group {
                    group_storage.push((g, s));
                }
                s
            }
        };
        resource_storage[r.index] = Some(s);
    }
    (resource_storage, storage_reqs)
}

/// Allocates one storage per entry of `reqs`: mapped in direct mode, device-local otherwise.
pub(super) fn allocate_storages(
    objects: &mut Objects,
    reqs: &[vk::MemoryRequirements],
    memory_mode: MemoryMode,
) -> Result<()> {
    let device = objects.device.clone();
    let d = device.raw();
    let caps = device.capabilities();
    for req in reqs {
        let (flags_pref, needs_map): (&[vk::MemoryPropertyFlags], bool) = match memory_mode {
            MemoryMode::Direct => (
                &[
                    vk::MemoryPropertyFlags::DEVICE_LOCAL
                        | vk::MemoryPropertyFlags::HOST_VISIBLE
                        | vk::MemoryPropertyFlags::HOST_COHERENT,
                    vk::MemoryPropertyFlags::DEVICE_LOCAL | vk::MemoryPropertyFlags::HOST_VISIBLE,
                    vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT,
                    vk::MemoryPropertyFlags::HOST_VISIBLE,
                ],
                true,
            ),
            _ => (
                &[
                    vk::MemoryPropertyFlags::DEVICE_LOCAL,
                    vk::MemoryPropertyFlags::empty(),
                ],
                false,
            ),
        };
        let type_index = flags_pref
            .iter()
            .find_map(|f| caps.memory.find(req.memory_type_bits, *f))
            .ok_or(vk_core::Error::NoMemoryType {
                type_bits: req.memory_type_bits,
                wanted: flags_pref[flags_pref.len() - 1],
            })?;
        let info = vk::MemoryAllocateInfo::default()
            .allocation_size(req.size.max(1))
            .memory_type_index(type_index);
        // SAFETY: valid allocate info.
        let memory =
            unsafe { d.allocate_memory(&info, None) }.map_err(vkerr("vkAllocateMemory"))?;
        let coherent = caps.memory.types[type_index as usize]
            .flags
            .contains(vk::MemoryPropertyFlags::HOST_COHERENT);
        objects.storages.push(Storage {
            memory,
            mapped: None,
            coherent,
        });
        if needs_map {
            // SAFETY: host-visible memory, not yet mapped.
            let p = unsafe { d.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()) }
                .map_err(vkerr("vkMapMemory"))?;
            if let Some(s) = objects.storages.last_mut() {
                s.mapped = Some(p.cast::<u8>());
            }
        }
    }
    Ok(())
}

/// Binds every tensor (and input/output buffer) to its storage and creates its view.
pub(super) fn bind_resources(
    objects: &mut Objects,
    vgf: &Vgf<'_>,
    resource_storage: &[Option<usize>],
) -> Result<()> {
    let device = objects.device.clone();
    let d = device.raw();
    let h = d.handle();
    let fns = objects.tensor_fns;
    for r in &vgf.resources {
        let Some(s) = resource_storage[r.index] else {
            continue;
        };
        let memory = objects.storages[s].memory;
        let bind = arm::BindTensorMemoryInfoARM {
            tensor: objects.tensors[r.index],
            memory,
            memory_offset: 0,
            ..Default::default()
        };
        // SAFETY: tensor and memory are live; the memory satisfies the tensor's
        // requirements (size, alignment, type) by construction.
        let res = unsafe { (fns.bind_tensor_memory)(h, 1, &bind) };
        if res != vk::Result::SUCCESS {
            return Err(vkerr("vkBindTensorMemoryARM")(res));
        }
        if objects.buffers[r.index] != vk::Buffer::null() {
            // SAFETY: buffer and memory are live; requirements were merged into the
            // storage's.
            unsafe { d.bind_buffer_memory(objects.buffers[r.index], memory, 0) }
                .map_err(vkerr("vkBindBufferMemory"))?;
        }
        let view_info = arm::TensorViewCreateInfoARM {
            tensor: objects.tensors[r.index],
            format: vk::Format::from_raw(r.vk_format as i32),
            ..Default::default()
        };
        let mut view = arm::TensorViewARM::NULL;
        // SAFETY: valid create info for a bound tensor.
        let res = unsafe { (fns.create_tensor_view)(h, &view_info, ptr::null(), &mut view) };
        if res != vk::Result::SUCCESS {
            return Err(vkerr("vkCreateTensorViewARM")(res));
        }
        objects.views[r.index] = view;
    }
    Ok(())
}
