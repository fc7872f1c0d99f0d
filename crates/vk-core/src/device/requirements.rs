//! What a delegate needs from a device, checked against [`Capabilities`].
//!
//! Delegates declare [`Requirements`]; `vk-core` checks them against a physical device before
//! creating a device, or against an existing device's enabled set before reusing it. A missing
//! required item is an error naming every missing item; optional items are enabled only where
//! present.

use std::collections::BTreeSet;
use std::ffi::CStr;

use crate::device::caps::Capabilities;
use crate::device::conv::{QueueCaps, Version};
use crate::device::features::Features;
pub use crate::error::Missing;

/// The environment variable that turns the capture of pipeline statistics on (any value but
/// `0` or empty): see [`crate::pipeline_stats`].
pub const PIPELINE_STATS_ENV: &str = "VKDELEGATE_PIPELINE_STATS";

/// Whether [`PIPELINE_STATS_ENV`] asks for pipeline statistics.
pub fn pipeline_stats_requested() -> bool {
    std::env::var(PIPELINE_STATS_ENV).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// What a delegate needs (required) and can use (optional).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirements {
    /// Who declares these (for error messages), e.g. `vgf-delegate`.
    pub requester: String,
    /// Lowest API version accepted.
    pub min_api_version: Version,
    /// Device extensions that must be present.
    pub required_extensions: Vec<&'static CStr>,
    /// Device extensions enabled when present.
    pub optional_extensions: Vec<&'static CStr>,
    /// Features that must be present.
    pub required_features: Features,
    /// Features enabled when present.
    pub optional_features: Features,
    /// Capabilities one queue family must have.
    pub queue: QueueCaps,
}

impl Requirements {
    /// Requirements of `requester` that ask for a compute queue on Vulkan 1.1, and for
    /// `VK_EXT_external_memory_host` where the device offers it (vk-core's host transfers
    /// import host memory with it, [`crate::HostPath::Imported`]); and, where
    /// [`PIPELINE_STATS_ENV`] is set, for `pipelineExecutableInfo`.
    pub fn new(requester: impl Into<String>) -> Self {
        Requirements {
            requester: requester.into(),
            min_api_version: Version::V1_1,
            required_extensions: Vec::new(),
            optional_extensions: vec![ash::ext::external_memory_host::NAME],
            required_features: Features::empty(),
            optional_features: if pipeline_stats_requested() {
                Features::PIPELINE_EXECUTABLE_INFO
            } else {
                Features::empty()
            },
            queue: QueueCaps::COMPUTE,
        }
    }

    /// Adds a required extension.
    pub fn require_extension(mut self, name: &'static CStr) -> Self {
        push_unique(&mut self.required_extensions, name);
        self
    }

    /// Adds an optional extension.
    pub fn optional_extension(mut self, name: &'static CStr) -> Self {
        push_unique(&mut self.optional_extensions, name);
        self
    }

    /// Adds required features.
    pub fn require_features(mut self, features: Features) -> Self {
        self.required_features |= features;
        self
    }

    /// Adds optional features.
    pub fn optional_features(mut self, features: Features) -> Self {
        self.optional_features |= features;
        self
    }

    /// Adds required queue capabilities.
    pub fn require_queue(mut self, caps: QueueCaps) -> Self {
        self.queue |= caps;
        self
    }

    /// Raises the lowest accepted API version.
    pub fn min_api(mut self, version: Version) -> Self {
        self.min_api_version = self.min_api_version.max(version);
        self
    }

    /// The union of two sets of requirements: what both need, and what either can use.
    /// An item required by one side is required in the union.
    pub fn union(&self, other: &Requirements) -> Requirements {
        let mut out = self.clone();
        out.requester = format!("{} + {}", self.requester, other.requester);
        out.min_api_version = self.min_api_version.max(other.min_api_version);
        for e in &other.required_extensions {
            push_unique(&mut out.required_extensions, e);
        }
        for e in &other.optional_extensions {
            push_unique(&mut out.optional_extensions, e);
        }
        out.required_features |= other.required_features;
        out.optional_features |= other.optional_features;
        out.queue |= other.queue;
        out
    }

    /// Checks a physical device: on success, what to enable and on which queue family.
    pub fn resolve(&self, caps: &Capabilities) -> Result<Enabled, Missing> {
        let mut missing = Missing::default();
        if caps.api_version.level() < self.min_api_version.level() {
            missing.api_version = Some((caps.api_version, self.min_api_version));
        }
        let features = required_and_present(self, caps.features, &mut missing);

        let mut extensions: BTreeSet<String> = BTreeSet::new();
        for e in &self.required_extensions {
            if caps.has_extension(e) {
                extensions.insert(e.to_string_lossy().into_owned());
            } else {
                missing.extensions.push(e.to_string_lossy().into_owned());
            }
        }
        for e in &self.optional_extensions {
            if caps.has_extension(e) {
                extensions.insert(e.to_string_lossy().into_owned());
            }
        }
        // Features that live in extension structures need their extension enabled.
        for e in features.required_extensions() {
            if caps.has_extension(e) {
                extensions.insert(e.to_string_lossy().into_owned());
            }
        }

        let family = caps.queue_family_with(self.queue).map(|f| f.index);
        if family.is_none() {
            missing.queue = Some(self.queue);
        }

        match family {
            Some(queue_family) if missing.is_empty() => Ok(Enabled {
                api_version: caps.api_version,
                extensions,
                features,
                queue_family,
                queue_caps: caps.queue_families[queue_family as usize].caps,
            }),
            _ => Err(missing),
        }
    }

    /// Checks an existing device's enabled set (as when reusing a shared device). Optional
    /// items are ignored: only what is required must have been enabled.
    pub fn check_enabled(&self, enabled: &Enabled) -> Result<(), Missing> {
        let mut missing = Missing::default();
        if enabled.api_version.level() < self.min_api_version.level() {
            missing.api_version = Some((enabled.api_version, self.min_api_version));
        }
        required_and_present(self, enabled.features, &mut missing);
        for e in &self.required_extensions {
            if !e.to_str().is_ok_and(|n| enabled.extensions.contains(n)) {
                missing.extensions.push(e.to_string_lossy().into_owned());
            }
        }
        if !enabled.queue_caps.contains(self.queue) {
            missing.queue = Some(self.queue);
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(missing)
        }
    }
}

fn required_and_present(req: &Requirements, present: Features, missing: &mut Missing) -> Features {
    let absent = req.required_features - present;
    missing.features = absent.names();
    (req.required_features | req.optional_features) & present
}

fn push_unique(v: &mut Vec<&'static CStr>, name: &'static CStr) {
    if !v.contains(&name) {
        v.push(name);
    }
}

/// What a device has enabled: the result of [`Requirements::resolve`], or the description of an
/// adopted device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enabled {
    /// API version in use.
    pub api_version: Version,
    /// Enabled device extensions.
    pub extensions: BTreeSet<String>,
    /// Enabled features.
    pub features: Features,
    /// Queue family of the device's queue.
    pub queue_family: u32,
    /// That family's capabilities.
    pub queue_caps: QueueCaps,
}

impl Enabled {
    /// Whether `name` is enabled.
    pub fn has_extension(&self, name: &CStr) -> bool {
        name.to_str().is_ok_and(|n| self.extensions.contains(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::caps::{ArmSupport, Limits, MemoryInfo, QueueFamily};
    use crate::device::conv::DeviceType;

    fn synthetic(exts: &[&str], features: Features, families: &[QueueCaps]) -> Capabilities {
        Capabilities {
            name: "synthetic".into(),
            device_type: DeviceType::Discrete,
            api_version: Version::V1_3,
            driver_version: 0,
            driver_version_string: "0".into(),
            driver_name: String::new(),
            driver_info: String::new(),
            vendor_id: 0,
            device_id: 0,
            pipeline_cache_uuid: [0; 16],
            limits: Limits {
                max_storage_buffer_range: 1 << 30,
                max_compute_work_group_count: [65535; 3],
                max_compute_work_group_size: [1024, 1024, 64],
                max_compute_work_group_invocations: 1024,
                max_compute_shared_memory_size: 49152,
                max_push_constants_size: 128,
                non_coherent_atom_size: 64,
                min_storage_buffer_offset_alignment: 16,
                timestamp_period_bits: 1.0f32.to_bits(),
                subgroup_size: 32,
                subgroup_size_range: [32, 32],
            },
            memory: MemoryInfo::default(),
            extensions: exts.iter().map(|s| s.to_string()).collect(),
            features,
            queue_families: families
                .iter()
                .enumerate()
                .map(|(i, c)| QueueFamily {
                    index: i as u32,
                    count: 1,
                    caps: *c,
                    timestamp_valid_bits: 64,
                })
                .collect(),
            arm: ArmSupport::Absent,
            cooperative_matrix: Vec::new(),
            cooperative_matrix_flexible: Vec::new(),
        }
    }

    #[test]
    fn missing_required_items_are_each_named() {
        let caps = synthetic(
            &["VK_KHR_foo"],
            Features::SHADER_INT16,
            &[QueueCaps::COMPUTE],
        );
        let req = Requirements::new("test")
            .require_extension(c"VK_ARM_tensors")
            .require_features(Features::SHADER_INT8 | Features::SHADER_INT16)
            .require_queue(QueueCaps::DATA_GRAPH_ARM);
        let missing = req.resolve(&caps).unwrap_err();
        assert_eq!(missing.extensions, vec!["VK_ARM_tensors"]);
        assert_eq!(missing.features, vec!["shaderInt8"]);
        assert_eq!(
            missing.queue,
            Some(QueueCaps::COMPUTE | QueueCaps::DATA_GRAPH_ARM)
        );
        let text = missing.to_string();
        assert!(text.contains("extension VK_ARM_tensors"), "{text}");
        assert!(text.contains("feature shaderInt8"), "{text}");
        assert!(text.contains("COMPUTE|DATA_GRAPH_ARM"), "{text}");
    }

    #[test]
    fn absent_optional_items_are_not_enabled() {
        let caps = synthetic(
            &["VK_KHR_present_one"],
            Features::SHADER_INT16,
            &[
                QueueCaps::GRAPHICS,
                QueueCaps::COMPUTE | QueueCaps::TRANSFER,
            ],
        );
        let req = Requirements::new("test")
            .optional_extension(c"VK_KHR_present_one")
            .optional_extension(c"VK_KHR_absent")
            .optional_features(Features::SHADER_INT16 | Features::SHADER_FLOAT64);
        let enabled = req.resolve(&caps).unwrap();
        assert_eq!(
            enabled.extensions.iter().collect::<Vec<_>>(),
            vec!["VK_KHR_present_one"]
        );
        assert_eq!(enabled.features, Features::SHADER_INT16);
        assert_eq!(enabled.queue_family, 1);
    }

    #[test]
    fn feature_extensions_are_enabled_with_their_feature() {
        let caps = synthetic(
            &["VK_ARM_tensors", "VK_ARM_data_graph"],
            Features::TENSORS_ARM,
            &[QueueCaps::COMPUTE],
        );
        let req = Requirements::new("t").require_features(Features::TENSORS_ARM);
        let enabled = req.resolve(&caps).unwrap();
        assert!(enabled.has_extension(c"VK_ARM_tensors"));
        assert!(!enabled.has_extension(c"VK_ARM_data_graph"));
    }

    #[test]
    fn union_requires_what_either_requires() {
        let a = Requirements::new("a")
            .require_extension(c"VK_A")
            .optional_features(Features::SHADER_INT8);
        let b = Requirements::new("b")
            .require_features(Features::SHADER_INT16)
            .require_queue(QueueCaps::DATA_GRAPH_ARM)
            .min_api(Version::V1_3);
        let u = a.union(&b);
        assert_eq!(u.required_extensions, vec![c"VK_A"]);
        assert_eq!(u.required_features, Features::SHADER_INT16);
        assert_eq!(u.optional_features, Features::SHADER_INT8);
        assert!(
            u.queue
                .contains(QueueCaps::COMPUTE | QueueCaps::DATA_GRAPH_ARM)
        );
        assert_eq!(u.min_api_version, Version::V1_3);
    }

    #[test]
    fn check_enabled_names_what_an_existing_device_lacks() {
        let enabled = Enabled {
            api_version: Version::V1_2,
            extensions: BTreeSet::new(),
            features: Features::SHADER_INT16,
            queue_family: 0,
            queue_caps: QueueCaps::COMPUTE | QueueCaps::TRANSFER,
        };
        let req = Requirements::new("vgf")
            .require_extension(c"VK_ARM_tensors")
            .require_features(Features::TENSORS_ARM)
            .min_api(Version::V1_3);
        let m = req.check_enabled(&enabled).unwrap_err();
        assert_eq!(m.extensions, vec!["VK_ARM_tensors"]);
        assert_eq!(m.features, vec!["tensors"]);
        assert_eq!(m.api_version, Some((Version::V1_2, Version::V1_3)));
        assert!(Requirements::new("c").check_enabled(&enabled).is_ok());
    }
}
