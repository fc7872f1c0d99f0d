//! Registration with `shared-runtime` (feature `shared`): whoever creates a shared device, in
//! whatever order delegates load, also asks for what compute graphs need and may use.
//!
//! A shared device is made once, for every graph that will run on it, so it asks (optionally)
//! for everything the compute kernels may use: the f16 features and the cooperative-matrix
//! features. Otherwise the first delegate to create it would decide: an fp16 graph joining a
//! context made for an fp32 one would compute in fp32.

use shared_runtime::linkme::distributed_slice;
use shared_runtime::{DELEGATE_REQUIREMENTS, DelegateRequirements};
use vk_core::Requirements;

/// The compute delegate's requirements of a shared device.
fn shared_requirements() -> Requirements {
    crate::requirements().optional_features(crate::F16_FEATURES | crate::COOPERATIVE_FEATURES)
}

#[distributed_slice(DELEGATE_REQUIREMENTS)]
#[linkme(crate = shared_runtime::linkme)]
static COMPUTE: DelegateRequirements = DelegateRequirements {
    name: "compute",
    requirements: shared_requirements,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_devices_ask_for_fp16_and_cooperative_features_optionally() {
        let r = shared_requirements();
        assert!(r.optional_features.contains(crate::F16_FEATURES));
        assert!(r.optional_features.contains(crate::COOPERATIVE_FEATURES));
        assert_eq!(r.required_features, crate::requirements().required_features);
    }
}
