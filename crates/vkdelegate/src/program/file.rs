//! The program file (TOML).
//!
//! ```toml
//! # Optional: the program's outputs, in order (default: the last step's outputs).
//! outputs = ["y"]
//!
//! [[step]]
//! name = "pool"                 # optional, defaults to "step<i>"
//! vgf = "avgpool.vgf"           # a VGF file, relative to the program file
//! inputs = ["x"]                # tensor names bound to the model's inputs, in order
//! outputs = ["pooled"]          # names given to the model's outputs, in order
//!
//! [[step]]
//! name = "gate"
//! op = "sigmoid"                # a compute op, with its attributes as keys
//! inputs = ["pooled"]
//! outputs = ["gated"]
//!
//! [[step]]
//! op = "clamp"
//! min = 0.0
//! max = 6.0
//! inputs = ["gated"]
//! outputs = ["y"]
//! ```
//!
//! Compute ops and their attributes are checked as the file is parsed (`ops.rs`): an unknown op
//! or attribute is an error naming the step.
//!
//! A name that no step produces is a program input; its dtype and shape are those its first
//! consumer expects (a VGF model's declared input, or for a compute op, `input_shape` /
//! `input_dtype` keys on the step).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::error::ProgramError;
use super::spec::{ComputeStep, StepKind, StepSpec};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSpec {
    #[serde(default)]
    outputs: Vec<String>,
    #[serde(default, rename = "step")]
    steps: Vec<StepFile>,
}

#[derive(Debug, Deserialize)]
struct StepFile {
    name: Option<String>,
    vgf: Option<PathBuf>,
    op: Option<String>,
    #[serde(default)]
    inputs: Vec<String>,
    #[serde(default)]
    outputs: Vec<String>,
    #[serde(flatten)]
    attributes: BTreeMap<String, toml::Value>,
}

/// A parsed program file: its steps and declared outputs.
#[derive(Debug, Clone)]
pub struct ProgramFile {
    /// The steps, in order.
    pub steps: Vec<StepSpec>,
    /// Declared outputs (empty: the last step's).
    pub outputs: Vec<String>,
}

impl ProgramFile {
    /// Reads and parses `path`; VGF paths are resolved relative to its folder.
    pub fn read(path: &Path) -> Result<ProgramFile, ProgramError> {
        let text = std::fs::read_to_string(path).map_err(|e| ProgramError::File {
            path: path.display().to_string(),
            problem: e.to_string(),
        })?;
        Self::parse(&text, path.parent().unwrap_or(Path::new("."))).map_err(|e| match e {
            ProgramError::File { problem, .. } => ProgramError::File {
                path: path.display().to_string(),
                problem,
            },
            other => other,
        })
    }

    /// Parses program text; VGF paths are resolved relative to `base`.
    pub fn parse(text: &str, base: &Path) -> Result<ProgramFile, ProgramError> {
        let file_error = |problem: String| ProgramError::File {
            path: "<text>".into(),
            problem,
        };
        let spec: FileSpec = toml::from_str(text).map_err(|e| file_error(e.to_string()))?;
        if spec.steps.is_empty() {
            return Err(file_error("the program has no [[step]]".into()));
        }
        let mut steps = Vec::with_capacity(spec.steps.len());
        for (i, s) in spec.steps.into_iter().enumerate() {
            let name = s.name.unwrap_or_else(|| format!("step{i}"));
            let kind = match (s.vgf, s.op) {
                (Some(vgf), None) => {
                    if !s.attributes.is_empty() {
                        let keys: Vec<&str> = s.attributes.keys().map(String::as_str).collect();
                        return Err(file_error(format!(
                            "step '{name}': a VGF step takes no attributes, found {keys:?}"
                        )));
                    }
                    StepKind::Vgf {
                        path: base.join(vgf),
                    }
                }
                (None, Some(op)) => {
                    StepKind::Compute(ComputeStep::from_attributes(&name, &op, &s.attributes)?)
                }
                (Some(_), Some(_)) => {
                    return Err(file_error(format!(
                        "step '{name}' names both `vgf` and `op`: choose one"
                    )));
                }
                (None, None) => {
                    return Err(file_error(format!(
                        "step '{name}' names neither a `vgf` file nor a compute `op`"
                    )));
                }
            };
            steps.push(StepSpec {
                name,
                kind,
                inputs: s.inputs,
                outputs: s.outputs,
            });
        }
        Ok(ProgramFile {
            steps,
            outputs: spec.outputs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_steps_and_resolves_paths() {
        let text = r#"
            outputs = ["y"]
            [[step]]
            name = "pool"
            vgf = "a.vgf"
            inputs = ["x"]
            outputs = ["p"]
            [[step]]
            op = "clamp"
            min = 0.0
            max = 6.0
            inputs = ["p"]
            outputs = ["y"]
        "#;
        let f = ProgramFile::parse(text, Path::new("/models")).unwrap();
        assert_eq!(f.outputs, vec!["y"]);
        assert_eq!(f.steps.len(), 2);
        match &f.steps[0].kind {
            StepKind::Vgf { path } => assert_eq!(path, Path::new("/models/a.vgf")),
            other => panic!("{other:?}"),
        }
        assert_eq!(f.steps[1].name, "step1");
        match &f.steps[1].kind {
            StepKind::Compute(c) => {
                assert_eq!(c.op, "clamp");
                assert_eq!(c.attributes["max"].as_float(), Some(6.0));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_files_name_the_problem() {
        let e = ProgramFile::parse("", Path::new(".")).unwrap_err();
        assert!(e.to_string().contains("no [[step]]"), "{e}");
        let e = ProgramFile::parse("[[step]]\nname='s'\ninputs=['x']", Path::new(".")).unwrap_err();
        assert!(e.to_string().contains("step 's' names neither"), "{e}");
        let e = ProgramFile::parse("[[step]]\nvgf='a'\nop='relu'", Path::new(".")).unwrap_err();
        assert!(e.to_string().contains("both"), "{e}");
        let e = ProgramFile::parse("[[step]]\nvgf='a'\nscale=2", Path::new(".")).unwrap_err();
        assert!(e.to_string().contains("scale"), "{e}");
        let e = ProgramFile::parse("outputs = 3", Path::new(".")).unwrap_err();
        assert!(e.to_string().contains("outputs"), "{e}");
    }
}
