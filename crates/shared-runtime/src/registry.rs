//! The registry of shared contexts.
//!
//! Invariant: no context (and so no anchor or device) is ever dropped while the registry lock
//! is held. Every operation collects what it removes into a list that is dropped after the
//! lock is released (`Registry::locked`); `SharedContext::drop` asserts it in debug builds.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

use crate::context::{ContextParts, SharedContext};
use crate::error::Error;
use crate::key::SharedKey;
use crate::lock_order::RegistryHeld;

/// A creation in flight: waiters block on it, the creator completes it.
struct Pending {
    result: Mutex<Option<Result<Arc<SharedContext>, Error>>>,
    done: Condvar,
}

impl Pending {
    fn new() -> Arc<Pending> {
        Arc::new(Pending {
            result: Mutex::new(None),
            done: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Option<Result<Arc<SharedContext>, Error>>> {
        self.result.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait(&self) -> Result<Arc<SharedContext>, Error> {
        let mut r = self.lock();
        loop {
            if let Some(result) = r.as_ref() {
                return result.clone();
            }
            r = self.done.wait(r).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn complete(&self, result: Result<Arc<SharedContext>, Error>) {
        let mut r = self.lock();
        *r = Some(result);
        drop(r);
        self.done.notify_all();
    }
}

enum Slot {
    Ready(Arc<SharedContext>),
    Creating(Arc<Pending>),
}

type Map = HashMap<SharedKey, Slot>;

/// What an operation removed from the map, dropped after the lock is released.
type Garbage = Vec<Slot>;

/// A registry of shared contexts keyed by [`SharedKey`].
///
/// Most programs use the process-wide [`global`] registry; separate registries are useful in
/// tests.
#[derive(Default)]
pub struct Registry {
    map: Mutex<Map>,
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
struct CreationGuard<'r> {
    registry: &'r Registry,
    key: SharedKey,
    pending: Arc<Pending>,
    finished: bool,
}

impl CreationGuard<'_> {
    fn finish(&mut self, result: Result<Arc<SharedContext>, Error>) {
        self.finished = true;
        self.registry.locked(|map, garbage| {
            let ours = matches!(map.get(&self.key), Some(Slot::Creating(p)) if Arc::ptr_eq(p, &self.pending));
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

impl Drop for CreationGuard<'_> {
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

impl Registry {
    /// A new, empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `f` under the registry lock; whatever `f` puts in the garbage list is dropped
    /// after the lock is released.
    fn locked<R>(&self, f: impl FnOnce(&mut Map, &mut Garbage) -> R) -> R {
        let mut garbage = Garbage::new();
        let result = {
            let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
            let _held = RegistryHeld::enter();
            f(&mut map, &mut garbage)
        };
        drop(garbage);
        result
    }

    /// The valid context under `key`. Waits for a creation in flight. A stale (invalidated)
    /// context is removed and reported as absent.
    pub fn lookup(&self, key: &SharedKey) -> Option<Arc<SharedContext>> {
        enum Step {
            Found(Option<Arc<SharedContext>>),
            Wait(Arc<Pending>),
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

    /// The valid context under `key`, created by `create` when there is none. The creator runs
    /// once per key: concurrent callers wait and receive the same context, or the same error;
    /// a failed creation leaves the key free for a retry. A stale context is replaced (and
    /// dropped outside the lock).
    pub fn lookup_or_create<F>(&self, key: &SharedKey, create: F) -> Result<Acquired, Error>
    where
        F: FnOnce() -> Result<ContextParts, vk_core::Error>,
    {
        enum Step {
            Found(Arc<SharedContext>),
            Wait(Arc<Pending>),
            Create(Arc<Pending>),
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
                Step::Found(context) => {
                    return Ok(Acquired {
                        context,
                        created: false,
                    });
                }
                Step::Wait(p) => match p.wait() {
                    Ok(context) if context.is_valid() => {
                        return Ok(Acquired {
                            context,
                            created: false,
                        });
                    }
                    Ok(_) => continue,
                    Err(e) => return Err(e),
                },
                Step::Create(pending) => {
                    let Some(create) = create.take() else {
                        // Unreachable: only one Create step per call returns.
                        continue;
                    };
                    let mut guard = CreationGuard {
                        registry: self,
                        key: key.clone(),
                        pending,
                        finished: false,
                    };
                    let result = create()
                        .map(|parts| Arc::new(SharedContext::new(key.clone(), parts, false)))
                        .map_err(|e| Error::CreateFailed {
                            key: key.clone(),
                            source: Arc::new(e),
                        });
                    guard.finish(result.clone());
                    return result.map(|context| Acquired {
                        context,
                        created: true,
                    });
                }
            }
        }
    }

    /// Registers a context made elsewhere under `key`. A valid context already under the key
    /// is refused (unless it is this one); a stale one is replaced.
    pub fn register(&self, context: Arc<SharedContext>) -> Result<(), Error> {
        let key = context.key().clone();
        self.locked(|map, garbage| match map.get(&key) {
            Some(Slot::Ready(c)) if Arc::ptr_eq(c, &context) => Ok(()),
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
        let key = context.key().clone();
        self.locked(|map, garbage| match map.get(&key) {
            Some(Slot::Ready(c)) if Arc::ptr_eq(c, context) => {
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
    pub fn len(&self) -> usize {
        self.locked(|map, _| map.len())
    }

    /// Whether the registry is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes everything (for tests). A creation in flight is not orphaned: it completes, its
    /// caller and waiters receive its context, which is simply not registered.
    pub fn clear(&self) {
        self.locked(|map, garbage| garbage.extend(map.drain().map(|(_, slot)| slot)));
    }
}
