//! Fuzzes the ExecuTorch program decoder: any input must decode or give an error, never panic.
//! Whatever decodes has every plan walked, every delegate payload resolved, and every
//! `VulkanBackend` payload decoded with each of its constants resolved.
//!
//! Run: `cargo xtask fuzz` (every target, seeded from the fixtures), or
//! `RUSTC_BOOTSTRAP=1 cargo fuzz run pte_decode fuzz/corpus/pte_decode`.
#![no_main]

use executorch_pte::{Program, VULKAN_BACKEND_ID, VkGraph};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let program = match Program::decode(data) {
        Ok(p) => p,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let _ = program.forward();
    for plan in program.plans() {
        let _ = program.plan(plan.name);
        for value in &plan.values {
            if let Some(t) = value.as_tensor() {
                let _ = program.constant_data(t);
            }
        }
        for delegate in &plan.delegates {
            let Ok(payload) = program.delegate_payload(delegate) else {
                continue;
            };
            // Decode every payload as a graph, not only those the id names: the id is as
            // untrusted as the payload.
            match VkGraph::decode(payload) {
                Ok(graph) => {
                    for c in 0..graph.constants.len() {
                        let _ = graph.constant(c, &program);
                    }
                    let _ = graph.op_names();
                }
                Err(e) => {
                    let _ = (e.to_string(), delegate.id == VULKAN_BACKEND_ID);
                }
            }
        }
    }
    for entry in program.named_data_entries() {
        let _ = program.named_data(entry.key);
    }
});
