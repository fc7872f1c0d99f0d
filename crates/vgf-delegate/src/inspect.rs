//! A JSON description of a decoded file, laid out like Arm's `vgf_dump` where the two carry
//! the same facts (so the two can be compared), with more facts where ours has them
//! (constant sizes, alias groups, sampler configuration, SPIR-V sizes).

use serde_json::{Value, json};
use vk_core::{DType, vk};

use crate::format::{Binding, DESCRIPTOR_TYPE_TENSOR_ARM, Vgf};

/// A model input or output as the file declares it: known from the decoded file alone,
/// before anything is created on a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IoDecl {
    /// Position among the model's inputs (or outputs).
    pub index: usize,
    /// Name from the file; `input_<i>` / `output_<i>` when it has none (as [`crate::Model`]).
    pub name: String,
    /// Index in the model resource table.
    pub mrt_index: u32,
    /// The stored `VkFormat` number.
    pub vk_format: u32,
    /// Element type, when the format is a single-channel tensor format.
    pub dtype: Option<DType>,
    /// Shape as stored (`-1` or `0` where the file leaves a dimension open).
    pub shape: Vec<i64>,
}

impl IoDecl {
    /// The dtype's name, or the format's name when it is not a tensor dtype.
    pub fn dtype_name(&self) -> String {
        match self.dtype {
            Some(d) => d.name().to_string(),
            None => format_name(self.vk_format),
        }
    }
}

/// The model's inputs, in order.
pub fn model_inputs(vgf: &Vgf<'_>) -> Vec<IoDecl> {
    io_decls(
        vgf,
        &vgf.sequence.inputs,
        &vgf.sequence.input_names,
        "input",
    )
}

/// The model's outputs, in order.
pub fn model_outputs(vgf: &Vgf<'_>) -> Vec<IoDecl> {
    io_decls(
        vgf,
        &vgf.sequence.outputs,
        &vgf.sequence.output_names,
        "output",
    )
}

fn io_decls(vgf: &Vgf<'_>, slots: &[Binding], names: &[&str], prefix: &str) -> Vec<IoDecl> {
    slots
        .iter()
        .enumerate()
        .map(|(index, b)| {
            let resource = vgf.resource(b.mrt_index);
            let vk_format = resource.map_or(0, |r| r.vk_format);
            IoDecl {
                index,
                name: names
                    .get(index)
                    .filter(|n| !n.is_empty())
                    .map_or_else(|| format!("{prefix}_{index}"), |n| n.to_string()),
                mrt_index: b.mrt_index,
                vk_format,
                dtype: resource
                    .and_then(|_| DType::from_vk_format(vk::Format::from_raw(vk_format as i32))),
                shape: resource.map(|r| r.shape.clone()).unwrap_or_default(),
            }
        })
        .collect()
}

/// `VK_FORMAT_*` name of a stored format number (the number itself when unknown).
pub fn format_name(format: u32) -> String {
    if format == vk_core::arm::FORMAT_R8_BOOL_ARM.as_raw() as u32 {
        return "VK_FORMAT_R8_BOOL_ARM".to_string();
    }
    let name = format!("{:?}", vk::Format::from_raw(format as i32));
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        format!("VK_FORMAT_{format}")
    } else {
        format!("VK_FORMAT_{name}")
    }
}

/// `VK_DESCRIPTOR_TYPE_*` name of a stored descriptor type (`none` when absent).
pub fn descriptor_type_name(descriptor_type: Option<u32>) -> String {
    match descriptor_type {
        None => "none".to_string(),
        Some(DESCRIPTOR_TYPE_TENSOR_ARM) => "VK_DESCRIPTOR_TYPE_TENSOR_ARM".to_string(),
        Some(t) => {
            let name = format!("{:?}", vk::DescriptorType::from_raw(t as i32));
            if name.starts_with(|c: char| c.is_ascii_digit()) {
                format!("VK_DESCRIPTOR_TYPE_{t}")
            } else {
                format!("VK_DESCRIPTOR_TYPE_{name}")
            }
        }
    }
}

fn slots(list: &[Binding]) -> Value {
    Value::Array(
        list.iter()
            .enumerate()
            .map(|(i, b)| json!({"index": i, "binding": b.binding, "mrt_index": b.mrt_index}))
            .collect(),
    )
}

fn named_slots(list: &[Binding], names: &[&str]) -> Value {
    Value::Array(
        list.iter()
            .enumerate()
            .map(|(i, b)| {
                json!({
                    "index": i,
                    "binding": b.binding,
                    "mrt_index": b.mrt_index,
                    "name": names.get(i).copied().unwrap_or(""),
                })
            })
            .collect(),
    )
}

/// Everything the decoder knows about a file, as JSON: header, modules, model sequence
/// (segments, descriptor sets, bindings, constants, dispatch shapes, push constants), resources
/// (category, format, descriptor type, shape, strides, alias group, sampler) and constants
/// (resource, sparsity, size).
pub fn inspect_json(vgf: &Vgf<'_>) -> Value {
    let h = &vgf.header;
    let modules: Vec<Value> = vgf
        .modules
        .iter()
        .enumerate()
        .map(|(i, m)| {
            json!({
                "index": i,
                "type": m.kind.as_str(),
                "name": m.name,
                "entry_point": m.entry_point,
                "shader_code_available": m.spirv.is_some(),
                "shader_type": if m.spirv.is_some() { "SPIR-V" } else { "none" },
                "spirv_words": m.spirv.map(|s| s.word_count()),
            })
        })
        .collect();
    let segments: Vec<Value> = vgf
        .sequence
        .segments
        .iter()
        .enumerate()
        .map(|(i, s)| {
            json!({
                "index": i,
                "type": s.kind.as_str(),
                "name": s.name,
                "module_index": s.module_index,
                "descriptor_set_infos": s.descriptor_sets.iter().map(|d| json!({
                    "set_index": d.set_index,
                    "bindings": slots(&d.bindings),
                })).collect::<Vec<_>>(),
                "inputs": slots(&s.inputs),
                "outputs": slots(&s.outputs),
                "constants": s.constants,
                "constant_bindings": s.constant_bindings.iter().map(|b| json!({
                    "graph_constant_id": b.graph_constant_id,
                    "constant_table_index": b.constant_index,
                })).collect::<Vec<_>>(),
                "dispatch_shape": s.dispatch_shape.map(|d| d.to_vec()).unwrap_or_default(),
                "push_constant_ranges": s.push_constant_ranges.iter().map(|p| json!({
                    "stage_flags": p.stage_flags,
                    "offset": p.offset,
                    "size": p.size,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let resources: Vec<Value> = vgf
        .resources
        .iter()
        .map(|r| {
            json!({
                "index": r.index,
                "category": r.category.as_str(),
                "vk_descriptor_type": descriptor_type_name(r.vk_descriptor_type),
                "vk_format": format_name(r.vk_format),
                "shape": r.shape,
                "stride": r.strides,
                "alias_group_id": r.alias_group,
                "sampler": r.sampler.map(|s| json!({
                    "min_filter": s.min_filter,
                    "mag_filter": s.mag_filter,
                    "address_mode_u": s.address_mode_u,
                    "address_mode_v": s.address_mode_v,
                    "border_color": s.border_color,
                })),
            })
        })
        .collect();
    let constants: Vec<Value> = vgf
        .constants
        .iter()
        .enumerate()
        .map(|(i, c)| {
            json!({
                "index": i,
                "mrt_index": c.mrt_index,
                "sparsity_dimension": c.sparsity_dimension,
                "size": c.data.len(),
            })
        })
        .collect();
    json!({
        "header": {
            "major": h.version.major,
            "minor": h.version.minor,
            "patch": h.version.patch,
            "vk_header_version": h.vk_header_version,
            "legacy_magic": h.legacy_magic,
        },
        "modules": modules,
        "model_sequence": {
            "segments": segments,
            "inputs": named_slots(&vgf.sequence.inputs, &vgf.sequence.input_names),
            "outputs": named_slots(&vgf.sequence.outputs, &vgf.sequence.output_names),
        },
        "resources": resources,
        "constants_layout": format!("{:?}", vgf.constants_layout),
        "constants": constants,
    })
}
