//! GPU tests of host transfers ([`HostTransfer`]) along every [`HostPath`]: round trips of odd
//! sizes and unaligned host ranges, a pipelined transfer of many chunks, and the fall-backs
//! from import to staging. Validation (core and synchronization) is on; every test ends by
//! asserting zero validation errors.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use vk_core::testing::{self, assert_no_validation_errors};
use vk_core::{
    Buffer, Device, FaultPoint, HostPath, HostTransfer, MemoryLocation, Requirements,
    TransferRoute, vk,
};

fn device(test: &str) -> Option<(vk_core::Instance, Device)> {
    testing::device(test, &Requirements::new("vk-core transfer test"))
}

const USAGE: vk::BufferUsageFlags = vk::BufferUsageFlags::from_raw(
    vk::BufferUsageFlags::STORAGE_BUFFER.as_raw()
        | vk::BufferUsageFlags::TRANSFER_SRC.as_raw()
        | vk::BufferUsageFlags::TRANSFER_DST.as_raw(),
);

/// Bytes that differ from offset to offset (and from one seed to the next).
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1] ^ seed)
        .collect()
}

/// Uploads `len` bytes from `skew` bytes into a host vector to `offset` of a device buffer,
/// downloads them into another vector at `skew`, and compares.
fn round_trip(t: &mut HostTransfer, device: &Device, len: usize, skew: usize, offset: u64) {
    let on_device = Buffer::new(
        device,
        offset + len as u64,
        MemoryLocation::Device,
        USAGE,
        "d",
    )
    .unwrap();
    let src = pattern(len + skew, len as u8);
    let mut dst = vec![0u8; len + skew];
    // SAFETY: the buffer is live, has both transfer usages and holds `offset + len` bytes.
    unsafe {
        t.upload(&src[skew..], on_device.raw(), offset).unwrap();
        t.download(on_device.raw(), offset, &mut dst[skew..])
            .unwrap();
    }
    assert!(
        src[skew..] == dst[skew..],
        "{:?}: {len} bytes at skew {skew}, offset {offset}",
        t.path()
    );
    assert!(
        dst[..skew].iter().all(|&b| b == 0),
        "bytes before the range"
    );
}

#[test]
fn every_path_round_trips_odd_sizes_and_unaligned_ranges() {
    let Some((instance, device)) = device("every_path_round_trips") else {
        return;
    };
    let chunk = 64 << 10;
    let sizes = [
        1,
        3,
        4095,
        4096,
        65_537,
        3 * chunk as usize + 123,
        (2 << 20) + 7,
    ];
    for path in [
        HostPath::Direct,
        HostPath::Staged { chunk },
        HostPath::staged(),
        HostPath::Imported,
    ] {
        let mut t = HostTransfer::new(&device, path);
        for (i, &len) in sizes.iter().enumerate() {
            round_trip(&mut t, &device, len, i % 7, (i as u64 % 3) * 4);
        }
    }
    assert_no_validation_errors(&instance);
}

#[test]
fn a_large_transfer_is_pipelined_over_many_chunks() {
    let Some((instance, device)) = device("a_large_transfer_is_pipelined") else {
        return;
    };
    let len = (64 << 20) + 4097;
    let chunk = 1 << 20;
    let mut t = HostTransfer::new(&device, HostPath::Staged { chunk });
    round_trip(&mut t, &device, len, 5, 0);
    assert_eq!(
        t.last_route(),
        Some(TransferRoute::Staged {
            chunks: len.div_ceil(chunk as usize)
        })
    );
    // Two staging buffers for downloads, and two more where uploads stage in device memory.
    let sets = if t.upload_staging() == MemoryLocation::DeviceMapped {
        2
    } else {
        1
    };
    assert_eq!(t.staging_bytes(), sets * 2 * chunk);
    assert_no_validation_errors(&instance);
}

#[test]
fn uploads_stage_in_host_or_mapped_device_memory() {
    let Some((instance, device)) = device("uploads_stage_in_host_or_mapped_device_memory") else {
        return;
    };
    let chunk = 256 << 10;
    let len = 5 * chunk as usize + 321;
    let mut t = HostTransfer::new(&device, HostPath::Staged { chunk });
    // Uploads stage in host memory by default.
    assert_eq!(t.upload_staging(), MemoryLocation::Host);
    assert_eq!(
        HostTransfer::upload_staging_rule(&device),
        MemoryLocation::Host
    );
    for location in [MemoryLocation::DeviceMapped, MemoryLocation::Host] {
        t.set_upload_staging(location).unwrap();
        round_trip(&mut t, &device, len, 3, 8);
        assert_eq!(t.upload_staging(), location, "no fall-back was needed");
        assert_eq!(t.last_route(), Some(TransferRoute::Staged { chunks: 6 }));
    }
    // Device-mapped upload slots and host download slots: two of each were made; the
    // device-mapped ones were freed when uploads moved to host memory.
    assert_eq!(t.staging_bytes(), 2 * chunk);
    let e = t
        .set_upload_staging(MemoryLocation::Device)
        .unwrap_err()
        .to_string();
    assert!(e.contains("host or mapped device memory"), "{e}");
    assert_no_validation_errors(&instance);
}

#[test]
fn imports_fall_back_to_staging_when_refused_or_small() {
    let Some((instance, device)) = device("imports_fall_back") else {
        return;
    };
    let mut t = HostTransfer::new(&device, HostPath::Imported);
    let large = (2 << 20) + 1;
    if t.can_import() {
        round_trip(&mut t, &device, large, 3, 0);
        assert_eq!(t.last_route(), Some(TransferRoute::Imported));
    } else {
        testing::skip(
            "imports_fall_back (import half)",
            "the device has no VK_EXT_external_memory_host",
        );
    }
    // Refused (upload and download): the driver's import fails; the transfer stages instead.
    for _ in 0..2 {
        device.inject_fault(
            FaultPoint::Import,
            vk::Result::ERROR_INVALID_EXTERNAL_HANDLE,
        );
    }
    round_trip(&mut t, &device, large, 1, 0);
    assert!(matches!(t.last_route(), Some(TransferRoute::Staged { .. })));
    // Small: never imported.
    round_trip(&mut t, &device, 1000, 0, 0);
    assert_eq!(t.last_route(), Some(TransferRoute::Staged { chunks: 1 }));
    assert_no_validation_errors(&instance);
}
