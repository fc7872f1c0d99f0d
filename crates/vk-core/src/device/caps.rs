//! What a physical device offers: versions, limits, memory, extensions, features, queue families.

use std::collections::BTreeSet;
use std::ffi::CStr;

use ash::vk;

use crate::device::arm;
use crate::device::conv::{DeviceType, QueueCaps, Version, driver_version_string, fixed_str};
use crate::device::features::{ChainScope, FeatureChain, Features};

/// How a device gets `VK_ARM_tensors` and `VK_ARM_data_graph`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArmSupport {
    /// The driver implements them.
    Native,
    /// Arm's ML emulation layers provide them on top of the driver.
    Emulated,
    /// Not available.
    Absent,
}

impl ArmSupport {
    /// Short name: `native`, `emulated` or `absent`.
    pub fn as_str(self) -> &'static str {
        match self {
            ArmSupport::Native => "native",
            ArmSupport::Emulated => "emulated",
            ArmSupport::Absent => "absent",
        }
    }
}

/// The limits delegates care about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// `maxStorageBufferRange`, in bytes.
    pub max_storage_buffer_range: u32,
    /// `maxComputeWorkGroupCount`.
    pub max_compute_work_group_count: [u32; 3],
    /// `maxComputeWorkGroupSize`.
    pub max_compute_work_group_size: [u32; 3],
    /// `maxComputeWorkGroupInvocations`.
    pub max_compute_work_group_invocations: u32,
    /// `maxComputeSharedMemorySize`, in bytes.
    pub max_compute_shared_memory_size: u32,
    /// `maxPushConstantsSize`, in bytes.
    pub max_push_constants_size: u32,
    /// `nonCoherentAtomSize`, in bytes.
    pub non_coherent_atom_size: u64,
    /// `minStorageBufferOffsetAlignment`, in bytes.
    pub min_storage_buffer_offset_alignment: u64,
    /// `timestampPeriod`, nanoseconds per tick (as `f32` bits, to keep `Eq`).
    pub timestamp_period_bits: u32,
    /// Default subgroup size (Vulkan 1.1), 0 when unknown.
    pub subgroup_size: u32,
    /// Smallest and largest subgroup size (Vulkan 1.3 subgroup size control), 0 when unknown.
    pub subgroup_size_range: [u32; 2],
}

impl Limits {
    /// `timestampPeriod` in nanoseconds per tick.
    pub fn timestamp_period(&self) -> f32 {
        f32::from_bits(self.timestamp_period_bits)
    }
}

/// One memory heap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryHeap {
    /// Size in bytes.
    pub size: u64,
    /// Whether the heap is device-local.
    pub device_local: bool,
}

/// One memory type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryType {
    /// Property flags.
    pub flags: vk::MemoryPropertyFlags,
    /// Index of its heap.
    pub heap: u32,
}

/// Memory heaps and types.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemoryInfo {
    /// Heaps, in Vulkan order.
    pub heaps: Vec<MemoryHeap>,
    /// Types, in Vulkan order.
    pub types: Vec<MemoryType>,
}

impl MemoryInfo {
    /// Total bytes of device-local heaps.
    pub fn device_local_bytes(&self) -> u64 {
        self.heaps
            .iter()
            .filter(|h| h.device_local)
            .map(|h| h.size)
            .sum()
    }

    /// Whether some memory type is device-local, host-visible and host-coherent at once, in a
    /// heap of at least `min_heap` bytes (true on integrated GPUs and CPU drivers; on discrete
    /// GPUs such heaps are small or absent).
    pub fn has_unified(&self, min_heap: u64) -> bool {
        let want = vk::MemoryPropertyFlags::DEVICE_LOCAL
            | vk::MemoryPropertyFlags::HOST_VISIBLE
            | vk::MemoryPropertyFlags::HOST_COHERENT;
        self.types.iter().any(|t| {
            t.flags.contains(want)
                && self
                    .heaps
                    .get(t.heap as usize)
                    .is_some_and(|h| h.size >= min_heap)
        })
    }

    /// The first memory type allowed by `type_bits` that has all of `flags`.
    pub fn find(&self, type_bits: u32, flags: vk::MemoryPropertyFlags) -> Option<u32> {
        self.types
            .iter()
            .enumerate()
            .find(|(i, t)| type_bits & (1 << i) != 0 && t.flags.contains(flags))
            .map(|(i, _)| i as u32)
    }
}

/// One queue family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueFamily {
    /// Family index.
    pub index: u32,
    /// Number of queues.
    pub count: u32,
    /// Capabilities.
    pub caps: QueueCaps,
    /// `timestampValidBits` (0: no timestamps).
    pub timestamp_valid_bits: u32,
}

/// Everything `vk-core` knows about a physical device.
#[derive(Debug, Clone)]
pub struct Capabilities {
    /// Device name.
    pub name: String,
    /// Device type.
    pub device_type: DeviceType,
    /// API version the device supports.
    pub api_version: Version,
    /// Raw driver version.
    pub driver_version: u32,
    /// Driver version in the vendor's notation.
    pub driver_version_string: String,
    /// Driver name (Vulkan 1.2 driver properties), empty when unknown.
    pub driver_name: String,
    /// Driver info string, empty when unknown.
    pub driver_info: String,
    /// PCI vendor id.
    pub vendor_id: u32,
    /// PCI device id.
    pub device_id: u32,
    /// `pipelineCacheUUID`: pipeline-cache data from another driver build is not this one's.
    pub pipeline_cache_uuid: [u8; 16],
    /// Limits.
    pub limits: Limits,
    /// Memory heaps and types.
    pub memory: MemoryInfo,
    /// Device extension names.
    pub extensions: BTreeSet<String>,
    /// Supported features (those of [`Features`]).
    pub features: Features,
    /// Queue families.
    pub queue_families: Vec<QueueFamily>,
    /// How the ARM ML extensions are provided.
    pub arm: ArmSupport,
    /// The cooperative-matrix shapes of `VK_KHR_cooperative_matrix` (empty without it).
    pub cooperative_matrix: Vec<CoopMatrixShape>,
    /// The flexible-dimension shapes of `VK_NV_cooperative_matrix2` (empty without it).
    pub cooperative_matrix_flexible: Vec<CoopFlexibleShape>,
}

/// One `VkCooperativeMatrixFlexibleDimensionsPropertiesNV`: matrices of any multiple of the
/// granularities, with these component types, scope and work-group size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CoopFlexibleShape {
    /// Granularity of the rows of A and C.
    pub m: u32,
    /// Granularity of the columns of B and C.
    pub n: u32,
    /// Granularity of the columns of A and rows of B.
    pub k: u32,
    /// Component type of A.
    pub a: CoopComponent,
    /// Component type of B.
    pub b: CoopComponent,
    /// Component type of C.
    pub c: CoopComponent,
    /// Component type of the result.
    pub result: CoopComponent,
    /// Whether the scope is the work group.
    pub workgroup_scope: bool,
    /// Invocations of the work group the shape is for (workgroup scope).
    pub invocations: u32,
}

/// A component type of a cooperative matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CoopComponent {
    /// 16-bit float.
    F16,
    /// 32-bit float.
    F32,
    /// 8-bit signed integer.
    S8,
    /// 32-bit signed integer.
    S32,
    /// Any other type (bf16, fp8, unsigned types, ...).
    Other(i32),
}

impl CoopComponent {
    fn from_vk(t: vk::ComponentTypeKHR) -> CoopComponent {
        match t {
            vk::ComponentTypeKHR::FLOAT16 => CoopComponent::F16,
            vk::ComponentTypeKHR::FLOAT32 => CoopComponent::F32,
            vk::ComponentTypeKHR::SINT8 => CoopComponent::S8,
            vk::ComponentTypeKHR::SINT32 => CoopComponent::S32,
            other => CoopComponent::Other(other.as_raw()),
        }
    }
}

/// One `VkCooperativeMatrixPropertiesKHR`: `C (M x N) = A (M x K) * B (K x N) + C`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CoopMatrixShape {
    /// Rows of A and C.
    pub m: u32,
    /// Columns of B and C.
    pub n: u32,
    /// Columns of A, rows of B.
    pub k: u32,
    /// Component type of A.
    pub a: CoopComponent,
    /// Component type of B.
    pub b: CoopComponent,
    /// Component type of C.
    pub c: CoopComponent,
    /// Component type of the result.
    pub result: CoopComponent,
    /// Whether the scope is a subgroup (the only scope the kernels use).
    pub subgroup_scope: bool,
}

/// Whether a shape's A, B, C and result component types are `ab`, `ab`, `acc` and `acc`.
fn types_are([a, b, c, result]: [CoopComponent; 4], ab: CoopComponent, acc: CoopComponent) -> bool {
    a == ab && b == ab && c == acc && result == acc
}

impl Capabilities {
    /// Whether the device lists `name`.
    pub fn has_extension(&self, name: &CStr) -> bool {
        name.to_str().is_ok_and(|n| self.extensions.contains(n))
    }

    /// The subgroup-scope cooperative-matrix shapes with these component types.
    pub fn coop_shapes(
        &self,
        ab: CoopComponent,
        acc: CoopComponent,
    ) -> impl Iterator<Item = &CoopMatrixShape> + '_ {
        self.cooperative_matrix
            .iter()
            .filter(move |s| s.subgroup_scope && types_are([s.a, s.b, s.c, s.result], ab, acc))
    }

    /// The workgroup-scope flexible-dimension shapes with these component types.
    pub fn coop_flexible_shapes(
        &self,
        ab: CoopComponent,
        acc: CoopComponent,
    ) -> impl Iterator<Item = &CoopFlexibleShape> + '_ {
        self.cooperative_matrix_flexible
            .iter()
            .filter(move |s| s.workgroup_scope && types_are([s.a, s.b, s.c, s.result], ab, acc))
    }

    /// Whether a workgroup-scope `[m, n, k]` product (`m x k` by `k x n`) with these component
    /// types on `invocations` invocations fits a reported flexible-dimension shape: one for
    /// that work-group size whose granularities divide the tile.
    pub fn coop_workgroup_fits(
        &self,
        ab: CoopComponent,
        acc: CoopComponent,
        [m, n, k]: [u32; 3],
        invocations: u32,
    ) -> bool {
        self.coop_flexible_shapes(ab, acc).any(|s| {
            s.invocations == invocations
                && [(m, s.m), (n, s.n), (k, s.k)]
                    .iter()
                    .all(|&(d, g)| g > 0 && d % g == 0)
        })
    }

    /// The lowest-index queue family that has every capability in `caps`.
    pub fn queue_family_with(&self, caps: QueueCaps) -> Option<&QueueFamily> {
        self.queue_families
            .iter()
            .find(|f| f.count > 0 && f.caps.contains(caps))
    }

    /// Reads the capabilities of `physical`.
    ///
    /// `emulated` says whether the instance has the ARM emulation layers enabled (then ARM
    /// extensions the device lists are emulated, not native).
    pub(crate) fn query(
        instance: &ash::Instance,
        instance_api: Version,
        physical: vk::PhysicalDevice,
        emulated: bool,
    ) -> Result<Self, crate::error::VkError> {
        use crate::error::VkResultExt;

        // SAFETY: `physical` was enumerated from `instance`, which is alive.
        let props = unsafe { instance.get_physical_device_properties(physical) };
        // The usable API version is the lower of the device's and the instance's.
        let api_version = Version(props.api_version.min(instance_api.0));

        // SAFETY: as above.
        let ext_props = unsafe { instance.enumerate_device_extension_properties(physical) }
            .vk("vkEnumerateDeviceExtensionProperties")?;
        let extensions: BTreeSet<String> = ext_props
            .iter()
            .map(|e| fixed_str(&e.extension_name))
            .collect();

        let has_ext = |name: &CStr| name.to_str().is_ok_and(|n| extensions.contains(n));
        let scope = ChainScope {
            api_version,
            extensions: &has_ext,
        };

        let features = if api_version >= Version::V1_1 {
            let mut chain = FeatureChain::new();
            let head = chain.link(&scope);
            // SAFETY: `head` starts a valid pNext chain of structures owned by `chain`, which
            // outlives the call; every chained structure is known to the device (API version
            // or listed extension).
            unsafe { instance.get_physical_device_features2(physical, head) };
            chain.features(&scope)
        } else {
            // SAFETY: `physical` belongs to `instance`.
            let core = unsafe { instance.get_physical_device_features(physical) };
            let mut chain = FeatureChain::new();
            let head = chain.link(&scope);
            head.features = core;
            chain.features(&scope)
        };

        let mut driver_name = String::new();
        let mut driver_info = String::new();
        let mut subgroup_size = 0;
        let mut subgroup_size_range = [0, 0];
        if api_version >= Version::V1_2 {
            let mut driver = vk::PhysicalDeviceDriverProperties::default();
            let mut subgroup = vk::PhysicalDeviceSubgroupProperties::default();
            let mut control = vk::PhysicalDeviceSubgroupSizeControlProperties::default();
            let mut props2 = vk::PhysicalDeviceProperties2::default()
                .push_next(&mut driver)
                .push_next(&mut subgroup);
            if api_version >= Version::V1_3 {
                props2 = props2.push_next(&mut control);
            }
            // SAFETY: the chain holds structures of core 1.1-1.3, within the device's version.
            unsafe { instance.get_physical_device_properties2(physical, &mut props2) };
            driver_name = fixed_str(&driver.driver_name);
            driver_info = fixed_str(&driver.driver_info);
            subgroup_size = subgroup.subgroup_size;
            subgroup_size_range = [control.min_subgroup_size, control.max_subgroup_size];
        }

        // SAFETY: `physical` belongs to `instance`.
        let mem = unsafe { instance.get_physical_device_memory_properties(physical) };
        let memory = MemoryInfo {
            heaps: mem.memory_heaps[..mem.memory_heap_count as usize]
                .iter()
                .map(|h| MemoryHeap {
                    size: h.size,
                    device_local: h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL),
                })
                .collect(),
            types: mem.memory_types[..mem.memory_type_count as usize]
                .iter()
                .map(|t| MemoryType {
                    flags: t.property_flags,
                    heap: t.heap_index,
                })
                .collect(),
        };

        // SAFETY: `physical` belongs to `instance`.
        let families = unsafe { instance.get_physical_device_queue_family_properties(physical) };
        let queue_families = families
            .iter()
            .enumerate()
            .map(|(i, f)| QueueFamily {
                index: i as u32,
                count: f.queue_count,
                caps: QueueCaps::from_vk(f.queue_flags),
                timestamp_valid_bits: f.timestamp_valid_bits,
            })
            .collect();

        let l = &props.limits;
        let limits = Limits {
            max_storage_buffer_range: l.max_storage_buffer_range,
            max_compute_work_group_count: l.max_compute_work_group_count,
            max_compute_work_group_size: l.max_compute_work_group_size,
            max_compute_work_group_invocations: l.max_compute_work_group_invocations,
            max_compute_shared_memory_size: l.max_compute_shared_memory_size,
            max_push_constants_size: l.max_push_constants_size,
            non_coherent_atom_size: l.non_coherent_atom_size,
            min_storage_buffer_offset_alignment: l.min_storage_buffer_offset_alignment,
            timestamp_period_bits: l.timestamp_period.to_bits(),
            subgroup_size,
            subgroup_size_range,
        };

        let has_arm =
            has_ext(arm::TENSORS_EXTENSION_NAME) && has_ext(arm::DATA_GRAPH_EXTENSION_NAME);
        let arm = match (has_arm, emulated) {
            (false, _) => ArmSupport::Absent,
            (true, true) => ArmSupport::Emulated,
            (true, false) => ArmSupport::Native,
        };

        Ok(Capabilities {
            name: fixed_str(&props.device_name),
            device_type: DeviceType::from_vk(props.device_type),
            api_version,
            driver_version: props.driver_version,
            driver_version_string: driver_version_string(props.vendor_id, props.driver_version),
            driver_name,
            driver_info,
            vendor_id: props.vendor_id,
            device_id: props.device_id,
            pipeline_cache_uuid: props.pipeline_cache_uuid,
            limits,
            memory,
            extensions,
            features,
            queue_families,
            arm,
            cooperative_matrix: Vec::new(),
            cooperative_matrix_flexible: Vec::new(),
        })
    }
}

/// The flexible-dimension shapes `VK_NV_cooperative_matrix2` reports for `physical`.
///
/// # Safety
/// `physical` was enumerated from `instance`, which `entry` loaded, and the device lists the
/// extension.
pub(crate) unsafe fn query_coop_flexible(
    entry: &ash::Entry,
    instance: &ash::Instance,
    physical: vk::PhysicalDevice,
) -> Vec<CoopFlexibleShape> {
    // SAFETY: guaranteed by the caller.
    let props =
        unsafe { crate::device::nv::flexible_dimensions_properties(entry, instance, physical) };
    let props = match props {
        Ok(p) => p,
        Err(e) => {
            log::warn!(
                "vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV: {e}; no shapes"
            );
            return Vec::new();
        }
    };
    props
        .iter()
        .map(|p| CoopFlexibleShape {
            m: p.m_granularity,
            n: p.n_granularity,
            k: p.k_granularity,
            a: CoopComponent::from_vk(p.a_type),
            b: CoopComponent::from_vk(p.b_type),
            c: CoopComponent::from_vk(p.c_type),
            result: CoopComponent::from_vk(p.result_type),
            workgroup_scope: p.scope == vk::ScopeKHR::WORKGROUP,
            invocations: p.workgroup_invocations,
        })
        .collect()
}

/// The shapes `VK_KHR_cooperative_matrix` reports for `physical`.
///
/// # Safety
/// `physical` belongs to the instance `fns` was loaded for, and the device lists the
/// extension.
pub(crate) unsafe fn query_coop_shapes(
    fns: &ash::khr::cooperative_matrix::Instance,
    physical: vk::PhysicalDevice,
) -> Vec<CoopMatrixShape> {
    // SAFETY: guaranteed by the caller.
    let props = unsafe { fns.get_physical_device_cooperative_matrix_properties(physical) };
    let props = match props {
        Ok(p) => p,
        Err(e) => {
            log::warn!("vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR: {e}; no shapes");
            return Vec::new();
        }
    };
    props
        .iter()
        .map(|p| CoopMatrixShape {
            m: p.m_size,
            n: p.n_size,
            k: p.k_size,
            a: CoopComponent::from_vk(p.a_type),
            b: CoopComponent::from_vk(p.b_type),
            c: CoopComponent::from_vk(p.c_type),
            result: CoopComponent::from_vk(p.result_type),
            subgroup_scope: p.scope == vk::ScopeKHR::SUBGROUP,
        })
        .collect()
}
