//! Lowering: every node of a [`GraphBuilder`] becomes one or more dispatches of the op library,
//! each naming the storages it reads and writes.

use vk_core::{DType, Limits};

use crate::error::{Error, Result};
use crate::graph::{
    GraphBuilder, Op, Storage, StorageKind, TensorId, TensorInfo, UnaryOp, storage_bytes,
};
use crate::kernels::Kernel;

/// One compute dispatch.
#[derive(Debug, Clone)]
pub(crate) struct Dispatch {
    pub op: &'static str,
    pub node: usize,
    pub kernel: Kernel,
    pub spec: Vec<u32>,
    /// `(storage, written)` per binding.
    pub bindings: Vec<(usize, bool)>,
    pub push: Vec<u32>,
    pub groups: [u32; 3],
    /// Each invocation reads exactly the elements it writes (vec4 elementwise kernels), so
    /// the output may take the buffer of an input that dies here.
    pub in_place: bool,
}

/// The lowered graph.
#[derive(Debug)]
pub(crate) struct Plan {
    pub storages: Vec<Storage>,
    pub dispatches: Vec<Dispatch>,
}

pub(crate) fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

const MAX_RANK: usize = 6;

/// Rows shorter than this are reduced by one thread each, longer ones by a work group.
const ROW_KERNEL_MIN: usize = 64;
/// Work groups of a row kernel (each loops over rows when there are more).
const ROW_GROUPS: usize = 8192;

/// GEMMs with fewer output tiles than this are split along K ...
const SPLIT_BELOW_TILES: u64 = 264;
/// ... into about this many work groups.
const SPLIT_TARGET_TILES: u64 = 528;

/// Drops size-1 dims and merges adjacent dims that are contiguous in every stride set.
fn collapse(dims: &[usize], strides: &[Vec<usize>]) -> (Vec<usize>, Vec<Vec<usize>>) {
    let mut d: Vec<usize> = Vec::new();
    let mut s: Vec<Vec<usize>> = vec![Vec::new(); strides.len()];
    for i in 0..dims.len() {
        if dims[i] == 1 {
            continue;
        }
        let mergeable = !d.is_empty()
            && strides
                .iter()
                .zip(&s)
                .all(|(src, dst)| dst.last().copied() == Some(src[i] * dims[i]));
        if mergeable {
            if let Some(last) = d.last_mut() {
                *last *= dims[i];
            }
            for (src, dst) in strides.iter().zip(s.iter_mut()) {
                if let Some(last) = dst.last_mut() {
                    *last = src[i];
                }
            }
        } else {
            d.push(dims[i]);
            for (src, dst) in strides.iter().zip(s.iter_mut()) {
                dst.push(src[i]);
            }
        }
    }
    if d.is_empty() {
        d.push(1);
        for dst in &mut s {
            dst.push(0);
        }
    }
    (d, s)
}

fn pad6(v: &[usize]) -> impl Iterator<Item = u32> + '_ {
    (0..MAX_RANK).map(move |i| v.get(i).copied().unwrap_or(0) as u32)
}

struct Lowerer<'a> {
    b: &'a GraphBuilder,
    limits: &'a Limits,
    storages: Vec<Storage>,
    out: Vec<Dispatch>,
    node: usize,
    op: &'static str,
    /// Activation fused into the current node's epilogue, and the tensor it then writes.
    act: Option<(f32, f32, TensorId)>,
    /// Subgroup arithmetic is available in compute shaders.
    subgroups: bool,
}

impl Lowerer<'_> {
    fn t(&self, id: TensorId) -> &TensorInfo {
        &self.b.tensors[id.0]
    }

    fn st(&self, id: TensorId) -> usize {
        self.b.tensors[id.0].storage
    }

    /// Work groups of 256 threads for a grid-stride loop over `n` items.
    fn linear_groups(&self, n: u64) -> u32 {
        let cap = self.limits.max_compute_work_group_count[0].min(65535);
        (n.div_ceil(256).max(1)).min(u64::from(cap)) as u32
    }

    fn check_groups(&self, groups: [u64; 3]) -> Result<[u32; 3]> {
        let mut g = [0u32; 3];
        for (i, &n) in groups.iter().enumerate() {
            let limit = self.limits.max_compute_work_group_count[i];
            if n > u64::from(limit) {
                return Err(Error::TooManyGroups {
                    op: self.op,
                    dim: i,
                    groups: n,
                    limit,
                });
            }
            g[i] = n.max(1) as u32;
        }
        Ok(g)
    }

    fn push(
        &mut self,
        kernel: Kernel,
        spec: Vec<u32>,
        bindings: Vec<(usize, bool)>,
        push: Vec<u32>,
        groups: [u32; 3],
    ) {
        self.out.push(Dispatch {
            op: self.op,
            node: self.node,
            kernel,
            spec,
            bindings,
            push,
            groups,
            in_place: matches!(kernel, Kernel::Unary | Kernel::Binary),
        });
    }

    fn temp(&mut self, tensor: TensorId, elements: usize) -> usize {
        self.storages.push(Storage {
            kind: StorageKind::Temp,
            bytes: storage_bytes(DType::F32, &[elements]),
            tensor,
        });
        self.storages.len() - 1
    }

    #[allow(clippy::too_many_arguments)]
    fn copy(
        &mut self,
        src: usize,
        dst: usize,
        dims: &[usize],
        ss: Vec<usize>,
        ds: Vec<usize>,
        src_off: usize,
        dst_off: usize,
    ) -> Result<()> {
        let (d, s) = collapse(dims, &[ss, ds]);
        if d.len() > MAX_RANK {
            return Err(Error::Shape {
                op: self.op,
                detail: format!(
                    "{} dims remain after merging contiguous ones ({dims:?}); at most {MAX_RANK}",
                    d.len()
                ),
            });
        }
        let n: usize = dims.iter().product();
        let mut push = vec![n as u32, d.len() as u32, src_off as u32, dst_off as u32];
        push.extend(pad6(&d));
        push.extend(pad6(&s[0]));
        push.extend(pad6(&s[1]));
        let g = self.linear_groups(n as u64);
        self.push(
            Kernel::Copy,
            vec![],
            vec![(src, false), (dst, true)],
            push,
            [g, 1, 1],
        );
        Ok(())
    }

    /// A GEMM dispatch (see `gemm.comp`), split along K into several dispatches' worth of
    /// work groups plus a summing pass when the output has too few tiles to fill a large GPU.
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        &mut self,
        m: usize,
        n: usize,
        k: usize,
        batch: usize,
        mode: u32,
        params: [usize; 26],
        bindings: Vec<(usize, bool)>,
        out: TensorId,
        act: Option<(f32, f32)>,
    ) -> Result<()> {
        // Kernel size baked into the implicit-GEMM pipeline.
        let (khs, kws) = if mode == 1 {
            (params[17] as u32, params[18] as u32)
        } else {
            (0, 0)
        };
        let mut ty: u64 = if m <= 64 { 8 } else { 16 };
        let mut tx: u64 = if n <= 64 { 8 } else { 16 };
        let tiles = |tx: u64, ty: u64| {
            (m as u64).div_ceil(8 * ty) * (n as u64).div_ceil(8 * tx) * batch as u64
        };
        let mut splits: u64 = 1;
        let t = tiles(tx, ty);
        if t < SPLIT_BELOW_TILES && k >= 512 {
            splits = SPLIT_TARGET_TILES
                .div_ceil(t)
                .min(k as u64 / 256)
                .clamp(1, 16);
        } else if t < 256 && ty == 16 && tx == 16 {
            ty = 8;
            tx = 8;
        }
        let k_split = (k as u64).div_ceil(splits).div_ceil(8) * 8;
        let splits = (k as u64).div_ceil(k_split);
        let out_numel = self.t(out).numel();
        let groups = self.check_groups([
            (n as u64).div_ceil(8 * tx),
            (m as u64).div_ceil(8 * ty),
            batch as u64 * splits,
        ])?;
        let mut bindings = bindings;
        let final_out = bindings[3];
        let partial = (splits > 1).then(|| self.temp(out, out_numel * splits as usize));
        if let Some(p) = partial {
            bindings[3] = (p, true);
        }
        let mut push: Vec<u32> = params.iter().map(|&v| v as u32).collect();
        let (lo, hi) = act.unwrap_or((0.0, 0.0));
        push.extend([
            splits as u32,
            k_split as u32,
            out_numel as u32,
            lo.to_bits(),
            hi.to_bits(),
        ]);
        // vec4 loads where rows are contiguous and everything is a multiple of 4.
        let [_, _, _, sa_b, sa_m, sa_k, sb_b, sb_k, sb_n] =
            [0, 1, 2, 3, 4, 5, 6, 7, 8].map(|i| params[i]);
        let vec_a = sa_k == 1 && k % 4 == 0 && sa_m % 4 == 0 && sa_b % 4 == 0;
        let vec_b = mode == 0 && sb_n == 1 && n % 4 == 0 && sb_k % 4 == 0 && sb_b % 4 == 0;
        // With split-K the activation follows the summing pass.
        let fused = act.is_some() && partial.is_none();
        self.push(
            Kernel::Gemm,
            vec![
                (tx * ty) as u32,
                tx as u32,
                ty as u32,
                mode,
                khs,
                kws,
                u32::from(fused),
                u32::from(vec_a),
                u32::from(vec_b),
            ],
            bindings,
            push,
            groups,
        );
        if let Some(p) = partial {
            let g = self.linear_groups(out_numel as u64);
            let sum_to = if act.is_some() {
                (self.temp(out, out_numel), true)
            } else {
                final_out
            };
            self.push(
                Kernel::Reduce,
                vec![0],
                vec![(p, false), sum_to],
                vec![1, splits as u32, out_numel as u32, 1f32.to_bits()],
                [g, 1, 1],
            );
            if act.is_some() {
                let n4 = out_numel.div_ceil(4);
                let g = self.linear_groups(n4.div_ceil(2) as u64); // two vec4s per thread
                self.push(
                    Kernel::Unary,
                    vec![1],
                    vec![(sum_to.0, false), final_out],
                    vec![n4 as u32, lo.to_bits(), hi.to_bits()],
                    [g, 1, 1],
                );
            }
        }
        Ok(())
    }

    fn lower_node(&mut self, op: &Op, out: TensorId) -> Result<()> {
        let o = self.st(self.act.map_or(out, |a| a.2));
        let act = self.act.map(|a| (a.0, a.1));
        let oi = self.t(out).clone();
        let n = oi.numel();
        match op {
            Op::Unary { op, x } => {
                let (code, p0, p1) = op.code();
                let n4 = n.div_ceil(4);
                let g = self.linear_groups(n4.div_ceil(2) as u64); // two vec4s per thread
                let x = self.st(*x);
                self.push(
                    Kernel::Unary,
                    vec![code],
                    vec![(x, false), (o, true)],
                    vec![n4 as u32, p0.to_bits(), p1.to_bits()],
                    [g, 1, 1],
                );
            }
            Op::Binary { op, a, b } => {
                let (ai, bi) = (self.t(*a).clone(), self.t(*b).clone());
                let (sa, sb) = (ai.storage, bi.storage);
                if ai.shape == bi.shape {
                    let n4 = n.div_ceil(4);
                    let g = self.linear_groups(n4.div_ceil(2) as u64); // two vec4s per thread
                    self.push(
                        Kernel::Binary,
                        vec![op.code()],
                        vec![(sa, false), (sb, false), (o, true)],
                        vec![n4 as u32],
                        [g, 1, 1],
                    );
                } else {
                    let r = oi.shape.len();
                    let bstrides = |t: &TensorInfo| {
                        let cs = contiguous_strides(&t.shape);
                        let off = r - t.shape.len();
                        (0..r)
                            .map(|i| {
                                if i < off || t.shape[i - off] == 1 {
                                    0
                                } else {
                                    cs[i - off]
                                }
                            })
                            .collect::<Vec<_>>()
                    };
                    let (d, s) = collapse(
                        &oi.shape,
                        &[bstrides(&ai), bstrides(&bi), contiguous_strides(&oi.shape)],
                    );
                    if d.len() > MAX_RANK {
                        return Err(Error::Shape {
                            op: self.op,
                            detail: format!(
                                "broadcasting '{}' {:?} with '{}' {:?} needs {} dims; at most \
                                 {MAX_RANK}",
                                ai.name,
                                ai.shape,
                                bi.name,
                                bi.shape,
                                d.len()
                            ),
                        });
                    }
                    let mut push = vec![n as u32, d.len() as u32];
                    push.extend(pad6(&d));
                    push.extend(pad6(&s[0]));
                    push.extend(pad6(&s[1]));
                    let g = self.linear_groups(n as u64);
                    self.push(
                        Kernel::BinaryBcast,
                        vec![op.code()],
                        vec![(sa, false), (sb, false), (o, true)],
                        push,
                        [g, 1, 1],
                    );
                }
            }
            Op::Softmax { x, dim, log } => {
                let s = &oi.shape;
                let outer: usize = s[..*dim].iter().product();
                let inner: usize = s[dim + 1..].iter().product();
                let rows = inner == 1 && s[*dim] >= ROW_KERNEL_MIN;
                let vec4 = rows && s[*dim] % 4 == 0;
                // vec4s per thread kept in registers (rows up to 8192 elements).
                let per_thread = (s[*dim] / 4).div_ceil(256);
                let cache = if vec4 && per_thread <= 8 {
                    per_thread as u32
                } else {
                    0
                };
                let g = if rows {
                    outer.min(ROW_GROUPS) as u32
                } else {
                    self.linear_groups((outer * inner) as u64)
                };
                let x = self.st(*x);
                let kernel = if rows && self.subgroups {
                    Kernel::SoftmaxSg
                } else {
                    Kernel::Softmax
                };
                self.push(
                    kernel,
                    vec![u32::from(*log), u32::from(rows), u32::from(vec4), cache],
                    vec![(x, false), (o, true)],
                    vec![outer as u32, s[*dim] as u32, inner as u32],
                    [g, 1, 1],
                );
            }
            Op::Reduce { x, dims, mean } => {
                let xi = self.t(*x).clone();
                let mut cur = xi.shape.clone();
                // Runs of consecutive reduced dims, reduced last run first.
                let mut runs: Vec<(usize, usize)> = Vec::new();
                for &d in dims {
                    match runs.last_mut() {
                        Some((_, end)) if *end == d => *end += 1,
                        _ => runs.push((d, d + 1)),
                    }
                }
                let mut src = xi.storage;
                for (i, &(start, end)) in runs.iter().enumerate().rev() {
                    let outer: usize = cur[..start].iter().product();
                    let r: usize = cur[start..end].iter().product();
                    let inner: usize = cur[end..].iter().product();
                    for c in &mut cur[start..end] {
                        *c = 1;
                    }
                    let dst = if i == 0 {
                        o
                    } else {
                        self.temp(out, outer * inner)
                    };
                    let scale = if *mean { 1.0 / r as f32 } else { 1.0 };
                    let rows = inner == 1 && r >= ROW_KERNEL_MIN;
                    let g = if rows {
                        outer.min(ROW_GROUPS) as u32
                    } else {
                        self.linear_groups((outer * inner) as u64)
                    };
                    let kernel = if rows && self.subgroups {
                        Kernel::ReduceSg
                    } else {
                        Kernel::Reduce
                    };
                    self.push(
                        kernel,
                        vec![u32::from(rows)],
                        vec![(src, false), (dst, true)],
                        vec![outer as u32, r as u32, inner as u32, scale.to_bits()],
                        [g, 1, 1],
                    );
                    src = dst;
                }
            }
            Op::LayerNorm {
                x,
                weight,
                bias,
                d,
                eps,
            } => {
                let x = self.st(*x);
                let w = weight.map(|w| self.st(w));
                let b = bias.map(|b| self.st(b));
                let rows = n / d;
                let per_thread = *d < ROW_KERNEL_MIN;
                let g = if per_thread {
                    self.linear_groups(rows as u64)
                } else {
                    rows.min(ROW_GROUPS) as u32
                };
                let kernel = if !per_thread && self.subgroups {
                    Kernel::LayerNormSg
                } else {
                    Kernel::LayerNorm
                };
                self.push(
                    kernel,
                    vec![
                        u32::from(w.is_some()),
                        u32::from(b.is_some()),
                        u32::from(per_thread),
                    ],
                    vec![
                        (x, false),
                        (w.unwrap_or(x), false),
                        (b.unwrap_or(x), false),
                        (o, true),
                    ],
                    vec![rows as u32, *d as u32, eps.to_bits()],
                    [g, 1, 1],
                );
            }
            Op::Pool { x, max, p } => {
                let xi = self.t(*x).clone();
                let r = xi.shape.len();
                let (h, w) = (xi.shape[r - 2], xi.shape[r - 1]);
                let (oh, ow) = (oi.shape[r - 2], oi.shape[r - 1]);
                if p.kernel == [2, 2]
                    && p.stride == [2, 2]
                    && p.padding == [0, 0]
                    && h % 2 == 0
                    && w % 4 == 0
                {
                    // Vectorised 2x2 / stride 2 path: one vec4 from each of two rows.
                    let total = n / 2;
                    let g = self.linear_groups(total as u64);
                    self.push(
                        Kernel::Pool2x2,
                        vec![u32::from(*max)],
                        vec![(xi.storage, false), (o, true)],
                        vec![total as u32, (w / 4) as u32, oh as u32],
                        [g, 1, 1],
                    );
                    return Ok(());
                }
                let g = self.linear_groups(n as u64);
                self.push(
                    Kernel::Pool,
                    vec![u32::from(*max)],
                    vec![(xi.storage, false), (o, true)],
                    [
                        n,
                        h,
                        w,
                        oh,
                        ow,
                        p.kernel[0],
                        p.kernel[1],
                        p.stride[0],
                        p.stride[1],
                        p.padding[0],
                        p.padding[1],
                        usize::from(p.count_include_pad),
                    ]
                    .iter()
                    .map(|&v| v as u32)
                    .collect(),
                    [g, 1, 1],
                );
            }
            Op::Conv { x, w, bias, p } => {
                let (xi, wi) = (self.t(*x).clone(), self.t(*w).clone());
                let (nb, cin, h, wd) = (xi.shape[0], xi.shape[1], xi.shape[2], xi.shape[3]);
                let (cout, cin_g, kh, kw) = (wi.shape[0], wi.shape[1], wi.shape[2], wi.shape[3]);
                let (oh, ow) = (oi.shape[2], oi.shape[3]);
                let b = bias.map(|b| self.st(b));
                let has_bias = usize::from(b.is_some());
                let bindings = vec![
                    (xi.storage, false),
                    (wi.storage, false),
                    (b.unwrap_or(xi.storage), false),
                    (o, true),
                ];
                if p.groups == cin && p.groups > 1 {
                    let g = self.linear_groups(n as u64);
                    let push = [
                        n,
                        cin,
                        h,
                        wd,
                        cout,
                        oh,
                        ow,
                        kh,
                        kw,
                        p.stride[0],
                        p.stride[1],
                        p.padding[0],
                        p.padding[1],
                        p.dilation[0],
                        p.dilation[1],
                        has_bias,
                    ];
                    let (lo, hi) = act.unwrap_or((0.0, 0.0));
                    let mut push: Vec<u32> = push.iter().map(|&v| v as u32).collect();
                    push.extend([lo.to_bits(), hi.to_bits()]);
                    self.push(
                        Kernel::ConvDw,
                        vec![u32::from(act.is_some())],
                        bindings,
                        push,
                        [g, 1, 1],
                    );
                } else {
                    let pointwise = kh == 1 && kw == 1 && p.stride == [1, 1] && p.padding == [0, 0];
                    let m = cout / p.groups;
                    let nn = nb * oh * ow;
                    let k = cin_g * kh * kw;
                    // Gemm bindings: A = weights, B = input, bias, C.
                    let gb = vec![bindings[1], bindings[0], bindings[2], bindings[3]];
                    let params = [
                        m,
                        nn,
                        k,
                        m * k,
                        k,
                        1,
                        0,
                        0,
                        0,
                        0,
                        0,
                        has_bias,
                        cin_g,
                        h,
                        wd,
                        oh,
                        ow,
                        kh,
                        kw,
                        p.stride[0],
                        p.stride[1],
                        p.padding[0],
                        p.padding[1],
                        p.dilation[0],
                        p.dilation[1],
                        cout,
                    ];
                    self.gemm(
                        m,
                        nn,
                        k,
                        p.groups,
                        if pointwise { 2 } else { 1 },
                        params,
                        gb,
                        out,
                        act,
                    )?;
                }
            }
            Op::Matmul { a, b, bias, linear } => {
                let (ai, bi) = (self.t(*a).clone(), self.t(*b).clone());
                let ra = ai.shape.len();
                let k = ai.shape[ra - 1];
                let bias_st = bias.map(|t| self.st(t));
                let has_bias = usize::from(bias_st.is_some());
                if *linear {
                    let nout = bi.shape[0];
                    let m = ai.numel() / k;
                    // Constant weights are transposed once to [k, n] for coalesced loads.
                    let (bst, sb_k, sb_n) = match &self.storages[bi.storage].kind {
                        StorageKind::Const(bytes) => {
                            let mut t = vec![0u8; bytes.len()];
                            for r in 0..nout {
                                for c in 0..k {
                                    let s = (r * k + c) * 4;
                                    let d = (c * nout + r) * 4;
                                    t[d..d + 4].copy_from_slice(&bytes[s..s + 4]);
                                }
                            }
                            let bytes_len = storage_bytes(DType::F32, &[nout * k]);
                            self.storages.push(Storage {
                                kind: StorageKind::Const(t),
                                bytes: bytes_len,
                                tensor: *b,
                            });
                            (self.storages.len() - 1, nout, 1)
                        }
                        _ => (bi.storage, 1, k),
                    };
                    let params = [
                        m, nout, k, 0, k, 1, 0, sb_k, sb_n, 0, nout, has_bias, 0, 0, 0, 0, 0, 0, 0,
                        0, 0, 0, 0, 0, 0, 0,
                    ];
                    let bindings = vec![
                        (ai.storage, false),
                        (bst, false),
                        (bias_st.unwrap_or(ai.storage), false),
                        (o, true),
                    ];
                    self.gemm(m, nout, k, 1, 0, params, bindings, out, act)?;
                } else {
                    let rb = bi.shape.len();
                    let m = ai.shape[ra - 2];
                    let nn = bi.shape[rb - 1];
                    let batch_a: usize = ai.shape[..ra - 2].iter().product();
                    let batch_b: usize = bi.shape[..rb - 2].iter().product();
                    let (m_eff, batch) = if batch_b == 1 {
                        (m * batch_a, 1)
                    } else {
                        (m, batch_b.max(batch_a))
                    };
                    let sa_b = if batch_a == 1 { 0 } else { m * k };
                    let sb_b = if batch_b == 1 { 0 } else { k * nn };
                    let params = [
                        m_eff,
                        nn,
                        k,
                        sa_b,
                        k,
                        1,
                        sb_b,
                        nn,
                        1,
                        m * nn,
                        nn,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                    ];
                    let bindings = vec![
                        (ai.storage, false),
                        (bi.storage, false),
                        (ai.storage, false),
                        (o, true),
                    ];
                    self.gemm(m_eff, nn, k, batch, 0, params, bindings, out, act)?;
                }
            }
            Op::Permute { x, perm } => {
                let xi = self.t(*x).clone();
                let cs = contiguous_strides(&xi.shape);
                let ss = perm.iter().map(|&p| cs[p]).collect();
                let ds = contiguous_strides(&oi.shape);
                self.copy(xi.storage, o, &oi.shape, ss, ds, 0, 0)?;
            }
            Op::Cat { xs, dim } => {
                let ds = contiguous_strides(&oi.shape);
                let mut off = 0;
                for &x in xs {
                    let xi = self.t(x).clone();
                    let ss = contiguous_strides(&xi.shape);
                    self.copy(xi.storage, o, &xi.shape, ss, ds.clone(), 0, off * ds[*dim])?;
                    off += xi.shape[*dim];
                }
            }
            Op::Cast { x, to } => {
                let xi = self.t(*x).clone();
                let code = |d| {
                    crate::graph::cast_code(d).ok_or_else(|| Error::DType {
                        op: "cast",
                        tensor: xi.name.clone(),
                        actual: d,
                        expected: "f32, f16, i32 or i8",
                    })
                };
                let (src, dst) = (code(xi.dtype)?, code(*to)?);
                let quads = n.div_ceil(4);
                let g = self.linear_groups(quads as u64);
                self.push(
                    Kernel::Cast,
                    vec![src, dst],
                    vec![(xi.storage, false), (o, true)],
                    vec![quads as u32],
                    [g, 1, 1],
                );
            }
            Op::QAdd { a, b, q } => {
                let words = n.div_ceil(4);
                let g = self.linear_groups(words as u64);
                let (sa, sb) = (self.st(*a), self.st(*b));
                let push = vec![
                    words as u32,
                    q.a_zp as u32,
                    q.b_zp as u32,
                    q.out_zp as u32,
                    q.left_shift,
                    q.a.multiplier as u32,
                    q.a.shift,
                    q.b.multiplier as u32,
                    q.b.shift,
                    q.out.multiplier as u32,
                    q.out.shift,
                ];
                self.push(
                    Kernel::QAdd,
                    vec![],
                    vec![(sa, false), (sb, false), (o, true)],
                    push,
                    [g, 1, 1],
                );
            }
            Op::QConv {
                x,
                w,
                bias,
                mult,
                shift,
                q,
            } => {
                let (xi, wi) = (self.t(*x).clone(), self.t(*w).clone());
                let p = q.conv;
                let words = n.div_ceil(4);
                let g = self.linear_groups(words as u64);
                let b = bias.map(|b| self.st(b));
                let push = [
                    n as u32,
                    xi.shape[1] as u32,
                    xi.shape[2] as u32,
                    xi.shape[3] as u32,
                    oi.shape[1] as u32,
                    oi.shape[2] as u32,
                    oi.shape[3] as u32,
                    wi.shape[2] as u32,
                    wi.shape[3] as u32,
                    p.stride[0] as u32,
                    p.stride[1] as u32,
                    p.padding[0] as u32,
                    p.padding[1] as u32,
                    p.dilation[0] as u32,
                    p.dilation[1] as u32,
                    p.groups as u32,
                    q.x_zp as u32,
                    q.w_zp as u32,
                    q.out_zp as u32,
                    u32::from(b.is_some()),
                ];
                let (sm, ss) = (self.st(*mult), self.st(*shift));
                self.push(
                    Kernel::QConv,
                    vec![],
                    vec![
                        (xi.storage, false),
                        (wi.storage, false),
                        (b.unwrap_or(sm), false),
                        (sm, false),
                        (ss, false),
                        (o, true),
                    ],
                    push.to_vec(),
                    [g, 1, 1],
                );
            }
            Op::FmaProbe { groups, iters } => {
                let g = self.check_groups([u64::from(*groups), 1, 1])?;
                self.push(
                    Kernel::FmaPeak,
                    vec![],
                    vec![(o, true)],
                    vec![*iters, 0.999f32.to_bits(), 1e-3f32.to_bits()],
                    g,
                );
            }
            Op::Slice {
                x,
                dim,
                start,
                step,
            } => {
                let xi = self.t(*x).clone();
                let cs = contiguous_strides(&xi.shape);
                let mut ss = cs.clone();
                ss[*dim] *= step;
                let ds = contiguous_strides(&oi.shape);
                self.copy(xi.storage, o, &oi.shape, ss, ds, start * cs[*dim], 0)?;
            }
        }
        Ok(())
    }
}

fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Unary { op, .. } => op.name(),
        Op::Binary { op, .. } => op.name(),
        Op::Softmax { log: false, .. } => "softmax",
        Op::Softmax { log: true, .. } => "log_softmax",
        Op::Pool { max: false, .. } => "avg_pool2d",
        Op::Pool { max: true, .. } => "max_pool2d",
        Op::Conv { .. } => "conv2d",
        Op::Matmul { linear: true, .. } => "linear",
        Op::Matmul { .. } => "matmul",
        Op::Reduce { mean: true, .. } => "mean",
        Op::Reduce { .. } => "sum",
        Op::LayerNorm { .. } => "layer_norm",
        Op::Permute { .. } => "permute",
        Op::Cat { .. } => "cat",
        Op::Slice { .. } => "slice",
        Op::FmaProbe { .. } => "fma_probe",
        Op::Cast { .. } => "cast",
        Op::QAdd { .. } => "add_q8",
        Op::QConv { .. } => "conv2d_q8",
    }
}

struct Fusion {
    /// Per node: a clamp to fuse into its epilogue, and the tensor it then writes.
    act: Vec<Option<(f32, f32, TensorId)>>,
    /// Per node: folded into an earlier node.
    skip: Vec<bool>,
}

/// Finds relu / clamp nodes whose only input is the output of a conv2d, linear or matmul that
/// nothing else reads (not an output, no view of it): the producer applies the clamp.
fn fuse_activations(b: &GraphBuilder) -> Fusion {
    let n = b.nodes.len();
    let mut fusion = Fusion {
        act: vec![None; n],
        skip: vec![false; n],
    };
    // Readers per storage: node inputs, graph outputs, and views sharing it.
    let mut readers = vec![0usize; b.storages.len()];
    for node in &b.nodes {
        for t in node.op.inputs() {
            readers[b.tensors[t.0].storage] += 1;
        }
    }
    for t in &b.outputs {
        readers[b.tensors[t.0].storage] += 1;
    }
    let mut views = vec![0usize; b.storages.len()];
    for t in &b.tensors {
        views[t.storage] += 1;
    }
    let mut producer = vec![None; b.tensors.len()];
    for (i, node) in b.nodes.iter().enumerate() {
        producer[node.out.0] = Some(i);
    }
    for (i, node) in b.nodes.iter().enumerate() {
        let (lo, hi, x) = match node.op {
            Op::Unary {
                op: UnaryOp::Relu,
                x,
            } => (0.0, f32::INFINITY, x),
            Op::Unary {
                op: UnaryOp::Clamp(lo, hi),
                x,
            } => (lo, hi, x),
            _ => continue,
        };
        let s = b.tensors[x.0].storage;
        let Some(j) = producer[x.0] else { continue };
        let fusable = matches!(b.nodes[j].op, Op::Conv { .. } | Op::Matmul { .. })
            && matches!(b.storages[s].kind, StorageKind::Temp)
            && readers[s] == 1
            && views[s] == 1
            && fusion.act[j].is_none();
        if fusable {
            fusion.act[j] = Some((lo, hi, node.out));
            fusion.skip[i] = true;
        }
    }
    fusion
}

/// Lowers every node, in order.
pub(crate) fn lower(b: &GraphBuilder, limits: &Limits, subgroups: bool) -> Result<Plan> {
    let mut l = Lowerer {
        b,
        limits,
        storages: b.storages.clone(),
        out: Vec::new(),
        node: 0,
        op: "",
        act: None,
        subgroups,
    };
    let fusion = fuse_activations(b);
    for (i, node) in b.nodes.iter().enumerate() {
        if fusion.skip[i] {
            continue;
        }
        l.node = i;
        l.op = op_name(&node.op);
        l.act = fusion.act[i];
        l.lower_node(&node.op, node.out)?;
    }
    Ok(Plan {
        storages: l.storages,
        dispatches: l.out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collapse_merges_contiguous_dims_and_drops_ones() {
        let dims = [2, 1, 3, 4];
        let s = contiguous_strides(&dims);
        let (d, st) = collapse(&dims, &[s.clone(), s]);
        assert_eq!(d, vec![24]);
        assert_eq!(st, vec![vec![1], vec![1]]);
        // A broadcast operand keeps its dims apart.
        let (d, st) = collapse(&[2, 3, 4], &[vec![12, 4, 1], vec![0, 4, 1]]);
        assert_eq!(d, vec![2, 12]);
        assert_eq!(st, vec![vec![12, 1], vec![0, 1]]);
    }

    #[test]
    fn strides_are_row_major() {
        assert_eq!(contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(contiguous_strides(&[5]), vec![1]);
    }
}
