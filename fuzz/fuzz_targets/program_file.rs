//! Fuzzes the program-file parser (TOML): any text must parse or give an error, never panic.
//! Parsing touches no device and reads no file (VGF paths are only joined to the base folder).
//!
//! Run: `cargo xtask fuzz` (every target, seeded from the fixtures), or
//! `RUSTC_BOOTSTRAP=1 cargo fuzz run program_file fuzz/corpus/program_file`.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use vkdelegate::program::{ProgramFile, StepKind};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match ProgramFile::parse(text, Path::new("/base")) {
        Ok(file) => {
            // What parsed is usable: every step has a kind, VGF paths sit under the base.
            assert!(!file.steps.is_empty());
            for step in &file.steps {
                if let StepKind::Vgf { path } = &step.kind {
                    let _ = path.display().to_string();
                }
            }
            let _ = format!("{file:?}");
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
