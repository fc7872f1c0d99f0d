//! The bench's baselines: the copy shader is the memory-bound baseline, `vkCmdCopyBuffer` an
//! extra row measured against it, and every row's device time comes as min <= median <= max
//! of several runs (no timing assertions beyond that).

use compute_delegate::BenchRow;
use vk_core::testing::{self, assert_no_validation_errors};

fn ordered(r: &BenchRow) -> bool {
    r.device.runs > 1
        && r.device.min > 0.0
        && r.device.min <= r.device.median
        && r.device.median <= r.device.max
        && r.device_ms == r.device.median
}

#[test]
fn the_copy_shader_is_the_memory_baseline_and_runs_have_a_spread() {
    let test = "the_copy_shader_is_the_memory_baseline_and_runs_have_a_spread";
    let Some((instance, dev)) = testing::device(test, &compute_delegate::requirements()) else {
        return;
    };
    let rows = compute_delegate::bench(&dev, Some("copy"), true).unwrap();
    for r in &rows {
        eprintln!("{}", r.line());
        assert!(r.error.is_none() && ordered(r), "{r:?}");
    }
    let ops: Vec<&str> = rows.iter().map(|r| r.op.as_str()).collect();
    assert_eq!(ops, ["copy", "copy_buffer", "fma_peak"]);
    let copy = &rows[0];
    assert!(copy.shape.contains("shader"), "{copy:?}");
    assert_eq!(copy.baseline_name, "copy shader bandwidth");
    assert_eq!((copy.ratio, copy.end_to_end), (1.0, None));
    let copy_buffer = &rows[1];
    assert!(
        copy_buffer.shape.contains("vkCmdCopyBuffer"),
        "{copy_buffer:?}"
    );
    assert_eq!(copy_buffer.baseline, copy.throughput);
    assert_eq!(copy_buffer.baseline_name, copy.baseline_name);

    // An op row: end-to-end spread too, and its memory-bound baseline is the copy shader.
    let add = compute_delegate::bench(&dev, Some("add"), true).unwrap();
    let ops: Vec<&str> = add.iter().map(|r| r.op.as_str()).collect();
    assert_eq!(ops, ["copy", "fma_peak", "add", "add_f16"]);
    // This device was made without the f16 features: the fp16 row fails, naming them.
    let f16 = &add[3];
    assert!(
        f16.error
            .as_deref()
            .is_some_and(|e| e.contains("shaderFloat16")),
        "{f16:?}"
    );
    let add = &add[2];
    assert!(add.error.is_none() && ordered(add), "{add:?}");
    assert_eq!(add.baseline_name, "copy shader bandwidth");
    let e2e = add.end_to_end.expect("add measures end to end");
    assert!(e2e.min <= e2e.median && e2e.median <= e2e.max, "{e2e:?}");
    assert_eq!(add.end_to_end_ms, e2e.median);
    drop(dev);
    assert_no_validation_errors(&instance);
}
