//! The GRAPH module decoder (no GPU): every corpus model's data graph, its operators, its
//! ports against the file's resources, and malformed modules with the error each must give.
#![allow(clippy::unwrap_used)] // helpers outside #[test] functions

mod common;

use std::collections::BTreeMap;
use vgf_delegate::format::ModuleType;
use vgf_delegate::tosa::{Element, Operand, Operator, TosaError, TosaGraph};
use vgf_delegate::{Category, Vgf};

/// The words of a corpus model's one GRAPH module.
fn graph_words(model: &str) -> Vec<u32> {
    let bytes = std::fs::read(common::corpus_dir().join(model).join("model.vgf")).unwrap();
    let vgf = Vgf::decode(&bytes).unwrap();
    let module = vgf
        .modules
        .iter()
        .find(|m| m.kind == ModuleType::Graph)
        .unwrap_or_else(|| panic!("{model}: no GRAPH module"));
    module.spirv.as_ref().unwrap().words().into_owned()
}

/// How many of each operator a graph holds.
fn census(g: &TosaGraph) -> BTreeMap<&'static str, usize> {
    let mut out = BTreeMap::new();
    for n in &g.nodes {
        *out.entry(n.op.name()).or_default() += 1;
    }
    out
}

#[test]
fn every_corpus_graph_decodes_with_its_operators() {
    let want: &[(&str, &[(&str, usize)])] = &[
        ("add", &[("ADD", 1)]),
        ("add_int8", &[("ADD", 1), ("RESCALE", 3)]),
        ("argmax", &[("ARGMAX", 1), ("MUL", 1)]),
        ("argmax_fp16", &[("ARGMAX", 1), ("MUL", 1)]),
        (
            "attention",
            &[
                ("CONV2D", 2),
                ("EXP", 1),
                ("MATMUL", 2),
                ("MUL", 2),
                ("RECIPROCAL", 1),
                ("REDUCE_MAX", 1),
                ("REDUCE_SUM", 1),
                ("RESHAPE", 11),
                ("SLICE", 3),
                ("SUB", 1),
                ("TRANSPOSE", 3),
            ],
        ),
        (
            "attention_fp16",
            &[
                ("CAST", 2),
                ("CONV2D", 2),
                ("EXP", 1),
                ("MATMUL", 2),
                ("MUL", 2),
                ("RECIPROCAL", 1),
                ("REDUCE_MAX", 1),
                ("REDUCE_SUM", 1),
                ("RESHAPE", 11),
                ("SLICE", 3),
                ("SUB", 1),
                ("TRANSPOSE", 3),
            ],
        ),
        (
            "attention_int16",
            &[
                ("CONV2D", 2),
                ("MATMUL", 2),
                ("MUL", 2),
                ("REDUCE_MAX", 1),
                ("REDUCE_SUM", 1),
                ("RESCALE", 17),
                ("RESHAPE", 11),
                ("SLICE", 3),
                ("SUB", 1),
                ("TABLE", 2),
                ("TRANSPOSE", 3),
            ],
        ),
        (
            "attention_int8",
            &[
                ("CONV2D", 2),
                ("MATMUL", 2),
                ("MUL", 2),
                ("REDUCE_MAX", 1),
                ("REDUCE_SUM", 1),
                ("RESCALE", 15),
                ("RESHAPE", 11),
                ("SLICE", 3),
                ("SUB", 1),
                ("TABLE", 2),
                ("TRANSPOSE", 3),
            ],
        ),
        ("avgpool", &[("AVG_POOL2D", 1), ("TRANSPOSE", 2)]),
        (
            "bitwise",
            &[
                ("ABS", 2),
                ("ADD", 1),
                ("ARITHMETIC_RIGHT_SHIFT", 1),
                ("BITWISE_AND", 1),
                ("BITWISE_NOT", 1),
                ("BITWISE_OR", 1),
                ("BITWISE_XOR", 1),
                ("INTDIV", 1),
                ("LOGICAL_LEFT_SHIFT", 1),
                ("MAXIMUM", 1),
                ("SUB", 1),
            ],
        ),
        ("casts", &[("CAST", 3), ("MUL", 1)]),
        ("conv", &[("CONV2D", 1), ("TRANSPOSE", 2)]),
        ("conv3d", &[("CLAMP", 1), ("CONV3D", 1), ("TRANSPOSE", 2)]),
        (
            "conv3d_fp16",
            &[("CLAMP", 1), ("CONV3D", 1), ("TRANSPOSE", 2)],
        ),
        (
            "conv3d_int16",
            &[
                ("CLAMP", 1),
                ("CONV3D", 1),
                ("RESCALE", 1),
                ("TRANSPOSE", 2),
            ],
        ),
        (
            "conv3d_int8",
            &[("CONV3D", 1), ("RESCALE", 1), ("TRANSPOSE", 2)],
        ),
        ("conv_fp16", &[("CONV2D", 1), ("TRANSPOSE", 2)]),
        (
            "conv_int16",
            &[("CONV2D", 1), ("RESCALE", 1), ("TRANSPOSE", 2)],
        ),
        (
            "conv_int8",
            &[("CONV2D", 1), ("RESCALE", 1), ("TRANSPOSE", 2)],
        ),
        (
            "elementwise",
            &[
                ("ABS", 1),
                ("ADD", 1),
                ("CEIL", 1),
                ("CONCAT", 1),
                ("COS", 1),
                ("EQUAL", 1),
                ("ERF", 1),
                ("EXP", 1),
                ("FLOOR", 3),
                ("GREATER", 1),
                ("GREATER_EQUAL", 1),
                ("LOG", 1),
                ("MAXIMUM", 1),
                ("MINIMUM", 1),
                ("MUL", 3),
                ("NEGATE", 2),
                ("POW", 1),
                ("RECIPROCAL", 1),
                ("RSQRT", 1),
                ("SELECT", 3),
                ("SIGMOID", 1),
                ("SIN", 1),
                ("TANH", 1),
            ],
        ),
        (
            "elementwise_fp16",
            &[
                ("ABS", 1),
                ("ADD", 1),
                ("CEIL", 1),
                ("CONCAT", 1),
                ("COS", 1),
                ("EQUAL", 1),
                ("ERF", 1),
                ("EXP", 1),
                ("FLOOR", 3),
                ("GREATER", 1),
                ("GREATER_EQUAL", 1),
                ("LOG", 1),
                ("MAXIMUM", 1),
                ("MINIMUM", 1),
                ("MUL", 3),
                ("NEGATE", 2),
                ("POW", 1),
                ("RECIPROCAL", 1),
                ("RSQRT", 1),
                ("SELECT", 3),
                ("SIGMOID", 1),
                ("SIN", 1),
                ("TANH", 1),
            ],
        ),
        (
            "elementwise_int16",
            &[
                ("ABS", 1),
                ("CLAMP", 1),
                ("CONCAT", 1),
                ("EQUAL", 1),
                ("GREATER", 1),
                ("GREATER_EQUAL", 1),
                ("MAXIMUM", 1),
                ("MINIMUM", 1),
                ("MUL", 1),
                ("NEGATE", 1),
                ("RESCALE", 24),
                ("RESHAPE", 1),
                ("SELECT", 3),
                ("SUB", 1),
                ("TABLE", 4),
            ],
        ),
        (
            "elementwise_int8",
            &[
                ("ABS", 1),
                ("CLAMP", 1),
                ("CONCAT", 1),
                ("EQUAL", 1),
                ("GREATER", 1),
                ("GREATER_EQUAL", 1),
                ("MAXIMUM", 1),
                ("MINIMUM", 1),
                ("MUL", 1),
                ("NEGATE", 1),
                ("RESCALE", 20),
                ("RESHAPE", 1),
                ("SELECT", 3),
                ("SUB", 1),
                ("TABLE", 4),
            ],
        ),
        (
            "gather",
            &[("CAST", 6), ("CONV2D", 1), ("GATHER", 1), ("RESHAPE", 3)],
        ),
        (
            "gather_fp16",
            &[("CAST", 6), ("CONV2D", 1), ("GATHER", 1), ("RESHAPE", 3)],
        ),
        (
            "gelu_mlp",
            &[
                ("ADD", 3),
                ("CONV2D", 2),
                ("ERF", 1),
                ("EXP", 1),
                ("MUL", 8),
                ("RECIPROCAL", 1),
                ("REDUCE_MAX", 1),
                ("REDUCE_SUM", 3),
                ("RESHAPE", 6),
                ("RSQRT", 1),
                ("SUB", 2),
            ],
        ),
        (
            "gelu_mlp_fp16",
            &[
                ("ADD", 3),
                ("CONV2D", 2),
                ("ERF", 1),
                ("EXP", 1),
                ("MUL", 8),
                ("RECIPROCAL", 1),
                ("REDUCE_MAX", 1),
                ("REDUCE_SUM", 3),
                ("RESHAPE", 6),
                ("RSQRT", 1),
                ("SUB", 2),
            ],
        ),
        (
            "gelu_mlp_int16",
            &[
                ("ADD", 3),
                ("CONV2D", 2),
                ("MUL", 7),
                ("REDUCE_MAX", 1),
                ("REDUCE_SUM", 3),
                ("RESCALE", 42),
                ("RESHAPE", 7),
                ("SUB", 3),
                ("TABLE", 4),
            ],
        ),
        (
            "gelu_mlp_int8",
            &[
                ("ADD", 3),
                ("CONV2D", 2),
                ("MUL", 7),
                ("REDUCE_MAX", 1),
                ("REDUCE_SUM", 3),
                ("RESCALE", 45),
                ("RESHAPE", 7),
                ("SUB", 3),
                ("TABLE", 4),
            ],
        ),
        (
            "logical",
            &[
                ("GREATER", 2),
                ("LOGICAL_AND", 1),
                ("LOGICAL_NOT", 1),
                ("LOGICAL_OR", 1),
                ("LOGICAL_XOR", 1),
                ("MUL", 1),
                ("SELECT", 2),
            ],
        ),
        (
            "logical_fp16",
            &[
                ("GREATER", 2),
                ("LOGICAL_AND", 1),
                ("LOGICAL_NOT", 1),
                ("LOGICAL_OR", 1),
                ("LOGICAL_XOR", 1),
                ("MUL", 1),
                ("SELECT", 2),
            ],
        ),
        (
            "logical_int8",
            &[
                ("GREATER", 2),
                ("LOGICAL_AND", 1),
                ("LOGICAL_NOT", 1),
                ("LOGICAL_OR", 1),
                ("LOGICAL_XOR", 1),
                ("MUL", 1),
                ("RESCALE", 7),
                ("RESHAPE", 2),
                ("SELECT", 2),
            ],
        ),
        ("mlp", &[("CLAMP", 1), ("CONV2D", 2), ("RESHAPE", 2)]),
        (
            "mlp_int16",
            &[("CLAMP", 1), ("CONV2D", 2), ("RESCALE", 2), ("RESHAPE", 2)],
        ),
        (
            "mobilenet_v2",
            &[
                ("ADD", 10),
                ("CLAMP", 35),
                ("CONV2D", 36),
                ("DEPTHWISE_CONV2D", 17),
                ("MUL", 1),
                ("REDUCE_SUM", 2),
                ("RESHAPE", 1),
                ("TRANSPOSE", 1),
            ],
        ),
        (
            "mobilenet_v2_small_int8",
            &[
                ("ADD", 10),
                ("AVG_POOL2D", 1),
                ("CONV2D", 36),
                ("DEPTHWISE_CONV2D", 17),
                ("RESCALE", 83),
                ("RESHAPE", 1),
                ("TRANSPOSE", 1),
            ],
        ),
        (
            "movement",
            &[
                ("ADD", 1),
                ("MATMUL", 1),
                ("MAX_POOL2D", 1),
                ("PAD", 1),
                ("REDUCE_MAX", 1),
                ("REDUCE_MIN", 1),
                ("REDUCE_SUM", 1),
                ("RESHAPE", 2),
                ("TILE", 1),
                ("TRANSPOSE", 3),
                ("TRANSPOSE_CONV2D", 1),
            ],
        ),
        (
            "movement_fp16",
            &[
                ("ADD", 1),
                ("CAST", 1),
                ("MATMUL", 1),
                ("MAX_POOL2D", 1),
                ("PAD", 1),
                ("REDUCE_MAX", 1),
                ("REDUCE_MIN", 1),
                ("REDUCE_SUM", 1),
                ("RESHAPE", 2),
                ("TILE", 1),
                ("TRANSPOSE", 3),
                ("TRANSPOSE_CONV2D", 1),
            ],
        ),
        (
            "movement_int16",
            &[
                ("ADD", 1),
                ("MATMUL", 1),
                ("MAX_POOL2D", 1),
                ("PAD", 1),
                ("REDUCE_MAX", 1),
                ("REDUCE_MIN", 1),
                ("REDUCE_SUM", 1),
                ("RESCALE", 7),
                ("RESHAPE", 2),
                ("TILE", 1),
                ("TRANSPOSE", 3),
                ("TRANSPOSE_CONV2D", 1),
            ],
        ),
        (
            "movement_int8",
            &[
                ("ADD", 1),
                ("MATMUL", 1),
                ("MAX_POOL2D", 1),
                ("PAD", 1),
                ("REDUCE_MAX", 1),
                ("REDUCE_MIN", 1),
                ("REDUCE_SUM", 1),
                ("RESCALE", 7),
                ("RESHAPE", 2),
                ("TILE", 1),
                ("TRANSPOSE", 3),
                ("TRANSPOSE_CONV2D", 1),
            ],
        ),
        (
            "moves_fp16",
            &[
                ("CONCAT", 1),
                ("CONV2D", 1),
                ("MAX_POOL2D", 1),
                ("PAD", 1),
                ("REVERSE", 1),
                ("SLICE", 1),
                ("TILE", 1),
                ("TRANSPOSE", 3),
            ],
        ),
        (
            "moves_int16",
            &[
                ("CONCAT", 1),
                ("CONV2D", 1),
                ("MAX_POOL2D", 1),
                ("PAD", 1),
                ("RESCALE", 1),
                ("REVERSE", 1),
                ("SLICE", 1),
                ("TILE", 1),
                ("TRANSPOSE", 3),
            ],
        ),
        (
            "pools_fp16",
            &[
                ("AVG_POOL2D", 2),
                ("CONV2D", 1),
                ("MUL", 1),
                ("REDUCE_SUM", 2),
                ("SLICE", 1),
                ("TRANSPOSE", 4),
            ],
        ),
        (
            "pools_int16",
            &[
                ("AVG_POOL2D", 3),
                ("CONV2D", 1),
                ("RESCALE", 1),
                ("RESHAPE", 1),
                ("SLICE", 1),
                ("TRANSPOSE", 3),
            ],
        ),
        (
            "pools_int8",
            &[
                ("AVG_POOL2D", 3),
                ("CONV2D", 1),
                ("RESCALE", 1),
                ("RESHAPE", 1),
                ("SLICE", 1),
                ("TRANSPOSE", 3),
            ],
        ),
        (
            "reductions",
            &[
                ("GREATER", 1),
                ("LOGICAL_NOT", 1),
                ("MUL", 1),
                ("NEGATE", 1),
                ("REDUCE_ANY", 2),
                ("REDUCE_PRODUCT", 1),
                ("SELECT", 2),
            ],
        ),
        (
            "reductions_fp16",
            &[
                ("GREATER", 1),
                ("LOGICAL_NOT", 1),
                ("MUL", 1),
                ("NEGATE", 1),
                ("REDUCE_ANY", 2),
                ("REDUCE_PRODUCT", 1),
                ("SELECT", 2),
            ],
        ),
        ("resize", &[("RESIZE", 3), ("REVERSE", 1), ("TRANSPOSE", 4)]),
        (
            "resize_fp16",
            &[("RESIZE", 3), ("REVERSE", 1), ("TRANSPOSE", 4)],
        ),
        (
            "resize_int16",
            &[
                ("RESCALE", 2),
                ("RESIZE", 3),
                ("REVERSE", 1),
                ("TRANSPOSE", 4),
            ],
        ),
        (
            "resize_int8",
            &[
                ("RESCALE", 2),
                ("RESIZE", 3),
                ("REVERSE", 1),
                ("TRANSPOSE", 4),
            ],
        ),
        ("sqplus", &[("ADD", 1), ("MUL", 1)]),
        ("sqplus_1x3x4x4", &[("ADD", 1), ("MUL", 1)]),
    ];
    let models = common::corpus_models();
    assert_eq!(models.len(), want.len(), "the corpus changed: {models:?}");
    for (model, ops) in want {
        let g = TosaGraph::decode(&graph_words(model)).unwrap_or_else(|e| panic!("{model}: {e}"));
        let ops: BTreeMap<&str, usize> = ops.iter().copied().collect();
        assert_eq!(census(&g), ops, "{model}");
        assert_eq!(g.results.len(), g.outputs.len(), "{model}");
        // Each operator reads only what comes before it.
        for (i, n) in g.nodes.iter().enumerate() {
            for o in &n.operands {
                if let Operand::Node(j) = o {
                    assert!(*j < i, "{model}: node {i} reads node {j}");
                }
            }
        }
    }
}

/// The graph's ports are the file's model inputs and outputs: same shapes, same bindings.
#[test]
fn graph_ports_are_the_files_resources() {
    for dir in common::corpus_models() {
        let model = dir.file_name().unwrap().to_string_lossy().to_string();
        let bytes = std::fs::read(dir.join("model.vgf")).unwrap();
        let vgf = Vgf::decode(&bytes).unwrap();
        let g = TosaGraph::decode(&graph_words(&model)).unwrap();
        let segment = &vgf.sequence.segments[0];
        for port in g.inputs.iter().chain(&g.outputs) {
            let (set, binding) = (port.set.unwrap(), port.binding.unwrap());
            let ds = segment
                .descriptor_sets
                .iter()
                .find(|d| d.set_index == set)
                .unwrap_or_else(|| panic!("{model}: no descriptor set {set}"));
            let b = ds.bindings.iter().find(|b| b.binding == binding).unwrap();
            let r = vgf.resource(b.mrt_index).unwrap();
            assert!(
                matches!(r.category, Category::Input | Category::Output),
                "{model}"
            );
            let shape: Vec<u64> = r.shape.iter().map(|&d| d as u64).collect();
            assert_eq!(
                port.ty.shape.as_ref(),
                Some(&shape),
                "{model}: binding {binding}"
            );
        }
    }
}

/// Attributes arrive as constants: conv's CONV2D pads by one on each side with unit strides,
/// and reads its weights from graph constant 0.
#[test]
fn operator_attributes_are_resolved_constants() {
    let g = TosaGraph::decode(&graph_words("conv")).unwrap();
    let conv = g.nodes.iter().find(|n| n.op == Operator::Conv2d).unwrap();
    let ints = |i: usize| match &conv.operands[i] {
        Operand::Constant(c) => c.ints().unwrap(),
        other => panic!("operand {i}: {other:?}"),
    };
    assert_eq!(ints(0), [1, 1, 1, 1], "pad");
    assert_eq!(ints(1), [1, 1], "stride");
    assert_eq!(ints(2), [1, 1], "dilation");
    assert!(matches!(
        conv.operands[6],
        Operand::GraphConstant { id: 0, .. }
    ));
    assert_eq!(conv.result.element, Element::Float(32));
    assert_eq!(g.inputs[0].ty.shape, Some(vec![1, 3, 16, 16]));
}

/// Where the instruction `opcode` (with `count` words) first appears, from word 5 on.
fn find(words: &[u32], opcode: u32, nth: usize) -> usize {
    let mut at = 5;
    let mut seen = 0;
    while at < words.len() {
        let (count, op) = ((words[at] >> 16) as usize, words[at] & 0xffff);
        if op == opcode {
            if seen == nth {
                return at;
            }
            seen += 1;
        }
        at += count;
    }
    panic!("no opcode {opcode}");
}

#[test]
fn malformed_graph_modules_get_named_errors() {
    let words = graph_words("add");
    let ext = find(&words, 12, 0);
    let check = |what: &str, bad: Vec<u32>, ok: &dyn Fn(&TosaError) -> bool| {
        let e = TosaGraph::decode(&bad).expect_err(what);
        assert!(ok(&e), "{what}: {e:?}");
        assert!(!e.to_string().is_empty());
    };
    check("not SPIR-V", vec![1, 2, 3], &|e| {
        matches!(e, TosaError::NotSpirv { words: 3, .. })
    });
    check(
        "cut inside an instruction",
        words[..ext + 3].to_vec(),
        &|e| matches!(e, TosaError::Truncated { at, remain: 3, .. } if *at == ext),
    );
    let mut unknown = words.clone();
    unknown[ext + 4] = 99;
    check(
        "instruction 99",
        unknown,
        &|e| matches!(e, TosaError::UnknownOperator { number: 99, at } if *at == ext),
    );
    let mut conv = words.clone();
    conv[ext + 4] = 2;
    check("ADD's operands under CONV2D", conv, &|e| {
        matches!(
            e,
            TosaError::OperandCount {
                op: "CONV2D",
                found: 2,
                ..
            }
        )
    });
    let mut undefined = words.clone();
    undefined[ext + 5] = 4000;
    check("an undefined operand", undefined, &|e| {
        matches!(e, TosaError::BadId { id: 4000, .. })
    });
    let mut no_end = words.clone();
    let end = find(&words, 4186, 0);
    no_end[end] = 1 << 16; // OpNop
    check("no OpGraphEndARM", no_end, &|e| {
        matches!(e, TosaError::Graph(_))
    });
    let mut body = words.clone();
    body[end] = 1 << 16 | 17; // OpCapability, a word short, inside the body
    check("a stray instruction", body, &|e| {
        matches!(e, TosaError::UnexpectedInBody { opcode: 17, .. })
    });
}

/// A deterministic mutation run over the corpus graphs: every mutant decodes or gives an
/// error, never a panic.
#[test]
fn mutated_graph_modules_never_panic() {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for model in ["add", "conv", "conv_int8", "mlp", "avgpool"] {
        let words = graph_words(model);
        for _ in 0..2000 {
            let mut m = words.clone();
            for _ in 0..1 + next() % 4 {
                let i = 5 + (next() as usize) % (m.len() - 5);
                m[i] = match next() % 3 {
                    0 => next() as u32,
                    1 => m[i] ^ (1 << (next() % 32)),
                    _ => (next() % 64) as u32,
                };
            }
            let _ = TosaGraph::decode(&m).map_err(|e| e.to_string());
        }
    }
}
