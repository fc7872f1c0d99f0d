//! Builders of small VGF files for tests (hand-made malformed files, COMPUTE modules): not part
//! of the stable API. Behind the feature `test-support`.

use flatbuffers::{FlatBufferBuilder, UnionWIPOffset, WIPOffset};

use super::{DESCRIPTOR_TYPE_TENSOR_ARM, HEADER_SIZE, MAGIC};
use crate::vgf_generated::vgf as fb;

/// Lays out a file from its four sections (each 8-byte aligned), version 0.5.0.
pub fn assemble(sections: [&[u8]; 4]) -> Vec<u8> {
    let mut out = vec![0u8; HEADER_SIZE];
    out[0..4].copy_from_slice(&MAGIC);
    out[8..11].copy_from_slice(&[0, 5, 0]);
    for (i, s) in sections.iter().enumerate() {
        while out.len() % 8 != 0 {
            out.push(0);
        }
        let offset = out.len() as u64;
        out[16 + 16 * i..24 + 16 * i].copy_from_slice(&offset.to_le_bytes());
        out[24 + 16 * i..32 + 16 * i].copy_from_slice(&(s.len() as u64).to_le_bytes());
        out.extend_from_slice(s);
    }
    out
}

/// A GLSL code union value.
pub fn glsl<'a>(
    fbb: &mut FlatBufferBuilder<'a>,
    code: &str,
) -> (fb::ModuleCode, WIPOffset<UnionWIPOffset>) {
    let code = fbb.create_string(code);
    let t = fb::GLSL::create(fbb, &fb::GLSLArgs { code: Some(code) });
    (fb::ModuleCode::GLSL, t.as_union_value())
}

/// An HLSL code union value.
pub fn hlsl<'a>(
    fbb: &mut FlatBufferBuilder<'a>,
    code: &str,
) -> (fb::ModuleCode, WIPOffset<UnionWIPOffset>) {
    let code = fbb.create_string(code);
    let t = fb::HLSL::create(fbb, &fb::HLSLArgs { code: Some(code) });
    (fb::ModuleCode::HLSL, t.as_union_value())
}

/// A SPIR-V code union value.
pub fn spirv<'a>(
    fbb: &mut FlatBufferBuilder<'a>,
    words: &[u32],
) -> (fb::ModuleCode, WIPOffset<UnionWIPOffset>) {
    let words = fbb.create_vector(words);
    let t = fb::SPIRV::create(fbb, &fb::SPIRVArgs { words: Some(words) });
    (fb::ModuleCode::SPIRV, t.as_union_value())
}

fn module_table(
    kind: fb::ModuleType,
    code: impl FnOnce(&mut FlatBufferBuilder<'_>) -> (fb::ModuleCode, WIPOffset<UnionWIPOffset>),
) -> Vec<u8> {
    let mut fbb = FlatBufferBuilder::new();
    let (code_type, code) = code(&mut fbb);
    let name = fbb.create_string("m0");
    let entry = fbb.create_string("main");
    let m = fb::Module::create(
        &mut fbb,
        &fb::ModuleArgs {
            type_: kind,
            name: Some(name),
            entry_point: Some(entry),
            code_type,
            code: Some(code),
        },
    );
    let modules = fbb.create_vector(&[m]);
    let t = fb::ModuleTable::create(
        &mut fbb,
        &fb::ModuleTableArgs {
            modules: Some(modules),
        },
    );
    fbb.finish(t, None);
    fbb.finished_data().to_vec()
}

/// A file whose only module carries the given code, with empty other sections.
pub fn file_with_module_code(
    code: impl FnOnce(&mut FlatBufferBuilder<'_>) -> (fb::ModuleCode, WIPOffset<UnionWIPOffset>),
) -> Vec<u8> {
    assemble([&module_table(fb::ModuleType::COMPUTE, code), &[], &[], &[]])
}

/// Knobs of [`compute_file`], each of which can make the file invalid.
#[derive(Debug, Clone)]
pub struct Options {
    /// The segment's module index (valid: 0).
    pub module_index: u32,
    /// The segment's constant index (valid: 0).
    pub segment_constant: u32,
    /// Length of the dispatch shape (valid: 3).
    pub dispatch_len: usize,
    /// Whether the segment claims to be GRAPH (invalid: the module is COMPUTE).
    pub graph_segment: bool,
    /// Length of resource 0's strides (valid: 0 or 1).
    pub strides_len: usize,
    /// Category of resource 0 (valid: 0..=3).
    pub category: u8,
    /// SPIR-V words of the module.
    pub spirv: Vec<u32>,
    /// Entry point.
    pub entry_point: String,
    /// Dispatch shape.
    pub dispatch: [u32; 3],
    /// Whether the input (resource 0) joins the output's alias group 5.
    pub alias_io: bool,
    /// Explicit graph constant bindings (graph constant id, constant index).
    pub constant_bindings: Vec<(u32, u32)>,
    /// Elements of the input and the output (valid: any positive count; 4 by default).
    pub io_elements: i64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            module_index: 0,
            segment_constant: 0,
            dispatch_len: 3,
            graph_segment: false,
            strides_len: 0,
            category: 0,
            spirv: vec![0x0723_0203, 0x0001_0500, 0, 1, 0],
            entry_point: "main".into(),
            dispatch: [4, 1, 1],
            alias_io: false,
            constant_bindings: Vec::new(),
            io_elements: 4,
        }
    }
}

/// A COMPUTE model: input resource 0 `f32[4]` at binding 0, output resource 1 `f32[4]` at
/// binding 1 (alias group 5, a sampler config), constant resource 2 `u8[4]` held in a legacy
/// constants section.
pub fn compute_file(o: Options) -> Vec<u8> {
    let words = o.spirv.clone();
    let entry_point = o.entry_point.clone();
    let modules = {
        let mut fbb = FlatBufferBuilder::new();
        let (code_type, code) = spirv(&mut fbb, &words);
        let name = fbb.create_string("compute0");
        let entry = fbb.create_string(&entry_point);
        let m = fb::Module::create(
            &mut fbb,
            &fb::ModuleArgs {
                type_: fb::ModuleType::COMPUTE,
                name: Some(name),
                entry_point: Some(entry),
                code_type,
                code: Some(code),
            },
        );
        let modules = fbb.create_vector(&[m]);
        let t = fb::ModuleTable::create(
            &mut fbb,
            &fb::ModuleTableArgs {
                modules: Some(modules),
            },
        );
        fbb.finish(t, None);
        fbb.finished_data().to_vec()
    };
    let resources = {
        let mut fbb = FlatBufferBuilder::new();
        let mut entries = Vec::new();
        for i in 0..3u32 {
            let elements = if i < 2 { o.io_elements } else { 4 };
            let shape = fbb.create_vector(&[fb::Int64::new(elements)]);
            let strides_len = if i == 0 { o.strides_len } else { 0 };
            let strides = fbb.create_vector(&vec![fb::Int64::new(4); strides_len]);
            let desc = fb::Description::create(
                &mut fbb,
                &fb::DescriptionArgs {
                    shape: Some(shape),
                    strides: Some(strides),
                },
            );
            let (extra_config_type, extra_config) = if i == 1 {
                let s = fb::SamplerConfig::create(
                    &mut fbb,
                    &fb::SamplerConfigArgs {
                        min_filter: 1,
                        mag_filter: 1,
                        address_mode_u: 2,
                        address_mode_v: 2,
                        border_color: 3,
                    },
                );
                (fb::ExtraConfig::SamplerConfig, Some(s.as_union_value()))
            } else {
                (fb::ExtraConfig::NONE, None)
            };
            let category = match i {
                0 => fb::ResourceCategory(o.category),
                1 => fb::ResourceCategory::OUTPUT,
                _ => fb::ResourceCategory::CONSTANT,
            };
            entries.push(fb::ModelResourceTableEntry::create(
                &mut fbb,
                &fb::ModelResourceTableEntryArgs {
                    vk_descriptor_type: if i == 2 {
                        u32::MAX
                    } else {
                        DESCRIPTOR_TYPE_TENSOR_ARM
                    },
                    vk_format: if i == 2 { 13 } else { 100 },
                    category,
                    description: Some(desc),
                    extra_config_type,
                    extra_config,
                    alias_group_id: if i == 1 || (i == 0 && o.alias_io) {
                        5
                    } else {
                        u32::MAX
                    },
                },
            ));
        }
        let v = fbb.create_vector(&entries);
        let t = fb::ModelResourceTable::create(
            &mut fbb,
            &fb::ModelResourceTableArgs { mrt_entry: Some(v) },
        );
        fbb.finish(t, None);
        fbb.finished_data().to_vec()
    };
    let sequence = {
        let mut fbb = FlatBufferBuilder::new();
        let b0 = fb::BindingSlot::create(
            &mut fbb,
            &fb::BindingSlotArgs {
                binding: 0,
                mrt_index: 0,
            },
        );
        let b1 = fb::BindingSlot::create(
            &mut fbb,
            &fb::BindingSlotArgs {
                binding: 1,
                mrt_index: 1,
            },
        );
        let set_bindings = fbb.create_vector(&[b0, b1]);
        let set = fb::DescriptorSetInfo::create(
            &mut fbb,
            &fb::DescriptorSetInfoArgs {
                bindings: Some(set_bindings),
                set_index: u32::MAX,
            },
        );
        let sets = fbb.create_vector(&[set]);
        let seg_in = fbb.create_vector(&[b0]);
        let seg_out = fbb.create_vector(&[b1]);
        let constants = fbb.create_vector(&[o.segment_constant]);
        let dispatch = fbb.create_vector(
            &o.dispatch[..o.dispatch_len.min(3)]
                .iter()
                .copied()
                .chain(std::iter::repeat_n(1, o.dispatch_len.saturating_sub(3)))
                .collect::<Vec<u32>>(),
        );
        let pc = fb::PushConstantRange::create(
            &mut fbb,
            &fb::PushConstantRangeArgs {
                stage_flags: 0x20,
                offset: 0,
                size: 4,
            },
        );
        let pcs = fbb.create_vector(&[pc]);
        let bindings: Vec<_> = o
            .constant_bindings
            .iter()
            .map(|&(graph_constant_id, constant_index)| {
                fb::ConstantBinding::create(
                    &mut fbb,
                    &fb::ConstantBindingArgs {
                        graph_constant_id,
                        constant_index,
                    },
                )
            })
            .collect();
        let constant_bindings = (!bindings.is_empty()).then(|| fbb.create_vector(&bindings));
        let name = fbb.create_string("segment0");
        let seg = fb::SegmentInfo::create(
            &mut fbb,
            &fb::SegmentInfoArgs {
                type_: if o.graph_segment {
                    fb::ModuleType::GRAPH
                } else {
                    fb::ModuleType::COMPUTE
                },
                name: Some(name),
                module_index: o.module_index,
                set_infos: Some(sets),
                inputs: Some(seg_in),
                outputs: Some(seg_out),
                constants: Some(constants),
                dispatch_shape: Some(dispatch),
                push_constant_ranges: Some(pcs),
                constant_bindings,
            },
        );
        let segs = fbb.create_vector(&[seg]);
        let inputs = fbb.create_vector(&[b0]);
        let outputs = fbb.create_vector(&[b1]);
        let in_name = fbb.create_string("x");
        let out_name = fbb.create_string("y");
        let in_names = fbb.create_vector(&[in_name]);
        let out_names = fbb.create_vector(&[out_name]);
        let t = fb::ModelSequenceTable::create(
            &mut fbb,
            &fb::ModelSequenceTableArgs {
                segments: Some(segs),
                inputs: Some(inputs),
                outputs: Some(outputs),
                input_names: Some(in_names),
                output_names: Some(out_names),
            },
        );
        fbb.finish(t, None);
        fbb.finished_data().to_vec()
    };
    let constants = {
        let mut fbb = FlatBufferBuilder::new();
        let raw = fbb.create_vector(&[1u8, 2, 3, 4]);
        let c = fb::ConstantData::create(
            &mut fbb,
            &fb::ConstantDataArgs {
                mrt_index: 2,
                sparsity_dimension: -1,
                raw: Some(raw),
            },
        );
        let data = fbb.create_vector(&[c]);
        let t =
            fb::ConstantSection::create(&mut fbb, &fb::ConstantSectionArgs { data: Some(data) });
        fbb.finish(t, None);
        fbb.finished_data().to_vec()
    };
    assemble([&modules, &sequence, &resources, &constants])
}
