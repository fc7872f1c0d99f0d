//! Shared test helpers: the fixture location.
#![allow(dead_code)]

use std::path::PathBuf;

/// `fixtures/vgf` in the repository, found from the crate directory.
pub fn corpus_dir() -> PathBuf {
    vk_core::testing::fixture("vgf")
}

/// Every fixture model folder, sorted.
pub fn corpus_models() -> Vec<PathBuf> {
    let dir = corpus_dir();
    let mut out: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("model.vgf").is_file())
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no models in {}", dir.display());
    out
}
