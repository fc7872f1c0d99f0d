//! Device memory through vk-mem: one allocator per [`Device`], shared by every delegate on it.
//!
//! The allocator lives in the device's shared state and is destroyed just before the device.
//! Every [`Buffer`] and [`MemoryBlock`] holds a [`Device`], so whatever the user drops first,
//! allocations go before the allocator and the allocator before the device.
//!
//! Mapped allocations are persistently mapped; [`Buffer::write`] flushes and [`Buffer::read`]
//! invalidates when the memory type is not host-coherent, so callers never think about it.
//!
//! [`HostIo::for_device`] is the one rule for where host inputs and outputs live: mapped
//! device memory where device memory is the host's own memory, device-local memory reached
//! through [`crate::gpu::transfer`] elsewhere.

use std::fmt;

use ash::vk;
use vk_mem::Alloc as _;

use crate::device::conv::DeviceType;
use crate::device::device::Device;
use crate::error::{Error, VkError};

/// A range of a device buffer, with the memory it is bound to (so that a consumer can also
/// bind a resource of its own, such as a `VK_ARM_tensors` tensor, to the same bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferSlice {
    /// The buffer.
    pub buffer: vk::Buffer,
    /// Offset of the range in `buffer`.
    pub offset: vk::DeviceSize,
    /// Size of the range in bytes.
    pub size: vk::DeviceSize,
    /// The memory `buffer` is bound to.
    pub memory: vk::DeviceMemory,
    /// Offset of the range in `memory`.
    pub memory_offset: vk::DeviceSize,
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
    /// The rule, which [`crate::HostPath::rule`] follows: direct where device memory is the
    /// host's own memory (CPU drivers and integrated GPUs with a device-local, host-visible
    /// heap of at least 64 MiB), staged on discrete GPUs, where host reads of device memory
    /// through the PCIe BAR are slow even when it is mapped (resizable BAR). Owners that
    /// honour the `VKDELEGATE_HOST_PATH` override use [`crate::HostPath::for_device`] and
    /// [`crate::HostPath::io`].
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
        // not use the range now (callers write only between fence waits), and `&mut self`
        // excludes every other host access to it.
        let dst = unsafe {
            std::slice::from_raw_parts_mut(self.mapped().add(offset as usize), data.len())
        };
        copy_bytes(dst, data);
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
        // caller waited for the fence after a host-read barrier) and host writes need
        // `&mut self`, so nothing writes the range while this shared view lives.
        let src =
            unsafe { std::slice::from_raw_parts(self.mapped().add(offset as usize), out.len()) };
        copy_bytes(out, src);
        Ok(())
    }
}

/// Copies at or above this many bytes are split across threads ([`copy_bytes`]).
pub(crate) const PARALLEL_COPY_MIN: usize = 16 << 20;

/// The environment variable that sets how many threads share a large host copy (mapped writes
/// and reads, staged transfers): a count from 1 (one `memcpy`) to 64, read once per process.
/// Unset: the host's parallelism, at most sixteen.
pub const COPY_THREADS_ENV: &str = "VKDELEGATE_COPY_THREADS";

/// The threads [`copy_bytes`] may use: [`COPY_THREADS_ENV`] when it holds a count in range
/// (anything else is ignored with a warning, once), else the host's parallelism up to sixteen.
/// Measured on an NVIDIA H200 host (16 cores): staged transfers of 256 MiB ran at 13-14 GB/s
/// with 4 threads, 21-23 with 8 and 26-28 with 16.
fn copy_threads() -> usize {
    let default = std::thread::available_parallelism().map_or(1, |n| n.get().min(16));
    match std::env::var(COPY_THREADS_ENV) {
        Err(_) => default,
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n @ 1..=64) => n,
            _ => {
                log::warn!("{COPY_THREADS_ENV}={v:?} is not a count from 1 to 64; ignored");
                default
            }
        },
    }
}

/// The process's pool of [`copy_threads`] threads for large host copies, made on first use
/// and kept: a staged transfer copies one chunk after another, and starting threads for
/// each chunk cost a tenth of a 64 MiB copy. `None` where the pool cannot be made (or one
/// thread is asked for): copies then run on the calling thread.
fn copy_pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: std::sync::OnceLock<Option<rayon::ThreadPool>> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        let threads = copy_threads();
        if threads < 2 {
            return None;
        }
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("vk-core copy {i}"))
            .build()
            .map_err(|e| log::warn!("no host copy threads ({e}); copying on one thread"))
            .ok()
    })
    .as_ref()
}

/// Copies `src` into `dst` (same length): one `memcpy` below [`PARALLEL_COPY_MIN`] bytes,
/// else split into parts of at least 4 MiB copied on the [`copy_pool`]'s threads. One thread
/// rarely saturates the memory bus: on large hosts a single `memcpy` into write-combined or
/// freshly mapped memory runs at a fraction of what the bus takes.
///
/// # Panics
/// When the lengths differ (a bug of the caller: every caller checks the range first).
pub(crate) fn copy_bytes(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_bytes: lengths differ");
    let Some(pool) = copy_pool().filter(|_| src.len() >= PARALLEL_COPY_MIN) else {
        dst.copy_from_slice(src);
        return;
    };
    // At least four parts: the copy is 16 MiB or more.
    let parts = (src.len() / (4 << 20)).min(pool.current_num_threads());
    let part = src.len().div_ceil(parts);
    pool.scope(|scope| {
        for (d, s) in dst.chunks_mut(part).zip(src.chunks(part)) {
            scope.spawn(move |_| d.copy_from_slice(s));
        }
    });
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
        if let Some(r) = device.take_allocation_fault() {
            return Err(allocation_error(what, size, r));
        }
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
        if let Some(r) = device.take_allocation_fault() {
            return Err(allocation_error(what, requirements.size, r));
        }
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

/// What `VK_EXT_external_memory_host` needs of a range of host memory to import it.
#[derive(Clone, Copy)]
pub(crate) struct ImportSupport {
    get_properties: vk::PFN_vkGetMemoryHostPointerPropertiesEXT,
    /// `minImportedHostPointerAlignment`: pointer and size of an import are multiples of it.
    pub(crate) alignment: u64,
}

impl ImportSupport {
    /// The entry point and alignment, when the device has the extension enabled.
    pub(crate) fn of(device: &Device) -> Option<ImportSupport> {
        let name = ash::ext::external_memory_host::NAME;
        if !device.enabled().has_extension(name) {
            return None;
        }
        let instance = device.instance().raw();
        // SAFETY: the device is live and the extension enabled on it; the name is a
        // NUL-terminated entry point of that extension.
        let f = unsafe {
            instance.get_device_proc_addr(
                device.raw().handle(),
                c"vkGetMemoryHostPointerPropertiesEXT".as_ptr(),
            )
        }?;
        // SAFETY: the loader returned this entry point for this name, whose signature is
        // `PFN_vkGetMemoryHostPointerPropertiesEXT`.
        let get_properties: vk::PFN_vkGetMemoryHostPointerPropertiesEXT =
            unsafe { std::mem::transmute(f) };
        let mut host = vk::PhysicalDeviceExternalMemoryHostPropertiesEXT::default();
        let mut props = vk::PhysicalDeviceProperties2::default().push_next(&mut host);
        // SAFETY: a live physical device; the chain holds one structure its enabled
        // extension defines.
        unsafe { instance.get_physical_device_properties2(device.physical(), &mut props) };
        let alignment = host.min_imported_host_pointer_alignment;
        (alignment.is_power_of_two()).then_some(ImportSupport {
            get_properties,
            alignment,
        })
    }
}

/// A buffer over host memory of the caller's, imported with `VK_EXT_external_memory_host`:
/// the device reads and writes it in place, so no staging copy is needed.
///
/// The import covers whole pages: the start is aligned down and the end up to
/// `minImportedHostPointerAlignment` ([`ImportedBuffer::offset`] is where the caller's bytes
/// start in the buffer). The pages around the caller's range may hold other data of the
/// process: that is sound because the device only touches the bytes of the copy regions the
/// owner records (within the caller's range), and the pages stay mapped while the buffer
/// lives (the caller's borrow outlives it; it is destroyed before the borrow ends). When the
/// alignment exceeds the page size the widened range may reach pages that are not mapped; the
/// driver then refuses the import and the caller falls back.
///
/// Device memory is allocated here with `vkAllocateMemory`, outside vk-mem, which cannot
/// import host pointers; it is the one such allocation in the workspace.
pub(crate) struct ImportedBuffer {
    raw: vk::Buffer,
    memory: vk::DeviceMemory,
    offset: u64,
    device: Device,
}

impl fmt::Debug for ImportedBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ImportedBuffer")
            .field("raw", &self.raw)
            .field("offset", &self.offset)
            .finish()
    }
}

const HOST_ALLOCATION: vk::ExternalMemoryHandleTypeFlags =
    vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT;

impl ImportedBuffer {
    /// Imports the pages holding `len` bytes at `ptr` as a transfer source and destination.
    /// Errors say why the range cannot be imported (the caller falls back to staging).
    ///
    /// # Safety
    /// `ptr .. ptr + len` must be one live allocation of the process that stays allocated,
    /// and that no one frees or remaps, until the buffer is dropped; the device must not use
    /// the buffer after the owner's borrow of the range ends (the owner waits first).
    pub(crate) unsafe fn new(
        device: &Device,
        support: ImportSupport,
        ptr: *const u8,
        len: usize,
    ) -> Result<ImportedBuffer, Error> {
        let align = support.alignment;
        let start = (ptr as u64) & !(align - 1);
        let offset = ptr as u64 - start;
        let size = (offset + len as u64).div_ceil(align) * align;
        let base = ptr.wrapping_sub(offset as usize);
        let mut props = vk::MemoryHostPointerPropertiesEXT::default();
        // SAFETY: a live device with the extension enabled; `base` is aligned as required
        // and points into the caller's live allocation's pages.
        let r = unsafe {
            (support.get_properties)(
                device.raw().handle(),
                HOST_ALLOCATION,
                base.cast(),
                &mut props,
            )
        };
        if r != vk::Result::SUCCESS {
            return Err(VkError::new("vkGetMemoryHostPointerPropertiesEXT", r).into());
        }
        let mut b = ImportedBuffer {
            raw: vk::Buffer::null(),
            memory: vk::DeviceMemory::null(),
            offset,
            device: device.clone(),
        };
        b.create_buffer(size)?;
        // SAFETY: `b.raw` is live.
        let req = unsafe { device.raw().get_buffer_memory_requirements(b.raw) };
        let wanted = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
        let type_bits = props.memory_type_bits & req.memory_type_bits;
        let index = device
            .capabilities()
            .memory
            .find(type_bits, wanted)
            .filter(|_| req.size <= size)
            .ok_or(Error::NoMemoryType { type_bits, wanted })?;
        // SAFETY: `base .. base + size` is the caller's live range widened to whole pages.
        unsafe { b.import(base, size, index) }?;
        // SAFETY: buffer and memory are live, unbound, and the memory holds the buffer.
        unsafe { device.raw().bind_buffer_memory(b.raw, b.memory, 0) }
            .map_err(|r| VkError::new("vkBindBufferMemory", r))?;
        Ok(b)
    }

    fn create_buffer(&mut self, size: u64) -> Result<(), Error> {
        let mut external =
            vk::ExternalMemoryBufferCreateInfo::default().handle_types(HOST_ALLOCATION);
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST)
            .sharing_mode(vk::SharingMode::EXCLUSIVE)
            .push_next(&mut external);
        // SAFETY: valid create info; destroyed in `Drop`.
        self.raw = unsafe { self.device.raw().create_buffer(&info, None) }
            .map_err(|r| VkError::new("vkCreateBuffer", r))?;
        Ok(())
    }

    /// # Safety
    /// `base .. base + size` is live host memory, aligned as the import requires.
    unsafe fn import(&mut self, base: *const u8, size: u64, index: u32) -> Result<(), Error> {
        if let Some(r) = self
            .device
            .take_fault(crate::device::fault::FaultPoint::Import)
        {
            return Err(VkError::new("vkAllocateMemory (host import)", r).into());
        }
        let mut import = vk::ImportMemoryHostPointerInfoEXT::default()
            .handle_type(HOST_ALLOCATION)
            .host_pointer(base.cast_mut().cast());
        let info = vk::MemoryAllocateInfo::default()
            .allocation_size(size)
            .memory_type_index(index)
            .push_next(&mut import);
        // SAFETY: the caller's contract covers the pointer; the memory type allows the import
        // (from vkGetMemoryHostPointerPropertiesEXT); freed in `Drop`.
        self.memory = unsafe { self.device.raw().allocate_memory(&info, None) }
            .map_err(|r| VkError::new("vkAllocateMemory (host import)", r))?;
        Ok(())
    }

    /// The raw buffer.
    pub(crate) fn raw(&self) -> vk::Buffer {
        self.raw
    }

    /// Where the caller's first byte is in the buffer.
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }
}

impl Drop for ImportedBuffer {
    fn drop(&mut self) {
        let d = self.device.raw();
        // SAFETY: created from this device, destroyed once; the owner waited for every use
        // (or leaked the buffer with `mem::forget` when it could not).
        unsafe {
            d.destroy_buffer(self.raw, None);
            d.free_memory(self.memory, None);
        }
    }
}
