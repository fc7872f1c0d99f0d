//! Decoder tests (no GPU): every corpus file against Arm's `vgf_dump.json`, hand-made
//! malformed files, and a deterministic mutation run seeded from the corpus.
#![allow(clippy::unwrap_used)] // helpers outside #[test] functions

mod common;

use serde_json::Value;
use vgf_delegate::format::{CONST00, Category, ConstantsLayout, ModuleType};
use vgf_delegate::{DecodeError, Vgf, inspect_json};

/// Asserts that every fact in `theirs` is in `ours` at the same path.
fn assert_subset(theirs: &Value, ours: &Value, path: &str) {
    match (theirs, ours) {
        (Value::Object(t), Value::Object(o)) => {
            for (k, tv) in t {
                let ov = o
                    .get(k)
                    .unwrap_or_else(|| panic!("{path}.{k}: missing in ours"));
                assert_subset(tv, ov, &format!("{path}.{k}"));
            }
        }
        (Value::Array(t), Value::Array(o)) => {
            assert_eq!(t.len(), o.len(), "{path}: lengths differ");
            for (i, (tv, ov)) in t.iter().zip(o).enumerate() {
                assert_subset(tv, ov, &format!("{path}[{i}]"));
            }
        }
        _ => assert_eq!(theirs, ours, "{path}"),
    }
}

#[test]
fn every_corpus_file_carries_the_facts_of_vgf_dump() {
    for dir in common::corpus_models() {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let bytes = std::fs::read(dir.join("model.vgf")).unwrap();
        let vgf = Vgf::decode(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let ours = inspect_json(&vgf);
        let theirs: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("vgf_dump.json")).unwrap())
                .unwrap();
        assert_subset(&theirs, &ours, &name);

        // Facts vgf_dump does not print, checked against the corpus description.
        assert_eq!(vgf.header.version.to_string(), "0.5.0", "{name}");
        assert!(!vgf.header.legacy_magic);
        assert_eq!(vgf.modules.len(), 1, "{name}");
        assert_eq!(vgf.modules[0].kind, ModuleType::Graph);
        let spirv = vgf.modules[0].spirv.expect("SPIR-V code");
        assert_eq!(spirv.words()[0], 0x0723_0203, "{name}: SPIR-V magic");
        if !vgf.constants.is_empty() {
            assert_eq!(vgf.constants_layout, ConstantsLayout::Const00, "{name}");
        }
        // Every dense constant's size is its resource's shape times the element size.
        for (i, c) in vgf.constants.iter().enumerate() {
            let r = vgf.resource(c.mrt_index).unwrap();
            assert_eq!(r.category, Category::Constant, "{name}: constant {i}");
            let elem =
                vk_core::DType::from_vk_format(vk_core::vk::Format::from_raw(r.vk_format as i32))
                    .map(|d| d.size())
                    .unwrap_or_else(|| panic!("{name}: constant {i}: format {}", r.vk_format));
            let n: i64 = r.shape.iter().product();
            assert_eq!(
                c.data.len() as i64,
                n * elem as i64,
                "{name}: constant {i} size"
            );
        }
    }
}

// ---- hand-made files ----------------------------------------------------------------------

fn add_model() -> Vec<u8> {
    std::fs::read(common::corpus_dir().join("add/model.vgf")).unwrap()
}
fn conv_model() -> Vec<u8> {
    std::fs::read(common::corpus_dir().join("conv/model.vgf")).unwrap()
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}
/// (offset, size) of section `i` (0 modules, 1 sequence, 2 resources, 3 constants).
fn section(b: &[u8], i: usize) -> (usize, usize) {
    (
        get_u64(b, 16 + 16 * i) as usize,
        get_u64(b, 24 + 16 * i) as usize,
    )
}

#[test]
fn a_truncated_file_is_too_short_or_out_of_file() {
    let b = add_model();
    assert_eq!(
        Vgf::decode(&b[..100]).unwrap_err(),
        DecodeError::TooShort {
            len: 100,
            need: 128
        }
    );
    let cut = b.len() - 8;
    match Vgf::decode(&b[..cut]).unwrap_err() {
        DecodeError::SectionOutOfFile { file_len, .. } => assert_eq!(file_len, cut as u64),
        e => panic!("unexpected {e}"),
    }
    assert!(matches!(
        Vgf::decode(&[]).unwrap_err(),
        DecodeError::TooShort { len: 0, .. }
    ));
}

#[test]
fn bad_magic_and_versions_are_named() {
    let mut b = add_model();
    b[0..4].copy_from_slice(b"VGF2");
    assert_eq!(
        Vgf::decode(&b).unwrap_err(),
        DecodeError::BadMagic { found: *b"VGF2" }
    );
    let mut b = add_model();
    b[9] = 6;
    let e = Vgf::decode(&b).unwrap_err();
    assert!(matches!(e, DecodeError::UnsupportedVersion { .. }), "{e}");
    assert!(e.to_string().contains("0.6.0"), "{e}");
    let mut b = add_model();
    b[8] = 1;
    assert!(matches!(
        Vgf::decode(&b).unwrap_err(),
        DecodeError::UnsupportedVersion { .. }
    ));
    // 0.4.x decodes; the deprecated magic is accepted.
    let mut b = add_model();
    b[9] = 4;
    b[10] = 3;
    b[0..4].copy_from_slice(&0xF0E1_D2C3u32.to_le_bytes());
    let vgf = Vgf::decode(&b).unwrap();
    assert!(vgf.header.legacy_magic);
    assert_eq!(vgf.header.version.minor, 4);
}

#[test]
fn sections_outside_the_file_in_the_header_overlapping_or_misaligned_are_errors() {
    let b = add_model();
    // Offset past the end.
    let mut m = b.clone();
    put_u64(&mut m, 16, b.len() as u64);
    assert!(matches!(
        Vgf::decode(&m).unwrap_err(),
        DecodeError::SectionOutOfFile {
            section: "module table",
            ..
        }
    ));
    // offset + size overflows u64.
    let mut m = b.clone();
    put_u64(&mut m, 32, 200);
    put_u64(&mut m, 40, u64::MAX - 10);
    assert!(matches!(
        Vgf::decode(&m).unwrap_err(),
        DecodeError::SectionOutOfFile { section: "model sequence table", size, .. } if size == u64::MAX - 10
    ));
    // Inside the header.
    let mut m = b.clone();
    put_u64(&mut m, 48, 64);
    assert_eq!(
        Vgf::decode(&m).unwrap_err(),
        DecodeError::SectionInHeader {
            section: "model resource table",
            offset: 64
        }
    );
    // Overlapping: the resource table pointed at the module table.
    let mut m = b.clone();
    let (mo, ms) = section(&b, 0);
    put_u64(&mut m, 48, mo as u64);
    put_u64(&mut m, 56, ms as u64);
    match Vgf::decode(&m).unwrap_err() {
        DecodeError::SectionsOverlap { first, second, .. } => {
            assert_eq!((first, second), ("module table", "model resource table"))
        }
        e => panic!("unexpected {e}"),
    }
    // Misaligned.
    let mut m = b.clone();
    put_u64(&mut m, 16, mo as u64 + 4);
    put_u64(&mut m, 24, ms as u64 - 4);
    assert_eq!(
        Vgf::decode(&m).unwrap_err(),
        DecodeError::MisalignedSection {
            section: "module table",
            offset: mo as u64 + 4
        }
    );
}

#[test]
fn a_corrupt_flatbuffer_is_named_by_section() {
    let mut b = add_model();
    let (so, _) = section(&b, 1);
    // The root offset of the sequence table, pointed far away.
    b[so..so + 4].copy_from_slice(&0x7fff_fff0u32.to_le_bytes());
    match Vgf::decode(&b).unwrap_err() {
        DecodeError::FlatBuffer { section, .. } => assert_eq!(section, "model sequence table"),
        e => panic!("unexpected {e}"),
    }
}

#[test]
fn huge_constant_counts_and_out_of_section_constants_are_errors() {
    let b = conv_model();
    let (co, cs) = section(&b, 3);
    assert_eq!(b[co..co + 8], CONST00);
    let mut m = b.clone();
    put_u64(&mut m, co + 8, u64::MAX);
    let e = Vgf::decode(&m).unwrap_err();
    assert!(
        matches!(
            e,
            DecodeError::HugeCount {
                field: "constants.count",
                count: u64::MAX,
                ..
            }
        ),
        "{e}"
    );
    // The first record's size, far past the payload.
    let mut m = b.clone();
    put_u64(&mut m, co + 16 + 8, 1 << 40);
    let e = Vgf::decode(&m).unwrap_err();
    assert!(
        matches!(e, DecodeError::ConstantOutOfSection { index: 0, size, .. } if size == 1 << 40),
        "{e}"
    );
    // offset + size overflows.
    let mut m = b.clone();
    put_u64(&mut m, co + 16 + 16, u64::MAX);
    assert!(matches!(
        Vgf::decode(&m).unwrap_err(),
        DecodeError::ConstantOutOfSection { index: 0, .. }
    ));
    // Sparsity below -1.
    let mut m = b.clone();
    m[co + 16 + 4..co + 16 + 8].copy_from_slice(&(-2i32).to_le_bytes());
    assert_eq!(
        Vgf::decode(&m).unwrap_err(),
        DecodeError::BadSparsity {
            index: 0,
            value: -2
        }
    );
    // A constant naming a resource that does not exist.
    let mut m = b.clone();
    m[co + 16..co + 20].copy_from_slice(&99u32.to_le_bytes());
    match Vgf::decode(&m).unwrap_err() {
        DecodeError::IndexOutOfRange {
            field,
            index: 99,
            len: 3,
        } => {
            assert_eq!(field, "constants[0].mrt_index")
        }
        e => panic!("unexpected {e}"),
    }
    // A constants section cut short.
    let mut m = b.clone();
    put_u64(&mut m, 64 + 8, 12);
    assert!(matches!(
        Vgf::decode(&m).unwrap_err(),
        DecodeError::TooShort { len: 12, need: 16 }
    ));
    let _ = cs;
}

/// Finds the only occurrence of `needle` inside `range` of `b`.
fn find_once(b: &[u8], range: std::ops::Range<usize>, needle: &[u8]) -> usize {
    let hits: Vec<usize> = (range.start..range.end - needle.len())
        .filter(|&i| &b[i..i + needle.len()] == needle)
        .collect();
    assert_eq!(hits.len(), 1, "{needle:?} found {} times", hits.len());
    hits[0]
}

#[test]
fn bad_indices_are_named() {
    // The conv model's segment: module_index 0 is stored as a default (absent); its bindings
    // refer to resources 1 and 2. Rewrite the output binding's mrt_index 2 -> 7 everywhere
    // in the sequence table by editing the decoded values' bytes.
    let b = conv_model();
    let vgf = Vgf::decode(&b).unwrap();
    assert_eq!(vgf.sequence.outputs[0].mrt_index, 2);
    let (so, ss) = section(&b, 1);
    // The BindingSlot tables store {binding: 1, mrt_index: 2}; find "1, 2" as two u32s.
    let mut needle = Vec::new();
    needle.extend_from_slice(&1u32.to_le_bytes());
    needle.extend_from_slice(&2u32.to_le_bytes());
    let hits: Vec<usize> = (so..so + ss - 8)
        .filter(|&i| b[i..i + 8] == needle[..])
        .collect();
    assert!(!hits.is_empty());
    let mut m = b.clone();
    for h in &hits {
        m[h + 4..h + 8].copy_from_slice(&7u32.to_le_bytes());
    }
    match Vgf::decode(&m).unwrap_err() {
        DecodeError::IndexOutOfRange {
            field,
            index: 7,
            len: 3,
        } => {
            assert!(field.ends_with("mrt_index"), "{field}")
        }
        e => panic!("unexpected {e}"),
    }
    let _ = find_once;
}

#[test]
fn glsl_modules_are_unsupported_module_code() {
    use flatbuffers::FlatBufferBuilder;
    use vgf_delegate::format::test_support as ts;
    let file =
        ts::file_with_module_code(|fbb: &mut FlatBufferBuilder<'_>| ts::glsl(fbb, "void main(){}"));
    assert_eq!(
        Vgf::decode(&file).unwrap_err(),
        DecodeError::UnsupportedModuleCode {
            module: 0,
            code: "GLSL"
        }
    );
    let file = ts::file_with_module_code(|fbb| ts::hlsl(fbb, "[numthreads(1,1,1)] void main(){}"));
    assert!(matches!(
        Vgf::decode(&file).unwrap_err(),
        DecodeError::UnsupportedModuleCode { code: "HLSL", .. }
    ));
}

#[test]
fn built_files_round_trip_and_cross_references_are_checked() {
    use vgf_delegate::format::test_support as ts;
    // A well-formed built file with a COMPUTE module, a sampler, an alias group and a legacy
    // constants section.
    let file = ts::compute_file(ts::Options::default());
    let vgf = Vgf::decode(&file).unwrap();
    assert_eq!(vgf.modules[0].kind, ModuleType::Compute);
    assert_eq!(vgf.constants_layout, ConstantsLayout::Legacy);
    assert_eq!(vgf.constants[0].data, &[1, 2, 3, 4]);
    assert_eq!(vgf.resources[1].alias_group, Some(5));
    assert!(vgf.resources[1].sampler.is_some());
    assert_eq!(vgf.sequence.segments[0].dispatch_shape, Some([4, 1, 1]));
    assert_eq!(vgf.sequence.segments[0].descriptor_sets[0].set_index, 0);

    let e = Vgf::decode(&ts::compute_file(ts::Options {
        module_index: 3,
        ..Default::default()
    }))
    .unwrap_err();
    assert_eq!(
        e,
        DecodeError::IndexOutOfRange {
            field: "segments[0].module_index".into(),
            index: 3,
            len: 1
        }
    );
    let e = Vgf::decode(&ts::compute_file(ts::Options {
        segment_constant: 9,
        ..Default::default()
    }))
    .unwrap_err();
    assert_eq!(
        e,
        DecodeError::IndexOutOfRange {
            field: "segments[0].constants[0]".into(),
            index: 9,
            len: 1
        }
    );
    let e = Vgf::decode(&ts::compute_file(ts::Options {
        dispatch_len: 2,
        ..Default::default()
    }))
    .unwrap_err();
    assert_eq!(
        e,
        DecodeError::CountMismatch {
            field: "segments[0].dispatch_shape".into(),
            count: 2,
            expected: 3
        }
    );
    let e = Vgf::decode(&ts::compute_file(ts::Options {
        graph_segment: true,
        ..Default::default()
    }))
    .unwrap_err();
    assert!(
        matches!(e, DecodeError::TypeMismatch { segment: 0, .. }),
        "{e}"
    );
    let e = Vgf::decode(&ts::compute_file(ts::Options {
        strides_len: 2,
        ..Default::default()
    }))
    .unwrap_err();
    assert!(matches!(e, DecodeError::CountMismatch { .. }), "{e}");
    let e = Vgf::decode(&ts::compute_file(ts::Options {
        category: 9,
        ..Default::default()
    }))
    .unwrap_err();
    assert_eq!(
        e,
        DecodeError::UnknownEnum {
            field: "resources[0].category".into(),
            value: 9
        }
    );
}

// ---- mutation ------------------------------------------------------------------------------

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

#[test]
fn mutated_corpus_files_never_panic() {
    let mut seeds: Vec<Vec<u8>> = Vec::new();
    for dir in common::corpus_models() {
        let b = std::fs::read(dir.join("model.vgf")).unwrap();
        if b.len() < 64 * 1024 {
            seeds.push(b);
        }
    }
    assert!(seeds.len() >= 4);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let interesting: [u64; 8] = [0, 1, 7, 8, 127, 128, u32::MAX as u64, u64::MAX];
    let mut errors = 0usize;
    let iterations = 4000;
    for it in 0..iterations {
        let seed = &seeds[it % seeds.len()];
        let mut m = seed.clone();
        for _ in 0..1 + rng.below(4) {
            match rng.below(5) {
                // Flip bits in one byte.
                0 => {
                    let i = rng.below(m.len());
                    m[i] ^= 1 << rng.below(8);
                }
                // Overwrite an aligned u32 with an interesting value.
                1 => {
                    let i = rng.below(m.len() / 4) * 4;
                    let v = interesting[rng.below(interesting.len())] as u32;
                    if i + 4 <= m.len() {
                        m[i..i + 4].copy_from_slice(&v.to_le_bytes());
                    }
                }
                // Overwrite a header section field.
                2 => {
                    let at = 16 + 8 * rng.below(8);
                    let v = interesting[rng.below(interesting.len())];
                    if at + 8 <= m.len() {
                        m[at..at + 8].copy_from_slice(&v.to_le_bytes());
                    }
                }
                // Truncate.
                3 => {
                    let n = rng.below(m.len());
                    m.truncate(n);
                }
                // Random byte.
                _ => {
                    let i = rng.below(m.len());
                    m[i] = rng.next() as u8;
                }
            }
            if m.is_empty() {
                break;
            }
        }
        match Vgf::decode(&m) {
            Ok(vgf) => {
                // Whatever decodes must also describe itself and have its SPIR-V scanned.
                let _ = inspect_json(&vgf);
                let _ = vgf_delegate::requirements_for(&vgf);
            }
            Err(e) => {
                assert!(!e.to_string().is_empty());
                errors += 1;
            }
        }
    }
    // Most mutations are caught; some (a changed name byte, a payload byte) decode fine.
    assert!(
        errors > iterations / 10,
        "only {errors} of {iterations} mutations were errors"
    );
}

#[test]
fn a_huge_flatbuffers_vector_length_is_a_verification_error() {
    // The SPIR-V words vector: find its length (the module's word count) in the module table
    // and make it enormous.
    let b = add_model();
    let vgf = Vgf::decode(&b).unwrap();
    let words = vgf.modules[0].spirv.unwrap().word_count() as u32;
    let (mo, ms) = section(&b, 0);
    let hits: Vec<usize> = (mo..mo + ms - 8)
        .filter(|&i| {
            b[i..i + 4] == words.to_le_bytes() && b[i + 4..i + 8] == 0x0723_0203u32.to_le_bytes()
        })
        .collect();
    assert_eq!(hits.len(), 1);
    for huge in [0x4000_0000u32, u32::MAX] {
        let mut m = b.clone();
        m[hits[0]..hits[0] + 4].copy_from_slice(&huge.to_le_bytes());
        match Vgf::decode(&m).unwrap_err() {
            DecodeError::FlatBuffer { section, .. } => assert_eq!(section, "module table"),
            e => panic!("unexpected {e}"),
        }
    }
}

#[test]
fn a_signed_vtable_offset_of_i32_min_is_an_error() {
    // Found by the fuzzer: a table whose vtable offset is i32::MIN (flatbuffers 2.x's verifier
    // overflowed negating it). Every table-bearing section gets one at its root table.
    let b = add_model();
    for (i, name) in [
        "module table",
        "model sequence table",
        "model resource table",
    ]
    .into_iter()
    .enumerate()
    {
        let (o, _) = section(&b, i);
        let root = u32::from_le_bytes(b[o..o + 4].try_into().unwrap()) as usize;
        let mut m = b.clone();
        m[o + root..o + root + 4].copy_from_slice(&i32::MIN.to_le_bytes());
        match Vgf::decode(&m).unwrap_err() {
            DecodeError::FlatBuffer { section, .. } => assert_eq!(section, name),
            e => panic!("unexpected {e}"),
        }
    }
}

#[test]
fn explicit_graph_constant_bindings_are_decoded_and_checked() {
    use vgf_delegate::format::ConstantBinding;
    use vgf_delegate::format::test_support::{Options, compute_file};
    // Without bindings, a constant's graph constant id is its index.
    let vgf_bytes = compute_file(Options::default());
    let vgf = Vgf::decode(&vgf_bytes).unwrap();
    assert_eq!(
        vgf.sequence.segments[0].graph_constants(),
        vec![ConstantBinding {
            graph_constant_id: 0,
            constant_index: 0
        }]
    );
    // Explicit bindings win.
    let file = compute_file(Options {
        constant_bindings: vec![(7, 0)],
        ..Default::default()
    });
    let vgf = Vgf::decode(&file).unwrap();
    assert_eq!(
        vgf.sequence.segments[0].graph_constants(),
        vec![ConstantBinding {
            graph_constant_id: 7,
            constant_index: 0
        }]
    );
    assert_eq!(
        inspect_json(&vgf)["model_sequence"]["segments"][0]["constant_bindings"][0]["graph_constant_id"],
        7
    );
    // A binding to a constant that does not exist.
    let file = compute_file(Options {
        constant_bindings: vec![(7, 3)],
        ..Default::default()
    });
    assert_eq!(
        Vgf::decode(&file).unwrap_err(),
        DecodeError::IndexOutOfRange {
            field: "segments[0].constant_bindings[0].constant_index".into(),
            index: 3,
            len: 1
        }
    );
}
