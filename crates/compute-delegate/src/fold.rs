//! Nodes whose results follow from constants alone, run once at build
//! ([`GraphBuilder::with_constants_folded`]): a shifted-window mask made of fills, slices and
//! concats, position indices and their casts, a bias table looked up by a constant index.
//! Their results become constants of the graph, and the nodes go.
//!
//! They run on the device, on the graph's own kernels, as a graph of their own, so that a
//! folded constant holds the bits the unfolded node would have written.
//!
//! A convolution's result scaled per output channel by a constant (a ConvNeXt block's layer
//! scale) becomes such nodes too: the scale multiplies the weights and the bias instead
//! ([`GraphBuilder::with_channel_scales_folded`]); and so does a layer norm before a linear
//! layer, whose scale and shift move into the layer's weight and bias
//! ([`GraphBuilder::with_norms_folded_into_products`]).

use vk_core::Device;

use crate::error::Result;
use crate::fusion::Uses;
use vk_core::DType;

use crate::graph::{BinaryOp, GraphBuilder, Op, RowNorm, StorageKind, TensorId};
use crate::options::BuildOptions;
use crate::passes::retain;

/// A folded result of at most this many bytes is kept whatever its inputs' size.
const FREE_BYTES: usize = 1 << 20;
/// No folded result is larger (a weight's permute of a large model stays a node).
const MAX_BYTES: usize = 64 << 20;

impl GraphBuilder {
    /// Per node: whether it reads only constants (that no node writes: not state) or results
    /// of such nodes, writes a temporary of its own, and does not grow what it reads past
    /// [`FREE_BYTES`] (a dequantized weight stays packed).
    pub(crate) fn foldable(&self) -> Vec<bool> {
        let uses = Uses::of(self);
        let mut constant: Vec<bool> = self
            .storages
            .iter()
            .zip(&uses.writers)
            .map(|(st, w)| matches!(st.kind, StorageKind::Const(_)) && w.is_empty())
            .collect();
        let mut fold = vec![false; self.nodes.len()];
        for (k, node) in self.nodes.iter().enumerate() {
            let st = self.tensors[node.out.0].storage;
            let own = self.storages[st].tensor == node.out
                && matches!(self.storages[st].kind, StorageKind::Temp)
                && uses.writers[st] == [k];
            let inputs = node.op.inputs();
            let reads_constants = inputs.iter().all(|t| constant[self.tensors[t.0].storage]);
            if !(own && reads_constants && pure(&node.op)) {
                continue;
            }
            let bytes = |t: &TensorId| self.tensors[t.0].numel() * self.tensors[t.0].dtype.size();
            let out = bytes(&node.out);
            let mut read: Vec<(usize, usize)> = inputs
                .iter()
                .map(|t| (self.tensors[t.0].storage, bytes(t)))
                .collect();
            read.sort_unstable();
            read.dedup_by_key(|r| r.0);
            let read: usize = read.iter().map(|r| r.1).sum();
            if out <= MAX_BYTES && (out <= FREE_BYTES || out <= read) {
                fold[k] = true;
                constant[st] = true;
            }
        }
        fold
    }

    /// The graph with its [`GraphBuilder::foldable`] nodes run once on `device` and their
    /// results read by other nodes made constants. `None` where there is none, or where they
    /// could not be run (the graph is then built as written, and fails there if it must).
    pub(crate) fn with_constants_folded(
        &self,
        device: &Device,
        options: &BuildOptions,
    ) -> Option<GraphBuilder> {
        let fold = self.foldable();
        if !fold.contains(&true) {
            return None;
        }
        match self.fold(device, options, &fold) {
            Ok(g) => Some(g),
            Err(e) => {
                log::debug!("constant nodes left to run with the graph: {e}");
                None
            }
        }
    }

    fn fold(&self, device: &Device, options: &BuildOptions, fold: &[bool]) -> Result<Self> {
        // The storages of folded results that the graph's other nodes, or its outputs, read.
        let mut read_after = vec![false; self.storages.len()];
        let kept = self.nodes.iter().zip(fold).filter(|&(_, &f)| !f);
        for t in kept
            .flat_map(|(n, _)| n.op.inputs())
            .chain(self.outputs.clone())
        {
            read_after[self.tensors[t.0].storage] = true;
        }
        let results: Vec<usize> = self
            .nodes
            .iter()
            .zip(fold)
            .filter(|&(_, &f)| f)
            .map(|(n, _)| self.tensors[n.out.0].storage)
            .filter(|&s| read_after[s])
            .collect();
        let kept: Vec<bool> = fold.iter().map(|&f| !f).collect();
        let mut part = retain(self.clone(), &kept).unwrap_or_else(|| self.clone());
        part.inputs.clear();
        part.outputs.clear();
        for &s in &results {
            part.output(self.storages[s].tensor)?;
        }
        let once = BuildOptions {
            unfolded: true,
            external: Default::default(),
            embedded: false,
            constants: None,
            ..options.clone()
        };
        let values = part.build_with(device, &once)?.execute(&[])?;
        let mut g = retain(self.clone(), fold).unwrap_or_else(|| self.clone());
        for (s, v) in results.into_iter().zip(values) {
            g.storages[s].kind = StorageKind::Const(v.into_bytes().into());
        }
        Ok(g)
    }
}

impl GraphBuilder {
    /// The graph with each product of a convolution's result and a constant per output
    /// channel (`[c, 1, 1]`: a ConvNeXt block's layer scale) folded into the convolution: the
    /// scale multiplies its weights and bias (new nodes on constants, first in the graph,
    /// which [`GraphBuilder::with_constants_folded`] runs once) and the multiplication goes,
    /// so that the convolution's result is final and a residual after it fuses into it. The
    /// result must be a temporary of its own that the multiplication alone reads, the weights
    /// and bias constants. `None` where there is none.
    pub(crate) fn with_channel_scales_folded(&self) -> Option<GraphBuilder> {
        let scaled = self.channel_scales();
        if scaled.is_empty() {
            return None;
        }
        let mut g = self.clone();
        let mut drop = vec![false; self.nodes.len()];
        let first_new = g.nodes.len();
        for (i, j, s) in scaled {
            let Op::Conv { w, bias, .. } = g.nodes[i].op.clone() else {
                continue;
            };
            let c = g.tensors[w.0].shape[0] as isize;
            let per_filter = g.reshape(s, &[c, 1, 1, 1]).ok()?;
            let w2 = g.mul(w, per_filter).ok()?;
            let b2 = match bias {
                Some(b) => {
                    let per_channel = g.reshape(s, &[c]).ok()?;
                    Some(g.mul(b, per_channel).ok()?)
                }
                None => None,
            };
            if let Op::Conv { w, bias, .. } = &mut g.nodes[i].op {
                (*w, *bias) = (w2, b2);
            }
            g.nodes[i].out = self.nodes[j].out;
            drop[j] = true;
        }
        new_nodes_first(g, drop, first_new)
    }

    /// The convolutions whose result a constant per output channel scales, as (the
    /// convolution's node, the multiplication's node, the scale).
    fn channel_scales(&self) -> Vec<(usize, usize, TensorId)> {
        let uses = Uses::of(self);
        let constant = |t: TensorId| self.fixed(&uses, t);
        let mut found: Vec<(usize, usize, TensorId)> = Vec::new();
        for (j, node) in self.nodes.iter().enumerate() {
            let Op::Binary {
                op: BinaryOp::Mul,
                a,
                b,
            } = node.op
            else {
                continue;
            };
            for (y, s) in [(a, b), (b, a)] {
                let st = self.tensors[y.0].storage;
                let [i] = uses.writers[st][..] else {
                    continue;
                };
                let Op::Conv {
                    w,
                    bias,
                    out_last: false,
                    ..
                } = self.nodes[i].op
                else {
                    continue;
                };
                let own = self.storages[st].tensor == y
                    && self.nodes[i].out == y
                    && uses.readers[st] == 1
                    && matches!(self.storages[st].kind, StorageKind::Temp);
                let out = self.tensors[node.out.0].storage;
                let writes = uses.writers[out][..] == [j] && self.storages[out].tensor == node.out;
                let (yi, si) = (&self.tensors[y.0], &self.tensors[s.0]);
                let fits = yi.shape == self.tensors[node.out.0].shape
                    && si.dtype == yi.dtype
                    && per_channel(&si.shape, &yi.shape);
                let constants = constant(w) && bias.is_none_or(constant) && constant(s);
                if own && writes && fits && constants && !found.iter().any(|f| f.0 == i) {
                    found.push((i, j, s));
                    break;
                }
            }
        }
        found
    }
}

impl GraphBuilder {
    /// The graph with each fp16 layer norm over rows whose result a linear layer alone reads
    /// folded into that layer (`Op::Matmul`'s `norm`): the norm's scale multiplies the
    /// weight's columns, its shift through the weight joins the bias, the sums of the
    /// weight's rows are kept (widened to fp32), and the product computes each row's
    /// statistics itself (new nodes on
    /// constants, first in the graph, which the constant folding runs once). One dispatch
    /// instead of two, and the norm's result never reaches memory. Only where `on_matrices`
    /// says the products run on the workgroup-scope cooperative kernel, the one that folds it;
    /// the layer must have more rows than the few-row kernels take. `None` where there is
    /// none.
    pub(crate) fn with_norms_folded_into_products(
        &self,
        on_matrices: impl FnOnce() -> bool,
    ) -> Option<GraphBuilder> {
        let found = self.norms_before_products();
        if found.is_empty() || !on_matrices() {
            return None;
        }
        let mut g = self.clone();
        let mut drop = vec![false; self.nodes.len()];
        let first_new = g.nodes.len();
        for (k, i) in found {
            let Op::LayerNorm {
                x,
                weight,
                bias: shift,
                d,
                eps,
                ..
            } = self.nodes[k].op
            else {
                continue;
            };
            let Op::Matmul { a, b: w, bias, .. } = self.nodes[i].op else {
                continue;
            };
            let nout = self.tensors[w.0].shape[0] as isize;
            let row = [1, d as isize];
            let scaled = match weight {
                Some(scale) => {
                    let s = g.reshape(scale, &row).ok()?;
                    g.mul(w, s).ok()?
                }
                None => w,
            };
            // Summed as stored (a cast first would double the weight's bytes, too many to
            // fold), then widened: the kernel reads fp32.
            let sums = g.sum(scaled, &[1], false).ok()?;
            let colsum = g.cast(sums, DType::F32).ok()?;
            let bias = match shift {
                Some(shift) => {
                    let s = g.reshape(shift, &row).ok()?;
                    let through = g.linear(s, w, bias).ok()?;
                    Some(g.reshape(through, &[nout]).ok()?)
                }
                None => bias,
            };
            let ai = &self.tensors[a.0];
            let name = format!("{}.raw", ai.name);
            let storage = Some((StorageKind::Temp, Some(self.tensors[x.0].storage)));
            let raw = g.push_tensor(name, ai.dtype, ai.shape.clone(), storage);
            g.nodes[i].op = Op::Matmul {
                a: raw,
                b: scaled,
                bias,
                linear: true,
                norm: Some(RowNorm { colsum, eps }),
            };
            drop[k] = true;
        }
        new_nodes_first(g, drop, first_new)
    }

    /// The fp16 layer norms over contiguous rows whose result one linear layer alone reads
    /// (its weight and bias, and the norm's, constants), as (the norm's node, the layer's).
    fn norms_before_products(&self) -> Vec<(usize, usize)> {
        let uses = Uses::of(self);
        let constant = |t: TensorId| self.fixed(&uses, t);
        let mut found = Vec::new();
        for (k, node) in self.nodes.iter().enumerate() {
            let Op::LayerNorm {
                x,
                weight,
                bias,
                d,
                rms: false,
                plane: 0,
                ..
            } = node.op
            else {
                continue;
            };
            let st = self.tensors[node.out.0].storage;
            let own = self.storages[st].tensor == node.out
                && uses.writers[st][..] == [k]
                && uses.readers[st] == 1
                && matches!(self.storages[st].kind, StorageKind::Temp);
            let xi = &self.tensors[x.0];
            let fits = own
                && xi.dtype == DType::F16
                && xi.shape.last() == Some(&d)
                && weight.is_none_or(constant)
                && bias.is_none_or(constant);
            if !fits {
                continue;
            }
            let reader = self.nodes.iter().enumerate().skip(k + 1).find(|(_, n)| {
                n.op.inputs()
                    .iter()
                    .any(|t| self.tensors[t.0].storage == st)
            });
            let Some((i, reader)) = reader else {
                continue;
            };
            let Op::Matmul {
                a,
                b,
                bias: layer_bias,
                linear: true,
                norm: None,
            } = reader.op
            else {
                continue;
            };
            let (ai, wi) = (&self.tensors[a.0], &self.tensors[b.0]);
            let rows = ai.numel() / d.max(1);
            // Nothing writes the norm's input between the norm and the layer, which reads it
            // in the norm's place; the scaled weight is small enough to fold.
            let x_st = self.tensors[x.0].storage;
            let still = uses.writers[x_st].iter().all(|&w| w < k || w > i);
            let folds = wi.numel() * wi.dtype.size() <= MAX_BYTES;
            let takes = still
                && folds
                && self.tensors[a.0].storage == st
                && ai.shape.last() == Some(&d)
                && wi.shape.len() == 2
                && wi.shape[1] == d
                && wi.dtype == DType::F16
                && self.tensors[reader.out.0].dtype == DType::F16
                && rows > crate::lower::GEMV_T_MAX_ROWS
                && constant(b)
                && layer_bias.is_none_or(constant);
            if takes {
                found.push((k, i));
            }
        }
        found
    }
}

impl GraphBuilder {
    /// Whether `t` is a constant no node writes (not state): what a fold may rewrite.
    fn fixed(&self, uses: &Uses, t: TensorId) -> bool {
        let st = self.tensors[t.0].storage;
        matches!(self.storages[st].kind, StorageKind::Const(_)) && uses.writers[st].is_empty()
    }
}

/// `g` without the nodes `drop` marks, and with the nodes a fold added from `first_new` on
/// (they read constants alone) moved first, before the nodes that read their results.
fn new_nodes_first(g: GraphBuilder, mut drop: Vec<bool>, first_new: usize) -> Option<GraphBuilder> {
    let added = g.nodes.len() - first_new;
    drop.resize(g.nodes.len(), false);
    let mut g = retain(g, &drop)?;
    g.nodes.rotate_right(added);
    Some(g)
}

/// Environment variable: `0` keeps layer norms before linear layers as dispatches of their
/// own, for tuning (default: folded into the layers where
/// [`GraphBuilder::with_norms_folded_into_products`] applies).
pub const ENV_NORMS_INTO_PRODUCTS: &str = "VKDELEGATE_NORMS_INTO_PRODUCTS";

/// Whether [`ENV_NORMS_INTO_PRODUCTS`] lets norms fold into products (the default).
pub(crate) fn norms_into_products() -> bool {
    std::env::var(ENV_NORMS_INTO_PRODUCTS).map_or(true, |v| v.trim() != "0")
}

/// Whether a tensor of shape `s` broadcast against `[n, c, h, w]` holds one value per channel.
fn per_channel(s: &[usize], y: &[usize]) -> bool {
    let r = s.len();
    y.len() == 4
        && r <= 4
        && s.iter().product::<usize>() == y[1]
        && s.iter().enumerate().all(|(d, &n)| n == 1 || d + 4 - r == 1)
}

/// Whether an op's result depends on its operands alone.
fn pure(op: &Op) -> bool {
    match op {
        #[cfg(feature = "bench")]
        Op::FmaProbe { .. } => false,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use vk_core::DType;

    use super::*;

    #[test]
    fn only_what_follows_from_constants_folds() {
        let mut g = GraphBuilder::new();
        let x = g.input("x", DType::F32, &[4, 4]).unwrap();
        let c = g.full("c", &[4, 4], 2.0).unwrap();
        let from_c = g.add_scalar(c, 1.0).unwrap(); // folds
        let from_both = g.add(from_c, x).unwrap(); // reads an input
        // State: a constant the graph writes in place is not a constant to fold.
        let state = g.full("state", &[4, 4], 0.0).unwrap();
        let read_state = g.relu(state).unwrap();
        let written = g.assign(state, from_both).unwrap();
        // Growth: 2 MiB from 256 KiB stays a node.
        let big = g.full("big", &[65536], 1.0).unwrap();
        let grown = g.cat(&[big; 8], 0).unwrap();
        for t in [read_state, written, grown] {
            g.output(t).unwrap();
        }
        let fold = g.foldable();
        let of = |t: TensorId| fold[g.nodes.iter().position(|n| n.out == t).unwrap()];
        assert!(of(from_c));
        assert!(!of(from_both));
        assert!(!of(read_state));
        assert!(!of(grown));
    }
}
