//! Device memory through vk-mem.
//!
//! [`Allocator`] owns the `VmaAllocator` and a clone of the [`Device`], declared after it, so the
//! allocator is destroyed before the device can be. Every [`Buffer`] holds an `Arc` of its
//! allocator: whatever the user drops first, buffers go before the allocator and the allocator
//! before the device.

use std::fmt;
use std::sync::Arc;

use vk_core::{Device, DeviceType, Version, vk};
use vk_mem::Alloc as _;

use crate::error::{Error, Result};

/// The vk-mem allocator of one device.
pub struct Allocator {
    // Field order is drop order: the allocator before the device it was made from.
    raw: vk_mem::Allocator,
    device: Device,
    unified: bool,
}

impl fmt::Debug for Allocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Allocator")
            .field("device", &self.device.capabilities().name)
            .field("unified", &self.unified)
            .finish()
    }
}

/// Where a buffer lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MemKind {
    /// Device-local, not necessarily host-visible.
    Device,
    /// Device-local and mapped (unified-memory devices only).
    DeviceMapped,
    /// Host memory, mapped, for staging.
    Staging,
}

impl Allocator {
    /// An allocator for `device`.
    pub fn new(device: &Device) -> Result<Arc<Allocator>> {
        let api = device.enabled().api_version.min(Version::V1_3);
        let mut info = vk_mem::AllocatorCreateInfo::new(
            device.instance().raw(),
            device.raw(),
            device.physical(),
        );
        info.vulkan_api_version = vk::make_api_version(0, api.major(), api.minor(), 0);
        // SAFETY: instance, device and physical device are live and stay live as long as the
        // allocator: it holds a clone of `device` (which holds the instance) and is dropped
        // before it.
        let raw = unsafe { vk_mem::Allocator::new(info) }.map_err(|result| Error::Alloc {
            what: "the allocator".into(),
            bytes: 0,
            result,
        })?;
        let caps = device.capabilities();
        // Direct host mapping of device buffers only where device memory is the host's own
        // memory (CPU drivers, integrated GPUs); discrete GPUs go through staging buffers.
        let unified = matches!(caps.device_type, DeviceType::Cpu | DeviceType::Integrated)
            && caps.memory.has_unified(64 << 20);
        Ok(Arc::new(Allocator {
            raw,
            device: device.clone(),
            unified,
        }))
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Whether device buffers can be mapped directly (no staging).
    pub fn unified(&self) -> bool {
        self.unified
    }
}

/// A buffer and its memory.
pub struct Buffer {
    raw: vk::Buffer,
    allocation: vk_mem::Allocation,
    size: u64,
    mapped: *mut u8,
    coherent: bool,
    alloc: Arc<Allocator>,
}

// SAFETY: the mapped pointer is only dereferenced through `&mut self` methods (writes) or
// `&self` reads of memory the GPU is not writing (after a fence wait); the allocation handle is
// thread-safe in vk-mem.
unsafe impl Send for Buffer {}
// SAFETY: as above; shared references only read.
unsafe impl Sync for Buffer {}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer")
            .field("raw", &self.raw)
            .field("size", &self.size)
            .field("mapped", &!self.mapped.is_null())
            .finish()
    }
}

impl Buffer {
    /// A buffer of `size` bytes (at least 16) for `what` (error messages).
    pub(crate) fn new(
        alloc: &Arc<Allocator>,
        size: u64,
        kind: MemKind,
        usage: vk::BufferUsageFlags,
        what: &str,
    ) -> Result<Buffer> {
        let size = size.max(16);
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(usage)
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        let create = match kind {
            MemKind::Device => vk_mem::AllocationCreateInfo {
                usage: vk_mem::MemoryUsage::AutoPreferDevice,
                ..Default::default()
            },
            MemKind::DeviceMapped => vk_mem::AllocationCreateInfo {
                usage: vk_mem::MemoryUsage::AutoPreferDevice,
                flags: vk_mem::AllocationCreateFlags::MAPPED
                    | vk_mem::AllocationCreateFlags::HOST_ACCESS_RANDOM,
                required_flags: vk::MemoryPropertyFlags::DEVICE_LOCAL
                    | vk::MemoryPropertyFlags::HOST_VISIBLE,
                ..Default::default()
            },
            MemKind::Staging => vk_mem::AllocationCreateInfo {
                usage: vk_mem::MemoryUsage::AutoPreferHost,
                flags: vk_mem::AllocationCreateFlags::MAPPED
                    | vk_mem::AllocationCreateFlags::HOST_ACCESS_RANDOM,
                required_flags: vk::MemoryPropertyFlags::HOST_VISIBLE,
                ..Default::default()
            },
        };
        // SAFETY: valid create infos; the allocator is live.
        let (raw, allocation) =
            unsafe { alloc.raw.create_buffer(&info, &create) }.map_err(|result| Error::Alloc {
                what: what.to_string(),
                bytes: size,
                result,
            })?;
        let ai = alloc.raw.get_allocation_info(&allocation);
        let flags = alloc
            .device
            .capabilities()
            .memory
            .types
            .get(ai.memory_type as usize)
            .map(|t| t.flags)
            .unwrap_or_default();
        Ok(Buffer {
            raw,
            allocation,
            size,
            mapped: ai.mapped_data.cast::<u8>(),
            coherent: flags.contains(vk::MemoryPropertyFlags::HOST_COHERENT),
            alloc: alloc.clone(),
        })
    }

    /// The raw handle.
    pub fn raw(&self) -> vk::Buffer {
        self.raw
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Whether the buffer is mapped.
    pub(crate) fn is_mapped(&self) -> bool {
        !self.mapped.is_null()
    }

    /// Writes `data` at the start of the mapped buffer and flushes it if memory is not coherent.
    ///
    /// # Panics
    /// Never: a too-long write or an unmapped buffer is an error.
    pub(crate) fn write(&mut self, data: &[u8]) -> Result<()> {
        if self.mapped.is_null() || data.len() as u64 > self.size {
            return Err(Error::Graph(format!(
                "internal: write of {} bytes into a {}-byte buffer (mapped: {})",
                data.len(),
                self.size,
                !self.mapped.is_null()
            )));
        }
        // SAFETY: the mapping covers `size` bytes, `data` fits, and the GPU does not use the
        // buffer now (callers write only between fence waits).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.mapped, data.len()) };
        if !self.coherent {
            self.alloc
                .raw
                .flush_allocation(&self.allocation, 0, vk::WHOLE_SIZE)
                .map_err(|r| vk_core::VkError::new("vmaFlushAllocation", r))?;
        }
        Ok(())
    }

    /// Reads `out.len()` bytes from the start of the mapped buffer, invalidating first if memory
    /// is not coherent.
    pub(crate) fn read(&self, out: &mut [u8]) -> Result<()> {
        if self.mapped.is_null() || out.len() as u64 > self.size {
            return Err(Error::Graph(format!(
                "internal: read of {} bytes from a {}-byte buffer (mapped: {})",
                out.len(),
                self.size,
                !self.mapped.is_null()
            )));
        }
        if !self.coherent {
            self.alloc
                .raw
                .invalidate_allocation(&self.allocation, 0, vk::WHOLE_SIZE)
                .map_err(|r| vk_core::VkError::new("vmaInvalidateAllocation", r))?;
        }
        // SAFETY: the mapping covers `size` bytes; the GPU finished writing (fence waited, and
        // the recorded host barrier made the writes visible).
        unsafe { std::ptr::copy_nonoverlapping(self.mapped, out.as_mut_ptr(), out.len()) };
        Ok(())
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: the buffer and allocation were created together by this allocator and are
        // destroyed once; owners wait for their submitted work before dropping buffers.
        unsafe {
            self.alloc
                .raw
                .destroy_buffer(self.raw, &mut self.allocation)
        };
    }
}
