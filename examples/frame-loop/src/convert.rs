//! The engine's copies between its RGBA8 storage images and the model's tensor buffers: one
//! compute pass reads the scene image into the model's input (f32 NCHW, `[1, 3, h, w]`),
//! another writes the model's output into the result image (clamped, alpha 1).

use ash::vk;
use vk_core::{Buffer, Device};

use crate::error::{Result, VkCall};
use crate::image::Image;
use crate::scene::shader;

const TO_TENSOR: &[u8] = include_bytes!("../spirv/image_to_tensor.spv");
const TO_IMAGE: &[u8] = include_bytes!("../spirv/tensor_to_image.spv");

/// Threads per workgroup side of both shaders.
const GROUP: u32 = 8;

/// One compute pass: layout, pipeline, its descriptor set.
struct Pass {
    set_layout: vk::DescriptorSetLayout,
    layout: vk::PipelineLayout,
    pipeline: vk::Pipeline,
    set: vk::DescriptorSet,
}

/// Both passes, bound to the scene image, the model's buffers and the result image.
pub struct Convert {
    device: Device,
    pool: vk::DescriptorPool,
    passes: Vec<Pass>,
    extent: vk::Extent2D,
}

impl std::fmt::Debug for Convert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Convert")
            .field("extent", &self.extent)
            .finish()
    }
}

/// Binding 0 and 1 of a pass: image then buffer (to tensor) or buffer then image (to image).
fn set_layout(device: &Device, image_first: bool) -> Result<vk::DescriptorSetLayout> {
    let kind = |image: bool| {
        if image {
            vk::DescriptorType::STORAGE_IMAGE
        } else {
            vk::DescriptorType::STORAGE_BUFFER
        }
    };
    let bindings = [0u32, 1].map(|b| {
        vk::DescriptorSetLayoutBinding::default()
            .binding(b)
            .descriptor_type(kind((b == 0) == image_first))
            .descriptor_count(1)
            .stage_flags(vk::ShaderStageFlags::COMPUTE)
    });
    let info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings);
    // SAFETY: valid create info.
    unsafe { device.raw().create_descriptor_set_layout(&info, None) }
        .vk("vkCreateDescriptorSetLayout")
}

impl Convert {
    /// The passes between `scene` and `x` (the model's input) and between `y` (its output)
    /// and `result`.
    pub fn new(
        device: &Device,
        scene: &Image,
        x: &Buffer,
        y: &Buffer,
        result: &Image,
    ) -> Result<Convert> {
        let d = device.raw();
        let sizes = [
            vk::DescriptorPoolSize {
                ty: vk::DescriptorType::STORAGE_IMAGE,
                descriptor_count: 2,
            },
            vk::DescriptorPoolSize {
                ty: vk::DescriptorType::STORAGE_BUFFER,
                descriptor_count: 2,
            },
        ];
        let info = vk::DescriptorPoolCreateInfo::default()
            .max_sets(2)
            .pool_sizes(&sizes);
        // SAFETY: valid create info.
        let pool = unsafe { d.create_descriptor_pool(&info, None) }.vk("vkCreateDescriptorPool")?;
        let mut convert = Convert {
            device: device.clone(),
            pool,
            passes: Vec::new(),
            extent: scene.extent(),
        };
        for (image_first, spirv) in [(true, TO_TENSOR), (false, TO_IMAGE)] {
            let pass = convert.pass(image_first, spirv)?;
            convert.passes.push(pass);
        }
        convert.write(0, scene, x);
        convert.write(1, result, y);
        Ok(convert)
    }

    fn pass(&self, image_first: bool, spirv: &[u8]) -> Result<Pass> {
        let d = self.device.raw();
        let set_layout = set_layout(&self.device, image_first)?;
        let mut pass = Pass {
            set_layout,
            layout: vk::PipelineLayout::null(),
            pipeline: vk::Pipeline::null(),
            set: vk::DescriptorSet::null(),
        };
        let result = (|| -> Result<()> {
            let ranges = [vk::PushConstantRange::default()
                .stage_flags(vk::ShaderStageFlags::COMPUTE)
                .size(8)];
            let layouts = [set_layout];
            let info = vk::PipelineLayoutCreateInfo::default()
                .set_layouts(&layouts)
                .push_constant_ranges(&ranges);
            // SAFETY: valid create info.
            pass.layout =
                unsafe { d.create_pipeline_layout(&info, None) }.vk("vkCreatePipelineLayout")?;
            let module = shader(&self.device, spirv)?;
            let stage = vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(module)
                .name(c"main");
            let info = [vk::ComputePipelineCreateInfo::default()
                .stage(stage)
                .layout(pass.layout)];
            // SAFETY: valid create info; the module is destroyed once the pipeline is made.
            let made = unsafe {
                let made = d.create_compute_pipelines(vk::PipelineCache::null(), &info, None);
                d.destroy_shader_module(module, None);
                made
            };
            pass.pipeline = made.map_err(|(_, r)| r).vk("vkCreateComputePipelines")?[0];
            let alloc = vk::DescriptorSetAllocateInfo::default()
                .descriptor_pool(self.pool)
                .set_layouts(&layouts);
            // SAFETY: the pool has room for both passes' sets.
            pass.set =
                unsafe { d.allocate_descriptor_sets(&alloc) }.vk("vkAllocateDescriptorSets")?[0];
            Ok(())
        })();
        match result {
            Ok(()) => Ok(pass),
            Err(e) => {
                self.destroy(&pass);
                Err(e)
            }
        }
    }

    /// Points pass `index`'s set at `image` and `buffer`.
    fn write(&self, index: usize, image: &Image, buffer: &Buffer) {
        let image_info = [vk::DescriptorImageInfo::default()
            .image_view(image.view())
            .image_layout(vk::ImageLayout::GENERAL)];
        let buffer_info = [vk::DescriptorBufferInfo::default()
            .buffer(buffer.raw())
            .range(vk::WHOLE_SIZE)];
        let (image_binding, buffer_binding) = if index == 0 { (0, 1) } else { (1, 0) };
        let set = self.passes[index].set;
        let writes = [
            vk::WriteDescriptorSet::default()
                .dst_set(set)
                .dst_binding(image_binding)
                .descriptor_type(vk::DescriptorType::STORAGE_IMAGE)
                .image_info(&image_info),
            vk::WriteDescriptorSet::default()
                .dst_set(set)
                .dst_binding(buffer_binding)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .buffer_info(&buffer_info),
        ];
        // SAFETY: the set is not in use; image and buffer are live and of this device.
        unsafe { self.device.raw().update_descriptor_sets(&writes, &[]) };
    }

    /// Records pass `index` (0: scene to input, 1: output to result).
    ///
    /// # Safety
    /// `cmd` is recording, outside a render pass; the caller orders the pass's reads and
    /// writes with barriers.
    unsafe fn record(&self, cmd: vk::CommandBuffer, index: usize) {
        let d = self.device.raw();
        let pass = &self.passes[index];
        let mut push = [0u8; 8];
        push[0..4].copy_from_slice(&self.extent.width.to_ne_bytes());
        push[4..8].copy_from_slice(&self.extent.height.to_ne_bytes());
        // SAFETY: forwarded contract; the set matches the layout.
        unsafe {
            d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, pass.pipeline);
            d.cmd_bind_descriptor_sets(
                cmd,
                vk::PipelineBindPoint::COMPUTE,
                pass.layout,
                0,
                &[pass.set],
                &[],
            );
            d.cmd_push_constants(cmd, pass.layout, vk::ShaderStageFlags::COMPUTE, 0, &push);
            d.cmd_dispatch(
                cmd,
                self.extent.width.div_ceil(GROUP),
                self.extent.height.div_ceil(GROUP),
                1,
            );
        }
    }

    /// Records the scene image's read into the model's input buffer.
    ///
    /// # Safety
    /// `cmd` is recording, outside a render pass; the caller orders the pass's reads and
    /// writes with barriers; the scene image is in `GENERAL`.
    pub unsafe fn record_to_tensor(&self, cmd: vk::CommandBuffer) {
        // SAFETY: forwarded contract.
        unsafe { self.record(cmd, 0) };
    }

    /// Records the model's output's write into the result image.
    ///
    /// # Safety
    /// `cmd` is recording, outside a render pass; the caller orders the pass's reads and
    /// writes with barriers; the result image is in `GENERAL`.
    pub unsafe fn record_to_image(&self, cmd: vk::CommandBuffer) {
        // SAFETY: forwarded contract.
        unsafe { self.record(cmd, 1) };
    }

    fn destroy(&self, pass: &Pass) {
        let d = self.device.raw();
        // SAFETY: made from this device, destroyed once (null handles ignored); the sets go
        // with the pool; the frame loop waited for the work using them.
        unsafe {
            d.destroy_pipeline(pass.pipeline, None);
            d.destroy_pipeline_layout(pass.layout, None);
            d.destroy_descriptor_set_layout(pass.set_layout, None);
        }
    }
}

impl Drop for Convert {
    fn drop(&mut self) {
        for pass in &self.passes {
            self.destroy(pass);
        }
        // SAFETY: made from this device, destroyed once, its sets no longer used.
        unsafe { self.device.raw().destroy_descriptor_pool(self.pool, None) };
    }
}
