//! Every op in fp16 against a CPU reference: inputs rounded to f16, the reference computed in
//! f64 from the rounded inputs, tolerances per op family as `docs/testing.md` ("Tolerances")
//! states them. Small shapes (lavapipe in CI), validation on.

#![allow(clippy::unwrap_used)] // helpers outside #[test] functions

use compute_delegate::{BuildOptions, Conv2d, Error, GraphBuilder, Pool2d};
use half::f16;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use vk_core::testing::{self, assert_no_validation_errors};
use vk_core::{DType, Device, Features, HostTensor, Instance};

/// Elementwise ops: the output's own rounding (half an f16 ulp, 2^-11 relative) plus the fp32
/// arithmetic and the erf / exp approximations.
const TOL_ELEMENTWISE: f64 = 1.5e-3;
/// Reductions, softmax, norms, pooling: fp32 accumulation, one rounding of the result.
const TOL_REDUCE: f64 = 2e-3;
/// GEMM and conv: fp32 accumulators over up to a few hundred products, one rounding.
const TOL_GEMM: f64 = 2e-3;

fn device(test: &str) -> Option<(Instance, Device)> {
    testing::device(test, &compute_delegate::f16_requirements())
}

/// `n` values in [-2, 2), rounded to f16.
fn rand16(rng: &mut SmallRng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| round16(rng.gen_range(-2.0f32..2.0)))
        .collect()
}

fn round16(v: f32) -> f32 {
    f16::from_f32(v).to_f32()
}

fn tensor16(shape: &[usize], v: &[f32]) -> HostTensor {
    let bytes = v
        .iter()
        .flat_map(|&x| f16::from_f32(x).to_le_bytes())
        .collect();
    HostTensor::new(DType::F16, shape.to_vec(), bytes).unwrap()
}

fn to_f32(t: &HostTensor) -> Vec<f32> {
    assert_eq!(t.dtype(), DType::F16);
    t.bytes()
        .chunks_exact(2)
        .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32())
        .collect()
}

fn numel(s: &[usize]) -> usize {
    s.iter().product()
}

#[track_caller]
fn assert_close(got: &[f32], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = (f64::from(g) - w).abs() <= tol * (1.0 + w.abs());
        assert!(ok, "{what}: element {i}: got {g}, want {w}");
    }
}

/// Builds `b` (f16 inputs `inputs`, f16 outputs), runs it, checks the staging path gives the
/// same bytes, and returns the outputs widened to f32.
fn run(dev: &Device, b: &GraphBuilder, inputs: &[(&[usize], &[f32])]) -> Vec<Vec<f32>> {
    let ins: Vec<HostTensor> = inputs.iter().map(|(s, d)| tensor16(s, d)).collect();
    let mut g = b.build(dev).unwrap();
    let outs = g.execute(&ins).unwrap();
    let opts = BuildOptions {
        force_staging: true,
        ..BuildOptions::default()
    };
    let mut staged = b.build_with(dev, &opts).unwrap();
    assert_eq!(staged.execute(&ins).unwrap(), outs, "staging path");
    let got: Vec<Vec<f32>> = outs.iter().map(to_f32).collect();
    // Shared-memory reductions instead of subgroup ones: another summation order.
    let opts = BuildOptions {
        disable_subgroups: true,
        ..BuildOptions::default()
    };
    let plain = b.build_with(dev, &opts).unwrap().execute(&ins).unwrap();
    for (p, g) in plain.iter().zip(&got) {
        assert_close(&to_f32(p), &wide(g), TOL_REDUCE, "without subgroups");
    }
    got
}

fn wide(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

#[test]
fn f16_unary_binary_and_where() {
    let Some((instance, dev)) = device("f16_unary_binary_and_where") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(21);
    for shape in [&[5usize][..], &[3, 7], &[2, 3, 67]] {
        let n = numel(shape);
        let x: Vec<f32> = rand16(&mut rng, n)
            .iter()
            .map(|v| round16(v * 3.0))
            .collect();
        let y = rand16(&mut rng, n);
        let mut g = GraphBuilder::new();
        let tx = g.input("x", DType::F16, shape).unwrap();
        let ty = g.input("y", DType::F16, shape).unwrap();
        let mask = g.gt_scalar(ty, 0.0).unwrap();
        let outs = [
            g.relu(tx).unwrap(),
            g.clamp(tx, -0.5, 2.5).unwrap(),
            g.sigmoid(tx).unwrap(),
            g.tanh(tx).unwrap(),
            g.gelu(tx, false).unwrap(),
            g.gelu(tx, true).unwrap(),
            g.hardswish(tx).unwrap(),
            g.add_scalar(tx, 1.5).unwrap(),
            g.mul_scalar(tx, -3.0).unwrap(),
            g.rdiv_scalar(tx, 1.0).unwrap(),
            g.add(tx, ty).unwrap(),
            g.sub(tx, ty).unwrap(),
            g.mul(tx, ty).unwrap(),
            g.div(tx, ty).unwrap(),
            mask,
            g.logical_not(mask).unwrap(),
            g.where_(mask, tx, ty).unwrap(),
        ];
        for &o in &outs {
            g.output(o).unwrap();
        }
        let got = run(&dev, &g, &[(shape, &x), (shape, &y)]);
        type F = fn(f64, f64) -> f64;
        let refs: [F; 17] = [
            |a, _| a.max(0.0),
            |a, _| a.clamp(-0.5, 2.5),
            |a, _| 1.0 / (1.0 + (-a).exp()),
            |a, _| a.tanh(),
            |a, _| 0.5 * a * (1.0 + libm::erf(a / 2f64.sqrt())),
            |a, _| 0.5 * a * (1.0 + (0.797_884_560_8 * (a + 0.044715 * a * a * a)).tanh()),
            |a, _| a * (a + 3.0).clamp(0.0, 6.0) / 6.0,
            |a, _| a + 1.5,
            |a, _| a * -3.0,
            |a, _| 1.0 / a,
            |a, b| a + b,
            |a, b| a - b,
            |a, b| a * b,
            |a, b| a / b,
            |_, b| f64::from(u8::from(b > 0.0)),
            |_, b| f64::from(u8::from(b <= 0.0)),
            |a, b| if b > 0.0 { a } else { b },
        ];
        for (k, f) in refs.iter().enumerate() {
            let want: Vec<f64> = x
                .iter()
                .zip(&y)
                .map(|(&a, &b)| f(f64::from(a), f64::from(b)))
                .collect();
            assert_close(
                &got[k],
                &want,
                TOL_ELEMENTWISE,
                &format!("op #{k} {shape:?}"),
            );
        }
    }
    assert_no_validation_errors(&instance);
}

#[test]
fn f16_broadcast_binary() {
    let Some((instance, dev)) = device("f16_broadcast_binary") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(22);
    let (sa, sb) = (&[2usize, 3, 5][..], &[3usize, 1][..]);
    let a = rand16(&mut rng, numel(sa));
    let b = rand16(&mut rng, numel(sb));
    let mut g = GraphBuilder::new();
    let ta = g.input("a", DType::F16, sa).unwrap();
    let tb = g.input("b", DType::F16, sb).unwrap();
    let o = g.mul(ta, tb).unwrap();
    g.output(o).unwrap();
    let got = run(&dev, &g, &[(sa, &a), (sb, &b)]);
    let want: Vec<f64> = (0..30)
        .map(|i| f64::from(a[i]) * f64::from(b[(i / 5) % 3]))
        .collect();
    assert_close(&got[0], &want, TOL_ELEMENTWISE, "mul broadcast");
    assert_no_validation_errors(&instance);
}

fn softmax_ref(x: &[f32], outer: usize, d: usize, inner: usize, log: bool) -> Vec<f64> {
    let mut y = vec![0.0; x.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| o * d * inner + j * inner + i;
            let m = (0..d).map(|j| f64::from(x[at(j)])).fold(f64::MIN, f64::max);
            let s: f64 = (0..d).map(|j| (f64::from(x[at(j)]) - m).exp()).sum();
            for j in 0..d {
                let v = f64::from(x[at(j)]) - m;
                y[at(j)] = if log { v - s.ln() } else { v.exp() / s };
            }
        }
    }
    y
}

#[test]
fn f16_softmax_sum_mean_and_layer_norm() {
    let Some((instance, dev)) = device("f16_softmax_sum_mean_and_layer_norm") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(23);
    // Rows of 256 (vec4 path), 67 (scalar rows) and a middle dim of 5 (columns); 520 rows of
    // 96 (a layer norm's subgroup per row).
    for shape in [&[3usize, 256][..], &[4, 67], &[2, 5, 3], &[520, 96]] {
        let x = rand16(&mut rng, numel(shape));
        let r = shape.len();
        let d = shape[r - 1];
        let rows = numel(shape) / d;
        let mut g = GraphBuilder::new();
        let t = g.input("x", DType::F16, shape).unwrap();
        let w = (0..d)
            .map(|i| round16(0.5 + i as f32 / d as f32))
            .collect::<Vec<_>>();
        let bias = (0..d)
            .map(|i| round16(i as f32 / 7.0 - 1.0))
            .collect::<Vec<_>>();
        let tw = g.constant_f16("w", &[d], &w).unwrap();
        let tb = g.constant_f16("b", &[d], &bias).unwrap();
        let outs = [
            g.softmax(t, -1).unwrap(),
            g.log_softmax(t, -1).unwrap(),
            g.softmax(t, 0).unwrap(),
            g.sum(t, &[-1], false).unwrap(),
            g.mean(t, &[], false).unwrap(),
            g.layer_norm(t, &[d], Some(tw), Some(tb), 1e-5).unwrap(),
        ];
        for &o in &outs {
            g.output(o).unwrap();
        }
        let got = run(&dev, &g, &[(shape, &x)]);
        let tol = TOL_REDUCE;
        let what = |k: &str| format!("{k} {shape:?}");
        assert_close(
            &got[0],
            &softmax_ref(&x, rows, d, 1, false),
            tol,
            &what("softmax"),
        );
        assert_close(
            &got[1],
            &softmax_ref(&x, rows, d, 1, true),
            tol,
            &what("log_softmax"),
        );
        let inner = numel(&shape[1..]);
        assert_close(
            &got[2],
            &softmax_ref(&x, 1, shape[0], inner, false),
            tol,
            &what("dim 0"),
        );
        let sums: Vec<f64> = x
            .chunks(d)
            .map(|c| c.iter().map(|&v| f64::from(v)).sum())
            .collect();
        assert_close(&got[3], &sums, tol, &what("sum"));
        let mean = sums.iter().sum::<f64>() / x.len() as f64;
        assert_close(&got[4], &[mean], tol, &what("mean"));
        let mut ln = Vec::new();
        for c in x.chunks(d) {
            let m = c.iter().map(|&v| f64::from(v)).sum::<f64>() / d as f64;
            let var = c.iter().map(|&v| (f64::from(v) - m).powi(2)).sum::<f64>() / d as f64;
            for (j, &v) in c.iter().enumerate() {
                let z = (f64::from(v) - m) / (var + 1e-5).sqrt();
                ln.push(z * f64::from(w[j]) + f64::from(bias[j]));
            }
        }
        assert_close(&got[5], &ln, tol, &what("layer_norm"));
    }
    assert_no_validation_errors(&instance);
}

#[test]
fn f16_pooling() {
    let Some((instance, dev)) = device("f16_pooling") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(24);
    let shape = [1usize, 3, 6, 8];
    let x = rand16(&mut rng, numel(&shape));
    let mut g = GraphBuilder::new();
    let t = g.input("x", DType::F16, &shape).unwrap();
    // 2x2 / stride 2 takes the vectorised path; 3x3 / stride 2 / padding 1 the general one.
    let general = Pool2d {
        padding: [1, 1],
        ..Pool2d::new(3, 2)
    };
    let outs = [
        g.max_pool2d(t, Pool2d::new(2, 2)).unwrap(),
        g.avg_pool2d(t, Pool2d::new(2, 2)).unwrap(),
        g.max_pool2d(t, general).unwrap(),
        g.avg_pool2d(t, general).unwrap(),
    ];
    for &o in &outs {
        g.output(o).unwrap();
    }
    let got = run(&dev, &g, &[(&shape, &x)]);
    let (h, w) = (6usize, 8usize);
    for (k, &(kk, s, pad, max)) in [
        (2usize, 2usize, 0usize, true),
        (2, 2, 0, false),
        (3, 2, 1, true),
        (3, 2, 1, false),
    ]
    .iter()
    .enumerate()
    {
        let (oh, ow) = ((h + 2 * pad - kk) / s + 1, (w + 2 * pad - kk) / s + 1);
        let mut want = Vec::new();
        for c in 0..3 {
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut acc = if max { f64::MIN } else { 0.0 };
                    for ky in 0..kk {
                        for kx in 0..kk {
                            let (iy, ix) = (
                                (oy * s + ky) as isize - pad as isize,
                                (ox * s + kx) as isize - pad as isize,
                            );
                            if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                continue;
                            }
                            let v = f64::from(x[c * h * w + iy as usize * w + ix as usize]);
                            acc = if max { acc.max(v) } else { acc + v };
                        }
                    }
                    want.push(if max { acc } else { acc / (kk * kk) as f64 });
                }
            }
        }
        assert_close(&got[k], &want, TOL_REDUCE, &format!("pool #{k}"));
    }
    assert_no_validation_errors(&instance);
}

#[allow(clippy::too_many_arguments)]
fn conv_ref(
    x: &[f32],
    xs: [usize; 4],
    w: &[f32],
    ws: [usize; 4],
    b: &[f32],
    p: &Conv2d,
    relu: bool,
) -> (Vec<f64>, [usize; 4]) {
    let [n, cin, h, wd] = xs;
    let [cout, cin_g, kh, kw] = ws;
    let oh = (h + 2 * p.padding[0] - p.dilation[0] * (kh - 1) - 1) / p.stride[0] + 1;
    let ow = (wd + 2 * p.padding[1] - p.dilation[1] * (kw - 1) - 1) / p.stride[1] + 1;
    let per_group = cout / p.groups;
    let mut y = Vec::with_capacity(n * cout * oh * ow);
    for img in 0..n {
        for co in 0..cout {
            let grp = co / per_group;
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut acc = f64::from(b[co]);
                    for ci in 0..cin_g {
                        let c = grp * cin_g + ci;
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let iy = (oy * p.stride[0] + ky * p.dilation[0]) as isize
                                    - p.padding[0] as isize;
                                let ix = (ox * p.stride[1] + kx * p.dilation[1]) as isize
                                    - p.padding[1] as isize;
                                if iy < 0 || ix < 0 || iy >= h as isize || ix >= wd as isize {
                                    continue;
                                }
                                let xv = x[((img * cin + c) * h + iy as usize) * wd + ix as usize];
                                let wv = w[((co * cin_g + ci) * kh + ky) * kw + kx];
                                acc += f64::from(xv) * f64::from(wv);
                            }
                        }
                    }
                    y.push(if relu { acc.max(0.0) } else { acc });
                }
            }
        }
    }
    (y, [n, cout, oh, ow])
}

#[test]
fn f16_conv2d_general_pointwise_and_depthwise() {
    let Some((instance, dev)) = device("f16_conv2d_general_pointwise_and_depthwise") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(25);
    let pad1 = Conv2d {
        padding: [1, 1],
        ..Conv2d::default()
    };
    let cases: [([usize; 4], [usize; 4], Conv2d, bool); 5] = [
        ([1, 8, 9, 7], [12, 8, 3, 3], pad1, true),
        ([2, 8, 5, 6], [16, 8, 1, 1], Conv2d::default(), false),
        // One pixel: a product of one row.
        ([1, 32, 1, 1], [20, 32, 1, 1], Conv2d::default(), true),
        (
            [1, 8, 7, 7],
            [8, 1, 3, 3],
            Conv2d {
                groups: 8,
                stride: [2, 2],
                ..pad1
            },
            true,
        ),
        (
            [1, 6, 8, 8],
            [6, 3, 3, 3],
            Conv2d {
                groups: 2,
                dilation: [2, 2],
                ..pad1
            },
            false,
        ),
    ];
    for (k, (xs, ws, p, relu)) in cases.into_iter().enumerate() {
        let x = rand16(&mut rng, numel(&xs));
        let w = rand16(&mut rng, numel(&ws));
        let b = rand16(&mut rng, ws[0]);
        let mut g = GraphBuilder::new();
        let tx = g.input("x", DType::F16, &xs).unwrap();
        let tw = g.constant_f16("w", &ws, &w).unwrap();
        let tb = g.constant_f16("b", &[ws[0]], &b).unwrap();
        let mut y = g.conv2d(tx, tw, Some(tb), p).unwrap();
        if relu {
            y = g.relu(y).unwrap();
        }
        g.output(y).unwrap();
        let got = run(&dev, &g, &[(&xs, &x)]);
        let (want, _) = conv_ref(&x, xs, &w, ws, &b, &p, relu);
        assert_close(&got[0], &want, TOL_GEMM, &format!("conv case {k}"));
    }
    assert_no_validation_errors(&instance);
}

/// On a device without cooperative matrices, fp16 first layers and small pointwise layers run
/// as fp32 ones do, one dot product per output (`ConvDirect_f16`, `ConvPw_f16`, and under a
/// GPU's layouts lanes sharing the deep pointwise sums, `ConvPwSplit_f16`); with them, they
/// take the cooperative GEMMs. Either way they match.
#[test]
fn f16_first_and_pointwise_layers_without_cooperative_matrices_are_dot_products() {
    let test = "f16_first_and_pointwise_layers_without_cooperative_matrices_are_dot_products";
    let Some((instance, dev)) = device(test) else {
        return;
    };
    let cooperative = compute_delegate::cooperative_gemm_kernel(&dev).is_some();
    let mut rng = SmallRng::seed_from_u64(26);
    let first = Conv2d {
        padding: [1, 1],
        stride: [2, 2],
        ..Conv2d::default()
    };
    // (input, weight, params, kernel on the device's layouts, on a GPU's)
    let cases = [
        (
            [1, 3, 10, 11],
            [8, 3, 3, 3],
            first,
            "ConvDirect_f16",
            "ConvDirect_f16",
        ),
        (
            [1, 64, 7, 7],
            [20, 64, 1, 1],
            Conv2d::default(),
            "ConvPw_f16",
            "ConvPwSplit_f16",
        ),
    ];
    for (xs, ws, p, kernel, gpu_kernel) in cases {
        let x = rand16(&mut rng, numel(&xs));
        let w = rand16(&mut rng, numel(&ws));
        let b = rand16(&mut rng, ws[0]);
        let mut g = GraphBuilder::new();
        let tx = g.input("x", DType::F16, &xs).unwrap();
        let tw = g.constant_f16("w", &ws, &w).unwrap();
        let tb = g.constant_f16("b", &[ws[0]], &b).unwrap();
        let y = g.conv2d(tx, tw, Some(tb), p).unwrap();
        let y = g.relu(y).unwrap();
        g.output(y).unwrap();
        let (want, _) = conv_ref(&x, xs, &w, ws, &b, &p, true);
        let cpu = dev.capabilities().device_type == vk_core::DeviceType::Cpu;
        for gpu_layouts in [false, true] {
            let options = BuildOptions {
                gpu_layouts,
                ..BuildOptions::default()
            };
            let what = format!("conv {xs:?} {ws:?}, GPU layouts {gpu_layouts}");
            let mut built = g.build_with(&dev, &options).unwrap();
            if !cooperative {
                let expected = if gpu_layouts || !cpu {
                    gpu_kernel
                } else {
                    kernel
                };
                assert_eq!(built.kernels(), [expected], "{what}");
            }
            let got = to_f32(&built.execute(&[tensor16(&xs, &x)]).unwrap()[0]);
            assert_close(&got, &want, TOL_GEMM, &what);
        }
    }
    assert_no_validation_errors(&instance);
}

fn matmul_ref(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k)
                .map(|l| f64::from(a[i * k + l]) * f64::from(b[l * n + j]))
                .sum();
        }
    }
    c
}

#[test]
fn f16_matmul_bmm_linear_and_split_k() {
    let Some((instance, dev)) = device("f16_matmul_bmm_linear_and_split_k") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(26);
    // (m, k, n): vec4 loads, odd sizes, a deep K that is split (with a fused relu), and whole
    // tiles (the loops without bounds tests).
    for (m, k, n) in [
        (16usize, 32usize, 24usize),
        (7, 13, 5),
        (4, 1024, 8),
        (128, 64, 128),
    ] {
        let a = rand16(&mut rng, m * k);
        let b = rand16(&mut rng, k * n);
        let wt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect(); // [n, k]
        let bias = rand16(&mut rng, n);
        let mut g = GraphBuilder::new();
        let ta = g.input("a", DType::F16, &[m, k]).unwrap();
        let tb = g.input("b", DType::F16, &[k, n]).unwrap();
        let mm = g.matmul(ta, tb).unwrap();
        let ta3 = g.reshape(ta, &[1, m as isize, k as isize]).unwrap();
        let tb3 = g.reshape(tb, &[1, k as isize, n as isize]).unwrap();
        let bmm = g.bmm(ta3, tb3).unwrap();
        let tw = g.constant_f16("w", &[n, k], &wt).unwrap();
        let tbias = g.constant_f16("bias", &[n], &bias).unwrap();
        let lin = g.linear(ta, tw, Some(tbias)).unwrap();
        let lin = g.relu(lin).unwrap();
        for o in [mm, bmm, lin] {
            g.output(o).unwrap();
        }
        let got = run(&dev, &g, &[(&[m, k], &a), (&[k, n], &b)]);
        let want = matmul_ref(&a, &b, m, k, n);
        // Deep products: the tolerance grows with the sum of |a| |b| (here about k).
        let tol = TOL_GEMM * (k as f64 / 64.0).max(1.0).sqrt();
        let what = |s: &str| format!("{s} {m}x{k}x{n}");
        assert_close(&got[0], &want, tol, &what("matmul"));
        assert_close(&got[1], &want, tol, &what("bmm"));
        let lin_want: Vec<f64> = want
            .iter()
            .enumerate()
            .map(|(i, &v)| (v + f64::from(bias[i % n])).max(0.0))
            .collect();
        assert_close(&got[2], &lin_want, tol, &what("linear"));
    }
    assert_no_validation_errors(&instance);
}

#[test]
fn f16_shape_ops_embedding_and_casts() {
    let Some((instance, dev)) = device("f16_shape_ops_embedding_and_casts") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(27);
    let shape = [2usize, 3, 5];
    let x = rand16(&mut rng, 30);
    let table = rand16(&mut rng, 12);
    let mut g = GraphBuilder::new();
    let t = g.input("x", DType::F16, &shape).unwrap();
    let ids = g
        .constant("ids", HostTensor::from_i32(vec![3], &[2, 0, 5]).unwrap())
        .unwrap();
    let tt = g.constant_f16("table", &[4, 3], &table).unwrap();
    let outs = [
        g.permute(t, &[2, 0, 1]).unwrap(),
        g.cat(&[t, t], 1).unwrap(),
        g.slice(t, 2, 1, 5, 2).unwrap(),
        g.embedding(tt, ids).unwrap(),
        t,
    ];
    for &o in &outs {
        g.output(o).unwrap();
    }
    let wide32 = g.cast(t, DType::F32).unwrap();
    let back = g.cast(wide32, DType::F16).unwrap();
    g.output(back).unwrap();
    let got = run(&dev, &g, &[(&shape, &x)]);
    let at = |a: usize, b: usize, c: usize| x[a * 15 + b * 5 + c];
    let mut permuted = Vec::new();
    for c in 0..5 {
        for a in 0..2 {
            for b in 0..3 {
                permuted.push(at(a, b, c));
            }
        }
    }
    assert_eq!(got[0], permuted, "permute");
    let mut cat = Vec::new();
    for a in 0..2 {
        for _ in 0..2 {
            cat.extend_from_slice(&x[a * 15..a * 15 + 15]);
        }
    }
    assert_eq!(got[1], cat, "cat");
    let sliced: Vec<f32> = (0..12)
        .map(|i| at(i / 6, (i / 2) % 3, 1 + 2 * (i % 2)))
        .collect();
    assert_eq!(got[2], sliced, "slice");
    let mut emb = table[6..9].to_vec();
    emb.extend_from_slice(&table[0..3]);
    emb.extend_from_slice(&[0.0; 3]);
    assert_eq!(got[3], emb, "embedding (id 5 is out of range)");
    assert_eq!(got[4], x, "an input as an output");
    assert_eq!(got[5], x, "f16 -> f32 -> f16");
    assert_no_validation_errors(&instance);
}

#[test]
fn f16_graphs_state_their_requirements_and_mixing_is_an_error() {
    let mut g = GraphBuilder::new();
    let a = g.input("a", DType::F32, &[4]).unwrap();
    let h = g.input("h", DType::F16, &[4]).unwrap();
    let c = g.cast(h, DType::F32).unwrap();
    let s = g.add(a, c).unwrap();
    g.output(s).unwrap();
    assert!(!g.uses_f16(), "casts alone need no 16-bit feature");
    assert!(g.requirements().required_features.is_empty());
    match g.add(a, h) {
        Err(Error::DType { tensor, .. }) => assert_eq!(tensor, "h"),
        other => panic!("mixing f32 and f16: {other:?}"),
    }
    let r = g.relu(h).unwrap();
    g.output(r).unwrap();
    assert!(g.uses_f16());
    let need = g.requirements().required_features;
    assert!(need.contains(Features::SHADER_FLOAT16 | Features::STORAGE_BUFFER_16BIT));
}

#[test]
fn f16_graph_on_a_device_without_the_features_is_a_named_error() {
    let test = "f16_graph_on_a_device_without_the_features_is_a_named_error";
    // A device made from the base requirements enables no 16-bit feature.
    let Some((instance, dev)) = testing::device(test, &compute_delegate::requirements()) else {
        return;
    };
    assert!(!compute_delegate::supports_f16(&dev));
    let mut g = GraphBuilder::new();
    let x = g.input("x", DType::F16, &[8]).unwrap();
    let y = g.relu(x).unwrap();
    g.output(y).unwrap();
    let msg = g.build(&dev).unwrap_err().to_string();
    assert!(msg.contains("shaderFloat16"), "{msg}");
    // Casting at the edges needs nothing.
    let mut g = GraphBuilder::new();
    let x = g.input("x", DType::F16, &[8]).unwrap();
    let y = g.cast(x, DType::F32).unwrap();
    let y = g.relu(y).unwrap();
    g.output(y).unwrap();
    assert!(g.build(&dev).is_ok());
    assert_no_validation_errors(&instance);
}

#[test]
fn f16_external_bindings_need_the_vec4_padded_bytes() {
    let Some((instance, dev)) = device("f16_external_bindings_need_the_vec4_padded_bytes") else {
        return;
    };
    // 5 f16 elements are 10 bytes; shaders touch two f16vec4s (16 bytes), the padded size.
    let mut producer = GraphBuilder::new();
    let x = producer.input("x", DType::F16, &[5]).unwrap();
    let y = producer.relu(x).unwrap();
    producer.output(y).unwrap();
    let p = producer.build(&dev).unwrap();
    let out = p.device_outputs()[0].slice;
    assert!(out.size >= 16, "output slice of {} bytes", out.size);
    let mut consumer = GraphBuilder::new();
    let x = consumer.input("x", DType::F16, &[5]).unwrap();
    let y = consumer.mul_scalar(x, 2.0).unwrap();
    consumer.output(y).unwrap();
    let short = vk_core::BufferSlice { size: 10, ..out };
    let mut opts = BuildOptions::default();
    // SAFETY: the producer's output buffer, alive for this test; nothing runs on it.
    unsafe { opts.external.bind_input(0, short) };
    let err = consumer.build_with(&dev, &opts).unwrap_err().to_string();
    assert!(err.contains("16"), "{err}");
    let mut opts = BuildOptions::default();
    // SAFETY: as above.
    unsafe {
        opts.external
            .bind_input(0, vk_core::BufferSlice { size: 16, ..out })
    };
    assert!(consumer.build_with(&dev, &opts).is_ok());
    assert_no_validation_errors(&instance);
}

#[test]
fn f16_more_scalar_forms_masks_and_compositions() {
    let Some((instance, dev)) = device("f16_more_scalar_forms_masks_and_compositions") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(28);
    let shape = [2usize, 4, 3];
    let mut x = rand16(&mut rng, 24);
    x[0] = 0.0;
    x[1] = 0.5;
    let mut g = GraphBuilder::new();
    let t = g.input("x", DType::F16, &shape).unwrap();
    let outs = [
        g.rsub_scalar(t, 1.5).unwrap(),
        g.div_scalar(t, 4.0).unwrap(),
        g.sub_scalar(t, 0.25).unwrap(),
        g.relu6(t).unwrap(),
        g.eq_scalar(t, 0.5).unwrap(),
        g.compare_scalar(t, compute_delegate::Compare::Le, 0.0)
            .unwrap(),
        g.sum(t, &[0, 2], false).unwrap(),
        g.any(t, &[1], false).unwrap(),
        g.group_norm(t, 2, None, None, 1e-5).unwrap(),
        g.transpose(t, 0, 2).unwrap(),
    ];
    for &o in &outs {
        g.output(o).unwrap();
    }
    let parts = g.split(t, &[1, 3], 1).unwrap();
    let sel = g.select(t, 2, -1).unwrap();
    for o in [parts[0], parts[1], sel] {
        g.output(o).unwrap();
    }
    let got = run(&dev, &g, &[(&shape, &x)]);
    let xs = wide(&x);
    let map = |f: fn(f64) -> f64| xs.iter().map(|&v| f(v)).collect::<Vec<f64>>();
    assert_close(&got[0], &map(|v| 1.5 - v), TOL_ELEMENTWISE, "rsub_scalar");
    assert_close(&got[1], &map(|v| v / 4.0), TOL_ELEMENTWISE, "div_scalar");
    assert_close(&got[2], &map(|v| v - 0.25), TOL_ELEMENTWISE, "sub_scalar");
    assert_close(
        &got[3],
        &map(|v| v.clamp(0.0, 6.0)),
        TOL_ELEMENTWISE,
        "relu6",
    );
    let eq = map(|v| f64::from(u8::from(v == 0.5)));
    assert_close(&got[4], &eq, 0.0, "eq_scalar");
    let le = map(|v| f64::from(u8::from(v <= 0.0)));
    assert_close(&got[5], &le, 0.0, "le_scalar");
    let at = |a: usize, b: usize, c: usize| xs[a * 12 + b * 3 + c];
    let sum02: Vec<f64> = (0..4)
        .map(|b| {
            (0..2)
                .flat_map(|a| (0..3).map(move |c| (a, c)))
                .map(|(a, c)| at(a, b, c))
                .sum()
        })
        .collect();
    assert_close(&got[6], &sum02, TOL_REDUCE, "sum over dims 0 and 2");
    let any: Vec<f64> = (0..6)
        .map(|i| f64::from(u8::from((0..4).any(|b| at(i / 3, b, i % 3) != 0.0))))
        .collect();
    assert_close(&got[7], &any, 0.0, "any over dim 1");
    let mut gn = Vec::new();
    for grp in xs.chunks(6) {
        let m = grp.iter().sum::<f64>() / 6.0;
        let var = grp.iter().map(|v| (v - m).powi(2)).sum::<f64>() / 6.0;
        gn.extend(grp.iter().map(|v| (v - m) / (var + 1e-5).sqrt()));
    }
    assert_close(&got[8], &gn, TOL_REDUCE, "group_norm");
    let tr: Vec<f32> = (0..24)
        .map(|i| x[(i % 2) * 12 + ((i / 2) % 4) * 3 + i / 8])
        .collect();
    assert_eq!(got[9], tr, "transpose");
    let first: Vec<f32> = (0..6).map(|i| x[(i / 3) * 12 + i % 3]).collect();
    assert_eq!(got[10], first, "split, first part");
    assert_eq!(got[11].len(), 18, "split, second part");
    let last: Vec<f32> = (0..8).map(|i| x[i * 3 + 2]).collect();
    assert_eq!(got[12], last, "select");
    assert_no_validation_errors(&instance);
}

#[test]
fn f16_batched_matmul_and_broadcast_where() {
    let Some((instance, dev)) = device("f16_batched_matmul_and_broadcast_where") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(29);
    let (bt, m, k, n) = (3usize, 5usize, 12usize, 9usize);
    let a = rand16(&mut rng, bt * m * k);
    let b = rand16(&mut rng, bt * k * n);
    let c = rand16(&mut rng, n);
    let mut g = GraphBuilder::new();
    let ta = g.input("a", DType::F16, &[bt, m, k]).unwrap();
    let tb = g.input("b", DType::F16, &[bt, k, n]).unwrap();
    let tc = g.input("c", DType::F16, &[n]).unwrap();
    let y = g.bmm(ta, tb).unwrap();
    let mask = g.gt_scalar(tc, 0.0).unwrap();
    let w = g.where_(mask, y, tc).unwrap();
    g.output(y).unwrap();
    g.output(w).unwrap();
    let got = run(
        &dev,
        &g,
        &[(&[bt, m, k], &a), (&[bt, k, n], &b), (&[n], &c)],
    );
    let mut want = Vec::new();
    for i in 0..bt {
        let ai = &a[i * m * k..(i + 1) * m * k];
        let bi = &b[i * k * n..(i + 1) * k * n];
        want.extend(matmul_ref(ai, bi, m, k, n));
    }
    assert_close(&got[0], &want, TOL_GEMM, "bmm");
    // `where` reads the f16-rounded product: compare with what the bmm wrote.
    let picked: Vec<f64> = got[0]
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let cv = c[i % n];
            f64::from(if cv > 0.0 { v } else { cv })
        })
        .collect();
    assert_close(&got[1], &picked, 0.0, "where, broadcast");
    assert_no_validation_errors(&instance);
}
