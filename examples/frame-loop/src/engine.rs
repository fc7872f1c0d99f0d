//! The engine's own Vulkan objects, made with `ash` as an engine makes them: the instance
//! (with the surface extensions when there is a window, and the validation layer on request),
//! the device and its queue, then adopted by vk-core (`Instance::from_raw`,
//! `Device::from_raw`) so that a vkdelegate program can run on them. The engine keeps owning
//! both: it destroys the device once vk-core's `on_drop` has said that vk-core is done with it.

use std::collections::BTreeSet;
use std::ffi::{CStr, c_char, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

use ash::vk;
use raw_window_handle::{RawDisplayHandle, RawWindowHandle};
use vk_core::{DefaultQueueLock, Enabled, Features, QueueCaps, QueueLock, Version};

use crate::error::{Error, Result, VkCall};

const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

/// Whether `VKDELEGATE_VALIDATION` asks for the validation layer, and with synchronization
/// validation (everything but `core`), as for vk-core's own instances.
fn validation_wanted() -> Option<bool> {
    let v = std::env::var(vk_core::instance::ENV_VALIDATION).ok()?;
    match v.as_str() {
        "1" | "true" | "on" | "yes" => Some(true),
        "core" => Some(false),
        _ => None,
    }
}

/// Counts validation errors; the messenger's user data.
#[derive(Debug, Default)]
struct ValidationCount(AtomicU64);

unsafe extern "system" fn on_message(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user: *mut c_void,
) -> vk::Bool32 {
    if data.is_null() || user.is_null() {
        return vk::FALSE;
    }
    // SAFETY: `user` is the `ValidationCount` the messenger was made with, kept alive by the
    // `Engine` until after the messenger is destroyed; `data` is valid for this call.
    let (count, data) = unsafe { (&*(user as *const ValidationCount), &*data) };
    let message = if data.p_message.is_null() {
        "(no message)".into()
    } else {
        // SAFETY: the layer passes a NUL-terminated string valid for this call.
        unsafe { CStr::from_ptr(data.p_message) }.to_string_lossy()
    };
    if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR) {
        count.0.fetch_add(1, Ordering::SeqCst);
        log::error!(target: "vulkan", "{message}");
    } else if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::WARNING) {
        log::warn!(target: "vulkan", "{message}");
    } else {
        log::debug!(target: "vulkan", "{message}");
    }
    vk::FALSE
}

/// The window the engine presents to, as raw handles.
#[derive(Debug, Clone, Copy)]
pub struct WindowHandles {
    /// The display.
    pub display: RawDisplayHandle,
    /// The window.
    pub window: RawWindowHandle,
}

/// The engine's instance, its messenger and surface; destroyed in that order's reverse.
struct InstanceOwner {
    entry: ash::Entry,
    instance: ash::Instance,
    api: Version,
    messenger: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
    /// The messenger's user data: lives until the messenger is destroyed.
    validation: Arc<ValidationCount>,
    surface: Option<(ash::khr::surface::Instance, vk::SurfaceKHR)>,
    /// Leak everything: a device made from the instance may still be in use.
    leak: bool,
}

impl Drop for InstanceOwner {
    fn drop(&mut self) {
        if self.leak {
            return;
        }
        // SAFETY: the device and every object made from it are gone (`Engine::drop` runs
        // first); surface and messenger were made from this instance and are destroyed once.
        unsafe {
            if let Some((fns, surface)) = self.surface.take() {
                fns.destroy_surface(surface, None);
            }
            if let Some((utils, m)) = self.messenger.take() {
                utils.destroy_debug_utils_messenger(m, None);
            }
            self.instance.destroy_instance(None);
        }
    }
}

/// The engine's instance, device and queue, and their adoption by vk-core.
pub struct Engine {
    /// The adopted device: `Some` until `Drop` gives it up before destroying the device.
    core: Option<vk_core::Device>,
    /// The device, until it is destroyed.
    device: Option<ash::Device>,
    /// Told by vk-core's `on_drop` when its last reference to the device is gone.
    released: mpsc::Receiver<()>,
    /// Dropped after `Engine::drop` has destroyed the device.
    owner: InstanceOwner,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("device", &self.core)
            .finish_non_exhaustive()
    }
}

/// An instance with the layers and extensions asked for, and its messenger.
struct NewInstance {
    instance: ash::Instance,
    messenger: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
    api: Version,
}

fn create_instance(
    entry: &ash::Entry,
    window: Option<&WindowHandles>,
    validation: &Arc<ValidationCount>,
) -> Result<NewInstance> {
    // SAFETY: plain query on a loaded entry.
    let loader = unsafe { entry.try_enumerate_instance_version() }
        .vk("vkEnumerateInstanceVersion")?
        .unwrap_or(vk::API_VERSION_1_0);
    let api = Version(loader.min(vk::API_VERSION_1_3));
    let mut extensions: Vec<*const c_char> = match window {
        Some(w) => ash_window::enumerate_required_extensions(w.display)
            .vk("vkEnumerateInstanceExtensionProperties")?
            .to_vec(),
        None => Vec::new(),
    };
    let wanted = validation_wanted();
    let mut layers: Vec<*const c_char> = Vec::new();
    if wanted.is_some() {
        // SAFETY: plain query on a loaded entry.
        let available = unsafe { entry.enumerate_instance_layer_properties() }
            .vk("vkEnumerateInstanceLayerProperties")?;
        let has = available
            .iter()
            .any(|l| l.layer_name_as_c_str() == Ok(VALIDATION_LAYER));
        if !has {
            return Err(Error::Vk {
                call: "VK_LAYER_KHRONOS_validation (asked for by VKDELEGATE_VALIDATION)",
                result: vk::Result::ERROR_LAYER_NOT_PRESENT,
            });
        }
        layers.push(VALIDATION_LAYER.as_ptr());
        extensions.push(ash::ext::debug_utils::NAME.as_ptr());
        if wanted == Some(true) {
            extensions.push(ash::ext::validation_features::NAME.as_ptr());
        }
    }
    let mut messenger_info = vk::DebugUtilsMessengerCreateInfoEXT::default()
        .message_severity(
            vk::DebugUtilsMessageSeverityFlagsEXT::ERROR
                | vk::DebugUtilsMessageSeverityFlagsEXT::WARNING,
        )
        .message_type(
            vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION,
        )
        .pfn_user_callback(Some(on_message))
        .user_data(Arc::as_ptr(validation) as *mut c_void);
    let enables = [vk::ValidationFeatureEnableEXT::SYNCHRONIZATION_VALIDATION];
    let mut features = vk::ValidationFeaturesEXT::default().enabled_validation_features(&enables);
    let app = vk::ApplicationInfo::default()
        .application_name(c"frame-loop")
        .engine_name(c"frame-loop")
        .api_version(api.0);
    let mut info = vk::InstanceCreateInfo::default()
        .application_info(&app)
        .enabled_layer_names(&layers)
        .enabled_extension_names(&extensions);
    if wanted.is_some() {
        info = info.push_next(&mut messenger_info);
    }
    if wanted == Some(true) {
        info = info.push_next(&mut features);
    }
    // SAFETY: every pointer in `info` refers to locals alive across the call.
    let instance = unsafe { entry.create_instance(&info, None) }.vk("vkCreateInstance")?;
    let messenger = if wanted.is_some() {
        let utils = ash::ext::debug_utils::Instance::new(entry, &instance);
        // SAFETY: valid create info; `validation` outlives the messenger (see `Engine::drop`).
        match unsafe { utils.create_debug_utils_messenger(&messenger_info, None) } {
            Ok(m) => Some((utils, m)),
            Err(result) => {
                // SAFETY: nothing else was made from the instance.
                unsafe { instance.destroy_instance(None) };
                return Err(Error::Vk {
                    call: "vkCreateDebugUtilsMessengerEXT",
                    result,
                });
            }
        }
    } else {
        None
    };
    Ok(NewInstance {
        instance,
        messenger,
        api,
    })
}

/// The first queue family with graphics and compute (and presentation to `surface`).
fn pick_family(
    adapter: &vk_core::Adapter,
    surface: Option<&(ash::khr::surface::Instance, vk::SurfaceKHR)>,
) -> Result<u32> {
    let caps = adapter.capabilities();
    for family in &caps.queue_families {
        if !family
            .caps
            .contains(QueueCaps::GRAPHICS | QueueCaps::COMPUTE)
        {
            continue;
        }
        let presents = match surface {
            Some((fns, s)) => {
                // SAFETY: valid physical device, family index and surface of this instance.
                unsafe { fns.get_physical_device_surface_support(adapter.raw(), family.index, *s) }
                    .vk("vkGetPhysicalDeviceSurfaceSupportKHR")?
            }
            None => true,
        };
        if presents {
            return Ok(family.index);
        }
    }
    Err(Error::Unsuitable {
        device: caps.name.clone(),
        problem: "no queue family with graphics, compute and presentation".into(),
    })
}

/// Creates the device with one queue of `family`, timeline semaphores, and the swapchain
/// extension when presenting; returns it with what vk-core is told was enabled.
fn create_device(
    instance: &ash::Instance,
    adapter: &vk_core::Adapter,
    family: u32,
    api: Version,
    present: bool,
) -> Result<(ash::Device, Enabled)> {
    let caps = adapter.capabilities();
    let unsuitable = |problem: String| Error::Unsuitable {
        device: caps.name.clone(),
        problem,
    };
    if caps.api_version.0 < vk::API_VERSION_1_2 || api.0 < vk::API_VERSION_1_2 {
        return Err(unsuitable(format!(
            "needs Vulkan 1.2, the device has {} and the loader {}",
            caps.api_version, api
        )));
    }
    if !caps.features.contains(Features::TIMELINE_SEMAPHORE) {
        return Err(unsuitable("no timelineSemaphore".into()));
    }
    let mut extensions: Vec<*const c_char> = Vec::new();
    let mut names = BTreeSet::new();
    if present {
        extensions.push(ash::khr::swapchain::NAME.as_ptr());
        names.insert(ash::khr::swapchain::NAME.to_string_lossy().into_owned());
    }
    let priorities = [1.0f32];
    let queues = [vk::DeviceQueueCreateInfo::default()
        .queue_family_index(family)
        .queue_priorities(&priorities)];
    let mut v12 = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(true);
    let info = vk::DeviceCreateInfo::default()
        .queue_create_infos(&queues)
        .enabled_extension_names(&extensions)
        .push_next(&mut v12);
    // SAFETY: valid physical device and create info; the extension and feature were checked.
    let device =
        unsafe { instance.create_device(adapter.raw(), &info, None) }.vk("vkCreateDevice")?;
    let enabled = Enabled {
        api_version: Version(api.0.min(caps.api_version.0)).level(),
        extensions: names,
        features: Features::TIMELINE_SEMAPHORE,
        queue_family: family,
        queue_caps: QueueCaps::empty(),
    };
    Ok((device, enabled))
}

impl Engine {
    /// Loads Vulkan and makes the instance (with a surface for `window`), the device and its
    /// adoption by vk-core, on the adapter vk-core selects (`VKDELEGATE_DEVICE_INDEX`).
    ///
    /// # Safety
    /// `window`'s handles must stay valid until the `Engine` is dropped.
    pub unsafe fn new(window: Option<WindowHandles>) -> Result<Engine> {
        // SAFETY: loading the system's Vulkan loader runs its initialisers; nothing else here
        // loads one at the same time.
        let entry = unsafe { ash::Entry::load() }.map_err(|e| Error::Unsuitable {
            device: "(none)".into(),
            problem: format!("no Vulkan loader: {e}"),
        })?;
        let validation = Arc::new(ValidationCount::default());
        let made = create_instance(&entry, window.as_ref(), &validation)?;
        let mut owner = InstanceOwner {
            entry,
            instance: made.instance,
            api: made.api,
            messenger: made.messenger,
            validation,
            surface: None,
            leak: false,
        };
        if let Some(w) = window {
            // SAFETY: the caller guarantees the handles outlive the engine, which destroys
            // the surface before the instance.
            let surface = unsafe {
                ash_window::create_surface(&owner.entry, &owner.instance, w.display, w.window, None)
            }
            .vk("vkCreateSurfaceKHR")?;
            let fns = ash::khr::surface::Instance::new(&owner.entry, &owner.instance);
            owner.surface = Some((fns, surface));
        }
        Engine::with_device(owner)
    }

    /// Adopts the instance into vk-core, selects the adapter, creates and adopts the device.
    fn with_device(owner: InstanceOwner) -> Result<Engine> {
        // SAFETY: the instance is live and outlives every vk-core object made from it: the
        // engine drops vk-core's last device reference before destroying the instance.
        let core_instance = unsafe {
            vk_core::Instance::from_raw(
                owner.entry.clone(),
                owner.instance.handle(),
                owner.api,
                false,
            )
        };
        let adapter = core_instance.select_adapter()?;
        let family = pick_family(&adapter, owner.surface.as_ref())?;
        let present = owner.surface.is_some();
        let (device, enabled) =
            create_device(&owner.instance, &adapter, family, owner.api, present)?;
        let (tx, released) = mpsc::channel();
        let on_drop: vk_core::DropCallback = Box::new(move || {
            let _ = tx.send(());
        });
        let lock: Arc<dyn QueueLock> = Arc::new(DefaultQueueLock::default());
        // SAFETY: `device` was made from `adapter` with what `enabled` states and one queue of
        // `family`; the engine destroys it only after `on_drop` has run; every submission of
        // the engine's goes through vk-core's queue guard, so `lock` is the queue's only lock.
        let adopted = unsafe {
            vk_core::Device::from_raw(
                &adapter,
                device.handle(),
                enabled,
                0,
                Some(lock),
                Some(on_drop),
            )
        };
        let core = match adopted {
            Ok(core) => core,
            Err(e) => {
                // SAFETY: nothing was made from the device.
                unsafe { device.destroy_device(None) };
                return Err(e.into());
            }
        };
        Ok(Engine {
            core: Some(core),
            device: Some(device),
            released,
            owner,
        })
    }

    /// The adopted device.
    pub fn device(&self) -> &vk_core::Device {
        self.core
            .as_ref()
            .expect("the adopted device is `Some` until the engine drops")
    }

    /// The `ash` instance.
    pub fn instance(&self) -> &ash::Instance {
        &self.owner.instance
    }

    /// The `ash` entry.
    pub fn entry(&self) -> &ash::Entry {
        &self.owner.entry
    }

    /// The window surface and its functions, when presenting.
    pub fn surface(&self) -> Option<&(ash::khr::surface::Instance, vk::SurfaceKHR)> {
        self.owner.surface.as_ref()
    }

    /// Validation errors reported so far (0 without validation).
    pub fn validation_errors(&self) -> u64 {
        self.owner.validation.0.load(Ordering::SeqCst)
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.core = None;
        let Some(device) = self.device.take() else {
            return;
        };
        if self.released.try_recv().is_ok() {
            // SAFETY: vk-core's last reference is gone (its `on_drop` ran), and every object
            // the engine made from the device was destroyed before (see `FrameLoop`'s drop
            // order); its work was waited for.
            unsafe {
                let _ = device.device_wait_idle();
                device.destroy_device(None);
            }
        } else {
            log::warn!("a vk-core reference to the device outlived the engine: not destroying it");
            // The instance must outlive the device: leak it too.
            self.owner.leak = true;
        }
    }
}
