//! Real programs exported by ExecuTorch (`fixtures/pte/<model>/*.pte`, and the model zoo's
//! reduced networks, `fixtures/zoo/<model>/model.pte`): every one decodes, every
//! delegate payload resolves, every Vulkan graph decodes with every constant resolved, and what
//! the exporter recorded in `meta.json` (plan, operators, delegates, Vulkan ops, segments) is
//! what this crate reads.

use std::path::{Path, PathBuf};

use executorch_pte::{DataLocation, Program, VULKAN_BACKEND_ID, VkGraph};
use serde_json::Value as Json;

fn fixtures() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), PathBuf::from)
        .join("../../fixtures")
}

fn fixture_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    let dirs = ["pte", "zoo"].map(|d| std::fs::read_dir(fixtures().join(d)));
    for dir in dirs.into_iter().flatten().flatten().flatten() {
        for f in std::fs::read_dir(dir.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let p = f.path();
            if p.extension().is_some_and(|e| e == "pte") {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

fn strings(v: Option<&Json>) -> Option<Vec<String>> {
    v?.as_array()?
        .iter()
        .map(|s| s.as_str().map(str::to_owned))
        .collect()
}

#[test]
fn every_fixture_decodes() {
    let files = fixture_files();
    eprintln!("{} program fixture(s) under fixtures/pte", files.len());
    for path in &files {
        let bytes = std::fs::read(path).expect("readable fixture");
        let p = Program::decode(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(!p.plans().is_empty(), "{}: no plans", path.display());
        for plan in p.plans() {
            for (i, d) in plan.delegates.iter().enumerate() {
                let payload = p
                    .delegate_payload(d)
                    .unwrap_or_else(|e| panic!("{}: delegate {i}: {e}", path.display()));
                if d.id != VULKAN_BACKEND_ID {
                    continue;
                }
                let g = VkGraph::decode(payload)
                    .unwrap_or_else(|e| panic!("{}: delegate {i}: {e}", path.display()));
                for c in 0..g.constants.len() {
                    g.constant(c, &p).unwrap_or_else(|e| {
                        panic!("{}: delegate {i} constant {c}: {e}", path.display())
                    });
                }
                let ops: Vec<&str> = g.op_names().into_iter().map(|(op, _)| op).collect();
                eprintln!("{}: {} delegate {i}: {ops:?}", path.display(), plan.name);
            }
        }
        let meta = path.with_file_name("meta.json");
        if let Ok(text) = std::fs::read_to_string(&meta) {
            let meta: Json = serde_json::from_str(&text).expect("meta.json parses");
            if let Some(recorded) = meta.get("program") {
                check_against_meta(path, &p, recorded);
            }
        }
    }
}

/// flatc leaves an empty `[long]` aligned for its length alone: in this export, the size list
/// of a 0-d constant (hardsigmoid's `3`) sits at an offset ≡ 4 (mod 8). ExecuTorch's runtime
/// loads the file, and so must the decoder.
#[test]
fn empty_long_lists_as_flatc_writes_them() {
    let path = fixtures().join("zoo/mobilenet_v3_small/model.pte");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let p = Program::decode(&bytes).expect("program decodes");
    let forward = p.forward().expect("forward plan");
    let payload = p.delegate_payload(&forward.delegates[0]).expect("payload");
    let g = VkGraph::decode(payload).expect("the VkGraph decodes");
    assert!(
        g.op_names()
            .iter()
            .any(|(op, _)| *op == "aten.hardswish.default")
    );
}

/// Compares the decoded program with what the exporter recorded about it.
fn check_against_meta(path: &Path, p: &Program<'_>, m: &Json) {
    let at = path.display();
    let plan = p.plans().first().expect("a plan");
    if let Some(name) = m.get("plan").and_then(Json::as_str) {
        assert_eq!(plan.name, name, "{at}: plan name");
    }
    if let Some(ops) = strings(m.get("operators")) {
        let ours: Vec<String> = plan.operators.iter().map(|o| o.to_string()).collect();
        assert_eq!(ours, ops, "{at}: operators");
    }
    if let Some(n) = m.get("num_values").and_then(Json::as_u64) {
        assert_eq!(plan.values.len() as u64, n, "{at}: values");
    }
    if let Some(n) = m.get("named_data_entries").and_then(Json::as_u64) {
        assert_eq!(
            p.named_data_entries().len() as u64,
            n,
            "{at}: named data entries"
        );
    }
    if let Some(segs) = m.get("segments").and_then(Json::as_array) {
        let ours: Vec<(u64, u64)> = p
            .segment_table()
            .iter()
            .map(|s| (s.offset, s.size))
            .collect();
        let theirs: Vec<(u64, u64)> = segs
            .iter()
            .map(|s| {
                let f = |k: &str| s.get(k).and_then(Json::as_u64).unwrap_or(u64::MAX);
                (f("offset"), f("size"))
            })
            .collect();
        assert_eq!(ours, theirs, "{at}: segments");
    }
    if let Some(eh) = m.get("extended_header").filter(|e| !e.is_null()) {
        let h = p.extended_header().expect("an extended header");
        assert_eq!(
            Some(h.program_size),
            eh.get("program_size").and_then(Json::as_u64),
            "{at}"
        );
        assert_eq!(
            Some(h.segment_base_offset),
            eh.get("segment_base_offset").and_then(Json::as_u64),
            "{at}"
        );
    }
    for d in m
        .get("delegates")
        .and_then(Json::as_array)
        .into_iter()
        .flatten()
    {
        check_delegate(path, p, d);
    }
}

fn check_delegate(path: &Path, p: &Program<'_>, m: &Json) {
    let plan = p.plans().first().expect("a plan");
    let i = m
        .get("index")
        .and_then(Json::as_u64)
        .expect("delegate index") as usize;
    let at = format!("{}: delegate {i}", path.display());
    let d = plan
        .delegates
        .get(i)
        .unwrap_or_else(|| panic!("{at}: missing"));
    assert_eq!(Some(d.id), m.get("id").and_then(Json::as_str), "{at}: id");
    let location = match d.processed.location {
        DataLocation::Inline => "INLINE",
        DataLocation::Segment => "SEGMENT",
    };
    assert_eq!(
        Some(location),
        m.get("location").and_then(Json::as_str),
        "{at}"
    );
    assert_eq!(
        Some(u64::from(d.processed.index)),
        m.get("location_index").and_then(Json::as_u64),
        "{at}: location index"
    );
    let payload = p.delegate_payload(d).expect("payload");
    assert_eq!(
        Some(payload.len() as u64),
        m.get("payload_bytes").and_then(Json::as_u64),
        "{at}: payload size"
    );
    if let Some(magic) = m.get("vgf_magic").and_then(Json::as_str) {
        let ours: String = payload
            .iter()
            .take(16)
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(ours, magic, "{at}: VGF payload start");
    }
    let Some(chain) = strings(m.get("vk_chain")) else {
        return;
    };
    let g = VkGraph::decode(payload).expect("graph");
    let ours: Vec<&str> = g.chain.iter().map(|c| c.name).collect();
    assert_eq!(ours, chain, "{at}: Vulkan chain");
    let count = |k: &str| m.get(k).and_then(Json::as_u64);
    assert_eq!(
        Some(g.values.len() as u64),
        count("vk_values"),
        "{at}: Vulkan values"
    );
    assert_eq!(
        Some(g.constants.len() as u64),
        count("vk_constants"),
        "{at}"
    );
    let named = g.constants.iter().filter(|c| c.is_named()).count() as u64;
    assert_eq!(Some(named), count("vk_constants_in_named_data"), "{at}");
    let ids =
        |k: &str| -> Option<Vec<u64>> { m.get(k)?.as_array()?.iter().map(Json::as_u64).collect() };
    let ours = |v: &[u32]| v.iter().map(|&x| u64::from(x)).collect::<Vec<_>>();
    assert_eq!(
        Some(ours(&g.input_ids)),
        ids("vk_inputs"),
        "{at}: Vulkan inputs"
    );
    assert_eq!(
        Some(ours(&g.output_ids)),
        ids("vk_outputs"),
        "{at}: Vulkan outputs"
    );
}
