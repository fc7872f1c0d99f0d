//! int8 add and conv2d with TOSA-style rescales, against integer references on the host.

#![allow(clippy::unwrap_used)] // helpers outside #[test] functions

use compute_delegate::{Conv2d, GraphBuilder, Pool2d, QAdd, QConv, Rescale};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use vk_core::testing::{self, assert_no_validation_errors};
use vk_core::{DType, HostTensor};

/// `(v * m + 2^(s-1)) >> s`, saturated: written out independently of the crate's own.
fn scale(v: i32, r: Rescale) -> i32 {
    let wide = v as i128 * r.multiplier as i128 + (1i128 << (r.shift - 1));
    (wide >> r.shift).clamp(i32::MIN as i128, i32::MAX as i128) as i32
}

#[test]
fn rescale_from_scale_is_close() {
    for s in [0.5, 0.25, 0.0009765625, 0.3333, 1.7, 1e-6, 3.9e-3] {
        let r = Rescale::from_scale(s).unwrap();
        assert!(
            (1u32 << 30..1u32 << 31).contains(&(r.multiplier as u32)),
            "{s}: {r:?}"
        );
        for v in [1000, -1000, 123_456, -7] {
            let want = (v as f64 * s).round();
            assert!((scale(v, r) as f64 - want).abs() <= 1.0, "{s} {v}: {r:?}");
            assert_eq!(r.apply(v), scale(v, r));
        }
    }
    assert!(Rescale::from_scale(0.0).is_none());
    assert!(Rescale::from_scale(f64::NAN).is_none());
    assert_eq!(
        Rescale {
            multiplier: i32::MAX,
            shift: 1
        }
        .apply(i32::MAX),
        i32::MAX
    );
}

#[test]
fn int8_add_and_conv_match_integer_references() {
    let Some((instance, dev)) = testing::device(
        "int8_add_and_conv_match_integer_references",
        &compute_delegate::requirements(),
    ) else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(10);
    // add
    let shape = [3usize, 7, 5];
    let n = 105;
    let a: Vec<i8> = (0..n).map(|_| rng.r#gen()).collect();
    let b: Vec<i8> = (0..n).map(|_| rng.r#gen()).collect();
    let q = QAdd {
        a_zp: -3,
        b_zp: 7,
        out_zp: 5,
        left_shift: 20,
        a: Rescale::from_scale(0.02 / (2.0 * 0.03) / (1 << 20) as f64 * 1.0).unwrap(),
        b: Rescale::from_scale(0.03 / (2.0 * 0.03) / (1 << 20) as f64).unwrap(),
        out: Rescale::from_scale(2.0 * 0.03 / 0.04).unwrap(),
    };
    let mut g = GraphBuilder::new();
    let ta = g.input("a", DType::I8, &shape).unwrap();
    let tb = g.input("b", DType::I8, &shape).unwrap();
    let c = g.add_q8(ta, tb, &q).unwrap();
    g.output(c).unwrap();
    let mut graph = g.build(&dev).unwrap();
    let out = graph
        .execute(&[
            HostTensor::from_i8(shape.to_vec(), &a).unwrap(),
            HostTensor::from_i8(shape.to_vec(), &b).unwrap(),
        ])
        .unwrap();
    let want: Vec<i8> = (0..n)
        .map(|i| {
            let x = scale((a[i] as i32 - q.a_zp) << q.left_shift, q.a);
            let y = scale((b[i] as i32 - q.b_zp) << q.left_shift, q.b);
            (scale(x + y, q.out) + q.out_zp).clamp(-128, 127) as i8
        })
        .collect();
    assert_eq!(out[0].to_i8().unwrap(), want);
    assert!(want.iter().any(|&v| v == 127 || v == -128) || want.iter().any(|&v| v != 0));

    // conv: per-channel and per-tensor rescales, groups, padding, stride; more padding at the
    // bottom and right than at the top and left; 1x1 on the pointwise kernel (output
    // channels not a multiple of 4, two images); few outputs of deep sums on the split
    // kernel (a 3x3 layer, a classifier, 73728 output words of 16 lanes each, 65664 words of
    // 64 lanes each in two rows of work groups, and a 1x1 layer padded at the bottom and
    // right, whose outputs are not its input's pixels).
    let cases = [
        (
            [1usize, 4, 7, 6],
            [6usize, 4, 3, 3],
            Conv2d {
                padding: [1, 1],
                ..Conv2d::default()
            },
            true,
            None,
            "QConvSplit",
        ),
        (
            [2, 64, 1, 1],
            [10, 64, 1, 1],
            Conv2d::default(),
            false,
            None,
            "QConvSplit",
        ),
        (
            [1, 192, 64, 72],
            [64, 192, 1, 1],
            Conv2d::default(),
            true,
            None,
            "QConvSplit",
        ),
        (
            [1, 1024, 8, 36],
            [912, 1024, 1, 1],
            Conv2d::default(),
            true,
            None,
            "QConvSplit",
        ),
        // A 1x1 layer over 7x7 planes: output words straddle channels.
        (
            [1, 96, 7, 7],
            [40, 96, 1, 1],
            Conv2d::default(),
            true,
            None,
            "QConvSplit",
        ),
        (
            [2, 4, 5, 5],
            [4, 2, 3, 1],
            Conv2d {
                groups: 2,
                stride: [2, 1],
                ..Conv2d::default()
            },
            false,
            None,
            "QConvWin",
        ),
        (
            [1, 3, 8, 6],
            [5, 3, 3, 3],
            Conv2d {
                stride: [2, 2],
                ..Conv2d::default()
            },
            true,
            Some([1, 1]),
            "QConvWin",
        ),
        (
            [1, 40, 4, 4],
            [6, 40, 1, 1],
            Conv2d::default(),
            true,
            Some([1, 1]),
            "QConvSplit",
        ),
        (
            [2, 5, 4, 6],
            [7, 5, 1, 1],
            Conv2d::default(),
            true,
            None,
            "QConvPw",
        ),
        // A pointwise layer of a depth that is not a multiple of 4 on the split kernel.
        (
            [1, 194, 8, 8],
            [16, 194, 1, 1],
            Conv2d::default(),
            true,
            None,
            "QConvSplit",
        ),
        // Depthwise layers whose rows are whole words, on the dw kernel: stride 1 and 2,
        // dilation 2, more padding at the bottom and right; and one whose output rows are
        // not, on the general kernel.
        (
            [1, 8, 12, 16],
            [8, 1, 3, 3],
            Conv2d {
                padding: [1, 1],
                groups: 8,
                ..Conv2d::default()
            },
            true,
            None,
            "QConvDw",
        ),
        (
            [2, 6, 9, 16],
            [6, 1, 3, 3],
            Conv2d {
                padding: [1, 1],
                stride: [2, 2],
                groups: 6,
                ..Conv2d::default()
            },
            false,
            None,
            "QConvDw",
        ),
        (
            [1, 5, 10, 12],
            [5, 1, 3, 3],
            Conv2d {
                padding: [2, 2],
                dilation: [2, 2],
                groups: 5,
                ..Conv2d::default()
            },
            true,
            None,
            "QConvDw",
        ),
        (
            [1, 4, 8, 8],
            [4, 1, 3, 5],
            Conv2d {
                padding: [0, 3],
                stride: [1, 2],
                groups: 4,
                ..Conv2d::default()
            },
            true,
            Some([1, 1]),
            "QConvDw",
        ),
        (
            [1, 4, 7, 7],
            [4, 1, 3, 3],
            Conv2d {
                padding: [1, 1],
                groups: 4,
                ..Conv2d::default()
            },
            true,
            None,
            "QConvWin",
        ),
        // A window of more than 25 positions (of a sum too shallow to split) on the general
        // kernel.
        (
            [1, 2, 9, 12],
            [2, 1, 3, 9],
            Conv2d {
                padding: [1, 4],
                stride: [1, 2],
                groups: 2,
                ..Conv2d::default()
            },
            true,
            None,
            "QConv",
        ),
    ];
    for (xs, ws, p, per_channel, pad_end, kernel) in cases {
        let nx: usize = xs.iter().product();
        let nw: usize = ws.iter().product();
        let x: Vec<i8> = (0..nx).map(|_| rng.r#gen()).collect();
        let w: Vec<i8> = (0..nw).map(|_| rng.r#gen()).collect();
        let cout = ws[0];
        let bias: Vec<i32> = (0..cout).map(|_| rng.gen_range(-5000..5000)).collect();
        let rescales: Vec<Rescale> = (0..if per_channel { cout } else { 1 })
            .map(|c| Rescale::from_scale(0.0007 * (c + 1) as f64).unwrap())
            .collect();
        let q = QConv {
            conv: p,
            x_zp: 3,
            w_zp: -1,
            out_zp: -4,
            pad_end,
        };
        let mut g = GraphBuilder::new();
        let tx = g.input("x", DType::I8, &xs).unwrap();
        let tw = g
            .constant("w", HostTensor::from_i8(ws.to_vec(), &w).unwrap())
            .unwrap();
        let tb = g
            .constant("b", HostTensor::from_i32(vec![cout], &bias).unwrap())
            .unwrap();
        let y = g.conv2d_q8(tx, tw, Some(tb), &rescales, &q).unwrap();
        g.output(y).unwrap();
        let os = g.shape(y).unwrap().to_vec();
        // As a GPU lays them out: a CPU driver runs no split convolution of its own.
        let gpu = compute_delegate::BuildOptions {
            gpu_layouts: true,
            ..Default::default()
        };
        let mut graph = g.build_with(&dev, &gpu).unwrap();
        let kernels: Vec<String> = graph.kernels().iter().map(|k| k.to_string()).collect();
        assert_eq!(kernels, [kernel], "{xs:?} {ws:?}");
        if kernel == "QConvSplit" && dev.capabilities().device_type == vk_core::DeviceType::Cpu {
            let plain = g.build(&dev).unwrap();
            assert!(
                plain.kernels().iter().all(|k| *k != "QConvSplit"),
                "{xs:?} {ws:?}"
            );
        }
        let got = graph
            .execute(&[HostTensor::from_i8(xs.to_vec(), &x).unwrap()])
            .unwrap()[0]
            .to_i8()
            .unwrap();
        let (cin, h, wd) = (xs[1], xs[2], xs[3]);
        let (cin_g, kh, kw) = (ws[1], ws[2], ws[3]);
        let cout_g = cout / p.groups;
        let mut want = Vec::new();
        for img in 0..xs[0] {
            for co in 0..cout {
                let grp = co / cout_g;
                let r = rescales[if per_channel { co } else { 0 }];
                for oy in 0..os[2] {
                    for ox in 0..os[3] {
                        let mut acc = bias[co];
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
                                    let xv = x[((img * cin + grp * cin_g + ci) * h + iy as usize)
                                        * wd
                                        + ix as usize]
                                        as i32;
                                    let wv = w[((co * cin_g + ci) * kh + ky) * kw + kx] as i32;
                                    acc += (xv - q.x_zp) * (wv - q.w_zp);
                                }
                            }
                        }
                        want.push((scale(acc, r) + q.out_zp).clamp(-128, 127) as i8);
                    }
                }
            }
        }
        assert_eq!(got, want, "conv_q8 {xs:?} {ws:?}");
    }
    // Errors name the tensor and numbers.
    let mut g = GraphBuilder::new();
    let tx = g.input("xf", DType::F32, &[1, 1, 3, 3]).unwrap();
    let tw = g.input("wq", DType::I8, &[1, 1, 1, 1]).unwrap();
    let e = g
        .conv2d_q8(
            tx,
            tw,
            None,
            &[Rescale {
                multiplier: 1 << 30,
                shift: 31,
            }],
            &QConv {
                conv: Conv2d::default(),
                x_zp: 0,
                w_zp: 0,
                out_zp: 0,
                pad_end: None,
            },
        )
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("'xf'") && e.contains("f32") && e.contains("i8"),
        "{e}"
    );
    drop(graph);
    assert_no_validation_errors(&instance);
}

/// int8 average pooling as TOSA's AVG_POOL2D: sums of `x - in_zp` over the positions inside
/// the input, divided by their count through TOSA's reciprocal scale, plus `out_zp`.
#[test]
fn int8_average_pooling_matches_tosa() {
    let Some((instance, dev)) = testing::device(
        "int8_average_pooling_matches_tosa",
        &compute_delegate::requirements(),
    ) else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(11);
    let (xs, in_zp, out_zp) = ([2usize, 3, 5, 6], -2, 3);
    let x: Vec<i8> = (0..xs.iter().product()).map(|_| rng.r#gen()).collect();
    let p = Pool2d {
        kernel: [3, 3],
        stride: [2, 2],
        padding: [1, 1],
        ceil_mode: false,
        count_include_pad: false,
    };
    let mut g = GraphBuilder::new();
    let tx = g.input("x", DType::I8, &xs).unwrap();
    let y = g.avg_pool2d_q8(tx, p, in_zp, out_zp).unwrap();
    g.output(y).unwrap();
    let os = g.shape(y).unwrap().to_vec();
    assert_eq!(os, [2, 3, 3, 3]);
    let mut graph = g.build(&dev).unwrap();
    let got = graph
        .execute(&[HostTensor::from_i8(xs.to_vec(), &x).unwrap()])
        .unwrap()[0]
        .to_i8()
        .unwrap();
    // TOSA's reciprocal_scale.
    let reciprocal = |count: u32| {
        let k = 32 - (count - 1).leading_zeros();
        Rescale {
            multiplier: ((((1i64 << 30) + 1) << k) / i64::from(count)) as i32,
            shift: 30 + k,
        }
    };
    let mut want = Vec::new();
    for plane in 0..xs[0] * xs[1] {
        for oy in 0..os[2] {
            for ox in 0..os[3] {
                let (mut acc, mut count) = (0i32, 0u32);
                for ky in 0..3 {
                    for kx in 0..3 {
                        let (iy, ix) = ((oy * 2 + ky) as i64 - 1, (ox * 2 + kx) as i64 - 1);
                        if iy < 0 || ix < 0 || iy >= xs[2] as i64 || ix >= xs[3] as i64 {
                            continue;
                        }
                        let at = (plane * xs[2] + iy as usize) * xs[3] + ix as usize;
                        acc += i32::from(x[at]) - in_zp;
                        count += 1;
                    }
                }
                let v = scale(acc, reciprocal(count)) + out_zp;
                want.push(v.clamp(-128, 127) as i8);
            }
        }
    }
    assert_eq!(got, want);
    drop(graph);

    // A window over the whole plane (global pooling): planes of 49 bytes, seven of them.
    let gs = [1usize, 7, 7, 7];
    let x: Vec<i8> = (0..gs.iter().product()).map(|_| rng.r#gen()).collect();
    let p = Pool2d {
        kernel: [7, 7],
        stride: [7, 7],
        padding: [0, 0],
        ceil_mode: false,
        count_include_pad: false,
    };
    let mut g = GraphBuilder::new();
    let tx = g.input("x", DType::I8, &gs).unwrap();
    let y = g.avg_pool2d_q8(tx, p, in_zp, out_zp).unwrap();
    g.output(y).unwrap();
    assert_eq!(g.shape(y).unwrap(), [1, 7, 1, 1]);
    let mut graph = g.build(&dev).unwrap();
    let got = graph
        .execute(&[HostTensor::from_i8(gs.to_vec(), &x).unwrap()])
        .unwrap()[0]
        .to_i8()
        .unwrap();
    let want: Vec<i8> = x
        .chunks(49)
        .map(|plane| {
            let acc: i32 = plane.iter().map(|&v| i32::from(v) - in_zp).sum();
            (scale(acc, reciprocal(49)) + out_zp).clamp(-128, 127) as i8
        })
        .collect();
    assert_eq!(got, want);
    drop(graph);
    assert_no_validation_errors(&instance);
}

/// TOSA's integer arithmetic on int32 words (`int_ops.comp`), each against a host reference
/// written from the specification: wrapping ADD and SUB and MAXIMUM with broadcasting along
/// either operand, MUL with a rounding shift (negative products included) and without one
/// (wrapping), RESCALE per tensor and per channel with zero points and saturation to int8,
/// and with TOSA's double rounding, an int8 TABLE, and sums and extremes along a middle dim.
#[test]
fn integer_arithmetic_matches_tosa() {
    use compute_delegate::{IntBinary, IntReduce, IntRescale};
    let Some((instance, dev)) = testing::device(
        "integer_arithmetic_matches_tosa",
        &compute_delegate::requirements(),
    ) else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(30);
    let (sa, sb) = ([2usize, 3, 1, 5], [1usize, 3, 4, 5]);
    let out_shape = [2usize, 3, 4, 5];
    let a: Vec<i32> = (0..30).map(|_| rng.gen_range(-100_000..100_000)).collect();
    let b: Vec<i32> = (0..60).map(|_| rng.gen_range(-100_000..100_000)).collect();
    let big: Vec<i32> = (0..60).map(|_| rng.r#gen()).collect();
    let bytes: Vec<i32> = (0..120).map(|_| rng.gen_range(-128..128)).collect();
    let mut table = [0i32; 256];
    for (i, t) in table.iter_mut().enumerate() {
        *t = ((i as i32 * 37) % 256) - 128;
    }
    let scales = [
        Rescale {
            multiplier: 1_518_500_250,
            shift: 38,
        },
        Rescale {
            multiplier: 1 << 30,
            shift: 30,
        },
        Rescale {
            multiplier: 2_000_000_000,
            shift: 40,
        },
        Rescale {
            multiplier: 1_234_567_890,
            shift: 33,
        },
        Rescale {
            multiplier: 1_900_000_000,
            shift: 36,
        },
    ];
    let mut g = GraphBuilder::new();
    let ai = g.input("a", DType::I32, &sa).unwrap();
    let bi = g.input("b", DType::I32, &sb).unwrap();
    let big_i = g.input("big", DType::I32, &sb).unwrap();
    let xi = g.input("x", DType::I32, &out_shape).unwrap();
    let outs = [
        g.int_binary(IntBinary::Add, ai, bi).unwrap(),
        g.int_binary(IntBinary::Sub, bi, ai).unwrap(),
        g.int_binary(IntBinary::Maximum, ai, bi).unwrap(),
        g.int_binary(IntBinary::Mul { shift: 7 }, ai, bi).unwrap(),
        g.int_binary(IntBinary::Mul { shift: 0 }, big_i, big_i)
            .unwrap(),
        g.int_rescale(
            bi,
            &IntRescale {
                scales: scales.to_vec(),
                in_zp: 0,
                out_zp: -3,
                range: (-128, 127),
                double_round: false,
            },
        )
        .unwrap(),
        g.int_rescale(
            xi,
            &IntRescale {
                scales: vec![scales[0]],
                in_zp: -7,
                out_zp: 0,
                range: (i32::MIN, i32::MAX),
                double_round: false,
            },
        )
        .unwrap(),
        g.int_table(xi, &table).unwrap(),
        g.int_reduce(xi, 1, IntReduce::Sum).unwrap(),
        g.int_reduce(xi, -2, IntReduce::Max).unwrap(),
        g.int_reduce(bi, 2, IntReduce::Min).unwrap(),
        g.int_rescale(
            bi,
            &IntRescale {
                scales: scales.to_vec(),
                in_zp: 5,
                out_zp: 2,
                range: (i32::MIN, i32::MAX),
                double_round: true,
            },
        )
        .unwrap(),
    ];
    for t in outs {
        g.output(t).unwrap();
    }
    let mut graph = g.build(&dev).unwrap();
    let inputs = [
        HostTensor::from_i32(sa.to_vec(), &a).unwrap(),
        HostTensor::from_i32(sb.to_vec(), &b).unwrap(),
        HostTensor::from_i32(sb.to_vec(), &big).unwrap(),
        HostTensor::from_i32(out_shape.to_vec(), &bytes).unwrap(),
    ];
    let got: Vec<Vec<i32>> = graph
        .execute(&inputs)
        .unwrap()
        .iter()
        .map(|t| t.to_i32().unwrap())
        .collect();
    // Broadcast element (i, j, k, l) of the [2, 3, 4, 5] output.
    let at_a = |i: usize, j: usize, l: usize| a[(i * 3 + j) * 5 + l];
    let at_b = |j: usize, k: usize, l: usize| b[(j * 4 + k) * 5 + l];
    let mut want: Vec<Vec<i32>> = vec![Vec::new(); 5];
    for i in 0..2 {
        for j in 0..3 {
            for k in 0..4 {
                for l in 0..5 {
                    let (x, w) = (at_a(i, j, l), at_b(j, k, l));
                    want[0].push(x.wrapping_add(w));
                    want[1].push(w.wrapping_sub(x));
                    want[2].push(x.max(w));
                    let p = (i64::from(x) * i64::from(w) + (1 << 6)) >> 7;
                    want[3].push(p as i32);
                }
            }
        }
    }
    want[4] = big.iter().map(|&v| v.wrapping_mul(v)).collect();
    want.push(
        b.iter()
            .enumerate()
            .map(|(e, &v)| (scale(v, scales[e % 5]) - 3).clamp(-128, 127))
            .collect(),
    );
    want.push(bytes.iter().map(|&v| scale(v + 7, scales[0])).collect());
    want.push(bytes.iter().map(|&v| table[(v + 128) as usize]).collect());
    let along = |x: &[i32], dims: [usize; 3], f: fn(i32, i32) -> i32| -> Vec<i32> {
        let [outer, len, inner] = dims;
        (0..outer * inner)
            .map(|e| {
                let (o, i) = (e / inner, e % inner);
                (1..len).fold(x[o * len * inner + i], |acc, k| {
                    f(acc, x[(o * len + k) * inner + i])
                })
            })
            .collect()
    };
    want.push(along(&bytes, [2, 3, 20], i32::wrapping_add));
    want.push(along(&bytes, [6, 4, 5], i32::max));
    want.push(along(&b, [3, 4, 5], i32::min));
    // TOSA's DOUBLE_ROUND: for shifts past 31, 2^30 more rounding at 0 and above, less below.
    want.push(
        b.iter()
            .enumerate()
            .map(|(e, &v)| {
                let (r, v) = (scales[e % 5], i128::from(v - 5));
                let extra = match (r.shift > 31, v >= 0) {
                    (false, _) => 0,
                    (true, true) => 1i128 << 30,
                    (true, false) => -(1i128 << 30),
                };
                let wide = v * i128::from(r.multiplier) + (1i128 << (r.shift - 1)) + extra;
                (wide >> r.shift) as i32 + 2
            })
            .collect(),
    );
    let single: Vec<i32> = b
        .iter()
        .enumerate()
        .map(|(e, &v)| scale(v - 5, scales[e % 5]) + 2)
        .collect();
    assert_ne!(
        want.last(),
        Some(&single),
        "double rounding changes nothing here"
    );
    assert_eq!(got.len(), want.len());
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "output {k}");
    }
    assert_no_validation_errors(&instance);
}

/// The rest of TOSA's integer operators on `int_ops.comp`, against host references:
/// comparisons as 1 or 0 and SELECT with all three operands broadcast, ABS, NEGATE with zero
/// points saturating to int8, CLAMP, and MATMUL with zero points.
#[test]
fn integer_comparisons_selects_and_products_match_tosa() {
    use compute_delegate::{IntBinary, IntUnary};
    let Some((instance, dev)) = testing::device(
        "integer_comparisons_selects_and_products_match_tosa",
        &compute_delegate::requirements(),
    ) else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(31);
    let mut ints = |n: usize, lo: i32, hi: i32| -> Vec<i32> {
        (0..n).map(|_| rng.gen_range(lo..hi)).collect()
    };
    let (a, b) = (ints(12, -5, 5), ints(8, -5, 5));
    let c = ints(6, -1000, 1000);
    let x = ints(24, -128, 128);
    let (ma, mb) = (ints(2 * 3 * 7, -128, 128), ints(2 * 7 * 4, -128, 128));
    // a [1, 3, 4], b [2, 1, 4], c [2, 3, 1]: each broadcast to [2, 3, 4].
    let mut g = GraphBuilder::new();
    let ai = g.input("a", DType::I32, &[1, 3, 4]).unwrap();
    let bi = g.input("b", DType::I32, &[2, 1, 4]).unwrap();
    let ci = g.input("c", DType::I32, &[2, 3, 1]).unwrap();
    let xi = g.input("x", DType::I32, &[24]).unwrap();
    let mai = g.input("ma", DType::I32, &[2, 3, 7]).unwrap();
    let mbi = g.input("mb", DType::I32, &[2, 7, 4]).unwrap();
    let gt = g.int_binary(IntBinary::Greater, ai, bi).unwrap();
    let outs = [
        g.int_binary(IntBinary::Equal, ai, bi).unwrap(),
        gt,
        g.int_binary(IntBinary::GreaterEqual, ai, bi).unwrap(),
        g.int_select(gt, ci, bi).unwrap(),
        g.int_unary(IntUnary::Abs, xi).unwrap(),
        g.int_unary(
            IntUnary::Negate {
                in_zp: -100,
                out_zp: 20,
                range: (-128, 127),
            },
            xi,
        )
        .unwrap(),
        g.int_unary(IntUnary::Clamp { range: (-50, 60) }, xi)
            .unwrap(),
        g.int_matmul(mai, mbi, (3, -2)).unwrap(),
    ];
    for t in outs {
        g.output(t).unwrap();
    }
    let mut graph = g.build(&dev).unwrap();
    let inputs = [
        HostTensor::from_i32(vec![1, 3, 4], &a).unwrap(),
        HostTensor::from_i32(vec![2, 1, 4], &b).unwrap(),
        HostTensor::from_i32(vec![2, 3, 1], &c).unwrap(),
        HostTensor::from_i32(vec![24], &x).unwrap(),
        HostTensor::from_i32(vec![2, 3, 7], &ma).unwrap(),
        HostTensor::from_i32(vec![2, 7, 4], &mb).unwrap(),
    ];
    let got: Vec<Vec<i32>> = graph
        .execute(&inputs)
        .unwrap()
        .iter()
        .map(|t| t.to_i32().unwrap())
        .collect();
    let mut want: Vec<Vec<i32>> = vec![Vec::new(); 4];
    for i in 0..2 {
        for j in 0..3 {
            for k in 0..4 {
                let (p, q, r) = (a[j * 4 + k], b[i * 4 + k], c[i * 3 + j]);
                want[0].push(i32::from(p == q));
                want[1].push(i32::from(p > q));
                want[2].push(i32::from(p >= q));
                want[3].push(if p > q { r } else { q });
            }
        }
    }
    want.push(x.iter().map(|v| v.abs()).collect());
    want.push(
        x.iter()
            .map(|v| (20 - (v + 100)).clamp(-128, 127))
            .collect(),
    );
    want.push(x.iter().map(|v| (*v).clamp(-50, 60)).collect());
    let mut mm = Vec::new();
    for n in 0..2 {
        for h in 0..3 {
            for w in 0..4 {
                mm.push(
                    (0..7)
                        .map(|k| (ma[(n * 3 + h) * 7 + k] - 3) * (mb[(n * 7 + k) * 4 + w] + 2))
                        .sum(),
                );
            }
        }
    }
    want.push(mm);
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "output {k}");
    }
    assert_no_validation_errors(&instance);
}

/// An int16 MATMUL of two activations with its int48 sums rescaled in the same op
/// (`int_matmul_rescaled`), against a 128-bit reference: int16's extremes over a depth of 300,
/// so that the sums pass 32 bits, 16-bit multipliers per tensor and per column, an output
/// zero point and int16's range.
#[test]
fn int16_products_rescale_their_int48_sums() {
    use compute_delegate::IntRescale;
    let Some((instance, dev)) = testing::device(
        "int16_products_rescale_their_int48_sums",
        &compute_delegate::requirements(),
    ) else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(33);
    let (n, h, c, w) = (2usize, 3usize, 300usize, 5usize);
    let mut extreme = |len: usize| -> Vec<i32> {
        (0..len)
            .map(|_| match rng.gen_range(0..4) {
                0 => -32768,
                1 => 32767,
                _ => rng.gen_range(-32768..32768),
            })
            .collect()
    };
    let (a, b) = (extreme(n * h * c), extreme(n * c * w));
    let per_column: Vec<Rescale> = (0..w)
        .map(|j| Rescale {
            multiplier: 20000 + 977 * j as i32,
            shift: 30 + j as u32,
        })
        .collect();
    let cases = [
        (
            vec![Rescale {
                multiplier: 16384,
                shift: 33,
            }],
            7,
        ),
        (per_column, -3),
    ];
    for (scales, out_zp) in cases {
        let mut g = GraphBuilder::new();
        let ai = g.input("a", DType::I32, &[n, h, c]).unwrap();
        let bi = g.input("b", DType::I32, &[n, c, w]).unwrap();
        let r = IntRescale {
            scales: scales.clone(),
            in_zp: 0,
            out_zp,
            range: (-32768, 32767),
            double_round: false,
        };
        let y = g.int_matmul_rescaled(ai, bi, (0, 0), &r).unwrap();
        g.output(y).unwrap();
        let mut graph = g.build(&dev).unwrap();
        let got = graph
            .execute(&[
                HostTensor::from_i32(vec![n, h, c], &a).unwrap(),
                HostTensor::from_i32(vec![n, c, w], &b).unwrap(),
            ])
            .unwrap()[0]
            .to_i32()
            .unwrap();
        let mut want = Vec::new();
        let mut widest = 0i128;
        for z in 0..n {
            for i in 0..h {
                for j in 0..w {
                    let sum: i128 = (0..c)
                        .map(|k| {
                            i128::from(a[(z * h + i) * c + k]) * i128::from(b[(z * c + k) * w + j])
                        })
                        .sum();
                    widest = widest.max(sum.abs());
                    let s = scales[if scales.len() == 1 { 0 } else { j }];
                    let v = (sum * i128::from(s.multiplier) + (1i128 << (s.shift - 1))) >> s.shift;
                    want.push((v as i32 + out_zp).clamp(-32768, 32767));
                }
            }
        }
        assert!(
            widest > i128::from(i32::MAX),
            "the sums stay within 32 bits"
        );
        assert_eq!(got, want, "{} scales", scales.len());
    }
    // Zero points on int48 inputs, and scales that do not fit, are named.
    let mut g = GraphBuilder::new();
    let ai = g.input("a", DType::I32, &[1, 2, 3]).unwrap();
    let bi = g.input("b", DType::I32, &[1, 3, 4]).unwrap();
    let r = |in_zp: i32, scales: usize| IntRescale {
        scales: vec![
            Rescale {
                multiplier: 1,
                shift: 1,
            };
            scales
        ],
        in_zp,
        out_zp: 0,
        range: (-128, 127),
        double_round: false,
    };
    for (bad, what) in [(r(1, 1), "zero point"), (r(0, 3), "3 scales for 4 columns")] {
        let e = g.int_matmul_rescaled(ai, bi, (0, 0), &bad).unwrap_err();
        assert!(e.to_string().contains(what), "{e}");
    }
    assert_no_validation_errors(&instance);
}

/// Integer convolutions with their accumulators rescaled in one op (TOSA's int48 sums), and
/// int16 TABLEs, against host references in 128-bit arithmetic: a CONV2D of int16 values
/// with uneven padding, strides and a bias past 32 bits, a DEPTHWISE_CONV2D with a dilation
/// and weight and input zero points, 16-bit multipliers; the 513-entry interpolating TABLE
/// over int16's whole range; and int16 values through i16 tensors and back.
#[test]
fn integer_convolutions_and_int16_tables_match_tosa() {
    use compute_delegate::IntConv;
    let Some((instance, dev)) = testing::device(
        "integer_convolutions_and_int16_tables_match_tosa",
        &compute_delegate::requirements(),
    ) else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(32);
    let (ih, iw, ic) = (5usize, 6usize, 3usize);
    let x: Vec<i32> = (0..ih * iw * ic)
        .map(|_| rng.gen_range(-32768..32768))
        .collect();
    let wc: Vec<i32> = (0..4 * 3 * 3 * ic)
        .map(|_| rng.gen_range(-128..128))
        .collect();
    let wd: Vec<i32> = (0..3 * 3 * ic * 2)
        .map(|_| rng.gen_range(-128..128))
        .collect();
    let mut table = [0i32; 513];
    for t in table.iter_mut() {
        *t = rng.gen_range(-16000..16000);
    }
    let mut probe: Vec<i32> = (0..200).map(|_| rng.gen_range(-32768..32768)).collect();
    probe.extend([-32768, 32767, 0, -1, 127, 128]);
    let conv = IntConv {
        padding: [1, 0, 1, 2],
        stride: [2, 1],
        dilation: [1, 1],
        depth_multiplier: None,
        x_zp: 0,
        w_zp: 0,
        bias: vec![1 << 40, -(3 << 38), 12345, -7],
        scales: vec![Rescale {
            multiplier: 23_000,
            shift: 40,
        }],
        out_zp: 3,
        range: (-32768, 32767),
    };
    let depthwise = IntConv {
        padding: [2, 2, 0, 0],
        stride: [1, 1],
        dilation: [2, 1],
        depth_multiplier: Some(2),
        x_zp: -5,
        w_zp: 2,
        bias: vec![1000],
        scales: (0..6)
            .map(|k| Rescale {
                multiplier: 20_000 + 1000 * k,
                shift: 30 + k as u32,
            })
            .collect(),
        out_zp: 0,
        range: (-128, 127),
    };
    let mut g = GraphBuilder::new();
    let xi = g.input("x", DType::I32, &[1, ih, iw, ic]).unwrap();
    let wci = g.input("wc", DType::I32, &[4, 3, 3, ic]).unwrap();
    let wdi = g.input("wd", DType::I32, &[3, 3, ic, 2]).unwrap();
    let pi = g.input("probe", DType::I32, &[probe.len()]).unwrap();
    let narrow = g.cast(pi, DType::I16).unwrap();
    let outs = [
        g.int_conv_rescaled(xi, wci, &conv).unwrap(),
        g.int_conv_rescaled(xi, wdi, &depthwise).unwrap(),
        g.int_table16(pi, &table).unwrap(),
        g.cast(narrow, DType::I32).unwrap(),
    ];
    for t in outs {
        g.output(t).unwrap();
    }
    let mut graph = g.build(&dev).unwrap();
    let inputs = [
        HostTensor::from_i32(vec![1, ih, iw, ic], &x).unwrap(),
        HostTensor::from_i32(vec![4, 3, 3, ic], &wc).unwrap(),
        HostTensor::from_i32(vec![3, 3, ic, 2], &wd).unwrap(),
        HostTensor::from_i32(vec![probe.len()], &probe).unwrap(),
    ];
    let got: Vec<Vec<i32>> = graph
        .execute(&inputs)
        .unwrap()
        .iter()
        .map(|t| t.to_i32().unwrap())
        .collect();
    // TOSA: (v * m + 2^(s-1)) >> s in 64 bits, then the zero point and the range.
    let scale64 = |v: i128, r: Rescale, zp: i32, (lo, hi): (i32, i32)| -> i32 {
        let s = ((v * i128::from(r.multiplier) + (1i128 << (r.shift - 1))) >> r.shift) as i32;
        (s + zp).clamp(lo, hi)
    };
    let reference = |p: &IntConv, w: &[i32], oc: usize, kh: usize, kw: usize| -> Vec<i32> {
        let [pt, pb, pl, pr] = p.padding;
        let oh = (ih + pt + pb - 1 - (kh - 1) * p.dilation[0]) / p.stride[0] + 1;
        let ow = (iw + pl + pr - 1 - (kw - 1) * p.dilation[1]) / p.stride[1] + 1;
        let mut out = Vec::new();
        for oy in 0..oh {
            for ox in 0..ow {
                for o in 0..oc {
                    let mut acc = i128::from(p.bias[if p.bias.len() == 1 { 0 } else { o }]);
                    for ky in 0..kh {
                        for kx in 0..kw {
                            let iy = (oy * p.stride[0] + ky * p.dilation[0]) as isize - pt as isize;
                            let ix = (ox * p.stride[1] + kx * p.dilation[1]) as isize - pl as isize;
                            if iy < 0 || ix < 0 || iy >= ih as isize || ix >= iw as isize {
                                continue;
                            }
                            let at = (iy as usize * iw + ix as usize) * ic;
                            let taps: Vec<(usize, usize)> = match p.depth_multiplier {
                                Some(m) => vec![(o / m, ((ky * kw + kx) * ic + o / m) * m + o % m)],
                                None => (0..ic)
                                    .map(|c| (c, ((o * kh + ky) * kw + kx) * ic + c))
                                    .collect(),
                            };
                            for (c, wat) in taps {
                                acc += i128::from(x[at + c] - p.x_zp) * i128::from(w[wat] - p.w_zp);
                            }
                        }
                    }
                    let r = p.scales[if p.scales.len() == 1 { 0 } else { o }];
                    out.push(scale64(acc, r, p.out_zp, p.range));
                }
            }
        }
        out
    };
    let want = [
        reference(&conv, &wc, 4, 3, 3),
        reference(&depthwise, &wd, 6, 3, 3),
        probe
            .iter()
            .map(|&v| {
                let i = (v + 32768) as usize;
                let (base, next) = (table[i >> 7], table[((i >> 7) + 1).min(512)]);
                (base << 7) + (next - base) * (i & 127) as i32
            })
            .collect(),
        probe.iter().map(|&v| v.clamp(-32768, 32767)).collect(),
    ];
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "output {k}");
    }
    assert_no_validation_errors(&instance);
}

/// TOSA's bitwise and shift operators, INTDIV and CLZ on `int_ops.comp`, against host
/// references: and, or, xor, not; left shifts; logical right shifts of int8, int16 and int32
/// values (the type's bits unsigned, sign-extended back); arithmetic right shifts with and
/// without rounding; division truncated toward zero; leading zeros (32 for 0); narrowing to
/// 8 and 16 bits, which wraps.
#[test]
fn integer_bitwise_operators_match_tosa() {
    use compute_delegate::{IntBinary, IntUnary};
    let Some((instance, dev)) = testing::device(
        "integer_bitwise_operators_match_tosa",
        &compute_delegate::requirements(),
    ) else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(33);
    let n = 64usize;
    let a: Vec<i32> = (0..n).map(|_| rng.gen_range(-128..128)).collect();
    let wide: Vec<i32> = (0..n).map(|_| rng.r#gen()).collect();
    let shifts: Vec<i32> = (0..n).map(|_| rng.gen_range(0..8)).collect();
    let mut divisors: Vec<i32> = (0..n).map(|_| rng.gen_range(1..50)).collect();
    divisors[..n / 2].iter_mut().for_each(|d| *d = -*d);
    let mut g = GraphBuilder::new();
    let ai = g.input("a", DType::I32, &[n]).unwrap();
    let wi = g.input("wide", DType::I32, &[n]).unwrap();
    let si = g.input("shifts", DType::I32, &[n]).unwrap();
    let di = g.input("divisors", DType::I32, &[n]).unwrap();
    let outs = [
        g.int_binary(IntBinary::BitAnd, ai, wi).unwrap(),
        g.int_binary(IntBinary::BitOr, ai, wi).unwrap(),
        g.int_binary(IntBinary::BitXor, ai, wi).unwrap(),
        g.int_unary(IntUnary::BitNot, wi).unwrap(),
        g.int_binary(IntBinary::ShiftLeft, ai, si).unwrap(),
        g.int_binary(IntBinary::ShiftRightLogical { bits: 8 }, ai, si)
            .unwrap(),
        g.int_binary(IntBinary::ShiftRightLogical { bits: 16 }, ai, si)
            .unwrap(),
        g.int_binary(IntBinary::ShiftRightLogical { bits: 32 }, wi, si)
            .unwrap(),
        g.int_binary(IntBinary::ShiftRightArithmetic { round: false }, wi, si)
            .unwrap(),
        g.int_binary(IntBinary::ShiftRightArithmetic { round: true }, wi, si)
            .unwrap(),
        g.int_binary(IntBinary::Div, wi, di).unwrap(),
        g.int_unary(IntUnary::LeadingZeros, ai).unwrap(),
        g.int_unary(IntUnary::Wrap { bits: 8 }, wi).unwrap(),
        g.int_unary(IntUnary::Wrap { bits: 16 }, wi).unwrap(),
    ];
    for t in outs {
        g.output(t).unwrap();
    }
    let mut graph = g.build(&dev).unwrap();
    let inputs = [&a, &wide, &shifts, &divisors].map(|v| HostTensor::from_i32(vec![n], v).unwrap());
    let got: Vec<Vec<i32>> = graph
        .execute(&inputs)
        .unwrap()
        .iter()
        .map(|t| t.to_i32().unwrap())
        .collect();
    let each = |f: &dyn Fn(usize) -> i32| -> Vec<i32> { (0..n).map(f).collect() };
    let logical = |v: i32, s: i32, bits: u32| -> i32 {
        let mask = if bits == 32 {
            u32::MAX
        } else {
            (1u32 << bits) - 1
        };
        let r = ((v as u32) & mask) >> s;
        ((r << (32 - bits)) as i32) >> (32 - bits)
    };
    let want = [
        each(&|i| a[i] & wide[i]),
        each(&|i| a[i] | wide[i]),
        each(&|i| a[i] ^ wide[i]),
        each(&|i| !wide[i]),
        each(&|i| a[i] << shifts[i]),
        each(&|i| logical(a[i], shifts[i], 8)),
        each(&|i| logical(a[i], shifts[i], 16)),
        each(&|i| logical(wide[i], shifts[i], 32)),
        each(&|i| wide[i] >> shifts[i]),
        each(&|i| {
            let s = shifts[i];
            (wide[i] >> s) + if s > 0 { (wide[i] >> (s - 1)) & 1 } else { 0 }
        }),
        each(&|i| wide[i] / divisors[i]),
        each(&|i| a[i].leading_zeros() as i32),
        each(&|i| i32::from(wide[i] as i8)),
        each(&|i| i32::from(wide[i] as i16)),
    ];
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "output {k}");
    }
    assert_no_validation_errors(&instance);
}
