//! The executor: a decoded VGF file made into Vulkan objects on a caller's device, and run.
//!
//! Per model resource (other than constants) one tensor (`VK_ARM_tensors`, linear tiling) and
//! one tensor view; resources of one alias group share one allocation. Model inputs and
//! outputs also get a `VkBuffer` bound to the same memory (linear, packed tensors have the
//! buffer's byte layout), through which the host path copies and through which callers can
//! reach the data on the device ([`Model::device_inputs`]).
//!
//! Memory per device: where device memory is host-visible ([`MemoryMode::Direct`]: integrated
//! GPUs, lavapipe) every storage is mapped and written or read in place; elsewhere
//! ([`MemoryMode::Staged`]: discrete GPUs) storage is device-local and inputs and outputs go
//! through host-visible staging buffers, copied by the recorded command buffer.
//!
//! GRAPH segments become data-graph pipelines (SPIR-V module + graph constants from the
//! constants section), each with a pipeline session and its bind-point memory; COMPUTE
//! segments become compute pipelines with their push constant ranges (zero-filled) and
//! dispatch shape. One command buffer is recorded at load and replayed by every execution:
//! [staging in] segments, separated by barriers, [staging out], then a barrier from
//! ALL_COMMANDS / MEMORY_WRITE to HOST / HOST_READ.
//!
//! Queue access: only around `vkQueueSubmit2`, through [`vk_core::QueueGuard`]; the fence wait
//! happens after the guard is released. Drop waits for this model's own fence only.

use std::ffi::{CString, c_void};
use std::path::Path;
use std::ptr;

use vk_core::arm::{self, DataGraphFns, TensorFns};
use vk_core::host::element_count;
use vk_core::{DType, Device, HostTensor, vk};

use crate::error::{Error, Result};
use crate::format::{Category, DESCRIPTOR_TYPE_TENSOR_ARM, ModuleType, Resource, Vgf};
use crate::requirements::requirements_for;

/// How long an execution may take before it is reported as an error.
const FENCE_TIMEOUT_NS: u64 = 600_000_000_000;

/// Where tensor memory lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemoryMode {
    /// Direct where the device's memory is unified (a host-visible, device-local, coherent
    /// heap holding at least half of its device-local memory: integrated GPUs, CPU drivers,
    /// resizable BAR), staged otherwise (discrete GPUs with a small BAR window).
    #[default]
    Auto,
    /// Every storage mapped; the host reads and writes tensors in place.
    Direct,
    /// Device-local storage; inputs and outputs through host-visible staging buffers.
    Staged,
}

/// Options of [`Model::load_with`].
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Memory placement.
    pub memory: MemoryMode,
}

/// A model input or output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Name (from the file; `input_<i>` / `output_<i>` when it has none).
    pub name: String,
    /// Shape.
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: DType,
    /// Index in the model resource table.
    pub mrt_index: u32,
    /// Size in bytes.
    pub bytes: usize,
}

/// Where an input or output lives on the device: a tensor, its view, and a buffer over the
/// same bytes (packed, row-major).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceTensor {
    /// The tensor.
    pub tensor: arm::TensorARM,
    /// Its view.
    pub view: arm::TensorViewARM,
    /// A buffer bound to the same memory (usage: storage, transfer source and destination).
    pub buffer: vk::Buffer,
    /// The memory.
    pub memory: vk::DeviceMemory,
    /// Offset of the tensor in `memory`.
    pub offset: vk::DeviceSize,
    /// Size in bytes.
    pub size: vk::DeviceSize,
}

/// One allocation shared by the resources of an alias group (or holding one resource).
#[derive(Debug, Default)]
struct Storage {
    memory: vk::DeviceMemory,
    mapped: Option<*mut u8>,
    coherent: bool,
}

#[derive(Debug)]
struct Staging {
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    mapped: *mut u8,
    coherent: bool,
}

#[derive(Debug, Clone, Copy)]
struct Io {
    mrt: usize,
    staging: Option<usize>,
}

/// All Vulkan objects of a model; destroyed in reverse dependency order on drop. Built
/// incrementally, so a failed load destroys what it had created.
struct Objects {
    device: Device,
    tensor_fns: TensorFns,
    data_graph_fns: Option<DataGraphFns>,
    storages: Vec<Storage>,
    tensors: Vec<arm::TensorARM>,
    views: Vec<arm::TensorViewARM>,
    buffers: Vec<vk::Buffer>,
    staging: Vec<Staging>,
    shader_modules: Vec<vk::ShaderModule>,
    set_layouts: Vec<vk::DescriptorSetLayout>,
    pipeline_layouts: Vec<vk::PipelineLayout>,
    pipelines: Vec<vk::Pipeline>,
    sessions: Vec<arm::DataGraphPipelineSessionARM>,
    session_memory: Vec<vk::DeviceMemory>,
    descriptor_pool: vk::DescriptorPool,
    command_pool: vk::CommandPool,
    fence: vk::Fence,
}

impl std::fmt::Debug for Objects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Objects")
            .field("tensors", &self.tensors.len())
            .field("pipelines", &self.pipelines.len())
            .field("sessions", &self.sessions.len())
            .finish()
    }
}

impl Drop for Objects {
    fn drop(&mut self) {
        let d = self.device.raw();
        let h = d.handle();
        // SAFETY: every handle was created from this device by this struct and is destroyed
        // once; the owner waited for its fence before dropping (no GPU work in flight uses
        // them). Null handles are skipped or accepted by the destroy calls.
        unsafe {
            if self.command_pool != vk::CommandPool::null() {
                d.destroy_command_pool(self.command_pool, None);
            }
            if self.fence != vk::Fence::null() {
                d.destroy_fence(self.fence, None);
            }
            if self.descriptor_pool != vk::DescriptorPool::null() {
                d.destroy_descriptor_pool(self.descriptor_pool, None);
            }
            if let Some(dg) = &self.data_graph_fns {
                for s in self.sessions.drain(..) {
                    (dg.destroy_data_graph_pipeline_session)(h, s, ptr::null());
                }
            }
            for p in self.pipelines.drain(..) {
                d.destroy_pipeline(p, None);
            }
            for l in self.pipeline_layouts.drain(..) {
                d.destroy_pipeline_layout(l, None);
            }
            for l in self.set_layouts.drain(..) {
                d.destroy_descriptor_set_layout(l, None);
            }
            for m in self.shader_modules.drain(..) {
                d.destroy_shader_module(m, None);
            }
            for m in self.session_memory.drain(..) {
                d.free_memory(m, None);
            }
            for v in self.views.drain(..) {
                if !v.is_null() {
                    (self.tensor_fns.destroy_tensor_view)(h, v, ptr::null());
                }
            }
            for b in self.buffers.drain(..) {
                if b != vk::Buffer::null() {
                    d.destroy_buffer(b, None);
                }
            }
            for s in self.staging.drain(..) {
                d.destroy_buffer(s.buffer, None);
                d.free_memory(s.memory, None);
            }
            for t in self.tensors.drain(..) {
                if !t.is_null() {
                    (self.tensor_fns.destroy_tensor)(h, t, ptr::null());
                }
            }
            for s in self.storages.drain(..) {
                if s.memory != vk::DeviceMemory::null() {
                    d.free_memory(s.memory, None);
                }
            }
        }
    }
}

/// A VGF model loaded on a device, ready to execute.
#[derive(Debug)]
pub struct Model {
    objects: Objects,
    inputs: Vec<TensorInfo>,
    outputs: Vec<TensorInfo>,
    input_io: Vec<Io>,
    output_io: Vec<Io>,
    /// Per resource: the storage it lives in (None for constants).
    resource_storage: Vec<Option<usize>>,
    memory_mode: MemoryMode,
    host_cb: vk::CommandBuffer,
    device_cb: vk::CommandBuffer,
    in_flight: bool,
    runs: Vec<SegmentRun>,
    sets: Vec<Vec<vk::DescriptorSet>>,
}

// SAFETY: the raw pointers are mappings of memory this model owns; all access to them goes
// through `&mut self` (execute) or `&self` reads that do not race with GPU writes (the fence
// is waited before outputs are read).
unsafe impl Send for Model {}

/// A descriptor set of a segment: set number, layout, (binding, resource) pairs.
type SetPlan = (u32, vk::DescriptorSetLayout, Vec<(u32, usize)>);

/// One segment as recorded.
#[derive(Debug)]
struct SegmentRun {
    kind: ModuleType,
    pipeline: vk::Pipeline,
    layout: vk::PipelineLayout,
    session: arm::DataGraphPipelineSessionARM,
    /// (set index, set layout, (binding, resource) pairs)
    sets: Vec<SetPlan>,
    push: Vec<(vk::ShaderStageFlags, u32, u32)>,
    dispatch: [u32; 3],
}

/// Per-resource tensor description, kept alive while Vulkan structures point into it.
struct Desc {
    dims: Vec<i64>,
    strides: Vec<i64>,
    format: vk::Format,
    usage: arm::TensorUsageFlagsARM,
}

impl Desc {
    fn vk(&self) -> arm::TensorDescriptionARM {
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

fn unsupported(msg: impl Into<String>) -> Error {
    Error::Unsupported(msg.into())
}

fn vkerr(call: &'static str) -> impl Fn(vk::Result) -> Error {
    move |r| Error::Vk(vk_core::VkError::new(call, r))
}

/// Shape as `usize`, every dimension at least 1.
fn dims_usize(r: &Resource) -> Result<Vec<usize>> {
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

fn dtype_of(r: &Resource) -> Result<DType> {
    DType::from_vk_format(vk::Format::from_raw(r.vk_format as i32)).ok_or_else(|| {
        unsupported(format!(
            "resource {} has format {} ({}), which is not a single-channel tensor format",
            r.index,
            r.vk_format,
            crate::inspect::format_name(r.vk_format)
        ))
    })
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

impl Model {
    /// Loads a model from VGF bytes on `device` with default options.
    pub fn load(bytes: &[u8], device: &Device) -> Result<Model> {
        Model::load_with(bytes, device, &LoadOptions::default())
    }

    /// Loads a model from a file on `device`.
    pub fn from_file(path: impl AsRef<Path>, device: &Device) -> Result<Model> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| Error::Io {
            path: path.display().to_string(),
            source,
        })?;
        Model::load(&bytes, device)
    }

    /// Opens a standalone device meeting this model's requirements and loads it there.
    pub fn load_standalone(bytes: &[u8]) -> Result<Model> {
        let vgf = Vgf::decode(bytes)?;
        let device = Device::open(&requirements_for(&vgf)?)?;
        Model::from_decoded(&vgf, &device, &LoadOptions::default())
    }

    /// Loads a model from VGF bytes on `device`.
    pub fn load_with(bytes: &[u8], device: &Device, options: &LoadOptions) -> Result<Model> {
        let vgf = Vgf::decode(bytes)?;
        Model::from_decoded(&vgf, device, options)
    }

    /// The model's inputs, in order.
    pub fn inputs(&self) -> &[TensorInfo] {
        &self.inputs
    }

    /// The model's outputs, in order.
    pub fn outputs(&self) -> &[TensorInfo] {
        &self.outputs
    }

    /// The memory placement in use (never `Auto`).
    pub fn memory_mode(&self) -> MemoryMode {
        self.memory_mode
    }

    /// The device the model runs on.
    pub fn device(&self) -> &Device {
        &self.objects.device
    }

    /// Builds a model from a decoded file.
    pub fn from_decoded(vgf: &Vgf<'_>, device: &Device, options: &LoadOptions) -> Result<Model> {
        device.check(&requirements_for(vgf)?)?;
        let arm_fns = device.arm().ok_or_else(|| {
            unsupported("the device has neither VK_ARM_tensors nor VK_ARM_data_graph enabled")
        })?;
        let tensor_fns = arm_fns
            .tensors
            .ok_or_else(|| unsupported("the device has VK_ARM_tensors disabled"))?;
        let has_graph = vgf
            .sequence
            .segments
            .iter()
            .any(|s| s.kind == ModuleType::Graph);
        let data_graph_fns = arm_fns.data_graph;
        if has_graph && data_graph_fns.is_none() {
            return Err(unsupported(
                "the model has GRAPH segments but VK_ARM_data_graph is not enabled",
            ));
        }
        let caps = device.capabilities();
        let mut objects = Objects {
            device: device.clone(),
            tensor_fns,
            data_graph_fns,
            storages: Vec::new(),
            tensors: Vec::new(),
            views: Vec::new(),
            buffers: Vec::new(),
            staging: Vec::new(),
            shader_modules: Vec::new(),
            set_layouts: Vec::new(),
            pipeline_layouts: Vec::new(),
            pipelines: Vec::new(),
            sessions: Vec::new(),
            session_memory: Vec::new(),
            descriptor_pool: vk::DescriptorPool::null(),
            command_pool: vk::CommandPool::null(),
            fence: vk::Fence::null(),
        };
        let d = device.raw();
        let h = d.handle();
        let n_res = vgf.resources.len();

        // ---- which resources are used, and how ----------------------------------------
        let mut used_by_graph = vec![false; n_res];
        let mut used_by_compute = vec![false; n_res];
        let mut is_io = vec![false; n_res];
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
                        ModuleType::Graph => used_by_graph[r.index] = true,
                        ModuleType::Compute => used_by_compute[r.index] = true,
                    }
                }
            }
        }
        for b in vgf.sequence.inputs.iter().chain(&vgf.sequence.outputs) {
            is_io[b.mrt_index as usize] = true;
        }

        // ---- tensors ---------------------------------------------------------------------
        let mut descs: Vec<Option<Desc>> = Vec::with_capacity(n_res);
        objects.tensors.resize(n_res, arm::TensorARM::NULL);
        objects.views.resize(n_res, arm::TensorViewARM::NULL);
        objects.buffers.resize(n_res, vk::Buffer::null());
        let mut reqs: Vec<Option<vk::MemoryRequirements>> = vec![None; n_res];
        for r in &vgf.resources {
            let wanted = used_by_graph[r.index] || used_by_compute[r.index] || is_io[r.index];
            if r.category == Category::Constant || !wanted {
                descs.push(None);
                continue;
            }
            let shape = dims_usize(r)?;
            let dtype = dtype_of(r)?;
            if is_io[r.index] && !is_packed(&shape, &r.strides, dtype.size()) {
                return Err(unsupported(format!(
                    "resource {} is a model input or output with strides {:?}: only packed \
                     tensors are supported there",
                    r.index, r.strides
                )));
            }
            let mut usage = 0;
            if used_by_graph[r.index] {
                usage |= arm::TENSOR_USAGE_DATA_GRAPH_BIT_ARM;
            }
            if used_by_compute[r.index] || usage == 0 {
                usage |= arm::TENSOR_USAGE_SHADER_BIT_ARM;
            }
            let desc = Desc {
                dims: r.shape.clone(),
                strides: r.strides.clone(),
                format: vk::Format::from_raw(r.vk_format as i32),
                usage,
            };
            let vk_desc = desc.vk();
            let info = arm::TensorCreateInfoARM {
                p_description: &vk_desc,
                sharing_mode: vk::SharingMode::EXCLUSIVE,
                ..Default::default()
            };
            let mut tensor = arm::TensorARM::NULL;
            // SAFETY: `info` and the description it points to are valid for the call.
            let res = unsafe { (tensor_fns.create_tensor)(h, &info, ptr::null(), &mut tensor) };
            if res != vk::Result::SUCCESS {
                return Err(vkerr("vkCreateTensorARM")(res));
            }
            objects.tensors[r.index] = tensor;
            let mut req2 = vk::MemoryRequirements2::default();
            let req_info = arm::TensorMemoryRequirementsInfoARM {
                tensor,
                ..Default::default()
            };
            // SAFETY: `tensor` is live; `req2` is a valid output structure.
            unsafe { (tensor_fns.get_tensor_memory_requirements)(h, &req_info, &mut req2) };
            let mut req = req2.memory_requirements;
            if is_io[r.index] {
                let bytes = element_count(&shape)
                    .and_then(|n| n.checked_mul(dtype.size()))
                    .ok_or_else(|| unsupported(format!("resource {} is too large", r.index)))?;
                let info = vk::BufferCreateInfo::default()
                    .size(bytes as u64)
                    .usage(
                        vk::BufferUsageFlags::STORAGE_BUFFER
                            | vk::BufferUsageFlags::TRANSFER_SRC
                            | vk::BufferUsageFlags::TRANSFER_DST,
                    )
                    .sharing_mode(vk::SharingMode::EXCLUSIVE);
                // SAFETY: valid create info.
                let buffer =
                    unsafe { d.create_buffer(&info, None) }.map_err(vkerr("vkCreateBuffer"))?;
                objects.buffers[r.index] = buffer;
                // SAFETY: `buffer` is live.
                let breq = unsafe { d.get_buffer_memory_requirements(buffer) };
                req.size = req.size.max(breq.size);
                req.alignment = req.alignment.max(breq.alignment);
                req.memory_type_bits &= breq.memory_type_bits;
            }
            reqs[r.index] = Some(req);
            descs.push(Some(desc));
        }

        // ---- memory mode -------------------------------------------------------------------
        let total: u64 = reqs.iter().flatten().map(|r| r.size).sum();
        let memory_mode = match options.memory {
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
        };

        // ---- storages (alias groups share one) --------------------------------------------
        let mut resource_storage: Vec<Option<usize>> = vec![None; n_res];
        let mut group_storage: Vec<(u32, usize)> = Vec::new();
        let mut storage_reqs: Vec<vk::MemoryRequirements> = Vec::new();
        for r in &vgf.resources {
            let Some(req) = reqs[r.index] else { continue };
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
        for (s, req) in storage_reqs.iter().enumerate() {
            let (flags_pref, needs_map): (&[vk::MemoryPropertyFlags], bool) = match memory_mode {
                MemoryMode::Direct => (
                    &[
                        vk::MemoryPropertyFlags::DEVICE_LOCAL
                            | vk::MemoryPropertyFlags::HOST_VISIBLE
                            | vk::MemoryPropertyFlags::HOST_COHERENT,
                        vk::MemoryPropertyFlags::DEVICE_LOCAL
                            | vk::MemoryPropertyFlags::HOST_VISIBLE,
                        vk::MemoryPropertyFlags::HOST_VISIBLE
                            | vk::MemoryPropertyFlags::HOST_COHERENT,
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
            let mut storage = Storage {
                memory,
                mapped: None,
                coherent,
            };
            objects.storages.push(Storage::default());
            objects.storages[s].memory = memory;
            if needs_map {
                // SAFETY: host-visible memory, not yet mapped.
                let p =
                    unsafe { d.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()) }
                        .map_err(vkerr("vkMapMemory"))?;
                storage.mapped = Some(p.cast::<u8>());
            }
            objects.storages[s] = storage;
        }

        // ---- bind tensors and buffers, create views --------------------------------------
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
            let res = unsafe { (tensor_fns.bind_tensor_memory)(h, 1, &bind) };
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
            let res =
                unsafe { (tensor_fns.create_tensor_view)(h, &view_info, ptr::null(), &mut view) };
            if res != vk::Result::SUCCESS {
                return Err(vkerr("vkCreateTensorViewARM")(res));
            }
            objects.views[r.index] = view;
        }

        // ---- inputs and outputs ----------------------------------------------------------
        let infos = |slots: &[crate::format::Binding],
                     names: &[&str],
                     prefix: &str,
                     objects: &mut Objects|
         -> Result<(Vec<TensorInfo>, Vec<Io>)> {
            let mut infos = Vec::with_capacity(slots.len());
            let mut ios = Vec::with_capacity(slots.len());
            for (i, b) in slots.iter().enumerate() {
                let r = &vgf.resources[b.mrt_index as usize];
                let shape = dims_usize(r)?;
                let dtype = dtype_of(r)?;
                let bytes = element_count(&shape)
                    .and_then(|n| n.checked_mul(dtype.size()))
                    .ok_or_else(|| unsupported(format!("resource {} is too large", r.index)))?;
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
                    shape,
                    dtype,
                    mrt_index: b.mrt_index,
                    bytes,
                });
                ios.push(Io {
                    mrt: r.index,
                    staging,
                });
            }
            Ok((infos, ios))
        };
        let (inputs, input_io) = infos(
            &vgf.sequence.inputs,
            &vgf.sequence.input_names,
            "input",
            &mut objects,
        )?;
        let (outputs, output_io) = infos(
            &vgf.sequence.outputs,
            &vgf.sequence.output_names,
            "output",
            &mut objects,
        )?;

        // ---- segments: layouts, pipelines, sessions ---------------------------------------
        let mut runs: Vec<SegmentRun> = Vec::new();
        let mut tensor_descriptors = 0u32;
        for seg in &vgf.sequence.segments {
            let module = &vgf.modules[seg.module_index as usize];
            let spirv = module.spirv.ok_or_else(|| {
                unsupported(format!(
                    "segment '{}' uses module {} ('{}'), which carries no code",
                    seg.name, seg.module_index, module.name
                ))
            })?;
            let stage = match seg.kind {
                ModuleType::Graph => vk::ShaderStageFlags::ALL,
                ModuleType::Compute => vk::ShaderStageFlags::COMPUTE,
            };
            // Descriptor set layouts, one per set number from 0 to the highest used.
            let max_set = seg.descriptor_sets.iter().map(|s| s.set_index).max();
            let mut layouts = Vec::new();
            let mut sets = Vec::new();
            if let Some(max_set) = max_set {
                if max_set > 31 {
                    return Err(unsupported(format!(
                        "segment '{}' uses descriptor set {max_set}",
                        seg.name
                    )));
                }
                for set_index in 0..=max_set {
                    let bindings: Vec<(u32, usize)> = seg
                        .descriptor_sets
                        .iter()
                        .filter(|s| s.set_index == set_index)
                        .flat_map(|s| s.bindings.iter())
                        .map(|b| (b.binding, b.mrt_index as usize))
                        .collect();
                    let vk_bindings: Vec<vk::DescriptorSetLayoutBinding<'_>> = bindings
                        .iter()
                        .map(|(binding, _)| {
                            vk::DescriptorSetLayoutBinding::default()
                                .binding(*binding)
                                .descriptor_type(arm::DESCRIPTOR_TYPE_TENSOR_ARM)
                                .descriptor_count(1)
                                .stage_flags(stage)
                        })
                        .collect();
                    let info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&vk_bindings);
                    // SAFETY: valid create info.
                    let layout = unsafe { d.create_descriptor_set_layout(&info, None) }
                        .map_err(vkerr("vkCreateDescriptorSetLayout"))?;
                    objects.set_layouts.push(layout);
                    layouts.push(layout);
                    tensor_descriptors += bindings.len() as u32;
                    if !bindings.is_empty() {
                        sets.push((set_index, layout, bindings));
                    }
                }
            }
            let push: Vec<(vk::ShaderStageFlags, u32, u32)> = seg
                .push_constant_ranges
                .iter()
                .map(|p| {
                    (
                        vk::ShaderStageFlags::from_raw(p.stage_flags),
                        p.offset,
                        p.size,
                    )
                })
                .collect();
            let ranges: Vec<vk::PushConstantRange> = push
                .iter()
                .map(|&(stage_flags, offset, size)| vk::PushConstantRange {
                    stage_flags,
                    offset,
                    size,
                })
                .collect();
            let info = vk::PipelineLayoutCreateInfo::default()
                .set_layouts(&layouts)
                .push_constant_ranges(&ranges);
            // SAFETY: valid create info.
            let layout = unsafe { d.create_pipeline_layout(&info, None) }
                .map_err(vkerr("vkCreatePipelineLayout"))?;
            objects.pipeline_layouts.push(layout);

            let words = spirv.words();
            let info = vk::ShaderModuleCreateInfo::default().code(&words);
            // SAFETY: the code is a SPIR-V module whose preamble was scanned.
            let shader = unsafe { d.create_shader_module(&info, None) }
                .map_err(vkerr("vkCreateShaderModule"))?;
            objects.shader_modules.push(shader);
            let entry = CString::new(module.entry_point).map_err(|_| {
                unsupported(format!(
                    "module {} entry point contains a NUL byte",
                    seg.module_index
                ))
            })?;

            let mut run = SegmentRun {
                kind: seg.kind,
                pipeline: vk::Pipeline::null(),
                layout,
                session: arm::DataGraphPipelineSessionARM::NULL,
                sets,
                push,
                dispatch: seg.dispatch_shape.unwrap_or([1, 1, 1]),
            };
            match seg.kind {
                ModuleType::Compute => {
                    let stage_info = vk::PipelineShaderStageCreateInfo::default()
                        .stage(vk::ShaderStageFlags::COMPUTE)
                        .module(shader)
                        .name(&entry);
                    let info = vk::ComputePipelineCreateInfo::default()
                        .stage(stage_info)
                        .layout(layout);
                    // SAFETY: valid create info.
                    let pipelines = unsafe {
                        d.create_compute_pipelines(vk::PipelineCache::null(), &[info], None)
                    }
                    .map_err(|(_, r)| vkerr("vkCreateComputePipelines")(r))?;
                    run.pipeline = pipelines[0];
                    objects.pipelines.push(run.pipeline);
                }
                ModuleType::Graph => {
                    let dg = data_graph_fns.ok_or_else(|| unsupported("no data graph"))?;
                    // Graph constants: the segment's constants with their tensor descriptions.
                    let bindings = seg.graph_constants();
                    let mut const_descs: Vec<Desc> = Vec::with_capacity(bindings.len());
                    for b in &bindings {
                        let c = &vgf.constants[b.constant_index as usize];
                        if c.sparsity_dimension != -1 {
                            return Err(unsupported(format!(
                                "constant {} is sparse (dimension {}); only dense constants are \
                                 supported",
                                b.constant_index, c.sparsity_dimension
                            )));
                        }
                        let r = &vgf.resources[c.mrt_index as usize];
                        let shape = dims_usize(r)?;
                        let dtype = dtype_of(r)?;
                        let need = element_count(&shape).and_then(|n| n.checked_mul(dtype.size()));
                        if need != Some(c.data.len()) {
                            return Err(unsupported(format!(
                                "constant {} holds {} bytes, but resource {} ({} {:?}) needs {:?}",
                                b.constant_index,
                                c.data.len(),
                                r.index,
                                dtype,
                                shape,
                                need
                            )));
                        }
                        const_descs.push(Desc {
                            dims: r.shape.clone(),
                            strides: r.strides.clone(),
                            format: vk::Format::from_raw(r.vk_format as i32),
                            usage: arm::TENSOR_USAGE_DATA_GRAPH_BIT_ARM,
                        });
                    }
                    let const_vk: Vec<arm::TensorDescriptionARM> =
                        const_descs.iter().map(Desc::vk).collect();
                    let constants: Vec<arm::DataGraphPipelineConstantARM> = bindings
                        .iter()
                        .zip(&const_vk)
                        .map(|(b, desc)| arm::DataGraphPipelineConstantARM {
                            p_next: (desc as *const arm::TensorDescriptionARM).cast::<c_void>(),
                            id: b.graph_constant_id,
                            p_constant_data: vgf.constants[b.constant_index as usize]
                                .data
                                .as_ptr()
                                .cast::<c_void>(),
                            ..Default::default()
                        })
                        .collect();
                    // Resource infos: every binding of every set, with its description.
                    let mut res_vk: Vec<arm::TensorDescriptionARM> = Vec::new();
                    let mut res_keys: Vec<(u32, u32)> = Vec::new();
                    for (set_index, _, bindings) in &run.sets {
                        for &(binding, mrt) in bindings {
                            let desc = descs[mrt].as_ref().ok_or_else(|| {
                                unsupported(format!("resource {mrt} has no tensor"))
                            })?;
                            res_vk.push(desc.vk());
                            res_keys.push((*set_index, binding));
                        }
                    }
                    let resource_infos: Vec<arm::DataGraphPipelineResourceInfoARM> = res_keys
                        .iter()
                        .zip(&res_vk)
                        .map(
                            |(&(set, binding), desc)| arm::DataGraphPipelineResourceInfoARM {
                                p_next: (desc as *const arm::TensorDescriptionARM).cast::<c_void>(),
                                descriptor_set: set,
                                binding,
                                array_element: 0,
                                ..Default::default()
                            },
                        )
                        .collect();
                    let module_info = arm::DataGraphPipelineShaderModuleCreateInfoARM {
                        module: shader,
                        p_name: entry.as_ptr(),
                        constant_count: constants.len() as u32,
                        p_constants: constants.as_ptr(),
                        ..Default::default()
                    };
                    let info = arm::DataGraphPipelineCreateInfoARM {
                        p_next: (&module_info
                            as *const arm::DataGraphPipelineShaderModuleCreateInfoARM)
                            .cast::<c_void>(),
                        layout,
                        resource_info_count: resource_infos.len() as u32,
                        p_resource_infos: resource_infos.as_ptr(),
                        ..Default::default()
                    };
                    let mut pipeline = vk::Pipeline::null();
                    // SAFETY: every pointer in `info` and its chain points into locals
                    // (descriptions, constants borrowed from the file, resource infos, entry
                    // point) that outlive the call.
                    let res = unsafe {
                        (dg.create_data_graph_pipelines)(
                            h,
                            vk::DeferredOperationKHR::null(),
                            vk::PipelineCache::null(),
                            1,
                            &info,
                            ptr::null(),
                            &mut pipeline,
                        )
                    };
                    if res != vk::Result::SUCCESS {
                        return Err(vkerr("vkCreateDataGraphPipelinesARM")(res));
                    }
                    run.pipeline = pipeline;
                    objects.pipelines.push(pipeline);
                    run.session = create_session(&mut objects, &dg, pipeline)?;
                }
            }
            runs.push(run);
        }

        // ---- descriptor sets -------------------------------------------------------------
        let n_sets: u32 = runs.iter().map(|r| r.sets.len() as u32).sum();
        let mut allocated: Vec<Vec<vk::DescriptorSet>> = Vec::new();
        if n_sets > 0 {
            let sizes = [vk::DescriptorPoolSize {
                ty: arm::DESCRIPTOR_TYPE_TENSOR_ARM,
                descriptor_count: tensor_descriptors.max(1),
            }];
            let info = vk::DescriptorPoolCreateInfo::default()
                .max_sets(n_sets)
                .pool_sizes(&sizes);
            // SAFETY: valid create info.
            objects.descriptor_pool = unsafe { d.create_descriptor_pool(&info, None) }
                .map_err(vkerr("vkCreateDescriptorPool"))?;
        }
        for run in &runs {
            if run.sets.is_empty() {
                allocated.push(Vec::new());
                continue;
            }
            let layouts: Vec<vk::DescriptorSetLayout> = run.sets.iter().map(|s| s.1).collect();
            let info = vk::DescriptorSetAllocateInfo::default()
                .descriptor_pool(objects.descriptor_pool)
                .set_layouts(&layouts);
            // SAFETY: the pool has room for every set (counted above).
            let sets = unsafe { d.allocate_descriptor_sets(&info) }
                .map_err(vkerr("vkAllocateDescriptorSets"))?;
            for (set, (_, _, bindings)) in sets.iter().zip(&run.sets) {
                for &(binding, mrt) in bindings {
                    let view = objects.views[mrt];
                    let tensor_write = arm::WriteDescriptorSetTensorARM {
                        tensor_view_count: 1,
                        p_tensor_views: &view,
                        ..Default::default()
                    };
                    let mut write = vk::WriteDescriptorSet::default()
                        .dst_set(*set)
                        .dst_binding(binding)
                        .descriptor_type(arm::DESCRIPTOR_TYPE_TENSOR_ARM);
                    write.descriptor_count = 1;
                    write.p_next =
                        (&tensor_write as *const arm::WriteDescriptorSetTensorARM).cast::<c_void>();
                    // SAFETY: the chained tensor write points at a live view; the set and
                    // binding exist with the tensor descriptor type.
                    unsafe { d.update_descriptor_sets(&[write], &[]) };
                }
            }
            allocated.push(sets);
        }

        // ---- command buffers, fence --------------------------------------------------------
        let info = vk::CommandPoolCreateInfo::default().queue_family_index(device.queue().family());
        // SAFETY: valid create info.
        objects.command_pool =
            unsafe { d.create_command_pool(&info, None) }.map_err(vkerr("vkCreateCommandPool"))?;
        let info = vk::CommandBufferAllocateInfo::default()
            .command_pool(objects.command_pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(2);
        // SAFETY: valid allocate info.
        let cbs = unsafe { d.allocate_command_buffers(&info) }
            .map_err(vkerr("vkAllocateCommandBuffers"))?;
        // SAFETY: valid create info.
        objects.fence = unsafe { d.create_fence(&vk::FenceCreateInfo::default(), None) }
            .map_err(vkerr("vkCreateFence"))?;

        let model = Model {
            objects,
            inputs,
            outputs,
            input_io,
            output_io,
            resource_storage,
            memory_mode,
            host_cb: cbs[0],
            device_cb: cbs[1],
            in_flight: false,
            runs,
            sets: allocated,
        };
        model.record(model.host_cb, true)?;
        model.record(model.device_cb, false)?;
        Ok(model)
    }
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

fn create_session(
    objects: &mut Objects,
    dg: &DataGraphFns,
    pipeline: vk::Pipeline,
) -> Result<arm::DataGraphPipelineSessionARM> {
    let device = objects.device.clone();
    let d = device.raw();
    let h = d.handle();
    let caps = device.capabilities();
    let info = arm::DataGraphPipelineSessionCreateInfoARM {
        data_graph_pipeline: pipeline,
        ..Default::default()
    };
    let mut session = arm::DataGraphPipelineSessionARM::NULL;
    // SAFETY: valid create info for a live data-graph pipeline.
    let res =
        unsafe { (dg.create_data_graph_pipeline_session)(h, &info, ptr::null(), &mut session) };
    if res != vk::Result::SUCCESS {
        return Err(vkerr("vkCreateDataGraphPipelineSessionARM")(res));
    }
    objects.sessions.push(session);
    let req_info = arm::DataGraphPipelineSessionBindPointRequirementsInfoARM {
        session,
        ..Default::default()
    };
    let mut count = 0u32;
    // SAFETY: count query.
    let res = unsafe {
        (dg.get_data_graph_pipeline_session_bind_point_requirements)(
            h,
            &req_info,
            &mut count,
            ptr::null_mut(),
        )
    };
    if res != vk::Result::SUCCESS {
        return Err(vkerr(
            "vkGetDataGraphPipelineSessionBindPointRequirementsARM",
        )(res));
    }
    let mut reqs =
        vec![arm::DataGraphPipelineSessionBindPointRequirementARM::default(); count as usize];
    // SAFETY: `reqs` holds `count` initialized output structures.
    let res = unsafe {
        (dg.get_data_graph_pipeline_session_bind_point_requirements)(
            h,
            &req_info,
            &mut count,
            reqs.as_mut_ptr(),
        )
    };
    if res != vk::Result::SUCCESS && res != vk::Result::INCOMPLETE {
        return Err(vkerr(
            "vkGetDataGraphPipelineSessionBindPointRequirementsARM",
        )(res));
    }
    reqs.truncate(count as usize);
    for r in &reqs {
        if r.bind_point_type != arm::DATA_GRAPH_PIPELINE_SESSION_BIND_POINT_TYPE_MEMORY_ARM {
            return Err(unsupported(format!(
                "data-graph session bind point {} has type {}, only memory bind points are \
                 supported",
                r.bind_point, r.bind_point_type
            )));
        }
        for object_index in 0..r.num_objects {
            let info = arm::DataGraphPipelineSessionMemoryRequirementsInfoARM {
                session,
                bind_point: r.bind_point,
                object_index,
                ..Default::default()
            };
            let mut req2 = vk::MemoryRequirements2::default();
            // SAFETY: valid query for a live session.
            unsafe {
                (dg.get_data_graph_pipeline_session_memory_requirements)(h, &info, &mut req2)
            };
            let req = req2.memory_requirements;
            if req.size == 0 {
                continue;
            }
            let type_index = caps
                .memory
                .find(req.memory_type_bits, vk::MemoryPropertyFlags::DEVICE_LOCAL)
                .or_else(|| {
                    caps.memory
                        .find(req.memory_type_bits, vk::MemoryPropertyFlags::empty())
                })
                .ok_or(vk_core::Error::NoMemoryType {
                    type_bits: req.memory_type_bits,
                    wanted: vk::MemoryPropertyFlags::DEVICE_LOCAL,
                })?;
            let alloc = vk::MemoryAllocateInfo::default()
                .allocation_size(req.size)
                .memory_type_index(type_index);
            // SAFETY: valid allocate info.
            let memory =
                unsafe { d.allocate_memory(&alloc, None) }.map_err(vkerr("vkAllocateMemory"))?;
            objects.session_memory.push(memory);
            let bind = arm::BindDataGraphPipelineSessionMemoryInfoARM {
                session,
                bind_point: r.bind_point,
                object_index,
                memory,
                memory_offset: 0,
                ..Default::default()
            };
            // SAFETY: session and memory are live; the memory meets the requirements.
            let res = unsafe { (dg.bind_data_graph_pipeline_session_memory)(h, 1, &bind) };
            if res != vk::Result::SUCCESS {
                return Err(vkerr("vkBindDataGraphPipelineSessionMemoryARM")(res));
            }
        }
    }
    Ok(session)
}

fn barrier(
    d: &vk_core::ash::Device,
    cb: vk::CommandBuffer,
    src: (vk::PipelineStageFlags2, vk::AccessFlags2),
    dst: (vk::PipelineStageFlags2, vk::AccessFlags2),
) {
    let mb = [vk::MemoryBarrier2::default()
        .src_stage_mask(src.0)
        .src_access_mask(src.1)
        .dst_stage_mask(dst.0)
        .dst_access_mask(dst.1)];
    let dep = vk::DependencyInfo::default().memory_barriers(&mb);
    // SAFETY: `cb` is in the recording state (callers' contract); the barrier is valid.
    unsafe { d.cmd_pipeline_barrier2(cb, &dep) };
}

impl Model {
    /// Pipeline stages the segments run in.
    fn segment_stages(&self) -> vk::PipelineStageFlags2 {
        let mut stages = vk::PipelineStageFlags2::empty();
        for r in &self.runs {
            stages |= match r.kind {
                ModuleType::Graph => arm::PIPELINE_STAGE_2_DATA_GRAPH_BIT_ARM,
                ModuleType::Compute => vk::PipelineStageFlags2::COMPUTE_SHADER,
            };
        }
        if stages.is_empty() {
            vk::PipelineStageFlags2::COMPUTE_SHADER
        } else {
            stages
        }
    }

    /// Records the segments (with barriers between them) into `cb`, which must be recording.
    ///
    /// # Safety
    /// `cb` must be a primary command buffer of this model's device, in the recording state,
    /// from a pool of a queue family with COMPUTE (and DATA_GRAPH for GRAPH segments). The
    /// caller orders writes of the inputs before, and reads of the outputs after, these
    /// commands (barriers or semaphores covering the segment stages), keeps the model alive
    /// and does not execute the model concurrently from two command buffers.
    pub unsafe fn record_segments(&self, cb: vk::CommandBuffer) {
        let d = self.objects.device.raw();
        let stages = self.segment_stages();
        let zeros = [0u8; 256];
        for (i, run) in self.runs.iter().enumerate() {
            if i > 0 {
                barrier(
                    d,
                    cb,
                    (stages, vk::AccessFlags2::MEMORY_WRITE),
                    (
                        stages,
                        vk::AccessFlags2::MEMORY_READ | vk::AccessFlags2::MEMORY_WRITE,
                    ),
                );
            }
            let bind_point = match run.kind {
                ModuleType::Graph => arm::PIPELINE_BIND_POINT_DATA_GRAPH_ARM,
                ModuleType::Compute => vk::PipelineBindPoint::COMPUTE,
            };
            // SAFETY: pipeline, layout and sets are live objects of this model; `cb` is
            // recording (caller's contract).
            unsafe {
                d.cmd_bind_pipeline(cb, bind_point, run.pipeline);
                for ((set_index, _, _), set) in run.sets.iter().zip(&self.sets[i]) {
                    d.cmd_bind_descriptor_sets(
                        cb,
                        bind_point,
                        run.layout,
                        *set_index,
                        &[*set],
                        &[],
                    );
                }
                for &(stage, offset, size) in &run.push {
                    // Zero-filled: the file declares ranges, not values.
                    let mut left = size as usize;
                    let mut at = offset;
                    while left > 0 {
                        let n = left.min(zeros.len());
                        d.cmd_push_constants(cb, run.layout, stage, at, &zeros[..n]);
                        left -= n;
                        at += n as u32;
                    }
                }
                match run.kind {
                    ModuleType::Graph => {
                        if let Some(dg) = &self.objects.data_graph_fns {
                            (dg.cmd_dispatch_data_graph)(cb, run.session, ptr::null());
                        }
                    }
                    ModuleType::Compute => {
                        let [x, y, z] = run.dispatch;
                        d.cmd_dispatch(cb, x, y, z);
                    }
                }
            }
        }
    }

    fn record(&self, cb: vk::CommandBuffer, host: bool) -> Result<()> {
        let d = self.objects.device.raw();
        let stages = self.segment_stages();
        let staged = host && self.memory_mode == MemoryMode::Staged;
        // SAFETY: `cb` was allocated from this model's pool and is in the initial state.
        unsafe { d.begin_command_buffer(cb, &vk::CommandBufferBeginInfo::default()) }
            .map_err(vkerr("vkBeginCommandBuffer"))?;
        if staged {
            for (io, info) in self.input_io.iter().zip(&self.inputs) {
                let Some(s) = io.staging else { continue };
                let region = [vk::BufferCopy::default().size(info.bytes as u64)];
                // SAFETY: both buffers are live and at least `bytes` long.
                unsafe {
                    d.cmd_copy_buffer(
                        cb,
                        self.objects.staging[s].buffer,
                        self.objects.buffers[io.mrt],
                        &region,
                    )
                };
            }
            barrier(
                d,
                cb,
                (
                    vk::PipelineStageFlags2::COPY,
                    vk::AccessFlags2::TRANSFER_WRITE,
                ),
                (
                    stages,
                    vk::AccessFlags2::MEMORY_READ | vk::AccessFlags2::MEMORY_WRITE,
                ),
            );
        }
        // SAFETY: `cb` is recording, on this model's device and queue family.
        unsafe { self.record_segments(cb) };
        if staged {
            barrier(
                d,
                cb,
                (stages, vk::AccessFlags2::MEMORY_WRITE),
                (
                    vk::PipelineStageFlags2::COPY,
                    vk::AccessFlags2::TRANSFER_READ,
                ),
            );
            for (io, info) in self.output_io.iter().zip(&self.outputs) {
                let Some(s) = io.staging else { continue };
                let region = [vk::BufferCopy::default().size(info.bytes as u64)];
                // SAFETY: both buffers are live and at least `bytes` long.
                unsafe {
                    d.cmd_copy_buffer(
                        cb,
                        self.objects.buffers[io.mrt],
                        self.objects.staging[s].buffer,
                        &region,
                    )
                };
            }
        }
        if host {
            barrier(
                d,
                cb,
                (
                    vk::PipelineStageFlags2::ALL_COMMANDS,
                    vk::AccessFlags2::MEMORY_WRITE,
                ),
                (vk::PipelineStageFlags2::HOST, vk::AccessFlags2::HOST_READ),
            );
        }
        // SAFETY: `cb` is recording.
        unsafe { d.end_command_buffer(cb) }.map_err(vkerr("vkEndCommandBuffer"))?;
        Ok(())
    }

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
        let d = self.objects.device.raw().clone();
        for (t, io) in inputs.iter().zip(self.input_io.clone()) {
            let (p, memory, coherent) = self.host_side(&io)?;
            let src = t.bytes();
            // SAFETY: `p` maps at least `src.len()` bytes (checked against the resource's
            // size, which the allocation covers); no GPU work is in flight (waited above).
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
        let cb = self.host_cb;
        self.submit(cb, &[], &[])?;
        self.wait()?;
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

    fn submit(
        &mut self,
        cb: vk::CommandBuffer,
        waits: &[vk::SemaphoreSubmitInfo<'_>],
        signals: &[vk::SemaphoreSubmitInfo<'_>],
    ) -> Result<()> {
        let cbs = [vk::CommandBufferSubmitInfo::default().command_buffer(cb)];
        let submit = vk::SubmitInfo2::default()
            .wait_semaphore_infos(waits)
            .command_buffer_infos(&cbs)
            .signal_semaphore_infos(signals);
        {
            let guard = self.objects.device.queue().lock();
            // SAFETY: `cb` is executable and not pending (the fence was waited); the fence is
            // unsignaled; semaphores are the caller's contract (`submit_on_device`).
            unsafe { guard.submit2(&[submit], self.objects.fence) }?;
        }
        self.in_flight = true;
        Ok(())
    }

    /// Waits for this model's submitted work (if any) to finish. Waits on this model's own
    /// fence only, never on the whole queue.
    pub fn wait(&mut self) -> Result<()> {
        if !self.in_flight {
            return Ok(());
        }
        let fence = self.objects.fence;
        // SAFETY: the fence belongs to this model's device.
        unsafe { self.objects.device.wait_for_fence(fence, FENCE_TIMEOUT_NS) }?;
        self.in_flight = false;
        // SAFETY: the fence is signaled and not in use.
        unsafe { self.objects.device.raw().reset_fences(&[fence]) }
            .map_err(vkerr("vkResetFences"))?;
        Ok(())
    }

    /// Submits the model's segments alone (no host copies), waiting on and signaling the
    /// given semaphores. Inputs are read from, and outputs written to, the device tensors of
    /// [`Model::device_inputs`] / [`Model::device_outputs`]. Call [`Model::wait`] (or
    /// [`Model::execute`], which waits first) before the next submission.
    ///
    /// # Safety
    /// The semaphores must be valid for this device and usable as
    /// `vkQueueSubmit2` requires (binary ones: a signal pending for each wait, unsignaled for
    /// each signal). Whoever writes the inputs must have made those writes available and
    /// visible to the segment stages (the semaphore wait's stage mask covers them), and the
    /// caller must not touch the outputs before the signaled semaphore or [`Model::wait`].
    pub unsafe fn submit_on_device(
        &mut self,
        waits: &[vk::SemaphoreSubmitInfo<'_>],
        signals: &[vk::SemaphoreSubmitInfo<'_>],
    ) -> Result<()> {
        self.wait()?;
        let cb = self.device_cb;
        self.submit(cb, waits, signals)
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

    /// The pipeline stages the segments run in (for barriers and semaphore waits around
    /// [`Model::record_segments`] and [`Model::submit_on_device`]).
    ///
    /// Arm's emulation layer (0.11) translates the data-graph stage bit in the barriers it sees
    /// recorded, but passes the stage masks of `vkQueueSubmit2` semaphores through to a driver
    /// that does not know that bit: there, use `ALL_COMMANDS` for semaphores.
    pub fn stages(&self) -> vk::PipelineStageFlags2 {
        self.segment_stages()
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        if self.in_flight {
            let fence = self.objects.fence;
            // SAFETY: the fence belongs to this model's device.
            if let Err(e) = unsafe { self.objects.device.wait_for_fence(fence, FENCE_TIMEOUT_NS) } {
                log::error!("vgf-delegate: waiting for the model's fence on drop failed: {e}");
            }
        }
        // `objects` drops next and destroys everything.
    }
}
