//! Loading Vulkan, creating (or adopting) an instance, validation messages.

use std::ffi::{CStr, CString, c_void};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ash::vk;

use crate::device::conv::{Version, fixed_str};
use crate::device::emulation::{self, EmulationLayers, EmulationPolicy};
use crate::error::{Error, VkResultExt};

/// The Khronos validation layer.
pub const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";
/// Environment variable that turns validation on: `1` (core and synchronization validation)
/// or `core` (core validation only).
pub const ENV_VALIDATION: &str = "VKDELEGATE_VALIDATION";
/// Environment variable that picks a device by enumeration index.
pub const ENV_DEVICE_INDEX: &str = "VKDELEGATE_DEVICE_INDEX";

/// Set by `testing::validate_every_instance` (feature `testing`): every [`InstanceDesc::default`] asks for
/// validation, whatever the environment says.
static VALIDATE_EVERY_INSTANCE: AtomicBool = AtomicBool::new(false);

/// Makes every later [`InstanceDesc::default`] ask for validation (test harnesses).
#[cfg(any(test, feature = "testing"))]
pub(crate) fn validate_every_instance() {
    VALIDATE_EVERY_INSTANCE.store(true, Ordering::SeqCst);
}

/// Serializes instance creation: the loader reads its layer environment while creating an
/// instance, and `vk-core` may extend that environment just before.
static INSTANCE_CREATION: Mutex<()> = Mutex::new(());

/// Serializes device creation and destruction, and instance destruction, on instances that
/// use Arm's emulation layers: with the layers on the NVIDIA driver, two threads creating or
/// destroying devices at once were seen to end the process.
static EMULATION_SERIAL: Mutex<()> = Mutex::new(());

/// Holds [`EMULATION_SERIAL`] when `emulated`; `None` otherwise.
pub(crate) fn emulation_serial(emulated: bool) -> Option<std::sync::MutexGuard<'static, ()>> {
    emulated.then(|| EMULATION_SERIAL.lock().unwrap_or_else(|p| p.into_inner()))
}

/// How to create an instance.
#[derive(Debug, Clone)]
pub struct InstanceDesc {
    /// Application name given to the driver.
    pub app_name: String,
    /// Enable the Khronos validation layer (an error when it is not installed), with its
    /// synchronization validation (`VK_EXT_validation_features`) unless `VKDELEGATE_VALIDATION`
    /// says `core`.
    pub validation: bool,
    /// What to do about Arm's emulation layers.
    pub emulation: EmulationPolicy,
    /// Highest API version to ask for; the loader's own limit applies below it.
    pub max_api_version: Version,
}

impl Default for InstanceDesc {
    /// Validation from `VKDELEGATE_VALIDATION` (or always, after
    /// `testing::validate_every_instance`), emulation from the environment or beside
    /// the executable, API up to 1.3.
    fn default() -> Self {
        InstanceDesc {
            app_name: "vkdelegate".to_owned(),
            validation: VALIDATE_EVERY_INSTANCE.load(Ordering::SeqCst)
                || std::env::var(ENV_VALIDATION)
                    .is_ok_and(|v| matches!(v.as_str(), "1" | "true" | "on" | "yes" | "core")),
            emulation: EmulationPolicy::Auto,
            max_api_version: Version::V1_3,
        }
    }
}

/// Validation messages seen by one instance: counted, logged, the first few kept.
#[derive(Debug, Default)]
pub struct ValidationLog {
    errors: AtomicU64,
    warnings: AtomicU64,
    first_errors: Mutex<Vec<String>>,
}

impl ValidationLog {
    const KEPT: usize = 4096;

    /// Number of error messages so far.
    pub fn error_count(&self) -> u64 {
        self.errors.load(Ordering::SeqCst)
    }

    /// Number of warning messages so far.
    pub fn warning_count(&self) -> u64 {
        self.warnings.load(Ordering::SeqCst)
    }

    /// The first error messages (up to 4096).
    pub fn first_errors(&self) -> Vec<String> {
        self.first_errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn record(&self, severity: vk::DebugUtilsMessageSeverityFlagsEXT, message: &str) {
        if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR) {
            self.errors.fetch_add(1, Ordering::SeqCst);
            let mut kept = self.first_errors.lock().unwrap_or_else(|p| p.into_inner());
            if kept.len() < Self::KEPT {
                kept.push(message.to_owned());
            }
            log::error!(target: "vulkan", "{message}");
        } else if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::WARNING) {
            self.warnings.fetch_add(1, Ordering::SeqCst);
            log::warn!(target: "vulkan", "{message}");
        } else if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::INFO) {
            log::debug!(target: "vulkan", "{message}");
        } else {
            log::trace!(target: "vulkan", "{message}");
        }
    }
}

unsafe extern "system" fn debug_callback(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user: *mut c_void,
) -> vk::Bool32 {
    if data.is_null() || user.is_null() {
        return vk::FALSE;
    }
    // SAFETY: `user` is the `ValidationLog` the messenger was created with; the instance holds
    // an `Arc` of it until after the messenger is destroyed. `data` is valid for this call.
    let (log, data) = unsafe { (&*(user as *const ValidationLog), &*data) };
    let message = if data.p_message.is_null() {
        String::from("(no message)")
    } else {
        // SAFETY: the layer passes a NUL-terminated string valid for this call.
        unsafe { CStr::from_ptr(data.p_message) }
            .to_string_lossy()
            .into_owned()
    };
    log.record(severity, &message);
    vk::FALSE
}

/// A Vulkan instance, owned or adopted. Cheap to clone; destroyed (when owned) after the last
/// clone and the last device created from it are gone.
#[derive(Clone)]
pub struct Instance {
    pub(crate) shared: Arc<InstanceShared>,
}

pub(crate) struct InstanceShared {
    pub(crate) entry: ash::Entry,
    pub(crate) raw: ash::Instance,
    pub(crate) api_version: Version,
    debug: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
    pub(crate) validation: Arc<ValidationLog>,
    pub(crate) validation_enabled: bool,
    pub(crate) sync_validation_enabled: bool,
    pub(crate) emulated: bool,
    pub(crate) layers: Vec<String>,
    owned: bool,
}

impl Drop for InstanceShared {
    fn drop(&mut self) {
        if let Some((loader, messenger)) = self.debug.take() {
            // SAFETY: the messenger was created from this instance and is destroyed once.
            unsafe { loader.destroy_debug_utils_messenger(messenger, None) };
        }
        if self.owned {
            let _serial = emulation_serial(self.emulated);
            // SAFETY: every child (devices, adapters) holds an `Arc` of this struct, so none is
            // alive; the instance was created by us and is destroyed once.
            unsafe { self.raw.destroy_instance(None) };
        }
    }
}

impl fmt::Debug for Instance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Instance")
            .field("raw", &self.shared.raw.handle())
            .field("api_version", &self.shared.api_version)
            .field("layers", &self.shared.layers)
            .field("owned", &self.shared.owned)
            .finish()
    }
}

fn load_entry() -> Result<ash::Entry, Error> {
    // SAFETY: loading the system Vulkan loader runs its initialisers; that is the documented
    // way to use a dynamically loaded Vulkan.
    unsafe { ash::Entry::load() }.map_err(|e| Error::LoaderNotFound {
        detail: e.to_string(),
    })
}

fn instance_layer_names(entry: &ash::Entry) -> Result<Vec<String>, Error> {
    // SAFETY: plain query on a loaded entry.
    let props = unsafe { entry.enumerate_instance_layer_properties() }
        .vk("vkEnumerateInstanceLayerProperties")?;
    Ok(props.iter().map(|p| fixed_str(&p.layer_name)).collect())
}

/// Whether synchronization validation goes with validation: always, unless
/// `VKDELEGATE_VALIDATION=core`.
fn sync_validation_wanted() -> bool {
    std::env::var(ENV_VALIDATION).map_or(true, |v| v != "core")
}

/// Whether the validation layer provides the instance extension `name`.
fn validation_layer_has(entry: &ash::Entry, name: &CStr) -> Result<bool, Error> {
    // SAFETY: plain query on a loaded entry, for a layer listed as available.
    let props = unsafe { entry.enumerate_instance_extension_properties(Some(VALIDATION_LAYER)) }
        .vk("vkEnumerateInstanceExtensionProperties")?;
    Ok(props
        .iter()
        .any(|p| fixed_str(&p.extension_name).as_bytes() == name.to_bytes()))
}

/// Whether any physical device offers the ARM extensions without layers.
fn any_native_arm(entry: &ash::Entry, api: Version) -> Result<bool, Error> {
    let app = vk::ApplicationInfo::default().api_version(api.0);
    let info = vk::InstanceCreateInfo::default().application_info(&app);
    // SAFETY: a valid create info without layers or extensions.
    let probe = match unsafe { entry.create_instance(&info, None) } {
        Ok(p) => p,
        Err(vk::Result::ERROR_INCOMPATIBLE_DRIVER) => return Err(Error::NoDriver),
        Err(e) => return Err(crate::error::VkError::new("vkCreateInstance", e).into()),
    };
    // SAFETY: `probe` is alive until destroyed below.
    let found = unsafe { probe.enumerate_physical_devices() }
        .unwrap_or_default()
        .into_iter()
        .any(|pd| {
            // SAFETY: `pd` belongs to `probe`.
            unsafe { probe.enumerate_device_extension_properties(pd) }
                .unwrap_or_default()
                .iter()
                .any(|e| fixed_str(&e.extension_name) == "VK_ARM_data_graph")
        });
    // SAFETY: nothing created from `probe` survives.
    unsafe { probe.destroy_instance(None) };
    Ok(found)
}

/// Enables Arm's emulation layers (pushed onto `layers`, Graph above Tensor) where they are
/// found and no device has the ARM extensions natively.
fn emulation_layers(
    entry: &ash::Entry,
    desc: &InstanceDesc,
    api_version: Version,
    layers: &mut Vec<CString>,
) -> Result<Option<EmulationLayers>, Error> {
    let Some(found) = desc.emulation.locate()? else {
        return Ok(None);
    };
    // The drivers a process sees do not change: probe once.
    static NATIVE_ARM: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    // A probe that fails (no driver) reports no native support; the instance creation then
    // reports the real problem.
    let native = *NATIVE_ARM.get_or_init(|| any_native_arm(entry, api_version).unwrap_or(false));
    if native {
        log::info!("a device offers the ARM ML extensions natively: emulation layers unused");
        return Ok(None);
    }
    emulation::expose_to_loader(&found);
    let available = instance_layer_names(entry)?;
    let has = |l: &CStr| available.iter().any(|a| a.as_bytes() == l.to_bytes());
    if has(emulation::GRAPH_LAYER) && has(emulation::TENSOR_LAYER) {
        layers.push(emulation::GRAPH_LAYER.to_owned());
        layers.push(emulation::TENSOR_LAYER.to_owned());
        return Ok(Some(found));
    }
    let problem = format!(
        "the loader did not list {} and {} after adding {} and {} to its layer path",
        emulation::GRAPH_LAYER.to_string_lossy(),
        emulation::TENSOR_LAYER.to_string_lossy(),
        found.graph_dir.display(),
        found.tensor_dir.display()
    );
    if matches!(desc.emulation, EmulationPolicy::Dir(_))
        || std::env::var_os(emulation::ENV_DIR).is_some()
    {
        return Err(Error::EmulationLayer {
            dir: found.graph_dir.display().to_string(),
            problem,
        });
    }
    log::warn!("emulation layers not used: {problem}");
    Ok(None)
}

/// Enables the validation layer (below the emulation layers, where it validates what reaches
/// the driver) when `desc` asks, and returns the instance extensions that go with it.
fn validation_layers(
    entry: &ash::Entry,
    desc: &InstanceDesc,
    layers: &mut Vec<CString>,
) -> Result<Vec<&'static CStr>, Error> {
    let mut extensions: Vec<&'static CStr> = Vec::new();
    if !desc.validation {
        return Ok(extensions);
    }
    let available = instance_layer_names(entry)?;
    if !available
        .iter()
        .any(|a| a.as_bytes() == VALIDATION_LAYER.to_bytes())
    {
        return Err(Error::ValidationLayerMissing);
    }
    layers.push(VALIDATION_LAYER.to_owned());
    extensions.push(ash::ext::debug_utils::NAME);
    if sync_validation_wanted() {
        if !validation_layer_has(entry, ash::ext::validation_features::NAME)? {
            return Err(Error::ValidationLayerMissing);
        }
        extensions.push(ash::ext::validation_features::NAME);
    }
    Ok(extensions)
}

impl Instance {
    /// Loads Vulkan and creates an instance as `desc` asks.
    pub fn new(desc: &InstanceDesc) -> Result<Instance, Error> {
        let _serial = INSTANCE_CREATION.lock().unwrap_or_else(|p| p.into_inner());
        let entry = load_entry()?;
        // SAFETY: plain query on a loaded entry.
        let loader_api = unsafe { entry.try_enumerate_instance_version() }
            .vk("vkEnumerateInstanceVersion")?
            .unwrap_or(vk::API_VERSION_1_0);
        let api_version = Version(loader_api.min(desc.max_api_version.0)).level();

        let mut layers: Vec<CString> = Vec::new();
        let emulation = emulation_layers(&entry, desc, api_version, &mut layers)?;
        let extensions = validation_layers(&entry, desc, &mut layers)?;
        let sync_validation = desc.validation && sync_validation_wanted();

        let validation = Arc::new(ValidationLog::default());
        let mut messenger_info = vk::DebugUtilsMessengerCreateInfoEXT::default()
            .message_severity(
                vk::DebugUtilsMessageSeverityFlagsEXT::ERROR
                    | vk::DebugUtilsMessageSeverityFlagsEXT::WARNING
                    | vk::DebugUtilsMessageSeverityFlagsEXT::INFO,
            )
            .message_type(
                vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                    | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                    | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
            )
            .pfn_user_callback(Some(debug_callback))
            .user_data(Arc::as_ptr(&validation) as *mut c_void);

        let app_name = CString::new(desc.app_name.replace('\0', " ")).unwrap_or_default();
        let app = vk::ApplicationInfo::default()
            .application_name(&app_name)
            .engine_name(c"vkdelegate")
            .api_version(api_version.0);
        let layer_ptrs: Vec<*const std::ffi::c_char> = layers.iter().map(|l| l.as_ptr()).collect();
        let ext_ptrs: Vec<*const std::ffi::c_char> =
            extensions.iter().map(|e| e.as_ptr()).collect();
        let mut info = vk::InstanceCreateInfo::default()
            .application_info(&app)
            .enabled_layer_names(&layer_ptrs)
            .enabled_extension_names(&ext_ptrs);
        let enables = [vk::ValidationFeatureEnableEXT::SYNCHRONIZATION_VALIDATION];
        let mut features =
            vk::ValidationFeaturesEXT::default().enabled_validation_features(&enables);
        if desc.validation {
            info = info.push_next(&mut messenger_info);
        }
        if sync_validation {
            info = info.push_next(&mut features);
        }
        // SAFETY: every pointer in `info` refers to locals alive across the call; the layers and
        // extensions were checked to exist.
        let raw = match unsafe { entry.create_instance(&info, None) } {
            Ok(raw) => raw,
            // The loader's answer when it found no driver manifest it could load.
            Err(vk::Result::ERROR_INCOMPATIBLE_DRIVER) => return Err(Error::NoDriver),
            Err(e) => return Err(crate::error::VkError::new("vkCreateInstance", e).into()),
        };

        let debug = if desc.validation {
            let loader = ash::ext::debug_utils::Instance::new(&entry, &raw);
            // SAFETY: the create info is valid; `validation` outlives the messenger (both are
            // owned by the `InstanceShared` built below, which destroys the messenger first).
            match unsafe { loader.create_debug_utils_messenger(&messenger_info, None) } {
                Ok(m) => Some((loader, m)),
                Err(e) => {
                    // SAFETY: nothing else was created from `raw`.
                    unsafe { raw.destroy_instance(None) };
                    return Err(
                        crate::error::VkError::new("vkCreateDebugUtilsMessengerEXT", e).into(),
                    );
                }
            }
        } else {
            None
        };

        let layers = layers
            .iter()
            .map(|l| l.to_string_lossy().into_owned())
            .collect();
        log::debug!("instance created: API {api_version}, layers {layers:?}");
        Ok(Instance {
            shared: Arc::new(InstanceShared {
                entry,
                raw,
                api_version,
                debug,
                validation,
                validation_enabled: desc.validation,
                sync_validation_enabled: sync_validation,
                emulated: emulation.is_some(),
                layers,
                owned: true,
            }),
        })
    }

    /// Adopts an instance the application created and keeps owning.
    ///
    /// # Safety
    /// - `raw` must be a valid instance created from `entry`'s loader with API version
    ///   `api_version`, and must stay valid until every `vk-core` object made from the returned
    ///   value (adapters, devices, clones) has been dropped; `vk-core` never destroys it.
    /// - `emulation_layers` must be true exactly when the application enabled Arm's emulation
    ///   layers on it (it decides whether ARM extensions are reported as emulated).
    pub unsafe fn from_raw(
        entry: ash::Entry,
        raw: vk::Instance,
        api_version: Version,
        emulation_layers: bool,
    ) -> Instance {
        // SAFETY: the caller guarantees `raw` is a live instance of `entry`.
        let instance = unsafe { ash::Instance::load(entry.static_fn(), raw) };
        Instance {
            shared: Arc::new(InstanceShared {
                entry,
                raw: instance,
                api_version,
                debug: None,
                validation: Arc::new(ValidationLog::default()),
                validation_enabled: false,
                sync_validation_enabled: false,
                emulated: emulation_layers,
                layers: Vec::new(),
                owned: false,
            }),
        }
    }

    /// The `ash` instance.
    pub fn raw(&self) -> &ash::Instance {
        &self.shared.raw
    }

    /// The `ash` entry (loader).
    pub fn entry(&self) -> &ash::Entry {
        &self.shared.entry
    }

    /// API version the instance was created with.
    pub fn api_version(&self) -> Version {
        self.shared.api_version
    }

    /// Layers enabled, closest to the application first.
    pub fn layers(&self) -> &[String] {
        &self.shared.layers
    }

    /// Whether Arm's emulation layers are enabled on this instance.
    pub fn emulation_enabled(&self) -> bool {
        self.shared.emulated
    }

    /// Whether the validation layer is enabled on this instance.
    pub fn validation_enabled(&self) -> bool {
        self.shared.validation_enabled
    }

    /// Whether the validation layer's synchronization validation is on too.
    pub fn sync_validation_enabled(&self) -> bool {
        self.shared.sync_validation_enabled
    }

    /// The validation messages seen so far (all zero when validation is off).
    pub fn validation(&self) -> &ValidationLog {
        &self.shared.validation
    }

    /// Whether two values are the same instance.
    pub fn same_as(&self, other: &Instance) -> bool {
        self.shared.raw.handle() == other.shared.raw.handle()
    }
}
