//! Cooperative-matrix kernels (`VK_KHR_cooperative_matrix`): whether a device may run them,
//! with which fragment shape, and the once-per-device check that they compute what the plain
//! kernels compute.
//!
//! Drivers are known to advertise cooperative matrices and compute wrong results with them.
//! Before a graph first uses such a kernel on a device, [`usable`] builds a small graph of
//! each kind the lowering emits (matmul with a ragged K tail, linear with its weight read
//! transposed, an unaligned shape on the scalar load path), runs it with the cooperative kernel
//! forced, and compares it with a host reference of the same fp16 inputs. A failure or a
//! mismatch logs a warning and the device keeps the plain kernels. The outcome is kept per
//! device ([`vk_core::Device::memo`]).

use vk_core::{CoopComponent, Device, Features, HostTensor, Version};

use crate::graph::GraphBuilder;
use crate::runtime::BuildOptions;

/// When graphs use cooperative-matrix kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CoopPolicy {
    /// Where the device enables them and they pass the check on it.
    #[default]
    Auto,
    /// Never: the plain kernels.
    Off,
    /// Where the device enables them, without the check (the check itself; tests).
    Unchecked,
}

/// The fragment shape and work-group size of the cooperative GEMM on a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CoopConfig {
    pub tm: u32,
    pub tn: u32,
    pub tk: u32,
    /// Four subgroups.
    pub threads: u32,
}

/// The kernel's block is 128 x 128 split among 2 x 2 subgroups, stepping K by 32.
const WARP_TILE: u32 = 64;
const BLOCK_K: u32 = 32;

/// What the device offers, without the check: Vulkan 1.3 (the kernel is SPIR-V 1.6),
/// `cooperativeMatrix`, `shaderFloat16` and 16-bit storage enabled, a subgroup-scope
/// fp16 x fp16 -> fp32 shape that tiles the kernel's blocks (16 x 16 x 16 preferred), and
/// subgroups of 16 to 64 lanes.
pub(crate) fn offered(device: &Device) -> Option<CoopConfig> {
    let enabled = device.enabled();
    let need =
        Features::COOPERATIVE_MATRIX | Features::SHADER_FLOAT16 | Features::STORAGE_BUFFER_16BIT;
    if enabled.api_version < Version::V1_3 || !enabled.features.contains(need) {
        return None;
    }
    let caps = device.capabilities();
    let sg = caps.limits.subgroup_size;
    if !(16..=64).contains(&sg) {
        return None;
    }
    let fits = |s: &&vk_core::CoopMatrixShape| {
        WARP_TILE % s.m == 0 && WARP_TILE % s.n == 0 && BLOCK_K % s.k == 0
    };
    let shapes: Vec<_> = caps
        .coop_shapes(CoopComponent::F16, CoopComponent::F32)
        .filter(fits)
        .collect();
    let best = shapes
        .iter()
        .find(|s| (s.m, s.n, s.k) == (16, 16, 16))
        .or_else(|| shapes.first())?;
    Some(CoopConfig {
        tm: best.m,
        tn: best.n,
        tk: best.k,
        threads: 4 * sg,
    })
}

/// The configuration graphs built with `policy` use on `device`, if any.
pub(crate) fn usable(device: &Device, policy: CoopPolicy) -> Option<CoopConfig> {
    let config = offered(device)?;
    match policy {
        CoopPolicy::Off => None,
        CoopPolicy::Unchecked => Some(config),
        CoopPolicy::Auto => {
            let passed = device.memo("compute-delegate: cooperative GEMM check", || check(device));
            passed.then_some(config)
        }
    }
}

/// Whether cooperative kernels are in use on `device` under the default policy (runs the check
/// on first call): for reports and tests.
pub fn cooperative_gemm_active(device: &Device) -> bool {
    usable(device, CoopPolicy::Auto).is_some()
}

/// One check problem: `[m, k] x [k, n]` (or linear with a `[n, k]` weight and a bias).
struct Problem {
    m: usize,
    n: usize,
    k: usize,
    linear: bool,
}

const PROBLEMS: &[Problem] = &[
    // A ragged K tail and a partial block on both sides, 16-byte loads.
    Problem {
        m: 136,
        n: 72,
        k: 48,
        linear: false,
    },
    // Linear: the weight read transposed, plus a bias.
    Problem {
        m: 40,
        n: 136,
        k: 64,
        linear: true,
    },
    // Rows not a multiple of 8 halves: the scalar load path.
    Problem {
        m: 33,
        n: 21,
        k: 45,
        linear: false,
    },
];

fn check(device: &Device) -> bool {
    for p in PROBLEMS {
        match check_one(device, p) {
            Ok(None) => {}
            Ok(Some(worst)) => {
                log::warn!(
                    "cooperative-matrix GEMM on '{}' is wrong on a {}x{}x{} check ({worst}); \
                     using the plain kernels",
                    device.capabilities().name,
                    p.m,
                    p.n,
                    p.k
                );
                return false;
            }
            Err(e) => {
                log::warn!(
                    "cooperative-matrix GEMM check on '{}' failed ({e}); using the plain kernels",
                    device.capabilities().name
                );
                return false;
            }
        }
    }
    log::info!(
        "cooperative-matrix GEMM passed its check on '{}'",
        device.capabilities().name
    );
    true
}

/// Deterministic values in [-1, 1), rounded to fp16.
fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            let v = (s >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0;
            half::f16::from_f32(v).to_f32()
        })
        .collect()
}

fn f16_tensor(shape: Vec<usize>, v: &[f32]) -> crate::Result<HostTensor> {
    let bytes: Vec<u8> = v
        .iter()
        .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
        .collect();
    HostTensor::new(vk_core::DType::F16, shape, bytes)
        .map_err(|e| crate::Error::Graph(format!("check input: {e}")))
}

/// `None` when the cooperative kernel matches the reference, else the worst element.
fn check_one(device: &Device, p: &Problem) -> crate::Result<Option<String>> {
    let a = values(p.m * p.k, 1);
    let w = values(p.k * p.n, 2);
    let bias = values(p.n, 3);
    let mut g = GraphBuilder::new();
    let x = g.input("a", vk_core::DType::F16, &[p.m, p.k])?;
    let y = if p.linear {
        let wt = g.input("w", vk_core::DType::F16, &[p.n, p.k])?;
        let b = g.constant("bias", f16_tensor(vec![p.n], &bias)?)?;
        g.linear(x, wt, Some(b))?
    } else {
        let b = g.input("b", vk_core::DType::F16, &[p.k, p.n])?;
        g.matmul(x, b)?
    };
    g.output(y)?;
    let options = BuildOptions {
        cooperative: CoopPolicy::Unchecked,
        ..BuildOptions::default()
    };
    let mut graph = g.build_with(device, &options)?;
    if !graph.kernels().contains(&"gemm_coop") {
        return Ok(Some("the cooperative kernel was not chosen".into()));
    }
    let shape_b = if p.linear {
        vec![p.n, p.k]
    } else {
        vec![p.k, p.n]
    };
    let inputs = [f16_tensor(vec![p.m, p.k], &a)?, f16_tensor(shape_b, &w)?];
    let out = graph.execute(&inputs)?;
    let got: Vec<f32> = out[0]
        .bytes()
        .chunks_exact(2)
        .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect();
    for i in 0..p.m {
        for j in 0..p.n {
            let mut r = 0f64;
            for kk in 0..p.k {
                let wv = if p.linear {
                    w[j * p.k + kk]
                } else {
                    w[kk * p.n + j]
                };
                r += f64::from(a[i * p.k + kk]) * f64::from(wv);
            }
            if p.linear {
                r += f64::from(bias[j]);
            }
            let v = f64::from(got[i * p.n + j]);
            // fp16 output rounding (2^-11 relative) plus accumulation-order noise.
            if (v - r).abs() > 2e-3 + 2e-3 * r.abs() {
                return Ok(Some(format!("[{i}][{j}] = {v}, expected {r}")));
            }
        }
    }
    Ok(None)
}
