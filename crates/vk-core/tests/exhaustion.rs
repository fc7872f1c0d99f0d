//! Memory exhaustion and leaks at the vk-core level: a device whose allocator treats every heap
//! as small ([`testing::device_with_heap_limit`]) runs out after many small buffers with an
//! error naming the buffer, works again once they are freed; the validation layer reports an
//! object left undestroyed at `vkDestroyDevice` (so the leak checks of the delegates' tests
//! mean something).

use vk_core::testing::{self, assert_no_validation_errors};
use vk_core::{Buffer, Error, MemoryLocation, Requirements, vk};

const HEAP_LIMIT: u64 = 64 << 20;

#[test]
fn many_small_buffers_exhaust_a_limited_heap_by_name_and_freeing_them_recovers() {
    let test = "many_small_buffers_exhaust_a_limited_heap";
    let Some((instance, device)) =
        testing::device_with_heap_limit(test, &Requirements::new("exhaustion test"), HEAP_LIMIT)
    else {
        return;
    };
    let usage = vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::TRANSFER_DST;
    let mut held = Vec::new();
    let err = loop {
        let what = format!("small buffer #{}", held.len());
        match Buffer::new(&device, 256 << 10, MemoryLocation::Device, usage, &what) {
            Ok(b) => held.push(b),
            Err(e) => break (what, e),
        }
        assert!(
            held.len() < 1024,
            "{HEAP_LIMIT} bytes held 1024 buffers of 256 KiB: the limit is not applied"
        );
    };
    let (what, e) = err;
    let text = e.to_string();
    match &e {
        Error::Allocation {
            what: w,
            bytes,
            result,
        } => {
            assert_eq!(w, &what);
            assert_eq!(*bytes, 256 << 10);
            assert_eq!(*result, vk::Result::ERROR_OUT_OF_DEVICE_MEMORY, "{text}");
        }
        other => panic!("expected an allocation error, got {other:?}"),
    }
    assert!(
        text.contains(&what) && text.contains("262144 bytes"),
        "{text}"
    );
    let n = held.len();
    eprintln!("{HEAP_LIMIT} bytes: {n} buffers of 256 KiB, then: {text}");
    assert!(
        n >= 64,
        "only {n} buffers of 256 KiB fit in {HEAP_LIMIT} bytes"
    );
    // Another one still fails; freed, the memory serves again.
    assert!(Buffer::new(&device, 256 << 10, MemoryLocation::Host, usage, "again").is_err());
    held.clear();
    let again: Vec<Buffer> = (0..n)
        .map(|i| {
            Buffer::new(
                &device,
                256 << 10,
                MemoryLocation::Device,
                usage,
                &format!("#{i}"),
            )
            .unwrap()
        })
        .collect();
    drop(again);
    let report = vk_core::selftest::run_saxpy(&device, 1000).unwrap();
    assert_eq!(report.mismatches, 0);
    drop(device);
    assert_no_validation_errors(&instance);
}

#[test]
fn the_heap_limit_must_come_before_the_first_allocation() {
    let test = "the_heap_limit_must_come_before_the_first_allocation";
    let Some((instance, device)) =
        testing::device_with_heap_limit(test, &Requirements::new("exhaustion test"), 1 << 20)
    else {
        return;
    };
    // A buffer larger than the limit fails at once, one below it works.
    let usage = vk::BufferUsageFlags::TRANSFER_DST;
    let e = Buffer::new(&device, 2 << 20, MemoryLocation::Device, usage, "two MiB").unwrap_err();
    assert!(matches!(e, Error::Allocation { .. }), "{e}");
    Buffer::new(&device, 64 << 10, MemoryLocation::Device, usage, "64 KiB").unwrap();
    drop(device);
    assert_no_validation_errors(&instance);
}

#[test]
fn the_validation_layer_reports_an_object_left_at_device_destruction() {
    let test = "the_validation_layer_reports_an_object_left";
    let Some((instance, device)) = testing::device(test, &Requirements::new("leak control")) else {
        return;
    };
    // SAFETY: valid create info; left undestroyed on purpose.
    let fence = unsafe {
        device
            .raw()
            .create_fence(&vk::FenceCreateInfo::default(), None)
    }
    .unwrap();
    assert_ne!(fence, vk::Fence::null());
    assert_eq!(instance.validation().error_count(), 0);
    drop(device);
    let log = instance.validation();
    assert!(
        log.error_count() > 0,
        "no validation error for a fence left at vkDestroyDevice: leak checks would be blind"
    );
    let first = log.first_errors().join("\n");
    assert!(first.contains("VkFence"), "{first}");
    eprintln!("the layer reports leaks, e.g.: {}", log.first_errors()[0]);
}
