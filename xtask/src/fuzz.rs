//! `fuzz`: runs every cargo-fuzz target in `fuzz/` for a fixed time, seeded from the fixtures.
//!
//! cargo-fuzz wants a nightly compiler for its `-Z` flags (sanitizer, coverage passes); the
//! stable toolchain accepts them with `RUSTC_BOOTSTRAP=1`, which only this command sets, for
//! the fuzz crate's own build under `<target>/fuzz`.
//!
//! Adding a decoder's target: write `fuzz/fuzz_targets/<name>.rs`, add its `[[bin]]` to
//! `fuzz/Cargo.toml` (`cargo fuzz add <name>` does both) and one line to [`TARGETS`]; a
//! libFuzzer dictionary `fuzz/dicts/<name>.dict`, if present, is used.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Every fuzz target, with the fixtures (patterns relative to the repository root; `*` matches
/// within one path component) copied into `fuzz/corpus/<target>` before it runs. The decoders'
/// targets run in `ci`.
#[rustfmt::skip]
const TARGETS: &[(&str, &[&str])] = &[
    ("vgf_decode", &["fixtures/vgf/*/model.vgf", "fixtures/malformed/vgf/*.vgf"]),
    ("program_file", &["examples/*.toml", "fixtures/malformed/program/*.toml"]),
    ("pte_decode", &["fixtures/pte/*/*.pte", "fixtures/zoo/*/model.pte", "fixtures/llm/*/model.pte"]),
];

/// Targets run only by hand (`cargo xtask fuzz [SECONDS]`), in campaigns of minutes: the
/// lowering of whatever decodes reaches three times the decoder's coverage and still finds
/// things after a hundred thousand executions, which a 60 s run in `ci` would find at random.
#[rustfmt::skip]
const CAMPAIGNS: &[(&str, &[&str])] = &[
    ("pte_lower", &["fixtures/pte/*/*.pte", "fixtures/zoo/*/model.pte", "fixtures/llm/*/model.pte"]),
];

/// Which targets a run takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Targets {
    /// The decoders' ([`TARGETS`]), as `ci` runs them.
    Decoders,
    /// Those and the campaigns ([`CAMPAIGNS`]).
    All,
}

/// Seeds larger than this are left out: libFuzzer's default input length follows the largest
/// seed, and a 14 MB model would slow every run down for little gain.
const MAX_SEED_BYTES: u64 = 64 * 1024;

/// Installs cargo-fuzz if missing, seeds each target's corpus, runs each target for
/// `seconds_per_target` seconds, prints the executions per target and fails on any crash.
pub fn run(seconds_per_target: u64, which: Targets) -> crate::Result {
    let root = crate::root();
    install_cargo_fuzz(&root)?;
    let mut summary = Vec::new();
    let campaigns = if which == Targets::All {
        CAMPAIGNS
    } else {
        &[]
    };
    for (target, patterns) in TARGETS.iter().chain(campaigns) {
        let corpus = root.join("fuzz/corpus").join(target);
        let seeded = seed(&root, &corpus, patterns)?;
        eprintln!(
            "fuzz {target}: {seeded} seed file(s) copied into {}",
            corpus.display()
        );
        let stats = run_target(&root, target, &corpus, seconds_per_target)?;
        summary.push((target, stats));
    }
    eprintln!("\nfuzz summary ({seconds_per_target} s per target):");
    for (target, s) in &summary {
        let rate = s.executions.checked_div(s.seconds).unwrap_or(s.executions);
        eprintln!(
            "  {target:<16} {:>12} executions in {:>4} s ({rate} exec/s), 0 crashes",
            s.executions, s.seconds
        );
    }
    Ok(())
}

/// `cargo fuzz`, run in `fuzz/` with `RUSTC_BOOTSTRAP=1`, building into `<target>/fuzz` (its
/// sanitizer flags would not share a build with the workspace anyway; the folder survives the
/// copy `ci` runs from).
fn cargo_fuzz(root: &Path) -> Command {
    let mut c = crate::cargo();
    c.current_dir(root.join("fuzz"))
        .arg("fuzz")
        .env("RUSTC_BOOTSTRAP", "1")
        .env("CARGO_TARGET_DIR", crate::target_dir().join("fuzz"));
    c
}

fn install_cargo_fuzz(root: &Path) -> crate::Result {
    let present = cargo_fuzz(root)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if present {
        return Ok(());
    }
    crate::exec(crate::cargo().args(["install", "cargo-fuzz", "--locked"]))
}

/// Copies every file matching `patterns` (at most [`MAX_SEED_BYTES`]) into `corpus`, named
/// after its path so that seeds from different folders do not collide. Returns how many.
fn seed(root: &Path, corpus: &Path, patterns: &[&str]) -> crate::Result<usize> {
    std::fs::create_dir_all(corpus).map_err(|e| format!("create {}: {e}", corpus.display()))?;
    let mut count = 0;
    for pattern in patterns {
        for file in glob(root, pattern) {
            let len = file.metadata().map(|m| m.len()).unwrap_or(u64::MAX);
            if len > MAX_SEED_BYTES {
                continue;
            }
            let rel = file.strip_prefix(root).unwrap_or(&file);
            let name = format!("seed-{}", rel.to_string_lossy().replace(['/', '\\'], "-"));
            std::fs::copy(&file, corpus.join(&name))
                .map_err(|e| format!("copy {} to {}: {e}", file.display(), corpus.display()))?;
            count += 1;
        }
    }
    Ok(count)
}

/// The files matching `pattern` under `root`, sorted; `*` matches within one component.
fn glob(root: &Path, pattern: &str) -> Vec<PathBuf> {
    let mut paths = vec![root.to_path_buf()];
    for component in pattern.split('/') {
        let mut next = Vec::new();
        for dir in &paths {
            if !component.contains('*') {
                let p = dir.join(component);
                if p.exists() {
                    next.push(p);
                }
                continue;
            }
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for entry in entries.flatten() {
                if wildcard(component, &entry.file_name().to_string_lossy()) {
                    next.push(entry.path());
                }
            }
        }
        paths = next;
    }
    paths.retain(|p| p.is_file());
    paths.sort();
    paths
}

/// Whether `name` matches `pattern`, where `*` matches any run of characters.
fn wildcard(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if parts.len() == 1 {
        return name == pattern;
    }
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// What one run did.
struct Stats {
    executions: u64,
    seconds: u64,
}

/// Runs one target; its output passes through, and the final statistics are read from it.
/// cargo-fuzz writes a crashing input under `fuzz/artifacts/<target>/`.
fn run_target(root: &Path, target: &str, corpus: &Path, seconds: u64) -> crate::Result<Stats> {
    let mut cmd = cargo_fuzz(root);
    cmd.args(["run", target])
        .arg(corpus)
        .arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .arg("-print_final_stats=1")
        // A single input taking this long is a hang.
        .arg("-timeout=10")
        // An allocation beyond this on an input of at most a few KB is a bug.
        .arg("-rss_limit_mb=2048")
        .stderr(Stdio::piped());
    let dict = root.join("fuzz/dicts").join(format!("{target}.dict"));
    if dict.is_file() {
        cmd.arg(format!("-dict={}", dict.display()));
    }
    eprintln!("$ {}", crate::show(&cmd));
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("{}: {e}", crate::show(&cmd)))?;
    let mut executions = None;
    let mut done = None;
    let mut crash = None;
    if let Some(stderr) = child.stderr.take() {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            eprintln!("{line}");
            if let Some(n) = line.strip_prefix("stat::number_of_executed_units:") {
                executions = n.trim().parse::<u64>().ok();
            } else if let Some(n) = line.strip_prefix("Done ") {
                // `Done 1234 runs in 61 second(s)`
                let mut words = n.split_whitespace();
                let runs = words.next().and_then(|w| w.parse::<u64>().ok());
                let secs = words.nth(2).and_then(|w| w.parse::<u64>().ok());
                if let (Some(r), Some(s)) = (runs, secs) {
                    done = Some((r, s));
                }
            } else if line.contains("Test unit written to") {
                crash = Some(line);
            }
        }
    }
    let status = child
        .wait()
        .map_err(|e| format!("{}: {e}", crate::show(&cmd)))?;
    if let Some(line) = crash {
        return Err(format!("fuzz target {target} crashed: {line}"));
    }
    if !status.success() {
        return Err(format!("fuzz target {target} failed: {status}"));
    }
    let executions = executions
        .or(done.map(|(r, _)| r))
        .ok_or_else(|| format!("fuzz target {target}: no execution count in its output"))?;
    Ok(Stats {
        executions,
        seconds: done.map(|(_, s)| s).unwrap_or(seconds),
    })
}

#[cfg(test)]
mod tests {
    use super::wildcard;

    #[test]
    fn wildcards_match_within_a_component() {
        assert!(wildcard("*.toml", "a.toml"));
        assert!(wildcard("model.vgf", "model.vgf"));
        assert!(wildcard("a*b*c", "aXbYc"));
        assert!(!wildcard("*.toml", "a.vgf"));
        assert!(!wildcard("ab*ba", "aba"));
    }
}
