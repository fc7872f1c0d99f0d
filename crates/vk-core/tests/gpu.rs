//! GPU integration tests of vk-core: run on the selected device (lavapipe in CI) with the
//! Khronos validation layer on; every test ends by asserting zero validation errors.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use vk_core::arm::{self, TensorARM, TensorViewARM};
use vk_core::testing::{self, assert_no_validation_errors};
use vk_core::{
    ArmSupport, DeviceType, Enabled, Error, Features, Instance, QueueCaps, Requirements, Version,
    rank, vk,
};

#[test]
fn adapters_are_enumerated_ranked_and_described() {
    let Some(instance) = testing::instance("adapters_are_enumerated_ranked_and_described") else {
        return;
    };
    assert!(instance.validation_enabled());
    assert!(instance.api_version() >= Version::V1_1);
    assert!(instance.api_version() <= Version::V1_3);
    let adapters = instance.adapters().unwrap();
    assert!(!adapters.is_empty());
    let summaries: Vec<_> = adapters.iter().map(vk_core::DeviceSummary::of).collect();
    let best = rank(&summaries)[0];
    let chosen = instance.select_adapter_with(None).unwrap();
    assert_eq!(chosen.index(), adapters[best].index());
    for a in &adapters {
        let c = a.capabilities();
        assert!(!c.name.is_empty());
        assert!(c.limits.max_storage_buffer_range > 0);
        assert!(c.limits.max_compute_work_group_invocations >= 128);
        assert!(!c.memory.heaps.is_empty() && !c.memory.types.is_empty());
        assert!(c.queue_family_with(QueueCaps::COMPUTE).is_some());
        if c.device_type == DeviceType::Cpu {
            // lavapipe: one memory that is device-local and host-visible.
            assert!(c.memory.has_unified(1 << 20));
        }
    }
    // An out-of-range override is an error listing the devices.
    let err = instance
        .select_adapter_with(Some("999"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("999") && err.contains(&adapters[0].capabilities().name),
        "{err}"
    );
    assert_no_validation_errors(&instance);
}

#[test]
fn compute_dispatch_round_trips_through_a_buffer() {
    let req = Requirements::new("vk-core test");
    let Some((instance, device)) =
        testing::device("compute_dispatch_round_trips_through_a_buffer", &req)
    else {
        return;
    };
    // Odd sizes: a partial last work group and a single element.
    for n in [1, 1000, 4099] {
        let report = vk_core::selftest::run_saxpy(&device, n).unwrap();
        assert_eq!(report.elements, n);
        assert_eq!(report.mismatches, 0, "max error {}", report.max_abs_error);
    }
    assert_eq!(device.queue().stats().waits_while_held(), 0);
    assert!(device.queue().stats().submissions() >= 3);
    drop(device);
    assert_no_validation_errors(&instance);
}

#[test]
fn a_missing_required_item_is_named_and_optional_ones_are_skipped() {
    let Some(instance) = testing::instance("a_missing_required_item_is_named") else {
        return;
    };
    let adapter = instance.select_adapter().unwrap();
    let req = Requirements::new("picky")
        .require_extension(c"VK_VKDELEGATE_no_such_extension")
        .require_queue(QueueCaps::COMPUTE);
    let err = adapter.create_device(&req).unwrap_err();
    match &err {
        Error::Unsupported {
            requester, missing, ..
        } => {
            assert_eq!(requester, "picky");
            assert_eq!(missing.extensions, vec!["VK_VKDELEGATE_no_such_extension"]);
        }
        other => panic!("unexpected error {other}"),
    }
    assert!(err.to_string().contains("VK_VKDELEGATE_no_such_extension"));

    // Optional items that are absent are not enabled; the device is still created.
    // (Features of extension structures are left out: Debian's validation layer, header 239,
    // predates VK_KHR_maintenance5 and VK_KHR_cooperative_matrix and reports their feature
    // structures as unknown pNext entries on drivers that have them.)
    let core_features = Features::all()
        - Features::MAINTENANCE_5
        - Features::COOPERATIVE_MATRIX
        - Features::TENSORS_ARM
        - Features::SHADER_TENSOR_ACCESS_ARM
        - Features::DATA_GRAPH_ARM
        - Features::DATA_GRAPH_SHADER_MODULE_ARM;
    let req = Requirements::new("relaxed")
        .optional_extension(c"VK_VKDELEGATE_no_such_extension")
        .optional_features(core_features);
    let device = adapter.create_device(&req).unwrap();
    assert!(
        !device
            .enabled()
            .has_extension(c"VK_VKDELEGATE_no_such_extension")
    );
    let caps_features = adapter.capabilities().features;
    assert_eq!(device.enabled().features, caps_features & core_features);
    // Checking an existing device names what it lacks.
    let strict = Requirements::new("strict").require_extension(c"VK_VKDELEGATE_no_such_extension");
    let err = device.check(&strict).unwrap_err().to_string();
    assert!(err.contains("VK_VKDELEGATE_no_such_extension"), "{err}");
    assert!(device.check(&Requirements::new("plain")).is_ok());
    drop(device);
    assert_no_validation_errors(&instance);
}

fn arm_requirements() -> Requirements {
    Requirements::new("arm test")
        .require_extension(arm::TENSORS_EXTENSION_NAME)
        .require_extension(arm::DATA_GRAPH_EXTENSION_NAME)
        .require_features(Features::TENSORS_ARM | Features::DATA_GRAPH_ARM)
        .min_api(Version::V1_3)
}

#[test]
fn arm_entry_points_resolve_and_a_tensor_is_created_bound_and_destroyed() {
    let test = "arm_entry_points_resolve_and_a_tensor_is_created_bound_and_destroyed";
    let Some(instance) = testing::instance(test) else {
        return;
    };
    let adapter = instance.select_adapter().unwrap();
    if adapter.capabilities().arm == ArmSupport::Absent {
        testing::skip(
            test,
            "the device lacks VK_ARM_tensors/VK_ARM_data_graph and no emulation layer was found \
             (`cargo xtask setup` installs it under target/)",
        );
        return;
    }
    if instance.emulation_enabled() {
        assert_eq!(adapter.capabilities().arm, ArmSupport::Emulated);
        assert_eq!(
            &instance.layers()[..2],
            [
                "VK_LAYER_ML_Graph_Emulation",
                "VK_LAYER_ML_Tensor_Emulation"
            ]
        );
    }
    let device = adapter.create_device(&arm_requirements()).unwrap();
    let fns = device.arm().expect("ARM entry points loaded");
    let t = fns.tensors.expect("VK_ARM_tensors entry points");
    assert!(fns.data_graph.is_some());
    let d = device.raw().handle();

    let dims: [i64; 4] = [1, 8, 8, 3];
    let strides: [i64; 4] = [8 * 8 * 3 * 4, 8 * 3 * 4, 3 * 4, 4];
    let desc = arm::TensorDescriptionARM {
        tiling: arm::TENSOR_TILING_LINEAR_ARM,
        format: vk::Format::R32_SFLOAT,
        dimension_count: 4,
        p_dimensions: dims.as_ptr(),
        p_strides: strides.as_ptr(),
        usage: arm::TENSOR_USAGE_SHADER_BIT_ARM | arm::TENSOR_USAGE_DATA_GRAPH_BIT_ARM,
        ..Default::default()
    };
    let info = arm::TensorCreateInfoARM {
        p_description: &desc,
        sharing_mode: vk::SharingMode::EXCLUSIVE,
        ..Default::default()
    };
    let mut tensor = TensorARM::NULL;
    // SAFETY: valid create info pointing at live locals; `d` is live.
    let r = unsafe { (t.create_tensor)(d, &info, std::ptr::null(), &mut tensor) };
    assert_eq!(r, vk::Result::SUCCESS);
    assert!(!tensor.is_null());

    let req_info = arm::TensorMemoryRequirementsInfoARM {
        tensor,
        ..Default::default()
    };
    let mut reqs = vk::MemoryRequirements2::default();
    // SAFETY: `tensor` is live.
    unsafe { (t.get_tensor_memory_requirements)(d, &req_info, &mut reqs) };
    let size = reqs.memory_requirements.size;
    assert!(size >= 8 * 8 * 3 * 4, "tensor needs {size} bytes");
    let type_index = device
        .capabilities()
        .memory
        .find(
            reqs.memory_requirements.memory_type_bits,
            vk::MemoryPropertyFlags::empty(),
        )
        .unwrap();
    // SAFETY: valid allocation info.
    let memory = unsafe {
        device.raw().allocate_memory(
            &vk::MemoryAllocateInfo::default()
                .allocation_size(size)
                .memory_type_index(type_index),
            None,
        )
    }
    .unwrap();
    let bind = arm::BindTensorMemoryInfoARM {
        tensor,
        memory,
        memory_offset: 0,
        ..Default::default()
    };
    // SAFETY: fresh tensor and memory of an allowed type and sufficient size.
    let r = unsafe { (t.bind_tensor_memory)(d, 1, &bind) };
    assert_eq!(r, vk::Result::SUCCESS);

    let view_info = arm::TensorViewCreateInfoARM {
        tensor,
        format: vk::Format::R32_SFLOAT,
        ..Default::default()
    };
    let mut view = TensorViewARM::NULL;
    // SAFETY: the tensor is bound.
    let r = unsafe { (t.create_tensor_view)(d, &view_info, std::ptr::null(), &mut view) };
    assert_eq!(r, vk::Result::SUCCESS);
    // SAFETY: destroyed once, in reverse order of creation; no work uses them.
    unsafe {
        (t.destroy_tensor_view)(d, view, std::ptr::null());
        (t.destroy_tensor)(d, tensor, std::ptr::null());
        device.raw().free_memory(memory, None);
    }
    drop(device);
    assert_no_validation_errors(&instance);
}

#[test]
fn an_app_owned_device_is_adopted_used_and_left_alive() {
    let test = "an_app_owned_device_is_adopted_used_and_left_alive";
    let Some(ours) = testing::instance(test) else {
        return;
    };
    let adapter = ours.select_adapter().unwrap();
    let family = adapter
        .capabilities()
        .queue_family_with(QueueCaps::COMPUTE)
        .unwrap()
        .index;

    // The application creates its own device on the same physical device.
    let priorities = [1.0f32];
    let queues = [vk::DeviceQueueCreateInfo::default()
        .queue_family_index(family)
        .queue_priorities(&priorities)];
    // SAFETY: valid create info on a live physical device.
    let app_device = unsafe {
        ours.raw().create_device(
            adapter.raw(),
            &vk::DeviceCreateInfo::default().queue_create_infos(&queues),
            None,
        )
    }
    .unwrap();

    let dropped = Arc::new(AtomicUsize::new(0));
    let flag = dropped.clone();
    let enabled = Enabled {
        api_version: adapter.capabilities().api_version,
        extensions: Default::default(),
        features: Features::empty(),
        queue_family: family,
        queue_caps: QueueCaps::empty(),
    };
    // SAFETY: `app_device` is live, made on `adapter` with nothing enabled, has a queue in
    // `family`, and outlives the adopted value (destroyed below, after the callback ran).
    let adopted = unsafe {
        vk_core::Device::from_raw(
            &adapter,
            app_device.handle(),
            enabled,
            0,
            None,
            Some(Box::new(move || {
                flag.fetch_add(1, Ordering::SeqCst);
            })),
        )
    }
    .unwrap();
    assert!(!adopted.is_owned());
    assert!(adopted.enabled().queue_caps.contains(QueueCaps::COMPUTE));
    let report = vk_core::selftest::run_saxpy(&adopted, 777).unwrap();
    assert_eq!(report.mismatches, 0);
    // A requirement the app did not enable is refused by name.
    let err = adopted
        .check(&Requirements::new("needs int8").require_features(Features::SHADER_INT8))
        .unwrap_err()
        .to_string();
    assert!(err.contains("shaderInt8"), "{err}");

    let clone = adopted.clone();
    drop(adopted);
    assert_eq!(dropped.load(Ordering::SeqCst), 0, "a clone still holds it");
    drop(clone);
    assert_eq!(dropped.load(Ordering::SeqCst), 1);

    // The application's device is still alive and usable.
    // SAFETY: the device is live; the fence is destroyed right away.
    unsafe {
        app_device.device_wait_idle().unwrap();
        let fence = app_device
            .create_fence(&vk::FenceCreateInfo::default(), None)
            .unwrap();
        app_device.destroy_fence(fence, None);
        app_device.destroy_device(None);
    }
    assert_no_validation_errors(&ours);
}

#[test]
fn an_adopted_instance_is_not_destroyed() {
    let Some(ours) = testing::instance("an_adopted_instance_is_not_destroyed") else {
        return;
    };
    // SAFETY: `ours` keeps the instance alive for longer than the adopted value.
    let adopted = unsafe {
        Instance::from_raw(
            ours.entry().clone(),
            ours.raw().handle(),
            ours.api_version(),
            ours.emulation_enabled(),
        )
    };
    let n = adopted.adapters().unwrap().len();
    let device = adopted
        .select_adapter()
        .unwrap()
        .create_device(&Requirements::new("adopted"))
        .unwrap();
    drop(adopted);
    // The device keeps working: it holds the adopted instance, which never destroys `ours`.
    assert_eq!(
        vk_core::selftest::run_saxpy(&device, 64)
            .unwrap()
            .mismatches,
        0
    );
    drop(device);
    assert_eq!(ours.adapters().unwrap().len(), n);
    assert_no_validation_errors(&ours);
}

#[test]
fn validation_errors_are_counted_not_ignored() {
    let req = Requirements::new("vk-core test");
    let Some((instance, device)) =
        testing::device("validation_errors_are_counted_not_ignored", &req)
    else {
        return;
    };
    assert_eq!(instance.validation().error_count(), 0);
    // A zero-sized buffer breaks VUID-VkBufferCreateInfo-size-00912.
    let info = vk::BufferCreateInfo::default()
        .size(0)
        .usage(vk::BufferUsageFlags::STORAGE_BUFFER);
    // SAFETY: deliberately invalid create info, to see the validation layer report it; the
    // driver tolerates it, and whatever it returns is destroyed.
    if let Ok(buffer) = unsafe { device.raw().create_buffer(&info, None) } {
        // SAFETY: created just above, unused.
        unsafe { device.raw().destroy_buffer(buffer, None) };
    }
    assert!(instance.validation().error_count() >= 1);
    assert!(
        instance.validation().first_errors()[0].contains("00912"),
        "{:?}",
        instance.validation().first_errors()
    );
}

/// One barrier too few: a fill then a copy that reads the filled buffer, with no barrier
/// between them. Synchronization validation (on in every test) must report the hazard.
#[test]
fn a_missing_barrier_is_a_sync_validation_error() {
    let req = Requirements::new("vk-core test");
    let Some((instance, device)) =
        testing::device("a_missing_barrier_is_a_sync_validation_error", &req)
    else {
        return;
    };
    assert!(instance.sync_validation_enabled());
    let d = device.raw();
    let size = 4096;
    let usage = vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST;
    let mut buffers = Vec::new();
    let mut memories = Vec::new();
    for _ in 0..2 {
        let info = vk::BufferCreateInfo::default().size(size).usage(usage);
        // SAFETY: valid create info.
        let buffer = unsafe { d.create_buffer(&info, None) }.unwrap();
        // SAFETY: `buffer` is live.
        let need = unsafe { d.get_buffer_memory_requirements(buffer) };
        let type_index = device
            .capabilities()
            .memory
            .find(need.memory_type_bits, vk::MemoryPropertyFlags::empty())
            .unwrap();
        let alloc = vk::MemoryAllocateInfo::default()
            .allocation_size(need.size)
            .memory_type_index(type_index);
        // SAFETY: valid allocate info; bound to a fresh buffer of a compatible type.
        let memory = unsafe { d.allocate_memory(&alloc, None) }.unwrap();
        // SAFETY: as above.
        unsafe { d.bind_buffer_memory(buffer, memory, 0) }.unwrap();
        buffers.push(buffer);
        memories.push(memory);
    }
    let pool_info =
        vk::CommandPoolCreateInfo::default().queue_family_index(device.queue().family());
    // SAFETY: valid create info for the device's queue family.
    let pool = unsafe { d.create_command_pool(&pool_info, None) }.unwrap();
    let alloc = vk::CommandBufferAllocateInfo::default()
        .command_pool(pool)
        .level(vk::CommandBufferLevel::PRIMARY)
        .command_buffer_count(1);
    // SAFETY: valid allocate info from a live pool.
    let cmd = unsafe { d.allocate_command_buffers(&alloc) }.unwrap()[0];
    let region = [vk::BufferCopy::default().size(size)];
    // SAFETY: recording into a fresh command buffer; the copy reads what the fill wrote with no
    // barrier between them (the hazard under test); it is never submitted.
    unsafe {
        d.begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default())
            .unwrap();
        d.cmd_fill_buffer(cmd, buffers[0], 0, size, 7);
        d.cmd_copy_buffer(cmd, buffers[0], buffers[1], &region);
        d.end_command_buffer(cmd).unwrap();
    }
    let errors = instance.validation().first_errors();
    // SAFETY: nothing was submitted; every object is destroyed once.
    unsafe {
        d.destroy_command_pool(pool, None);
        for (b, m) in buffers.into_iter().zip(memories) {
            d.destroy_buffer(b, None);
            d.free_memory(m, None);
        }
    }
    assert!(
        errors.iter().any(|e| e.contains("SYNC-HAZARD-READ")),
        "no read-after-write hazard reported: {errors:?}"
    );
}
