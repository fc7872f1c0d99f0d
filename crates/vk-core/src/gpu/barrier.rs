//! Memory barriers by name: where writes come from and who reads them next.
//!
//! Every delegate records the same few dependencies (host writes before a copy, a copy before
//! a dispatch, a dispatch before the next, anything before the host reads); naming them here
//! keeps stage and access masks consistent across the workspace.

use ash::vk;

use crate::device::device::Device;

/// One side of a dependency: pipeline stages and the accesses they make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// Stages.
    pub stage: vk::PipelineStageFlags,
    /// Accesses.
    pub access: vk::AccessFlags,
}

impl Access {
    /// The host writing mapped memory (before the submission).
    pub const HOST_WRITE: Access = Access {
        stage: vk::PipelineStageFlags::HOST,
        access: vk::AccessFlags::HOST_WRITE,
    };
    /// The host reading mapped memory (after the fence wait).
    pub const HOST_READ: Access = Access {
        stage: vk::PipelineStageFlags::HOST,
        access: vk::AccessFlags::HOST_READ,
    };
    /// Copies writing.
    pub const TRANSFER_WRITE: Access = Access {
        stage: vk::PipelineStageFlags::TRANSFER,
        access: vk::AccessFlags::TRANSFER_WRITE,
    };
    /// Copies reading.
    pub const TRANSFER_READ: Access = Access {
        stage: vk::PipelineStageFlags::TRANSFER,
        access: vk::AccessFlags::TRANSFER_READ,
    };
    /// Compute shaders writing.
    pub const SHADER_WRITE: Access = Access {
        stage: vk::PipelineStageFlags::COMPUTE_SHADER,
        access: vk::AccessFlags::SHADER_WRITE,
    };
    /// Compute shaders reading and writing.
    pub const SHADER_READ_WRITE: Access = Access {
        stage: vk::PipelineStageFlags::COMPUTE_SHADER,
        access: vk::AccessFlags::from_raw(
            vk::AccessFlags::SHADER_READ.as_raw() | vk::AccessFlags::SHADER_WRITE.as_raw(),
        ),
    };
    /// Any command writing memory.
    pub const ANY_WRITE: Access = Access {
        stage: vk::PipelineStageFlags::ALL_COMMANDS,
        access: vk::AccessFlags::MEMORY_WRITE,
    };
    /// Any command reading or writing memory.
    pub const ANY: Access = Access {
        stage: vk::PipelineStageFlags::ALL_COMMANDS,
        access: vk::AccessFlags::from_raw(
            vk::AccessFlags::MEMORY_READ.as_raw() | vk::AccessFlags::MEMORY_WRITE.as_raw(),
        ),
    };
}

impl Access {
    /// Both accesses: their stages and access kinds together.
    pub const fn and(self, other: Access) -> Access {
        Access {
            stage: vk::PipelineStageFlags::from_raw(self.stage.as_raw() | other.stage.as_raw()),
            access: vk::AccessFlags::from_raw(self.access.as_raw() | other.access.as_raw()),
        }
    }
}

/// Records a global memory barrier making `from`'s writes available and visible to `to`.
///
/// # Safety
/// `cmd` must be a command buffer of `device` in the recording state, outside a render pass,
/// on a queue family that supports both sides' stages.
pub unsafe fn memory_barrier(device: &Device, cmd: vk::CommandBuffer, from: Access, to: Access) {
    let barrier = [vk::MemoryBarrier::default()
        .src_access_mask(from.access)
        .dst_access_mask(to.access)];
    // SAFETY: the caller's contract.
    unsafe {
        device.raw().cmd_pipeline_barrier(
            cmd,
            from.stage,
            to.stage,
            vk::DependencyFlags::empty(),
            &barrier,
            &[],
            &[],
        )
    };
}

/// The barrier that ends every recorded execution whose results the host reads: all writes
/// of the command buffer made visible to host reads (a fence wait alone does not).
///
/// # Safety
/// As [`memory_barrier`].
pub unsafe fn host_read_barrier(device: &Device, cmd: vk::CommandBuffer) {
    // SAFETY: forwarded contract.
    unsafe { memory_barrier(device, cmd, Access::ANY_WRITE, Access::HOST_READ) };
}
