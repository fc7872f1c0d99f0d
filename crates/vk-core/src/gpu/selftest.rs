//! A device self-test: one real compute dispatch round-trip through host-visible buffers
//! (`y = a * x + y`), checked on the host. It proves a device can compile a pipeline, bind
//! buffers, dispatch, synchronize and make results visible, and reports how long that took.

use std::time::{Duration, Instant};

use ash::vk;

use crate::device::device::Device;
use crate::error::Error;
use crate::gpu::barrier::host_read_barrier;
use crate::gpu::command::Submission;
use crate::gpu::kernel::Kernel;
use crate::gpu::memory::{Buffer, MemoryLocation};

/// The self-test shader's SPIR-V (`shaders/vk-core/selftest_saxpy.comp`).
pub const SAXPY_SPIRV: &[u8] = include_bytes!("../../spirv/selftest_saxpy.spv");

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

/// Points binding 0 and 1 of `set` at `buffers` (x, y).
fn write_set(device: &Device, set: vk::DescriptorSet, buffers: [vk::Buffer; 2]) {
    let infos = buffers.map(|b| {
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
    // SAFETY: writes reference a live set and live buffers; no submission uses the set yet.
    unsafe { device.raw().update_descriptor_sets(&writes, &[]) };
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

    // Buffers in mapped host memory (the self-test is about the dispatch path).
    let mut buffers = Vec::new();
    for (data, what) in [(&xs, "self-test x"), (&ys, "self-test y")] {
        let mut b = Buffer::new(
            device,
            bytes,
            MemoryLocation::Host,
            vk::BufferUsageFlags::STORAGE_BUFFER,
            what,
        )?;
        let raw: Vec<u8> = data.iter().flat_map(|v| v.to_ne_bytes()).collect();
        b.write(0, &raw)?;
        buffers.push(b);
    }

    // Declared before the submission, which is dropped first and waits for its work.
    let kernel = Kernel::new(
        device,
        SAXPY_SPIRV,
        &[vk::DescriptorType::STORAGE_BUFFER; 2],
        8,
    )?;
    let set = kernel.set;
    write_set(device, set, [buffers[0].raw(), buffers[1].raw()]);

    let mut submission = Submission::new(device, 1, "the self-test")?;
    let cmd = submission.begin(0)?;
    let mut params = [0u8; 8];
    params[..4].copy_from_slice(&a.to_ne_bytes());
    params[4..].copy_from_slice(&n.to_ne_bytes());
    // SAFETY: recording into a fresh primary command buffer; every handle is live and the
    // dispatch stays within the device's work-group count limit (checked below).
    unsafe {
        d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, kernel.pipeline);
        d.cmd_bind_descriptor_sets(
            cmd,
            vk::PipelineBindPoint::COMPUTE,
            kernel.layout,
            0,
            &[set],
            &[],
        );
        d.cmd_push_constants(
            cmd,
            kernel.layout,
            vk::ShaderStageFlags::COMPUTE,
            0,
            &params,
        );
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
        host_read_barrier(device, cmd);
    }
    submission.end(0)?;
    let start = Instant::now();
    // SAFETY: the command buffer is executable; no semaphores.
    unsafe { submission.submit(0, &[], &[]) }?;
    submission.wait()?;
    let submit_and_wait = start.elapsed();

    let mut raw = vec![0u8; bytes as usize];
    buffers[1].read(0, &mut raw)?;
    let out: Vec<f32> = raw
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
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
