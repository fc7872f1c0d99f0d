//! Elementwise chains as one dispatch: a pass over the graph IR that joins unary, binary and
//! math nodes whose intermediate results only the next of them reads into one node of
//! `elementwise.comp`, which keeps those results in registers. A GPT-2 MLP's tanh GELU,
//! written out by its exporter as eight ops, is one dispatch; so is a layer scale and its
//! residual add.
//!
//! A chain has one output shape (up to dims of size 1: views between its nodes may add or
//! drop them): every node of it writes that shape, reading the chain's
//! inputs (at most [`MAX_INPUTS`] tensors, broadcast as the nodes broadcast them) or earlier
//! values; scalar constants become the steps' immediates. Nodes a product's or
//! convolution's epilogue takes at lowering (`lower/epilogue.rs`) stay out of chains.

use std::collections::HashMap;

use vk_core::DType;

use crate::graph::{GraphBuilder, Node, Op, StorageKind, TensorId};
use crate::kernels::{Kernel, push};
use crate::lower::{collapse, contiguous_strides};
use crate::passes::retain;

/// Input tensors of a chain (`elementwise.comp`'s bindings).
pub(crate) const MAX_INPUTS: usize = 4;
/// Steps of a chain.
pub(crate) const MAX_STEPS: usize = 12;
/// `elementwise.comp`'s specialization constants a chain sets: its input count, step count,
/// strided inputs and step words. Its split-K constants follow (`lower/gemm.rs`).
pub(crate) const SPEC_WORDS: usize = 3 + MAX_STEPS;
/// The binding of a chain's split-K partial sums: after its inputs and its parameters.
pub(crate) const PARTIALS_BINDING: usize = MAX_INPUTS + 1;
/// Dims of a chain's output after collapsing.
const MAX_RANK: usize = 4;

/// The kind of a step (`elementwise.comp`'s bits 0-1).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Unary = 1,
    Binary = 2,
    Math = 3,
}

/// One node as a step: its kind, op code, operands and parameters.
#[derive(Debug, Clone)]
struct Step {
    kind: Kind,
    code: u32,
    operands: Vec<TensorId>,
    params: [f32; 2],
}

/// A value a step reads: a chain input, an earlier step's value, or an immediate.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Operand {
    Input(usize),
    Step(usize),
    Immediate(f32),
}

/// A tensor a chain reads: bound as `t`, at offset `off`, with strides over the chain's dims
/// (its dims of size 1 dropped).
#[derive(Debug, Clone, PartialEq)]
struct Input {
    t: TensorId,
    off: usize,
    strides: Vec<usize>,
}

/// A copy read through ([`GraphBuilder::read_through`]).
struct Through {
    src: TensorId,
    off: usize,
    strides: Vec<usize>,
    gone: Vec<usize>,
    from: usize,
}

/// A chain being grown: its nodes in order, and the tensor its last node writes.
#[derive(Debug, Clone)]
struct Chain {
    nodes: Vec<usize>,
    out: TensorId,
}

impl GraphBuilder {
    /// The graph with each chain of two or more elementwise nodes as one `elementwise.comp`
    /// node; `None` where there is none.
    pub(crate) fn with_elementwise_chains_fused(&self) -> Option<GraphBuilder> {
        let claimed = crate::lower::claimed_by_products(self);
        let uses = crate::fusion::Uses::of(self);
        let mut chain_of: Vec<Option<usize>> = vec![None; self.nodes.len()];
        let mut chains: Vec<Chain> = Vec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            if claimed[i] || self.chain_step(node).is_none() {
                continue;
            }
            // The chains whose last value this node alone reads.
            let mut joined: Vec<usize> = Vec::new();
            for t in node.op.inputs() {
                let Some(c) = self.feeding_chain(&uses, &chains, &chain_of, t, node) else {
                    continue;
                };
                if !joined.contains(&c) {
                    joined.push(c);
                }
            }
            let mut nodes: Vec<usize> = joined
                .iter()
                .flat_map(|&c| chains[c].nodes.clone())
                .collect();
            nodes.sort_unstable();
            nodes.push(i);
            let grown = Chain {
                nodes,
                out: node.out,
            };
            if !joined.is_empty() && self.chain_node(&uses, &grown).is_some() {
                for &c in &joined {
                    chains[c].nodes.clear();
                }
                for &k in &grown.nodes {
                    chain_of[k] = Some(chains.len());
                }
            } else {
                chain_of[i] = Some(chains.len());
                chains.push(Chain {
                    nodes: vec![i],
                    out: node.out,
                });
                continue;
            }
            chains.push(grown);
        }
        while self.merge_read_values(&uses, &mut chains) {}
        let mut g = self.clone();
        let mut drop = vec![false; self.nodes.len()];
        let mut param_sets: HashMap<Vec<u32>, TensorId> = HashMap::new();
        for c in chains.iter().filter(|c| !c.nodes.is_empty()) {
            let Some((mut op, permutes, params)) = self.chain_node(&uses, c) else {
                continue;
            };
            // One node alone is worth a dispatch of its own only where it reads a permute.
            if c.nodes.len() == 1 && permutes.is_empty() {
                continue;
            }
            let (&last, rest) = c.nodes.split_last()?;
            for &k in rest.iter().chain(&permutes) {
                drop[k] = true;
            }
            // Chains with the same parameters read one constant.
            let bits: Vec<u32> = params.iter().map(|v| v.to_bits()).collect();
            let p = match param_sets.get(&bits) {
                Some(&p) => p,
                None => {
                    let p = g
                        .constant_f32("elementwise chain parameters", &[params.len()], &params)
                        .ok()?;
                    param_sets.insert(bits, p);
                    p
                }
            };
            if let Op::Kernel { inputs, .. } = &mut op {
                inputs.push(p);
            }
            g.nodes[last] = Node { op, out: c.out };
        }
        retain(g, &drop)
    }

    /// Joins a chain whose value several nodes of one other chain read (and nothing else)
    /// into that chain, where the two fit one node: a GPT-2 MLP's biased input, read by three
    /// steps of its GELU. Whether it joined one.
    fn merge_read_values(&self, uses: &crate::fusion::Uses, chains: &mut [Chain]) -> bool {
        let mut chain_of: Vec<Option<usize>> = vec![None; self.nodes.len()];
        for (c, chain) in chains.iter().enumerate() {
            for &k in &chain.nodes {
                chain_of[k] = Some(c);
            }
        }
        for a in 0..chains.len() {
            let Some(&j) = chains[a].nodes.last() else {
                continue;
            };
            let t = chains[a].out;
            let st = self.tensors[t.0].storage;
            let own = self.value_of(j, t) && uses.writers[st] == [j];
            if !own || !matches!(self.storages[st].kind, StorageKind::Temp) {
                continue;
            }
            // Every read of `t` (and none of a view of it) by nodes of one chain `b`.
            let mut reads = 0;
            let mut by = None;
            for (k, node) in self.nodes.iter().enumerate() {
                for x in node.op.inputs() {
                    if self.tensors[x.0].storage != st {
                        continue;
                    }
                    reads += 1;
                    let whole = self.value_of(j, x) && self.same_shape(x, t);
                    if !whole || by.is_some_and(|b| Some(b) != chain_of[k]) {
                        by = Some(usize::MAX);
                    } else {
                        by = chain_of[k].or(Some(usize::MAX));
                    }
                }
            }
            let Some(b) = by.filter(|&b| b != usize::MAX && b != a) else {
                continue;
            };
            let same = self.same_shape(t, chains[b].out);
            if reads != uses.readers[st] || !same {
                continue;
            }
            let mut nodes = [chains[a].nodes.clone(), chains[b].nodes.clone()].concat();
            nodes.sort_unstable();
            let merged = Chain {
                nodes,
                out: chains[b].out,
            };
            if self.chain_node(uses, &merged).is_some() {
                chains[a].nodes.clear();
                chains[b] = merged;
                return true;
            }
        }
        false
    }

    /// The step node `node` computes, where it is an elementwise op of a float dtype.
    fn chain_step(&self, node: &Node) -> Option<Step> {
        if !matches!(self.tensors[node.out.0].dtype, DType::F32 | DType::F16) {
            return None;
        }
        Some(match &node.op {
            Op::Unary { op, x } => {
                let (code, p0, p1) = op.code();
                Step {
                    kind: Kind::Unary,
                    code,
                    operands: vec![*x],
                    params: [p0, p1],
                }
            }
            Op::Binary { op, a, b } => Step {
                kind: Kind::Binary,
                code: op.code(),
                operands: vec![*a, *b],
                params: [0.0; 2],
            },
            Op::Kernel {
                kernel: Kernel::UnaryMath,
                inputs,
                push,
                ..
            } => {
                use push::UnaryMathPush as P;
                let word = |f: usize| push.get(f / 4).copied().unwrap_or(0);
                let [x] = inputs[..] else {
                    return None;
                };
                Step {
                    kind: Kind::Math,
                    code: word(std::mem::offset_of!(P, op)),
                    operands: vec![x],
                    params: [f32::from_bits(word(std::mem::offset_of!(P, p0))), 0.0],
                }
            }
            _ => return None,
        })
    }

    /// The chain whose last value `t` is, where `node` alone reads it, in the same shape.
    fn feeding_chain(
        &self,
        uses: &crate::fusion::Uses,
        chains: &[Chain],
        chain_of: &[Option<usize>],
        t: TensorId,
        node: &Node,
    ) -> Option<usize> {
        let st = self.tensors[t.0].storage;
        let [j] = uses.writers[st][..] else {
            return None;
        };
        let c = chain_of[j]?;
        let own = self.value_of(j, t);
        let temp = matches!(self.storages[st].kind, StorageKind::Temp);
        let same = self.same_shape(t, node.out)
            && self.same_shape(self.nodes[j].out, node.out)
            && self.tensors[t.0].dtype == self.tensors[node.out.0].dtype;
        let last = chains[c].nodes.last() == Some(&j);
        (own && temp && same && last && uses.readers[st] == 1).then_some(c)
    }

    /// The `elementwise.comp` node computing chain `c` (its parameters' binding still to
    /// add), the permutes it reads through, and its steps' parameters, where it fits the
    /// kernel's limits and every input is written before the chain's last node and not again
    /// until then.
    fn chain_node(
        &self,
        uses: &crate::fusion::Uses,
        c: &Chain,
    ) -> Option<(Op, Vec<usize>, Vec<f32>)> {
        if c.nodes.len() > MAX_STEPS {
            return None;
        }
        // Each input with its strides over the chain's dims (its size-1 dims dropped), and the
        // permutes whose inputs the chain reads in their place.
        let mut inputs: Vec<Input> = Vec::new();
        let mut permutes: Vec<usize> = Vec::new();
        let mut steps: Vec<(Step, Vec<Operand>)> = Vec::new();
        let last = *c.nodes.last()?;
        for &k in &c.nodes {
            if !self.same_shape(self.nodes[k].out, c.out) {
                return None;
            }
            let step = self.chain_step(&self.nodes[k])?;
            let mut operands = Vec::new();
            for &t in &step.operands {
                let at = c.nodes.iter().position(|&j| self.value_of(j, t));
                let operand = match (at, self.scalar(t)) {
                    (Some(j), _) => Operand::Step(j),
                    (None, Some(v)) if step.kind == Kind::Binary => Operand::Immediate(v),
                    (None, _) => {
                        // Permutes and slices are read through (their source, at its offset
                        // and strides), from where the first of them was.
                        let operand = self.tensors[t.0].shape.clone();
                        let (t, off, strides, from) = match self.read_through(uses, t) {
                            Some(r) => {
                                permutes.extend(r.gone);
                                (r.src, r.off, r.strides, r.from)
                            }
                            None => (t, 0, self.strides(t), k),
                        };
                        // Written before its reader and not again until the chain's end,
                        // and by no node of the chain (a view of a value held in registers).
                        let st = self.tensors[t.0].storage;
                        let ready = uses.writers[st]
                            .iter()
                            .all(|&w| (w < from || w > last) && !c.nodes.contains(&w));
                        if !ready {
                            return None;
                        }
                        let read = Input {
                            t,
                            off,
                            strides: self.squeezed_strides(&strides, &operand, self.nodes[k].out),
                        };
                        let i = match inputs.iter().position(|x| *x == read) {
                            Some(i) => i,
                            None => {
                                inputs.push(read);
                                inputs.len() - 1
                            }
                        };
                        Operand::Input(i)
                    }
                };
                operands.push(operand);
            }
            steps.push((step, operands));
        }
        if inputs.len() > MAX_INPUTS || inputs.is_empty() {
            return None;
        }
        let (push, strided) = self.chain_push(&inputs, c.out)?;
        let (spec, params) = chain_spec(&steps, inputs.len(), strided)?;
        let mut bound: Vec<TensorId> = inputs.iter().map(|x| x.t).collect();
        bound.resize(MAX_INPUTS, inputs[0].t);
        let op = Op::Kernel {
            name: "elementwise",
            kernel: Kernel::Elementwise,
            inputs: bound,
            push: bytemuck::cast_slice(&[push]).to_vec(),
            groups: None,
            precision: None,
            spec,
        };
        Some((op, permutes, params))
    }

    /// Where `t` is a copy (permutes and slices, through views) of a tensor written once:
    /// that tensor, the offset and strides of `t`'s dims in it, the copies nothing but the
    /// next of them (or the chain) reads, which go, and the first copy's node.
    fn read_through(&self, uses: &crate::fusion::Uses, t: TensorId) -> Option<Through> {
        let mut absorbed = Vec::new();
        let s = self.strided(uses, t, &mut absorbed);
        let from = *absorbed.iter().min()?;
        if s.src == t || s.shape != self.tensors[t.0].shape {
            return None;
        }
        let mut gone = Vec::new();
        let mut cur = t;
        for &j in absorbed.iter().rev() {
            let st = self.tensors[self.nodes[j].out.0].storage;
            let temp = matches!(self.storages[st].kind, StorageKind::Temp);
            if !temp || uses.readers[st] != 1 || !self.value_of(j, cur) {
                break;
            }
            gone.push(j);
            cur = match &self.nodes[j].op {
                Op::Permute { x, .. } | Op::Slice { x, .. } => *x,
                _ => break,
            };
        }
        Some(Through {
            src: s.src,
            off: s.off,
            strides: s.strides,
            gone,
            from,
        })
    }

    /// The strides of contiguous `t`'s dims.
    fn strides(&self, t: TensorId) -> Vec<usize> {
        contiguous_strides(&self.tensors[t.0].shape)
    }

    /// Whether `t` is node `j`'s result, or a view of all of it.
    fn value_of(&self, j: usize, t: TensorId) -> bool {
        let out = &self.tensors[self.nodes[j].out.0];
        let ti = &self.tensors[t.0];
        ti.storage == out.storage
            && self.storages[out.storage].tensor == self.nodes[j].out
            && ti.numel() == out.numel()
    }

    /// Strides `strides` of the dims of an operand of shape `tshape`, broadcast to the shape
    /// of `out` (the node reading it) as the operand is, over that shape's dims other than
    /// those of size 1.
    fn squeezed_strides(&self, strides: &[usize], tshape: &[usize], out: TensorId) -> Vec<usize> {
        let shape = &self.tensors[out.0].shape;
        let off = shape.len() - tshape.len();
        (0..shape.len())
            .filter(|&d| shape[d] != 1)
            .map(|d| match d.checked_sub(off) {
                Some(e) if tshape[e] != 1 => strides[e],
                _ => 0,
            })
            .collect()
    }

    /// Whether `a` and `b` have one shape, but for dims of size 1.
    fn same_shape(&self, a: TensorId, b: TensorId) -> bool {
        squeezed(&self.tensors[a.0].shape) == squeezed(&self.tensors[b.0].shape)
    }

    /// The value of a one-element float constant.
    fn scalar(&self, t: TensorId) -> Option<f32> {
        match self.constant_values(t)?[..] {
            [v] => Some(v),
            _ => None,
        }
    }

    /// `elementwise.comp`'s push constants for `inputs` and output `out`, and which inputs it
    /// reads through offsets and strides; `None` beyond its rank.
    fn chain_push(&self, inputs: &[Input], out: TensorId) -> Option<(push::ElementwisePush, u32)> {
        let oi = &self.tensors[out.0];
        let shape = squeezed(&oi.shape);
        let strides: Vec<Vec<usize>> = inputs.iter().map(|x| x.strides.clone()).collect();
        let (dims, strides) = collapse(&shape, &strides);
        if dims.len() > MAX_RANK {
            return None;
        }
        let whole = contiguous_strides(&dims);
        let n = u32::try_from(oi.numel()).ok()?;
        let mut p = push::ElementwisePush {
            n,
            rank: dims.len() as u32,
            ..Default::default()
        };
        let mut strided = 0u32;
        for (d, &v) in dims.iter().enumerate() {
            p.dims[d] = u32::try_from(v).ok()?;
        }
        for (k, (s, input)) in strides.iter().zip(inputs).enumerate() {
            if *s != whole || input.off != 0 {
                strided |= 1 << k;
            }
            p.offsets[k] = u32::try_from(input.off).ok()?;
            for (d, &v) in s.iter().enumerate() {
                p.strides[k * MAX_RANK + d] = u32::try_from(v).ok()?;
            }
        }
        Some((p, strided))
    }
}

/// `shape` without its dims of size 1.
fn squeezed(shape: &[usize]) -> Vec<usize> {
    shape.iter().copied().filter(|&d| d != 1).collect()
}

/// `elementwise.comp`'s specialization constants for `steps` over `inputs` inputs, and its
/// parameters (two a step).
fn chain_spec(
    steps: &[(Step, Vec<Operand>)],
    inputs: usize,
    strided: u32,
) -> Option<(Vec<u32>, Vec<f32>)> {
    let mut words = vec![0u32; MAX_STEPS];
    let mut params = vec![0f32; 2 * steps.len()];
    for (k, (step, operands)) in steps.iter().enumerate() {
        let mut w = step.kind as u32 | (step.code << 2);
        let mut p = step.params;
        let reg = |o: &Operand| match *o {
            Operand::Input(i) => i as u32,
            Operand::Step(j) => (MAX_INPUTS + j) as u32,
            Operand::Immediate(_) => 0,
        };
        for (slot, o) in operands.iter().enumerate() {
            w |= reg(o) << (8 + 5 * slot);
            if let Operand::Immediate(v) = *o {
                // One immediate a step: the other operand must be a register.
                if w & (3 << 18) != 0 {
                    return None;
                }
                w |= 1 << (19 - slot);
                p[0] = v;
            }
        }
        words[k] = w;
        params[2 * k] = p[0];
        params[2 * k + 1] = p[1];
    }
    let mut spec = vec![inputs as u32, steps.len() as u32, strided];
    spec.extend(words);
    Some((spec, params))
}
