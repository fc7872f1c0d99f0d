//! Hand-broken programs and payloads: each gives the error that names what is wrong, and no
//! mutation of a well-formed file panics.

use executorch_pte::test_support::{
    self as ts, DelegateSpec, InstrSpec, ValueSpec, put_u32, put_u64,
};
use executorch_pte::{DecodeError, Program, VkGraph};

fn sample() -> Vec<u8> {
    ts::build_program(&ts::sample_program())
}

fn decode_err(bytes: &[u8]) -> DecodeError {
    Program::decode(bytes).expect_err("must not decode")
}

fn field_of(err: &DecodeError) -> &str {
    match err {
        DecodeError::IndexOutOfRange { field, .. }
        | DecodeError::OutOfBounds { field, .. }
        | DecodeError::Missing { field }
        | DecodeError::UnknownEnum { field, .. }
        | DecodeError::WrongValueKind { field, .. } => field,
        DecodeError::BadHeaderField { field, .. } => field,
        other => panic!("no field in {other:?}"),
    }
}

#[test]
fn truncated() {
    let bytes = sample();
    assert_eq!(
        decode_err(&bytes[..4]),
        DecodeError::TooShort {
            what: "the program file",
            len: 4,
            need: 8
        }
    );
    assert!(matches!(
        decode_err(&bytes[..20]),
        DecodeError::TooShort {
            len: 20,
            need: 32,
            ..
        }
    ));
    let program_size = Program::decode(&bytes)
        .expect("decodes")
        .extended_header()
        .expect("header")
        .program_size as usize;
    let err = decode_err(&bytes[..program_size - 8]);
    assert_eq!(field_of(&err), "program_size", "{err}");
    // Every truncation fails without panicking.
    for n in 0..bytes.len() {
        assert!(Program::decode(&bytes[..n]).is_err(), "truncated to {n}");
    }
}

#[test]
fn bad_identifier() {
    let mut bytes = sample();
    bytes[4..8].copy_from_slice(b"ET11");
    let err = decode_err(&bytes);
    assert_eq!(
        err,
        DecodeError::BadMagic {
            what: "the program file identifier (bytes 4..8)",
            found: *b"ET11",
            expected: *b"ET12"
        }
    );
    assert!(err.to_string().contains("\"ET12\""), "{err}");
}

#[test]
fn bad_extended_header_magic() {
    let mut bytes = sample();
    bytes[8..12].copy_from_slice(b"eh01");
    assert_eq!(
        decode_err(&bytes),
        DecodeError::SegmentsWithoutHeader {
            segments: 3,
            found: *b"eh01"
        }
    );
}

#[test]
fn bad_extended_header_fields() {
    let cases: [(usize, u64, &str); 5] = [
        (12, 8, "length"),
        (16, 1 << 40, "program_size"),
        (16, 16, "program_size"),
        (24, 1 << 40, "segment_base_offset"),
        (32, 1 << 40, "segment_data_size"),
    ];
    for (at, value, field) in cases {
        let mut bytes = sample();
        if at == 12 {
            put_u32(&mut bytes, at, value as u32);
        } else {
            put_u64(&mut bytes, at, value);
        }
        let err = decode_err(&bytes);
        assert_eq!(field_of(&err), field, "{err}");
    }
    let mut bytes = sample();
    put_u32(&mut bytes, 12, 1 << 30);
    assert!(matches!(
        decode_err(&bytes),
        DecodeError::OutOfBounds {
            size: 1073741824,
            ..
        }
    ));
}

#[test]
fn segment_out_of_range() {
    let mut bytes = sample();
    // Claim no segment data size, so that only the segment table can catch the truncation.
    put_u64(&mut bytes, 32, 0);
    let len = bytes.len();
    let err = decode_err(&bytes[..len - 1]);
    assert_eq!(field_of(&err), "segments[2]", "{err}");
    assert!(err.to_string().contains("(offset "), "{err}");
}

#[test]
fn flatbuffer_corrupt() {
    let mut bytes = sample();
    put_u32(&mut bytes, 0, 0x7fff_fff0);
    assert!(matches!(
        decode_err(&bytes),
        DecodeError::FlatBuffer {
            what: "program",
            ..
        }
    ));
}

fn with_forward(edit: impl FnOnce(&mut ts::PlanSpec)) -> Vec<u8> {
    let mut spec = ts::sample_program();
    edit(&mut spec.plans[0]);
    ts::build_program(&spec)
}

#[test]
fn delegate_index_out_of_range() {
    let bytes = with_forward(|p| p.instructions.push(InstrSpec::Delegate(2, vec![0])));
    let err = decode_err(&bytes);
    assert_eq!(
        err,
        DecodeError::IndexOutOfRange {
            field: "execution_plan[0].chains[0].instructions[6].delegate_index".to_owned(),
            index: 2,
            table: "delegates",
            len: 2
        }
    );
}

#[test]
fn delegate_data_reference_out_of_range() {
    let bytes = with_forward(|p| {
        p.delegates.push(DelegateSpec {
            id: "VulkanBackend".to_owned(),
            inline: false,
            index: 9,
            compile_specs: Vec::new(),
        })
    });
    let err = decode_err(&bytes);
    assert_eq!(
        field_of(&err),
        "execution_plan[0].delegates[2].processed.index"
    );
    assert!(matches!(
        err,
        DecodeError::IndexOutOfRange {
            index: 9,
            len: 3,
            table: "segments",
            ..
        }
    ));
    let bytes = with_forward(|p| p.delegates[1].index = 1);
    assert!(matches!(
        decode_err(&bytes),
        DecodeError::IndexOutOfRange {
            table: "backend_delegate_data",
            index: 1,
            len: 1,
            ..
        }
    ));
}

#[test]
fn value_index_out_of_range() {
    let cases: Vec<(InstrSpec, &str)> = vec![
        (InstrSpec::Kernel(0, vec![0, 13]), "instructions[6].args[1]"),
        (InstrSpec::Kernel(1, vec![0]), "instructions[6].op_index"),
        (InstrSpec::Move(-1, 0), "instructions[6].move_from"),
        (
            InstrSpec::JumpFalse(3, 7),
            "instructions[6].destination_instruction",
        ),
        (InstrSpec::Free(100), "instructions[6].value_index"),
    ];
    for (instr, field) in cases {
        let bytes = with_forward(|p| p.instructions.push(instr));
        let err = decode_err(&bytes);
        assert_eq!(
            field_of(&err),
            format!("execution_plan[0].chains[0].{field}"),
            "{err}"
        );
    }
    let bytes = with_forward(|p| p.outputs.push(13));
    assert_eq!(
        field_of(&decode_err(&bytes)),
        "execution_plan[0].outputs[1]"
    );
    let bytes = with_forward(|p| p.values[9] = ValueSpec::TensorList(vec![0, 20]));
    assert_eq!(
        field_of(&decode_err(&bytes)),
        "execution_plan[0].values[9].val.items[1]"
    );
    let bytes = with_forward(|p| p.values[10] = ValueSpec::OptionalTensorList(vec![-2]));
    assert_eq!(
        field_of(&decode_err(&bytes)),
        "execution_plan[0].values[10].val.items[0]"
    );
}

#[test]
fn tensor_list_of_a_non_tensor() {
    let bytes = with_forward(|p| p.values[9] = ValueSpec::TensorList(vec![0, 2]));
    assert_eq!(
        decode_err(&bytes),
        DecodeError::WrongValueKind {
            field: "execution_plan[0].values[9].val.items[1]".to_owned(),
            index: 2,
            expected: "Tensor",
            found: "Int"
        }
    );
}

#[test]
fn tensor_data_index_and_scalar_type() {
    let bytes = with_forward(|p| {
        p.values[1] = ValueSpec::Tensor {
            scalar_type: 6,
            sizes: vec![2],
            data_buffer_idx: 2,
            allocation: None,
        }
    });
    let err = decode_err(&bytes);
    assert!(
        matches!(
            &err,
            DecodeError::IndexOutOfRange {
                table: "constants",
                index: 2,
                len: 2,
                ..
            }
        ),
        "{err}"
    );
    let bytes = with_forward(|p| {
        p.values[1] = ValueSpec::Tensor {
            scalar_type: 9,
            sizes: vec![2],
            data_buffer_idx: 0,
            allocation: None,
        }
    });
    assert_eq!(
        decode_err(&bytes),
        DecodeError::UnknownEnum {
            field: "execution_plan[0].values[1].val.scalar_type".to_owned(),
            value: 9
        }
    );
    // A constant larger than the segment it lies in.
    let bytes = with_forward(|p| {
        p.values[1] = ValueSpec::Tensor {
            scalar_type: 6,
            sizes: vec![5],
            data_buffer_idx: 1,
            allocation: None,
        }
    });
    let p = Program::decode(&bytes).expect("decodes");
    let t = p.forward().expect("forward").values[1].clone();
    let err = p
        .constant_data(t.as_tensor().expect("tensor"))
        .expect_err("too large");
    assert!(
        matches!(
            err,
            DecodeError::OutOfBounds {
                offset: 16,
                size: 20,
                len: 32,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn named_data_errors() {
    let mut spec = ts::sample_program();
    spec.named_data.push(("w1".to_owned(), 3));
    let err = decode_err(&ts::build_program(&spec));
    assert_eq!(field_of(&err), "named_data[1].segment_index");
    let mut spec = ts::sample_program();
    spec.named_data.push(("w0".to_owned(), 2));
    assert_eq!(
        decode_err(&ts::build_program(&spec)),
        DecodeError::DuplicateKey {
            key: "w0".to_owned(),
            first: 0,
            second: 1
        }
    );
    let bytes = sample();
    let p = Program::decode(&bytes).expect("decodes");
    assert_eq!(
        p.named_data("w9"),
        Err(DecodeError::NoNamedData {
            key: "w9".to_owned(),
            count: 1
        })
    );
}

#[test]
fn constant_segment_errors() {
    let mut spec = ts::sample_program();
    spec.constant_segment = Some((2, vec![0, 33]));
    let err = decode_err(&ts::build_program(&spec));
    assert_eq!(field_of(&err), "constant_segment.offsets[1]");
    let mut spec = ts::sample_program();
    spec.constant_segment = Some((5, vec![0, 16]));
    assert_eq!(
        field_of(&decode_err(&ts::build_program(&spec))),
        "constant_segment.segment_index"
    );
    let mut spec = ts::sample_program();
    spec.constant_buffer = vec![Vec::new(), vec![1, 2]];
    assert!(matches!(
        decode_err(&ts::build_program(&spec)),
        DecodeError::ConflictingConstants {
            buffers: 2,
            offsets: 2
        }
    ));
}

fn payload() -> Vec<u8> {
    ts::build_vulkan_payload(&ts::sample_vk_graph())
}

fn vk_err(bytes: &[u8]) -> DecodeError {
    VkGraph::decode(bytes).expect_err("must not decode")
}

#[test]
fn vulkan_header_lies() {
    let good = payload();
    assert!(matches!(
        vk_err(&good[..29]),
        DecodeError::TooShort {
            len: 29,
            need: 30,
            ..
        }
    ));
    let mut bytes = good.clone();
    bytes[4..8].copy_from_slice(b"VKDG");
    assert!(matches!(vk_err(&bytes), DecodeError::BadMagic { found, .. } if &found == b"VKDG"));
    let len = good.len() as u32;
    let cases: [(usize, u32, &str); 4] = [
        (8, 20, "header_len"),
        (10, 16, "flatbuffer_offset"),
        (14, 0, "flatbuffer_size"),
        (18, 40, "bytes_offset"),
    ];
    for (at, value, field) in cases {
        let mut bytes = good.clone();
        if at == 8 {
            bytes[8..10].copy_from_slice(&(value as u16).to_le_bytes());
        } else {
            put_u32(&mut bytes, at, value);
        }
        let err = vk_err(&bytes);
        assert_eq!(field_of(&err), field, "{err}");
    }
    let mut bytes = good.clone();
    put_u32(&mut bytes, 14, len);
    assert!(matches!(
        vk_err(&bytes),
        DecodeError::BadHeaderField {
            field: "bytes_offset",
            ..
        }
    ));
    let mut bytes = good.clone();
    put_u32(&mut bytes, 18, len);
    put_u64(&mut bytes, 22, 1);
    let err = vk_err(&bytes);
    assert_eq!(field_of(&err), "the VH00 header's constant bytes", "{err}");
    let mut bytes = good.clone();
    put_u64(&mut bytes, 22, u64::MAX);
    assert!(matches!(
        vk_err(&bytes),
        DecodeError::OutOfBounds { size: u64::MAX, .. }
    ));
    let mut bytes = good.clone();
    bytes[36..40].copy_from_slice(b"VK01");
    assert!(matches!(vk_err(&bytes), DecodeError::BadMagic { found, .. } if &found == b"VK01"));
}

#[test]
fn vulkan_graph_indices() {
    let mut spec = ts::sample_vk_graph();
    spec.constants[0] = (8, 16, None);
    let err = vk_err(&ts::build_vulkan_payload(&spec));
    assert_eq!(field_of(&err), "VkGraph.constants[0]");
    assert!(matches!(
        err,
        DecodeError::OutOfBounds {
            offset: 8,
            size: 16,
            len: 16,
            ..
        }
    ));

    let mut spec = ts::sample_vk_graph();
    spec.chain[2].2.push(14);
    let err = vk_err(&ts::build_vulkan_payload(&spec));
    assert_eq!(
        err,
        DecodeError::IndexOutOfRange {
            field: "VkGraph.chain[2].args[3]".to_owned(),
            index: 14,
            table: "values",
            len: 14
        }
    );

    let mut spec = ts::sample_vk_graph();
    spec.values[2] = ts::VkValueSpec::Tensor {
        datatype: 5,
        dims: vec![4],
        constant_id: 2,
        mem_obj_id: -1,
    };
    let err = vk_err(&ts::build_vulkan_payload(&spec));
    assert_eq!(field_of(&err), "VkGraph.values[2].value.constant_id");

    let mut spec = ts::sample_vk_graph();
    spec.values[2] = ts::VkValueSpec::Tensor {
        datatype: 9,
        dims: vec![4],
        constant_id: -1,
        mem_obj_id: -1,
    };
    let err = vk_err(&ts::build_vulkan_payload(&spec));
    assert_eq!(
        err,
        DecodeError::UnknownEnum {
            field: "VkGraph.values[2].value.datatype".to_owned(),
            value: 9
        }
    );

    let mut spec = ts::sample_vk_graph();
    spec.output_ids = vec![99];
    assert_eq!(
        field_of(&vk_err(&ts::build_vulkan_payload(&spec))),
        "VkGraph.output_ids[0]"
    );
    let mut spec = ts::sample_vk_graph();
    spec.values[10] = ts::VkValueSpec::ValueList(vec![-1]);
    assert_eq!(
        field_of(&vk_err(&ts::build_vulkan_payload(&spec))),
        "VkGraph.values[10].value.items[0]"
    );
}

#[test]
fn vulkan_named_constant_missing() {
    let mut spec = ts::sample_program();
    spec.named_data[0].0 = "other".to_owned();
    let bytes = ts::build_program(&spec);
    let p = Program::decode(&bytes).expect("decodes");
    let payload = p
        .delegate_payload(&p.forward().expect("forward").delegates[0])
        .expect("payload");
    let g = VkGraph::decode(payload).expect("graph decodes");
    assert_eq!(
        g.constant(1, &p),
        Err(DecodeError::NoNamedData {
            key: "w0".to_owned(),
            count: 1
        })
    );
}

/// Decodes everything reachable, as the fuzz target does.
fn decode_all(bytes: &[u8]) {
    let Ok(p) = Program::decode(bytes) else {
        return;
    };
    for plan in p.plans() {
        for d in &plan.delegates {
            let Ok(payload) = p.delegate_payload(d) else {
                continue;
            };
            if let Ok(g) = VkGraph::decode(payload) {
                for c in 0..g.constants.len() {
                    let _ = g.constant(c, &p);
                }
                let _ = g.op_names();
            }
        }
        for v in &plan.values {
            if let Some(t) = v.as_tensor() {
                let _ = p.constant_data(t);
            }
        }
    }
}

#[test]
fn mutations_never_panic() {
    let bytes = sample();
    for i in 0..bytes.len() {
        for x in [0x01u8, 0x80, 0xff] {
            let mut m = bytes.clone();
            m[i] ^= x;
            decode_all(&m);
        }
    }
    let good = payload();
    for i in 0..good.len() {
        for x in [0x01u8, 0x80, 0xff] {
            let mut m = good.clone();
            m[i] ^= x;
            if let Ok(g) = VkGraph::decode(&m) {
                let _ = g.op_names();
            }
        }
    }
}

#[test]
fn int_list_items_must_index_int_values() {
    let bytes = with_forward(|p| p.values[6] = ts::ValueSpec::IntList(vec![2, 0]));
    assert_eq!(
        decode_err(&bytes),
        DecodeError::WrongValueKind {
            field: "execution_plan[0].values[6].val.items".to_owned(),
            index: 0,
            expected: "Int",
            found: "Tensor",
        }
    );
    let bytes = with_forward(|p| p.values[6] = ts::ValueSpec::IntList(vec![99]));
    assert!(matches!(
        decode_err(&bytes),
        DecodeError::IndexOutOfRange {
            index: 99,
            table: "values",
            ..
        }
    ));
}
