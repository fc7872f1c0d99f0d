//! The hand-made malformed program files of `fixtures/malformed/program/`: each must fail to
//! read or to build with the error that `expected.txt` names.
//!
//! Manifest lines are `file: substring of the error's message`, or `file [tag]: substring`
//! where the error needs more than parsing: `vgf` (the `vgf` feature: a VGF file is decoded),
//! `device` (the `compute` feature and a Vulkan device: the wiring is checked as steps load).
//! Untagged files fail in `ProgramFile::read` or in `ProgramBuilder::build` before any device
//! is opened.

#![cfg(any(feature = "vgf", feature = "compute"))]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use std::path::PathBuf;

use vkdelegate::program::{ProgramBuilder, ProgramFile};

fn malformed_dir() -> PathBuf {
    vk_core::testing::fixture("malformed/program")
}

struct Entry {
    file: String,
    tag: Option<String>,
    expected: String,
}

fn manifest() -> Vec<Entry> {
    let path = malformed_dir().join("expected.txt");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (head, expected) = l
                .split_once(": ")
                .unwrap_or_else(|| panic!("{}: `{l}` is not `file: expected`", path.display()));
            let (file, tag) = match head.split_once(" [") {
                Some((file, tag)) => (file, Some(tag.trim_end_matches(']').to_owned())),
                None => (head, None),
            };
            Entry {
                file: file.to_owned(),
                tag,
                expected: expected.to_owned(),
            }
        })
        .collect()
}

/// The error of reading and building `file` with the given device choice.
fn error_of(file: &str, builder: impl FnOnce(ProgramFile) -> ProgramBuilder) -> String {
    match ProgramFile::read(&malformed_dir().join(file)) {
        Err(e) => e.to_string(),
        Ok(parsed) => match builder(parsed).build() {
            Err(e) => e.to_string(),
            Ok(_) => format!("{file}: built without an error"),
        },
    }
}

fn check(entries: &[&Entry], builder: impl Fn(ProgramFile) -> ProgramBuilder) {
    let mut failures = Vec::new();
    for entry in entries {
        let e = error_of(&entry.file, &builder);
        if !e.contains(entry.expected.as_str()) {
            failures.push(format!(
                "{}: `{e}` does not contain `{}`",
                entry.file, entry.expected
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn malformed_files_give_their_named_error_before_any_device() {
    let entries = manifest();
    let untagged: Vec<&Entry> = entries.iter().filter(|e| e.tag.is_none()).collect();
    assert!(untagged.len() >= 10, "only {} entries", untagged.len());
    // Standalone: none of these gets as far as opening a device.
    check(&untagged, ProgramBuilder::from_file);
}

#[cfg(feature = "vgf")]
#[test]
fn malformed_vgf_steps_give_the_decoder_error() {
    let entries = manifest();
    let vgf: Vec<&Entry> = entries
        .iter()
        .filter(|e| e.tag.as_deref() == Some("vgf"))
        .collect();
    assert!(!vgf.is_empty());
    check(&vgf, ProgramBuilder::from_file);
}

#[cfg(feature = "compute")]
#[test]
fn miswired_programs_give_their_named_error_as_they_load() {
    use vk_core::testing;
    use vkdelegate::program::DeviceChoice;

    let test = "miswired_programs_give_their_named_error_as_they_load";
    let Some((instance, device)) = testing::device(test, &vkdelegate::compute::requirements())
    else {
        return;
    };
    let entries = manifest();
    let wiring: Vec<&Entry> = entries
        .iter()
        .filter(|e| e.tag.as_deref() == Some("device"))
        .collect();
    assert!(wiring.len() >= 5, "only {} entries", wiring.len());
    check(&wiring, |f| {
        ProgramBuilder::from_file(f).device(DeviceChoice::Device(device.clone()))
    });
    drop(device);
    testing::assert_no_validation_errors(&instance);
}

#[test]
fn every_file_in_the_folder_is_in_the_manifest() {
    let entries = manifest();
    for entry in std::fs::read_dir(malformed_dir()).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".toml") {
            assert!(
                entries.iter().any(|e| e.file == name),
                "{name} is not in expected.txt"
            );
        }
    }
    for e in &entries {
        assert!(
            matches!(e.tag.as_deref(), None | Some("vgf") | Some("device")),
            "{}: unknown tag {:?}",
            e.file,
            e.tag
        );
    }
}
