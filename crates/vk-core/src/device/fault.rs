//! Fault injection for tests: make the next submit, wait or host-memory import on one device
//! return an error code (`VK_ERROR_DEVICE_LOST`, `VK_ERROR_OUT_OF_DEVICE_MEMORY`,
//! `VK_TIMEOUT`, ...) as if the driver had, to check that faults become errors, never aborts,
//! hangs or leaks.
//!
//! Injection is per device ([`crate::Device::inject_fault`]), so tests running in parallel on
//! other devices are unaffected; every [`crate::Submission`] of that device sees it.
//!
//! Allocations have their own seam ([`crate::Device::fail_allocation`]): the allocation that
//! follows a given number of successful ones fails, whatever the device's heaps. A test scans
//! every allocation of a build or load by failing the first, then the second, and so on, on
//! any device (one heap or several), without filling memory.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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

/// No allocation fault is armed.
const DISARMED: u64 = u64::MAX;

/// Faults armed on one device: each fires once, in order of arming.
#[derive(Debug)]
pub(crate) struct Faults {
    armed: AtomicBool,
    queue: Mutex<Vec<(FaultPoint, vk::Result)>>,
    /// Allocations still to succeed before one fails ([`DISARMED`]: none fails).
    allocations_left: AtomicU64,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            armed: AtomicBool::new(false),
            queue: Mutex::new(Vec::new()),
            allocations_left: AtomicU64::new(DISARMED),
        }
    }
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

    /// Arms the allocation fault: `after` more allocations succeed, the next one fails.
    pub(crate) fn fail_allocation(&self, after: u64) {
        self.allocations_left
            .store(after.min(DISARMED - 1), Ordering::SeqCst);
    }

    /// Disarms the allocation fault; whether it was still armed (had not fired).
    pub(crate) fn clear_allocation_fault(&self) -> bool {
        self.allocations_left.swap(DISARMED, Ordering::SeqCst) != DISARMED
    }

    /// Counts one allocation: whether it is the one that must fail (which disarms the fault).
    pub(crate) fn take_allocation(&self) -> bool {
        let mut left = self.allocations_left.load(Ordering::Relaxed);
        loop {
            if left == DISARMED {
                return false;
            }
            let next = if left == 0 { DISARMED } else { left - 1 };
            match self.allocations_left.compare_exchange_weak(
                left,
                next,
                Ordering::SeqCst,
                Ordering::Relaxed,
            ) {
                Ok(_) => return left == 0,
                Err(now) => left = now,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Faults;

    #[test]
    fn the_allocation_after_the_count_fails_once() {
        let f = Faults::default();
        assert!(!f.take_allocation(), "disarmed by default");
        f.fail_allocation(2);
        assert_eq!(
            (0..5).map(|_| f.take_allocation()).collect::<Vec<_>>(),
            [false, false, true, false, false]
        );
        assert!(!f.clear_allocation_fault(), "it fired, so it was disarmed");
        f.fail_allocation(3);
        assert!(!f.take_allocation());
        assert!(f.clear_allocation_fault(), "still armed");
        assert!(!f.take_allocation());
    }
}
