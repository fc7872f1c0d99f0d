//! fp16 GEMMs choose the cooperative-matrix kernel where the device offers it and it passes its
//! check on the device, the plain kernel elsewhere; either way the results match a host
//! reference. On lavapipe (no cooperative matrices) this checks the plain kernel; on a GPU with
//! `VK_KHR_cooperative_matrix` the same tests run the cooperative one.

#![allow(clippy::unwrap_used)] // helpers outside #[test] functions

use compute_delegate::{
    BuildOptions, Conv2d, CoopPolicy, GraphBuilder, cooperative_conv_kernel,
    cooperative_gemm_kernel,
};
use half::f16;
use vk_core::testing::{self, assert_no_validation_errors};
use vk_core::{DType, Device, HostTensor, Instance};

fn device(test: &str) -> Option<(Instance, Device)> {
    let mut g = GraphBuilder::new();
    let a = g.input("a", DType::F16, &[8, 8]).unwrap();
    let b = g.input("b", DType::F16, &[8, 8]).unwrap();
    let y = g.matmul(a, b).unwrap();
    g.output(y).unwrap();
    testing::device(test, &g.requirements())
}

/// Deterministic values in [-1, 1), exactly representable in fp16.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            f16::from_f32((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0).to_f32()
        })
        .collect()
}

fn tensor(shape: &[usize], v: &[f32]) -> HostTensor {
    let bytes = v
        .iter()
        .flat_map(|x| f16::from_f32(*x).to_le_bytes())
        .collect();
    HostTensor::new(DType::F16, shape.to_vec(), bytes).unwrap()
}

fn read(t: &HostTensor) -> Vec<f32> {
    t.bytes()
        .chunks_exact(2)
        .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect()
}

/// The kernel fp16 GEMMs should use here.
fn expected_kernel(device: &Device) -> &'static str {
    cooperative_gemm_kernel(device).unwrap_or("Gemm_f16")
}

/// `[batch, m, k] @ [batch, k, n]` (or linear with `[n, k]` weights and a bias) against f64.
fn run_gemm(device: &Device, batch: usize, m: usize, n: usize, k: usize, linear: bool) {
    let a = values(batch * m * k, 1);
    let w = values(if linear { n * k } else { batch * k * n }, 2);
    let bias = values(n, 3);
    let mut g = GraphBuilder::new();
    let x = g.input("a", DType::F16, &[batch, m, k]).unwrap();
    let (y, w_shape) = if linear {
        let wt = g.input("w", DType::F16, &[n, k]).unwrap();
        let b = g.constant("bias", tensor(&[n], &bias)).unwrap();
        (g.linear(x, wt, Some(b)).unwrap(), vec![n, k])
    } else {
        let b = g.input("b", DType::F16, &[batch, k, n]).unwrap();
        (g.matmul(x, b).unwrap(), vec![batch, k, n])
    };
    g.output(y).unwrap();
    let mut graph = g.build(device).unwrap();
    assert!(
        graph.kernels().iter().any(|k| k == expected_kernel(device)),
        "{m}x{n}x{k}: kernels {:?}, expected {}",
        graph.kernels(),
        expected_kernel(device)
    );
    let out = graph
        .execute(&[tensor(&[batch, m, k], &a), tensor(&w_shape, &w)])
        .unwrap();
    let got = read(&out[0]);
    for z in 0..batch {
        for i in 0..m {
            for j in 0..n {
                let mut r = if linear { f64::from(bias[j]) } else { 0.0 };
                for kk in 0..k {
                    let wv = if linear {
                        w[j * k + kk]
                    } else {
                        w[(z * k + kk) * n + j]
                    };
                    r += f64::from(a[(z * m + i) * k + kk]) * f64::from(wv);
                }
                let v = f64::from(got[(z * m + i) * n + j]);
                let tol = 1e-3 * (k as f64).sqrt() + 2e-3 * r.abs();
                assert!(
                    (v - r).abs() <= tol,
                    "{batch}x{m}x{n}x{k} linear={linear}: [{z}][{i}][{j}] = {v}, expected {r}"
                );
            }
        }
    }
}

#[test]
fn fp16_matmul_uses_the_chosen_kernel_and_matches() {
    let Some((instance, device)) = device("fp16_matmul_uses_the_chosen_kernel_and_matches") else {
        return;
    };
    run_gemm(&device, 1, 136, 200, 96, false);
    run_gemm(&device, 3, 33, 21, 45, false);
    run_gemm(&device, 1, 64, 128, 256, false);
    assert_no_validation_errors(&instance);
}

#[test]
fn fp16_linear_uses_the_chosen_kernel_and_matches() {
    let Some((instance, device)) = device("fp16_linear_uses_the_chosen_kernel_and_matches") else {
        return;
    };
    run_gemm(&device, 1, 40, 136, 64, true);
    run_gemm(&device, 2, 17, 30, 70, true);
    // Split along K on the workgroup-scope kernel.
    run_gemm(&device, 1, 64, 64, 1024, true);
    assert_no_validation_errors(&instance);
}

/// A deep product of few blocks (split along K on the workgroup-scope kernel, its summing
/// pass applying the bias, the residual and the activation), with rows and columns that fill
/// no tile: executed three times with new inputs, each result matches.
#[test]
fn split_products_with_an_epilogue_match_at_every_execution() {
    let test = "split_products_with_an_epilogue_match_at_every_execution";
    let Some((instance, device)) = device(test) else {
        return;
    };
    let (batch, m, n, k) = (2usize, 40usize, 136usize, 1536usize);
    let (w, bias) = (values(n * k, 21), values(n, 22));
    let mut g = GraphBuilder::new();
    let xi = g.input("x", DType::F16, &[batch, m, k]).unwrap();
    let ri = g.input("r", DType::F16, &[batch, m, n]).unwrap();
    let wi = g.constant_f16("w", &[n, k], &w).unwrap();
    let bi = g.constant_f16("b", &[n], &bias).unwrap();
    let y = g.linear(xi, wi, Some(bi)).unwrap();
    let y = g.add(y, ri).unwrap();
    let y = g.relu(y).unwrap();
    g.output(y).unwrap();
    let mut graph = g.build(&device).unwrap();
    let kernels = graph.kernels();
    for run in 0..3u64 {
        let (x, r) = (
            values(batch * m * k, 30 + run),
            values(batch * m * n, 40 + run),
        );
        let out = graph
            .execute(&[tensor(&[batch, m, k], &x), tensor(&[batch, m, n], &r)])
            .unwrap();
        let got = read(&out[0]);
        for row in 0..batch * m {
            for j in 0..n {
                let mut want = f64::from(bias[j]) + f64::from(r[row * n + j]);
                for kk in 0..k {
                    want += f64::from(x[row * k + kk]) * f64::from(w[j * k + kk]);
                }
                let want = want.max(0.0);
                let v = f64::from(got[row * n + j]);
                let tol = 1e-3 * (k as f64).sqrt() + 2e-3 * want.abs();
                assert!(
                    (v - want).abs() <= tol,
                    "run {run}: [{row}][{j}] = {v}, expected {want} ({kernels:?})"
                );
            }
        }
    }
    drop(graph);
    assert_no_validation_errors(&instance);
}

/// The checks a device passed are recorded beside its pipeline cache, one per line, so that
/// a process after the first runs none of them; a build with the disk cache off records none.
/// A device without cooperative matrices checks nothing and records nothing.
#[test]
fn passed_checks_are_recorded_beside_the_pipeline_cache() {
    let test = "passed_checks_are_recorded_beside_the_pipeline_cache";
    let Some((instance, device)) = device(test) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("vkdelegate-{test}-{}", std::process::id()));
    let mut g = GraphBuilder::new();
    let a = g.input("a", DType::F16, &[64, 64]).unwrap();
    let b = g.input("b", DType::F16, &[64, 64]).unwrap();
    let y = g.matmul(a, b).unwrap();
    g.output(y).unwrap();
    let options = BuildOptions {
        disk_cache: vk_core::DiskCache::At(dir.clone()),
        ..BuildOptions::default()
    };
    let graph = g.build_with(&device, &options).unwrap();
    let records: Vec<String> = std::fs::read_dir(&dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    let checks: Vec<&String> = records
        .iter()
        .filter(|n| n.starts_with("checks-passed-"))
        .collect();
    if graph.kernels().iter().any(|k| k.starts_with("GemmCoop")) {
        assert_eq!(checks.len(), 1, "{records:?}");
        let text = std::fs::read_to_string(dir.join(checks[0])).unwrap();
        assert!(text.lines().count() >= 1, "{text}");
        assert!(text.lines().all(|l| !l.is_empty()), "{text}");
    } else {
        assert!(checks.is_empty(), "{records:?}");
    }
    drop(graph);
    let _ = std::fs::remove_dir_all(&dir);
    assert_no_validation_errors(&instance);
}

/// An fp16 layer norm whose result a linear layer alone reads matches a host reference of
/// the norm then the layer (rows whose mean is far from zero, a scale and a shift, a bias, a
/// ragged last block of rows): on the workgroup-scope cooperative kernel the norm is folded
/// into the product (no norm dispatch), elsewhere it runs on its own.
#[test]
fn a_norm_before_a_linear_layer_folds_into_it() {
    let test = "a_norm_before_a_linear_layer_folds_into_it";
    let Some((instance, device)) = device(test) else {
        return;
    };
    let (rows, d, n) = (75usize, 96usize, 136usize);
    let x: Vec<f32> = values(rows * d, 11)
        .iter()
        .enumerate()
        .map(|(i, v)| f16::from_f32(v * 2.0 + (i / d) as f32 * 0.05 - 1.5).to_f32())
        .collect();
    let (scale, shift) = (values(d, 12), values(d, 13));
    let (w, bias) = (values(n * d, 14), values(n, 15));
    let mut g = GraphBuilder::new();
    let xi = g.input("x", DType::F16, &[1, rows, d]).unwrap();
    let si = g.constant_f16("scale", &[d], &scale).unwrap();
    let hi = g.constant_f16("shift", &[d], &shift).unwrap();
    let y = g.layer_norm(xi, &[d], Some(si), Some(hi), 1e-5).unwrap();
    let wi = g.constant_f16("w", &[n, d], &w).unwrap();
    let bi = g.constant_f16("b", &[n], &bias).unwrap();
    let y = g.linear(y, wi, Some(bi)).unwrap();
    g.output(y).unwrap();
    let mut graph = g.build(&device).unwrap();
    let kernels = graph.kernels();
    let folds = cooperative_gemm_kernel(&device) == Some("GemmCoop2");
    let norms = kernels
        .iter()
        .filter(|k| k.starts_with("LayerNorm"))
        .count();
    assert_eq!(norms, usize::from(!folds), "{kernels:?}");
    let out = graph.execute(&[tensor(&[1, rows, d], &x)]).unwrap();
    let got = read(&out[0]);
    let mut worst = 0f64;
    let mut scale_of = 0f64;
    for i in 0..rows {
        let row = &x[i * d..(i + 1) * d];
        let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / d as f64;
        let var = row
            .iter()
            .map(|&v| (f64::from(v) - mean).powi(2))
            .sum::<f64>()
            / d as f64;
        let rstd = 1.0 / (var + 1e-5).sqrt();
        for j in 0..n {
            let mut r = f64::from(bias[j]);
            for k in 0..d {
                let normed =
                    (f64::from(row[k]) - mean) * rstd * f64::from(scale[k]) + f64::from(shift[k]);
                r += normed * f64::from(w[j * d + k]);
            }
            worst = worst.max((f64::from(got[i * n + j]) - r).abs());
            scale_of = scale_of.max(r.abs());
        }
    }
    // fp16 rounding of the normalized rows (or of the scaled weight) and of the result.
    assert!(worst <= 4e-3 * scale_of, "worst {worst} of {scale_of}");
    drop(graph);
    assert_no_validation_errors(&instance);
}

#[test]
fn policy_off_keeps_the_plain_kernel() {
    let Some((instance, device)) = device("policy_off_keeps_the_plain_kernel") else {
        return;
    };
    let mut g = GraphBuilder::new();
    let a = g.input("a", DType::F16, &[64, 64]).unwrap();
    let b = g.input("b", DType::F16, &[64, 64]).unwrap();
    let y = g.matmul(a, b).unwrap();
    g.output(y).unwrap();
    let options = BuildOptions {
        cooperative: CoopPolicy::Off,
        ..BuildOptions::default()
    };
    match g.build_with(&device, &options) {
        Ok(graph) => assert!(graph.kernels().iter().all(|k| !k.starts_with("GemmCoop"))),
        Err(e) => panic!("plain fp16 GEMM: {e}"),
    }
    assert_no_validation_errors(&instance);
}

/// fp16 conv2d (one group, bias, fused relu) against f64: through cooperative GEMMs where the
/// device runs them (a patch matrix first unless 1x1; `implicit`: the cooperative implicit
/// GEMM where the device runs it); elsewhere as fp32 layers are, here the plain implicit GEMM
/// or, pointwise, one dot product per output.
fn run_conv(
    device: &Device,
    x_shape: [usize; 4],
    cout: usize,
    k: usize,
    p: Conv2d,
    implicit: bool,
) {
    let [nb, cin, h, w] = x_shape;
    let xs = values(nb * cin * h * w, 4);
    let ws = values(cout * cin * k * k, 5);
    let bs = values(cout, 6);
    let mut g = GraphBuilder::new();
    let x = g.input("x", DType::F16, &x_shape).unwrap();
    let wt = g.constant("w", tensor(&[cout, cin, k, k], &ws)).unwrap();
    let b = g.constant("b", tensor(&[cout], &bs)).unwrap();
    let y = g.conv2d(x, wt, Some(b), p).unwrap();
    let y = g.relu(y).unwrap();
    g.output(y).unwrap();
    let mut graph = g.build(device).unwrap();
    let want = implicit
        .then(|| cooperative_conv_kernel(device))
        .flatten()
        .or_else(|| cooperative_gemm_kernel(device))
        .unwrap_or(if k == 1 { "ConvPw_f16" } else { "Gemm_f16" });
    assert!(
        graph.kernels().iter().any(|kn| kn == want),
        "conv {x_shape:?} k{k}: kernels {:?}, expected {want}",
        graph.kernels()
    );
    let got = read(&graph.execute(&[tensor(&x_shape, &xs)]).unwrap()[0]);
    let oh = (h + 2 * p.padding[0] - p.dilation[0] * (k - 1) - 1) / p.stride[0] + 1;
    let ow = (w + 2 * p.padding[1] - p.dilation[1] * (k - 1) - 1) / p.stride[1] + 1;
    for img in 0..nb {
        for co in 0..cout {
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut r = f64::from(bs[co]);
                    for ci in 0..cin {
                        for ky in 0..k {
                            for kx in 0..k {
                                let iy = (oy * p.stride[0] + ky * p.dilation[0]) as isize
                                    - p.padding[0] as isize;
                                let ix = (ox * p.stride[1] + kx * p.dilation[1]) as isize
                                    - p.padding[1] as isize;
                                if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                    continue;
                                }
                                let xv = xs[((img * cin + ci) * h + iy as usize) * w + ix as usize];
                                let wv = ws[((co * cin + ci) * k + ky) * k + kx];
                                r += f64::from(xv) * f64::from(wv);
                            }
                        }
                    }
                    let r = r.max(0.0);
                    let v = f64::from(got[((img * cout + co) * oh + oy) * ow + ox]);
                    let tol = 1e-3 * ((cin * k * k) as f64).sqrt() + 2e-3 * r.abs();
                    assert!(
                        (v - r).abs() <= tol,
                        "conv {x_shape:?} k{k}: [{img}][{co}][{oy}][{ox}] = {v}, expected {r}"
                    );
                }
            }
        }
    }
}

#[test]
fn fp16_conv2d_uses_the_chosen_kernel_and_matches() {
    let Some((instance, device)) = device("fp16_conv2d_uses_the_chosen_kernel_and_matches") else {
        return;
    };
    let pad1 = Conv2d {
        padding: [1, 1],
        ..Conv2d::default()
    };
    run_conv(&device, [2, 16, 12, 10], 24, 3, pad1, false);
    run_conv(&device, [1, 32, 9, 9], 40, 1, Conv2d::default(), false);
    let strided = Conv2d {
        stride: [2, 2],
        padding: [1, 1],
        ..Conv2d::default()
    };
    run_conv(&device, [1, 8, 15, 17], 16, 3, strided, false);
    // Large enough for the implicit GEMM: 11 x 3 pixel patches of 8 x 32 and four blocks of
    // output channels (the last one partial); dilated.
    let dilated = Conv2d {
        padding: [2, 2],
        dilation: [2, 2],
        ..Conv2d::default()
    };
    run_conv(&device, [1, 16, 96, 88], 200, 3, dilated, true);
    assert_no_validation_errors(&instance);
}

/// An attention over more keys than the scalar kernel takes (600): one dispatch on the
/// cooperative-matrix kernel where the device runs it, else the products and the softmax on
/// their own; either way it matches a host reference.
#[test]
fn long_fp16_attentions_fuse_onto_the_matrix_kernel() {
    let test = "long_fp16_attentions_fuse_onto_the_matrix_kernel";
    let Some((instance, device)) = device(test) else {
        return;
    };
    let (h, s, d) = (2usize, 600usize, 64usize);
    let mut g = GraphBuilder::new();
    let shape = [h, s, d];
    let [q, k, v] = ["q", "k", "v"].map(|n| g.input(n, DType::F16, &shape).unwrap());
    let kt = g.permute(k, &[0, 2, 1]).unwrap();
    let scores = g.matmul(q, kt).unwrap();
    let scores = g.mul_scalar(scores, 0.125).unwrap();
    let p = g.softmax(scores, -1).unwrap();
    let y = g.matmul(p, v).unwrap();
    g.output(y).unwrap();
    let mut graph = g.build(&device).unwrap();
    let kernels = graph.kernels();
    match compute_delegate::cooperative_attention_kernel(&device) {
        Some(kernel) => assert_eq!(kernels, [kernel]),
        None => assert!(
            !kernels.iter().any(|k| k.starts_with("Attend")),
            "{kernels:?}"
        ),
    }
    let x: Vec<Vec<f32>> = (0..3).map(|i| values(h * s * d, 50 + i)).collect();
    let inputs: Vec<_> = x.iter().map(|v| tensor(&shape, v)).collect();
    let got = read(&graph.execute(&inputs).unwrap()[0]);
    let (xq, xk, xv) = (&x[0], &x[1], &x[2]);
    let mut worst = 0f64;
    for head in 0..h {
        let at = |i: usize| (head * s + i) * d..(head * s + i + 1) * d;
        for i in 0..s {
            let scores: Vec<f64> = (0..s)
                .map(|j| {
                    let dot = xq[at(i)].iter().zip(&xk[at(j)]);
                    dot.map(|(a, b)| f64::from(*a) * f64::from(*b)).sum::<f64>() * 0.125
                })
                .collect();
            let top = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = scores.iter().map(|sc| (sc - top).exp()).collect();
            let total: f64 = w.iter().sum();
            for c in 0..d {
                let r: f64 = (0..s).map(|j| w[j] * f64::from(xv[at(j)][c])).sum::<f64>() / total;
                let v = f64::from(got[(head * s + i) * d + c]);
                worst = worst.max((v - r).abs());
            }
        }
    }
    // Outputs within [-1, 1]: fp16 probabilities and results.
    assert!(worst <= 4e-3, "worst {worst} ({kernels:?})");
    drop(graph);
    assert_no_validation_errors(&instance);
}

/// A ViT's and a BERT's attention in fp16, heads of 64: q, k and v permuted out of one product
/// `[s, 3 h d]` and the output permuted back (the ViT), a mask with one row all -inf under
/// PyTorch's guard (BERT). On cooperative matrices where the device runs them, and through
/// `attend.comp` otherwise; either way as the graph built without cooperative matrices, and
/// as a host reference.
#[test]
fn fp16_attention_uses_the_chosen_kernel_and_matches() {
    let test = "fp16_attention_uses_the_chosen_kernel_and_matches";
    let Some((instance, device)) = device(test) else {
        return;
    };
    let (s, h, d) = (70usize, 3usize, 64usize);
    let mut g = GraphBuilder::new();
    g.set_float(DType::F16);
    let qkv = g.input("qkv", DType::F16, &[s, 3 * h * d]).unwrap();
    let qkv = g
        .reshape(qkv, &[s as isize, 3, h as isize, d as isize])
        .unwrap();
    let qkv = g.permute(qkv, &[1, 2, 0, 3]).unwrap();
    let [q, k, v] = [0, 1, 2].map(|i| {
        let t = g.slice(qkv, 0, i, i + 1, 1).unwrap();
        g.reshape(t, &[h as isize, s as isize, d as isize]).unwrap()
    });
    let mut mask = values(s * s, 5);
    for (i, m) in mask.iter_mut().enumerate() {
        if i / s == 3 || i % 7 == 0 {
            *m = f32::NEG_INFINITY;
        }
    }
    let mask_t = g.constant("mask", tensor(&[s, s], &mask)).unwrap();
    let kt = g.permute(k, &[0, 2, 1]).unwrap();
    let scores = g.matmul(q, kt).unwrap();
    let scores = g.mul_scalar(scores, 0.125).unwrap();
    let scores = g.add(scores, mask_t).unwrap();
    let inf = g
        .compare_scalar(scores, compute_delegate::Compare::Eq, f32::NEG_INFINITY)
        .unwrap();
    let live = g.logical_not(inf).unwrap();
    let any = g.any(live, &[-1], true).unwrap();
    let dead = g.logical_not(any).unwrap();
    let p = g.softmax(scores, -1).unwrap();
    let zeros = g.full_as("zeros", &[1], 0.0, DType::F16).unwrap();
    let p = g.where_(dead, zeros, p).unwrap();
    let y = g.matmul(p, v).unwrap();
    let y = g.permute(y, &[1, 0, 2]).unwrap();
    g.output(y).unwrap();
    let x = values(s * 3 * h * d, 6);
    let input = [tensor(&[s, 3 * h * d], &x)];
    let want = compute_delegate::cooperative_attention_kernel(&device).unwrap_or("Attend_f16");
    let mut graph = g.build(&device).unwrap();
    assert!(
        graph.kernels().iter().any(|k| k == want),
        "{:?}, expected {want}",
        graph.kernels()
    );
    let got = read(&graph.execute(&input).unwrap()[0]);
    let off = BuildOptions {
        cooperative: CoopPolicy::Off,
        ..BuildOptions::default()
    };
    let mut plain = g.build_with(&device, &off).unwrap();
    assert!(plain.kernels().iter().any(|k| k == "Attend_f16"));
    let plain = read(&plain.execute(&input).unwrap()[0]);
    let at = |i: usize, which: usize, head: usize, c: usize| {
        x[i * 3 * h * d + (which * h + head) * d + c]
    };
    for i in 0..s {
        for head in 0..h {
            let scores: Vec<f64> = (0..s)
                .map(|j| {
                    let dot: f64 = (0..d)
                        .map(|c| f64::from(at(i, 0, head, c)) * f64::from(at(j, 1, head, c)))
                        .sum();
                    dot * 0.125 + f64::from(mask[i * s + j])
                })
                .collect();
            let top = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = scores.iter().map(|sc| (sc - top).exp()).collect();
            let total: f64 = w.iter().sum();
            for c in 0..d {
                let r = if top == f64::NEG_INFINITY {
                    0.0
                } else {
                    (0..s)
                        .map(|j| w[j] * f64::from(at(j, 2, head, c)))
                        .sum::<f64>()
                        / total
                };
                let o = (i * h + head) * d + c;
                for (what, got) in [("chosen", got[o]), ("plain", plain[o])] {
                    assert!(
                        (f64::from(got) - r).abs() <= 4e-3,
                        "{what} [{i}][{head}][{c}] = {got}, expected {r}"
                    );
                }
            }
        }
    }
    assert_no_validation_errors(&instance);
}
