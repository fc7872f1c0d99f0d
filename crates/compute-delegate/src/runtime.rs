//! The executable graph: buffers, pipelines, descriptor sets and the recorded command buffers.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use vk_core::{DType, Device, HostTensor, vk};

use crate::error::{Error, Result, VkExt};
use crate::graph::{GraphBuilder, StorageKind};
use crate::kernels::{Kernel, PUSH_BYTES};
use crate::lower::{Dispatch, lower};
use crate::memory::{Allocator, Buffer, MemKind};

/// Options for [`GraphBuilder::build_with`].
#[derive(Debug, Clone, Default)]
pub struct BuildOptions {
    /// Data from [`Graph::pipeline_cache_data`] of an earlier build on the same driver;
    /// incompatible data is ignored by the driver.
    pub pipeline_cache: Option<Vec<u8>>,
    /// An allocator to share with other graphs on the same device (one is made otherwise).
    pub allocator: Option<Arc<Allocator>>,
    /// Copy inputs, outputs and weights through host staging buffers even where device memory
    /// is host-visible (the discrete-GPU path, for tests on unified-memory devices).
    pub force_staging: bool,
    /// Use shared-memory reductions even where subgroup arithmetic is available.
    pub disable_subgroups: bool,
}

/// Device memory a graph holds, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryReport {
    /// Constants (weights, after prepacking).
    pub weights: u64,
    /// Graph inputs and outputs.
    pub io: u64,
    /// Intermediate tensors, with buffers reused across tensors whose lifetimes do not overlap.
    pub intermediates: u64,
    /// What intermediates would take with one buffer each (for comparison).
    pub intermediates_unshared: u64,
    /// Host staging buffers (discrete GPUs only).
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
    /// The shader.
    pub kernel: String,
    /// Work groups dispatched.
    pub groups: [u32; 3],
    /// Time from the previous timestamp to the one after this dispatch.
    pub time: Duration,
}

/// A device buffer holding a graph input or output, for device-resident chaining.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceTensor {
    /// The buffer (usage: storage, transfer source and destination).
    pub buffer: vk::Buffer,
    /// Offset of the tensor in the buffer (always 0 today).
    pub offset: u64,
    /// Bytes of the tensor's data (the buffer may be larger: it is padded to whole vec4s).
    pub bytes: u64,
    /// Element type.
    pub dtype: DType,
}

#[derive(Debug, Clone)]
struct Io {
    name: String,
    dtype: DType,
    shape: Vec<usize>,
    bytes: usize,
    buffer: usize,
    staging: Option<usize>,
}

/// Vulkan objects of a graph, destroyed (in `Drop`) before its buffers.
struct Objects {
    device: Device,
    modules: Vec<vk::ShaderModule>,
    set_layouts: Vec<vk::DescriptorSetLayout>,
    layouts: Vec<vk::PipelineLayout>,
    pipelines: Vec<vk::Pipeline>,
    cache: vk::PipelineCache,
    descriptor_pool: vk::DescriptorPool,
    command_pool: vk::CommandPool,
    fence: vk::Fence,
    query_pool: vk::QueryPool,
}

impl Objects {
    fn new(device: &Device) -> Self {
        Objects {
            device: device.clone(),
            modules: Vec::new(),
            set_layouts: Vec::new(),
            layouts: Vec::new(),
            pipelines: Vec::new(),
            cache: vk::PipelineCache::null(),
            descriptor_pool: vk::DescriptorPool::null(),
            command_pool: vk::CommandPool::null(),
            fence: vk::Fence::null(),
            query_pool: vk::QueryPool::null(),
        }
    }
}

impl Drop for Objects {
    fn drop(&mut self) {
        let d = self.device.raw();
        // SAFETY: every handle was created from this device, is null or live, is destroyed
        // once, and no submitted work uses it: the graph waits for its own fence before it
        // drops (see `Graph::drop`).
        unsafe {
            d.destroy_query_pool(self.query_pool, None);
            d.destroy_fence(self.fence, None);
            d.destroy_command_pool(self.command_pool, None);
            d.destroy_descriptor_pool(self.descriptor_pool, None);
            for p in self.pipelines.drain(..) {
                d.destroy_pipeline(p, None);
            }
            d.destroy_pipeline_cache(self.cache, None);
            for l in self.layouts.drain(..) {
                d.destroy_pipeline_layout(l, None);
            }
            for l in self.set_layouts.drain(..) {
                d.destroy_descriptor_set_layout(l, None);
            }
            for m in self.modules.drain(..) {
                d.destroy_shader_module(m, None);
            }
        }
    }
}

/// One recorded dispatch.
#[derive(Debug, Clone)]
struct Recorded {
    op: &'static str,
    kernel: Kernel,
    pipeline: vk::Pipeline,
    layout: vk::PipelineLayout,
    set: vk::DescriptorSet,
    push: Vec<u8>,
    groups: [u32; 3],
    barrier_before: bool,
}

/// An executable compute graph on one device.
///
/// Built once ([`GraphBuilder::build`]): weights uploaded, pipelines created in one batch,
/// descriptor sets written and command buffers recorded. [`Graph::execute`] then copies inputs
/// in, replays the command buffer, waits for the graph's own fence and copies outputs out.
pub struct Graph {
    // Field order is drop order: Vulkan objects, then buffers, then the allocator.
    objects: Objects,
    cmd_host: vk::CommandBuffer,
    cmd_resident: vk::CommandBuffer,
    cmd_upload: vk::CommandBuffer,
    cmd_readback: vk::CommandBuffer,
    recorded: Vec<Recorded>,
    buffers: Vec<Buffer>,
    inputs: Vec<Io>,
    outputs: Vec<Io>,
    memory: MemoryReport,
    timestamps: bool,
    pending: bool,
    staging: bool,
    last_device_time: Option<Duration>,
    barriers: usize,
    alloc: Arc<Allocator>,
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

impl Drop for Graph {
    fn drop(&mut self) {
        if self.pending {
            if let Err(e) = self.wait() {
                log::error!("compute graph: waiting for its last submission failed: {e}");
            }
        }
    }
}

/// Physical buffer assignment of every storage.
struct MemoryPlan {
    /// Storage -> index into `buffers` (None: not used by any dispatch).
    slot_of: Vec<Option<usize>>,
    /// Sizes and kinds of the buffers to create.
    buffers: Vec<(u64, BufKind)>,
    report: MemoryReport,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BufKind {
    Input,
    Output,
    Const,
    Temp,
}

fn plan_memory(storages: &[crate::graph::Storage], dispatches: &[Dispatch]) -> MemoryPlan {
    let n = storages.len();
    let mut first = vec![usize::MAX; n];
    let mut last = vec![0usize; n];
    for (i, d) in dispatches.iter().enumerate() {
        for &(s, _) in &d.bindings {
            first[s] = first[s].min(i);
            last[s] = last[s].max(i);
        }
    }
    let mut slot_of = vec![None; n];
    let mut buffers: Vec<(u64, BufKind)> = Vec::new();
    let mut report = MemoryReport::default();
    // Dedicated buffers: inputs, outputs, constants.
    for (s, st) in storages.iter().enumerate() {
        let kind = match st.kind {
            StorageKind::Input => BufKind::Input,
            StorageKind::Output => BufKind::Output,
            StorageKind::Const(_) if first[s] != usize::MAX => BufKind::Const,
            _ => continue,
        };
        slot_of[s] = Some(buffers.len());
        buffers.push((st.bytes, kind));
        match kind {
            BufKind::Const => report.weights += st.bytes,
            _ => report.io += st.bytes,
        }
    }
    // Intermediates: in order of first use, each takes the best-fitting buffer freed before
    // its first use (or grows the largest free one, or gets a new one).
    let mut temps: Vec<usize> = (0..n)
        .filter(|&s| matches!(storages[s].kind, StorageKind::Temp) && first[s] != usize::MAX)
        .collect();
    temps.sort_by_key(|&s| first[s]);
    // (buffer index, busy until dispatch index)
    let mut pool: Vec<(usize, usize)> = Vec::new();
    for s in temps {
        let need = storages[s].bytes;
        report.intermediates_unshared += need;
        // Free: last used before `s` is first written, or last read by the very dispatch that
        // writes `s` when that dispatch works in place.
        let in_place = dispatches[first[s]].in_place;
        let free: Vec<usize> = (0..pool.len())
            .filter(|&i| pool[i].1 < first[s] || (in_place && pool[i].1 == first[s]))
            .collect();
        let fit = free
            .iter()
            .copied()
            .filter(|&i| buffers[pool[i].0].0 >= need)
            .min_by_key(|&i| buffers[pool[i].0].0);
        let chosen = fit.or_else(|| free.iter().copied().max_by_key(|&i| buffers[pool[i].0].0));
        let b = match chosen {
            Some(i) => {
                let b = pool[i].0;
                buffers[b].0 = buffers[b].0.max(need);
                pool[i].1 = last[s];
                b
            }
            None => {
                buffers.push((need, BufKind::Temp));
                pool.push((buffers.len() - 1, last[s]));
                buffers.len() - 1
            }
        };
        slot_of[s] = Some(b);
    }
    report.intermediates = buffers
        .iter()
        .filter(|b| b.1 == BufKind::Temp)
        .map(|b| b.0)
        .sum();
    MemoryPlan {
        slot_of,
        buffers,
        report,
    }
}

/// Which dispatches need a barrier before them: a read of a buffer written since the last
/// barrier, or a write of a buffer read or written since then (writes of one node to disjoint
/// parts of one buffer, as `cat` does, do not conflict).
fn barriers(dispatches: &[Dispatch], buffer_of: &dyn Fn(usize) -> usize) -> Vec<bool> {
    let mut written: BTreeMap<usize, usize> = BTreeMap::new();
    let mut read: BTreeMap<usize, ()> = BTreeMap::new();
    let mut out = Vec::with_capacity(dispatches.len());
    for d in dispatches {
        let hazard = d.bindings.iter().any(|&(s, w)| {
            let b = buffer_of(s);
            if w {
                read.contains_key(&b) || written.get(&b).is_some_and(|&node| node != d.node)
            } else {
                written.contains_key(&b)
            }
        });
        if hazard {
            written.clear();
            read.clear();
        }
        out.push(hazard);
        for &(s, w) in &d.bindings {
            let b = buffer_of(s);
            if w {
                written.insert(b, d.node);
            } else {
                read.insert(b, ());
            }
        }
    }
    out
}

/// Whether compute shaders have subgroup arithmetic, with subgroups of at least 4
/// invocations that divide the 256 of a work group.
fn subgroup_arithmetic(device: &Device) -> bool {
    if device.enabled().api_version < vk_core::Version::V1_1 {
        return false;
    }
    let mut sg = vk::PhysicalDeviceSubgroupProperties::default();
    let mut props = vk::PhysicalDeviceProperties2::default().push_next(&mut sg);
    // SAFETY: the physical device belongs to this instance, whose API version is at least
    // 1.1 (the device's enabled version is not higher than the instance's).
    unsafe {
        device
            .instance()
            .raw()
            .get_physical_device_properties2(device.physical(), &mut props)
    };
    let ops = vk::SubgroupFeatureFlags::BASIC | vk::SubgroupFeatureFlags::ARITHMETIC;
    let min = device.capabilities().limits.subgroup_size_range[0];
    sg.supported_stages.contains(vk::ShaderStageFlags::COMPUTE)
        && sg.supported_operations.contains(ops)
        && sg.subgroup_size >= 4
        && 256 % sg.subgroup_size == 0
        && (min == 0 || min >= 4)
}

/// Whether pipeline-cache data starts with a version-one header of this vendor and device
/// (other data is not passed to the driver).
fn cache_header_matches(data: &[u8], vendor: u32, device: u32) -> bool {
    let word = |i: usize| {
        data.get(i * 4..i * 4 + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let ok = word(0).is_some_and(|len| len >= 32 && len as usize <= data.len())
        && word(1) == Some(1)
        && word(2) == Some(vendor)
        && word(3) == Some(device);
    if !ok && !data.is_empty() {
        log::warn!("compute graph: ignoring pipeline-cache data made for another device or driver");
    }
    ok
}

fn words(spirv: &[u8]) -> Result<Vec<u32>> {
    ash::util::read_spv(&mut std::io::Cursor::new(spirv))
        .map_err(|e| Error::Graph(format!("internal: embedded SPIR-V is unreadable: {e}")))
}

impl GraphBuilder {
    /// Builds the graph on `device` (which must meet [`crate::requirements`]).
    pub fn build(&self, device: &Device) -> Result<Graph> {
        self.build_with(device, &BuildOptions::default())
    }

    /// Builds the graph with options.
    pub fn build_with(&self, device: &Device, options: &BuildOptions) -> Result<Graph> {
        if self.outputs.is_empty() {
            return Err(Error::Graph("the graph has no outputs".into()));
        }
        let caps = device.capabilities();
        let lim = &caps.limits;
        if lim.max_compute_work_group_invocations < 256 || lim.max_compute_work_group_size[0] < 256
        {
            return Err(Error::Unsupported(format!(
                "the op library uses work groups of 256 invocations; device '{}' allows {} \
                 (maxComputeWorkGroupInvocations) and {} in x (maxComputeWorkGroupSize[0])",
                caps.name,
                lim.max_compute_work_group_invocations,
                lim.max_compute_work_group_size[0]
            )));
        }
        let limit = caps.limits.max_storage_buffer_range;
        let subgroups = !options.disable_subgroups && subgroup_arithmetic(device);
        let plan = lower(self, &caps.limits, subgroups)?;
        // Sizes in bytes against maxStorageBufferRange, before anything is allocated.
        for st in &plan.storages {
            if st.bytes > u64::from(limit) {
                let t = &self.tensors[st.tensor.0];
                return Err(Error::TooLarge {
                    tensor: t.name.clone(),
                    dtype: t.dtype,
                    shape: t.shape.clone(),
                    bytes: st.bytes,
                    limit,
                });
            }
        }
        for (i, x) in plan.dispatches.iter().enumerate() {
            log::debug!(
                "dispatch {i}: {} (node {}) {:?} groups {:?}",
                x.op,
                x.node,
                x.kernel,
                x.groups
            );
        }
        let mem = plan_memory(&plan.storages, &plan.dispatches);
        let alloc = match &options.allocator {
            Some(a) if a.device().same_as(device) => a.clone(),
            Some(a) => {
                return Err(Error::Graph(format!(
                    "the allocator given in BuildOptions belongs to device '{}', not to the \
                     device the graph is built on ('{}')",
                    a.device().capabilities().name,
                    device.capabilities().name
                )));
            }
            None => Allocator::new(device)?,
        };
        let unified = alloc.unified() && !options.force_staging;
        let usage = vk::BufferUsageFlags::STORAGE_BUFFER
            | vk::BufferUsageFlags::TRANSFER_SRC
            | vk::BufferUsageFlags::TRANSFER_DST;

        // Buffers.
        let mut buffers = Vec::with_capacity(mem.buffers.len());
        for (i, &(bytes, kind)) in mem.buffers.iter().enumerate() {
            let mk = match kind {
                BufKind::Input | BufKind::Output | BufKind::Const if unified => {
                    MemKind::DeviceMapped
                }
                _ => MemKind::Device,
            };
            buffers.push(Buffer::new(
                &alloc,
                bytes,
                mk,
                usage,
                &format!("buffer {i} ({kind:?}, {bytes} bytes)"),
            )?);
        }
        let buffer_of = |s: usize| mem.slot_of[s].unwrap_or(usize::MAX);

        let mut report = mem.report;
        let io = |list: &[crate::graph::TensorId],
                  buffers: &mut Vec<Buffer>,
                  report: &mut MemoryReport|
         -> Result<Vec<Io>> {
            let mut v = Vec::new();
            for &t in list {
                let info = &self.tensors[t.0];
                let buffer = buffer_of(info.storage);
                let bytes = info.numel() * info.dtype.size();
                let staging = if buffers[buffer].is_mapped() {
                    None
                } else {
                    let b = Buffer::new(
                        &alloc,
                        bytes as u64,
                        MemKind::Staging,
                        vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST,
                        &format!("staging for '{}'", info.name),
                    )?;
                    report.staging += b.size();
                    buffers.push(b);
                    Some(buffers.len() - 1)
                };
                v.push(Io {
                    name: info.name.clone(),
                    dtype: info.dtype,
                    shape: info.shape.clone(),
                    bytes,
                    buffer,
                    staging,
                });
            }
            Ok(v)
        };
        let inputs = io(&self.inputs, &mut buffers, &mut report)?;
        let outputs = io(&self.outputs, &mut buffers, &mut report)?;

        let mut objects = Objects::new(device);
        let d = device.raw();
        let queue = device.queue();
        // SAFETY: valid create infos for this device.
        unsafe {
            objects.command_pool = d
                .create_command_pool(
                    &vk::CommandPoolCreateInfo::default()
                        .queue_family_index(queue.family())
                        .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER),
                    None,
                )
                .vk("vkCreateCommandPool")?;
            objects.fence = d
                .create_fence(&vk::FenceCreateInfo::default(), None)
                .vk("vkCreateFence")?;
        }
        let family_ts = caps
            .queue_families
            .get(queue.family() as usize)
            .map_or(0, |f| f.timestamp_valid_bits);
        let timestamps = family_ts > 0;
        if timestamps {
            // SAFETY: valid create info.
            objects.query_pool = unsafe {
                d.create_query_pool(
                    &vk::QueryPoolCreateInfo::default()
                        .query_type(vk::QueryType::TIMESTAMP)
                        .query_count(2),
                    None,
                )
            }
            .vk("vkCreateQueryPool")?;
        }
        // SAFETY: the pool is live.
        let cmds = unsafe {
            d.allocate_command_buffers(
                &vk::CommandBufferAllocateInfo::default()
                    .command_pool(objects.command_pool)
                    .level(vk::CommandBufferLevel::PRIMARY)
                    .command_buffer_count(4),
            )
        }
        .vk("vkAllocateCommandBuffers")?;
        let (cmd_host, cmd_resident, cmd_upload, cmd_readback) =
            (cmds[0], cmds[1], cmds[2], cmds[3]);

        // Weights: written directly where mapped, else through staging and one copy submission.
        let mut uploads: Vec<(Buffer, usize, u64)> = Vec::new();
        for (s, st) in plan.storages.iter().enumerate() {
            let (StorageKind::Const(data), Some(b)) = (&st.kind, mem.slot_of[s]) else {
                continue;
            };
            if buffers[b].is_mapped() {
                buffers[b].write(data)?;
            } else {
                let mut staging = Buffer::new(
                    &alloc,
                    data.len() as u64,
                    MemKind::Staging,
                    vk::BufferUsageFlags::TRANSFER_SRC,
                    "weight staging",
                )?;
                staging.write(data)?;
                uploads.push((staging, b, data.len() as u64));
            }
        }
        if !uploads.is_empty() {
            // SAFETY: recording a fresh command buffer; copies stay within both buffers; the
            // fence wait below ends the staging buffers' use before they drop.
            unsafe {
                d.begin_command_buffer(
                    cmd_host,
                    &vk::CommandBufferBeginInfo::default()
                        .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT),
                )
                .vk("vkBeginCommandBuffer")?;
                for (staging, b, size) in &uploads {
                    d.cmd_copy_buffer(
                        cmd_host,
                        staging.raw(),
                        buffers[*b].raw(),
                        &[vk::BufferCopy::default().size(*size)],
                    );
                }
                d.end_command_buffer(cmd_host).vk("vkEndCommandBuffer")?;
            }
            submit_and_wait(device, objects.fence, cmd_host, &[], &[])?;
            // SAFETY: the command buffer finished (fence waited); reset for re-recording.
            unsafe {
                d.reset_command_buffer(cmd_host, vk::CommandBufferResetFlags::empty())
                    .vk("vkResetCommandBuffer")?;
            }
            drop(uploads);
        }

        // Shader modules of the kernels in use.
        let mut kernels: Vec<Kernel> = plan.dispatches.iter().map(|x| x.kernel).collect();
        kernels.sort();
        kernels.dedup();
        let mut module_of: BTreeMap<Kernel, vk::ShaderModule> = BTreeMap::new();
        for k in &kernels {
            let code = words(k.spirv())?;
            // SAFETY: valid SPIR-V compiled by the xtask.
            let m = unsafe {
                d.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&code), None)
            }
            .vk("vkCreateShaderModule")?;
            objects.modules.push(m);
            module_of.insert(*k, m);
        }
        // Layouts per binding count.
        let mut layout_of: BTreeMap<usize, (vk::DescriptorSetLayout, vk::PipelineLayout)> =
            BTreeMap::new();
        for k in &kernels {
            let n = k.bindings();
            if layout_of.contains_key(&n) {
                continue;
            }
            let bindings: Vec<_> = (0..n as u32)
                .map(|b| {
                    vk::DescriptorSetLayoutBinding::default()
                        .binding(b)
                        .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                        .descriptor_count(1)
                        .stage_flags(vk::ShaderStageFlags::COMPUTE)
                })
                .collect();
            // SAFETY: valid create info.
            let sl = unsafe {
                d.create_descriptor_set_layout(
                    &vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings),
                    None,
                )
            }
            .vk("vkCreateDescriptorSetLayout")?;
            objects.set_layouts.push(sl);
            let push = [vk::PushConstantRange::default()
                .stage_flags(vk::ShaderStageFlags::COMPUTE)
                .size(PUSH_BYTES.min(caps.limits.max_push_constants_size))];
            let sls = [sl];
            // SAFETY: valid create info referencing a live set layout.
            let pl = unsafe {
                d.create_pipeline_layout(
                    &vk::PipelineLayoutCreateInfo::default()
                        .set_layouts(&sls)
                        .push_constant_ranges(&push),
                    None,
                )
            }
            .vk("vkCreatePipelineLayout")?;
            objects.layouts.push(pl);
            layout_of.insert(n, (sl, pl));
        }

        // One batched pipeline creation, through a pipeline cache.
        let initial = options
            .pipeline_cache
            .as_deref()
            .filter(|data| cache_header_matches(data, caps.vendor_id, caps.device_id))
            .unwrap_or(&[]);
        // SAFETY: valid create info; the driver ignores incompatible initial data.
        objects.cache = unsafe {
            d.create_pipeline_cache(
                &vk::PipelineCacheCreateInfo::default().initial_data(initial),
                None,
            )
        }
        .vk("vkCreatePipelineCache")?;
        let mut keys: Vec<(Kernel, Vec<u32>)> = plan
            .dispatches
            .iter()
            .map(|x| (x.kernel, x.spec.clone()))
            .collect();
        keys.sort();
        keys.dedup();
        let entries: Vec<Vec<vk::SpecializationMapEntry>> = keys
            .iter()
            .map(|(_, spec)| {
                (0..spec.len() as u32)
                    .map(|i| {
                        vk::SpecializationMapEntry::default()
                            .constant_id(i)
                            .offset(i * 4)
                            .size(4)
                    })
                    .collect()
            })
            .collect();
        let data: Vec<Vec<u8>> = keys
            .iter()
            .map(|(_, spec)| spec.iter().flat_map(|v| v.to_ne_bytes()).collect())
            .collect();
        let spec_infos: Vec<vk::SpecializationInfo<'_>> = entries
            .iter()
            .zip(&data)
            .map(|(e, d)| vk::SpecializationInfo::default().map_entries(e).data(d))
            .collect();
        let mut infos = Vec::with_capacity(keys.len());
        for (i, (k, _)) in keys.iter().enumerate() {
            let stage = vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(module_of[k])
                .name(c"main")
                .specialization_info(&spec_infos[i]);
            infos.push(
                vk::ComputePipelineCreateInfo::default()
                    .stage(stage)
                    .layout(layout_of[&k.bindings()].1),
            );
        }
        // SAFETY: create infos reference live modules, layouts and specialization data.
        let pipelines = unsafe { d.create_compute_pipelines(objects.cache, &infos, None) }
            .map_err(|(made, e)| {
                for p in made {
                    // SAFETY: pipelines created by the failed batch, unused.
                    unsafe { d.destroy_pipeline(p, None) };
                }
                vk_core::VkError::new("vkCreateComputePipelines", e)
            })?;
        objects.pipelines = pipelines.clone();
        let pipeline_of: BTreeMap<(Kernel, Vec<u32>), vk::Pipeline> =
            keys.into_iter().zip(pipelines).collect();

        // Descriptor sets, one per dispatch.
        let total: u32 = plan
            .dispatches
            .iter()
            .map(|x| x.kernel.bindings() as u32)
            .sum();
        let sizes = [vk::DescriptorPoolSize::default()
            .ty(vk::DescriptorType::STORAGE_BUFFER)
            .descriptor_count(total.max(1))];
        // SAFETY: valid create info.
        objects.descriptor_pool = unsafe {
            d.create_descriptor_pool(
                &vk::DescriptorPoolCreateInfo::default()
                    .max_sets((plan.dispatches.len() as u32).max(1))
                    .pool_sizes(&sizes),
                None,
            )
        }
        .vk("vkCreateDescriptorPool")?;
        let set_layouts: Vec<vk::DescriptorSetLayout> = plan
            .dispatches
            .iter()
            .map(|x| layout_of[&x.kernel.bindings()].0)
            .collect();
        let sets = if set_layouts.is_empty() {
            Vec::new()
        } else {
            // SAFETY: the pool was sized for exactly these sets.
            unsafe {
                d.allocate_descriptor_sets(
                    &vk::DescriptorSetAllocateInfo::default()
                        .descriptor_pool(objects.descriptor_pool)
                        .set_layouts(&set_layouts),
                )
            }
            .vk("vkAllocateDescriptorSets")?
        };
        let buffer_infos: Vec<Vec<[vk::DescriptorBufferInfo; 1]>> = plan
            .dispatches
            .iter()
            .map(|x| {
                x.bindings
                    .iter()
                    .map(|&(s, _)| {
                        [vk::DescriptorBufferInfo::default()
                            .buffer(buffers[buffer_of(s)].raw())
                            .range(vk::WHOLE_SIZE)]
                    })
                    .collect()
            })
            .collect();
        let mut writes = Vec::new();
        for (i, infos) in buffer_infos.iter().enumerate() {
            for (b, info) in infos.iter().enumerate() {
                writes.push(
                    vk::WriteDescriptorSet::default()
                        .dst_set(sets[i])
                        .dst_binding(b as u32)
                        .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                        .buffer_info(info),
                );
            }
        }
        // SAFETY: the writes reference live sets and buffers.
        unsafe { d.update_descriptor_sets(&writes, &[]) };

        let barrier_flags = barriers(&plan.dispatches, &buffer_of);
        let recorded: Vec<Recorded> = plan
            .dispatches
            .iter()
            .enumerate()
            .map(|(i, x)| Recorded {
                op: x.op,
                kernel: x.kernel,
                pipeline: pipeline_of[&(x.kernel, x.spec.clone())],
                layout: layout_of[&x.kernel.bindings()].1,
                set: sets[i],
                push: x.push.iter().flat_map(|v| v.to_ne_bytes()).collect(),
                groups: x.groups,
                barrier_before: barrier_flags[i],
            })
            .collect();

        let mut graph = Graph {
            objects,
            cmd_host,
            cmd_resident,
            cmd_upload,
            cmd_readback,
            recorded,
            buffers,
            inputs,
            outputs,
            memory: report,
            timestamps,
            pending: false,
            staging: !unified,
            last_device_time: None,
            barriers: barrier_flags.iter().filter(|&&b| b).count(),
            alloc,
        };
        graph.record_host()?;
        graph.record_resident()?;
        graph.record_transfers()?;
        Ok(graph)
    }
}

fn submit_and_wait(
    device: &Device,
    fence: vk::Fence,
    cmd: vk::CommandBuffer,
    waits: &[(vk::Semaphore, vk::PipelineStageFlags)],
    signals: &[vk::Semaphore],
) -> Result<()> {
    submit(device, fence, cmd, waits, signals)?;
    wait_fence(device, fence)
}

fn submit(
    device: &Device,
    fence: vk::Fence,
    cmd: vk::CommandBuffer,
    waits: &[(vk::Semaphore, vk::PipelineStageFlags)],
    signals: &[vk::Semaphore],
) -> Result<()> {
    let cmds = [cmd];
    let wait_sems: Vec<vk::Semaphore> = waits.iter().map(|w| w.0).collect();
    let wait_stages: Vec<vk::PipelineStageFlags> = waits.iter().map(|w| w.1).collect();
    let info = [vk::SubmitInfo::default()
        .command_buffers(&cmds)
        .wait_semaphores(&wait_sems)
        .wait_dst_stage_mask(&wait_stages)
        .signal_semaphores(signals)];
    let guard = device.queue().lock();
    // SAFETY: the command buffer is executable and not pending (callers wait for the fence
    // before resubmitting); the fence is unsignaled; semaphores are the caller's contract. The
    // guard is held only around the submission.
    unsafe { guard.submit(&info, fence) }?;
    Ok(())
}

fn wait_fence(device: &Device, fence: vk::Fence) -> Result<()> {
    // SAFETY: `fence` belongs to this device.
    unsafe { device.wait_for_fence(fence, u64::MAX) }?;
    // SAFETY: the fence is signaled and no longer in use.
    unsafe { device.raw().reset_fences(&[fence]) }.vk("vkResetFences")?;
    Ok(())
}

impl Graph {
    fn device(&self) -> &Device {
        &self.objects.device
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
        let d = self.device().raw();
        let between = [vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::SHADER_WRITE)
            .dst_access_mask(vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE)];
        let mut bound = vk::Pipeline::null();
        for (i, r) in self.recorded.iter().enumerate() {
            // SAFETY: the caller's contract; every handle is live and owned by this graph.
            unsafe {
                if r.barrier_before {
                    d.cmd_pipeline_barrier(
                        cmd,
                        vk::PipelineStageFlags::COMPUTE_SHADER,
                        vk::PipelineStageFlags::COMPUTE_SHADER,
                        vk::DependencyFlags::empty(),
                        &between,
                        &[],
                        &[],
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

    /// # Safety
    /// `cmd` is recording.
    unsafe fn timestamp(&self, cmd: vk::CommandBuffer, index: u32) {
        if self.timestamps {
            let stage = if index == 0 {
                vk::PipelineStageFlags::TOP_OF_PIPE
            } else {
                vk::PipelineStageFlags::BOTTOM_OF_PIPE
            };
            // SAFETY: the pool has two queries, reset at the start of the command buffer.
            unsafe {
                self.device()
                    .raw()
                    .cmd_write_timestamp(cmd, stage, self.objects.query_pool, index)
            };
        }
    }

    fn record_host(&mut self) -> Result<()> {
        let d = self.device().raw().clone();
        let cmd = self.cmd_host;
        let to_shader = [vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
            .dst_access_mask(vk::AccessFlags::SHADER_READ)];
        let to_transfer = [vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::SHADER_WRITE)
            .dst_access_mask(vk::AccessFlags::TRANSFER_READ)];
        let to_host = [vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::MEMORY_WRITE)
            .dst_access_mask(vk::AccessFlags::HOST_READ)];
        let staged_in: Vec<(vk::Buffer, vk::Buffer, u64)> = self
            .inputs
            .iter()
            .filter_map(|io| {
                io.staging.map(|s| {
                    (
                        self.buffers[s].raw(),
                        self.buffers[io.buffer].raw(),
                        io.bytes as u64,
                    )
                })
            })
            .collect();
        let staged_out: Vec<(vk::Buffer, vk::Buffer, u64)> = self
            .outputs
            .iter()
            .filter_map(|io| {
                io.staging.map(|s| {
                    (
                        self.buffers[io.buffer].raw(),
                        self.buffers[s].raw(),
                        io.bytes as u64,
                    )
                })
            })
            .collect();
        // SAFETY: recording a fresh command buffer with live handles; copies stay within the
        // buffers (sizes are the tensors' bytes).
        unsafe {
            d.begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default())
                .vk("vkBeginCommandBuffer")?;
            if self.timestamps {
                d.cmd_reset_query_pool(cmd, self.objects.query_pool, 0, 2);
            }
            for (src, dst, size) in &staged_in {
                d.cmd_copy_buffer(cmd, *src, *dst, &[vk::BufferCopy::default().size(*size)]);
            }
            if !staged_in.is_empty() {
                d.cmd_pipeline_barrier(
                    cmd,
                    vk::PipelineStageFlags::TRANSFER,
                    vk::PipelineStageFlags::COMPUTE_SHADER,
                    vk::DependencyFlags::empty(),
                    &to_shader,
                    &[],
                    &[],
                );
            }
            self.timestamp(cmd, 0);
            self.record_dispatches(cmd);
            self.timestamp(cmd, 1);
            if !staged_out.is_empty() {
                d.cmd_pipeline_barrier(
                    cmd,
                    vk::PipelineStageFlags::COMPUTE_SHADER,
                    vk::PipelineStageFlags::TRANSFER,
                    vk::DependencyFlags::empty(),
                    &to_transfer,
                    &[],
                    &[],
                );
            }
            for (src, dst, size) in &staged_out {
                d.cmd_copy_buffer(cmd, *src, *dst, &[vk::BufferCopy::default().size(*size)]);
            }
            // Output visibility: a fence wait alone does not make device writes visible to
            // the host.
            d.cmd_pipeline_barrier(
                cmd,
                vk::PipelineStageFlags::ALL_COMMANDS,
                vk::PipelineStageFlags::HOST,
                vk::DependencyFlags::empty(),
                &to_host,
                &[],
                &[],
            );
            d.end_command_buffer(cmd).vk("vkEndCommandBuffer")?;
        }
        Ok(())
    }

    fn record_resident(&mut self) -> Result<()> {
        let d = self.device().raw().clone();
        let cmd = self.cmd_resident;
        // SAFETY: recording a fresh command buffer with live handles.
        unsafe {
            d.begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default())
                .vk("vkBeginCommandBuffer")?;
            if self.timestamps {
                d.cmd_reset_query_pool(cmd, self.objects.query_pool, 0, 2);
            }
            self.timestamp(cmd, 0);
            self.record_dispatches(cmd);
            self.timestamp(cmd, 1);
            d.end_command_buffer(cmd).vk("vkEndCommandBuffer")?;
        }
        Ok(())
    }

    /// Records the stand-alone upload (staging -> input buffers) and readback (output buffers
    /// -> staging, then the host barrier) command buffers.
    fn record_transfers(&mut self) -> Result<()> {
        let d = self.device().raw().clone();
        let to_host = [vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::MEMORY_WRITE)
            .dst_access_mask(vk::AccessFlags::HOST_READ)];
        for (cmd, list, upload) in [
            (self.cmd_upload, &self.inputs, true),
            (self.cmd_readback, &self.outputs, false),
        ] {
            // SAFETY: recording fresh command buffers with live handles; copies stay within
            // the buffers.
            unsafe {
                d.begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default())
                    .vk("vkBeginCommandBuffer")?;
                for io in list {
                    if let Some(s) = io.staging {
                        let (src, dst) = if upload {
                            (self.buffers[s].raw(), self.buffers[io.buffer].raw())
                        } else {
                            (self.buffers[io.buffer].raw(), self.buffers[s].raw())
                        };
                        let region = [vk::BufferCopy::default().size(io.bytes as u64)];
                        d.cmd_copy_buffer(cmd, src, dst, &region);
                    }
                }
                d.cmd_pipeline_barrier(
                    cmd,
                    vk::PipelineStageFlags::ALL_COMMANDS,
                    vk::PipelineStageFlags::HOST,
                    vk::DependencyFlags::empty(),
                    &to_host,
                    &[],
                    &[],
                );
                d.end_command_buffer(cmd).vk("vkEndCommandBuffer")?;
            }
        }
        Ok(())
    }

    /// Writes host data into input `index`'s device buffer (for device-resident use: the
    /// first graph of a chain). Waits for this graph's own work first.
    pub fn write_input(&mut self, index: usize, tensor: &HostTensor) -> Result<()> {
        self.wait()?;
        let io = self.inputs.get(index).cloned().ok_or(Error::InputCount {
            expected: self.inputs.len(),
            actual: index + 1,
        })?;
        if tensor.dtype() != io.dtype || tensor.shape() != io.shape.as_slice() {
            return Err(Error::InputMismatch {
                index,
                name: io.name.clone(),
                want_dtype: io.dtype,
                want_shape: io.shape.clone(),
                want_bytes: io.bytes,
                got_dtype: tensor.dtype(),
                got_shape: tensor.shape().to_vec(),
                got_bytes: tensor.bytes().len(),
            });
        }
        self.buffers[io.staging.unwrap_or(io.buffer)].write(tensor.bytes())?;
        if io.staging.is_some() {
            submit_and_wait(self.device(), self.objects.fence, self.cmd_upload, &[], &[])?;
        }
        Ok(())
    }

    /// Reads output `index` from its device buffer (for device-resident use: the last graph
    /// of a chain, after [`Graph::wait`]). Waits for this graph's own work first.
    pub fn read_output(&mut self, index: usize) -> Result<HostTensor> {
        self.wait()?;
        let io = self.outputs.get(index).cloned().ok_or_else(|| {
            Error::Graph(format!(
                "output {index} does not exist: the graph has {}",
                self.outputs.len()
            ))
        })?;
        // The readback command buffer ends with the host barrier; run it even without staging.
        submit_and_wait(
            self.device(),
            self.objects.fence,
            self.cmd_readback,
            &[],
            &[],
        )?;
        let mut data = vec![0u8; io.bytes];
        self.buffers[io.staging.unwrap_or(io.buffer)].read(&mut data)?;
        HostTensor::new(io.dtype, io.shape.clone(), data)
            .map_err(|e| Error::Graph(format!("internal: output '{}': {e}", io.name)))
    }

    fn read_timestamps(&mut self) -> Result<()> {
        if !self.timestamps {
            return Ok(());
        }
        let mut ts = [0u64; 2];
        // SAFETY: both queries were written by the command buffer whose fence was waited.
        unsafe {
            self.device().raw().get_query_pool_results(
                self.objects.query_pool,
                0,
                &mut ts,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )
        }
        .vk("vkGetQueryPoolResults")?;
        let period = self.device().capabilities().limits.timestamp_period() as f64;
        let ticks = ts[1].wrapping_sub(ts[0]) as f64;
        self.last_device_time = Some(Duration::from_nanos((ticks * period) as u64));
        Ok(())
    }

    /// Runs the graph: checks the inputs (count, dtype, shape, bytes), copies them in, replays
    /// the recorded command buffer, waits for this graph's fence and returns the outputs.
    pub fn execute(&mut self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        self.wait()?;
        if inputs.len() != self.inputs.len() {
            return Err(Error::InputCount {
                expected: self.inputs.len(),
                actual: inputs.len(),
            });
        }
        for (i, (t, io)) in inputs.iter().zip(&self.inputs).enumerate() {
            if t.dtype() != io.dtype
                || t.shape() != io.shape.as_slice()
                || t.bytes().len() != io.bytes
            {
                return Err(Error::InputMismatch {
                    index: i,
                    name: io.name.clone(),
                    want_dtype: io.dtype,
                    want_shape: io.shape.clone(),
                    want_bytes: io.bytes,
                    got_dtype: t.dtype(),
                    got_shape: t.shape().to_vec(),
                    got_bytes: t.bytes().len(),
                });
            }
        }
        for (i, t) in inputs.iter().enumerate() {
            let target = self.inputs[i].staging.unwrap_or(self.inputs[i].buffer);
            self.buffers[target].write(t.bytes())?;
        }
        submit(self.device(), self.objects.fence, self.cmd_host, &[], &[])?;
        // Pending until a wait succeeds, so that drop waits for it if this wait fails.
        self.pending = true;
        self.wait()?;
        let mut out = Vec::with_capacity(self.outputs.len());
        for io in &self.outputs {
            let mut data = vec![0u8; io.bytes];
            self.buffers[io.staging.unwrap_or(io.buffer)].read(&mut data)?;
            out.push(
                HostTensor::new(io.dtype, io.shape.clone(), data)
                    .map_err(|e| Error::Graph(format!("internal: output '{}': {e}", io.name)))?,
            );
        }
        Ok(out)
    }

    /// Submits the dispatches alone (inputs and outputs stay in their device buffers, see
    /// [`Graph::input_buffer`]), waiting on `waits` and signalling `signals`. Returns at once;
    /// [`Graph::wait`] (or the next call, or drop) waits for completion. Device writes are
    /// made available by the signal operation; the consumer's semaphore wait makes them
    /// visible.
    ///
    /// # Safety
    /// The semaphores must be live binary semaphores of this device, each wait semaphore
    /// signaled or with a pending signal, each signal semaphore unsignaled, as
    /// `vkQueueSubmit` requires. Whoever wrote the input buffers must have finished (or be
    /// ordered before this submission by `waits`).
    pub unsafe fn submit_resident(
        &mut self,
        waits: &[(vk::Semaphore, vk::PipelineStageFlags)],
        signals: &[vk::Semaphore],
    ) -> Result<()> {
        self.wait()?;
        submit(
            self.device(),
            self.objects.fence,
            self.cmd_resident,
            waits,
            signals,
        )?;
        self.pending = true;
        Ok(())
    }

    /// Waits for a submission made by [`Graph::submit_resident`], if any.
    pub fn wait(&mut self) -> Result<()> {
        if self.pending {
            // Cleared only after a successful wait: a failed wait leaves the submission
            // pending, so drop still waits for it before destroying what it uses.
            wait_fence(self.device(), self.objects.fence)?;
            self.pending = false;
            self.read_timestamps()?;
        }
        Ok(())
    }

    /// Records the graph's dispatches, with the barriers between them, into a caller's
    /// command buffer (no input or output copies, no host barrier).
    ///
    /// # Safety
    /// `cmd` must be a primary command buffer of this graph's device, recording, outside a
    /// render pass, for a queue family with compute. The caller orders writes of the input
    /// buffers before, and reads of the output buffers after, with its own barriers; it must
    /// not submit the command buffer after this graph is dropped, nor while another
    /// submission of this graph runs.
    pub unsafe fn record_into(&self, cmd: vk::CommandBuffer) {
        // SAFETY: forwarded contract.
        unsafe { self.record_dispatches(cmd) };
    }

    /// The device buffer of input `index`.
    pub fn input_buffer(&self, index: usize) -> Option<DeviceTensor> {
        self.inputs.get(index).map(|io| self.device_tensor(io))
    }

    /// The device buffer of output `index`.
    pub fn output_buffer(&self, index: usize) -> Option<DeviceTensor> {
        self.outputs.get(index).map(|io| self.device_tensor(io))
    }

    fn device_tensor(&self, io: &Io) -> DeviceTensor {
        DeviceTensor {
            buffer: self.buffers[io.buffer].raw(),
            offset: 0,
            bytes: io.bytes as u64,
            dtype: io.dtype,
        }
    }

    /// Inputs as `(name, dtype, shape)`, in order.
    pub fn inputs(&self) -> Vec<(&str, DType, &[usize])> {
        self.inputs
            .iter()
            .map(|io| (io.name.as_str(), io.dtype, io.shape.as_slice()))
            .collect()
    }

    /// Outputs as `(name, dtype, shape)`, in order.
    pub fn outputs(&self) -> Vec<(&str, DType, &[usize])> {
        self.outputs
            .iter()
            .map(|io| (io.name.as_str(), io.dtype, io.shape.as_slice()))
            .collect()
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

    /// The pipeline cache's data, to pass to [`BuildOptions::pipeline_cache`] next time.
    pub fn pipeline_cache_data(&self) -> Result<Vec<u8>> {
        // SAFETY: the cache is live.
        Ok(unsafe {
            self.device()
                .raw()
                .get_pipeline_cache_data(self.objects.cache)
        }
        .vk("vkGetPipelineCacheData")?)
    }

    /// The graph's allocator (to share with other graphs through [`BuildOptions::allocator`]).
    pub fn allocator(&self) -> &Arc<Allocator> {
        &self.alloc
    }

    /// Runs the dispatches once (device-resident, on the inputs already in the device
    /// buffers) with a timestamp after each, and returns each dispatch's share of the device
    /// time. Dispatches without a barrier between them may overlap on the device, so their
    /// shares are approximate.
    pub fn profile(&mut self) -> Result<Vec<DispatchTime>> {
        self.wait()?;
        if !self.timestamps {
            return Err(Error::Unsupported(
                "profile: the queue family has no timestamps".into(),
            ));
        }
        let d = self.device().raw().clone();
        let n = self.recorded.len() as u32;
        // SAFETY: valid create info; destroyed below after the fence wait.
        let pool = unsafe {
            d.create_query_pool(
                &vk::QueryPoolCreateInfo::default()
                    .query_type(vk::QueryType::TIMESTAMP)
                    .query_count(n + 1),
                None,
            )
        }
        .vk("vkCreateQueryPool")?;
        let result = (|| -> Result<Vec<DispatchTime>> {
            // SAFETY: the graph's command pool is live; the buffer is freed below.
            let cmd = unsafe {
                d.allocate_command_buffers(
                    &vk::CommandBufferAllocateInfo::default()
                        .command_pool(self.objects.command_pool)
                        .level(vk::CommandBufferLevel::PRIMARY)
                        .command_buffer_count(1),
                )
            }
            .vk("vkAllocateCommandBuffers")?[0];
            let run = (|| -> Result<Vec<u64>> {
                // SAFETY: recording a fresh command buffer with live handles; the query pool
                // has n + 1 queries, reset first.
                unsafe {
                    d.begin_command_buffer(
                        cmd,
                        &vk::CommandBufferBeginInfo::default()
                            .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT),
                    )
                    .vk("vkBeginCommandBuffer")?;
                    d.cmd_reset_query_pool(cmd, pool, 0, n + 1);
                    d.cmd_write_timestamp(cmd, vk::PipelineStageFlags::TOP_OF_PIPE, pool, 0);
                    self.record_dispatches_with(cmd, &|i| {
                        d.cmd_write_timestamp(
                            cmd,
                            vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                            pool,
                            i as u32 + 1,
                        )
                    });
                    d.end_command_buffer(cmd).vk("vkEndCommandBuffer")?;
                }
                submit_and_wait(self.device(), self.objects.fence, cmd, &[], &[])?;
                let mut ts = vec![0u64; n as usize + 1];
                // SAFETY: every query was written by the finished submission.
                unsafe {
                    d.get_query_pool_results(
                        pool,
                        0,
                        &mut ts,
                        vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
                    )
                }
                .vk("vkGetQueryPoolResults")?;
                Ok(ts)
            })();
            // SAFETY: the submission finished (or never started); the buffer is ours.
            unsafe { d.free_command_buffers(self.objects.command_pool, &[cmd]) };
            let ts = run?;
            let period = f64::from(self.device().capabilities().limits.timestamp_period());
            Ok(self
                .recorded
                .iter()
                .enumerate()
                .map(|(i, r)| DispatchTime {
                    op: r.op,
                    kernel: format!("{:?}", r.kernel),
                    groups: r.groups,
                    time: Duration::from_nanos(
                        (ts[i + 1].saturating_sub(ts[i]) as f64 * period) as u64,
                    ),
                })
                .collect())
        })();
        // SAFETY: created above; the submission using it was waited for.
        unsafe { d.destroy_query_pool(pool, None) };
        result
    }

    /// Runs `execute` and returns the outputs with the wall time of the call.
    pub fn execute_timed(&mut self, inputs: &[HostTensor]) -> Result<(Vec<HostTensor>, Duration)> {
        let start = Instant::now();
        let out = self.execute(inputs)?;
        Ok((out, start.elapsed()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Storage, TensorId};

    fn storage(kind: StorageKind, bytes: u64) -> Storage {
        Storage {
            kind,
            bytes,
            tensor: TensorId(0),
        }
    }

    fn dispatch(node: usize, bindings: &[(usize, bool)]) -> Dispatch {
        Dispatch {
            op: "test",
            node,
            kernel: Kernel::Unary,
            spec: vec![],
            bindings: bindings.to_vec(),
            push: vec![],
            groups: [1, 1, 1],
            in_place: false,
        }
    }

    #[test]
    fn intermediates_reuse_buffers_freed_before_their_first_use() {
        // in -> t1 -> t2 -> t3 -> out, with t1 also read by the last op (so it stays live).
        let storages = vec![
            storage(StorageKind::Input, 64),
            storage(StorageKind::Temp, 64),
            storage(StorageKind::Temp, 32),
            storage(StorageKind::Temp, 128),
            storage(StorageKind::Output, 64),
            storage(StorageKind::Const(vec![0; 16]), 16),
            storage(StorageKind::Const(vec![0; 16]), 16), // unused: no buffer
        ];
        let d = vec![
            dispatch(0, &[(0, false), (5, false), (1, true)]),
            dispatch(1, &[(1, false), (2, true)]),
            dispatch(2, &[(2, false), (3, true)]),
            dispatch(3, &[(3, false), (1, false), (4, true)]),
        ];
        let plan = plan_memory(&storages, &d);
        assert_eq!(plan.slot_of[6], None);
        // t2 is dead after dispatch 2 but t3 starts at dispatch 2: no reuse between them; t1
        // lives to the end. Three temp buffers, t3 grows none of them.
        let temps: Vec<_> = [1, 2, 3].iter().map(|&s| plan.slot_of[s]).collect();
        assert!(temps.iter().all(Option::is_some));
        assert_eq!(plan.report.intermediates_unshared, 64 + 32 + 128);
        assert_eq!(plan.report.intermediates, 64 + 32 + 128);
        assert_eq!(plan.report.weights, 16);
        assert_eq!(plan.report.io, 128);

        // A chain: each temp dies right after its reader, so two buffers alternate.
        let storages = vec![
            storage(StorageKind::Input, 64),
            storage(StorageKind::Temp, 64),
            storage(StorageKind::Temp, 64),
            storage(StorageKind::Temp, 96),
            storage(StorageKind::Output, 64),
        ];
        let d = vec![
            dispatch(0, &[(0, false), (1, true)]),
            dispatch(1, &[(1, false), (2, true)]),
            dispatch(2, &[(2, false), (3, true)]),
            dispatch(3, &[(3, false), (4, true)]),
        ];
        let plan = plan_memory(&storages, &d);
        assert_eq!(plan.slot_of[1], plan.slot_of[3]);
        assert_ne!(plan.slot_of[1], plan.slot_of[2]);
        // The reused buffer grew to the larger tensor.
        assert_eq!(plan.report.intermediates, 96 + 64);

        // The same chain of in-place kernels needs one buffer.
        let d: Vec<Dispatch> = d
            .into_iter()
            .map(|x| Dispatch {
                in_place: true,
                ..x
            })
            .collect();
        let plan = plan_memory(&storages, &d);
        assert_eq!(plan.slot_of[1], plan.slot_of[2]);
        assert_eq!(plan.slot_of[2], plan.slot_of[3]);
        assert_eq!(plan.report.intermediates, 96);
    }

    #[test]
    fn foreign_pipeline_cache_data_is_ignored() {
        let mut header = vec![32u8, 0, 0, 0, 1, 0, 0, 0];
        header.extend(0x10de_u32.to_le_bytes());
        header.extend(0x2335_u32.to_le_bytes());
        header.extend([0u8; 16]);
        assert!(cache_header_matches(&header, 0x10de, 0x2335));
        assert!(!cache_header_matches(&header, 0x10005, 0));
        assert!(!cache_header_matches(&header[..20], 0x10de, 0x2335));
        assert!(!cache_header_matches(b"garbage", 0x10de, 0x2335));
        assert!(!cache_header_matches(&[], 0, 0));
    }

    #[test]
    fn barriers_follow_read_after_write_and_write_after_read() {
        let id = |s: usize| s;
        let d = vec![
            dispatch(0, &[(0, false), (1, true)]),             // writes 1
            dispatch(1, &[(0, false), (2, true)]),             // independent: no barrier
            dispatch(2, &[(1, false), (2, false), (3, true)]), // reads 1, 2: barrier
            dispatch(3, &[(0, false), (1, true)]), // writes 1 after it was read: barrier
            dispatch(4, &[(0, false), (5, true)]), // independent
            dispatch(4, &[(0, false), (5, true)]), // same node, disjoint writes: none
            dispatch(5, &[(0, false), (5, true)]), // another node writes 5: barrier
        ];
        assert_eq!(
            barriers(&d, &id),
            vec![false, false, true, true, false, false, true]
        );
    }
}
