//! Fuzzes the VGF decoder: any input must decode or give an error, never panic, and whatever
//! decodes must describe itself (inspect JSON) and have its SPIR-V scanned.
//!
//! Run (nightly): `cargo +nightly fuzz run vgf_decode fuzz/corpus/vgf_decode`, seeded with the
//! corpus files (`mkdir -p fuzz/corpus/vgf_decode && cp ../shared/corpus/vgf/*/model.vgf ...`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(vgf) = vgf_delegate::Vgf::decode(data) {
        let _ = vgf_delegate::inspect_json(&vgf);
        let _ = vgf_delegate::requirements_for(&vgf);
        for s in &vgf.sequence.segments {
            let _ = s.graph_constants();
        }
    }
});
