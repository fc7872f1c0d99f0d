//! Ops called through the op registry by ExecuTorch name, with ExecuTorch's argument order,
//! against CPU references, in fp32 and fp16, on the selected device with validation on.

#![allow(clippy::unwrap_used)] // helpers outside #[test] functions

use compute_delegate::ops::{self, Arg};
use compute_delegate::{BuildOptions, GraphBuilder};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use vk_core::testing::{self, assert_no_validation_errors};
use vk_core::{DType, Device, HostTensor, Instance};

fn device(test: &str, f16: bool) -> Option<(Instance, Device)> {
    let req = if f16 {
        compute_delegate::f16_requirements()
    } else {
        compute_delegate::requirements()
    };
    testing::device(test, &req)
}

fn rand_vec(seed: u64, n: usize) -> Vec<f32> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen_range(-2.0f32..2.0)).collect()
}

/// Runs op `name` on `inputs` (f32 data with their shapes, held in `dtype` inside the graph)
/// followed by the scalar arguments `rest`; returns its output as f32 and its shape.
fn call(
    dev: &Device,
    name: &str,
    dtype: DType,
    inputs: &[(&[usize], &[f32])],
    rest: Vec<Arg>,
) -> (Vec<f32>, Vec<usize>) {
    let def = ops::find(name).unwrap_or_else(|| panic!("{name} is not registered"));
    let mut g = GraphBuilder::new();
    g.set_float(dtype);
    let mut args = Vec::new();
    for (i, (shape, _)) in inputs.iter().enumerate() {
        let x = g.input(&format!("x{i}"), DType::F32, shape).unwrap();
        let x = if dtype == DType::F32 {
            x
        } else {
            g.cast(x, dtype).unwrap()
        };
        args.push(Arg::Tensor(x));
    }
    args.extend(rest);
    let y = def.call(&mut g, args).unwrap()[0];
    let shape = g.shape(y).unwrap().to_vec();
    let y = if dtype == DType::F32 {
        y
    } else {
        g.cast(y, DType::F32).unwrap()
    };
    g.output(y).unwrap();
    let ins: Vec<HostTensor> = inputs
        .iter()
        .map(|(s, d)| HostTensor::from_f32(s.to_vec(), d).unwrap())
        .collect();
    let out = g.build(dev).unwrap().execute(&ins).unwrap();
    (out[0].to_f32().unwrap(), shape)
}

/// fp32 within `1e-5` relative; fp16 within `2e-2` of the reference's largest finite
/// magnitude; infinities and NaNs exactly where the reference has them.
#[track_caller]
fn assert_close(got: &[f32], want: &[f32], dtype: DType, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let scale = want
        .iter()
        .filter(|v| v.is_finite())
        .fold(0f32, |m, v| m.max(v.abs()));
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let tol = match dtype {
            DType::F16 => 2e-2 * scale.max(1e-3),
            _ => 1e-5 * (1.0 + w.abs()),
        };
        let same = g == w || (g.is_nan() && w.is_nan());
        assert!(
            same || (g - w).abs() <= tol,
            "{what}: element {i}: got {g}, want {w}"
        );
    }
}

/// The test at both precisions, each on a device that has what it needs.
fn each_precision(test: &str, f: impl Fn(&Device, DType)) {
    for (dtype, f16) in [(DType::F32, false), (DType::F16, true)] {
        let Some((instance, dev)) = device(test, f16) else {
            continue;
        };
        f(&dev, dtype);
        assert_no_validation_errors(&instance);
    }
}

/// Max pooling through its ExecuTorch name, whose indices output is not computed.
fn max_pool_ref(x: &[f32], s: [usize; 4], k: usize, st: usize) -> (Vec<f32>, Vec<usize>) {
    let (oh, ow) = ((s[2] - k) / st + 1, (s[3] - k) / st + 1);
    let mut y = Vec::new();
    for nc in 0..s[0] * s[1] {
        for i in 0..oh {
            for j in 0..ow {
                let mut m = f32::NEG_INFINITY;
                for a in 0..k {
                    for b in 0..k {
                        m = m.max(x[(nc * s[2] + i * st + a) * s[3] + j * st + b]);
                    }
                }
                y.push(m);
            }
        }
    }
    (y, vec![s[0], s[1], oh, ow])
}

#[test]
fn max_pool2d_with_indices_matches_the_reference() {
    each_precision("max_pool2d_with_indices", |dev, dtype| {
        let s = [2, 3, 9, 11];
        let x = rand_vec(1, s.iter().product());
        let (got, shape) = call(
            dev,
            "aten.max_pool2d_with_indices.default",
            dtype,
            &[(&s, &x)],
            vec![Arg::Ints(vec![3, 3]), Arg::Ints(vec![2, 2])],
        );
        let (want, want_shape) = max_pool_ref(&x, s, 3, 2);
        assert_eq!(shape, want_shape);
        assert_close(&got, &want, dtype, "max_pool2d");
    });
}

#[test]
fn unknown_arguments_are_named() {
    let def = ops::find("aten._softmax.default").unwrap();
    let mut g = GraphBuilder::new();
    let x = g.input("x", DType::F32, &[2, 3]).unwrap();
    let e = def
        .call(&mut g, vec![Arg::Tensor(x), Arg::Str("last".into())])
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "aten._softmax.default: argument `dim`: must be an integer, found \"last\""
    );
}

/// `avg_pool2d` with zero padding counted in the divisor or not.
fn avg_pool_ref(
    x: &[f32],
    s: [usize; 4],
    k: usize,
    st: usize,
    pad: usize,
    count_pad: bool,
) -> Vec<f32> {
    let (h, w) = (s[2] as isize, s[3] as isize);
    let (oh, ow) = ((s[2] + 2 * pad - k) / st + 1, (s[3] + 2 * pad - k) / st + 1);
    let mut y = Vec::new();
    for nc in 0..s[0] * s[1] {
        for i in 0..oh {
            for j in 0..ow {
                let (mut sum, mut n) = (0f32, 0usize);
                for a in 0..k {
                    for b in 0..k {
                        let r = (i * st + a) as isize - pad as isize;
                        let c = (j * st + b) as isize - pad as isize;
                        if (0..h).contains(&r) && (0..w).contains(&c) {
                            sum += x[(nc * s[2] + r as usize) * s[3] + c as usize];
                            n += 1;
                        }
                    }
                }
                y.push(sum / if count_pad { (k * k) as f32 } else { n as f32 });
            }
        }
    }
    y
}

#[test]
fn avg_pool2d_matches_the_reference() {
    each_precision("avg_pool2d", |dev, dtype| {
        let s = [1, 4, 10, 7];
        let x = rand_vec(2, s.iter().product());
        for count_pad in [true, false] {
            // (self, kernel_size, stride, padding, ceil_mode, count_include_pad)
            let (got, shape) = call(
                dev,
                "aten.avg_pool2d.default",
                dtype,
                &[(&s, &x)],
                vec![
                    Arg::Ints(vec![3, 3]),
                    Arg::Ints(vec![2, 2]),
                    Arg::Ints(vec![1, 1]),
                    Arg::Bool(false),
                    Arg::Bool(count_pad),
                ],
            );
            assert_eq!(shape, [1, 4, 5, 4]);
            let want = avg_pool_ref(&x, s, 3, 2, 1, count_pad);
            assert_close(
                &got,
                &want,
                dtype,
                &format!("avg_pool2d, count_include_pad {count_pad}"),
            );
        }
    });
}

/// Log-softmax along `dim` of a tensor of shape `s`, in f64.
fn log_softmax_ref(x: &[f32], s: &[usize], dim: usize) -> Vec<f32> {
    let inner: usize = s[dim + 1..].iter().product();
    let n = s[dim];
    let mut y = vec![0f32; x.len()];
    for outer in 0..x.len() / (n * inner) {
        for i in 0..inner {
            let at = |k: usize| (outer * n + k) * inner + i;
            let m = (0..n).map(|k| f64::from(x[at(k)])).fold(f64::MIN, f64::max);
            let lse = m
                + (0..n)
                    .map(|k| (f64::from(x[at(k)]) - m).exp())
                    .sum::<f64>()
                    .ln();
            for k in 0..n {
                y[at(k)] = (f64::from(x[at(k)]) - lse) as f32;
            }
        }
    }
    y
}

#[test]
fn log_softmax_matches_the_reference() {
    each_precision("_log_softmax", |dev, dtype| {
        let s = [3, 70, 5];
        let x = rand_vec(3, s.iter().product());
        for dim in [-1i64, 1] {
            // (self, dim, half_to_float)
            let (got, shape) = call(
                dev,
                "aten._log_softmax.default",
                dtype,
                &[(&s, &x)],
                vec![Arg::Int(dim), Arg::Bool(false)],
            );
            assert_eq!(shape, s);
            let want = log_softmax_ref(&x, &s, if dim < 0 { 2 } else { 1 });
            assert_close(&got, &want, dtype, &format!("_log_softmax, dim {dim}"));
        }
    });
}

#[test]
fn pixel_shuffle_matches_the_reference() {
    each_precision("pixel_shuffle", |dev, dtype| {
        let (b, c, r, h, w) = (2, 3, 2, 5, 7);
        let s = [b, c * r * r, h, w];
        let x = rand_vec(4, s.iter().product());
        let (got, shape) = call(
            dev,
            "aten.pixel_shuffle.default",
            dtype,
            &[(&s, &x)],
            vec![Arg::Int(r as i64)],
        );
        assert_eq!(shape, [b, c, h * r, w * r]);
        let mut want = Vec::new();
        for n in 0..b {
            for k in 0..c {
                for i in 0..h * r {
                    for j in 0..w * r {
                        let ch = k * r * r + (i % r) * r + j % r;
                        want.push(x[((n * c * r * r + ch) * h + i / r) * w + j / r]);
                    }
                }
            }
        }
        assert_close(&got, &want, dtype, "pixel_shuffle");
    });
    // Channels that are not a multiple of r*r are named.
    let mut g = GraphBuilder::new();
    let x = g.input("x", DType::F32, &[1, 6, 2, 2]).unwrap();
    let e = ops::find("aten.pixel_shuffle.default")
        .unwrap()
        .call(&mut g, vec![Arg::Tensor(x), Arg::Int(2)])
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("6 channels are not a multiple of 2*2"),
        "{e}"
    );
}

/// Inputs spread over `[lo, hi)`.
fn spread(n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n)
        .map(|i| lo + (hi - lo) * (i as f32 + 0.37) / n as f32)
        .collect()
}

#[test]
fn unary_math_matches_the_reference() {
    type Case = (&'static str, Vec<Arg>, (f32, f32), fn(f32) -> f32);
    let cases: Vec<Case> = vec![
        ("aten.abs.default", vec![], (-2.0, 2.0), f32::abs),
        ("aten.neg.default", vec![], (-2.0, 2.0), |v| -v),
        ("aten.exp.default", vec![], (-2.0, 2.0), f32::exp),
        ("aten.log.default", vec![], (0.1, 3.0), f32::ln),
        ("aten.log10.default", vec![], (0.1, 3.0), f32::log10),
        ("aten.sqrt.default", vec![], (0.1, 3.0), f32::sqrt),
        ("aten.rsqrt.default", vec![], (0.1, 3.0), |v| 1.0 / v.sqrt()),
        ("aten.sin.default", vec![], (-2.0, 2.0), f32::sin),
        ("aten.cos.default", vec![], (-2.0, 2.0), f32::cos),
        ("aten.erf.default", vec![], (-3.0, 3.0), libm::erff),
        ("aten.log1p.default", vec![], (-0.9, 3.0), f32::ln_1p),
        // Small arguments, where log(1 + x) would lose them.
        ("aten.log1p.default", vec![], (-1e-5, 1e-5), f32::ln_1p),
        ("aten.tan.default", vec![], (-1.2, 1.2), f32::tan),
        (
            "aten.round.default",
            vec![],
            (-3.0, 3.0),
            f32::round_ties_even,
        ),
        ("aten.floor.default", vec![], (-3.0, 3.0), f32::floor),
        ("aten.ceil.default", vec![], (-3.0, 3.0), f32::ceil),
        ("aten.reciprocal.default", vec![], (0.2, 3.0), f32::recip),
        (
            "aten.pow.Tensor_Scalar",
            vec![Arg::Float(3.0)],
            (-2.0, 2.0),
            |v| v.powi(3),
        ),
        (
            "aten.pow.Tensor_Scalar",
            vec![Arg::Int(2)],
            (-2.0, 2.0),
            |v| v * v,
        ),
        (
            "aten.pow.Tensor_Scalar",
            vec![Arg::Float(1.5)],
            (0.1, 2.0),
            |v| v.powf(1.5),
        ),
        (
            "aten.leaky_relu.default",
            vec![Arg::Float(0.2)],
            (-2.0, 2.0),
            |v| if v >= 0.0 { v } else { 0.2 * v },
        ),
        ("aten.leaky_relu.default", vec![], (-2.0, 2.0), |v| {
            if v >= 0.0 { v } else { 0.01 * v }
        }),
        ("aten.hardshrink.default", vec![], (-2.0, 2.0), |v| {
            if v.abs() > 0.5 { v } else { 0.0 }
        }),
        ("aten.hardsigmoid.default", vec![], (-4.0, 4.0), |v| {
            (v + 3.0).clamp(0.0, 6.0) / 6.0
        }),
    ];
    each_precision("unary_math", |dev, dtype| {
        let s = [2, 3, 37];
        for (name, rest, (lo, hi), f) in &cases {
            let mut x = spread(s.iter().product(), *lo, *hi);
            if dtype == DType::F16 {
                // The reference sees the inputs the graph computes on.
                x.iter_mut()
                    .for_each(|v| *v = half::f16::from_f32(*v).to_f32());
            }
            let (got, shape) = call(dev, name, dtype, &[(&s, &x)], rest.clone());
            assert_eq!(shape, s);
            let want: Vec<f32> = x.iter().map(|&v| f(v)).collect();
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let tol = match dtype {
                    DType::F16 => 1e-2 * (1.0 + w.abs()),
                    _ => 1e-4 * (1.0 + w.abs()),
                };
                assert!(
                    (g - w).abs() <= tol,
                    "{name} {rest:?} {dtype}: element {i}: {g} vs {w}"
                );
            }
        }
    });
}

#[test]
fn addmm_matches_the_reference() {
    each_precision("addmm", |dev, dtype| {
        let (m, k, n) = (3, 5, 4);
        let (bias, a, b) = (rand_vec(5, n), rand_vec(6, m * k), rand_vec(7, k * n));
        // (self, mat1, mat2, beta, alpha)
        let (got, shape) = call(
            dev,
            "aten.addmm.default",
            dtype,
            &[(&[n], &bias), (&[m, k], &a), (&[k, n], &b)],
            vec![Arg::Float(0.5), Arg::Float(2.0)],
        );
        assert_eq!(shape, [m, n]);
        let want: Vec<f32> = (0..m * n)
            .map(|o| {
                let (i, j) = (o / n, o % n);
                let dot: f32 = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
                0.5 * bias[j] + 2.0 * dot
            })
            .collect();
        assert_close(&got, &want, dtype, "addmm");
    });
}

#[test]
fn batch_norm_folds_constant_statistics() {
    each_precision("batch_norm", |dev, dtype| {
        let (n, c, hw) = (2, 3, 5);
        let x = rand_vec(8, n * c * hw);
        let (mean, var) = (vec![0.5, -1.0, 0.0], vec![0.25, 2.0, 1.0]);
        let (w, b) = (vec![1.5, -0.5, 2.0], vec![0.1, 0.2, -0.3]);
        let def = ops::find("aten._native_batch_norm_legit_no_training.default").unwrap();
        let mut g = GraphBuilder::new();
        let xi = g.input("x", DType::F32, &[n, c, hw]).unwrap();
        let xd = if dtype == DType::F32 {
            xi
        } else {
            g.cast(xi, dtype).unwrap()
        };
        let mut constant =
            |name: &str, v: &[f32]| Arg::Tensor(g.constant_f32(name, &[c], v).unwrap());
        let (wa, ba, ma, va) = (
            constant("w", &w),
            constant("b", &b),
            constant("m", &mean),
            constant("v", &var),
        );
        // (input, weight, bias, running_mean, running_var, momentum, eps)
        let args = vec![
            Arg::Tensor(xd),
            wa,
            ba,
            ma,
            va,
            Arg::Float(0.1),
            Arg::Float(1e-5),
        ];
        let y = def.call(&mut g, args).unwrap()[0];
        let y = if dtype == DType::F32 {
            y
        } else {
            g.cast(y, DType::F32).unwrap()
        };
        g.output(y).unwrap();
        let input = HostTensor::from_f32(vec![n, c, hw], &x).unwrap();
        let got = g.build(dev).unwrap().execute(&[input]).unwrap()[0]
            .to_f32()
            .unwrap();
        let want: Vec<f32> = (0..x.len())
            .map(|i| {
                let ch = (i / hw) % c;
                (x[i] - mean[ch]) / (var[ch] + 1e-5).sqrt() * w[ch] + b[ch]
            })
            .collect();
        assert_close(&got, &want, dtype, "batch_norm");
    });
    // Statistics that are not constants are named.
    let mut g = GraphBuilder::new();
    let x = g.input("x", DType::F32, &[1, 2, 2]).unwrap();
    let m = g.input("running_mean", DType::F32, &[2]).unwrap();
    let e = g.batch_norm(x, [None, None], [m, m], 1e-5).unwrap_err();
    assert!(
        e.to_string().contains("'running_mean' must be a constant"),
        "{e}"
    );
}

#[test]
fn constant_pad_nd_pads_and_cuts() {
    each_precision("constant_pad_nd", |dev, dtype| {
        let s = [1, 2, 3, 4];
        let x = rand_vec(9, s.iter().product());
        // Last dim: 1 before, 2 after; the one before: cut 1 before, add 1 after.
        let (got, shape) = call(
            dev,
            "aten.constant_pad_nd.default",
            dtype,
            &[(&s, &x)],
            vec![Arg::Ints(vec![1, 2, -1, 1]), Arg::Float(0.5)],
        );
        assert_eq!(shape, [1, 2, 3, 7]);
        let mut want = Vec::new();
        for ch in 0..2 {
            for i in 0..3 {
                for j in 0..7 {
                    let (r, col) = (i + 1, j as i64 - 1);
                    let inside = r < 3 && (0..4).contains(&col);
                    want.push(if inside {
                        x[(ch * 3 + r) * 4 + col as usize]
                    } else {
                        0.5
                    });
                }
            }
        }
        assert_close(&got, &want, dtype, "constant_pad_nd");
    });
}

#[test]
fn copies_transposes_and_fills() {
    each_precision("copies", |dev, dtype| {
        let s = [3, 4];
        let x = rand_vec(10, 12);
        let (got, shape) = call(dev, "aten.t_copy.default", dtype, &[(&s, &x)], vec![]);
        assert_eq!(shape, [4, 3]);
        let want: Vec<f32> = (0..12).map(|o| x[(o % 3) * 4 + o / 3]).collect();
        assert_close(&got, &want, dtype, "t_copy");
        for (code, want) in [
            (6, x.clone()),
            (
                11,
                x.iter().map(|v| f32::from(u8::from(*v != 0.0))).collect(),
            ),
        ] {
            let (got, _) = call(
                dev,
                "dim_order_ops._to_dim_order_copy.default",
                dtype,
                &[(&s, &x)],
                vec![Arg::Int(code)],
            );
            assert_close(
                &got,
                &want,
                dtype,
                &format!("_to_dim_order_copy to ScalarType {code}"),
            );
        }
        let (got, _) = call(dev, "aten.ones_like.default", dtype, &[(&s, &x)], vec![]);
        assert_close(&got, &[1.0; 12], dtype, "ones_like");
    });
    // A ScalarType we do not hold is named.
    let mut g = GraphBuilder::new();
    let x = g.input("x", DType::F32, &[2]).unwrap();
    let e = ops::find("aten._to_copy.default")
        .unwrap()
        .call(&mut g, vec![Arg::Tensor(x), Arg::Int(15)])
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("ScalarType 15 from f32 is not supported"),
        "{e}"
    );
}

/// PyTorch's bilinear source coordinate of output `d` (of `m`) over `n` inputs.
fn bilinear_source(d: usize, n: usize, m: usize, align: bool) -> f32 {
    if align {
        if m > 1 {
            d as f32 * (n - 1) as f32 / (m - 1) as f32
        } else {
            0.0
        }
    } else {
        ((d as f32 + 0.5) * n as f32 / m as f32 - 0.5).max(0.0)
    }
}

fn bilinear_ref(
    x: &[f32],
    [p, h, w]: [usize; 3],
    (oh, ow): (usize, usize),
    align: bool,
) -> Vec<f32> {
    let mut y = Vec::new();
    for plane in 0..p {
        let at = |i: usize, j: usize| x[(plane * h + i) * w + j];
        for i in 0..oh {
            let sy = bilinear_source(i, h, oh, align);
            let (y0, fy) = (
                (sy as usize).min(h - 1),
                sy - (sy as usize).min(h - 1) as f32,
            );
            let y1 = (y0 + 1).min(h - 1);
            for j in 0..ow {
                let sx = bilinear_source(j, w, ow, align);
                let (x0, fx) = (
                    (sx as usize).min(w - 1),
                    sx - (sx as usize).min(w - 1) as f32,
                );
                let x1 = (x0 + 1).min(w - 1);
                let top = at(y0, x0) + (at(y0, x1) - at(y0, x0)) * fx;
                let bottom = at(y1, x0) + (at(y1, x1) - at(y1, x0)) * fx;
                y.push(top + (bottom - top) * fy);
            }
        }
    }
    y
}

#[test]
fn upsampling_matches_pytorch() {
    each_precision("upsample", |dev, dtype| {
        let s = [1, 2, 5, 6];
        let x = rand_vec(11, s.iter().product());
        for align in [false, true] {
            // (input, output_size, align_corners, scale_factors)
            let (got, shape) = call(
                dev,
                "aten.upsample_bilinear2d.vec",
                dtype,
                &[(&s, &x)],
                vec![Arg::Ints(vec![9, 13]), Arg::Bool(align), Arg::None],
            );
            assert_eq!(shape, [1, 2, 9, 13]);
            let want = bilinear_ref(&x, [2, 5, 6], (9, 13), align);
            assert_close(
                &got,
                &want,
                dtype,
                &format!("bilinear, align_corners {align}"),
            );
        }
        // Nearest by scale factors: 10 x 12, source floor(dst / 2).
        let (got, shape) = call(
            dev,
            "aten.upsample_nearest2d.vec",
            dtype,
            &[(&s, &x)],
            vec![Arg::None, Arg::Floats(vec![2.0, 2.0])],
        );
        assert_eq!(shape, [1, 2, 10, 12]);
        let want: Vec<f32> = (0..2 * 10 * 12)
            .map(|o| {
                let (p, i, j) = (o / 120, (o / 12) % 10, o % 12);
                x[(p * 5 + i / 2) * 6 + j / 2]
            })
            .collect();
        assert_close(&got, &want, dtype, "nearest");
    });
}

/// Runs a graph of one f32 input `x` and one i32 input `ids` built by `f`; its output as f32.
fn with_ids(
    dev: &Device,
    x: (&[usize], &[f32]),
    ids: (&[usize], &[i32]),
    f: impl FnOnce(&mut GraphBuilder, Arg, Arg) -> compute_delegate::TensorId,
) -> (Vec<f32>, Vec<usize>) {
    let mut g = GraphBuilder::new();
    let xt = g.input("x", DType::F32, x.0).unwrap();
    let it = g.input("ids", DType::I32, ids.0).unwrap();
    let y = f(&mut g, Arg::Tensor(xt), Arg::Tensor(it));
    let shape = g.shape(y).unwrap().to_vec();
    g.output(y).unwrap();
    let inputs = [
        HostTensor::from_f32(x.0.to_vec(), x.1).unwrap(),
        HostTensor::from_i32(ids.0.to_vec(), ids.1).unwrap(),
    ];
    let out = g.build(dev).unwrap().execute(&inputs).unwrap();
    (out[0].to_f32().unwrap(), shape)
}

#[test]
fn index_select_and_gather_pick_along_a_dim() {
    let Some((instance, dev)) = device("index_select_and_gather", false) else {
        return;
    };
    let x = rand_vec(12, 24);
    let ids = [2, 0, -1, 3, 9];
    // (self, dim, index): out-of-range ids give 0, negative ones count from the end.
    let (got, shape) = with_ids(&dev, (&[2, 4, 3], &x), (&[5], &ids), |g, x, i| {
        let def = ops::find("aten.index_select.default").unwrap();
        def.call(g, vec![x, Arg::Int(1), i]).unwrap()[0]
    });
    assert_eq!(shape, [2, 5, 3]);
    let want: Vec<f32> = (0..30)
        .map(|o| {
            let (a, j, c) = (o / 15, (o / 3) % 5, o % 3);
            match ids[j] {
                id @ 0..=3 => x[(a * 4 + id as usize) * 3 + c],
                -1 => x[(a * 4 + 3) * 3 + c],
                _ => 0.0,
            }
        })
        .collect();
    assert_eq!(got, want, "index_select");
    // (self, dim, index, sparse_grad): the index has the output's shape.
    let gids: Vec<i32> = (0..12).map(|i| i * 7 % 4).collect();
    let (got, shape) = with_ids(&dev, (&[2, 4, 3], &x), (&[2, 2, 3], &gids), |g, x, i| {
        let def = ops::find("aten.gather.default").unwrap();
        def.call(g, vec![x, Arg::Int(1), i]).unwrap()[0]
    });
    assert_eq!(shape, [2, 2, 3]);
    let want: Vec<f32> = (0..12)
        .map(|o| {
            let (a, c) = (o / 6, o % 3);
            x[(a * 4 + gids[o] as usize) * 3 + c]
        })
        .collect();
    assert_eq!(got, want, "gather");
    assert_no_validation_errors(&instance);
}

#[test]
fn created_tensors_and_repeats() {
    let Some((instance, dev)) = device("created_tensors", false) else {
        return;
    };
    let run = |build: &dyn Fn(
        &mut GraphBuilder,
        compute_delegate::TensorId,
    ) -> compute_delegate::TensorId| {
        let mut g = GraphBuilder::new();
        let x = g.input("x", DType::F32, &[2, 3]).unwrap();
        let y = build(&mut g, x);
        let shape = g.shape(y).unwrap().to_vec();
        let dtype = g.dtype(y).unwrap();
        g.output(y).unwrap();
        let input = HostTensor::from_f32(vec![2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        let out = g.build(&dev).unwrap().execute(&[input]).unwrap().remove(0);
        (out, shape, dtype)
    };
    let op = |name: &str| ops::find(name).unwrap();
    // Integer steps give i32; an explicit float dtype (6) gives floats.
    let (out, shape, dtype) = run(&|g, _| {
        op("aten.arange.start_step")
            .call(g, vec![Arg::Int(2), Arg::Int(11), Arg::Int(3)])
            .unwrap()[0]
    });
    assert_eq!((shape, dtype), (vec![3], DType::I32));
    assert_eq!(
        out.bytes(),
        HostTensor::from_i32(vec![3], &[2, 5, 8]).unwrap().bytes()
    );
    let (out, _, dtype) = run(&|g, _| {
        let args = vec![
            Arg::Float(0.0),
            Arg::Float(1.0),
            Arg::Float(0.25),
            Arg::Int(6),
        ];
        op("aten.arange.start_step").call(g, args).unwrap()[0]
    });
    assert_eq!(
        (dtype, out.to_f32().unwrap()),
        (DType::F32, vec![0.0, 0.25, 0.5, 0.75])
    );
    let (out, shape, _) = run(&|g, _| {
        op("aten.full.default")
            .call(g, vec![Arg::Ints(vec![2, 2]), Arg::Float(1.5)])
            .unwrap()[0]
    });
    assert_eq!((shape, out.to_f32().unwrap()), (vec![2, 2], vec![1.5; 4]));
    let (out, shape, _) = run(&|g, _| {
        op("aten.scalar_tensor.default")
            .call(g, vec![Arg::Float(-2.0)])
            .unwrap()[0]
    });
    assert_eq!((shape, out.to_f32().unwrap()), (vec![1], vec![-2.0]));
    // (self, repeats): a leading dim added, then tiles.
    let (out, shape, _) = run(&|g, x| {
        op("aten.repeat.default")
            .call(g, vec![Arg::Tensor(x), Arg::Ints(vec![2, 1, 2])])
            .unwrap()[0]
    });
    assert_eq!(shape, [2, 2, 6]);
    let row = |r: usize| {
        [
            3 * r + 1,
            3 * r + 2,
            3 * r + 3,
            3 * r + 1,
            3 * r + 2,
            3 * r + 3,
        ]
        .map(|v| v as f32)
    };
    let want: Vec<f32> = (0..2).flat_map(|_| [row(0), row(1)].concat()).collect();
    assert_eq!(out.to_f32().unwrap(), want);
    assert_no_validation_errors(&instance);
}

#[test]
fn binary_ops_broadcast_and_match_the_reference() {
    type Case = (&'static str, Vec<Arg>, fn(f32, f32) -> f32);
    let cases: Vec<Case> = vec![
        ("aten.minimum.default", vec![], f32::min),
        ("aten.maximum.default", vec![], f32::max),
        ("aten.pow.Tensor_Tensor", vec![], |a, b| a.abs().powf(b)),
        ("aten.eq.Tensor", vec![], |a, b| f32::from(u8::from(a == b))),
        ("aten.ne.Tensor", vec![], |a, b| f32::from(u8::from(a != b))),
        ("aten.gt.Tensor", vec![], |a, b| f32::from(u8::from(a > b))),
        ("aten.ge.Tensor", vec![], |a, b| f32::from(u8::from(a >= b))),
        ("aten.lt.Tensor", vec![], |a, b| f32::from(u8::from(a < b))),
        ("aten.le.Tensor", vec![], |a, b| f32::from(u8::from(a <= b))),
        ("aten.logical_and.default", vec![], |a, b| {
            f32::from(u8::from(a != 0.0 && b != 0.0))
        }),
        ("aten.logical_or.default", vec![], |a, b| {
            f32::from(u8::from(a != 0.0 || b != 0.0))
        }),
        (
            "aten.div.Tensor_mode",
            vec![Arg::Str("floor".into())],
            |a, b| (a / b).floor(),
        ),
        (
            "aten.div.Tensor_mode",
            vec![Arg::Str("trunc".into())],
            |a, b| (a / b).trunc(),
        ),
        ("aten.div.Tensor_mode", vec![Arg::None], |a, b| a / b),
    ];
    each_precision("binary_ops", |dev, dtype| {
        // Same shapes (the vec4 kernel) and broadcasting (the strided one).
        for (sa, sb) in [([2, 3, 8], [2, 3, 8]), ([2, 3, 8], [1, 3, 1])] {
            let round = |v: Vec<f32>| -> Vec<f32> {
                // Quarters are exact in f16, so comparisons see the same values.
                v.iter().map(|x| (x * 4.0).round() / 4.0).collect()
            };
            let a = round(rand_vec(13, sa.iter().product()));
            let mut b = round(rand_vec(14, sb.iter().product()));
            b.iter_mut()
                .for_each(|v| *v = if *v == 0.0 { 0.5 } else { *v });
            for (name, rest, f) in &cases {
                let a_in: Vec<f32> = if *name == "aten.pow.Tensor_Tensor" {
                    a.iter().map(|v| v.abs()).collect()
                } else {
                    a.clone()
                };
                let (got, shape) = call(dev, name, dtype, &[(&sa, &a_in), (&sb, &b)], rest.clone());
                assert_eq!(shape, sa);
                let want: Vec<f32> = (0..a_in.len())
                    .map(|i| {
                        // [1, 3, 1] broadcasts by its middle dim.
                        let j = if sb == sa { i } else { (i / 8) % 3 };
                        f(a_in[i], b[j])
                    })
                    .collect();
                assert_close(&got, &want, dtype, &format!("{name} {rest:?} {sb:?}"));
            }
        }
    });
}

#[test]
fn extremes_their_indices_and_variance() {
    each_precision("reductions", |dev, dtype| {
        let s = [2, 5, 3];
        let x = rand_vec(15, 30);
        let at = |i: usize, j: usize, k: usize| x[(i * 5 + j) * 3 + k];
        // amax over dim 1, keepdim.
        let (got, shape) = call(
            dev,
            "aten.amax.default",
            dtype,
            &[(&s, &x)],
            vec![Arg::Ints(vec![1]), Arg::Bool(true)],
        );
        assert_eq!(shape, [2, 1, 3]);
        let want: Vec<f32> = (0..6)
            .map(|o| (0..5).map(|j| at(o / 3, j, o % 3)).fold(f32::MIN, f32::max))
            .collect();
        assert_close(&got, &want, dtype, "amax");
        // amin over every dim.
        let (got, shape) = call(
            dev,
            "aten.amin.default",
            dtype,
            &[(&s, &x)],
            vec![Arg::Ints(vec![]), Arg::Bool(false)],
        );
        assert_eq!((shape, got.len()), (vec![1], 1));
        assert_close(
            &got,
            &[x.iter().copied().fold(f32::MAX, f32::min)],
            dtype,
            "amin",
        );
        // var over dims 0 and 2, unbiased.
        let (got, shape) = call(
            dev,
            "aten.var.dim",
            dtype,
            &[(&s, &x)],
            vec![Arg::Ints(vec![0, 2]), Arg::Bool(true), Arg::Bool(false)],
        );
        assert_eq!(shape, [5]);
        let want: Vec<f32> = (0..5)
            .map(|j| {
                let v: Vec<f32> = (0..6).map(|o| at(o / 3, j, o % 3)).collect();
                let m = v.iter().sum::<f32>() / 6.0;
                v.iter().map(|a| (a - m) * (a - m)).sum::<f32>() / 5.0
            })
            .collect();
        assert_close(&got, &want, dtype, "var");
    });
    // argmax / argmin give i32 indices: first of equals.
    let Some((instance, dev)) = device("argmax", false) else {
        return;
    };
    let x = [1.0f32, 3.0, 3.0, -1.0, 0.5, -1.0];
    for (name, dim, want) in [
        ("aten.argmax.default", Arg::Int(1), vec![1, 1]),
        ("aten.argmin.default", Arg::Int(-1), vec![0, 0]),
        ("aten.argmax.default", Arg::None, vec![1]),
    ] {
        let mut g = GraphBuilder::new();
        let t = g.input("x", DType::F32, &[2, 3]).unwrap();
        let y = ops::find(name)
            .unwrap()
            .call(&mut g, vec![Arg::Tensor(t), dim.clone()])
            .unwrap()[0];
        assert_eq!(g.dtype(y), Some(DType::I32));
        g.output(y).unwrap();
        let input = HostTensor::from_f32(vec![2, 3], &x).unwrap();
        let out = g.build(&dev).unwrap().execute(&[input]).unwrap().remove(0);
        let want = HostTensor::from_i32(vec![want.len()], &want).unwrap();
        assert_eq!(out.bytes(), want.bytes(), "{name} {dim:?}");
    }
    assert_no_validation_errors(&instance);
}

/// argmax and argmin along rows long enough for the two-pass kernels (a language model's
/// logits), in fp32 and fp16: values on a grid of 1/8 (exact in fp16, full of ties: the
/// first of equals wins), a row with NaNs (the first NaN wins), a row of one value, and the
/// flattened tensor.
#[test]
fn arg_extremes_of_long_rows_take_the_first_of_equals() {
    let (rows, d) = (3usize, 10007usize);
    let mut x: Vec<f32> = rand_vec(41, rows * d)
        .iter()
        .map(|v| (v * 32.0).round() / 8.0)
        .collect();
    x[d + 7000] = f32::NAN;
    x[d + 9000] = f32::NAN;
    x[2 * d..].fill(0.5);
    let pick = |v: &[f32], min: bool| -> i32 {
        let mut at = 0;
        for (k, &e) in v.iter().enumerate() {
            let b = v[at];
            if b.is_nan() {
                break;
            }
            if e.is_nan() || (if min { e < b } else { e > b }) {
                at = k;
            }
        }
        at as i32
    };
    // (dtype, the f16 values widened to f32 before the op): an f16 graph's widened logits
    // are read as f16 by the op, the widening cast gone.
    for (dtype, widened) in [(DType::F32, false), (DType::F16, false), (DType::F16, true)] {
        let Some((instance, dev)) = device("long argmax", dtype == DType::F16) else {
            return;
        };
        for (name, dim) in [
            ("aten.argmax.default", Arg::Int(-1)),
            ("aten.argmin.default", Arg::Int(1)),
            ("aten.argmax.default", Arg::None),
        ] {
            let min = name.contains("argmin");
            let mut g = GraphBuilder::new();
            let t = g.input("x", DType::F32, &[rows, d]).unwrap();
            let t = match (dtype, widened) {
                (DType::F32, _) => t,
                (_, false) => g.cast(t, dtype).unwrap(),
                (_, true) => {
                    let narrow = g.cast(t, dtype).unwrap();
                    g.cast(narrow, DType::F32).unwrap()
                }
            };
            let y = ops::find(name)
                .unwrap()
                .call(&mut g, vec![Arg::Tensor(t), dim.clone(), Arg::Bool(false)])
                .unwrap()[0];
            g.output(y).unwrap();
            let input = HostTensor::from_f32(vec![rows, d], &x).unwrap();
            let mut built = g.build(&dev).unwrap();
            if widened && matches!(dim, Arg::Int(_)) {
                let casts = built
                    .kernels()
                    .iter()
                    .filter(|k| k.starts_with("Cast"))
                    .count();
                assert_eq!(casts, 1, "{name}: only the input's cast to f16 is left");
            }
            let out = built.execute(&[input]).unwrap().remove(0);
            let want: Vec<i32> = match dim {
                Arg::None => vec![pick(&x, min)],
                _ => x.chunks(d).map(|r| pick(r, min)).collect(),
            };
            assert_eq!(
                out.to_i32().unwrap(),
                want,
                "{name} {dim:?} {dtype:?} widened {widened}"
            );
        }
        assert_no_validation_errors(&instance);
    }
}

/// PyTorch's conv_transpose2d of x [n, cin, h, w] with w [cin, cout / g, kh, kw].
#[allow(clippy::too_many_arguments)]
fn conv_transpose_ref(
    x: &[f32],
    [n, cin, h, w]: [usize; 4],
    wt: &[f32],
    [cout_g, kh, kw]: [usize; 3],
    bias: &[f32],
    (s, p, op, d, g): (usize, usize, usize, usize, usize),
) -> (Vec<f32>, [usize; 4]) {
    let oh = (h - 1) * s + d * (kh - 1) + op + 1 - 2 * p;
    let ow = (w - 1) * s + d * (kw - 1) + op + 1 - 2 * p;
    let cout = cout_g * g;
    let cin_g = cin / g;
    let mut y = vec![0f32; n * cout * oh * ow];
    for b in 0..n {
        for ci in 0..cin {
            let gi = ci / cin_g;
            for i in 0..h {
                for j in 0..w {
                    let v = x[((b * cin + ci) * h + i) * w + j];
                    for co in 0..cout_g {
                        for a in 0..kh {
                            for e in 0..kw {
                                let (r, q) = (
                                    (i * s + a * d) as i64 - p as i64,
                                    (j * s + e * d) as i64 - p as i64,
                                );
                                if r < 0 || q < 0 || r as usize >= oh || q as usize >= ow {
                                    continue;
                                }
                                let oc = gi * cout_g + co;
                                y[((b * cout + oc) * oh + r as usize) * ow + q as usize] +=
                                    v * wt[((ci * cout_g + co) * kh + a) * kw + e];
                            }
                        }
                    }
                }
            }
        }
    }
    for (o, v) in y.iter_mut().enumerate() {
        *v += bias[(o / (oh * ow)) % cout];
    }
    (y, [n, cout, oh, ow])
}

#[test]
fn transposed_and_one_d_convolutions() {
    each_precision("conv_transpose", |dev, dtype| {
        let def = ops::find("aten.convolution.default").unwrap();
        for (s, p, op, d, g) in [(2, 1, 1, 1, 1), (3, 0, 0, 2, 2), (1, 1, 0, 1, 1)] {
            let (n, cin, h, w, cout_g, k) = (1, 4, 5, 4, 3, 3);
            let x = rand_vec(16, n * cin * h * w);
            let wt = rand_vec(17, cin * cout_g * k * k);
            let bias = rand_vec(18, cout_g * g);
            let (want, shape) = conv_transpose_ref(
                &x,
                [n, cin, h, w],
                &wt,
                [cout_g, k, k],
                &bias,
                (s, p, op, d, g),
            );
            let mut gb = GraphBuilder::new();
            let xi = gb.input("x", DType::F32, &[n, cin, h, w]).unwrap();
            let xd = if dtype == DType::F32 {
                xi
            } else {
                gb.cast(xi, dtype).unwrap()
            };
            let constant =
                |gb: &mut GraphBuilder, name: &str, shape: &[usize], v: &[f32]| match dtype {
                    DType::F16 => gb.constant_f16(name, shape, v).unwrap(),
                    _ => gb.constant_f32(name, shape, v).unwrap(),
                };
            let wc = constant(&mut gb, "w", &[cin, cout_g, k, k], &wt);
            let bc = constant(&mut gb, "b", &[cout_g * g], &bias);
            let pair = |v: usize| Arg::Ints(vec![v as i64, v as i64]);
            // (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
            let args = vec![
                Arg::Tensor(xd),
                Arg::Tensor(wc),
                Arg::Tensor(bc),
                pair(s),
                pair(p),
                pair(d),
                Arg::Bool(true),
                pair(op),
                Arg::Int(g as i64),
            ];
            let y = def.call(&mut gb, args).unwrap()[0];
            assert_eq!(gb.shape(y).unwrap(), shape);
            let y = if dtype == DType::F32 {
                y
            } else {
                gb.cast(y, DType::F32).unwrap()
            };
            gb.output(y).unwrap();
            let input = HostTensor::from_f32(vec![n, cin, h, w], &x).unwrap();
            let got = gb.build(dev).unwrap().execute(&[input]).unwrap()[0]
                .to_f32()
                .unwrap();
            let tol_dtype = if dtype == DType::F32 {
                DType::F16
            } else {
                dtype
            };
            // fp32 sums in another order: judged against the output's scale too.
            assert_close(
                &got,
                &want,
                tol_dtype,
                &format!("conv_transpose2d s{s} p{p} op{op} d{d} g{g}"),
            );
        }
        // 1-D: [n, c, l] with w [o, c, k], stride 2, padding 1.
        let (x, wt) = (rand_vec(19, 2 * 3 * 11), rand_vec(20, 4 * 3 * 3));
        let (got, shape) = call(
            dev,
            "aten.convolution.default",
            dtype,
            &[(&[2, 3, 11], &x), (&[4, 3, 3], &wt)],
            vec![
                Arg::None,
                Arg::Ints(vec![2]),
                Arg::Ints(vec![1]),
                Arg::Ints(vec![1]),
                Arg::Bool(false),
                Arg::Ints(vec![0]),
                Arg::Int(1),
            ],
        );
        assert_eq!(shape, [2, 4, 6]);
        let want: Vec<f32> = (0..2 * 4 * 6)
            .map(|o| {
                let (b, co, t) = (o / 24, (o / 6) % 4, o % 6);
                let mut acc = 0.0;
                for ci in 0..3 {
                    for e in 0..3 {
                        let pos = (t * 2 + e) as i64 - 1;
                        if (0..11).contains(&pos) {
                            acc += x[(b * 3 + ci) * 11 + pos as usize] * wt[(co * 3 + ci) * 3 + e];
                        }
                    }
                }
                acc
            })
            .collect();
        assert_close(&got, &want, dtype, "conv1d");
    });
}

#[test]
fn pools_expands_interleaves_flips_and_indexing() {
    each_precision("shape_ops", |dev, dtype| {
        let s = [1, 2, 4, 6];
        let x = rand_vec(21, 48);
        // Adaptive average pooling to 2 x 3: windows of 2 x 2; and to 1 x 1.
        let (got, shape) = call(
            dev,
            "aten._adaptive_avg_pool2d.default",
            dtype,
            &[(&s, &x)],
            vec![Arg::Ints(vec![2, 3])],
        );
        assert_eq!(shape, [1, 2, 2, 3]);
        let want: Vec<f32> = (0..12)
            .map(|o| {
                let (p, i, j) = (o / 6, (o / 3) % 2, o % 3);
                (0..4)
                    .map(|t| x[(p * 4 + 2 * i + t / 2) * 6 + 2 * j + t % 2])
                    .sum::<f32>()
                    / 4.0
            })
            .collect();
        assert_close(&got, &want, dtype, "adaptive_avg_pool2d");
        let (got, _) = call(
            dev,
            "aten._adaptive_avg_pool2d.default",
            dtype,
            &[(&s, &x)],
            vec![Arg::Ints(vec![1, 1])],
        );
        let want: Vec<f32> = (0..2)
            .map(|p| x[p * 24..p * 24 + 24].iter().sum::<f32>() / 24.0)
            .collect();
        assert_close(&got, &want, dtype, "global average pooling");
        // expand [2, 1] to [3, 2, 4].
        let v = rand_vec(22, 2);
        let (got, shape) = call(
            dev,
            "aten.expand_copy.default",
            dtype,
            &[(&[2, 1], &v)],
            vec![Arg::Ints(vec![3, -1, 4])],
        );
        assert_eq!(shape, [3, 2, 4]);
        let want: Vec<f32> = (0..24).map(|o| v[(o / 4) % 2]).collect();
        assert_close(&got, &want, dtype, "expand");
        // Broadcast by a product with ones: infinities, NaN and -0.0 come through as they are.
        let v = [f32::NEG_INFINITY, f32::NAN, -0.0];
        let (got, _) = call(
            dev,
            "aten.expand_copy.default",
            dtype,
            &[(&[3, 1], &v)],
            vec![Arg::Ints(vec![3, 5])],
        );
        let want: Vec<f32> = (0..15).map(|o| v[o / 5]).collect();
        assert_close(&got, &want, dtype, "expand of special values");
        assert!(got[10..].iter().all(|z| z.to_bits() == (-0.0f32).to_bits()));
        // repeat_interleave along dim 1 of [2, 3]: each column twice.
        let m = rand_vec(23, 6);
        let (got, shape) = call(
            dev,
            "aten.repeat_interleave.self_int",
            dtype,
            &[(&[2, 3], &m)],
            vec![Arg::Int(2), Arg::Int(1)],
        );
        assert_eq!(shape, [2, 6]);
        let want: Vec<f32> = (0..12).map(|o| m[(o / 6) * 3 + (o % 6) / 2]).collect();
        assert_close(&got, &want, dtype, "repeat_interleave");
        // flip dims 0 and -1.
        let (got, _) = call(
            dev,
            "aten.flip.default",
            dtype,
            &[(&[2, 3], &m)],
            vec![Arg::Ints(vec![0, -1])],
        );
        let want: Vec<f32> = (0..6).map(|o| m[(1 - o / 3) * 3 + 2 - o % 3]).collect();
        assert_close(&got, &want, dtype, "flip");
        // rsub: 3 - 2 * x.
        let (got, _) = call(
            dev,
            "aten.rsub.Scalar",
            dtype,
            &[(&[2, 3], &m)],
            vec![Arg::Float(3.0), Arg::Float(2.0)],
        );
        let want: Vec<f32> = m.iter().map(|v| 3.0 - 2.0 * v).collect();
        assert_close(&got, &want, dtype, "rsub");
        // squeeze of every dim of size 1.
        let (_, shape) = call(
            dev,
            "aten.squeeze_copy.default",
            dtype,
            &[(&[1, 2, 1, 3], &m)],
            vec![],
        );
        assert_eq!(shape, [2, 3]);
    });
    // index.Tensor with one index (a [2, 2] i32 tensor) at dim 1, the other entries None.
    let Some((instance, dev)) = device("index_tensor", false) else {
        return;
    };
    let x = rand_vec(24, 2 * 4 * 3);
    let ids = [3, 0, 1, 1];
    let (got, shape) = with_ids(&dev, (&[2, 4, 3], &x), (&[2, 2], &ids), |g, x, i| {
        let Arg::Tensor(i) = i else { unreachable!() };
        let def = ops::find("aten.index.Tensor").unwrap();
        def.call(g, vec![x, Arg::OptTensors(vec![None, Some(i)])])
            .unwrap()[0]
    });
    assert_eq!(shape, [2, 2, 2, 3]);
    let want: Vec<f32> = (0..24)
        .map(|o| x[((o / 12) * 4 + ids[(o / 3) % 4] as usize) * 3 + o % 3])
        .collect();
    assert_eq!(got, want, "index.Tensor");
    assert_no_validation_errors(&instance);
}

#[test]
fn kernels_executorch_leaves_on_the_cpu() {
    each_precision("cpu_kernels", |dev, dtype| {
        let s = [2, 3, 4];
        let x = rand_vec(25, 24);
        // fmod by 0.75: the sign of x.
        let (got, _) = call(
            dev,
            "aten::fmod.Scalar_out",
            dtype,
            &[(&s, &x)],
            vec![Arg::Float(0.75)],
        );
        let want: Vec<f32> = x.iter().map(|v| v % 0.75).collect();
        assert_close(&got, &want, dtype, "fmod");
        // cumsum along dim 1.
        let (got, _) = call(
            dev,
            "aten::cumsum.out",
            dtype,
            &[(&s, &x)],
            vec![Arg::Int(1)],
        );
        let want: Vec<f32> = (0..24)
            .map(|o| {
                let (a, j, k) = (o / 12, (o / 4) % 3, o % 4);
                (0..=j).map(|t| x[(a * 3 + t) * 4 + k]).sum()
            })
            .collect();
        assert_close(&got, &want, dtype, "cumsum");
        // slice_scatter of a [2, 2, 4] source over rows 1..3 of dim 1.
        let src = rand_vec(26, 16);
        let (got, shape) = call(
            dev,
            "aten::slice_scatter.out",
            dtype,
            &[(&s, &x), (&[2, 2, 4], &src)],
            vec![Arg::Int(1), Arg::Int(1), Arg::Int(3)],
        );
        assert_eq!(shape, s);
        let want: Vec<f32> = (0..24)
            .map(|o| {
                let (a, j, k) = (o / 12, (o / 4) % 3, o % 4);
                if j >= 1 {
                    src[(a * 2 + j - 1) * 4 + k]
                } else {
                    x[o]
                }
            })
            .collect();
        assert_close(&got, &want, dtype, "slice_scatter");
        // as_strided: size [3, 2], stride [4, 1], offset 1.
        let (got, shape) = call(
            dev,
            "aten::as_strided_copy.out",
            dtype,
            &[(&s, &x)],
            vec![Arg::Ints(vec![3, 2]), Arg::Ints(vec![4, 1]), Arg::Int(1)],
        );
        assert_eq!(shape, [3, 2]);
        let want: Vec<f32> = (0..6).map(|o| x[1 + (o / 2) * 4 + o % 2]).collect();
        assert_close(&got, &want, dtype, "as_strided");
        // copy: a [3, 1] source broadcast into a [2, 3, 4] destination.
        let col = rand_vec(27, 3);
        let (got, shape) = call(
            dev,
            "aten::copy.out",
            dtype,
            &[(&s, &x), (&[3, 1], &col)],
            vec![],
        );
        assert_eq!(shape, s);
        let want: Vec<f32> = (0..24).map(|o| col[(o / 4) % 3]).collect();
        assert_close(&got, &want, dtype, "copy");
    });
}

/// Whole quotients are exact however the device divides (a GPU's `u / v` may be a few ulps
/// off, and `floor(5.9999995)` is 5): floor and trunc division, and fmod's remainder.
#[test]
fn whole_quotients_are_exact() {
    each_precision("whole_quotients", |dev, dtype| {
        let b: Vec<f32> = [0.5f32, 1.5, 2.0, 3.0, 0.75, 2.5, 7.0, 0.25]
            .iter()
            .flat_map(|&v| [v, -v])
            .collect();
        let a: Vec<f32> = b
            .iter()
            .enumerate()
            .map(|(i, v)| v * (i as f32 - 7.0))
            .collect();
        let n = [a.len()];
        for (mode, f) in [
            ("floor", f32::floor as fn(f32) -> f32),
            ("trunc", f32::trunc),
        ] {
            let (got, _) = call(
                dev,
                "aten.div.Tensor_mode",
                dtype,
                &[(&n, &a), (&n, &b)],
                vec![Arg::Str(mode.into())],
            );
            let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| f(x / y)).collect();
            assert_eq!(got, want, "{mode} division");
        }
        let (got, _) = call(
            dev,
            "aten.fmod.Scalar",
            dtype,
            &[(&n, &a)],
            vec![Arg::Float(0.25)],
        );
        assert!(got.iter().all(|&r| r == 0.0), "fmod by 0.25: {got:?}");
    });
}

/// `quantized_decomposed`'s quantize and dequantize per tensor, channel (axis 1) and token,
/// with ExecuTorch's argument order, against PyTorch's formulas: `q = clamp(round(x * (1 /
/// scale)) + zp, qmin, qmax)` (halves to even), `(q - zp) * scale`. The int8 codes must be
/// exact.
#[test]
fn quantize_and_dequantize_per_tensor_channel_and_token() {
    let Some((instance, dev)) = device("quantize", false) else {
        return;
    };
    let shape = [2usize, 3, 4];
    let x: Vec<f32> = rand_vec(31, 24).iter().map(|v| v * 1.3).collect();
    let channel = |i: usize| (i / 4) % 3;
    let token = |i: usize| i / 4;
    let ch_scales = [0.01f32, 0.02, 0.05];
    let ch_zps = [0i32, 2, -1];
    let tok_scales: Vec<f32> = (0..6).map(|t| 0.01 + 0.004 * t as f32).collect();
    let tok_zps: Vec<i32> = (0..6).map(|t| t - 3).collect();
    type Params = (Vec<f32>, Vec<i32>, Vec<usize>, Box<dyn Fn(usize) -> usize>);
    let cases: Vec<(&str, &str, Option<Params>)> = vec![
        (
            "quantize_per_tensor.default",
            "dequantize_per_tensor.default",
            None,
        ),
        (
            "quantize_per_channel.default",
            "dequantize_per_channel.default",
            Some((
                ch_scales.to_vec(),
                ch_zps.to_vec(),
                vec![3],
                Box::new(channel),
            )),
        ),
        (
            "quantize_per_token.default",
            "dequantize_per_token.default",
            Some((
                tok_scales.clone(),
                tok_zps.clone(),
                vec![2, 3, 1],
                Box::new(token),
            )),
        ),
    ];
    for (quant, dequant, params) in cases {
        let mut g = GraphBuilder::new();
        let input = g.input("x", DType::F32, &shape).unwrap();
        let (mut qargs, table): (Vec<Arg>, Vec<(f32, i32)>) = match &params {
            None => (vec![Arg::Float(0.02), Arg::Int(-3)], vec![(0.02, -3); 24]),
            Some((scales, zps, dims, at)) => {
                let s = g.constant_f32("scales", dims, scales).unwrap();
                let z = g
                    .constant("zps", HostTensor::from_i32(dims.clone(), zps).unwrap())
                    .unwrap();
                let table = (0..24).map(|i| (scales[at(i)], zps[at(i)])).collect();
                (vec![Arg::Tensor(s), Arg::Tensor(z)], table)
            }
        };
        if quant.contains("channel") {
            qargs.push(Arg::Int(1));
        }
        let mut dargs = qargs.clone();
        qargs.extend([Arg::Int(-128), Arg::Int(127), Arg::Int(1)]);
        let mut args = vec![Arg::Tensor(input)];
        args.extend(qargs);
        let name = format!("quantized_decomposed.{quant}");
        let q = ops::find(&name).unwrap().call(&mut g, args).unwrap()[0];
        assert_eq!(g.dtype(q), Some(DType::I8), "{name}");
        let mut args = vec![Arg::Tensor(q)];
        dargs.extend([Arg::Int(-128), Arg::Int(127), Arg::Int(1), Arg::None]);
        args.extend(dargs);
        let name = format!("quantized_decomposed.{dequant}");
        let d = ops::find(&name).unwrap().call(&mut g, args).unwrap()[0];
        let qf = g.cast(q, DType::F32).unwrap();
        g.output(qf).unwrap();
        g.output(d).unwrap();
        let xin = HostTensor::from_f32(shape.to_vec(), &x).unwrap();
        let out = g.build(&dev).unwrap().execute(&[xin]).unwrap();
        let (got_q, got_d) = (out[0].to_f32().unwrap(), out[1].to_f32().unwrap());
        for i in 0..24 {
            let (s, z) = table[i];
            let inv = (1.0f64 / f64::from(s)) as f32;
            let want_q = ((x[i] * inv).round_ties_even() + z as f32).clamp(-128.0, 127.0);
            assert_eq!(got_q[i], want_q, "{quant}: element {i} of {x:?}");
            let want_d = (want_q - z as f32) * s;
            assert!(
                (got_d[i] - want_d).abs() <= 1e-6 * (1.0 + want_d.abs()),
                "{dequant}: {i}"
            );
        }
    }
    assert_no_validation_errors(&instance);
}

/// `unfold_copy`: windows of 3 every 2 along dim 1, as a new last dim.
#[test]
fn unfold_makes_windows() {
    each_precision("unfold", |dev, dtype| {
        let x: Vec<f32> = (0..14).map(|v| v as f32 * 0.25).collect();
        let (got, shape) = call(
            dev,
            "aten.unfold_copy.default",
            dtype,
            &[(&[2, 7], &x)],
            vec![Arg::Int(1), Arg::Int(3), Arg::Int(2)],
        );
        assert_eq!(shape, [2, 3, 3]);
        let want: Vec<f32> = (0..18)
            .map(|o| {
                let (b, i, j) = (o / 9, (o / 3) % 3, o % 3);
                x[b * 7 + i * 2 + j]
            })
            .collect();
        assert_eq!(got, want);
    });
}

/// PyTorch's `grid_sample` on `[N, C, H, W]` at `[N, Ho, Wo, 2]`, in f64.
fn grid_sample_ref(
    x: &[f32],
    s: [usize; 4],
    grid: &[f32],
    (ho, wo): (usize, usize),
    (nearest, border, align): (bool, bool, bool),
) -> Vec<f32> {
    let [n, c, h, w] = s;
    let unnormalize = |v: f32, size: usize| {
        let (v, size) = (f64::from(v), size as f64);
        let p = if align {
            (v + 1.0) / 2.0 * (size - 1.0)
        } else {
            ((v + 1.0) * size - 1.0) / 2.0
        };
        if border { p.clamp(0.0, size - 1.0) } else { p }
    };
    let at = |b: usize, ch: usize, yy: f64, xx: f64| -> f64 {
        if xx < 0.0 || yy < 0.0 || xx > (w - 1) as f64 || yy > (h - 1) as f64 {
            return 0.0;
        }
        f64::from(x[((b * c + ch) * h + yy as usize) * w + xx as usize])
    };
    let mut out = vec![0f32; n * c * ho * wo];
    for b in 0..n {
        for i in 0..ho {
            for j in 0..wo {
                let g = ((b * ho + i) * wo + j) * 2;
                let (px, py) = (unnormalize(grid[g], w), unnormalize(grid[g + 1], h));
                for ch in 0..c {
                    let v = if nearest {
                        at(b, ch, py.round_ties_even(), px.round_ties_even())
                    } else {
                        let (x0, y0) = (px.floor(), py.floor());
                        let (fx, fy) = (px - x0, py - y0);
                        at(b, ch, y0, x0) * (1.0 - fx) * (1.0 - fy)
                            + at(b, ch, y0, x0 + 1.0) * fx * (1.0 - fy)
                            + at(b, ch, y0 + 1.0, x0) * (1.0 - fx) * fy
                            + at(b, ch, y0 + 1.0, x0 + 1.0) * fx * fy
                    };
                    out[((b * c + ch) * ho + i) * wo + j] = v as f32;
                }
            }
        }
    }
    out
}

/// `grid_sampler_2d`: bilinear and nearest, zeros and border padding, with and without
/// `align_corners`, grid points inside and outside the image.
#[test]
fn grid_sampler_matches_pytorch() {
    each_precision("grid_sampler", |dev, dtype| {
        let s = [2, 3, 5, 6];
        let x = rand_vec(41, s.iter().product());
        let (ho, wo) = (4, 3);
        let grid: Vec<f32> = rand_vec(42, 2 * ho * wo * 2)
            .iter()
            .map(|v| v * 0.6)
            .collect();
        for nearest in [false, true] {
            for border in [false, true] {
                for align in [false, true] {
                    let (got, shape) = call(
                        dev,
                        "aten.grid_sampler_2d.default",
                        dtype,
                        &[(&s, &x), (&[2, ho, wo, 2], &grid)],
                        vec![
                            Arg::Int(i64::from(nearest)),
                            Arg::Int(i64::from(border)),
                            Arg::Bool(align),
                        ],
                    );
                    assert_eq!(shape, [2, 3, ho, wo]);
                    let want = grid_sample_ref(&x, s, &grid, (ho, wo), (nearest, border, align));
                    let what = format!("nearest {nearest} border {border} align {align}");
                    assert_close(&got, &want, dtype, &what);
                }
            }
        }
    });
}

/// PyTorch's per-tensor dequantize and quantize in f32, as the int8 `et_vk` ops use them.
fn deq(q: i8, scale: f32, zero: i64) -> f32 {
    (f32::from(q) + -(zero as f32)) * scale
}

fn quant(y: f32, scale: f64, zero: i64) -> f32 {
    let inv = (1.0 / scale) as f32;
    ((y * inv).round_ties_even() + zero as f32).clamp(-128.0, 127.0)
}

fn int8s(seed: u64, n: usize) -> Vec<i8> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen_range(-100i8..100)).collect()
}

/// Runs the registry op `name` on int8 (and f32) inputs; the output as f32.
fn call_q8(
    dev: &Device,
    name: &str,
    inputs: &[HostTensor],
    rest: Vec<Arg>,
    consts: Vec<HostTensor>,
) -> Vec<f32> {
    let mut g = GraphBuilder::new();
    let mut args: Vec<Arg> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| Arg::Tensor(g.input(&format!("x{i}"), t.dtype(), t.shape()).unwrap()))
        .collect();
    let consts: Vec<Arg> = consts
        .into_iter()
        .enumerate()
        .map(|(i, t)| Arg::Tensor(g.constant(&format!("c{i}"), t).unwrap()))
        .collect();
    // Constants take the places of the `Arg::None`s in `rest`, in order.
    let mut consts = consts.into_iter();
    args.extend(rest.into_iter().map(|a| match a {
        Arg::None => consts.next().unwrap_or(Arg::None),
        other => other,
    }));
    let y = ops::find(name).unwrap().call(&mut g, args).unwrap()[0];
    let y = g.cast(y, DType::F32).unwrap();
    g.output(y).unwrap();
    let out = g.build(dev).unwrap().execute(inputs).unwrap();
    out[0].to_f32().unwrap()
}

/// The int8 `et_vk` ops against ExecuTorch's reference definitions: dequantize, the float op,
/// quantize. Elementwise ones are exact; products may round a code the other way (one step).
#[test]
fn int8_et_vk_ops_match_their_definitions() {
    let Some((instance, dev)) = device("q8ta", false) else {
        return;
    };
    let i8t = |shape: &[usize], v: &[i8]| HostTensor::from_i8(shape.to_vec(), v).unwrap();
    let (a, b) = (int8s(51, 24), int8s(52, 24));
    let s = [2usize, 3, 4];
    // q8ta_add with alpha 0.5, and q8ta_relu.
    let got = call_q8(
        &dev,
        "et_vk.q8ta_add.default",
        &[i8t(&s, &a), i8t(&s, &b)],
        [0.05, 2.0, 0.03, -1.0, 0.07, 3.0, 0.5]
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                if i % 2 == 1 && i < 6 {
                    Arg::Int(v as i64)
                } else {
                    Arg::Float(v)
                }
            })
            .collect(),
        vec![],
    );
    for i in 0..24 {
        let y = deq(a[i], 0.05, 2) + deq(b[i], 0.03, -1) * 0.5;
        assert_eq!(got[i], quant(y, 0.07, 3), "q8ta_add {i}");
    }
    let got = call_q8(
        &dev,
        "et_vk.q8ta_relu.default",
        &[i8t(&s, &a)],
        vec![
            Arg::Float(0.05),
            Arg::Int(2),
            Arg::Float(0.02),
            Arg::Int(-5),
        ],
        vec![],
    );
    for i in 0..24 {
        assert_eq!(
            got[i],
            quant(deq(a[i], 0.05, 2).max(0.0), 0.02, -5),
            "q8ta_relu {i}"
        );
    }
    // q8ta_pixel_shuffle: [1, 8, 2, 2] to [1, 2, 4, 4], requantized.
    let x = int8s(53, 32);
    let got = call_q8(
        &dev,
        "et_vk.q8ta_pixel_shuffle.default",
        &[i8t(&[1, 8, 2, 2], &x)],
        vec![
            Arg::Float(0.1),
            Arg::Int(0),
            Arg::Float(12.5),
            Arg::Int(1),
            Arg::Int(2),
        ],
        vec![],
    );
    for (o, &g) in got.iter().enumerate() {
        let (c, h, w) = (o / 16, (o / 4) % 4, o % 4);
        let src = ((c * 4 + (h % 2) * 2 + w % 2) * 2 + h / 2) * 2 + w / 2;
        assert_eq!(
            g,
            quant(deq(x[src], 0.1, 0), 1.0 / 12.5, 1),
            "q8ta_pixel_shuffle {o}"
        );
    }
    // q8ta_linear with relu: x [2, 8], weights [4, 8] with per-channel scales, bias.
    let (x, w) = (int8s(54, 16), int8s(55, 32));
    let scales = [0.011f32, 0.02, 0.013, 0.017];
    let bias = [0.5f32, -0.25, 0.1, 0.0];
    let linear = |xs: &dyn Fn(usize) -> f32, n: usize, o: usize| {
        (0..8)
            .map(|k| f64::from(xs(n * 8 + k)) * f64::from(f32::from(w[o * 8 + k]) * scales[o]))
            .sum::<f64>()
            + f64::from(bias[o])
    };
    let got = call_q8(
        &dev,
        "et_vk.q8ta_linear.default",
        &[i8t(&[2, 8], &x)],
        vec![
            Arg::Float(0.04),
            Arg::Int(-3),
            Arg::None,
            Arg::None,
            Arg::None,
            Arg::Float(0.05),
            Arg::Int(4),
            Arg::None,
            Arg::Str("relu".into()),
        ],
        vec![
            i8t(&[4, 8], &w),
            HostTensor::from_f32(vec![4], &[0.0; 4]).unwrap(),
            HostTensor::from_f32(vec![4], &scales).unwrap(),
            HostTensor::from_f32(vec![4], &bias).unwrap(),
        ],
    );
    for (i, &g) in got.iter().enumerate() {
        let y = linear(&|j| deq(x[j], 0.04, -3), i / 4, i % 4).max(0.0) as f32;
        assert!(
            (g - quant(y, 0.05, 4)).abs() <= 1.0,
            "q8ta_linear {i}: {g} {}",
            quant(y, 0.05, 4)
        );
    }
    // linear_q8ta_q8csw: a float input, the output stays float.
    let xf: Vec<f32> = rand_vec(56, 16);
    let got = call_q8(
        &dev,
        "et_vk.linear_q8ta_q8csw.default",
        &[HostTensor::from_f32(vec![2, 8], &xf).unwrap()],
        vec![
            Arg::Float(0.04),
            Arg::Int(0),
            Arg::None,
            Arg::None,
            Arg::None,
            Arg::None,
        ],
        vec![
            i8t(&[4, 8], &w),
            HostTensor::from_f32(vec![4], &[0.0; 4]).unwrap(),
            HostTensor::from_f32(vec![4], &scales).unwrap(),
            HostTensor::from_f32(vec![4], &bias).unwrap(),
        ],
    );
    for (i, &g) in got.iter().enumerate() {
        let y = linear(&|j| xf[j], i / 4, i % 4) as f32;
        assert!(
            (g - y).abs() <= 1e-5 * (1.0 + y.abs()),
            "linear_q8ta_q8csw {i}"
        );
    }
    assert_no_validation_errors(&instance);
}

/// `q8ta_conv2d` (weights `[c_out, k]`, each row `[kh, kw, c_in]` with k and the scales
/// padded, as ExecuTorch packs them) and `q8ta_conv2d_dw` (weights `[kh, kw, c]`) against their definitions, within one
/// quantization step.
#[test]
fn int8_convolutions_match_their_definitions() {
    let Some((instance, dev)) = device("q8ta_conv", false) else {
        return;
    };
    let i8t = |shape: &[usize], v: &[i8]| HostTensor::from_i8(shape.to_vec(), v).unwrap();
    let f32t = |v: &[f32]| HostTensor::from_f32(vec![v.len()], v).unwrap();
    let x = int8s(61, 100);
    let xd = |c: usize, h: isize, w: isize| {
        if (0..5).contains(&h) && (0..5).contains(&w) {
            f64::from(deq(x[(c * 5 + h as usize) * 5 + w as usize], 0.03, 1))
        } else {
            0.0
        }
    };
    let scales: Vec<f32> = (0..8).map(|o| 0.01 + 0.002 * o as f32).collect();
    let bias: Vec<f32> = (0..8).map(|o| 0.1 * o as f32 - 0.3).collect();
    let geometry = |groups: i64| {
        vec![
            Arg::Float(0.06),
            Arg::Int(-2),
            Arg::None,
            Arg::Ints(vec![3, 3]),
            Arg::Ints(vec![1, 1]),
            Arg::Ints(vec![1, 1]),
            Arg::Ints(vec![1, 1]),
            Arg::Int(groups),
            Arg::Str("none".into()),
        ]
    };
    for depthwise in [false, true] {
        let c_out = if depthwise { 4 } else { 6 };
        let w = int8s(62, if depthwise { 36 } else { 6 * 40 });
        // w[o][c][i][j] of the unpacked [c_out, c_in / groups, 3, 3] weights.
        let weight = |o: usize, c: usize, i: usize, j: usize| {
            let q = if depthwise {
                w[(i * 3 + j) * 4 + o]
            } else {
                // Rows packed [kh, kw, c_in] as ExecuTorch's pattern packs them.
                w[o * 40 + (i * 3 + j) * 4 + c]
            };
            f64::from(f32::from(q) * scales[o])
        };
        let mut rest = vec![
            Arg::Float(0.03),
            Arg::Int(1),
            Arg::None,
            Arg::None,
            Arg::None,
        ];
        rest.extend(geometry(if depthwise { 4 } else { 1 }));
        let weights = if depthwise {
            i8t(&[3, 3, 4], &w)
        } else {
            i8t(&[6, 40], &w)
        };
        let name = if depthwise {
            "et_vk.q8ta_conv2d_dw.default"
        } else {
            "et_vk.q8ta_conv2d.default"
        };
        let got = call_q8(
            &dev,
            name,
            &[i8t(&[1, 4, 5, 5], &x)],
            rest,
            vec![weights, f32t(&[0.0; 8]), f32t(&scales), f32t(&bias)],
        );
        assert_eq!(got.len(), c_out * 25, "{name}");
        for (at, &g) in got.iter().enumerate() {
            let (o, h, wd) = (at / 25, (at / 5) % 5, at % 5);
            let mut y = f64::from(bias[o]);
            for c in 0..if depthwise { 1 } else { 4 } {
                let ci = if depthwise { o } else { c };
                for i in 0..3 {
                    for j in 0..3 {
                        y += xd(
                            ci,
                            h as isize + i as isize - 1,
                            wd as isize + j as isize - 1,
                        ) * weight(o, c, i, j);
                    }
                }
            }
            let want = quant(y as f32, 0.06, -2);
            assert!((g - want).abs() <= 1.0, "{name} {at}: {g} {want}");
        }
    }
    assert_no_validation_errors(&instance);
}

/// `et_vk.grid_priors`: the anchor points of a `[1, c, 2, 3]` feature map, stride 8, offset 0.5.
#[test]
fn grid_priors_are_the_anchor_points() {
    each_precision("grid_priors", |dev, dtype| {
        let x = rand_vec(71, 12);
        let (got, shape) = call(
            dev,
            "et_vk.grid_priors.default",
            dtype,
            &[(&[1, 2, 2, 3], &x)],
            vec![Arg::Int(8), Arg::Float(0.5)],
        );
        assert_eq!(shape, [6, 2]);
        let want = [
            4.0, 4.0, 12.0, 4.0, 20.0, 4.0, 4.0, 12.0, 12.0, 12.0, 20.0, 12.0,
        ];
        assert_eq!(got, want);
    });
}

/// Portable CPU kernels find the graph op their out variant belongs to.
#[test]
fn out_variants_resolve_to_their_ops() {
    let name = |k: &str| ops::find_kernel(k).map(|d| d.names[0]);
    assert_eq!(name("aten::relu.out"), Some("aten.relu.default"));
    assert_eq!(name("aten::add.out"), Some("aten.add.Tensor"));
    assert_eq!(name("aten::sum.IntList_out"), Some("aten.sum.dim_IntList"));
    assert_eq!(
        name("aten::_adaptive_avg_pool2d.out"),
        Some("aten._adaptive_avg_pool2d.default")
    );
    assert_eq!(name("aten::nonzero.out"), None);
    assert_eq!(name("not a kernel"), None);
}

/// Adaptive average pooling into unequal, overlapping and repeated windows (5x5 to 3x3, 2x2
/// to 7x7), as PyTorch places them.
#[test]
fn adaptive_pooling_of_any_size() {
    each_precision("adaptive_pool", |dev, dtype| {
        for ([h, w], [oh, ow]) in [([5usize, 5usize], [3usize, 3usize]), ([2, 2], [7, 7])] {
            let x = rand_vec(81, 2 * h * w);
            let (got, shape) = call(
                dev,
                "aten.adaptive_avg_pool2d.default",
                dtype,
                &[(&[1, 2, h, w], &x)],
                vec![Arg::Ints(vec![oh as i64, ow as i64])],
            );
            assert_eq!(shape, [1, 2, oh, ow]);
            let window = |i: usize, size: usize, out: usize| {
                (i * size / out)..((i + 1) * size).div_ceil(out)
            };
            let want: Vec<f32> = (0..2 * oh * ow)
                .map(|o| {
                    let (c, i, j) = (o / (oh * ow), (o / ow) % oh, o % ow);
                    let (rows, cols) = (window(i, h, oh), window(j, w, ow));
                    let n = (rows.len() * cols.len()) as f32;
                    rows.flat_map(|r| cols.clone().map(move |q| (r, q)))
                        .map(|(r, q)| x[(c * h + r) * w + q])
                        .sum::<f32>()
                        / n
                })
                .collect();
            assert_close(&got, &want, dtype, &format!("{h}x{w} to {oh}x{ow}"));
        }
    });
}

/// `q8ta_conv2d_transposed`: stride 2, padding 1, output padding 1, weights `[c_out, k]`
/// packed and padded as ExecuTorch packs them, against the definition, within one step.
#[test]
fn int8_transposed_convolution_matches_its_definition() {
    let Some((instance, dev)) = device("q8ta_conv_t", false) else {
        return;
    };
    let x = int8s(91, 36);
    let w = int8s(92, 6 * 40);
    let scales: Vec<f32> = (0..8).map(|o| 0.01 + 0.003 * o as f32).collect();
    let bias: Vec<f32> = (0..8).map(|o| 0.05 * o as f32 - 0.2).collect();
    let mut rest = vec![
        Arg::Float(0.04),
        Arg::Int(3),
        Arg::None,
        Arg::None,
        Arg::None,
    ];
    rest.extend([
        Arg::Float(0.05),
        Arg::Int(-1),
        Arg::None,
        Arg::Ints(vec![3, 3]),
        Arg::Ints(vec![2, 2]),
        Arg::Ints(vec![1, 1]),
        Arg::Ints(vec![1, 1]),
        Arg::Ints(vec![1, 1]),
        Arg::Int(1),
        Arg::Str("relu".into()),
    ]);
    let f32t = |v: &[f32]| HostTensor::from_f32(vec![v.len()], v).unwrap();
    let got = call_q8(
        &dev,
        "et_vk.q8ta_conv2d_transposed.default",
        &[HostTensor::from_i8(vec![1, 4, 3, 3], &x).unwrap()],
        rest,
        vec![
            HostTensor::from_i8(vec![6, 40], &w).unwrap(),
            f32t(&[0.0; 8]),
            f32t(&scales),
            f32t(&bias),
        ],
    );
    assert_eq!(got.len(), 6 * 36);
    let mut y = vec![0f64; 6 * 36];
    for (at, v) in y.iter_mut().enumerate() {
        *v = f64::from(bias[at / 36]);
    }
    for c in 0..4 {
        for h in 0..3 {
            for wd in 0..3 {
                let xin = f64::from(deq(x[(c * 3 + h) * 3 + wd], 0.04, 3));
                for o in 0..6 {
                    for i in 0..3 {
                        for j in 0..3 {
                            let (oy, ox) = (h * 2 + i, wd * 2 + j);
                            if oy < 1 || ox < 1 || oy > 6 || ox > 6 {
                                continue;
                            }
                            // Rows packed [kh, kw, c_in].
                            let q = f32::from(w[o * 40 + (i * 3 + j) * 4 + c]) * scales[o];
                            y[(o * 6 + oy - 1) * 6 + ox - 1] += xin * f64::from(q);
                        }
                    }
                }
            }
        }
    }
    for (at, (&g, &v)) in got.iter().zip(&y).enumerate() {
        let want = quant((v.max(0.0)) as f32, 0.05, -1);
        assert!((g - want).abs() <= 1.0, "element {at}: {g} {want}");
    }
    assert_no_validation_errors(&instance);
}

/// Dynamic quantization parameters: `choose_qparams.tensor` (int8 range, eps 1e-5) and
/// `choose_qparams_per_token_asymmetric`, against `torch.ao.quantization`'s formulas in f32.
#[test]
fn choose_qparams_as_pytorch() {
    let Some((instance, dev)) = device("choose_qparams", false) else {
        return;
    };
    let x: Vec<f32> = rand_vec(101, 48)
        .iter()
        .enumerate()
        .map(|(i, v)| v + (i % 8) as f32 * 0.1)
        .collect();
    let run = |name: &str, rest: Vec<Arg>| -> (Vec<f32>, Vec<f32>) {
        let mut g = GraphBuilder::new();
        let input = g.input("x", DType::F32, &[2, 3, 8]).unwrap();
        let mut args = vec![Arg::Tensor(input)];
        args.extend(rest);
        let out = ops::find(name).unwrap().call(&mut g, args).unwrap();
        let zp = g.cast(out[1], DType::F32).unwrap();
        g.output(out[0]).unwrap();
        g.output(zp).unwrap();
        let xin = HostTensor::from_f32(vec![2, 3, 8], &x).unwrap();
        let r = g.build(&dev).unwrap().execute(&[xin]).unwrap();
        (r[0].to_f32().unwrap(), r[1].to_f32().unwrap())
    };
    let widened = |v: &[f32]| {
        let low = v.iter().fold(f32::INFINITY, |m, &a| m.min(a)).min(0.0);
        let high = v.iter().fold(f32::NEG_INFINITY, |m, &a| m.max(a)).max(0.0);
        (low, high)
    };
    let (scale, zp) = run(
        "quantized_decomposed.choose_qparams.tensor",
        vec![Arg::Int(-128), Arg::Int(127), Arg::Float(1e-5), Arg::Int(1)],
    );
    let (low, high) = widened(&x);
    let want_scale = ((high - low) / 255.0).max(1e-5);
    let want_zp = (-128.0 - (low / want_scale).round_ties_even()).clamp(-128.0, 127.0);
    assert!(
        (scale[0] - want_scale).abs() <= 1e-6 * want_scale,
        "{scale:?} {want_scale}"
    );
    assert!((zp[0] - want_zp).abs() <= 1.0, "{zp:?} {want_zp}");
    let (scales, zps) = run(
        "quantized_decomposed.choose_qparams_per_token_asymmetric.default",
        vec![Arg::Int(1)],
    );
    assert_eq!(scales.len(), 6);
    for t in 0..6 {
        let (low, high) = widened(&x[t * 8..t * 8 + 8]);
        let s = ((high - low) / 255.0).max(f32::EPSILON);
        let (dmin, dmax) = (low / s, high / s);
        let z = if (-128.0 + dmin) + (127.0 + dmax) > 0.0 {
            -128.0 - dmin
        } else {
            127.0 - dmax
        };
        let z = z.clamp(-128.0, 127.0).round_ties_even();
        assert!(
            (scales[t] - s).abs() <= 1e-6 * s,
            "token {t}: {} {s}",
            scales[t]
        );
        assert!((zps[t] - z).abs() <= 1.0, "token {t}: {} {z}", zps[t]);
    }
    assert_no_validation_errors(&instance);
}

/// Weight-only quantized linears against their definitions: `_weight_int8pack_mm` (int8
/// weights `[n, k]`) and `et_vk.linear_qcs4w` (4-bit weights two to a byte, the even column in
/// the high nibble, each stored plus 8, k odd so the last byte is padded), each times
/// per-channel scales.
#[test]
fn weight_only_quantized_linears_match_their_definitions() {
    let Some((instance, dev)) = device("weight_only_linears", false) else {
        return;
    };
    let (m, n, k) = (3, 5, 7);
    let x = rand_vec(111, m * k);
    let scales: Vec<f32> = (0..n).map(|o| 0.02 + 0.01 * o as f32).collect();
    let q8 = int8s(112, n * k);
    let q4: Vec<i8> = int8s(113, n * k)
        .iter()
        .map(|v| v.rem_euclid(16) - 8)
        .collect();
    let half = k.div_ceil(2);
    let mut packed = vec![0u8; n * half];
    for r in 0..n {
        for j in 0..half {
            let nibble = |c: usize| if c < k { (q4[r * k + c] + 8) as u8 } else { 8 };
            packed[r * half + j] = nibble(2 * j) << 4 | nibble(2 * j + 1);
        }
    }
    let xin = HostTensor::from_f32(vec![m, k], &x).unwrap();
    let f32t = |v: &[f32]| HostTensor::from_f32(vec![v.len()], v).unwrap();
    let cases = [
        (
            "aten._weight_int8pack_mm.default",
            HostTensor::from_i8(vec![n, k], &q8).unwrap(),
            &q8,
        ),
        (
            "et_vk.linear_qcs4w.default",
            HostTensor::new(DType::U8, vec![n, half], packed.clone()).unwrap(),
            &q4,
        ),
    ];
    for (name, weights, q) in cases {
        let got = call_q8(
            &dev,
            name,
            std::slice::from_ref(&xin),
            vec![Arg::None, Arg::None],
            vec![weights, f32t(&scales)],
        );
        assert_eq!(got.len(), m * n, "{name}");
        for (at, g) in got.iter().enumerate() {
            let (r, o) = (at / n, at % n);
            let want: f64 = (0..k)
                .map(|c| f64::from(x[r * k + c]) * f64::from(q[o * k + c]) * f64::from(scales[o]))
                .sum();
            assert!(
                (f64::from(*g) - want).abs() <= 1e-5 * (1.0 + want.abs()),
                "{name} [{r}, {o}]: {g} against {want}"
            );
        }
    }
    assert_no_validation_errors(&instance);
}

/// `et_vk.linear_q8csw` and `et_vk.conv2d_q8csw` (float inputs, int8 weights with
/// per-channel scales and a bias, the convolution's weights packed `[c_out, k]` with each row
/// `[kh, kw, c_in]` and k padded to a multiple of 4) against their definitions.
#[test]
fn float_products_with_int8_weights_match_their_definitions() {
    let Some((instance, dev)) = device("q8csw", false) else {
        return;
    };
    let f32t = |shape: &[usize], v: &[f32]| HostTensor::from_f32(shape.to_vec(), v).unwrap();
    let scales: Vec<f32> = (0..8).map(|o| 0.01 + 0.002 * o as f32).collect();
    let bias: Vec<f32> = (0..8).map(|o| 0.1 * o as f32 - 0.3).collect();
    let close = |name: &str, at: usize, g: f32, want: f64| {
        assert!(
            (f64::from(g) - want).abs() <= 1e-5 * (1.0 + want.abs()),
            "{name} {at}: {g} against {want}"
        );
    };
    // linear: x [2, 12], weights [8, 12].
    let (x, w) = (rand_vec(121, 24), int8s(122, 96));
    let got = call_q8(
        &dev,
        "et_vk.linear_q8csw.default",
        &[f32t(&[2, 12], &x)],
        vec![Arg::None, Arg::None, Arg::None],
        vec![
            HostTensor::from_i8(vec![8, 12], &w).unwrap(),
            f32t(&[8], &scales),
            f32t(&[8], &bias),
        ],
    );
    for (at, &g) in got.iter().enumerate() {
        let (r, o) = (at / 8, at % 8);
        let dot: f64 = (0..12)
            .map(|c| f64::from(x[r * 12 + c]) * f64::from(f32::from(w[o * 12 + c]) * scales[o]))
            .sum();
        close("linear_q8csw", at, g, dot + f64::from(bias[o]));
    }
    // conv2d: x [1, 4, 5, 5], 3x3, padding 1, 6 output channels, k = 36 padded to 40.
    let (x, w) = (rand_vec(123, 100), int8s(124, 240));
    let geometry = [[3, 3], [1, 1], [1, 1], [1, 1]].map(|p| Arg::Ints(p.to_vec()));
    let mut rest = vec![Arg::None, Arg::None, Arg::None];
    rest.extend(geometry);
    rest.push(Arg::Int(1));
    let got = call_q8(
        &dev,
        "et_vk.conv2d_q8csw.default",
        &[f32t(&[1, 4, 5, 5], &x)],
        rest,
        vec![
            HostTensor::from_i8(vec![6, 40], &w).unwrap(),
            f32t(&[8], &scales),
            f32t(&[8], &bias),
        ],
    );
    assert_eq!(got.len(), 6 * 25);
    for (at, &g) in got.iter().enumerate() {
        let (o, h, wd) = (at / 25, (at / 5) % 5, at % 5);
        let mut y = f64::from(bias[o]);
        for c in 0..4 {
            for i in 0..3 {
                for j in 0..3 {
                    let (yy, xx) = (h + i, wd + j);
                    if yy < 1 || xx < 1 || yy > 5 || xx > 5 {
                        continue;
                    }
                    let q = f32::from(w[o * 40 + (i * 3 + j) * 4 + c]) * scales[o];
                    y += f64::from(x[(c * 5 + yy - 1) * 5 + xx - 1]) * f64::from(q);
                }
            }
        }
        close("conv2d_q8csw", at, g, y);
    }
    assert_no_validation_errors(&instance);
}

/// The language-model ops of the attention and norm families, in fp32 and fp16, against
/// ExecuTorch's definitions: `rms_norm`, the three rotary embeddings (both outputs of
/// `apply_rotary_emb`, with fewer key heads than query heads; the Hugging Face form from a
/// start position, with dims past the rotary ones passing through) and `sdpa` with a mask.
#[test]
fn language_model_ops_match_their_definitions() {
    each_precision("language_model_ops", |dev, dtype| {
        // rms_norm: x [2, 3, d], weight [d]; short rows a thread each, long ones a group.
        for d in [8usize, 600] {
            let (x, w) = (rand_vec(131, 6 * d), rand_vec(132, d));
            let (got, _) = call(
                dev,
                "et_vk.rms_norm.default",
                dtype,
                &[(&[2, 3, d], &x), (&[d], &w)],
                vec![Arg::Float(1e-5)],
            );
            let want: Vec<f32> = x
                .chunks(d)
                .flat_map(|row| {
                    let ms = row.iter().map(|v| v * v).sum::<f32>() / d as f32;
                    let r = 1.0 / (ms + 1e-5).sqrt();
                    row.iter()
                        .zip(&w)
                        .map(move |(v, w)| v * r * w)
                        .collect::<Vec<_>>()
                })
                .collect();
            assert_close(&got, &want, dtype, &format!("rms_norm of {d}"));
        }

        // apply_rotary_emb: q [1, 3, 2, 4] and k [1, 3, 1, 4], cos and sin [3, 2].
        let (q, k) = (rand_vec(133, 24), rand_vec(134, 12));
        let (cos, sin) = (rand_vec(135, 6), rand_vec(136, 6));
        let rotate = |x: &[f32], heads: usize| -> Vec<f32> {
            let mut y = x.to_vec();
            for s in 0..3 {
                for h in 0..heads {
                    for p in 0..2 {
                        let at = ((s * heads + h) * 4) + 2 * p;
                        let (re, im, c, sn) = (x[at], x[at + 1], cos[s * 2 + p], sin[s * 2 + p]);
                        y[at] = re * c - im * sn;
                        y[at + 1] = re * sn + im * c;
                    }
                }
            }
            y
        };
        for (a, b, heads) in [(&q, &k, 2), (&k, &q, 1)] {
            let (sa, sb): (&[usize], &[usize]) = match heads {
                2 => (&[1, 3, 2, 4], &[1, 3, 1, 4]),
                _ => (&[1, 3, 1, 4], &[1, 3, 2, 4]),
            };
            let (got, shape) = call(
                dev,
                "et_vk.apply_rotary_emb.default",
                dtype,
                &[(sa, a), (sb, b), (&[3, 2], &cos), (&[3, 2], &sin)],
                vec![],
            );
            assert_eq!(shape, sa);
            assert_close(&got, &rotate(a, heads), dtype, "apply_rotary_emb");
        }

        // apply_rotary_emb_hf: q [1, 2, 1, 6], cos and sin [4, 4] from position 1.
        let q = rand_vec(137, 12);
        let (cos, sin) = (rand_vec(138, 16), rand_vec(139, 16));
        let (got, _) = call(
            dev,
            "et_vk.apply_rotary_emb_hf.default",
            dtype,
            &[
                (&[1, 2, 1, 6], &q),
                (&[1, 2, 1, 6], &q),
                (&[4, 4], &cos),
                (&[4, 4], &sin),
            ],
            vec![Arg::Int(1)],
        );
        let mut want = q.clone();
        for s in 0..2 {
            let (x, p) = (&q[s * 6..s * 6 + 6], s + 1);
            for j in 0..4 {
                let half = if j < 2 { -x[j + 2] } else { x[j - 2] };
                want[s * 6 + j] = x[j] * cos[p * 4 + j] + half * sin[p * 4 + j];
            }
        }
        assert_close(&got, &want, dtype, "apply_rotary_emb_hf");
        // Phi's and GPT-NeoX's layout: q [1, heads 2, seq 3, 6], tables [1, 3, 4] (batch, seq,
        // rotary_dim) broadcast over the heads; the last 2 columns pass.
        let q = rand_vec(142, 36);
        let (cos, sin) = (rand_vec(143, 12), rand_vec(144, 12));
        let (got, _) = call(
            dev,
            "et_vk.apply_rotary_emb_hf.default",
            dtype,
            &[
                (&[1, 2, 3, 6], &q),
                (&[1, 2, 3, 6], &q),
                (&[1, 3, 4], &cos),
                (&[1, 3, 4], &sin),
            ],
            vec![Arg::Int(0)],
        );
        let mut want = q.clone();
        for h in 0..2 {
            for s in 0..3 {
                let at = (h * 3 + s) * 6;
                let x = &q[at..at + 6];
                for j in 0..4 {
                    let half = if j < 2 { -x[j + 2] } else { x[j - 2] };
                    want[at + j] = x[j] * cos[s * 4 + j] + half * sin[s * 4 + j];
                }
            }
        }
        assert_close(
            &got,
            &want,
            dtype,
            "apply_rotary_emb_hf, heads before positions",
        );
        // Grouped keys over a batch of 2: q [2, 4, 3, 6] and k [2, 1, 3, 6] both take the
        // tables' rows 0..q.shape[1] (both batches' tables, [2, 3, 4]).
        let (q, k) = (rand_vec(145, 2 * 4 * 3 * 6), rand_vec(146, 2 * 3 * 6));
        let (cos, sin) = (rand_vec(147, 24), rand_vec(148, 24));
        let def = ops::find("et_vk.apply_rotary_emb_hf.default").unwrap();
        let mut g = GraphBuilder::new();
        g.set_float(dtype);
        let mut ins = Vec::new();
        for (name, shape) in [("q", [2usize, 4, 3, 6]), ("k", [2, 1, 3, 6])] {
            let t = g.input(name, DType::F32, &shape).unwrap();
            ins.push(g.cast(t, dtype).unwrap());
        }
        let tc = g.constant_f32("cos", &[2, 3, 4], &cos).unwrap();
        let ts = g.constant_f32("sin", &[2, 3, 4], &sin).unwrap();
        let (tc, ts) = (g.cast(tc, dtype).unwrap(), g.cast(ts, dtype).unwrap());
        let args = vec![
            Arg::Tensor(ins[0]),
            Arg::Tensor(ins[1]),
            Arg::Tensor(tc),
            Arg::Tensor(ts),
            Arg::Int(0),
        ];
        let outs = def.call(&mut g, args).unwrap();
        for y in outs {
            let y = g.cast(y, DType::F32).unwrap();
            g.output(y).unwrap();
        }
        let got = g
            .build(dev)
            .unwrap()
            .execute(&[
                HostTensor::from_f32(vec![2, 4, 3, 6], &q).unwrap(),
                HostTensor::from_f32(vec![2, 1, 3, 6], &k).unwrap(),
            ])
            .unwrap();
        for (out, (x, heads)) in got.iter().zip([(&q, 4usize), (&k, 1)]) {
            let mut want = x.clone();
            for b in 0..2 {
                for h in 0..heads {
                    for p in 0..3 {
                        let at = ((b * heads + h) * 3 + p) * 6;
                        let v = &x[at..at + 6];
                        for j in 0..4 {
                            let half = if j < 2 { -v[j + 2] } else { v[j - 2] };
                            let t = (b * 3 + p) * 4 + j;
                            want[at + j] = v[j] * cos[t] + half * sin[t];
                        }
                    }
                }
            }
            assert_close(
                &out.to_f32().unwrap(),
                &want,
                dtype,
                "grouped keys over a batch",
            );
        }

        // apply_rotary_emb_interleaved: x [1, 3, 4], freqs_cis [3, 4] of (cos, sin) pairs.
        let (x, f) = (rand_vec(140, 12), rand_vec(141, 12));
        let (got, _) = call(
            dev,
            "et_vk.apply_rotary_emb_interleaved.default",
            dtype,
            &[(&[1, 3, 4], &x), (&[3, 4], &f)],
            vec![],
        );
        let mut want = x.clone();
        for at in (0..12).step_by(2) {
            let (re, im, c, s) = (x[at], x[at + 1], f[at], f[at + 1]);
            want[at] = re * c - im * s;
            want[at + 1] = re * s + im * c;
        }
        assert_close(&got, &want, dtype, "apply_rotary_emb_interleaved");

        // sdpa: q [1, 2, 3, 4], k [1, 2, 5, 4], v [1, 2, 5, 3], an additive mask [3, 5].
        let (q, k, v) = (rand_vec(142, 24), rand_vec(143, 40), rand_vec(144, 30));
        let mask: Vec<f32> = (0..15)
            .map(|i| if i % 5 > 2 + i / 5 { -1e4 } else { 0.0 })
            .collect();
        let (got, shape) = call(
            dev,
            "et_vk.sdpa.default",
            dtype,
            &[
                (&[1, 2, 3, 4], &q),
                (&[1, 2, 5, 4], &k),
                (&[1, 2, 5, 3], &v),
                (&[3, 5], &mask),
            ],
            vec![Arg::None],
        );
        assert_eq!(shape, [1, 2, 3, 3]);
        let mut want = Vec::new();
        for h in 0..2 {
            for i in 0..3 {
                let s: Vec<f32> = (0..5)
                    .map(|j| {
                        let dot: f32 = (0..4)
                            .map(|d| q[(h * 3 + i) * 4 + d] * k[(h * 5 + j) * 4 + d])
                            .sum();
                        dot / 2.0 + mask[i * 5 + j]
                    })
                    .collect();
                let m = s.iter().fold(f32::MIN, |a, &b| a.max(b));
                let e: Vec<f32> = s.iter().map(|v| (v - m).exp()).collect();
                let z: f32 = e.iter().sum();
                for c in 0..3 {
                    want.push((0..5).map(|j| e[j] / z * v[(h * 5 + j) * 3 + c]).sum());
                }
            }
        }
        assert_close(&got, &want, dtype, "sdpa");
    });
}

/// Group-wise 4-bit weights as ExecuTorch packs them, against their definitions:
/// `linear_q4gsw` and `linear_dq8ca_q4gsw` (weights `[n, k / 2]`, the even column in the low
/// nibble, scales `[groups, n]`, a bias; the latter rounds its input to int8 first) and `embedding_q4gsw` (table `[v, d / 2]`, the even
/// column in the high nibble unless `is_linear_weight`, scales `[v, groups]`).
#[test]
fn group_wise_four_bit_ops_match_their_definitions() {
    let Some((instance, dev)) = device("q4gsw", false) else {
        return;
    };
    let (n, k, group) = (3, 16, 8);
    let q: Vec<i8> = int8s(151, n * k)
        .iter()
        .map(|v| v.rem_euclid(16) - 8)
        .collect();
    let pack = |rows: usize, cols: usize, low_first: bool| -> Vec<u8> {
        (0..rows * cols / 2)
            .map(|b| {
                let (even, odd) = ((q[2 * b] + 8) as u8, (q[2 * b + 1] + 8) as u8);
                if low_first {
                    odd << 4 | even
                } else {
                    even << 4 | odd
                }
            })
            .collect()
    };
    let scales: Vec<f32> = (0..2 * n).map(|i| 0.01 + 0.005 * i as f32).collect();
    let bias = rand_vec(152, n);
    let x = rand_vec(153, 2 * k);
    let f32t = |shape: &[usize], v: &[f32]| HostTensor::from_f32(shape.to_vec(), v).unwrap();
    let u8t = |shape: &[usize], v: Vec<u8>| HostTensor::new(DType::U8, shape.to_vec(), v).unwrap();
    let xin = f32t(&[2, k], &x);
    let linear_want: Vec<f32> = (0..2 * n)
        .map(|at| {
            let (r, o) = (at / n, at % n);
            bias[o]
                + (0..k)
                    .map(|c| x[r * k + c] * f32::from(q[o * k + c]) * scales[(c / group) * n + o])
                    .sum::<f32>()
        })
        .collect();
    let (weights, sc, b) = (
        u8t(&[n, k / 2], pack(n, k, true)),
        f32t(&[2, n], &scales),
        f32t(&[n], &bias),
    );
    let got = call_q8(
        &dev,
        "et_vk.linear_q4gsw.default",
        std::slice::from_ref(&xin),
        vec![Arg::None, Arg::None, Arg::Int(group as i64), Arg::None],
        vec![weights.clone(), sc.clone(), b.clone()],
    );
    assert_close(&got, &linear_want, DType::F32, "linear_q4gsw");
    // linear_dq8ca_q4gsw rounds its input to int8 first (scale 0.1, zero point 0 here).
    let xq: Vec<f32> = x
        .iter()
        .map(|v| (v / 0.1).round_ties_even().clamp(-128.0, 127.0) * 0.1)
        .collect();
    let dq_want: Vec<f32> = (0..2 * n)
        .map(|at| {
            let (r, o) = (at / n, at % n);
            bias[o]
                + (0..k)
                    .map(|c| xq[r * k + c] * f32::from(q[o * k + c]) * scales[(c / group) * n + o])
                    .sum::<f32>()
        })
        .collect();
    let got = call_q8(
        &dev,
        "et_vk.linear_dq8ca_q4gsw.default",
        std::slice::from_ref(&xin),
        vec![
            Arg::None,
            Arg::None,
            Arg::None,
            Arg::None,
            Arg::None,
            Arg::Int(group as i64),
            Arg::None,
        ],
        vec![
            f32t(&[1], &[0.1]),
            f32t(&[1], &[0.0]),
            weights,
            f32t(&[n], &[0.0; 3]),
            sc,
            b,
        ],
    );
    assert_close(&got, &dq_want, DType::F32, "linear_dq8ca_q4gsw");
    // The table: the same values as [v = 3, d = 16], scales [3, 2].
    let ids = HostTensor::from_i32(vec![4], &[2, 0, 1, 2]).unwrap();
    let table_scales: Vec<f32> = (0..6).map(|i| 0.02 + 0.01 * i as f32).collect();
    for linear_weight in [false, true] {
        let mut g = GraphBuilder::new();
        let table = g
            .constant("t", u8t(&[n, k / 2], pack(n, k, linear_weight)))
            .unwrap();
        let ts = g.constant("s", f32t(&[n, 2], &table_scales)).unwrap();
        let i = g.input("ids", DType::I32, &[4]).unwrap();
        let args = vec![
            Arg::Tensor(table),
            Arg::Tensor(ts),
            Arg::Int(group as i64),
            Arg::Tensor(i),
            Arg::Bool(linear_weight),
        ];
        let y = ops::find("et_vk.embedding_q4gsw.default")
            .unwrap()
            .call(&mut g, args)
            .unwrap()[0];
        g.output(y).unwrap();
        let out = g
            .build(&dev)
            .unwrap()
            .execute(std::slice::from_ref(&ids))
            .unwrap();
        let got = out[0].to_f32().unwrap();
        let want: Vec<f32> = [2usize, 0, 1, 2]
            .iter()
            .flat_map(|&r| (0..k).map(move |c| (r, c)))
            .map(|(r, c)| f32::from(q[r * k + c]) * table_scales[r * 2 + c / group])
            .collect();
        assert_close(&got, &want, DType::F32, "embedding_q4gsw");
    }
    assert_no_validation_errors(&instance);
}

/// torchao's `quantize_affine` and `dequantize_affine` in groups of 4 along the last dim, and
/// `quantized_decomposed.embedding_4bit` with per-group scales and zero points, against their
/// definitions.
#[test]
fn affine_quantization_and_four_bit_embeddings_match_their_definitions() {
    let Some((instance, dev)) = device("affine", false) else {
        return;
    };
    let f32t = |shape: &[usize], v: &[f32]| HostTensor::from_f32(shape.to_vec(), v).unwrap();
    let x: Vec<f32> = rand_vec(161, 16).iter().map(|v| v * 3.0).collect();
    let scales = [0.05f32, 0.02, 0.04, 0.03];
    let zeros = [1f32, -2.0, 0.0, 3.0];
    let quant: Vec<f32> = x
        .iter()
        .enumerate()
        .map(|(i, v)| {
            ((v * (1.0 / scales[i / 4])).round_ties_even() + zeros[i / 4]).clamp(-128.0, 127.0)
        })
        .collect();
    let rest = |extra: Vec<Arg>| {
        let mut r = vec![Arg::Ints(vec![1, 4]), Arg::None, Arg::None];
        r.extend(extra);
        r
    };
    let got = call_q8(
        &dev,
        "torchao.quantize_affine.default",
        &[f32t(&[2, 8], &x)],
        rest(vec![Arg::None, Arg::Int(-128), Arg::Int(127)]),
        vec![f32t(&[2, 2], &scales), f32t(&[2, 2], &zeros)],
    );
    assert_eq!(got, quant, "quantize_affine");
    let q8: Vec<i8> = quant.iter().map(|&v| v as i8).collect();
    let got = call_q8(
        &dev,
        "torchao.dequantize_affine.default",
        &[HostTensor::from_i8(vec![2, 8], &q8).unwrap()],
        rest(vec![Arg::None, Arg::Int(-128), Arg::Int(127), Arg::None]),
        vec![f32t(&[2, 2], &scales), f32t(&[2, 2], &zeros)],
    );
    let want: Vec<f32> = quant
        .iter()
        .enumerate()
        .map(|(i, q)| (q - zeros[i / 4]) * scales[i / 4])
        .collect();
    assert_close(&got, &want, DType::F32, "dequantize_affine");
    // embedding_4bit: a [3, 8] table packed [3, 4], scales and zero points [3, 2].
    let q: Vec<i8> = int8s(162, 24)
        .iter()
        .map(|v| v.rem_euclid(16) - 8)
        .collect();
    let packed: Vec<u8> = (0..12)
        .map(|b| ((q[2 * b] + 8) as u8) << 4 | (q[2 * b + 1] + 8) as u8)
        .collect();
    let ts: Vec<f32> = (0..6).map(|i| 0.02 + 0.01 * i as f32).collect();
    let tz: Vec<f32> = (0..6).map(|i| (i % 3) as f32 - 1.0).collect();
    let mut g = GraphBuilder::new();
    let table = g
        .constant("t", HostTensor::new(DType::U8, vec![3, 4], packed).unwrap())
        .unwrap();
    let s = g.constant("s", f32t(&[3, 2], &ts)).unwrap();
    let z = g.constant("z", f32t(&[3, 2], &tz)).unwrap();
    let i = g.input("ids", DType::I32, &[2]).unwrap();
    let args = vec![
        Arg::Tensor(table),
        Arg::Tensor(s),
        Arg::Tensor(z),
        Arg::Int(-8),
        Arg::Int(7),
        Arg::Tensor(i),
        Arg::None,
    ];
    let def = ops::find("quantized_decomposed.embedding_4bit.dtype").unwrap();
    let y = def.call(&mut g, args).unwrap()[0];
    g.output(y).unwrap();
    let ids = HostTensor::from_i32(vec![2], &[2, 0]).unwrap();
    let out = g.build(&dev).unwrap().execute(&[ids]).unwrap();
    let want: Vec<f32> = [2usize, 0]
        .iter()
        .flat_map(|&r| (0..8).map(move |c| (r, c)))
        .map(|(r, c)| (f32::from(q[r * 8 + c]) - tz[r * 2 + c / 4]) * ts[r * 2 + c / 4])
        .collect();
    assert_close(
        &out[0].to_f32().unwrap(),
        &want,
        DType::F32,
        "embedding_4bit",
    );
    assert_no_validation_errors(&instance);
}

/// `sdpa_with_kv_cache` against its definition, in fp32 and fp16: three new keys and values
/// written into caches at a position, then three queries of four heads over two key heads,
/// each over the cache rows up to its own position. Head sizes dividing 128 with at most 4096
/// rows run as one dispatch, or as shares of 64 rows and their combination for longer
/// caches; the others (a head of 12, a cache of 4100 rows) as products and a softmax: all
/// must agree with the definition.
#[test]
fn attention_over_a_kv_cache_matches_its_definition() {
    each_precision("attention_over_a_kv_cache", |dev, dtype| {
        let (s, hq, hk) = (3usize, 4usize, 2usize);
        // (cache rows, head size, position); a cache of more than 64 rows splits each
        // query's rows among work groups, some of them past the last row.
        for (max, d, start) in [
            (8usize, 8usize, 2usize),
            (8, 12, 2),
            (4100, 8, 2),
            (300, 16, 150),
            (1000, 64, 700),
            // Over 16 shares with rows: the combination loads them in two rounds.
            (4000, 32, 3000),
        ] {
            let q = rand_vec(141, s * hq * d);
            let (k, v) = (rand_vec(142, s * hk * d), rand_vec(143, s * hk * d));
            let (kc, vc) = (rand_vec(144, max * hk * d), rand_vec(145, max * hk * d));
            let (got, shape) = call(
                dev,
                "llama::sdpa_with_kv_cache",
                dtype,
                &[
                    (&[1, s, hq, d], &q),
                    (&[1, s, hk, d], &k),
                    (&[1, s, hk, d], &v),
                    (&[1, max, hk, d], &kc),
                    (&[1, max, hk, d], &vc),
                ],
                vec![Arg::Int(start as i64)],
            );
            assert_eq!(shape, [1, s, hq, d]);
            let want = cached_attention_ref([&q, &k, &v, &kc, &vc], (s, hq, hk, d), start);
            assert_close(&got, &want, dtype, &format!("{max} rows of {d}"));
        }
    });
}

/// A prompt's `sdpa_with_kv_cache` (16 queries or more, enough work groups not to split
/// rows) against its definition, in fp32 and fp16: each query over the cache rows up to its
/// own position, eight query heads over two key heads, chunks of 40 and 70 queries (ragged
/// blocks of queries and of keys) at positions 0 and 100, the latter also read from the
/// device. They run as blocks of queries: `attend.comp`'s CAUSAL mode, or in fp16 its
/// cooperative-matrix counterpart where the device runs it.
#[test]
fn a_prompt_attends_over_its_cache_as_defined() {
    each_precision("prompt_attention", |dev, dtype| {
        let (hq, hk, d, max) = (8usize, 2usize, 64usize, 200usize);
        let matrices =
            dtype == DType::F16 && compute_delegate::cooperative_attention_kernel(dev).is_some();
        for (s, start, on_device) in [(40usize, 0usize, false), (70, 100, false), (70, 100, true)] {
            let q = rand_vec(151, s * hq * d);
            let (k, v) = (rand_vec(152, s * hk * d), rand_vec(153, s * hk * d));
            let (kc, vc) = (rand_vec(154, max * hk * d), rand_vec(155, max * hk * d));
            let shapes = [
                vec![1, s, hq, d],
                vec![1, s, hk, d],
                vec![1, s, hk, d],
                vec![1, max, hk, d],
                vec![1, max, hk, d],
            ];
            let mut g = GraphBuilder::new();
            g.set_float(dtype);
            let mut args: Vec<Arg> = shapes
                .iter()
                .enumerate()
                .map(|(i, shape)| {
                    let x = g.input(&format!("x{i}"), DType::F32, shape).unwrap();
                    Arg::Tensor(g.cast(x, dtype).unwrap())
                })
                .collect();
            args.push(if on_device {
                let value = g.input("pos", DType::I32, &[1]).unwrap();
                Arg::DeviceInt { value, plus: 0 }
            } else {
                Arg::Int(start as i64)
            });
            let y = ops::find("llama::sdpa_with_kv_cache")
                .unwrap()
                .call(&mut g, args)
                .unwrap()[0];
            let y = g.cast(y, DType::F32).unwrap();
            g.output(y).unwrap();
            let mut graph = g.build(dev).unwrap();
            let want_kernel = if matrices { "AttendCoop2" } else { "Attend" };
            let kernels = graph.kernels();
            assert!(
                kernels
                    .iter()
                    .any(|k| k.trim_end_matches("_f16") == want_kernel),
                "{dtype:?} {s} queries: {kernels:?}, expected {want_kernel}"
            );
            let mut ins: Vec<HostTensor> = [&q, &k, &v, &kc, &vc]
                .iter()
                .zip(&shapes)
                .map(|(x, shape)| HostTensor::from_f32(shape.clone(), x).unwrap())
                .collect();
            if on_device {
                ins.push(HostTensor::from_i32(vec![1], &[start as i32]).unwrap());
            }
            let got = graph.execute(&ins).unwrap()[0].to_f32().unwrap();
            let want = cached_attention_ref([&q, &k, &v, &kc, &vc], (s, hq, hk, d), start);
            assert_close(&got, &want, dtype, &format!("{s} queries at {start}"));
        }
    });
}

/// KV caches given as graph inputs and written in place by the attention's cache writes, with
/// inputs forced through host staging: the outputs equal those of the build without staging,
/// and validation finds no hazard. (On an H200, whose small inputs are copied from staging
/// inside the recorded commands, `attention_over_a_kv_cache_matches_its_definition` found a
/// write-after-write hazard there until the copies' barrier covered shader writes.)
#[test]
fn inputs_written_in_place_wait_for_their_staging_copies() {
    each_precision("staged_cache_inputs", |dev, dtype| {
        let (s, hq, hk, d, max) = (1usize, 4usize, 2usize, 16usize, 40usize);
        let mut g = GraphBuilder::new();
        g.set_float(dtype);
        let shapes = [
            vec![1, s, hq, d],
            vec![1, s, hk, d],
            vec![1, s, hk, d],
            vec![1, max, hk, d],
            vec![1, max, hk, d],
        ];
        let ts: Vec<_> = shapes
            .iter()
            .enumerate()
            .map(|(i, shape)| {
                let x = g.input(&format!("x{i}"), DType::F32, shape).unwrap();
                Arg::Tensor(g.cast(x, dtype).unwrap())
            })
            .collect();
        let mut args = ts;
        args.push(Arg::Int(7));
        let y = ops::find("llama::sdpa_with_kv_cache")
            .unwrap()
            .call(&mut g, args)
            .unwrap()[0];
        let y = g.cast(y, DType::F32).unwrap();
        g.output(y).unwrap();
        let inputs: Vec<HostTensor> = shapes
            .iter()
            .enumerate()
            .map(|(i, shape)| {
                let n = shape.iter().product();
                HostTensor::from_f32(shape.clone(), &rand_vec(230 + i as u64, n)).unwrap()
            })
            .collect();
        let [staged, plain] = [true, false].map(|force_staging| {
            let options = compute_delegate::BuildOptions {
                force_staging,
                ..Default::default()
            };
            let mut graph = g.build_with(dev, &options).unwrap();
            graph.execute(&inputs).unwrap().remove(0).to_f32().unwrap()
        });
        assert_eq!(staged, plain, "{dtype:?}");
    });
}

/// A decode step's attention splits each query's cache rows among work groups, and the last
/// of them combines the shares (counting them in scratch it leaves zeroed). Run again and
/// again with new queries and positions, one built graph gives the definition each time.
#[test]
fn a_split_attention_runs_again_and_again() {
    each_precision("split_attention_again", |dev, dtype| {
        let (hq, hk, d, max) = (4usize, 2usize, 16usize, 300usize);
        let mut g = GraphBuilder::new();
        g.set_float(dtype);
        let q = g.input("q", DType::F32, &[1, 1, hq, d]).unwrap();
        let q = g.cast(q, dtype).unwrap();
        let pos = g.input("pos", DType::I32, &[1]).unwrap();
        let (kc, vc) = (rand_vec(191, max * hk * d), rand_vec(192, max * hk * d));
        let caches = [("kc", &kc), ("vc", &vc)].map(|(name, data)| {
            let c = g.constant_f32(name, &[1, max, hk, d], data).unwrap();
            g.cast(c, dtype).unwrap()
        });
        let sdpa = ops::find("llama::custom_sdpa").unwrap();
        let mut args = vec![
            Arg::Tensor(q),
            Arg::Tensor(caches[0]),
            Arg::Tensor(caches[1]),
        ];
        args.push(Arg::DeviceInt {
            value: pos,
            plus: 0,
        });
        let y = sdpa.call(&mut g, args).unwrap()[0];
        let y = g.cast(y, DType::F32).unwrap();
        g.output(y).unwrap();
        let mut built = g.build(dev).unwrap();
        assert!(
            built.kernels().iter().any(|k| k.starts_with("AttendSplit")),
            "{:?}",
            built.kernels()
        );
        for (step, at) in [250usize, 3, 299, 64].into_iter().enumerate() {
            let qv = rand_vec(193 + step as u64, hq * d);
            let inputs = [
                HostTensor::from_f32(vec![1, 1, hq, d], &qv),
                HostTensor::from_i32(vec![1], &[at as i32]),
            ]
            .map(Result::unwrap);
            let got = built.execute(&inputs).unwrap()[0].to_f32().unwrap();
            let want: Vec<f32> = (0..hq)
                .flat_map(|h| {
                    attend_ref(&qv[h * d..][..d], [&kc, &vc], (h / (hq / hk), hk), at + 1)
                })
                .collect();
            assert_close(&got, &want, dtype, &format!("step {step}, position {at}"));
        }
    });
}

/// A rotary embedding whose results only a KV cache write and an attention over the cache
/// read (a language model's layer) is computed by them: the keys rotated straight into the
/// cache, the queries as the attention loads them. Fused and unfused graphs agree over three
/// steps at positions known only on the device, in fp32 and fp16: a one-query step over a
/// long cache (the split attention), three queries over a short one (one dispatch), tables
/// shared by the heads and tables per head.
#[test]
fn rotations_fuse_into_the_cache_write_and_the_attention() {
    each_precision("rotations_fuse", |dev, dtype| {
        // (queries, query heads, key heads, head size, cache rows, tables per head)
        for (s, hq, hk, d, max, per_head) in [
            (1usize, 4usize, 2usize, 16usize, 300usize, false),
            (3, 4, 2, 8, 12, false),
            (2, 2, 2, 8, 200, true),
        ] {
            let mut g = GraphBuilder::new();
            g.set_float(dtype);
            let input = |g: &mut GraphBuilder, name: &str, shape: &[usize]| {
                let x = g.input(name, DType::F32, shape).unwrap();
                g.cast(x, dtype).unwrap()
            };
            let q = input(&mut g, "q", &[1, s, hq, d]);
            let k = input(&mut g, "k", &[1, s, hk, d]);
            let v = input(&mut g, "v", &[1, s, hk, d]);
            let pos = g.input("pos", DType::I32, &[1]).unwrap();
            rotated_attention_over_caches(&mut g, [q, k, v], pos, (per_head, max), 171);
            let mut built = fused_and_unfused(&g, dev);
            let kernels = built.each_ref().map(|b| b.kernels());
            let count =
                |i: usize, name: &str| kernels[i].iter().filter(|k| k.starts_with(name)).count();
            let what = format!("{s} queries, {max} rows: {kernels:?}");
            // Fused: one rotation (the keys' into the cache), one cache write (the values').
            assert_eq!((count(0, "Rope"), count(0, "CacheWrite")), (1, 1), "{what}");
            assert_eq!((count(1, "Rope"), count(1, "CacheWrite")), (2, 2), "{what}");
            fused_matches_unfused(&mut built, dtype, &what, |step, at| {
                [
                    HostTensor::from_f32(
                        vec![1, s, hq, d],
                        &rand_vec(174 + step as u64, s * hq * d),
                    ),
                    HostTensor::from_f32(
                        vec![1, s, hk, d],
                        &rand_vec(180 + step as u64, s * hk * d),
                    ),
                    HostTensor::from_f32(
                        vec![1, s, hk, d],
                        &rand_vec(186 + step as u64, s * hk * d),
                    ),
                    HostTensor::from_i32(vec![1], &[at as i32]),
                ]
                .map(Result::unwrap)
                .to_vec()
            });
        }
    });
}

/// A decode step's key and value products store their rows straight into the KV caches (the
/// keys rotated on the way), as the cache epilogues of `gemv_q4.comp` (4-bit weights) and
/// `gemv_t.comp` (float ones): no rotation or cache-write dispatch is left, and the attention
/// over the caches gives what the unfused graph gives, over three steps at positions known
/// only on the device. fp32 and fp16; one and three rows; tables shared by the heads and
/// tables per head; float products of depth 64 and 68 (in f16, read in 16-byte words and
/// in vec4s).
#[test]
fn products_write_the_kv_cache_directly() {
    each_precision("products_into_cache", |dev, dtype| {
        // (4-bit weights, rows, query heads, key heads, head size, cache rows, tables per head)
        for (q4, s, hq, hk, d, max, per_head) in [
            (true, 1usize, 4usize, 2usize, 16usize, 300usize, false),
            (true, 3, 4, 2, 8, 12, false),
            (true, 2, 2, 2, 8, 200, true),
            (false, 1, 4, 2, 16, 300, false),
            (false, 3, 4, 2, 8, 12, false),
            (false, 2, 2, 2, 8, 200, true),
        ] {
            let dim = if q4 || d == 8 { 64 } else { 68 };
            let mut g = GraphBuilder::new();
            g.set_float(dtype);
            let x = g.input("x", DType::F32, &[1, s, dim]).unwrap();
            let x = g.cast(x, dtype).unwrap();
            let nw = g.constant_f32("nw", &[dim], &rand_vec(190, dim)).unwrap();
            let nw = g.cast(nw, dtype).unwrap();
            let xn = g.rms_norm(x, nw, 1e-5).unwrap();
            let pos = g.input("pos", DType::I32, &[1]).unwrap();
            let heads = |g: &mut GraphBuilder, seed: u64, h: usize| {
                let y = if q4 {
                    q4_linear(g, xn, seed, [h * d, dim, 32])
                } else {
                    let w = rand_vec(seed, h * d * dim);
                    let w: Vec<f32> = w.iter().map(|v| v * 0.2).collect();
                    let w = g.constant_f32(&format!("w{seed}"), &[h * d, dim], &w);
                    let w = g.cast(w.unwrap(), dtype).unwrap();
                    g.linear(xn, w, None).unwrap()
                };
                g.reshape(y, &[1, s as isize, h as isize, d as isize])
                    .unwrap()
            };
            let (q, k, v) = (
                heads(&mut g, 191, hq),
                heads(&mut g, 193, hk),
                heads(&mut g, 195, hk),
            );
            rotated_attention_over_caches(&mut g, [q, k, v], pos, (per_head, max), 197);
            let mut built = fused_and_unfused(&g, dev);
            let kernels = built.each_ref().map(|b| b.kernels());
            let count =
                |i: usize, name: &str| kernels[i].iter().filter(|k| k.starts_with(name)).count();
            let what = format!("{s} rows, {max} cache rows: {kernels:?}");
            assert_eq!((count(0, "Rope"), count(0, "CacheWrite")), (0, 0), "{what}");
            let product = if q4 { "GemvQ4" } else { "GemvT" };
            assert_eq!(count(0, product), 3, "{what}");
            assert_eq!((count(1, "Rope"), count(1, "CacheWrite")), (2, 2), "{what}");
            fused_matches_unfused(&mut built, dtype, &what, |step, at| {
                [
                    HostTensor::from_f32(vec![1, s, dim], &rand_vec(200 + step as u64, s * dim)),
                    HostTensor::from_i32(vec![1], &[at as i32]),
                ]
                .map(Result::unwrap)
                .to_vec()
            });
        }
    });
}

/// `sdpa_with_kv_cache` of `q` and `k` rotated (`et_vk.apply_rotary_emb`) and `v`, over two
/// random caches of `max` rows at the device position `pos`, cast to f32 as the graph's
/// output: rotary tables of `[s, d / 2]`, or `[s, hq, d / 2]` with `per_head`, from `seed`
/// (the caches from the next two seeds).
fn rotated_attention_over_caches(
    g: &mut GraphBuilder,
    [q, k, v]: [compute_delegate::TensorId; 3],
    pos: compute_delegate::TensorId,
    (per_head, max): (bool, usize),
    seed: u64,
) {
    let (&[_, s, hq, d], &[_, _, hk, _]) = (g.shape(q).unwrap(), g.shape(k).unwrap()) else {
        panic!("q and k are [1, s, heads, d]");
    };
    let dtype = g.dtype(q).unwrap();
    let table = if per_head {
        vec![s, hq, d / 2]
    } else {
        vec![s, d / 2]
    };
    let n: usize = table.iter().product();
    let angles = rand_vec(seed, n);
    let cos: Vec<f32> = angles.iter().map(|a| a.cos()).collect();
    let sin: Vec<f32> = angles.iter().map(|a| a.sin()).collect();
    let cos = g.constant_f32("cos", &table, &cos).unwrap();
    let sin = g.constant_f32("sin", &table, &sin).unwrap();
    let caches = [seed + 1, seed + 2].map(|seed| {
        let c = g
            .constant_f32(
                &format!("cache{seed}"),
                &[1, max, hk, d],
                &rand_vec(seed, max * hk * d),
            )
            .unwrap();
        g.cast(c, dtype).unwrap()
    });
    let rope = ops::find("et_vk.apply_rotary_emb.default").unwrap();
    let rotated = rope
        .call(g, [q, k, cos, sin].map(Arg::Tensor).to_vec())
        .unwrap();
    let sdpa = ops::find("llama::sdpa_with_kv_cache").unwrap();
    let mut args: Vec<Arg> = [rotated[0], rotated[1], v, caches[0], caches[1]]
        .map(Arg::Tensor)
        .to_vec();
    args.push(Arg::DeviceInt {
        value: pos,
        plus: 0,
    });
    let y = sdpa.call(g, args).unwrap()[0];
    let y = g.cast(y, DType::F32).unwrap();
    g.output(y).unwrap();
}

/// `g` built with its fusions, then with `BuildOptions::unfused`.
fn fused_and_unfused(g: &GraphBuilder, dev: &Device) -> [compute_delegate::Graph; 2] {
    [false, true].map(|unfused| {
        let options = compute_delegate::BuildOptions {
            unfused,
            ..Default::default()
        };
        g.build_with(dev, &options).unwrap()
    })
}

/// The fused and unfused builds give the same first output over three steps at positions 0,
/// 5 and 9 (`inputs(step, position)`), within `2e-5` of the output's scale in fp32 and `2e-2`
/// in fp16: a fused rotation is not rounded to the graph's dtype before its consumer.
fn fused_matches_unfused(
    built: &mut [compute_delegate::Graph; 2],
    dtype: DType,
    what: &str,
    inputs: impl Fn(usize, usize) -> Vec<HostTensor>,
) {
    for (step, at) in [0usize, 5, 9].into_iter().enumerate() {
        let inputs = inputs(step, at);
        let [fused, unfused] = built
            .each_mut()
            .map(|b| b.execute(&inputs).unwrap()[0].to_f32().unwrap());
        let scale = unfused.iter().fold(1e-3f32, |m, v| m.max(v.abs()));
        let tol = if dtype == DType::F16 { 2e-2 } else { 2e-5 } * scale;
        for (e, (a, b)) in fused.iter().zip(&unfused).enumerate() {
            assert!(
                (a - b).abs() <= tol,
                "{what}, step {step}, element {e}: fused {a}, unfused {b}"
            );
        }
    }
}

/// One query row's attention over the first `rows` rows of key head `kv` of `kv_heads` in the
/// caches (`[rows, kv_heads, d]`): `softmax(q . k / sqrt(d)) v`, the definition.
/// `sdpa_with_kv_cache`'s definition: `s` new keys and values `[s, hk, d]` written into the
/// caches `[max, hk, d]` at `start`, then each query `[s, hq, d]` over the cache rows up to its
/// own position.
fn cached_attention_ref(
    [q, k, v, kc, vc]: [&[f32]; 5],
    (s, hq, hk, d): (usize, usize, usize, usize),
    start: usize,
) -> Vec<f32> {
    let write = |cache: &[f32], new: &[f32]| {
        let mut c = cache.to_vec();
        c[start * hk * d..(start + s) * hk * d].copy_from_slice(new);
        c
    };
    let (kc, vc) = (write(kc, k), write(vc, v));
    let mut want = Vec::with_capacity(s * hq * d);
    for i in 0..s {
        for h in 0..hq {
            let qrow = &q[(i * hq + h) * d..][..d];
            let kv = (h / (hq / hk), hk);
            want.extend(attend_ref(qrow, [&kc, &vc], kv, start + i + 1));
        }
    }
    want
}

fn attend_ref(
    q: &[f32],
    [kc, vc]: [&[f32]; 2],
    (kv, kv_heads): (usize, usize),
    rows: usize,
) -> Vec<f32> {
    let d = q.len();
    let at = |t: usize| (t * kv_heads + kv) * d;
    let scores: Vec<f32> = (0..rows)
        .map(|t| {
            let k = &kc[at(t)..][..d];
            q.iter().zip(k).map(|(a, b)| a * b).sum::<f32>() / (d as f32).sqrt()
        })
        .collect();
    let top = scores.iter().fold(f32::MIN, |m, &v| m.max(v));
    let p: Vec<f32> = scores.iter().map(|v| (v - top).exp()).collect();
    let sum: f32 = p.iter().sum();
    (0..d)
        .map(|e| (0..rows).map(|t| p[t] * vc[at(t) + e]).sum::<f32>() / sum)
        .collect()
}

/// Products of `k` terms against their definition in f64 (`want`, with each output's sum of
/// absolute terms): in fp32 within 1e-5 plus about sqrt(k) roundings of that sum; in fp16
/// within fp16's tolerance of the output's scale.
fn assert_sums_close(
    got: &[f32],
    (want, magnitude): (&[f32], &[f64]),
    k: usize,
    dtype: DType,
    what: &str,
) {
    if dtype != DType::F32 {
        return assert_close(got, want, dtype, what);
    }
    for (i, ((g, w), m)) in got.iter().zip(want).zip(magnitude).enumerate() {
        let tol = 1e-5 * (1.0 + w.abs()) + (f32::EPSILON * (k as f32).sqrt() * *m as f32);
        assert!(
            (g - w).abs() <= tol,
            "{what}: element {i}: got {g}, want {w}"
        );
    }
}

/// `linear_q4gsw` of one to four rows reads its weights packed on the device (`gemv_q4.comp`);
/// longer products unpack them on the device into a temporary just before their GEMM
/// (`dequant_q4.comp`), or at build where the packing does not suit it (groups of 4). Both in
/// fp32 and fp16 against the definition: groups of 4 to 128, columns that leave a work
/// group's lanes idle, a bias.
#[test]
fn four_bit_linears_keep_their_weights_packed() {
    each_precision("four_bit_linears", |dev, dtype| {
        for (rows, n, k, group) in [
            (1usize, 5usize, 64usize, 32usize),
            (3, 6, 96, 16),
            (4, 9, 32, 8),
            (6, 5, 64, 32),
            (33, 40, 96, 32),
            (8, 7, 72, 8),
            (5, 300, 128, 128),
            (6, 5, 12, 4),
            // Lanes looping over more than 64 words, and groups over one word; work groups
            // of 128 and 256 lanes for deep rows, looping over twice that at 16384.
            (2, 17, 2112, 64),
            (1, 20, 4096, 128),
            (1, 12, 8192, 32),
            (2, 7, 16384, 64),
            // Over a thousand work groups: gemv_q4_teams.comp's layout.
            (1, 8200, 64, 32),
            (3, 8196, 96, 8),
        ] {
            let q: Vec<i8> = int8s(161, n * k)
                .iter()
                .map(|v| v.rem_euclid(16) - 8)
                .collect();
            let packed = pack4(&q);
            let groups = k / group;
            let scales: Vec<f32> = (0..groups * n).map(|i| 0.01 + 0.003 * i as f32).collect();
            let bias = rand_vec(162, n);
            let x = rand_vec(163, rows * k);
            let mut g = GraphBuilder::new();
            let xin = g.input("x", DType::F32, &[rows, k]).unwrap();
            let xd = g.cast(xin, dtype).unwrap();
            let w = g
                .constant(
                    "w",
                    HostTensor::new(DType::U8, vec![n, k / 2], packed).unwrap(),
                )
                .unwrap();
            let s = g.constant_f32("s", &[groups, n], &scales).unwrap();
            let b = g.constant_f32("b", &[n], &bias).unwrap();
            let b = g.cast(b, dtype).unwrap();
            let args = vec![
                Arg::Tensor(xd),
                Arg::Tensor(w),
                Arg::Tensor(s),
                Arg::Int(group as i64),
                Arg::Tensor(b),
            ];
            let y = ops::find("et_vk.linear_q4gsw.default")
                .unwrap()
                .call(&mut g, args)
                .unwrap()[0];
            let y = g.cast(y, DType::F32).unwrap();
            g.output(y).unwrap();
            // Unfolded: weights this small would otherwise be unpacked once at build. In
            // fp32 throughout (`prompt_four_bit_products_may_multiply_in_f16` tests the rest).
            let options = BuildOptions {
                unfolded: true,
                packed_products_in_f16: Some(false),
                ..BuildOptions::default()
            };
            let mut built = g.build_with(dev, &options).unwrap();
            assert_eq!(
                built.kernels().iter().any(|k| k.starts_with("GemvQ4")),
                rows <= 4,
                "{rows} rows: {:?}",
                built.kernels()
            );
            assert_eq!(
                built.kernels().iter().any(|k| k.starts_with("DequantQ4")),
                rows > 4 && group >= 8,
                "{rows} rows, groups of {group}: {:?}",
                built.kernels()
            );
            let out = built
                .execute(&[HostTensor::from_f32(vec![rows, k], &x).unwrap()])
                .unwrap();
            // In f64, with each output's sum of absolute terms: an f32 sum of k terms may be
            // off by about sqrt(k) roundings of that size.
            let (want, magnitude): (Vec<f32>, Vec<f64>) = (0..rows * n)
                .map(|at| {
                    let (r, o) = (at / n, at % n);
                    let terms = (0..k).map(|c| {
                        f64::from(x[r * k + c])
                            * f64::from(q[o * k + c])
                            * f64::from(scales[(c / group) * n + o])
                    });
                    let (sum, abs) = terms.fold((0.0, 0.0), |(s, a), t| (s + t, a + t.abs()));
                    ((f64::from(bias[o]) + sum) as f32, abs)
                })
                .unzip();
            let what = format!("{rows} rows, n {n}, k {k}, groups of {group}");
            let got = out[0].to_f32().unwrap();
            assert_sums_close(&got, (&want, &magnitude), k, dtype, &what);
        }
    });
}

/// `et_vk.linear_qcs4w` (per-channel 4-bit weights, the even column in the high nibble) read
/// packed where the depth is a multiple of 8: one to four rows by `gemv_q4.comp`, longer
/// products unpacked on the device; against the definition, in each precision.
#[test]
fn channel_four_bit_linears_read_their_weights_packed() {
    each_precision("channel_four_bit_linears", |dev, dtype| {
        for (rows, n, k) in [
            (1usize, 5usize, 64usize),
            (4, 9, 32),
            (8, 7, 72),
            (33, 40, 96),
        ] {
            let q: Vec<i8> = int8s(181, n * k)
                .iter()
                .map(|v| v.rem_euclid(16) - 8)
                .collect();
            // The even column in the high nibble: `pack4` with each pair swapped.
            let packed: Vec<u8> = pack4(&q).iter().map(|b| b.rotate_left(4)).collect();
            let scales: Vec<f32> = (0..n).map(|o| 0.02 + 0.005 * o as f32).collect();
            let x = rand_vec(182, rows * k);
            let mut g = GraphBuilder::new();
            let xin = g.input("x", DType::F32, &[rows, k]).unwrap();
            let xd = g.cast(xin, dtype).unwrap();
            let w = g
                .constant(
                    "w",
                    HostTensor::new(DType::U8, vec![n, k / 2], packed).unwrap(),
                )
                .unwrap();
            let s = g.constant_f32("s", &[n], &scales).unwrap();
            let args = vec![Arg::Tensor(xd), Arg::Tensor(w), Arg::Tensor(s)];
            let y = ops::find("et_vk.linear_qcs4w.default")
                .unwrap()
                .call(&mut g, args)
                .unwrap()[0];
            let y = g.cast(y, DType::F32).unwrap();
            g.output(y).unwrap();
            let options = BuildOptions {
                unfolded: true,
                packed_products_in_f16: Some(false),
                ..BuildOptions::default()
            };
            let mut built = g.build_with(dev, &options).unwrap();
            let kernels = built.kernels();
            let what = format!("{rows} rows, n {n}, k {k}: {kernels:?}");
            assert_eq!(
                kernels.iter().any(|k| k.starts_with("GemvQ4")),
                rows <= 4 && k % 32 == 0,
                "{what}"
            );
            assert_eq!(
                kernels.iter().any(|k| k.starts_with("DequantQ4")),
                rows > 4,
                "{what}"
            );
            let out = built
                .execute(&[HostTensor::from_f32(vec![rows, k], &x).unwrap()])
                .unwrap();
            let (want, magnitude): (Vec<f32>, Vec<f64>) = (0..rows * n)
                .map(|at| {
                    let (r, o) = (at / n, at % n);
                    let terms = (0..k).map(|c| {
                        f64::from(x[r * k + c]) * f64::from(q[o * k + c]) * f64::from(scales[o])
                    });
                    let (sum, abs) = terms.fold((0.0, 0.0), |(s, a), t| (s + t, a + t.abs()));
                    (sum as f32, abs)
                })
                .unzip();
            let got = out[0].to_f32().unwrap();
            assert_sums_close(&got, (&want, &magnitude), k, dtype, &what);
        }
    });
}

/// A prompt's 4-bit product in an fp32 graph, with `BuildOptions::packed_products_in_f16`
/// on (the default where fp16 GEMMs run on cooperative matrices) and off: on, the weights are
/// unpacked to fp16 and the input and result cast around an fp16 GEMM, within fp16's
/// tolerance of the definition; off, all in fp32, within fp32's. Over a batch of two and
/// with the bias added after.
#[test]
fn prompt_four_bit_products_may_multiply_in_f16() {
    let (rows, n, k, group) = (2 * 37usize, 48usize, 256usize, 32usize);
    let q: Vec<i8> = int8s(171, n * k)
        .iter()
        .map(|v| v.rem_euclid(16) - 8)
        .collect();
    let scales: Vec<f32> = (0..k / group * n)
        .map(|i| 0.01 + 0.0007 * i as f32)
        .collect();
    let bias = rand_vec(172, n);
    let x = rand_vec(173, rows * k);
    let want: Vec<f32> = (0..rows * n)
        .map(|at| {
            let (r, o) = (at / n, at % n);
            let dot: f64 = (0..k)
                .map(|c| {
                    f64::from(x[r * k + c])
                        * f64::from(q[o * k + c])
                        * f64::from(scales[(c / group) * n + o])
                })
                .sum();
            (dot + f64::from(bias[o])) as f32
        })
        .collect();
    let graph = || {
        let mut g = GraphBuilder::new();
        let xin = g.input("x", DType::F32, &[2, rows / 2, k]).unwrap();
        let w = HostTensor::new(DType::U8, vec![n, k / 2], pack4(&q)).unwrap();
        let w = g.constant("w", w).unwrap();
        let s = g.constant_f32("s", &[k / group, n], &scales).unwrap();
        let b = g.constant_f32("b", &[n], &bias).unwrap();
        let args = vec![
            Arg::Tensor(xin),
            Arg::Tensor(w),
            Arg::Tensor(s),
            Arg::Int(group as i64),
            Arg::Tensor(b),
        ];
        let y = ops::find("et_vk.linear_q4gsw.default")
            .unwrap()
            .call(&mut g, args)
            .unwrap()[0];
        g.output(y).unwrap();
        g
    };
    // The device opened as a program opens it, with what the fp32 graph asks for: fp16
    // is optional, and enabled where the device has it.
    let asked = graph().requirements();
    assert!(
        asked
            .optional_features
            .contains(compute_delegate::F16_FEATURES),
        "{asked:?}"
    );
    let Some((instance, dev)) = testing::device("prompt_four_bit_f16", &asked) else {
        return;
    };
    for on in [true, false] {
        let g = graph();
        let options = BuildOptions {
            packed_products_in_f16: Some(on),
            // Weights this small would be unpacked once at build.
            unfolded: true,
            ..BuildOptions::default()
        };
        let mut built = g.build_with(&dev, &options).unwrap();
        let unpacked: Vec<DType> = built
            .kernels()
            .iter()
            .zip(built.float_types())
            .filter(|(k, _)| k.starts_with("DequantQ4"))
            .map(|(_, t)| t)
            .collect();
        let on = on && compute_delegate::supports_f16(&dev);
        let in_f16 = if on { DType::F16 } else { DType::F32 };
        assert_eq!(unpacked, [in_f16], "{:?}", built.kernels());
        let got = built
            .execute(&[HostTensor::from_f32(vec![2, rows / 2, k], &x).unwrap()])
            .unwrap()[0]
            .to_f32()
            .unwrap();
        let what = format!("products in fp16: {on}");
        if on {
            assert_close(&got, &want, DType::F16, &what);
        } else {
            let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-5 * scale,
                    "{what}: {i}: got {g}, want {w}"
                );
            }
        }
    }
    assert_no_validation_errors(&instance);
}

/// A group size past the depth (here 2^40) is one group: both the packed one-row product
/// and a prompt's product unpacked on the device read one scale a column, and no shift of 32
/// or more reaches a kernel.
#[test]
fn four_bit_groups_wider_than_the_depth_are_one_group() {
    let Some((instance, dev)) = device("four_bit_wide_groups", false) else {
        return;
    };
    let (n, k) = (300usize, 256usize);
    let q: Vec<i8> = int8s(181, n * k)
        .iter()
        .map(|v| v.rem_euclid(16) - 8)
        .collect();
    let scales: Vec<f32> = (0..n).map(|i| 0.01 + 0.001 * i as f32).collect();
    for rows in [1usize, 6] {
        let x = rand_vec(182, rows * k);
        let mut g = GraphBuilder::new();
        let xin = g.input("x", DType::F32, &[rows, k]).unwrap();
        let w = HostTensor::new(DType::U8, vec![n, k / 2], pack4(&q)).unwrap();
        let w = g.constant("w", w).unwrap();
        let s = g.constant_f32("s", &[1, n], &scales).unwrap();
        let args = vec![
            Arg::Tensor(xin),
            Arg::Tensor(w),
            Arg::Tensor(s),
            Arg::Int(1 << 40),
            Arg::None,
        ];
        let y = ops::find("et_vk.linear_q4gsw.default")
            .unwrap()
            .call(&mut g, args)
            .unwrap()[0];
        g.output(y).unwrap();
        let options = BuildOptions {
            unfolded: true,
            ..BuildOptions::default()
        };
        let mut built = g.build_with(&dev, &options).unwrap();
        let got = built
            .execute(&[HostTensor::from_f32(vec![rows, k], &x).unwrap()])
            .unwrap()[0]
            .to_f32()
            .unwrap();
        let want: Vec<f32> = (0..rows * n)
            .map(|at| {
                let (r, o) = (at / n, at % n);
                let dot: f32 = (0..k).map(|c| x[r * k + c] * f32::from(q[o * k + c])).sum();
                dot * scales[o]
            })
            .collect();
        assert_close(&got, &want, DType::F16, &format!("{rows} rows"));
    }
    assert_no_validation_errors(&instance);
}

/// Integer values through ops written for floats, as T5's relative position buckets compute
/// them: `where` picks between i32 tensors (broadcast against a mask) and keeps i32, and an
/// embedding takes indices that float arithmetic made (whole numbers in f32).
#[test]
fn integers_pass_through_where_and_float_indices_through_embeddings() {
    let Some((instance, dev)) = device("integers_through_where", false) else {
        return;
    };
    let mut g = GraphBuilder::new();
    let a = g.input("a", DType::I32, &[2, 3]).unwrap();
    let b = g.input("b", DType::I32, &[1, 3]).unwrap();
    let m = g.input("m", DType::F32, &[2, 3]).unwrap();
    let picked = ops::find("aten.where.self")
        .unwrap()
        .call(&mut g, vec![Arg::Tensor(m), Arg::Tensor(a), Arg::Tensor(b)])
        .unwrap()[0];
    assert_eq!(g.dtype(picked), Some(DType::I32));
    let table: Vec<f32> = (0..10 * 4).map(|i| i as f32 * 0.5).collect();
    let t = g.constant_f32("table", &[10, 4], &table).unwrap();
    let ids = g.input("ids", DType::F32, &[3]).unwrap();
    let rows = ops::find("aten.embedding.default")
        .unwrap()
        .call(&mut g, vec![Arg::Tensor(t), Arg::Tensor(ids)])
        .unwrap()[0];
    g.output(picked).unwrap();
    g.output(rows).unwrap();
    let out = g
        .build(&dev)
        .unwrap()
        .execute(&[
            HostTensor::from_i32(vec![2, 3], &[1, -2, 3, 40_000, 5, -6]).unwrap(),
            HostTensor::from_i32(vec![1, 3], &[7, 8, -9]).unwrap(),
            HostTensor::from_f32(vec![2, 3], &[1.0, 0.0, 1.0, 0.0, 1.0, 0.0]).unwrap(),
            HostTensor::from_f32(vec![3], &[9.0, 0.0, 4.0]).unwrap(),
        ])
        .unwrap();
    assert_eq!(out[0].to_i32().unwrap(), [1, 8, 3, 7, 5, -9]);
    let want: Vec<f32> = [9usize, 0, 4]
        .iter()
        .flat_map(|&r| table[r * 4..r * 4 + 4].to_vec())
        .collect();
    assert_eq!(out[1].to_f32().unwrap(), want);
    assert_no_validation_errors(&instance);
}

/// A 3-D convolution through `aten.convolution` (ExecuTorch leaves torchvision's video
/// ResNet's on the CPU), against its definition: padding, strides and a dilation along depth,
/// a bias, in fp32 and fp16.
#[test]
fn three_d_convolutions_match_their_definition() {
    each_precision("conv3d", |dev, dtype| {
        let (n, c, d, h, w) = (2usize, 3usize, 5usize, 6usize, 7usize);
        let (oc, kd, kh, kw) = (4usize, 2usize, 3usize, 3usize);
        let ([sd, sh, sw], [pd, ph, pw], [dd, dh, dw]) = ([2, 1, 2], [1, 1, 0], [2, 1, 1]);
        let x = rand_vec(191, n * c * d * h * w);
        let wt = rand_vec(192, oc * c * kd * kh * kw);
        let b = rand_vec(193, oc);
        let out = |size: usize, p: usize, k: usize, s: usize, dl: usize| {
            (size + 2 * p - dl * (k - 1) - 1) / s + 1
        };
        let (od, oh, ow) = (
            out(d, pd, kd, sd, dd),
            out(h, ph, kh, sh, dh),
            out(w, pw, kw, sw, dw),
        );
        let mut want = Vec::new();
        for img in 0..n {
            for (o, &bias) in b.iter().enumerate() {
                for z in 0..od {
                    for y in 0..oh {
                        for xx in 0..ow {
                            let mut acc = bias;
                            for ci in 0..c {
                                for a in 0..kd {
                                    for bb in 0..kh {
                                        for cc in 0..kw {
                                            let iz = (z * sd + a * dd) as isize - pd as isize;
                                            let iy = (y * sh + bb * dh) as isize - ph as isize;
                                            let ix = (xx * sw + cc * dw) as isize - pw as isize;
                                            let inside = (0..d as isize).contains(&iz)
                                                && (0..h as isize).contains(&iy)
                                                && (0..w as isize).contains(&ix);
                                            if inside {
                                                let xi = (((img * c + ci) * d + iz as usize) * h
                                                    + iy as usize)
                                                    * w
                                                    + ix as usize;
                                                let wi =
                                                    (((o * c + ci) * kd + a) * kh + bb) * kw + cc;
                                                acc += x[xi] * wt[wi];
                                            }
                                        }
                                    }
                                }
                            }
                            want.push(acc);
                        }
                    }
                }
            }
        }
        let mut g = GraphBuilder::new();
        g.set_float(dtype);
        let xin = g.input("x", DType::F32, &[n, c, d, h, w]).unwrap();
        let xin = g.cast(xin, dtype).unwrap();
        let wc = g.constant_f32("w", &[oc, c, kd, kh, kw], &wt).unwrap();
        let wc = g.cast(wc, dtype).unwrap();
        let bc = g.constant_f32("b", &[oc], &b).unwrap();
        let bc = g.cast(bc, dtype).unwrap();
        let ints = |v: [usize; 3]| Arg::Ints(v.iter().map(|&x| x as i64).collect());
        let args = vec![
            Arg::Tensor(xin),
            Arg::Tensor(wc),
            Arg::Tensor(bc),
            ints([sd, sh, sw]),
            ints([pd, ph, pw]),
            ints([dd, dh, dw]),
            Arg::Bool(false),
            Arg::Ints(vec![0, 0, 0]),
            Arg::Int(1),
        ];
        let y = ops::find("aten.convolution.default")
            .unwrap()
            .call(&mut g, args)
            .unwrap()[0];
        assert_eq!(g.shape(y).unwrap(), [n, oc, od, oh, ow]);
        let y = g.cast(y, DType::F32).unwrap();
        g.output(y).unwrap();
        let got = g
            .build(dev)
            .unwrap()
            .execute(&[HostTensor::from_f32(vec![n, c, d, h, w], &x).unwrap()])
            .unwrap()[0]
            .to_f32()
            .unwrap();
        assert_close(&got, &want, dtype, "conv3d");
    });
}

/// 3-D max and average pools (ExecuTorch leaves S3D's on the CPU) against their definitions:
/// padding in every dim, strides, and averages counting padded positions or not.
#[test]
fn three_d_pools_match_their_definitions() {
    each_precision("pool3d", |dev, dtype| {
        let s = [1usize, 2, 5, 6, 7];
        let x = rand_vec(195, s.iter().product());
        let ([kd, kh, kw], [sd, sh, sw], [pd, ph, pw]) = ([3, 2, 3], [2, 2, 1], [1, 1, 1]);
        let out = |n: usize, k: usize, st: usize, p: usize| (n + 2 * p - k) / st + 1;
        let (od, oh, ow) = (
            out(s[2], kd, sd, pd),
            out(s[3], kh, sh, ph),
            out(s[4], kw, sw, pw),
        );
        for (name, max, count_pad) in [
            ("aten.max_pool3d_with_indices.default", true, true),
            ("aten.avg_pool3d.default", false, true),
            ("aten.avg_pool3d.default", false, false),
        ] {
            let mut want = Vec::new();
            for ch in 0..s[1] {
                for z in 0..od {
                    for y in 0..oh {
                        for xx in 0..ow {
                            let (mut m, mut sum, mut inside) = (f32::NEG_INFINITY, 0f32, 0usize);
                            for a in 0..kd {
                                for b in 0..kh {
                                    for c in 0..kw {
                                        let iz = (z * sd + a) as isize - pd as isize;
                                        let iy = (y * sh + b) as isize - ph as isize;
                                        let ix = (xx * sw + c) as isize - pw as isize;
                                        if (0..s[2] as isize).contains(&iz)
                                            && (0..s[3] as isize).contains(&iy)
                                            && (0..s[4] as isize).contains(&ix)
                                        {
                                            let v = x[((ch * s[2] + iz as usize) * s[3]
                                                + iy as usize)
                                                * s[4]
                                                + ix as usize];
                                            m = m.max(v);
                                            sum += v;
                                            inside += 1;
                                        }
                                    }
                                }
                            }
                            let count = if count_pad { kd * kh * kw } else { inside };
                            want.push(if max { m } else { sum / count as f32 });
                        }
                    }
                }
            }
            let rest = vec![
                Arg::Ints(vec![kd as i64, kh as i64, kw as i64]),
                Arg::Ints(vec![sd as i64, sh as i64, sw as i64]),
                Arg::Ints(vec![pd as i64, ph as i64, pw as i64]),
            ];
            let rest = match max {
                true => [rest, vec![Arg::Ints(vec![1, 1, 1]), Arg::Bool(false)]].concat(),
                false => [
                    rest,
                    vec![Arg::Bool(false), Arg::Bool(count_pad), Arg::None],
                ]
                .concat(),
            };
            let (got, shape) = call(dev, name, dtype, &[(&s, &x)], rest);
            assert_eq!(shape, [1, 2, od, oh, ow], "{name}");
            assert_close(
                &got,
                &want,
                dtype,
                &format!("{name}, count_include_pad {count_pad}"),
            );
        }
    });
}

/// `where` between integers under an fp16 graph's mask (a comparison of f16 values).
#[test]
fn integers_pass_through_where_under_f16_masks() {
    let Some((instance, dev)) = device("integers_through_where_f16", true) else {
        return;
    };
    let mut g = GraphBuilder::new();
    g.set_float(DType::F16);
    let a = g.input("a", DType::I32, &[4]).unwrap();
    let b = g.input("b", DType::I32, &[4]).unwrap();
    let m = g.input("m", DType::F32, &[4]).unwrap();
    let m = g.cast(m, DType::F16).unwrap();
    let picked = ops::find("aten.where.self")
        .unwrap()
        .call(&mut g, vec![Arg::Tensor(m), Arg::Tensor(a), Arg::Tensor(b)])
        .unwrap()[0];
    g.output(picked).unwrap();
    let out = g
        .build(&dev)
        .unwrap()
        .execute(&[
            HostTensor::from_i32(vec![4], &[1, 2, 3, 4]).unwrap(),
            HostTensor::from_i32(vec![4], &[-1, -2, -3, -4]).unwrap(),
            HostTensor::from_f32(vec![4], &[1.0, 0.0, 0.0, 1.0]).unwrap(),
        ])
        .unwrap();
    assert_eq!(out[0].to_i32().unwrap(), [1, -2, -3, 4]);
    assert_no_validation_errors(&instance);
}

/// 4-bit values in -8..8, two to a byte as ExecuTorch packs them (the even one low).
fn pack4(q: &[i8]) -> Vec<u8> {
    q.chunks_exact(2)
        .map(|p| ((p[1] + 8) as u8) << 4 | (p[0] + 8) as u8)
        .collect()
}

/// `x @ W^T` for random 4-bit weights `W` `[n, k]` in groups of `group` (`et_vk.linear_q4gsw`).
fn q4_linear(
    g: &mut GraphBuilder,
    x: compute_delegate::TensorId,
    seed: u64,
    [n, k, group]: [usize; 3],
) -> compute_delegate::TensorId {
    let q: Vec<i8> = int8s(seed, n * k)
        .iter()
        .map(|v| v.rem_euclid(16) - 8)
        .collect();
    let packed = pack4(&q);
    let scales: Vec<f32> = rand_vec(seed + 1, k / group * n)
        .iter()
        .map(|v| 0.02 + 0.01 * v.abs())
        .collect();
    let w = HostTensor::new(DType::U8, vec![n, k / 2], packed).unwrap();
    let w = g.constant(&format!("w{seed}"), w).unwrap();
    let s = g
        .constant_f32(&format!("s{seed}"), &[k / group, n], &scales)
        .unwrap();
    let args = vec![
        Arg::Tensor(x),
        Arg::Tensor(w),
        Arg::Tensor(s),
        Arg::Int(group as i64),
        Arg::None,
    ];
    ops::find("et_vk.linear_q4gsw.default")
        .unwrap()
        .call(g, args)
        .unwrap()[0]
}

/// The fusions (a gated MLP's two products, SiLU and product as one dispatch; residual adds
/// done by the products that precede them; an RMS norm done by the products that read it)
/// give what the graph as written gives.
#[test]
fn fused_epilogues_equal_the_unfused_graph() {
    each_precision("fused_epilogues", |dev, dtype| {
        // The last: a gated product of over a thousand work groups (gemv_q4_teams.comp).
        for (rows, hidden) in [(1usize, 96usize), (3, 96), (2, 4128)] {
            let k = 64;
            let mut g = GraphBuilder::new();
            let xin = g.input("x", DType::F32, &[rows, k]).unwrap();
            let x = g.cast(xin, dtype).unwrap();
            // y = x + down(silu(gate(n)) * up(n)) for n = rms_norm(x), then z = y + y W^T on
            // one row.
            let nw = g.constant_f32("nw", &[k], &rand_vec(25, k)).unwrap();
            let nw = g.cast(nw, dtype).unwrap();
            let n = g.rms_norm(x, nw, 1e-5).unwrap();
            let gate = q4_linear(&mut g, n, 11, [hidden, k, 32]);
            let up = q4_linear(&mut g, n, 13, [hidden, k, 32]);
            let silu = ops::find("aten.silu.default").unwrap();
            let s = silu.call(&mut g, vec![Arg::Tensor(gate)]).unwrap()[0];
            let h = g.mul(s, up).unwrap();
            let d = q4_linear(&mut g, h, 15, [k, hidden, 16]);
            let y = g.add(x, d).unwrap();
            let row = g.slice(y, 0, 0, 1, 1).unwrap();
            let small = |seed: u64, n: usize| -> Vec<f32> {
                rand_vec(seed, n).iter().map(|v| v * 0.1).collect()
            };
            let w = g.constant_f32("wf", &[k, k], &small(17, k * k)).unwrap();
            let w = g.cast(w, dtype).unwrap();
            let l = g.linear(row, w, None).unwrap();
            let z = g.add(l, row).unwrap();
            // A norm read by a float linear with a bias, over every row: yn Wl^T + bl for
            // yn = rms_norm(y).
            let nw2 = g.constant_f32("nw2", &[k], &rand_vec(27, k)).unwrap();
            let nw2 = g.cast(nw2, dtype).unwrap();
            let yn = g.rms_norm(y, nw2, 1e-5).unwrap();
            let wl = g
                .constant_f32("wl", &[hidden, k], &small(29, hidden * k))
                .unwrap();
            let bl = g
                .constant_f32("bl", &[hidden], &rand_vec(31, hidden))
                .unwrap();
            let (wl, bl) = (g.cast(wl, dtype).unwrap(), g.cast(bl, dtype).unwrap());
            let yl = g.linear(yn, wl, Some(bl)).unwrap();
            // And a gated product of float weights on a norm: silu(zn Wg^T) * (zn Wu^T) for
            // zn = rms_norm(z).
            let nw3 = g.constant_f32("nw3", &[k], &rand_vec(33, k)).unwrap();
            let nw3 = g.cast(nw3, dtype).unwrap();
            let z = g.rms_norm(z, nw3, 1e-5).unwrap();
            let wg = g
                .constant_f32("wg", &[hidden, k], &small(21, hidden * k))
                .unwrap();
            let wu = g
                .constant_f32("wu", &[hidden, k], &small(23, hidden * k))
                .unwrap();
            let (wg, wu) = (g.cast(wg, dtype).unwrap(), g.cast(wu, dtype).unwrap());
            let zg = g.linear(z, wg, None).unwrap();
            let zu = g.linear(z, wu, None).unwrap();
            let zs = silu.call(&mut g, vec![Arg::Tensor(zg)]).unwrap()[0];
            let gated = g.mul(zu, zs).unwrap();
            for t in [y, gated, yl] {
                let t = g.cast(t, DType::F32).unwrap();
                g.output(t).unwrap();
            }
            let input = [HostTensor::from_f32(vec![rows, k], &rand_vec(19, rows * k)).unwrap()];
            let mut built = fused_and_unfused(&g, dev);
            let kernels = built.each_ref().map(|b| b.kernels());
            let count =
                |i: usize, name: &str| kernels[i].iter().filter(|k| k.starts_with(name)).count();
            // Fused: the gated product, the down product with the residual, the float linear
            // with its residual, the float linear and the float gated product with their
            // norms; no elementwise dispatch between.
            assert_eq!(
                count(0, "GemvQ4"),
                2,
                "{rows} rows, fused: {:?}",
                kernels[0]
            );
            assert_eq!(
                count(1, "GemvQ4"),
                3,
                "{rows} rows, unfused: {:?}",
                kernels[1]
            );
            assert_eq!(
                count(0, "LayerNorm"),
                0,
                "{rows} rows, fused: {:?}",
                kernels[0]
            );
            assert_eq!(
                count(1, "LayerNorm"),
                3,
                "{rows} rows, unfused: {:?}",
                kernels[1]
            );
            assert_eq!(count(0, "GemvT"), 3, "{rows} rows, fused: {:?}", kernels[0]);
            assert_eq!(
                count(1, "GemvT"),
                4,
                "{rows} rows, unfused: {:?}",
                kernels[1]
            );
            assert!(
                count(0, "Binary") + count(0, "Unary") + 6
                    <= count(1, "Binary") + count(1, "Unary"),
                "{rows} rows: {kernels:?}"
            );
            let [fused, unfused] = built.each_mut().map(|b| b.execute(&input).unwrap());
            // The two differ in their sums' order and roundings (an fp16 graph's fused norm
            // is not rounded to fp16): within a small fraction of the output's scale.
            for (i, (f, u)) in fused.iter().zip(&unfused).enumerate() {
                let (f, u) = (f.to_f32().unwrap(), u.to_f32().unwrap());
                let scale = u.iter().fold(1e-3f32, |m, v| m.max(v.abs()));
                let tol = if dtype == DType::F16 { 2e-2 } else { 2e-5 } * scale;
                for (e, (a, b)) in f.iter().zip(&u).enumerate() {
                    assert!(
                        (a - b).abs() <= tol,
                        "{dtype:?}, {rows} rows, output {i}, element {e}: fused {a}, unfused {b}"
                    );
                }
            }
        }
    });
}
