//! Every op against a CPU reference, over random shapes (fixed seeds) including odd sizes and
//! broadcasting edge cases, on the selected device with validation on.

#![allow(clippy::unwrap_used)] // helpers outside #[test] functions

use compute_delegate::{BuildOptions, Conv2d, GraphBuilder, Pool2d};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use vk_core::testing::{self, assert_no_validation_errors};
use vk_core::{DType, Device, HostTensor, Instance};

fn device(test: &str) -> Option<(Instance, Device)> {
    testing::device(test, &compute_delegate::requirements())
}

fn rand_vec(rng: &mut SmallRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(-2.0f32..2.0)).collect()
}

fn numel(s: &[usize]) -> usize {
    s.iter().product()
}

fn strides(s: &[usize]) -> Vec<usize> {
    let mut st = vec![1; s.len()];
    for i in (0..s.len().saturating_sub(1)).rev() {
        st[i] = st[i + 1] * s[i + 1];
    }
    st
}

fn unravel(mut i: usize, s: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; s.len()];
    for d in (0..s.len()).rev() {
        idx[d] = i % s[d];
        i /= s[d];
    }
    idx
}

#[track_caller]
fn assert_close(got: &[f32], want: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g - w).abs() <= tol * (1.0 + w.abs()) || (g.is_nan() && w.is_nan());
        assert!(ok, "{what}: element {i}: got {g}, want {w}");
    }
}

/// Builds `g` as `options` do but unfused, checks that one of its kernels is a `kernel` (what
/// the fused build did away with), runs it on `inputs` and checks its first output against
/// `got`, the fused build's, within `tol`.
#[track_caller]
fn assert_as_unfused(
    dev: &Device,
    g: &GraphBuilder,
    options: BuildOptions,
    inputs: &[HostTensor],
    got: &[f32],
    (kernel, tol): (&str, f32),
    what: &str,
) {
    let unfused = BuildOptions {
        unfused: true,
        ..options
    };
    let mut plain = g.build_with(dev, &unfused).unwrap();
    let kernels = plain.kernels();
    assert!(
        kernels.iter().any(|k| k.starts_with(kernel)),
        "{what}: {kernels:?}"
    );
    let base = plain.execute(inputs).unwrap()[0].to_f32().unwrap();
    assert_close(
        got,
        &base,
        tol,
        &format!("{what}, against the unfused graph"),
    );
}

/// Builds `b` with one f32 input per `(shape, data)` already declared, runs it (twice), and
/// returns the outputs as f32. A second build copies through staging buffers, the path of
/// discrete GPUs, and must give the same bytes.
fn run(dev: &Device, b: &GraphBuilder, inputs: &[(&[usize], &[f32])]) -> Vec<Vec<f32>> {
    let ins: Vec<HostTensor> = inputs
        .iter()
        .map(|(s, d)| HostTensor::from_f32(s.to_vec(), d).unwrap())
        .collect();
    let mut g = b.build(dev).unwrap();
    let outs = g.execute(&ins).unwrap();
    // A second run of the recorded command buffer gives the same result.
    let again = g.execute(&ins).unwrap();
    assert_eq!(outs, again);
    let opts = BuildOptions {
        force_staging: true,
        ..BuildOptions::default()
    };
    let mut staged = b.build_with(dev, &opts).unwrap();
    assert!(staged.uses_staging());
    assert_eq!(staged.execute(&ins).unwrap(), outs, "staging path");
    outs.iter().map(|o| o.to_f32().unwrap()).collect()
}

fn bcast_ref(
    a: &[f32],
    sa: &[usize],
    b: &[f32],
    sb: &[usize],
    f: fn(f32, f32) -> f32,
) -> (Vec<f32>, Vec<usize>) {
    let r = sa.len().max(sb.len());
    let pad = |s: &[usize]| {
        let mut v = vec![1; r - s.len()];
        v.extend_from_slice(s);
        v
    };
    let (pa, pb) = (pad(sa), pad(sb));
    let out: Vec<usize> = (0..r).map(|i| pa[i].max(pb[i])).collect();
    let (sta, stb) = (strides(&pa), strides(&pb));
    let v = (0..numel(&out))
        .map(|i| {
            let idx = unravel(i, &out);
            let ia: usize = (0..r)
                .map(|d| if pa[d] == 1 { 0 } else { idx[d] * sta[d] })
                .sum();
            let ib: usize = (0..r)
                .map(|d| if pb[d] == 1 { 0 } else { idx[d] * stb[d] })
                .sum();
            f(a[ia], b[ib])
        })
        .collect();
    (v, out)
}

#[test]
fn binary_ops_broadcast_like_pytorch() {
    let Some((instance, dev)) = device("binary_ops_broadcast_like_pytorch") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(1);
    let cases: &[(&[usize], &[usize])] = &[
        (&[7], &[7]),
        (&[3, 5], &[3, 5]),
        (&[2, 3, 5], &[5]),
        (&[2, 3, 5], &[3, 1]),
        (&[1, 4, 1], &[3, 1, 6]),
        (&[2, 1, 3, 1, 5], &[1, 4, 1, 7, 1]),
        (&[1], &[9, 3]),
        (&[3, 1001], &[3, 1001]),
        (&[4, 1, 2, 1, 3, 1], &[1, 3, 1, 2, 1, 2]),
    ];
    type Ref = fn(f32, f32) -> f32;
    let ops: [(&str, Ref); 4] = [
        ("add", |a, b| a + b),
        ("sub", |a, b| a - b),
        ("mul", |a, b| a * b),
        ("div", |a, b| a / b),
    ];
    for (sa, sb) in cases {
        let a = rand_vec(&mut rng, numel(sa));
        let mut b = rand_vec(&mut rng, numel(sb));
        for v in &mut b {
            if v.abs() < 0.1 {
                *v = 0.5;
            }
        }
        let mut g = GraphBuilder::new();
        let ta = g.input("a", DType::F32, sa).unwrap();
        let tb = g.input("b", DType::F32, sb).unwrap();
        let outs = [
            g.add(ta, tb).unwrap(),
            g.sub(ta, tb).unwrap(),
            g.mul(ta, tb).unwrap(),
            g.div(ta, tb).unwrap(),
        ];
        for o in outs {
            g.output(o).unwrap();
        }
        let got = run(&dev, &g, &[(sa, &a), (sb, &b)]);
        for (k, (name, f)) in ops.iter().enumerate() {
            let (want, shape) = bcast_ref(&a, sa, &b, sb, *f);
            assert_eq!(g.shape(outs[k]).unwrap(), shape.as_slice());
            assert_close(&got[k], &want, 1e-6, &format!("{name} {sa:?} {sb:?}"));
        }
    }
    assert_no_validation_errors(&instance);
}

#[test]
fn unary_and_scalar_ops_match_the_reference() {
    let Some((instance, dev)) = device("unary_and_scalar_ops_match_the_reference") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(2);
    for shape in [&[1usize][..], &[5], &[3, 7], &[2, 3, 5, 7], &[3, 1001]] {
        let mut x = rand_vec(&mut rng, numel(shape));
        for v in x.iter_mut() {
            *v *= 5.0;
        }
        x[0] = 30.0;
        let mut g = GraphBuilder::new();
        let t = g.input("x", DType::F32, shape).unwrap();
        let outs = vec![
            g.relu(t).unwrap(),
            g.relu6(t).unwrap(),
            g.hardtanh(t, -1.0, 1.0).unwrap(),
            g.clamp(t, -0.5, 2.5).unwrap(),
            g.sigmoid(t).unwrap(),
            g.tanh(t).unwrap(),
            g.gelu(t, false).unwrap(),
            g.gelu(t, true).unwrap(),
            g.hardswish(t).unwrap(),
            g.add_scalar(t, 1.5).unwrap(),
            g.sub_scalar(t, 1.5).unwrap(),
            g.rsub_scalar(t, 1.5).unwrap(),
            g.mul_scalar(t, -3.0).unwrap(),
            g.div_scalar(t, 4.0).unwrap(),
        ];
        for &o in &outs {
            g.output(o).unwrap();
        }
        let got = run(&dev, &g, &[(shape, &x)]);
        let refs: Vec<fn(f32) -> f32> = vec![
            |v| v.max(0.0),
            |v| v.clamp(0.0, 6.0),
            |v| v.clamp(-1.0, 1.0),
            |v| v.clamp(-0.5, 2.5),
            |v| 1.0 / (1.0 + (-v).exp()),
            |v| v.tanh(),
            |v| (0.5 * v as f64 * (1.0 + libm::erf(v as f64 / 2f64.sqrt()))) as f32,
            |v| {
                let u = 0.797_884_6 * (v + 0.044715 * v * v * v);
                0.5 * v * (1.0 + u.tanh())
            },
            |v| v * (v + 3.0).clamp(0.0, 6.0) / 6.0,
            |v| v + 1.5,
            |v| v - 1.5,
            |v| 1.5 - v,
            |v| v * -3.0,
            |v| v / 4.0,
        ];
        for (k, f) in refs.iter().enumerate() {
            let want: Vec<f32> = x.iter().map(|&v| f(v)).collect();
            assert_close(&got[k], &want, 2e-5, &format!("unary #{k} on {shape:?}"));
        }
    }
    assert_no_validation_errors(&instance);
}

fn softmax_ref(x: &[f32], s: &[usize], dim: usize, log: bool) -> Vec<f32> {
    let outer: usize = s[..dim].iter().product();
    let d = s[dim];
    let inner: usize = s[dim + 1..].iter().product();
    let mut y = vec![0.0; x.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| (o * d + j) * inner + i;
            let m = (0..d).map(|j| x[at(j)]).fold(f32::NEG_INFINITY, f32::max);
            let sum: f64 = (0..d).map(|j| ((x[at(j)] - m) as f64).exp()).sum();
            for j in 0..d {
                let v = (x[at(j)] - m) as f64;
                y[at(j)] = if log {
                    (v - sum.ln()) as f32
                } else {
                    (v.exp() / sum) as f32
                };
            }
        }
    }
    y
}

#[test]
fn softmax_and_log_softmax_over_any_dim() {
    let Some((instance, dev)) = device("softmax_and_log_softmax_over_any_dim") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(3);
    for shape in [
        &[5usize][..],
        &[3, 300],
        &[2, 7, 5],
        &[2, 3, 4, 5],
        &[1, 513],
        &[2, 2052],
        &[3, 9000],
        &[2, 64],
    ] {
        let x: Vec<f32> = rand_vec(&mut rng, numel(shape))
            .iter()
            .map(|v| v * 4.0)
            .collect();
        for dim in 0..shape.len() {
            let mut g = GraphBuilder::new();
            let t = g.input("x", DType::F32, shape).unwrap();
            let s = g.softmax(t, dim as isize).unwrap();
            let l = g
                .log_softmax(t, dim as isize - shape.len() as isize)
                .unwrap();
            g.output(s).unwrap();
            g.output(l).unwrap();
            let got = run(&dev, &g, &[(shape, &x)]);
            let what = format!("softmax {shape:?} dim {dim}");
            assert_close(&got[0], &softmax_ref(&x, shape, dim, false), 1e-5, &what);
            assert_close(&got[1], &softmax_ref(&x, shape, dim, true), 1e-5, &what);
            // The shared-memory reduction (used where subgroup arithmetic is missing).
            let opts = BuildOptions {
                disable_subgroups: true,
                ..BuildOptions::default()
            };
            let mut plain = g.build_with(&dev, &opts).unwrap();
            let out = plain
                .execute(&[HostTensor::from_f32(shape.to_vec(), &x).unwrap()])
                .unwrap();
            let what = format!("softmax (shared memory) {shape:?} dim {dim}");
            let want = softmax_ref(&x, shape, dim, false);
            assert_close(&out[0].to_f32().unwrap(), &want, 1e-5, &what);
        }
    }
    assert_no_validation_errors(&instance);
}

fn pool_ref(x: &[f32], s: &[usize], p: &Pool2d, max: bool, out: &[usize]) -> Vec<f32> {
    let r = s.len();
    let (h, w) = (s[r - 2], s[r - 1]);
    let (oh, ow) = (out[r - 2], out[r - 1]);
    let planes = numel(&s[..r - 2]);
    let mut y = Vec::new();
    for pl in 0..planes {
        for oy in 0..oh {
            for ox in 0..ow {
                let y0 = (oy * p.stride[0]) as i64 - p.padding[0] as i64;
                let x0 = (ox * p.stride[1]) as i64 - p.padding[1] as i64;
                let y1 = (y0 + p.kernel[0] as i64).min((h + p.padding[0]) as i64);
                let x1 = (x0 + p.kernel[1] as i64).min((w + p.padding[1]) as i64);
                let pool = (y1 - y0) * (x1 - x0);
                let (ya, xa) = (y0.max(0), x0.max(0));
                let (yb, xb) = (y1.min(h as i64), x1.min(w as i64));
                let mut acc = if max { f32::NEG_INFINITY } else { 0.0 };
                for yy in ya..yb {
                    for xx in xa..xb {
                        let v = x[pl * h * w + yy as usize * w + xx as usize];
                        acc = if max { acc.max(v) } else { acc + v };
                    }
                }
                if !max {
                    let div = if p.count_include_pad {
                        pool
                    } else {
                        (yb - ya) * (xb - xa)
                    };
                    acc /= div.max(1) as f32;
                }
                y.push(acc);
            }
        }
    }
    y
}

#[test]
fn pooling_with_padding_and_ceil_mode() {
    let Some((instance, dev)) = device("pooling_with_padding_and_ceil_mode") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(4);
    let cases: &[(&[usize], Pool2d, [usize; 2])] = &[
        (&[1, 3, 8, 8], Pool2d::new(2, 2), [4, 4]),
        (&[2, 3, 6, 12], Pool2d::new(2, 2), [3, 6]),
        (&[1, 5, 7], Pool2d::new(2, 2), [2, 3]),
        (&[2, 3, 7, 9], Pool2d::new(3, 2), [3, 4]),
        (
            &[2, 2, 7, 9],
            Pool2d {
                kernel: [3, 3],
                stride: [2, 2],
                padding: [1, 1],
                ceil_mode: true,
                count_include_pad: true,
            },
            [4, 5],
        ),
        (
            &[3, 5, 6],
            Pool2d {
                kernel: [2, 3],
                stride: [2, 2],
                padding: [1, 1],
                ceil_mode: true,
                count_include_pad: false,
            },
            [3, 4],
        ),
        (
            &[1, 1, 5, 5],
            Pool2d {
                kernel: [2, 2],
                stride: [2, 2],
                padding: [0, 0],
                ceil_mode: true,
                count_include_pad: true,
            },
            [3, 3],
        ),
    ];
    for (shape, p, hw) in cases {
        let x = rand_vec(&mut rng, numel(shape));
        let mut g = GraphBuilder::new();
        let t = g.input("x", DType::F32, shape).unwrap();
        let a = g.avg_pool2d(t, *p).unwrap();
        let m = g.max_pool2d(t, *p).unwrap();
        g.output(a).unwrap();
        g.output(m).unwrap();
        let out = g.shape(a).unwrap().to_vec();
        assert_eq!(&out[out.len() - 2..], hw, "{shape:?} {p:?}");
        let got = run(&dev, &g, &[(shape, &x)]);
        assert_close(
            &got[0],
            &pool_ref(&x, shape, p, false, &out),
            1e-6,
            &format!("avg {shape:?} {p:?}"),
        );
        assert_close(
            &got[1],
            &pool_ref(&x, shape, p, true, &out),
            0.0,
            &format!("max {shape:?} {p:?}"),
        );
    }
    assert_no_validation_errors(&instance);
}

#[allow(clippy::too_many_arguments)]
fn conv_ref(
    x: &[f32],
    xs: &[usize],
    w: &[f32],
    ws: &[usize],
    b: Option<&[f32]>,
    p: &Conv2d,
    os: &[usize],
) -> Vec<f32> {
    let (n, cin, h, wd) = (xs[0], xs[1], xs[2], xs[3]);
    let (cout, cin_g, kh, kw) = (ws[0], ws[1], ws[2], ws[3]);
    let (oh, ow) = (os[2], os[3]);
    let cout_g = cout / p.groups;
    let mut y = vec![0.0f32; n * cout * oh * ow];
    for img in 0..n {
        for co in 0..cout {
            let g = co / cout_g;
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut acc = b.map_or(0.0, |b| b[co] as f64);
                    for ci in 0..cin_g {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let iy = (oy * p.stride[0] + ky * p.dilation[0]) as i64
                                    - p.padding[0] as i64;
                                let ix = (ox * p.stride[1] + kx * p.dilation[1]) as i64
                                    - p.padding[1] as i64;
                                if iy < 0 || ix < 0 || iy >= h as i64 || ix >= wd as i64 {
                                    continue;
                                }
                                let xv = x[((img * cin + g * cin_g + ci) * h + iy as usize) * wd
                                    + ix as usize];
                                let wv = w[((co * cin_g + ci) * kh + ky) * kw + kx];
                                acc += xv as f64 * wv as f64;
                            }
                        }
                    }
                    y[((img * cout + co) * oh + oy) * ow + ox] = acc as f32;
                }
            }
        }
    }
    let _ = cin;
    y
}

#[test]
fn conv2d_general_pointwise_and_depthwise() {
    let Some((instance, dev)) = device("conv2d_general_pointwise_and_depthwise") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(5);
    // (input, weight, params, bias)
    let cases: Vec<([usize; 4], [usize; 4], Conv2d, bool)> = vec![
        (
            [1, 3, 9, 11],
            [5, 3, 3, 3],
            Conv2d {
                padding: [1, 1],
                ..Conv2d::default()
            },
            true,
        ),
        (
            [2, 4, 10, 7],
            [6, 4, 3, 2],
            Conv2d {
                stride: [2, 1],
                padding: [1, 0],
                ..Conv2d::default()
            },
            false,
        ),
        (
            [1, 6, 9, 9],
            [4, 3, 3, 3],
            Conv2d {
                groups: 2,
                dilation: [2, 2],
                padding: [2, 1],
                ..Conv2d::default()
            },
            true,
        ),
        ([2, 7, 5, 6], [9, 7, 1, 1], Conv2d::default(), true),
        ([2, 8, 4, 4], [12, 8, 1, 1], Conv2d::default(), true),
        // One pixel (a squeeze-excite layer), as a product of one row: depths that are
        // multiples of 4 and one that is not.
        ([1, 24, 1, 1], [40, 24, 1, 1], Conv2d::default(), true),
        ([1, 6, 1, 1], [5, 6, 1, 1], Conv2d::default(), false),
        (
            [1, 8, 9, 8],
            [16, 8, 3, 3],
            Conv2d {
                padding: [1, 1],
                ..Conv2d::default()
            },
            false,
        ),
        (
            [1, 5, 8, 7],
            [5, 1, 3, 3],
            Conv2d {
                groups: 5,
                padding: [1, 1],
                stride: [2, 2],
                ..Conv2d::default()
            },
            true,
        ),
        (
            [1, 3, 7, 7],
            [6, 1, 5, 5],
            Conv2d {
                groups: 3,
                padding: [2, 2],
                dilation: [1, 1],
                ..Conv2d::default()
            },
            false,
        ),
        (
            [1, 70, 6, 5],
            [130, 70, 3, 3],
            Conv2d {
                padding: [1, 1],
                ..Conv2d::default()
            },
            true,
        ),
    ];
    for (xs, ws, p, with_bias) in cases {
        let x = rand_vec(&mut rng, numel(&xs));
        let w = rand_vec(&mut rng, numel(&ws));
        let b = rand_vec(&mut rng, ws[0]);
        let mut g = GraphBuilder::new();
        let tx = g.input("x", DType::F32, &xs).unwrap();
        let tw = g.constant_f32("w", &ws, &w).unwrap();
        let tb = with_bias.then(|| g.constant_f32("b", &[ws[0]], &b).unwrap());
        let y = g.conv2d(tx, tw, tb, p).unwrap();
        g.output(y).unwrap();
        let os = g.shape(y).unwrap().to_vec();
        let got = run(&dev, &g, &[(&xs, &x)]);
        let want = conv_ref(&x, &xs, &w, &ws, with_bias.then_some(b.as_slice()), &p, &os);
        assert_close(&got[0], &want, 1e-4, &format!("conv {xs:?} {ws:?} {p:?}"));
    }
    assert_no_validation_errors(&instance);
}

/// fp32 pointwise convolutions of few outputs run as one dot product per output (`ConvPw`),
/// with their bias and fused clamp, channel counts not a multiple of the kernel's four. Under a
/// CPU driver's layouts deeper ones (past 128) stay on the tiled GEMM; under a GPU's, lanes
/// share the sums of layers of few invocations (the split variant), whatever their depth up to
/// a size, and larger deep layers stay on the GEMM.
#[test]
fn narrow_pointwise_convolutions_are_dot_products() {
    let Some((instance, dev)) = device("narrow_pointwise_convolutions_are_dot_products") else {
        return;
    };
    let cpu = dev.capabilities().device_type == vk_core::DeviceType::Cpu;
    let mut rng = SmallRng::seed_from_u64(51);
    // (input, output channels, bias, direct under a CPU driver's layouts, under a GPU's)
    let cases = [
        ([2, 7, 5, 6], 9, true, true, true),
        ([1, 16, 28, 28], 24, false, true, true),
        ([1, 58, 7, 7], 58, true, true, true),
        ([1, 200, 7, 7], 20, true, false, true),
        ([1, 300, 7, 7], 20, true, false, true),
        ([1, 512, 16, 32], 160, false, false, false),
    ];
    for (xs, m, with_bias, direct_cpu, direct_gpu) in cases {
        let ws = [m, xs[1], 1, 1];
        let x = rand_vec(&mut rng, numel(&xs));
        let w = rand_vec(&mut rng, numel(&ws));
        let b = rand_vec(&mut rng, m);
        let mut g = GraphBuilder::new();
        let tx = g.input("x", DType::F32, &xs).unwrap();
        let tw = g.constant_f32("w", &ws, &w).unwrap();
        let tb = with_bias.then(|| g.constant_f32("b", &[m], &b).unwrap());
        let y = g.conv2d(tx, tw, tb, Conv2d::default()).unwrap();
        let y = g.relu6(y).unwrap();
        g.output(y).unwrap();
        let os = g.shape(y).unwrap().to_vec();
        let p = Conv2d::default();
        let want: Vec<f32> = conv_ref(&x, &xs, &w, &ws, with_bias.then_some(b.as_slice()), &p, &os)
            .into_iter()
            .map(|v| v.clamp(0.0, 6.0))
            .collect();
        // As the device lays them out, then as a GPU does.
        let layouts = [(cpu, direct_cpu), (false, direct_gpu)];
        for (as_cpu, direct) in layouts.into_iter().skip(usize::from(!cpu)) {
            let options = BuildOptions {
                gpu_layouts: !as_cpu,
                ..BuildOptions::default()
            };
            let what = format!("pointwise {xs:?} -> {m}, CPU layouts {as_cpu}");
            let mut built = g.build_with(&dev, &options).unwrap();
            let kernels = built.kernels();
            assert_eq!(
                kernels.iter().any(|k| k.starts_with("ConvPw")),
                direct,
                "{what}: {kernels:?}"
            );
            if direct {
                // The clamp is the kernel's own.
                assert_eq!(kernels.len(), 1, "{what}: {kernels:?}");
                // Under a GPU's layouts, layers of few invocations and deep enough sums share
                // each sum among lanes (the split variant).
                let split = !as_cpu && xs[1] >= 16;
                assert_eq!(
                    kernels.iter().any(|k| *k == "ConvPwSplit"),
                    split,
                    "{what}: {kernels:?}"
                );
            }
            let got = built
                .execute(&[HostTensor::from_f32(xs.to_vec(), &x).unwrap()])
                .unwrap()[0]
                .to_f32()
                .unwrap();
            assert_close(&got, &want, 1e-4, &what);
        }
    }
    assert_no_validation_errors(&instance);
}

/// Depthwise convolutions of windows up to 7 x 7 without dilation run on `conv_dw.comp`'s row
/// variant (a thread several outputs of a row) on a CPU driver, with their bias and fused
/// clamp: padding on every side, horizontal strides 1 and 2, rows not a multiple of the
/// outputs a thread takes, a channel multiplier. Under a GPU's layouts, and on a GPU, they
/// stay on the plain kernel by default, as do dilated windows and larger ones everywhere.
#[test]
fn depthwise_rows_share_their_loads() {
    let Some((instance, dev)) = device("depthwise_rows_share_their_loads") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(53);
    let dw = |c, stride, padding, dilation| Conv2d {
        stride,
        padding,
        dilation,
        groups: c,
    };
    // (input, weight, params, bias, row variant)
    let cases = [
        (
            [1, 6, 15, 13],
            [6, 1, 7, 7],
            dw(6, [1, 1], [3, 3], [1, 1]),
            true,
            true,
        ),
        (
            [2, 4, 11, 10],
            [4, 1, 3, 3],
            dw(4, [2, 2], [1, 1], [1, 1]),
            false,
            true,
        ),
        (
            [1, 3, 9, 17],
            [6, 1, 5, 5],
            dw(3, [1, 2], [2, 2], [1, 1]),
            true,
            true,
        ),
        (
            [1, 5, 6, 9],
            [5, 1, 1, 3],
            dw(5, [2, 1], [0, 1], [1, 1]),
            true,
            true,
        ),
        (
            [1, 64, 34, 34],
            [64, 1, 3, 3],
            dw(64, [1, 1], [1, 1], [1, 1]),
            true,
            true,
        ),
        (
            [1, 4, 9, 9],
            [4, 1, 3, 3],
            dw(4, [1, 1], [2, 2], [2, 2]),
            true,
            false,
        ),
        (
            [1, 2, 12, 12],
            [2, 1, 9, 9],
            dw(2, [1, 1], [4, 4], [1, 1]),
            false,
            false,
        ),
    ];
    for (xs, ws, p, with_bias, row) in cases {
        let x = rand_vec(&mut rng, numel(&xs));
        let w = rand_vec(&mut rng, numel(&ws));
        let b = rand_vec(&mut rng, ws[0]);
        let mut g = GraphBuilder::new();
        let tx = g.input("x", DType::F32, &xs).unwrap();
        let tw = g.constant_f32("w", &ws, &w).unwrap();
        let tb = with_bias.then(|| g.constant_f32("b", &[ws[0]], &b).unwrap());
        let y = g.conv2d(tx, tw, tb, p).unwrap();
        let y = g.relu6(y).unwrap();
        g.output(y).unwrap();
        let os = g.shape(y).unwrap().to_vec();
        let want: Vec<f32> = conv_ref(&x, &xs, &w, &ws, with_bias.then_some(b.as_slice()), &p, &os)
            .into_iter()
            .map(|v| v.clamp(0.0, 6.0))
            .collect();
        for gpu_layouts in [false, true] {
            let options = BuildOptions {
                gpu_layouts,
                ..BuildOptions::default()
            };
            let what = format!("depthwise {xs:?} {ws:?} {p:?}, GPU layouts {gpu_layouts}");
            let mut built = g.build_with(&dev, &options).unwrap();
            // Windows the row variant takes run on it under both layouts (4 outputs a
            // thread on a CPU driver's own, fewer under a GPU's where threads are few).
            let kernel = if row { "ConvDwRow" } else { "ConvDw" };
            // The clamp is the kernel's own.
            assert_eq!(built.kernels(), [kernel], "{what}");
            let got = built
                .execute(&[HostTensor::from_f32(xs.to_vec(), &x).unwrap()])
                .unwrap()[0]
                .to_f32()
                .unwrap();
            assert_close(&got, &want, 1e-4, &what);
        }
    }
    assert_no_validation_errors(&instance);
}

/// A depthwise convolution whose result a permute moves channels last (a ConvNeXt block's
/// first permute) writes channels last itself, the permute gone, with a residual added after
/// the permute fused in (row kernels of 4 and of fewer outputs a thread under CPU and GPU
/// layouts, and the plain kernel for a 9 x 9 window); with a second reader of its result, the
/// permute stays.
#[test]
fn depthwise_results_moved_channels_last_are_written_so() {
    let Some((instance, dev)) = device("depthwise_results_moved_channels_last_are_written_so")
    else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(54);
    let dw = |c, stride, padding| Conv2d {
        stride,
        padding,
        groups: c,
        ..Conv2d::default()
    };
    // (input, weight, params, a second reader)
    let cases = [
        ([1, 6, 13, 11], [6, 1, 7, 7], dw(6, [1, 1], [3, 3]), false),
        ([2, 4, 10, 9], [8, 1, 3, 3], dw(4, [2, 2], [1, 1]), false),
        // Wider than the row variant takes: the plain kernel.
        ([1, 3, 12, 10], [3, 1, 9, 9], dw(3, [1, 1], [4, 4]), false),
        ([1, 5, 8, 8], [5, 1, 3, 3], dw(5, [1, 1], [1, 1]), true),
    ];
    for (xs, ws, p, shared) in cases {
        let x = rand_vec(&mut rng, numel(&xs));
        let w = rand_vec(&mut rng, numel(&ws));
        let b = rand_vec(&mut rng, ws[0]);
        let mut g = GraphBuilder::new();
        let tx = g.input("x", DType::F32, &xs).unwrap();
        let tw = g.constant_f32("w", &ws, &w).unwrap();
        let tb = g.constant_f32("b", &[ws[0]], &b).unwrap();
        let y = g.conv2d(tx, tw, Some(tb), p).unwrap();
        let os = g.shape(y).unwrap().to_vec();
        let last = [os[0], os[2], os[3], os[1]];
        let r = rand_vec(&mut rng, numel(&last));
        let tr = g.input("r", DType::F32, &last).unwrap();
        let z = g.permute(y, &[0, 2, 3, 1]).unwrap();
        let z = g.add(z, tr).unwrap();
        g.output(z).unwrap();
        if shared {
            let s = g.sigmoid(y).unwrap();
            g.output(s).unwrap();
        }
        let conv = conv_ref(&x, &xs, &w, &ws, Some(b.as_slice()), &p, &os);
        let [_, c, h, wd] = [os[0], os[1], os[2], os[3]];
        let mut want = vec![0.0; conv.len()];
        for (i, v) in want.iter_mut().enumerate() {
            let (ch, px) = (i % c, i / c);
            let (xx, yy, nn) = (px % wd, (px / wd) % h, px / (wd * h));
            *v = conv[((nn * c + ch) * h + yy) * wd + xx] + r[i];
        }
        let what = format!("depthwise {xs:?} {ws:?} {p:?} then channels last, shared {shared}");
        for gpu_layouts in [false, true] {
            let options = BuildOptions {
                gpu_layouts,
                ..BuildOptions::default()
            };
            let mut built = g.build_with(&dev, &options).unwrap();
            let kernels = built.kernels();
            assert!(kernels[0].starts_with("ConvDw"), "{what}: {kernels:?}");
            match shared {
                // The permute and the residual are the convolution's.
                false => assert_eq!(kernels.len(), 1, "{what}: {kernels:?}"),
                // The permute stays, read through by the sum.
                true => assert!(kernels.len() > 2, "{what}: {kernels:?}"),
            }
            let inputs = [
                HostTensor::from_f32(xs.to_vec(), &x).unwrap(),
                HostTensor::from_f32(last.to_vec(), &r).unwrap(),
            ];
            let got = built.execute(&inputs).unwrap()[0].to_f32().unwrap();
            assert_close(&got, &want, 1e-4, &what);
            // The unfused graph (the permute a copy of its own) computes the same.
            assert_as_unfused(&dev, &g, options, &inputs, &got, ("Copy", 1e-6), &what);
        }
    }
    assert_no_validation_errors(&instance);
}

/// A quantize to int8 and a dequantize back (a fake-quantized model's every layer:
/// `clamp(round(x / s) + zp)` cast to int8, cast back, `(q - zp) * s`) is one elementwise
/// dispatch: the round trip through int8 changes no integer in range, so it goes, and the
/// chains on both sides join. Two such pairs with a ReLU6 between (13 steps as written, one
/// more than a chain holds) are one dispatch too: the zero point added and taken away again
/// folds into the clamp's bounds. Without rounding the casts truncate, and they stay.
#[test]
fn integer_round_trips_of_integers_are_dropped() {
    let Some((instance, dev)) = device("integer_round_trips_of_integers_are_dropped") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(55);
    let shape = [2usize, 3, 17];
    let x = rand_vec(&mut rng, numel(&shape));
    let fake_quant = |v: f32, s: f32, zp: f32, rounded: bool| {
        let q = v * (1.0 / s);
        let q = if rounded { q.round_ties_even() } else { q };
        // The cast to int8 truncates towards zero.
        let q = (q + zp).clamp(-128.0, 127.0).trunc();
        (q - zp) * s
    };
    let (s1, zp1, s2, zp2) = (0.05f32, -7.0f32, 0.03f32, 3.0f32);
    for (rounded, twice) in [(true, false), (true, true), (false, false)] {
        let mut g = GraphBuilder::new();
        let tx = g.input("x", DType::F32, &shape).unwrap();
        let pair = |g: &mut GraphBuilder, t, s: f32, zp: f32| {
            let mut q = g.mul_scalar(t, 1.0 / s).unwrap();
            if rounded {
                q = g.math(compute_delegate::Math::Round, q, 0.0).unwrap();
            }
            let q = g.add_scalar(q, zp).unwrap();
            let q = g.clamp(q, -128.0, 127.0).unwrap();
            let q = g.cast(q, DType::I8).unwrap();
            let y = g.cast(q, DType::F32).unwrap();
            let y = g.add_scalar(y, -zp).unwrap();
            g.mul_scalar(y, s).unwrap()
        };
        let mut y = pair(&mut g, tx, s1, zp1);
        if twice {
            let r = g.clamp(y, 0.0, 6.0).unwrap();
            y = pair(&mut g, r, s2, zp2);
        }
        g.output(y).unwrap();
        let want: Vec<f32> = x
            .iter()
            .map(|&v| {
                let y = fake_quant(v, s1, zp1, rounded);
                match twice {
                    true => fake_quant(y.clamp(0.0, 6.0), s2, zp2, rounded),
                    false => y,
                }
            })
            .collect();
        let what = format!("quantize and dequantize, rounded {rounded}, twice {twice}");
        let inputs = [HostTensor::from_f32(shape.to_vec(), &x).unwrap()];
        let mut fused = g.build(&dev).unwrap();
        let kernels = fused.kernels();
        match rounded {
            true => assert_eq!(kernels, ["Elementwise"], "{what}"),
            false => assert!(
                kernels.iter().any(|k| k.starts_with("Cast")),
                "{what}: {kernels:?}"
            ),
        }
        let got = fused.execute(&inputs).unwrap()[0].to_f32().unwrap();
        assert_close(&got, &want, 1e-6, &what);
        let options = BuildOptions::default();
        assert_as_unfused(&dev, &g, options, &inputs, &got, ("Cast", 0.0), &what);
    }
    assert_no_validation_errors(&instance);
}

/// A split-K linear whose one reader is an elementwise chain (a ConvNeXt block's second
/// linear: layer scale, permute back and residual) has no summing pass: the chain sums the
/// partials as it reads them. With a second reader of the linear's result, the pass stays.
#[test]
fn chains_sum_the_partials_of_split_products() {
    let Some((instance, dev)) = device("chains_sum_the_partials_of_split_products") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(56);
    let (hw, c, k) = (7usize, 96usize, 1536usize);
    let x = rand_vec(&mut rng, hw * hw * k);
    let w: Vec<f32> = rand_vec(&mut rng, c * k).iter().map(|v| v * 0.05).collect();
    let b = rand_vec(&mut rng, c);
    let gamma = rand_vec(&mut rng, c);
    let r = rand_vec(&mut rng, c * hw * hw);
    for shared in [false, true] {
        let mut g = GraphBuilder::new();
        let tx = g.input("x", DType::F32, &[1, hw, hw, k]).unwrap();
        let tr = g.input("r", DType::F32, &[1, c, hw, hw]).unwrap();
        let tw = g.constant_f32("w", &[c, k], &w).unwrap();
        let tb = g.constant_f32("b", &[c], &b).unwrap();
        let tg = g.constant_f32("gamma", &[c, 1, 1], &gamma).unwrap();
        let y = g.linear(tx, tw, Some(tb)).unwrap();
        let z = g.permute(y, &[0, 3, 1, 2]).unwrap();
        let z = g.mul(z, tg).unwrap();
        let z = g.add(z, tr).unwrap();
        g.output(z).unwrap();
        if shared {
            g.output(y).unwrap();
        }
        let mut want = vec![0.0f32; c * hw * hw];
        for p in 0..hw * hw {
            for o in 0..c {
                let dot: f32 = (0..k).map(|i| x[p * k + i] * w[o * k + i]).sum();
                want[o * hw * hw + p] = (dot + b[o]) * gamma[o] + r[o * hw * hw + p];
            }
        }
        let what = format!("split linear, layer scale, permute and residual; shared {shared}");
        let inputs = [
            HostTensor::from_f32(vec![1, hw, hw, k], &x).unwrap(),
            HostTensor::from_f32(vec![1, c, hw, hw], &r).unwrap(),
        ];
        let mut fused = g.build(&dev).unwrap();
        let kernels = fused.kernels();
        assert!(
            kernels.iter().any(|k| k.starts_with("Elementwise")),
            "{what}: {kernels:?}"
        );
        let summed = kernels.iter().any(|k| k.starts_with("SplitSum"));
        assert_eq!(summed, shared, "{what}: {kernels:?}");
        let got = fused.execute(&inputs).unwrap()[0].to_f32().unwrap();
        assert_close(&got, &want, 1e-4, &what);
        let options = BuildOptions::default();
        assert_as_unfused(&dev, &g, options, &inputs, &got, ("SplitSum", 1e-6), &what);
    }
    assert_no_validation_errors(&instance);
}

/// fp32 convolutions of one group and short sums (a first layer's 3 channels by a 3 x 3
/// window) run as one dot product per output (`ConvDirect`) with their bias and fused clamp,
/// under strides, padding and dilation; longer sums stay on the implicit GEMM.
#[test]
fn convolutions_of_short_sums_are_dot_products() {
    let Some((instance, dev)) = device("convolutions_of_short_sums_are_dot_products") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(52);
    let conv = |stride, padding, dilation| Conv2d {
        stride,
        padding,
        dilation,
        ..Conv2d::default()
    };
    // (input, weight, params, bias, direct)
    let cases = [
        (
            [1, 3, 9, 11],
            [5, 3, 3, 3],
            conv([2, 2], [1, 1], [1, 1]),
            true,
            true,
        ),
        (
            [2, 2, 8, 9],
            [9, 2, 3, 3],
            conv([1, 2], [2, 1], [2, 2]),
            false,
            true,
        ),
        (
            [1, 1, 6, 7],
            [3, 1, 5, 5],
            conv([1, 1], [2, 2], [1, 1]),
            true,
            true,
        ),
        (
            [1, 3, 12, 10],
            [16, 3, 1, 3],
            conv([3, 1], [0, 1], [1, 1]),
            true,
            true,
        ),
        (
            [1, 4, 6, 6],
            [4, 4, 3, 3],
            conv([1, 1], [1, 1], [1, 1]),
            true,
            false,
        ),
    ];
    for (xs, ws, p, with_bias, direct) in cases {
        let x = rand_vec(&mut rng, numel(&xs));
        let w = rand_vec(&mut rng, numel(&ws));
        let b = rand_vec(&mut rng, ws[0]);
        let mut g = GraphBuilder::new();
        let tx = g.input("x", DType::F32, &xs).unwrap();
        let tw = g.constant_f32("w", &ws, &w).unwrap();
        let tb = with_bias.then(|| g.constant_f32("b", &[ws[0]], &b).unwrap());
        let y = g.conv2d(tx, tw, tb, p).unwrap();
        let y = g.relu6(y).unwrap();
        g.output(y).unwrap();
        let what = format!("conv {xs:?} {ws:?} {p:?}");
        let kernels = g.build(&dev).unwrap().kernels();
        if direct {
            // The clamp is the kernel's own.
            assert_eq!(kernels, ["ConvDirect"], "{what}");
        } else {
            assert!(
                !kernels.iter().any(|k| k == "ConvDirect"),
                "{what}: {kernels:?}"
            );
        }
        let os = g.shape(y).unwrap().to_vec();
        let got = run(&dev, &g, &[(&xs, &x)]);
        let want: Vec<f32> = conv_ref(&x, &xs, &w, &ws, with_bias.then_some(b.as_slice()), &p, &os)
            .into_iter()
            .map(|v| v.clamp(0.0, 6.0))
            .collect();
        assert_close(&got[0], &want, 1e-4, &what);
    }
    assert_no_validation_errors(&instance);
}

#[allow(clippy::too_many_arguments)]
fn matmul_ref(
    a: &[f32],
    b: &[f32],
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    a_b: bool,
    b_b: bool,
) -> Vec<f32> {
    let mut c = vec![0.0; batch * m * n];
    for z in 0..batch {
        let ao = if a_b { z * m * k } else { 0 };
        let bo = if b_b { z * k * n } else { 0 };
        for i in 0..m {
            for j in 0..n {
                let s: f64 = (0..k)
                    .map(|q| a[ao + i * k + q] as f64 * b[bo + q * n + j] as f64)
                    .sum();
                c[(z * m + i) * n + j] = s as f32;
            }
        }
    }
    c
}

#[test]
fn matmul_bmm_and_linear() {
    let Some((instance, dev)) = device("matmul_bmm_and_linear") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(6);
    for (m, k, n) in [
        (1, 1, 1),
        (5, 7, 3),
        (33, 17, 65),
        (130, 9, 70),
        (64, 64, 64),
        (3, 200, 5),
        (130, 600, 70),
        (7, 1030, 9),
        (9, 13, 36),
        // 256 whole 128 x 128 tiles without split-K: the wide register tiles.
        (2048, 12, 2048),
        // Whole tiles and whole K steps: the loop without bounds tests, on 64 x 64 tiles of
        // the 8 x 8 kernel and on the wide tiles.
        (512, 256, 512),
        (2048, 24, 2048),
        // The same loop on splits of K (each split starts inside K).
        (256, 2048, 256),
    ] {
        let a = rand_vec(&mut rng, m * k);
        let b = rand_vec(&mut rng, k * n);
        let mut g = GraphBuilder::new();
        let ta = g.input("a", DType::F32, &[m, k]).unwrap();
        let tb = g.input("b", DType::F32, &[k, n]).unwrap();
        let c = g.matmul(ta, tb).unwrap();
        g.output(c).unwrap();
        if m == 2048 {
            let kernels = g.build(&dev).unwrap().kernels();
            assert_eq!(kernels, ["GemmWide"], "{m}x{k}x{n}");
        }
        let got = run(&dev, &g, &[(&[m, k], &a), (&[k, n], &b)]);
        assert_close(
            &got[0],
            &matmul_ref(&a, &b, 1, m, k, n, false, false),
            1e-4,
            &format!("matmul {m}x{k}x{n}"),
        );
    }
    // bmm and batch broadcasting.
    for (batch, m, k, n, ab, bb) in [
        (3, 5, 6, 7, true, true),
        (2, 9, 4, 3, true, false),
        (4, 3, 5, 6, false, true),
        (3, 5, 8, 12, true, true),
        (2, 4, 8, 16, false, true),
        // Whole tiles of each matrix: the loop without bounds tests, a batch apart.
        (4, 128, 64, 128, true, true),
    ] {
        let a = rand_vec(&mut rng, if ab { batch } else { 1 } * m * k);
        let b = rand_vec(&mut rng, if bb { batch } else { 1 } * k * n);
        let sa: Vec<usize> = if ab { vec![batch, m, k] } else { vec![m, k] };
        let sb: Vec<usize> = if bb { vec![batch, k, n] } else { vec![k, n] };
        let mut g = GraphBuilder::new();
        let ta = g.input("a", DType::F32, &sa).unwrap();
        let tb = g.input("b", DType::F32, &sb).unwrap();
        let c = if ab && bb {
            g.bmm(ta, tb).unwrap()
        } else {
            g.matmul(ta, tb).unwrap()
        };
        g.output(c).unwrap();
        assert_eq!(g.shape(c).unwrap(), &[batch, m, n]);
        let got = run(&dev, &g, &[(&sa, &a), (&sb, &b)]);
        assert_close(
            &got[0],
            &matmul_ref(&a, &b, batch, m, k, n, ab, bb),
            1e-4,
            &format!("bmm {batch} {m} {k} {n}"),
        );
    }
    // linear with constant weights (prepacked) and with weights as an input.
    for (lead, k, n) in [
        (vec![3usize], 10usize, 7usize),
        (vec![2, 5], 33, 19),
        (vec![2, 5], 600, 19),
    ] {
        let mut xs = lead.clone();
        xs.push(k);
        let m: usize = lead.iter().product();
        let x = rand_vec(&mut rng, m * k);
        let w = rand_vec(&mut rng, n * k);
        let b = rand_vec(&mut rng, n);
        let wt: Vec<f32> = (0..k * n).map(|i| w[(i % n) * k + i / n]).collect();
        let mut want = matmul_ref(&x, &wt, 1, m, k, n, false, false);
        for (i, v) in want.iter_mut().enumerate() {
            *v += b[i % n];
        }
        let mut g = GraphBuilder::new();
        let tx = g.input("x", DType::F32, &xs).unwrap();
        let tw = g.constant_f32("w", &[n, k], &w).unwrap();
        let tb = g.constant_f32("bias", &[n], &b).unwrap();
        let y = g.linear(tx, tw, Some(tb)).unwrap();
        g.output(y).unwrap();
        let got = run(&dev, &g, &[(&xs, &x)]);
        assert_close(&got[0], &want, 1e-4, "linear (constant weight)");

        let mut g = GraphBuilder::new();
        let tx = g.input("x", DType::F32, &xs).unwrap();
        let tw = g.input("w", DType::F32, &[n, k]).unwrap();
        let tb = g.constant_f32("bias", &[n], &b).unwrap();
        let y = g.linear(tx, tw, Some(tb)).unwrap();
        g.output(y).unwrap();
        let got = run(&dev, &g, &[(&xs, &x), (&[n, k], &w)]);
        assert_close(&got[0], &want, 1e-4, "linear (input weight)");
    }
    assert_no_validation_errors(&instance);
}

/// Products of one to four rows run as `gemv.comp`: with and without split-K, K tails that
/// are not multiples of the slices, columns that leave lanes idle, a batch with A broadcast;
/// and linear with constant weights as `gemv_t.comp`, with a bias and a clamp fused.
#[test]
fn few_row_products_read_b_once() {
    let Some((instance, dev)) = device("few_row_products_read_b_once") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(61);
    for (batch, m, k, n) in [
        (1, 1, 4096, 256),
        (1, 2, 37, 12),
        (1, 3, 64, 260),
        (1, 4, 1000, 8),
        (3, 1, 300, 20),
    ] {
        let a = rand_vec(&mut rng, m * k);
        let b = rand_vec(&mut rng, batch * k * n);
        let sb: Vec<usize> = if batch == 1 {
            vec![k, n]
        } else {
            vec![batch, k, n]
        };
        let mut g = GraphBuilder::new();
        let ta = g.input("a", DType::F32, &[m, k]).unwrap();
        let tb = g.input("b", DType::F32, &sb).unwrap();
        let c = g.matmul(ta, tb).unwrap();
        g.output(c).unwrap();
        let built = g.build(&dev).unwrap();
        let what = format!("matmul {batch} x {m}x{k}x{n}");
        assert!(
            built.kernels().iter().any(|k| k == "Gemv"),
            "{what}: {:?}",
            built.kernels()
        );
        let got = run(&dev, &g, &[(&[m, k], &a), (&sb, &b)]);
        let want = matmul_ref(&a, &b, batch, m, k, n, false, batch > 1);
        assert_close(&got[0], &want, 1e-4, &what);
    }
    // Up to four rows on the plain kernels, five to eight on their rows8 variants.
    for (m, k, n) in [
        (1usize, 2048usize, 64usize),
        (4, 24, 36),
        (7, 72, 20),
        (8, 16, 9),
    ] {
        let x = rand_vec(&mut rng, m * k);
        let w = rand_vec(&mut rng, n * k);
        let bias = rand_vec(&mut rng, n);
        let wt: Vec<f32> = (0..k * n).map(|i| w[(i % n) * k + i / n]).collect();
        let want: Vec<f32> = matmul_ref(&x, &wt, 1, m, k, n, false, false)
            .iter()
            .enumerate()
            .map(|(i, v)| (v + bias[i % n]).clamp(-1.0, 6.0))
            .collect();
        let mut g = GraphBuilder::new();
        let tx = g.input("x", DType::F32, &[m, k]).unwrap();
        let tw = g.constant_f32("w", &[n, k], &w).unwrap();
        let tb = g.constant_f32("bias", &[n], &bias).unwrap();
        let y = g.linear(tx, tw, Some(tb)).unwrap();
        let y = g.clamp(y, -1.0, 6.0).unwrap();
        g.output(y).unwrap();
        let built = g.build(&dev).unwrap();
        // Constant weights are read as stored, one dot product per output (`GemvTSg` where
        // the device has subgroup arithmetic).
        assert!(
            built.kernels().iter().any(|k| k.starts_with("GemvT")),
            "{:?}",
            built.kernels()
        );
        let got = run(&dev, &g, &[(&[m, k], &x)]);
        assert_close(&got[0], &want, 1e-4, &format!("linear {m}x{k}x{n}"));
    }
    assert_no_validation_errors(&instance);
}

fn reduce_ref(x: &[f32], s: &[usize], dims: &[usize], mean: bool) -> Vec<f32> {
    let out: Vec<usize> = s
        .iter()
        .enumerate()
        .map(|(i, &d)| if dims.contains(&i) { 1 } else { d })
        .collect();
    let so = strides(&out);
    let mut acc = vec![0f64; numel(&out)];
    for (i, &v) in x.iter().enumerate() {
        let idx = unravel(i, s);
        let o: usize = (0..s.len())
            .map(|d| if dims.contains(&d) { 0 } else { idx[d] * so[d] })
            .sum();
        acc[o] += v as f64;
    }
    let r: usize = dims.iter().map(|&d| s[d]).product();
    acc.iter()
        .map(|&v| {
            if mean {
                (v / r as f64) as f32
            } else {
                v as f32
            }
        })
        .collect()
}

#[test]
fn sum_mean_and_layer_norm() {
    let Some((instance, dev)) = device("sum_mean_and_layer_norm") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(7);
    let shape = [3usize, 5, 4, 7];
    let x = rand_vec(&mut rng, numel(&shape));
    for dims in [
        vec![3usize],
        vec![0],
        vec![1, 2],
        vec![0, 2],
        vec![0, 1, 2, 3],
        vec![1, 3],
    ] {
        let mut g = GraphBuilder::new();
        let t = g.input("x", DType::F32, &shape).unwrap();
        let d: Vec<isize> = dims.iter().map(|&d| d as isize).collect();
        let s = g.sum(t, &d, true).unwrap();
        let m = g.mean(t, &d, false).unwrap();
        g.output(s).unwrap();
        g.output(m).unwrap();
        let got = run(&dev, &g, &[(&shape, &x)]);
        assert_close(
            &got[0],
            &reduce_ref(&x, &shape, &dims, false),
            1e-5,
            &format!("sum {dims:?}"),
        );
        assert_close(
            &got[1],
            &reduce_ref(&x, &shape, &dims, true),
            1e-5,
            &format!("mean {dims:?}"),
        );
    }
    for (shape, norm) in [
        (vec![4usize, 10], vec![10usize]),
        (vec![2, 3, 300], vec![3, 300]),
        (vec![7], vec![7]),
        // Many short rows: a subgroup per row where the device has subgroup arithmetic.
        (vec![2, 300, 96], vec![96]),
    ] {
        let x = rand_vec(&mut rng, numel(&shape));
        let d = numel(&norm);
        let w = rand_vec(&mut rng, d);
        let b = rand_vec(&mut rng, d);
        let mut g = GraphBuilder::new();
        let t = g.input("x", DType::F32, &shape).unwrap();
        let tw = g.constant_f32("w", &norm, &w).unwrap();
        let tb = g.constant_f32("b", &norm, &b).unwrap();
        let y = g.layer_norm(t, &norm, Some(tw), Some(tb), 1e-5).unwrap();
        let y0 = g.layer_norm(t, &norm, None, None, 1e-5).unwrap();
        g.output(y).unwrap();
        g.output(y0).unwrap();
        let got = run(&dev, &g, &[(&shape, &x)]);
        let mut want = Vec::new();
        let mut want0 = Vec::new();
        for row in x.chunks(d) {
            let mean: f64 = row.iter().map(|&v| v as f64).sum::<f64>() / d as f64;
            let var: f64 = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / d as f64;
            let r = 1.0 / (var + 1e-5).sqrt();
            for (j, &v) in row.iter().enumerate() {
                let n = (v as f64 - mean) * r;
                want0.push(n as f32);
                want.push((n * w[j] as f64 + b[j] as f64) as f32);
            }
        }
        assert_close(&got[0], &want, 1e-4, &format!("layer_norm {shape:?}"));
        assert_close(
            &got[1],
            &want0,
            1e-4,
            &format!("layer_norm (no affine) {shape:?}"),
        );
    }
    assert_no_validation_errors(&instance);
}

#[test]
fn reshape_permute_cat_slice() {
    let Some((instance, dev)) = device("reshape_permute_cat_slice") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(8);
    let s = [2usize, 3, 4, 5];
    let x = rand_vec(&mut rng, numel(&s));
    let y = rand_vec(&mut rng, 2 * 2 * 4 * 5);
    let mut g = GraphBuilder::new();
    let tx = g.input("x", DType::F32, &s).unwrap();
    let ty = g.input("y", DType::F32, &[2, 2, 4, 5]).unwrap();
    let p = g.permute(tx, &[3, 0, 2, 1]).unwrap();
    let t = g.transpose(tx, -1, 1).unwrap();
    let c = g.cat(&[tx, ty, tx], 1).unwrap();
    let sl = g.slice(tx, 2, 1, -1, 2).unwrap();
    let sl2 = g.slice(tx, -1, -3, 100, 1).unwrap();
    let r = g.reshape(tx, &[6, -1]).unwrap();
    let rr = g.relu(r).unwrap();
    let v = g.view(rr, &[2, 3, 20]).unwrap();
    let outs = [p, t, c, sl, sl2, rr, v, tx];
    for o in outs {
        g.output(o).unwrap();
    }
    let got = run(&dev, &g, &[(&s, &x), (&[2, 2, 4, 5], &y)]);
    let st = strides(&s);
    let gather = |shape: &[usize], f: &dyn Fn(&[usize]) -> f32| -> Vec<f32> {
        (0..numel(shape)).map(|i| f(&unravel(i, shape))).collect()
    };
    let at = |i: &[usize]| x[i[0] * st[0] + i[1] * st[1] + i[2] * st[2] + i[3] * st[3]];
    assert_eq!(
        got[0],
        gather(&[5, 2, 4, 3], &|i| at(&[i[1], i[3], i[2], i[0]]))
    );
    assert_eq!(
        got[1],
        gather(&[2, 5, 4, 3], &|i| at(&[i[0], i[3], i[2], i[1]]))
    );
    let sy = strides(&[2, 2, 4, 5]);
    assert_eq!(
        got[2],
        gather(&[2, 8, 4, 5], &|i| {
            match i[1] {
                0..3 => at(i),
                3..5 => y[i[0] * sy[0] + (i[1] - 3) * sy[1] + i[2] * sy[2] + i[3]],
                _ => at(&[i[0], i[1] - 5, i[2], i[3]]),
            }
        })
    );
    assert_eq!(
        got[3],
        gather(&[2, 3, 1, 5], &|i| at(&[i[0], i[1], 1 + 2 * i[2], i[3]]))
    );
    assert_eq!(
        got[4],
        gather(&[2, 3, 4, 3], &|i| at(&[i[0], i[1], i[2], 2 + i[3]]))
    );
    let relu: Vec<f32> = x.iter().map(|v| v.max(0.0)).collect();
    assert_eq!(got[5], relu);
    assert_eq!(got[6], relu);
    assert_eq!(got[7], x);
    assert_no_validation_errors(&instance);
}

fn f16_bits_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = ((h >> 10) & 0x1f) as i32;
    let frac = (h & 0x3ff) as f32;
    sign * match exp {
        0 => frac * 2f32.powi(-24),
        31 => f32::INFINITY,
        _ => (1.0 + frac / 1024.0) * 2f32.powi(exp - 15),
    }
}

#[test]
fn casts_between_f32_f16_i32_and_i8() {
    let Some((instance, dev)) = device("casts_between_f32_f16_i32_and_i8") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(9);
    let shape = [3usize, 7];
    let mut x = rand_vec(&mut rng, 21);
    for v in x.iter_mut() {
        *v *= 100.0;
    }
    x[0] = 300.7;
    x[1] = -300.2;
    x[2] = 2.7;
    x[3] = -2.7;
    let mut g = GraphBuilder::new();
    let t = g.input("x", DType::F32, &shape).unwrap();
    let h = g.cast(t, DType::F16).unwrap();
    let hf = g.cast(h, DType::F32).unwrap();
    let i = g.cast(t, DType::I32).unwrap();
    let i8 = g.cast(t, DType::I8).unwrap();
    let i8i = g.cast(i8, DType::I32).unwrap();
    let back = g.cast(i, DType::F32).unwrap();
    for o in [h, hf, i, i8, i8i, back] {
        g.output(o).unwrap();
    }
    let mut graph = g.build(&dev).unwrap();
    let out = graph
        .execute(&[HostTensor::from_f32(shape.to_vec(), &x).unwrap()])
        .unwrap();
    assert_eq!(out[0].dtype(), DType::F16);
    let halves: Vec<f32> = out[0]
        .bytes()
        .chunks_exact(2)
        .map(|c| f16_bits_to_f32(u16::from_le_bytes([c[0], c[1]])))
        .collect();
    let hf = out[1].to_f32().unwrap();
    for k in 0..21 {
        assert!(
            (halves[k] - x[k]).abs() <= 1e-3 * x[k].abs() + 1e-4,
            "f16 {k}: {} vs {}",
            halves[k],
            x[k]
        );
        assert_eq!(hf[k], halves[k]);
    }
    let want_i: Vec<i32> = x.iter().map(|v| v.trunc() as i32).collect();
    assert_eq!(out[2].to_i32().unwrap(), want_i);
    let want_i8: Vec<i8> = x
        .iter()
        .map(|v| v.trunc().clamp(-128.0, 127.0) as i8)
        .collect();
    assert_eq!(out[3].to_i8().unwrap(), want_i8);
    assert_eq!(&want_i8[..4], &[127, -128, 2, -2]);
    let want_i8i: Vec<i32> = want_i8.iter().map(|&v| v as i32).collect();
    assert_eq!(out[4].to_i32().unwrap(), want_i8i);
    let want_back: Vec<f32> = want_i.iter().map(|&v| v as f32).collect();
    assert_eq!(out[5].to_f32().unwrap(), want_back);

    // f16 and i8 inputs straight to outputs (identity casts).
    let mut g = GraphBuilder::new();
    let a = g.input("a", DType::F16, &[5]).unwrap();
    let b = g.input("b", DType::I8, &[6]).unwrap();
    g.output(a).unwrap();
    g.output(b).unwrap();
    let mut graph2 = g.build(&dev).unwrap();
    let ha = HostTensor::new(DType::F16, vec![5], (0..10).collect()).unwrap();
    let hb = HostTensor::from_i8(vec![6], &[1, -2, 3, -4, 5, -128]).unwrap();
    let out = graph2.execute(&[ha.clone(), hb.clone()]).unwrap();
    assert_eq!(out, vec![ha, hb]);
    drop((graph, graph2));
    assert_no_validation_errors(&instance);
}

/// Many short rows (one thread per row) and more long rows than a row kernel has work groups
/// (8192): the row loops of softmax, the reductions and layer_norm.
#[test]
fn row_kernels_loop_over_more_rows_than_work_groups() {
    let Some((instance, dev)) = device("row_kernels_loop_over_more_rows_than_work_groups") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(11);
    for shape in [[70_001usize, 3], [8_193, 64]] {
        let d = shape[1];
        let x = rand_vec(&mut rng, numel(&shape));
        let mut g = GraphBuilder::new();
        let t = g.input("x", DType::F32, &shape).unwrap();
        let s = g.softmax(t, 1).unwrap();
        let m = g.sum(t, &[1], false).unwrap();
        let l = g.layer_norm(t, &[d], None, None, 1e-5).unwrap();
        for o in [s, m, l] {
            g.output(o).unwrap();
        }
        let got = run(&dev, &g, &[(&shape, &x)]);
        assert_close(
            &got[0],
            &softmax_ref(&x, &shape, 1, false),
            1e-5,
            "softmax rows",
        );
        assert_close(
            &got[1],
            &reduce_ref(&x, &shape, &[1], false),
            1e-5,
            "sum rows",
        );
        let mut want = Vec::new();
        for row in x.chunks(d) {
            let mean = row.iter().map(|&v| v as f64).sum::<f64>() / d as f64;
            let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / d as f64;
            want.extend(
                row.iter()
                    .map(|&v| ((v as f64 - mean) / (var + 1e-5).sqrt()) as f32),
            );
        }
        assert_close(&got[2], &want, 1e-4, "layer_norm rows");
        // The shared-memory reductions (used where subgroup arithmetic is missing).
        let opts = BuildOptions {
            disable_subgroups: true,
            ..BuildOptions::default()
        };
        let mut plain = g.build_with(&dev, &opts).unwrap();
        let out = plain
            .execute(&[HostTensor::from_f32(shape.to_vec(), &x).unwrap()])
            .unwrap();
        assert_close(
            &out[1].to_f32().unwrap(),
            &reduce_ref(&x, &shape, &[1], false),
            1e-5,
            "sum rows (shared memory)",
        );
        assert_close(
            &out[2].to_f32().unwrap(),
            &want,
            1e-4,
            "layer_norm rows (shared memory)",
        );
    }
    assert_no_validation_errors(&instance);
}

/// relu / relu6 / clamp after conv2d, depthwise conv, linear (with split-K), matmul and float
/// add, sub or mul (a residual add and its activation; broadcast operands too) are applied in
/// the producer's epilogue; an output that is also read elsewhere is not fused.
#[test]
fn activations_fuse_into_conv_and_gemm_epilogues() {
    let Some((instance, dev)) = device("activations_fuse_into_conv_and_gemm_epilogues") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(12);
    let xs = [1usize, 4, 6, 7];
    let x = rand_vec(&mut rng, numel(&xs));
    let w = rand_vec(&mut rng, 5 * 4 * 9);
    let wd = rand_vec(&mut rng, 4 * 9);
    let wl = rand_vec(&mut rng, 3 * 600);
    let xl = rand_vec(&mut rng, 2 * 600);
    let mut g = GraphBuilder::new();
    let tx = g.input("x", DType::F32, &xs).unwrap();
    let tl = g.input("xl", DType::F32, &[2, 600]).unwrap();
    let tw = g.constant_f32("w", &[5, 4, 3, 3], &w).unwrap();
    let twd = g.constant_f32("wd", &[4, 1, 3, 3], &wd).unwrap();
    let twl = g.constant_f32("wl", &[3, 600], &wl).unwrap();
    let p = Conv2d {
        padding: [1, 1],
        ..Conv2d::default()
    };
    let c1 = g.conv2d(tx, tw, None, p).unwrap();
    let r1 = g.relu(c1).unwrap();
    let c2 = g.conv2d(tx, twd, None, Conv2d { groups: 4, ..p }).unwrap();
    let r2 = g.relu6(c2).unwrap();
    let l = g.linear(tl, twl, None).unwrap();
    let r3 = g.clamp(l, -1.0, 0.5).unwrap();
    let c4 = g.conv2d(tx, tw, None, p).unwrap();
    let r4 = g.relu(c4).unwrap();
    // Elementwise producers: x + y then relu; x * c (c broadcast per channel) then a clamp;
    // x - y, also an output, then relu (not fused).
    let y = rand_vec(&mut rng, numel(&xs));
    let cb = rand_vec(&mut rng, 4);
    let ty = g.input("y", DType::F32, &xs).unwrap();
    let tc = g.constant_f32("c", &[1, 4, 1, 1], &cb).unwrap();
    let s5 = g.add(tx, ty).unwrap();
    let r5 = g.relu(s5).unwrap();
    let m6 = g.mul(tx, tc).unwrap();
    let r6 = g.clamp(m6, -0.5, 0.5).unwrap();
    let d7 = g.sub(tx, ty).unwrap();
    let r7 = g.relu(d7).unwrap();
    for o in [r1, r2, r3, r4, c4, r5, r6, r7, d7] {
        g.output(o).unwrap();
    }
    let graph = g.build(&dev).unwrap();
    // conv+relu 1, dw+relu6 1, linear with the clamp 1 (two rows: `gemv_t`), conv 1 + relu 1
    // (not fused), add+relu 1, mul+clamp 1, sub 1 + relu 1 (not fused).
    assert_eq!(graph.dispatch_count(), 9);
    drop(graph);
    let got = run(&dev, &g, &[(&xs, &x), (&[2, 600], &xl), (&xs, &y)]);
    let conv = conv_ref(&x, &xs, &w, &[5, 4, 3, 3], None, &p, &[1, 5, 6, 7]);
    let dw = conv_ref(
        &x,
        &xs,
        &wd,
        &[4, 1, 3, 3],
        None,
        &Conv2d { groups: 4, ..p },
        &[1, 4, 6, 7],
    );
    let wt: Vec<f32> = (0..600 * 3).map(|i| wl[(i % 3) * 600 + i / 3]).collect();
    let lin = matmul_ref(&xl, &wt, 1, 2, 600, 3, false, false);
    let relu: Vec<f32> = conv.iter().map(|v| v.max(0.0)).collect();
    assert_close(&got[0], &relu, 1e-4, "conv+relu");
    let r6: Vec<f32> = dw.iter().map(|v| v.clamp(0.0, 6.0)).collect();
    assert_close(&got[1], &r6, 1e-4, "depthwise+relu6");
    let cl: Vec<f32> = lin.iter().map(|v| v.clamp(-1.0, 0.5)).collect();
    assert_close(&got[2], &cl, 1e-4, "linear+clamp");
    assert_close(&got[3], &relu, 1e-4, "conv+relu (unfused)");
    assert_close(&got[4], &conv, 1e-4, "conv");
    let sum: Vec<f32> = x.iter().zip(&y).map(|(a, b)| (a + b).max(0.0)).collect();
    assert_close(&got[5], &sum, 1e-6, "add+relu");
    let hw = xs[2] * xs[3];
    let prod: Vec<f32> = (0..x.len())
        .map(|i| (x[i] * cb[i / hw % 4]).clamp(-0.5, 0.5))
        .collect();
    assert_close(&got[6], &prod, 1e-6, "mul+clamp (broadcast)");
    let diff: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a - b).collect();
    let rdiff: Vec<f32> = diff.iter().map(|v| v.max(0.0)).collect();
    assert_close(&got[7], &rdiff, 1e-6, "sub+relu (unfused)");
    assert_close(&got[8], &diff, 1e-6, "sub");
    assert_no_validation_errors(&instance);
}

/// A small MobileNet-like network end to end: conv + per-channel affine + relu6, depthwise +
/// relu6, pointwise with a residual add, global average pool, linear, softmax; against the
/// composition of the references above.
#[test]
fn a_small_network_matches_the_composed_reference() {
    let Some((instance, dev)) = device("a_small_network_matches_the_composed_reference") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(13);
    let xs = [2usize, 3, 12, 10];
    let x = rand_vec(&mut rng, numel(&xs));
    let w1 = rand_vec(&mut rng, 8 * 3 * 9);
    let scale = rand_vec(&mut rng, 8);
    let shift = rand_vec(&mut rng, 8);
    let wd = rand_vec(&mut rng, 8 * 9);
    let wp = rand_vec(&mut rng, 8 * 8);
    let wl = rand_vec(&mut rng, 5 * 8);
    let bl = rand_vec(&mut rng, 5);
    let p1 = Conv2d {
        stride: [2, 2],
        padding: [1, 1],
        ..Conv2d::default()
    };
    let pd = Conv2d {
        padding: [1, 1],
        groups: 8,
        ..Conv2d::default()
    };

    let mut g = GraphBuilder::new();
    let tx = g.input("image", DType::F32, &xs).unwrap();
    let t1 = g.constant_f32("w1", &[8, 3, 3, 3], &w1).unwrap();
    let ts = g.constant_f32("scale", &[8, 1, 1], &scale).unwrap();
    let tsh = g.constant_f32("shift", &[1, 8, 1, 1], &shift).unwrap();
    let twd = g.constant_f32("wd", &[8, 1, 3, 3], &wd).unwrap();
    let twp = g.constant_f32("wp", &[8, 8, 1, 1], &wp).unwrap();
    let twl = g.constant_f32("wl", &[5, 8], &wl).unwrap();
    let tbl = g.constant_f32("bl", &[5], &bl).unwrap();
    let c1 = g.conv2d(tx, t1, None, p1).unwrap();
    let a1 = g.mul(c1, ts).unwrap();
    let a2 = g.add(a1, tsh).unwrap();
    let r1 = g.relu6(a2).unwrap();
    let d = g.conv2d(r1, twd, None, pd).unwrap();
    let r2 = g.relu6(d).unwrap();
    let pw = g.conv2d(r2, twp, None, Conv2d::default()).unwrap();
    let res = g.add(pw, r1).unwrap();
    let pooled = g.mean(res, &[2, 3], false).unwrap();
    let logits = g.linear(pooled, twl, Some(tbl)).unwrap();
    let probs = g.softmax(logits, -1).unwrap();
    g.output(probs).unwrap();
    g.output(res).unwrap();
    let got = run(&dev, &g, &[(&xs, &x)]);

    let s1 = [2usize, 8, 6, 5];
    let c1 = conv_ref(&x, &xs, &w1, &[8, 3, 3, 3], None, &p1, &s1);
    let (a1, _) = bcast_ref(&c1, &s1, &scale, &[8, 1, 1], |a, b| a * b);
    let (a2, _) = bcast_ref(&a1, &s1, &shift, &[1, 8, 1, 1], |a, b| a + b);
    let r1: Vec<f32> = a2.iter().map(|v| v.clamp(0.0, 6.0)).collect();
    let d = conv_ref(&r1, &s1, &wd, &[8, 1, 3, 3], None, &pd, &s1);
    let r2: Vec<f32> = d.iter().map(|v| v.clamp(0.0, 6.0)).collect();
    let pw = conv_ref(&r2, &s1, &wp, &[8, 8, 1, 1], None, &Conv2d::default(), &s1);
    let res: Vec<f32> = pw.iter().zip(&r1).map(|(a, b)| a + b).collect();
    let pooled = reduce_ref(&res, &s1, &[2, 3], true);
    let wt: Vec<f32> = (0..8 * 5).map(|i| wl[(i % 5) * 8 + i / 5]).collect();
    let mut logits = matmul_ref(&pooled, &wt, 1, 2, 8, 5, false, false);
    for (i, v) in logits.iter_mut().enumerate() {
        *v += bl[i % 5];
    }
    let probs = softmax_ref(&logits, &[2, 5], 1, false);
    assert_close(&got[1], &res, 1e-4, "residual");
    assert_close(&got[0], &probs, 1e-4, "probabilities");
    assert_no_validation_errors(&instance);
}
