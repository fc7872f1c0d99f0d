//! The synchronisation primitives the registry is built on: `loom`'s under `cfg(loom)` (so the
//! models in `loom_models.rs` can explore every interleaving), the standard library's
//! otherwise. Normal builds get exactly `std::sync`.
//!
//! Contexts themselves are handed out as `std::sync::Arc<SharedContext>` (public API); only
//! the registry's own state (its map lock, pending creations, their condition variable and
//! the `Arc` that shares them, the lock-order flag) goes through here.

// Not every re-export is used by every build: the models use the atomics and `thread`.
#![allow(unused_imports)]

#[cfg(loom)]
pub(crate) use loom::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(loom)]
pub(crate) use loom::thread;
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::thread;

/// Atomics.
pub(crate) mod atomic {
    #[cfg(loom)]
    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
    #[cfg(not(loom))]
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
}

/// `loom` has no `OnceLock`: the process-wide registry is created with the standard library's
/// in every build (it is not part of the models, which use registries of their own).
pub(crate) use std::sync::OnceLock;
