//! `cargo xtask ci` runs from a copy of the repository inside an otherwise empty folder, so
//! that a test, bench, example or demo that reads a file outside the repository (a sibling
//! folder that happens to exist on one machine) fails in CI instead of passing there and
//! failing for everyone who clones the project.
//!
//! The copy holds what git would commit: tracked files and untracked files that are not
//! ignored (`git ls-files --cached --others --exclude-standard`), with their modification
//! times, so that a second run rebuilds only what changed. It lives at
//! `<temp>/vkdelegate-ci/<repository folder name>`, `<temp>/vkdelegate-ci` holding nothing
//! else, and builds into `<target>/ci-isolated`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Result, exec, output, root, target_dir};

/// Set inside the copy: run the steps in place.
pub const ENV_IN_PLACE: &str = "VKDELEGATE_CI_IN_PLACE";

/// Whether this run is the one inside the copy (or was asked to run in place).
pub fn in_place() -> bool {
    std::env::var_os(ENV_IN_PLACE).is_some()
}

/// Copies the repository and runs `cargo xtask ci` there.
pub fn run_ci_in_copy() -> Result {
    let parent = std::env::temp_dir().join("vkdelegate-ci");
    let name = root()
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "vkdelegate".to_owned());
    let copy = parent.join(&name);
    let files = repository_files()?;
    sync(&files, &copy)?;
    remove_other_entries(&parent, &name)?;
    eprintln!(
        "ci: running from {} ({} files; nothing else in {})",
        copy.display(),
        files.len(),
        parent.display()
    );
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(&copy)
        .args(["run", "--quiet", "--package", "xtask", "--", "ci"])
        .env(ENV_IN_PLACE, "1")
        .env("CARGO_TARGET_DIR", target_dir().join("ci-isolated"));
    exec(&mut cmd)
}

/// What git would commit: tracked files and untracked, not ignored ones that exist.
fn repository_files() -> Result<Vec<PathBuf>> {
    let listing = output(Command::new("git").current_dir(root()).args([
        "ls-files",
        "-z",
        "--cached",
        "--others",
        "--exclude-standard",
    ]))?;
    let mut files: Vec<PathBuf> = listing
        .split('\0')
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .filter(|p| root().join(p).is_file())
        .collect();
    files.sort();
    files.dedup();
    Ok(files)
}

/// Makes `copy` hold exactly `files` (relative to the repository root), copying only files
/// whose size or modification time differ and keeping modification times.
fn sync(files: &[PathBuf], copy: &Path) -> Result {
    let io = |what: &str, p: &Path, e: std::io::Error| format!("{what} {}: {e}", p.display());
    for rel in files {
        let (from, to) = (root().join(rel), copy.join(rel));
        let meta = std::fs::metadata(&from).map_err(|e| io("stat", &from, e))?;
        let modified = meta.modified().map_err(|e| io("mtime of", &from, e))?;
        if let Ok(existing) = std::fs::metadata(&to)
            && existing.len() == meta.len()
            && existing.modified().ok() == Some(modified)
        {
            continue;
        }
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io("create", dir, e))?;
        }
        std::fs::copy(&from, &to).map_err(|e| io("copy to", &to, e))?;
        let file = std::fs::File::options()
            .write(true)
            .open(&to)
            .map_err(|e| io("open", &to, e))?;
        file.set_modified(modified)
            .map_err(|e| io("set mtime of", &to, e))?;
    }
    remove_stale(copy, copy, files)
}

/// Removes files under `dir` that are not in `files` (paths relative to `base`), and the
/// folders that become empty.
fn remove_stale(base: &Path, dir: &Path, files: &[PathBuf]) -> Result {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("read {}: {e}", dir.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        let rel = path.strip_prefix(base).unwrap_or(&path).to_path_buf();
        if path.is_dir() {
            remove_stale(base, &path, files)?;
            if std::fs::read_dir(&path).is_ok_and(|mut d| d.next().is_none()) {
                std::fs::remove_dir(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            }
        } else if files.binary_search(&rel).is_err() {
            std::fs::remove_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(())
}

/// Leaves `parent` holding only `keep`.
fn remove_other_entries(parent: &Path, keep: &str) -> Result {
    let entries =
        std::fs::read_dir(parent).map_err(|e| format!("read {}: {e}", parent.display()))?;
    for entry in entries.flatten() {
        if entry.file_name() == keep {
            continue;
        }
        let path = entry.path();
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.map_err(|e| format!("remove {}: {e}", path.display()))?;
    }
    Ok(())
}
