//! An application's `VkImage`s as tensors: small conversion kernels between a 2D storage image
//! and an fp32 tensor in a buffer ([`ImageConversion`]).
//!
//! - Image to tensor ([`ImageToTensor`]): `tensor = (texel - mean) * scale` per channel, the
//!   texel as the shader reads it (UNORM formats in `[0, 1]`), into an NCHW `[1, C, H, W]` or
//!   NHWC `[1, H, W, C]` tensor with `C` in `1..=4`; `H`, `W` are the image's extent.
//! - Tensor to image ([`TensorToImage`]): through a [`ColourMap`] (channels, a heat palette, or
//!   the argmax over the channels picking a palette colour).
//!
//! Formats ([`FormatClass`]): `R8G8B8A8_UNORM`, `B8G8R8A8_UNORM`, `R16G16B16A16_SFLOAT`,
//! `R32G32B32A32_SFLOAT`; one kernel per storage format class (`rgba8`, `rgba16f`, `rgba32f`,
//! SPIR-V under `spirv/`), since a storage image's view must match the shader's format
//! qualifier exactly (other formats give undefined values) and devices need not read storage
//! images without one (lavapipe cannot). A `B8G8R8A8_UNORM` image is therefore read and
//! written through an `R8G8B8A8_UNORM` view the conversion makes of it, red and blue swapped
//! in the shader: such an image must be created with `VK_IMAGE_CREATE_MUTABLE_FORMAT_BIT`
//! (the application's own view is not used).
//!
//! Every check is an [`ImageProblem`]: the device-free ones ([`ImageToTensor::check`],
//! [`TensorToImage::check`]) before any device is touched, the device's format feature
//! ([`check_format`]) and buffer limits when the conversion is made. What cannot be checked
//! (Vulkan cannot be asked): that the handles are of the conversion's device, that the view is
//! a 2D colour view of mip 0 / layer 0 of the image, and the image's layout.
//!
//! The contract of an [`AppImage`]: the image is in `VK_IMAGE_LAYOUT_GENERAL` whenever a
//! submission recording its conversion runs, and the application orders its own accesses to
//! the image against that submission (semaphores). The conversion's barriers order the
//! kernel after every earlier write of the command buffer and before every later access.

use std::fmt;

use ash::vk;

use crate::device::device::Device;
use crate::device::features::Features;
use crate::error::{Error, VkResultExt};
use crate::gpu::barrier::{Access, memory_barrier};
use crate::gpu::host::DType;
use crate::gpu::kernel::Kernel;
use crate::gpu::memory::{Buffer, BufferSlice, MemoryLocation};
use crate::io::tensor::TensorSpec;

/// Image to tensor kernels, per format class.
const TO_TENSOR: [&[u8]; 3] = [
    include_bytes!("../../spirv/image_to_tensor_rgba8.spv"),
    include_bytes!("../../spirv/image_to_tensor_rgba16f.spv"),
    include_bytes!("../../spirv/image_to_tensor_rgba32f.spv"),
];
/// Tensor to image kernels, per format class.
const TO_IMAGE: [&[u8]; 3] = [
    include_bytes!("../../spirv/tensor_to_image_rgba8.spv"),
    include_bytes!("../../spirv/tensor_to_image_rgba16f.spv"),
    include_bytes!("../../spirv/tensor_to_image_rgba32f.spv"),
];
/// Image to fp16 tensor kernels, per format class (16-bit stores).
const TO_TENSOR_F16: [&[u8]; 3] = [
    include_bytes!("../../spirv/image_to_tensor_rgba8_f16.spv"),
    include_bytes!("../../spirv/image_to_tensor_rgba16f_f16.spv"),
    include_bytes!("../../spirv/image_to_tensor_rgba32f_f16.spv"),
];
/// fp16 tensor to image kernels, per format class.
const TO_IMAGE_F16: [&[u8]; 3] = [
    include_bytes!("../../spirv/tensor_to_image_rgba8_f16.spv"),
    include_bytes!("../../spirv/tensor_to_image_rgba16f_f16.spv"),
    include_bytes!("../../spirv/tensor_to_image_rgba32f_f16.spv"),
];

/// What the fp16 kernels need enabled on the device.
const F16_FEATURES: Features = Features::SHADER_FLOAT16.union(Features::STORAGE_BUFFER_16BIT);

/// Work-group size of the kernels in x and y.
const LOCAL_SIZE: u32 = 8;

/// An application's 2D image with the view a conversion reads or writes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppImage {
    /// The image.
    pub image: vk::Image,
    /// A 2D colour view of mip 0 / layer 0 of `image`, made by the application, of `format`
    /// (not used for `B8G8R8A8_UNORM`: see the module's docs).
    pub view: vk::ImageView,
    /// The view's format.
    pub format: vk::Format,
    /// The extent of mip 0.
    pub extent: vk::Extent2D,
    /// The usage the image was created with (it needs `STORAGE`).
    pub usage: vk::ImageUsageFlags,
    /// The queue family that owns the image when it was created with
    /// `VK_SHARING_MODE_EXCLUSIVE` and is used by another family than the program's
    /// ([`AppImage::exclusive_to`]); `None`: concurrent sharing, or owned by the program's
    /// family.
    pub exclusive_family: Option<u32>,
}

impl AppImage {
    /// An image of `extent` created with `usage`, seen through `view` (of `format`).
    pub fn new(
        image: vk::Image,
        view: vk::ImageView,
        format: vk::Format,
        extent: vk::Extent2D,
        usage: vk::ImageUsageFlags,
    ) -> AppImage {
        AppImage {
            image,
            view,
            format,
            extent,
            usage,
            exclusive_family: None,
        }
    }

    /// States that the image is owned by queue family `family` (`VK_SHARING_MODE_EXCLUSIVE`).
    /// A conversion on another family's queue is refused with
    /// [`ImageProblem::QueueFamily`]: transfer the image's ownership to the program's family
    /// (a release barrier on the engine's queue, an acquire on the program's) and bind it
    /// without this, or create it with `VK_SHARING_MODE_CONCURRENT`.
    pub fn exclusive_to(mut self, family: u32) -> AppImage {
        self.exclusive_family = Some(family);
        self
    }
}

/// Refuses an image owned exclusively by another queue family than `device`'s.
fn check_family(device: &Device, image: &AppImage) -> Result<(), ImageProblem> {
    let queue = device.queue().family();
    match image.exclusive_family {
        Some(owner) if owner != queue => Err(ImageProblem::QueueFamily { owner, queue }),
        _ => Ok(()),
    }
}

/// How a tensor's dimensions are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TensorLayout {
    /// `[1, C, H, W]`.
    #[default]
    Nchw,
    /// `[1, H, W, C]`.
    Nhwc,
}

impl fmt::Display for TensorLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TensorLayout::Nchw => "NCHW [1, C, H, W]",
            TensorLayout::Nhwc => "NHWC [1, H, W, C]",
        })
    }
}

/// An image read into a tensor: `tensor = (texel - mean) * scale` per channel (RGBA order).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ImageToTensor {
    /// The tensor's layout; its channel count `C` (`1..=4`, the first `C` of R, G, B, A) comes
    /// from its shape.
    pub layout: TensorLayout,
    /// Multiplier per channel.
    pub scale: [f32; 4],
    /// Subtracted per channel before scaling.
    pub mean: [f32; 4],
}

impl Default for ImageToTensor {
    /// NCHW, scale 1, mean 0.
    fn default() -> Self {
        ImageToTensor {
            layout: TensorLayout::Nchw,
            scale: [1.0; 4],
            mean: [0.0; 4],
        }
    }
}

/// How tensor values become colours.
#[derive(Debug, Clone, PartialEq)]
pub enum ColourMap {
    /// `C = 1` grey, `C = 2` grey and alpha, `C = 3` RGB (alpha 1), `C = 4` RGBA; each
    /// `value * scale + bias`, clamped to `[0, 1]`.
    Channels,
    /// `C = 1`: `value * scale + bias`, clamped to `[0, 1]`, through a heat palette (blue,
    /// cyan, green, yellow, red).
    Heat,
    /// The argmax over the `C` channels (the first on a tie) picks this palette's colour
    /// (RGBA); the palette needs at least `C` colours.
    Classes(Vec<[f32; 4]>),
}

impl ColourMap {
    fn mode(&self) -> u32 {
        match self {
            ColourMap::Channels => 0,
            ColourMap::Heat => 1,
            ColourMap::Classes(_) => 2,
        }
    }
}

/// A tensor written into an image through a colour map.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorToImage {
    /// The tensor's layout.
    pub layout: TensorLayout,
    /// How values become colours.
    pub colour_map: ColourMap,
    /// Multiplier (channels and heat maps).
    pub scale: f32,
    /// Added after scaling (channels and heat maps).
    pub bias: f32,
}

impl Default for TensorToImage {
    /// NCHW channels, scale 1, bias 0.
    fn default() -> Self {
        TensorToImage {
            layout: TensorLayout::Nchw,
            colour_map: ColourMap::Channels,
            scale: 1.0,
            bias: 0.0,
        }
    }
}

/// The storage format classes, one kernel each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FormatClass {
    /// `R8G8B8A8_UNORM`, `B8G8R8A8_UNORM`.
    Rgba8,
    /// `R16G16B16A16_SFLOAT`.
    Rgba16f,
    /// `R32G32B32A32_SFLOAT`.
    Rgba32f,
}

impl FormatClass {
    /// The class of `format`, with whether red and blue are swapped; `None` if unsupported.
    pub fn of(format: vk::Format) -> Option<(FormatClass, bool)> {
        match format {
            vk::Format::R8G8B8A8_UNORM => Some((FormatClass::Rgba8, false)),
            vk::Format::B8G8R8A8_UNORM => Some((FormatClass::Rgba8, true)),
            vk::Format::R16G16B16A16_SFLOAT => Some((FormatClass::Rgba16f, false)),
            vk::Format::R32G32B32A32_SFLOAT => Some((FormatClass::Rgba32f, false)),
            _ => None,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The formats a conversion accepts.
pub const FORMATS: [vk::Format; 4] = [
    vk::Format::R8G8B8A8_UNORM,
    vk::Format::B8G8R8A8_UNORM,
    vk::Format::R16G16B16A16_SFLOAT,
    vk::Format::R32G32B32A32_SFLOAT,
];

/// Why an image cannot be converted from or to a tensor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageProblem {
    /// The image was not created with `STORAGE` usage.
    #[error("the image lacks usage STORAGE (its usage: {usage:?})")]
    MissingStorageUsage {
        /// The image's usage.
        usage: vk::ImageUsageFlags,
    },
    /// The format has no conversion kernel.
    #[error("format {format:?} is not supported (supported: {FORMATS:?})")]
    UnsupportedFormat {
        /// The view's format.
        format: vk::Format,
    },
    /// The device cannot use the format as a storage image (optimal tiling).
    #[error("format {format:?} lacks the STORAGE_IMAGE feature (optimal tiling) on this device")]
    NoStorageFeature {
        /// The view's format.
        format: vk::Format,
    },
    /// The image has no texels.
    #[error("the image's extent {width}x{height} is empty")]
    EmptyImage {
        /// Width.
        width: u32,
        /// Height.
        height: u32,
    },
    /// The tensor is not of a dtype the kernels read or write.
    #[error("the tensor is {dtype}; image conversions need f32 or f16")]
    DType {
        /// The tensor's dtype.
        dtype: DType,
    },
    /// The tensor's shape is not `[1, C, H, W]` / `[1, H, W, C]`.
    #[error("the tensor's shape {shape:?} is not {layout}")]
    Shape {
        /// The tensor's shape.
        shape: Vec<usize>,
        /// The layout asked for.
        layout: TensorLayout,
    },
    /// The tensor's channel count is outside what the conversion takes.
    #[error("the tensor has {channels} channels; this conversion takes {allowed}")]
    Channels {
        /// `C`.
        channels: usize,
        /// What is allowed.
        allowed: &'static str,
    },
    /// The image's extent differs from the tensor's `H`, `W`.
    #[error(
        "the image is {image_width}x{image_height} but the tensor's W x H is \
         {tensor_width}x{tensor_height}"
    )]
    Extent {
        /// The image's width.
        image_width: u32,
        /// The image's height.
        image_height: u32,
        /// The tensor's `W`.
        tensor_width: usize,
        /// The tensor's `H`.
        tensor_height: usize,
    },
    /// An fp16 tensor on a device without `shaderFloat16` and `storageBuffer16BitAccess`
    /// enabled.
    #[error(
        "the tensor is f16 and the device does not have shaderFloat16 and \
         storageBuffer16BitAccess enabled"
    )]
    F16NotEnabled,
    /// The image is owned exclusively by another queue family than the program's queue.
    #[error(
        "the image is owned by queue family {owner} (exclusive sharing) and the program runs on \
         family {queue}: transfer its ownership to family {queue} first, or create it with \
         concurrent sharing"
    )]
    QueueFamily {
        /// The family that owns the image.
        owner: u32,
        /// The program's queue family.
        queue: u32,
    },
    /// A [`ColourMap::Classes`] palette has fewer colours than the tensor has channels.
    #[error("the palette has {colours} colours for {channels} channels")]
    PaletteTooShort {
        /// Colours given.
        colours: usize,
        /// The tensor's `C`.
        channels: usize,
    },
    /// The tensor's buffer range is smaller than the tensor.
    #[error("the tensor's buffer range holds {size} bytes, the tensor needs {need}")]
    TooSmall {
        /// The range's size.
        size: u64,
        /// Bytes needed.
        need: u64,
    },
    /// The tensor's buffer range starts at an offset the device cannot bind.
    #[error("offset {offset} is not a multiple of minStorageBufferOffsetAlignment ({alignment})")]
    Misaligned {
        /// The range's offset.
        offset: u64,
        /// The device's alignment.
        alignment: u64,
    },
    /// The tensor or the dispatch exceeds a device limit.
    #[error("{what} is {value}, the device allows {limit}")]
    Limit {
        /// What exceeds it.
        what: &'static str,
        /// The number.
        value: u64,
        /// The device's limit.
        limit: u64,
    },
    /// A rebound image's extent differs from the bound one's.
    #[error("the new image is {width}x{height}, the bound one {bound_width}x{bound_height}")]
    ExtentChanged {
        /// The new width.
        width: u32,
        /// The new height.
        height: u32,
        /// The bound width.
        bound_width: u32,
        /// The bound height.
        bound_height: u32,
    },
    /// A rebound image's format is of another class than the bound one's.
    #[error("the new image's format {format:?} is not of the class of the bound {bound:?}")]
    FormatChanged {
        /// The new format.
        format: vk::Format,
        /// The bound format.
        bound: vk::Format,
    },
}

/// Errors of image conversions: a problem with what was given, or a Vulkan error.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// What was given cannot be converted.
    #[error(transparent)]
    Problem(#[from] ImageProblem),
    /// Vulkan or device errors.
    #[error(transparent)]
    Vk(#[from] Error),
}

/// The tensor's `(C, H, W)` under `layout`.
fn dims(spec: &TensorSpec, layout: TensorLayout) -> Result<(usize, usize, usize), ImageProblem> {
    if !matches!(spec.dtype, DType::F32 | DType::F16) {
        return Err(ImageProblem::DType { dtype: spec.dtype });
    }
    let (c, h, w) = match (layout, spec.shape.as_slice()) {
        (TensorLayout::Nchw, &[1, c, h, w]) => (c, h, w),
        (TensorLayout::Nhwc, &[1, h, w, c]) => (c, h, w),
        _ => {
            return Err(ImageProblem::Shape {
                shape: spec.shape.clone(),
                layout,
            });
        }
    };
    Ok((c, h, w))
}

/// The checks every image gets: usage, a supported format, a non-empty extent matching the
/// tensor's `H`, `W`.
fn check_image(image: &AppImage, h: usize, w: usize) -> Result<(), ImageProblem> {
    if !image.usage.contains(vk::ImageUsageFlags::STORAGE) {
        return Err(ImageProblem::MissingStorageUsage { usage: image.usage });
    }
    if FormatClass::of(image.format).is_none() {
        return Err(ImageProblem::UnsupportedFormat {
            format: image.format,
        });
    }
    let vk::Extent2D { width, height } = image.extent;
    if width == 0 || height == 0 {
        return Err(ImageProblem::EmptyImage { width, height });
    }
    if width as usize != w || height as usize != h {
        return Err(ImageProblem::Extent {
            image_width: width,
            image_height: height,
            tensor_width: w,
            tensor_height: h,
        });
    }
    Ok(())
}

impl ImageToTensor {
    /// The device-free checks of reading `image` into a tensor of `spec`: f32, the layout's
    /// rank with batch 1, `C` in `1..=4`, the image's usage, format and extent.
    pub fn check(&self, image: &AppImage, spec: &TensorSpec) -> Result<(), ImageProblem> {
        let (c, h, w) = dims(spec, self.layout)?;
        if !(1..=4).contains(&c) {
            return Err(ImageProblem::Channels {
                channels: c,
                allowed: "1..=4",
            });
        }
        check_image(image, h, w)
    }
}

impl TensorToImage {
    /// The device-free checks of writing a tensor of `spec` into `image`: f32, the layout's
    /// rank with batch 1, the colour map's channel count (channels: `1..=4`; heat: 1;
    /// classes: at least 1 and at most the palette's length), the image's usage, format and
    /// extent.
    pub fn check(&self, image: &AppImage, spec: &TensorSpec) -> Result<(), ImageProblem> {
        let (c, h, w) = dims(spec, self.layout)?;
        let (ok, allowed) = match &self.colour_map {
            ColourMap::Channels => ((1..=4).contains(&c), "1..=4 (channels)"),
            ColourMap::Heat => (c == 1, "1 (heat)"),
            ColourMap::Classes(_) => (c >= 1, "at least 1 (classes)"),
        };
        if !ok {
            return Err(ImageProblem::Channels {
                channels: c,
                allowed,
            });
        }
        if let ColourMap::Classes(palette) = &self.colour_map {
            if palette.len() < c {
                return Err(ImageProblem::PaletteTooShort {
                    colours: palette.len(),
                    channels: c,
                });
            }
        }
        check_image(image, h, w)
    }
}

/// Checks that `device` can use `format` as a storage image (optimal tiling) and that a
/// kernel exists for it.
pub fn check_format(device: &Device, format: vk::Format) -> Result<FormatClass, ImageProblem> {
    // SAFETY: the physical device belongs to the device's live instance.
    let props = unsafe {
        device
            .instance()
            .raw()
            .get_physical_device_format_properties(device.physical(), format)
    };
    format_class(format, props.optimal_tiling_features)
}

/// The class of `format` if a kernel exists for it and `features` (its optimal-tiling
/// features on a device) include `STORAGE_IMAGE`.
fn format_class(
    format: vk::Format,
    features: vk::FormatFeatureFlags,
) -> Result<FormatClass, ImageProblem> {
    let Some((class, _)) = FormatClass::of(format) else {
        return Err(ImageProblem::UnsupportedFormat { format });
    };
    if !features.contains(vk::FormatFeatureFlags::STORAGE_IMAGE) {
        return Err(ImageProblem::NoStorageFeature { format });
    }
    Ok(class)
}

/// Which way a conversion goes, with its parameters as push constants.
#[derive(Debug, Clone)]
enum Direction {
    ToTensor(ImageToTensor),
    ToImage(TensorToImage),
}

/// The descriptor types of a kernel's bindings, in binding order.
fn bindings(direction: &Direction) -> &'static [vk::DescriptorType] {
    match direction {
        Direction::ToTensor(_) => &[
            vk::DescriptorType::STORAGE_IMAGE,
            vk::DescriptorType::STORAGE_BUFFER,
        ],
        Direction::ToImage(_) => &[
            vk::DescriptorType::STORAGE_BUFFER,
            vk::DescriptorType::STORAGE_IMAGE,
            vk::DescriptorType::STORAGE_BUFFER,
        ],
    }
}

/// The `R8G8B8A8_UNORM` view a conversion makes of a `B8G8R8A8_UNORM` image, so that the view
/// matches the kernel's `rgba8` format qualifier.
struct SwapView {
    device: Device,
    view: vk::ImageView,
}

impl SwapView {
    /// The view `image` needs, if any.
    ///
    /// # Safety
    /// `image.image` is a live 2D image of `device` of `image.format`; a `B8G8R8A8_UNORM` one
    /// was created with `VK_IMAGE_CREATE_MUTABLE_FORMAT_BIT`.
    unsafe fn for_image(device: &Device, image: &AppImage) -> Result<Option<SwapView>, Error> {
        if !FormatClass::of(image.format).is_some_and(|(_, swap)| swap) {
            return Ok(None);
        }
        let mut usage = vk::ImageViewUsageCreateInfo::default().usage(vk::ImageUsageFlags::STORAGE);
        let range = vk::ImageSubresourceRange {
            aspect_mask: vk::ImageAspectFlags::COLOR,
            base_mip_level: 0,
            level_count: 1,
            base_array_layer: 0,
            layer_count: 1,
        };
        let info = vk::ImageViewCreateInfo::default()
            .image(image.image)
            .view_type(vk::ImageViewType::TYPE_2D)
            .format(vk::Format::R8G8B8A8_UNORM)
            .subresource_range(range)
            .push_next(&mut usage);
        // SAFETY: the caller's contract; R8G8B8A8_UNORM is in the image's compatibility class.
        let view =
            unsafe { device.raw().create_image_view(&info, None) }.vk("vkCreateImageView")?;
        Ok(Some(SwapView {
            device: device.clone(),
            view,
        }))
    }
}

impl Drop for SwapView {
    fn drop(&mut self) {
        // SAFETY: created by `for_image` from this device, destroyed once; its conversion's
        // owner keeps it until no submission using it can still run.
        unsafe { self.device.raw().destroy_image_view(self.view, None) };
    }
}

/// Bytes of the kernels' push constants (the larger of the two blocks).
const PUSH_BYTES: usize = 48;

/// One bound image's conversion from or to a tensor in a buffer: its own pipeline, descriptor
/// set and (tensor to image) palette buffer. It records its dispatch, with the barriers
/// around it, into the caller's command buffer ([`ImageConversion::record`]).
///
/// Dropping it destroys its objects: keep it until no submission recording it can still run.
pub struct ImageConversion {
    // Field order is drop order; the kernel's set refers to the palette and the view.
    kernel: Kernel,
    palette: Option<Buffer>,
    /// The conversion's own `R8G8B8A8_UNORM` view of a `B8G8R8A8_UNORM` image.
    swap_view: Option<SwapView>,
    direction: Direction,
    image: AppImage,
    tensor: BufferSlice,
    /// Bytes of the tensor (the descriptor's range).
    range: u64,
    channels: u32,
}

impl fmt::Debug for ImageConversion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ImageConversion")
            .field("direction", &self.direction)
            .field("image", &self.image)
            .field("tensor", &self.tensor)
            .finish()
    }
}

impl ImageConversion {
    /// A conversion reading `image` into the fp32 tensor `spec` at `tensor` on `device`.
    ///
    /// # Safety
    /// `image` and `tensor` are live handles of `device` (a 2D colour view of mip 0 / layer 0
    /// of the image, created with the usage stated; the buffer with `STORAGE_BUFFER` usage)
    /// and outlive every submission recording the conversion; the image is in
    /// `VK_IMAGE_LAYOUT_GENERAL` whenever such a submission runs.
    pub unsafe fn image_to_tensor(
        device: &Device,
        image: AppImage,
        spec: &TensorSpec,
        tensor: BufferSlice,
        conv: &ImageToTensor,
    ) -> Result<ImageConversion, ImageError> {
        conv.check(&image, spec)?;
        check_family(device, &image)?;
        let direction = Direction::ToTensor(*conv);
        // SAFETY: forwarded contract.
        unsafe { Self::new(device, image, spec, tensor, direction, conv.layout) }
    }

    /// A conversion writing the fp32 tensor `spec` at `tensor` into `image` on `device`.
    ///
    /// # Safety
    /// As [`ImageConversion::image_to_tensor`].
    pub unsafe fn tensor_to_image(
        device: &Device,
        spec: &TensorSpec,
        tensor: BufferSlice,
        image: AppImage,
        conv: &TensorToImage,
    ) -> Result<ImageConversion, ImageError> {
        conv.check(&image, spec)?;
        check_family(device, &image)?;
        let direction = Direction::ToImage(conv.clone());
        // SAFETY: forwarded contract.
        unsafe { Self::new(device, image, spec, tensor, direction, conv.layout) }
    }

    /// # Safety
    /// As [`ImageConversion::image_to_tensor`]; `direction`'s checks passed.
    unsafe fn new(
        device: &Device,
        image: AppImage,
        spec: &TensorSpec,
        tensor: BufferSlice,
        direction: Direction,
        layout: TensorLayout,
    ) -> Result<ImageConversion, ImageError> {
        let (c, _, _) = dims(spec, layout)?;
        let class = check_format(device, image.format)?;
        let range = check_buffer(device, spec, &tensor)?;
        check_groups(device, image.extent)?;
        let f16 = spec.dtype == DType::F16;
        if f16 && !device.enabled().features.contains(F16_FEATURES) {
            return Err(ImageProblem::F16NotEnabled.into());
        }
        let (to_tensor, to_image) = if f16 {
            (TO_TENSOR_F16, TO_IMAGE_F16)
        } else {
            (TO_TENSOR, TO_IMAGE)
        };
        let (spirv, palette) = match &direction {
            Direction::ToTensor(_) => (to_tensor[class.index()], None),
            Direction::ToImage(t) => (to_image[class.index()], Some(palette(device, t)?)),
        };
        let kernel = Kernel::new(device, spirv, bindings(&direction), PUSH_BYTES as u32)?;
        // SAFETY: the caller's contract covers the image.
        let swap_view = unsafe { SwapView::for_image(device, &image) }?;
        let conversion = ImageConversion {
            kernel,
            palette,
            swap_view,
            direction,
            image,
            tensor,
            range,
            channels: u32::try_from(c).unwrap_or(u32::MAX),
        };
        conversion.write_set();
        Ok(conversion)
    }

    /// The image bound.
    pub fn image(&self) -> AppImage {
        self.image
    }

    /// The tensor's buffer range.
    pub fn tensor(&self) -> BufferSlice {
        self.tensor
    }

    /// Binds another image of the same extent and format class (`R8G8B8A8_UNORM` and
    /// `B8G8R8A8_UNORM` are one class), checked as at creation. Only the descriptor set is
    /// written: no pipeline is made. A command buffer that recorded this conversion before
    /// must be recorded again (Vulkan invalidates it when its descriptor set is updated;
    /// the red/blue swap is a push constant).
    ///
    /// # Safety
    /// As [`ImageConversion::image_to_tensor`] for `image`; no submission recording this
    /// conversion is pending.
    pub unsafe fn set_image(&mut self, image: AppImage) -> Result<(), ImageError> {
        let bound = self.image;
        if image.extent != bound.extent {
            return Err(ImageProblem::ExtentChanged {
                width: image.extent.width,
                height: image.extent.height,
                bound_width: bound.extent.width,
                bound_height: bound.extent.height,
            }
            .into());
        }
        let class = |f| FormatClass::of(f).map(|(c, _)| c);
        if class(image.format).is_some() && class(image.format) != class(bound.format) {
            return Err(ImageProblem::FormatChanged {
                format: image.format,
                bound: bound.format,
            }
            .into());
        }
        let extent = bound.extent;
        let (h, w) = (extent.height as usize, extent.width as usize);
        check_image(&image, h, w)?;
        check_format(&self.kernel.device, image.format)?;
        check_family(&self.kernel.device, &image)?;
        // SAFETY: the caller's contract covers the image; nothing pending uses the old view.
        let swap_view = unsafe { SwapView::for_image(&self.kernel.device, &image) }?;
        self.image = image;
        // The old view goes once the set no longer names it.
        let _old = std::mem::replace(&mut self.swap_view, swap_view);
        self.write_set();
        Ok(())
    }

    /// Writes the descriptor set: image, tensor and palette.
    fn write_set(&self) {
        let view = self.swap_view.as_ref().map_or(self.image.view, |v| v.view);
        let image = [vk::DescriptorImageInfo::default()
            .image_view(view)
            .image_layout(vk::ImageLayout::GENERAL)];
        let tensor = [vk::DescriptorBufferInfo::default()
            .buffer(self.tensor.buffer)
            .offset(self.tensor.offset)
            .range(self.range)];
        let palette = self.palette.as_ref().map(|p| {
            [vk::DescriptorBufferInfo::default()
                .buffer(p.raw())
                .range(vk::WHOLE_SIZE)]
        });
        let (image_binding, tensor_binding) = match self.direction {
            Direction::ToTensor(_) => (0, 1),
            Direction::ToImage(_) => (1, 0),
        };
        let set = self.kernel.set;
        let mut writes = vec![
            vk::WriteDescriptorSet::default()
                .dst_set(set)
                .dst_binding(image_binding)
                .descriptor_type(vk::DescriptorType::STORAGE_IMAGE)
                .image_info(&image),
            vk::WriteDescriptorSet::default()
                .dst_set(set)
                .dst_binding(tensor_binding)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .buffer_info(&tensor),
        ];
        if let Some(palette) = &palette {
            writes.push(
                vk::WriteDescriptorSet::default()
                    .dst_set(set)
                    .dst_binding(2)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(palette),
            );
        }
        // SAFETY: the set is live and not in use by a pending submission (the callers'
        // contracts); the view and buffers are live (the constructors' contracts).
        unsafe {
            self.kernel
                .device
                .raw()
                .update_descriptor_sets(&writes, &[])
        };
    }

    /// The push constants of the current image.
    fn push_constants(&self) -> [u8; PUSH_BYTES] {
        let vk::Extent2D { width, height } = self.image.extent;
        let swap = FormatClass::of(self.image.format).is_some_and(|(_, s)| s);
        let mut words: Vec<u32> = Vec::with_capacity(PUSH_BYTES / 4);
        let layout = match &self.direction {
            Direction::ToTensor(t) => {
                words.extend(t.scale.iter().chain(&t.mean).map(|v| v.to_bits()));
                t.layout
            }
            Direction::ToImage(t) => {
                words.extend([t.scale.to_bits(), t.bias.to_bits()]);
                t.layout
            }
        };
        let flags = u32::from(layout == TensorLayout::Nhwc) | (u32::from(swap) << 1);
        words.extend([width, height, self.channels, flags]);
        if let Direction::ToImage(t) = &self.direction {
            words.push(t.colour_map.mode());
        }
        let mut bytes = [0u8; PUSH_BYTES];
        for (dst, w) in bytes.chunks_exact_mut(4).zip(words) {
            dst.copy_from_slice(&w.to_ne_bytes());
        }
        bytes
    }

    /// Records the conversion into `cmd`: a barrier after every earlier write of the command
    /// buffer, the dispatch, a barrier before every later access.
    ///
    /// # Safety
    /// `cmd` is a command buffer of the conversion's device in the recording state, outside a
    /// render pass, on a compute-capable queue family; it is submitted only while the
    /// conversion, its image and its tensor are alive, with the image in
    /// `VK_IMAGE_LAYOUT_GENERAL`.
    pub unsafe fn record(&self, cmd: vk::CommandBuffer) {
        let device = &self.kernel.device;
        let d = device.raw();
        let vk::Extent2D { width, height } = self.image.extent;
        let push = self.push_constants();
        let layout = self.kernel.layout;
        // SAFETY: the caller's contract; the pipeline, layout and set are live; the group
        // counts were checked against the device's limits at creation.
        unsafe {
            memory_barrier(device, cmd, Access::ANY_WRITE, Access::SHADER_READ_WRITE);
            d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, self.kernel.pipeline);
            d.cmd_bind_descriptor_sets(
                cmd,
                vk::PipelineBindPoint::COMPUTE,
                layout,
                0,
                &[self.kernel.set],
                &[],
            );
            d.cmd_push_constants(cmd, layout, vk::ShaderStageFlags::COMPUTE, 0, &push);
            d.cmd_dispatch(
                cmd,
                width.div_ceil(LOCAL_SIZE),
                height.div_ceil(LOCAL_SIZE),
                1,
            );
            memory_barrier(device, cmd, Access::SHADER_WRITE, Access::ANY);
        }
    }
}

/// Checks the tensor's buffer range: size, alignment, `maxStorageBufferRange`. Returns the
/// tensor's bytes.
fn check_buffer(
    device: &Device,
    spec: &TensorSpec,
    tensor: &BufferSlice,
) -> Result<u64, ImageProblem> {
    let limits = &device.capabilities().limits;
    let need = spec.bytes().map_or(u64::MAX, |b| b as u64);
    let problem = if tensor.size < need {
        Some(ImageProblem::TooSmall {
            size: tensor.size,
            need,
        })
    } else if tensor.offset % limits.min_storage_buffer_offset_alignment.max(1) != 0 {
        Some(ImageProblem::Misaligned {
            offset: tensor.offset,
            alignment: limits.min_storage_buffer_offset_alignment,
        })
    } else if need > u64::from(limits.max_storage_buffer_range) {
        Some(ImageProblem::Limit {
            what: "the tensor's size in bytes",
            value: need,
            limit: u64::from(limits.max_storage_buffer_range),
        })
    } else {
        None
    };
    match problem {
        Some(p) => Err(p),
        None => Ok(need),
    }
}

/// Checks the dispatch's work-group counts against the device's limits.
fn check_groups(device: &Device, extent: vk::Extent2D) -> Result<(), ImageProblem> {
    let max = device.capabilities().limits.max_compute_work_group_count;
    for (what, texels, limit) in [
        ("the image's width in work groups", extent.width, max[0]),
        ("the image's height in work groups", extent.height, max[1]),
    ] {
        let groups = texels.div_ceil(LOCAL_SIZE);
        if groups > limit {
            return Err(ImageProblem::Limit {
                what,
                value: u64::from(groups),
                limit: u64::from(limit),
            });
        }
    }
    Ok(())
}

/// The palette buffer of a tensor-to-image conversion (one black colour unless
/// [`ColourMap::Classes`]).
fn palette(device: &Device, conv: &TensorToImage) -> Result<Buffer, Error> {
    let colours: &[[f32; 4]] = match &conv.colour_map {
        ColourMap::Classes(p) if !p.is_empty() => p,
        _ => &[[0.0, 0.0, 0.0, 1.0]],
    };
    let bytes: Vec<u8> = colours
        .iter()
        .flatten()
        .flat_map(|v| v.to_ne_bytes())
        .collect();
    let mut buffer = Buffer::new(
        device,
        bytes.len() as u64,
        MemoryLocation::Host,
        vk::BufferUsageFlags::STORAGE_BUFFER,
        "image conversion palette",
    )?;
    buffer.write(0, &bytes)?;
    Ok(buffer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(format: vk::Format, width: u32, height: u32) -> AppImage {
        AppImage::new(
            vk::Image::null(),
            vk::ImageView::null(),
            format,
            vk::Extent2D { width, height },
            vk::ImageUsageFlags::STORAGE,
        )
    }

    fn f32_spec(shape: &[usize]) -> TensorSpec {
        TensorSpec::new("t", DType::F32, shape.to_vec())
    }

    #[test]
    fn image_to_tensor_checks_each_problem_by_name() {
        let rgba8 = image(vk::Format::R8G8B8A8_UNORM, 37, 23);
        let conv = ImageToTensor::default();
        assert_eq!(conv.check(&rgba8, &f32_spec(&[1, 3, 23, 37])), Ok(()));
        let nhwc = ImageToTensor {
            layout: TensorLayout::Nhwc,
            ..conv
        };
        assert_eq!(nhwc.check(&rgba8, &f32_spec(&[1, 23, 37, 4])), Ok(()));
        let half = TensorSpec::new("t", DType::F16, vec![1, 3, 23, 37]);
        assert_eq!(conv.check(&rgba8, &half), Ok(()));
        let e = conv.check(&rgba8, &TensorSpec::new("t", DType::I8, vec![1, 3, 23, 37]));
        assert_eq!(e, Err(ImageProblem::DType { dtype: DType::I8 }));
        for shape in [&[3, 23, 37][..], &[2, 3, 23, 37], &[1, 1, 3, 23, 37]] {
            let e = conv.check(&rgba8, &f32_spec(shape));
            assert!(
                matches!(e, Err(ImageProblem::Shape { .. })),
                "{shape:?}: {e:?}"
            );
        }
        for c in [0, 5] {
            let e = conv.check(&rgba8, &f32_spec(&[1, c, 23, 37]));
            assert!(matches!(e, Err(ImageProblem::Channels { channels, .. }) if channels == c));
        }
        let e = conv.check(&rgba8, &f32_spec(&[1, 3, 37, 23]));
        assert!(
            matches!(
                e,
                Err(ImageProblem::Extent {
                    image_width: 37,
                    ..
                })
            ),
            "{e:?}"
        );
        let no_storage = AppImage {
            usage: vk::ImageUsageFlags::SAMPLED,
            ..rgba8
        };
        let e = conv.check(&no_storage, &f32_spec(&[1, 3, 23, 37]));
        assert!(
            matches!(e, Err(ImageProblem::MissingStorageUsage { .. })),
            "{e:?}"
        );
        let srgb = image(vk::Format::R8G8B8A8_SRGB, 37, 23);
        let e = conv.check(&srgb, &f32_spec(&[1, 3, 23, 37]));
        assert!(
            matches!(e, Err(ImageProblem::UnsupportedFormat { .. })),
            "{e:?}"
        );
        let empty = image(vk::Format::R8G8B8A8_UNORM, 0, 23);
        let e = conv.check(&empty, &f32_spec(&[1, 3, 23, 0]));
        assert!(matches!(e, Err(ImageProblem::EmptyImage { .. })), "{e:?}");
    }

    #[test]
    fn tensor_to_image_checks_channels_per_colour_map_and_the_palette() {
        let img = image(vk::Format::R32G32B32A32_SFLOAT, 5, 4);
        let spec = |c| f32_spec(&[1, c, 4, 5]);
        let channels = TensorToImage::default();
        for c in 1..=4 {
            assert_eq!(channels.check(&img, &spec(c)), Ok(()));
        }
        let e = channels.check(&img, &spec(5));
        assert!(
            matches!(e, Err(ImageProblem::Channels { channels: 5, .. })),
            "{e:?}"
        );
        let heat = TensorToImage {
            colour_map: ColourMap::Heat,
            ..TensorToImage::default()
        };
        assert_eq!(heat.check(&img, &spec(1)), Ok(()));
        let e = heat.check(&img, &spec(3));
        assert!(
            matches!(e, Err(ImageProblem::Channels { channels: 3, .. })),
            "{e:?}"
        );
        let classes = TensorToImage {
            colour_map: ColourMap::Classes(vec![[0.0; 4]; 6]),
            ..TensorToImage::default()
        };
        assert_eq!(classes.check(&img, &spec(6)), Ok(()));
        let e = classes.check(&img, &spec(7));
        let want = ImageProblem::PaletteTooShort {
            colours: 6,
            channels: 7,
        };
        assert_eq!(e, Err(want.clone()));
        assert_eq!(want.to_string(), "the palette has 6 colours for 7 channels");
    }

    #[test]
    fn formats_need_a_kernel_and_the_storage_image_feature() {
        let storage = vk::FormatFeatureFlags::STORAGE_IMAGE;
        for f in FORMATS {
            assert!(format_class(f, storage).is_ok(), "{f:?}");
            let e = format_class(f, vk::FormatFeatureFlags::SAMPLED_IMAGE);
            assert_eq!(e, Err(ImageProblem::NoStorageFeature { format: f }));
        }
        let e = format_class(vk::Format::R8G8B8A8_SRGB, storage);
        assert!(matches!(e, Err(ImageProblem::UnsupportedFormat { .. })));
        assert_eq!(
            FormatClass::of(vk::Format::B8G8R8A8_UNORM),
            Some((FormatClass::Rgba8, true))
        );
    }
}
