//! Registry and lease costs: lookup on a hit (1 and 8 threads), lookup_or_create on a hit,
//! lease acquire + release, and how long the queue lock is held around one submission.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use shared_runtime::{ContextParts, Registry, SharedKey};
use vk_core::{Device, Requirements, vk};

fn device() -> Option<Device> {
    match Device::open(&Requirements::new("registry bench")) {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("SKIPPED registry benches: {e}");
            None
        }
    }
}

fn benches(c: &mut Criterion) {
    let Some(device) = device() else { return };
    let registry = Arc::new(Registry::new());
    let key = SharedKey::new("bench", 0);
    let ctx = registry
        .lookup_or_create(&key, || {
            Ok(ContextParts {
                device: device.clone(),
                anchor: None,
            })
        })
        .expect("context")
        .context;

    c.bench_function("lookup hit, 1 thread", |b| {
        b.iter(|| registry.lookup(&key).expect("hit"))
    });

    c.bench_function("lookup hit, 8 threads", |b| {
        b.iter_custom(|iters| {
            let threads = 8u64;
            let per = iters.div_ceil(threads);
            let start_line = Arc::new(Barrier::new(threads as usize + 1));
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    let (registry, key, start_line) =
                        (registry.clone(), key.clone(), start_line.clone());
                    std::thread::spawn(move || {
                        start_line.wait();
                        for _ in 0..per {
                            std::hint::black_box(registry.lookup(&key));
                        }
                    })
                })
                .collect();
            start_line.wait();
            let t = Instant::now();
            for h in handles {
                h.join().expect("bench thread");
            }
            // Wall time for all `iters` lookups spread over 8 threads: criterion divides by
            // `iters`, giving the throughput cost of one lookup under contention.
            t.elapsed()
        })
    });

    c.bench_function("lookup_or_create hit", |b| {
        b.iter(|| {
            registry
                .lookup_or_create(&key, || unreachable!("hit expected"))
                .expect("hit")
        })
    });

    c.bench_function("lease acquire + release", |b| {
        b.iter(|| drop(std::hint::black_box(ctx.lease("bench"))))
    });

    // SAFETY: a fresh fence of this device, destroyed at the end.
    let fence = unsafe {
        device
            .raw()
            .create_fence(&vk::FenceCreateInfo::default(), None)
    }
    .expect("fence");
    c.bench_function("queue lock hold time around one submission", |b| {
        let lease = ctx.lease("bench");
        b.iter_custom(|iters| {
            let mut held = Duration::ZERO;
            for _ in 0..iters {
                lease.submit(|guard| {
                    let t = Instant::now();
                    // SAFETY: an empty submission that signals an unsignaled fence.
                    unsafe { guard.submit(&[], fence) }.expect("submit");
                    held += t.elapsed();
                });
                // SAFETY: the fence belongs to this device; waited outside the guard.
                unsafe {
                    lease
                        .device()
                        .wait_for_fence(fence, u64::MAX)
                        .expect("wait");
                    lease.device().raw().reset_fences(&[fence]).expect("reset");
                }
            }
            held
        })
    });
    // SAFETY: no pending work uses the fence.
    unsafe { device.raw().destroy_fence(fence, None) };
    registry.clear();
}

criterion_group! {
    name = registry;
    config = Criterion::default().measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(300));
    targets = benches
}
criterion_main!(registry);
