//! Passes over a graph, the IR between the front ends and the kernels: each takes a graph and
//! returns one that computes the same outputs from the same inputs.
//!
//! - [`GraphBuilder::widened_to_f32`]: the fp16/fp32 choice, made per device: an fp16 graph
//!   computed in fp32 where the device lacks the f16 features, without lowering it again.
//! - [`GraphBuilder::without_dead_nodes`]: nodes whose results nothing reads are dropped (and
//!   with them the constants only they read, which are then never uploaded).
//! - [`GraphBuilder::with_constants_within`]: products and lookups whose constant operand is
//!   larger than one buffer binding may span, split along their output's last dim into pieces
//!   that fit, joined by a concat.
//! - [`GraphBuilder::with_silu_fused`]: `x * sigmoid(x)` as one SiLU dispatch.
//! - [`GraphBuilder::with_common_nodes_merged`]: a node repeating an earlier one is dropped, its readers
//!   reading the earlier result.

use std::collections::HashMap;
use std::ops::Range;

use vk_core::DType;

use crate::graph::{
    BinaryOp, ConstBytes, GraphBuilder, Node, Op, Storage, StorageKind, TensorId, TensorInfo,
    UnaryOp, storage_bytes,
};

impl Op {
    /// Rewrites every tensor the op reads through `f`, in operand order.
    pub(crate) fn map_inputs(&mut self, f: &impl Fn(TensorId) -> TensorId) {
        let one = |t: &mut TensorId| *t = f(*t);
        let opt = |t: &mut Option<TensorId>| {
            if let Some(t) = t {
                *t = f(*t);
            }
        };
        match self {
            Op::Unary { x, .. }
            | Op::Softmax { x, .. }
            | Op::Pool { x, .. }
            | Op::Reduce { x, .. }
            | Op::Permute { x, .. }
            | Op::Slice { x, .. }
            | Op::Cast { x, .. } => one(x),
            Op::Binary { a, b, .. } | Op::QAdd { a, b, .. } => {
                one(a);
                one(b);
            }
            Op::Where { cond, a, b } => {
                one(cond);
                one(a);
                one(b);
            }
            Op::Gather { table, ids } => {
                one(table);
                one(ids);
            }
            Op::Conv { x, w, bias, .. } => {
                one(x);
                one(w);
                opt(bias);
            }
            Op::Matmul {
                a, b, bias, norm, ..
            } => {
                one(a);
                one(b);
                opt(bias);
                if let Some(n) = norm {
                    one(&mut n.colsum);
                }
            }
            Op::LayerNorm {
                x, weight, bias, ..
            } => {
                one(x);
                opt(weight);
                opt(bias);
            }
            Op::Cat { xs, .. } | Op::Kernel { inputs: xs, .. } => xs.iter_mut().for_each(one),
            Op::QConv {
                x,
                w,
                bias,
                mult,
                shift,
                ..
            } => {
                one(x);
                one(w);
                opt(bias);
                one(mult);
                one(shift);
            }
            #[cfg(feature = "bench")]
            Op::FmaProbe { .. } => {}
        }
    }
}

/// f16 bytes widened to f32 bytes.
fn widen(bytes: &[u8]) -> Vec<u8> {
    bytes
        .chunks_exact(2)
        .flat_map(|h| {
            half::f16::from_le_bytes([h[0], h[1]])
                .to_f32()
                .to_le_bytes()
        })
        .collect()
}

impl GraphBuilder {
    /// A tensor of `dtype` and `shape` with a temporary storage of its own.
    pub(crate) fn push_temp(&mut self, name: String, dtype: DType, shape: Vec<usize>) -> TensorId {
        let id = TensorId(self.tensors.len());
        self.storages.push(Storage {
            kind: StorageKind::Temp,
            bytes: storage_bytes(dtype, &shape),
            tensor: id,
        });
        self.tensors.push(TensorInfo {
            name,
            dtype,
            shape,
            storage: self.storages.len() - 1,
        });
        id
    }

    /// The same graph computing in fp32: every f16 tensor inside becomes f32 (f16 constants
    /// widened; those shared with a model file are copied), and casts to f16 become casts to
    /// f32. Inputs and outputs keep their dtypes: an f16 input is cast to f32 before it is
    /// read, an f16 output is cast from f32 where it is written. The graph then needs none of
    /// the f16 features.
    pub fn widened_to_f32(&self) -> GraphBuilder {
        let mut g = self.clone();
        g.f16_floats = false;
        let edge = |g: &GraphBuilder, t: usize| {
            matches!(
                g.storages[g.tensors[t].storage].kind,
                StorageKind::Input | StorageKind::Output
            )
        };
        // Inside tensors and their storages.
        for t in 0..g.tensors.len() {
            if g.tensors[t].dtype != DType::F16 || edge(&g, t) {
                continue;
            }
            g.tensors[t].dtype = DType::F32;
            let s = g.tensors[t].storage;
            if g.storages[s].tensor.0 == t {
                let st = &mut g.storages[s];
                st.bytes = storage_bytes(DType::F32, &g.tensors[t].shape);
                if let StorageKind::Const(bytes) = &st.kind {
                    st.kind = StorageKind::Const(ConstBytes::from(widen(bytes)));
                }
            }
        }
        for node in &mut g.nodes {
            if let Op::Cast { to, .. } = &mut node.op {
                if *to == DType::F16 && !edge(self, node.out.0) {
                    *to = DType::F32;
                }
            }
        }
        g.widen_f16_inputs();
        g.narrow_f16_outputs();
        g
    }

    /// Redirects reads of every tensor over `base`'s storage (`base` and its views) by the
    /// nodes from `from` on to the same tensor over `wide`'s storage; casts to f16 (the
    /// outputs' copies) keep reading the f16 ones.
    fn redirect(&mut self, base: TensorId, wide: TensorId, from: usize) {
        let (storage, ws) = (self.tensors[base.0].storage, self.tensors[wide.0].storage);
        let mut map = Vec::new();
        for t in 0..self.tensors.len() {
            if self.tensors[t].storage != storage || t == wide.0 {
                continue;
            }
            let to = if t == base.0 {
                wide
            } else {
                let view = TensorInfo {
                    dtype: DType::F32,
                    storage: ws,
                    ..self.tensors[t].clone()
                };
                self.tensors.push(view);
                TensorId(self.tensors.len() - 1)
            };
            map.push((TensorId(t), to));
        }
        let f = |t: TensorId| map.iter().find(|m| m.0 == t).map_or(t, |m| m.1);
        for node in &mut self.nodes[from..] {
            if !matches!(node.op, Op::Cast { to: DType::F16, .. }) {
                node.op.map_inputs(&f);
            }
        }
    }

    /// Each f16 input, read as f32 through a cast at the start of the graph.
    fn widen_f16_inputs(&mut self) {
        for input in self.inputs.clone() {
            let info = self.tensors[input.0].clone();
            if info.dtype != DType::F16 {
                continue;
            }
            let wide = self.push_temp(format!("{}_f32", info.name), DType::F32, info.shape);
            self.redirect(input, wide, 0);
            let cast = Node {
                op: Op::Cast {
                    x: input,
                    to: DType::F32,
                },
                out: wide,
            };
            self.nodes.insert(0, cast);
        }
    }

    /// Each f16 output a node other than a cast computes: the node writes an f32 temporary,
    /// cast to the output right after it (later readers read the f32 one).
    fn narrow_f16_outputs(&mut self) {
        for output in self.outputs.clone() {
            let info = self.tensors[output.0].clone();
            let Some(k) = self.nodes.iter().position(|n| n.out == output) else {
                continue;
            };
            if info.dtype != DType::F16 || matches!(self.nodes[k].op, Op::Cast { .. }) {
                continue;
            }
            let wide = self.push_temp(format!("{}_f32", info.name), DType::F32, info.shape);
            self.nodes[k].out = wide;
            self.redirect(output, wide, k + 1);
            let cast = Node {
                op: Op::Cast {
                    x: wide,
                    to: DType::F16,
                },
                out: output,
            };
            self.nodes.insert(k + 1, cast);
        }
    }

    /// The graph without the nodes whose results nothing reads: neither a later live node nor
    /// an output (views share their tensor's storage, so liveness is by storage). Constants
    /// only dead nodes read are then not uploaded.
    pub fn without_dead_nodes(&self) -> GraphBuilder {
        let mut live = vec![false; self.storages.len()];
        for t in &self.outputs {
            live[self.tensors[t.0].storage] = true;
        }
        let mut keep = vec![false; self.nodes.len()];
        for (k, node) in self.nodes.iter().enumerate().rev() {
            if live[self.tensors[node.out.0].storage] {
                keep[k] = true;
                for t in node.op.inputs() {
                    live[self.tensors[t.0].storage] = true;
                }
            }
        }
        let mut g = self.clone();
        let mut k = 0;
        g.nodes.retain(|_| {
            k += 1;
            keep[k - 1]
        });
        g
    }
}

impl GraphBuilder {
    /// The graph with each node that repeats an earlier one (the same op on the same operands,
    /// giving the same dtype and shape) dropped, its readers reading the earlier result: a
    /// language model computes the positions and the mask of its cache once rather than per
    /// layer. Small constants of equal bytes count as the same operand. Only nodes that alone
    /// write a storage of their own are merged, and a graph output is never the one dropped.
    /// `None` where none repeats.
    pub(crate) fn with_common_nodes_merged(&self) -> Option<GraphBuilder> {
        const SMALL: usize = 1 << 16;
        let mut writers = vec![0usize; self.storages.len()];
        for n in &self.nodes {
            writers[self.tensors[n.out.0].storage] += 1;
        }
        let outputs: Vec<usize> = self
            .outputs
            .iter()
            .map(|t| self.tensors[t.0].storage)
            .collect();
        // Canonical tensor of each tensor: itself, or the earlier equal one.
        let mut canon: Vec<TensorId> = (0..self.tensors.len()).map(TensorId).collect();
        let mut small: HashMap<(DType, Vec<usize>, u64), TensorId> = HashMap::new();
        for (t, info) in self.tensors.iter().enumerate() {
            let st = &self.storages[info.storage];
            if let StorageKind::Const(bytes) = &st.kind {
                if st.tensor.0 == t && bytes.len() <= SMALL {
                    let key = (
                        info.dtype,
                        info.shape.clone(),
                        xxhash_rust::xxh3::xxh3_64(bytes),
                    );
                    canon[t] = *small.entry(key).or_insert(TensorId(t));
                }
            }
        }
        let mut seen: HashMap<String, TensorId> = HashMap::new();
        let mut storage_of: Vec<usize> = (0..self.storages.len()).collect();
        let mut keep = vec![true; self.nodes.len()];
        for (k, n) in self.nodes.iter().enumerate() {
            let info = &self.tensors[n.out.0];
            // A result only its node writes; an output's is kept, and serves later repeats.
            let own = self.storages[info.storage].tensor == n.out && writers[info.storage] == 1;
            if !own {
                continue;
            }
            let mut op = n.op.clone();
            op.map_inputs(&|t| canon[t.0]);
            let key = format!("{op:?} -> {:?} {:?}", info.dtype, info.shape);
            match seen.get(&key) {
                Some(&first) if !outputs.contains(&info.storage) => {
                    canon[n.out.0] = first;
                    storage_of[info.storage] = self.tensors[first.0].storage;
                    keep[k] = false;
                }
                Some(_) => {}
                None => {
                    seen.insert(key, n.out);
                }
            }
        }
        if keep.iter().all(|&k| k) {
            return None;
        }
        let mut g = self.clone();
        for t in &mut g.tensors {
            t.storage = storage_of[t.storage];
        }
        let mut k = 0;
        g.nodes.retain(|_| {
            k += 1;
            keep[k - 1]
        });
        Some(g)
    }
}

impl GraphBuilder {
    /// The graph with each `x * sigmoid(x)` as one SiLU node (`UnaryOp::Silu`): the product
    /// of a tensor and the sigmoid of that same tensor, where nothing else reads the sigmoid,
    /// becomes one dispatch instead of two (a language model's gated MLP, EfficientNet's
    /// activations). The product with the sigmoid of another tensor becomes one
    /// `BinaryOp::MulSigmoid` (a squeeze-excite block's gate, broadcast over the pixels), and
    /// the product with a hard sigmoid's steps one `BinaryOp::MulHardSigmoid` (MobileNetV3's
    /// gates). `None` where there is none.
    pub(crate) fn with_silu_fused(&self) -> Option<GraphBuilder> {
        let uses = crate::fusion::Uses::of(self);
        let readers = &uses.readers;
        // The sigmoid node writing each tensor (of its own storage, read once).
        let mut sigmoid_of = HashMap::new();
        for (k, n) in self.nodes.iter().enumerate() {
            if let Op::Unary {
                op: UnaryOp::Sigmoid,
                x,
            } = n.op
            {
                let st = self.tensors[n.out.0].storage;
                if self.storages[st].tensor == n.out && readers[st] == 1 {
                    sigmoid_of.insert(n.out, (k, x));
                }
            }
        }
        let mut g = self.clone();
        let mut drop = vec![false; self.nodes.len()];
        for node in &mut g.nodes {
            let Op::Binary {
                op: BinaryOp::Mul,
                a,
                b,
            } = node.op
            else {
                continue;
            };
            let hard = [(a, b), (b, a)].into_iter().find_map(|(s, x)| {
                let (nodes, sx) = self.hard_sigmoid_of(&uses, s)?;
                Some((nodes, x, sx))
            });
            if let Some((nodes, x, sx)) = hard {
                for k in nodes {
                    drop[k] = true;
                }
                node.op = Op::Binary {
                    op: BinaryOp::MulHardSigmoid,
                    a: x,
                    b: sx,
                };
                continue;
            }
            let fused = [(a, b), (b, a)].into_iter().find_map(|(s, x)| {
                let &(k, sx) = sigmoid_of.get(&s)?;
                Some((k, x, sx))
            });
            let Some((k, x, sx)) = fused else {
                continue;
            };
            drop[k] = true;
            let whole = self.tensors[x.0].shape == self.tensors[node.out.0].shape;
            node.op = if sx == x && whole {
                Op::Unary {
                    op: UnaryOp::Silu,
                    x,
                }
            } else {
                // The gate of another tensor (broadcast as the product broadcast it).
                Op::Binary {
                    op: BinaryOp::MulSigmoid,
                    a: x,
                    b: sx,
                }
            };
        }
        retain(g, &drop)
    }
}

impl GraphBuilder {
    /// Where `t` is `relu6(s + 3) / 6` (a hard sigmoid as exporters decompose it: a sum with a
    /// constant 3, a clamp to [0, 6] or clamps below and above, a quotient by a constant 6 or
    /// a product by 1/6), each step written by one node into a storage of its own that only
    /// the next step reads: those nodes, and `s`.
    fn hard_sigmoid_of(
        &self,
        uses: &crate::fusion::Uses,
        t: TensorId,
    ) -> Option<(Vec<usize>, TensorId)> {
        let step = |t: TensorId| -> Option<(usize, &Op)> {
            let st = self.tensors[t.0].storage;
            let [k] = uses.writers[st][..] else {
                return None;
            };
            let own = self.storages[st].tensor == t && self.nodes[k].out == t;
            (own && uses.readers[st] == 1).then(|| (k, &self.nodes[k].op))
        };
        let is = |t: TensorId, v: f32| matches!(self.constant_values(t).as_deref(), Some(&[c]) if c == v);
        let (k_div, op) = step(t)?;
        let c = match *op {
            Op::Binary {
                op: BinaryOp::Div,
                a,
                b,
            } if is(b, 6.0) => a,
            Op::Binary {
                op: BinaryOp::Mul,
                a,
                b,
            } if is(b, 1.0 / 6.0) => a,
            Op::Unary {
                op: UnaryOp::DivScalar(6.0),
                x,
            } => x,
            _ => return None,
        };
        // The clamp, perhaps as a lower bound and an upper bound in turn.
        let (mut nodes, mut sum, mut bounds) = (vec![k_div], c, (f32::MIN, f32::MAX));
        while let Some((
            k,
            &Op::Unary {
                op: UnaryOp::Clamp(lo, hi),
                x,
            },
        )) = step(sum)
        {
            nodes.push(k);
            bounds = (bounds.0.max(lo), bounds.1.min(hi));
            sum = x;
        }
        if nodes.len() == 1 || bounds != (0.0, 6.0) {
            return None;
        }
        let (k_add, op) = step(sum)?;
        let s = match *op {
            Op::Binary {
                op: BinaryOp::Add,
                a,
                b,
            } if is(b, 3.0) => a,
            Op::Unary {
                op: UnaryOp::AddScalar(3.0),
                x,
            } => x,
            _ => return None,
        };
        // The gate broadcasts as the product does; `s` itself is not broadcast by the steps.
        let same = |u: TensorId| self.tensors[u.0].shape == self.tensors[s.0].shape;
        nodes.push(k_add);
        (same(sum) && same(c) && same(t)).then_some((nodes, s))
    }
}

/// `g` without the nodes marked in `drop`; `None` where none is.
pub(crate) fn retain(mut g: GraphBuilder, drop: &[bool]) -> Option<GraphBuilder> {
    if !drop.contains(&true) {
        return None;
    }
    let mut k = 0;
    g.nodes.retain(|_| {
        k += 1;
        !drop[k - 1]
    });
    Some(g)
}

/// How a node with an oversized constant is cut: the constant's dim that becomes the output's
/// last dim (`0`: rows of a `linear` weight; `1`: columns of a `matmul` operand or a lookup
/// table).
struct Cut {
    constant: TensorId,
    dim: usize,
}

impl ConstBytes {
    /// Bytes `range` of these bytes: shared where these are shared, copied otherwise.
    fn slice(&self, range: Range<usize>) -> ConstBytes {
        match self {
            ConstBytes::Shared(data, r) => {
                ConstBytes::Shared(data.clone(), r.start + range.start..r.start + range.end)
            }
            ConstBytes::Own(v) => ConstBytes::from(v[range].to_vec()),
        }
    }
}

impl GraphBuilder {
    /// The graph with every `linear`, `matmul` and lookup whose constant operand spans more
    /// than `limit` bytes cut along its output's last dim into pieces whose constants span at
    /// most three quarters of `limit` (room for the layouts the lowering gives weights), the
    /// pieces joined by a concat into the node's own output. `None` where no node needs it.
    pub(crate) fn with_constants_within(&self, limit: u64) -> Option<GraphBuilder> {
        let mut g = self.clone();
        let mut nodes = Vec::with_capacity(self.nodes.len());
        for node in std::mem::take(&mut g.nodes) {
            match g.cut_of(&node.op, limit) {
                Some(cut) => g.cut_node(node, &cut, limit * 3 / 4, &mut nodes),
                None => nodes.push(node),
            }
        }
        g.nodes = nodes;
        (g.nodes.len() != self.nodes.len()).then_some(g)
    }

    /// How `op` is cut, if it reads a whole 2-D constant of more than `limit` bytes in a way
    /// that can be cut (a `linear` whose bias is absent or constant too).
    fn cut_of(&self, op: &Op, limit: u64) -> Option<Cut> {
        let (constant, dim) = match op {
            // Not a product with a folded norm: its column sums are of the whole weight.
            Op::Matmul {
                b,
                linear: true,
                bias,
                norm: None,
                ..
            } if bias.is_none_or(|t| self.const_bytes(t).is_some()) => (*b, 0),
            Op::Matmul {
                b,
                linear: false,
                bias: None,
                norm: None,
                ..
            } => (*b, 1),
            Op::Gather { table, .. } => (*table, 1),
            _ => return None,
        };
        let info = &self.tensors[constant.0];
        self.const_bytes(constant)?;
        let over = storage_bytes(info.dtype, &info.shape) > limit;
        (info.shape.len() == 2 && over).then_some(Cut { constant, dim })
    }

    /// The bytes of `t` if it is a whole constant (not a view of part of one).
    fn const_bytes(&self, t: TensorId) -> Option<&ConstBytes> {
        let info = &self.tensors[t.0];
        match &self.storages[info.storage].kind {
            StorageKind::Const(bytes) if bytes.len() == info.numel() * info.dtype.size() => {
                Some(bytes)
            }
            _ => None,
        }
    }

    /// Appends `node`'s pieces and their concat to `nodes`.
    fn cut_node(&mut self, node: Node, cut: &Cut, piece_bytes: u64, nodes: &mut Vec<Node>) {
        let info = self.tensors[cut.constant.0].clone();
        let (n, other) = match cut.dim {
            0 => (info.shape[0], info.shape[1]),
            _ => (info.shape[1], info.shape[0]),
        };
        let unit = (other * info.dtype.size()) as u64;
        let per_max = (piece_bytes / unit).max(1) as usize;
        let count = n.div_ceil(per_max);
        let per = n.div_ceil(count);
        let out = self.tensors[node.out.0].clone();
        let mut parts = Vec::with_capacity(count);
        for (i, start) in (0..n).step_by(per).enumerate() {
            let end = (start + per).min(n);
            let piece = self.const_piece(cut, start..end, i);
            let mut op = node.op.clone();
            match &mut op {
                Op::Matmul { b, bias, .. } => {
                    *b = piece;
                    if let Some(t) = bias {
                        let one_d = Cut {
                            constant: *t,
                            dim: 1,
                        };
                        *t = self.const_piece(&one_d, start..end, i);
                    }
                }
                Op::Gather { table, .. } => *table = piece,
                _ => unreachable!("cut_of cuts only products and lookups"),
            }
            let mut shape = out.shape.clone();
            *shape.last_mut().expect("outputs have rank 1 or more") = end - start;
            let part = self.push_temp(format!("{}.part{i}", out.name), out.dtype, shape);
            nodes.push(Node { op, out: part });
            parts.push(part);
        }
        let dim = out.shape.len() - 1;
        nodes.push(Node {
            op: Op::Cat { xs: parts, dim },
            out: node.out,
        });
    }

    /// A new constant: indices `range` of `cut.constant` along `cut.dim` (a 1-D constant is
    /// cut along its only dim whatever `cut.dim` says).
    fn const_piece(&mut self, cut: &Cut, range: Range<usize>, i: usize) -> TensorId {
        let info = self.tensors[cut.constant.0].clone();
        let bytes = self
            .const_bytes(cut.constant)
            .expect("cut_of checked")
            .clone();
        let es = info.dtype.size();
        let len = range.end - range.start;
        let (shape, piece) = match (info.shape.as_slice(), cut.dim) {
            ([_], _) => (vec![len], bytes.slice(range.start * es..range.end * es)),
            (&[_, cols], 0) => (
                vec![len, cols],
                bytes.slice(range.start * cols * es..range.end * cols * es),
            ),
            (&[rows, cols], _) => {
                let mut v = Vec::with_capacity(rows * len * es);
                for r in 0..rows {
                    v.extend_from_slice(
                        &bytes[(r * cols + range.start) * es..(r * cols + range.end) * es],
                    );
                }
                (vec![rows, len], ConstBytes::from(v))
            }
            _ => unreachable!("cut_of cuts only 2-D constants"),
        };
        self.push_tensor(
            format!("{}.part{i}", info.name),
            info.dtype,
            shape,
            Some((StorageKind::Const(piece), None)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dead_nodes_and_their_constants_go() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, &[4]).unwrap();
        let w = b.constant_f32("w", &[4], &[1.0; 4]).unwrap();
        let unused = b.mul(x, w).unwrap();
        let _ = b.sigmoid(unused).unwrap();
        let y = b.relu(x).unwrap();
        b.output(y).unwrap();
        let g = b.without_dead_nodes();
        assert_eq!(b.nodes.len(), 3);
        assert_eq!(g.nodes.len(), 1);
        assert!(matches!(g.nodes[0].op, Op::Unary { .. }));
    }

    #[test]
    fn widening_keeps_the_edges_and_computes_in_f32() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F16, &[2, 4]).unwrap();
        let c = b.constant_f16("c", &[4], &[0.5; 4]).unwrap();
        let y = b.mul(x, c).unwrap();
        let z = b.relu(y).unwrap();
        b.output(z).unwrap();
        assert!(b.uses_f16());
        let g = b.widened_to_f32();
        assert!(!g.uses_f16());
        assert_eq!(g.input_specs(), b.input_specs());
        assert_eq!(g.output_specs(), b.output_specs());
        let dtypes: Vec<DType> = g.nodes.iter().map(|n| g.tensors[n.out.0].dtype).collect();
        // The input's cast, mul and relu in f32, the cast to the f16 output.
        assert_eq!(dtypes, [DType::F32, DType::F32, DType::F32, DType::F16]);
    }
}
