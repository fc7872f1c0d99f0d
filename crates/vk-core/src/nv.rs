//! Our bindings for `VK_NV_cooperative_matrix2` (newer than the headers of ash 0.38): the
//! feature structure, which vk-core reads and enables through its feature table.

use std::ffi::{CStr, c_void};

use ash::vk;

/// `VK_NV_cooperative_matrix2`.
pub const COOPERATIVE_MATRIX_2_EXTENSION_NAME: &CStr = c"VK_NV_cooperative_matrix2";

/// `VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_FEATURES_NV`.
const PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_FEATURES_NV: vk::StructureType =
    vk::StructureType::from_raw(1_000_593_000);

/// `VkPhysicalDeviceCooperativeMatrix2FeaturesNV`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PhysicalDeviceCooperativeMatrix2FeaturesNV {
    pub s_type: vk::StructureType,
    pub p_next: *mut c_void,
    pub cooperative_matrix_workgroup_scope: vk::Bool32,
    pub cooperative_matrix_flexible_dimensions: vk::Bool32,
    pub cooperative_matrix_reductions: vk::Bool32,
    pub cooperative_matrix_conversions: vk::Bool32,
    pub cooperative_matrix_per_element_operations: vk::Bool32,
    pub cooperative_matrix_tensor_addressing: vk::Bool32,
    pub cooperative_matrix_block_loads: vk::Bool32,
}

impl Default for PhysicalDeviceCooperativeMatrix2FeaturesNV {
    fn default() -> Self {
        PhysicalDeviceCooperativeMatrix2FeaturesNV {
            s_type: PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_FEATURES_NV,
            p_next: std::ptr::null_mut(),
            cooperative_matrix_workgroup_scope: vk::FALSE,
            cooperative_matrix_flexible_dimensions: vk::FALSE,
            cooperative_matrix_reductions: vk::FALSE,
            cooperative_matrix_conversions: vk::FALSE,
            cooperative_matrix_per_element_operations: vk::FALSE,
            cooperative_matrix_tensor_addressing: vk::FALSE,
            cooperative_matrix_block_loads: vk::FALSE,
        }
    }
}
