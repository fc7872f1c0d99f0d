//! The `vkdelegate` binary, end to end.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions
#![cfg_attr(
    not(all(feature = "vgf", feature = "compute")),
    allow(dead_code, unused_imports)
)]

use std::path::PathBuf;
use std::process::Command;

/// The binary, with the validation layer on (its messages go to stderr, where
/// [`assert_clean`] looks for them).
fn bin() -> Command {
    let mut c = Command::new(vk_core::testing::bin_exe(
        "vkdelegate",
        env!("CARGO_BIN_EXE_vkdelegate"),
    ));
    c.env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .env("VKDELEGATE_VALIDATION", "1")
        .env("RUST_LOG", "warn");
    c
}

/// Validation errors the Arm emulation layer causes with its own pipelines.
const EXCUSED_VUIDS: &[&str] = vk_core::testing::EMULATION_LAYER_VUIDS;

/// Asserts that a run succeeded and that the validation layer reported no error of ours
/// (validation errors are logged at `error` level under the `vulkan` target). As in the
/// library's tests, a layer older than the cooperative-matrix extensions may report their
/// structures and SPIR-V as unknown (`vk_core::testing::is_outdated_layer_message`): those
/// messages are excused, on GPUs with the extensions only.
fn assert_clean(out: &std::process::Output) {
    use vk_core::testing::{is_outdated_layer_message, validation_layer_spec_version};
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let spec = validation_layer_spec_version();
    let ours: Vec<&str> = err
        .lines()
        .filter(|l| l.contains(" ERROR vulkan]") && !EXCUSED_VUIDS.iter().any(|v| l.contains(v)))
        .filter(|l| !spec.is_some_and(|v| is_outdated_layer_message(l, v)))
        .collect();
    assert!(ours.is_empty(), "validation errors:\n{}", ours.join("\n"));
}

fn root() -> PathBuf {
    vk_core::testing::repo_root()
}

#[test]
fn help_lists_the_commands() {
    let out = bin().arg("--help").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for cmd in ["devices", "inspect", "run", "bench", "demo", "zoo"] {
        assert!(text.contains(cmd), "{text}");
    }
}

#[test]
fn a_missing_file_is_a_clear_error() {
    let out = bin()
        .args(["inspect", "/nonexistent/model.vgf"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/model.vgf"), "{err}");
}

/// `inspect --json` carries the facts of Arm's `vgf_dump.json` for every corpus file: the
/// same JSON the library's differential test checks against `vgf_dump.json`.
#[cfg(feature = "vgf")]
#[test]
fn inspect_json_matches_the_library_on_every_corpus_file() {
    let corpus = root().join("fixtures/vgf");
    let entries =
        std::fs::read_dir(&corpus).unwrap_or_else(|e| panic!("{}: {e}", corpus.display()));
    let mut n = 0;
    for e in entries.flatten() {
        let model = e.path().join("model.vgf");
        if !model.is_file() {
            continue;
        }
        let out = bin()
            .args(["inspect", "--json"])
            .arg(&model)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let ours: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let bytes = std::fs::read(&model).unwrap();
        let vgf = vkdelegate::vgf::Vgf::decode(&bytes).unwrap();
        assert_eq!(
            ours,
            vkdelegate::vgf::inspect_json(&vgf),
            "{}",
            model.display()
        );
        // Spot-check against Arm's own dump: module and resource counts.
        let dump: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(e.path().join("vgf_dump.json")).unwrap())
                .unwrap();
        for key in ["modules", "resources"] {
            if let (Some(a), Some(b)) = (ours[key].as_array(), dump[key].as_array()) {
                assert_eq!(a.len(), b.len(), "{key} of {}", model.display());
            }
        }
        n += 1;
    }
    assert!(n >= 9, "only {n} corpus files");
}

/// `run` on a program file and on a single VGF writes outputs that match the references.
#[cfg(all(feature = "vgf", feature = "compute"))]
#[test]
fn run_writes_outputs() {
    let dir = std::env::temp_dir().join(format!("vkdelegate-cli-{}", std::process::id()));
    let fixtures = root().join("fixtures/vgf");
    let out = bin()
        .arg("run")
        .arg(fixtures.join("sqplus_1x3x4x4/model.vgf"))
        .arg("--input")
        .arg(fixtures.join("sqplus_1x3x4x4/input_0.npy"))
        .arg("--output-dir")
        .arg(dir.join("vgf"))
        .args(["--repeat", "2"])
        .output()
        .unwrap();
    assert_clean(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("loaded in") && stdout.contains("per run"),
        "{stdout}"
    );
    let got = std::fs::read(dir.join("vgf/output_0.npy")).unwrap();
    let want = std::fs::read(fixtures.join("sqplus_1x3x4x4/vgf_output_0.npy")).unwrap();
    // Same data (headers may pad differently): compare the last 48 floats.
    assert_eq!(got[got.len() - 192..], want[want.len() - 192..]);

    let out = bin()
        .arg("run")
        .arg(root().join("examples/pool_sigmoid_sqplus.toml"))
        .arg("--input")
        .arg(format!(
            "x={}",
            fixtures.join("avgpool/input_0.npy").display()
        ))
        .arg("--output-dir")
        .arg(dir.join("program"))
        .output()
        .unwrap();
    assert_clean(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    // VGF files run natively by default; --vgf-path data-graph takes the extension.
    assert!(
        stdout.contains("avg_pool (compute) -> sigmoid (compute) -> square_plus (compute)"),
        "{stdout}"
    );
    assert!(dir.join("program/output_0.npy").is_file());
    let out = bin()
        .arg("run")
        .arg(root().join("examples/pool_sigmoid_sqplus.toml"))
        .arg("--input")
        .arg(format!(
            "x={}",
            fixtures.join("avgpool/input_0.npy").display()
        ))
        .args(["--vgf-path", "data-graph"])
        .output()
        .unwrap();
    assert_clean(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("avg_pool (vgf) -> sigmoid (compute) -> square_plus (vgf)"),
        "{stdout}"
    );

    // A wrong input name is refused by name.
    let out = bin()
        .arg("run")
        .arg(root().join("examples/pool_sigmoid_sqplus.toml"))
        .arg("--input")
        .arg(format!(
            "z={}",
            fixtures.join("avgpool/input_0.npy").display()
        ))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no input 'z'"), "{err}");
}

/// A wrong-shape input is refused before any device is opened, naming the input, the file,
/// and the expected and actual dtype and shape.
#[cfg(feature = "vgf")]
#[test]
fn a_wrong_shape_input_is_refused_before_loading() {
    let fixtures = root().join("fixtures/vgf");
    let wrong = fixtures.join("avgpool/input_0.npy");
    let out = bin()
        .arg("run")
        .arg(fixtures.join("sqplus_1x3x4x4/model.vgf"))
        .arg("--input")
        .arg(&wrong)
        // No device is needed to refuse it: with no usable layer, opening one would fail.
        .env("VKDELEGATE_EMULATION_LAYER", "off")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    for needle in [
        "input 0 'input_0'",
        &wrong.display().to_string(),
        "wrong shape",
        "expected f32[1, 3, 4, 4]",
        "got f32[1, 3, 8, 8]",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
    assert!(String::from_utf8_lossy(&out.stdout).is_empty());
}

/// `inspect` starts with the inputs and outputs and lists constants only with `--verbose`.
#[cfg(feature = "vgf")]
#[test]
fn inspect_summarizes_and_details_on_request() {
    let model = root().join("fixtures/vgf/conv_int8/model.vgf");
    let out = bin().arg("inspect").arg(&model).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[1].starts_with("inputs (1):"), "{text}");
    assert!(
        lines[2].contains("input_0") && lines[2].contains("i8"),
        "{text}"
    );
    assert!(lines[2].contains("[1, 3, 16, 16]"), "{text}");
    assert!(text.contains("constants: 1, 216 bytes"), "{text}");
    assert!(!text.contains("resource 0, 216 bytes"), "{text}");

    let out = bin()
        .args(["inspect", "--verbose"])
        .arg(&model)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("resource 0, 216 bytes, dense"), "{text}");
    assert!(
        text.contains("INPUT        VK_FORMAT_R8_SINT [1, 3, 16, 16]"),
        "{text}"
    );
}

/// `bench --filter` runs the op rows it names and no others: the host I/O rows only under a
/// filter that names them.
#[cfg(feature = "compute")]
#[test]
fn bench_filters_name_the_rows_that_run() {
    let run = |filter: &str| {
        let out = bin()
            .args(["bench", "--quick", "--filter", filter])
            .output()
            .unwrap();
        assert_clean(&out);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let ops = run("sigmoid");
    assert!(ops.contains("sigmoid"), "{ops}");
    assert!(!ops.contains("host I/O"), "{ops}");
    assert!(!ops.contains("softmax"), "{ops}");
    let host = run("host");
    assert!(host.contains("host I/O"), "{host}");
    assert!(!host.contains("sigmoid"), "{host}");
}

/// `bench --no-ops --dispatches` on a small `.pte` program: its timings, the host side of its
/// copies, and one line per compute dispatch with its kernel, work groups and time.
#[cfg(all(feature = "vgf", feature = "compute"))]
#[test]
fn bench_profiles_every_dispatch_of_a_pte_program() {
    let out = bin()
        .arg("bench")
        .args(["--no-ops", "--dispatches", "--repeat", "10", "--pte"])
        .arg(root().join("fixtures/pte/conv_relu_residual/model.pte"))
        .output()
        .unwrap();
    assert_clean(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("host input to host output") && stdout.contains("copies: in"),
        "{stdout}"
    );
    let dispatches: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.contains("dispatches (step, op [kernel], work groups"))
        .skip(1)
        .take_while(|l| l.ends_with(" ms") && l.contains('['))
        .collect();
    assert!(!dispatches.is_empty(), "{stdout}");
    for line in &dispatches {
        let groups = line.split_whitespace().rev().nth(2).unwrap_or_default();
        assert_eq!(groups.split('x').count(), 3, "{line}");
    }
    assert!(
        dispatches.iter().any(|l| l.contains("conv2d [")),
        "{stdout}"
    );
}

/// The model zoo's reduced networks (`fixtures/zoo`, exported by ExecuTorch from torchvision,
/// Hugging Face and published architectures): every one loads, runs and matches PyTorch, in
/// one `vkdelegate zoo` run.
#[test]
#[cfg(feature = "compute")]
fn the_zoo_matches_pytorch() {
    let out = bin()
        .arg("zoo")
        .arg(root().join("fixtures/zoo"))
        .args(["--repeat", "1"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}");
    assert_clean(&out);
    let rows = stdout.lines().filter(|l| l.ends_with("  pass")).count();
    assert!(rows >= 68, "{rows} models passed:\n{stdout}");
}

/// `generate` at temperature 0 continues the prompt with PyTorch's greedy tokens (the tiny
/// Llama of `fixtures/llm`, whose tokenizer has one token per byte), streams the text and
/// prints both rates; a seeded draw at a temperature repeats itself.
#[test]
#[cfg(feature = "compute")]
fn generate_continues_a_prompt_as_pytorch_greedily_and_repeats_seeded_draws() {
    let dir = root().join("fixtures/llm/tiny_llama");
    let bytes = std::fs::read(dir.join("tokens.npy")).unwrap();
    let reference: Vec<i64> = npyz::NpyFile::new(&bytes[..]).unwrap().into_vec().unwrap();
    let generate = |extra: &[&str]| {
        let out = bin()
            .arg("generate")
            .arg(dir.join("model.pte"))
            .args(["--prompt", "Hello, w", "-n", "8"])
            .args(extra)
            .output()
            .unwrap();
        assert_clean(&out);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        let ids = err
            .lines()
            .find_map(|l| l.strip_prefix("generated token ids: "))
            .unwrap_or_else(|| panic!("no token ids in:\n{err}"))
            .to_owned();
        (String::from_utf8_lossy(&out.stdout).into_owned(), err, ids)
    };
    let json = dir.join("tokenizer.json");
    let tiktoken = dir.join("tokenizer.model");
    let with = |t: &std::path::Path| ["--tokenizer".to_owned(), t.display().to_string()];
    let (json, tiktoken) = (with(&json), with(&tiktoken));
    let json: Vec<&str> = json.iter().map(String::as_str).collect();
    let tiktoken: Vec<&str> = tiktoken.iter().map(String::as_str).collect();
    let (text, err, ids) = generate(&json);
    assert!(text.starts_with("Hello, w"), "{text}");
    assert!(
        err.contains("prefill: 8 tokens") && err.contains("decode: 8 tokens"),
        "{err}"
    );
    assert_eq!(
        ids,
        format!("{:?}", &reference[8..16]),
        "PyTorch's greedy continuation"
    );
    // Llama 3's tiktoken-style file of the same vocabulary tokenizes and decodes the same.
    let (text2, _, ids2) = generate(&tiktoken);
    assert_eq!(
        (text2, ids2),
        (text, ids),
        "tokenizer.model against tokenizer.json"
    );
    let seeded = [
        &json[..],
        &["--temperature", "0.8", "--top-p", "0.9", "--seed", "3"],
    ]
    .concat();
    assert_eq!(generate(&seeded).2, generate(&seeded).2);
}

/// `generate --bench` measures prefill at each length and decode after it, with no tokenizer.
#[test]
#[cfg(feature = "compute")]
fn generate_bench_measures_prefill_and_decode_at_each_length() {
    let dir = root().join("fixtures/llm/tiny_llama_4w");
    let out = bin()
        .arg("generate")
        .arg(dir.join("model.pte"))
        .args(["--bench", "5,16", "-n", "4", "--repeat", "2"])
        .output()
        .unwrap();
    assert_clean(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    for row in [
        "     5  prefill        5",
        "    16  prefill       16",
        "decode         4",
    ] {
        assert!(stdout.contains(row), "no '{row}' in:\n{stdout}");
    }
    assert!(
        err.contains("programs built for [1, 4, 16] tokens"),
        "{err}"
    );
}

/// `run --trace FILE` writes one execution's device timeline as Chrome trace JSON: a complete
/// event per dispatch, end to end, with its op, kernel, output shape and work groups, and the
/// step's track named.
#[test]
#[cfg(feature = "compute")]
fn run_writes_a_chrome_trace_of_every_dispatch() {
    let dir = root().join("fixtures/zoo/resnet");
    let trace = std::env::temp_dir().join(format!("vkdelegate-trace-{}.json", std::process::id()));
    let out = bin()
        .arg("run")
        .arg(dir.join("model.pte"))
        .arg("-i")
        .arg(dir.join("input_0.npy"))
        .arg("--trace")
        .arg(&trace)
        .output()
        .unwrap();
    assert_clean(&out);
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let _ = std::fs::remove_file(&trace);
    let events = json["traceEvents"].as_array().unwrap();
    let dispatches: Vec<&serde_json::Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert!(dispatches.len() >= 20, "{} dispatches", dispatches.len());
    let mut end = 0.0;
    for d in &dispatches {
        let (ts, dur) = (d["ts"].as_f64().unwrap(), d["dur"].as_f64().unwrap());
        assert!((ts - end).abs() < 1e-3 && dur >= 0.0, "{d}");
        end = ts + dur;
        assert!(
            d["name"].is_string() && d["args"]["kernel"].is_string(),
            "{d}"
        );
        assert!(!d["args"]["shape"].as_array().unwrap().is_empty(), "{d}");
    }
    assert!(dispatches.iter().any(|d| d["name"] == "conv2d"));
    assert!(
        events
            .iter()
            .any(|e| e["ph"] == "M" && e["name"] == "thread_name")
    );
}

/// `zoo --torch PYTHON` times the networks with PyTorch too where it can; where the Python
/// cannot (no such program, no PyTorch, no CUDA GPU), it says why and the zoo still judges.
#[test]
#[cfg(feature = "compute")]
fn zoo_names_why_it_has_no_pytorch_times() {
    let out = bin()
        .arg("zoo")
        .arg(root().join("fixtures/zoo"))
        .args(["--filter", "squeezenet", "--repeat", "1"])
        .args(["--torch", "/nonexistent/python3"])
        .output()
        .unwrap();
    assert_clean(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("PyTorch: no times (/nonexistent/python3:") && stdout.contains("  pass"),
        "{stdout}"
    );
}
