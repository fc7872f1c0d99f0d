//! Scoped, serialized access to a `VkQueue`.
//!
//! Vulkan requires external synchronization of a queue: two threads must never call
//! `vkQueueSubmit` (or `vkQueueWaitIdle`, `vkQueueBindSparse`, ...) on one queue at once. Every
//! submission in this workspace goes through a [`QueueGuard`], obtained from [`Queue::lock`].
//! The lock is meant to be held only around the submission itself; [`held_on_this_thread`]
//! lets callers check, by instrumentation rather than timing, that no guard is held across a
//! wait (see [`crate::Device::wait_for_fence`]).

use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use ash::vk;

use crate::error::{VkError, VkResultExt};

/// A lock guarding a `VkQueue`, which an application that also submits to the queue can supply
/// so that its submissions and ours exclude each other.
///
/// # Safety
/// Implementations must provide mutual exclusion: after [`QueueLock::acquire`] returns and until
/// the matching [`QueueLock::release`], no other `acquire` on the same lock may return, and no
/// other code may use the queue the lock guards.
pub unsafe trait QueueLock: Send + Sync + 'static {
    /// Blocks until the queue is exclusively ours.
    fn acquire(&self);
    /// Gives the queue back.
    ///
    /// # Safety
    /// Must be called exactly once after each `acquire`, by the code that acquired it.
    unsafe fn release(&self);
}

/// The default lock: a mutex and a condition variable.
#[derive(Debug, Default)]
pub struct DefaultQueueLock {
    busy: Mutex<bool>,
    freed: Condvar,
}

// SAFETY: `acquire` waits until `busy` is false and sets it under the mutex; `release` clears
// it. At most one caller sees `busy == false` and sets it.
unsafe impl QueueLock for DefaultQueueLock {
    fn acquire(&self) {
        let mut busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        while *busy {
            busy = self.freed.wait(busy).unwrap_or_else(|p| p.into_inner());
        }
        *busy = true;
    }

    unsafe fn release(&self) {
        let mut busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        *busy = false;
        drop(busy);
        self.freed.notify_one();
    }
}

thread_local! {
    static HELD: Cell<u32> = const { Cell::new(0) };
}

/// How many queue guards this thread holds now.
pub fn held_on_this_thread() -> u32 {
    HELD.with(Cell::get)
}

/// Counts of queue-lock use, for tests and benchmarks.
#[derive(Debug, Default)]
pub struct QueueStats {
    acquisitions: AtomicU64,
    submissions: AtomicU64,
    waits_while_held: AtomicU64,
}

impl QueueStats {
    /// Guards taken.
    pub fn acquisitions(&self) -> u64 {
        self.acquisitions.load(Ordering::Relaxed)
    }
    /// Submissions made through guards.
    pub fn submissions(&self) -> u64 {
        self.submissions.load(Ordering::Relaxed)
    }
    /// Fence waits that began while the waiting thread held a queue guard (should stay 0).
    pub fn waits_while_held(&self) -> u64 {
        self.waits_while_held.load(Ordering::Relaxed)
    }
    pub(crate) fn note_wait(&self) {
        if held_on_this_thread() > 0 {
            self.waits_while_held.fetch_add(1, Ordering::Relaxed);
            debug_assert!(
                false,
                "a fence wait began while this thread holds a queue guard"
            );
        }
    }
}

/// A device queue with its lock. Owned by its [`crate::Device`].
pub struct Queue {
    raw: vk::Queue,
    family: u32,
    index: u32,
    lock: Arc<dyn QueueLock>,
    stats: Arc<QueueStats>,
    device: ash::Device,
}

impl fmt::Debug for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Queue")
            .field("raw", &self.raw)
            .field("family", &self.family)
            .field("index", &self.index)
            .finish()
    }
}

impl Queue {
    pub(crate) fn new(
        device: ash::Device,
        raw: vk::Queue,
        family: u32,
        index: u32,
        lock: Arc<dyn QueueLock>,
    ) -> Self {
        Queue {
            raw,
            family,
            index,
            lock,
            stats: Arc::new(QueueStats::default()),
            device,
        }
    }

    /// The raw handle, for identity checks. Submitting through it bypasses the lock: use
    /// [`Queue::lock`].
    pub fn raw(&self) -> vk::Queue {
        self.raw
    }

    /// Queue family index.
    pub fn family(&self) -> u32 {
        self.family
    }

    /// Index within the family.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Lock-use counters.
    pub fn stats(&self) -> &QueueStats {
        &self.stats
    }

    /// Takes the queue lock. Hold the guard only around submissions.
    pub fn lock(&self) -> QueueGuard<'_> {
        self.lock.acquire();
        HELD.with(|h| h.set(h.get() + 1));
        self.stats.acquisitions.fetch_add(1, Ordering::Relaxed);
        QueueGuard { queue: self }
    }
}

/// Exclusive access to a queue, released on drop.
pub struct QueueGuard<'q> {
    queue: &'q Queue,
}

impl fmt::Debug for QueueGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueGuard")
            .field("queue", &self.queue.raw)
            .finish()
    }
}

impl QueueGuard<'_> {
    /// The guarded queue's raw handle, for callers that submit through other function tables
    /// (extension entry points) while holding the guard.
    pub fn raw(&self) -> vk::Queue {
        self.queue.raw
    }

    /// `vkQueueSubmit`.
    ///
    /// # Safety
    /// `submits` must be valid for this queue's device: command buffers in the executable
    /// state, semaphores and `fence` (if not null) unsignaled and not in use elsewhere, as the
    /// Vulkan specification requires of `vkQueueSubmit`.
    pub unsafe fn submit(
        &self,
        submits: &[vk::SubmitInfo<'_>],
        fence: vk::Fence,
    ) -> Result<(), VkError> {
        self.queue.stats.submissions.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the guard gives exclusive access to the queue; validity of `submits` is the
        // caller's contract.
        unsafe {
            self.queue
                .device
                .queue_submit(self.queue.raw, submits, fence)
        }
        .vk("vkQueueSubmit")
    }

    /// `vkQueueSubmit2` (Vulkan 1.3 or `synchronization2`).
    ///
    /// # Safety
    /// As [`QueueGuard::submit`], and the device must have `synchronization2` enabled.
    pub unsafe fn submit2(
        &self,
        submits: &[vk::SubmitInfo2<'_>],
        fence: vk::Fence,
    ) -> Result<(), VkError> {
        self.queue.stats.submissions.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as in `submit`.
        unsafe {
            self.queue
                .device
                .queue_submit2(self.queue.raw, submits, fence)
        }
        .vk("vkQueueSubmit2")
    }
}

impl Drop for QueueGuard<'_> {
    fn drop(&mut self) {
        HELD.with(|h| h.set(h.get().saturating_sub(1)));
        // SAFETY: this guard acquired the lock in `Queue::lock` and releases it once.
        unsafe { self.queue.lock.release() };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn default_lock_excludes() {
        let lock = Arc::new(DefaultQueueLock::default());
        let inside = Arc::new(AtomicBool::new(false));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let lock = lock.clone();
                let inside = inside.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        lock.acquire();
                        assert!(!inside.swap(true, Ordering::SeqCst));
                        inside.store(false, Ordering::SeqCst);
                        // SAFETY: acquired just above.
                        unsafe { lock.release() };
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}
