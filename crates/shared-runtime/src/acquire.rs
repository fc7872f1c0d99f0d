//! What delegates call: the requirements of every compiled-in delegate, shared-device
//! creation from their union, and [`acquire`] per sharing mode.

use std::sync::Arc;

use vk_core::{Capabilities, Instance, InstanceDesc, Requirements};

use crate::context::{ContextParts, Lease};
use crate::error::Error;
use crate::options::{Mode, SharingOptions};
use crate::registry::{self, Registry};

/// A delegate's declaration of what it needs from a device. Every delegate compiled into the
/// process with sharing support registers one in [`DELEGATE_REQUIREMENTS`], so whoever creates a
/// shared device can ask for what all of them need, whatever the load order.
#[derive(Debug, Clone, Copy)]
pub struct DelegateRequirements {
    /// Delegate name (`vgf`, `compute`, ...).
    pub name: &'static str,
    /// Its requirements.
    pub requirements: fn() -> Requirements,
}

/// The requirements of every delegate compiled into the process.
///
/// Register with
/// `#[linkme::distributed_slice(shared_runtime::DELEGATE_REQUIREMENTS)]` on a
/// `static _: DelegateRequirements`.
#[linkme::distributed_slice]
pub static DELEGATE_REQUIREMENTS: [DelegateRequirements];

/// The compiled-in delegates' requirements, by name (sorted, for a stable order).
pub fn compiled_requirements() -> Vec<(&'static str, Requirements)> {
    let mut v: Vec<(&'static str, Requirements)> = DELEGATE_REQUIREMENTS
        .iter()
        .map(|d| (d.name, (d.requirements)()))
        .collect();
    v.sort_by_key(|(n, _)| *n);
    v
}

/// What to create a shared device with on a device with `caps`: the creator's own requirements
/// (required), plus, for each compiled-in delegate whose requirements the device meets
/// together with those already chosen, that delegate's requirements too. A delegate the device
/// cannot serve is left out (it will get a clear error when it tries to use the context).
pub fn creation_requirements(own: &Requirements, caps: &Capabilities) -> Requirements {
    let mut union = own.clone();
    for (name, req) in compiled_requirements() {
        let candidate = union.union(&req);
        match candidate.resolve(caps) {
            Ok(_) => union = candidate,
            Err(missing) => {
                log::info!(
                    "shared device on '{}' leaves out delegate {name}: {missing}",
                    caps.name
                );
            }
        }
    }
    union
}

/// Creates the parts of a shared context: a new instance, the selected adapter, a device with
/// [`creation_requirements`].
pub fn create_context(
    desc: &InstanceDesc,
    own: &Requirements,
) -> Result<ContextParts, vk_core::Error> {
    let instance = Instance::new(desc)?;
    let adapter = instance.select_adapter()?;
    let requirements = creation_requirements(own, adapter.capabilities());
    // The creator's own requirements must hold: report them, not the union, when they fail.
    adapter.check(own)?;
    let device = adapter.create_device(&requirements)?;
    Ok(ContextParts {
        device,
        anchor: None,
    })
}

/// Resolves a delegate instance's sharing options on the process-wide registry. `Ok(None)`:
/// sharing is disabled, the delegate makes its own device (and the registry is not created).
pub fn acquire(
    options: &SharingOptions,
    requirements: &Requirements,
    holder: &str,
) -> Result<Option<Lease>, Error> {
    if !options.enabled() {
        return Ok(None);
    }
    acquire_in(
        registry::global(),
        options,
        requirements,
        holder,
        &InstanceDesc::default(),
    )
}

/// As [`acquire`], on `registry`, creating instances as `desc` says.
pub fn acquire_in(
    registry: &Registry,
    options: &SharingOptions,
    requirements: &Requirements,
    holder: &str,
    desc: &InstanceDesc,
) -> Result<Option<Lease>, Error> {
    let key = options.key();
    let context = match options.mode {
        Mode::Disabled => return Ok(None),
        Mode::LookupOnly => registry.lookup(&key).ok_or_else(|| Error::NotFound {
            key: key.clone(),
            hint: " (shared.mode lookup_only: register a context under this key first, or use \
                   lookup_or_create)",
        })?,
        Mode::LookupOrCreate => {
            registry
                .lookup_or_create(&key, || create_context(desc, requirements))?
                .context
        }
        Mode::CreateOnly => {
            let acquired =
                registry.lookup_or_create(&key, || create_context(desc, requirements))?;
            if !acquired.created {
                return Err(Error::AlreadyExists {
                    key,
                    device: acquired.context.capabilities().name.clone(),
                    generation: acquired.context.generation(),
                });
            }
            acquired.context
        }
    };
    context.check(requirements)?;
    Ok(Some(Arc::clone(&context).lease(holder)))
}
