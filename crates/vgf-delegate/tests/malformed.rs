//! The hand-made malformed VGF files of `fixtures/malformed/vgf/`: each must fail to decode
//! with the error that `expected.txt` names (`file: substring of the error's message`).
//!
//! The files are derived from the fixture models by [`regenerate`] (ignored; run it with
//! `cargo test -p vgf-delegate --test malformed -- --ignored` after a format change, then
//! review the diff).
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use std::path::PathBuf;

use vgf_delegate::Vgf;
use vgf_delegate::format::test_support as ts;

fn malformed_dir() -> PathBuf {
    vk_core::testing::fixture("malformed/vgf")
}

/// `(file, expected substring)` from `expected.txt`; `#` starts a comment line.
fn manifest() -> Vec<(String, String)> {
    let path = malformed_dir().join("expected.txt");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (file, expected) = l
                .split_once(": ")
                .unwrap_or_else(|| panic!("{}: `{l}` is not `file: expected`", path.display()));
            (file.to_owned(), expected.to_owned())
        })
        .collect()
}

#[test]
fn every_malformed_file_gives_its_named_error() {
    let entries = manifest();
    assert!(entries.len() >= 10, "only {} entries", entries.len());
    let mut failures = Vec::new();
    for (file, expected) in &entries {
        let bytes = std::fs::read(malformed_dir().join(file))
            .unwrap_or_else(|e| panic!("read {file}: {e}"));
        match Vgf::decode(&bytes) {
            Ok(_) => failures.push(format!(
                "{file}: decoded, expected an error with `{expected}`"
            )),
            Err(e) if e.to_string().contains(expected.as_str()) => {}
            Err(e) => failures.push(format!("{file}: `{e}` does not contain `{expected}`")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_file_in_the_folder_is_in_the_manifest() {
    let listed: Vec<String> = manifest().into_iter().map(|(f, _)| f).collect();
    for entry in std::fs::read_dir(malformed_dir()).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".vgf") {
            assert!(listed.contains(&name), "{name} is not in expected.txt");
        }
    }
}

// ---- generation ----------------------------------------------------------------------------

fn model(name: &str) -> Vec<u8> {
    let path = vk_core::testing::fixture("vgf")
        .join(name)
        .join("model.vgf");
    std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
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

fn patched(mut b: Vec<u8>, f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    f(&mut b);
    b
}

/// Every malformed file with the substring its error must contain.
fn cases() -> Vec<(&'static str, Vec<u8>, String)> {
    let add = model("add");
    let conv = model("conv");
    let (mo, ms) = section(&add, 0);
    let (so, _) = section(&add, 1);
    let (co, _) = section(&conv, 3);
    let add_len = add.len();
    vec![
        (
            "empty.vgf",
            Vec::new(),
            "VGF data is 0 bytes long, shorter than the 128 bytes".into(),
        ),
        (
            "truncated_header.vgf",
            add[..100].to_vec(),
            "VGF data is 100 bytes long, shorter than the 128 bytes".into(),
        ),
        (
            "bad_magic.vgf",
            patched(add.clone(), |b| b[0..4].copy_from_slice(b"VGF2")),
            "not a VGF file: magic is [56, 47, 46, 32]".into(),
        ),
        (
            "unsupported_version.vgf",
            patched(add.clone(), |b| b[9] = 6),
            "VGF format version 0.6.0 is not supported".into(),
        ),
        (
            "truncated_file.vgf",
            add[..add_len - 8].to_vec(),
            format!("lies outside the file of {} bytes", add_len - 8),
        ),
        (
            "section_offset_past_end.vgf",
            patched(add.clone(), |b| put_u64(b, 16, add_len as u64)),
            format!("the module table section (offset {add_len}, size {ms}) lies outside"),
        ),
        (
            "section_size_overflows.vgf",
            patched(add.clone(), |b| {
                put_u64(b, 32, 200);
                put_u64(b, 40, u64::MAX - 10);
            }),
            "the model sequence table section (offset 200, size 18446744073709551605) lies outside"
                .into(),
        ),
        (
            "section_in_header.vgf",
            patched(add.clone(), |b| put_u64(b, 48, 64)),
            "the model resource table section starts at offset 64, inside the 128-byte header"
                .into(),
        ),
        (
            "sections_overlap.vgf",
            patched(add.clone(), |b| {
                put_u64(b, 48, mo as u64);
                put_u64(b, 56, ms as u64);
            }),
            "overlaps the model resource table section".into(),
        ),
        (
            "misaligned_section.vgf",
            patched(add.clone(), |b| {
                put_u64(b, 16, mo as u64 + 4);
                put_u64(b, 24, ms as u64 - 4);
            }),
            format!(
                "the module table section starts at offset {}, not a multiple of 8",
                mo + 4
            ),
        ),
        (
            "corrupt_flatbuffer.vgf",
            patched(add.clone(), |b| {
                b[so..so + 4].copy_from_slice(&0x7fff_fff0u32.to_le_bytes())
            }),
            "the model sequence table section is not a valid FlatBuffers table".into(),
        ),
        (
            "constants_section_short.vgf",
            patched(conv.clone(), |b| put_u64(b, 64 + 8, 12)),
            "VGF data is 12 bytes long, shorter than the 16 bytes".into(),
        ),
        (
            "constant_count_overflows.vgf",
            patched(conv.clone(), |b| put_u64(b, co + 8, u64::MAX)),
            "field constants.count is 18446744073709551615, but the section has room for at most"
                .into(),
        ),
        (
            "constant_past_payload.vgf",
            patched(conv.clone(), |b| put_u64(b, co + 16 + 8, 1 << 40)),
            "constant 0 (offset 0, size 1099511627776) lies outside the constants payload".into(),
        ),
        (
            "constant_range_overflows.vgf",
            patched(conv.clone(), |b| put_u64(b, co + 16 + 16, u64::MAX)),
            "constant 0 (offset 18446744073709551615".into(),
        ),
        (
            "constant_bad_sparsity.vgf",
            patched(conv.clone(), |b| {
                b[co + 16 + 4..co + 16 + 8].copy_from_slice(&(-2i32).to_le_bytes())
            }),
            "constant 0 has sparsity dimension -2".into(),
        ),
        (
            "constant_resource_out_of_range.vgf",
            patched(conv.clone(), |b| {
                b[co + 16..co + 20].copy_from_slice(&99u32.to_le_bytes())
            }),
            "field constants[0].mrt_index is 99, but the table it indexes has 3 entries".into(),
        ),
        (
            "glsl_module.vgf",
            ts::file_with_module_code(|fbb| ts::glsl(fbb, "void main(){}")),
            "module 0 holds GLSL source; only SPIR-V is supported".into(),
        ),
        (
            "module_index_out_of_range.vgf",
            ts::compute_file(ts::Options {
                module_index: 3,
                ..Default::default()
            }),
            "field segments[0].module_index is 3, but the table it indexes has 1 entries".into(),
        ),
        (
            "segment_constant_out_of_range.vgf",
            ts::compute_file(ts::Options {
                segment_constant: 9,
                ..Default::default()
            }),
            "field segments[0].constants[0] is 9, but the table it indexes has 1 entries".into(),
        ),
        (
            "dispatch_shape_count.vgf",
            ts::compute_file(ts::Options {
                dispatch_len: 2,
                ..Default::default()
            }),
            "field segments[0].dispatch_shape has 2 entries, expected 3".into(),
        ),
        (
            "segment_type_mismatch.vgf",
            ts::compute_file(ts::Options {
                graph_segment: true,
                ..Default::default()
            }),
            "segment 0 is GRAPH but its module 0 is COMPUTE".into(),
        ),
        (
            "unknown_resource_category.vgf",
            ts::compute_file(ts::Options {
                category: 9,
                ..Default::default()
            }),
            "field resources[0].category holds unknown value 9".into(),
        ),
    ]
}

/// Writes every file of [`cases`] and `expected.txt` into `fixtures/malformed/vgf/`.
#[test]
#[ignore = "writes the fixtures; run after a format change and review the diff"]
fn regenerate() {
    let dir = malformed_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let mut manifest = String::from(
        "# Malformed VGF files and a substring of the error each must give (`file: expected`).\n\
         # Written by `cargo test -p vgf-delegate --test malformed -- --ignored regenerate`.\n",
    );
    for (file, bytes, expected) in cases() {
        let e = Vgf::decode(&bytes).expect_err(file);
        assert!(
            e.to_string().contains(expected.as_str()),
            "{file}: `{e}` does not contain `{expected}`"
        );
        std::fs::write(dir.join(file), &bytes).unwrap();
        manifest.push_str(&format!("{file}: {expected}\n"));
    }
    std::fs::write(dir.join("expected.txt"), manifest).unwrap();
}
