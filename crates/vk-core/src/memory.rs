//! Device memory through vk-mem: one allocator per [`Device`], shared by every delegate on it.
//!
//! The allocator lives in the device's shared state and is destroyed just before the device.
//! Every [`Buffer`] and [`MemoryBlock`] holds a [`Device`], so whatever the user drops first,
//! allocations go before the allocator and the allocator before the device.
//!
//! Mapped allocations are persistently mapped; [`Buffer::write`] flushes and [`Buffer::read`]
//! invalidates when the memory type is not host-coherent, so callers never think about it.
//!
//! [`HostIo::for_device`] is the one rule for how host inputs and outputs reach device
//! memory: mapped directly where device memory is the host's own memory, through staging
//! buffers elsewhere.

use std::fmt;

use ash::vk;
use vk_mem::Alloc as _;

use crate::conv::{DeviceType, Version};
use crate::device::Device;
use crate::error::{Error, VkError};
use crate::tensor::BufferSlice;

/// Makes the vk-mem allocator of `device` (called once, by [`Device`]). With `heap_limit`,
/// the allocator treats every memory heap as at most that many bytes (vk-mem's
/// `pHeapSizeLimit`): allocations beyond it fail as out of device memory without reaching the
/// driver (a test seam, [`crate::testing::device_with_heap_limit`]).
pub(crate) fn new_allocator(
    device: &Device,
    heap_limit: Option<u64>,
) -> Result<vk_mem::Allocator, vk::Result> {
    let api = device.enabled().api_version.min(Version::V1_3);
    let limits: Vec<vk::DeviceSize> = match heap_limit {
        Some(bytes) => vec![bytes; device.capabilities().memory.heaps.len()],
        None => Vec::new(),
    };
    let mut info =
        vk_mem::AllocatorCreateInfo::new(device.instance().raw(), device.raw(), device.physical());
    info.vulkan_api_version = vk::make_api_version(0, api.major(), api.minor(), 0);
    // One entry per heap of the physical device, as vk-mem requires (or none: no limit).
    info.heap_size_limits = &limits;
    // SAFETY: instance, device and physical device are live; the allocator is stored in the
    // device's shared state and destroyed before the device (see `DeviceShared::drop`).
    unsafe { vk_mem::Allocator::new(info) }
}

/// Where an allocation lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemoryLocation {
    /// Device-local, not necessarily host-visible.
    Device,
    /// Device-local and mapped (where such memory exists; see [`HostIo`]).
    DeviceMapped,
    /// Host memory, mapped: staging for uploads and read-backs.
    Host,
}

impl MemoryLocation {
    /// For memory without a resource (vk-mem's `AUTO` usages need one): explicit flags.
    fn raw_create_info(self) -> vk_mem::AllocationCreateInfo {
        let (required, preferred, flags) = match self {
            MemoryLocation::Device => (
                vk::MemoryPropertyFlags::empty(),
                vk::MemoryPropertyFlags::DEVICE_LOCAL,
                vk_mem::AllocationCreateFlags::empty(),
            ),
            MemoryLocation::DeviceMapped => (
                vk::MemoryPropertyFlags::DEVICE_LOCAL | vk::MemoryPropertyFlags::HOST_VISIBLE,
                vk::MemoryPropertyFlags::HOST_COHERENT,
                vk_mem::AllocationCreateFlags::MAPPED,
            ),
            MemoryLocation::Host => (
                vk::MemoryPropertyFlags::HOST_VISIBLE,
                vk::MemoryPropertyFlags::HOST_COHERENT | vk::MemoryPropertyFlags::HOST_CACHED,
                vk_mem::AllocationCreateFlags::MAPPED,
            ),
        };
        vk_mem::AllocationCreateInfo {
            usage: vk_mem::MemoryUsage::Unknown,
            flags,
            required_flags: required,
            preferred_flags: preferred,
            ..Default::default()
        }
    }

    /// For buffers. Every buffer's memory may be bound to other resources too (a consumer
    /// binds its tensor or buffer at [`BufferSlice::memory`]), so a buffer that gets memory of
    /// its own (vk-mem does so for large buffers, and when blocks run out) must not get it
    /// dedicated to that buffer (`VkMemoryDedicatedAllocateInfo`): `CAN_ALIAS` says so.
    fn create_info(self) -> vk_mem::AllocationCreateInfo {
        let alias = vk_mem::AllocationCreateFlags::CAN_ALIAS;
        let mapped = vk_mem::AllocationCreateFlags::MAPPED
            | vk_mem::AllocationCreateFlags::HOST_ACCESS_RANDOM
            | alias;
        match self {
            MemoryLocation::Device => vk_mem::AllocationCreateInfo {
                usage: vk_mem::MemoryUsage::AutoPreferDevice,
                flags: alias,
                ..Default::default()
            },
            MemoryLocation::DeviceMapped => vk_mem::AllocationCreateInfo {
                usage: vk_mem::MemoryUsage::AutoPreferDevice,
                flags: mapped,
                required_flags: vk::MemoryPropertyFlags::DEVICE_LOCAL
                    | vk::MemoryPropertyFlags::HOST_VISIBLE,
                ..Default::default()
            },
            MemoryLocation::Host => vk_mem::AllocationCreateInfo {
                usage: vk_mem::MemoryUsage::AutoPreferHost,
                flags: mapped,
                required_flags: vk::MemoryPropertyFlags::HOST_VISIBLE,
                ..Default::default()
            },
        }
    }
}

/// How host inputs and outputs reach device memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostIo {
    /// Device memory is mapped and written or read by the host directly.
    Direct,
    /// Through host staging buffers and device copies.
    Staged,
}

impl HostIo {
    /// The rule: direct where device memory is the host's own memory (CPU drivers and
    /// integrated GPUs with a device-local, host-visible heap of at least 64 MiB), staged on
    /// discrete GPUs, where host reads of device memory through the PCIe BAR are slow even
    /// when it is mapped (resizable BAR).
    pub fn for_device(device: &Device) -> HostIo {
        let caps = device.capabilities();
        if matches!(caps.device_type, DeviceType::Cpu | DeviceType::Integrated)
            && caps.memory.has_unified(64 << 20)
        {
            HostIo::Direct
        } else {
            HostIo::Staged
        }
    }

    /// Where tensors that the host reads or writes live under this rule.
    pub fn io_location(self) -> MemoryLocation {
        match self {
            HostIo::Direct => MemoryLocation::DeviceMapped,
            HostIo::Staged => MemoryLocation::Device,
        }
    }
}

/// One vk-mem allocation, possibly mapped.
struct Allocation {
    raw: vk_mem::Allocation,
    info: vk_mem::AllocationInfo,
    coherent: bool,
    device: Device,
}

impl Allocation {
    fn from_raw(device: &Device, vma: &vk_mem::Allocator, raw: vk_mem::Allocation) -> Allocation {
        let info = vma.get_allocation_info(&raw);
        let flags = device
            .capabilities()
            .memory
            .types
            .get(info.memory_type as usize)
            .map(|t| t.flags)
            .unwrap_or_default();
        Allocation {
            raw,
            info,
            coherent: flags.contains(vk::MemoryPropertyFlags::HOST_COHERENT),
            device: device.clone(),
        }
    }

    fn mapped(&self) -> *mut u8 {
        self.info.mapped_data.cast::<u8>()
    }

    fn check_range(&self, what: &str, offset: u64, len: usize, size: u64) -> Result<(), Error> {
        let end = offset.checked_add(len as u64);
        if self.mapped().is_null() || end.is_none_or(|e| e > size) {
            return Err(Error::InvalidArgument(format!(
                "{what} of {len} bytes at offset {offset} in a {size}-byte allocation (mapped: {})",
                !self.mapped().is_null()
            )));
        }
        Ok(())
    }

    fn write(&mut self, offset: u64, data: &[u8], size: u64) -> Result<(), Error> {
        self.check_range("write", offset, data.len(), size)?;
        // SAFETY: the mapping covers `size` bytes and the range fits (checked); the GPU does
        // not use the range now (callers write only between fence waits).
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.mapped().add(offset as usize),
                data.len(),
            )
        };
        if !self.coherent {
            self.device
                .vma()?
                .flush_allocation(&self.raw, offset, data.len() as u64)
                .map_err(|r| VkError::new("vmaFlushAllocation", r))?;
        }
        Ok(())
    }

    fn read(&self, offset: u64, out: &mut [u8], size: u64) -> Result<(), Error> {
        self.check_range("read", offset, out.len(), size)?;
        if !self.coherent {
            self.device
                .vma()?
                .invalidate_allocation(&self.raw, offset, out.len() as u64)
                .map_err(|r| VkError::new("vmaInvalidateAllocation", r))?;
        }
        // SAFETY: the mapping covers the range (checked); the GPU finished writing it (the
        // caller waited for the fence after a host-read barrier).
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.mapped().add(offset as usize),
                out.as_mut_ptr(),
                out.len(),
            )
        };
        Ok(())
    }
}

fn allocation_error(what: &str, bytes: u64, result: vk::Result) -> Error {
    Error::Allocation {
        what: what.to_owned(),
        bytes,
        result,
    }
}

/// A buffer and its memory, from the device's allocator.
pub struct Buffer {
    raw: vk::Buffer,
    size: u64,
    alloc: Allocation,
}

// SAFETY: the mapped pointer is dereferenced only through `&mut self` (writes) or `&self`
// reads of memory the GPU is not writing (after a fence wait); vk-mem allocations are
// thread-safe handles.
unsafe impl Send for Buffer {}
// SAFETY: as above; shared references only read.
unsafe impl Sync for Buffer {}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer")
            .field("raw", &self.raw)
            .field("size", &self.size)
            .field("mapped", &self.is_mapped())
            .finish()
    }
}

impl Buffer {
    /// A buffer of `size` bytes (at least 16) in `location`, for `what` (named in errors).
    pub fn new(
        device: &Device,
        size: u64,
        location: MemoryLocation,
        usage: vk::BufferUsageFlags,
        what: &str,
    ) -> Result<Buffer, Error> {
        let size = size.max(16);
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(usage)
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        let vma = device.vma()?;
        // SAFETY: valid create infos; the allocator is live (held by `device`).
        let (raw, allocation) = unsafe { vma.create_buffer(&info, &location.create_info()) }
            .map_err(|r| allocation_error(what, size, r))?;
        Ok(Buffer {
            raw,
            size,
            alloc: Allocation::from_raw(device, vma, allocation),
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
    pub fn is_mapped(&self) -> bool {
        !self.alloc.mapped().is_null()
    }

    /// The first `size` bytes of the buffer (the whole buffer when `None`).
    pub fn slice(&self, size: Option<u64>) -> BufferSlice {
        BufferSlice {
            buffer: self.raw,
            offset: 0,
            size: size.unwrap_or(self.size).min(self.size),
            memory: self.alloc.info.device_memory,
            memory_offset: self.alloc.info.offset,
        }
    }

    /// Writes `data` at `offset` of the mapped buffer, flushing non-coherent memory.
    pub fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), Error> {
        self.alloc.write(offset, data, self.size)
    }

    /// Reads `out.len()` bytes at `offset` of the mapped buffer, invalidating non-coherent
    /// memory first.
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), Error> {
        self.alloc.read(offset, out, self.size)
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if let Ok(vma) = self.alloc.device.vma() {
            // SAFETY: buffer and allocation were created together by this allocator and are
            // destroyed once; owners wait for their submitted work before dropping buffers.
            unsafe { vma.destroy_buffer(self.raw, &mut self.alloc.raw) };
        }
    }
}

/// Memory for a resource that is not a buffer (a `VK_ARM_tensors` tensor, an image), from the
/// device's allocator; the caller binds it at [`MemoryBlock::memory`] + [`MemoryBlock::offset`].
pub struct MemoryBlock {
    size: u64,
    alloc: Allocation,
}

// SAFETY: as for `Buffer`.
unsafe impl Send for MemoryBlock {}
// SAFETY: as for `Buffer`.
unsafe impl Sync for MemoryBlock {}

impl fmt::Debug for MemoryBlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBlock")
            .field("memory", &self.alloc.info.device_memory)
            .field("offset", &self.alloc.info.offset)
            .field("size", &self.size)
            .finish()
    }
}

impl MemoryBlock {
    /// Memory meeting `requirements` in `location`, for `what` (named in errors).
    pub fn new(
        device: &Device,
        requirements: &vk::MemoryRequirements,
        location: MemoryLocation,
        what: &str,
    ) -> Result<MemoryBlock, Error> {
        let vma = device.vma()?;
        // SAFETY: valid requirements and create info; the allocator is live.
        let raw = unsafe { vma.allocate_memory(requirements, &location.raw_create_info()) }
            .map_err(|r| allocation_error(what, requirements.size, r))?;
        Ok(MemoryBlock {
            size: requirements.size,
            alloc: Allocation::from_raw(device, vma, raw),
        })
    }

    /// The `VkDeviceMemory` the block is part of.
    pub fn memory(&self) -> vk::DeviceMemory {
        self.alloc.info.device_memory
    }

    /// The block's offset in [`MemoryBlock::memory`].
    pub fn offset(&self) -> vk::DeviceSize {
        self.alloc.info.offset
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Whether the block is mapped.
    pub fn is_mapped(&self) -> bool {
        !self.alloc.mapped().is_null()
    }

    /// Writes `data` at `offset` of the mapped block, flushing non-coherent memory.
    pub fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), Error> {
        self.alloc.write(offset, data, self.size)
    }

    /// Reads at `offset` of the mapped block, invalidating non-coherent memory first.
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), Error> {
        self.alloc.read(offset, out, self.size)
    }
}

impl Drop for MemoryBlock {
    fn drop(&mut self) {
        if let Ok(vma) = self.alloc.device.vma() {
            // SAFETY: allocated by this allocator, freed once; whatever was bound to it was
            // destroyed first by its owner, which waited for its work.
            unsafe { vma.free_memory(&mut self.alloc.raw) };
        }
    }
}
