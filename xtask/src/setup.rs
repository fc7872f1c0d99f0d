//! Idempotent set-up of what the tests need.
//!
//! - Debian packages: the Vulkan loader, lavapipe, glslc, the validation layers, vulkaninfo;
//!   Xvfb and the X11 libraries winit loads at run time, for the frame-loop example's windowed
//!   test. Installed with apt-get only when one is missing.
//! - Arm's ML emulation layer (PyPI `ai-ml-emulation-layer-for-vulkan`), unpacked into
//!   `target/vk-emulation-layer/` with one folder per layer (`graph/`, `tensor/`) and manifests
//!   rewritten to absolute library paths, so the loader finds the libraries without
//!   `LD_LIBRARY_PATH` and vk-core can put the graph layer above the tensor layer.
//! - A shader compiler that knows cooperative matrices: the `glslc` of PyPI's
//!   `ai-ml-sdk-scenario-runner` (glslang of Vulkan SDK 1.4.357), unpacked into
//!   `target/shader-tools/scenario-runner-<version>/glslc`. Debian 12's glslc (shaderc 2023.2) lacks
//!   `GL_KHR_cooperative_matrix`; `cargo xtask shaders` uses this one for the shaders that
//!   need it.

use std::path::Path;
use std::process::Command;

use crate::{Result, exec, target_dir};

const PACKAGES: &[&str] = &[
    "libvulkan1",
    "mesa-vulkan-drivers",
    "vulkan-validationlayers",
    "glslc",
    "vulkan-tools",
    // The frame-loop example's windowed test: a virtual X server, and what winit's X11
    // backend loads at run time.
    "xvfb",
    "libx11-6",
    "libx11-xcb1",
    "libxcursor1",
    "libxrandr2",
    "libxi6",
    "libxkbcommon-x11-0",
];

const EMULATION_WHEEL: &str = "ai-ml-emulation-layer-for-vulkan==0.11.0";
const LAYERS: &[(&str, &str)] = &[("VkLayer_Graph", "graph"), ("VkLayer_Tensor", "tensor")];

pub fn run() -> Result {
    packages()?;
    emulation_layer()?;
    sdk_glslc()?;
    Ok(())
}

const SCENARIO_RUNNER_VERSION: &str = "0.11.0";

/// The cooperative-matrix-capable `glslc`, installed on first use into a folder named after
/// the pinned wheel's version (a new pin installs anew).
pub fn sdk_glslc() -> Result<std::path::PathBuf> {
    let dir = target_dir()
        .join("shader-tools")
        .join(format!("scenario-runner-{SCENARIO_RUNNER_VERSION}"));
    let glslc = dir.join("glslc");
    if glslc.is_file() {
        return Ok(glslc);
    }
    pip_download(
        &format!("ai-ml-sdk-scenario-runner=={SCENARIO_RUNNER_VERSION}"),
        &dir.join("wheel"),
    )?;
    let script = r#"
import os, pathlib, sys, zipfile
dest = pathlib.Path(sys.argv[1])
wheels = sorted((dest / "wheel").glob("ai_ml_sdk_scenario_runner-" + sys.argv[2] + "-*.whl"))
if not wheels:
    sys.exit("no scenario-runner " + sys.argv[2] + " wheel in " + str(dest / "wheel"))
with zipfile.ZipFile(wheels[0]) as z:
    data = z.read("scenario_runner/binaries/bin/glslc")
tmp = dest / "glslc.part"
tmp.write_bytes(data)
os.chmod(tmp, 0o755)
os.replace(tmp, dest / "glslc")
print("glslc installed in", dest)
"#;
    exec(
        Command::new(python())
            .arg("-c")
            .arg(script)
            .arg(&dir)
            .arg(SCENARIO_RUNNER_VERSION),
    )?;
    Ok(glslc)
}

/// Downloads the binary wheel `requirement` (no dependencies) into `dest`.
fn pip_download(requirement: &str, dest: &Path) -> Result {
    std::fs::create_dir_all(dest).map_err(|e| format!("{}: {e}", dest.display()))?;
    exec(
        Command::new(python())
            .args([
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--dest",
            ])
            .arg(dest)
            .arg(requirement),
    )
}

fn python() -> &'static str {
    if Command::new("python3").arg("--version").output().is_ok() {
        "python3"
    } else {
        "python"
    }
}

fn installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
}

fn packages() -> Result {
    if !Path::new("/usr/bin/dpkg-query").exists() {
        eprintln!(
            "setup: not a Debian system; install a Vulkan loader, driver, glslc and the validation layers yourself"
        );
        return Ok(());
    }
    ensure_packages(PACKAGES)
}

/// Installs the Debian packages of `wanted` that are missing (and pip, if missing).
pub fn ensure_packages(wanted: &[&str]) -> Result {
    if !Path::new("/usr/bin/dpkg-query").exists() {
        return Err(format!(
            "not a Debian system: install {} yourself",
            wanted.join(", ")
        ));
    }
    let mut missing: Vec<&str> = wanted.iter().copied().filter(|p| !installed(p)).collect();
    let has_pip = Command::new("python3")
        .args(["-m", "pip", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_pip {
        missing.push("python3-pip");
    }
    if missing.is_empty() {
        eprintln!("setup: Debian packages present");
        return Ok(());
    }
    let sudo = !is_root();
    let apt = |args: &[&str]| {
        let mut c = if sudo {
            let mut c = Command::new("sudo");
            c.arg("apt-get");
            c
        } else {
            Command::new("apt-get")
        };
        c.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        c
    };
    exec(&mut apt(&["update", "-qq"]))?;
    let mut install = apt(&["install", "-y", "-qq", "--no-install-recommends"]);
    install.args(&missing);
    exec(&mut install)
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn emulation_layer() -> Result {
    let dir = target_dir().join("vk-emulation-layer");
    let complete = LAYERS.iter().all(|(name, sub)| {
        dir.join(sub).join(format!("{name}.json")).is_file()
            && dir.join("lib").join(format!("lib{name}.so")).is_file()
    });
    if complete {
        eprintln!("setup: emulation layer present in {}", dir.display());
        return Ok(());
    }
    pip_download(EMULATION_WHEEL, &dir.join("wheel"))?;
    let python = python();
    // Unpack the libraries and manifests with Python's zipfile (no unzip needed), rewriting
    // each manifest's library_path to the absolute path of its library.
    let script = r#"
import json, pathlib, sys, zipfile
dest = pathlib.Path(sys.argv[1])
wheels = sorted((dest / "wheel").glob("ai_ml_emulation_layer_for_vulkan-*.whl"))
if not wheels:
    sys.exit("no emulation layer wheel in " + str(dest / "wheel"))
with zipfile.ZipFile(wheels[-1]) as z:
    for name, sub in [("VkLayer_Graph", "graph"), ("VkLayer_Tensor", "tensor")]:
        lib = next(n for n in z.namelist() if n.endswith("deploy/lib/lib%s.so" % name))
        man = next(n for n in z.namelist() if n.endswith("explicit_layer.d/%s.json" % name))
        (dest / "lib").mkdir(parents=True, exist_ok=True)
        (dest / sub).mkdir(parents=True, exist_ok=True)
        lib_path = dest / "lib" / ("lib%s.so" % name)
        lib_path.write_bytes(z.read(lib))
        manifest = json.loads(z.read(man))
        manifest["layer"]["library_path"] = str(lib_path.resolve())
        (dest / sub / ("%s.json" % name)).write_text(json.dumps(manifest, indent=2))
print("emulation layer installed in", dest)
"#;
    exec(Command::new(python).arg("-c").arg(script).arg(&dir))
}
