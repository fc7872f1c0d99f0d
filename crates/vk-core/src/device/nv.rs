//! Our bindings for `VK_NV_cooperative_matrix2` (newer than the headers of ash 0.38): the
//! feature structure, which vk-core reads and enables through its feature table, and the
//! flexible-dimension properties (the workgroup-scope matrix shapes a device runs).

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

/// `VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_PROPERTIES_NV`.
const COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_PROPERTIES_NV: vk::StructureType =
    vk::StructureType::from_raw(1_000_593_001);

/// `VkCooperativeMatrixFlexibleDimensionsPropertiesNV`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CooperativeMatrixFlexibleDimensionsPropertiesNV {
    pub s_type: vk::StructureType,
    pub p_next: *mut c_void,
    pub m_granularity: u32,
    pub n_granularity: u32,
    pub k_granularity: u32,
    pub a_type: vk::ComponentTypeKHR,
    pub b_type: vk::ComponentTypeKHR,
    pub c_type: vk::ComponentTypeKHR,
    pub result_type: vk::ComponentTypeKHR,
    pub saturating_accumulation: vk::Bool32,
    pub scope: vk::ScopeKHR,
    pub workgroup_invocations: u32,
}

impl Default for CooperativeMatrixFlexibleDimensionsPropertiesNV {
    fn default() -> Self {
        CooperativeMatrixFlexibleDimensionsPropertiesNV {
            s_type: COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_PROPERTIES_NV,
            p_next: std::ptr::null_mut(),
            m_granularity: 0,
            n_granularity: 0,
            k_granularity: 0,
            a_type: vk::ComponentTypeKHR::default(),
            b_type: vk::ComponentTypeKHR::default(),
            c_type: vk::ComponentTypeKHR::default(),
            result_type: vk::ComponentTypeKHR::default(),
            saturating_accumulation: vk::FALSE,
            scope: vk::ScopeKHR::default(),
            workgroup_invocations: 0,
        }
    }
}

/// `vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV`.
type GetFlexibleDimensionsProperties = unsafe extern "system" fn(
    vk::PhysicalDevice,
    *mut u32,
    *mut CooperativeMatrixFlexibleDimensionsPropertiesNV,
) -> vk::Result;

/// The flexible-dimension properties `physical` reports (two-call enumeration), or the
/// error; `Ok(empty)` when the entry point does not resolve.
///
/// # Safety
/// `physical` was enumerated from `instance`, which `entry` loaded.
pub(crate) unsafe fn flexible_dimensions_properties(
    entry: &ash::Entry,
    instance: &ash::Instance,
    physical: vk::PhysicalDevice,
) -> Result<Vec<CooperativeMatrixFlexibleDimensionsPropertiesNV>, vk::Result> {
    let name = c"vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV";
    // SAFETY: a valid instance handle and a NUL-terminated name.
    let ptr = unsafe { entry.get_instance_proc_addr(instance.handle(), name.as_ptr()) };
    let Some(ptr) = ptr else {
        return Ok(Vec::new());
    };
    // SAFETY: the loader returned this entry point for this name, whose signature is
    // `GetFlexibleDimensionsProperties`.
    let f: GetFlexibleDimensionsProperties = unsafe { std::mem::transmute(ptr) };
    let mut count = 0u32;
    // SAFETY: the count query with a NULL array.
    unsafe { f(physical, &mut count, std::ptr::null_mut()) }.result()?;
    let mut props =
        vec![CooperativeMatrixFlexibleDimensionsPropertiesNV::default(); count as usize];
    // SAFETY: `props` holds `count` initialized structures with their sType set.
    let r = unsafe { f(physical, &mut count, props.as_mut_ptr()) };
    if r != vk::Result::SUCCESS && r != vk::Result::INCOMPLETE {
        return Err(r);
    }
    props.truncate(count as usize);
    Ok(props)
}
