//! GPU tests of the plumbing every delegate uses: submissions (pending state, semaphores,
//! faults), memory from the device's one allocator, timestamps. Validation is on; every test
//! ends by asserting zero validation errors.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use std::time::Duration;

use vk_core::barrier::{Access, host_read_barrier, memory_barrier};
use vk_core::testing::{self, assert_no_validation_errors};
use vk_core::{
    Buffer, Error, FaultPoint, MemoryBlock, MemoryLocation, Requirements, SemaphoreSignal,
    SemaphoreWait, Submission, Timestamps, WaitPolicy, vk,
};

fn device(test: &str) -> Option<(vk_core::Instance, vk_core::Device)> {
    testing::device(test, &Requirements::new("vk-core plumbing test"))
}

const USAGE: vk::BufferUsageFlags = vk::BufferUsageFlags::from_raw(
    vk::BufferUsageFlags::TRANSFER_SRC.as_raw() | vk::BufferUsageFlags::TRANSFER_DST.as_raw(),
);

/// Records `fill(device buffer) -> copy to host buffer -> host barrier` into command buffer 0.
fn record_fill_and_read_back(s: &mut Submission, device: &Buffer, host: &Buffer, value: u32) {
    let cmd = s.begin(0).unwrap();
    let d = s.device().clone();
    let region = [vk::BufferCopy::default().size(host.size())];
    // SAFETY: recording into the submission's own command buffer; both buffers are live and
    // outlive every submission of it (the tests drop the submission first).
    unsafe {
        d.raw()
            .cmd_fill_buffer(cmd, device.raw(), 0, vk::WHOLE_SIZE, value);
        memory_barrier(&d, cmd, Access::TRANSFER_WRITE, Access::TRANSFER_READ);
        d.raw()
            .cmd_copy_buffer(cmd, device.raw(), host.raw(), &region);
        host_read_barrier(&d, cmd);
    }
    s.end(0).unwrap();
}

fn read_u32s(b: &Buffer) -> Vec<u32> {
    let mut raw = vec![0u8; b.size() as usize];
    b.read(0, &mut raw).unwrap();
    raw.chunks_exact(4)
        .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn a_submission_runs_replays_and_reports_pending_state() {
    let Some((instance, device)) = device("a_submission_runs_replays") else {
        return;
    };
    let on_device = Buffer::new(&device, 1024, MemoryLocation::Device, USAGE, "fill").unwrap();
    let host = Buffer::new(&device, 1024, MemoryLocation::Host, USAGE, "read-back").unwrap();
    assert!(host.is_mapped());
    let mut s = Submission::new(&device, 1, "plumbing test").unwrap();
    record_fill_and_read_back(&mut s, &on_device, &host, 0xA5A5_0001);
    for _ in 0..3 {
        // SAFETY: the command buffer is executable; no semaphores.
        unsafe { s.submit(0, &[], &[]) }.unwrap();
        assert!(s.is_pending());
        s.wait().unwrap();
        assert!(!s.is_pending());
        assert!(read_u32s(&host).iter().all(|&v| v == 0xA5A5_0001));
    }
    drop(s);
    assert_no_validation_errors(&instance);
}

#[test]
fn submissions_chain_by_semaphore_without_host_waits() {
    let Some((instance, device)) = device("submissions_chain_by_semaphore") else {
        return;
    };
    let d = device.raw();
    // SAFETY: valid create info; destroyed at the end once both submissions finished.
    let sem = unsafe { d.create_semaphore(&vk::SemaphoreCreateInfo::default(), None) }.unwrap();
    let on_device = Buffer::new(&device, 256, MemoryLocation::Device, USAGE, "a").unwrap();
    let host = Buffer::new(&device, 256, MemoryLocation::Host, USAGE, "b").unwrap();
    let mut first = Submission::new(&device, 1, "producer").unwrap();
    let cmd = first.begin(0).unwrap();
    // SAFETY: recording into the producer's command buffer; the buffer outlives it.
    unsafe { d.cmd_fill_buffer(cmd, on_device.raw(), 0, vk::WHOLE_SIZE, 7) };
    first.end(0).unwrap();
    let mut second = Submission::new(&device, 1, "consumer").unwrap();
    let cmd = second.begin(0).unwrap();
    let region = [vk::BufferCopy::default().size(256)];
    // SAFETY: as above.
    unsafe {
        d.cmd_copy_buffer(cmd, on_device.raw(), host.raw(), &region);
        host_read_barrier(&device, cmd);
    }
    second.end(0).unwrap();
    // SAFETY: the semaphore is unsignaled; the producer signals it and the consumer waits.
    unsafe {
        first
            .submit(0, &[], &[SemaphoreSignal::binary(sem)])
            .unwrap();
        second
            .submit(
                0,
                &[SemaphoreWait::binary(sem, vk::PipelineStageFlags::TRANSFER)],
                &[],
            )
            .unwrap();
    }
    second.wait().unwrap();
    first.wait().unwrap();
    assert!(read_u32s(&host).iter().all(|&v| v == 7));
    drop((first, second));
    // SAFETY: both submissions finished; the semaphore is no longer in use.
    unsafe { d.destroy_semaphore(sem, None) };
    assert_no_validation_errors(&instance);
}

#[test]
fn an_injected_device_loss_fails_every_later_call_and_tears_down() {
    let Some((instance, device)) = device("an_injected_device_loss") else {
        return;
    };
    let on_device = Buffer::new(&device, 256, MemoryLocation::Device, USAGE, "a").unwrap();
    let host = Buffer::new(&device, 256, MemoryLocation::Host, USAGE, "b").unwrap();
    let mut s = Submission::new(&device, 1, "model A").unwrap();
    record_fill_and_read_back(&mut s, &on_device, &host, 1);
    let mut other = Submission::new(&device, 1, "model B").unwrap();
    record_fill_and_read_back(&mut other, &on_device, &host, 2);
    device.inject_fault(FaultPoint::Wait, vk::Result::ERROR_DEVICE_LOST);
    // SAFETY: executable command buffer, no semaphores.
    unsafe { s.submit(0, &[], &[]) }.unwrap();
    let e = s.wait().unwrap_err();
    assert!(matches!(e, Error::DeviceLost { .. }), "{e}");
    assert!(e.to_string().contains("vkWaitForFences"), "{e}");
    assert!(device.lost().is_some());
    // Every later call on that device fails clearly, in this submission and in others.
    // SAFETY: as above.
    let again = unsafe { s.submit(0, &[], &[]) }.unwrap_err();
    assert!(matches!(again, Error::DeviceLost { .. }), "{again}");
    // SAFETY: as above.
    let theirs = unsafe { other.submit(0, &[], &[]) }.unwrap_err();
    assert!(theirs.to_string().contains("was lost"), "{theirs}");
    drop((s, other));
    drop((on_device, host));
    drop(device);
    assert_no_validation_errors(&instance);
}

#[test]
fn a_wait_that_times_out_is_an_error_and_the_next_call_works() {
    let Some((instance, device)) = device("a_wait_that_times_out") else {
        return;
    };
    let on_device = Buffer::new(&device, 256, MemoryLocation::Device, USAGE, "a").unwrap();
    let host = Buffer::new(&device, 256, MemoryLocation::Host, USAGE, "b").unwrap();
    let mut s = Submission::new(&device, 1, "timed model").unwrap();
    s.set_policy(WaitPolicy {
        timeout: Duration::from_secs(30),
        ..WaitPolicy::default()
    });
    record_fill_and_read_back(&mut s, &on_device, &host, 3);
    device.inject_fault(FaultPoint::Wait, vk::Result::TIMEOUT);
    // SAFETY: executable command buffer, no semaphores.
    unsafe { s.submit(0, &[], &[]) }.unwrap();
    let e = s.wait().unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    assert!(s.is_pending(), "a timed-out submission stays pending");
    // The next submit first waits for the pending work, then runs.
    // SAFETY: as above.
    unsafe { s.submit(0, &[], &[]) }.unwrap();
    s.wait().unwrap();
    assert!(read_u32s(&host).iter().all(|&v| v == 3));
    // A failed submit (out of memory) is an error; the next one works.
    device.inject_fault(FaultPoint::Submit, vk::Result::ERROR_OUT_OF_DEVICE_MEMORY);
    // SAFETY: as above.
    let e = unsafe { s.submit(0, &[], &[]) }.unwrap_err();
    assert!(e.to_string().contains("vkQueueSubmit"), "{e}");
    assert!(!s.is_pending());
    // SAFETY: as above.
    unsafe { s.submit(0, &[], &[]) }.unwrap();
    s.wait().unwrap();
    drop(s);
    assert_no_validation_errors(&instance);
}

#[test]
fn allocations_beyond_the_heaps_fail_by_name_and_leave_the_device_working() {
    let Some((instance, device)) = device("allocations_beyond_the_heaps") else {
        return;
    };
    let largest: u64 = device
        .capabilities()
        .memory
        .heaps
        .iter()
        .map(|h| h.size)
        .max()
        .unwrap();
    let e = Buffer::new(
        &device,
        largest.saturating_mul(4),
        MemoryLocation::Device,
        USAGE,
        "an impossible tensor",
    )
    .unwrap_err();
    assert!(matches!(e, Error::Allocation { .. }), "{e}");
    assert!(e.to_string().contains("an impossible tensor"), "{e}");
    let block = MemoryBlock::new(
        &device,
        &vk::MemoryRequirements {
            size: largest.saturating_mul(4),
            alignment: 256,
            memory_type_bits: u32::MAX,
        },
        MemoryLocation::Device,
        "an impossible block",
    );
    assert!(block.is_err());
    // The device still works.
    let report = vk_core::selftest::run_saxpy(&device, 1000).unwrap();
    assert_eq!(report.mismatches, 0);
    assert_no_validation_errors(&instance);
}

#[test]
fn timestamps_read_back_as_durations() {
    let Some((instance, device)) = device("timestamps_read_back_as_durations") else {
        return;
    };
    let Some(ts) = Timestamps::new(&device, 2).unwrap() else {
        testing::skip(
            "timestamps_read_back_as_durations",
            "the queue writes no timestamps",
        );
        return;
    };
    let on_device = Buffer::new(&device, 1 << 20, MemoryLocation::Device, USAGE, "a").unwrap();
    let mut s = Submission::new(&device, 1, "timed").unwrap();
    let cmd = s.begin(0).unwrap();
    // SAFETY: recording into the submission's command buffer; pool and buffer outlive it.
    unsafe {
        ts.reset(cmd);
        ts.write(cmd, vk::PipelineStageFlags::TOP_OF_PIPE, 0);
        device
            .raw()
            .cmd_fill_buffer(cmd, on_device.raw(), 0, vk::WHOLE_SIZE, 1);
        ts.write(cmd, vk::PipelineStageFlags::BOTTOM_OF_PIPE, 1);
    }
    s.end(0).unwrap();
    // SAFETY: executable, no semaphores.
    unsafe { s.submit(0, &[], &[]) }.unwrap();
    s.wait().unwrap();
    let d = ts.elapsed(&[(0, 1)]).unwrap();
    assert!(d[0] < Duration::from_secs(10), "{d:?}");
    drop(s);
    assert_no_validation_errors(&instance);
}
