//! Ops called through the op registry by ExecuTorch name, with ExecuTorch's argument order,
//! against CPU references, in fp32 and fp16, on the selected device with validation on.

#![allow(clippy::unwrap_used)] // helpers outside #[test] functions

use compute_delegate::GraphBuilder;
use compute_delegate::ops::{self, Arg};
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

/// fp32 within `1e-5` relative; fp16 within `2e-2` of the reference's largest magnitude.
#[track_caller]
fn assert_close(got: &[f32], want: &[f32], dtype: DType, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let tol = match dtype {
            DType::F16 => 2e-2 * scale.max(1e-3),
            _ => 1e-5 * (1.0 + w.abs()),
        };
        assert!(
            (g - w).abs() <= tol,
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
