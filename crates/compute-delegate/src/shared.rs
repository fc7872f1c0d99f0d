//! Registration with `shared-runtime` (feature `shared`): whoever creates a shared device, in
//! whatever order delegates load, also asks for what compute graphs need.

use shared_runtime::linkme::distributed_slice;
use shared_runtime::{DELEGATE_REQUIREMENTS, DelegateRequirements};

#[distributed_slice(DELEGATE_REQUIREMENTS)]
#[linkme(crate = shared_runtime::linkme)]
static COMPUTE: DelegateRequirements = DelegateRequirements {
    name: "compute",
    requirements: crate::requirements,
};
