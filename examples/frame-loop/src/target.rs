//! Where a frame goes: a window's swapchain, or, without a display, an offscreen image of the
//! same size as the render. Either way the result image is blitted into it, and the last frame
//! can be read back as the screenshot.

use ash::vk;
use vk_core::{Buffer, Device};

use crate::engine::Engine;
use crate::error::{Error, Result, VkCall};
use crate::image::{self, Image, LAYER, Use};

/// A swapchain and its per-image semaphores.
pub struct Swapchain {
    device: Device,
    fns: ash::khr::swapchain::Device,
    surface_fns: ash::khr::surface::Instance,
    surface: vk::SurfaceKHR,
    raw: vk::SwapchainKHR,
    images: Vec<vk::Image>,
    format: vk::Format,
    extent: vk::Extent2D,
    readable: bool,
    /// Signalled by the acquire, waited by the frame's last submission (which the frame
    /// loop waits for before acquiring again).
    acquired: vk::Semaphore,
    /// Per image: signalled by the frame's last submission, waited by the present.
    done: Vec<vk::Semaphore>,
}

impl std::fmt::Debug for Swapchain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Swapchain")
            .field("format", &self.format)
            .field("extent", &self.extent)
            .field("images", &self.images.len())
            .finish()
    }
}

fn semaphore(device: &Device) -> Result<vk::Semaphore> {
    // SAFETY: valid create info; destroyed by the owner.
    unsafe {
        device
            .raw()
            .create_semaphore(&vk::SemaphoreCreateInfo::default(), None)
    }
    .vk("vkCreateSemaphore")
}

/// A UNORM 8-bit format (so that the blit copies levels unchanged), else the first offered.
fn pick_format(formats: &[vk::SurfaceFormatKHR]) -> Option<vk::SurfaceFormatKHR> {
    let unorm = [vk::Format::B8G8R8A8_UNORM, vk::Format::R8G8B8A8_UNORM];
    formats
        .iter()
        .find(|f| unorm.contains(&f.format))
        .or(formats.first())
        .copied()
}

impl Swapchain {
    /// A swapchain on the engine's surface, `extent` where the surface leaves it open.
    pub fn new(engine: &Engine, extent: vk::Extent2D) -> Result<Swapchain> {
        let device = engine.device().clone();
        let (surface_fns, surface) = engine
            .surface()
            .cloned()
            .ok_or_else(|| Error::Window("the engine has no surface".into()))?;
        let fns = ash::khr::swapchain::Device::new(engine.instance(), device.raw());
        let mut s = Swapchain {
            acquired: semaphore(&device)?,
            device,
            fns,
            surface_fns,
            surface,
            raw: vk::SwapchainKHR::null(),
            images: Vec::new(),
            format: vk::Format::UNDEFINED,
            extent,
            readable: false,
            done: Vec::new(),
        };
        s.create(extent)?;
        Ok(s)
    }

    /// (Re)creates the swapchain for `extent` (the surface's own extent wins).
    fn create(&mut self, extent: vk::Extent2D) -> Result<()> {
        let pd = self.device.physical();
        // SAFETY: valid physical device and surface of this instance.
        let (caps, formats) = unsafe {
            (
                self.surface_fns
                    .get_physical_device_surface_capabilities(pd, self.surface)
                    .vk("vkGetPhysicalDeviceSurfaceCapabilitiesKHR")?,
                self.surface_fns
                    .get_physical_device_surface_formats(pd, self.surface)
                    .vk("vkGetPhysicalDeviceSurfaceFormatsKHR")?,
            )
        };
        let format = pick_format(&formats)
            .ok_or_else(|| Error::Window("the surface offers no format".into()))?;
        if !caps
            .supported_usage_flags
            .contains(vk::ImageUsageFlags::TRANSFER_DST)
        {
            return Err(Error::Window(
                "swapchain images cannot be blitted to (no TRANSFER_DST)".into(),
            ));
        }
        self.readable = caps
            .supported_usage_flags
            .contains(vk::ImageUsageFlags::TRANSFER_SRC);
        let mut usage = vk::ImageUsageFlags::TRANSFER_DST;
        if self.readable {
            usage |= vk::ImageUsageFlags::TRANSFER_SRC;
        }
        self.extent = if caps.current_extent.width == u32::MAX {
            vk::Extent2D {
                width: extent
                    .width
                    .clamp(caps.min_image_extent.width, caps.max_image_extent.width),
                height: extent
                    .height
                    .clamp(caps.min_image_extent.height, caps.max_image_extent.height),
            }
        } else {
            caps.current_extent
        };
        let mut count = caps.min_image_count + 1;
        if caps.max_image_count > 0 {
            count = count.min(caps.max_image_count);
        }
        let info = vk::SwapchainCreateInfoKHR::default()
            .surface(self.surface)
            .min_image_count(count)
            .image_format(format.format)
            .image_color_space(format.color_space)
            .image_extent(self.extent)
            .image_array_layers(1)
            .image_usage(usage)
            .image_sharing_mode(vk::SharingMode::EXCLUSIVE)
            .pre_transform(caps.current_transform)
            .composite_alpha(vk::CompositeAlphaFlagsKHR::OPAQUE)
            .present_mode(vk::PresentModeKHR::FIFO)
            .clipped(true)
            .old_swapchain(self.raw);
        // SAFETY: valid create info; the old swapchain (if any) is retired by this call and
        // destroyed below, its images no longer in use (the frame loop waited).
        let raw = unsafe { self.fns.create_swapchain(&info, None) }.vk("vkCreateSwapchainKHR")?;
        self.destroy_swapchain();
        self.raw = raw;
        self.format = format.format;
        // SAFETY: a live swapchain.
        self.images =
            unsafe { self.fns.get_swapchain_images(raw) }.vk("vkGetSwapchainImagesKHR")?;
        while self.done.len() < self.images.len() {
            self.done.push(semaphore(&self.device)?);
        }
        Ok(())
    }

    fn destroy_swapchain(&mut self) {
        if self.raw != vk::SwapchainKHR::null() {
            // SAFETY: made here, destroyed once, its images no longer used.
            unsafe { self.fns.destroy_swapchain(self.raw, None) };
            self.raw = vk::SwapchainKHR::null();
        }
    }

    /// Acquires the next image, recreating the swapchain when it is out of date.
    fn acquire(&mut self) -> Result<u32> {
        for _ in 0..3 {
            // SAFETY: live swapchain; `acquired` has no pending operation (the previous
            // frame's submission that waited on it has completed).
            let r = unsafe {
                self.fns
                    .acquire_next_image(self.raw, u64::MAX, self.acquired, vk::Fence::null())
            };
            match r {
                Ok((index, _suboptimal)) => return Ok(index),
                Err(vk::Result::ERROR_OUT_OF_DATE_KHR) => self.create(self.extent)?,
                Err(result) => {
                    return Err(Error::Vk {
                        call: "vkAcquireNextImageKHR",
                        result,
                    });
                }
            }
        }
        Err(Error::Window("the swapchain stays out of date".into()))
    }

    /// Presents image `index` once its `done` semaphore is signalled; an out-of-date or
    /// suboptimal swapchain is recreated for the next frame.
    fn present(&mut self, index: u32) -> Result<()> {
        let waits = [self.done[index as usize]];
        let swapchains = [self.raw];
        let indices = [index];
        let info = vk::PresentInfoKHR::default()
            .wait_semaphores(&waits)
            .swapchains(&swapchains)
            .image_indices(&indices);
        let r = {
            let guard = self.device.queue().lock();
            // SAFETY: the queue is externally synchronized by the guard; the image was
            // acquired and its `done` semaphore will be signalled by a submitted batch.
            unsafe { self.fns.queue_present(guard.raw(), &info) }
        };
        match r {
            Ok(false) => Ok(()),
            Ok(true) | Err(vk::Result::ERROR_OUT_OF_DATE_KHR) => {
                // SAFETY: the present is queued; wait for the queue before retiring images.
                unsafe {
                    let _guard = self.device.queue().lock();
                    self.device
                        .raw()
                        .device_wait_idle()
                        .vk("vkDeviceWaitIdle")?;
                }
                self.create(self.extent)
            }
            Err(result) => Err(Error::Vk {
                call: "vkQueuePresentKHR",
                result,
            }),
        }
    }
}

impl Drop for Swapchain {
    fn drop(&mut self) {
        // SAFETY: the queue is idle (the frame loop waited for its submissions; presents are
        // waited for here); every object was made here and is destroyed once.
        unsafe {
            {
                let _guard = self.device.queue().lock();
                let _ = self.device.raw().device_wait_idle();
            }
            self.destroy_swapchain();
            let d = self.device.raw();
            for s in self.done.drain(..) {
                d.destroy_semaphore(s, None);
            }
            d.destroy_semaphore(self.acquired, None);
        }
    }
}

/// The frame's destination.
#[derive(Debug)]
pub enum Target {
    /// A window's swapchain.
    Window(Swapchain),
    /// An image of the render's size, for a loop without a display.
    Offscreen(Image),
}

/// The image a frame is blitted into.
#[derive(Debug, Clone, Copy)]
pub struct Acquired {
    /// The image.
    pub image: vk::Image,
    /// Its swapchain index (0 offscreen).
    pub index: u32,
    /// Its size.
    pub extent: vk::Extent2D,
}

impl Target {
    /// An offscreen target of `extent`.
    pub fn offscreen(device: &Device, extent: vk::Extent2D) -> Result<Target> {
        let usage = vk::ImageUsageFlags::TRANSFER_DST | vk::ImageUsageFlags::TRANSFER_SRC;
        Ok(Target::Offscreen(Image::new(
            device,
            extent,
            usage,
            "offscreen target",
        )?))
    }

    /// Short name for the stats line.
    pub fn name(&self) -> &'static str {
        match self {
            Target::Window(_) => "window",
            Target::Offscreen(_) => "offscreen",
        }
    }

    /// Whether the presented image can be read back (else the screenshot reads the result).
    pub fn readable(&self) -> bool {
        match self {
            Target::Window(s) => s.readable,
            Target::Offscreen(_) => true,
        }
    }

    /// Whether the target's pixels are stored blue first.
    pub fn bgra(&self) -> bool {
        matches!(self, Target::Window(s) if s.format == vk::Format::B8G8R8A8_UNORM || s.format == vk::Format::B8G8R8A8_SRGB)
    }

    /// The next image to draw into.
    pub fn acquire(&mut self) -> Result<Acquired> {
        match self {
            Target::Window(s) => {
                let index = s.acquire()?;
                Ok(Acquired {
                    image: s.images[index as usize],
                    index,
                    extent: s.extent,
                })
            }
            Target::Offscreen(image) => Ok(Acquired {
                image: image.raw(),
                index: 0,
                extent: image.extent(),
            }),
        }
    }

    /// The semaphore the frame's last submission waits on (the acquire), if any.
    pub fn wait_semaphore(&self) -> Option<vk::Semaphore> {
        match self {
            Target::Window(s) => Some(s.acquired),
            Target::Offscreen(_) => None,
        }
    }

    /// The semaphore the frame's last submission signals for the present of `index`.
    pub fn signal_semaphore(&self, index: u32) -> Option<vk::Semaphore> {
        match self {
            Target::Window(s) => s.done.get(index as usize).copied(),
            Target::Offscreen(_) => None,
        }
    }

    /// Presents `index` (nothing offscreen).
    pub fn present(&mut self, index: u32) -> Result<()> {
        match self {
            Target::Window(s) => s.present(index),
            Target::Offscreen(_) => Ok(()),
        }
    }

    /// How the target's image is used while it is written.
    fn write_use(&self) -> Use {
        match self {
            Target::Window(_) => Use::PRESENT_WRITE,
            Target::Offscreen(_) => Use::TRANSFER_WRITE,
        }
    }

    /// Records the blit of `src` (in `GENERAL`, its writes made available to transfer reads)
    /// into `dst`, then, when `readback` is given, the copy of `dst` into it (`read_src`: the
    /// image read back, `dst` or `src` when the target cannot be read), and the hand-over to
    /// the presentation engine.
    ///
    /// # Safety
    /// `cmd` is a command buffer of `device`, recording, outside a render pass; `src` and
    /// `dst` are live; `readback` holds `dst`'s pixels.
    pub unsafe fn record_blit(
        &self,
        device: &Device,
        cmd: vk::CommandBuffer,
        src: &Image,
        dst: Acquired,
        readback: Option<&Buffer>,
    ) {
        let d = device.raw();
        let write = self.write_use();
        let corner = |e: vk::Extent2D| vk::Offset3D {
            x: e.width as i32,
            y: e.height as i32,
            z: 1,
        };
        let region = [vk::ImageBlit::default()
            .src_subresource(LAYER)
            .src_offsets([vk::Offset3D::default(), corner(src.extent())])
            .dst_subresource(LAYER)
            .dst_offsets([vk::Offset3D::default(), corner(dst.extent)])];
        let filter = if src.extent() == dst.extent {
            vk::Filter::NEAREST
        } else {
            vk::Filter::LINEAR
        };
        // SAFETY: forwarded contract; layouts follow the barriers recorded here.
        unsafe {
            image::barrier(device, cmd, dst.image, Use::NONE, write);
            d.cmd_blit_image(
                cmd,
                src.raw(),
                vk::ImageLayout::GENERAL,
                dst.image,
                write.layout,
                &region,
                filter,
            );
            let mut last = write;
            if let Some(buffer) = readback {
                let read_dst = self.readable();
                let (image, extent, layout) = if read_dst {
                    let read = match self {
                        Target::Window(_) => {
                            Use::transfer_read_in(vk::ImageLayout::TRANSFER_SRC_OPTIMAL)
                        }
                        Target::Offscreen(_) => Use::TRANSFER_READ,
                    };
                    image::barrier(device, cmd, dst.image, write, read);
                    last = read;
                    (dst.image, dst.extent, read.layout)
                } else {
                    (src.raw(), src.extent(), vk::ImageLayout::GENERAL)
                };
                let copy = [vk::BufferImageCopy::default()
                    .image_subresource(LAYER)
                    .image_extent(extent.into())];
                d.cmd_copy_image_to_buffer(cmd, image, layout, buffer.raw(), &copy);
                vk_core::barrier::host_read_barrier(device, cmd);
            }
            if let Target::Window(_) = self {
                image::barrier(device, cmd, dst.image, last, Use::PRESENT);
            }
        }
    }
}
