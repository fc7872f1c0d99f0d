//! Logical devices: created from requirements, or adopted from the application; each with its
//! ARM entry points and its vk-mem allocator.

use std::ffi::{CStr, CString, c_void};
use std::fmt;
use std::sync::Arc;

use ash::vk;

use crate::device::adapter::Adapter;
use crate::device::arm::{
    ArmFns, DATA_GRAPH_EXTENSION_NAME, DataGraphFns, TENSORS_EXTENSION_NAME, TensorFns,
};
use crate::device::caps::Capabilities;
use crate::device::conv::Version;
use crate::device::fault::{FaultPoint, Faults};
use crate::device::features::{ChainScope, FeatureChain};
use crate::device::instance::Instance;
use crate::device::queue::{DefaultQueueLock, Queue, QueueLock};
use crate::device::requirements::{Enabled, Requirements};
use crate::error::{Error, VkError, VkResultExt};

/// A logical device with one queue. Cheap to clone. When `vk-core` created it, it is destroyed
/// after the last clone and the last object made from it are dropped; an adopted device is
/// never destroyed by `vk-core`.
#[derive(Clone)]
pub struct Device {
    shared: Arc<DeviceShared>,
}

/// Called when the last reference to an adopted device goes away.
pub type DropCallback = Box<dyn FnOnce() + Send + Sync>;

enum Ownership {
    Owned,
    Borrowed(Option<DropCallback>),
}

struct DeviceShared {
    // Field order is drop order: the queue and tables go before the instance Arc.
    raw: ash::Device,
    queue: Queue,
    arm: Option<ArmFns>,
    enabled: Enabled,
    caps: Arc<Capabilities>,
    physical: vk::PhysicalDevice,
    ownership: Ownership,
    /// Set once, by the first call that saw `VK_ERROR_DEVICE_LOST`.
    lost: std::sync::OnceLock<String>,
    faults: Faults,
    /// The device's one vk-mem allocator, made on first use; destroyed before the device.
    allocator: std::sync::OnceLock<Result<vk_mem::Allocator, vk::Result>>,
    /// Values computed once per device by the layers above ([`Device::memo`]).
    memo: std::sync::Mutex<Memo>,
    instance: Instance,
}

/// Per-device values, by type and key.
type Memo = std::collections::HashMap<
    (std::any::TypeId, &'static str),
    Arc<dyn std::any::Any + Send + Sync>,
>;

impl Drop for DeviceShared {
    fn drop(&mut self) {
        // Memo values may own handles of this device (never the `Device` itself): they go
        // first, while the device is alive.
        self.memo
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        // Every buffer holds a `Device`, so none is left: the allocator goes before the device.
        drop(self.allocator.take());
        match &mut self.ownership {
            Ownership::Owned => {
                let _serial =
                    crate::device::instance::emulation_serial(self.instance.emulation_enabled());
                // SAFETY: every object created from this device holds an `Arc` of it, so none
                // is alive; work they submitted was waited for by their own fences. The device
                // is ours and is destroyed once.
                unsafe { self.raw.destroy_device(None) };
            }
            Ownership::Borrowed(callback) => {
                if let Some(cb) = callback.take() {
                    cb();
                }
            }
        }
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device")
            .field("raw", &self.shared.raw.handle())
            .field("name", &self.shared.caps.name)
            .field("queue", &self.shared.queue)
            .field("owned", &matches!(self.shared.ownership, Ownership::Owned))
            .finish()
    }
}

fn scope_for<'a>(enabled: &'a Enabled, has: &'a dyn Fn(&std::ffi::CStr) -> bool) -> ChainScope<'a> {
    ChainScope {
        api_version: enabled.api_version,
        extensions: has,
    }
}

impl Device {
    /// A standalone device: a new instance (validation per `VKDELEGATE_VALIDATION`, emulation
    /// layers when needed), the selected adapter (`VKDELEGATE_DEVICE_INDEX` or the best
    /// ranked), and a device meeting `requirements`.
    pub fn open(requirements: &Requirements) -> Result<Device, Error> {
        Instance::new(&crate::device::instance::InstanceDesc::default())?
            .select_adapter()?
            .create_device(requirements)
    }

    /// As [`Device::open`] on an existing instance.
    pub fn open_on(instance: &Instance, requirements: &Requirements) -> Result<Device, Error> {
        instance.select_adapter()?.create_device(requirements)
    }

    pub(crate) fn create(adapter: &Adapter, requirements: &Requirements) -> Result<Device, Error> {
        let caps = adapter.capabilities();
        let enabled = requirements
            .resolve(caps)
            .map_err(|missing| Error::Unsupported {
                device: caps.name.clone(),
                requester: requirements.requester.clone(),
                missing,
            })?;

        let has = |n: &std::ffi::CStr| enabled.has_extension(n);
        let scope = scope_for(&enabled, &has);
        let mut chain = FeatureChain::with(enabled.features, &scope);
        let head: *const vk::PhysicalDeviceFeatures2<'static> = chain.link(&scope);

        let priorities = [1.0f32];
        let queue_info = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(enabled.queue_family)
            .queue_priorities(&priorities)];
        let ext_names: Vec<CString> = enabled
            .extensions
            .iter()
            .filter_map(|e| CString::new(e.as_str()).ok())
            .collect();
        let ext_ptrs: Vec<*const std::ffi::c_char> = ext_names.iter().map(|e| e.as_ptr()).collect();
        let mut info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queue_info)
            .enabled_extension_names(&ext_ptrs);
        info.p_next = head as *const c_void;

        let instance = adapter.instance();
        let serial = crate::device::instance::emulation_serial(instance.emulation_enabled());
        // SAFETY: `info` and everything it points to (the feature chain in `chain`, names,
        // priorities) live across the call; features and extensions were checked against the
        // device; the chain carries only structures the device knows.
        let raw = unsafe { instance.raw().create_device(adapter.raw(), &info, None) }
            .vk("vkCreateDevice")?;
        drop(serial);
        drop(chain);

        // SAFETY: the family was requested above with one queue.
        let queue_raw = unsafe { raw.get_device_queue(enabled.queue_family, 0) };
        let arm = match ArmFns::load_if_enabled(instance.raw(), &raw, &enabled) {
            Ok(arm) => arm,
            Err(e) => {
                // SAFETY: nothing was created from `raw` yet.
                unsafe { raw.destroy_device(None) };
                return Err(e);
            }
        };
        let queue = Queue::new(
            raw.clone(),
            queue_raw,
            enabled.queue_family,
            0,
            Arc::new(DefaultQueueLock::default()),
        );
        log::debug!(
            "device created on '{}': family {}, extensions {:?}, features [{}]",
            caps.name,
            enabled.queue_family,
            enabled.extensions,
            enabled.features
        );
        Ok(Device {
            shared: Arc::new(DeviceShared {
                raw,
                queue,
                arm,
                enabled,
                caps: Arc::new(caps.clone()),
                physical: adapter.raw(),
                ownership: Ownership::Owned,
                lost: std::sync::OnceLock::new(),
                faults: Faults::default(),
                allocator: std::sync::OnceLock::new(),
                memo: std::sync::Mutex::default(),
                instance: instance.clone(),
            }),
        })
    }

    /// Adopts a device (and one of its queues) that the application created and keeps owning.
    ///
    /// `enabled` describes what the application enabled at creation (Vulkan cannot be asked);
    /// it is what [`Device::check`] compares requirements against. `queue_lock` is the lock the
    /// application uses for that queue, if it submits to it too; without one, `vk-core` assumes
    /// it is the queue's only user. `on_drop` runs when the last `vk-core` reference is gone.
    ///
    /// # Safety
    /// - `raw` must be a valid device created from `adapter`'s physical device, with the
    ///   extensions and features listed in `enabled`, and a queue at
    ///   (`enabled.queue_family`, `queue_index`).
    /// - `raw` must stay valid until `on_drop` runs (or, without a callback, until every
    ///   `vk-core` object made from it is dropped). `vk-core` never destroys it.
    /// - If anything else submits to that queue, `queue_lock` must be the lock it uses.
    pub unsafe fn from_raw(
        adapter: &Adapter,
        raw: vk::Device,
        enabled: Enabled,
        queue_index: u32,
        queue_lock: Option<Arc<dyn QueueLock>>,
        on_drop: Option<DropCallback>,
    ) -> Result<Device, Error> {
        let family = adapter
            .capabilities()
            .queue_families
            .get(enabled.queue_family as usize)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "queue family {} does not exist: the device has {}",
                    enabled.queue_family,
                    adapter.capabilities().queue_families.len()
                ))
            })?;
        if queue_index >= family.count {
            return Err(Error::InvalidArgument(format!(
                "queue index {queue_index} is out of range: family {} has {} queue(s)",
                family.index, family.count
            )));
        }
        let mut enabled = enabled;
        enabled.queue_caps = family.caps;
        let instance = adapter.instance();
        // SAFETY: the caller guarantees `raw` is a live device of this instance.
        let device = unsafe { ash::Device::load(instance.raw().fp_v1_0(), raw) };
        // SAFETY: the caller guarantees the queue exists.
        let queue_raw = unsafe { device.get_device_queue(enabled.queue_family, queue_index) };
        let arm = ArmFns::load_if_enabled(instance.raw(), &device, &enabled)?;
        let queue = Queue::new(
            device.clone(),
            queue_raw,
            enabled.queue_family,
            queue_index,
            queue_lock.unwrap_or_else(|| Arc::new(DefaultQueueLock::default())),
        );
        Ok(Device {
            shared: Arc::new(DeviceShared {
                raw: device,
                queue,
                arm,
                enabled,
                caps: Arc::new(adapter.capabilities().clone()),
                physical: adapter.raw(),
                ownership: Ownership::Borrowed(on_drop),
                lost: std::sync::OnceLock::new(),
                faults: Faults::default(),
                allocator: std::sync::OnceLock::new(),
                memo: std::sync::Mutex::default(),
                instance: instance.clone(),
            }),
        })
    }

    /// The `ash` device.
    pub fn raw(&self) -> &ash::Device {
        &self.shared.raw
    }

    /// The raw physical device handle.
    pub fn physical(&self) -> vk::PhysicalDevice {
        self.shared.physical
    }

    /// The instance.
    pub fn instance(&self) -> &Instance {
        &self.shared.instance
    }

    /// The physical device's capabilities.
    pub fn capabilities(&self) -> &Capabilities {
        &self.shared.caps
    }

    /// What is enabled on this device.
    pub fn enabled(&self) -> &Enabled {
        &self.shared.enabled
    }

    /// The device's queue.
    pub fn queue(&self) -> &Queue {
        &self.shared.queue
    }

    /// Entry points of `VK_ARM_tensors` and `VK_ARM_data_graph`, when enabled.
    pub fn arm(&self) -> Option<&ArmFns> {
        self.shared.arm.as_ref()
    }

    /// Whether `vk-core` created (and will destroy) this device.
    pub fn is_owned(&self) -> bool {
        matches!(self.shared.ownership, Ownership::Owned)
    }

    /// Whether two values are the same `VkDevice`.
    pub fn same_as(&self, other: &Device) -> bool {
        self.shared.raw.handle() == other.shared.raw.handle()
    }

    /// A value computed once per device and kept for its lifetime (for example the outcome of
    /// a kernel's self-check on this device). `make` runs without any lock held, so it may
    /// use the device (and `memo`) itself; when two threads race, the first stored value wins
    /// and both get it. The value must not hold this `Device` (that would keep it alive); it
    /// may own handles of the device through its `ash::Device` table: values are dropped
    /// before the device is destroyed (or handed back to its owner).
    pub fn memo<T: Send + Sync + 'static>(
        &self,
        key: &'static str,
        make: impl FnOnce() -> T,
    ) -> Arc<T> {
        let id = (std::any::TypeId::of::<T>(), key);
        let lookup = |memo: &Memo| memo.get(&id).and_then(|v| v.clone().downcast::<T>().ok());
        let found = lookup(&self.shared.memo.lock().unwrap_or_else(|e| e.into_inner()));
        if let Some(v) = found {
            return v;
        }
        let made: Arc<T> = Arc::new(make());
        let mut memo = self.shared.memo.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = lookup(&memo) {
            return v;
        }
        memo.insert(id, made.clone());
        made
    }

    /// Whether a call on this device returned `VK_ERROR_DEVICE_LOST`, and where.
    pub fn lost(&self) -> Option<String> {
        self.shared.lost.get().cloned()
    }

    /// Records that the device was lost (the first record wins).
    pub(crate) fn mark_lost(&self, when: String) {
        if self.shared.lost.set(when.clone()).is_ok() {
            log::error!("device '{}' lost {when}", self.shared.caps.name);
        }
    }

    /// Test hook: the next [`crate::Submission`] submit or wait on this device (at `point`)
    /// returns `result` instead of calling the driver. `VK_ERROR_DEVICE_LOST` then marks the
    /// device lost, as a real loss would.
    pub fn inject_fault(&self, point: FaultPoint, result: vk::Result) {
        self.shared.faults.arm(point, result);
    }

    pub(crate) fn take_fault(&self, point: FaultPoint) -> Option<vk::Result> {
        self.shared.faults.take(point)
    }

    /// Test hook: after `after` more successful allocations from this device's allocator
    /// ([`crate::Buffer::new`], [`crate::MemoryBlock::new`]), the next one fails with
    /// `VK_ERROR_OUT_OF_DEVICE_MEMORY`, as an exhausted heap would, and the hook disarms.
    /// Works alike on devices with one memory heap or several.
    pub fn fail_allocation(&self, after: u64) {
        self.shared.faults.fail_allocation(after);
    }

    /// Disarms [`Device::fail_allocation`]; returns whether it was still armed, that is
    /// whether fewer allocations than it waited for were made.
    pub fn clear_allocation_fault(&self) -> bool {
        self.shared.faults.clear_allocation_fault()
    }

    /// Counts an allocation against [`Device::fail_allocation`]: the error it must fail with.
    pub(crate) fn take_allocation_fault(&self) -> Option<vk::Result> {
        self.shared
            .faults
            .take_allocation()
            .then_some(vk::Result::ERROR_OUT_OF_DEVICE_MEMORY)
    }

    /// The device's vk-mem allocator (one per device, shared by every delegate on it).
    pub(crate) fn vma(&self) -> Result<&vk_mem::Allocator, Error> {
        let made = self
            .shared
            .allocator
            .get_or_init(|| new_allocator(self, None));
        made.as_ref().map_err(|&result| Error::Allocation {
            what: "the device's memory allocator".into(),
            bytes: 0,
            result,
        })
    }

    /// Makes the device's allocator now, treating every memory heap as at most `bytes` long,
    /// so that tests can run out of device memory without exhausting the host (CPU drivers'
    /// heaps are host RAM). Fails when the allocator exists already (something allocated).
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn limit_heaps(&self, bytes: u64) -> Result<(), Error> {
        let made = new_allocator(self, Some(bytes));
        if let Err(result) = made {
            return Err(Error::Allocation {
                what: "the device's memory allocator".into(),
                bytes: 0,
                result,
            });
        }
        self.shared.allocator.set(made).map_err(|_| {
            Error::InvalidArgument(
                "the heap limit must be set before anything is allocated on the device".into(),
            )
        })
    }

    /// Checks `requirements` against what this device has enabled (for reuse of an existing
    /// device); the error names every missing item.
    pub fn check(&self, requirements: &Requirements) -> Result<(), Error> {
        requirements
            .check_enabled(&self.shared.enabled)
            .map_err(|missing| Error::Unsupported {
                device: self.shared.caps.name.clone(),
                requester: requirements.requester.clone(),
                missing,
            })
    }

    /// Waits for `fence`, up to `timeout_ns`. Counts (and, in debug builds, asserts against)
    /// waits that begin while this thread holds a queue guard.
    ///
    /// # Safety
    /// `fence` must be a live fence created from this device.
    pub unsafe fn wait_for_fence(&self, fence: vk::Fence, timeout_ns: u64) -> Result<(), VkError> {
        self.shared.queue.stats().note_wait();
        // SAFETY: `fence` is a live fence of this device (caller's contract).
        unsafe { self.shared.raw.wait_for_fences(&[fence], true, timeout_ns) }.vk("vkWaitForFences")
    }
}

impl Adapter {
    /// Creates a device with one queue, enabling what `requirements` need and can use.
    pub fn create_device(&self, requirements: &Requirements) -> Result<Device, Error> {
        Device::create(self, requirements)
    }
}

/// Makes the vk-mem allocator of `device` (called once, by [`Device::vma`], or first by
/// `Device::limit_heaps` in tests). With `heap_limit`, the allocator treats every memory heap
/// as at most that many bytes (vk-mem's `pHeapSizeLimit`): allocations beyond it fail as out
/// of device memory without reaching the driver (a test seam, `testing::device_with_heap_limit`).
fn new_allocator(
    device: &Device,
    heap_limit: Option<u64>,
) -> Result<vk_mem::Allocator, vk::Result> {
    let api = device.enabled().api_version.min(Version::V1_3);
    let limits: Vec<vk::DeviceSize> = match heap_limit {
        Some(bytes) => vec![bytes; device.capabilities().memory.heaps.len()],
        None => Vec::new(),
    };
    let mut info =
        vk_mem::AllocatorCreateInfo::new(device.instance().raw(), device.raw(), device.physical());
    info.vulkan_api_version = vk::make_api_version(0, api.major(), api.minor(), 0);
    // One entry per heap of the physical device, as vk-mem requires (or none: no limit).
    info.heap_size_limits = &limits;
    // SAFETY: instance, device and physical device are live; the allocator is stored in the
    // device's shared state and destroyed before the device (see `DeviceShared::drop`).
    unsafe { vk_mem::Allocator::new(info) }
}

/// Resolves one device entry point; NULL is an error naming it.
///
/// # Safety
/// `device` must be a live device of `instance`, and `F` must be the function-pointer type of
/// the entry point called `name`.
unsafe fn load<F: Copy>(
    instance: &ash::Instance,
    device: vk::Device,
    name: &'static CStr,
) -> Result<F, Error> {
    // SAFETY: `device` is live (caller's contract); the name is NUL-terminated.
    let ptr = unsafe { (instance.fp_v1_0().get_device_proc_addr)(device, name.as_ptr()) };
    match ptr {
        None => Err(Error::MissingEntryPoint {
            name: name.to_str().unwrap_or("?"),
        }),
        Some(f) => {
            debug_assert_eq!(std::mem::size_of::<F>(), std::mem::size_of_val(&f));
            // SAFETY: `F` is the entry point's own function-pointer type (caller's contract),
            // of the same size as the generic pointer the loader returned.
            Ok(unsafe { std::mem::transmute_copy::<_, F>(&f) })
        }
    }
}

impl ArmFns {
    /// Loads the entry points of whichever of the two extensions `enabled` lists; `None` when
    /// neither is enabled.
    pub(crate) fn load_if_enabled(
        instance: &ash::Instance,
        device: &ash::Device,
        enabled: &Enabled,
    ) -> Result<Option<ArmFns>, Error> {
        let d = device.handle();
        let tensors = if enabled.has_extension(TENSORS_EXTENSION_NAME) {
            // SAFETY: each name is paired with its own PFN type; `d` is live.
            unsafe {
                Some(TensorFns {
                    create_tensor: load(instance, d, c"vkCreateTensorARM")?,
                    destroy_tensor: load(instance, d, c"vkDestroyTensorARM")?,
                    create_tensor_view: load(instance, d, c"vkCreateTensorViewARM")?,
                    destroy_tensor_view: load(instance, d, c"vkDestroyTensorViewARM")?,
                    get_tensor_memory_requirements: load(
                        instance,
                        d,
                        c"vkGetTensorMemoryRequirementsARM",
                    )?,
                    bind_tensor_memory: load(instance, d, c"vkBindTensorMemoryARM")?,
                })
            }
        } else {
            None
        };
        let data_graph = if enabled.has_extension(DATA_GRAPH_EXTENSION_NAME) {
            // SAFETY: each name is paired with its own PFN type; `d` is live.
            unsafe {
                Some(DataGraphFns {
                    create_data_graph_pipelines: load(
                        instance,
                        d,
                        c"vkCreateDataGraphPipelinesARM",
                    )?,
                    create_data_graph_pipeline_session: load(
                        instance,
                        d,
                        c"vkCreateDataGraphPipelineSessionARM",
                    )?,
                    get_data_graph_pipeline_session_bind_point_requirements: load(
                        instance,
                        d,
                        c"vkGetDataGraphPipelineSessionBindPointRequirementsARM",
                    )?,
                    get_data_graph_pipeline_session_memory_requirements: load(
                        instance,
                        d,
                        c"vkGetDataGraphPipelineSessionMemoryRequirementsARM",
                    )?,
                    bind_data_graph_pipeline_session_memory: load(
                        instance,
                        d,
                        c"vkBindDataGraphPipelineSessionMemoryARM",
                    )?,
                    destroy_data_graph_pipeline_session: load(
                        instance,
                        d,
                        c"vkDestroyDataGraphPipelineSessionARM",
                    )?,
                    cmd_dispatch_data_graph: load(instance, d, c"vkCmdDispatchDataGraphARM")?,
                })
            }
        } else {
            None
        };
        Ok(
            (tensors.is_some() || data_graph.is_some()).then_some(ArmFns {
                tensors,
                data_graph,
            }),
        )
    }
}
