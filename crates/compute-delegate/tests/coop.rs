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
/// GEMM where the device runs it), the plain implicit GEMM elsewhere.
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
        .unwrap_or("Gemm_f16");
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
