//! Masks (scalar comparisons, logical not, `where`, `any`), gathers (`embedding`), index
//! selection (`select`, `split`), `group_norm`, `full` and the i64 casts, each against a CPU
//! reference on the selected device with validation on.

#![allow(clippy::unwrap_used)] // helpers outside #[test] functions

use compute_delegate::{BuildOptions, Compare, GraphBuilder};
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

fn unravel(mut i: usize, s: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; s.len()];
    for d in (0..s.len()).rev() {
        idx[d] = i % s[d];
        i /= s[d];
    }
    idx
}

/// The flat index of `idx` (of the output's rank) in a tensor of shape `s`, broadcasting.
fn bcast_index(idx: &[usize], s: &[usize]) -> usize {
    let off = idx.len() - s.len();
    s.iter().enumerate().fold(0, |acc, (i, &d)| {
        acc * d + if d == 1 { 0 } else { idx[i + off] }
    })
}

#[track_caller]
fn assert_close(got: &[f32], want: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = g == w || (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(ok, "{what}: element {i}: got {g}, want {w}");
    }
}

/// Builds and runs `b` (twice, and once more through staging buffers), returning the outputs.
fn run(dev: &Device, b: &GraphBuilder, ins: &[HostTensor]) -> Vec<HostTensor> {
    let mut g = b.build(dev).unwrap();
    let outs = g.execute(ins).unwrap();
    assert_eq!(g.execute(ins).unwrap(), outs, "second run");
    let opts = BuildOptions {
        force_staging: true,
        ..BuildOptions::default()
    };
    let mut staged = b.build_with(dev, &opts).unwrap();
    assert_eq!(staged.execute(ins).unwrap(), outs, "staging path");
    outs
}

fn f32s(t: &HostTensor) -> Vec<f32> {
    t.to_f32().unwrap()
}

#[test]
fn comparisons_logical_not_and_where_broadcast() {
    let Some((instance, dev)) = device("comparisons_logical_not_and_where_broadcast") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(11);
    let (sx, sc, sb) = ([1, 4, 7, 9], [1, 4, 7, 1], [9]);
    let n: usize = sx.iter().product();
    let mut x = rand_vec(&mut rng, n);
    for v in x.iter_mut().step_by(5) {
        *v = f32::NEG_INFINITY;
    }
    x[1] = 0.5;
    let c: Vec<f32> = (0..28).map(|i| [0.0, 1.0, 3.0][i % 3]).collect();
    let bv = rand_vec(&mut rng, 9);
    let mut b = GraphBuilder::new();
    let xt = b.input("x", DType::F32, &sx).unwrap();
    let ct = b.input("c", DType::F32, &sc).unwrap();
    let bt = b.input("b", DType::F32, &sb).unwrap();
    let cmps = [
        (Compare::Eq, f32::NEG_INFINITY),
        (Compare::Eq, 0.5),
        (Compare::Ne, 0.5),
        (Compare::Gt, 0.0),
        (Compare::Ge, 0.5),
        (Compare::Lt, 0.0),
        (Compare::Le, 0.5),
    ];
    for (cmp, s) in cmps {
        let m = b.compare_scalar(xt, cmp, s).unwrap();
        b.output(m).unwrap();
    }
    let not = b.logical_not(ct).unwrap();
    b.output(not).unwrap();
    let w = b.where_(ct, xt, bt).unwrap();
    b.output(w).unwrap();
    let ins = [
        HostTensor::from_f32(sx.to_vec(), &x).unwrap(),
        HostTensor::from_f32(sc.to_vec(), &c).unwrap(),
        HostTensor::from_f32(sb.to_vec(), &bv).unwrap(),
    ];
    let outs = run(&dev, &b, &ins);
    for (k, (cmp, s)) in cmps.iter().enumerate() {
        let want: Vec<f32> = x
            .iter()
            .map(|&v| {
                let r = match cmp {
                    Compare::Eq => v == *s,
                    Compare::Ne => v != *s,
                    Compare::Gt => v > *s,
                    Compare::Ge => v >= *s,
                    Compare::Lt => v < *s,
                    Compare::Le => v <= *s,
                };
                f32::from(u8::from(r))
            })
            .collect();
        assert_eq!(f32s(&outs[k]), want, "{cmp:?} {s}");
    }
    let want: Vec<f32> = c.iter().map(|&v| f32::from(u8::from(v == 0.0))).collect();
    assert_eq!(f32s(&outs[7]), want, "logical_not");
    let want: Vec<f32> = (0..n)
        .map(|i| {
            let idx = unravel(i, &sx);
            if c[bcast_index(&idx, &sc)] != 0.0 {
                x[i]
            } else {
                bv[bcast_index(&idx, &sb)]
            }
        })
        .collect();
    assert_eq!(outs[8].shape(), sx);
    assert_eq!(f32s(&outs[8]), want, "where");
    drop(dev);
    assert_no_validation_errors(&instance);
}

#[test]
fn any_over_dims() {
    let Some((instance, dev)) = device("any_over_dims") else {
        return;
    };
    let s = [2, 3, 5];
    let x: Vec<f32> = (0..30)
        .map(|i| if i % 7 == 0 { 2.0 } else { 0.0 })
        .collect();
    let mut b = GraphBuilder::new();
    let xt = b.input("x", DType::F32, &s).unwrap();
    let a = b.any(xt, &[-1], true).unwrap();
    b.output(a).unwrap();
    let a = b.any(xt, &[1], false).unwrap();
    b.output(a).unwrap();
    let outs = run(&dev, &b, &[HostTensor::from_f32(s.to_vec(), &x).unwrap()]);
    let want: Vec<f32> = (0..6)
        .map(|r| f32::from(u8::from((0..5).any(|k| x[r * 5 + k] != 0.0))))
        .collect();
    assert_eq!(outs[0].shape(), [2, 3, 1]);
    assert_eq!(f32s(&outs[0]), want, "any(-1, keepdim)");
    let want: Vec<f32> = (0..10)
        .map(|r| {
            let (i, k) = (r / 5, r % 5);
            f32::from(u8::from((0..3).any(|j| x[i * 15 + j * 5 + k] != 0.0)))
        })
        .collect();
    assert_eq!(outs[1].shape(), [2, 5]);
    assert_eq!(f32s(&outs[1]), want, "any(1)");
    drop(dev);
    assert_no_validation_errors(&instance);
}

#[test]
fn embedding_gathers_rows_and_i64_narrows() {
    let Some((instance, dev)) = device("embedding_gathers_rows_and_i64_narrows") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(12);
    let (v, d) = (11, 6);
    let table = rand_vec(&mut rng, v * d);
    let ids: Vec<i64> = vec![3, 0, 10, 7, 7, 11, -1, 2, 5, 1];
    let bytes: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
    let mut b = GraphBuilder::new();
    let it = b.input("ids", DType::I64, &[2, 5]).unwrap();
    let tt = b
        .constant("table", HostTensor::from_f32(vec![v, d], &table).unwrap())
        .unwrap();
    let i32s = b.cast(it, DType::I32).unwrap();
    let e = b.embedding(tt, i32s).unwrap();
    b.output(e).unwrap();
    b.output(i32s).unwrap();
    let wide = b.cast(i32s, DType::I64).unwrap();
    let back = b.cast(wide, DType::I32).unwrap();
    b.output(back).unwrap();
    // Odd lengths: a quad of i64 spans 32 bytes, more than the 16-byte padding.
    let one = b.input("one", DType::I64, &[1]).unwrap();
    let one = b.cast(one, DType::F32).unwrap();
    b.output(one).unwrap();
    let ins = [
        HostTensor::new(DType::I64, vec![2, 5], bytes).unwrap(),
        HostTensor::new(DType::I64, vec![1], (-3i64).to_le_bytes().to_vec()).unwrap(),
    ];
    let outs = run(&dev, &b, &ins);
    let table = &table;
    let want: Vec<f32> = ids
        .iter()
        .flat_map(|&i| {
            (0..d).map(move |j| {
                if (0..v as i64).contains(&i) {
                    table[i as usize * d + j]
                } else {
                    0.0
                }
            })
        })
        .collect();
    assert_eq!(outs[0].shape(), [2, 5, d]);
    assert_eq!(f32s(&outs[0]), want, "embedding");
    let narrow: Vec<i32> = ids.iter().map(|&i| i as i32).collect();
    assert_eq!(outs[1].to_i32().unwrap(), narrow, "i64 -> i32");
    assert_eq!(outs[2].to_i32().unwrap(), narrow, "i32 -> i64 -> i32");
    assert_eq!(f32s(&outs[3]), [-3.0], "i64 -> f32");
    drop(dev);
    assert_no_validation_errors(&instance);
}

#[test]
fn select_split_full_and_group_norm() {
    let Some((instance, dev)) = device("select_split_full_and_group_norm") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(13);
    let s = [2, 6, 3, 5];
    let n: usize = s.iter().product();
    let x = rand_vec(&mut rng, n);
    let w = rand_vec(&mut rng, 6);
    let bias = rand_vec(&mut rng, 6);
    let mut b = GraphBuilder::new();
    let xt = b.input("x", DType::F32, &s).unwrap();
    let sel = b.select(xt, 1, -2).unwrap();
    b.output(sel).unwrap();
    let parts = b.split(xt, &[2, 1, 3], 1).unwrap();
    for p in &parts {
        b.output(*p).unwrap();
    }
    let f = b.full("fill", &[3, 2], f32::NEG_INFINITY).unwrap();
    b.output(f).unwrap();
    let wt = b.constant_f32("w", &[6], &w).unwrap();
    let bt = b.constant_f32("b", &[6], &bias).unwrap();
    let gn = b.group_norm(xt, 3, Some(wt), Some(bt), 1e-5).unwrap();
    b.output(gn).unwrap();
    let outs = run(&dev, &b, &[HostTensor::from_f32(s.to_vec(), &x).unwrap()]);
    let at = |i: usize, c: usize, h: usize, k: usize| x[((i * 6 + c) * 3 + h) * 5 + k];
    let want: Vec<f32> = (0..2 * 15)
        .map(|r| at(r / 15, 4, r % 15 / 5, r % 5))
        .collect();
    assert_eq!(outs[0].shape(), [2, 3, 5]);
    assert_eq!(f32s(&outs[0]), want, "select(1, -2)");
    let mut start = 0;
    for (k, len) in [2, 1, 3].into_iter().enumerate() {
        let want: Vec<f32> = (0..2 * len * 15)
            .map(|r| {
                let (i, c) = (r / (len * 15), r / 15 % len);
                at(i, start + c, r % 15 / 5, r % 5)
            })
            .collect();
        assert_eq!(outs[1 + k].shape(), [2, len, 3, 5]);
        assert_eq!(f32s(&outs[1 + k]), want, "split part {k}");
        start += len;
    }
    assert_eq!(f32s(&outs[4]), [f32::NEG_INFINITY; 6], "full");
    let mut want = vec![0.0f32; n];
    for i in 0..2 {
        for g in 0..3 {
            let idx: Vec<usize> = (0..30).map(|e| ((i * 6 + g * 2) * 15) + e).collect();
            let mean = idx.iter().map(|&e| f64::from(x[e])).sum::<f64>() / 30.0;
            let var = idx
                .iter()
                .map(|&e| (f64::from(x[e]) - mean).powi(2))
                .sum::<f64>()
                / 30.0;
            for &e in &idx {
                let c = e / 15 % 6;
                let y = (f64::from(x[e]) - mean) / (var + 1e-5).sqrt();
                want[e] = (y * f64::from(w[c]) + f64::from(bias[c])) as f32;
            }
        }
    }
    assert_close(&f32s(&outs[5]), &want, 1e-5, "group_norm");
    drop(dev);
    assert_no_validation_errors(&instance);
}
