//! The registry of shared contexts.
//!
//! Invariant: no context (and so no anchor or device) is ever dropped while the registry lock
//! is held. Every operation collects what it removes into a list that is dropped after the
//! lock is released (`Registry::locked`); `SharedContext::drop` asserts it in debug builds.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use crate::context::{ContextParts, SharedContext};
use crate::error::Error;
use crate::key::SharedKey;
use crate::lock_order::RegistryHeld;
use crate::sync::{self, Condvar, Mutex, MutexGuard, OnceLock};

/// What the registry keeps under a key: a cheap, clonable handle on a context. The public
/// [`Registry`] keeps `Arc<SharedContext>`; the `loom` models keep a stand-in that needs no
/// device. The protocol (one creator per key, waiters, stale replacement, nothing dropped
/// under the lock) lives in [`Core`], once, for both.
pub(crate) trait Entry: Clone + Send + Sync {
    /// What a creator returns.
    type Parts;
    /// The context a successful creator's parts become.
    fn from_parts(key: &SharedKey, parts: Self::Parts) -> Self;
    /// The key it was created or registered under.
    fn key(&self) -> &SharedKey;
    /// Whether it may still be used.
    fn is_valid(&self) -> bool;
    /// Its generation (named in errors).
    fn generation(&self) -> u64;
    /// Whether both handles name the same context.
    fn same(&self, other: &Self) -> bool;
}

impl Entry for Arc<SharedContext> {
    type Parts = ContextParts;

    fn from_parts(key: &SharedKey, parts: ContextParts) -> Self {
        Arc::new(SharedContext::new(key.clone(), parts, false))
    }

    fn key(&self) -> &SharedKey {
        SharedContext::key(self)
    }

    fn is_valid(&self) -> bool {
        SharedContext::is_valid(self)
    }

    fn generation(&self) -> u64 {
        SharedContext::generation(self)
    }

    fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(self, other)
    }
}

/// A creation in flight: waiters block on it, the creator completes it.
struct Pending<C> {
    result: Mutex<Option<Result<C, Error>>>,
    done: Condvar,
}

impl<C: Entry> Pending<C> {
    fn new() -> sync::Arc<Pending<C>> {
        sync::Arc::new(Pending {
            result: Mutex::new(None),
            done: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Option<Result<C, Error>>> {
        self.result.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait(&self) -> Result<C, Error> {
        let mut r = self.lock();
        loop {
            if let Some(result) = r.as_ref() {
                return result.clone();
            }
            r = self.done.wait(r).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn complete(&self, result: Result<C, Error>) {
        let mut r = self.lock();
        *r = Some(result);
        drop(r);
        self.done.notify_all();
    }
}

enum Slot<C> {
    Ready(C),
    Creating(sync::Arc<Pending<C>>),
}

type Map<C> = HashMap<SharedKey, Slot<C>>;

/// What an operation removed from the map, dropped after the lock is released.
type Garbage<C> = Vec<Slot<C>>;

/// The registry's protocol over any [`Entry`]; [`Registry`] is `Core<Arc<SharedContext>>`.
pub(crate) struct Core<C> {
    map: Mutex<Map<C>>,
}

impl<C> Default for Core<C> {
    fn default() -> Self {
        Core {
            map: Mutex::new(HashMap::new()),
        }
    }
}

/// A registry of shared contexts keyed by [`SharedKey`].
///
/// Most programs use the process-wide [`global`] registry; separate registries are useful in
/// tests.
#[derive(Default)]
pub struct Registry {
    core: Core<Arc<SharedContext>>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

static GLOBAL: OnceLock<Registry> = OnceLock::new();

/// The process-wide registry, created on first use (never, unless sharing is used).
pub fn global() -> &'static Registry {
    GLOBAL.get_or_init(Registry::default)
}

/// Whether the process-wide registry exists yet.
pub fn global_exists() -> bool {
    GLOBAL.get().is_some()
}

/// Outcome of [`Registry::lookup_or_create`].
#[derive(Debug, Clone)]
pub struct Acquired {
    /// The context.
    pub context: Arc<SharedContext>,
    /// Whether this call ran the creator.
    pub created: bool,
}

/// Completes a pending creation on every exit path, including a panicking creator, so that
/// waiters are never orphaned and the key is left free.
struct CreationGuard<'r, C: Entry> {
    core: &'r Core<C>,
    key: SharedKey,
    pending: sync::Arc<Pending<C>>,
    finished: bool,
}

impl<C: Entry> CreationGuard<'_, C> {
    fn finish(&mut self, result: Result<C, Error>) {
        self.finished = true;
        self.core.locked(|map, garbage| {
            let ours = matches!(map.get(&self.key), Some(Slot::Creating(p)) if sync::Arc::ptr_eq(p, &self.pending));
            if ours {
                // A clear() that ran meanwhile removed the slot: then the result is handed to
                // the callers but not registered.
                let old = match &result {
                    Ok(ctx) => map.insert(self.key.clone(), Slot::Ready(ctx.clone())),
                    Err(_) => map.remove(&self.key),
                };
                garbage.extend(old);
            }
        });
        self.pending.complete(result);
    }
}

impl<C: Entry> Drop for CreationGuard<'_, C> {
    fn drop(&mut self) {
        if !self.finished {
            let key = self.key.clone();
            self.finish(Err(Error::CreateFailed {
                source: Arc::new(vk_core::Error::InvalidArgument(format!(
                    "the creator of the shared context under {key} panicked"
                ))),
                key,
            }));
        }
    }
}

impl<C: Entry> Core<C> {
    /// Runs `f` under the registry lock; whatever `f` puts in the garbage list is dropped
    /// after the lock is released.
    fn locked<R>(&self, f: impl FnOnce(&mut Map<C>, &mut Garbage<C>) -> R) -> R {
        let mut garbage = Garbage::new();
        let result = {
            let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
            let _held = RegistryHeld::enter();
            f(&mut map, &mut garbage)
        };
        drop(garbage);
        result
    }

    /// See [`Registry::lookup`].
    pub(crate) fn lookup(&self, key: &SharedKey) -> Option<C> {
        enum Step<C: Entry> {
            Found(Option<C>),
            Wait(sync::Arc<Pending<C>>),
        }
        loop {
            let step = self.locked(|map, garbage| match map.get(key) {
                Some(Slot::Ready(c)) if c.is_valid() => Step::Found(Some(c.clone())),
                Some(Slot::Ready(_)) => {
                    garbage.extend(map.remove(key));
                    Step::Found(None)
                }
                Some(Slot::Creating(p)) => Step::Wait(p.clone()),
                None => Step::Found(None),
            });
            match step {
                Step::Found(found) => return found,
                Step::Wait(p) => match p.wait() {
                    Ok(c) if c.is_valid() => return Some(c),
                    Ok(_) => continue,
                    Err(_) => return None,
                },
            }
        }
    }

    /// See [`Registry::lookup_or_create`]; the flag says whether this call ran the creator.
    pub(crate) fn lookup_or_create<F>(&self, key: &SharedKey, create: F) -> Result<(C, bool), Error>
    where
        F: FnOnce() -> Result<C::Parts, vk_core::Error>,
    {
        enum Step<C: Entry> {
            Found(C),
            Wait(sync::Arc<Pending<C>>),
            Create(sync::Arc<Pending<C>>),
        }
        let mut create = Some(create);
        loop {
            let step = self.locked(|map, garbage| match map.get(key) {
                Some(Slot::Ready(c)) if c.is_valid() => Step::Found(c.clone()),
                Some(Slot::Creating(p)) => Step::Wait(p.clone()),
                _ => {
                    let pending = Pending::new();
                    // Replaces a stale context, if any; it goes to the garbage list.
                    garbage.extend(map.insert(key.clone(), Slot::Creating(pending.clone())));
                    Step::Create(pending)
                }
            });
            match step {
                Step::Found(context) => return Ok((context, false)),
                Step::Wait(p) => match p.wait() {
                    Ok(context) if context.is_valid() => return Ok((context, false)),
                    Ok(_) => continue,
                    Err(e) => return Err(e),
                },
                Step::Create(pending) => {
                    let Some(create) = create.take() else {
                        // Unreachable: only one Create step per call returns.
                        continue;
                    };
                    let mut guard = CreationGuard {
                        core: self,
                        key: key.clone(),
                        pending,
                        finished: false,
                    };
                    let result = create()
                        .map(|parts| C::from_parts(key, parts))
                        .map_err(|e| Error::CreateFailed {
                            key: key.clone(),
                            source: Arc::new(e),
                        });
                    guard.finish(result.clone());
                    return result.map(|context| (context, true));
                }
            }
        }
    }

    /// See [`Registry::register`].
    pub(crate) fn register(&self, context: C) -> Result<(), Error> {
        let key = context.key().clone();
        self.locked(|map, garbage| match map.get(&key) {
            Some(Slot::Ready(c)) if c.same(&context) => Ok(()),
            Some(Slot::Ready(c)) if c.is_valid() => Err(Error::WrongContext {
                key: key.clone(),
                registered: c.generation(),
                given: context.generation(),
            }),
            Some(Slot::Creating(_)) => Err(Error::Busy { key: key.clone() }),
            _ => {
                garbage.extend(map.insert(key.clone(), Slot::Ready(context.clone())));
                Ok(())
            }
        })
    }

    /// See [`Registry::unregister`].
    pub(crate) fn unregister(&self, context: &C) -> Result<(), Error> {
        let key = context.key().clone();
        self.locked(|map, garbage| match map.get(&key) {
            Some(Slot::Ready(c)) if c.same(context) => {
                garbage.extend(map.remove(&key));
                Ok(())
            }
            Some(Slot::Ready(c)) => Err(Error::WrongContext {
                key: key.clone(),
                registered: c.generation(),
                given: context.generation(),
            }),
            Some(Slot::Creating(_)) | None => Err(Error::NotFound {
                key: key.clone(),
                hint: " (nothing to unregister)",
            }),
        })
    }

    /// Number of keys with a context or a creation in flight.
    pub(crate) fn len(&self) -> usize {
        self.locked(|map, _| map.len())
    }

    /// See [`Registry::clear`].
    pub(crate) fn clear(&self) {
        self.locked(|map, garbage| garbage.extend(map.drain().map(|(_, slot)| slot)));
    }
}

impl Registry {
    /// A new, empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The valid context under `key`. Waits for a creation in flight. A stale (invalidated)
    /// context is removed and reported as absent.
    pub fn lookup(&self, key: &SharedKey) -> Option<Arc<SharedContext>> {
        self.core.lookup(key)
    }

    /// The valid context under `key`, created by `create` when there is none. The creator runs
    /// once per key: concurrent callers wait and receive the same context, or the same error;
    /// a failed creation leaves the key free for a retry. A stale context is replaced (and
    /// dropped outside the lock).
    pub fn lookup_or_create<F>(&self, key: &SharedKey, create: F) -> Result<Acquired, Error>
    where
        F: FnOnce() -> Result<ContextParts, vk_core::Error>,
    {
        self.core
            .lookup_or_create(key, create)
            .map(|(context, created)| Acquired { context, created })
    }

    /// Registers a context made elsewhere under `key`. A valid context already under the key
    /// is refused (unless it is this one); a stale one is replaced.
    pub fn register(&self, context: Arc<SharedContext>) -> Result<(), Error> {
        self.core.register(context)
    }

    /// Makes a context from `parts` (a device `vk-core` created) and registers it.
    pub fn register_parts(
        &self,
        key: SharedKey,
        parts: ContextParts,
    ) -> Result<Arc<SharedContext>, Error> {
        let context = Arc::new(SharedContext::new(key, parts, false));
        self.register(context.clone())?;
        Ok(context)
    }

    /// Registers an application-owned device (adopted with `vk_core::Device::from_raw`, with
    /// the application's queue lock if it submits too). It is borrowed: nothing here destroys
    /// it.
    pub fn register_external(
        &self,
        key: SharedKey,
        parts: ContextParts,
    ) -> Result<Arc<SharedContext>, Error> {
        if parts.device.is_owned() {
            return Err(Error::CreateFailed {
                source: Arc::new(vk_core::Error::InvalidArgument(
                    "register_external needs an adopted device (vk_core::Device::from_raw); \
                     this one is owned by vk-core: use register_parts"
                        .into(),
                )),
                key,
            });
        }
        let context = Arc::new(SharedContext::new(key, parts, true));
        self.register(context.clone())?;
        Ok(context)
    }

    /// Removes `context` from the registry. Holders keep it (and its anchor) alive; only
    /// discoverability ends.
    pub fn unregister(&self, context: &Arc<SharedContext>) -> Result<(), Error> {
        self.core.unregister(context)
    }

    /// Number of keys with a context or a creation in flight.
    pub fn len(&self) -> usize {
        self.core.len()
    }

    /// Whether the registry is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes everything (for tests). A creation in flight is not orphaned: it completes, its
    /// caller and waiters receive its context, which is simply not registered.
    pub fn clear(&self) {
        self.core.clear();
    }
}
