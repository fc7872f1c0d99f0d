//! Physical devices: enumeration, ranking and selection, and requirements checked against them.

use std::cmp::Reverse;
use std::fmt;
use std::sync::Arc;

use ash::vk;

use crate::device::caps::{Capabilities, query_coop_flexible, query_coop_shapes};
use crate::device::conv::{DeviceType, Version};
use crate::device::instance::{ENV_DEVICE_INDEX, Instance};
use crate::device::nv;
use crate::device::requirements::Requirements;
use crate::error::{Error, VkResultExt};

/// A physical device of an [`Instance`], with its capabilities.
#[derive(Clone)]
pub struct Adapter {
    pub(crate) instance: Instance,
    pub(crate) raw: vk::PhysicalDevice,
    index: usize,
    caps: Arc<Capabilities>,
}

impl fmt::Debug for Adapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Adapter")
            .field("index", &self.index)
            .field("name", &self.caps.name)
            .field("type", &self.caps.device_type)
            .finish()
    }
}

impl Adapter {
    pub(crate) fn new(
        instance: Instance,
        raw: vk::PhysicalDevice,
        index: usize,
        caps: Capabilities,
    ) -> Self {
        Adapter {
            instance,
            raw,
            index,
            caps: Arc::new(caps),
        }
    }

    /// Index in the instance's enumeration order (what `VKDELEGATE_DEVICE_INDEX` selects).
    pub fn index(&self) -> usize {
        self.index
    }

    /// Capabilities.
    pub fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    /// The raw physical device handle.
    pub fn raw(&self) -> vk::PhysicalDevice {
        self.raw
    }

    /// The instance this device belongs to.
    pub fn instance(&self) -> &Instance {
        &self.instance
    }

    /// Checks `requirements` against this device without creating anything.
    pub fn check(&self, requirements: &Requirements) -> Result<(), Error> {
        requirements
            .resolve(&self.caps)
            .map(|_| ())
            .map_err(|missing| Error::Unsupported {
                device: self.caps.name.clone(),
                requester: requirements.requester.clone(),
                missing,
            })
    }
}

/// Enumeration and selection of an instance's physical devices.
impl Instance {
    /// Every physical device, in enumeration order, with its capabilities.
    pub fn adapters(&self) -> Result<Vec<Adapter>, Error> {
        // SAFETY: the instance is alive.
        let devices =
            unsafe { self.raw().enumerate_physical_devices() }.vk("vkEnumeratePhysicalDevices")?;
        devices
            .into_iter()
            .enumerate()
            .map(|(index, raw)| {
                let mut caps = Capabilities::query(
                    self.raw(),
                    self.api_version(),
                    raw,
                    self.emulation_enabled(),
                )?;
                if caps.has_extension(ash::khr::cooperative_matrix::NAME) {
                    let fns = ash::khr::cooperative_matrix::Instance::new(self.entry(), self.raw());
                    // SAFETY: `raw` was enumerated from this instance and lists the extension.
                    caps.cooperative_matrix = unsafe { query_coop_shapes(&fns, raw) };
                }
                if caps.has_extension(nv::COOPERATIVE_MATRIX_2_EXTENSION_NAME) {
                    // SAFETY: `raw` was enumerated from this instance, which this entry
                    // loaded, and lists the extension.
                    caps.cooperative_matrix_flexible =
                        unsafe { query_coop_flexible(self.entry(), self.raw(), raw) };
                }
                Ok(Adapter::new(self.clone(), raw, index, caps))
            })
            .collect()
    }

    /// The device to use: `VKDELEGATE_DEVICE_INDEX` when set, else the best ranked
    /// (discrete > integrated > virtual > other > CPU).
    pub fn select_adapter(&self) -> Result<Adapter, Error> {
        let env = std::env::var(ENV_DEVICE_INDEX).ok();
        self.select_adapter_with(env.as_deref())
    }

    /// As [`Instance::select_adapter`], with an explicit index override (enumeration order).
    pub fn select_adapter_with(&self, index: Option<&str>) -> Result<Adapter, Error> {
        let mut adapters = self.adapters()?;
        let summaries: Vec<DeviceSummary> = adapters.iter().map(DeviceSummary::of).collect();
        let chosen = select_index(&summaries, index)?;
        Ok(adapters.swap_remove(chosen))
    }
}

/// What ranking looks at, separated from Vulkan so it can be tested on synthetic lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSummary {
    /// Enumeration index.
    pub index: usize,
    /// Name.
    pub name: String,
    /// Type.
    pub device_type: DeviceType,
    /// API version.
    pub api_version: Version,
    /// Device-local bytes.
    pub device_local_bytes: u64,
}

impl DeviceSummary {
    /// The summary of an adapter.
    pub fn of(adapter: &Adapter) -> Self {
        let caps = adapter.capabilities();
        DeviceSummary {
            index: adapter.index(),
            name: caps.name.clone(),
            device_type: caps.device_type,
            api_version: caps.api_version,
            device_local_bytes: caps.memory.device_local_bytes(),
        }
    }
}

/// Positions of `devices` best first: by type (discrete > integrated > virtual > other > CPU),
/// then higher API version, then more device-local memory, then enumeration order.
pub fn rank(devices: &[DeviceSummary]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..devices.len()).collect();
    order.sort_by_key(|&i| {
        let d = &devices[i];
        (
            d.device_type.rank(),
            Reverse(d.api_version.level()),
            Reverse(d.device_local_bytes),
            d.index,
        )
    });
    order
}

/// The position in `devices` to use: the one whose enumeration index is `override_index` when
/// given, else the best ranked.
pub fn select_index(
    devices: &[DeviceSummary],
    override_index: Option<&str>,
) -> Result<usize, Error> {
    if devices.is_empty() {
        return Err(Error::NoPhysicalDevice);
    }
    match override_index.map(str::trim).filter(|s| !s.is_empty()) {
        None => Ok(rank(devices)[0]),
        Some(text) => text
            .parse::<usize>()
            .ok()
            .and_then(|want| devices.iter().position(|d| d.index == want))
            .ok_or_else(|| Error::DeviceIndexOutOfRange {
                requested: text.to_owned(),
                available: devices.len(),
                listing: devices
                    .iter()
                    .map(|d| format!("  {}: {} ({})", d.index, d.name, d.device_type))
                    .collect::<Vec<_>>()
                    .join("\n"),
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(index: usize, ty: DeviceType, api: Version, mem: u64) -> DeviceSummary {
        DeviceSummary {
            index,
            name: format!("dev{index}"),
            device_type: ty,
            api_version: api,
            device_local_bytes: mem,
        }
    }

    #[test]
    fn discrete_beats_integrated_beats_virtual_beats_other_beats_cpu() {
        let list = vec![
            dev(0, DeviceType::Cpu, Version::V1_3, 0),
            dev(1, DeviceType::Other, Version::V1_3, 0),
            dev(2, DeviceType::Virtual, Version::V1_3, 0),
            dev(3, DeviceType::Integrated, Version::V1_3, 0),
            dev(4, DeviceType::Discrete, Version::V1_1, 0),
        ];
        assert_eq!(rank(&list), vec![4, 3, 2, 1, 0]);
        assert_eq!(select_index(&list, None).unwrap(), 4);
    }

    #[test]
    fn ties_break_on_api_then_memory_then_order() {
        let list = vec![
            dev(0, DeviceType::Discrete, Version::V1_2, 16 << 30),
            dev(1, DeviceType::Discrete, Version::V1_3, 8 << 30),
            dev(2, DeviceType::Discrete, Version::V1_3, 24 << 30),
            dev(3, DeviceType::Discrete, Version::V1_3, 24 << 30),
        ];
        assert_eq!(rank(&list), vec![2, 3, 1, 0]);
    }

    #[test]
    fn override_picks_by_enumeration_index() {
        let list = vec![
            dev(0, DeviceType::Cpu, Version::V1_3, 0),
            dev(1, DeviceType::Discrete, Version::V1_3, 0),
        ];
        assert_eq!(select_index(&list, Some("0")).unwrap(), 0);
        assert_eq!(select_index(&list, Some(" 1 ")).unwrap(), 1);
        assert_eq!(select_index(&list, Some("")).unwrap(), 1);
    }

    #[test]
    fn out_of_range_override_lists_the_devices() {
        let list = vec![
            dev(0, DeviceType::Cpu, Version::V1_3, 0),
            dev(1, DeviceType::Discrete, Version::V1_3, 0),
        ];
        for bad in ["2", "-1", "gpu"] {
            let err = select_index(&list, Some(bad)).unwrap_err().to_string();
            assert!(
                err.contains(&format!("device index {bad} is not valid")),
                "{err}"
            );
            assert!(err.contains("2 device(s)"), "{err}");
            assert!(err.contains("0: dev0 (cpu)"), "{err}");
            assert!(err.contains("1: dev1 (discrete)"), "{err}");
        }
    }

    #[test]
    fn an_empty_list_is_no_device() {
        assert!(matches!(
            select_index(&[], None),
            Err(Error::NoPhysicalDevice)
        ));
    }
}
