//! Tensors read through the copies that made them: where a permute's or a slice's elements
//! are in the storage of the tensor it copied (`GraphBuilder::strided`, `view_strides`), for
//! the passes that read operands through strides instead of copies, and the pass that turns
//! permutes moving no element into views (`with_layout_permutes_as_views`), and the pass that
//! has depthwise convolutions write channels last in place of a permute
//! (`with_depthwise_outputs_channels_last`), and the one that has fp16 linear layers over
//! channels-last pixels write channels first in place of a permute
//! (`with_products_written_channels_first`).

use vk_core::DType;

use crate::fusion::Uses;
use crate::graph::{Conv2d, GraphBuilder, Op, StorageKind, TensorId};
use crate::passes::retain;

/// Where a tensor's elements are: in `src`'s storage, at `off` plus the strides (one per dim
/// of `shape`, in elements). `shape` is the tensor's own, or (from
/// [`GraphBuilder::strided_grouped`]) the shape of the copy it views where its own merges dims
/// that no one stride can step through.
pub(crate) struct Strided {
    pub(crate) src: TensorId,
    pub(crate) off: usize,
    pub(crate) shape: Vec<usize>,
    pub(crate) strides: Vec<usize>,
}

/// The last two dims of a shape of rank 2 or more.
fn last2_of(shape: &[usize]) -> Option<&[usize]> {
    shape.len().checked_sub(2).map(|r| &shape[r..])
}

impl GraphBuilder {
    /// The node that wrote `t` and its op, where that node alone wrote `t`'s storage, whole:
    /// `t` is its result or a view of it.
    pub(crate) fn writer(&self, uses: &Uses, t: TensorId) -> Option<(usize, &Op)> {
        let st = self.tensors[t.0].storage;
        let [j] = uses.writers[st][..] else {
            return None;
        };
        let out = self.nodes[j].out;
        let whole = self.storages[st].tensor == out
            && self.tensors[out.0].numel() == self.tensors[t.0].numel();
        whole.then(|| (j, &self.nodes[j].op))
    }

    /// Where `t`'s elements are, looking through the permutes and slices (copies) that made
    /// it, and views, to a tensor written once.
    pub(crate) fn strided(&self, uses: &Uses, t: TensorId, absorbed: &mut Vec<usize>) -> Strided {
        self.strided_as(uses, t, absorbed, false)
    }

    /// As [`GraphBuilder::strided`], and where `t` is a view merging dims of the copy that
    /// made it which no one stride steps through (a `[windows * heads, rows, cols]` view of a
    /// permute's `[windows, heads, rows, cols]`), in that copy's shape, if its last two dims
    /// are `t`'s.
    pub(crate) fn strided_grouped(
        &self,
        uses: &Uses,
        t: TensorId,
        absorbed: &mut Vec<usize>,
    ) -> Strided {
        self.strided_as(uses, t, absorbed, true)
    }

    fn strided_as(
        &self,
        uses: &Uses,
        t: TensorId,
        absorbed: &mut Vec<usize>,
        grouped: bool,
    ) -> Strided {
        let info = &self.tensors[t.0];
        let plain = Strided {
            src: t,
            off: 0,
            shape: info.shape.clone(),
            strides: row_major(&info.shape),
        };
        let Some((j, op)) = self.writer(uses, t) else {
            return plain;
        };
        let made = self.nodes[j].out;
        let (src, off, strides) = match *op {
            Op::Permute { x, ref perm } => {
                let s = self.strided(uses, x, absorbed);
                (s.src, s.off, perm.iter().map(|&d| s.strides[d]).collect())
            }
            Op::Slice {
                x,
                dim,
                start,
                step,
            } => {
                let s = self.strided(uses, x, absorbed);
                let mut strides = s.strides.clone();
                strides[dim] *= step;
                (s.src, s.off + start * s.strides[dim], strides)
            }
            _ => return plain,
        };
        let once = uses.writers[self.tensors[src.0].storage].len() <= 1;
        let made_shape = &self.tensors[made.0].shape;
        match view_strides(made_shape, &strides, &info.shape) {
            Some(strides) if once => {
                absorbed.push(j);
                Strided {
                    src,
                    off,
                    shape: info.shape.clone(),
                    strides,
                }
            }
            None if once && grouped && last2_of(made_shape) == last2_of(&info.shape) => {
                absorbed.push(j);
                Strided {
                    src,
                    off,
                    shape: made_shape.clone(),
                    strides,
                }
            }
            _ => plain,
        }
    }

    /// The graph with each layer norm over the last dim of a permute that moved a
    /// channels-first tensor's channels last (`[n, c, ...]` to `[n, ..., c]`, a ConvNeXt
    /// block's), where nothing else reads the permute, reading the channels-first tensor
    /// itself (`Op::LayerNorm`'s `plane`): the copy goes. `None` where there is none.
    pub(crate) fn with_channel_norms_read_through(&self) -> Option<GraphBuilder> {
        let uses = Uses::of(self);
        let mut g = self.clone();
        let mut drop = vec![false; self.nodes.len()];
        for (k, node) in self.nodes.iter().enumerate() {
            let Op::LayerNorm { x, d, plane: 0, .. } = node.op else {
                continue;
            };
            let st = self.tensors[x.0].storage;
            let [j] = uses.writers[st][..] else {
                continue;
            };
            let Op::Permute { x: src, perm } = &self.nodes[j].op else {
                continue;
            };
            let shape = &self.tensors[src.0].shape;
            let r = shape.len();
            let last = (r >= 3).then(|| [&[0][..], &(2..r).collect::<Vec<_>>(), &[1]].concat());
            let own = self.nodes[j].out == x
                && self.storages[st].tensor == x
                && matches!(self.storages[st].kind, StorageKind::Temp)
                && uses.readers[st] == 1;
            let ready = uses.writers[self.tensors[src.0].storage]
                .iter()
                .all(|&w| w < j || w > k);
            if !own || !ready || last.as_ref() != Some(perm) || shape[1] != d {
                continue;
            }
            if let Op::LayerNorm { x, plane, .. } = &mut g.nodes[k].op {
                *x = *src;
                *plane = shape[2..].iter().product();
            }
            drop[j] = true;
        }
        retain(g, &drop)
    }

    /// The graph with each permute whose result has the layout of the tensor it reads
    /// (through views and other permutes) in that tensor's storage (a permute moving dims of
    /// size 1 only; a permute undoing another) made a view of that storage: its readers read
    /// the storage as it is and the copy goes. `None` where there is none.
    pub(crate) fn with_layout_permutes_as_views(&self) -> Option<GraphBuilder> {
        let uses = Uses::of(self);
        let mut g = self.clone();
        let mut gone = vec![false; self.nodes.len()];
        let mut read_through = vec![false; self.nodes.len()];
        for (j, node) in self.nodes.iter().enumerate() {
            let Op::Permute { .. } = node.op else {
                continue;
            };
            let p = node.out;
            let st = self.tensors[p.0].storage;
            let own = uses.writers[st][..] == [j]
                && self.storages[st].tensor == p
                && matches!(self.storages[st].kind, StorageKind::Temp);
            if !own {
                continue;
            }
            let mut walked = Vec::new();
            let s = self.strided(&uses, p, &mut walked);
            let src = &self.tensors[s.src.0];
            let shape = &self.tensors[p.0].shape;
            let dense = |n: usize, a: usize, b: usize| n == 1 || a == b;
            let in_order = shape
                .iter()
                .zip(s.strides.iter().zip(row_major(shape)))
                .all(|(&n, (&a, b))| dense(n, a, b));
            let to = src.storage;
            let fits = s.src != p
                && s.off == 0
                && in_order
                && src.numel() == self.tensors[p.0].numel()
                && uses.writers[to].iter().all(|&w| w < j)
                && uses.writers[to].len() <= 1;
            if !fits {
                continue;
            }
            for t in g.tensors.iter_mut() {
                if t.storage == st {
                    t.storage = to;
                }
            }
            gone[j] = true;
            for w in walked {
                read_through[w] = true;
            }
        }
        if !gone.contains(&true) {
            return None;
        }
        // The copies read through go where nothing else reads them.
        without_unread(g, &read_through, gone)
    }
}

impl GraphBuilder {
    /// Depthwise convolutions whose result only a permute moving its channels last reads
    /// (`[0, 2, 3, 1]`: a ConvNeXt block's first permute, before its channel norm) write the
    /// permute's result themselves, channels last (`Op::Conv`'s `out_last`), and the permute
    /// goes: one dispatch and one pass over the tensor fewer.
    pub(crate) fn with_depthwise_outputs_channels_last(&self) -> Option<GraphBuilder> {
        let uses = Uses::of(self);
        let mut g = self.clone();
        let mut drop = vec![false; self.nodes.len()];
        for (j, node) in self.nodes.iter().enumerate() {
            let Op::Permute { x: t, perm } = &node.op else {
                continue;
            };
            let Some(i) = self.depthwise_read_once(&uses, *t) else {
                continue;
            };
            let out = self.tensors[node.out.0].storage;
            let own = uses.writers[out][..] == [j] && self.storages[out].tensor == node.out;
            if perm[..] != [0, 2, 3, 1] || !own || drop[i] {
                continue;
            }
            if let Op::Conv { out_last, .. } = &mut g.nodes[i].op {
                *out_last = true;
            }
            g.nodes[i].out = node.out;
            drop[j] = true;
        }
        retain(g, &drop)
    }

    /// fp16 linear layers over channels-last pixels (`[n, h, w, k]` by a `[c, k]` weight)
    /// whose result only a permute moving its channels first reads (`[0, 3, 1, 2]`: a
    /// ConvNeXt block's last permute) become 1x1 convolutions that read the pixels channels
    /// last and write the permute's result (`Op::Conv`'s `in_last`): the product's B operand
    /// is read transposed and the permute goes, so what follows (a layer scale, a residual)
    /// reads channels first as written and fuses into the product. fp16 only, and only where
    /// `pays` (asked once, at the first such layer) says the device runs fp16 products on
    /// cooperative matrices, whose loads transpose B at no cost, or is a CPU driver (where it
    /// measured no slower): the plain kernel on a GPU would read the pixels across a stride.
    pub(crate) fn with_products_written_channels_first(
        &self,
        pays: impl FnOnce() -> bool,
    ) -> Option<GraphBuilder> {
        let uses = Uses::of(self);
        let mut g = self.clone();
        let mut drop = vec![false; self.nodes.len()];
        let mut pays = Some(pays);
        let mut allowed = None;
        for (j, node) in self.nodes.iter().enumerate() {
            let Op::Permute { x: y, perm } = &node.op else {
                continue;
            };
            let st = self.tensors[y.0].storage;
            let [i] = uses.writers[st][..] else {
                continue;
            };
            let Op::Matmul {
                a,
                b: w,
                bias,
                linear: true,
                norm: None,
            } = self.nodes[i].op
            else {
                continue;
            };
            // The product may be of rows (`[n * h * w, k]`), and the permute read a view.
            let own = self.storages[st].tensor == self.nodes[i].out
                && uses.readers[st] == 1
                && matches!(self.storages[st].kind, StorageKind::Temp);
            let out = self.tensors[node.out.0].storage;
            let writes = uses.writers[out][..] == [j] && self.storages[out].tensor == node.out;
            let (x, wt, yi) = (&self.tensors[a.0], &self.tensors[w.0], &self.tensors[y.0]);
            let fits = yi.shape.len() == 4
                && wt.shape.len() == 2
                && yi.shape[3] == wt.shape[0]
                && x.numel() == yi.numel() / wt.shape[0] * wt.shape[1]
                && x.dtype == DType::F16;
            if perm[..] != [0, 3, 1, 2] || !own || !writes || !fits {
                continue;
            }
            if !*allowed.get_or_insert_with(|| pays.take().is_some_and(|f| f())) {
                return None;
            }
            let pixels = [yi.shape[0], yi.shape[1], yi.shape[2], wt.shape[1]];
            let view = |g: &mut GraphBuilder, t: &crate::graph::TensorInfo, shape: Vec<usize>| {
                let name = format!("{}.view", t.name);
                g.push_tensor(
                    name,
                    t.dtype,
                    shape,
                    Some((StorageKind::Temp, Some(t.storage))),
                )
            };
            let x4 = view(&mut g, x, pixels.to_vec());
            let w4 = view(&mut g, wt, vec![wt.shape[0], wt.shape[1], 1, 1]);
            g.nodes[i].op = Op::Conv {
                x: x4,
                w: w4,
                bias,
                p: Conv2d::default(),
                out_last: false,
                in_last: true,
            };
            g.nodes[i].out = node.out;
            drop[j] = true;
        }
        retain(g, &drop)
    }

    /// The node writing `t` where it is a depthwise convolution's result (channels first) in
    /// a temporary of its own that one node alone reads.
    fn depthwise_read_once(&self, uses: &Uses, t: TensorId) -> Option<usize> {
        let st = self.tensors[t.0].storage;
        let [i] = uses.writers[st][..] else {
            return None;
        };
        let Op::Conv {
            x,
            p,
            out_last: false,
            in_last: false,
            ..
        } = &self.nodes[i].op
        else {
            return None;
        };
        let cin = self.tensors[x.0].shape[1];
        let own = self.storages[st].tensor == t
            && self.nodes[i].out == t
            && uses.readers[st] == 1
            && matches!(self.storages[st].kind, StorageKind::Temp);
        (own && p.groups == cin && cin > 1).then_some(i)
    }
}

/// Environment variable: `0` keeps fp16 linear layers over channels-last pixels writing
/// channels last, with the permute that moves their result channels first after them, for
/// tuning (default: they write channels first, `with_products_written_channels_first`).
pub const ENV_PRODUCTS_CHANNELS_FIRST: &str = "VKDELEGATE_PRODUCTS_CHANNELS_FIRST";

/// Whether [`ENV_PRODUCTS_CHANNELS_FIRST`] lets products write channels first (the default).
pub(crate) fn products_channels_first() -> bool {
    std::env::var(ENV_PRODUCTS_CHANNELS_FIRST).map_or(true, |v| v.trim() != "0")
}

/// Row-major strides of `shape`, in elements.
pub(crate) fn row_major(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    strides
}

/// Strides of `new` (of as many elements as `old`) read as a view of `old` with `strides`,
/// where it is one (each dim of `new` splits or merges dims of `old` that are laid out as
/// one); `None` where it is not.
pub(crate) fn view_strides(old: &[usize], strides: &[usize], new: &[usize]) -> Option<Vec<usize>> {
    if old == new {
        return Some(strides.to_vec());
    }
    // Dims of size 1 carry no layout: their strides are 0.
    let kept: Vec<(usize, usize)> = old
        .iter()
        .zip(strides)
        .filter(|(n, _)| **n != 1)
        .map(|(&n, &s)| (n, s))
        .collect();
    let want: Vec<(usize, usize)> = new
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, n)| *n != 1)
        .collect();
    let mut out = vec![0; new.len()];
    let (mut o, mut w) = (kept.len(), want.len());
    while o > 0 {
        // A run of old dims laid out as one: its elements and its innermost stride.
        let (mut n, inner) = kept[o - 1];
        o -= 1;
        while o > 0 && kept[o - 1].1 == kept[o].1 * kept[o].0 {
            n *= kept[o - 1].0;
            o -= 1;
        }
        let mut have = 1;
        while have < n {
            let (at, m) = *want.get(w.checked_sub(1)?)?;
            w -= 1;
            out[at] = inner * have;
            have *= m;
        }
        if have != n {
            return None;
        }
    }
    (w == 0).then_some(out)
}

impl GraphBuilder {
    /// The graph without the nodes whose results are temporaries of their own that nothing
    /// reads (nor a graph output), repeated until none is left: computations the fusions and
    /// the joining of steps left behind. A node writing state in place (a KV cache) is never
    /// one. `None` where there is none.
    pub(crate) fn without_dead_temps(&self) -> Option<GraphBuilder> {
        let mut drop = vec![false; self.nodes.len()];
        loop {
            let mut readers = vec![0usize; self.storages.len()];
            for (k, n) in self.nodes.iter().enumerate() {
                if !drop[k] {
                    for t in n.op.inputs() {
                        readers[self.tensors[t.0].storage] += 1;
                    }
                }
            }
            for t in &self.outputs {
                readers[self.tensors[t.0].storage] += 1;
            }
            let mut changed = false;
            for (k, n) in self.nodes.iter().enumerate() {
                let st = self.tensors[n.out.0].storage;
                let own = self.storages[st].tensor == n.out
                    && matches!(self.storages[st].kind, StorageKind::Temp);
                if own && !drop[k] && readers[st] == 0 {
                    drop[k] = true;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        retain(self.clone(), &drop)
    }
}

/// `g` without the nodes already `gone` (permutes whose results the kernel writes), the
/// `absorbed` nodes whose results nothing reads any more (nor a graph
/// output), and without the unread nodes reading what they computed or read only by nodes
/// that went, repeated until none is left.
pub(crate) fn without_unread(
    g: GraphBuilder,
    absorbed: &[bool],
    gone: Vec<bool>,
) -> Option<GraphBuilder> {
    let mut drop = gone;
    let mut writers_of = vec![Vec::new(); g.storages.len()];
    let mut was_read = vec![false; g.storages.len()];
    for (k, n) in g.nodes.iter().enumerate() {
        writers_of[g.tensors[n.out.0].storage].push(k);
        for t in n.op.inputs() {
            was_read[g.tensors[t.0].storage] = true;
        }
    }
    loop {
        let mut readers = vec![0usize; g.storages.len()];
        let mut writers = vec![0usize; g.storages.len()];
        for (k, n) in g.nodes.iter().enumerate() {
            if drop[k] {
                continue;
            }
            for t in n.op.inputs() {
                readers[g.tensors[t.0].storage] += 1;
            }
            writers[g.tensors[n.out.0].storage] += 1;
        }
        for t in &g.outputs {
            readers[g.tensors[t.0].storage] += 1;
        }
        let mut changed = false;
        for (k, n) in g.nodes.iter().enumerate() {
            let st = g.tensors[n.out.0].storage;
            // Absorbed, reading an absorbed node's result (a cast of the scores), or read
            // only by nodes that went.
            let candidate = absorbed[k]
                || was_read[st]
                || n.op.inputs().iter().any(|t| {
                    writers_of[g.tensors[t.0].storage]
                        .iter()
                        .any(|&j| absorbed[j])
                });
            let temp = matches!(g.storages[st].kind, StorageKind::Temp);
            if candidate && temp && !drop[k] && readers[st] == 0 && writers[st] == 1 {
                drop[k] = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    // The fused node itself always changed the graph.
    retain(g.clone(), &drop).or(Some(g))
}

/// A row-major `rows x cols` matrix of `es`-byte elements, transposed (`cols x rows`), in
/// blocks of 32 x 32 elements so that reads and writes both stay in cache: a large model's
/// weights are transposed once at load, and an element at a time took most of it.
pub(crate) fn transposed(bytes: &[u8], rows: usize, cols: usize, es: usize) -> Vec<u8> {
    // A constant N makes each element's copy a few moves instead of a call; 0 takes `es`.
    fn blocked<const N: usize>(src: &[u8], rows: usize, cols: usize, es: usize) -> Vec<u8> {
        let es = if N == 0 { es } else { N };
        let mut dst = vec![0u8; rows * cols * es];
        const B: usize = 32;
        for r0 in (0..rows).step_by(B) {
            for c0 in (0..cols).step_by(B) {
                for r in r0..(r0 + B).min(rows) {
                    for c in c0..(c0 + B).min(cols) {
                        let (s, d) = ((r * cols + c) * es, (c * rows + r) * es);
                        dst[d..d + es].copy_from_slice(&src[s..s + es]);
                    }
                }
            }
        }
        dst
    }
    match es {
        1 => blocked::<1>(bytes, rows, cols, es),
        2 => blocked::<2>(bytes, rows, cols, es),
        4 => blocked::<4>(bytes, rows, cols, es),
        8 => blocked::<8>(bytes, rows, cols, es),
        _ => blocked::<0>(bytes, rows, cols, es),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_of_strided_tensors() {
        // [2, 3, 4] contiguous, viewed as [6, 4] and [2, 12].
        let s = row_major(&[2, 3, 4]);
        assert_eq!(view_strides(&[2, 3, 4], &s, &[6, 4]), Some(vec![4, 1]));
        assert_eq!(view_strides(&[2, 3, 4], &s, &[2, 12]), Some(vec![12, 1]));
        assert_eq!(
            view_strides(&[2, 3, 4], &s, &[1, 2, 3, 1, 4]),
            Some(vec![0, 12, 4, 0, 1])
        );
        // The transpose [4, 3] of a [3, 4] cannot merge into [12].
        assert_eq!(view_strides(&[4, 3], &[1, 4], &[12]), None);
        // but splits: [4, 3] -> [2, 2, 3].
        assert_eq!(
            view_strides(&[4, 3], &[1, 4], &[2, 2, 3]),
            Some(vec![2, 1, 4])
        );
    }

    #[test]
    fn matrices_transpose_in_blocks_for_every_element_size() {
        for es in [1, 2, 3, 4, 8] {
            for (rows, cols) in [(1, 1), (3, 70), (65, 33), (40, 1)] {
                let bytes: Vec<u8> = (0..rows * cols * es).map(|i| (i * 7 % 251) as u8).collect();
                let t = super::transposed(&bytes, rows, cols, es);
                for r in 0..rows {
                    for c in 0..cols {
                        let (s, d) = ((r * cols + c) * es, (c * rows + r) * es);
                        assert_eq!(t[d..d + es], bytes[s..s + es], "{es} {rows}x{cols}");
                    }
                }
            }
        }
    }
}
