//! Load: threads running the example program (VGF -> compute -> VGF) on one shared device,
//! in both hand-off modes, for a bounded time, every result checked against the CPU
//! reference. A watchdog aborts the process, saying so, if the workers do not finish within
//! a deadline: a deadlock fails the test instead of hanging it.
//!
//! `VKDELEGATE_LOAD_SECONDS` (default 10) and `VKDELEGATE_LOAD_THREADS` (default 8) set the
//! duration and the number of threads, for longer runs by hand.

#![cfg(all(feature = "vgf", feature = "compute", feature = "shared"))]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod example;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use example::{build, check, input, reference, serial};
use shared_runtime::{Mode, SharingOptions};
use vk_core::ArmSupport;
use vk_core::testing::{self, assert_no_validation_errors_of_ours};
use vkdelegate::program::{DeviceChoice, HandOff};

fn env_or(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a whole number")),
        Err(_) => default,
    }
}

fn ready(test: &str) -> bool {
    testing::validate_every_instance();
    let Some(instance) = testing::instance(test) else {
        return false;
    };
    match instance.select_adapter() {
        Ok(a) if a.capabilities().arm != ArmSupport::Absent => true,
        Ok(_) => {
            testing::skip(
                test,
                "no VK_ARM_tensors/VK_ARM_data_graph, native or emulated",
            );
            false
        }
        Err(e) => {
            testing::skip(test, &e.to_string());
            false
        }
    }
}

#[test]
fn threads_running_programs_on_one_shared_device_stay_correct_and_finish() {
    let _serial = serial();
    let test = "threads_running_programs_on_one_shared_device";
    if !ready(test) {
        return;
    }
    let seconds = env_or("VKDELEGATE_LOAD_SECONDS", 10);
    let threads = env_or("VKDELEGATE_LOAD_THREADS", 8) as usize;
    // Loading (every thread builds its program) plus the run plus a margin for slow hosts.
    let deadline = Duration::from_secs(seconds + 180);
    let done = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let done = done.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            while !done.load(Ordering::SeqCst) {
                if start.elapsed() > deadline {
                    eprintln!(
                        "{test}: the {threads} workers did not finish within {deadline:?} \
                         ({seconds} s of load): deadlock or hang; aborting"
                    );
                    std::process::abort();
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };

    let options = SharingOptions {
        mode: Mode::LookupOrCreate,
        token: format!("load-test-{}", std::process::id()),
        group_id: 0,
    };
    let checked = AtomicU64::new(0);
    let per_mode = [AtomicU64::new(0), AtomicU64::new(0)];
    let start_line = Barrier::new(threads);
    let instance = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (options, checked, per_mode, start_line) =
                    (&options, &checked, &per_mode, &start_line);
                s.spawn(move || {
                    let hand_off = if t % 2 == 0 {
                        HandOff::Device
                    } else {
                        HandOff::Host
                    };
                    let mut p = build(hand_off, DeviceChoice::Shared(options.clone()))
                        .unwrap_or_else(|e| panic!("thread {t}: {e}"));
                    start_line.wait();
                    let until = Instant::now() + Duration::from_secs(seconds);
                    let mut n = 0u64;
                    while Instant::now() < until {
                        let x = input(t as u64 * 1_000_003 + n);
                        let out = p
                            .execute(std::slice::from_ref(&x))
                            .unwrap_or_else(|e| panic!("thread {t}, execution {n}: {e}"));
                        check(&out, &reference(&x));
                        n += 1;
                    }
                    checked.fetch_add(n, Ordering::SeqCst);
                    per_mode[t % 2].fetch_add(n, Ordering::SeqCst);
                    p.device().instance().clone()
                })
            })
            .collect();
        let instances: Vec<_> = workers.into_iter().map(|w| w.join().unwrap()).collect();
        instances.into_iter().next().unwrap()
    });
    done.store(true, Ordering::SeqCst);
    watchdog.join().unwrap();
    let n = checked.load(Ordering::SeqCst);
    eprintln!(
        "load: {threads} threads x {seconds} s on one shared device: {n} executions checked \
         ({} device hand-off, {} host hand-off)",
        per_mode[0].load(Ordering::SeqCst),
        per_mode[1].load(Ordering::SeqCst)
    );
    assert!(n >= threads as u64, "only {n} executions in {seconds} s");
    assert_no_validation_errors_of_ours(&instance);
}
