//! Resources: which model resources are used and how, one tensor (linear tiling) and one view
//! per used resource, a buffer over the same bytes for inputs and outputs, and one storage per
//! alias group (or per resource outside any group).

use std::ptr;

use vk_core::arm;
use vk_core::host::element_count;
use vk_core::{BufferSlice, DType, Device, HostIo, HostPath, MemoryBlock, MemoryLocation, vk};

use super::objects::Objects;
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
    let mut dedicated = vk::MemoryDedicatedRequirements::default();
    let mut req2 = vk::MemoryRequirements2::default().push_next(&mut dedicated);
    let req_info = arm::TensorMemoryRequirementsInfoARM {
        tensor,
        ..Default::default()
    };
    // SAFETY: `tensor` is live; `req2` and its chained structure are valid outputs.
    unsafe { (fns.get_tensor_memory_requirements)(h, &req_info, &mut req2) };
    let req = req2.memory_requirements;
    if dedicated.requires_dedicated_allocation == vk::TRUE {
        // The allocator cannot make a dedicated allocation for a tensor.
        return Err(unsupported(format!(
            "resource {index}: the device requires a dedicated allocation for its tensor"
        )));
    }
    Ok(req)
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

/// Where inputs and outputs live, and how staged ones move: the path is
/// `options.host_path`, else [`HostPath::for_device`] (the workspace's one rule, with its
/// override); `Auto` placement follows the path ([`HostPath::io`]), `Direct` and `Staged` are
/// explicit (staged placement under a direct path moves through staging buffers).
pub(super) fn choose_memory_mode(
    device: &Device,
    options: &super::LoadOptions,
) -> Result<(MemoryMode, HostPath)> {
    let path = match options.host_path {
        Some(p) => p,
        None => HostPath::for_device(device)?,
    };
    let mode = match options.memory {
        MemoryMode::Auto => match path.io() {
            HostIo::Direct => MemoryMode::Direct,
            HostIo::Staged => MemoryMode::Staged,
        },
        m => m,
    };
    let path = match (mode, path) {
        (MemoryMode::Staged, HostPath::Direct) => HostPath::staged(),
        (_, p) => p,
    };
    Ok((mode, path))
}

/// Resources grouped into storages: an alias group shares one, with merged requirements.
pub(super) struct StoragePlan {
    /// Per resource: its storage (None: no tensor).
    pub(super) resource_storage: Vec<Option<usize>>,
    /// Per storage: what its memory must satisfy.
    reqs: Vec<vk::MemoryRequirements>,
    /// Per storage: whether it holds a model input or output (the host reads or writes it).
    holds_io: Vec<bool>,
}

/// Groups resources into storages.
pub(super) fn plan_storages(
    vgf: &Vgf<'_>,
    tensors: &Tensors,
    usage: &Usage,
    external: &[Option<BufferSlice>],
) -> StoragePlan {
    let mut plan = StoragePlan {
        resource_storage: vec![None; vgf.resources.len()],
        reqs: Vec::new(),
        holds_io: Vec::new(),
    };
    let mut group_storage: Vec<(u32, usize)> = Vec::new();
    for r in &vgf.resources {
        let Some(req) = tensors.reqs[r.index] else {
            continue;
        };
        if external[r.index].is_some() {
            continue;
        }
        let existing = r
            .alias_group
            .and_then(|g| group_storage.iter().find(|(id, _)| *id == g).map(|x| x.1));
        let s = match existing {
            Some(s) => {
                let sr = &mut plan.reqs[s];
                sr.size = sr.size.max(req.size);
                sr.alignment = sr.alignment.max(req.alignment);
                sr.memory_type_bits &= req.memory_type_bits;
                s
            }
            None => {
                plan.reqs.push(req);
                plan.holds_io.push(false);
                let s = plan.reqs.len() - 1;
                if let Some(g) = r.alias_group {
                    group_storage.push((g, s));
                }
                s
            }
        };
        plan.holds_io[s] |= usage.is_io[r.index];
        plan.resource_storage[r.index] = Some(s);
    }
    plan
}

/// Allocates one block per storage from the device's allocator. In direct mode, storages
/// holding inputs or outputs are mapped: device-local where the device has such memory
/// host-visible, host memory otherwise; every other storage is device memory.
pub(super) fn allocate_storages(
    objects: &mut Objects,
    plan: &StoragePlan,
    memory_mode: MemoryMode,
) -> Result<()> {
    let device = objects.device.clone();
    for (s, (req, &io)) in plan.reqs.iter().zip(&plan.holds_io).enumerate() {
        let what = format!("VGF tensor storage {s}");
        let mut req = *req;
        req.size = req.size.max(1);
        let block = if io && memory_mode == MemoryMode::Direct {
            MemoryBlock::new(&device, &req, MemoryLocation::DeviceMapped, &what)
                .or_else(|_| MemoryBlock::new(&device, &req, MemoryLocation::Host, &what))?
        } else {
            MemoryBlock::new(&device, &req, MemoryLocation::Device, &what)?
        };
        objects.storages.push(block);
    }
    Ok(())
}

/// Binds every tensor (and input/output buffer) to its storage, or to the caller's memory,
/// and creates its view.
pub(super) fn bind_resources(
    objects: &mut Objects,
    vgf: &Vgf<'_>,
    plan: &StoragePlan,
    external: &[Option<BufferSlice>],
) -> Result<()> {
    let device = objects.device.clone();
    let d = device.raw();
    let h = d.handle();
    let fns = objects.tensor_fns;
    for r in &vgf.resources {
        let (memory, offset) = match (external[r.index], plan.resource_storage[r.index]) {
            (Some(e), _) => (e.memory, e.memory_offset),
            (None, Some(s)) => (objects.storages[s].memory(), objects.storages[s].offset()),
            (None, None) => continue,
        };
        let bind = arm::BindTensorMemoryInfoARM {
            tensor: objects.tensors[r.index],
            memory,
            memory_offset: offset,
            ..Default::default()
        };
        // SAFETY: tensor and memory are live; the block satisfies the tensor's requirements
        // (size, alignment, type: the allocator was given them) from `offset` on; external
        // memory was checked for size and alignment, its type is the caller's contract
        // (`External::new`).
        let res = unsafe { (fns.bind_tensor_memory)(h, 1, &bind) };
        if res != vk::Result::SUCCESS {
            return Err(vkerr("vkBindTensorMemoryARM")(res));
        }
        if objects.buffers[r.index] != vk::Buffer::null() {
            // SAFETY: buffer and memory are live; the buffer's requirements were merged into
            // the storage's; it aliases the tensor's bytes at the same offset.
            unsafe { d.bind_buffer_memory(objects.buffers[r.index], memory, offset) }
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
