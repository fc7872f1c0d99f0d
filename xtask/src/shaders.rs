//! `cargo xtask shaders [--check]`: compiles `shaders/<crate>/**/*.{comp,vert,frag}` with glslc
//! into `<crate dir>/spirv/`, which is committed and embedded with `include_bytes!`: a compute
//! shader `<name>.comp` becomes `<name>.spv`, a vertex or fragment shader `<name>.vert` /
//! `<name>.frag` becomes `<name>.vert.spv` / `<name>.frag.spv`. The crate dir is
//! `crates/<crate>`, or `examples/<crate>` for the example crates. Users who vendor the crates
//! need no glslc. `--check` compiles into memory and fails when a
//! committed file differs or is missing, or when a committed `.spv` has no source.
//!
//! A shader may name its target environment on a line `// target-env: vulkan1.3` (default
//! `vulkan1.1`). A shader that enables `GL_KHR_cooperative_matrix` or
//! `GL_NV_cooperative_matrix2` is compiled by the SDK's glslc (`setup::sdk_glslc`, installed on
//! first use; it always targets SPIR-V 1.6, so such kernels need a Vulkan 1.3 device, and takes
//! no `// target-env:` or optimization; compute shaders only), the others by the system glslc. Each line `// variant: <suffix> <glslc args...>` (e.g.
//! `// variant: f16 -DDTYPE_F16`) compiles the source once more with those arguments into
//! `<name>_<suffix>.spv`; the plain `<name>.spv` stays. `--check` and the stale check cover
//! every variant.
//!
//! A crate whose compute shaders have `// kernel:` lines gets its kernel table generated into
//! `<crate dir>/src/kernels_generated.rs` (`kernel_table`), covered by `--check` and the stale
//! check as its SPIR-V is.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::kernel_table::{self, Source};
use crate::{Result, root};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) -> Result {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.is_dir() {
            sources(&path, out)?;
        } else if path
            .extension()
            .is_some_and(|e| STAGES.iter().any(|s| e == *s))
        {
            out.push(path);
        }
    }
    Ok(())
}

/// Shader stages compiled, by file extension.
const STAGES: &[&str] = &["comp", "vert", "frag"];

/// Folders that hold crates with shaders: `crates/`, `examples/`.
const CRATE_DIRS: &[&str] = &["crates", "examples"];

/// The crate folder of `krate`, under one of [`CRATE_DIRS`].
fn crate_dir(root: &Path, krate: &str) -> Option<PathBuf> {
    CRATE_DIRS
        .iter()
        .map(|d| root.join(d).join(krate))
        .find(|p| p.is_dir())
}

/// The SPIR-V file name of `src` compiled as `v`: `<stem>.spv` for compute,
/// `<stem>.<stage>.spv` otherwise, with `_<suffix>` after the stem for a variant.
fn spirv_name(src: &Path, v: &Variant) -> Result<String> {
    let name = src
        .file_name()
        .ok_or_else(|| format!("{}: no file name", src.display()))?
        .to_string_lossy()
        .into_owned();
    let (stem, stage) = match name.strip_suffix(".comp") {
        Some(stem) => (stem.to_string(), String::new()),
        None => match name.rsplit_once('.') {
            Some((stem, stage)) => (stem.to_string(), format!(".{stage}")),
            None => (name.clone(), String::new()),
        },
    };
    Ok(if v.suffix.is_empty() {
        format!("{stem}{stage}.spv")
    } else {
        format!("{stem}_{}{stage}.spv", v.suffix)
    })
}

/// One compilation of a source: the output file's suffix (empty for the plain one) and the
/// extra glslc arguments.
#[derive(Debug, PartialEq)]
struct Variant {
    suffix: String,
    args: Vec<String>,
}

/// The plain compilation and one per `// variant:` line.
fn variants(source: &str) -> std::result::Result<Vec<Variant>, String> {
    let mut out = vec![Variant {
        suffix: String::new(),
        args: Vec::new(),
    }];
    for line in source.lines() {
        let Some(rest) = line.trim().strip_prefix("// variant:") else {
            continue;
        };
        let mut words = rest.split_whitespace().map(str::to_string);
        let suffix = words
            .next()
            .ok_or_else(|| format!("`{}`: a variant needs a suffix", line.trim()))?;
        if !suffix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(format!(
                "`{}`: the suffix may hold only letters, digits and '_'",
                line.trim()
            ));
        }
        if out.iter().any(|v| v.suffix == suffix) {
            return Err(format!("`{}`: variant {suffix} appears twice", line.trim()));
        }
        out.push(Variant {
            suffix,
            args: words.collect(),
        });
    }
    Ok(out)
}

fn target_env(source: &str) -> &str {
    source
        .lines()
        .find_map(|l| l.trim().strip_prefix("// target-env:"))
        .map(str::trim)
        .unwrap_or("vulkan1.1")
}

/// Whether a source needs the cooperative-matrix-capable compiler.
fn needs_sdk_glslc(source: &str) -> bool {
    source.lines().any(|l| {
        let l = l.trim();
        l.starts_with("#extension")
            && (l.contains("GL_KHR_cooperative_matrix") || l.contains("GL_NV_cooperative_matrix2"))
    })
}

/// The system glslc, optimizing, SPIR-V to stdout.
fn compile_system(src: &Path, text: &str, v: &Variant) -> Result<Vec<u8>> {
    let out = Command::new("glslc")
        .arg(format!("--target-env={}", target_env(text)))
        .args(["-O", "-Werror"])
        .args(&v.args)
        .args(["-o", "-"])
        .arg(src)
        .output()
        .map_err(|e| format!("glslc (Debian: apt-get install glslc): {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "glslc failed on {}:\n{}",
            src.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(out.stdout)
}

/// The SDK's glslc (its own arguments; it writes only to a file).
fn compile_sdk(src: &Path, stem: &str) -> Result<Vec<u8>> {
    let glslc = crate::setup::sdk_glslc()?;
    let tmp = std::env::temp_dir().join(format!(
        "vkdelegate-shader-{}-{stem}.spv",
        std::process::id()
    ));
    // Run in the source's folder, naming it and its includes (its neighbours, as for the
    // system glslc) relatively: the module records the paths it read, and must not depend on
    // where the checkout lies.
    let dir = src.parent().unwrap_or(Path::new("."));
    let name = src.file_name().unwrap_or(src.as_os_str());
    let out = Command::new(&glslc)
        .current_dir(dir)
        .arg("--input")
        .arg(name)
        .arg("--output")
        .arg(&tmp)
        .args(["--stage", "compute", "--include", "."])
        .output()
        .map_err(|e| format!("{}: {e}", glslc.display()))?;
    let spirv = std::fs::read(&tmp);
    let _ = std::fs::remove_file(&tmp);
    if !out.status.success() {
        return Err(format!(
            "{} failed on {}:\n{}{}",
            glslc.display(),
            src.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    spirv.map_err(|e| format!("{}: no output: {e}", tmp.display()))
}

/// `text` followed by the text of every file it `#include`s (one level: where a shared
/// `.glsl` declares a push-constant block).
fn with_includes(src: &Path, text: &str) -> std::result::Result<String, String> {
    let mut all = text.to_string();
    for line in text.lines() {
        let Some(name) = line
            .trim()
            .strip_prefix("#include")
            .map(|r| r.trim().trim_matches('"'))
        else {
            continue;
        };
        let path = src.with_file_name(name);
        let included =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        all.push('\n');
        all.push_str(&included);
    }
    Ok(all)
}

pub fn run(check: bool) -> Result {
    let root = root();
    let shader_root = root.join("shaders");
    let mut files = Vec::new();
    sources(&shader_root, &mut files)?;
    files.sort();
    let mut stale = Vec::new();
    let mut expected = Vec::new();
    // Per crate folder: its name and its sources with their modules, for the kernel table.
    let mut crates: BTreeMap<PathBuf, (String, Vec<Source>)> = BTreeMap::new();
    for src in &files {
        let rel = src.strip_prefix(&shader_root).map_err(|e| e.to_string())?;
        let krate = rel
            .components()
            .next()
            .ok_or_else(|| format!("{}: not under shaders/<crate>/", src.display()))?
            .as_os_str()
            .to_string_lossy()
            .into_owned();
        let crate_dir = crate_dir(&root, &krate)
            .ok_or_else(|| format!("{}: no crate named {krate}", src.display()))?;
        let text = std::fs::read_to_string(src).map_err(|e| format!("{}: {e}", src.display()))?;
        let mut modules = BTreeMap::new();
        for v in variants(&text).map_err(|e| format!("{}: {e}", src.display()))? {
            let dst = crate_dir.join("spirv").join(spirv_name(src, &v)?);
            expected.push(dst.clone());
            let spirv = if needs_sdk_glslc(&text) {
                if !v.args.is_empty() {
                    return Err(format!(
                        "{}: variants of cooperative-matrix shaders are not supported",
                        src.display()
                    ));
                }
                if src.extension().is_none_or(|e| e != "comp") {
                    return Err(format!(
                        "{}: cooperative-matrix shaders are compute shaders (.comp)",
                        src.display()
                    ));
                }
                compile_sdk(src, &spirv_name(src, &v)?)?
            } else {
                compile_system(src, &text, &v)?
            };
            update(&dst, &spirv, check, &mut stale)?;
            modules.insert(v.suffix, spirv);
        }
        let file = src
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        crates
            .entry(crate_dir)
            .or_insert_with(|| (krate, Vec::new()))
            .1
            .push(Source {
                file,
                cooperative: needs_sdk_glslc(&text),
                push_text: with_includes(src, &text)?,
                text,
                modules,
            });
    }
    // Kernel tables, from the sources' `// kernel:` lines and the modules compiled above.
    let mut tables = Vec::new();
    for (crate_dir, (krate, sources)) in &crates {
        let Some(code) = kernel_table::generate(krate, sources)? else {
            continue;
        };
        let dst = crate_dir.join("src").join(TABLE);
        update(
            &dst,
            kernel_table::rustfmt(&code)?.as_bytes(),
            check,
            &mut stale,
        )?;
        tables.push(dst);
    }
    // Committed SPIR-V without a source is stale too.
    let crates = CRATE_DIRS
        .iter()
        .filter_map(|d| std::fs::read_dir(root.join(d)).ok())
        .flatten();
    for krate in crates {
        let spirv = krate.map_err(|e| e.to_string())?.path().join("spirv");
        let Ok(entries) = std::fs::read_dir(&spirv) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "spv") && !expected.contains(&p) {
                stale.push(format!("{} (no source)", p.display()));
            }
        }
    }
    // So is a kernel table of a crate whose sources declare no kernels.
    for d in CRATE_DIRS {
        let Ok(entries) = std::fs::read_dir(root.join(d)) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path().join("src").join(TABLE);
            if p.is_file() && !tables.contains(&p) {
                stale.push(format!("{} (no `// kernel:` lines)", p.display()));
            }
        }
    }
    if stale.is_empty() {
        eprintln!(
            "shaders: {} sources, {} SPIR-V files and {} kernel tables up to date",
            files.len(),
            expected.len(),
            tables.len()
        );
        Ok(())
    } else {
        Err(format!(
            "committed SPIR-V or kernel tables are stale; run `cargo xtask shaders`:\n  {}",
            stale.join("\n  ")
        ))
    }
}

/// The generated kernel table of a crate, under its `src/`.
const TABLE: &str = "kernels_generated.rs";

/// Writes `bytes` to `dst` unless it holds them already; with `check`, notes it as stale
/// instead.
fn update(dst: &Path, bytes: &[u8], check: bool, stale: &mut Vec<String>) -> Result {
    if std::fs::read(dst).ok().as_deref() == Some(bytes) {
        return Ok(());
    }
    if check {
        stale.push(dst.display().to_string());
    } else {
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        std::fs::write(dst, bytes).map_err(|e| format!("{}: {e}", dst.display()))?;
        eprintln!("shaders: wrote {}", dst.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spirv_names_keep_the_stage_of_graphics_shaders() {
        let plain = Variant {
            suffix: String::new(),
            args: Vec::new(),
        };
        let name = |p: &str| spirv_name(Path::new(p), &plain).unwrap();
        assert_eq!(name("shaders/vk-core/copy.comp"), "copy.spv");
        assert_eq!(name("shaders/frame-loop/scene.vert"), "scene.vert.spv");
        assert_eq!(name("shaders/frame-loop/scene.frag"), "scene.frag.spv");
    }

    #[test]
    fn example_crates_are_found_beside_the_library_crates() {
        let root = root();
        assert_eq!(
            crate_dir(&root, "vk-core"),
            Some(root.join("crates/vk-core"))
        );
        assert_eq!(
            crate_dir(&root, "frame-loop"),
            Some(root.join("examples/frame-loop"))
        );
        assert_eq!(crate_dir(&root, "no-such-crate"), None);
    }

    #[test]
    fn variant_lines_add_compilations() {
        let v =
            variants("#version 450\n// variant: f16 -DDTYPE_F16 -DX=1\nvoid main() {}\n").unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].suffix, "");
        assert!(v[0].args.is_empty());
        assert_eq!(v[1].suffix, "f16");
        assert_eq!(v[1].args, ["-DDTYPE_F16", "-DX=1"]);
    }

    #[test]
    fn every_variant_names_its_spirv_file() {
        let names: Vec<String> = variants("// variant: f16 -DDTYPE_F16\n")
            .unwrap()
            .iter()
            .map(|v| spirv_name(Path::new("shaders/compute-delegate/gemm.comp"), v).unwrap())
            .collect();
        // Both are expected, so neither is reported as SPIR-V without a source.
        assert_eq!(names, ["gemm.spv", "gemm_f16.spv"]);
    }

    #[test]
    fn bad_variant_lines_are_errors() {
        assert!(variants("// variant:\n").is_err());
        assert!(variants("// variant: a/b -DX\n").is_err());
        assert!(variants("// variant: f16 -DA\n// variant: f16 -DB\n").is_err());
    }
}
