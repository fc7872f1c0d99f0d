//! Registry behaviour on real devices (lavapipe in CI), validation on.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier, Mutex, OnceLock};
use std::time::{Duration, Instant};

use shared_runtime::{
    ContextParts, Error, Mode, Registry, SharedContext, SharedKey, SharingOptions, acquire_in,
};
use vk_core::testing::{self, assert_no_validation_errors};
use vk_core::{Adapter, Enabled, Features, Instance, InstanceDesc, QueueCaps, Requirements, vk};

/// One validated instance and adapter for the whole test binary; contexts get fresh devices.
fn adapter(test: &str) -> Option<&'static Adapter> {
    static ADAPTER: OnceLock<Option<Adapter>> = OnceLock::new();
    let a = ADAPTER.get_or_init(|| testing::instance(test).and_then(|i| i.select_adapter().ok()));
    if a.is_none() {
        testing::skip(test, "no Vulkan device with validation");
    }
    a.as_ref()
}

fn parts(adapter: &Adapter, anchor: Option<Arc<dyn Any + Send + Sync>>) -> ContextParts {
    ContextParts {
        device: adapter
            .create_device(&Requirements::new("registry test"))
            .expect("device"),
        anchor,
    }
}

/// Runs `f` on another thread and fails the test if it does not finish within `limit`
/// (a deadlock).
fn with_watchdog<F: FnOnce() + Send + 'static>(what: &str, limit: Duration, f: F) {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    match rx.recv_timeout(limit) {
        Ok(()) => handle.join().expect("test thread"),
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: no progress in {limit:?}: deadlock")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            // The thread panicked: surface its panic.
            if let Err(p) = handle.join() {
                std::panic::resume_unwind(p);
            }
        }
    }
}

#[test]
fn concurrent_churn_creates_once_per_generation_without_deadlock() {
    let Some(adapter) = adapter("concurrent_churn") else {
        return;
    };
    let registry = Arc::new(Registry::new());
    let creations = Arc::new(AtomicU64::new(0));
    let created_generations = Arc::new(Mutex::new(HashSet::new()));
    let seen_generations = Arc::new(Mutex::new(HashSet::new()));
    let keys: Vec<SharedKey> = (0..3).map(|g| SharedKey::new("churn", g)).collect();
    let threads = 8;
    let run_for = Duration::from_millis(1500);

    let (reg, cr, cg, sg) = (
        registry.clone(),
        creations.clone(),
        created_generations.clone(),
        seen_generations.clone(),
    );
    with_watchdog("churn", Duration::from_secs(60), move || {
        let start = Barrier::new(threads);
        std::thread::scope(|s| {
            for t in 0..threads {
                let (reg, cr, cg, sg, keys, start) = (&reg, &cr, &cg, &sg, &keys, &start);
                s.spawn(move || {
                    start.wait();
                    let begin = Instant::now();
                    let mut i = t as u64;
                    while begin.elapsed() < run_for {
                        i = i
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let key = &keys[(i >> 33) as usize % keys.len()];
                        match (i >> 40) % 4 {
                            0 | 1 => {
                                let got = reg
                                    .lookup_or_create(key, || {
                                        cr.fetch_add(1, Ordering::SeqCst);
                                        std::thread::sleep(Duration::from_millis(2));
                                        Ok(parts(adapter, None))
                                    })
                                    .expect("lookup_or_create");
                                if got.created {
                                    cg.lock().unwrap().insert(got.context.generation());
                                }
                                sg.lock().unwrap().insert(got.context.generation());
                                assert_eq!(got.context.key(), key);
                            }
                            2 => {
                                if let Some(c) = reg.lookup(key) {
                                    sg.lock().unwrap().insert(c.generation());
                                }
                            }
                            _ => {
                                if let Some(c) = reg.lookup(key) {
                                    // May race with another unregister: NotFound or
                                    // WrongContext are the only acceptable failures.
                                    match reg.unregister(&c) {
                                        Ok(()) | Err(Error::NotFound { .. }) => {}
                                        Err(Error::WrongContext { .. }) => {}
                                        Err(e) => panic!("unexpected {e}"),
                                    }
                                }
                            }
                        }
                    }
                });
            }
        });
    });
    let created = created_generations.lock().unwrap().clone();
    let seen = seen_generations.lock().unwrap().clone();
    assert_eq!(creations.load(Ordering::SeqCst) as usize, created.len());
    assert!(
        seen.is_subset(&created),
        "a context appeared that no creator made"
    );
    assert!(created.len() >= 3, "each key was created at least once");
    registry.clear();
    assert_no_validation_errors(adapter.instance());
}

/// An anchor whose drop re-enters the registry (as a delegate's teardown may).
struct ReentrantAnchor {
    registry: Arc<Registry>,
    dropped: Arc<AtomicUsize>,
}

impl Drop for ReentrantAnchor {
    fn drop(&mut self) {
        assert!(!shared_runtime::lock_order::registry_held());
        let _ = self.registry.lookup(&SharedKey::new("elsewhere", 0));
        let _ = self.registry.len();
        self.dropped.fetch_add(1, Ordering::SeqCst);
    }
}

fn anchored(
    adapter: &Adapter,
    registry: &Arc<Registry>,
    dropped: &Arc<AtomicUsize>,
) -> ContextParts {
    parts(
        adapter,
        Some(Arc::new(ReentrantAnchor {
            registry: registry.clone(),
            dropped: dropped.clone(),
        })),
    )
}

#[test]
fn anchors_that_reenter_the_registry_are_never_dropped_under_its_lock() {
    let Some(adapter) = adapter("reentrant_anchor") else {
        return;
    };
    with_watchdog(
        "re-entrant anchor drop",
        Duration::from_secs(30),
        move || {
            let registry = Arc::new(Registry::new());
            let dropped = Arc::new(AtomicUsize::new(0));
            let key = SharedKey::new("anchor", 1);

            // 1. Stale replacement inside lookup_or_create (upstream's deadlock).
            let first = registry
                .lookup_or_create(&key, || Ok(anchored(adapter, &registry, &dropped)))
                .unwrap()
                .context;
            first.invalidate();
            drop(first); // the registry now holds the only reference
            let second = registry
                .lookup_or_create(&key, || Ok(anchored(adapter, &registry, &dropped)))
                .unwrap();
            assert!(second.created);
            assert_eq!(dropped.load(Ordering::SeqCst), 1);

            // 2. Stale removal inside lookup.
            second.context.invalidate();
            drop(second);
            assert!(registry.lookup(&key).is_none());
            assert_eq!(dropped.load(Ordering::SeqCst), 2);

            // 3. Unregister of the last reference.
            let third = registry
                .lookup_or_create(&key, || Ok(anchored(adapter, &registry, &dropped)))
                .unwrap()
                .context;
            let weak = Arc::downgrade(&third);
            registry.unregister(&third).unwrap();
            assert_eq!(
                dropped.load(Ordering::SeqCst),
                2,
                "the holder keeps it alive"
            );
            drop(third);
            assert!(weak.upgrade().is_none());
            assert_eq!(dropped.load(Ordering::SeqCst), 3);

            // 4. Stale replacement inside register, and clear.
            let fourth = registry
                .register_parts(key.clone(), anchored(adapter, &registry, &dropped))
                .unwrap();
            fourth.invalidate();
            drop(fourth);
            registry
                .register_parts(key.clone(), anchored(adapter, &registry, &dropped))
                .unwrap();
            assert_eq!(dropped.load(Ordering::SeqCst), 4);
            registry.clear();
            assert_eq!(dropped.load(Ordering::SeqCst), 5);
        },
    );
    assert_no_validation_errors(adapter.instance());
}

#[test]
fn a_failed_creation_wakes_every_waiter_and_leaves_the_key_free() {
    let Some(adapter) = adapter("failed_creation") else {
        return;
    };
    let registry = Arc::new(Registry::new());
    let key = SharedKey::new("fails", 0);
    let gate = Arc::new(Barrier::new(2));
    let waiting = 4;
    with_watchdog("failed creation", Duration::from_secs(30), {
        let (registry, key, gate) = (registry.clone(), key.clone(), gate.clone());
        move || {
            std::thread::scope(|s| {
                let creator = s.spawn(|| {
                    registry.lookup_or_create(&key, || {
                        gate.wait(); // waiters queue up behind us meanwhile
                        std::thread::sleep(Duration::from_millis(300));
                        Err(vk_core::Error::InvalidArgument("no device for you".into()))
                    })
                });
                gate.wait();
                let waiters: Vec<_> = (0..waiting)
                    .map(|_| {
                        s.spawn(|| {
                            registry.lookup_or_create(&key, || {
                                Err(vk_core::Error::InvalidArgument("late arrival".into()))
                            })
                        })
                    })
                    .collect();
                let err = creator.join().unwrap().unwrap_err().to_string();
                assert!(err.contains("no device for you"), "{err}");
                let mut woken = 0;
                for w in waiters {
                    // A waiter that arrived after the failure found the key free and ran its
                    // own creator ("late arrival"); none may get a context or hang.
                    let e = w.join().unwrap().unwrap_err().to_string();
                    if e.contains("no device for you") {
                        woken += 1;
                    } else {
                        assert!(e.contains("late arrival"), "{e}");
                    }
                }
                assert!(woken >= 1, "no waiter received the creator's error");
            });
        }
    });
    assert!(registry.is_empty(), "the key is free again");
    let retry = registry
        .lookup_or_create(&key, || Ok(parts(adapter, None)))
        .unwrap();
    assert!(retry.created);
    assert_no_validation_errors(adapter.instance());
}

#[test]
fn clear_during_creation_does_not_orphan_the_creator_or_its_waiters() {
    let Some(adapter) = adapter("clear_during_creation") else {
        return;
    };
    let registry = Arc::new(Registry::new());
    let key = SharedKey::new("cleared", 0);
    let in_creator = Arc::new(Barrier::new(2));
    let release = Arc::new(Barrier::new(2));
    with_watchdog("clear during creation", Duration::from_secs(30), {
        let (registry, key) = (registry.clone(), key.clone());
        move || {
            std::thread::scope(|s| {
                let creator = s.spawn(|| {
                    registry
                        .lookup_or_create(&key, || {
                            in_creator.wait();
                            release.wait();
                            Ok(parts(adapter, None))
                        })
                        .unwrap()
                });
                in_creator.wait();
                let waiter = s.spawn(|| registry.lookup(&key));
                std::thread::sleep(Duration::from_millis(20));
                registry.clear();
                release.wait();
                let made = creator.join().unwrap();
                assert!(made.created);
                // The waiter either saw the creation (same context) or arrived after clear.
                if let Some(c) = waiter.join().unwrap() {
                    assert!(Arc::ptr_eq(&c, &made.context));
                }
                // Not registered after the clear: the next caller creates a new generation.
                assert!(registry.lookup(&key).is_none());
                let again = registry
                    .lookup_or_create(&key, || Ok(parts(adapter, None)))
                    .unwrap();
                assert!(again.created);
                assert_ne!(again.context.generation(), made.context.generation());
            });
        }
    });
    assert_no_validation_errors(adapter.instance());
}

#[test]
fn register_unregister_and_their_errors() {
    let Some(adapter) = adapter("register_unregister") else {
        return;
    };
    let registry = Registry::new();
    let key = SharedKey::new("reg", 3);
    let a = registry
        .register_parts(key.clone(), parts(adapter, None))
        .unwrap();
    // Registering the same context again is fine; a different one is refused.
    registry.register(a.clone()).unwrap();
    let other = registry
        .register_parts(key.clone(), parts(adapter, None))
        .unwrap_err();
    assert!(matches!(other, Error::WrongContext { .. }), "{other}");
    assert!(other.to_string().contains("reg"), "{other}");

    // Unregister: wrong context, then success, then not found.
    let stranger = Registry::new()
        .register_parts(key.clone(), parts(adapter, None))
        .unwrap();
    let e = registry.unregister(&stranger).unwrap_err();
    assert!(matches!(e, Error::WrongContext { .. }), "{e}");
    registry.unregister(&a).unwrap();
    let e = registry.unregister(&a).unwrap_err();
    assert!(matches!(e, Error::NotFound { .. }), "{e}");
    assert!(e.to_string().contains("{token \"reg\", group 3}"), "{e}");
    // The holder still has a working device.
    assert_eq!(
        vk_core::selftest::run_saxpy(a.device(), 64)
            .unwrap()
            .mismatches,
        0
    );
    assert_no_validation_errors(adapter.instance());
}

#[test]
fn an_external_device_is_borrowed_and_left_alive() {
    let Some(adapter) = adapter("external_device") else {
        return;
    };
    let family = adapter
        .capabilities()
        .queue_family_with(QueueCaps::COMPUTE)
        .unwrap()
        .index;
    let priorities = [1.0f32];
    let queues = [vk::DeviceQueueCreateInfo::default()
        .queue_family_index(family)
        .queue_priorities(&priorities)];
    let instance = adapter.instance().raw();
    // SAFETY: valid create info on a live physical device.
    let app_device = unsafe {
        instance.create_device(
            adapter.raw(),
            &vk::DeviceCreateInfo::default().queue_create_infos(&queues),
            None,
        )
    }
    .unwrap();
    let released = Arc::new(AtomicBool::new(false));
    let flag = released.clone();
    let enabled = Enabled {
        api_version: adapter.capabilities().api_version,
        extensions: Default::default(),
        features: Features::empty(),
        queue_family: family,
        queue_caps: QueueCaps::empty(),
    };
    // SAFETY: the app device is live until destroyed below, after the callback ran.
    let device = unsafe {
        vk_core::Device::from_raw(
            adapter,
            app_device.handle(),
            enabled,
            0,
            None,
            Some(Box::new(move || flag.store(true, Ordering::SeqCst))),
        )
    }
    .unwrap();
    let registry = Registry::new();
    let key = SharedKey::new("app", 9);
    // An owned device is refused by register_external.
    let owned = parts(adapter, None);
    assert!(registry.register_external(key.clone(), owned).is_err());
    let ctx = registry
        .register_external(
            key.clone(),
            ContextParts {
                device,
                anchor: None,
            },
        )
        .unwrap();
    assert!(ctx.is_external());
    assert_eq!(ctx.queue_family(), family);
    let opts = SharingOptions {
        mode: Mode::LookupOnly,
        token: "app".into(),
        group_id: 9,
    };
    let lease = acquire_in(
        &registry,
        &opts,
        &Requirements::new("user"),
        "user",
        &InstanceDesc::default(),
    )
    .unwrap()
    .unwrap();
    assert!(Arc::ptr_eq(lease.context(), &ctx));
    assert_eq!(
        vk_core::selftest::run_saxpy(lease.device(), 100)
            .unwrap()
            .mismatches,
        0
    );
    drop(lease);
    registry.unregister(&ctx).unwrap();
    drop(ctx);
    assert!(released.load(Ordering::SeqCst));
    // SAFETY: the application's device is still alive; destroy it as its owner.
    unsafe {
        app_device.device_wait_idle().unwrap();
        app_device.destroy_device(None);
    }
    assert_no_validation_errors(adapter.instance());
}

#[test]
fn every_mode_error_says_what_was_found() {
    let Some(adapter) = adapter("mode_errors") else {
        return;
    };
    let registry = Registry::new();
    let desc = InstanceDesc {
        validation: true,
        ..InstanceDesc::default()
    };
    let req = Requirements::new("modes");
    let opts = |mode| SharingOptions {
        mode,
        token: "modes".into(),
        group_id: 1,
    };
    // disabled: nothing happens.
    assert!(
        acquire_in(&registry, &opts(Mode::Disabled), &req, "d", &desc)
            .unwrap()
            .is_none()
    );
    assert!(registry.is_empty());
    // lookup_only miss.
    let e = acquire_in(&registry, &opts(Mode::LookupOnly), &req, "d", &desc).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("no shared context is registered under {token \"modes\", group 1}"),
        "{text}"
    );
    assert!(text.contains("lookup_only"), "{text}");
    // create_only creates, then a second create_only hits and says what it found.
    let lease = acquire_in(&registry, &opts(Mode::CreateOnly), &req, "d", &desc)
        .unwrap()
        .unwrap();
    let e = acquire_in(&registry, &opts(Mode::CreateOnly), &req, "d", &desc).unwrap_err();
    let text = e.to_string();
    assert!(text.contains("create_only"), "{text}");
    assert!(
        text.contains(&lease.context().capabilities().name),
        "{text}"
    );
    assert!(
        text.contains(&format!("generation {}", lease.context().generation())),
        "{text}"
    );
    // lookup_or_create and lookup_only find it.
    for mode in [Mode::LookupOrCreate, Mode::LookupOnly] {
        let l = acquire_in(&registry, &opts(mode), &req, "d", &desc)
            .unwrap()
            .unwrap();
        assert!(Arc::ptr_eq(l.context(), lease.context()));
    }
    // A delegate whose requirements the shared device lacks gets them named.
    let picky = Requirements::new("picky").require_extension(c"VK_VKDELEGATE_absent");
    let e = acquire_in(&registry, &opts(Mode::LookupOnly), &picky, "d", &desc).unwrap_err();
    assert!(e.to_string().contains("VK_VKDELEGATE_absent"), "{e}");
    // Invalid options.
    let e = SharingOptions::parse([("shared.mode", "always")]).unwrap_err();
    assert!(e.to_string().contains("shared.mode"));
    let e =
        SharingOptions::parse([("shared.mode", "create_only"), ("shared.token", "")]).unwrap_err();
    assert!(e.to_string().contains("shared.token"));
    drop(lease);
    registry.clear();
    assert_no_validation_errors(adapter.instance());
    // Contexts created by acquire_in have their own validated instance.
    let _ = Instance::new(&desc).map(|i| assert_no_validation_errors(&i));
}

#[test]
fn two_delegates_submit_from_two_threads_on_one_queue() {
    let Some(adapter) = adapter("two_threads_one_queue") else {
        return;
    };
    let registry = Registry::new();
    let key = SharedKey::new("two", 0);
    let ctx = registry
        .lookup_or_create(&key, || Ok(parts(adapter, None)))
        .unwrap()
        .context;
    let leases = [ctx.lease("delegate-a"), ctx.lease("delegate-b")];
    assert_eq!(ctx.leases_taken(), 2);
    let results: Mutex<HashMap<String, u32>> = Mutex::new(HashMap::new());
    std::thread::scope(|s| {
        for lease in &leases {
            let results = &results;
            s.spawn(move || {
                let mut bad = 0;
                for n in [257, 1000, 4096, 31, 7777] {
                    bad += vk_core::selftest::run_saxpy(lease.device(), n)
                        .unwrap()
                        .mismatches;
                }
                results
                    .lock()
                    .unwrap()
                    .insert(lease.holder().to_owned(), bad);
            });
        }
    });
    let results = results.into_inner().unwrap();
    assert_eq!(results.len(), 2);
    assert!(results.values().all(|&b| b == 0), "{results:?}");
    let stats = ctx.device().queue().stats();
    assert!(stats.submissions() >= 10);
    assert_eq!(
        stats.waits_while_held(),
        0,
        "no fence wait under a queue guard"
    );
    assert!(leases[0].device().same_as(leases[1].device()));
    assert_no_validation_errors(adapter.instance());
}

#[test]
fn waits_and_registry_use_under_a_queue_guard_are_caught() {
    let Some(adapter) = adapter("instrumentation") else {
        return;
    };
    let registry = Arc::new(Registry::new());
    let ctx: Arc<SharedContext> = registry
        .lookup_or_create(&SharedKey::new("inst", 0), || Ok(parts(adapter, None)))
        .unwrap()
        .context;
    let lease = ctx.lease("instrumented");
    let device = lease.device().clone();
    // SAFETY: a fresh, signaled fence of this device, destroyed below.
    let fence = unsafe {
        device.raw().create_fence(
            &vk::FenceCreateInfo::default().flags(vk::FenceCreateFlags::SIGNALED),
            None,
        )
    }
    .unwrap();
    let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: `fence` belongs to `device`.
        lease.submit(|_guard| unsafe { device.wait_for_fence(fence, 0) })
    }));
    assert_eq!(device.queue().stats().waits_while_held(), 1);
    // In debug builds the wait under the guard is also a panic.
    assert_eq!(waited.is_err(), cfg!(debug_assertions));
    if cfg!(debug_assertions) {
        let reg = registry.clone();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            lease.submit(|_guard| reg.len())
        }));
        assert!(
            r.is_err(),
            "taking the registry lock under a queue guard breaks the lock order"
        );
    }
    // The queue lock was released by the unwinding guards: submitting works again.
    assert_eq!(
        vk_core::selftest::run_saxpy(&device, 10)
            .unwrap()
            .mismatches,
        0
    );
    // SAFETY: no work uses the fence.
    unsafe { device.raw().destroy_fence(fence, None) };
    assert_no_validation_errors(adapter.instance());
}
