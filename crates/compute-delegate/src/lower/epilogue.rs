//! Epilogues fused at lowering: the residual add (or product) and the activation that read a
//! product's or a convolution's result, applied by its dispatch as it stores the result (`epilogue.glsl`),
//! one dispatch where there were two or three.
//!
//! [`fuse_epilogues`] finds them on the graph; a kernel that applies a whole epilogue takes
//! it ([`Lowerer::take_epilogue`]: the tiled GEMMs, their split-K summing pass, the pointwise
//! and depthwise convolutions, both cooperative GEMM kernels); where the node's kernel cannot
//! (an implicit-GEMM convolution on subgroup-scope matrices, products of a few rows with a
//! residual),
//! [`Lowerer::finish_epilogue`] records the add and the
//! activation after it, in place on the result, so a fused graph always computes what the
//! unfused one does. A clamp alone is fused as before: every product and convolution kernel
//! applies it, and so does the elementwise binary kernel (a residual add and its relu).

use super::*;
use crate::graph::StorageKind;

/// An activation a kernel applies as it stores a result; its code is `epilogue.glsl`'s `ACT`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Activation {
    /// `clamp(x, lo, hi)` (relu is `Clamp(0, inf)`).
    Clamp(f32, f32),
    /// GELU, erf form.
    Gelu,
    /// GELU, tanh approximation.
    GeluTanh,
    /// `x * sigmoid(x)`.
    Silu,
    /// `x * relu6(x + 3) / 6`.
    Hardswish,
}

impl Activation {
    /// The activation a unary node computes, if a kernel's epilogue can.
    fn of(op: UnaryOp) -> Option<Activation> {
        Some(match op {
            UnaryOp::Relu => Activation::Clamp(0.0, f32::INFINITY),
            UnaryOp::Clamp(lo, hi) => Activation::Clamp(lo, hi),
            UnaryOp::Gelu => Activation::Gelu,
            UnaryOp::GeluTanh => Activation::GeluTanh,
            UnaryOp::Silu => Activation::Silu,
            UnaryOp::Hardswish => Activation::Hardswish,
            _ => return None,
        })
    }

    /// `epilogue.glsl`'s code.
    pub(crate) fn code(self) -> u32 {
        match self {
            Activation::Clamp(..) => 1,
            Activation::Gelu => 2,
            Activation::GeluTanh => 3,
            Activation::Silu => 4,
            Activation::Hardswish => 5,
        }
    }

    /// The clamp's bounds (zeros for the others, which take none).
    pub(crate) fn bounds(self) -> (f32, f32) {
        match self {
            Activation::Clamp(lo, hi) => (lo, hi),
            _ => (0.0, 0.0),
        }
    }

    /// The same activation as `unary.comp`'s op.
    fn unary(self) -> UnaryOp {
        match self {
            Activation::Clamp(lo, hi) => UnaryOp::Clamp(lo, hi),
            Activation::Gelu => UnaryOp::Gelu,
            Activation::GeluTanh => UnaryOp::GeluTanh,
            Activation::Silu => UnaryOp::Silu,
            Activation::Hardswish => UnaryOp::Hardswish,
        }
    }
}

/// What a node's dispatch does to its results before storing them: add a residual (or
/// multiply by it, with `times`), then activate; the result is the tensor `writes` (the last
/// fused node's output).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Epilogue {
    pub(crate) residual: Option<TensorId>,
    pub(crate) times: bool,
    pub(crate) act: Option<Activation>,
    pub(crate) writes: TensorId,
}

impl Epilogue {
    /// The clamp every product kernel applies, where the epilogue is that alone.
    pub(crate) fn clamp(&self) -> Option<(f32, f32)> {
        match (self.residual, self.act) {
            (None, Some(Activation::Clamp(lo, hi))) => Some((lo, hi)),
            _ => None,
        }
    }
}

/// An epilogue as a kernel applies it: the residual's storage and `RESID` code (1 added, 2
/// multiplying), the activation's code and bounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Taken {
    pub(crate) residual: Option<usize>,
    pub(crate) resid: u32,
    pub(crate) act: u32,
    pub(crate) lo: f32,
    pub(crate) hi: f32,
}

impl Taken {
    /// The clamp `act` alone (none where it is `None`), as kernels that take no other
    /// epilogue apply it.
    pub(crate) fn clamp(act: Option<(f32, f32)>) -> Taken {
        let (lo, hi) = act.unwrap_or((0.0, 0.0));
        Taken {
            residual: None,
            resid: 0,
            act: u32::from(act.is_some()),
            lo,
            hi,
        }
    }
}

/// Per node: the epilogue fused into it, and the earlier node that absorbed it.
pub(crate) struct Fusion {
    pub(crate) epilogue: Vec<Option<Epilogue>>,
    pub(crate) skip: Vec<Option<usize>>,
}

/// Per node: whether a conv2d's or product's epilogue takes it at lowering (so no other pass
/// should).
pub(crate) fn claimed_by_products(b: &GraphBuilder) -> Vec<bool> {
    let f = fuse_epilogues(b, true);
    let product = |j: usize| matches!(b.nodes[j].op, Op::Conv { .. } | Op::Matmul { .. });
    f.skip.iter().map(|by| by.is_some_and(product)).collect()
}

/// Who reads and writes each storage.
struct Use {
    /// Reads by nodes, plus one for a graph output.
    readers: Vec<usize>,
    /// The last node reading it.
    reader: Vec<Option<usize>>,
    /// The nodes writing it.
    writers: Vec<Vec<usize>>,
}

impl Use {
    fn of(b: &GraphBuilder) -> Use {
        let n = b.storages.len();
        let mut u = Use {
            readers: vec![0; n],
            reader: vec![None; n],
            writers: vec![Vec::new(); n],
        };
        for (i, node) in b.nodes.iter().enumerate() {
            for t in node.op.inputs() {
                let s = b.tensors[t.0].storage;
                u.readers[s] += 1;
                u.reader[s] = Some(i);
            }
            u.writers[b.tensors[node.out.0].storage].push(i);
        }
        for t in &b.outputs {
            u.readers[b.tensors[t.0].storage] += 1;
        }
        u
    }

    /// The node that alone reads `t`, where `t` is an intermediate result written whole by
    /// node `j` alone: a temporary of its own, or a view of all of it.
    fn sole_reader(&self, b: &GraphBuilder, j: usize, t: TensorId) -> Option<usize> {
        let s = b.tensors[t.0].storage;
        let root = b.nodes[j].out;
        let whole = b.storages[s].tensor == root
            && b.tensors[root.0].storage == s
            && b.tensors[root.0].numel() == b.tensors[t.0].numel();
        let temp = matches!(b.storages[s].kind, StorageKind::Temp);
        (whole && temp && self.readers[s] == 1 && self.writers[s] == [j])
            .then_some(self.reader[s])
            .flatten()
    }
}

/// Finds each conv2d's and product's epilogue: a residual add (or a product) with a tensor of
/// the result's shape ready before the product, then a relu, clamp, GELU, SiLU or hardswish; and the
/// relu or clamp after a float add, sub or mul. The fused nodes' intermediate results have no
/// other reader and are no graph output. Without `all`, only the clamps are fused (a graph
/// built unfused).
pub(crate) fn fuse_epilogues(b: &GraphBuilder, all: bool) -> Fusion {
    let n = b.nodes.len();
    let mut fusion = Fusion {
        epilogue: vec![None; n],
        skip: vec![None; n],
    };
    let uses = Use::of(b);
    for (j, node) in b.nodes.iter().enumerate() {
        if fusion.skip[j].is_some() {
            continue;
        }
        let product = match &node.op {
            Op::Conv { .. } | Op::Matmul { .. } => true,
            Op::Binary { op, .. } => {
                let float = matches!(b.tensors[node.out.0].dtype, DType::F32 | DType::F16);
                if !(float && matches!(op, BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul)) {
                    continue;
                }
                false
            }
            _ => continue,
        };
        let mut e = Epilogue {
            residual: None,
            times: false,
            act: None,
            writes: node.out,
        };
        let mut last = j;
        let residual = (product && all)
            .then(|| residual_of(b, &uses, j, e.writes))
            .flatten();
        if let Some((i, r, times)) = residual {
            fusion.skip[i] = Some(j);
            e.residual = Some(r);
            e.times = times;
            e.writes = b.nodes[i].out;
            last = i;
        }
        if let Some((i, act)) = activation_of(b, &uses, last, e.writes) {
            let clamp = matches!(act, Activation::Clamp(..));
            if (product && all) || clamp {
                fusion.skip[i] = Some(j);
                e.act = Some(act);
                e.writes = b.nodes[i].out;
            }
        }
        if e.writes != node.out {
            fusion.epilogue[j] = Some(e);
        }
    }
    fusion
}

/// The add or product that alone reads `t` (written by node `j`), the other operand, and
/// whether it multiplies, where that operand has `t`'s shape and dtype and every write of it
/// comes before `j`.
fn residual_of(
    b: &GraphBuilder,
    uses: &Use,
    j: usize,
    t: TensorId,
) -> Option<(usize, TensorId, bool)> {
    let i = uses.sole_reader(b, j, t)?;
    let Op::Binary { op, a, b: bb } = b.nodes[i].op else {
        return None;
    };
    let times = match op {
        BinaryOp::Add => false,
        BinaryOp::Mul => true,
        _ => return None,
    };
    let st = |x: TensorId| b.tensors[x.0].storage;
    let s = st(t);
    let (x, r) = if st(a) == s { (a, bb) } else { (bb, a) };
    let out = b.nodes[i].out;
    let (ti, xi, ri, oi) = (
        &b.tensors[t.0],
        &b.tensors[x.0],
        &b.tensors[r.0],
        &b.tensors[out.0],
    );
    let same = xi.shape == ri.shape
        && xi.shape == oi.shape
        && ti.dtype == ri.dtype
        && ti.dtype == oi.dtype
        && st(x) == s
        && st(r) != s
        && st(r) != st(out);
    let ready = uses.writers[st(r)].iter().all(|&w| w < j);
    let sole_write = uses.writers[st(out)] == [i]
        && matches!(
            b.storages[st(out)].kind,
            StorageKind::Temp | StorageKind::Output
        );
    (same && ready && sole_write).then_some((i, r, times))
}

/// The activation that alone reads `t` (written by node `j`), of `t`'s dtype.
fn activation_of(
    b: &GraphBuilder,
    uses: &Use,
    j: usize,
    t: TensorId,
) -> Option<(usize, Activation)> {
    let i = uses.sole_reader(b, j, t)?;
    let Op::Unary { op, x } = b.nodes[i].op else {
        return None;
    };
    let out = b.nodes[i].out;
    let same = b.tensors[x.0].storage == b.tensors[t.0].storage
        && b.tensors[x.0].dtype == b.tensors[out.0].dtype
        && b.tensors[out.0].numel() == b.tensors[t.0].numel();
    let act = Activation::of(op)?;
    same.then_some((i, act))
}

impl Lowerer<'_> {
    /// The current node's epilogue for a kernel that applies all of it (`epilogue.glsl`'s
    /// activations and a residual laid out as the result); `None` when there is none or a
    /// dispatch of the node already took it.
    pub(crate) fn take_epilogue(&mut self) -> Option<Taken> {
        let e = self.epilogue.filter(|_| !self.epilogue_taken)?;
        self.epilogue_taken = true;
        let (lo, hi) = e.act.map_or((0.0, 0.0), Activation::bounds);
        Some(Taken {
            residual: e.residual.map(|r| self.st(r)),
            resid: match (e.residual, e.times) {
                (None, _) => 0,
                (Some(_), false) => 1,
                (Some(_), true) => 2,
            },
            act: e.act.map_or(0, Activation::code),
            lo,
            hi,
        })
    }

    /// The current node's epilogue for a kernel that applies activations but binds no
    /// residual: `None` where the epilogue adds one (it is recorded after the kernel).
    pub(crate) fn take_activation(&mut self) -> Option<Taken> {
        match self.epilogue {
            Some(e) if e.residual.is_none() => self.take_epilogue(),
            _ => None,
        }
    }

    /// After a node's dispatches: the part of its epilogue no kernel took, in place on its
    /// result (storage `o`), as the add (with a clamp after it) and the activation.
    pub(crate) fn finish_epilogue(&mut self, o: usize) -> Result<()> {
        let Some(e) = self
            .epilogue
            .filter(|e| !self.epilogue_taken && e.clamp().is_none())
        else {
            return Ok(());
        };
        self.epilogue_taken = true;
        let n4 = self.t(e.writes).numel().div_ceil(4);
        let g = self.linear_groups(n4.div_ceil(2) as u64);
        let mut act = e.act;
        if let Some(r) = e.residual {
            let clamp = act.and_then(|a| match a {
                Activation::Clamp(lo, hi) => Some((lo, hi)),
                _ => None,
            });
            if clamp.is_some() {
                act = None;
            }
            let (act_lo, act_hi) = clamp.unwrap_or((0.0, 0.0));
            let op = if e.times {
                BinaryOp::Mul
            } else {
                BinaryOp::Add
            };
            self.op = op.name();
            let r = self.st(r);
            self.push(
                Kernel::Binary,
                vec![op.code(), u32::from(clamp.is_some())],
                vec![(o, false), (r, false), (o, true)],
                &push::BinaryPush {
                    n4: n4 as u32,
                    act_lo,
                    act_hi,
                },
                [g, 1, 1],
            );
        }
        if let Some(a) = act {
            let op = a.unary();
            let (code, p0, p1) = op.code();
            self.op = op.name();
            self.push(
                Kernel::Unary,
                vec![code],
                vec![(o, false), (o, true)],
                &push::UnaryPush {
                    n4: n4 as u32,
                    p0,
                    p1,
                },
                [g, 1, 1],
            );
        }
        Ok(())
    }
}
