//! `cargo xtask gpu-archive [--out FILE] [--no-fixtures]`: the test suite, built here, in one archive that runs
//! on another machine (a GPU machine without a toolchain or network) as `cargo xtask ci` runs
//! it: every test binary of the workspace (release build, all features, stripped), the CLI
//! binary the CLI tests start, the fixtures and example programs they read, the Vulkan loader, the Khronos
//! validation layer, Arm's emulation layers and a runner, `run.sh`.
//!
//! On the other machine: `tar xf vkdelegate-gpu-suite.tar.xz && vkdelegate-gpu-suite/run.sh`.
//! The runner sets what CI sets (`VKDELEGATE_VALIDATION=1`, `VKDELEGATE_REQUIRE_GPU=1`), runs
//! each binary from its package's folder with `CARGO_MANIFEST_DIR` pointing there (tests find
//! `fixtures/` from it at run time) with `--nocapture` (so that the notes of excused
//! validation messages reach the log), and prints, per binary, its tests passed, failed and
//! ignored, and the validation messages the tests excused; it exits non-zero when any binary
//! fails. Arguments after `run.sh` go to every test binary (a filter, `--test-threads=1`).
//!
//! `--no-fixtures` leaves `fixtures/` out (37 MiB, most of the archive), for a machine that
//! has a checkout of the repository: link its `fixtures/` into the unpacked folder.
//!
//! Left out: the frame-loop example's test, which runs on lavapipe by design (it pins
//! lavapipe's driver and needs an X server), and the doc tests, which need rustdoc.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Result, cargo, exec, root, target_dir};

/// Packages whose test binaries go into the archive: the workspace but the tasks and the
/// frame-loop example.
const EXCLUDED: &[&str] = &["xtask", "frame-loop"];

/// Debian packages whose libraries the archive carries: the loader, the validation layer,
/// and glvnd, which NVIDIA's driver loads beside the loader.
const PACKAGES: &[&str] = &[
    "libvulkan1",
    "vulkan-validationlayers",
    "libglvnd0",
    "libegl1",
    "libgl1",
    "libglx0",
    "libopengl0",
    "libgles2",
];

/// Shared libraries carried in `lib/`, by soname.
const LIBRARIES: &[&str] = &[
    "libvulkan.so.1",
    "libGLdispatch.so.0",
    "libGLX.so.0",
    "libEGL.so.1",
    "libOpenGL.so.0",
    "libGL.so.1",
    "libGLESv2.so.2",
];

/// The archive's top folder.
const NAME: &str = "vkdelegate-gpu-suite";

/// One test binary: its package, the package's folder (relative to the root) and the file.
#[derive(Debug)]
struct TestBinary {
    package: String,
    dir: String,
    path: PathBuf,
}

pub fn run(args: &[String]) -> Result {
    let usage = || "usage: cargo xtask gpu-archive [--out FILE] [--no-fixtures]".to_owned();
    let mut out = target_dir().join(format!("{NAME}.tar.xz"));
    let mut fixtures = true;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--out" => out = rest.next().ok_or_else(usage)?.into(),
            "--no-fixtures" => fixtures = false,
            _ => return Err(usage()),
        }
    }
    crate::setup::run()?;
    crate::setup::ensure_packages(PACKAGES)?;
    let (tests, cli) = build()?;
    let stage = target_dir().join("gpu-archive");
    let top = stage.join(NAME);
    if top.exists() {
        std::fs::remove_dir_all(&top).map_err(|e| format!("{}: {e}", top.display()))?;
    }
    let mut manifest = String::new();
    for t in &tests {
        let file = t
            .path
            .file_name()
            .ok_or_else(|| format!("{}: no file name", t.path.display()))?
            .to_string_lossy()
            .into_owned();
        let dest = top.join("tests").join(&t.package).join(&file);
        copy_stripped(&t.path, &dest)?;
        manifest.push_str(&format!(
            "{}\t{}\ttests/{}/{file}\n",
            t.package, t.dir, t.package
        ));
    }
    copy_stripped(&cli, &top.join("bin/vkdelegate"))?;
    write(&top.join("MANIFEST"), &manifest)?;
    // The example programs the CLI tests run (they name files under fixtures/).
    for entry in std::fs::read_dir(root().join("examples")).map_err(|e| e.to_string())? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().is_some_and(|e| e == "toml") {
            copy(
                &path,
                &top.join("examples")
                    .join(path.file_name().unwrap_or_default()),
            )?;
        }
    }
    if fixtures {
        for sub in ["pte", "vgf", "malformed"] {
            copy_tree(
                &root().join("fixtures").join(sub),
                &top.join("fixtures").join(sub),
            )?;
        }
    }
    layers(&top)?;
    libraries(&top.join("lib"))?;
    let script = top.join("run.sh");
    write(&script, RUNNER)?;
    chmod_x(&script)?;
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    exec(
        Command::new("tar")
            .env("XZ_OPT", "-9 -T0")
            .arg("-cJf")
            .arg(&out)
            .arg("-C")
            .arg(&stage)
            .arg(NAME),
    )?;
    let bytes = std::fs::metadata(&out).map_or(0, |m| m.len());
    eprintln!(
        "gpu-archive: {} test binaries, {:.1} MiB in {}",
        tests.len(),
        bytes as f64 / (1 << 20) as f64,
        out.display()
    );
    Ok(())
}

/// Builds every test binary (release, all features) and the CLI; returns them.
fn build() -> Result<(Vec<TestBinary>, PathBuf)> {
    let mut cmd = cargo();
    cmd.args([
        "test",
        "--release",
        "--no-run",
        "--workspace",
        "--all-features",
        "--message-format=json-render-diagnostics",
    ]);
    for p in EXCLUDED {
        cmd.args(["--exclude", p]);
    }
    let stdout = crate::output(&mut cmd)?;
    let root = root();
    let (mut tests, mut cli) = (Vec::new(), None);
    for line in stdout.lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        let Some(exe) = msg["executable"].as_str() else {
            continue;
        };
        let kinds = &msg["target"]["kind"];
        let is = |k: &str| kinds.as_array().is_some_and(|a| a.iter().any(|v| v == k));
        if msg["profile"]["test"] == true {
            let manifest = Path::new(msg["manifest_path"].as_str().unwrap_or_default());
            let dir = manifest
                .parent()
                .and_then(|d| d.strip_prefix(&root).ok())
                .ok_or_else(|| format!("{}: outside the workspace", manifest.display()))?;
            tests.push(TestBinary {
                package: package_name(&msg)?,
                dir: dir.to_string_lossy().into_owned(),
                path: exe.into(),
            });
        } else if is("bin") && msg["target"]["name"] == "vkdelegate" {
            cli = Some(PathBuf::from(exe));
        }
    }
    tests.sort_by(|a, b| (&a.package, &a.path).cmp(&(&b.package, &b.path)));
    let cli = cli.ok_or("the build made no `vkdelegate` binary")?;
    if tests.is_empty() {
        return Err("the build made no test binaries".into());
    }
    Ok((tests, cli))
}

/// The package name of a compiler artifact, read from the `[package]` table of its manifest.
fn package_name(msg: &serde_json::Value) -> Result<String> {
    let manifest = msg["manifest_path"].as_str().unwrap_or_default();
    let text = std::fs::read_to_string(manifest).map_err(|e| format!("{manifest}: {e}"))?;
    text.lines()
        .skip_while(|l| l.trim() != "[package]")
        .find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == "name").then(|| v.trim().trim_matches('"').to_owned())
        })
        .ok_or_else(|| format!("{manifest}: no package name"))
}

/// Copies `src` to `dest` without symbols.
fn copy_stripped(src: &Path, dest: &Path) -> Result {
    copy(src, dest)?;
    exec(Command::new("strip").arg("--strip-all").arg(dest))
}

fn copy(src: &Path, dest: &Path) -> Result {
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    std::fs::copy(src, dest)
        .map_err(|e| format!("{} -> {}: {e}", src.display(), dest.display()))?;
    Ok(())
}

fn copy_tree(src: &Path, dest: &Path) -> Result {
    let entries = std::fs::read_dir(src).map_err(|e| format!("{}: {e}", src.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        let to = dest.join(path.file_name().unwrap_or_default());
        if path.is_dir() {
            copy_tree(&path, &to)?;
        } else {
            copy(&path, &to)?;
        }
    }
    Ok(())
}

fn write(path: &Path, text: &str) -> Result {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

fn chmod_x(path: &Path) -> Result {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// The validation layer (`layers/validation/`) and the emulation layers
/// (`layers/emulation/{graph,tensor,lib}`), each manifest naming its library by a path
/// relative to the manifest.
fn layers(top: &Path) -> Result {
    let manifest = Path::new("/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json");
    let text =
        std::fs::read_to_string(manifest).map_err(|e| format!("{}: {e}", manifest.display()))?;
    let library = library_path(&text).ok_or("the validation manifest names no library")?;
    let found = find_library(Path::new(&library).file_name().unwrap_or_default())?;
    let dir = top.join("layers/validation");
    copy(&found, &dir.join("libVkLayer_khronos_validation.so"))?;
    write(
        &dir.join("VkLayer_khronos_validation.json"),
        &with_library_path(&text, "./libVkLayer_khronos_validation.so")?,
    )?;
    let emulation = target_dir().join("vk-emulation-layer");
    for (name, sub) in [("VkLayer_Graph", "graph"), ("VkLayer_Tensor", "tensor")] {
        let lib = format!("lib{name}.so");
        copy(
            &emulation.join("lib").join(&lib),
            &top.join("layers/emulation/lib").join(&lib),
        )?;
        let from = emulation.join(sub).join(format!("{name}.json"));
        let text =
            std::fs::read_to_string(&from).map_err(|e| format!("{}: {e}", from.display()))?;
        write(
            &top.join("layers/emulation")
                .join(sub)
                .join(format!("{name}.json")),
            &with_library_path(&text, &format!("../lib/{lib}"))?,
        )?;
    }
    Ok(())
}

/// The `library_path` of a layer manifest.
fn library_path(manifest: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(manifest).ok()?;
    v["layer"]["library_path"].as_str().map(str::to_owned)
}

/// `manifest` with its `library_path` replaced.
fn with_library_path(manifest: &str, path: &str) -> Result<String> {
    let mut v: serde_json::Value =
        serde_json::from_str(manifest).map_err(|e| format!("a layer manifest: {e}"))?;
    v["layer"]["library_path"] = serde_json::Value::String(path.to_owned());
    serde_json::to_string_pretty(&v).map_err(|e| e.to_string())
}

/// A shared library by file name, from the dynamic linker's cache.
fn find_library(name: &std::ffi::OsStr) -> Result<PathBuf> {
    let cache = crate::output(Command::new("ldconfig").arg("-p"))?;
    let name = name.to_string_lossy();
    cache
        .lines()
        .filter_map(|l| {
            let (left, path) = l.split_once("=>")?;
            // `libvulkan.so.1 (libc6,x86-64) => /lib/...`: the 64-bit library only.
            (left.split_whitespace().next()? == name && left.contains("x86-64"))
                .then(|| PathBuf::from(path.trim()))
        })
        .find(|p| p.is_file())
        .ok_or_else(|| format!("{name}: not in the dynamic linker's cache"))
}

/// The loader and glvnd, under their sonames.
fn libraries(dir: &Path) -> Result {
    for soname in LIBRARIES {
        let found = find_library(std::ffi::OsStr::new(soname))?;
        let real =
            std::fs::canonicalize(&found).map_err(|e| format!("{}: {e}", found.display()))?;
        copy(&real, &dir.join(soname))?;
    }
    Ok(())
}

/// The runner inside the archive.
const RUNNER: &str = r#"#!/usr/bin/env bash
# Runs the vkdelegate test suite packed by `cargo xtask gpu-archive`, as `cargo xtask ci` runs
# it: validation (core and synchronization) on, skips are failures. Arguments go to every
# test binary. Exits non-zero when a binary fails.
set -u
here=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export VK_ADD_LAYER_PATH="$here/layers/validation${VK_ADD_LAYER_PATH:+:$VK_ADD_LAYER_PATH}"
export VKDELEGATE_EMULATION_LAYER_DIR="$here/layers/emulation"
export VKDELEGATE_VALIDATION=1 VKDELEGATE_REQUIRE_GPU=1 RUST_BACKTRACE=1
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-${TMPDIR:-/tmp}}"
export CARGO_BIN_EXE_vkdelegate="$here/bin/vkdelegate"
# A driver the loader's default folders do not hold (NVIDIA's, in some containers).
if [ -z "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ] \
    && ! ls /usr/share/vulkan/icd.d/*.json /etc/vulkan/icd.d/*.json \
        /usr/local/share/vulkan/icd.d/*.json >/dev/null 2>&1; then
    for f in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json \
        /usr/local/nvidia/icd.d/nvidia_icd.json; do
        if [ -f "$f" ]; then export VK_DRIVER_FILES="$f"; break; fi
    done
fi
logs="$here/logs"
mkdir -p "$logs"
"$here/bin/vkdelegate" devices 2>&1 | sed 's/^/# /'

start=$(date +%s)
binaries=0 failed_binaries=0 passed=0 failed=0 ignored=0 excused=0
printf '%-18s %-28s %6s %6s %7s %8s %7s\n' package binary passed failed ignored excused seconds
while IFS=$'\t' read -r package dir file; do
    name=$(basename "$file")
    mkdir -p "$here/$dir"
    log="$logs/$package-$name.log"
    t0=$(date +%s)
    (cd "$here/$dir" && CARGO_MANIFEST_DIR="$here/$dir" CARGO_PKG_NAME="$package" \
        "$here/$file" --nocapture "$@") </dev/null >"$log" 2>&1
    rc=$?
    t=$(( $(date +%s) - t0 ))
    p=$(sed -n 's/^test result: .* \([0-9]*\) passed.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
    f=$(sed -n 's/^test result: .* \([0-9]*\) failed.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
    i=$(sed -n 's/^test result: .* \([0-9]*\) ignored.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
    e=$(sed -n 's/.*note: \([0-9]*\) validation error(s) excused.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
    binaries=$((binaries + 1)); passed=$((passed + p)); failed=$((failed + f))
    ignored=$((ignored + i)); excused=$((excused + e))
    status=""
    if [ $rc -ne 0 ]; then failed_binaries=$((failed_binaries + 1)); status="  FAILED (exit $rc)"; fi
    printf '%-18s %-28s %6s %6s %7s %8s %7s%s\n' "$package" "${name%-*}" "$p" "$f" "$i" "$e" "$t" "$status"
    if [ $rc -ne 0 ]; then
        grep -E "^(---- |thread '.*' .*panicked|SKIPPED)" "$log" | head -20 | sed 's/^/    /'
    fi
done <"$here/MANIFEST"
echo "binaries: $binaries, failed: $failed_binaries; tests: $passed passed, $failed failed, $ignored ignored; validation messages excused: $excused; $(( $(date +%s) - start )) s"
echo "logs: $logs"
[ $failed_binaries -eq 0 ]
"#;
