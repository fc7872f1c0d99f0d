//! Concatenations written in place: the parts of a `cat` are laid out inside the result's
//! storage, so their producers write there and the cat's copies go. Slices that are one
//! contiguous range of their source (a batch-1 `chunk` along channels) are views of it.
//!
//! A part can lie in the result where it is a contiguous range of it: every dim before the
//! cat's dim has size 1 (a batch-1 channel concat). A part's storage moves into the result
//! whole, so every view of it moves along. Cats of cats nest: a DenseNet block's
//! `cat([x0, .., xk])` of each layer finds `x0 .. x(k-1)` already laid out by the layer
//! before, moves that storage into its own and puts `xk` after it; a cat whose parts already
//! lie side by side, in order, in one storage is a view of that range.
//!
//! The layout is decided on the graph as lowering gets it, after every pass: the other passes
//! never see a storage inside another. Memory planning gives the outermost storage a buffer
//! and each storage inside it a range of that buffer; hazards between dispatches are judged
//! on those byte ranges (`build::Extent`).

use crate::graph::{GraphBuilder, Op, StorageKind, TensorId};

/// Where each storage lies, and which cats need no dispatch.
#[derive(Debug, Clone, Default)]
pub(crate) struct Placement {
    /// Per storage: the storage it lies in (one placed nowhere) and its byte offset there.
    pub within: Vec<Option<(usize, u64)>>,
    /// Per node: a cat whose result its parts already make up, or a slice that is a view.
    pub placed: Vec<bool>,
}

impl Placement {
    /// Nothing placed: every storage its own, every cat copied.
    pub fn none(storages: usize, nodes: usize) -> Placement {
        Placement {
            within: vec![None; storages],
            placed: vec![false; nodes],
        }
    }

    /// `s`'s outermost storage and its offset there.
    pub fn root(&self, s: usize) -> (usize, u64) {
        root_in(&self.within, s)
    }

    /// Lays `r` (an outermost storage) at `offset` in `parent` (another), with everything
    /// that lies in `r`.
    fn place(&mut self, r: usize, parent: usize, offset: u64) {
        for w in self.within.iter_mut().flatten() {
            if w.0 == r {
                *w = (parent, w.1 + offset);
            }
        }
        self.within[r] = Some((parent, offset));
    }
}

/// `s`'s outermost storage and its offset there, by a [`Placement::within`] (which may be
/// shorter than the storages: those past its end lie nowhere).
pub(crate) fn root_in(within: &[Option<(usize, u64)>], s: usize) -> (usize, u64) {
    within.get(s).copied().flatten().unwrap_or((s, 0))
}

/// Who may be placed: storages written once, counted over the graph's nodes.
struct Writers<'a> {
    b: &'a GraphBuilder,
    count: Vec<usize>,
}

impl Writers<'_> {
    /// A temporary written by one node: its bytes stay as written once it is, so a view of
    /// them reads what a copy would have.
    fn once(&self, s: usize) -> bool {
        matches!(self.b.storages[s].kind, StorageKind::Temp) && self.count[s] == 1
    }

    /// Written once and placed nowhere yet.
    fn movable(&self, p: &Placement, s: usize) -> bool {
        self.once(s) && p.within[s].is_none()
    }
}

/// One part of a cat: where its bytes lie now and where they go in the result.
struct Part {
    root: usize,
    offset: u64,
    bytes: u64,
    at: u64,
}

impl GraphBuilder {
    /// Lays out in their results the cats whose parts allow it. Offsets and part sizes are
    /// multiples of `align` bytes (the device's storage-buffer offset alignment, and whole
    /// vec4s, so a vectorised producer never writes into its neighbour).
    pub(crate) fn concats_in_place(&self, align: u64) -> Placement {
        let mut p = Placement::none(self.storages.len(), self.nodes.len());
        let mut count = vec![0usize; self.storages.len()];
        for node in &self.nodes {
            count[self.tensors[node.out.0].storage] += 1;
        }
        let w = Writers { b: self, count };
        for (i, node) in self.nodes.iter().enumerate() {
            p.placed[i] = match &node.op {
                Op::Slice {
                    x,
                    dim,
                    start,
                    step,
                } => {
                    *step == 1
                        && self.slice_as_view(&mut p, &w, (*x, *dim, *start), node.out, align)
                }
                Op::Cat { xs, dim } => {
                    self.cat_in_place(&mut p, &w, (i, xs, *dim), node.out, align)
                }
                _ => false,
            };
        }
        p
    }

    /// Makes a slice of `x` from `start` along `dim` a view of its source where it is one
    /// contiguous, aligned range of it; whether it did.
    fn slice_as_view(
        &self,
        p: &mut Placement,
        w: &Writers<'_>,
        (x, dim, start): (TensorId, usize, usize),
        out: TensorId,
        align: u64,
    ) -> bool {
        let y = self.tensors[out.0].storage;
        let xi = &self.tensors[x.0];
        let outer: usize = xi.shape[..dim].iter().product();
        let inner: usize = xi.shape[dim + 1..].iter().product();
        let (root, offset) = p.root(xi.storage);
        let at = offset + (start * inner * xi.dtype.size()) as u64;
        let source = w.once(xi.storage) && w.once(root);
        if outer == 1 && at % align == 0 && source && w.movable(p, y) {
            p.place(y, root, at);
            return true;
        }
        false
    }

    /// Lays out in cat `i`'s result the parts that can lie there; whether every part does
    /// (the cat then needs no dispatch).
    fn cat_in_place(
        &self,
        p: &mut Placement,
        w: &Writers<'_>,
        (i, xs, dim): (usize, &[TensorId], usize),
        out: TensorId,
        align: u64,
    ) -> bool {
        let y = &self.tensors[out.0];
        let ys = y.storage;
        let outer: usize = y.shape[..dim].iter().product();
        if outer != 1 || !w.movable(p, ys) {
            log::debug!(
                "cat {i} keeps its copies: outer dims {outer}, or its result is not a temporary of its own"
            );
            return false;
        }
        let Some(parts) = self.parts(p, xs, align) else {
            log::debug!("cat {i} keeps its copies: a part is not a multiple of {align} bytes");
            return false;
        };
        if let Some((r, offset)) = as_view(&parts, ys).filter(|v| w.once(v.0)) {
            p.place(ys, r, offset);
            return true;
        }
        let groups = groups(&parts);
        let whole = |g: &[Part]| {
            let r = g[0].root;
            let bytes: u64 = g.iter().map(|x| x.bytes).sum();
            r != ys
                && g[0].offset == 0
                && self.storages[r].bytes == bytes
                && groups.iter().filter(|h| h[0].root == r).count() == 1
        };
        // Parts that cannot move are copied by the cat as before; a cat with none left
        // lowers to nothing.
        let mut all = true;
        for g in &groups {
            if whole(g) && w.movable(p, g[0].root) {
                p.place(g[0].root, ys, g[0].at);
            } else {
                all = false;
                let (at, root, offset) = (g[0].at, g[0].root, g[0].offset);
                log::debug!("cat {i} copies its part at {at}: storage {root}, offset {offset}");
            }
        }
        all
    }

    /// The cat's parts, or `None` where one's size is not a multiple of `align`.
    fn parts(&self, p: &Placement, xs: &[TensorId], align: u64) -> Option<Vec<Part>> {
        let mut at = 0;
        let mut parts = Vec::with_capacity(xs.len());
        for &x in xs {
            let info = &self.tensors[x.0];
            let bytes = (info.numel() * info.dtype.size()) as u64;
            if bytes % align != 0 {
                return None;
            }
            let (root, offset) = p.root(info.storage);
            parts.push(Part {
                root,
                offset,
                bytes,
                at,
            });
            at += bytes;
        }
        Some(parts)
    }
}

/// Where the parts already lie side by side, in order, in one storage other than the result:
/// that storage and the first part's offset.
fn as_view(parts: &[Part], ys: usize) -> Option<(usize, u64)> {
    let first = parts.first()?;
    let side_by_side = parts
        .iter()
        .all(|x| x.root == first.root && x.offset == first.offset + x.at);
    (side_by_side && first.root != ys).then_some((first.root, first.offset))
}

/// Runs of parts that lie side by side in one storage.
fn groups(parts: &[Part]) -> Vec<&[Part]> {
    let mut out = Vec::new();
    let mut start = 0;
    for k in 1..=parts.len() {
        let ends = k == parts.len() || {
            let (a, b) = (&parts[start], &parts[k]);
            b.root != a.root || b.offset != a.offset + (b.at - a.at)
        };
        if ends {
            out.push(&parts[start..k]);
            start = k;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::graph::{GraphBuilder, TensorId};
    use vk_core::DType;

    fn conv_like(b: &mut GraphBuilder, x: TensorId) -> TensorId {
        b.relu(x).unwrap()
    }

    #[test]
    fn dense_blocks_nest_in_one_storage() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, &[1, 4, 2, 2]).unwrap();
        let x0 = conv_like(&mut b, x);
        let x1 = conv_like(&mut b, x0);
        let c1 = b.cat(&[x0, x1], 1).unwrap();
        let x2 = conv_like(&mut b, c1);
        let c2 = b.cat(&[x0, x1, x2], 1).unwrap();
        let x3 = conv_like(&mut b, c2);
        let c3 = b.cat(&[x0, x1, x2, x3], 1).unwrap();
        let y = conv_like(&mut b, c3);
        b.output(y).unwrap();
        let p = b.concats_in_place(16);
        let st = |t: TensorId| b.tensors[t.0].storage;
        let root = st(c3);
        assert_eq!(p.within[root], None);
        let mut at = 0;
        for (k, t) in [x0, x1, x2, x3].into_iter().enumerate() {
            assert_eq!(p.root(st(t)), (root, at), "part {k}");
            at += b.tensors[t.0].numel() as u64 * 4;
        }
        assert_eq!(p.root(st(c1)), (root, 0));
        assert_eq!(p.root(st(c2)), (root, 0));
        assert_eq!(p.placed.iter().filter(|&&x| x).count(), 3);
    }

    #[test]
    fn parts_that_cannot_lie_in_place_keep_their_copies() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, &[2, 4, 2, 2]).unwrap();
        let a = conv_like(&mut b, x);
        let c = conv_like(&mut b, x);
        // Batch 2: the parts interleave in the result.
        let batch = b.cat(&[a, c], 1).unwrap();
        // One part twice.
        let twice = b.cat(&[c, c], 0).unwrap();
        // 3 floats: not whole vec4s.
        let v = b.input("v", DType::F32, &[3]).unwrap();
        let v1 = conv_like(&mut b, v);
        let v2 = conv_like(&mut b, v);
        let odd = b.cat(&[v1, v2], 0).unwrap();
        // A slice of batch 2 along channels: two ranges.
        let strided = b.slice(a, 1, 0, 2, 1).unwrap();
        for t in [batch, twice, odd, strided] {
            let y = conv_like(&mut b, t);
            b.output(y).unwrap();
        }
        let p = b.concats_in_place(16);
        assert!(p.placed.iter().all(|&x| !x));
        assert!(p.within.iter().all(Option::is_none));
        // A graph input is not a temporary: the other part moves, the input is copied.
        let with_input = b.cat(&[a, x], 0).unwrap();
        let y = conv_like(&mut b, with_input);
        b.output(y).unwrap();
        let p = b.concats_in_place(16);
        let st = |t: TensorId| b.tensors[t.0].storage;
        assert_eq!(p.root(st(a)), (st(with_input), 0));
        assert_eq!(p.within[st(x)], None);
        assert!(p.placed.iter().all(|&x| !x));
    }

    #[test]
    fn a_part_in_two_cats_lies_in_the_first() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, &[1, 4, 2, 2]).unwrap();
        let a = conv_like(&mut b, x);
        let c = conv_like(&mut b, x);
        let d = conv_like(&mut b, x);
        let first = b.cat(&[a, c], 1).unwrap();
        // `c` now lies 64 bytes into `first`, not at the start of anything: the second cat
        // copies it and takes `d` in place.
        let second = b.cat(&[c, d], 1).unwrap();
        let y = b.add(first, first).unwrap();
        let z = b.add(second, second).unwrap();
        b.output(y).unwrap();
        b.output(z).unwrap();
        let p = b.concats_in_place(16);
        assert_eq!(p.placed.iter().filter(|&&x| x).count(), 1);
        let st = |t: TensorId| b.tensors[t.0].storage;
        assert_eq!(p.root(st(c)), (st(first), 64));
        assert_eq!(p.root(st(d)), (st(second), 64));
    }

    #[test]
    fn views_are_only_of_temporaries_written_once() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, &[1, 8, 2, 2]).unwrap();
        // A cat of one part, and a slice, of a graph input (which a caller may rebind): copies.
        let one = b.cat(&[x], 1).unwrap();
        let half = b.slice(x, 1, 0, 4, 1).unwrap();
        // The same of a temporary: views.
        let a = conv_like(&mut b, x);
        let one_a = b.cat(&[a], 1).unwrap();
        let half_a = b.slice(one_a, 1, 4, 8, 1).unwrap();
        for t in [one, half, one_a, half_a] {
            let y = conv_like(&mut b, t);
            b.output(y).unwrap();
        }
        let st = |t: TensorId| b.tensors[t.0].storage;
        let p = b.concats_in_place(16);
        assert_eq!(p.within[st(one)], None);
        assert_eq!(p.within[st(half)], None);
        assert_eq!(p.root(st(one_a)), (st(a), 0));
        assert_eq!(p.root(st(half_a)), (st(a), 64));
    }

    #[test]
    fn contiguous_slices_are_views() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, &[1, 8, 2, 2]).unwrap();
        let a = conv_like(&mut b, x);
        // A channel shuffle's chunks: each half a range of `a`.
        let lo = b.slice(a, 1, 0, 4, 1).unwrap();
        let hi = b.slice(a, 1, 4, 8, 1).unwrap();
        // Every other channel: strided, a copy.
        let odd = b.slice(a, 1, 1, 8, 2).unwrap();
        // One channel of 4 floats: 16 bytes in, aligned to 16 but not to 64.
        let one = b.slice(a, 1, 1, 2, 1).unwrap();
        let y = b.add(lo, hi).unwrap();
        let z = b.add(odd, lo).unwrap();
        let w = conv_like(&mut b, one);
        for t in [y, z, w] {
            b.output(t).unwrap();
        }
        let st = |t: TensorId| b.tensors[t.0].storage;
        let p = b.concats_in_place(16);
        assert_eq!(p.root(st(lo)), (st(a), 0));
        assert_eq!(p.root(st(hi)), (st(a), 64));
        assert_eq!(p.root(st(one)), (st(a), 16));
        assert_eq!(p.within[st(odd)], None);
        assert_eq!(p.placed.iter().filter(|&&x| x).count(), 3);
        let p = b.concats_in_place(64);
        assert_eq!(p.within[st(one)], None);
        assert_eq!(p.root(st(hi)), (st(a), 64));
    }
}
