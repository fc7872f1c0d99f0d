//! Fuzzes the lowering of ExecuTorch programs: whatever decodes is lowered as a load lowers it
//! before it touches a device (its CPU kernels onto the registry, its `VulkanBackend` graphs
//! onto the compute delegate). Any input must lower or give an error: never a panic, and never
//! an allocation sized by an untrusted count.
//!
//! Run: `cargo xtask fuzz` (every target, seeded from the fixtures), or
//! `RUSTC_BOOTSTRAP=1 cargo fuzz run pte_lower fuzz/corpus/pte_lower`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = vkdelegate::pte::program_builder(std::sync::Arc::from(data), None) {
        let _ = e.to_string();
    }
});
