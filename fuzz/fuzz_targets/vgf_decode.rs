//! Fuzzes the VGF decoder: any input must decode or give an error, never panic, and whatever
//! decodes must describe itself (inspect JSON), have its SPIR-V scanned, its GRAPH modules'
//! data graphs decoded, and its graph lowered for the native path (no device: the lowering
//! only builds the compute graph).
//!
//! Run: `cargo xtask fuzz` (every target, seeded from the fixtures), or
//! `RUSTC_BOOTSTRAP=1 cargo fuzz run vgf_decode fuzz/corpus/vgf_decode`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match vgf_delegate::Vgf::decode(data) {
        Ok(vgf) => {
            let _ = vgf_delegate::inspect_json(&vgf);
            let _ = vgf_delegate::requirements_for(&vgf);
            for s in &vgf.sequence.segments {
                let _ = s.graph_constants();
            }
            for m in &vgf.modules {
                if let (vgf_delegate::ModuleType::Graph, Some(spirv)) = (m.kind, &m.spirv) {
                    let _ = vgf_delegate::tosa::TosaGraph::decode(&spirv.words())
                        .map_err(|e| e.to_string());
                }
            }
        }
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    }
    if let Ok(file) = vkdelegate::vgf::VgfFile::decode(data.to_vec().into()) {
        let _ = vkdelegate::vgf_native::graph_of(&file).map_err(|e| e.to_string());
    }
});
