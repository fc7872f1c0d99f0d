//! Well-formed synthetic programs: every field decodes to what was written.

use executorch_pte::test_support::{
    self as ts, InstrSpec, PlanSpec, ProgramSpec, SAMPLE_INLINE_CONSTANT, SAMPLE_NAMED, SAMPLE_VGF,
    ValueSpec,
};
use executorch_pte::{
    Constants, DataLocation, DecodeError, Instruction, Program, ScalarType, ShapeDynamism,
    VULKAN_BACKEND_ID, Value, VkDataType, VkGraph, VkMemoryLayout, VkStorageType, VkValue,
};

fn sample() -> Vec<u8> {
    ts::build_program(&ts::sample_program())
}

#[test]
fn header_and_tables() {
    let bytes = sample();
    let p = Program::decode(&bytes).expect("decodes");
    let h = p.extended_header().expect("has an extended header");
    assert_eq!(h.length, 32);
    assert_eq!(h.segment_base_offset % 16, 0);
    assert!(h.segment_base_offset >= h.program_size);
    assert_eq!(
        h.segment_base_offset + h.segment_data_size.expect("recorded"),
        bytes.len() as u64
    );
    assert_eq!(p.segment_table().len(), 3);
    assert_eq!(p.segment_table()[1].size, 16);
    assert_eq!(p.segment(1).expect("segment 1"), SAMPLE_NAMED);
    assert_eq!(p.plan_names(), ["forward", "second"]);
    assert_eq!(p.named_data_entries().len(), 1);
    assert_eq!(p.named_data("w0").expect("w0"), SAMPLE_NAMED);
}

#[test]
fn plan_lookup_names_the_plans() {
    let bytes = sample();
    let p = Program::decode(&bytes).expect("decodes");
    assert_eq!(p.forward().expect("forward").name, "forward");
    assert_eq!(p.plan("second").expect("second").values.len(), 2);
    let err = p.plan("backward").expect_err("no such plan");
    assert_eq!(
        err,
        DecodeError::NoSuchPlan {
            name: "backward".to_owned(),
            available: vec!["forward".to_owned(), "second".to_owned()],
        }
    );
    assert!(err.to_string().contains("\"forward\""), "{err}");
}

#[test]
fn every_value_kind() {
    let bytes = sample();
    let p = Program::decode(&bytes).expect("decodes");
    let f = p.forward().expect("forward");
    let kinds: Vec<&str> = f.values.iter().map(Value::kind).collect();
    assert_eq!(
        kinds,
        [
            "Tensor",
            "Tensor",
            "Int",
            "Bool",
            "Double",
            "String",
            "IntList",
            "DoubleList",
            "BoolList",
            "TensorList",
            "OptionalTensorList",
            "Null",
            "Tensor"
        ]
    );
    let input = f.values[0].as_tensor().expect("tensor");
    assert_eq!(input.scalar_type, ScalarType::Float);
    assert_eq!(input.sizes, [1, 2, 2, 2]);
    assert_eq!(input.dim_order, [0, 1, 2, 3]);
    assert_eq!(input.shape_dynamism, ShapeDynamism::Static);
    assert_eq!(input.nbytes(), Some(32));
    assert!(!input.is_constant());
    let out = f.values[12].as_tensor().expect("tensor");
    assert_eq!(out.allocation.expect("planned").offset, 1 << 32 | 32);
    assert_eq!(f.values[2], Value::Int(3));
    assert_eq!(f.values[3], Value::Bool(true));
    assert_eq!(f.values[4], Value::Double(0.5));
    assert_eq!(f.values[5], Value::String("hello"));
    assert_eq!(
        f.values[6],
        Value::IntList(vec![3, 3]),
        "boxed: items index Int values"
    );
    assert_eq!(f.values[7], Value::DoubleList(vec![1.5]));
    assert_eq!(f.values[8], Value::BoolList(vec![true, false]));
    assert_eq!(f.values[9], Value::TensorList(vec![0, 1]));
    assert_eq!(
        f.values[10],
        Value::OptionalTensorList(vec![Some(0), None, Some(11)])
    );
    assert_eq!(f.inputs, [0]);
    assert_eq!(f.outputs, [12]);
    assert_eq!(f.non_const_buffer_sizes, [0, 64]);
}

#[test]
fn every_instruction_kind() {
    let bytes = sample();
    let p = Program::decode(&bytes).expect("decodes");
    let f = p.forward().expect("forward");
    assert_eq!(f.chains.len(), 1);
    assert_eq!(
        f.chains[0].instructions,
        [
            Instruction::DelegateCall {
                delegate_index: 0,
                args: vec![0, 12]
            },
            Instruction::KernelCall {
                op_index: 0,
                args: vec![12, 1, 12]
            },
            Instruction::MoveCall {
                move_from: 12,
                move_to: 0
            },
            Instruction::JumpFalseCall {
                cond_value_index: 3,
                destination_instruction: 5
            },
            Instruction::FreeCall { value_index: 0 },
            Instruction::DelegateCall {
                delegate_index: 1,
                args: vec![12, 12]
            },
        ]
    );
    assert_eq!(f.operators[0].to_string(), "aten::add.out");
    let kinds: Vec<&str> = f.instructions().map(Instruction::kind).collect();
    assert_eq!(kinds.len(), 6);
}

#[test]
fn constants_from_the_constant_segment() {
    let bytes = sample();
    let p = Program::decode(&bytes).expect("decodes");
    assert!(
        matches!(p.constants(), Constants::Segment { segment_index: 2, offsets, .. } if offsets == &[0, 16])
    );
    let f = p.forward().expect("forward");
    let weight = f.values[1].as_tensor().expect("tensor");
    assert!(weight.is_constant());
    assert_eq!(
        p.constant_data(weight).expect("in range"),
        Some(&b"0123456789abcdef"[..])
    );
    let input = f.values[0].as_tensor().expect("tensor");
    assert_eq!(p.constant_data(input).expect("not a constant"), None);
}

#[test]
fn legacy_constant_buffer() {
    let mut spec = ts::sample_program();
    spec.constant_segment = None;
    spec.constant_buffer = vec![Vec::new(), b"0123456789abcdef".to_vec()];
    let bytes = ts::build_program(&spec);
    let p = Program::decode(&bytes).expect("decodes");
    assert!(matches!(p.constants(), Constants::Buffers(b) if b.len() == 2));
    let weight = p.forward().expect("forward").values[1].clone();
    let weight = weight.as_tensor().expect("tensor");
    assert_eq!(
        p.constant_data(weight).expect("in range"),
        Some(&b"0123456789abcdef"[..])
    );
}

#[test]
fn delegates_inline_and_segment() {
    let bytes = sample();
    let p = Program::decode(&bytes).expect("decodes");
    let f = p.forward().expect("forward");
    let ids: Vec<&str> = f.delegates.iter().map(|d| d.id).collect();
    assert_eq!(ids, ["VulkanBackend", "VgfBackend"]);
    let vk = &f.delegates[0];
    assert_eq!(vk.processed.location, DataLocation::Segment);
    assert_eq!(
        vk.compile_spec("storage_type_override"),
        Some(&[1, 0, 0, 0][..])
    );
    assert_eq!(vk.compile_spec("absent"), None);
    let vgf = &f.delegates[1];
    assert_eq!(vgf.processed.location, DataLocation::Inline);
    assert_eq!(p.delegate_payload(vgf).expect("inline"), SAMPLE_VGF);
    assert_eq!(
        p.delegate_payload(vk).expect("segment"),
        ts::build_vulkan_payload(&ts::sample_vk_graph())
    );
    assert_eq!(f.delegates_with_id(VULKAN_BACKEND_ID).count(), 1);
}

#[test]
fn vulkan_graph() {
    let bytes = sample();
    let p = Program::decode(&bytes).expect("decodes");
    let f = p.forward().expect("forward");
    let payload = p.delegate_payload(&f.delegates[0]).expect("payload");
    let g = VkGraph::decode(payload).expect("graph decodes");
    assert_eq!(g.header.header_len, 30);
    assert_eq!(g.header.flatbuffer_offset, 32);
    assert_eq!(g.version, "0");
    let kinds: Vec<&str> = g.values.iter().map(VkValue::kind).collect();
    assert_eq!(
        kinds,
        [
            "VkTensor",
            "VkTensor",
            "VkTensor",
            "Null",
            "Int",
            "Double",
            "Bool",
            "IntList",
            "DoubleList",
            "BoolList",
            "ValueList",
            "String",
            "SymInt",
            "VkTensor"
        ]
    );
    let VkValue::Tensor(t) = &g.values[1] else {
        panic!("value 1 is a tensor");
    };
    assert_eq!(t.datatype, VkDataType::Float32);
    assert_eq!(t.dims, [2, 2]);
    assert_eq!(t.constant_id, Some(0));
    assert_eq!(t.mem_obj_id, None);
    assert_eq!(t.storage_type, VkStorageType::Default);
    assert_eq!(t.memory_layout, VkMemoryLayout::Default);
    assert_eq!(t.staging_datatype, VkDataType::Unset);
    assert_eq!(g.values[12], VkValue::SymInt(5));
    assert_eq!(g.values[10], VkValue::ValueList(vec![0, 1]));
    assert_eq!(g.input_ids, [0]);
    assert_eq!(g.output_ids, [13]);
    assert_eq!(g.chain.len(), 3);
    assert_eq!(g.chain[1].args, [13, 2, 13]);
    assert_eq!(g.storage_type_override, VkStorageType::Default);
    assert_eq!(
        g.op_names(),
        [
            ("aten.add.Tensor", vec![0, 2]),
            ("aten.mul.Tensor", vec![1])
        ]
    );
    assert_eq!(
        g.constant(0, &p).expect("by offset"),
        SAMPLE_INLINE_CONSTANT
    );
    assert_eq!(g.constant(1, &p).expect("by key"), SAMPLE_NAMED);
    assert!(g.constants[1].is_named());
    assert!(matches!(
        g.constant(2, &p),
        Err(DecodeError::IndexOutOfRange {
            index: 2,
            len: 2,
            ..
        })
    ));
}

#[test]
fn without_extended_header_or_segments() {
    let spec = ProgramSpec {
        plans: vec![PlanSpec {
            name: "forward".to_owned(),
            values: vec![ValueSpec::Int(1)],
            instructions: vec![InstrSpec::Free(0)],
            ..Default::default()
        }],
        no_extended_header: true,
        ..Default::default()
    };
    let bytes = ts::build_program(&spec);
    let p = Program::decode(&bytes).expect("decodes");
    assert!(p.extended_header().is_none());
    assert!(p.constants().is_empty());
    assert_eq!(p.plans().len(), 1);
    assert!(matches!(
        p.named_data("w0"),
        Err(DecodeError::NoNamedData { count: 0, .. })
    ));
}
