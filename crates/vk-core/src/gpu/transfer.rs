//! Host transfers: how the bytes of host inputs and outputs reach device buffers, chosen per
//! device ([`HostPath::for_device`]) and carried out by one [`HostTransfer`] per owner.
//!
//! - [`HostPath::Direct`]: device memory is mapped; the host writes and reads it in place
//!   (CPU drivers, integrated GPUs). Owners place their inputs and outputs in mapped memory
//!   ([`HostIo::Direct`]) and need no transfer.
//! - [`HostPath::Staged`]: through host staging buffers and device copies. A transfer of more
//!   than one chunk is pipelined over two staging buffers of `chunk` bytes, each with its own
//!   [`Submission`] (command buffer and fence): the host copies chunk `i + 1` into one while the
//!   device copies chunk `i` out of the other. Host copies of 16 MiB or more are split across
//!   threads. No queue or device is idled: each staging buffer's fence is waited on alone.
//! - [`HostPath::Imported`]: the caller's own memory is imported with
//!   `VK_EXT_external_memory_host` and copied by the device straight to or from the device
//!   buffer: no host copy at all. A range that cannot be imported (below [`HostPath::SMALL`],
//!   no extension, a refused import) goes through staging instead, said in a `log::debug!`.
//!
//! Transfers of at most [`HostPath::SMALL`] bytes, and staged ones of at most one chunk, are
//! best recorded by the owner into its own command buffer next to its work, through one
//! staging buffer of the tensor's size (no extra submission, no thread):
//! [`HostPath::transfers`] says which inputs and outputs go through a [`HostTransfer`].

use std::fmt;
use std::time::Duration;

use ash::vk;

use crate::device::device::Device;
use crate::error::Error;
use crate::gpu::barrier::{self, Access};
use crate::gpu::command::{Submission, WaitPolicy};
use crate::gpu::memory::{Buffer, HostIo, ImportSupport, ImportedBuffer, MemoryLocation};

/// The environment variable that overrides [`HostPath::rule`]: `direct`, `staged`,
/// `staged:<chunk>` (bytes, with an optional `k`, `m` or `g` suffix) or `imported`.
pub const HOST_PATH_ENV: &str = "VKDELEGATE_HOST_PATH";

/// How host inputs and outputs move to and from device buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostPath {
    /// Mapped device memory, written and read in place.
    Direct,
    /// Host staging buffers and device copies, pipelined in chunks of `chunk` bytes.
    Staged {
        /// Bytes per staging buffer (and per device copy).
        chunk: u64,
    },
    /// The caller's memory imported (`VK_EXT_external_memory_host`) and copied by the device.
    Imported,
}

impl fmt::Display for HostPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPath::Direct => f.write_str("direct"),
            HostPath::Staged { chunk } => write!(f, "staged:{}m", chunk >> 20),
            HostPath::Imported => f.write_str("imported"),
        }
    }
}

impl HostPath {
    /// Staging chunk by default: 64 MiB, large enough that per-submission costs vanish
    /// (about 1 ms of PCIe time each at 55 GB/s), small enough that two stay cheap.
    pub const DEFAULT_CHUNK: u64 = 64 << 20;
    /// The smallest chunk [`HostPath::parse`] accepts: 4 KiB.
    pub const MIN_CHUNK: u64 = 4 << 10;
    /// Inputs and outputs of at most this many bytes (1 MiB) never go through a
    /// [`HostTransfer`]: their owner records one copy next to its work.
    pub const SMALL: u64 = 1 << 20;

    /// Staged with [`HostPath::DEFAULT_CHUNK`].
    pub const fn staged() -> HostPath {
        HostPath::Staged {
            chunk: Self::DEFAULT_CHUNK,
        }
    }

    /// The rule, without the environment: [`HostIo::for_device`]'s placement as a path,
    /// [`HostPath::Direct`] where device memory is the host's own memory (CPU drivers and
    /// integrated GPUs with a device-local, host-visible heap of at least 64 MiB),
    /// [`HostPath::staged`] elsewhere.
    ///
    /// Measured on an NVIDIA H200 before this rule: host reads through a mapping of device
    /// memory (the PCIe BAR) run at 0.04 GB/s, staged copies at 6-8 GB/s with one thread and
    /// whole-tensor staging. Imported memory skips the host copy but pins the caller's pages
    /// on every transfer; it stays an override until `vkdelegate bench` shows it faster on a
    /// device (its host I/O rows measure every path on the same device in the same run).
    pub fn rule(device: &Device) -> HostPath {
        match HostIo::for_device(device) {
            HostIo::Direct => HostPath::Direct,
            HostIo::Staged => HostPath::staged(),
        }
    }

    /// [`HOST_PATH_ENV`] when set, else [`HostPath::rule`]. A value that does not parse is an
    /// error naming it.
    pub fn for_device(device: &Device) -> Result<HostPath, Error> {
        Ok(HostPath::from_env()?.unwrap_or_else(|| HostPath::rule(device)))
    }

    /// The path [`HOST_PATH_ENV`] asks for, if it is set.
    pub fn from_env() -> Result<Option<HostPath>, Error> {
        match std::env::var(HOST_PATH_ENV) {
            Ok(v) if v.trim().is_empty() => Ok(None),
            Ok(v) => HostPath::parse(&v).map(Some),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(e) => Err(Error::InvalidArgument(format!("{HOST_PATH_ENV}: {e}"))),
        }
    }

    /// Parses `direct`, `staged`, `staged:<chunk>` or `imported` (case-insensitive).
    pub fn parse(text: &str) -> Result<HostPath, Error> {
        let bad = |why: &str| {
            Error::InvalidArgument(format!(
                "host path '{text}': {why} (expected direct, staged, staged:<bytes>[k|m|g] or \
                 imported)"
            ))
        };
        let lower = text.trim().to_ascii_lowercase();
        let (name, arg) = match lower.split_once(':') {
            Some((n, a)) => (n, Some(a)),
            None => (lower.as_str(), None),
        };
        match (name, arg) {
            ("direct", None) => Ok(HostPath::Direct),
            ("imported", None) => Ok(HostPath::Imported),
            ("staged", None) => Ok(HostPath::staged()),
            ("staged", Some(a)) => {
                let chunk = parse_bytes(a).ok_or_else(|| bad("the chunk is not a size"))?;
                if chunk < Self::MIN_CHUNK {
                    return Err(bad(&format!(
                        "a chunk of {chunk} bytes is below {}",
                        Self::MIN_CHUNK
                    )));
                }
                Ok(HostPath::Staged { chunk })
            }
            _ => Err(bad("unknown path")),
        }
    }

    /// Where the owner places the device memory of its inputs and outputs.
    pub fn io(self) -> HostIo {
        match self {
            HostPath::Direct => HostIo::Direct,
            HostPath::Staged { .. } | HostPath::Imported => HostIo::Staged,
        }
    }

    /// Whether a staged input or output of `bytes` goes through a [`HostTransfer`] (imported,
    /// or staged over more than one chunk) rather than one copy its owner records next to its
    /// work (at most [`HostPath::SMALL`] bytes, or one chunk).
    pub fn transfers(self, bytes: u64) -> bool {
        match self {
            HostPath::Direct => false,
            HostPath::Staged { chunk } => bytes > chunk.max(Self::SMALL),
            HostPath::Imported => bytes > Self::SMALL,
        }
    }

    /// The chunk of staged transfers under this path.
    fn chunk(self) -> u64 {
        match self {
            HostPath::Staged { chunk } => chunk.max(Self::MIN_CHUNK),
            HostPath::Direct | HostPath::Imported => Self::DEFAULT_CHUNK,
        }
    }
}

/// `123`, `64k`, `64m`, `1g`: bytes.
fn parse_bytes(text: &str) -> Option<u64> {
    let (digits, shift) = match text.as_bytes().last()? {
        b'k' => (&text[..text.len() - 1], 10),
        b'm' => (&text[..text.len() - 1], 20),
        b'g' => (&text[..text.len() - 1], 30),
        _ => (text, 0),
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// How the last transfer went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransferRoute {
    /// Through staging, in this many chunks (device copies).
    Staged {
        /// Device copies.
        chunks: usize,
    },
    /// Imported: one device copy, no host copy.
    Imported,
}

/// One staging buffer and the submission that copies out of or into it.
struct Slot {
    staging: Buffer,
    submission: Submission,
}

/// Moves bytes between host memory and device buffers along one [`HostPath`]: pipelined
/// staging or imported host memory. One per owner (a graph, a model, a program); its staging
/// buffers are made on the first staged transfer and kept.
///
/// Every transfer waits for its own work before it returns, and orders itself after earlier
/// work on the queue and before later work with barriers of its own, so the owner records
/// nothing for it: the device buffer may be used by the next submission as it is.
pub struct HostTransfer {
    device: Device,
    path: HostPath,
    /// Staging slots: [`UP`] those uploads stage in when they stage in device memory,
    /// [`DOWN`] those of downloads (and of uploads staged in host memory).
    slots: [Vec<Slot>; 2],
    upload_staging: MemoryLocation,
    import: Option<ImportSupport>,
    last: Option<TransferRoute>,
}

impl fmt::Debug for HostTransfer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostTransfer")
            .field("path", &self.path)
            .field(
                "staging_buffers",
                &(self.slots[UP].len() + self.slots[DOWN].len()),
            )
            .field("upload_staging", &self.upload_staging)
            .field("import", &self.import.map(|s| s.alignment))
            .field("last", &self.last)
            .finish()
    }
}

/// Staging buffers a pipelined transfer cycles through.
const STAGING_BUFFERS: usize = 2;

/// The slot sets of [`HostTransfer`]: uploads staged in device memory, and the rest.
const UP: usize = 0;
const DOWN: usize = 1;

/// The direction of a transfer.
#[derive(Clone, Copy)]
enum Dir {
    Up,
    Down,
}

impl HostTransfer {
    /// A transfer along `path` on `device` (nothing is allocated yet). Along
    /// [`HostPath::Direct`] (whose owners map their memory and need no transfer, except for
    /// memory they cannot map) it stages in [`HostPath::DEFAULT_CHUNK`] chunks. Downloads
    /// stage in host memory that vk-mem picks for random host access, host-cached where the
    /// device has such memory, so that the host reads cached memory. Uploads stage where
    /// [`HostTransfer::upload_staging_rule`] says.
    pub fn new(device: &Device, path: HostPath) -> HostTransfer {
        HostTransfer {
            device: device.clone(),
            path,
            slots: [Vec::new(), Vec::new()],
            upload_staging: Self::upload_staging_rule(device),
            import: ImportSupport::of(device),
            last: None,
        }
    }

    /// The path.
    pub fn path(&self) -> HostPath {
        self.path
    }

    /// Where uploads stage by default on `device`: in host memory, like downloads. The other
    /// choice, mapped device-local memory ([`MemoryLocation::DeviceMapped`], a resizable BAR
    /// on discrete GPUs), makes an upload the host's writes through the BAR followed by a
    /// copy inside device memory; [`HostTransfer::set_upload_staging`] selects it, and
    /// `vkdelegate bench` measures both on a device. Measured on an NVIDIA H200 in one run
    /// with the host copies on 16 threads: 256 MiB / 1 GiB uploads at 33.1 / 40.4 GB/s
    /// staged in host memory, 28.4 / 29.1 GB/s staged in device memory (writes through the
    /// BAR alone: 32.3 / 30.9). Downloads always stage in host memory: host reads through
    /// the BAR run at 0.04 GB/s there.
    pub fn upload_staging_rule(_device: &Device) -> MemoryLocation {
        MemoryLocation::Host
    }

    /// Where uploads stage.
    pub fn upload_staging(&self) -> MemoryLocation {
        self.upload_staging
    }

    /// Makes uploads stage in `location` ([`MemoryLocation::Host`] or
    /// [`MemoryLocation::DeviceMapped`]; anything else is an error), e.g. to compare both on
    /// one device. Waits for pending work and frees the upload staging buffers held.
    pub fn set_upload_staging(&mut self, location: MemoryLocation) -> Result<(), Error> {
        if !matches!(
            location,
            MemoryLocation::Host | MemoryLocation::DeviceMapped
        ) {
            return Err(Error::InvalidArgument(format!(
                "uploads stage in host or mapped device memory, not {location:?}"
            )));
        }
        self.finish()?;
        self.slots[UP].clear();
        self.upload_staging = location;
        Ok(())
    }

    /// Whether the device can import host memory (`VK_EXT_external_memory_host` enabled).
    pub fn can_import(&self) -> bool {
        self.import.is_some()
    }

    /// How the last transfer went.
    pub fn last_route(&self) -> Option<TransferRoute> {
        self.last
    }

    /// Staging bytes held, in host and device memory.
    pub fn staging_bytes(&self) -> u64 {
        self.slots.iter().flatten().map(|s| s.staging.size()).sum()
    }

    /// The slot set transfers in `dir` stage through.
    fn set_of(&self, dir: Dir) -> usize {
        match (dir, self.upload_staging) {
            (Dir::Up, MemoryLocation::DeviceMapped) => UP,
            _ => DOWN,
        }
    }

    /// Copies `data` into `dst` at `offset` and waits for the copy.
    ///
    /// # Safety
    /// `dst` must be a live buffer of this device with `TRANSFER_DST` usage holding
    /// `offset + data.len()` bytes, and must stay alive until this returns. Earlier and later
    /// work on the device queue is ordered by barriers; work on other queues must not use the
    /// range meanwhile.
    pub unsafe fn upload(
        &mut self,
        data: &[u8],
        dst: vk::Buffer,
        offset: u64,
    ) -> Result<(), Error> {
        if data.is_empty() {
            return Ok(());
        }
        if self.wants_import(data.len()) {
            // SAFETY: `data` is borrowed until this returns, and the import is dropped first.
            if let Some(host) = unsafe { self.import_range(data.as_ptr(), data.len(), "upload") } {
                // SAFETY: forwarded contract.
                return unsafe { self.copy_imported(host, data.len(), dst, offset, Dir::Up) };
            }
        }
        // SAFETY: forwarded contract.
        unsafe { self.staged_upload(data, dst, offset) }
    }

    /// Copies `out.len()` bytes of `src` at `offset` into `out` and waits for the copy.
    ///
    /// # Safety
    /// `src` must be a live buffer of this device with `TRANSFER_SRC` usage holding
    /// `offset + out.len()` bytes, whose writers were submitted before this call to the
    /// device queue (or finished); it must stay alive until this returns.
    pub unsafe fn download(
        &mut self,
        src: vk::Buffer,
        offset: u64,
        out: &mut [u8],
    ) -> Result<(), Error> {
        if out.is_empty() {
            return Ok(());
        }
        if self.wants_import(out.len()) {
            let ptr = out.as_mut_ptr();
            // SAFETY: `out` is borrowed mutably until this returns (so nothing else reads or
            // writes it while the device writes it), and the import is dropped first.
            let host = unsafe { self.import_range(ptr, out.len(), "download") };
            if let Some(host) = host {
                // SAFETY: forwarded contract.
                return unsafe { self.copy_imported(host, out.len(), src, offset, Dir::Down) };
            }
        }
        // SAFETY: forwarded contract.
        unsafe { self.staged_download(src, offset, out) }
    }

    fn wants_import(&self, len: usize) -> bool {
        if self.path != HostPath::Imported {
            return false;
        }
        if len as u64 <= HostPath::SMALL {
            log::debug!("host transfer of {len} bytes: below the import minimum; staging");
            return false;
        }
        if self.import.is_none() {
            log::debug!(
                "host transfer of {len} bytes: the device has no VK_EXT_external_memory_host; \
                 staging"
            );
            return false;
        }
        true
    }

    /// The caller's range `ptr .. ptr + len` imported, or `None` (said in a `log::debug!`)
    /// when the device cannot import it.
    ///
    /// # Safety
    /// The range is one live allocation borrowed by the caller until the imported buffer is
    /// dropped (which [`HostTransfer::copy_imported`] does before returning).
    unsafe fn import_range(
        &self,
        ptr: *const u8,
        len: usize,
        what: &str,
    ) -> Option<ImportedBuffer> {
        let support = self.import?;
        // SAFETY: the caller's contract.
        match unsafe { ImportedBuffer::new(&self.device, support, ptr, len) } {
            Ok(host) => Some(host),
            Err(e) => {
                log::debug!("host {what} of {len} bytes: import failed ({e}); staging");
                None
            }
        }
    }

    /// One device copy of `len` bytes between the imported `host` and `buffer`, waited for.
    ///
    /// The imported pages are the caller's: once this returns, the caller may free them, so
    /// this never returns while the copy may still run. A wait that times out is repeated
    /// without a time limit; only a lost device (which runs nothing more) ends it early.
    ///
    /// # Safety
    /// As [`HostTransfer::upload`] / [`HostTransfer::download`] for `buffer`.
    unsafe fn copy_imported(
        &mut self,
        host: ImportedBuffer,
        len: usize,
        buffer: vk::Buffer,
        offset: u64,
        dir: Dir,
    ) -> Result<(), Error> {
        self.ensure_slots(DOWN, 1, 0)?;
        let (src, dst, src_offset, dst_offset) = match dir {
            Dir::Up => (host.raw(), buffer, host.offset(), offset),
            Dir::Down => (buffer, host.raw(), offset, host.offset()),
        };
        let region = [vk::BufferCopy {
            src_offset,
            dst_offset,
            size: len as u64,
        }];
        let slot = &mut self.slots[DOWN][0];
        // SAFETY: both buffers are live until the wait; the region lies within both.
        let mut run =
            unsafe { copy_and_wait(&self.device, &mut slot.submission, src, dst, &region, dir) };
        if matches!(run, Err(Error::Timeout { .. })) {
            let policy = slot.submission.policy();
            slot.submission.set_policy(WaitPolicy {
                timeout: Duration::MAX,
                ..policy
            });
            run = slot.submission.wait();
            slot.submission.set_policy(policy);
        }
        if slot.submission.is_pending() {
            // Never free the import under a copy that may still run.
            std::mem::forget(host);
        }
        run?;
        self.last = Some(TransferRoute::Imported);
        Ok(())
    }

    /// Makes `count` staging slots of at least `size` bytes each in slot set `set` (remade
    /// when smaller). Upload staging in device memory that cannot be allocated falls back to
    /// host memory for this transfer and later ones (said in a `log::debug!`). Returns the set
    /// the slots are in.
    fn ensure_slots(&mut self, set: usize, count: usize, size: u64) -> Result<usize, Error> {
        if self.slots[set]
            .first()
            .is_some_and(|s| s.staging.size() < size)
        {
            self.finish()?;
            self.slots[set].clear();
        }
        let location = if set == UP {
            self.upload_staging
        } else {
            MemoryLocation::Host
        };
        while self.slots[set].len() < count {
            let usage = vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST;
            let what = format!("host transfer staging {}", self.slots[set].len());
            let bytes = size.max(HostPath::MIN_CHUNK);
            let staging = match Buffer::new(&self.device, bytes, location, usage, &what) {
                Ok(b) => b,
                Err(e) if set == UP => {
                    log::debug!("upload staging in device memory: {e}; staging in host memory");
                    self.slots[UP].clear();
                    self.upload_staging = MemoryLocation::Host;
                    return self.ensure_slots(DOWN, count, size);
                }
                Err(e) => return Err(e),
            };
            self.slots[set].push(Slot {
                staging,
                submission: Submission::new(&self.device, 1, "host transfer")?,
            });
        }
        Ok(set)
    }

    /// The chunk a staged transfer of `len` bytes in `dir` is split by and the slot set it
    /// stages through, with its slots made: one staging buffer for one chunk,
    /// [`STAGING_BUFFERS`] for more.
    fn prepare(&mut self, len: usize, dir: Dir) -> Result<(usize, usize), Error> {
        let chunk = self.path.chunk().min(len as u64);
        let count = if (len as u64) > chunk {
            STAGING_BUFFERS
        } else {
            1
        };
        let set = self.ensure_slots(self.set_of(dir), count, chunk)?;
        let chunk = usize::try_from(chunk)
            .map_err(|_| Error::InvalidArgument(format!("chunk of {chunk} bytes")))?;
        Ok((chunk, set))
    }

    /// # Safety
    /// As [`HostTransfer::upload`].
    unsafe fn staged_upload(
        &mut self,
        data: &[u8],
        dst: vk::Buffer,
        offset: u64,
    ) -> Result<(), Error> {
        let (chunk, set) = self.prepare(data.len(), Dir::Up)?;
        let n = self.slots[set].len().min(STAGING_BUFFERS);
        let mut chunks = 0;
        for (i, piece) in data.chunks(chunk).enumerate() {
            let slot = &mut self.slots[set][i % n];
            slot.submission.wait()?;
            slot.staging.write(0, piece)?;
            let region = [vk::BufferCopy {
                src_offset: 0,
                dst_offset: offset + (i * chunk) as u64,
                size: piece.len() as u64,
            }];
            // SAFETY: the staging buffer and `dst` (caller's contract) are live until the
            // waits below; the region lies within both.
            unsafe {
                submit_copy(
                    &self.device,
                    &mut slot.submission,
                    slot.staging.raw(),
                    dst,
                    &region,
                    Dir::Up,
                )
            }?;
            chunks += 1;
        }
        self.finish()?;
        self.last = Some(TransferRoute::Staged { chunks });
        Ok(())
    }

    /// # Safety
    /// As [`HostTransfer::download`].
    unsafe fn staged_download(
        &mut self,
        src: vk::Buffer,
        offset: u64,
        out: &mut [u8],
    ) -> Result<(), Error> {
        let (chunk, _) = self.prepare(out.len(), Dir::Down)?;
        let n = self.slots[DOWN].len().min(STAGING_BUFFERS);
        let count = out.len().div_ceil(chunk);
        let len = out.len();
        let piece = |i: usize| (i * chunk, ((i + 1) * chunk).min(len));
        // Keep up to `n` device copies in flight; read each back as it finishes.
        for i in 0..count.min(n) {
            // SAFETY: as below.
            unsafe { self.submit_download(i, piece(i), src, offset) }?;
        }
        for i in 0..count {
            let (start, end) = piece(i);
            let slot = &mut self.slots[DOWN][i % n];
            slot.submission.wait()?;
            slot.staging.read(0, &mut out[start..end])?;
            if i + n < count {
                // SAFETY: `src` is live (caller's contract) and the slot's staging is free
                // (waited above); the region lies within both.
                unsafe { self.submit_download(i + n, piece(i + n), src, offset) }?;
            }
        }
        self.last = Some(TransferRoute::Staged { chunks: count });
        Ok(())
    }

    /// # Safety
    /// `src` live with `TRANSFER_SRC` and holding `offset + end` bytes.
    unsafe fn submit_download(
        &mut self,
        i: usize,
        (start, end): (usize, usize),
        src: vk::Buffer,
        offset: u64,
    ) -> Result<(), Error> {
        let n = self.slots[DOWN].len().min(STAGING_BUFFERS);
        let slot = &mut self.slots[DOWN][i % n];
        let region = [vk::BufferCopy {
            src_offset: offset + start as u64,
            dst_offset: 0,
            size: (end - start) as u64,
        }];
        // SAFETY: forwarded contract; the staging buffer lives with the slot.
        unsafe {
            submit_copy(
                &self.device,
                &mut slot.submission,
                src,
                slot.staging.raw(),
                &region,
                Dir::Down,
            )
        }
    }

    /// Waits for every slot's work.
    fn finish(&mut self) -> Result<(), Error> {
        for s in self.slots.iter_mut().flatten() {
            s.submission.wait()?;
        }
        Ok(())
    }

    /// Waits for work a failed transfer left pending (a transfer that returns `Ok` leaves
    /// none). Owners call it before destroying the device buffers transfers touched.
    pub fn wait(&mut self) -> Result<(), Error> {
        self.finish()
    }

    /// Whether a copy may still run (only after a failed transfer or wait).
    pub fn is_pending(&self) -> bool {
        self.slots
            .iter()
            .flatten()
            .any(|s| s.submission.is_pending())
    }
}

/// Records and submits one copy with the barriers that order it against earlier and later
/// work on the queue (uploads) or make it visible to the host (downloads).
///
/// # Safety
/// Both buffers are live buffers of the device, with the usages a copy needs, holding the
/// region, until the submission's wait.
unsafe fn submit_copy(
    device: &Device,
    submission: &mut Submission,
    src: vk::Buffer,
    dst: vk::Buffer,
    region: &[vk::BufferCopy],
    dir: Dir,
) -> Result<(), Error> {
    let cmd = submission.begin(0)?;
    let copy = match dir {
        Dir::Up => Access::TRANSFER_WRITE,
        Dir::Down => Access::TRANSFER_READ,
    };
    // SAFETY: `cmd` is recording; the caller's contract covers the buffers.
    unsafe {
        // Earlier work on the queue that reads or writes the device buffer comes first.
        barrier::memory_barrier(device, cmd, Access::ANY, copy);
        device.raw().cmd_copy_buffer(cmd, src, dst, region);
        match dir {
            // Later work on the queue sees the upload.
            Dir::Up => barrier::memory_barrier(device, cmd, Access::TRANSFER_WRITE, Access::ANY),
            Dir::Down => barrier::host_read_barrier(device, cmd),
        }
    }
    submission.end(0)?;
    // SAFETY: the command buffer is executable; the caller's contract keeps what it uses
    // alive until the wait.
    unsafe { submission.submit(0, &[], &[]) }
}

/// As [`submit_copy`], then waits.
///
/// # Safety
/// As [`submit_copy`].
unsafe fn copy_and_wait(
    device: &Device,
    submission: &mut Submission,
    src: vk::Buffer,
    dst: vk::Buffer,
    region: &[vk::BufferCopy],
    dir: Dir,
) -> Result<(), Error> {
    // SAFETY: forwarded contract.
    unsafe { submit_copy(device, submission, src, dst, region, dir) }?;
    submission.wait()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_parse_with_their_chunks() {
        assert_eq!(HostPath::parse("direct").unwrap(), HostPath::Direct);
        assert_eq!(HostPath::parse(" Imported ").unwrap(), HostPath::Imported);
        assert_eq!(HostPath::parse("staged").unwrap(), HostPath::staged());
        assert_eq!(
            HostPath::parse("staged:1m").unwrap(),
            HostPath::Staged { chunk: 1 << 20 }
        );
        assert_eq!(
            HostPath::parse("staged:65536").unwrap(),
            HostPath::Staged { chunk: 65536 }
        );
        let e = HostPath::parse("staged:1").unwrap_err().to_string();
        assert!(e.contains("below 4096"), "{e}");
        let e = HostPath::parse("mapped").unwrap_err().to_string();
        assert!(e.contains("'mapped'") && e.contains("unknown path"), "{e}");
        assert!(HostPath::parse("staged:xm").is_err());
        assert!(HostPath::parse("staged:99999999999g").is_err());
    }

    #[test]
    fn small_transfers_are_recorded_by_their_owner() {
        let staged = HostPath::Staged { chunk: 4 << 20 };
        assert!(!staged.transfers(1 << 20));
        assert!(!staged.transfers(4 << 20));
        assert!(staged.transfers((4 << 20) + 1));
        assert!(!HostPath::Imported.transfers(HostPath::SMALL));
        assert!(HostPath::Imported.transfers(HostPath::SMALL + 1));
        assert!(!HostPath::Direct.transfers(1 << 30));
        assert_eq!(HostPath::Imported.io(), HostIo::Staged);
        assert_eq!(HostPath::Direct.io(), HostIo::Direct);
    }
}
