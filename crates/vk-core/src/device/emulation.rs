//! Finding Arm's ML emulation layers (`VK_LAYER_ML_Graph_Emulation` above
//! `VK_LAYER_ML_Tensor_Emulation`), which add `VK_ARM_tensors` and `VK_ARM_data_graph` to
//! drivers that lack them.
//!
//! The layers are looked up, in order:
//! 1. `VKDELEGATE_EMULATION_LAYER=off` disables them;
//! 2. `VKDELEGATE_EMULATION_LAYER_DIR` names a directory;
//! 3. a directory named [`INSTALL_DIR_NAME`] beside or above the running executable (the xtask
//!    set-up installs it as `target/vk-emulation-layer`, which every test binary and the CLI
//!    built in that target directory find).
//!
//! The directory holds one sub-directory per layer, `graph/` and `tensor/`, each with the
//! layer's manifest (`VkLayer_Graph.json`, `VkLayer_Tensor.json`) whose `library_path` is
//! absolute or relative to the manifest.

use std::path::{Path, PathBuf};

use crate::error::Error;
pub use crate::error::missing_arm_hint;

/// Name of the directory the xtask set-up installs the layers into, under `target/`.
pub const INSTALL_DIR_NAME: &str = "vk-emulation-layer";
/// The graph layer's name.
pub const GRAPH_LAYER: &std::ffi::CStr = c"VK_LAYER_ML_Graph_Emulation";
/// The tensor layer's name.
pub const TENSOR_LAYER: &std::ffi::CStr = c"VK_LAYER_ML_Tensor_Emulation";

/// Environment variable that disables the layers when set to `off` (or `0`).
pub const ENV_SWITCH: &str = "VKDELEGATE_EMULATION_LAYER";
/// Environment variable naming the layers' directory.
pub const ENV_DIR: &str = "VKDELEGATE_EMULATION_LAYER_DIR";

/// How to treat the emulation layers when creating an instance.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum EmulationPolicy {
    /// Use them when no device offers the ARM extensions natively and they can be found
    /// (environment first, then beside the executable).
    #[default]
    Auto,
    /// Never use them.
    Off,
    /// Use the layers in this directory (when no device offers the ARM extensions natively).
    Dir(PathBuf),
}

/// Where the two layers' manifests were found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmulationLayers {
    /// Directory holding the graph layer's manifest.
    pub graph_dir: PathBuf,
    /// Directory holding the tensor layer's manifest.
    pub tensor_dir: PathBuf,
}

impl EmulationPolicy {
    /// Reads the policy from the environment (`VKDELEGATE_EMULATION_LAYER`,
    /// `VKDELEGATE_EMULATION_LAYER_DIR`).
    pub fn from_env() -> Self {
        if let Ok(v) = std::env::var(ENV_SWITCH) {
            if matches!(
                v.to_ascii_lowercase().as_str(),
                "off" | "0" | "false" | "no"
            ) {
                return EmulationPolicy::Off;
            }
        }
        match std::env::var_os(ENV_DIR) {
            Some(dir) if !dir.is_empty() => EmulationPolicy::Dir(PathBuf::from(dir)),
            _ => EmulationPolicy::Auto,
        }
    }

    /// Finds the layers this policy points at. `Ok(None)`: none to use. An explicitly named
    /// directory that lacks a layer is an error; a missing automatic install is not.
    pub fn locate(&self) -> Result<Option<EmulationLayers>, Error> {
        match self {
            EmulationPolicy::Off => Ok(None),
            EmulationPolicy::Dir(dir) => inspect(dir).map(Some),
            EmulationPolicy::Auto => match EmulationPolicy::from_env() {
                EmulationPolicy::Off => Ok(None),
                EmulationPolicy::Dir(dir) => inspect(&dir).map(Some),
                EmulationPolicy::Auto => Ok(beside_executable().and_then(|d| inspect(&d).ok())),
            },
        }
    }
}

/// Searches the executable's ancestors for [`INSTALL_DIR_NAME`].
fn beside_executable() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    exe.ancestors()
        .skip(1)
        .map(|a| a.join(INSTALL_DIR_NAME))
        .find(|candidate| candidate.is_dir())
}

/// Checks that `dir` holds both layers in the expected layout.
pub fn inspect(dir: &Path) -> Result<EmulationLayers, Error> {
    let problem = |problem: String| Error::EmulationLayer {
        dir: dir.display().to_string(),
        problem,
    };
    let graph_dir = dir.join("graph");
    let tensor_dir = dir.join("tensor");
    for (sub, manifest) in [
        (&graph_dir, "VkLayer_Graph.json"),
        (&tensor_dir, "VkLayer_Tensor.json"),
    ] {
        let path = sub.join(manifest);
        if !path.is_file() {
            return Err(problem(format!(
                "{} is missing (expected graph/VkLayer_Graph.json and tensor/VkLayer_Tensor.json; \
                 `cargo xtask setup` installs them)",
                path.display()
            )));
        }
    }
    Ok(EmulationLayers {
        graph_dir,
        tensor_dir,
    })
}

/// Makes the loader able to discover the layers, by adding their directories, graph first, to
/// `VK_ADD_LAYER_PATH` for this process. Done once, before the first instance that uses them.
pub(crate) fn expose_to_loader(layers: &EmulationLayers) {
    static ONCE: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    let mut done = ONCE.lock().unwrap_or_else(|p| p.into_inner());
    if done.contains(&layers.graph_dir) {
        return;
    }
    let mut paths = vec![layers.graph_dir.clone(), layers.tensor_dir.clone()];
    if let Some(existing) = std::env::var_os("VK_ADD_LAYER_PATH") {
        paths.extend(std::env::split_paths(&existing));
    }
    if let Ok(joined) = std::env::join_paths(paths) {
        log::debug!("VK_ADD_LAYER_PATH={}", joined.to_string_lossy());
        // SAFETY: `set_var` races with concurrent reads of the environment from other threads.
        // It runs once per layer directory, under a lock, before the instance that needs it;
        // the variable is one the loader reads only while creating instances or enumerating
        // layers, which `vk-core` serializes behind the same lock (see `instance.rs`).
        unsafe { std::env::set_var("VK_ADD_LAYER_PATH", joined) };
    }
    done.push(layers.graph_dir.clone());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Missing;

    #[test]
    fn a_named_directory_without_layers_is_an_error_naming_the_file() {
        let dir = std::env::temp_dir().join("vkdelegate-no-layers-here");
        let _ = std::fs::create_dir_all(&dir);
        let err = inspect(&dir).unwrap_err().to_string();
        assert!(err.contains("VkLayer_Graph.json"), "{err}");
        assert!(err.contains("vkdelegate-no-layers-here"), "{err}");
    }

    #[test]
    fn a_device_without_the_arm_extensions_is_told_where_the_layer_comes_from() {
        let missing = Missing {
            extensions: vec!["VK_ARM_tensors".into(), "VK_ARM_data_graph".into()],
            ..Missing::default()
        };
        let err = Error::Unsupported {
            device: "llvmpipe".into(),
            requester: "vgf-delegate".into(),
            missing,
        }
        .to_string();
        for needle in [
            "missing extension VK_ARM_tensors",
            "cargo xtask setup",
            "target/vk-emulation-layer",
            ENV_DIR,
            "graph/",
            "tensor/",
        ] {
            assert!(err.contains(needle), "{needle}: {err}");
        }
        let other = Missing {
            extensions: vec!["VK_KHR_cooperative_matrix".into()],
            ..Missing::default()
        };
        assert_eq!(missing_arm_hint(&other), None);
    }
}
