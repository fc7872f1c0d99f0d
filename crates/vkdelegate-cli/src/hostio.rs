//! `vkdelegate bench` rows that measure the two ways host inputs and outputs reach device
//! memory, on this device, in this run: written and read through a mapping of device-local
//! memory (direct), or through host staging buffers and device copies (staged). This is what
//! `vk_core::HostIo::for_device` decides between.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use vkdelegate::vk_core::barrier::{Access, host_read_barrier, memory_barrier};
use vkdelegate::vk_core::{Buffer, Device, HostIo, MemoryLocation, Submission, Summary, vk};

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

const USAGE: vk::BufferUsageFlags = vk::BufferUsageFlags::from_raw(
    vk::BufferUsageFlags::STORAGE_BUFFER.as_raw()
        | vk::BufferUsageFlags::TRANSFER_SRC.as_raw()
        | vk::BufferUsageFlags::TRANSFER_DST.as_raw(),
);

/// One round trip: host write of `bytes`, a device pass over them (a fill of a second buffer,
/// so that the submission does real work), host read of `bytes`.
fn round_trip_direct(device: &Device, bytes: u64, runs: usize) -> Result<Vec<Duration>> {
    let mut buffer = Buffer::new(device, bytes, MemoryLocation::DeviceMapped, USAGE, "direct")?;
    let mut s = Submission::new(device, 1, "host I/O bench")?;
    let cmd = s.begin(0)?;
    // SAFETY: recording into the submission's command buffer; the buffer outlives it.
    unsafe {
        memory_barrier(device, cmd, Access::HOST_WRITE, Access::TRANSFER_WRITE);
        device.raw().cmd_fill_buffer(cmd, buffer.raw(), 0, 4, 0);
        host_read_barrier(device, cmd);
    }
    s.end(0)?;
    let data = vec![7u8; bytes as usize];
    let mut out = vec![0u8; bytes as usize];
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        buffer.write(0, &data)?;
        // SAFETY: executable command buffer, no semaphores.
        unsafe { s.submit(0, &[], &[]) }?;
        s.wait()?;
        buffer.read(0, &mut out)?;
        times.push(t.elapsed());
    }
    Ok(times)
}

fn round_trip_staged(device: &Device, bytes: u64, runs: usize) -> Result<Vec<Duration>> {
    let on_device = Buffer::new(device, bytes, MemoryLocation::Device, USAGE, "device")?;
    let mut up = Buffer::new(device, bytes, MemoryLocation::Host, USAGE, "upload")?;
    let down = Buffer::new(device, bytes, MemoryLocation::Host, USAGE, "read-back")?;
    let mut s = Submission::new(device, 1, "host I/O bench")?;
    let cmd = s.begin(0)?;
    let region = [vk::BufferCopy::default().size(bytes)];
    // SAFETY: recording into the submission's command buffer; the buffers outlive it.
    unsafe {
        let d = device.raw();
        memory_barrier(device, cmd, Access::HOST_WRITE, Access::TRANSFER_READ);
        d.cmd_copy_buffer(cmd, up.raw(), on_device.raw(), &region);
        memory_barrier(device, cmd, Access::TRANSFER_WRITE, Access::TRANSFER_READ);
        d.cmd_copy_buffer(cmd, on_device.raw(), down.raw(), &region);
        host_read_barrier(device, cmd);
    }
    s.end(0)?;
    let data = vec![7u8; bytes as usize];
    let mut out = vec![0u8; bytes as usize];
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        up.write(0, &data)?;
        // SAFETY: executable command buffer, no semaphores.
        unsafe { s.submit(0, &[], &[]) }?;
        s.wait()?;
        down.read(0, &mut out)?;
        times.push(t.elapsed());
    }
    Ok(times)
}

/// Prints and returns the direct and staged round trips at a small and a large size.
pub fn rows(device: &Device, quick: bool) -> Result<Value> {
    let rule = HostIo::for_device(device);
    println!(
        "\nhost I/O (write N bytes, one submission, read N bytes; min / median / max of the \
         runs; GB/s over 2N bytes); this device's rule: {rule:?}"
    );
    let sizes: &[u64] = if quick {
        &[1 << 20, 16 << 20]
    } else {
        &[1 << 20, 64 << 20, 256 << 20]
    };
    let mut out = Vec::new();
    for &bytes in sizes {
        let runs = if bytes >= 64 << 20 { 5 } else { 15 };
        let mut row = serde_json::Map::new();
        row.insert("bytes".into(), json!(bytes));
        for (name, f) in [
            (
                "direct",
                round_trip_direct as fn(&Device, u64, usize) -> Result<Vec<Duration>>,
            ),
            ("staged", round_trip_staged),
        ] {
            match f(device, bytes, runs).map(|t| Summary::of_durations(&t)) {
                Ok(Some(s)) => {
                    let gbs = 2.0 * bytes as f64 / (s.median * 1e-3) / 1e9;
                    println!(
                        "  {name:<7} {:>5} MiB  {:>9.3} {:>9.3} {:>9.3} ms  {gbs:>7.2} GB/s{}",
                        bytes >> 20,
                        s.min,
                        s.median,
                        s.max,
                        if s.is_noisy(0.10) { "  NOISY" } else { "" }
                    );
                    row.insert(
                        name.into(),
                        json!({"min_ms": s.min, "median_ms": s.median, "max_ms": s.max, "gb_per_s": gbs}),
                    );
                }
                Ok(None) => {}
                Err(e) => {
                    println!("  {name:<7} {:>5} MiB  not measured: {e}", bytes >> 20);
                    row.insert(name.into(), json!({"error": e.to_string()}));
                }
            }
        }
        out.push(Value::Object(row));
    }
    Ok(json!({"rule": format!("{rule:?}"), "rows": out}))
}
