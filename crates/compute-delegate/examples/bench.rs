//! Runs the compute-delegate benchmarks on the selected device and prints one line per op.
//!
//! `cargo run --release -p compute-delegate --example bench -- [--quick] [FILTER]`

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let filter = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .map(String::as_str);
    let device = match vk_core::Device::open(&compute_delegate::bench_requirements()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "device: {} ({:?}, driver {})",
        device.capabilities().name,
        device.capabilities().device_type,
        device.capabilities().driver_version_string
    );
    match compute_delegate::bench(&device, filter, quick) {
        Ok(rows) => {
            for r in rows {
                println!("{}", r.line());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::FAILURE
        }
    }
}
