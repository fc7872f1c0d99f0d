//! Load order does not matter: two delegates compiled into this test binary (one needing the
//! ARM ML extensions, one plain compute) end on the same device whichever acquires first.
//! Needs the ARM extensions (natively or through Arm's emulation layer).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use std::sync::Arc;

use shared_runtime::linkme::distributed_slice;
use shared_runtime::{
    DELEGATE_REQUIREMENTS, DelegateRequirements, Mode, Registry, SharingOptions, acquire_in,
};
use vk_core::testing::{self, assert_no_validation_errors};
use vk_core::{ArmSupport, Features, InstanceDesc, QueueCaps, Requirements, Version, arm};

fn graph_like() -> Requirements {
    Requirements::new("graph-like")
        .require_extension(arm::TENSORS_EXTENSION_NAME)
        .require_extension(arm::DATA_GRAPH_EXTENSION_NAME)
        .require_features(Features::TENSORS_ARM | Features::DATA_GRAPH_ARM)
        .require_queue(QueueCaps::COMPUTE | QueueCaps::DATA_GRAPH_ARM)
        .min_api(Version::V1_3)
}

fn compute_like() -> Requirements {
    Requirements::new("compute-like")
        .optional_features(Features::SHADER_INT16 | Features::STORAGE_BUFFER_16BIT)
}

#[distributed_slice(DELEGATE_REQUIREMENTS)]
#[linkme(crate = shared_runtime::linkme)]
static GRAPH_LIKE: DelegateRequirements = DelegateRequirements {
    name: "graph-like",
    requirements: graph_like,
};

#[distributed_slice(DELEGATE_REQUIREMENTS)]
#[linkme(crate = shared_runtime::linkme)]
static COMPUTE_LIKE: DelegateRequirements = DelegateRequirements {
    name: "compute-like",
    requirements: compute_like,
};

/// One test of this binary at a time: each creates its own devices, and Arm's emulation layer
/// 0.11 was seen to crash the process on the NVIDIA driver when two devices were used from two
/// threads at once (lavapipe is unaffected).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

fn has_arm(test: &str) -> Option<InstanceDesc> {
    let desc = InstanceDesc {
        validation: true,
        ..InstanceDesc::default()
    };
    let instance = testing::instance(test)?;
    let adapter = instance.select_adapter().ok()?;
    if adapter.capabilities().arm == ArmSupport::Absent {
        testing::skip(
            test,
            "no VK_ARM_tensors/VK_ARM_data_graph, native or emulated",
        );
        return None;
    }
    Some(desc)
}

fn run_order(first: fn() -> Requirements, second: fn() -> Requirements, desc: &InstanceDesc) {
    let registry = Registry::new();
    let opts = SharingOptions {
        mode: Mode::LookupOrCreate,
        token: "order".into(),
        group_id: 0,
    };
    let a = acquire_in(&registry, &opts, &first(), "first", desc)
        .unwrap()
        .unwrap();
    let b = acquire_in(&registry, &opts, &second(), "second", desc)
        .unwrap_or_else(|e| panic!("second delegate refused: {e}"))
        .unwrap();
    assert!(Arc::ptr_eq(a.context(), b.context()));
    assert!(a.device().same_as(b.device()));
    assert_eq!(a.context().queue(), b.context().queue());
    let enabled = a.context().enabled();
    assert!(enabled.has_extension(arm::TENSORS_EXTENSION_NAME));
    assert!(enabled.has_extension(arm::DATA_GRAPH_EXTENSION_NAME));
    assert!(
        enabled
            .features
            .contains(Features::TENSORS_ARM | Features::DATA_GRAPH_ARM)
    );
    assert!(enabled.queue_caps.contains(QueueCaps::DATA_GRAPH_ARM));
    let instance = a.context().instance().clone();
    drop((a, b));
    registry.clear();
    assert_no_validation_errors(&instance);
}

#[test]
fn compiled_in_delegates_are_listed() {
    let _serial = serial();
    let names: Vec<&str> = shared_runtime::compiled_requirements()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, vec!["compute-like", "graph-like"]);
}

#[test]
fn graph_first_then_compute_share_one_device() {
    let _serial = serial();
    let Some(desc) = has_arm("graph_first_then_compute") else {
        return;
    };
    run_order(graph_like, compute_like, &desc);
}

#[test]
fn compute_first_then_graph_share_one_device() {
    let _serial = serial();
    let Some(desc) = has_arm("compute_first_then_graph") else {
        return;
    };
    run_order(compute_like, graph_like, &desc);
}
