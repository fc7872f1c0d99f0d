//! Attention fusion, a pass over the graph IR like those of `fusion.rs`: the composition of
//! scaled dot-product attention that exporters write out, `softmax(scale * Q K^T + biases) V`
//! (a matmul, scalar products, added biases or masks, a softmax, perhaps PyTorch's guard for
//! rows with every score `-inf`, then a matmul), becomes one `attend.comp` dispatch that never
//! writes the score matrix to memory.
//!
//! Its operands are read through strides: permutes, slices and views between the tensors the
//! graph computes and the attention's operands (heads split from a fused QKV product, keys
//! transposed) are folded into the kernel's indexing, and the copies that made them go when
//! nothing else reads them.
//!
//! [`GraphBuilder::with_attention_fused`] applies where the operands' batch dims fit the
//! kernel's three (after merging), the head sizes are multiples of 4 up to [`MAX_HEAD`], every
//! operand has the output's dtype, and every tensor the kernel reads is written once, before
//! it runs. Attentions of more than [`MAX_KEYS`] keys fuse only where the cooperative-matrix
//! kernel (`attend_coop2.comp`, which tiles any number of keys) takes them.

use crate::fusion::Uses;
use crate::graph::{BinaryOp, Compare, GraphBuilder, Op, StorageKind, TensorId, UnaryOp};
use crate::kernels::Kernel;
use crate::kernels::push::{AttendCachePush, AttendPush};
use crate::layout::{row_major, view_strides, without_unread};
use vk_core::HostTensor;

/// The largest head size (of queries and keys, and of values) the fused kernel takes; head
/// sizes are multiples of 4.
pub(crate) const MAX_HEAD: usize = 128;
/// Query rows of a work group (`attend.comp`'s `BQ`). 32 rather than 16: each work group
/// loads every block of keys and values, so half the work groups load half as much (on an
/// H200, ViT-B's 12 attentions 581 → 492 µs, BERT's 374 → 341 µs).
const QUERY_ROWS: usize = 32;
/// Threads of a query row (`attend.comp`'s `LANES`).
const LANES: usize = 4;
/// Added biases the kernel takes.
const MAX_BIASES: usize = 2;
/// Keys past which the products and softmax stay, unless the cooperative-matrix kernel takes
/// the attention: `attend.comp`'s scalar arithmetic loses to the matrix kernels there (on an
/// H200, 1500 keys of 64: 852 µs against 500 µs in fp32).
pub(crate) const MAX_KEYS: usize = 512;

/// What takes an attention of more than [`MAX_KEYS`] keys: given the graph and the fused
/// `attend.comp` node, that node on the cooperative-matrix kernel, if it runs there.
pub(crate) type LongAttention<'a> = &'a dyn Fn(&GraphBuilder, &Op) -> Option<Op>;

/// An operand of the fused kernel: its elements `(b, row, col)` in `src`'s storage at `off`,
/// with the batch dims (size, stride; outermost first) of its own frame, then (after
/// [`one_frame`]) of the kernel's three.
struct Operand {
    src: TensorId,
    off: usize,
    batch: Vec<(usize, usize)>,
    row: usize,
    col: usize,
}

/// What a match found: the operands (q, k, v, the biases) and what the kernel computes.
struct Attention {
    q: Operand,
    k: Operand,
    v: Operand,
    biases: Vec<Operand>,
    scale: f32,
    guard: bool,
    d: usize,
    e: usize,
    sq: usize,
    sk: usize,
}

/// A permute the kernel writes in its place: its node, its result, and the attention's result
/// in a shape of its own with its strides in the permute's result.
type Permuted = (usize, TensorId, Vec<usize>, Vec<usize>);

impl GraphBuilder {
    /// The graph with each attention composition ending in node `k`'s matmul computed by one
    /// `attend.comp` dispatch (see the module's header), its blocks of keys sized to fit
    /// `shared_bytes` of shared memory; those of more than [`MAX_KEYS`] keys only where `long`
    /// moves them onto the matrix kernel. `None` where there is none.
    pub(crate) fn with_attention_fused(
        &self,
        shared_bytes: u32,
        long: LongAttention<'_>,
    ) -> Option<GraphBuilder> {
        let uses = Uses::of(self);
        let mut g = self.clone();
        let mut absorbed = vec![false; self.nodes.len()];
        let mut fused = false;
        let mut gone = vec![false; self.nodes.len()];
        for k in 0..self.nodes.len() {
            let Some((found, nodes)) = self.attention_at(&uses, k) else {
                continue;
            };
            let permuted = self.permuted_output(&uses, k);
            let many_keys = found.sk > MAX_KEYS;
            if many_keys && self.tensors[self.nodes[k].out.0].dtype != vk_core::DType::F16 {
                continue;
            }
            let Some(op) = g.attend_op(found, k, permuted.as_ref(), shared_bytes) else {
                continue;
            };
            let op = match many_keys {
                true => match long(&g, &op) {
                    Some(on_matrices) => on_matrices,
                    None => continue,
                },
                false => op,
            };
            g.nodes[k].op = op;
            if let Some((r, p, _, _)) = permuted {
                // The kernel writes the permute's result in its place.
                g.nodes[k].out = p;
                gone[r] = true;
            }
            for j in nodes {
                absorbed[j] = true;
            }
            fused = true;
        }
        fused.then(|| without_unread(g, &absorbed, gone)).flatten()
    }

    /// Where the result of node `k` is read by one permute alone (of it or a view of it) into
    /// a temporary of its own: that permute's node, its result, and a shape of node `k`'s
    /// result (its own, or the permute's input where that view merges dims) with its strides
    /// in the permute's result, so that the kernel writes the permuted layout itself.
    fn permuted_output(&self, uses: &Uses, k: usize) -> Option<Permuted> {
        let o = self.nodes[k].out;
        let st = self.tensors[o.0].storage;
        if uses.readers[st] != 1 || uses.writers[st][..] != [k] {
            return None;
        }
        let reads = |n: &crate::graph::Node| {
            n.op.inputs()
                .iter()
                .any(|t| self.tensors[t.0].storage == st)
        };
        let (r, node) = self
            .nodes
            .iter()
            .enumerate()
            .skip(k + 1)
            .find(|(_, n)| reads(n))?;
        let Op::Permute { x, ref perm } = node.op else {
            return None;
        };
        let p = node.out;
        let pst = self.tensors[p.0].storage;
        let fresh = uses.writers[pst][..] == [r]
            && self.storages[pst].tensor == p
            && matches!(self.storages[pst].kind, StorageKind::Temp)
            && self.tensors[x.0].numel() == self.tensors[o.0].numel();
        if !fresh {
            return None;
        }
        // The permute's input dim perm[i] is its result's dim i.
        let ps = row_major(&self.tensors[p.0].shape);
        let mut xs = vec![0; perm.len()];
        for (i, &d) in perm.iter().enumerate() {
            xs[d] = ps[i];
        }
        let (x_shape, o_shape) = (&self.tensors[x.0].shape, &self.tensors[o.0].shape);
        match view_strides(x_shape, &xs, o_shape) {
            Some(strides) => Some((r, p, o_shape.clone(), strides)),
            // A view merging dims no one stride steps through: the result in the permute's
            // input shape, when its rows and columns are the same.
            None if last2(x_shape) == last2(o_shape) => Some((r, p, x_shape.clone(), xs)),
            None => None,
        }
    }

    /// The attention whose last matmul is node `k`, and the nodes it absorbs.
    fn attention_at(&self, uses: &Uses, k: usize) -> Option<(Attention, Vec<usize>)> {
        let Op::Matmul {
            a: p,
            b: v,
            bias: None,
            linear: false,
            norm: None,
        } = self.nodes[k].op
        else {
            return None;
        };
        let out = &self.tensors[self.nodes[k].out.0];
        let (sq, e) = last2(&out.shape)?;
        let (_, sk) = last2(&self.tensors[p.0].shape)?;
        let mut absorbed = Vec::new();
        // The probabilities: a softmax over the keys, perhaps behind PyTorch's guard.
        let p = self.unscaled_by_one(uses, p, &mut absorbed);
        let (mut probs, mut guarded) = (p, None);
        let (j, op) = self.writer(uses, p)?;
        if let Op::Where { cond, a, b } = op {
            let zeros = self.constant_values(*a)?;
            // The probabilities are the selection's whole shape (not broadcast by it).
            let whole = self.tensors[b.0].numel() == self.tensors[p.0].numel();
            if !whole || zeros.is_empty() || zeros.iter().any(|&z| z != 0.0) {
                return None;
            }
            guarded = Some(self.guarded_scores(uses, *cond, &mut absorbed)?);
            absorbed.push(j);
            probs = *b;
        }
        let probs = self.unscaled_by_one(uses, probs, &mut absorbed);
        let (j, op) = self.writer(uses, probs)?;
        let &Op::Softmax {
            x: scores,
            dim,
            log: false,
        } = op
        else {
            return None;
        };
        let rank = self.tensors[self.nodes[j].out.0].shape.len();
        if dim + 1 != rank || last2(&self.tensors[scores.0].shape)? != (sq, sk) {
            return None;
        }
        absorbed.push(j);
        if let Some(s) = guarded {
            if self.tensors[s.0].storage != self.tensors[scores.0].storage {
                return None;
            }
        }
        let (qa, kt, biases, mut scale) = self.score_chain(uses, scores, sq, sk, &mut absorbed)?;
        let (qa, qs) = self.unscaled(uses, qa, &mut absorbed);
        let (kt, ks) = self.unscaled(uses, kt, &mut absorbed);
        scale *= qs * ks;
        let (qsq, d) = last2(&self.tensors[qa.0].shape)?;
        let (kd, ksk) = last2(&self.tensors[kt.0].shape)?;
        let (vsk, ve) = last2(&self.tensors[v.0].shape)?;
        let sizes = d % 4 == 0 && e % 4 == 0 && d <= MAX_HEAD && e <= MAX_HEAD;
        if qsq != sq || kd != d || ksk != sk || vsk != sk || ve != e || !sizes {
            return None;
        }
        let frame = |t: TensorId| self.tensors[t.0].shape.clone();
        let s_frame = batch_of(&frame(self.first_scores(uses, scores)?));
        let y_frame = batch_of(&out.shape);
        let q = self.operand(uses, qa, &s_frame, false, &mut absorbed)?;
        let kop = self.operand(uses, kt, &s_frame, true, &mut absorbed)?;
        let vop = self.operand(uses, v, &y_frame, false, &mut absorbed)?;
        let mut ops = Vec::with_capacity(biases.len());
        for (t, shape) in biases {
            ops.push(self.operand(uses, t, &batch_of(&shape), false, &mut absorbed)?);
        }
        let biases = ops;
        let dtype = out.dtype;
        let srcs = [q.src, kop.src, vop.src];
        let all = srcs.iter().chain(biases.iter().map(|b| &b.src));
        for &t in all {
            let st = self.tensors[t.0].storage;
            if self.tensors[t.0].dtype != dtype || !uses.writers[st].iter().all(|&w| w < k) {
                return None;
            }
        }
        let found = Attention {
            q,
            k: kop,
            v: vop,
            biases,
            scale,
            guard: guarded.is_some(),
            d,
            e,
            sq,
            sk,
        };
        Some((found, absorbed))
    }

    /// `(q, k^T, biases with the shapes they were added in, scale)` of the scores `s`, walking
    /// back from the softmax: added biases (at most two, after any scaling), scalar products
    /// and quotients, then the matmul.
    #[allow(clippy::type_complexity)]
    fn score_chain(
        &self,
        uses: &Uses,
        s: TensorId,
        sq: usize,
        sk: usize,
        absorbed: &mut Vec<usize>,
    ) -> Option<(TensorId, TensorId, Vec<(TensorId, Vec<usize>)>, f32)> {
        let (mut cur, mut scale, mut biases) = (s, 1.0f32, Vec::new());
        loop {
            let (j, op) = self.writer(uses, cur)?;
            let shape = &self.tensors[self.nodes[j].out.0].shape;
            if last2(shape)? != (sq, sk) {
                return None;
            }
            absorbed.push(j);
            cur = match *op {
                Op::Matmul {
                    a,
                    b,
                    bias: None,
                    linear: false,
                    norm: None,
                } => return Some((a, b, biases, scale)),
                Op::Binary {
                    op: BinaryOp::Add,
                    a,
                    b,
                } => {
                    // A bias added after a scale would be scaled by it.
                    if scale != 1.0 || biases.len() == MAX_BIASES {
                        return None;
                    }
                    let (chain, bias) = if self.leads_to_scores(uses, a, shape) {
                        (a, b)
                    } else {
                        (b, a)
                    };
                    if !self.leads_to_scores(uses, chain, shape) {
                        return None;
                    }
                    biases.push((bias, shape.clone()));
                    chain
                }
                ref op => {
                    let (x, c) = self.scaled(op)?;
                    scale *= c;
                    x
                }
            };
        }
    }

    /// Whether `t` is the running scores of an attention (of `shape`, computed by a matmul or
    /// an op of the score chain) rather than a bias added to them.
    fn leads_to_scores(&self, uses: &Uses, t: TensorId, shape: &[usize]) -> bool {
        if self.tensors[t.0].shape != shape {
            return false;
        }
        matches!(
            self.writer(uses, t),
            Some((
                _,
                Op::Matmul { linear: false, .. }
                    | Op::Binary {
                        op: BinaryOp::Add | BinaryOp::Mul | BinaryOp::Div,
                        ..
                    }
                    | Op::Unary {
                        op: UnaryOp::MulScalar(_) | UnaryOp::DivScalar(_),
                        ..
                    }
            ))
        )
    }

    /// The output of the score chain's matmul (the frame its operands were broadcast in).
    fn first_scores(&self, uses: &Uses, s: TensorId) -> Option<TensorId> {
        let mut cur = s;
        loop {
            let (j, op) = self.writer(uses, cur)?;
            cur = match *op {
                Op::Matmul { .. } => return Some(self.nodes[j].out),
                Op::Binary { a, b, .. } => {
                    let shape = self.tensors[self.nodes[j].out.0].shape.clone();
                    if self.leads_to_scores(uses, a, &shape) {
                        a
                    } else {
                        b
                    }
                }
                Op::Unary { x, .. } => x,
                _ => return None,
            };
        }
    }

    /// `t` before a scalar product that made it, and that factor (1 where there is none).
    fn unscaled(&self, uses: &Uses, t: TensorId, absorbed: &mut Vec<usize>) -> (TensorId, f32) {
        match self
            .writer(uses, t)
            .and_then(|(j, op)| Some((j, self.scaled(op)?)))
        {
            Some((j, (x, c))) => {
                absorbed.push(j);
                (x, c)
            }
            None => (t, 1.0),
        }
    }

    /// `t` before products by 1 (dropout of probability 0 at inference) that made it.
    fn unscaled_by_one(&self, uses: &Uses, t: TensorId, absorbed: &mut Vec<usize>) -> TensorId {
        let mut cur = t;
        while let Some((j, (x, 1.0))) = self
            .writer(uses, cur)
            .and_then(|(j, op)| Some((j, self.scaled(op)?)))
        {
            absorbed.push(j);
            cur = x;
        }
        cur
    }

    /// `(x, c)` where `op` is `x` times the scalar `c` (or over `1 / c`), in `x`'s shape.
    fn scaled(&self, op: &Op) -> Option<(TensorId, f32)> {
        let (x, c) = match *op {
            Op::Unary { op, x } => (x, scalar_factor(op)?),
            Op::Binary {
                op: BinaryOp::Mul,
                a,
                b,
            } => match (self.scalar_constant(a), self.scalar_constant(b)) {
                (_, Some(c)) => (a, c),
                (Some(c), _) => (b, c),
                _ => return None,
            },
            // GPT-J divides its scores by a one-element tensor.
            Op::Binary {
                op: BinaryOp::Div,
                a,
                b,
            } => match self.scalar_constant(b) {
                Some(c) if c != 0.0 => (a, 1.0 / c),
                _ => return None,
            },
            _ => return None,
        };
        Some((x, c))
    }

    /// The scores `cond` tests where it is PyTorch's safe-softmax guard: "every score of the
    /// row is -inf", as `logical_not(any(logical_not(s == -inf), -1))` (casts aside).
    fn guarded_scores(
        &self,
        uses: &Uses,
        cond: TensorId,
        absorbed: &mut Vec<usize>,
    ) -> Option<TensorId> {
        let not_all = self.step(uses, cond, UnaryOp::LogicalNot, absorbed)?;
        let count = self.step(uses, not_all, UnaryOp::Compare(Compare::Ne, 0.0), absorbed)?;
        let count = self.uncast(uses, count, absorbed)?;
        let (j, op) = self.writer(uses, count)?;
        let &Op::Reduce {
            x: live,
            ref dims,
            mean: false,
        } = op
        else {
            return None;
        };
        if dims[..] != [self.tensors[live.0].shape.len().checked_sub(1)?] {
            return None;
        }
        absorbed.push(j);
        let live = self.step(uses, live, UnaryOp::Compare(Compare::Ne, 0.0), absorbed)?;
        let dead = self.step(uses, live, UnaryOp::LogicalNot, absorbed)?;
        let eq = UnaryOp::Compare(Compare::Eq, f32::NEG_INFINITY);
        let s = self.step(uses, dead, eq, absorbed)?;
        self.uncast(uses, s, absorbed)
    }

    /// The input of the unary op `want` that wrote `t` (casts aside).
    fn step(
        &self,
        uses: &Uses,
        t: TensorId,
        want: UnaryOp,
        absorbed: &mut Vec<usize>,
    ) -> Option<TensorId> {
        let t = self.uncast(uses, t, absorbed)?;
        match self.writer(uses, t)? {
            (j, &Op::Unary { op, x }) if op == want => {
                absorbed.push(j);
                Some(x)
            }
            _ => None,
        }
    }

    /// `t` before the casts that made it (dtype changes keep a mask's and a -inf's meaning).
    fn uncast(&self, uses: &Uses, t: TensorId, absorbed: &mut Vec<usize>) -> Option<TensorId> {
        let mut cur = t;
        while let Some((j, &Op::Cast { x, .. })) = self.writer(uses, cur) {
            absorbed.push(j);
            cur = x;
        }
        Some(cur)
    }

    /// The value of a one-element float constant.
    fn scalar_constant(&self, t: TensorId) -> Option<f32> {
        match self.constant_values(t)?[..] {
            [c] => Some(c),
            _ => None,
        }
    }

    /// Operand `t` (`[batch.., rows, cols]`, or `[batch.., cols, rows]` when `transposed`)
    /// in the batch `frame` it is broadcast to.
    fn operand(
        &self,
        uses: &Uses,
        t: TensorId,
        frame: &[usize],
        transposed: bool,
        absorbed: &mut Vec<usize>,
    ) -> Option<Operand> {
        let s = self.strided_grouped(uses, t, absorbed);
        let shape = &s.shape;
        let r = shape.len();
        let stride_at = |i: usize| if shape[i] == 1 { 0 } else { s.strides[i] };
        // Biases may lack dims or broadcast rows and columns.
        let (row_dim, col_dim) = if transposed { (1, 2) } else { (2, 1) };
        let row = if r >= row_dim {
            stride_at(r - row_dim)
        } else {
            0
        };
        let col = if r >= col_dim {
            stride_at(r - col_dim)
        } else {
            0
        };
        let own = &shape[..r.saturating_sub(2)];
        if own.iter().product::<usize>() == frame.iter().product::<usize>() {
            // Not broadcast: its own dims, however the frame splits the batch.
            let batch = own
                .iter()
                .enumerate()
                .map(|(i, &n)| (n, stride_at(i)))
                .collect();
            return Some(Operand {
                src: s.src,
                off: s.off,
                batch,
                row,
                col,
            });
        }
        if own.len() > frame.len() {
            return None;
        }
        let lead = frame.len() - own.len();
        let mut batch = Vec::with_capacity(frame.len());
        for (i, &n) in frame.iter().enumerate() {
            let stride = match i.checked_sub(lead) {
                Some(o) if own[o] == n => stride_at(o),
                Some(o) if own[o] != 1 => return None,
                _ => 0,
            };
            batch.push((n, stride));
        }
        Some(Operand {
            src: s.src,
            off: s.off,
            batch,
            row,
            col,
        })
    }

    /// The kernel node computing `a` in place of node `k`: its parameter buffer added as a
    /// constant of this graph.
    fn attend_op(
        &mut self,
        a: Attention,
        k: usize,
        permuted: Option<&Permuted>,
        shared_bytes: u32,
    ) -> Option<Op> {
        let out = self.nodes[k].out;
        let info = &self.tensors[out.0];
        let (src, shape, strides) = match permuted {
            Some((_, p, shape, strides)) => (*p, shape.clone(), strides.clone()),
            None => (out, info.shape.clone(), row_major(&info.shape)),
        };
        let r = strides.len();
        let y = Operand {
            src,
            off: 0,
            batch: batch_of(&shape)
                .into_iter()
                .zip(strides.iter().copied())
                .collect(),
            row: strides[r - 2],
            col: strides[r - 1],
        };
        let (q_src, k_src, v_src) = (a.q.src, a.k.src, a.v.src);
        let bias_srcs: Vec<TensorId> = a.biases.iter().map(|b| b.src).collect();
        let nbias = bias_srcs.len();
        let mut ops: Vec<Operand> = vec![a.q, a.k, a.v];
        ops.extend(a.biases);
        ops.push(y);
        let sizes = one_frame(&mut ops)?;
        let word = |v: usize| u32::try_from(v).ok();
        // Slots q, k, v, bias 0, bias 1, y; a missing bias's are zeros.
        let y = ops.len() - 1;
        let slots = [
            Some(0),
            Some(1),
            Some(2),
            (nbias > 0).then_some(3),
            (nbias > 1).then_some(4),
            Some(y),
        ];
        let mut words = Vec::with_capacity(6 * slots.len());
        for slot in slots {
            match slot.map(|at| &ops[at]) {
                Some(o) => {
                    for v in [
                        o.off,
                        o.batch[0].1,
                        o.batch[1].1,
                        o.batch[2].1,
                        o.row,
                        o.col,
                    ] {
                        words.push(i32::try_from(v).ok()?);
                    }
                }
                None => words.extend([0; 6]),
            }
        }
        let qblocks = a.sq.div_ceil(QUERY_ROWS);
        let items = sizes.iter().product::<usize>() * qblocks;
        let block = key_block(a.d, a.e, shared_bytes)?;
        let push = AttendPush {
            items: word(items)?,
            qblocks: word(qblocks)?,
            sq: word(a.sq)?,
            sk: word(a.sk)?,
            scale: a.scale,
            guard: u32::from(a.guard),
            n1: word(sizes[1])?,
            n2: word(sizes[2])?,
            ..Default::default()
        };
        let name = format!("{}_layout", self.tensors[out.0].name);
        let table = HostTensor::from_i32(vec![words.len()], &words).ok()?;
        let layout = self.constant(&name, table).ok()?;
        let mut inputs = vec![q_src, k_src, v_src];
        for i in 0..MAX_BIASES {
            inputs.push(bias_srcs.get(i).copied().unwrap_or(q_src));
        }
        inputs.push(layout);
        let spec = [a.d, a.e, block, nbias]
            .iter()
            .map(|&v| word(v))
            .collect::<Option<Vec<_>>>()?;
        Some(Op::Kernel {
            name: "attention",
            kernel: Kernel::Attend,
            inputs,
            push: bytemuck::cast_slice(&[push]).to_vec(),
            groups: Some(items as u64),
            precision: None,
            spec,
        })
    }
}

/// Queries of a prompt's attention over a KV cache from which it takes `attend.comp`'s
/// blocks of queries (CAUSAL) rather than `attend_cache.comp`'s work group a query: each
/// block loads its keys and values once for 32 queries (on an H200, a 1B Llama's 512-token
/// prompt: its 16 attentions 8.7 → 3.5 ms, the prompt 17.9 → 12.8 ms).
pub(crate) const PROMPT_QUERIES: usize = 16;

/// Environment variable: `cache` keeps a prompt's attention over a KV cache on
/// `attend_cache.comp` (a work group a query), for comparison.
pub const PROMPT_ATTENTION_ENV: &str = "VKDELEGATE_PROMPT_ATTENTION";

impl GraphBuilder {
    /// The graph with each attention over a KV cache of [`PROMPT_QUERIES`] queries or more
    /// (`attend_cache.comp` without a rotation of its queries fused in) computed by
    /// `attend.comp` in its CAUSAL mode, its blocks of keys sized to fit `shared_bytes`.
    /// `None` where there is none.
    pub(crate) fn with_prompt_attention_blocked(&self, shared_bytes: u32) -> Option<GraphBuilder> {
        if std::env::var(PROMPT_ATTENTION_ENV).as_deref() == Ok("cache") {
            return None;
        }
        let mut g = self.clone();
        let mut changed = false;
        for (k, node) in self.nodes.iter().enumerate() {
            let Op::Kernel {
                kernel: Kernel::AttendCache,
                inputs,
                push,
                spec,
                ..
            } = &node.op
            else {
                continue;
            };
            let p = cache_push(push);
            if spec.first().copied().unwrap_or(0) != 0 || (p.s as usize) < PROMPT_QUERIES {
                continue;
            }
            if let Some(op) = g.blocked_cache_attention(&p, inputs, node.out, shared_bytes) {
                g.nodes[k].op = op;
                changed = true;
            }
        }
        changed.then_some(g)
    }

    /// `attend.comp`'s CAUSAL node for the cached attention of push block `p` over operands
    /// `[q, k cache, v cache, position, ..]` writing `out`: the batch is (items, kv heads,
    /// query heads of each), so a kv head's rows serve its query heads through a stride of 0.
    fn blocked_cache_attention(
        &mut self,
        p: &AttendCachePush,
        inputs: &[TensorId],
        out: TensorId,
        shared_bytes: u32,
    ) -> Option<Op> {
        let (s, hq, hk, d, max) = (p.s, p.hq, p.hk, p.d, p.max_rows);
        if hk == 0 || hq % hk != 0 || s == 0 {
            return None;
        }
        let g = hq / hk;
        let b = p.groups / (s * hq);
        let qlike = [0, s * hq * d, g * d, d, hq * d, 1];
        let cache = [0, max * hk * d, d, 0, hk * d, 1];
        let mut words: Vec<i32> = Vec::with_capacity(36);
        for op in [qlike, cache, cache, [0; 6], [0; 6], qlike] {
            for v in op {
                words.push(i32::try_from(v).ok()?);
            }
        }
        let qblocks = s.div_ceil(QUERY_ROWS as u32);
        let push = AttendPush {
            items: b * hq * qblocks,
            qblocks,
            sq: s,
            sk: max,
            scale: p.scale,
            guard: 1,
            n1: hk,
            n2: g,
            plus: p.plus,
            has_pos: p.has_pos,
        };
        let block = key_block(d as usize, d as usize, shared_bytes)?;
        let name = format!("{}_layout", self.tensors[out.0].name);
        let table = HostTensor::from_i32(vec![words.len()], &words).ok()?;
        let layout = self.constant(&name, table).ok()?;
        let (q, kc, vc, pos) = (inputs[0], inputs[1], inputs[2], inputs[3]);
        Some(Op::Kernel {
            name: "sdpa",
            kernel: Kernel::Attend,
            inputs: vec![q, kc, vc, pos, q, layout],
            push: bytemuck::cast_slice(&[push]).to_vec(),
            groups: Some(u64::from(push.items)),
            precision: None,
            spec: vec![d, d, block as u32, 0, 1],
        })
    }
}

/// `attend_cache.comp`'s push block from its words.
fn cache_push(push: &[u32]) -> AttendCachePush {
    use std::mem::offset_of;
    type P = AttendCachePush;
    let w = |at: usize| crate::fusion::word(push, at);
    AttendCachePush {
        groups: w(offset_of!(P, groups)),
        s: w(offset_of!(P, s)),
        hq: w(offset_of!(P, hq)),
        hk: w(offset_of!(P, hk)),
        d: w(offset_of!(P, d)),
        max_rows: w(offset_of!(P, max_rows)),
        plus: w(offset_of!(P, plus)) as i32,
        has_pos: w(offset_of!(P, has_pos)),
        scale: f32::from_bits(w(offset_of!(P, scale))),
        chunks: w(offset_of!(P, chunks)),
        chunk_rows: w(offset_of!(P, chunk_rows)),
    }
}

/// The keys of a block of `attend.comp` (a multiple of its lanes, at most 32) whose shared
/// memory fits `shared_bytes` for head sizes `d` and `e`.
fn key_block(d: usize, e: usize, shared_bytes: u32) -> Option<usize> {
    [32, 16, 8, 4].into_iter().find(|&bk| {
        // q and k rows padded by 4 floats.
        let floats = QUERY_ROWS * (d + 4) + bk * (d + 4) + bk * e + QUERY_ROWS * bk;
        bk % LANES == 0 && 4 * floats <= shared_bytes as usize
    })
}

/// The factor a scalar product or quotient multiplies by.
fn scalar_factor(op: UnaryOp) -> Option<f32> {
    match op {
        UnaryOp::MulScalar(c) => Some(c),
        UnaryOp::DivScalar(c) if c != 0.0 => Some(1.0 / c),
        _ => None,
    }
}

/// The last two dims.
fn last2(shape: &[usize]) -> Option<(usize, usize)> {
    match shape {
        [.., a, b] => Some((*a, *b)),
        _ => None,
    }
}

/// The batch dims of a `[batch.., rows, cols]` shape.
fn batch_of(shape: &[usize]) -> Vec<usize> {
    shape[..shape.len().saturating_sub(2)].to_vec()
}

/// The operands' batch dims brought to one frame of three dims `[n0, n1, n2]`: the finest
/// split of the batch every operand's dims are made of, then merged where every operand's
/// strides allow, the outer ones padded with dims of 1. `None` where the frames do not meet
/// or more than three dims remain.
fn one_frame(ops: &mut [Operand]) -> Option<[usize; 3]> {
    // Cuts: the products of each operand's innermost dims.
    let mut cuts = Vec::new();
    for o in ops.iter() {
        let mut c = 1;
        for &(n, _) in o.batch.iter().rev() {
            c *= n;
            cuts.push(c);
        }
    }
    cuts.retain(|&c| c > 1);
    cuts.sort_unstable();
    cuts.dedup();
    let mut sizes = Vec::new(); // innermost first
    let mut prev = 1;
    for &c in &cuts {
        if c % prev != 0 {
            return None;
        }
        sizes.push(c / prev);
        prev = c;
    }
    let mut strides: Vec<Vec<usize>> = Vec::with_capacity(ops.len());
    for o in ops.iter() {
        if o.batch.iter().map(|b| b.0).product::<usize>() != prev {
            return None;
        }
        let mut dims = o.batch.iter().rev().filter(|b| b.0 > 1);
        let mut cur = dims.next();
        let mut within = 1;
        let mut own = Vec::with_capacity(sizes.len());
        for &n in &sizes {
            let &(size, stride) = cur?;
            own.push(stride * within);
            within *= n;
            if within == size {
                cur = dims.next();
                within = 1;
            } else if size % within != 0 {
                return None;
            }
        }
        strides.push(own);
    }
    // Merge runs (innermost first) laid out as one in every operand.
    let mut merged: Vec<(usize, Vec<usize>)> = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        if let Some((m, first)) = merged.last_mut() {
            let along = strides
                .iter()
                .zip(first.iter())
                .all(|(s, &f)| s[i] == f * *m);
            if along {
                *m *= n;
                continue;
            }
        }
        merged.push((n, strides.iter().map(|s| s[i]).collect()));
    }
    if merged.len() > 3 {
        return None;
    }
    while merged.len() < 3 {
        merged.push((1, vec![0; ops.len()]));
    }
    // Outermost first.
    merged.reverse();
    for (k, o) in ops.iter_mut().enumerate() {
        o.batch = merged.iter().map(|(n, s)| (*n, s[k])).collect();
    }
    Some([merged[0].0, merged[1].0, merged[2].0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_meet_in_their_finest_split() {
        let op = |batch: Vec<(usize, usize)>| Operand {
            src: TensorId(0),
            off: 0,
            batch,
            row: 0,
            col: 0,
        };
        // [6, 3] against [2, 9]: split to [2, 3, 3], then the outer two merge.
        let mut ops = vec![op(vec![(6, 40), (3, 10)]), op(vec![(2, 900), (9, 100)])];
        assert_eq!(one_frame(&mut ops), Some([1, 6, 3]));
        assert_eq!(ops[0].batch, vec![(1, 0), (6, 40), (3, 10)]);
        assert_eq!(ops[1].batch, vec![(1, 0), (6, 300), (3, 100)]);
        // [6, 3] against [2, 9] where nothing merges: [2, 3, 3].
        let mut ops = vec![op(vec![(6, 40), (3, 10)]), op(vec![(2, 1000), (9, 100)])];
        assert_eq!(one_frame(&mut ops), Some([2, 3, 3]));
        assert_eq!(ops[0].batch, vec![(2, 120), (3, 40), (3, 10)]);
        assert_eq!(ops[1].batch, vec![(2, 1000), (3, 300), (3, 100)]);
        // [2, 3] against [3, 2] do not meet.
        let mut ops = vec![op(vec![(2, 3), (3, 1)]), op(vec![(3, 2), (2, 1)])];
        assert_eq!(one_frame(&mut ops), None);
        // Contiguous dims merge: [2, 3] → [1, 1, 6].
        let mut ops = vec![op(vec![(2, 3), (3, 1)])];
        assert_eq!(one_frame(&mut ops), Some([1, 1, 6]));
        assert_eq!(ops[0].batch, vec![(1, 0), (1, 0), (6, 1)]);
    }
}
