//! Requirements from SPIR-V capabilities (no GPU).
#![allow(clippy::unwrap_used)] // helpers outside #[test] functions

mod common;

use vgf_delegate::requirements::{REPLICATED_COMPOSITES_EXTENSION_NAME, capability, scan_spirv};
use vgf_delegate::{Vgf, requirements, requirements_for};
use vk_core::{Features, QueueCaps, arm};

/// SPIR-V capability names as `spirv-dis` prints them, for the numbers the corpus uses.
fn capability_name(c: u32) -> &'static str {
    match c {
        0 => "Matrix",
        1 => "Shader",
        capability::INT8 => "Int8",
        capability::INT16 => "Int16",
        capability::INT64 => "Int64",
        capability::FLOAT16 => "Float16",
        capability::TENSORS_ARM => "TensorsARM",
        capability::GRAPH_ARM => "GraphARM",
        capability::VULKAN_MEMORY_MODEL => "VulkanMemoryModel",
        capability::REPLICATED_COMPOSITES_EXT => "ReplicatedCompositesEXT",
        _ => "?",
    }
}

#[test]
fn scanned_capabilities_match_the_disassembly_summary() {
    for dir in common::corpus_models() {
        let Ok(summary) = std::fs::read_to_string(dir.join("vgf_summary.json")) else {
            continue;
        };
        let summary: serde_json::Value = serde_json::from_str(&summary).unwrap();
        let bytes = std::fs::read(dir.join("model.vgf")).unwrap();
        let vgf = Vgf::decode(&bytes).unwrap();
        let info = scan_spirv(0, vgf.modules[0].spirv.as_ref().unwrap()).unwrap();
        let ours: Vec<&str> = info
            .capabilities
            .iter()
            .map(|&c| capability_name(c))
            .collect();
        let theirs: Vec<&str> = summary["modules"][0]["capabilities"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(ours, theirs, "{}", dir.display());
        let exts: Vec<&str> = summary["modules"][0]["extensions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(info.extensions, exts);
        assert_eq!(info.ext_inst_imports, vec!["TOSA.001000.1".to_string()]);
    }
}

#[test]
fn model_requirements_follow_the_capabilities() {
    let dir = common::corpus_dir();
    let add = std::fs::read(dir.join("add/model.vgf")).unwrap();
    let req = requirements_for(&Vgf::decode(&add).unwrap()).unwrap();
    for ext in [
        arm::TENSORS_EXTENSION_NAME,
        arm::DATA_GRAPH_EXTENSION_NAME,
        arm::DATA_GRAPH_TOSA_EXTENSION_NAME,
    ] {
        assert!(req.required_extensions.contains(&ext), "{ext:?}");
    }
    assert!(req.required_features.contains(
        Features::TENSORS_ARM
            | Features::DATA_GRAPH_ARM
            | Features::SHADER_INT8
            | Features::VULKAN_MEMORY_MODEL
            | Features::SYNCHRONIZATION_2
    ));
    assert!(!req.required_features.contains(Features::SHADER_INT64));
    assert!(
        req.queue
            .contains(QueueCaps::COMPUTE | QueueCaps::DATA_GRAPH_ARM)
    );
    assert!(
        !req.optional_extensions
            .contains(&REPLICATED_COMPOSITES_EXTENSION_NAME)
    );

    // int8 conv uses replicated composites in a GRAPH module: optional, not required.
    let conv = std::fs::read(dir.join("conv_int8/model.vgf")).unwrap();
    let req = requirements_for(&Vgf::decode(&conv).unwrap()).unwrap();
    assert!(
        req.optional_extensions
            .contains(&REPLICATED_COMPOSITES_EXTENSION_NAME)
    );
    assert!(
        !req.required_extensions
            .contains(&REPLICATED_COMPOSITES_EXTENSION_NAME)
    );

    // A COMPUTE-only model needs neither the data-graph extension nor its queue.
    let file = vgf_delegate::format::test_support::compute_file(Default::default());
    let req = requirements_for(&Vgf::decode(&file).unwrap()).unwrap();
    assert!(
        !req.required_extensions
            .contains(&arm::DATA_GRAPH_EXTENSION_NAME)
    );
    assert!(!req.queue.contains(QueueCaps::DATA_GRAPH_ARM));

    // The base set covers what every model may need from the ARM extensions.
    let base = requirements();
    assert_eq!(base.requester, "vgf-delegate");
    assert!(
        base.required_features
            .contains(Features::DATA_GRAPH_SHADER_MODULE_ARM)
    );
}

#[test]
fn invalid_spirv_is_an_error_not_a_panic() {
    use vgf_delegate::format::test_support::{Options, compute_file};
    // Bad magic.
    let file = compute_file(Options {
        spirv: vec![1, 2, 3, 4, 5],
        ..Default::default()
    });
    let e = requirements_for(&Vgf::decode(&file).unwrap()).unwrap_err();
    assert!(e.to_string().contains("SPIR-V magic"), "{e}");
    // An instruction whose word count runs past the end.
    let file = compute_file(Options {
        spirv: vec![0x0723_0203, 0x0001_0500, 0, 10, 0, (9 << 16) | 17, 1],
        ..Default::default()
    });
    let e = requirements_for(&Vgf::decode(&file).unwrap()).unwrap_err();
    assert!(e.to_string().contains("word count 9"), "{e}");
    // A zero word count.
    let file = compute_file(Options {
        spirv: vec![0x0723_0203, 0x0001_0500, 0, 10, 0, 0],
        ..Default::default()
    });
    assert!(requirements_for(&Vgf::decode(&file).unwrap()).is_err());
}
