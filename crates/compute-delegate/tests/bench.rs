//! The bench function runs once in quick mode as a smoke test (no timing assertions).

use vk_core::DType;
use vk_core::testing::{self, assert_no_validation_errors};

#[test]
fn quick_bench_runs_every_op_and_reports_ratios() {
    let Some((instance, dev)) = testing::device(
        "quick_bench_runs_every_op_and_reports_ratios",
        &compute_delegate::bench_requirements(),
    ) else {
        return;
    };
    let f16 = compute_delegate::supports_f16(&dev);
    let rows = compute_delegate::bench(&dev, None, true).unwrap();
    for r in &rows {
        eprintln!("{}", r.line());
        if r.op.ends_with("_f16") {
            if !f16 {
                assert!(
                    r.error
                        .as_deref()
                        .is_some_and(|e| e.contains("shaderFloat16"))
                );
                continue;
            }
            // Rows with an fp32 twin of the same shape report the speed-up over it.
            let op32 = r.op.trim_end_matches("_f16");
            if rows.iter().any(|f| f.op == op32 && f.shape == r.shape) {
                assert!(r.vs_f32.is_some_and(|v| v > 0.0), "{r:?}");
            }
            // fp16 kernels (fp16 variants, cooperative matrices), plus the fp32 summing pass
            // of split-K (sum, clamp, narrow).
            assert!(r.float_types.contains(&DType::F16), "{r:?}");
            assert!(
                r.kernels.iter().zip(&r.float_types).all(|(k, t)| {
                    *t == DType::F16 || ["Reduce", "Unary", "Cast"].contains(&k.as_str())
                }),
                "{r:?}"
            );
        }
        assert!(
            r.device_ms > 0.0 && r.throughput > 0.0 && r.ratio > 0.0,
            "{r:?}"
        );
    }
    let ops: Vec<&str> = rows.iter().map(|r| r.op.as_str()).collect();
    for op in [
        "copy",
        "fma_peak",
        "add",
        "sigmoid",
        "avg_pool2x2",
        "softmax",
        "conv3x3",
        "matmul",
        "add_f16",
        "softmax_f16",
        "conv3x3_f16",
        "matmul_f16",
        "linear_f16",
    ] {
        assert!(ops.contains(&op), "{op} missing from {ops:?}");
    }
    let only = compute_delegate::bench(&dev, Some("matmul"), true).unwrap();
    assert!(
        only.iter()
            .all(|r| ["copy", "fma_peak", "matmul", "matmul_f16"].contains(&r.op.as_str()))
    );
    drop(dev);
    assert_no_validation_errors(&instance);
}
