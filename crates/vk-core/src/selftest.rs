//! A device self-test: one real compute dispatch round-trip through host-visible buffers
//! (`y = a * x + y`), checked on the host. It proves a device can compile a pipeline, bind
//! buffers, dispatch, synchronize and make results visible, and reports how long that took.

use std::time::{Duration, Instant};

use ash::vk;

use crate::device::Device;
use crate::error::{Error, VkResultExt};

/// The self-test shader's SPIR-V (`shaders/vk-core/selftest_saxpy.comp`).
pub const SAXPY_SPIRV: &[u8] = include_bytes!("../spirv/selftest_saxpy.spv");

const LOCAL_SIZE: u32 = 64;

/// What the self-test found.
#[derive(Debug, Clone, PartialEq)]
pub struct SelfTestReport {
    /// Number of elements processed.
    pub elements: u32,
    /// Elements whose result differs from the host reference.
    pub mismatches: u32,
    /// Largest absolute difference from the host reference.
    pub max_abs_error: f32,
    /// Wall time of submission and fence wait.
    pub submit_and_wait: Duration,
}

/// Objects created by the self-test, destroyed in reverse order whatever happens.
struct Scratch<'d> {
    device: &'d ash::Device,
    buffers: Vec<vk::Buffer>,
    memories: Vec<vk::DeviceMemory>,
    shader: vk::ShaderModule,
    set_layout: vk::DescriptorSetLayout,
    layout: vk::PipelineLayout,
    pipeline: vk::Pipeline,
    pool: vk::DescriptorPool,
    command_pool: vk::CommandPool,
    fence: vk::Fence,
}

impl Drop for Scratch<'_> {
    fn drop(&mut self) {
        let d = self.device;
        // SAFETY: every handle below was created from `d` by `run_saxpy`, is null or live, is
        // destroyed once, and no submitted work still uses it (the fence was waited for, or
        // nothing was submitted).
        unsafe {
            d.destroy_fence(self.fence, None);
            d.destroy_command_pool(self.command_pool, None);
            d.destroy_descriptor_pool(self.pool, None);
            d.destroy_pipeline(self.pipeline, None);
            d.destroy_pipeline_layout(self.layout, None);
            d.destroy_descriptor_set_layout(self.set_layout, None);
            d.destroy_shader_module(self.shader, None);
            for b in self.buffers.drain(..) {
                d.destroy_buffer(b, None);
            }
            for m in self.memories.drain(..) {
                d.free_memory(m, None);
            }
        }
    }
}

/// Runs `y = a * x + y` over `n` elements on `device` and checks the result on the host.
pub fn run_saxpy(device: &Device, n: u32) -> Result<SelfTestReport, Error> {
    if n == 0 {
        return Err(Error::InvalidArgument(
            "self-test needs at least one element".into(),
        ));
    }
    let d = device.raw();
    let caps = device.capabilities();
    let bytes = u64::from(n) * 4;
    if bytes > u64::from(caps.limits.max_storage_buffer_range) {
        return Err(Error::InvalidArgument(format!(
            "self-test buffer of {bytes} bytes exceeds maxStorageBufferRange {}",
            caps.limits.max_storage_buffer_range
        )));
    }
    let a = 2.5f32;
    let xs: Vec<f32> = (0..n).map(|i| (i % 97) as f32 * 0.5 - 7.0).collect();
    let ys: Vec<f32> = (0..n).map(|i| (i % 13) as f32 + 0.25).collect();

    let mut s = Scratch {
        device: d,
        buffers: Vec::new(),
        memories: Vec::new(),
        shader: vk::ShaderModule::null(),
        set_layout: vk::DescriptorSetLayout::null(),
        layout: vk::PipelineLayout::null(),
        pipeline: vk::Pipeline::null(),
        pool: vk::DescriptorPool::null(),
        command_pool: vk::CommandPool::null(),
        fence: vk::Fence::null(),
    };

    // Buffers in host-visible, coherent memory (the self-test is about the dispatch path).
    let host = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
    let mut ptrs = Vec::new();
    for data in [&xs, &ys] {
        let info = vk::BufferCreateInfo::default()
            .size(bytes)
            .usage(vk::BufferUsageFlags::STORAGE_BUFFER)
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: valid create info.
        let buffer = unsafe { d.create_buffer(&info, None) }.vk("vkCreateBuffer")?;
        s.buffers.push(buffer);
        // SAFETY: `buffer` is live.
        let req = unsafe { d.get_buffer_memory_requirements(buffer) };
        let type_index =
            caps.memory
                .find(req.memory_type_bits, host)
                .ok_or(Error::NoMemoryType {
                    type_bits: req.memory_type_bits,
                    wanted: host,
                })?;
        let alloc = vk::MemoryAllocateInfo::default()
            .allocation_size(req.size)
            .memory_type_index(type_index);
        // SAFETY: valid allocate info for an existing memory type.
        let memory = unsafe { d.allocate_memory(&alloc, None) }.vk("vkAllocateMemory")?;
        s.memories.push(memory);
        // SAFETY: fresh buffer and memory of a compatible type and sufficient size.
        unsafe { d.bind_buffer_memory(buffer, memory, 0) }.vk("vkBindBufferMemory")?;
        // SAFETY: the memory is host-visible and not mapped yet.
        let ptr = unsafe { d.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()) }
            .vk("vkMapMemory")?
            .cast::<f32>();
        // SAFETY: the mapping is at least `bytes` long and nothing else accesses it.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr, n as usize) };
        ptrs.push(ptr);
    }

    let code = ash::util::read_spv(&mut std::io::Cursor::new(SAXPY_SPIRV))
        .map_err(|e| Error::InvalidArgument(format!("embedded SPIR-V is unreadable: {e}")))?;
    // SAFETY: `code` is valid SPIR-V compiled by the xtask.
    s.shader =
        unsafe { d.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&code), None) }
            .vk("vkCreateShaderModule")?;

    let bindings = [0, 1].map(|b| {
        vk::DescriptorSetLayoutBinding::default()
            .binding(b)
            .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
            .descriptor_count(1)
            .stage_flags(vk::ShaderStageFlags::COMPUTE)
    });
    // SAFETY: valid create info.
    s.set_layout = unsafe {
        d.create_descriptor_set_layout(
            &vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings),
            None,
        )
    }
    .vk("vkCreateDescriptorSetLayout")?;
    let push = [vk::PushConstantRange::default()
        .stage_flags(vk::ShaderStageFlags::COMPUTE)
        .size(8)];
    let set_layouts = [s.set_layout];
    // SAFETY: valid create info.
    s.layout = unsafe {
        d.create_pipeline_layout(
            &vk::PipelineLayoutCreateInfo::default()
                .set_layouts(&set_layouts)
                .push_constant_ranges(&push),
            None,
        )
    }
    .vk("vkCreatePipelineLayout")?;
    let stage = vk::PipelineShaderStageCreateInfo::default()
        .stage(vk::ShaderStageFlags::COMPUTE)
        .module(s.shader)
        .name(c"main");
    let pinfo = [vk::ComputePipelineCreateInfo::default()
        .stage(stage)
        .layout(s.layout)];
    // SAFETY: valid create info referencing live module and layout.
    s.pipeline = unsafe { d.create_compute_pipelines(vk::PipelineCache::null(), &pinfo, None) }
        .map_err(|(_, e)| crate::error::VkError::new("vkCreateComputePipelines", e))?[0];

    let sizes = [vk::DescriptorPoolSize::default()
        .ty(vk::DescriptorType::STORAGE_BUFFER)
        .descriptor_count(2)];
    // SAFETY: valid create info.
    s.pool = unsafe {
        d.create_descriptor_pool(
            &vk::DescriptorPoolCreateInfo::default()
                .max_sets(1)
                .pool_sizes(&sizes),
            None,
        )
    }
    .vk("vkCreateDescriptorPool")?;
    // SAFETY: the pool has room for one set of this layout.
    let set = unsafe {
        d.allocate_descriptor_sets(
            &vk::DescriptorSetAllocateInfo::default()
                .descriptor_pool(s.pool)
                .set_layouts(&set_layouts),
        )
    }
    .vk("vkAllocateDescriptorSets")?[0];
    let infos = [s.buffers[0], s.buffers[1]].map(|b| {
        [vk::DescriptorBufferInfo::default()
            .buffer(b)
            .range(vk::WHOLE_SIZE)]
    });
    let writes = [
        vk::WriteDescriptorSet::default()
            .dst_set(set)
            .dst_binding(0)
            .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
            .buffer_info(&infos[0]),
        vk::WriteDescriptorSet::default()
            .dst_set(set)
            .dst_binding(1)
            .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
            .buffer_info(&infos[1]),
    ];
    // SAFETY: writes reference a live set and live buffers.
    unsafe { d.update_descriptor_sets(&writes, &[]) };

    let queue = device.queue();
    // SAFETY: valid create info for the device's queue family.
    s.command_pool = unsafe {
        d.create_command_pool(
            &vk::CommandPoolCreateInfo::default().queue_family_index(queue.family()),
            None,
        )
    }
    .vk("vkCreateCommandPool")?;
    // SAFETY: the pool is live.
    let cmd = unsafe {
        d.allocate_command_buffers(
            &vk::CommandBufferAllocateInfo::default()
                .command_pool(s.command_pool)
                .level(vk::CommandBufferLevel::PRIMARY)
                .command_buffer_count(1),
        )
    }
    .vk("vkAllocateCommandBuffers")?[0];

    let mut params = [0u8; 8];
    params[..4].copy_from_slice(&a.to_ne_bytes());
    params[4..].copy_from_slice(&n.to_ne_bytes());
    let to_host = [vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::MEMORY_WRITE)
        .dst_access_mask(vk::AccessFlags::HOST_READ)];
    // SAFETY: recording into a fresh primary command buffer; every handle is live and the
    // dispatch stays within the device's work-group count limit (checked below).
    unsafe {
        d.begin_command_buffer(
            cmd,
            &vk::CommandBufferBeginInfo::default()
                .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT),
        )
        .vk("vkBeginCommandBuffer")?;
        d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, s.pipeline);
        d.cmd_bind_descriptor_sets(
            cmd,
            vk::PipelineBindPoint::COMPUTE,
            s.layout,
            0,
            &[set],
            &[],
        );
        d.cmd_push_constants(cmd, s.layout, vk::ShaderStageFlags::COMPUTE, 0, &params);
    }
    let groups = n.div_ceil(LOCAL_SIZE);
    if groups > caps.limits.max_compute_work_group_count[0] {
        return Err(Error::InvalidArgument(format!(
            "self-test needs {groups} work groups, the device allows {}",
            caps.limits.max_compute_work_group_count[0]
        )));
    }
    // SAFETY: as above; the barrier makes shader writes visible to host reads after the fence.
    unsafe {
        d.cmd_dispatch(cmd, groups, 1, 1);
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
    // SAFETY: valid create info.
    s.fence =
        unsafe { d.create_fence(&vk::FenceCreateInfo::default(), None) }.vk("vkCreateFence")?;

    let cmds = [cmd];
    let submit = [vk::SubmitInfo::default().command_buffers(&cmds)];
    let start = Instant::now();
    {
        let guard = queue.lock();
        // SAFETY: the command buffer is executable, the fence unsignaled; the guard is held
        // only around the submission.
        unsafe { guard.submit(&submit, s.fence) }?;
    }
    // SAFETY: `s.fence` was created from this device above.
    unsafe { device.wait_for_fence(s.fence, u64::MAX) }?;
    let submit_and_wait = start.elapsed();

    // SAFETY: the fence wait and the host barrier make the writes visible; memory is coherent.
    let out = unsafe { std::slice::from_raw_parts(ptrs[1], n as usize) };
    let mut mismatches = 0;
    let mut max_abs_error = 0f32;
    for i in 0..n as usize {
        let want = a * xs[i] + ys[i];
        let err = (out[i] - want).abs();
        max_abs_error = max_abs_error.max(err);
        if err > 1e-5 * want.abs().max(1.0) {
            mismatches += 1;
        }
    }
    Ok(SelfTestReport {
        elements: n,
        mismatches,
        max_abs_error,
        submit_and_wait,
    })
}
