//! The lock order, checked in debug builds.
//!
//! 1. the registry lock (`Registry`'s map);
//! 2. a pending creation's result lock (taken only without the registry lock; never held while
//!    creating a device);
//! 3. a queue lock (`vk_core::QueueGuard`), held only around `vkQueueSubmit`.
//!
//! Rules: the registry lock is never taken while a queue guard is held, and nothing that can
//! run user code (a context's or anchor's `Drop`, a creator) runs under the registry lock.
//! Fence waits never happen under a queue guard (`vk_core::QueueStats::waits_while_held`).

use std::cell::Cell;

// Per thread (per modelled thread under `cfg(loom)`, whose threads share one OS thread).
#[cfg(not(loom))]
std::thread_local! {
    static REGISTRY_HELD: Cell<bool> = const { Cell::new(false) };
}
#[cfg(loom)]
loom::thread_local! {
    static REGISTRY_HELD: Cell<bool> = Cell::new(false);
}

/// Marks the registry lock held by this thread for the guard's lifetime.
pub(crate) struct RegistryHeld(());

impl RegistryHeld {
    pub(crate) fn enter() -> RegistryHeld {
        debug_assert!(
            vk_core::queue::held_on_this_thread() == 0,
            "lock order: the registry lock is taken while this thread holds a queue guard"
        );
        REGISTRY_HELD.with(|h| {
            debug_assert!(!h.get(), "lock order: the registry lock is taken twice");
            h.set(true);
        });
        RegistryHeld(())
    }
}

impl Drop for RegistryHeld {
    fn drop(&mut self) {
        REGISTRY_HELD.with(|h| h.set(false));
    }
}

/// Whether this thread holds the registry lock.
pub fn registry_held() -> bool {
    REGISTRY_HELD.with(Cell::get)
}

/// Debug-asserts that the registry lock is not held while doing `what`.
pub(crate) fn assert_registry_unlocked(what: &str) {
    debug_assert!(
        !registry_held(),
        "lock order: {what} while this thread holds the registry lock"
    );
    let _ = what;
}
