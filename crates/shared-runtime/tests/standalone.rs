//! Nothing process-wide exists unless sharing is used.

use shared_runtime::{SharingOptions, acquire, global_exists};
use vk_core::Requirements;

#[test]
fn disabled_sharing_creates_no_registry() {
    let opts = SharingOptions::parse([("other.option", "1")]).unwrap();
    let lease = acquire(&opts, &Requirements::new("standalone"), "standalone").unwrap();
    assert!(lease.is_none());
    assert!(
        !global_exists(),
        "the global registry was created with sharing disabled"
    );
}
