//! Attention on workgroup-scope cooperative matrices (`attend_coop2.comp`,
//! `VK_NV_cooperative_matrix2` with its reductions and conversions): a pass that moves each
//! fp16 `attend.comp` node (the fused attentions of `attention_fusion.rs`, a prompt's causal
//! attention over a KV cache among them) onto the matrix kernel where the device runs it,
//! its operands' rows are contiguous and its head sizes fit the device's shapes.
//!
//! It is the default where it runs ([`ATTENTION_COOP2_ENV`] set to `off` keeps
//! `attend.comp`): on an H200, a Llama-3.2-1B-shaped fp16 prompt of 512 tokens ran at 50.4k
//! tok/s with it and 40.3k without.
//!
//! Like the cooperative GEMMs (`coop.rs`), the kernel is checked once per device before a
//! graph first uses it (on a thread of its own beside the GEMMs' checks, `check_ahead`): a
//! small fp16 attention with a ragged block of queries and of keys, with an added mask and
//! without, is run on it and compared with a host reference. A failure or a mismatch logs a
//! warning and the device keeps `attend.comp`.

use vk_core::{CoopComponent, DType, Device, Features, HostTensor};

use crate::coop::{CoopConfig, CoopPolicy};
use crate::graph::{GraphBuilder, Op};
use crate::kernels::Kernel;
use crate::kernels::push::{AttendCoop2Push, AttendPush};
use crate::options::BuildOptions;

/// The `VK_NV_cooperative_matrix2` features `attend_coop2.comp` needs beyond the GEMM's: row
/// reductions (the running maximum, statistics widened to the output's columns) and
/// conversions (the weights, accumulated in fp32, become an fp16 operand).
pub(crate) const NV2_ATTENTION_FEATURES: Features =
    Features::COOPERATIVE_MATRIX_REDUCTIONS_NV.union(Features::COOPERATIVE_MATRIX_CONVERSIONS_NV);

/// Environment variable: `off` keeps fp16 attentions on `attend.comp`; unset or anything else
/// runs them on `attend_coop2.comp` where the device runs it and it passes its check.
pub const ATTENTION_COOP2_ENV: &str = "VKDELEGATE_ATTENTION_COOP2";

/// The kernel's blocks: `rows` queries of a work group of `threads`, stepping through keys
/// `keys` at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AttendTile {
    pub rows: u32,
    pub keys: u32,
    pub threads: u32,
}

/// 32 queries by 64 keys on four subgroups. On an H100, ViT-B/16 fp16's twelve attentions (197
/// tokens, 12 heads of 64) took 0.19 ms against 0.24 with 64 queries (twice the work groups of
/// that short sequence), and 16 queries on two subgroups 0.26 ms. In a later run, one of them
/// took 11 us here, 10 on eight subgroups, 9 on 32 x 128 on eight and 8.5 on 32 x 256 on
/// eight, but 32 heads of 1024 tokens took 0.107 ms here against 0.136, 0.152 and 0.136 (one
/// tile serves both: this one loses 2 us on each short attention and gains 30-45 us on each
/// long one). 16 subgroups (512 invocations) do not pass the check there.
const TILE: AttendTile = AttendTile {
    rows: 32,
    keys: 64,
    threads: 128,
};

/// Environment variable for tuning the kernel's blocks: `rows,keys,threads` (multiples of 16,
/// and of 32 threads); unset, [`TILE`].
pub const ATTENTION_TILE_ENV: &str = "VKDELEGATE_ATTENTION_TILE";

/// [`ATTENTION_TILE_ENV`]'s tile, else [`TILE`].
fn tile() -> AttendTile {
    let Ok(v) = std::env::var(ATTENTION_TILE_ENV) else {
        return TILE;
    };
    let p: Option<Vec<u32>> = crate::options::tuning_numbers(&v);
    match p.as_deref() {
        Some(&[rows, keys, threads])
            if rows % 16 == 0 && keys % 16 == 0 && threads % 32 == 0 && rows * keys > 0 =>
        {
            AttendTile {
                rows,
                keys,
                threads,
            }
        }
        _ => {
            log::warn!(
                "{ATTENTION_TILE_ENV}={v}: expected `rows,keys,threads` (multiples of 16, \
                 threads of 32); using the default"
            );
            TILE
        }
    }
}

/// The tile fp16 attentions run on under `options`, given the cooperative GEMM configuration
/// `coop` the graph uses: only with the workgroup-scope kernel, the two extra features enabled
/// and, under [`CoopPolicy::Auto`], the check passed on this device.
pub(crate) fn usable(
    device: &Device,
    options: &BuildOptions,
    coop: Option<CoopConfig>,
) -> Option<AttendTile> {
    if std::env::var(ATTENTION_COOP2_ENV).as_deref() == Ok("off") {
        return None;
    }
    let Some(CoopConfig::Nv2 { .. }) = coop else {
        return None;
    };
    let features = device.enabled().features;
    let limits = &device.capabilities().limits;
    let tile = tile();
    if !features.contains(NV2_ATTENTION_FEATURES)
        || tile.threads > limits.max_compute_work_group_invocations
    {
        return None;
    }
    match options.cooperative {
        CoopPolicy::Off => None,
        CoopPolicy::Unchecked => Some(tile),
        CoopPolicy::Auto => {
            let key = "compute-delegate: cooperative attention (NV2) check";
            (*device.memo(key, || checked_once(device, options, tile))).then_some(tile)
        }
    }
}

/// The kernel fp16 attentions run on, on `device` under the default policy
/// (`"AttendCoop2"`, as [`crate::Graph::kernels`] names it), if not `attend.comp`; runs the
/// checks on first call. For reports and tests.
pub fn cooperative_attention_kernel(device: &Device) -> Option<&'static str> {
    let options = BuildOptions::default();
    let coop = crate::coop::usable(device, &options);
    usable(device, &options, coop).map(|_| "AttendCoop2")
}

/// Whether the attention kernel on `tile` passes its check on `device`: recorded as passed
/// beside the disk cache of `options` ([`crate::coop::records`]), or passing it now.
fn checked_once(device: &Device, options: &BuildOptions, tile: AttendTile) -> bool {
    let file = crate::coop::records(device, options);
    let passed = crate::coop::recorded_passes(file.as_ref());
    let name = crate::coop::record_key(&format!("attention {tile:?}"));
    if passed.contains(&name) {
        return true;
    }
    let pass = check(device);
    if pass {
        crate::coop::record_passes(file.as_ref(), &passed, &[name]);
    }
    pass
}

/// Whether the device runs the tile's products for head sizes `d` (queries and keys) and `e`
/// (values): scores `rows x keys x d`, the output `rows x e x keys` and the row sums
/// `rows x keys x keys`, fp16 operands and fp32 accumulators.
fn fits(device: &Device, t: AttendTile, d: u32, e: u32) -> bool {
    let caps = device.capabilities();
    let (h, f) = (CoopComponent::F16, CoopComponent::F32);
    d % 16 == 0
        && e % 16 == 0
        && [
            [t.rows, t.keys, d],
            [t.rows, e, t.keys],
            [t.rows, t.keys, t.keys],
        ]
        .into_iter()
        .all(|shape| caps.coop_workgroup_fits(h, f, shape, t.threads))
}

/// Operands of `attend.comp`'s layout table whose column stride must be 1 on the matrix
/// kernel: q, k, v and y (the biases are read element by element).
const ROW_OPERANDS: [usize; 4] = [0, 1, 2, 5];

impl GraphBuilder {
    /// The graph with each fp16 `attend.comp` node that `tile` can take (see the module's
    /// header) computed by `attend_coop2.comp`; `None` where there is none.
    pub(crate) fn with_attention_on_matrices(
        &self,
        device: &Device,
        tile: AttendTile,
    ) -> Option<GraphBuilder> {
        let mut g = self.clone();
        let mut changed = false;
        for (k, node) in self.nodes.iter().enumerate() {
            if self.tensors[node.out.0].dtype != DType::F16 {
                continue;
            }
            if let Some(op) = self.attention_on_matrices(&node.op, device, tile) {
                g.nodes[k].op = op;
                changed = true;
            }
        }
        changed.then_some(g)
    }

    /// `op` on `attend_coop2.comp`, if it is an `attend.comp` node the tile takes.
    pub(crate) fn attention_on_matrices(
        &self,
        op: &Op,
        device: &Device,
        tile: AttendTile,
    ) -> Option<Op> {
        let Op::Kernel {
            name,
            kernel: Kernel::Attend,
            inputs,
            push,
            spec,
            ..
        } = op
        else {
            return None;
        };
        let (d, e, biases) = (*spec.first()?, *spec.get(1)?, *spec.get(3)?);
        let causal = spec.get(4).copied().unwrap_or(0);
        if !fits(device, tile, d, e) {
            return None;
        }
        let table = self.constant_bytes(*inputs.get(5)?)?;
        let word = |i: usize| {
            let b = table.get(4 * i..4 * i + 4)?;
            Some(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        if !ROW_OPERANDS.iter().all(|&o| word(6 * o + 5) == Some(1)) {
            return None;
        }
        use std::mem::offset_of;
        type P = AttendPush;
        let w = |at: usize| crate::fusion::word(push, at);
        let (items, old_blocks, sq) = (
            w(offset_of!(P, items)),
            w(offset_of!(P, qblocks)),
            w(offset_of!(P, sq)),
        );
        if old_blocks == 0 {
            return None;
        }
        let qblocks = sq.div_ceil(tile.rows);
        let items = (items / old_blocks).checked_mul(qblocks)?;
        let push = AttendCoop2Push {
            items,
            qblocks,
            sq,
            sk: w(offset_of!(P, sk)),
            scale: f32::from_bits(w(offset_of!(P, scale))),
            guard: w(offset_of!(P, guard)),
            n1: w(offset_of!(P, n1)),
            n2: w(offset_of!(P, n2)),
            plus: w(offset_of!(P, plus)) as i32,
            has_pos: w(offset_of!(P, has_pos)),
        };
        Some(Op::Kernel {
            name,
            kernel: Kernel::AttendCoop2,
            inputs: inputs.clone(),
            push: bytemuck::cast_slice(&[push]).to_vec(),
            groups: Some(u64::from(items)),
            precision: None,
            spec: vec![tile.threads, d, e, tile.rows, tile.keys, biases, causal],
        })
    }
}

/// Runs the check ahead of its use where a graph may take the kernel (the device offers the
/// workgroup-scope GEMMs), on its own thread beside the GEMMs' checks; [`usable`] then finds
/// its outcome. Only under [`CoopPolicy::Auto`] (the check's own graphs build unchecked).
pub(crate) fn check_ahead(device: &Device, options: &BuildOptions) {
    if options.cooperative != CoopPolicy::Auto {
        return;
    }
    let first = crate::coop::offered(device).first().copied();
    if let Some(nv2 @ CoopConfig::Nv2 { .. }) = first {
        let _ = usable(device, options, Some(nv2));
    }
}

/// The check: `softmax(q k^T / 8 (+ mask)) v` for 2 heads of 70 queries and 100 keys of 64
/// (a ragged block of each), with some masked scores and without a mask (each its own
/// pipeline, so the one a model takes is compiled here), on two threads, against a host
/// reference in f64.
fn check(device: &Device) -> bool {
    crate::threads::each_on_threads(2, |i| check_one(device, i == 0))
        .into_iter()
        .all(|ok| ok.unwrap_or(false))
}

fn check_one(device: &Device, masked: bool) -> bool {
    let name = &device.capabilities().name;
    match check_attention(device, masked) {
        Ok(None) => {
            log::info!("cooperative-matrix attention passed its check on '{name}'");
            true
        }
        Ok(Some(worst)) => {
            log::warn!(
                "cooperative-matrix attention on '{name}' is wrong on its check ({worst}); not \
                 using it"
            );
            false
        }
        Err(e) => {
            log::warn!("cooperative-matrix attention check on '{name}' failed ({e}); not using it");
            false
        }
    }
}

/// `None` when the matrix kernel matches the reference, else the worst element.
fn check_attention(device: &Device, masked: bool) -> crate::Result<Option<String>> {
    let (h, sq, sk, d) = (2usize, 70usize, 100usize, 64usize);
    let q = crate::coop::values(h * sq * d, 11);
    let k = crate::coop::values(h * sk * d, 12);
    let v = crate::coop::values(h * sk * d, 13);
    let mask: Vec<f32> = (0..sq * sk)
        .map(|i| match i % 7 {
            _ if !masked => 0.0,
            0 => f32::NEG_INFINITY,
            r => r as f32 / 8.0,
        })
        .collect();
    let mut g = GraphBuilder::new();
    g.set_float(DType::F16);
    let qi = g.input("q", DType::F16, &[h, sq, d])?;
    let ki = g.input("k", DType::F16, &[h, sk, d])?;
    let vi = g.input("v", DType::F16, &[h, sk, d])?;
    let kt = g.permute(ki, &[0, 2, 1])?;
    let scores = g.matmul(qi, kt)?;
    let scores = g.mul_scalar(scores, 0.125)?;
    let scores = match masked {
        true => {
            let mi = g.constant("mask", crate::coop::f16_tensor(vec![sq, sk], &mask)?)?;
            g.add(scores, mi)?
        }
        false => scores,
    };
    let p = g.softmax(scores, -1)?;
    let y = g.matmul(p, vi)?;
    g.output(y)?;
    let options = BuildOptions {
        cooperative: CoopPolicy::Unchecked,
        ..BuildOptions::default()
    };
    let mut graph = g.build_with(device, &options)?;
    if !graph.kernels().iter().any(|k| k == "AttendCoop2") {
        return Ok(Some("the cooperative kernel was not chosen".into()));
    }
    let inputs: [HostTensor; 3] = [
        crate::coop::f16_tensor(vec![h, sq, d], &q)?,
        crate::coop::f16_tensor(vec![h, sk, d], &k)?,
        crate::coop::f16_tensor(vec![h, sk, d], &v)?,
    ];
    let out = graph.execute(&inputs)?;
    let got = crate::coop::f16_values(&out[0]);
    for head in 0..h {
        for i in 0..sq {
            let scores: Vec<f64> = (0..sk)
                .map(|j| {
                    let dot: f64 = (0..d)
                        .map(|c| {
                            f64::from(q[(head * sq + i) * d + c])
                                * f64::from(k[(head * sk + j) * d + c])
                        })
                        .sum();
                    dot * 0.125 + f64::from(half::f16::from_f32(mask[i * sk + j]).to_f32())
                })
                .collect();
            let top = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = scores.iter().map(|s| (s - top).exp()).collect();
            let total: f64 = w.iter().sum();
            for c in 0..d {
                let r: f64 = (0..sk)
                    .map(|j| w[j] * f64::from(v[(head * sk + j) * d + c]))
                    .sum::<f64>()
                    / total;
                let x = f64::from(got[(head * sq + i) * d + c]);
                // fp16 weights and output (2^-11 relative each) on values of at most 1.
                if (x - r).abs() > 4e-3 {
                    return Ok(Some(format!("[{head}][{i}][{c}] = {x}, expected {r}")));
                }
            }
        }
    }
    Ok(None)
}
