//! Pipeline caches kept on disk between runs: one file per device, driver build and shader set,
//! in the user's cache directory, so that a second load of a model compiles no pipeline the
//! first one compiled.
//!
//! Where: [`PIPELINE_CACHE_ENV`] (`off`, `0` or `false`: no disk cache; any other value: that
//! folder), else `<cache dir>/vkdelegate` (`$XDG_CACHE_HOME` or `~/.cache` on Linux, the
//! platform's cache folder elsewhere). A file is named by the device's vendor and device ids,
//! its driver version, its `pipelineCacheUUID` and a hash of the caller's shaders, and its data
//! is checked against Vulkan's pipeline-cache header before a driver sees it. Reading and
//! writing never fail a build: a file that cannot be read is a cold cache, one that cannot be
//! written is logged. Writes go to a temporary file renamed into place, so that concurrent
//! processes never read half a file.

use std::path::{Path, PathBuf};

use crate::Capabilities;

/// Environment variable: `off` (or `0`, `false`) turns the disk cache off; another value is
/// the folder to keep it in.
pub const PIPELINE_CACHE_ENV: &str = "VKDELEGATE_PIPELINE_CACHE";

/// Where pipeline caches are kept between runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum DiskCache {
    /// [`PIPELINE_CACHE_ENV`] if set, else the user's cache folder.
    #[default]
    Default,
    /// No disk cache.
    Off,
    /// This folder.
    At(PathBuf),
}

impl DiskCache {
    /// The folder, if there is one.
    pub fn folder(&self) -> Option<PathBuf> {
        match self {
            DiskCache::Off => None,
            DiskCache::At(dir) => Some(dir.clone()),
            DiskCache::Default => match std::env::var(PIPELINE_CACHE_ENV) {
                Ok(v) if matches!(v.as_str(), "off" | "0" | "false") => None,
                Ok(v) if !v.is_empty() => Some(PathBuf::from(v)),
                _ => dirs::cache_dir().map(|d| d.join("vkdelegate")),
            },
        }
    }

    /// The file for `caps`' device and driver and the shader set whose hash is `shaders`;
    /// `None` when the cache is off or no folder is known.
    pub fn file(&self, caps: &Capabilities, shaders: u64) -> Option<CacheFile> {
        let uuid: String = caps
            .pipeline_cache_uuid
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let name = format!(
            "pipelines-{:04x}-{:04x}-{:08x}-{uuid}-{shaders:016x}.bin",
            caps.vendor_id, caps.device_id, caps.driver_version
        );
        Some(CacheFile {
            path: self.folder()?.join(name),
            vendor_id: caps.vendor_id,
            device_id: caps.device_id,
            uuid: caps.pipeline_cache_uuid,
        })
    }
}

/// One device's pipeline-cache file.
#[derive(Debug, Clone)]
pub struct CacheFile {
    path: PathBuf,
    vendor_id: u32,
    device_id: u32,
    uuid: [u8; 16],
}

impl CacheFile {
    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's data if it is this device's (empty when absent, unreadable or another
    /// device's or driver's).
    pub fn load(&self) -> Vec<u8> {
        match std::fs::read(&self.path) {
            Ok(data) if self.matches(&data) => data,
            Ok(_) => {
                log::warn!(
                    "pipeline cache {}: made for another device or driver; ignored",
                    self.path.display()
                );
                Vec::new()
            }
            Err(_) => Vec::new(),
        }
    }

    /// Writes `data` (a driver's `vkGetPipelineCacheData`) in place of the file.
    pub fn store(&self, data: &[u8]) {
        match write_whole(&self.path, data) {
            Ok(()) => log::debug!(
                "pipeline cache {}: {} bytes written",
                self.path.display(),
                data.len()
            ),
            Err(e) => log::warn!("pipeline cache {}: not written: {e}", self.path.display()),
        }
    }

    /// Whether `data` starts with a Vulkan pipeline-cache header (version one) of this
    /// device and driver.
    pub fn matches(&self, data: &[u8]) -> bool {
        header_matches(data, self.vendor_id, self.device_id, &self.uuid)
    }

    /// The text file beside this one that keeps `what` for the same device, driver and
    /// shader set (`<what>-<this file's key>.txt`): records that hold as long as those do,
    /// such as the outcome of a check of the shaders on the driver.
    pub fn beside(&self, what: &str) -> RecordFile {
        let name = self
            .path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let key = name
            .strip_prefix("pipelines-")
            .and_then(|n| n.strip_suffix(".bin"))
            .unwrap_or(name);
        RecordFile {
            path: self.path.with_file_name(format!("{what}-{key}.txt")),
        }
    }
}

/// A text file of records kept beside a pipeline cache ([`CacheFile::beside`]).
#[derive(Debug, Clone)]
pub struct RecordFile {
    path: PathBuf,
}

impl RecordFile {
    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's text (empty when absent or unreadable).
    pub fn load(&self) -> String {
        std::fs::read_to_string(&self.path).unwrap_or_default()
    }

    /// Writes `text` in place of the file (logged where it cannot be written).
    pub fn store(&self, text: &str) {
        if let Err(e) = write_whole(&self.path, text.as_bytes()) {
            log::warn!("{}: not written: {e}", self.path.display());
        }
    }
}

/// Writes `data` to a temporary file of this write's own beside `path` and renames it into
/// place, so that other threads and processes never read half a file.
fn write_whole(path: &Path, data: &[u8]) -> std::io::Result<()> {
    path.parent().map_or(Ok(()), std::fs::create_dir_all)?;
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_extension(format!("{}-{n}.tmp", std::process::id()));
    std::fs::write(&tmp, data)?;
    std::fs::rename(&tmp, path)
}

/// Whether `data` starts with a Vulkan pipeline-cache header (version one) for this vendor,
/// device and `pipelineCacheUUID`, and is at least as long as its header says.
pub fn header_matches(data: &[u8], vendor_id: u32, device_id: u32, uuid: &[u8; 16]) -> bool {
    let word = |i: usize| {
        data.get(i * 4..i * 4 + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    word(0).is_some_and(|len| len >= 32 && len as usize <= data.len())
        && word(1) == Some(1)
        && word(2) == Some(vendor_id)
        && word(3) == Some(device_id)
        && data.get(16..32) == Some(uuid.as_slice())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(vendor: u32, device: u32, uuid: [u8; 16]) -> Vec<u8> {
        let mut h = vec![32u8, 0, 0, 0, 1, 0, 0, 0];
        h.extend(vendor.to_le_bytes());
        h.extend(device.to_le_bytes());
        h.extend(uuid);
        h
    }

    #[test]
    fn headers_of_other_devices_and_drivers_do_not_match() {
        let h = header(0x10de, 0x2335, [7; 16]);
        assert!(header_matches(&h, 0x10de, 0x2335, &[7; 16]));
        assert!(
            !header_matches(&h, 0x10de, 0x2335, &[8; 16]),
            "another driver build"
        );
        assert!(!header_matches(&h, 0x10005, 0, &[7; 16]));
        assert!(!header_matches(&h[..20], 0x10de, 0x2335, &[7; 16]));
        assert!(!header_matches(b"garbage", 0x10de, 0x2335, &[7; 16]));
        assert!(!header_matches(&[], 0, 0, &[0; 16]));
    }

    #[test]
    fn files_round_trip_and_foreign_data_reads_as_cold() {
        let dir =
            std::env::temp_dir().join(format!("vkdelegate-cache-test-{}", std::process::id()));
        let file = CacheFile {
            path: dir.join("sub").join("c.bin"),
            vendor_id: 1,
            device_id: 2,
            uuid: [3; 16],
        };
        assert!(file.load().is_empty(), "absent");
        let mut data = header(1, 2, [3; 16]);
        data.extend([9u8; 40]);
        file.store(&data);
        assert_eq!(file.load(), data);
        file.store(&header(1, 2, [4; 16]));
        assert!(file.load().is_empty(), "another driver's data");
        assert!(DiskCache::Off.folder().is_none());
        assert_eq!(DiskCache::At(dir.clone()).folder(), Some(dir.clone()));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn records_sit_beside_their_cache_under_its_key() {
        let dir =
            std::env::temp_dir().join(format!("vkdelegate-record-test-{}", std::process::id()));
        let file = CacheFile {
            path: dir.join("pipelines-10de-2335-key.bin"),
            vendor_id: 1,
            device_id: 2,
            uuid: [3; 16],
        };
        let record = file.beside("checks");
        assert_eq!(record.path(), dir.join("checks-10de-2335-key.txt"));
        assert_eq!(record.load(), "", "absent");
        record.store("a=pass\n");
        assert_eq!(record.load(), "a=pass\n");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
