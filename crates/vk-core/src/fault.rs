//! Fault injection for tests: make the next submit, wait or host-memory import on one device
//! return an error code (`VK_ERROR_DEVICE_LOST`, `VK_ERROR_OUT_OF_DEVICE_MEMORY`,
//! `VK_TIMEOUT`, ...) as if the driver had, to check that faults become errors, never aborts,
//! hangs or leaks.
//!
//! Injection is per device ([`crate::Device::inject_fault`]), so tests running in parallel on
//! other devices are unaffected; every [`crate::Submission`] of that device sees it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use ash::vk;

/// Where a fault is injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultPoint {
    /// `vkQueueSubmit`, in [`crate::Submission::submit`].
    Submit,
    /// `vkWaitForFences`, in [`crate::Submission::wait`].
    Wait,
    /// `vkAllocateMemory` of an imported host range, in [`crate::HostTransfer`] (the import
    /// is refused; the transfer falls back to staging).
    Import,
}

/// Faults armed on one device: each fires once, in order of arming.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    armed: AtomicBool,
    queue: Mutex<Vec<(FaultPoint, vk::Result)>>,
}

impl Faults {
    /// Arms one fault at `point`.
    pub(crate) fn arm(&self, point: FaultPoint, result: vk::Result) {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        q.push((point, result));
        self.armed.store(true, Ordering::SeqCst);
    }

    /// The fault armed at `point`, if any, disarmed.
    pub(crate) fn take(&self, point: FaultPoint) -> Option<vk::Result> {
        if !self.armed.load(Ordering::Relaxed) {
            return None;
        }
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let i = q.iter().position(|(p, _)| *p == point)?;
        let (_, r) = q.remove(i);
        if q.is_empty() {
            self.armed.store(false, Ordering::SeqCst);
        }
        Some(r)
    }
}
