//! Command recording: the segments with barriers between them (into any command buffer), and
//! the model's two command buffers recorded at load: the host one ([staging in] segments
//! [staging out], then the host-read barrier) and the device-only one (segments alone).

use std::ptr;

use vk_core::arm;
use vk_core::vk;

use super::{HOST_CB, Model};
use crate::error::Result;
use crate::format::ModuleType;

/// A global memory barrier (synchronization2: the data-graph stage has no
/// `VkPipelineStageFlags` bit).
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

const READ_WRITE: vk::AccessFlags2 = vk::AccessFlags2::from_raw(
    vk::AccessFlags2::MEMORY_READ.as_raw() | vk::AccessFlags2::MEMORY_WRITE.as_raw(),
);

impl Model {
    /// Pipeline stages the segments run in.
    pub(super) fn segment_stages(&self) -> vk::PipelineStageFlags2 {
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
    pub unsafe fn record_into(&self, cb: vk::CommandBuffer) {
        let d = self.objects.device.raw();
        let stages = self.segment_stages();
        for i in 0..self.runs.len() {
            if i > 0 {
                barrier(
                    d,
                    cb,
                    (stages, vk::AccessFlags2::MEMORY_WRITE),
                    (stages, READ_WRITE),
                );
            }
            // SAFETY: forwarded contract.
            unsafe { self.record_segment(cb, i) };
        }
    }

    /// [`Model::record_into`] under its earlier name.
    ///
    /// # Safety
    /// As [`Model::record_into`].
    pub unsafe fn record_segments(&self, cb: vk::CommandBuffer) {
        // SAFETY: forwarded contract.
        unsafe { self.record_into(cb) }
    }

    /// Records segment `i`: pipeline, sets, zero-filled push constants, dispatch.
    ///
    /// # Safety
    /// As [`Model::record_into`].
    unsafe fn record_segment(&self, cb: vk::CommandBuffer, i: usize) {
        let d = self.objects.device.raw();
        let run = &self.runs[i];
        let zeros = [0u8; 256];
        let bind_point = match run.kind {
            ModuleType::Graph => arm::PIPELINE_BIND_POINT_DATA_GRAPH_ARM,
            ModuleType::Compute => vk::PipelineBindPoint::COMPUTE,
        };
        // SAFETY: pipeline, layout and sets are live objects of this model; `cb` is
        // recording (caller's contract).
        unsafe {
            d.cmd_bind_pipeline(cb, bind_point, run.pipeline);
            for ((set_index, _, _), set) in run.sets.iter().zip(&self.sets[i]) {
                d.cmd_bind_descriptor_sets(cb, bind_point, run.layout, *set_index, &[*set], &[]);
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

    /// Records the submission's command buffer `index`: the host one ([`HOST_CB`]: staging
    /// copies and the host-read barrier) or the device-only one.
    pub(super) fn record(&mut self, index: usize) -> Result<()> {
        let host = index == HOST_CB;
        let cb = self.submission.begin(index)?;
        let d = self.objects.device.raw();
        let stages = self.segment_stages();
        let staged = host
            && (self.input_io.iter())
                .chain(&self.output_io)
                .any(|io| io.staging.is_some());
        if staged {
            self.record_staging_copies(cb, true);
            barrier(
                d,
                cb,
                (
                    vk::PipelineStageFlags2::COPY,
                    vk::AccessFlags2::TRANSFER_WRITE,
                ),
                (stages, READ_WRITE),
            );
        }
        // SAFETY: `cb` is recording, on this model's device and queue family.
        unsafe { self.record_into(cb) };
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
            self.record_staging_copies(cb, false);
        }
        if host {
            // SAFETY: `cb` is recording, outside a render pass, on this model's device.
            unsafe { vk_core::barrier::host_read_barrier(&self.objects.device, cb) };
        }
        self.submission.end(index)?;
        Ok(())
    }

    /// Copies from the input staging buffers (`inputs`), or to the output ones.
    fn record_staging_copies(&self, cb: vk::CommandBuffer, inputs: bool) {
        let d = self.objects.device.raw();
        let ios = if inputs {
            &self.input_io
        } else {
            &self.output_io
        };
        for io in ios {
            let Some(s) = io.staging else { continue };
            let region = [vk::BufferCopy::default().size(io.bytes as u64)];
            let staging = self.objects.staging[s].raw();
            let tensor = self.objects.buffers[io.mrt];
            let (src, dst) = if inputs {
                (staging, tensor)
            } else {
                (tensor, staging)
            };
            // SAFETY: both buffers are live and at least `bytes` long; `cb` is recording.
            unsafe { d.cmd_copy_buffer(cb, src, dst, &region) };
        }
    }
}
