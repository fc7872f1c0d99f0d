//! The renderer: a graphics pipeline (vertex + fragment shader) drawing a gradient and a
//! turning triangle into the scene image, animated by frame index so that a frame is
//! reproducible.

use ash::vk;
use vk_core::Device;

use crate::error::{Error, Result, VkCall};
use crate::image::{FORMAT, Image};

const VERT: &[u8] = include_bytes!("../spirv/scene.vert.spv");
const FRAG: &[u8] = include_bytes!("../spirv/scene.frag.spv");

/// Radians the triangle turns per frame.
pub const ANGLE_STEP: f32 = 0.05;

/// Usage of the scene image: drawn into, read by the model's storage-image pass, copied and
/// blitted.
pub const SCENE_USAGE: vk::ImageUsageFlags = vk::ImageUsageFlags::from_raw(
    vk::ImageUsageFlags::COLOR_ATTACHMENT.as_raw()
        | vk::ImageUsageFlags::STORAGE.as_raw()
        | vk::ImageUsageFlags::TRANSFER_SRC.as_raw(),
);

/// A shader module from committed SPIR-V.
pub(crate) fn shader(device: &Device, spirv: &[u8]) -> Result<vk::ShaderModule> {
    let words = ash::util::read_spv(&mut std::io::Cursor::new(spirv)).map_err(|e| Error::File {
        path: "embedded SPIR-V".into(),
        problem: e.to_string(),
    })?;
    let info = vk::ShaderModuleCreateInfo::default().code(&words);
    // SAFETY: valid SPIR-V compiled by `cargo xtask shaders`.
    unsafe { device.raw().create_shader_module(&info, None) }.vk("vkCreateShaderModule")
}

/// The render pass, pipeline and framebuffer drawing into the scene image.
pub struct Scene {
    device: Device,
    image: Image,
    render_pass: vk::RenderPass,
    framebuffer: vk::Framebuffer,
    layout: vk::PipelineLayout,
    pipeline: vk::Pipeline,
}

impl std::fmt::Debug for Scene {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scene").field("image", &self.image).finish()
    }
}

/// The render pass: one colour attachment, cleared, left in `GENERAL` for the storage-image
/// and transfer reads that follow; the external dependencies order it after the previous
/// frame's reads and before this frame's.
fn render_pass(device: &Device) -> Result<vk::RenderPass> {
    let attachments = [vk::AttachmentDescription::default()
        .format(FORMAT)
        .samples(vk::SampleCountFlags::TYPE_1)
        .load_op(vk::AttachmentLoadOp::CLEAR)
        .store_op(vk::AttachmentStoreOp::STORE)
        .initial_layout(vk::ImageLayout::UNDEFINED)
        .final_layout(vk::ImageLayout::GENERAL)];
    let colour = [vk::AttachmentReference::default()
        .attachment(0)
        .layout(vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL)];
    let subpasses = [vk::SubpassDescription::default()
        .pipeline_bind_point(vk::PipelineBindPoint::GRAPHICS)
        .color_attachments(&colour)];
    let readers = vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER;
    let output = vk::PipelineStageFlags::COLOR_ATTACHMENT_OUTPUT;
    let deps = [
        vk::SubpassDependency::default()
            .src_subpass(vk::SUBPASS_EXTERNAL)
            .dst_subpass(0)
            .src_stage_mask(readers)
            .dst_stage_mask(output)
            .dst_access_mask(vk::AccessFlags::COLOR_ATTACHMENT_WRITE),
        vk::SubpassDependency::default()
            .src_subpass(0)
            .dst_subpass(vk::SUBPASS_EXTERNAL)
            .src_stage_mask(output)
            .dst_stage_mask(readers)
            .src_access_mask(vk::AccessFlags::COLOR_ATTACHMENT_WRITE)
            .dst_access_mask(vk::AccessFlags::SHADER_READ | vk::AccessFlags::TRANSFER_READ),
    ];
    let info = vk::RenderPassCreateInfo::default()
        .attachments(&attachments)
        .subpasses(&subpasses)
        .dependencies(&deps);
    // SAFETY: valid create info.
    unsafe { device.raw().create_render_pass(&info, None) }.vk("vkCreateRenderPass")
}

/// The push constants of `scene.vert`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct Push {
    frame: u32,
    aspect: f32,
    angle_step: f32,
}

impl Push {
    fn bytes(&self) -> [u8; 12] {
        let mut b = [0; 12];
        b[0..4].copy_from_slice(&self.frame.to_ne_bytes());
        b[4..8].copy_from_slice(&self.aspect.to_ne_bytes());
        b[8..12].copy_from_slice(&self.angle_step.to_ne_bytes());
        b
    }
}

fn pipeline(
    device: &Device,
    render_pass: vk::RenderPass,
    layout: vk::PipelineLayout,
    extent: vk::Extent2D,
) -> Result<vk::Pipeline> {
    let d = device.raw();
    let vert = shader(device, VERT)?;
    let frag = match shader(device, FRAG) {
        Ok(f) => f,
        Err(e) => {
            // SAFETY: unused module.
            unsafe { d.destroy_shader_module(vert, None) };
            return Err(e);
        }
    };
    let stages = [
        vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::VERTEX)
            .module(vert)
            .name(c"main"),
        vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::FRAGMENT)
            .module(frag)
            .name(c"main"),
    ];
    let vertex_input = vk::PipelineVertexInputStateCreateInfo::default();
    let assembly = vk::PipelineInputAssemblyStateCreateInfo::default()
        .topology(vk::PrimitiveTopology::TRIANGLE_LIST);
    let viewports = [vk::Viewport {
        x: 0.0,
        y: 0.0,
        width: extent.width as f32,
        height: extent.height as f32,
        min_depth: 0.0,
        max_depth: 1.0,
    }];
    let scissors = [vk::Rect2D::default().extent(extent)];
    let viewport = vk::PipelineViewportStateCreateInfo::default()
        .viewports(&viewports)
        .scissors(&scissors);
    let raster = vk::PipelineRasterizationStateCreateInfo::default()
        .polygon_mode(vk::PolygonMode::FILL)
        .cull_mode(vk::CullModeFlags::NONE)
        .front_face(vk::FrontFace::COUNTER_CLOCKWISE)
        .line_width(1.0);
    let multisample = vk::PipelineMultisampleStateCreateInfo::default()
        .rasterization_samples(vk::SampleCountFlags::TYPE_1);
    let blend_attachments = [vk::PipelineColorBlendAttachmentState::default()
        .color_write_mask(vk::ColorComponentFlags::RGBA)];
    let blend = vk::PipelineColorBlendStateCreateInfo::default().attachments(&blend_attachments);
    let info = [vk::GraphicsPipelineCreateInfo::default()
        .stages(&stages)
        .vertex_input_state(&vertex_input)
        .input_assembly_state(&assembly)
        .viewport_state(&viewport)
        .rasterization_state(&raster)
        .multisample_state(&multisample)
        .color_blend_state(&blend)
        .layout(layout)
        .render_pass(render_pass)
        .subpass(0)];
    // SAFETY: valid create info; every referenced object is live across the call.
    let made = unsafe { d.create_graphics_pipelines(vk::PipelineCache::null(), &info, None) };
    // SAFETY: the modules are no longer needed once the pipeline is made.
    unsafe {
        d.destroy_shader_module(vert, None);
        d.destroy_shader_module(frag, None);
    }
    made.map_err(|(_, result)| Error::Vk {
        call: "vkCreateGraphicsPipelines",
        result,
    })
    .map(|p| p[0])
}

impl Scene {
    /// The scene image of `extent` and everything that draws into it.
    pub fn new(device: &Device, extent: vk::Extent2D) -> Result<Scene> {
        let image = Image::new(device, extent, SCENE_USAGE, "scene image")?;
        let d = device.raw();
        // Built up one object at a time; `Drop` destroys whichever exist (null handles are
        // ignored by the destroy calls).
        let mut scene = Scene {
            device: device.clone(),
            image,
            render_pass: vk::RenderPass::null(),
            framebuffer: vk::Framebuffer::null(),
            layout: vk::PipelineLayout::null(),
            pipeline: vk::Pipeline::null(),
        };
        scene.render_pass = render_pass(device)?;
        let views = [scene.image.view()];
        let fb = vk::FramebufferCreateInfo::default()
            .render_pass(scene.render_pass)
            .attachments(&views)
            .width(extent.width)
            .height(extent.height)
            .layers(1);
        // SAFETY: valid create info; the view matches the render pass's attachment.
        scene.framebuffer = unsafe { d.create_framebuffer(&fb, None) }.vk("vkCreateFramebuffer")?;
        let ranges = [vk::PushConstantRange::default()
            .stage_flags(vk::ShaderStageFlags::VERTEX)
            .size(std::mem::size_of::<Push>() as u32)];
        let info = vk::PipelineLayoutCreateInfo::default().push_constant_ranges(&ranges);
        // SAFETY: valid create info.
        scene.layout =
            unsafe { d.create_pipeline_layout(&info, None) }.vk("vkCreatePipelineLayout")?;
        scene.pipeline = pipeline(device, scene.render_pass, scene.layout, extent)?;
        Ok(scene)
    }

    /// The image the scene is drawn into.
    pub fn image(&self) -> &Image {
        &self.image
    }

    /// Records the drawing of frame `frame`; the image ends in `GENERAL`, its writes
    /// available to compute-shader and transfer reads.
    ///
    /// # Safety
    /// `cmd` is a command buffer of the device, recording, outside a render pass.
    pub unsafe fn record(&self, cmd: vk::CommandBuffer, frame: u32) {
        let d = self.device.raw();
        let extent = self.image.extent();
        let clear = [vk::ClearValue {
            color: vk::ClearColorValue {
                float32: [0.0, 0.0, 0.0, 1.0],
            },
        }];
        let begin = vk::RenderPassBeginInfo::default()
            .render_pass(self.render_pass)
            .framebuffer(self.framebuffer)
            .render_area(vk::Rect2D::default().extent(extent))
            .clear_values(&clear);
        let push = Push {
            frame,
            aspect: extent.width as f32 / extent.height.max(1) as f32,
            angle_step: ANGLE_STEP,
        };
        // SAFETY: forwarded contract; the pipeline matches the render pass and layout.
        unsafe {
            d.cmd_begin_render_pass(cmd, &begin, vk::SubpassContents::INLINE);
            d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::GRAPHICS, self.pipeline);
            d.cmd_push_constants(
                cmd,
                self.layout,
                vk::ShaderStageFlags::VERTEX,
                0,
                &push.bytes(),
            );
            d.cmd_draw(cmd, 6, 1, 0, 0);
            d.cmd_end_render_pass(cmd);
        }
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        let d = self.device.raw();
        // SAFETY: made from this device, destroyed once (null handles are ignored); the frame
        // loop waited for the work using them.
        unsafe {
            d.destroy_pipeline(self.pipeline, None);
            d.destroy_pipeline_layout(self.layout, None);
            d.destroy_framebuffer(self.framebuffer, None);
            d.destroy_render_pass(self.render_pass, None);
        }
    }
}
