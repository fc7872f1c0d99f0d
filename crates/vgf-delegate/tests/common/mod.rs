//! Shared test helpers: the corpus location.
#![allow(dead_code)]

use std::path::PathBuf;

/// `shared/corpus/vgf`, found from the crate directory.
pub fn corpus_dir() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    for up in manifest.ancestors() {
        let candidate = up.join("shared/corpus/vgf");
        if candidate.is_dir() {
            return candidate;
        }
    }
    panic!("shared/corpus/vgf not found above {}", manifest.display());
}

/// Every corpus model folder, sorted.
pub fn corpus_models() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .expect("read corpus dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("model.vgf").is_file())
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no corpus models");
    out
}
