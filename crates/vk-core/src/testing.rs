//! Support for GPU tests in this workspace (and in crates that vendor it). Behind the feature
//! `testing` (a test enables it through its dev-dependency on `vk-core`).
//!
//! GPU tests run on whatever device is selected (lavapipe in CI) with the Khronos validation
//! layer on. A test that cannot run (no loader, no device, no validation layer, no ARM
//! extensions) prints a `SKIPPED` line on stderr and returns; with `VKDELEGATE_REQUIRE_GPU=1`
//! (set by `cargo xtask ci`) it fails instead, so CI never counts a test that did not run.
//!
//! The functions here panic on purpose: they are for tests.

use ash::vk;

use crate::device::device::Device;
use crate::device::instance::{Instance, InstanceDesc};
use crate::device::requirements::Requirements;
use crate::gpu::barrier::{Access, host_read_barrier};
use crate::gpu::command::Submission;
use crate::gpu::memory::{Buffer, MemoryBlock, MemoryLocation};
use crate::io::image_io::AppImage;

/// Environment variable that turns skips into failures.
pub const ENV_REQUIRE_GPU: &str = "VKDELEGATE_REQUIRE_GPU";

/// Whether skips are failures (`VKDELEGATE_REQUIRE_GPU=1`).
pub fn skips_are_failures() -> bool {
    std::env::var(ENV_REQUIRE_GPU).is_ok_and(|v| v == "1" || v == "true")
}

/// Makes every instance this process creates from [`InstanceDesc::default`] ask for the
/// validation layer, as if `VKDELEGATE_VALIDATION=1` were set: for tests whose instances are
/// created inside the code under test (shared contexts, programs). [`instance`] and [`device`]
/// call it, so a test binary run on its own validates as it does under `cargo xtask ci`.
pub fn validate_every_instance() {
    crate::device::instance::validate_every_instance();
}

/// Reports a test that cannot run: a visible `SKIPPED` line, or a panic when skips are
/// failures.
///
/// # Panics
/// When `VKDELEGATE_REQUIRE_GPU=1`.
pub fn skip(test: &str, reason: &str) {
    if skips_are_failures() {
        panic!("{test}: cannot run and {ENV_REQUIRE_GPU}=1: {reason}");
    }
    eprintln!("SKIPPED {test}: {reason}");
}

/// An instance with validation on, or `None` after [`skip`].
pub fn instance(test: &str) -> Option<Instance> {
    validate_every_instance();
    let desc = InstanceDesc {
        validation: true,
        ..InstanceDesc::default()
    };
    match Instance::new(&desc) {
        Ok(i) => Some(i),
        Err(e) => {
            skip(test, &e.to_string());
            None
        }
    }
}

/// An instance with validation on and a device on the selected adapter meeting `requirements`,
/// or `None` after [`skip`].
pub fn device(test: &str, requirements: &Requirements) -> Option<(Instance, Device)> {
    let instance = instance(test)?;
    let adapter = match instance.select_adapter() {
        Ok(a) => a,
        Err(e) => {
            skip(test, &e.to_string());
            return None;
        }
    };
    match adapter.create_device(requirements) {
        Ok(d) => Some((instance, d)),
        Err(e) => {
            skip(test, &e.to_string());
            None
        }
    }
}

/// As [`device`], with the device's allocator treating every memory heap as at most
/// `heap_limit` bytes: allocations beyond it fail with [`crate::Error::Allocation`] (out of
/// device memory) before reaching the driver. For tests of memory exhaustion that must not
/// exhaust the host, whose RAM is the heap of CPU drivers.
///
/// # Panics
/// When the allocator cannot be made.
pub fn device_with_heap_limit(
    test: &str,
    requirements: &Requirements,
    heap_limit: u64,
) -> Option<(Instance, Device)> {
    let (instance, device) = device(test, requirements)?;
    if let Err(e) = device.limit_heaps(heap_limit) {
        panic!("{test}: limiting the heaps to {heap_limit} bytes: {e}");
    }
    Some((instance, device))
}

/// What [`scan_allocations`] saw.
#[derive(Debug)]
pub struct AllocationScan<T> {
    /// What each failed attempt was allocating (the `what` of its [`crate::Error::Allocation`]),
    /// in the order of the allocations that were made to fail.
    pub failed: Vec<String>,
    /// What the attempts that succeeded returned: those that recovered from the failed
    /// allocation (a fall-back path), then the last one, which ran with no failure.
    pub done: Vec<T>,
}

/// Fails each allocation of `attempt` in turn: runs it with the first allocation failing
/// ([`Device::fail_allocation`]), then the second, and so on, until an attempt makes fewer
/// allocations than the one set to fail. Works alike on devices with one memory heap or
/// several.
///
/// # Panics
/// When an attempt fails with anything but an out-of-memory [`crate::Error::Allocation`]
/// naming what it allocated (`core` finds vk-core's error inside the caller's), or when
/// `max` attempts do not finish the scan.
pub fn scan_allocations<T, E: std::fmt::Debug>(
    device: &Device,
    max: u64,
    mut attempt: impl FnMut() -> Result<T, E>,
    core: impl Fn(&E) -> Option<&crate::error::Error>,
) -> AllocationScan<T> {
    let mut scan = AllocationScan {
        failed: Vec::new(),
        done: Vec::new(),
    };
    for n in 0..max {
        device.fail_allocation(n);
        let result = attempt();
        let unfired = device.clear_allocation_fault();
        match result {
            Ok(done) => {
                scan.done.push(done);
                if unfired {
                    return scan;
                }
            }
            Err(e) => match core(&e) {
                Some(crate::error::Error::Allocation { what, result, .. }) => {
                    assert!(!unfired, "allocation {n} failed on its own: {e:?}");
                    assert_eq!(*result, vk::Result::ERROR_OUT_OF_DEVICE_MEMORY, "{e:?}");
                    assert!(!what.trim().is_empty(), "an allocation error names nothing");
                    scan.failed.push(what.clone());
                }
                _ => panic!("allocation {n} made to fail: expected an allocation error, got {e:?}"),
            },
        }
    }
    panic!("{max} attempts did not get past every allocation");
}

/// The repository's root folder, for tests that read its files (`fixtures/`): two folders
/// above the `CARGO_MANIFEST_DIR` of the running test (`cargo test` sets it for the binary;
/// so does the runner of `cargo xtask gpu-archive`), else above vk-core's own at build time.
pub fn repo_root() -> std::path::PathBuf {
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into());
    manifest.join("../..")
}

/// A file of the repository's `fixtures/` folder ([`repo_root`]).
pub fn fixture(path: &str) -> std::path::PathBuf {
    repo_root().join("fixtures").join(path)
}

/// The executable of a binary target, for tests that start it: `CARGO_BIN_EXE_<name>` at run
/// time where set (the runner of `cargo xtask gpu-archive` sets it), else `built`, the path
/// Cargo gave at build time (`env!("CARGO_BIN_EXE_<name>")`).
pub fn bin_exe(name: &str, built: &str) -> std::path::PathBuf {
    std::env::var_os(format!("CARGO_BIN_EXE_{name}"))
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| built.into())
}

/// Asserts that the instance saw no validation error, printing the first ones if it did.
///
/// # Panics
/// When there were validation errors.
///
/// One class of message is excused: a validation layer older than the cooperative-matrix
/// extensions (such as Debian 12's 1.3.239) cannot parse SPIR-V that uses them and reports the
/// module as invalid. Those messages ([`is_outdated_layer_message`]) are excused, with a note,
/// only when the installed layer predates the extension each one names.
pub fn assert_no_validation_errors(instance: &Instance) {
    let log = instance.validation();
    let n = log.error_count();
    let kept = log.first_errors();
    let spec = validation_layer_spec_version();
    let excused = kept
        .iter()
        .filter(|m| spec.is_some_and(|v| is_outdated_layer_message(m, v)))
        .count();
    // A failed specialization (06719) is excused only beside the message that caused it.
    let causes = kept
        .iter()
        .filter(|m| !m.contains(SPECIALIZATION_VUID))
        .count();
    if n > 0 && excused == kept.len() && n as usize == kept.len() && causes > 0 {
        eprintln!(
            "note: {n} validation error(s) excused: the validation layer predates the \
             cooperative-matrix extensions it was given"
        );
        return;
    }
    assert!(n == 0, "{n} validation error(s):\n{}", kept.join("\n---\n"));
}

/// The first validation layer (by header version) that knows `VK_KHR_cooperative_matrix`.
const KHR_COOPERATIVE_MATRIX_LAYER: u32 = vk::make_api_version(0, 1, 3, 255);
/// A validation layer from headers this new knows `VK_NV_cooperative_matrix2`.
const NV_COOPERATIVE_MATRIX2_LAYER: u32 = vk::make_api_version(0, 1, 4, 303);

/// What an outdated layer says about the cooperative-matrix kernels, with the first layer
/// version that no longer says it: their SPIR-V extensions, capabilities (decimal operands, as
/// the layer prints them), the extensions' feature structures in `VkDeviceCreateInfo`'s chain,
/// and capabilities the layer has no name for.
const OUTDATED_LAYER_MESSAGES: &[(&str, u32)] = &[
    ("SPV_KHR_cooperative_matrix", KHR_COOPERATIVE_MATRIX_LAYER),
    ("capability operand: 6022", KHR_COOPERATIVE_MATRIX_LAYER),
    ("VkStructureType (1000506000)", KHR_COOPERATIVE_MATRIX_LAYER),
    ("SPV_NV_cooperative_matrix2", NV_COOPERATIVE_MATRIX2_LAYER),
    ("SPV_NV_tensor_addressing", NV_COOPERATIVE_MATRIX2_LAYER),
    ("capability operand: 5430", NV_COOPERATIVE_MATRIX2_LAYER),
    ("capability operand: 5431", NV_COOPERATIVE_MATRIX2_LAYER),
    ("capability operand: 5432", NV_COOPERATIVE_MATRIX2_LAYER),
    ("capability operand: 5433", NV_COOPERATIVE_MATRIX2_LAYER),
    ("capability operand: 5439", NV_COOPERATIVE_MATRIX2_LAYER),
    ("VkStructureType (1000593000)", NV_COOPERATIVE_MATRIX2_LAYER),
    ("(Unhandled OpCapability)", NV_COOPERATIVE_MATRIX2_LAYER),
    (SPECIALIZATION_VUID, NV_COOPERATIVE_MATRIX2_LAYER),
];

/// The layer failing to specialize a module it could not parse.
const SPECIALIZATION_VUID: &str = "VUID-VkPipelineShaderStageCreateInfo-pSpecializationInfo-06719";

/// Whether a validation message is one a layer of spec version `layer` gives only because it
/// predates a cooperative-matrix extension (see [`assert_no_validation_errors`]).
pub fn is_outdated_layer_message(message: &str, layer: u32) -> bool {
    OUTDATED_LAYER_MESSAGES
        .iter()
        .any(|(text, fixed_in)| layer < *fixed_in && message.contains(text))
}

/// The spec version of the installed Khronos validation layer, if there is one.
pub fn validation_layer_spec_version() -> Option<u32> {
    static SPEC: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    *SPEC.get_or_init(|| {
        // SAFETY: loading the system's Vulkan loader, as every instance here does.
        let entry = unsafe { ash::Entry::load() }.ok()?;
        // SAFETY: plain query on a loaded entry.
        let layers = unsafe { entry.enumerate_instance_layer_properties() }.ok()?;
        layers
            .iter()
            .find(|l| {
                l.layer_name_as_c_str()
                    .is_ok_and(|n| n == c"VK_LAYER_KHRONOS_validation")
            })
            .map(|l| l.spec_version)
    })
}

/// Validation messages that Arm's emulation layer (0.11.0) causes with its own objects: the
/// Graph layer runs TOSA operators as compute shaders whose push-constant blocks the
/// validation layer (below the emulation layers, where it sees what reaches the driver) finds
/// larger than their pipeline layouts declare. Only excused on instances with the emulation
/// layers enabled.
pub const EMULATION_LAYER_VUIDS: &[&str] = &["VUID-VkComputePipelineCreateInfo-layout-00703"];

/// As [`assert_no_validation_errors`], but excuses [`EMULATION_LAYER_VUIDS`] when the
/// instance uses the emulation layers (printing how many were excused). Every error must have
/// been kept (at most 4096) to be judged; otherwise the assertion fails.
///
/// # Panics
/// When there were other validation errors.
pub fn assert_no_validation_errors_of_ours(instance: &Instance) {
    let log = instance.validation();
    let kept = log.first_errors();
    let spec = validation_layer_spec_version();
    let excused = |m: &String| {
        (instance.emulation_enabled() && EMULATION_LAYER_VUIDS.iter().any(|v| m.contains(v)))
            || spec.is_some_and(|v| is_outdated_layer_message(m, v))
    };
    let ours: Vec<&String> = kept.iter().filter(|m| !excused(m)).collect();
    let n = log.error_count();
    assert!(
        ours.is_empty() && n as usize == kept.len(),
        "{n} validation error(s), {} not excused:\n{}",
        ours.len(),
        ours.iter()
            .map(|m| m.as_str())
            .collect::<Vec<_>>()
            .join("\n---\n")
    );
    if !kept.is_empty() {
        eprintln!(
            "note: {} validation error(s) excused as the emulation layer's own ({:?}) or an \
             outdated layer's",
            kept.len(),
            EMULATION_LAYER_VUIDS
        );
    }
}

/// A 2D image of a test's, in `VK_IMAGE_LAYOUT_GENERAL` from creation, with a view, memory of
/// the device's allocator, and host upload and read-back of its texels (one submission and
/// fence wait each, ending with a barrier before every later command on the queue).
#[derive(Debug)]
pub struct TestImage {
    device: Device,
    /// The image.
    pub image: vk::Image,
    /// A 2D colour view of it.
    pub view: vk::ImageView,
    /// Its format.
    pub format: vk::Format,
    /// Its extent.
    pub extent: vk::Extent2D,
    /// The usage it was created with.
    pub usage: vk::ImageUsageFlags,
    _memory: MemoryBlock,
}

impl TestImage {
    /// An image of `format` and `width` x `height`, with `usage` plus `TRANSFER_SRC` and
    /// `TRANSFER_DST` (mutable-format, as image conversions need, for `B8G8R8A8_UNORM`).
    ///
    /// # Panics
    /// When Vulkan fails.
    pub fn new(
        device: &Device,
        format: vk::Format,
        width: u32,
        height: u32,
        usage: vk::ImageUsageFlags,
    ) -> TestImage {
        let usage = usage | vk::ImageUsageFlags::TRANSFER_SRC | vk::ImageUsageFlags::TRANSFER_DST;
        let extent = vk::Extent2D { width, height };
        let d = device.raw();
        let flags = if format == vk::Format::B8G8R8A8_UNORM {
            vk::ImageCreateFlags::MUTABLE_FORMAT
        } else {
            vk::ImageCreateFlags::empty()
        };
        let info = vk::ImageCreateInfo::default()
            .flags(flags)
            .image_type(vk::ImageType::TYPE_2D)
            .format(format)
            .extent(extent.into())
            .mip_levels(1)
            .array_layers(1)
            .samples(vk::SampleCountFlags::TYPE_1)
            .tiling(vk::ImageTiling::OPTIMAL)
            .usage(usage)
            .initial_layout(vk::ImageLayout::UNDEFINED);
        // SAFETY: valid create info; destroyed in `Drop`.
        let image = unsafe { d.create_image(&info, None) }.expect("vkCreateImage");
        // SAFETY: `image` is live.
        let req = unsafe { d.get_image_memory_requirements(image) };
        let memory = MemoryBlock::new(device, &req, MemoryLocation::Device, "test image")
            .expect("test image memory");
        // SAFETY: the memory fits the image's requirements and is bound once.
        unsafe { d.bind_image_memory(image, memory.memory(), memory.offset()) }
            .expect("vkBindImageMemory");
        let view_info = vk::ImageViewCreateInfo::default()
            .image(image)
            .view_type(vk::ImageViewType::TYPE_2D)
            .format(format)
            .subresource_range(COLOUR);
        // SAFETY: valid create info of a live image; destroyed in `Drop`.
        let view = unsafe { d.create_image_view(&view_info, None) }.expect("vkCreateImageView");
        let t = TestImage {
            device: device.clone(),
            image,
            view,
            format,
            extent,
            usage,
            _memory: memory,
        };
        t.submit_once(|cmd| {
            let barrier = [vk::ImageMemoryBarrier::default()
                .old_layout(vk::ImageLayout::UNDEFINED)
                .new_layout(vk::ImageLayout::GENERAL)
                .dst_access_mask(vk::AccessFlags::MEMORY_READ | vk::AccessFlags::MEMORY_WRITE)
                .src_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
                .dst_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
                .image(image)
                .subresource_range(COLOUR)];
            // SAFETY: recording; the image is live.
            unsafe {
                d.cmd_pipeline_barrier(
                    cmd,
                    vk::PipelineStageFlags::TOP_OF_PIPE,
                    vk::PipelineStageFlags::ALL_COMMANDS,
                    vk::DependencyFlags::empty(),
                    &[],
                    &[],
                    &barrier,
                )
            };
        });
        t
    }

    /// The image as an application's image binding.
    pub fn app(&self) -> AppImage {
        AppImage::new(self.image, self.view, self.format, self.extent, self.usage)
    }

    /// Bytes of all texels.
    pub fn bytes(&self) -> u64 {
        let texel = match self.format {
            vk::Format::R16G16B16A16_SFLOAT => 8,
            vk::Format::R32G32B32A32_SFLOAT => 16,
            _ => 4,
        };
        u64::from(self.extent.width) * u64::from(self.extent.height) * texel
    }

    /// Uploads `texels` (row-major, tightly packed, in the image's format).
    ///
    /// # Panics
    /// When `texels` is not [`TestImage::bytes`] long, or Vulkan fails.
    pub fn write(&self, texels: &[u8]) {
        assert_eq!(texels.len() as u64, self.bytes(), "texel bytes");
        let usage = vk::BufferUsageFlags::TRANSFER_SRC;
        let mut staging = Buffer::new(
            &self.device,
            self.bytes(),
            MemoryLocation::Host,
            usage,
            "up",
        )
        .expect("staging");
        staging.write(0, texels).expect("staging write");
        self.submit_once(|cmd| {
            let region = [self.region()];
            let dst = vk::ImageLayout::TRANSFER_DST_OPTIMAL;
            // SAFETY: recording; image and staging are live until the fence wait; the image
            // is in GENERAL between submissions.
            unsafe {
                self.transition(cmd, vk::ImageLayout::GENERAL, dst, Access::ANY);
                self.device.raw().cmd_copy_buffer_to_image(
                    cmd,
                    staging.raw(),
                    self.image,
                    dst,
                    &region,
                );
                self.transition(cmd, dst, vk::ImageLayout::GENERAL, Access::TRANSFER_WRITE);
            }
        });
    }

    /// Reads every texel back (row-major, tightly packed).
    ///
    /// # Panics
    /// When Vulkan fails.
    pub fn read(&self) -> Vec<u8> {
        let usage = vk::BufferUsageFlags::TRANSFER_DST;
        let staging = Buffer::new(
            &self.device,
            self.bytes(),
            MemoryLocation::Host,
            usage,
            "down",
        )
        .expect("staging");
        self.submit_once(|cmd| {
            let region = [self.region()];
            let src = vk::ImageLayout::TRANSFER_SRC_OPTIMAL;
            // SAFETY: recording; image and staging are live until the fence wait; the image
            // is in GENERAL between submissions.
            unsafe {
                self.transition(cmd, vk::ImageLayout::GENERAL, src, Access::ANY);
                self.device.raw().cmd_copy_image_to_buffer(
                    cmd,
                    self.image,
                    src,
                    staging.raw(),
                    &region,
                );
                self.transition(cmd, src, vk::ImageLayout::GENERAL, Access::ANY);
                host_read_barrier(&self.device, cmd);
            }
        });
        let mut out = vec![0u8; self.bytes() as usize];
        staging.read(0, &mut out).expect("staging read");
        out
    }

    /// Records a layout transition after `from`'s accesses and before any later access.
    ///
    /// # Safety
    /// `cmd` is recording, outside a render pass; the image is in layout `old`.
    unsafe fn transition(
        &self,
        cmd: vk::CommandBuffer,
        old: vk::ImageLayout,
        new: vk::ImageLayout,
        from: Access,
    ) {
        let to = Access::ANY;
        let barrier = [vk::ImageMemoryBarrier::default()
            .old_layout(old)
            .new_layout(new)
            .src_access_mask(from.access)
            .dst_access_mask(to.access)
            .src_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
            .dst_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
            .image(self.image)
            .subresource_range(COLOUR)];
        // SAFETY: the caller's contract; the image is live.
        unsafe {
            self.device.raw().cmd_pipeline_barrier(
                cmd,
                from.stage,
                to.stage,
                vk::DependencyFlags::empty(),
                &[],
                &[],
                &barrier,
            )
        };
    }

    fn region(&self) -> vk::BufferImageCopy {
        vk::BufferImageCopy::default()
            .image_subresource(vk::ImageSubresourceLayers {
                aspect_mask: vk::ImageAspectFlags::COLOR,
                mip_level: 0,
                base_array_layer: 0,
                layer_count: 1,
            })
            .image_extent(self.extent.into())
    }

    fn submit_once(&self, record: impl FnOnce(vk::CommandBuffer)) {
        let mut s = Submission::new(&self.device, 1, "test image").expect("submission");
        let cmd = s.begin(0).expect("begin");
        record(cmd);
        s.end(0).expect("end");
        // SAFETY: the command buffer is executable; what it uses lives until the wait.
        unsafe { s.submit(0, &[], &[]) }.expect("submit");
        s.wait().expect("wait");
    }
}

impl Drop for TestImage {
    fn drop(&mut self) {
        let d = self.device.raw();
        // SAFETY: created in `new`, destroyed once; the test waits for its work first.
        unsafe {
            d.destroy_image_view(self.view, None);
            d.destroy_image(self.image, None);
        }
    }
}

const COLOUR: vk::ImageSubresourceRange = vk::ImageSubresourceRange {
    aspect_mask: vk::ImageAspectFlags::COLOR,
    base_mip_level: 0,
    level_count: 1,
    base_array_layer: 0,
    layer_count: 1,
};

/// An f32 as IEEE half-precision bits (round to nearest even; for test texels).
pub fn f16_bits(v: f32) -> u16 {
    half::f16::from_f32(v).to_bits()
}

/// IEEE half-precision bits as an f32.
pub fn f16_value(h: u16) -> f32 {
    half::f16::from_bits(h).to_f32()
}

#[cfg(test)]
mod outdated_layer_tests {
    use super::*;

    #[test]
    fn each_message_is_excused_only_by_layers_older_than_its_extension() {
        let debian = vk::make_api_version(0, 1, 3, 239);
        let noble = vk::make_api_version(0, 1, 3, 275);
        let recent = vk::make_api_version(0, 1, 4, 310);
        let khr = "A SPIR-V Extension (SPV_KHR_cooperative_matrix) was declared";
        let nv = "A SPIR-V Extension (SPV_NV_cooperative_matrix2) was declared";
        assert!(is_outdated_layer_message(khr, debian));
        assert!(!is_outdated_layer_message(khr, noble));
        assert!(is_outdated_layer_message(nv, noble));
        assert!(!is_outdated_layer_message(nv, recent));
        assert!(!is_outdated_layer_message(
            "VUID-vkCmdDispatch-None-08600: a real error",
            debian
        ));
    }
}
