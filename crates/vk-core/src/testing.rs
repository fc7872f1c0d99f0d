//! Support for GPU tests in this workspace (and in crates that vendor it).
//!
//! GPU tests run on whatever device is selected (lavapipe in CI) with the Khronos validation
//! layer on. A test that cannot run (no loader, no device, no validation layer, no ARM
//! extensions) prints a `SKIPPED` line on stderr and returns; with `VKDELEGATE_REQUIRE_GPU=1`
//! (set by `cargo xtask ci`) it fails instead, so CI never counts a test that did not run.
//!
//! The functions here panic on purpose: they are for tests.

use crate::device::Device;
use crate::instance::{Instance, InstanceDesc};
use crate::requirements::Requirements;

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
    crate::instance::validate_every_instance();
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

/// Asserts that the instance saw no validation error, printing the first ones if it did.
///
/// # Panics
/// When there were validation errors.
pub fn assert_no_validation_errors(instance: &Instance) {
    let log = instance.validation();
    let n = log.error_count();
    assert!(
        n == 0,
        "{n} validation error(s):\n{}",
        log.first_errors().join("\n---\n")
    );
}

/// Validation messages that Arm's emulation layer (0.11.0) causes with its own objects: the
/// Graph layer runs TOSA operators as compute shaders whose push-constant blocks the
/// validation layer (below the emulation layers, where it sees what reaches the driver) finds
/// larger than their pipeline layouts declare. Only excused on instances with the emulation
/// layers enabled.
pub const EMULATION_LAYER_VUIDS: &[&str] = &["VUID-VkComputePipelineCreateInfo-layout-00703"];

/// As [`assert_no_validation_errors`], but excuses [`EMULATION_LAYER_VUIDS`] when the
/// instance uses the emulation layers (printing how many were excused). Every error must have
/// been kept (at most 32) to be judged; otherwise the assertion fails.
///
/// # Panics
/// When there were other validation errors.
pub fn assert_no_validation_errors_of_ours(instance: &Instance) {
    let log = instance.validation();
    let kept = log.first_errors();
    let excused = |m: &String| {
        instance.emulation_enabled() && EMULATION_LAYER_VUIDS.iter().any(|v| m.contains(v))
    };
    let ours = kept.iter().filter(|m| !excused(m)).count();
    if ours > 0 || log.error_count() as usize > kept.len() {
        assert_no_validation_errors(instance);
    }
    if !kept.is_empty() {
        eprintln!(
            "note: {} validation error(s) excused as the emulation layer's own ({:?})",
            kept.len(),
            EMULATION_LAYER_VUIDS
        );
    }
}
