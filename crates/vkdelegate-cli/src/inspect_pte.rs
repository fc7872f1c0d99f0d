//! `vkdelegate inspect MODEL.pte [--json]`: an ExecuTorch program's plans (inputs, outputs,
//! values), instructions, delegates with the ops inside them, and what this build cannot run.

use std::path::Path;

use serde_json::{Value as Json, json};
use vkdelegate::pte::format::{
    ExecutionPlan, Instruction, Program, VGF_BACKEND_ID, VULKAN_BACKEND_ID, Value, VkGraph,
};

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

fn tensor_json(plan: &ExecutionPlan<'_>, v: u32) -> Json {
    match plan.values.get(v as usize) {
        Some(Value::Tensor(t)) => {
            json!({"value": v, "dtype": t.scalar_type.as_str(), "sizes": t.sizes})
        }
        Some(Value::Int(n)) => json!({"value": v, "kind": "Int", "constant": n}),
        Some(Value::Double(x)) => json!({"value": v, "kind": "Double", "constant": x}),
        Some(Value::Bool(b)) => json!({"value": v, "kind": "Bool", "constant": b}),
        Some(Value::IntList(l)) => json!({"value": v, "kind": "IntList", "constant": l}),
        Some(other) => json!({"value": v, "kind": other.kind()}),
        None => json!({"value": v, "kind": "missing"}),
    }
}

fn instruction_json(plan: &ExecutionPlan<'_>, i: &Instruction) -> Json {
    match i {
        Instruction::DelegateCall {
            delegate_index,
            args,
        } => json!({
            "kind": "DelegateCall",
            "delegate": delegate_index,
            "backend": plan.delegates.get(*delegate_index as usize).map(|d| d.id),
            "args": args,
        }),
        Instruction::KernelCall { op_index, args } => json!({
            "kind": "KernelCall",
            "op": plan.operators.get(*op_index as usize).map(|o| o.to_string()),
            "args": args,
        }),
        other => json!({"kind": other.kind()}),
    }
}

fn delegate_json(pte: &Program<'_>, plan: &ExecutionPlan<'_>, index: usize) -> Json {
    let Some(d) = plan.delegates.get(index) else {
        return Json::Null;
    };
    let specs: Vec<&str> = d.compile_specs.iter().map(|c| c.key).collect();
    let mut out = json!({"index": index, "backend": d.id, "compile_specs": specs});
    let payload = match pte.delegate_payload(d) {
        Ok(p) => p,
        Err(e) => {
            out["error"] = json!(e.to_string());
            return out;
        }
    };
    out["payload_bytes"] = json!(payload.len());
    if d.id == VULKAN_BACKEND_ID {
        match VkGraph::decode(payload) {
            Ok(g) => {
                let ops: Vec<Json> = g
                    .op_names()
                    .into_iter()
                    .map(|(name, nodes)| json!({"op": name, "nodes": nodes.len()}))
                    .collect();
                out["nodes"] = json!(g.chain.len());
                out["ops"] = json!(ops);
                out["constants"] = json!(g.constants.len());
            }
            Err(e) => out["error"] = json!(e.to_string()),
        }
    } else if d.id == VGF_BACKEND_ID {
        out["format"] = json!("VGF (raw bytes)");
    }
    out
}

fn plan_json(pte: &Program<'_>, plan: &ExecutionPlan<'_>) -> Json {
    let inputs: Vec<Json> = plan.inputs.iter().map(|&v| tensor_json(plan, v)).collect();
    let outputs: Vec<Json> = plan.outputs.iter().map(|&v| tensor_json(plan, v)).collect();
    let instructions: Vec<Json> = plan
        .instructions()
        .map(|i| instruction_json(plan, i))
        .collect();
    let delegates: Vec<Json> = (0..plan.delegates.len())
        .map(|i| delegate_json(pte, plan, i))
        .collect();
    json!({
        "name": plan.name, "values": plan.values.len(), "inputs": inputs, "outputs": outputs,
        "instructions": instructions, "delegates": delegates,
    })
}

/// Everything `inspect` says about the file, as JSON.
pub fn describe(bytes: &[u8]) -> Result<Json> {
    let pte = Program::decode(bytes)?;
    let plans: Vec<Json> = pte.plans().iter().map(|p| plan_json(&pte, p)).collect();
    let mut unsupported = serde_json::Map::new();
    for plan in pte.plans() {
        let problems = match vkdelegate::pte::program_builder(bytes.into(), Some(plan.name)) {
            Ok(_) => Vec::new(),
            Err(vkdelegate::pte::PteError::Unsupported(list)) => list
                .into_iter()
                .map(|u| json!({"op": u.what, "where": u.location}))
                .collect(),
            Err(e) => vec![json!({"error": e.to_string()})],
        };
        unsupported.insert(plan.name.to_owned(), json!(problems));
    }
    Ok(json!({
        "bytes": bytes.len(),
        "segments": pte.segment_table().len(),
        "named_data": pte.named_data_entries().len(),
        "plans": plans,
        "unsupported": unsupported,
    }))
}

fn print_text(model: &Path, d: &Json) {
    println!(
        "{}: ExecuTorch program, {} bytes, {} segment(s), {} named data entr(ies)",
        model.display(),
        d["bytes"],
        d["segments"],
        d["named_data"]
    );
    for plan in d["plans"].as_array().into_iter().flatten() {
        let name = plan["name"].as_str().unwrap_or("?");
        println!("plan '{name}': {} values", plan["values"]);
        for (what, key) in [("input", "inputs"), ("output", "outputs")] {
            for (i, t) in plan[key].as_array().into_iter().flatten().enumerate() {
                match (&t["dtype"], &t["constant"]) {
                    (Json::String(dtype), _) => {
                        println!("  {what} {i}: value {} {dtype} {}", t["value"], t["sizes"])
                    }
                    (_, Json::Null) => println!("  {what} {i}: value {} {}", t["value"], kind(t)),
                    (_, c) => println!("  {what} {i}: value {} {} {c}", t["value"], kind(t)),
                }
            }
        }
        for (k, i) in plan["instructions"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let what = i["backend"].as_str().or(i["op"].as_str()).unwrap_or("");
            println!(
                "  [{k}] {} {what} args {}",
                i["kind"].as_str().unwrap_or("?"),
                i["args"]
            );
        }
        for dl in plan["delegates"].as_array().into_iter().flatten() {
            let ops: Vec<String> = dl["ops"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|o| format!("{} x{}", o["op"].as_str().unwrap_or("?"), o["nodes"]))
                .collect();
            println!(
                "  delegate {} {}: {} bytes{}",
                dl["index"],
                dl["backend"].as_str().unwrap_or("?"),
                dl["payload_bytes"],
                if ops.is_empty() {
                    String::new()
                } else {
                    format!(", ops: {}", ops.join(", "))
                }
            );
        }
        let problems = d["unsupported"][name]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if problems.is_empty() {
            println!("  runs in this build: every delegate and kernel is supported");
        }
        for p in problems {
            let what = p["op"].as_str().or(p["error"].as_str()).unwrap_or("?");
            println!(
                "  unsupported: {what} ({})",
                p["where"].as_str().unwrap_or("")
            );
        }
    }
}

/// `vkdelegate inspect MODEL.pte [--json]`.
pub fn run(model: &Path, json: bool) -> Result {
    let bytes = std::fs::read(model).map_err(|e| format!("{}: {e}", model.display()))?;
    let d = describe(&bytes).map_err(|e| format!("{}: {e}", model.display()))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&d)?);
    } else {
        print_text(model, &d);
    }
    Ok(())
}

/// A non-tensor value's kind (`Int`, `Bool`, ...).
fn kind(t: &Json) -> &str {
    t["kind"].as_str().unwrap_or("?")
}
