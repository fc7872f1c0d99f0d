//! Load time and per-execute time of a small corpus model (`add`), and decode time of
//! mobilenet_v2. Needs a device with the ARM extensions (lavapipe + Arm's emulation layer);
//! without one it prints why and measures the decoder only.

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{Criterion, criterion_group, criterion_main};
use vgf_delegate::{Model, Vgf};

/// A fixture model from the repository's `fixtures/vgf`.
fn corpus(model: &str) -> Option<Vec<u8>> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/vgf")
        .join(model)
        .join("model.vgf");
    std::fs::read(path).ok()
}

fn benches(c: &mut Criterion) {
    if let Some(mobilenet) = corpus("mobilenet_v2") {
        c.bench_function("decode mobilenet_v2", |b| {
            b.iter(|| Vgf::decode(black_box(&mobilenet)).map(|v| v.resources.len()))
        });
    }
    let Some(add) = corpus("add") else {
        eprintln!("SKIPPED vgf benches: fixtures/vgf/add/model.vgf not found");
        return;
    };
    let requirements = match Vgf::decode(&add).map(|v| vgf_delegate::requirements_for(&v)) {
        Ok(Ok(r)) => r,
        other => {
            eprintln!("SKIPPED vgf GPU benches: {other:?}");
            return;
        }
    };
    let device = match vk_core::Device::open(&requirements) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("SKIPPED vgf GPU benches: {e}");
            return;
        }
    };
    // A load that fails would be timed as a (fast) error: check it once first.
    let mut model = match Model::load(&add, &device) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("SKIPPED vgf GPU benches: {e}");
            return;
        }
    };
    let mut group = c.benchmark_group("add");
    group.sample_size(10);
    group.bench_function("load", |b| {
        b.iter(|| Model::load(black_box(&add), &device).map(|m| m.inputs().len()))
    });
    let inputs = match vgf_delegate::bench::synthetic_inputs(&model) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("SKIPPED vgf execute bench: {e}");
            return;
        }
    };
    group.sample_size(50);
    group.bench_function("execute", |b| {
        b.iter(|| model.execute(black_box(&inputs)).map(|o| o.len()))
    });
    group.finish();
}

criterion_group!(vgf, benches);
criterion_main!(vgf);
