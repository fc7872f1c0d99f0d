//! The engine's RGBA8 images (memory from the device's allocator), layout barriers, and PNG
//! files.

use std::path::Path;

use ash::vk;
use vk_core::{Device, MemoryBlock, MemoryLocation};

use crate::error::{Error, Result, VkCall};

/// The format of every image the engine renders into or the model writes.
pub const FORMAT: vk::Format = vk::Format::R8G8B8A8_UNORM;

/// A 2-D RGBA8 image with its memory and a view.
pub struct Image {
    device: Device,
    raw: vk::Image,
    view: vk::ImageView,
    extent: vk::Extent2D,
    // Freed after the image is destroyed (`Drop`).
    _memory: MemoryBlock,
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Image")
            .field("raw", &self.raw)
            .field("extent", &self.extent)
            .finish()
    }
}

impl Image {
    /// A device-local image of `extent` with `usage`, named `what` in errors.
    pub fn new(
        device: &Device,
        extent: vk::Extent2D,
        usage: vk::ImageUsageFlags,
        what: &str,
    ) -> Result<Image> {
        let d = device.raw();
        let info = vk::ImageCreateInfo::default()
            .image_type(vk::ImageType::TYPE_2D)
            .format(FORMAT)
            .extent(extent.into())
            .mip_levels(1)
            .array_layers(1)
            .samples(vk::SampleCountFlags::TYPE_1)
            .tiling(vk::ImageTiling::OPTIMAL)
            .usage(usage)
            .initial_layout(vk::ImageLayout::UNDEFINED);
        // SAFETY: valid create info; destroyed in `Drop`.
        let raw = unsafe { d.create_image(&info, None) }.vk("vkCreateImage")?;
        let destroy = |e: Error| {
            // SAFETY: nothing uses the image yet.
            unsafe { d.destroy_image(raw, None) };
            e
        };
        // SAFETY: `raw` is a live image of this device.
        let reqs = unsafe { d.get_image_memory_requirements(raw) };
        let memory = MemoryBlock::new(device, &reqs, MemoryLocation::Device, what)
            .map_err(|e| destroy(e.into()))?;
        // SAFETY: the block meets the image's requirements and is bound once.
        unsafe { d.bind_image_memory(raw, memory.memory(), memory.offset()) }
            .vk("vkBindImageMemory")
            .map_err(destroy)?;
        let view_info = vk::ImageViewCreateInfo::default()
            .image(raw)
            .view_type(vk::ImageViewType::TYPE_2D)
            .format(FORMAT)
            .subresource_range(COLOUR);
        let viewed = vk::ImageUsageFlags::STORAGE | vk::ImageUsageFlags::COLOR_ATTACHMENT;
        let view = if usage.intersects(viewed) {
            // SAFETY: valid create info for a bound image.
            unsafe { d.create_image_view(&view_info, None) }
                .vk("vkCreateImageView")
                .map_err(destroy)?
        } else {
            vk::ImageView::null()
        };
        Ok(Image {
            device: device.clone(),
            raw,
            view,
            extent,
            _memory: memory,
        })
    }

    /// The image.
    pub fn raw(&self) -> vk::Image {
        self.raw
    }

    /// Its view (null for an image only copied to and from).
    pub fn view(&self) -> vk::ImageView {
        self.view
    }

    /// Its size.
    pub fn extent(&self) -> vk::Extent2D {
        self.extent
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        // SAFETY: made from this device, destroyed once; the frame loop waited for the work
        // using them before dropping.
        unsafe {
            self.device.raw().destroy_image_view(self.view, None);
            self.device.raw().destroy_image(self.raw, None);
        }
    }
}

/// The one colour subresource of every image here.
pub const COLOUR: vk::ImageSubresourceRange = vk::ImageSubresourceRange {
    aspect_mask: vk::ImageAspectFlags::COLOR,
    base_mip_level: 0,
    level_count: 1,
    base_array_layer: 0,
    layer_count: 1,
};

/// The colour layer for copies and blits.
pub const LAYER: vk::ImageSubresourceLayers = vk::ImageSubresourceLayers {
    aspect_mask: vk::ImageAspectFlags::COLOR,
    mip_level: 0,
    base_array_layer: 0,
    layer_count: 1,
};

/// One side of an image barrier: stage, access, layout.
#[derive(Debug, Clone, Copy)]
pub struct Use {
    /// Pipeline stage.
    pub stage: vk::PipelineStageFlags,
    /// Access.
    pub access: vk::AccessFlags,
    /// Layout.
    pub layout: vk::ImageLayout,
}

impl Use {
    /// Nothing before (the contents are discarded).
    pub const NONE: Use = Use {
        stage: vk::PipelineStageFlags::TOP_OF_PIPE,
        access: vk::AccessFlags::empty(),
        layout: vk::ImageLayout::UNDEFINED,
    };
    /// After the transfer reads of an earlier frame, the contents discarded.
    pub const DISCARD_AFTER_TRANSFER: Use = Use {
        stage: vk::PipelineStageFlags::TRANSFER,
        access: vk::AccessFlags::empty(),
        layout: vk::ImageLayout::UNDEFINED,
    };
    /// Written by a compute shader (storage image, `GENERAL`).
    pub const COMPUTE_WRITE: Use = Use {
        stage: vk::PipelineStageFlags::COMPUTE_SHADER,
        access: vk::AccessFlags::SHADER_WRITE,
        layout: vk::ImageLayout::GENERAL,
    };
    /// Read by a compute shader (storage image, `GENERAL`).
    pub const COMPUTE_READ: Use = Use {
        stage: vk::PipelineStageFlags::COMPUTE_SHADER,
        access: vk::AccessFlags::SHADER_READ,
        layout: vk::ImageLayout::GENERAL,
    };
    /// Read by a copy or blit (`GENERAL`).
    pub const TRANSFER_READ: Use = Use {
        stage: vk::PipelineStageFlags::TRANSFER,
        access: vk::AccessFlags::TRANSFER_READ,
        layout: vk::ImageLayout::GENERAL,
    };
    /// Written by a copy or blit (`GENERAL`).
    pub const TRANSFER_WRITE: Use = Use {
        stage: vk::PipelineStageFlags::TRANSFER,
        access: vk::AccessFlags::TRANSFER_WRITE,
        layout: vk::ImageLayout::GENERAL,
    };
    /// Written by a copy or blit into a swapchain image.
    pub const PRESENT_WRITE: Use = Use {
        stage: vk::PipelineStageFlags::TRANSFER,
        access: vk::AccessFlags::TRANSFER_WRITE,
        layout: vk::ImageLayout::TRANSFER_DST_OPTIMAL,
    };
    /// Handed to the presentation engine.
    pub const PRESENT: Use = Use {
        stage: vk::PipelineStageFlags::BOTTOM_OF_PIPE,
        access: vk::AccessFlags::empty(),
        layout: vk::ImageLayout::PRESENT_SRC_KHR,
    };
    /// As [`Use::TRANSFER_READ`] in a layout of the caller's.
    pub fn transfer_read_in(layout: vk::ImageLayout) -> Use {
        Use {
            layout,
            ..Use::TRANSFER_READ
        }
    }
}

/// Records a barrier on `image` from `before` to `after`.
///
/// # Safety
/// `cmd` is a command buffer of `device`, recording, outside a render pass; `image` is a live
/// colour image of the device.
pub unsafe fn barrier(
    device: &Device,
    cmd: vk::CommandBuffer,
    image: vk::Image,
    before: Use,
    after: Use,
) {
    let b = [vk::ImageMemoryBarrier::default()
        .src_access_mask(before.access)
        .dst_access_mask(after.access)
        .old_layout(before.layout)
        .new_layout(after.layout)
        .src_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
        .dst_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
        .image(image)
        .subresource_range(COLOUR)];
    // SAFETY: forwarded contract.
    unsafe {
        device.raw().cmd_pipeline_barrier(
            cmd,
            before.stage,
            after.stage,
            vk::DependencyFlags::empty(),
            &[],
            &[],
            &b,
        );
    }
}

/// Writes `rgba` (`width * height * 4` bytes, rows top to bottom) as an 8-bit RGBA PNG.
pub fn write_png(path: &Path, width: u32, height: u32, rgba: &[u8]) -> Result<()> {
    let err = |problem: String| Error::File {
        path: path.display().to_string(),
        problem,
    };
    let file = std::fs::File::create(path).map_err(|e| err(e.to_string()))?;
    let mut encoder = png::Encoder::new(std::io::BufWriter::new(file), width, height);
    encoder.set_color(png::ColorType::Rgba);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(|e| err(e.to_string()))?;
    writer
        .write_image_data(rgba)
        .map_err(|e| err(e.to_string()))
}

/// Reads an 8-bit RGBA PNG: width, height and its pixels.
pub fn read_png(path: &Path) -> Result<(u32, u32, Vec<u8>)> {
    let err = |problem: String| Error::File {
        path: path.display().to_string(),
        problem,
    };
    let file = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
    let mut reader = png::Decoder::new(std::io::BufReader::new(file))
        .read_info()
        .map_err(|e| err(e.to_string()))?;
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader
        .next_frame(&mut buf)
        .map_err(|e| err(e.to_string()))?;
    if info.color_type != png::ColorType::Rgba || info.bit_depth != png::BitDepth::Eight {
        return Err(err(format!(
            "expected 8-bit RGBA, found {:?} at {:?}",
            info.color_type, info.bit_depth
        )));
    }
    buf.truncate(info.buffer_size());
    Ok((info.width, info.height, buf))
}
