//! Device features: one flag set, and one table that maps each flag to the Vulkan structure and
//! field holding it. The same table reads features from a physical device and builds the pNext
//! chain that enables them, so the two can never disagree.

use std::ffi::{CStr, c_void};
use std::fmt;

use ash::vk;

use crate::device::arm;
use crate::device::conv::Version;
use crate::device::nv;

bitflags::bitflags! {
    /// Device features that delegates may require or use.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct Features: u64 {
        /// `shaderInt8` (Vulkan 1.2).
        const SHADER_INT8 = 1 << 0;
        /// `shaderInt16`.
        const SHADER_INT16 = 1 << 1;
        /// `shaderInt64`.
        const SHADER_INT64 = 1 << 2;
        /// `shaderFloat64`.
        const SHADER_FLOAT64 = 1 << 3;
        /// `shaderFloat16` (Vulkan 1.2).
        const SHADER_FLOAT16 = 1 << 4;
        /// `storageBuffer8BitAccess` (Vulkan 1.2).
        const STORAGE_BUFFER_8BIT = 1 << 5;
        /// `uniformAndStorageBuffer8BitAccess` (Vulkan 1.2).
        const UNIFORM_AND_STORAGE_BUFFER_8BIT = 1 << 6;
        /// `storageBuffer16BitAccess` (Vulkan 1.1).
        const STORAGE_BUFFER_16BIT = 1 << 7;
        /// `uniformAndStorageBuffer16BitAccess` (Vulkan 1.1).
        const UNIFORM_AND_STORAGE_BUFFER_16BIT = 1 << 8;
        /// `vulkanMemoryModel` (Vulkan 1.2).
        const VULKAN_MEMORY_MODEL = 1 << 9;
        /// `vulkanMemoryModelDeviceScope` (Vulkan 1.2).
        const VULKAN_MEMORY_MODEL_DEVICE_SCOPE = 1 << 10;
        /// `bufferDeviceAddress` (Vulkan 1.2).
        const BUFFER_DEVICE_ADDRESS = 1 << 11;
        /// `timelineSemaphore` (Vulkan 1.2).
        const TIMELINE_SEMAPHORE = 1 << 12;
        /// `synchronization2` (Vulkan 1.3).
        const SYNCHRONIZATION_2 = 1 << 13;
        /// `maintenance4` (Vulkan 1.3).
        const MAINTENANCE_4 = 1 << 14;
        /// `subgroupSizeControl` (Vulkan 1.3).
        const SUBGROUP_SIZE_CONTROL = 1 << 15;
        /// `computeFullSubgroups` (Vulkan 1.3).
        const COMPUTE_FULL_SUBGROUPS = 1 << 16;
        /// `shaderIntegerDotProduct` (Vulkan 1.3).
        const SHADER_INTEGER_DOT_PRODUCT = 1 << 17;
        /// `maintenance5` (`VK_KHR_maintenance5`).
        const MAINTENANCE_5 = 1 << 18;
        /// `cooperativeMatrix` (`VK_KHR_cooperative_matrix`).
        const COOPERATIVE_MATRIX = 1 << 19;
        /// `tensors` (`VK_ARM_tensors`).
        const TENSORS_ARM = 1 << 20;
        /// `shaderTensorAccess` (`VK_ARM_tensors`).
        const SHADER_TENSOR_ACCESS_ARM = 1 << 21;
        /// `dataGraph` (`VK_ARM_data_graph`).
        const DATA_GRAPH_ARM = 1 << 22;
        /// `dataGraphShaderModule` (`VK_ARM_data_graph`).
        const DATA_GRAPH_SHADER_MODULE_ARM = 1 << 23;
        /// `cooperativeMatrixWorkgroupScope` (`VK_NV_cooperative_matrix2`).
        const COOPERATIVE_MATRIX_WORKGROUP_SCOPE_NV = 1 << 24;
        /// `cooperativeMatrixFlexibleDimensions` (`VK_NV_cooperative_matrix2`).
        const COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_NV = 1 << 25;
        /// `cooperativeMatrixTensorAddressing` (`VK_NV_cooperative_matrix2`).
        const COOPERATIVE_MATRIX_TENSOR_ADDRESSING_NV = 1 << 26;
        /// `cooperativeMatrixPerElementOperations` (`VK_NV_cooperative_matrix2`).
        const COOPERATIVE_MATRIX_PER_ELEMENT_OPERATIONS_NV = 1 << 27;
        /// `pipelineExecutableInfo` (`VK_KHR_pipeline_executable_properties`).
        const PIPELINE_EXECUTABLE_INFO = 1 << 28;
        /// `cooperativeMatrixReductions` (`VK_NV_cooperative_matrix2`).
        const COOPERATIVE_MATRIX_REDUCTIONS_NV = 1 << 29;
        /// `cooperativeMatrixConversions` (`VK_NV_cooperative_matrix2`).
        const COOPERATIVE_MATRIX_CONVERSIONS_NV = 1 << 30;
    }
}

impl Features {
    /// The Vulkan field names of the flags in `self`, in table order.
    pub fn names(self) -> Vec<&'static str> {
        TABLE
            .iter()
            .filter(|e| self.contains(e.flag))
            .map(|e| e.name)
            .collect()
    }

    /// The Vulkan field name of a single flag (`"shaderInt8"`), if `self` is exactly one flag.
    pub fn name(self) -> Option<&'static str> {
        TABLE.iter().find(|e| e.flag == self).map(|e| e.name)
    }

    /// The device extensions that must be enabled for the flags in `self` to be enabled.
    pub fn required_extensions(self) -> Vec<&'static CStr> {
        let mut out: Vec<&'static CStr> = Vec::new();
        for e in TABLE.iter().filter(|e| self.contains(e.flag)) {
            if let Source::Extension(ext) = e.source {
                if !out.contains(&ext) {
                    out.push(ext);
                }
            }
        }
        out
    }
}

impl fmt::Display for Features {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.names().join(", "))
    }
}

/// Where a feature lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// `VkPhysicalDeviceFeatures` (Vulkan 1.0).
    Core10,
    /// `VkPhysicalDeviceVulkan11Features` (needs a Vulkan 1.2 device: the struct is 1.2's).
    Vulkan11,
    /// `VkPhysicalDeviceVulkan12Features`.
    Vulkan12,
    /// `VkPhysicalDeviceVulkan13Features`.
    Vulkan13,
    /// A structure of the named device extension.
    Extension(&'static CStr),
}

/// One row of the feature table.
struct Row {
    flag: Features,
    name: &'static str,
    source: Source,
    field: fn(&mut FeatureChain) -> &mut vk::Bool32,
}

/// The table: every feature, its name, its structure and its field.
const TABLE: &[Row] = &[
    Row {
        flag: Features::SHADER_INT8,
        name: "shaderInt8",
        source: Source::Vulkan12,
        field: |c| &mut c.v12.shader_int8,
    },
    Row {
        flag: Features::SHADER_INT16,
        name: "shaderInt16",
        source: Source::Core10,
        field: |c| &mut c.core.features.shader_int16,
    },
    Row {
        flag: Features::SHADER_INT64,
        name: "shaderInt64",
        source: Source::Core10,
        field: |c| &mut c.core.features.shader_int64,
    },
    Row {
        flag: Features::SHADER_FLOAT64,
        name: "shaderFloat64",
        source: Source::Core10,
        field: |c| &mut c.core.features.shader_float64,
    },
    Row {
        flag: Features::SHADER_FLOAT16,
        name: "shaderFloat16",
        source: Source::Vulkan12,
        field: |c| &mut c.v12.shader_float16,
    },
    Row {
        flag: Features::STORAGE_BUFFER_8BIT,
        name: "storageBuffer8BitAccess",
        source: Source::Vulkan12,
        field: |c| &mut c.v12.storage_buffer8_bit_access,
    },
    Row {
        flag: Features::UNIFORM_AND_STORAGE_BUFFER_8BIT,
        name: "uniformAndStorageBuffer8BitAccess",
        source: Source::Vulkan12,
        field: |c| &mut c.v12.uniform_and_storage_buffer8_bit_access,
    },
    Row {
        flag: Features::STORAGE_BUFFER_16BIT,
        name: "storageBuffer16BitAccess",
        source: Source::Vulkan11,
        field: |c| &mut c.v11.storage_buffer16_bit_access,
    },
    Row {
        flag: Features::UNIFORM_AND_STORAGE_BUFFER_16BIT,
        name: "uniformAndStorageBuffer16BitAccess",
        source: Source::Vulkan11,
        field: |c| &mut c.v11.uniform_and_storage_buffer16_bit_access,
    },
    Row {
        flag: Features::VULKAN_MEMORY_MODEL,
        name: "vulkanMemoryModel",
        source: Source::Vulkan12,
        field: |c| &mut c.v12.vulkan_memory_model,
    },
    Row {
        flag: Features::VULKAN_MEMORY_MODEL_DEVICE_SCOPE,
        name: "vulkanMemoryModelDeviceScope",
        source: Source::Vulkan12,
        field: |c| &mut c.v12.vulkan_memory_model_device_scope,
    },
    Row {
        flag: Features::BUFFER_DEVICE_ADDRESS,
        name: "bufferDeviceAddress",
        source: Source::Vulkan12,
        field: |c| &mut c.v12.buffer_device_address,
    },
    Row {
        flag: Features::TIMELINE_SEMAPHORE,
        name: "timelineSemaphore",
        source: Source::Vulkan12,
        field: |c| &mut c.v12.timeline_semaphore,
    },
    Row {
        flag: Features::SYNCHRONIZATION_2,
        name: "synchronization2",
        source: Source::Vulkan13,
        field: |c| &mut c.v13.synchronization2,
    },
    Row {
        flag: Features::MAINTENANCE_4,
        name: "maintenance4",
        source: Source::Vulkan13,
        field: |c| &mut c.v13.maintenance4,
    },
    Row {
        flag: Features::SUBGROUP_SIZE_CONTROL,
        name: "subgroupSizeControl",
        source: Source::Vulkan13,
        field: |c| &mut c.v13.subgroup_size_control,
    },
    Row {
        flag: Features::COMPUTE_FULL_SUBGROUPS,
        name: "computeFullSubgroups",
        source: Source::Vulkan13,
        field: |c| &mut c.v13.compute_full_subgroups,
    },
    Row {
        flag: Features::SHADER_INTEGER_DOT_PRODUCT,
        name: "shaderIntegerDotProduct",
        source: Source::Vulkan13,
        field: |c| &mut c.v13.shader_integer_dot_product,
    },
    Row {
        flag: Features::MAINTENANCE_5,
        name: "maintenance5",
        source: Source::Extension(ash::khr::maintenance5::NAME),
        field: |c| &mut c.maintenance5.maintenance5,
    },
    Row {
        flag: Features::COOPERATIVE_MATRIX_WORKGROUP_SCOPE_NV,
        name: "cooperativeMatrixWorkgroupScope",
        source: Source::Extension(nv::COOPERATIVE_MATRIX_2_EXTENSION_NAME),
        field: |c| &mut c.cooperative_matrix2.cooperative_matrix_workgroup_scope,
    },
    Row {
        flag: Features::COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_NV,
        name: "cooperativeMatrixFlexibleDimensions",
        source: Source::Extension(nv::COOPERATIVE_MATRIX_2_EXTENSION_NAME),
        field: |c| &mut c.cooperative_matrix2.cooperative_matrix_flexible_dimensions,
    },
    Row {
        flag: Features::COOPERATIVE_MATRIX_TENSOR_ADDRESSING_NV,
        name: "cooperativeMatrixTensorAddressing",
        source: Source::Extension(nv::COOPERATIVE_MATRIX_2_EXTENSION_NAME),
        field: |c| &mut c.cooperative_matrix2.cooperative_matrix_tensor_addressing,
    },
    Row {
        flag: Features::COOPERATIVE_MATRIX_PER_ELEMENT_OPERATIONS_NV,
        name: "cooperativeMatrixPerElementOperations",
        source: Source::Extension(nv::COOPERATIVE_MATRIX_2_EXTENSION_NAME),
        field: |c| {
            &mut c
                .cooperative_matrix2
                .cooperative_matrix_per_element_operations
        },
    },
    Row {
        flag: Features::COOPERATIVE_MATRIX_REDUCTIONS_NV,
        name: "cooperativeMatrixReductions",
        source: Source::Extension(nv::COOPERATIVE_MATRIX_2_EXTENSION_NAME),
        field: |c| &mut c.cooperative_matrix2.cooperative_matrix_reductions,
    },
    Row {
        flag: Features::COOPERATIVE_MATRIX_CONVERSIONS_NV,
        name: "cooperativeMatrixConversions",
        source: Source::Extension(nv::COOPERATIVE_MATRIX_2_EXTENSION_NAME),
        field: |c| &mut c.cooperative_matrix2.cooperative_matrix_conversions,
    },
    Row {
        flag: Features::PIPELINE_EXECUTABLE_INFO,
        name: "pipelineExecutableInfo",
        source: Source::Extension(ash::khr::pipeline_executable_properties::NAME),
        field: |c| &mut c.pipeline_executable.pipeline_executable_info,
    },
    Row {
        flag: Features::COOPERATIVE_MATRIX,
        name: "cooperativeMatrix",
        source: Source::Extension(ash::khr::cooperative_matrix::NAME),
        field: |c| &mut c.cooperative_matrix.cooperative_matrix,
    },
    Row {
        flag: Features::TENSORS_ARM,
        name: "tensors",
        source: Source::Extension(arm::TENSORS_EXTENSION_NAME),
        field: |c| &mut c.tensor.tensors,
    },
    Row {
        flag: Features::SHADER_TENSOR_ACCESS_ARM,
        name: "shaderTensorAccess",
        source: Source::Extension(arm::TENSORS_EXTENSION_NAME),
        field: |c| &mut c.tensor.shader_tensor_access,
    },
    Row {
        flag: Features::DATA_GRAPH_ARM,
        name: "dataGraph",
        source: Source::Extension(arm::DATA_GRAPH_EXTENSION_NAME),
        field: |c| &mut c.data_graph.data_graph,
    },
    Row {
        flag: Features::DATA_GRAPH_SHADER_MODULE_ARM,
        name: "dataGraphShaderModule",
        source: Source::Extension(arm::DATA_GRAPH_EXTENSION_NAME),
        field: |c| &mut c.data_graph.data_graph_shader_module,
    },
];

/// Which feature structures a device can take in its chain.
#[derive(Clone, Copy)]
pub(crate) struct ChainScope<'a> {
    pub api_version: Version,
    pub extensions: &'a dyn Fn(&CStr) -> bool,
}

impl ChainScope<'_> {
    fn has(&self, source: Source) -> bool {
        match source {
            Source::Core10 => true,
            Source::Vulkan11 | Source::Vulkan12 => self.api_version >= Version::V1_2,
            Source::Vulkan13 => self.api_version >= Version::V1_3,
            Source::Extension(name) => (self.extensions)(name),
        }
    }
}

/// Every feature structure, owned in one heap block so that the pNext pointers between them
/// stay valid while the chain is in use.
#[derive(Default)]
#[allow(missing_debug_implementations)]
pub(crate) struct FeatureChain {
    core: vk::PhysicalDeviceFeatures2<'static>,
    v11: vk::PhysicalDeviceVulkan11Features<'static>,
    v12: vk::PhysicalDeviceVulkan12Features<'static>,
    v13: vk::PhysicalDeviceVulkan13Features<'static>,
    maintenance5: vk::PhysicalDeviceMaintenance5FeaturesKHR<'static>,
    cooperative_matrix: vk::PhysicalDeviceCooperativeMatrixFeaturesKHR<'static>,
    cooperative_matrix2: nv::PhysicalDeviceCooperativeMatrix2FeaturesNV,
    pipeline_executable: vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR<'static>,
    tensor: arm::PhysicalDeviceTensorFeaturesARM,
    data_graph: arm::PhysicalDeviceDataGraphFeaturesARM,
}

impl FeatureChain {
    /// A chain with every feature false.
    pub fn new() -> Box<Self> {
        Box::default()
    }

    /// A chain with exactly `features` set to true (those the scope can carry).
    pub fn with(features: Features, scope: &ChainScope<'_>) -> Box<Self> {
        let mut chain = Self::new();
        for row in TABLE.iter().filter(|r| features.contains(r.flag)) {
            if scope.has(row.source) {
                *(row.field)(&mut chain) = vk::TRUE;
            }
        }
        chain
    }

    /// Reads back the flags that are true, limited to what the scope carries.
    pub fn features(&mut self, scope: &ChainScope<'_>) -> Features {
        let mut out = Features::empty();
        for row in TABLE {
            if scope.has(row.source) && *(row.field)(self) == vk::TRUE {
                out |= row.flag;
            }
        }
        out
    }

    /// Links the structures the scope can carry behind `core` and returns it, ready to pass to
    /// `vkGetPhysicalDeviceFeatures2` or as `VkDeviceCreateInfo::pNext`.
    ///
    /// The pointers stay valid as long as `self` is neither moved nor dropped; it lives in a
    /// `Box`, so callers keep the box alive across the Vulkan call.
    pub fn link(&mut self, scope: &ChainScope<'_>) -> &mut vk::PhysicalDeviceFeatures2<'static> {
        let mut next: *mut c_void = std::ptr::null_mut();
        // Built back to front: each included structure points at the previous head.
        macro_rules! push {
            ($field:ident, $source:expr) => {
                if scope.has($source) {
                    self.$field.p_next = next;
                    next = (&mut self.$field) as *mut _ as *mut c_void;
                }
            };
        }
        push!(
            data_graph,
            Source::Extension(arm::DATA_GRAPH_EXTENSION_NAME)
        );
        push!(tensor, Source::Extension(arm::TENSORS_EXTENSION_NAME));
        push!(
            cooperative_matrix2,
            Source::Extension(nv::COOPERATIVE_MATRIX_2_EXTENSION_NAME)
        );
        push!(
            cooperative_matrix,
            Source::Extension(ash::khr::cooperative_matrix::NAME)
        );
        push!(
            pipeline_executable,
            Source::Extension(ash::khr::pipeline_executable_properties::NAME)
        );
        push!(
            maintenance5,
            Source::Extension(ash::khr::maintenance5::NAME)
        );
        push!(v13, Source::Vulkan13);
        push!(v12, Source::Vulkan12);
        push!(v11, Source::Vulkan11);
        self.core.p_next = next;
        &mut self.core
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_flag_has_exactly_one_row() {
        for flag in Features::all().iter() {
            let rows = TABLE.iter().filter(|r| r.flag == flag).count();
            assert_eq!(rows, 1, "{flag:?}");
        }
        assert_eq!(TABLE.len(), Features::all().iter().count());
    }

    #[test]
    fn with_then_read_round_trips_within_scope() {
        let has_all = |_: &CStr| true;
        let scope = ChainScope {
            api_version: Version::V1_3,
            extensions: &has_all,
        };
        let wanted = Features::SHADER_INT8 | Features::TENSORS_ARM | Features::SHADER_INT64;
        let mut chain = FeatureChain::with(wanted, &scope);
        assert_eq!(chain.features(&scope), wanted);

        let has_none = |_: &CStr| false;
        let narrow = ChainScope {
            api_version: Version::V1_1,
            extensions: &has_none,
        };
        // 1.2 and extension structures are out of a 1.1 scope without extensions.
        let mut chain = FeatureChain::with(wanted, &narrow);
        assert_eq!(chain.features(&narrow), Features::SHADER_INT64);
    }

    #[test]
    fn feature_extensions_are_listed() {
        let exts = (Features::DATA_GRAPH_ARM | Features::TENSORS_ARM | Features::SHADER_INT8)
            .required_extensions();
        assert_eq!(
            exts,
            vec![arm::TENSORS_EXTENSION_NAME, arm::DATA_GRAPH_EXTENSION_NAME]
        );
    }
}
