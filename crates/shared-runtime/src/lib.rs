//! `shared-runtime`: one `VkInstance`, `VkDevice` and `VkQueue` shared by every delegate in the
//! process.
//!
//! - A [`Registry`] of [`SharedContext`]s keyed by [`SharedKey`] `{token, group_id}`:
//!   [`Registry::lookup`], [`Registry::lookup_or_create`] (the creator runs once per key;
//!   concurrent callers wait and get the same context or the same error; a failure leaves the
//!   key free), [`Registry::register`], [`Registry::register_external`] (an application-owned
//!   device, never destroyed here), [`Registry::unregister`] (holders keep the context alive),
//!   replacement of invalidated contexts, and [`Registry::clear`] for tests.
//! - Per delegate instance, at run time: [`SharingOptions`] parsed from string key/value pairs
//!   (`shared.mode`, `shared.token`, `shared.group_id`), and [`acquire()`], which honours the
//!   mode (`disabled`, `lookup_only`, `lookup_or_create`, `create_only`).
//! - Load order does not matter: whoever creates the shared device asks for the union of the
//!   requirements of every delegate compiled into the process ([`DELEGATE_REQUIREMENTS`]) that
//!   the device can meet; whoever reuses one checks its own requirements and gets an error
//!   naming what is missing.
//! - Queue access: every submission on the shared device goes through its queue guard
//!   (`vk_core::Queue::lock`), whoever submits; a [`Lease`] is a delegate instance's handle on
//!   the context, and [`Lease::submit`] takes the same guard with the lock-order check added.
//!   The guard is held only around the submission.
//!
//! Lock order (checked in debug builds, see [`lock_order`]): registry lock, then a pending
//! creation's lock, then a queue lock; no context or anchor is ever dropped under the registry
//! lock, and the registry lock is never taken while holding a queue guard.
//!
//! Nothing process-wide exists unless sharing is used: the global registry is created on the
//! first [`acquire()`] with sharing enabled (or the first call to [`global`]).
//!
//! What this crate does not do: it creates no command pools, fences or semaphores; each
//! delegate owns its own and waits only on them.

pub mod acquire;
pub mod context;
pub mod error;
pub mod key;
pub mod lock_order;
pub mod options;
pub mod registry;
mod sync;

#[cfg(all(test, loom))]
mod loom_models;

pub use acquire::{
    DELEGATE_REQUIREMENTS, DelegateRequirements, acquire, acquire_in, compiled_requirements,
    create_context, creation_requirements,
};
pub use context::{ContextParts, Lease, SharedContext};
pub use error::{Error, OptionsError};
pub use key::SharedKey;
pub use options::{Mode, SharingOptions};
pub use registry::{Acquired, Registry, global, global_exists};

/// Re-exported so delegates can register their requirements without a direct dependency.
pub use linkme;
