//! `loom` models of the registry's protocol (`RUSTFLAGS="--cfg loom"`, release build;
//! `cargo xtask` runs them in their own target directory).
//!
//! The models run [`Core`], the registry's one implementation of the protocol, over a
//! stand-in context that needs no device. Its anchor's `Drop` re-enters the registry (it takes
//! the registry lock), so an anchor dropped under the lock is reported by loom as a deadlock;
//! it also asserts the lock-order flag. Loom checks every Arc is freed at the end of each run
//! and that no run leaves a thread blocked forever.
//!
//! `LOOM_MAX_PREEMPTIONS` bounds the preemptions explored (default here: 5).

#![allow(clippy::unwrap_used)]

use std::time::Instant;

use crate::error::Error;
use crate::key::SharedKey;
use crate::lock_order;
use crate::registry::{Core, Entry};
use crate::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use crate::sync::{Arc, thread};

/// Runs `model` under every interleaving loom explores and prints how many it ran.
fn check(name: &str, model: impl Fn() + Sync + Send + 'static) {
    static ITERATIONS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(5);
    }
    let bound = builder.preemption_bound;
    let before = ITERATIONS.load(std::sync::atomic::Ordering::Relaxed);
    let start = Instant::now();
    builder.check(move || {
        ITERATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        model();
    });
    // Tests in one binary share the counter: with several test threads the count is only an
    // upper bound; `--test-threads=1` makes it exact.
    let iterations = ITERATIONS.load(std::sync::atomic::Ordering::Relaxed) - before;
    eprintln!(
        "loom model {name}: {iterations} iterations in {:.2?} (preemption bound {bound:?})",
        start.elapsed()
    );
}

type Registry = Arc<Core<Handle>>;

/// A stand-in for a shared context.
struct Fake {
    key: SharedKey,
    /// Which creator made it (0: the setup).
    made_by: u64,
    valid: AtomicBool,
    _anchor: Option<Anchor>,
}

impl Drop for Fake {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            assert!(
                !lock_order::registry_held(),
                "a context was dropped under the registry lock"
            );
        }
    }
}

/// The registry's handle on a [`Fake`], as `Arc<SharedContext>` is on a real one.
#[derive(Clone)]
struct Handle(Arc<Fake>);

impl Handle {
    fn invalidate(&self) {
        self.0.valid.store(false, SeqCst);
    }
}

/// What a stand-in creator returns.
struct Parts {
    made_by: u64,
    anchor: Option<Anchor>,
}

impl Parts {
    fn new(made_by: u64) -> Parts {
        Parts {
            made_by,
            anchor: None,
        }
    }
}

impl Entry for Handle {
    type Parts = Parts;

    fn from_parts(key: &SharedKey, parts: Parts) -> Self {
        Handle(Arc::new(Fake {
            key: key.clone(),
            made_by: parts.made_by,
            valid: AtomicBool::new(true),
            _anchor: parts.anchor,
        }))
    }

    fn key(&self) -> &SharedKey {
        &self.0.key
    }

    fn is_valid(&self) -> bool {
        self.0.valid.load(SeqCst)
    }

    fn generation(&self) -> u64 {
        self.0.made_by
    }

    fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// A lifetime anchor whose teardown re-enters the registry, as backend teardown may.
struct Anchor {
    registry: Registry,
    drops: Arc<AtomicUsize>,
}

impl Drop for Anchor {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        assert!(
            !lock_order::registry_held(),
            "an anchor was dropped under the registry lock"
        );
        // Takes the registry lock: under it, this would never return (loom: deadlock).
        let _ = self.registry.len();
        self.drops.fetch_add(1, SeqCst);
    }
}

fn key() -> SharedKey {
    SharedKey::new("loom", 0)
}

fn registry() -> Registry {
    Arc::new(Core::default())
}

/// A creator that counts its runs and makes a context tagged `made_by`.
fn creator(
    runs: &Arc<AtomicUsize>,
    made_by: u64,
) -> impl FnOnce() -> Result<Parts, vk_core::Error> + use<> {
    let runs = runs.clone();
    move || {
        runs.fetch_add(1, SeqCst);
        Ok(Parts::new(made_by))
    }
}

/// A context made in the setup (no other thread yet) whose anchor counts its drops.
fn anchored(registry: &Registry, drops: &Arc<AtomicUsize>) -> Handle {
    let anchor = Anchor {
        registry: registry.clone(),
        drops: drops.clone(),
    };
    let (context, created) = registry
        .lookup_or_create(&key(), move || {
            Ok(Parts {
                made_by: 0,
                anchor: Some(anchor),
            })
        })
        .unwrap();
    assert!(created);
    context
}

/// (1) One creator, one waiter: the creator runs once; both get the same context.
#[test]
fn lookup_or_create_runs_the_creator_once() {
    check("lookup_or_create_runs_the_creator_once", || {
        let registry = registry();
        let runs = Arc::new(AtomicUsize::new(0));
        let other = {
            let (registry, create) = (registry.clone(), creator(&runs, 1));
            thread::spawn(move || registry.lookup_or_create(&key(), create).unwrap())
        };
        let (mine, mine_created) = registry
            .lookup_or_create(&key(), creator(&runs, 2))
            .unwrap();
        let (theirs, theirs_created) = other.join().unwrap();

        assert_eq!(runs.load(SeqCst), 1, "the creator ran once");
        assert!(mine.same(&theirs), "both callers got the same context");
        assert!(mine_created != theirs_created, "exactly one caller created");
        assert!(registry.lookup(&key()).unwrap().same(&mine));
        drop((mine, theirs));
        // The registry is the last holder: clear() drops the context outside the lock.
        registry.clear();
    });
}

/// (2) A failing creator wakes its waiter, which gets the same error; a caller that comes
/// after the failure finds the key free and creates.
#[test]
fn creator_failure_wakes_the_waiter() {
    check("creator_failure_wakes_the_waiter", || {
        let registry = registry();
        let failed = Arc::new(AtomicUsize::new(0));
        let succeeded = Arc::new(AtomicUsize::new(0));
        let failing = {
            let (registry, failed) = (registry.clone(), failed.clone());
            thread::spawn(move || {
                registry.lookup_or_create(&key(), move || {
                    failed.fetch_add(1, SeqCst);
                    Err(vk_core::Error::InvalidArgument("no device".into()))
                })
            })
        };
        let other = registry.lookup_or_create(&key(), creator(&succeeded, 2));
        let first = failing.join().unwrap();

        let (failed, succeeded) = (failed.load(SeqCst), succeeded.load(SeqCst));
        assert!(
            failed <= 1 && succeeded <= 1,
            "each creator ran at most once"
        );
        match (first, other) {
            // The other caller waited on the failed creation: the same error, the key free.
            (Err(a), Err(b)) => {
                assert!(matches!(a, Error::CreateFailed { .. }));
                assert_eq!(a.to_string(), b.to_string());
                assert_eq!((failed, succeeded), (1, 0));
                assert_eq!(registry.len(), 0, "a failure leaves the key free");
            }
            // The other caller came after the failure and became the creator.
            (Err(a), Ok((context, created))) => {
                assert!(matches!(a, Error::CreateFailed { .. }));
                assert!(created);
                assert_eq!((failed, succeeded), (1, 1));
                assert!(registry.lookup(&key()).unwrap().same(&context));
            }
            // The failing creator never ran: its caller waited on the other creation.
            (Ok((a, a_created)), Ok((b, b_created))) => {
                assert!(!a_created && b_created);
                assert!(a.same(&b));
                assert_eq!((failed, succeeded), (0, 1));
            }
            (Ok(_), Err(e)) => panic!("the successful creator's caller got {e}"),
        }
        registry.clear();
    });
}

/// (3) Unregister while another thread holds a lease: the lease stays valid; the anchor is
/// dropped once, after the last holder, outside the registry lock (its teardown re-enters
/// the registry).
#[test]
fn unregister_keeps_leases_and_drops_the_anchor_after_the_last_holder() {
    check("unregister_while_leased", || {
        let registry = registry();
        let drops = Arc::new(AtomicUsize::new(0));
        let lease = anchored(&registry, &drops);
        let holder = {
            let drops = drops.clone();
            thread::spawn(move || {
                assert!(lease.is_valid(), "the lease stays valid");
                assert_eq!(lease.key(), &key());
                assert_eq!(drops.load(SeqCst), 0, "anchor dropped under a holder");
                drop(lease);
            })
        };
        let found = registry.lookup(&key()).unwrap();
        registry.unregister(&found).unwrap();
        assert!(registry.lookup(&key()).is_none(), "unregistered");
        assert!(found.is_valid());
        assert_eq!(drops.load(SeqCst), 0, "anchor dropped under a holder");
        drop(found);
        holder.join().unwrap();

        assert_eq!(drops.load(SeqCst), 1, "the anchor is dropped once");
        assert_eq!(registry.len(), 0);
    });
}

/// (4) A stale context is replaced by lookup_or_create: one creator, both callers get the
/// new context, the stale one (whose last holder is the registry) is dropped once, outside
/// the lock.
#[test]
fn stale_replacement_drops_the_old_context_outside_the_lock() {
    check("stale_replacement", || {
        let registry = registry();
        let drops = Arc::new(AtomicUsize::new(0));
        anchored(&registry, &drops).invalidate();
        let runs = Arc::new(AtomicUsize::new(0));
        let other = {
            let (registry, create) = (registry.clone(), creator(&runs, 1));
            thread::spawn(move || registry.lookup_or_create(&key(), create).unwrap())
        };
        let (mine, mine_created) = registry
            .lookup_or_create(&key(), creator(&runs, 2))
            .unwrap();
        let (theirs, theirs_created) = other.join().unwrap();

        assert_eq!(runs.load(SeqCst), 1, "one replacement");
        assert!(mine.same(&theirs) && mine_created != theirs_created);
        assert!(
            mine.is_valid() && mine.generation() != 0,
            "not the stale one"
        );
        assert_eq!(drops.load(SeqCst), 1, "the stale context is dropped once");
        drop((mine, theirs));
        registry.clear();
    });
}

/// (4b) The same with `lookup` racing the replacement: it removes the stale context itself
/// (and reports none) or waits for and returns the new one.
#[test]
fn stale_lookup_races_replacement() {
    check("stale_lookup_races_replacement", || {
        let registry = registry();
        let drops = Arc::new(AtomicUsize::new(0));
        anchored(&registry, &drops).invalidate();
        let runs = Arc::new(AtomicUsize::new(0));
        let creating = {
            let (registry, create) = (registry.clone(), creator(&runs, 1));
            thread::spawn(move || registry.lookup_or_create(&key(), create).unwrap())
        };
        let looked_up = registry.lookup(&key());
        let (created, was_created) = creating.join().unwrap();

        assert!(was_created);
        assert_eq!(runs.load(SeqCst), 1);
        if let Some(found) = looked_up {
            assert!(found.same(&created), "lookup returned the replacement");
        }
        assert_eq!(drops.load(SeqCst), 1, "the stale context is dropped once");
        drop(created);
        registry.clear();
    });
}

/// (5) clear() during a creation orphans nobody: the creator's caller gets its context, a
/// waiter gets the same one (or, arriving after the clear, creates its own); nobody hangs.
#[test]
fn clear_during_creation_orphans_nobody() {
    check("clear_during_creation", || {
        let registry = registry();
        let runs = Arc::new(AtomicUsize::new(0));
        let callers: Vec<_> = (1..=2)
            .map(|made_by| {
                let (registry, create) = (registry.clone(), creator(&runs, made_by));
                thread::spawn(move || registry.lookup_or_create(&key(), create).unwrap())
            })
            .collect();
        registry.clear();
        let results: Vec<(Handle, bool)> = callers.into_iter().map(|t| t.join().unwrap()).collect();

        let creators = results.iter().filter(|(_, created)| *created).count();
        assert!(creators >= 1);
        assert_eq!(
            runs.load(SeqCst),
            creators,
            "each creation reached its caller"
        );
        let [(a, _), (b, _)] = &results[..] else {
            unreachable!()
        };
        assert_eq!(
            a.same(b),
            creators == 1,
            "a waiter got its creator's context"
        );
        if let Some(registered) = registry.lookup(&key()) {
            assert!(registered.same(a) || registered.same(b));
        }
        drop(results);
        registry.clear();
    });
}
