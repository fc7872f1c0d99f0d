//! Project tasks: `cargo xtask <setup|shaders|ci|demo|bench|fuzz|gpu-archive>`.
//!
//! The CI commands live here, in one place; `.ci/run` and the GitHub workflow call
//! `cargo xtask ci` and nothing else.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

mod fuzz;
mod gpu_archive;
mod isolate;
mod kernel_table;
mod loom;
mod setup;
mod shaders;

type Result<T = (), E = String> = std::result::Result<T, E>;

/// The feature matrix, defined once: every package with every feature set it is built and
/// tested with, one package at a time (workspace-wide runs unify features and hide breakage).
const MATRIX: &[(&str, &[&str])] = &[
    ("vk-core", &[""]),
    ("shared-runtime", &[""]),
    ("executorch-pte", &[""]),
    ("vgf-delegate", &["", "shared"]),
    ("compute-delegate", &["", "shared"]),
    ("vkdelegate", UMBRELLA_SETS),
    ("vkdelegate-cli", UMBRELLA_SETS),
    // Not a default member (winit); its test runs the example under Xvfb and offscreen.
    ("frame-loop", &[""]),
    // The tasks' own unit tests (shader names and variants, crate folders, kernel tables).
    ("xtask", &[""]),
];

/// Feature sets of the umbrella crate and the CLI.
const UMBRELLA_SETS: &[&str] = &[
    "",
    "vgf",
    "compute",
    "shared",
    "vgf,shared",
    "compute,shared",
    "vgf,compute,shared",
];

/// Seconds each fuzz target runs in `ci`.
const FUZZ_SECONDS: u64 = 60;

/// Packages whose features select delegates (checked with `cargo tree`).
const FEATURED_PACKAGES: &[&str] = &["vkdelegate", "vkdelegate-cli"];

fn usage() -> &'static str {
    "usage: cargo xtask <command>\n\
     \n\
     commands:\n\
     \x20 setup            install what the tests need (Debian packages, Arm's emulation layer)\n\
     \x20 shaders [--check] compile shaders/**/*.{comp,vert,frag} to committed SPIR-V and\n\
     \x20                  kernel tables (--check: fail if stale)\n\
     \x20 ci               from a copy of the repository in an empty folder: setup, then fmt,\n\
     \x20                  clippy, the feature matrix with validation, the packages, docs, the\n\
     \x20                  shader check and dependency-tree checks (VKDELEGATE_CI_IN_PLACE=1: no copy)\n\
     \x20 demo             setup, then run the CLI's demo on the best device found\n\
     \x20 bench [ARGS]     setup, then run the CLI's bench command (release build)\n\
     \x20 fuzz [SECONDS]   every fuzz target for SECONDS each (default 60), seeded from fixtures/\n\
     \x20 gpu-archive [--out FILE] [--no-fixtures]\n\
     \x20                  the test binaries (release), fixtures, loader, validation and\n\
     \x20                  emulation layers and a runner (run.sh) in one archive that runs the\n\
     \x20                  suite as ci does on another machine (target/vkdelegate-gpu-suite.tar.xz)"
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("setup") => setup::run(),
        Some("shaders") => shaders::run(args.iter().any(|a| a == "--check")),
        Some("ci") => ci(),
        Some("demo") => demo(),
        Some("bench") => bench(&args[1..]),
        Some("gpu-archive") => gpu_archive::run(&args[1..]),
        Some("fuzz") => match args.get(1).map(|s| s.parse::<u64>()) {
            None => fuzz::run(FUZZ_SECONDS, fuzz::Targets::All),
            Some(Ok(seconds)) => fuzz::run(seconds, fuzz::Targets::All),
            Some(Err(e)) => Err(format!("fuzz SECONDS: {e}")),
        },
        _ => {
            eprintln!("{}", usage());
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace root")
        .to_path_buf()
}

/// The target directory.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

/// Runs a command, echoing it; fails with its status.
fn exec(cmd: &mut Command) -> Result {
    eprintln!("$ {}", show(cmd));
    let status = cmd.status().map_err(|e| format!("{}: {e}", show(cmd)))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{} failed: {status}", show(cmd)))
    }
}

/// Runs a command and returns its stdout (stderr passes through).
fn output(cmd: &mut Command) -> Result<String> {
    eprintln!("$ {}", show(cmd));
    let out = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("{}: {e}", show(cmd)))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        // What the command printed says why (a failing test's panic and its output).
        print!("{stdout}");
        return Err(format!("{} failed: {}", show(cmd), out.status));
    }
    Ok(stdout)
}

fn show(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Environment every test run gets: validation on, skips are failures, a runtime dir for
/// tools that want one.
fn test_env(cmd: &mut Command) -> &mut Command {
    cmd.env("RUSTFLAGS", "-D warnings")
        .env("VKDELEGATE_VALIDATION", "1")
        .env("VKDELEGATE_REQUIRE_GPU", "1")
        .env("RUST_BACKTRACE", "1");
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        cmd.env("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    cmd
}

fn feature_args(features: &str) -> Vec<String> {
    let mut v = vec!["--no-default-features".to_owned()];
    if !features.is_empty() {
        v.push("--features".into());
        v.push(features.into());
    }
    v
}

/// The target directory of `cargo package`, emptied before each run. Cargo takes a registry
/// crate's build as fixed by its name and version, and the verification builds this
/// workspace's crates from a local registry: in a shared target directory, a later run would
/// link an earlier run's builds of them.
fn package_target() -> PathBuf {
    target_dir().join("package-verify")
}

/// Removes cargo's unpacked copies of this workspace's packaged crates from earlier runs, and
/// their verification builds.
/// `cargo package --workspace` verifies each crate against the others through a local
/// registry, and cargo unpacks that registry's crates under `$CARGO_HOME/registry/src/-<hash>/`
/// once per name and version: without this, a later run would build against the sources of
/// an earlier one. crates.io's unpacked crates (`index.crates.io-*`) are left alone.
fn clear_packaged_sources() -> Result {
    let home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cargo")))
        .ok_or("neither CARGO_HOME nor HOME is set")?;
    // Cargo takes a registry crate's build as fixed by its name and version, so the
    // verification builds of earlier packages go too.
    for builds in [target_dir().join("package"), package_target()] {
        if builds.exists() {
            std::fs::remove_dir_all(&builds).map_err(|e| format!("{}: {e}", builds.display()))?;
        }
    }
    let Ok(registries) = std::fs::read_dir(home.join("registry").join("src")) else {
        return Ok(());
    };
    let ours = [
        "vk-core",
        "shared-runtime",
        "compute-delegate",
        "executorch-pte",
        "vgf-delegate",
        "vkdelegate",
        "vkdelegate-cli",
    ];
    for registry in registries.flatten() {
        if !registry.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        for unpacked in std::fs::read_dir(registry.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = unpacked.file_name().to_string_lossy().into_owned();
            let is_ours = ours.iter().any(|c| {
                name.strip_prefix(c)
                    .and_then(|v| v.strip_prefix('-'))
                    .is_some_and(|v| v.starts_with(|ch: char| ch.is_ascii_digit()))
            });
            if is_ours {
                std::fs::remove_dir_all(unpacked.path())
                    .map_err(|e| format!("{}: {e}", unpacked.path().display()))?;
            }
        }
    }
    Ok(())
}

/// Runs `cargo test` and returns the test counts it printed (passed, ignored).
fn cargo_test(package: &str, features: Option<&str>) -> Result<(u64, u64)> {
    let mut cmd = cargo();
    cmd.args(["test", "--package", package]);
    if let Some(f) = features {
        cmd.args(feature_args(f));
    }
    test_env(&mut cmd);
    let stdout = output(&mut cmd)?;
    print!("{stdout}");
    let (mut passed, mut ignored) = (0, 0);
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("test result: ok. ") {
            let nums: Vec<u64> = rest
                .split(';')
                .filter_map(|p| p.split_whitespace().next()?.parse().ok())
                .collect();
            passed += nums.first().copied().unwrap_or(0);
            ignored += nums.get(2).copied().unwrap_or(0);
        }
    }
    Ok((passed, ignored))
}

fn step(summary: &mut String, name: &str, f: impl FnOnce() -> Result) -> Result {
    let start = Instant::now();
    eprintln!("\n==== {name}");
    let r = f();
    let _ = writeln!(
        summary,
        "{:>7.1}s  {}  {name}",
        start.elapsed().as_secs_f64(),
        if r.is_ok() { "ok  " } else { "FAIL" }
    );
    r.map_err(|e| format!("{name}: {e}"))
}

fn ci() -> Result {
    if !isolate::in_place() {
        return isolate::run_ci_in_copy();
    }
    let start = Instant::now();
    let mut summary = String::new();
    let mut counts = String::new();
    let outcome = (|| -> Result {
        step(&mut summary, "setup", setup::run)?;
        step(&mut summary, "fmt", || {
            exec(cargo().args(["fmt", "--all", "--", "--check"]))
        })?;
        step(&mut summary, "shaders --check", || shaders::run(true))?;
        step(&mut summary, "clippy (all features)", || {
            exec(cargo().args([
                "clippy",
                "--workspace",
                "--all-targets",
                "--all-features",
                "--",
                "-D",
                "warnings",
            ]))
        })?;
        for features in UMBRELLA_SETS {
            let label = if features.is_empty() {
                "(none)"
            } else {
                features
            };
            step(
                &mut summary,
                &format!("clippy umbrella + CLI [{label}]"),
                || {
                    let mut cmd = cargo();
                    cmd.args([
                        "clippy",
                        "--package",
                        "vkdelegate",
                        "--package",
                        "vkdelegate-cli",
                    ])
                    .arg("--all-targets")
                    .args(feature_args(features))
                    .args(["--", "-D", "warnings"]);
                    exec(&mut cmd)
                },
            )?;
        }
        step(&mut summary, "dependency trees", tree_checks)?;
        step(&mut summary, "loom (shared registry)", loom::run)?;
        for (package, sets) in MATRIX {
            for features in *sets {
                let label = if features.is_empty() {
                    "(none)"
                } else {
                    features
                };
                step(&mut summary, &format!("test {package} [{label}]"), || {
                    let (p, i) = cargo_test(package, Some(features))?;
                    let _ = writeln!(
                        counts,
                        "  {package:<18} [{label:<18}] {p:>4} passed {i:>3} ignored"
                    );
                    Ok(())
                })?;
            }
        }
        step(&mut summary, "fuzz (60 s per target)", || {
            fuzz::run(FUZZ_SECONDS, fuzz::Targets::Decoders)
        })?;
        step(&mut summary, "package (every published crate)", || {
            // Each crate as crates.io would get it, built from its own package (workspace
            // dependencies from their packages); a file outside a crate's folder that it needs
            // fails here.
            clear_packaged_sources()?;
            exec(
                cargo()
                    .args([
                        "package",
                        "--workspace",
                        "--exclude",
                        "xtask",
                        "--exclude",
                        "frame-loop",
                        "--allow-dirty",
                    ])
                    .env("CARGO_TARGET_DIR", package_target()),
            )
        })?;
        step(&mut summary, "docs", || {
            exec(
                cargo()
                    .args([
                        "doc",
                        "--workspace",
                        "--no-deps",
                        "--all-features",
                        "--exclude",
                        "xtask",
                    ])
                    .env("RUSTDOCFLAGS", "-D warnings"),
            )
        })?;
        Ok(())
    })();
    eprintln!("\n==== summary\n{summary}");
    eprintln!("test counts:\n{counts}");
    eprintln!("total {:.1}s", start.elapsed().as_secs_f64());
    outcome
}

/// `cargo tree` assertions: a `vgf`-only build holds no compute code, a `compute`-only build no
/// VGF code, and a build without `shared` no shared-runtime in the umbrella crate's own edges.
fn tree_checks() -> Result {
    let tree = |package: &str, features: &str| -> Result<String> {
        let mut cmd = cargo();
        cmd.args([
            "tree",
            "--package",
            package,
            "--edges",
            "normal",
            "--prefix",
            "none",
        ])
        .args(feature_args(features));
        output(&mut cmd)
    };
    let crates_in = |text: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
            .collect()
    };
    for package in FEATURED_PACKAGES {
        let vgf = crates_in(&tree(package, "vgf")?);
        if vgf.iter().any(|c| c == "compute-delegate") {
            return Err(format!("{package} with only `vgf` pulls in compute code"));
        }
        if !vgf.iter().any(|c| c == "vgf-delegate") {
            return Err(format!("{package} with `vgf` lacks vgf-delegate"));
        }
        let compute = crates_in(&tree(package, "compute")?);
        if compute.iter().any(|c| c == "vgf-delegate") {
            return Err(format!(
                "{package} with only `compute` pulls in vgf-delegate"
            ));
        }
        if !compute.iter().any(|c| c == "compute-delegate") {
            return Err(format!("{package} with `compute` lacks compute-delegate"));
        }
        let none = crates_in(&tree(package, "")?);
        for c in ["vgf-delegate", "compute-delegate", "shared-runtime"] {
            if none.iter().any(|x| x == c) {
                return Err(format!("{package} without features pulls in {c}"));
            }
        }
    }
    eprintln!("dependency trees: ok");
    Ok(())
}

fn demo() -> Result {
    setup::run()?;
    let mut cmd = cargo();
    cmd.args([
        "run",
        "--release",
        "--package",
        "vkdelegate-cli",
        "--",
        "demo",
    ]);
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        cmd.env("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    exec(&mut cmd)
}

fn bench(args: &[String]) -> Result {
    setup::run()?;
    let mut cmd = cargo();
    cmd.args([
        "run",
        "--release",
        "--package",
        "vkdelegate-cli",
        "--",
        "bench",
    ])
    .args(args);
    exec(&mut cmd)
}
