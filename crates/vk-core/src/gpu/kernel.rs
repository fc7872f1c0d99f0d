//! One compute kernel with one descriptor set: its shader module, set and pipeline layouts,
//! pipeline and descriptor pool, made together and destroyed together. For vk-core's own
//! kernels (the image conversions, the self-test).

use ash::vk;

use crate::device::device::Device;
use crate::error::{Error, VkError, VkResultExt};

/// A descriptor-set layout of one descriptor a binding for the compute stage (binding `i`
/// of `types[i]`) and a pipeline layout of that one set with `push_bytes` of compute push
/// constants (none where 0): the layouts of every compute kernel of this workspace. Both are
/// made, or neither.
///
/// # Safety
/// `device` must be a live device; the caller destroys both layouts on it, after every
/// pipeline and descriptor set made with them.
pub unsafe fn compute_layouts(
    device: &ash::Device,
    types: &[vk::DescriptorType],
    push_bytes: u32,
) -> Result<(vk::DescriptorSetLayout, vk::PipelineLayout), Error> {
    let bindings: Vec<_> = (0u32..)
        .zip(types)
        .map(|(b, ty)| {
            vk::DescriptorSetLayoutBinding::default()
                .binding(b)
                .descriptor_type(*ty)
                .descriptor_count(1)
                .stage_flags(vk::ShaderStageFlags::COMPUTE)
        })
        .collect();
    let info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings);
    // SAFETY: `device` is live (the caller's contract); the create info is valid.
    let set_layout = unsafe { device.create_descriptor_set_layout(&info, None) }
        .vk("vkCreateDescriptorSetLayout")?;
    let push = [vk::PushConstantRange::default()
        .stage_flags(vk::ShaderStageFlags::COMPUTE)
        .size(push_bytes)];
    let set_layouts = [set_layout];
    let info = vk::PipelineLayoutCreateInfo::default()
        .set_layouts(&set_layouts)
        .push_constant_ranges(if push_bytes == 0 { &[] } else { &push });
    // SAFETY: as above; the create info names the live set layout just made.
    match unsafe { device.create_pipeline_layout(&info, None) }.vk("vkCreatePipelineLayout") {
        Ok(layout) => Ok((set_layout, layout)),
        Err(e) => {
            // SAFETY: made above on `device`, used by nothing.
            unsafe { device.destroy_descriptor_set_layout(set_layout, None) };
            Err(e.into())
        }
    }
}

/// The pipeline and descriptor objects of one compute kernel with one descriptor set,
/// destroyed in reverse order.
pub(crate) struct Kernel {
    pub(crate) device: Device,
    pub(crate) shader: vk::ShaderModule,
    pub(crate) set_layout: vk::DescriptorSetLayout,
    pub(crate) layout: vk::PipelineLayout,
    pub(crate) pipeline: vk::Pipeline,
    pub(crate) pool: vk::DescriptorPool,
    pub(crate) set: vk::DescriptorSet,
}

impl Drop for Kernel {
    fn drop(&mut self) {
        let d = self.device.raw();
        // SAFETY: every handle was created from `d` by `Kernel::new`, is null or live, and is
        // destroyed once; its owner keeps it until no submission recording it can still run.
        unsafe {
            d.destroy_descriptor_pool(self.pool, None);
            d.destroy_pipeline(self.pipeline, None);
            d.destroy_pipeline_layout(self.layout, None);
            d.destroy_descriptor_set_layout(self.set_layout, None);
            d.destroy_shader_module(self.shader, None);
        }
    }
}

impl Kernel {
    /// The kernel of `spirv` (entry point `main`), its bindings of `types` (binding `i` of
    /// set 0 is `types[i]`, one descriptor each), `push_bytes` of push constants, and one
    /// descriptor set allocated for it.
    pub(crate) fn new(
        device: &Device,
        spirv: &[u8],
        types: &[vk::DescriptorType],
        push_bytes: u32,
    ) -> Result<Kernel, Error> {
        let mut k = Kernel {
            device: device.clone(),
            shader: vk::ShaderModule::null(),
            set_layout: vk::DescriptorSetLayout::null(),
            layout: vk::PipelineLayout::null(),
            pipeline: vk::Pipeline::null(),
            pool: vk::DescriptorPool::null(),
            set: vk::DescriptorSet::null(),
        };
        k.create_pipeline(spirv, types, push_bytes)?;
        k.create_set(types)?;
        Ok(k)
    }

    fn create_pipeline(
        &mut self,
        spirv: &[u8],
        types: &[vk::DescriptorType],
        push_bytes: u32,
    ) -> Result<(), Error> {
        let d = self.device.raw();
        let code = ash::util::read_spv(&mut std::io::Cursor::new(spirv))
            .map_err(|e| Error::InvalidArgument(format!("embedded SPIR-V is unreadable: {e}")))?;
        // SAFETY: `code` is valid SPIR-V compiled by the xtask.
        self.shader = unsafe {
            d.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&code), None)
        }
        .vk("vkCreateShaderModule")?;
        // SAFETY: `d` is this kernel's live device; `Drop` destroys both layouts.
        (self.set_layout, self.layout) = unsafe { compute_layouts(d, types, push_bytes) }?;
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(self.shader)
            .name(c"main");
        let info = [vk::ComputePipelineCreateInfo::default()
            .stage(stage)
            .layout(self.layout)];
        // SAFETY: valid create info referencing a live module and layout.
        self.pipeline =
            unsafe { d.create_compute_pipelines(vk::PipelineCache::null(), &info, None) }
                .map_err(|(_, e)| VkError::new("vkCreateComputePipelines", e))?[0];
        Ok(())
    }

    fn create_set(&mut self, types: &[vk::DescriptorType]) -> Result<(), Error> {
        let d = self.device.raw();
        let sizes: Vec<_> = types
            .iter()
            .map(|ty| {
                vk::DescriptorPoolSize::default()
                    .ty(*ty)
                    .descriptor_count(1)
            })
            .collect();
        // SAFETY: valid create info.
        self.pool = unsafe {
            d.create_descriptor_pool(
                &vk::DescriptorPoolCreateInfo::default()
                    .max_sets(1)
                    .pool_sizes(&sizes),
                None,
            )
        }
        .vk("vkCreateDescriptorPool")?;
        let set_layouts = [self.set_layout];
        // SAFETY: the pool has room for one set of this layout.
        self.set = unsafe {
            d.allocate_descriptor_sets(
                &vk::DescriptorSetAllocateInfo::default()
                    .descriptor_pool(self.pool)
                    .set_layouts(&set_layouts),
            )
        }
        .vk("vkAllocateDescriptorSets")?[0];
        Ok(())
    }
}
