//! Registration with `shared-runtime` (feature `shared`): whoever creates a shared device, in
//! whatever order delegates load, also asks for what VGF models need when the device has it.

use shared_runtime::linkme::distributed_slice;
use shared_runtime::{DELEGATE_REQUIREMENTS, DelegateRequirements};
use vk_core::{Features, Requirements};

use crate::requirements::{REPLICATED_COMPOSITES_EXTENSION_NAME, requirements};

#[distributed_slice(DELEGATE_REQUIREMENTS)]
#[linkme(crate = shared_runtime::linkme)]
static VGF: DelegateRequirements = DelegateRequirements {
    name: "vgf",
    requirements: shared_requirements,
};

/// What a shared device is created with for VGF: the base [`requirements`], plus, where the
/// device has them, the features and extension that model capabilities commonly need (8-, 16-
/// and 64-bit types, the Vulkan memory model, tensor access from shaders, replicated
/// composites). A model needing something the device lacks is refused when it loads, by name.
pub fn shared_requirements() -> Requirements {
    requirements()
        .optional_features(
            Features::SHADER_INT8
                | Features::SHADER_INT16
                | Features::SHADER_INT64
                | Features::SHADER_FLOAT16
                | Features::STORAGE_BUFFER_8BIT
                | Features::STORAGE_BUFFER_16BIT
                | Features::VULKAN_MEMORY_MODEL
                | Features::VULKAN_MEMORY_MODEL_DEVICE_SCOPE
                | Features::SHADER_TENSOR_ACCESS_ARM,
        )
        .optional_extension(REPLICATED_COMPOSITES_EXTENSION_NAME)
}
