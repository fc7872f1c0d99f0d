//! A device loss seen anywhere leaves no submission of that device pending once its owner's
//! wait returns: owners destroy what their work used right after that wait (a VGF model's
//! drop does), so the wait that reports the loss must first wait for the work itself.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use vk_core::testing::{self, assert_no_validation_errors};
use vk_core::{Buffer, Error, FaultPoint, MemoryLocation, Requirements, Submission, vk};

fn filled(device: &vk_core::Device, buffer: &Buffer, what: &str) -> Submission {
    let mut s = Submission::new(device, 1, what).unwrap();
    let cmd = s.begin(0).unwrap();
    // SAFETY: recording into the submission's command buffer; the buffer outlives its use
    // (each test waits before dropping it).
    unsafe {
        device
            .raw()
            .cmd_fill_buffer(cmd, buffer.raw(), 0, vk::WHOLE_SIZE, 9)
    };
    s.end(0).unwrap();
    s
}

#[test]
fn a_loss_reported_by_a_wait_leaves_nothing_pending() {
    let test = "a_loss_reported_by_a_wait_leaves_nothing_pending";
    let Some((instance, device)) = testing::device(test, &Requirements::new("loss test")) else {
        return;
    };
    let usage = vk::BufferUsageFlags::TRANSFER_DST;
    let a = Buffer::new(&device, 1 << 20, MemoryLocation::Device, usage, "a").unwrap();
    let b = Buffer::new(&device, 1 << 20, MemoryLocation::Device, usage, "b").unwrap();
    let mut first = filled(&device, &a, "first");
    let mut second = filled(&device, &b, "second");
    // SAFETY: executable command buffers, no semaphores.
    unsafe {
        first.submit(0, &[], &[]).unwrap();
        second.submit(0, &[], &[]).unwrap();
    }
    // The loss is seen by the first submission's wait; the work of both may still run.
    device.inject_fault(FaultPoint::Wait, vk::Result::ERROR_DEVICE_LOST);
    let e = first.wait().unwrap_err();
    assert!(matches!(e, Error::DeviceLost { .. }), "{e}");
    assert!(
        !first.is_pending(),
        "the wait that saw the loss waited for the work"
    );
    // The second learns of the loss from the device; its wait still waits for its own work.
    assert!(second.is_pending());
    let e = second.wait().unwrap_err();
    assert!(matches!(e, Error::DeviceLost { .. }), "{e}");
    assert!(!second.is_pending());
    // What the work used can go now, before the submissions.
    drop((a, b));
    drop((first, second));
    drop(device);
    assert_no_validation_errors(&instance);
}
