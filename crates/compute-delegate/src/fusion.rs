//! Epilogue and prologue fusions, passes over the graph IR like those of `passes.rs`: an
//! operation computed by the dispatch before or after it, one dispatch where there were two
//! or four.
//!
//! - [`GraphBuilder::with_residuals_fused`]: `y = x W^T` followed by `y + r` (a residual, or
//!   a bias added as its own node) adds `r` as the product stores `y`;
//! - [`GraphBuilder::with_norms_fused`]: an RMS norm read only by products of one to four
//!   rows (packed 4-bit ones, or `linear`s on float weights), computed by each of them as it
//!   loads `x`;
//! - [`GraphBuilder::with_gated_products_fused`]: `silu(x Wg^T) * (x Wu^T)` of one to four
//!   rows (a language model's gated MLP in a decode step), on packed 4-bit or float weights,
//!   as one dispatch reading both weights;
//! - [`GraphBuilder::with_rotations_fused`]: a rotary embedding computed by its one
//!   consumer, a KV cache write (the keys rotated straight into the cache) or an attention
//!   over the cache (the queries rotated as they are loaded);
//! - [`GraphBuilder::with_cache_writes_fused`]: a KV cache write (of keys rotated on the way,
//!   or of values) of a packed 4-bit product's rows, done by the product as it stores them.
//!
//! Each applies only where the intermediate results have no other reader, are no graph
//! output, and are written by their node alone; [`crate::BuildOptions::unfused`] builds a graph
//! without them.

use crate::graph::{BinaryOp, GraphBuilder, Node, Op, TensorId, TensorInfo, UnaryOp};
use crate::kernels::{Kernel, push, push::GemvQ4Push};
use crate::lower::GEMV_MAX_ROWS;
use crate::passes::retain;

/// Who reads and writes each storage of a graph.
pub(crate) struct Uses {
    /// Reads by nodes, plus one for a graph output.
    pub(crate) readers: Vec<usize>,
    /// The nodes writing it, in order.
    pub(crate) writers: Vec<Vec<usize>>,
}

impl Uses {
    pub(crate) fn of(g: &GraphBuilder) -> Uses {
        let mut readers = vec![0usize; g.storages.len()];
        let mut writers = vec![Vec::new(); g.storages.len()];
        for (k, n) in g.nodes.iter().enumerate() {
            for t in n.op.inputs() {
                readers[g.tensors[t.0].storage] += 1;
            }
            writers[g.tensors[n.out.0].storage].push(k);
        }
        for t in &g.outputs {
            readers[g.tensors[t.0].storage] += 1;
        }
        Uses { readers, writers }
    }

    /// The node writing `t` where `t` (or the tensor it views) is an intermediate result a
    /// fusion may absorb: a storage of its own, written whole by that node alone and read
    /// once, viewed by `t` with the same last dim.
    fn sole(&self, g: &GraphBuilder, t: TensorId) -> Option<usize> {
        let st = g.tensors[t.0].storage;
        let [j] = self.writers[st][..] else {
            return None;
        };
        let out = &g.tensors[g.nodes[j].out.0];
        let whole = g.storages[st].tensor == g.nodes[j].out
            && out.numel() == g.tensors[t.0].numel()
            && out.shape.last() == g.tensors[t.0].shape.last();
        (whole && self.readers[st] == 1).then_some(j)
    }

    /// Whether every write of `t`'s storage comes before node `at`.
    fn ready_before(&self, g: &GraphBuilder, t: TensorId, at: usize) -> bool {
        self.writers[g.tensors[t.0].storage].iter().all(|&w| w < at)
    }
}

/// Whether node `n` reads or writes storage `st`.
fn touches(g: &GraphBuilder, n: &Node, st: usize) -> bool {
    g.tensors[n.out.0].storage == st || n.op.inputs().iter().any(|t| g.tensors[t.0].storage == st)
}

/// Word `field` (a byte offset) of a push block held as words.
pub(crate) fn word(push: &[u32], field: usize) -> u32 {
    push.get(field / 4).copied().unwrap_or(0)
}

fn set_word(push: &mut [u32], field: usize, v: u32) {
    if let Some(w) = push.get_mut(field / 4) {
        *w = v;
    }
}

const HAS_BIAS: usize = std::mem::offset_of!(GemvQ4Push, has_bias);
const BIAS_ROW: usize = std::mem::offset_of!(GemvQ4Push, bias_row);
const COL_GROUPS: usize = std::mem::offset_of!(GemvQ4Push, col_groups);
const N: usize = std::mem::offset_of!(GemvQ4Push, n);
const EPS: usize = std::mem::offset_of!(GemvQ4Push, eps);

/// Where a product kernel that takes an RMS norm prologue binds and flags it (`x` is input 0).
struct NormSlots {
    /// Its inputs.
    inputs: usize,
    /// The input its bias is bound to.
    bias: usize,
    /// The input the norm's weights are bound to.
    weights: usize,
    /// Its `NORM` specialization constant.
    flag: usize,
    /// Inputs bound to `x` until a pass gives them (a cache's position and rotary tables).
    spare: &'static [usize],
    /// Byte offset of its push block's bias flag.
    has_bias: usize,
    /// Byte offset of its push block's epsilon.
    eps: usize,
}

impl NormSlots {
    fn of(kernel: Kernel) -> Option<NormSlots> {
        match kernel {
            Kernel::GemvQ4 => Some(NormSlots {
                inputs: 10,
                bias: 5,
                weights: 6,
                flag: 2,
                spare: &[7, 8, 9],
                has_bias: HAS_BIAS,
                eps: EPS,
            }),
            Kernel::GemvT => Some(NormSlots {
                inputs: 8,
                bias: 2,
                weights: 4,
                flag: 3,
                spare: &[5, 6, 7],
                has_bias: std::mem::offset_of!(push::GemvTPush, has_bias),
                eps: std::mem::offset_of!(push::GemvTPush, eps),
            }),
            _ => None,
        }
    }
}

/// The packed 4-bit product a kernel node is, without an epilogue: its push words.
fn plain_q4(op: &Op) -> Option<&[u32]> {
    match op {
        Op::Kernel {
            kernel: Kernel::GemvQ4,
            push,
            spec,
            ..
        } if word(push, HAS_BIAS) == 0 && spec.get(1).copied().unwrap_or(0) == 0 => Some(push),
        _ => None,
    }
}

/// A `gemv_t.comp` node without an epilogue or a gated product (a norm prologue is fine):
/// one that may store its rows into a KV cache instead.
fn plain_gemv_t(op: &Op) -> bool {
    use push::GemvTPush as P;
    match op {
        Op::Kernel {
            kernel: Kernel::GemvT,
            push,
            spec,
            ..
        } => {
            let spec = |i: usize| spec.get(i).copied().unwrap_or(0);
            word(push, std::mem::offset_of!(P, has_bias)) == 0
                && word(push, std::mem::offset_of!(P, cache_rows)) == 0
                && spec(1) == 0
                && spec(2) == 0
        }
        _ => false,
    }
}

impl GraphBuilder {
    /// The graph with each sum of a product's result and another tensor `r` of its dtype
    /// computed by the product as it stores its result: a `linear` of one row without a bias
    /// (`r` of its `n` elements becomes the bias), a product without a bias and `r` a bias of
    /// `n` broadcast over its rows (a GPT-2 `Conv1D`'s `addmm`, exported as a product and a
    /// sum), or a packed 4-bit product (`r` of the output's shape, or a bias of `n`). `r` must be complete before the product runs.
    /// `None` where there is none.
    pub(crate) fn with_residuals_fused(&self) -> Option<GraphBuilder> {
        let uses = Uses::of(self);
        let mut g = self.clone();
        let mut drop = vec![false; self.nodes.len()];
        for (k, node) in self.nodes.iter().enumerate() {
            let Op::Binary {
                op: BinaryOp::Add,
                a,
                b,
            } = node.op
            else {
                continue;
            };
            for (p, r) in [(a, b), (b, a)] {
                let Some(j) = uses.sole(self, p) else {
                    continue;
                };
                let (pi, ri, oi) = (
                    &self.tensors[p.0],
                    &self.tensors[r.0],
                    &self.tensors[node.out.0],
                );
                let fits = !drop[j]
                    && pi.shape == oi.shape
                    && pi.dtype == oi.dtype
                    && ri.dtype == oi.dtype
                    && uses.ready_before(self, r, j)
                    && !self.nodes[j + 1..k]
                        .iter()
                        .any(|n| touches(self, n, oi.storage));
                if !fits {
                    continue;
                }
                if let Some(op) = g.residual_epilogue(&self.nodes[j].op, r, oi) {
                    g.nodes[j].op = op;
                    g.nodes[j].out = node.out;
                    drop[k] = true;
                    break;
                }
            }
        }
        retain(g, &drop)
    }

    /// Product `op` adding `r` to its result `out` as it stores it; `None` where it cannot.
    fn residual_epilogue(&mut self, op: &Op, r: TensorId, out: &TensorInfo) -> Option<Op> {
        let n = *out.shape.last()?;
        let rows = out.numel() / n.max(1);
        let (rn, same) = (
            self.tensors[r.0].numel(),
            self.tensors[r.0].shape == out.shape,
        );
        let bias_of_n = rn == n
            && self.tensors[r.0]
                .shape
                .iter()
                .rev()
                .skip(1)
                .all(|&d| d == 1);
        match op {
            &Op::Matmul {
                a,
                b,
                bias: None,
                linear,
                norm: None,
            } if (linear && rows == 1 && rn == n) || bias_of_n => {
                let info = self.tensors[r.0].clone();
                self.tensors.push(TensorInfo {
                    name: format!("{}_as_bias", info.name),
                    shape: vec![n],
                    ..info
                });
                Some(Op::Matmul {
                    a,
                    b,
                    bias: Some(TensorId(self.tensors.len() - 1)),
                    linear,
                    norm: None,
                })
            }
            Op::Kernel { inputs, .. } if plain_q4(op).is_some() && (same || bias_of_n) => {
                let mut op = op.clone();
                if let Op::Kernel {
                    inputs: i, push, ..
                } = &mut op
                {
                    i[5] = r;
                    set_word(push, HAS_BIAS, 1);
                    set_word(push, BIAS_ROW, if bias_of_n { 0 } else { n as u32 });
                }
                debug_assert_eq!(inputs.len(), 10);
                Some(op)
            }
            _ => None,
        }
    }

    /// The graph with each `silu(x Wg^T) * (x Wu^T)` of one to four rows, on packed 4-bit
    /// weights or float ones (two products of one `x`, of equal shapes, the SiLU fused
    /// already), as one dispatch that reads both weights. `None` where there is none.
    pub(crate) fn with_gated_products_fused(&self) -> Option<GraphBuilder> {
        let uses = Uses::of(self);
        let mut g = self.clone();
        let mut drop = vec![false; self.nodes.len()];
        for (k, node) in self.nodes.iter().enumerate() {
            let Op::Binary {
                op: BinaryOp::Mul,
                a,
                b,
            } = node.op
            else {
                continue;
            };
            let found = [(a, b), (b, a)]
                .into_iter()
                .find_map(|(s, u)| self.gated_pair(&uses, s, u, &drop));
            let Some(([js, jg, ju], fused)) = found else {
                continue;
            };
            for j in [js, jg, ju] {
                drop[j] = true;
            }
            g.nodes[k].op = fused;
        }
        retain(g, &drop)
    }

    /// `s = silu(x Wg^T)` and `u = x Wu^T` as one gated product: the nodes it replaces (the
    /// SiLU, the gate's and the up's products) and the fused op.
    fn gated_pair(
        &self,
        uses: &Uses,
        s: TensorId,
        u: TensorId,
        drop: &[bool],
    ) -> Option<([usize; 3], Op)> {
        let js = uses.sole(self, s)?;
        let Op::Unary {
            op: UnaryOp::Silu,
            x: gate,
        } = self.nodes[js].op
        else {
            return None;
        };
        let (jg, ju) = (uses.sole(self, gate)?, uses.sole(self, u)?);
        let (gi, ui) = (&self.tensors[gate.0], &self.tensors[u.0]);
        if gi.shape != ui.shape || gi.dtype != ui.dtype || [js, jg, ju].iter().any(|&j| drop[j]) {
            return None;
        }
        let (g, up) = (&self.nodes[jg].op, &self.nodes[ju].op);
        let fused = gated_q4(g, up, |a, b| self.same_data(a, b))
            .or_else(|| self.gated_linear(g, up, gi))?;
        let x = fused.inputs()[0];
        uses.ready_before(self, x, jg.min(ju))
            .then_some(([js, jg, ju], fused))
    }

    /// Whether `a` and `b` are one tensor, or views of one storage of the same shape.
    fn same_data(&self, a: TensorId, b: TensorId) -> bool {
        let (ai, bi) = (&self.tensors[a.0], &self.tensors[b.0]);
        a == b || (ai.storage == bi.storage && ai.shape == bi.shape)
    }

    /// Two one- to four-row `linear`s of one `x`, without biases, as one gated `gemv_t.comp`.
    fn gated_linear(&self, g: &Op, u: &Op, out: &TensorInfo) -> Option<Op> {
        let (
            &Op::Matmul {
                a,
                b: wg,
                bias: None,
                linear: true,
                norm: None,
            },
            &Op::Matmul {
                a: ua,
                b: wu,
                bias: None,
                linear: true,
                norm: None,
            },
        ) = (g, u)
        else {
            return None;
        };
        if !self.same_data(a, ua) {
            return None;
        }
        self.gemv_t_node("gated_linear", a, (wg, Some(wu)), None, out)
    }

    /// The `gemv_t.comp` node of `x W^T (+ bias)` writing `out`, for one to four rows of `x`
    /// (`k` a multiple of 4, `w` of `[n][k]`); with an up matrix `w2`, the gated product
    /// `silu(x W^T) * (x W2^T)` (its `GLU`). `None` where it does not fit.
    fn gemv_t_node(
        &self,
        name: &'static str,
        x: TensorId,
        (w, up): (TensorId, Option<TensorId>),
        bias: Option<TensorId>,
        out: &TensorInfo,
    ) -> Option<Op> {
        let (n, k) = (*out.shape.last()?, *self.tensors[x.0].shape.last()?);
        let rows = out.numel() / n.max(1);
        let w2 = up.unwrap_or(w);
        let fits = [w, w2].iter().all(|t| self.tensors[t.0].shape == [n, k])
            && bias.is_none_or(|t| self.tensors[t.0].numel() == n)
            && (1..=GEMV_MAX_ROWS).contains(&rows)
            && k % 4 == 0;
        let words = |v: usize| u32::try_from(v).ok();
        let push = push::GemvTPush {
            m: words(rows)?,
            n: words(n)?,
            k: words(k)?,
            sa_m: words(k)?,
            sb_n: words(k)?,
            sc_m: words(n)?,
            has_bias: u32::from(bias.is_some()),
            ..Default::default()
        };
        // Unused bindings (the bias, B2, the norm's weights, a cache's position and rotary
        // tables) are bound to x or w.
        fits.then(|| Op::Kernel {
            name,
            kernel: Kernel::GemvT,
            inputs: vec![x, w, bias.unwrap_or(x), w2, x, x, x, x],
            push: bytemuck::cast_slice(bytemuck::bytes_of(&push)).to_vec(),
            groups: Some(n.div_ceil(4) as u64),
            precision: None,
            spec: vec![rows as u32, 0, u32::from(up.is_some()), 0],
        })
    }
}

/// Two plain packed 4-bit products of one `x` and equal parameters as one gated product;
/// `same` tells whether two tensors hold the same data.
fn gated_q4(g: &Op, u: &Op, same: impl Fn(TensorId, TensorId) -> bool) -> Option<Op> {
    let (
        Op::Kernel {
            inputs: gi, spec, ..
        },
        Op::Kernel { inputs: ui, .. },
    ) = (g, u)
    else {
        return None;
    };
    let (gp, up) = (plain_q4(g)?, plain_q4(u)?);
    if gp != up || !same(gi[0], ui[0]) {
        return None;
    }
    let mut push = gp.to_vec();
    let col_groups = word(&push, N).div_ceil(4);
    set_word(&mut push, COL_GROUPS, col_groups);
    Some(Op::Kernel {
        name: "gated_linear_q4gsw",
        kernel: Kernel::GemvQ4,
        inputs: vec![
            gi[0], gi[1], gi[2], ui[1], ui[2], gi[0], gi[0], gi[0], gi[0], gi[0],
        ],
        push,
        groups: Some(u64::from(col_groups)),
        precision: None,
        spec: vec![spec.first().copied().unwrap_or(1), 1, 0],
    })
}

impl GraphBuilder {
    /// The graph with each RMS norm whose result only products of one to four rows read (as
    /// their `x`: packed 4-bit ones, float `linear`s, gated products) computed by those
    /// products as they load it: the norm's node is dropped, each
    /// product reads the norm's input and weights. `None` where there is none.
    pub(crate) fn with_norms_fused(&self) -> Option<GraphBuilder> {
        let uses = Uses::of(self);
        let mut g = self.clone();
        let mut drop = vec![false; self.nodes.len()];
        for (j, node) in self.nodes.iter().enumerate() {
            let Op::LayerNorm {
                x,
                weight: Some(w),
                bias: None,
                d,
                eps,
                rms: true,
                plane: 0,
            } = node.op
            else {
                continue;
            };
            let st = self.tensors[node.out.0].storage;
            let own = self.storages[st].tensor == node.out && uses.writers[st] == [j];
            if !own || self.tensors[x.0].shape.last() != Some(&d) {
                continue;
            }
            // Every read of the result: a product's `x` (or its unused bindings), each as the
            // kernel node it becomes.
            let readers: Option<Vec<(usize, Op)>> = self
                .nodes
                .iter()
                .enumerate()
                .filter(|&(k, n)| k != j && touches(self, n, st))
                .map(|(k, n)| self.normable(n, st).map(|op| (k, op)))
                .collect();
            let Some(readers) = readers else {
                continue;
            };
            let reads: usize = readers
                .iter()
                .map(|(k, _)| {
                    self.nodes[*k]
                        .op
                        .inputs()
                        .iter()
                        .filter(|t| self.tensors[t.0].storage == st)
                        .count()
                })
                .sum();
            if readers.is_empty() || reads != uses.readers[st] || !uses.ready_before(self, x, j) {
                continue;
            }
            for (k, mut op) in readers {
                if let Op::Kernel {
                    kernel,
                    inputs,
                    push,
                    spec,
                    ..
                } = &mut op
                {
                    for t in inputs
                        .iter_mut()
                        .filter(|t| self.tensors[t.0].storage == st)
                    {
                        *t = x;
                    }
                    if let Some(at) = NormSlots::of(*kernel) {
                        inputs[at.weights] = w;
                        set_word(push, at.eps, eps.to_bits());
                        spec.resize(at.flag + 1, 0);
                        spec[at.flag] = 1;
                    }
                }
                g.nodes[k].op = op;
            }
            drop[j] = true;
        }
        retain(g, &drop)
    }

    /// Node `n` as the product kernel a norm writing storage `st` may be fused into: a packed
    /// 4-bit product or a `gemv_t.comp` one (a one- to four-row `linear` becomes one), without
    /// a norm, reading `st` only as its `x` (and its unused bindings). `None` otherwise.
    fn normable(&self, n: &Node, st: usize) -> Option<Op> {
        let op = match &n.op {
            Op::Matmul { .. } => self.linear_as_gemv_t(&n.op, &self.tensors[n.out.0])?,
            op => op.clone(),
        };
        let Op::Kernel {
            kernel,
            inputs,
            push,
            spec,
            ..
        } = &op
        else {
            return None;
        };
        let slots = NormSlots::of(*kernel)?;
        let at = |t: &TensorId| self.tensors[t.0].storage == st;
        let unused_bias = word(push, slots.has_bias) == 0;
        let fits = spec.get(slots.flag).copied().unwrap_or(0) == 0
            && inputs.len() == slots.inputs
            && at(&inputs[0])
            && inputs.iter().enumerate().all(|(p, t)| {
                !at(t)
                    || p == 0
                    || (p == slots.bias && unused_bias)
                    || p == slots.weights
                    || slots.spare.contains(&p)
            });
        fits.then_some(op)
    }

    /// A one- to four-row `linear` (`x` of `k` a row, `k` a multiple of 4, weights `[n][k]`)
    /// as the `gemv_t.comp` node the lowering makes of it; `None` for another op.
    fn linear_as_gemv_t(&self, op: &Op, out: &TensorInfo) -> Option<Op> {
        let &Op::Matmul {
            a,
            b,
            bias,
            linear: true,
            norm: None,
        } = op
        else {
            return None;
        };
        self.gemv_t_node("linear", a, (b, None), bias, out)
    }
}

impl GraphBuilder {
    /// The graph with each rotary embedding (`rope.comp`) whose result one consumer reads
    /// computed by that consumer: a KV cache write (the rotation stores its rows into the
    /// cache, one dispatch where there were two) or an attention over a cache (which rotates
    /// its queries as it loads them). `None` where there is none.
    pub(crate) fn with_rotations_fused(&self) -> Option<GraphBuilder> {
        let uses = Uses::of(self);
        let mut g = self.clone();
        let mut drop = vec![false; self.nodes.len()];
        for (k, node) in self.nodes.iter().enumerate() {
            let Op::Kernel {
                kernel: Kernel::CacheWrite | Kernel::AttendCache | Kernel::AttendSplit,
                inputs,
                ..
            } = &node.op
            else {
                continue;
            };
            let Some(j) = inputs.first().and_then(|&t| uses.sole(self, t)) else {
                continue;
            };
            let Some(rope) = self.plain_rope(&uses, j, inputs[0]) else {
                continue;
            };
            if drop[j] {
                continue;
            }
            if let Some(op) = rotated(&node.op, rope) {
                g.nodes[k].op = op;
                drop[j] = true;
            }
        }
        retain(g, &drop)
    }

    /// Node `j` as a rotation a consumer may take over: a `rope.comp` node without a cache
    /// whose result `t` is (in full, in its shape) and whose operands no later node writes.
    fn plain_rope(&self, uses: &Uses, j: usize, t: TensorId) -> Option<Rotation<'_>> {
        let Op::Kernel {
            kernel: Kernel::Rope,
            inputs,
            push,
            ..
        } = &self.nodes[j].op
        else {
            return None;
        };
        let fits = word(push, ROPE_CACHE_ROWS) == 0
            && inputs.len() == 4
            && self.tensors[self.nodes[j].out.0].shape == self.tensors[t.0].shape
            && inputs[..3].iter().all(|&i| uses.ready_before(self, i, j));
        fits.then_some(Rotation {
            x: inputs[0],
            cos: inputs[1],
            sin: inputs[2],
            push,
        })
    }
}

/// A rotation's operands and push words (`push::RopePush`).
struct Rotation<'a> {
    x: TensorId,
    cos: TensorId,
    sin: TensorId,
    push: &'a [u32],
}

const ROPE_S: usize = std::mem::offset_of!(push::RopePush, s);
const ROPE_H: usize = std::mem::offset_of!(push::RopePush, h);
const ROPE_D: usize = std::mem::offset_of!(push::RopePush, d);
const ROPE_TOTAL: usize = std::mem::offset_of!(push::RopePush, total);
const ROPE_PER_HEAD: usize = std::mem::offset_of!(push::RopePush, per_head);
const ROPE_CACHE_ROWS: usize = std::mem::offset_of!(push::RopePush, cache_rows);

/// Consumer `op` (a cache write or an attention over a cache, reading the rotation's result
/// as its input 0) with the rotation computed in it; `None` where it does not fit.
fn rotated(op: &Op, rope: Rotation<'_>) -> Option<Op> {
    let Op::Kernel {
        name,
        kernel,
        inputs,
        push,
        groups,
        precision,
        spec,
    } = op
    else {
        return None;
    };
    match kernel {
        Kernel::CacheWrite => {
            let cw = |f: usize| word(push, f);
            use push::CacheWritePush as P;
            let fits = cw(std::mem::offset_of!(P, total)) == word(rope.push, ROPE_TOTAL)
                && cw(std::mem::offset_of!(P, s)) == word(rope.push, ROPE_S)
                && cw(std::mem::offset_of!(P, hd))
                    == word(rope.push, ROPE_H) * word(rope.push, ROPE_D)
                && inputs.len() == 2;
            let mut words = rope.push.to_vec();
            set_word(
                &mut words,
                ROPE_CACHE_ROWS,
                cw(std::mem::offset_of!(P, max_rows)),
            );
            set_word(
                &mut words,
                std::mem::offset_of!(push::RopePush, plus),
                cw(std::mem::offset_of!(P, plus)),
            );
            set_word(
                &mut words,
                std::mem::offset_of!(push::RopePush, has_pos),
                cw(std::mem::offset_of!(P, has_pos)),
            );
            fits.then(|| Op::Kernel {
                name: "apply_rotary_emb_into_cache",
                kernel: Kernel::Rope,
                inputs: vec![rope.x, rope.cos, rope.sin, inputs[1]],
                push: words,
                groups: None,
                precision: None,
                spec: vec![],
            })
        }
        Kernel::AttendCache | Kernel::AttendSplit => {
            use push::AttendCachePush as P;
            let fits = word(push, std::mem::offset_of!(P, hq)) == word(rope.push, ROPE_H)
                && word(push, std::mem::offset_of!(P, d)) == word(rope.push, ROPE_D)
                && word(push, std::mem::offset_of!(P, s)) == word(rope.push, ROPE_S)
                && inputs.len() == 6
                && spec.first() == Some(&0);
            let mut inputs = inputs.clone();
            inputs[0] = rope.x;
            inputs[4] = rope.cos;
            inputs[5] = rope.sin;
            let mut spec = spec.clone();
            spec[0] = 1 + word(rope.push, ROPE_PER_HEAD);
            fits.then(|| Op::Kernel {
                name,
                kernel: *kernel,
                inputs,
                push: push.clone(),
                groups: *groups,
                precision: *precision,
                spec,
            })
        }
        _ => None,
    }
}

impl GraphBuilder {
    /// The graph with each KV cache write whose new rows are a packed 4-bit product's result,
    /// read by nothing else, done by that product (`gemv_q4.comp`'s CACHE epilogue): a
    /// `cache_write.comp` node, or a rotation into the cache (`rope.comp` with cache rows),
    /// whose rotation the product then does too. One dispatch, and one level of the step's
    /// dependences, where there were two. `None` where there is none.
    pub(crate) fn with_cache_writes_fused(&self) -> Option<GraphBuilder> {
        let uses = Uses::of(self);
        let mut g = self.clone();
        let mut drop = vec![false; self.nodes.len()];
        for (k, node) in self.nodes.iter().enumerate() {
            let Some(write) = CacheWrite::of(&node.op) else {
                continue;
            };
            let Some((j, product)) = self.sole_product(&uses, write.new) else {
                continue;
            };
            if drop[j] || drop[k] {
                continue;
            }
            if !product
                .inputs()
                .iter()
                .all(|&t| uses.ready_before(self, t, j))
            {
                continue;
            }
            let Some(op) = self.product_into_cache(&product, &write) else {
                continue;
            };
            // At the product's place where the position and tables are ready by then (every
            // layer after the first) and nothing between touches the cache, else at the
            // write's: the product's own operands are all written before it.
            let ready = |at: usize| op.inputs().iter().all(|&t| uses.ready_before(self, t, at));
            let cache = self.tensors[node.out.0].storage;
            let between = (j + 1..k).any(|m| touches(self, &self.nodes[m], cache));
            let at = if ready(j) && !between {
                j
            } else if ready(k) {
                k
            } else {
                continue;
            };
            g.nodes[at] = Node { op, out: node.out };
            drop[if at == j { k } else { j }] = true;
        }
        retain(g, &drop)
    }

    /// The node writing `t`'s storage, and its op as a product kernel, where it is a packed
    /// 4-bit product or a `gemv_t.comp` one (a one- to four-row `linear` becomes one) without
    /// an epilogue, whose whole result, read once, `t` is (in any shape).
    fn sole_product(&self, uses: &Uses, t: TensorId) -> Option<(usize, Op)> {
        let st = self.tensors[t.0].storage;
        let [j] = uses.writers[st][..] else {
            return None;
        };
        let out = self.nodes[j].out;
        let whole = self.storages[st].tensor == out
            && self.tensors[out.0].numel() == self.tensors[t.0].numel()
            && uses.readers[st] == 1;
        if !whole {
            return None;
        }
        let op = match &self.nodes[j].op {
            op @ Op::Matmul { .. } => self.linear_as_gemv_t(op, &self.tensors[out.0])?,
            op => op.clone(),
        };
        (plain_q4(&op).is_some() || plain_gemv_t(&op)).then_some((j, op))
    }

    /// Product `op` storing its rows into `write`'s cache; `None` where the shapes do not fit
    /// (a batch of one, `n` = heads x head size, even heads for a rotation).
    fn product_into_cache(&self, op: &Op, write: &CacheWrite) -> Option<Op> {
        let Op::Kernel {
            kernel,
            inputs,
            push,
            spec,
            groups,
            ..
        } = op
        else {
            return None;
        };
        let slots = CacheSlots::of(*kernel)?;
        let new = &self.tensors[write.new.0];
        let (&[1, s, h, d], true) = (&new.shape[..], inputs.len() == slots.inputs) else {
            return None;
        };
        let rows = spec.first().copied().unwrap_or(1) as usize;
        if rows != s || word(push, slots.n) as usize != h * d || d % 2 != 0 {
            return None;
        }
        let mut words = push.to_vec();
        let [cache_rows, heads, head_d, plus, has_pos, rope] = slots.fields;
        let mut at = |field: usize, v: u32| set_word(&mut words, field, v);
        at(cache_rows, write.max_rows);
        at(heads, h as u32);
        at(head_d, d as u32);
        at(plus, write.plus);
        at(has_pos, write.has_pos);
        at(rope, write.rope.map_or(0, |r| 1 + r.per_head));
        let mut inputs = inputs.clone();
        inputs[slots.pos] = write.pos;
        if let Some(r) = &write.rope {
            inputs[slots.pos + 1] = r.cos;
            inputs[slots.pos + 2] = r.sin;
        }
        Some(Op::Kernel {
            name: slots.names[usize::from(write.rope.is_some())],
            kernel: *kernel,
            inputs,
            push: words,
            groups: *groups,
            precision: None,
            spec: spec.clone(),
        })
    }
}

/// Where a product kernel that may store its rows into a KV cache (its CACHE epilogue) takes
/// the cache's parameters.
struct CacheSlots {
    /// Its inputs.
    inputs: usize,
    /// The input of the position; the rotary tables' cos and sin follow it.
    pos: usize,
    /// Byte offset of its push block's column count.
    n: usize,
    /// Byte offsets of its push block's `cache_rows`, `heads`, `head_d`, `plus`, `has_pos`
    /// and `rope`.
    fields: [usize; 6],
    /// The fused node's names: plain, and rotated on the way.
    names: [&'static str; 2],
}

impl CacheSlots {
    fn of(kernel: Kernel) -> Option<CacheSlots> {
        use push::{GemvQ4Push as Q, GemvTPush as T};
        use std::mem::offset_of;
        match kernel {
            Kernel::GemvQ4 => Some(CacheSlots {
                inputs: 10,
                pos: 7,
                n: offset_of!(Q, n),
                fields: [
                    offset_of!(Q, cache_rows),
                    offset_of!(Q, heads),
                    offset_of!(Q, head_d),
                    offset_of!(Q, plus),
                    offset_of!(Q, has_pos),
                    offset_of!(Q, rope),
                ],
                names: ["linear_q4gsw_into_cache", "linear_q4gsw_rotated_into_cache"],
            }),
            Kernel::GemvT => Some(CacheSlots {
                inputs: 8,
                pos: 5,
                n: offset_of!(T, n),
                fields: [
                    offset_of!(T, cache_rows),
                    offset_of!(T, heads),
                    offset_of!(T, head_d),
                    offset_of!(T, plus),
                    offset_of!(T, has_pos),
                    offset_of!(T, rope),
                ],
                names: ["linear_into_cache", "linear_rotated_into_cache"],
            }),
            _ => None,
        }
    }
}

/// A KV cache write's new rows, position and cache, with its rotation where it has one.
struct CacheWrite {
    new: TensorId,
    pos: TensorId,
    max_rows: u32,
    plus: u32,
    has_pos: u32,
    rope: Option<CacheRope>,
}

/// A rotation into the cache: its tables, and whether they hold a row per head.
#[derive(Clone, Copy)]
struct CacheRope {
    cos: TensorId,
    sin: TensorId,
    per_head: u32,
}

impl CacheWrite {
    fn of(op: &Op) -> Option<CacheWrite> {
        let Op::Kernel {
            kernel,
            inputs,
            push,
            ..
        } = op
        else {
            return None;
        };
        match (kernel, &inputs[..]) {
            (Kernel::CacheWrite, &[new, pos]) => {
                use push::CacheWritePush as P;
                Some(CacheWrite {
                    new,
                    pos,
                    max_rows: word(push, std::mem::offset_of!(P, max_rows)),
                    plus: word(push, std::mem::offset_of!(P, plus)),
                    has_pos: word(push, std::mem::offset_of!(P, has_pos)),
                    rope: None,
                })
            }
            (Kernel::Rope, &[new, cos, sin, pos]) if word(push, ROPE_CACHE_ROWS) > 0 => {
                use push::RopePush as P;
                Some(CacheWrite {
                    new,
                    pos,
                    max_rows: word(push, ROPE_CACHE_ROWS),
                    plus: word(push, std::mem::offset_of!(P, plus)),
                    has_pos: word(push, std::mem::offset_of!(P, has_pos)),
                    rope: Some(CacheRope {
                        cos,
                        sin,
                        per_head: word(push, ROPE_PER_HEAD),
                    }),
                })
            }
            _ => None,
        }
    }
}
