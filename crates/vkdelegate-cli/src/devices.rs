//! `vkdelegate devices` and the device part of `vkdelegate demo`.

use serde_json::{Value, json};
use vkdelegate::vk_core::{
    self, Adapter, Capabilities, DeviceSummary, Features, Instance, InstanceDesc, Requirements,
};

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

fn mib(bytes: u64) -> String {
    format!("{} MiB", bytes >> 20)
}

fn caps_json(a: &Adapter, rank: usize, chosen: bool) -> Value {
    let c: &Capabilities = a.capabilities();
    json!({
        "index": a.index(),
        "rank": rank,
        "chosen": chosen,
        "name": c.name,
        "type": c.device_type.as_str(),
        "api_version": c.api_version.to_string(),
        "driver_version": c.driver_version_string,
        "driver_name": c.driver_name,
        "driver_info": c.driver_info,
        "vendor_id": c.vendor_id,
        "device_id": c.device_id,
        "arm_ml_extensions": c.arm.as_str(),
        "limits": {
            "max_storage_buffer_range": c.limits.max_storage_buffer_range,
            "max_compute_work_group_count": c.limits.max_compute_work_group_count,
            "max_compute_work_group_size": c.limits.max_compute_work_group_size,
            "max_compute_work_group_invocations": c.limits.max_compute_work_group_invocations,
            "max_compute_shared_memory_size": c.limits.max_compute_shared_memory_size,
            "max_push_constants_size": c.limits.max_push_constants_size,
            "subgroup_size": c.limits.subgroup_size,
            "subgroup_size_range": c.limits.subgroup_size_range,
            "timestamp_period_ns": c.limits.timestamp_period(),
        },
        "memory": {
            "heaps": c.memory.heaps.iter().map(|h| json!({"size": h.size, "device_local": h.device_local})).collect::<Vec<_>>(),
            "types": c.memory.types.iter().map(|t| json!({"heap": t.heap, "flags": format!("{:?}", t.flags)})).collect::<Vec<_>>(),
        },
        "features": c.features.names(),
        "missing_features": (Features::all() - c.features).names(),
        "queue_families": c.queue_families.iter().map(|f| json!({
            "index": f.index,
            "count": f.count,
            "caps": f.caps.describe(),
            "timestamp_valid_bits": f.timestamp_valid_bits,
        })).collect::<Vec<_>>(),
        "cooperative_matrix": c.cooperative_matrix.iter().map(|m| json!({
            "mnk": [m.m, m.n, m.k],
            "types": format!("{:?} x {:?} + {:?} -> {:?}", m.a, m.b, m.c, m.result),
            "subgroup_scope": m.subgroup_scope,
        })).collect::<Vec<_>>(),
        "cooperative_matrix_flexible": c.cooperative_matrix_flexible.iter().map(|m| json!({
            "granularity": [m.m, m.n, m.k],
            "types": format!("{:?} x {:?} + {:?} -> {:?}", m.a, m.b, m.c, m.result),
            "workgroup_scope": m.workgroup_scope,
            "invocations": m.invocations,
        })).collect::<Vec<_>>(),
        "extensions": c.extensions,
    })
}

fn ranked(instance: &Instance) -> Result<(Vec<Adapter>, Vec<usize>, usize)> {
    let adapters = instance.adapters()?;
    let summaries: Vec<DeviceSummary> = adapters.iter().map(DeviceSummary::of).collect();
    let order = vk_core::rank(&summaries);
    let env = std::env::var(vk_core::instance::ENV_DEVICE_INDEX).ok();
    let chosen = vk_core::select_index(&summaries, env.as_deref())?;
    Ok((adapters, order, chosen))
}

fn print_table(
    instance: &Instance,
    adapters: &[Adapter],
    order: &[usize],
    chosen: usize,
    verbose: bool,
) {
    println!(
        "Vulkan instance API {}; layers: {}",
        instance.api_version(),
        if instance.layers().is_empty() {
            "none".to_owned()
        } else {
            instance.layers().join(" > ")
        }
    );
    println!(
        "{:<2} {:<5} {:<4} {:<10} {:<8} {:<16} {:<8} NAME",
        "", "INDEX", "RANK", "TYPE", "API", "DRIVER", "ARM-ML"
    );
    for (pos, a) in adapters.iter().enumerate() {
        let c = a.capabilities();
        let rank = order.iter().position(|&p| p == pos).unwrap_or(pos) + 1;
        println!(
            "{:<2} {:<5} {:<4} {:<10} {:<8} {:<16} {:<8} {}",
            if pos == chosen { "*" } else { "" },
            a.index(),
            rank,
            c.device_type.as_str(),
            c.api_version.to_string(),
            truncate(
                &format!("{} {}", c.driver_name, c.driver_version_string),
                16
            ),
            c.arm.as_str(),
            c.name
        );
    }
    for a in adapters {
        let c = a.capabilities();
        let l = &c.limits;
        println!("\n[{}] {}", a.index(), c.name);
        if !c.driver_info.is_empty() {
            println!("  driver           {} ({})", c.driver_name, c.driver_info);
        }
        println!(
            "  storage buffer   max range {} bytes",
            l.max_storage_buffer_range
        );
        println!(
            "  compute          groups {:?}, size {:?}, {} invocations, {} bytes shared",
            l.max_compute_work_group_count,
            l.max_compute_work_group_size,
            l.max_compute_work_group_invocations,
            l.max_compute_shared_memory_size
        );
        println!(
            "  subgroup         {} (range {}..{})",
            l.subgroup_size, l.subgroup_size_range[0], l.subgroup_size_range[1]
        );
        let heaps: Vec<String> = c
            .memory
            .heaps
            .iter()
            .map(|h| {
                format!(
                    "{}{}",
                    mib(h.size),
                    if h.device_local { " device-local" } else { "" }
                )
            })
            .collect();
        println!("  memory heaps     {}", heaps.join(", "));
        if verbose {
            for (i, t) in c.memory.types.iter().enumerate() {
                println!("  memory type {i:<2}   heap {} {:?}", t.heap, t.flags);
            }
        }
        print_coop(c);
        println!("  features         {}", c.features);
        let missing = Features::all() - c.features;
        if !missing.is_empty() {
            println!("  lacks            {missing}");
        }
        for f in &c.queue_families {
            println!(
                "  queue family {:<2}  {} x {}, timestamps {} bits",
                f.index,
                f.count,
                f.caps.describe(),
                f.timestamp_valid_bits
            );
        }
        println!(
            "  ARM ML           {} (VK_ARM_tensors, VK_ARM_data_graph)",
            c.arm.as_str()
        );
        if verbose {
            for e in &c.extensions {
                println!("  extension        {e}");
            }
        } else {
            println!(
                "  extensions       {} (--verbose lists them)",
                c.extensions.len()
            );
        }
    }
    let pick = &adapters[chosen];
    println!(
        "\nchosen: [{}] {}{}",
        pick.index(),
        pick.capabilities().name,
        if std::env::var_os(vk_core::instance::ENV_DEVICE_INDEX).is_some() {
            " (VKDELEGATE_DEVICE_INDEX)"
        } else {
            " (best ranked: discrete > integrated > virtual > other > cpu)"
        }
    );
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        s.chars().take(n.saturating_sub(1)).chain(['…']).collect()
    }
}

pub fn run(json_out: bool, verbose: bool) -> Result {
    let instance = Instance::new(&InstanceDesc::default())?;
    let (adapters, order, chosen) = ranked(&instance)?;
    if json_out {
        let list: Vec<Value> = adapters
            .iter()
            .enumerate()
            .map(|(pos, a)| {
                let rank = order.iter().position(|&p| p == pos).unwrap_or(pos) + 1;
                caps_json(a, rank, pos == chosen)
            })
            .collect();
        let doc = json!({
            "instance": {
                "api_version": instance.api_version().to_string(),
                "layers": instance.layers(),
                "emulation_layers": instance.emulation_enabled(),
                "validation": instance.validation_enabled(),
            },
            "chosen": adapters[chosen].index(),
            "devices": list,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print_table(&instance, &adapters, &order, chosen, verbose);
    }
    Ok(())
}

/// The device part of the demo: the table, then a real compute dispatch on the chosen device.
pub fn demo_devices() -> Result {
    let instance = Instance::new(&InstanceDesc::default())?;
    let (adapters, order, chosen) = ranked(&instance)?;
    print_table(&instance, &adapters, &order, chosen, false);
    let adapter = &adapters[chosen];
    let device = adapter.create_device(&Requirements::new("vkdelegate demo"))?;
    let n = 1 << 20;
    let report = vk_core::selftest::run_saxpy(&device, n)?;
    println!(
        "\ncompute dispatch on '{}': y = a*x + y over {} floats, {} mismatches, max error {:e}, \
         submit+wait {:.3} ms",
        adapter.capabilities().name,
        report.elements,
        report.mismatches,
        report.max_abs_error,
        report.submit_and_wait.as_secs_f64() * 1e3
    );
    if report.mismatches != 0 {
        return Err(format!(
            "{} results differ from the host reference",
            report.mismatches
        )
        .into());
    }
    Ok(())
}

/// The fp16 x fp16 -> fp32 cooperative-matrix shapes: subgroup-scope sizes and workgroup-scope
/// granularities with their work-group sizes.
fn print_coop(c: &vk_core::Capabilities) {
    use vk_core::CoopComponent::{F16, F32};
    let sizes: Vec<String> = c
        .coop_shapes(F16, F32)
        .map(|m| format!("{}x{}x{}", m.m, m.n, m.k))
        .collect();
    if !sizes.is_empty() {
        println!("  coop fp16        {}", sizes.join(", "));
    }
    let flexible: Vec<String> = c
        .coop_flexible_shapes(F16, F32)
        .map(|m| format!("{}x{}x{} on {}", m.m, m.n, m.k, m.invocations))
        .collect();
    if !flexible.is_empty() {
        println!("  coop2 fp16       multiples of {}", flexible.join(", "));
    }
}
