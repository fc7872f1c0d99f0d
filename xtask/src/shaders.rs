//! `cargo xtask shaders [--check]`: compiles `shaders/<crate>/**/*.comp` with glslc into
//! `crates/<crate>/spirv/<name>.spv`, which is committed and embedded with `include_bytes!`.
//! Users who vendor the crates need no glslc. `--check` compiles into memory and fails when a
//! committed file differs or is missing, or when a committed `.spv` has no source.
//!
//! A shader may name its target environment on a line `// target-env: vulkan1.3` (default
//! `vulkan1.1`). Each line `// variant: <suffix> <glslc args...>` (e.g.
//! `// variant: f16 -DDTYPE_F16`) compiles the source once more with those arguments into
//! `<name>_<suffix>.spv`; the plain `<name>.spv` stays. `--check` and the stale check cover
//! every variant.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Result, root};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) -> Result {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.is_dir() {
            sources(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "comp") {
            out.push(path);
        }
    }
    Ok(())
}

fn target_env(source: &str) -> &str {
    source
        .lines()
        .find_map(|l| l.trim().strip_prefix("// target-env:"))
        .map(str::trim)
        .unwrap_or("vulkan1.1")
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

/// The SPIR-V file of one compilation: `<stem>.spv`, or `<stem>_<suffix>.spv` for a variant.
fn spv_name(stem: &str, v: &Variant) -> String {
    if v.suffix.is_empty() {
        format!("{stem}.spv")
    } else {
        format!("{stem}_{}.spv", v.suffix)
    }
}

fn compile(src: &Path, env: &str, v: &Variant) -> std::result::Result<Vec<u8>, String> {
    let out = Command::new("glslc")
        .arg(format!("--target-env={env}"))
        .args(["-O", "-Werror"])
        .args(&v.args)
        .args(["-o", "-"])
        .arg(src)
        .output()
        .map_err(|e| format!("glslc (Debian: apt-get install glslc): {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "glslc failed on {} {:?}:\n{}",
            src.display(),
            v.args,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(out.stdout)
}

pub fn run(check: bool) -> Result {
    let root = root();
    let shader_root = root.join("shaders");
    let mut files = Vec::new();
    sources(&shader_root, &mut files)?;
    files.sort();
    let mut stale = Vec::new();
    let mut expected = Vec::new();
    for src in &files {
        let rel = src.strip_prefix(&shader_root).map_err(|e| e.to_string())?;
        let krate = rel
            .components()
            .next()
            .ok_or_else(|| format!("{}: not under shaders/<crate>/", src.display()))?
            .as_os_str()
            .to_string_lossy()
            .into_owned();
        let stem = src
            .file_stem()
            .ok_or_else(|| format!("{}: no file name", src.display()))?
            .to_string_lossy()
            .into_owned();
        let crate_dir = root.join("crates").join(&krate);
        if !crate_dir.is_dir() {
            return Err(format!("{}: no crate named {krate}", src.display()));
        }
        let text = std::fs::read_to_string(src).map_err(|e| format!("{}: {e}", src.display()))?;
        let env = target_env(&text);
        for v in variants(&text).map_err(|e| format!("{}: {e}", src.display()))? {
            let dst = crate_dir.join("spirv").join(spv_name(&stem, &v));
            expected.push(dst.clone());
            let spirv = compile(src, env, &v)?;
            let current = std::fs::read(&dst).ok();
            if current.as_deref() == Some(&spirv[..]) {
                continue;
            }
            if check {
                stale.push(dst.display().to_string());
            } else {
                std::fs::create_dir_all(dst.parent().unwrap_or(&root))
                    .map_err(|e| e.to_string())?;
                std::fs::write(&dst, &spirv).map_err(|e| format!("{}: {e}", dst.display()))?;
                eprintln!("shaders: wrote {}", dst.display());
            }
        }
    }
    // Committed SPIR-V without a source is stale too.
    for krate in std::fs::read_dir(root.join("crates")).map_err(|e| e.to_string())? {
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
    if stale.is_empty() {
        eprintln!(
            "shaders: {} sources, {} SPIR-V files up to date",
            files.len(),
            expected.len()
        );
        Ok(())
    } else {
        Err(format!(
            "committed SPIR-V is stale; run `cargo xtask shaders`:\n  {}",
            stale.join("\n  ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            .map(|v| spv_name("gemm", v))
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
