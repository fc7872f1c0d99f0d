//! `vkdelegate bench` rows that measure every way host inputs and outputs reach device memory
//! (`vk_core::HostPath`), on this device, in this run: uploads and downloads through a mapping
//! of device-local memory (direct; host-visible device-local memory, resizable BAR on discrete
//! GPUs), through pipelined staging, and through imported host memory; uploads staged in the
//! other memory than `vk_core::HostTransfer::upload_staging_rule` picks (`staged:dev` or
//! `staged:host`); then an end-to-end `add` of a compute graph along each path
//! (`Graph::execute_into`), and once more along the rule's path through `Graph::execute`, whose
//! outputs are new memory each run. The path `vk_core::HostPath::for_device` picks is marked
//! `*`: these rows are what that rule is checked against.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use vkdelegate::vk_core::{
    Buffer, Device, DeviceType, HostPath, HostTransfer, MemoryLocation, Summary, TransferRoute, vk,
};

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

const USAGE: vk::BufferUsageFlags = vk::BufferUsageFlags::from_raw(
    vk::BufferUsageFlags::STORAGE_BUFFER.as_raw()
        | vk::BufferUsageFlags::TRANSFER_SRC.as_raw()
        | vk::BufferUsageFlags::TRANSFER_DST.as_raw(),
);

/// Direct reads of device memory above this size are skipped where the rule is not direct:
/// they run through the PCIe BAR at tens of MB/s (0.04 GB/s on an H200), minutes for 1 GiB.
const DIRECT_READ_CAP: u64 = 64 << 20;

/// Upload or download.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Dir {
    Up,
    Down,
}

impl Dir {
    fn name(self) -> &'static str {
        match self {
            Dir::Up => "up",
            Dir::Down => "down",
        }
    }
}

/// The paths measured, each under a short name: staging with the default chunk and with a
/// quarter of it, to show whether the chunk matters on this device.
fn paths() -> [(&'static str, HostPath); 4] {
    [
        ("direct", HostPath::Direct),
        ("staged", HostPath::staged()),
        (
            "staged:16m",
            HostPath::Staged {
                chunk: HostPath::DEFAULT_CHUNK / 4,
            },
        ),
        ("imported", HostPath::Imported),
    ]
}

/// The other place uploads may stage in than the device's rule
/// (`HostTransfer::upload_staging_rule`), measured as its own upload row.
fn other_upload_staging(rule: MemoryLocation) -> MemoryLocation {
    match rule {
        MemoryLocation::DeviceMapped => MemoryLocation::Host,
        _ => MemoryLocation::DeviceMapped,
    }
}

/// A short name of an upload staging location.
fn staging_name(location: MemoryLocation) -> &'static str {
    match location {
        MemoryLocation::DeviceMapped => "staged:dev",
        _ => "staged:host",
    }
}

/// Whether `path` is the one the rule (with its override) picks.
fn is_chosen(chosen: HostPath, path: HostPath) -> bool {
    chosen == path
}

/// Times `runs` transfers of `bytes` in `dir` along `path`; with how the last one went.
fn measure(
    device: &Device,
    path: HostPath,
    dir: Dir,
    bytes: u64,
    runs: usize,
    upload_staging: Option<MemoryLocation>,
) -> Result<(Vec<Duration>, Option<TransferRoute>)> {
    let mut data = vec![7u8; bytes as usize];
    let mut times = Vec::with_capacity(runs);
    if path == HostPath::Direct {
        let mut mapped = Buffer::new(device, bytes, MemoryLocation::DeviceMapped, USAGE, "direct")?;
        for _ in 0..runs {
            let t = Instant::now();
            match dir {
                Dir::Up => mapped.write(0, &data)?,
                Dir::Down => mapped.read(0, &mut data)?,
            }
            times.push(t.elapsed());
        }
        return Ok((times, None));
    }
    let on_device = Buffer::new(device, bytes, MemoryLocation::Device, USAGE, "device")?;
    let mut transfer = HostTransfer::new(device, path);
    if let Some(location) = upload_staging {
        transfer.set_upload_staging(location)?;
    }
    if path == HostPath::Imported && !transfer.can_import() {
        return Err("the device has no VK_EXT_external_memory_host".into());
    }
    for _ in 0..runs {
        let t = Instant::now();
        // SAFETY: the device buffer is live, has both transfer usages and holds `bytes`.
        unsafe {
            match dir {
                Dir::Up => transfer.upload(&data, on_device.raw(), 0)?,
                Dir::Down => transfer.download(on_device.raw(), 0, &mut data)?,
            }
        }
        times.push(t.elapsed());
    }
    Ok((times, transfer.last_route()))
}

/// Prints one row in the format of every host I/O row and returns it as JSON.
fn print_row(label: &str, bytes: u64, moved: u64, s: &Summary, note: &str) -> Value {
    let gbs = moved as f64 / (s.median * 1e-3) / 1e9;
    println!(
        "  {label:<16} {:>5} MiB  {:>9.3} {:>9.3} {:>9.3} ms  {gbs:>7.2} GB/s{}{note}",
        bytes >> 20,
        s.min,
        s.median,
        s.max,
        if s.is_noisy(0.10) { "  NOISY" } else { "" }
    );
    json!({"min_ms": s.min, "median_ms": s.median, "max_ms": s.max, "gb_per_s": gbs})
}

/// Prints that the row `label` of `bytes` could not be measured, and why; returns it as JSON.
fn not_measured(label: &str, bytes: u64, e: &dyn std::error::Error) -> Value {
    println!("  {label:<16} {:>5} MiB  not measured: {e}", bytes >> 20);
    json!({"error": e.to_string()})
}

fn route_note(path: HostPath, route: Option<TransferRoute>) -> String {
    match (path, route) {
        (HostPath::Imported, Some(TransferRoute::Staged { .. })) => {
            "  (fell back to staging)".into()
        }
        (_, Some(TransferRoute::Staged { chunks })) if chunks > 1 => format!("  ({chunks} chunks)"),
        _ => String::new(),
    }
}

/// One size: every path, both directions.
fn size_rows(device: &Device, chosen: HostPath, bytes: u64) -> Value {
    let runs = if bytes >= 256 << 20 { 5 } else { 15 };
    let mut row = serde_json::Map::new();
    row.insert("bytes".into(), json!(bytes));
    for (name, path) in paths() {
        for dir in [Dir::Up, Dir::Down] {
            let mark = if is_chosen(chosen, path) { "*" } else { " " };
            let label = format!("{mark}{name} {}", dir.name());
            let key = format!("{}_{}", name.replace(':', "_"), dir.name());
            if path == HostPath::Direct
                && dir == Dir::Down
                && chosen != HostPath::Direct
                && bytes > DIRECT_READ_CAP
            {
                println!(
                    "  {label:<16} {:>5} MiB  skipped: reads through the BAR",
                    bytes >> 20
                );
                row.insert(key, json!({"skipped": "reads through the BAR"}));
                continue;
            }
            let value = match measure(device, path, dir, bytes, runs, None) {
                Ok((t, route)) => match Summary::of_durations(&t) {
                    Some(s) => print_row(&label, bytes, bytes, &s, &route_note(path, route)),
                    None => continue,
                },
                Err(e) => not_measured(&label, bytes, &*e),
            };
            row.insert(key, value);
        }
    }
    // Uploads staged in the other memory than the rule's, where the device has it.
    let rule = HostTransfer::upload_staging_rule(device);
    let other = other_upload_staging(rule);
    let name = staging_name(other);
    let label = format!(" {name} up");
    let key = format!("{}_up", name.replace(':', "_"));
    let value = match measure(
        device,
        HostPath::staged(),
        Dir::Up,
        bytes,
        runs,
        Some(other),
    ) {
        Ok((t, route)) => Summary::of_durations(&t).map(|s| {
            print_row(
                &label,
                bytes,
                bytes,
                &s,
                &route_note(HostPath::staged(), route),
            )
        }),
        Err(e) => Some(not_measured(&label, bytes, &*e)),
    };
    if let Some(v) = value {
        row.insert(key, v);
    }
    Value::Object(row)
}

/// Prints and returns the host I/O rows: each path's uploads and downloads at a small and
/// large sizes (1 MiB, 256 MiB, 1 GiB; 1 and 16 MiB with `quick` or on a CPU driver), then
/// the end-to-end `add` rows.
pub fn rows(device: &Device, quick: bool) -> Result<Value> {
    let chosen = HostPath::for_device(device)?;
    let staging = staging_name(HostTransfer::upload_staging_rule(device));
    println!(
        "\nhost I/O (upload or download of N bytes, waited for; min / median / max of the runs; \
         GB/s over N bytes; * marks this device's path: {chosen}, uploads {staging})"
    );
    let small = quick || device.capabilities().device_type == DeviceType::Cpu;
    let sizes: &[u64] = if small {
        &[1 << 20, 16 << 20]
    } else {
        &[1 << 20, 256 << 20, 1 << 30]
    };
    let out: Vec<Value> = sizes
        .iter()
        .map(|&bytes| size_rows(device, chosen, bytes))
        .collect();
    let add = add_rows(device, chosen, if small { 4 << 20 } else { 1 << 30 });
    Ok(json!({"rule": chosen.to_string(), "rows": out, "add": add}))
}

/// End-to-end `add` of two f32 tensors of `bytes` each (inputs up, output down) along each
/// path: `Graph::execute_into` (the output tensor kept from run to run), GB/s over the
/// 3 x `bytes` moved; then the rule's path through `Graph::execute`, which allocates the
/// output on every run.
#[cfg(feature = "compute")]
fn add_rows(device: &Device, chosen: HostPath, bytes: u64) -> Value {
    let mut row = serde_json::Map::new();
    row.insert("bytes".into(), json!(bytes));
    for (name, path) in paths() {
        let mark = if is_chosen(chosen, path) { "*" } else { " " };
        let label = format!("{mark}add {name}");
        if path == HostPath::Direct && chosen != HostPath::Direct && bytes > DIRECT_READ_CAP {
            println!(
                "  {label:<16} {:>5} MiB  skipped: reads through the BAR",
                bytes >> 20
            );
            continue;
        }
        let value = match time_add(device, path, bytes, true) {
            Ok(s) => print_row(&label, bytes, 3 * bytes, &s, ""),
            Err(e) => not_measured(&label, bytes, &*e),
        };
        row.insert(name.into(), value);
    }
    // The rule's path once more through `execute`, which returns new output tensors.
    let label = "*add new outputs".to_string();
    let value = match time_add(device, chosen, bytes, false) {
        Ok(s) => print_row(&label, bytes, 3 * bytes, &s, ""),
        Err(e) => not_measured(&label, bytes, &*e),
    };
    row.insert("new_outputs".into(), value);
    Value::Object(row)
}

#[cfg(feature = "compute")]
fn time_add(device: &Device, path: HostPath, bytes: u64, into: bool) -> Result<Summary> {
    use vkdelegate::compute::{BuildOptions, GraphBuilder};
    use vkdelegate::vk_core::{DType, HostTensor};
    let n = (bytes / 4) as usize;
    let mut g = GraphBuilder::new();
    let x = g.input("x", DType::F32, &[n])?;
    let y = g.input("y", DType::F32, &[n])?;
    let z = g.add(x, y)?;
    g.output(z)?;
    let options = BuildOptions {
        host_path: Some(path),
        ..Default::default()
    };
    let mut graph = g.build_with(device, &options)?;
    let a = HostTensor::new(DType::F32, vec![n], vec![0u8; n * 4])?;
    let inputs = [a.clone(), a];
    let mut outputs = graph.execute(&inputs)?;
    let runs = if bytes >= 256 << 20 { 5 } else { 15 };
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        if into {
            graph.execute_into(&inputs, &mut outputs)?;
        } else {
            outputs = graph.execute(&inputs)?;
        }
        times.push(t.elapsed());
    }
    Summary::of_durations(&times).ok_or_else(|| "no runs".into())
}

#[cfg(not(feature = "compute"))]
fn add_rows(_device: &Device, _chosen: HostPath, _bytes: u64) -> Value {
    println!("  add: not measured (built without the compute delegate)");
    Value::Null
}
