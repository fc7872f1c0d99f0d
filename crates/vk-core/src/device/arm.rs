//! Bindings for `VK_ARM_tensors` and `VK_ARM_data_graph`, which `ash` 0.38 does not have.
//!
//! Written from Khronos' `Vulkan-Headers` (`include/vulkan/vulkan_core.h`). Everything for these
//! extensions lives in this one module, so that an `ash` release that has them replaces one
//! file. Struct layouts are pinned by tests (sizes and field offsets as the C headers lay them
//! out on 64-bit targets).
//!
//! Entry points are loaded through `vkGetDeviceProcAddr` when the device is created
//! ([`crate::Device`]); a NULL pointer is an error ([`crate::Error::MissingEntryPoint`]), never
//! a deferred crash.

#![allow(non_camel_case_types, missing_docs)]

use std::ffi::{CStr, c_char, c_void};
use std::fmt;

use ash::vk;

/// `VK_ARM_tensors`.
pub const TENSORS_EXTENSION_NAME: &CStr = c"VK_ARM_tensors";
/// `VK_ARM_data_graph`.
pub const DATA_GRAPH_EXTENSION_NAME: &CStr = c"VK_ARM_data_graph";
/// `VK_ARM_data_graph_instruction_set_tosa`.
pub const DATA_GRAPH_TOSA_EXTENSION_NAME: &CStr = c"VK_ARM_data_graph_instruction_set_tosa";

// ---- enum values -------------------------------------------------------------------------

/// `VK_QUEUE_DATA_GRAPH_BIT_ARM`.
pub const QUEUE_DATA_GRAPH_BIT_ARM: vk::QueueFlags = vk::QueueFlags::from_raw(0x0000_0400);
/// `VK_DESCRIPTOR_TYPE_TENSOR_ARM`.
pub const DESCRIPTOR_TYPE_TENSOR_ARM: vk::DescriptorType =
    vk::DescriptorType::from_raw(1_000_460_000);
/// `VK_PIPELINE_BIND_POINT_DATA_GRAPH_ARM`.
pub const PIPELINE_BIND_POINT_DATA_GRAPH_ARM: vk::PipelineBindPoint =
    vk::PipelineBindPoint::from_raw(1_000_507_000);
/// `VK_PIPELINE_STAGE_2_DATA_GRAPH_BIT_ARM`.
pub const PIPELINE_STAGE_2_DATA_GRAPH_BIT_ARM: vk::PipelineStageFlags2 =
    vk::PipelineStageFlags2::from_raw(0x0000_0400_0000_0000);
/// `VK_ACCESS_2_DATA_GRAPH_READ_BIT_ARM`.
pub const ACCESS_2_DATA_GRAPH_READ_BIT_ARM: vk::AccessFlags2 =
    vk::AccessFlags2::from_raw(0x0000_8000_0000_0000);
/// `VK_ACCESS_2_DATA_GRAPH_WRITE_BIT_ARM`.
pub const ACCESS_2_DATA_GRAPH_WRITE_BIT_ARM: vk::AccessFlags2 =
    vk::AccessFlags2::from_raw(0x0001_0000_0000_0000);

/// `VK_FORMAT_R8_BOOL_ARM`.
pub const FORMAT_R8_BOOL_ARM: vk::Format = vk::Format::from_raw(1_000_460_000);
/// `VK_IMAGE_LAYOUT_TENSOR_ALIASING_ARM`.
pub const IMAGE_LAYOUT_TENSOR_ALIASING_ARM: vk::ImageLayout =
    vk::ImageLayout::from_raw(1_000_460_000);
/// `VK_FORMAT_FEATURE_2_TENSOR_SHADER_BIT_ARM`.
pub const FORMAT_FEATURE_2_TENSOR_SHADER_BIT_ARM: vk::FormatFeatureFlags2 =
    vk::FormatFeatureFlags2::from_raw(0x80_0000_0000);
/// `VK_FORMAT_FEATURE_2_TENSOR_DATA_GRAPH_BIT_ARM`.
pub const FORMAT_FEATURE_2_TENSOR_DATA_GRAPH_BIT_ARM: vk::FormatFeatureFlags2 =
    vk::FormatFeatureFlags2::from_raw(0x1_0000_0000_0000);

/// `VkStructureType` values of both extensions.
pub mod stype {
    use ash::vk::StructureType as S;
    pub const TENSOR_CREATE_INFO_ARM: S = S::from_raw(1_000_460_000);
    pub const TENSOR_VIEW_CREATE_INFO_ARM: S = S::from_raw(1_000_460_001);
    pub const BIND_TENSOR_MEMORY_INFO_ARM: S = S::from_raw(1_000_460_002);
    pub const WRITE_DESCRIPTOR_SET_TENSOR_ARM: S = S::from_raw(1_000_460_003);
    pub const PHYSICAL_DEVICE_TENSOR_PROPERTIES_ARM: S = S::from_raw(1_000_460_004);
    pub const TENSOR_FORMAT_PROPERTIES_ARM: S = S::from_raw(1_000_460_005);
    pub const TENSOR_DESCRIPTION_ARM: S = S::from_raw(1_000_460_006);
    pub const TENSOR_MEMORY_REQUIREMENTS_INFO_ARM: S = S::from_raw(1_000_460_007);
    pub const TENSOR_MEMORY_BARRIER_ARM: S = S::from_raw(1_000_460_008);
    pub const PHYSICAL_DEVICE_TENSOR_FEATURES_ARM: S = S::from_raw(1_000_460_009);
    pub const DEVICE_TENSOR_MEMORY_REQUIREMENTS_ARM: S = S::from_raw(1_000_460_010);
    pub const COPY_TENSOR_INFO_ARM: S = S::from_raw(1_000_460_011);
    pub const TENSOR_COPY_ARM: S = S::from_raw(1_000_460_012);
    pub const TENSOR_DEPENDENCY_INFO_ARM: S = S::from_raw(1_000_460_013);
    pub const MEMORY_DEDICATED_ALLOCATE_INFO_TENSOR_ARM: S = S::from_raw(1_000_460_014);

    pub const DATA_GRAPH_PIPELINE_CREATE_INFO_ARM: S = S::from_raw(1_000_507_000);
    pub const DATA_GRAPH_PIPELINE_SESSION_CREATE_INFO_ARM: S = S::from_raw(1_000_507_001);
    pub const DATA_GRAPH_PIPELINE_RESOURCE_INFO_ARM: S = S::from_raw(1_000_507_002);
    pub const DATA_GRAPH_PIPELINE_CONSTANT_ARM: S = S::from_raw(1_000_507_003);
    pub const DATA_GRAPH_PIPELINE_SESSION_MEMORY_REQUIREMENTS_INFO_ARM: S =
        S::from_raw(1_000_507_004);
    pub const BIND_DATA_GRAPH_PIPELINE_SESSION_MEMORY_INFO_ARM: S = S::from_raw(1_000_507_005);
    pub const PHYSICAL_DEVICE_DATA_GRAPH_FEATURES_ARM: S = S::from_raw(1_000_507_006);
    pub const DATA_GRAPH_PIPELINE_SHADER_MODULE_CREATE_INFO_ARM: S = S::from_raw(1_000_507_007);
    pub const DATA_GRAPH_PIPELINE_PROPERTY_QUERY_RESULT_ARM: S = S::from_raw(1_000_507_008);
    pub const DATA_GRAPH_PIPELINE_INFO_ARM: S = S::from_raw(1_000_507_009);
    pub const DATA_GRAPH_PIPELINE_COMPILER_CONTROL_CREATE_INFO_ARM: S = S::from_raw(1_000_507_010);
    pub const DATA_GRAPH_PIPELINE_SESSION_BIND_POINT_REQUIREMENTS_INFO_ARM: S =
        S::from_raw(1_000_507_011);
    pub const DATA_GRAPH_PIPELINE_SESSION_BIND_POINT_REQUIREMENT_ARM: S =
        S::from_raw(1_000_507_012);
    pub const DATA_GRAPH_PIPELINE_IDENTIFIER_CREATE_INFO_ARM: S = S::from_raw(1_000_507_013);
    pub const DATA_GRAPH_PIPELINE_DISPATCH_INFO_ARM: S = S::from_raw(1_000_507_014);
}

// ---- handles -----------------------------------------------------------------------------

macro_rules! handle {
    ($name:ident, $c:literal) => {
        #[doc = concat!("`", $c, "` (non-dispatchable handle).")]
        #[repr(transparent)]
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(pub u64);
        impl $name {
            /// The null handle.
            pub const NULL: $name = $name(0);
            /// Whether this is the null handle.
            pub fn is_null(self) -> bool {
                self.0 == 0
            }
        }
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($c, "({:#x})"), self.0)
            }
        }
    };
}
handle!(TensorARM, "VkTensorARM");
handle!(TensorViewARM, "VkTensorViewARM");
handle!(DataGraphPipelineSessionARM, "VkDataGraphPipelineSessionARM");

/// `VkTensorTilingARM`.
pub type TensorTilingARM = i32;
pub const TENSOR_TILING_OPTIMAL_ARM: TensorTilingARM = 0;
pub const TENSOR_TILING_LINEAR_ARM: TensorTilingARM = 1;

/// `VkTensorUsageFlagsARM` (64-bit).
pub type TensorUsageFlagsARM = u64;
pub const TENSOR_USAGE_SHADER_BIT_ARM: TensorUsageFlagsARM = 0x2;
pub const TENSOR_USAGE_TRANSFER_SRC_BIT_ARM: TensorUsageFlagsARM = 0x4;
pub const TENSOR_USAGE_TRANSFER_DST_BIT_ARM: TensorUsageFlagsARM = 0x8;
pub const TENSOR_USAGE_IMAGE_ALIASING_BIT_ARM: TensorUsageFlagsARM = 0x10;
pub const TENSOR_USAGE_DATA_GRAPH_BIT_ARM: TensorUsageFlagsARM = 0x20;

/// `VkDataGraphPipelineSessionBindPointARM`.
pub type DataGraphPipelineSessionBindPointARM = i32;
pub const DATA_GRAPH_PIPELINE_SESSION_BIND_POINT_TRANSIENT_ARM:
    DataGraphPipelineSessionBindPointARM = 0;
/// `VkDataGraphPipelineSessionBindPointTypeARM`.
pub type DataGraphPipelineSessionBindPointTypeARM = i32;
pub const DATA_GRAPH_PIPELINE_SESSION_BIND_POINT_TYPE_MEMORY_ARM:
    DataGraphPipelineSessionBindPointTypeARM = 0;

// ---- structures --------------------------------------------------------------------------

macro_rules! default_with_stype {
    ($name:ident, $stype:expr) => {
        impl Default for $name {
            fn default() -> Self {
                // SAFETY: every field is an integer, a float, a raw pointer or a handle, for
                // which all-zero bytes are a valid value (null / 0 / false).
                let mut v: Self = unsafe { std::mem::zeroed() };
                v.s_type = $stype;
                v
            }
        }
    };
}

/// `VkTensorDescriptionARM`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TensorDescriptionARM {
    pub s_type: vk::StructureType,
    pub p_next: *const c_void,
    pub tiling: TensorTilingARM,
    pub format: vk::Format,
    pub dimension_count: u32,
    pub p_dimensions: *const i64,
    pub p_strides: *const i64,
    pub usage: TensorUsageFlagsARM,
}
default_with_stype!(TensorDescriptionARM, stype::TENSOR_DESCRIPTION_ARM);

/// `VkTensorCreateInfoARM`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TensorCreateInfoARM {
    pub s_type: vk::StructureType,
    pub p_next: *const c_void,
    pub flags: u64,
    pub p_description: *const TensorDescriptionARM,
    pub sharing_mode: vk::SharingMode,
    pub queue_family_index_count: u32,
    pub p_queue_family_indices: *const u32,
}
default_with_stype!(TensorCreateInfoARM, stype::TENSOR_CREATE_INFO_ARM);

/// `VkTensorViewCreateInfoARM`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TensorViewCreateInfoARM {
    pub s_type: vk::StructureType,
    pub p_next: *const c_void,
    pub flags: u64,
    pub tensor: TensorARM,
    pub format: vk::Format,
}
default_with_stype!(TensorViewCreateInfoARM, stype::TENSOR_VIEW_CREATE_INFO_ARM);

/// `VkTensorMemoryRequirementsInfoARM`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TensorMemoryRequirementsInfoARM {
    pub s_type: vk::StructureType,
    pub p_next: *const c_void,
    pub tensor: TensorARM,
}
default_with_stype!(
    TensorMemoryRequirementsInfoARM,
    stype::TENSOR_MEMORY_REQUIREMENTS_INFO_ARM
);

/// `VkBindTensorMemoryInfoARM`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BindTensorMemoryInfoARM {
    pub s_type: vk::StructureType,
    pub p_next: *const c_void,
    pub tensor: TensorARM,
    pub memory: vk::DeviceMemory,
    pub memory_offset: vk::DeviceSize,
}
default_with_stype!(BindTensorMemoryInfoARM, stype::BIND_TENSOR_MEMORY_INFO_ARM);

/// `VkWriteDescriptorSetTensorARM` (chained to `VkWriteDescriptorSet`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct WriteDescriptorSetTensorARM {
    pub s_type: vk::StructureType,
    pub p_next: *const c_void,
    pub tensor_view_count: u32,
    pub p_tensor_views: *const TensorViewARM,
}
default_with_stype!(
    WriteDescriptorSetTensorARM,
    stype::WRITE_DESCRIPTOR_SET_TENSOR_ARM
);

/// `VkTensorMemoryBarrierARM`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TensorMemoryBarrierARM {
    pub s_type: vk::StructureType,
    pub p_next: *const c_void,
    pub src_stage_mask: vk::PipelineStageFlags2,
    pub src_access_mask: vk::AccessFlags2,
    pub dst_stage_mask: vk::PipelineStageFlags2,
    pub dst_access_mask: vk::AccessFlags2,
    pub src_queue_family_index: u32,
    pub dst_queue_family_index: u32,
    pub tensor: TensorARM,
}
default_with_stype!(TensorMemoryBarrierARM, stype::TENSOR_MEMORY_BARRIER_ARM);

/// `VkTensorDependencyInfoARM` (chained to `VkDependencyInfo`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TensorDependencyInfoARM {
    pub s_type: vk::StructureType,
    pub p_next: *const c_void,
    pub tensor_memory_barrier_count: u32,
    pub p_tensor_memory_barriers: *const TensorMemoryBarrierARM,
}
default_with_stype!(TensorDependencyInfoARM, stype::TENSOR_DEPENDENCY_INFO_ARM);

/// `VkPhysicalDeviceTensorFeaturesARM`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PhysicalDeviceTensorFeaturesARM {
    pub s_type: vk::StructureType,
    pub p_next: *mut c_void,
    pub tensor_non_packed: vk::Bool32,
    pub shader_tensor_access: vk::Bool32,
    pub shader_storage_tensor_array_dynamic_indexing: vk::Bool32,
    pub shader_storage_tensor_array_non_uniform_indexing: vk::Bool32,
    pub descriptor_binding_storage_tensor_update_after_bind: vk::Bool32,
    pub tensors: vk::Bool32,
}
default_with_stype!(
    PhysicalDeviceTensorFeaturesARM,
    stype::PHYSICAL_DEVICE_TENSOR_FEATURES_ARM
);

/// `VkPhysicalDeviceTensorPropertiesARM`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PhysicalDeviceTensorPropertiesARM {
    pub s_type: vk::StructureType,
    pub p_next: *mut c_void,
    pub max_tensor_dimension_count: u32,
    pub max_tensor_elements: u64,
    pub max_per_dimension_tensor_elements: u64,
    pub max_tensor_stride: i64,
    pub max_tensor_size: u64,
    pub max_tensor_shader_access_array_length: u32,
    pub max_tensor_shader_access_size: u32,
    pub max_descriptor_set_storage_tensors: u32,
    pub max_per_stage_descriptor_set_storage_tensors: u32,
    pub max_descriptor_set_update_after_bind_storage_tensors: u32,
    pub max_per_stage_descriptor_update_after_bind_storage_tensors: u32,
    pub shader_storage_tensor_array_non_uniform_indexing_native: vk::Bool32,
    pub shader_tensor_supported_stages: vk::ShaderStageFlags,
}
default_with_stype!(
    PhysicalDeviceTensorPropertiesARM,
    stype::PHYSICAL_DEVICE_TENSOR_PROPERTIES_ARM
);

/// `VkPhysicalDeviceDataGraphFeaturesARM`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PhysicalDeviceDataGraphFeaturesARM {
    pub s_type: vk::StructureType,
    pub p_next: *mut c_void,
    pub data_graph: vk::Bool32,
    pub data_graph_update_after_bind: vk::Bool32,
    pub data_graph_specialization_constants: vk::Bool32,
    pub data_graph_descriptor_buffer: vk::Bool32,
    pub data_graph_shader_module: vk::Bool32,
}
default_with_stype!(
    PhysicalDeviceDataGraphFeaturesARM,
    stype::PHYSICAL_DEVICE_DATA_GRAPH_FEATURES_ARM
);

/// `VkDataGraphPipelineConstantARM`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DataGraphPipelineConstantARM {
    pub s_type: vk::StructureType,
    pub p_next: *const c_void,
    pub id: u32,
    pub p_constant_data: *const c_void,
}
default_with_stype!(
    DataGraphPipelineConstantARM,
    stype::DATA_GRAPH_PIPELINE_CONSTANT_ARM
);

/// `VkDataGraphPipelineResourceInfoARM`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DataGraphPipelineResourceInfoARM {
    pub s_type: vk::StructureType,
    pub p_next: *const c_void,
    pub descriptor_set: u32,
    pub binding: u32,
    pub array_element: u32,
}
default_with_stype!(
    DataGraphPipelineResourceInfoARM,
    stype::DATA_GRAPH_PIPELINE_RESOURCE_INFO_ARM
);

/// `VkDataGraphPipelineCreateInfoARM`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DataGraphPipelineCreateInfoARM {
    pub s_type: vk::StructureType,
    pub p_next: *const c_void,
    pub flags: u64,
    pub layout: vk::PipelineLayout,
    pub resource_info_count: u32,
    pub p_resource_infos: *const DataGraphPipelineResourceInfoARM,
}
default_with_stype!(
    DataGraphPipelineCreateInfoARM,
    stype::DATA_GRAPH_PIPELINE_CREATE_INFO_ARM
);

/// `VkDataGraphPipelineShaderModuleCreateInfoARM`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DataGraphPipelineShaderModuleCreateInfoARM {
    pub s_type: vk::StructureType,
    pub p_next: *const c_void,
    pub module: vk::ShaderModule,
    pub p_name: *const c_char,
    pub p_specialization_info: *const vk::SpecializationInfo<'static>,
    pub constant_count: u32,
    pub p_constants: *const DataGraphPipelineConstantARM,
}
default_with_stype!(
    DataGraphPipelineShaderModuleCreateInfoARM,
    stype::DATA_GRAPH_PIPELINE_SHADER_MODULE_CREATE_INFO_ARM
);

/// `VkDataGraphPipelineSessionCreateInfoARM`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DataGraphPipelineSessionCreateInfoARM {
    pub s_type: vk::StructureType,
    pub p_next: *const c_void,
    pub flags: u64,
    pub data_graph_pipeline: vk::Pipeline,
}
default_with_stype!(
    DataGraphPipelineSessionCreateInfoARM,
    stype::DATA_GRAPH_PIPELINE_SESSION_CREATE_INFO_ARM
);

/// `VkDataGraphPipelineSessionBindPointRequirementsInfoARM`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DataGraphPipelineSessionBindPointRequirementsInfoARM {
    pub s_type: vk::StructureType,
    pub p_next: *const c_void,
    pub session: DataGraphPipelineSessionARM,
}
default_with_stype!(
    DataGraphPipelineSessionBindPointRequirementsInfoARM,
    stype::DATA_GRAPH_PIPELINE_SESSION_BIND_POINT_REQUIREMENTS_INFO_ARM
);

/// `VkDataGraphPipelineSessionBindPointRequirementARM`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DataGraphPipelineSessionBindPointRequirementARM {
    pub s_type: vk::StructureType,
    pub p_next: *mut c_void,
    pub bind_point: DataGraphPipelineSessionBindPointARM,
    pub bind_point_type: DataGraphPipelineSessionBindPointTypeARM,
    pub num_objects: u32,
}
default_with_stype!(
    DataGraphPipelineSessionBindPointRequirementARM,
    stype::DATA_GRAPH_PIPELINE_SESSION_BIND_POINT_REQUIREMENT_ARM
);

/// `VkDataGraphPipelineSessionMemoryRequirementsInfoARM`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DataGraphPipelineSessionMemoryRequirementsInfoARM {
    pub s_type: vk::StructureType,
    pub p_next: *const c_void,
    pub session: DataGraphPipelineSessionARM,
    pub bind_point: DataGraphPipelineSessionBindPointARM,
    pub object_index: u32,
}
default_with_stype!(
    DataGraphPipelineSessionMemoryRequirementsInfoARM,
    stype::DATA_GRAPH_PIPELINE_SESSION_MEMORY_REQUIREMENTS_INFO_ARM
);

/// `VkBindDataGraphPipelineSessionMemoryInfoARM`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BindDataGraphPipelineSessionMemoryInfoARM {
    pub s_type: vk::StructureType,
    pub p_next: *const c_void,
    pub session: DataGraphPipelineSessionARM,
    pub bind_point: DataGraphPipelineSessionBindPointARM,
    pub object_index: u32,
    pub memory: vk::DeviceMemory,
    pub memory_offset: vk::DeviceSize,
}
default_with_stype!(
    BindDataGraphPipelineSessionMemoryInfoARM,
    stype::BIND_DATA_GRAPH_PIPELINE_SESSION_MEMORY_INFO_ARM
);

/// `VkDataGraphPipelineDispatchInfoARM`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DataGraphPipelineDispatchInfoARM {
    pub s_type: vk::StructureType,
    pub p_next: *mut c_void,
    pub flags: u64,
}
default_with_stype!(
    DataGraphPipelineDispatchInfoARM,
    stype::DATA_GRAPH_PIPELINE_DISPATCH_INFO_ARM
);

// ---- entry points ------------------------------------------------------------------------

pub type PFN_vkCreateTensorARM = unsafe extern "system" fn(
    vk::Device,
    *const TensorCreateInfoARM,
    *const vk::AllocationCallbacks<'_>,
    *mut TensorARM,
) -> vk::Result;
pub type PFN_vkDestroyTensorARM =
    unsafe extern "system" fn(vk::Device, TensorARM, *const vk::AllocationCallbacks<'_>);
pub type PFN_vkCreateTensorViewARM = unsafe extern "system" fn(
    vk::Device,
    *const TensorViewCreateInfoARM,
    *const vk::AllocationCallbacks<'_>,
    *mut TensorViewARM,
) -> vk::Result;
pub type PFN_vkDestroyTensorViewARM =
    unsafe extern "system" fn(vk::Device, TensorViewARM, *const vk::AllocationCallbacks<'_>);
pub type PFN_vkGetTensorMemoryRequirementsARM = unsafe extern "system" fn(
    vk::Device,
    *const TensorMemoryRequirementsInfoARM,
    *mut vk::MemoryRequirements2<'_>,
);
pub type PFN_vkBindTensorMemoryARM =
    unsafe extern "system" fn(vk::Device, u32, *const BindTensorMemoryInfoARM) -> vk::Result;
pub type PFN_vkCreateDataGraphPipelinesARM = unsafe extern "system" fn(
    vk::Device,
    vk::DeferredOperationKHR,
    vk::PipelineCache,
    u32,
    *const DataGraphPipelineCreateInfoARM,
    *const vk::AllocationCallbacks<'_>,
    *mut vk::Pipeline,
) -> vk::Result;
pub type PFN_vkCreateDataGraphPipelineSessionARM = unsafe extern "system" fn(
    vk::Device,
    *const DataGraphPipelineSessionCreateInfoARM,
    *const vk::AllocationCallbacks<'_>,
    *mut DataGraphPipelineSessionARM,
) -> vk::Result;
pub type PFN_vkGetDataGraphPipelineSessionBindPointRequirementsARM =
    unsafe extern "system" fn(
        vk::Device,
        *const DataGraphPipelineSessionBindPointRequirementsInfoARM,
        *mut u32,
        *mut DataGraphPipelineSessionBindPointRequirementARM,
    ) -> vk::Result;
pub type PFN_vkGetDataGraphPipelineSessionMemoryRequirementsARM = unsafe extern "system" fn(
    vk::Device,
    *const DataGraphPipelineSessionMemoryRequirementsInfoARM,
    *mut vk::MemoryRequirements2<'_>,
);
pub type PFN_vkBindDataGraphPipelineSessionMemoryARM = unsafe extern "system" fn(
    vk::Device,
    u32,
    *const BindDataGraphPipelineSessionMemoryInfoARM,
) -> vk::Result;
pub type PFN_vkDestroyDataGraphPipelineSessionARM = unsafe extern "system" fn(
    vk::Device,
    DataGraphPipelineSessionARM,
    *const vk::AllocationCallbacks<'_>,
);
pub type PFN_vkCmdDispatchDataGraphARM = unsafe extern "system" fn(
    vk::CommandBuffer,
    DataGraphPipelineSessionARM,
    *const DataGraphPipelineDispatchInfoARM,
);

/// `VK_ARM_tensors` entry points.
#[derive(Debug, Clone, Copy)]
pub struct TensorFns {
    pub create_tensor: PFN_vkCreateTensorARM,
    pub destroy_tensor: PFN_vkDestroyTensorARM,
    pub create_tensor_view: PFN_vkCreateTensorViewARM,
    pub destroy_tensor_view: PFN_vkDestroyTensorViewARM,
    pub get_tensor_memory_requirements: PFN_vkGetTensorMemoryRequirementsARM,
    pub bind_tensor_memory: PFN_vkBindTensorMemoryARM,
}

/// `VK_ARM_data_graph` entry points.
#[derive(Debug, Clone, Copy)]
pub struct DataGraphFns {
    pub create_data_graph_pipelines: PFN_vkCreateDataGraphPipelinesARM,
    pub create_data_graph_pipeline_session: PFN_vkCreateDataGraphPipelineSessionARM,
    pub get_data_graph_pipeline_session_bind_point_requirements:
        PFN_vkGetDataGraphPipelineSessionBindPointRequirementsARM,
    pub get_data_graph_pipeline_session_memory_requirements:
        PFN_vkGetDataGraphPipelineSessionMemoryRequirementsARM,
    pub bind_data_graph_pipeline_session_memory: PFN_vkBindDataGraphPipelineSessionMemoryARM,
    pub destroy_data_graph_pipeline_session: PFN_vkDestroyDataGraphPipelineSessionARM,
    pub cmd_dispatch_data_graph: PFN_vkCmdDispatchDataGraphARM,
}

/// The ARM entry points a device has enabled.
#[derive(Clone, Copy)]
pub struct ArmFns {
    /// Present when `VK_ARM_tensors` is enabled.
    pub tensors: Option<TensorFns>,
    /// Present when `VK_ARM_data_graph` is enabled.
    pub data_graph: Option<DataGraphFns>,
}

impl fmt::Debug for ArmFns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArmFns")
            .field("tensors", &self.tensors.is_some())
            .field("data_graph", &self.data_graph.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    // Sizes and offsets as the C headers lay the structures out on LP64 targets.
    #[test]
    fn tensor_structs_match_the_c_layout() {
        assert_eq!(size_of::<TensorARM>(), 8);
        assert_eq!(size_of::<TensorDescriptionARM>(), 56);
        assert_eq!(offset_of!(TensorDescriptionARM, tiling), 16);
        assert_eq!(offset_of!(TensorDescriptionARM, format), 20);
        assert_eq!(offset_of!(TensorDescriptionARM, dimension_count), 24);
        assert_eq!(offset_of!(TensorDescriptionARM, p_dimensions), 32);
        assert_eq!(offset_of!(TensorDescriptionARM, p_strides), 40);
        assert_eq!(offset_of!(TensorDescriptionARM, usage), 48);

        assert_eq!(size_of::<TensorCreateInfoARM>(), 48);
        assert_eq!(offset_of!(TensorCreateInfoARM, flags), 16);
        assert_eq!(offset_of!(TensorCreateInfoARM, p_description), 24);
        assert_eq!(offset_of!(TensorCreateInfoARM, sharing_mode), 32);
        assert_eq!(
            offset_of!(TensorCreateInfoARM, queue_family_index_count),
            36
        );
        assert_eq!(offset_of!(TensorCreateInfoARM, p_queue_family_indices), 40);

        assert_eq!(size_of::<TensorViewCreateInfoARM>(), 40);
        assert_eq!(offset_of!(TensorViewCreateInfoARM, tensor), 24);
        assert_eq!(offset_of!(TensorViewCreateInfoARM, format), 32);

        assert_eq!(size_of::<BindTensorMemoryInfoARM>(), 40);
        assert_eq!(offset_of!(BindTensorMemoryInfoARM, memory), 24);
        assert_eq!(offset_of!(BindTensorMemoryInfoARM, memory_offset), 32);

        assert_eq!(size_of::<WriteDescriptorSetTensorARM>(), 32);
        assert_eq!(offset_of!(WriteDescriptorSetTensorARM, p_tensor_views), 24);

        assert_eq!(size_of::<TensorMemoryBarrierARM>(), 64);
        assert_eq!(
            offset_of!(TensorMemoryBarrierARM, src_queue_family_index),
            48
        );
        assert_eq!(offset_of!(TensorMemoryBarrierARM, tensor), 56);

        assert_eq!(size_of::<PhysicalDeviceTensorFeaturesARM>(), 40);
        assert_eq!(offset_of!(PhysicalDeviceTensorFeaturesARM, tensors), 36);
        assert_eq!(size_of::<PhysicalDeviceTensorPropertiesARM>(), 88);
        assert_eq!(
            offset_of!(PhysicalDeviceTensorPropertiesARM, max_tensor_elements),
            24
        );
        assert_eq!(
            offset_of!(
                PhysicalDeviceTensorPropertiesARM,
                shader_tensor_supported_stages
            ),
            84
        );
    }

    #[test]
    fn data_graph_structs_match_the_c_layout() {
        assert_eq!(size_of::<PhysicalDeviceDataGraphFeaturesARM>(), 40);
        assert_eq!(
            offset_of!(PhysicalDeviceDataGraphFeaturesARM, data_graph_shader_module),
            32
        );
        assert_eq!(size_of::<DataGraphPipelineConstantARM>(), 32);
        assert_eq!(
            offset_of!(DataGraphPipelineConstantARM, p_constant_data),
            24
        );
        assert_eq!(size_of::<DataGraphPipelineResourceInfoARM>(), 32);
        assert_eq!(
            offset_of!(DataGraphPipelineResourceInfoARM, array_element),
            24
        );
        assert_eq!(size_of::<DataGraphPipelineCreateInfoARM>(), 48);
        assert_eq!(offset_of!(DataGraphPipelineCreateInfoARM, layout), 24);
        assert_eq!(
            offset_of!(DataGraphPipelineCreateInfoARM, p_resource_infos),
            40
        );
        assert_eq!(size_of::<DataGraphPipelineShaderModuleCreateInfoARM>(), 56);
        assert_eq!(
            offset_of!(DataGraphPipelineShaderModuleCreateInfoARM, p_constants),
            48
        );
        assert_eq!(size_of::<DataGraphPipelineSessionCreateInfoARM>(), 32);
        assert_eq!(
            size_of::<DataGraphPipelineSessionMemoryRequirementsInfoARM>(),
            32
        );
        assert_eq!(size_of::<BindDataGraphPipelineSessionMemoryInfoARM>(), 48);
        assert_eq!(
            offset_of!(BindDataGraphPipelineSessionMemoryInfoARM, memory),
            32
        );
        assert_eq!(
            size_of::<DataGraphPipelineSessionBindPointRequirementARM>(),
            32
        );
        assert_eq!(size_of::<DataGraphPipelineDispatchInfoARM>(), 24);
    }

    #[test]
    fn defaults_carry_their_structure_type() {
        assert_eq!(
            TensorCreateInfoARM::default().s_type,
            stype::TENSOR_CREATE_INFO_ARM
        );
        assert_eq!(
            PhysicalDeviceDataGraphFeaturesARM::default().s_type,
            stype::PHYSICAL_DEVICE_DATA_GRAPH_FEATURES_ARM
        );
        assert!(TensorCreateInfoARM::default().p_description.is_null());
    }
}
