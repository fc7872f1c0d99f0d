//! Times VGF models on the selected device: `cargo run --release -p vgf-delegate --example
//! vgf_bench -- [--repeat N] MODEL.vgf...` (load time, per-inference time, host overhead).

use vgf_delegate::{Vgf, bench, requirements_for};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut repeat = 10usize;
    let mut paths = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--repeat" {
            repeat = args.next().ok_or("--repeat needs a number")?.parse()?;
        } else {
            paths.push(a);
        }
    }
    let mut requirements = vgf_delegate::requirements();
    let mut files = Vec::new();
    for p in &paths {
        let bytes = std::fs::read(p).map_err(|e| format!("{p}: {e}"))?;
        requirements = requirements.union(&requirements_for(&Vgf::decode(&bytes)?)?);
        files.push(bytes);
    }
    let device = vk_core::Device::open(&requirements)?;
    println!("device: {}", device.capabilities().name);
    for (p, bytes) in paths.iter().zip(&files) {
        let report = bench::bench(bytes, &device, None, repeat)?;
        println!("{p}: {report}");
    }
    Ok(())
}
