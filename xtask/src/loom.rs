//! The `loom` models of the shared registry (`crates/shared-runtime/src/loom_models.rs`):
//! built with `--cfg loom` in release mode, in a target directory of their own
//! (`<target>/loom`) so the normal build is not invalidated.

use crate::{Result, cargo, exec, target_dir};

/// Preemptions explored per interleaving unless `LOOM_MAX_PREEMPTIONS` is set already.
const MAX_PREEMPTIONS: &str = "5";

/// Runs every loom model; each prints its iteration count and time.
pub fn run() -> Result {
    let mut cmd = cargo();
    cmd.args([
        "test",
        "--package",
        "shared-runtime",
        "--release",
        "--lib",
        "loom_models",
        "--",
        "--test-threads=1",
        "--nocapture",
    ])
    .env("CARGO_TARGET_DIR", target_dir().join("loom"))
    .env("RUSTFLAGS", "--cfg loom -D warnings")
    .env_remove("CARGO_ENCODED_RUSTFLAGS")
    .env("RUST_BACKTRACE", "1");
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        cmd.env("LOOM_MAX_PREEMPTIONS", MAX_PREEMPTIONS);
    }
    exec(&mut cmd)
}
