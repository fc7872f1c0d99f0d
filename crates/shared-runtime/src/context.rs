//! Shared contexts and queue leases.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use vk_core::{Capabilities, Device, Enabled, Instance, QueueGuard, Requirements, vk};

use crate::error::Error;
use crate::key::SharedKey;
use crate::lock_order;

/// What a creator hands the registry: the device (which holds its instance, physical device
/// and queue) and an optional lifetime anchor.
pub struct ContextParts {
    /// The device; owned (made by `vk-core`) or adopted (`Device::from_raw`).
    pub device: Device,
    /// Anything that must live as long as the context (application resources tied to it).
    /// Dropped with the context, after its last holder, never under the registry lock. A
    /// delegate may keep a clone of the device beyond that: to keep application-owned Vulkan
    /// handles alive, use the `on_drop` callback of `vk_core::Device::from_raw`, which runs
    /// after the device's last clone.
    pub anchor: Option<Arc<dyn Any + Send + Sync>>,
}

impl fmt::Debug for ContextParts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ContextParts")
            .field("device", &self.device)
            .field("anchor", &self.anchor.is_some())
            .finish()
    }
}

static GENERATION: AtomicU64 = AtomicU64::new(1);

/// One instance, device and queue shared by several delegates.
///
/// Holders keep it alive through `Arc`; unregistering removes discoverability only.
pub struct SharedContext {
    key: SharedKey,
    generation: u64,
    external: bool,
    valid: AtomicBool,
    device: Device,
    anchor: Option<Arc<dyn Any + Send + Sync>>,
    leases: AtomicU64,
}

impl fmt::Debug for SharedContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedContext")
            .field("key", &self.key)
            .field("generation", &self.generation)
            .field("external", &self.external)
            .field("valid", &self.is_valid())
            .field("device", &self.device)
            .finish()
    }
}

impl Drop for SharedContext {
    fn drop(&mut self) {
        // The anchor (and, for owned devices, the device) may run arbitrary teardown that
        // re-enters the registry: it must never run under the registry lock.
        lock_order::assert_registry_unlocked("dropping a shared context");
    }
}

impl SharedContext {
    pub(crate) fn new(key: SharedKey, parts: ContextParts, external: bool) -> Self {
        SharedContext {
            key,
            generation: GENERATION.fetch_add(1, Ordering::Relaxed),
            external,
            valid: AtomicBool::new(true),
            device: parts.device,
            anchor: parts.anchor,
            leases: AtomicU64::new(0),
        }
    }

    /// The key it was registered under.
    pub fn key(&self) -> &SharedKey {
        &self.key
    }

    /// A process-unique number: a replaced or recreated context has a new one.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether the device belongs to the application (registered with
    /// [`crate::Registry::register_external`]); `vk-core` never destroys it.
    pub fn is_external(&self) -> bool {
        self.external
    }

    /// Whether the context may still be used.
    pub fn is_valid(&self) -> bool {
        self.valid.load(Ordering::Acquire)
    }

    /// Marks the context unusable (for example after `VK_ERROR_DEVICE_LOST`); the registry
    /// replaces it on the next `lookup_or_create`.
    pub fn invalidate(&self) {
        self.valid.store(false, Ordering::Release);
    }

    /// The shared device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The instance.
    pub fn instance(&self) -> &Instance {
        self.device.instance()
    }

    /// The physical device.
    pub fn physical_device(&self) -> vk::PhysicalDevice {
        self.device.physical()
    }

    /// The queue handle (for identity checks; submit through the device's queue guard or a
    /// [`Lease`]).
    pub fn queue(&self) -> vk::Queue {
        self.device.queue().raw()
    }

    /// The queue family.
    pub fn queue_family(&self) -> u32 {
        self.device.queue().family()
    }

    /// The enabled extensions and features.
    pub fn enabled(&self) -> &Enabled {
        self.device.enabled()
    }

    /// The physical device's capabilities.
    pub fn capabilities(&self) -> &Capabilities {
        self.device.capabilities()
    }

    /// The lifetime anchor, if any.
    pub fn anchor(&self) -> Option<&Arc<dyn Any + Send + Sync>> {
        self.anchor.as_ref()
    }

    /// Checks a delegate's requirements against what the shared device has enabled; the error
    /// names every missing item.
    pub fn check(&self, requirements: &Requirements) -> Result<(), Error> {
        if !self.is_valid() {
            return Err(Error::Invalidated {
                key: self.key.clone(),
                generation: self.generation,
            });
        }
        self.device
            .check(requirements)
            .map_err(|e| Error::Unsupported {
                key: self.key.clone(),
                source: Arc::new(e),
            })
    }

    /// Number of leases taken so far.
    pub fn leases_taken(&self) -> u64 {
        self.leases.load(Ordering::Relaxed)
    }

    /// A lease for one delegate instance: its handle on the context and its only way to the
    /// queue.
    pub fn lease(self: &Arc<Self>, holder: impl Into<String>) -> Lease {
        self.leases.fetch_add(1, Ordering::Relaxed);
        Lease {
            context: self.clone(),
            holder: holder.into(),
        }
    }
}

/// A delegate instance's hold on a shared context. Submission goes through
/// [`Lease::submit`], which takes the queue lock only for the duration of the closure; the
/// closure should do nothing but submit.
pub struct Lease {
    context: Arc<SharedContext>,
    holder: String,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("holder", &self.holder)
            .field("key", &self.context.key)
            .finish()
    }
}

impl Lease {
    /// The context.
    pub fn context(&self) -> &Arc<SharedContext> {
        &self.context
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.context.device
    }

    /// Who holds the lease.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// Runs `f` with the queue locked. Lock order: the registry lock must not be held (checked
    /// in debug builds); the guard must not outlive `f`, so no fence wait can happen under it
    /// unless `f` itself waits, which [`vk_core::Device::wait_for_fence`] detects.
    pub fn submit<R>(&self, f: impl FnOnce(&QueueGuard<'_>) -> R) -> R {
        lock_order::assert_registry_unlocked("taking the queue lock");
        let guard = self.context.device.queue().lock();
        f(&guard)
    }
}
