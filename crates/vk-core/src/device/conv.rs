//! Conversions between Vulkan's raw values and `vk-core`'s types.

use std::ffi::{CStr, c_char};
use std::fmt;

use ash::vk;

use crate::device::arm;

/// A Vulkan API version (variant 0), ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version(pub u32);

impl Version {
    /// Vulkan 1.0.
    pub const V1_0: Version = Version(vk::API_VERSION_1_0);
    /// Vulkan 1.1.
    pub const V1_1: Version = Version(vk::API_VERSION_1_1);
    /// Vulkan 1.2.
    pub const V1_2: Version = Version(vk::API_VERSION_1_2);
    /// Vulkan 1.3.
    pub const V1_3: Version = Version(vk::API_VERSION_1_3);

    /// Major version.
    pub fn major(self) -> u32 {
        vk::api_version_major(self.0)
    }
    /// Minor version.
    pub fn minor(self) -> u32 {
        vk::api_version_minor(self.0)
    }
    /// Patch version.
    pub fn patch(self) -> u32 {
        vk::api_version_patch(self.0)
    }
    /// Major and minor only (patch 0), for comparisons of API levels.
    pub fn level(self) -> Version {
        Version(vk::make_api_version(0, self.major(), self.minor(), 0))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major(), self.minor(), self.patch())
    }
}

/// Physical device type, in ranking order: earlier variants are preferred.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeviceType {
    /// A discrete GPU.
    Discrete,
    /// A GPU integrated with the host processor.
    Integrated,
    /// A virtual GPU (for example in a virtual machine).
    Virtual,
    /// Anything else.
    Other,
    /// A CPU implementation such as Mesa's lavapipe.
    Cpu,
}

impl DeviceType {
    /// Maps Vulkan's device type.
    pub fn from_vk(ty: vk::PhysicalDeviceType) -> Self {
        match ty {
            vk::PhysicalDeviceType::DISCRETE_GPU => DeviceType::Discrete,
            vk::PhysicalDeviceType::INTEGRATED_GPU => DeviceType::Integrated,
            vk::PhysicalDeviceType::VIRTUAL_GPU => DeviceType::Virtual,
            vk::PhysicalDeviceType::CPU => DeviceType::Cpu,
            _ => DeviceType::Other,
        }
    }

    /// Lower is better.
    pub fn rank(self) -> u32 {
        self as u32
    }

    /// Short lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceType::Discrete => "discrete",
            DeviceType::Integrated => "integrated",
            DeviceType::Virtual => "virtual",
            DeviceType::Other => "other",
            DeviceType::Cpu => "cpu",
        }
    }
}

impl fmt::Display for DeviceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

bitflags::bitflags! {
    /// The queue capabilities delegates ask for.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct QueueCaps: u32 {
        /// `VK_QUEUE_GRAPHICS_BIT`.
        const GRAPHICS = 1 << 0;
        /// `VK_QUEUE_COMPUTE_BIT`.
        const COMPUTE = 1 << 1;
        /// `VK_QUEUE_TRANSFER_BIT` (implied by GRAPHICS or COMPUTE, and reported so).
        const TRANSFER = 1 << 2;
        /// `VK_QUEUE_DATA_GRAPH_BIT_ARM`.
        const DATA_GRAPH_ARM = 1 << 3;
    }
}

impl QueueCaps {
    /// Maps Vulkan's queue flags. TRANSFER is reported whenever GRAPHICS or COMPUTE is, as the
    /// specification guarantees transfer support on such queues.
    pub fn from_vk(flags: vk::QueueFlags) -> Self {
        let mut caps = QueueCaps::empty();
        if flags.contains(vk::QueueFlags::GRAPHICS) {
            caps |= QueueCaps::GRAPHICS | QueueCaps::TRANSFER;
        }
        if flags.contains(vk::QueueFlags::COMPUTE) {
            caps |= QueueCaps::COMPUTE | QueueCaps::TRANSFER;
        }
        if flags.contains(vk::QueueFlags::TRANSFER) {
            caps |= QueueCaps::TRANSFER;
        }
        if flags.contains(arm::QUEUE_DATA_GRAPH_BIT_ARM) {
            caps |= QueueCaps::DATA_GRAPH_ARM;
        }
        caps
    }

    /// Names of the set flags, `|`-separated.
    pub fn describe(self) -> String {
        let names: Vec<&str> = self.iter_names().map(|(n, _)| n).collect();
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join("|")
        }
    }
}

/// Reads a fixed-size, NUL-terminated Vulkan string.
pub(crate) fn fixed_str(raw: &[c_char]) -> String {
    // SAFETY: `c_char` and `u8` have the same size and alignment; the slice is borrowed as is.
    let bytes: &[u8] = unsafe { std::slice::from_raw_parts(raw.as_ptr().cast(), raw.len()) };
    match CStr::from_bytes_until_nul(bytes) {
        Ok(s) => s.to_string_lossy().into_owned(),
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    }
}

/// Formats a driver version the way its vendor does (NVIDIA's 10.8.8.6 bit split; otherwise the
/// Vulkan encoding).
pub fn driver_version_string(vendor_id: u32, version: u32) -> String {
    match vendor_id {
        0x10de => format!(
            "{}.{}.{}",
            (version >> 22) & 0x3ff,
            (version >> 14) & 0xff,
            (version >> 6) & 0xff
        ),
        _ => Version(version).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_types_rank_discrete_first_cpu_last() {
        let mut v = [
            DeviceType::Cpu,
            DeviceType::Other,
            DeviceType::Virtual,
            DeviceType::Integrated,
            DeviceType::Discrete,
        ];
        v.sort();
        assert_eq!(
            v,
            [
                DeviceType::Discrete,
                DeviceType::Integrated,
                DeviceType::Virtual,
                DeviceType::Other,
                DeviceType::Cpu
            ]
        );
    }

    #[test]
    fn queue_caps_imply_transfer() {
        let caps = QueueCaps::from_vk(vk::QueueFlags::COMPUTE);
        assert!(caps.contains(QueueCaps::COMPUTE | QueueCaps::TRANSFER));
        assert_eq!(caps.describe(), "COMPUTE|TRANSFER");
    }

    #[test]
    fn nvidia_driver_version() {
        // 580.159.0 in NVIDIA's packing.
        let v = (580 << 22) | (159 << 14);
        assert_eq!(driver_version_string(0x10de, v), "580.159.0");
    }
}
