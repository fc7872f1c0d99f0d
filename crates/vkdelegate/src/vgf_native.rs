//! VGF models on the compute delegate's kernels, without `VK_ARM_data_graph`: the data graph of
//! a file's GRAPH segment ([`vgf_delegate::tosa`]) lowered onto a
//! [`compute_delegate::GraphBuilder`].
//!
//! [`graph_of`] takes a decoded file whose one segment is a GRAPH segment. TOSA computes in
//! NHWC; the compute delegate's convolutions and pools in NCHW: each of those is wrapped in
//! the two permutes that carry its operands across. Graph constants are read in place from
//! the file. Operators it cannot lower (and integer graphs, for now) are named all at once,
//! each with its word offset in the module.

use compute_delegate::ops::Arg;
use compute_delegate::{BinaryOp, Conv2d, GraphBuilder, Pool2d, TensorId, UnaryOp};
use std::collections::HashMap;
use vgf_delegate::format::ModuleType;
use vgf_delegate::tosa::{Constant, Element, Node, Operand, Operator, TosaError, TosaGraph};
use vgf_delegate::{Vgf, VgfFile};
use vk_core::DType;

/// Why a VGF file cannot run natively.
#[derive(Debug, thiserror::Error)]
pub enum NativeError {
    /// The GRAPH module's SPIR-V is malformed.
    #[error("GRAPH module {module}: {source}")]
    Decode {
        /// The module's index.
        module: usize,
        /// What is wrong.
        source: TosaError,
    },
    /// What the file holds that the native path does not run (each named, with where).
    #[error("not runnable natively: {}", .0.join("; "))]
    Unsupported(Vec<String>),
    /// The compute delegate refused the lowered graph.
    #[error("the lowered graph: {0}")]
    Graph(#[from] compute_delegate::Error),
}

type Result<T> = std::result::Result<T, NativeError>;

/// The compute graph of a VGF file of one GRAPH segment: its inputs and outputs in the
/// file's order, named as the file names them.
pub fn graph_of(file: &VgfFile) -> Result<GraphBuilder> {
    let vgf = file.vgf();
    let segments = &vgf.sequence.segments;
    let [segment] = &segments[..] else {
        return Err(unsupported(format!(
            "{} segments (one GRAPH segment runs natively)",
            segments.len()
        )));
    };
    let module = vgf
        .modules
        .get(segment.module_index as usize)
        .filter(|m| m.kind == ModuleType::Graph)
        .ok_or_else(|| unsupported(format!("segment '{}' is not a GRAPH segment", segment.name)))?;
    let spirv = module
        .spirv
        .as_ref()
        .ok_or_else(|| unsupported(format!("module {} holds no SPIR-V", segment.module_index)))?;
    let graph = TosaGraph::decode(&spirv.words()).map_err(|source| NativeError::Decode {
        module: segment.module_index as usize,
        source,
    })?;
    check(&graph)?;
    Lowering::new(file, &graph)?.run()
}

fn unsupported(what: String) -> NativeError {
    NativeError::Unsupported(vec![what])
}

/// The operators the native path lowers, on float tensors.
fn lowered(op: Operator) -> bool {
    use Operator::*;
    matches!(
        op,
        Add | Sub
            | Mul
            | Maximum
            | Minimum
            | Clamp
            | Sigmoid
            | Tanh
            | Transpose
            | Reshape
            | Conv2d
            | DepthwiseConv2d
            | AvgPool2d
            | MaxPool2d
            | ReduceSum
            | ReduceMax
            | ReduceMin
            | Concat
            | Slice
    )
}

/// Every operator the native path cannot run, at once.
fn check(graph: &TosaGraph) -> Result<()> {
    let bad: Vec<String> = graph
        .nodes
        .iter()
        .filter_map(|n| {
            let float = matches!(n.result.element, Element::Float(16 | 32));
            match (lowered(n.op), float) {
                (true, true) => None,
                (true, false) => Some(format!(
                    "{} on {:?} at word {} (integer graphs run through VK_ARM_data_graph)",
                    n.op.name(),
                    n.result.element,
                    n.at
                )),
                (false, _) => Some(format!("{} at word {}", n.op.name(), n.at)),
            }
        })
        .collect();
    match bad.is_empty() {
        true => Ok(()),
        false => Err(NativeError::Unsupported(bad)),
    }
}

/// The state of one lowering: the builder and what each graph value became.
struct Lowering<'a> {
    file: &'a VgfFile,
    graph: &'a TosaGraph,
    g: GraphBuilder,
    inputs: Vec<Option<TensorId>>,
    nodes: Vec<TensorId>,
    constants: HashMap<u32, TensorId>,
}

impl<'a> Lowering<'a> {
    fn new(file: &'a VgfFile, graph: &'a TosaGraph) -> Result<Self> {
        Ok(Lowering {
            file,
            graph,
            g: GraphBuilder::new(),
            inputs: vec![None; graph.inputs.len()],
            nodes: Vec::with_capacity(graph.nodes.len()),
            constants: HashMap::new(),
        })
    }

    fn vgf(&self) -> &'a Vgf<'a> {
        self.file.vgf()
    }

    fn shape(&self, t: TensorId) -> Vec<usize> {
        self.g.shape(t).map(<[usize]>::to_vec).unwrap_or_default()
    }

    /// The model resource a graph port's (set, binding) names in the segment.
    fn resource_of(&self, set: Option<u32>, binding: Option<u32>) -> Option<u32> {
        let segment = self.vgf().sequence.segments.first()?;
        let ds = segment
            .descriptor_sets
            .iter()
            .find(|d| Some(d.set_index) == set)?;
        let b = ds.bindings.iter().find(|b| Some(b.binding) == binding)?;
        Some(b.mrt_index)
    }

    fn run(mut self) -> Result<GraphBuilder> {
        let vgf = self.vgf();
        // Named as the data-graph path names them, so that programs wire either alike.
        let (in_specs, out_specs) =
            vgf_delegate::model_specs(vgf).map_err(|e| unsupported(e.to_string()))?;
        let ports: Vec<Option<u32>> = self
            .graph
            .inputs
            .iter()
            .map(|p| self.resource_of(p.set, p.binding))
            .collect();
        for (k, b) in vgf.sequence.inputs.iter().enumerate() {
            let i = ports
                .iter()
                .position(|&r| r == Some(b.mrt_index))
                .ok_or_else(|| unsupported(format!("model input {k} feeds no graph input")))?;
            let port = &self.graph.inputs[i];
            let name = in_specs
                .get(k)
                .map_or_else(|| format!("input_{k}"), |s| s.name.clone());
            let shape = dims(port.ty.shape.as_deref(), &name)?;
            let t = self
                .g
                .input(&name, dtype(port.ty.element, &name)?, &shape)?;
            self.inputs[i] = Some(t);
        }
        for node in &self.graph.nodes {
            let t = self.node(node)?;
            self.nodes.push(t);
        }
        let outs: Vec<Option<u32>> = self
            .graph
            .outputs
            .iter()
            .map(|p| self.resource_of(p.set, p.binding))
            .collect();
        for (k, b) in vgf.sequence.outputs.iter().enumerate() {
            let j = outs
                .iter()
                .position(|&r| r == Some(b.mrt_index))
                .ok_or_else(|| {
                    unsupported(format!("model output {k} comes from no graph output"))
                })?;
            let t = self.tensor(&self.graph.results[j].clone())?;
            if let Some(spec) = out_specs.get(k) {
                self.g.set_name(t, spec.name.clone())?;
            }
            self.g.output(t)?;
        }
        Ok(self.g)
    }

    /// An operand as a tensor of the graph.
    fn tensor(&mut self, o: &Operand) -> Result<TensorId> {
        match o {
            Operand::Input(i) => self
                .inputs
                .get(*i)
                .copied()
                .flatten()
                .ok_or_else(|| unsupported(format!("graph input {i} is not a model input"))),
            Operand::Node(n) => Ok(self.nodes[*n]),
            Operand::GraphConstant { id, ty } => {
                if let Some(&t) = self.constants.get(id) {
                    return Ok(t);
                }
                let t = self.graph_constant(*id, ty.element, ty.shape.as_deref())?;
                self.constants.insert(*id, t);
                Ok(t)
            }
            Operand::Constant(c) => {
                let values = c
                    .floats()
                    .ok_or_else(|| unsupported(format!("a {:?} tensor constant", c.element)))?;
                let shape = dims(c.shape.as_deref(), "a constant")?;
                let name = format!("tosa_constant_{}", self.nodes.len());
                let t = self.g.constant_f32(&name, &shape, &values)?;
                match c.element {
                    Element::Float(16) => Ok(self.g.cast(t, DType::F16)?),
                    _ => Ok(t),
                }
            }
        }
    }

    /// Graph constant `id`, read in place from the file.
    fn graph_constant(
        &mut self,
        id: u32,
        element: Element,
        shape: Option<&[u64]>,
    ) -> Result<TensorId> {
        let vgf = self.vgf();
        let segment = &vgf.sequence.segments[0];
        let index = segment
            .graph_constants()
            .iter()
            .find(|b| b.graph_constant_id == id)
            .map(|b| b.constant_index)
            .ok_or_else(|| unsupported(format!("graph constant {id} is bound to no constant")))?;
        let constant = vgf
            .constants
            .get(index as usize)
            .ok_or_else(|| unsupported(format!("graph constant {id}: no constant {index}")))?;
        if constant.sparsity_dimension != -1 {
            return Err(unsupported(format!("graph constant {id} is sparse")));
        }
        let base = self.file.bytes().as_ptr() as usize;
        let start = (constant.data.as_ptr() as usize).wrapping_sub(base);
        let name = format!("graph_constant_{id}");
        let shape = dims(shape, &name)?;
        let dt = dtype(element, &name)?;
        let t = self.g.constant_shared(
            &name,
            dt,
            &shape,
            self.file.bytes().clone(),
            start..start + constant.data.len(),
        )?;
        Ok(t)
    }

    /// One operator.
    fn node(&mut self, n: &Node) -> Result<TensorId> {
        let o = &n.operands;
        let bad = |why: &str| unsupported(format!("{} at word {}: {why}", n.op.name(), n.at));
        let g_binary = |s: &mut Self, op: BinaryOp, a: &Operand, b: &Operand| -> Result<TensorId> {
            let (a, b) = (s.tensor(a)?, s.tensor(b)?);
            Ok(s.g.binary(op, a, b)?)
        };
        use Operator::*;
        let t = match n.op {
            Add => g_binary(self, BinaryOp::Add, &o[0], &o[1])?,
            Sub => g_binary(self, BinaryOp::Sub, &o[0], &o[1])?,
            Maximum => g_binary(self, BinaryOp::Maximum, &o[1], &o[2])?,
            Minimum => g_binary(self, BinaryOp::Minimum, &o[1], &o[2])?,
            Mul => {
                if ints(&o[2]).is_some_and(|s| s.iter().any(|&v| v != 0)) {
                    return Err(bad("a shift on floats"));
                }
                g_binary(self, BinaryOp::Mul, &o[0], &o[1])?
            }
            Clamp => {
                let (lo, hi) = (scalar_f32(&o[0]), scalar_f32(&o[1]));
                let (Some(lo), Some(hi)) = (lo, hi) else {
                    return Err(bad("bounds that are not float constants"));
                };
                let x = self.tensor(&o[3])?;
                self.g.unary(UnaryOp::Clamp(lo, hi), x)?
            }
            Sigmoid => {
                let x = self.tensor(&o[0])?;
                self.g.unary(UnaryOp::Sigmoid, x)?
            }
            Tanh => {
                let x = self.tensor(&o[0])?;
                self.g.unary(UnaryOp::Tanh, x)?
            }
            Transpose => {
                let perm = ints(&o[0]).ok_or_else(|| bad("perms that are not constants"))?;
                let x = self.tensor(&o[1])?;
                self.g.permute(x, &to_isize(&perm))?
            }
            Reshape => {
                let shape = ints(&o[1]).ok_or_else(|| bad("a shape that is not constant"))?;
                let x = self.tensor(&o[0])?;
                self.g.reshape(x, &to_isize(&shape))?
            }
            Conv2d | DepthwiseConv2d => self.conv(n, &bad)?,
            AvgPool2d | MaxPool2d => self.pool(n, &bad)?,
            ReduceSum | ReduceMax | ReduceMin => {
                let axis = ints(&o[0]).and_then(|a| a.first().copied());
                let axis = axis.ok_or_else(|| bad("an axis that is not constant"))? as isize;
                let x = self.tensor(o.last().unwrap_or(&o[0]))?;
                match n.op {
                    ReduceSum => self.g.sum(x, &[axis], true)?,
                    op => self.g.extreme(x, &[axis], true, op == ReduceMin)?,
                }
            }
            Concat => {
                let axis = ints(&o[0]).and_then(|a| a.first().copied());
                let axis = axis.ok_or_else(|| bad("an axis that is not constant"))? as isize;
                let xs = o[1..]
                    .iter()
                    .map(|x| self.tensor(x))
                    .collect::<Result<Vec<_>>>()?;
                self.g.cat(&xs, axis)?
            }
            Slice => {
                let (start, size) = (ints(&o[1]), ints(&o[2]));
                let (Some(start), Some(size)) = (start, size) else {
                    return Err(bad("a start or size that is not constant"));
                };
                let mut x = self.tensor(&o[0])?;
                for (d, (&s, &n)) in start.iter().zip(&size).enumerate() {
                    let full = self.shape(x).get(d).copied().unwrap_or(0) as i64;
                    if s != 0 || n != full {
                        x = self
                            .g
                            .slice(x, d as isize, s as isize, (s + n) as isize, 1)?;
                    }
                }
                x
            }
            _ => return Err(bad("not lowered")),
        };
        Ok(t)
    }

    /// CONV2D and DEPTHWISE_CONV2D: NHWC in and out, weights `[OC, KH, KW, IC]` and
    /// `[KH, KW, C, M]`.
    fn conv(&mut self, n: &Node, bad: &dyn Fn(&str) -> NativeError) -> Result<TensorId> {
        let o = &n.operands;
        let attr = |i: usize| ints(&o[i]).ok_or_else(|| bad("attributes that are not constants"));
        let (pad, stride, dilation) = (attr(0)?, attr(1)?, attr(2)?);
        let (even, extra) =
            split_padding(&pad).ok_or_else(|| bad("a padding of other than 4 values"))?;
        let (padding, stride, dilation) = conv_geometry(&even, &stride, &dilation)
            .ok_or_else(|| bad("negative padding, strides or dilations"))?;
        let x = self.tensor(&o[5])?;
        let w = self.tensor(&o[6])?;
        let mut x = self.g.permute(x, &[0, 3, 1, 2])?;
        if extra.iter().any(|&p| p != 0) {
            // The uneven part first, as zeros: (left, right) of W, then (top, bottom) of H.
            let pad = vec![extra[2], extra[3], extra[0], extra[1]];
            let def = compute_delegate::ops::find("aten.constant_pad_nd.default")
                .ok_or_else(|| bad("no pad op"))?;
            x = def.call(
                &mut self.g,
                vec![Arg::Tensor(x), Arg::Ints(pad), Arg::Float(0.0)],
            )?[0];
        }
        let (w, groups) = match n.op {
            Operator::DepthwiseConv2d => {
                let ws = self.shape(w);
                let &[kh, kw, c, m] = &ws[..] else {
                    return Err(bad("weights that are not [KH, KW, C, M]"));
                };
                let w = self.g.permute(w, &[2, 3, 0, 1])?;
                let w = self
                    .g
                    .reshape(w, &[(c * m) as isize, 1, kh as isize, kw as isize])?;
                (w, c)
            }
            _ => (self.g.permute(w, &[0, 3, 1, 2])?, 1),
        };
        let oc = self.shape(w).first().copied().unwrap_or(0);
        let bias = self.tensor(&o[7])?;
        let per_channel = self.shape(bias).iter().product::<usize>() == oc;
        let p = Conv2d {
            stride,
            padding,
            dilation,
            groups,
        };
        let y = self.g.conv2d(x, w, per_channel.then_some(bias), p)?;
        let y = self.g.permute(y, &[0, 2, 3, 1])?;
        Ok(match per_channel {
            true => y,
            false => self.g.add(y, bias)?,
        })
    }

    /// AVG_POOL2D and MAX_POOL2D: NHWC in and out.
    fn pool(&mut self, n: &Node, bad: &dyn Fn(&str) -> NativeError) -> Result<TensorId> {
        let o = &n.operands;
        let attr = |i: usize| ints(&o[i]).ok_or_else(|| bad("attributes that are not constants"));
        let (kernel, stride, pad) = (attr(0)?, attr(1)?, attr(2)?);
        let (padding, stride, kernel) = conv_geometry(&pad, &stride, &kernel)
            .ok_or_else(|| bad("uneven padding (top != bottom or left != right)"))?;
        // The input follows acc_type (AVG_POOL2D) or nan_mode (MAX_POOL2D).
        let x = self.tensor(&o[4])?;
        let x = self.g.permute(x, &[0, 3, 1, 2])?;
        let p = Pool2d {
            kernel,
            stride,
            padding,
            ceil_mode: false,
            count_include_pad: false,
        };
        let y = match n.op {
            Operator::AvgPool2d => self.g.avg_pool2d(x, p)?,
            _ => self.g.max_pool2d(x, p)?,
        };
        Ok(self.g.permute(y, &[0, 2, 3, 1])?)
    }
}

/// TOSA's `[top, bottom, left, right]` padding as its even part (the smaller of each pair,
/// on both sides) and the rest.
fn split_padding(pad: &[i64]) -> Option<([i64; 4], [i64; 4])> {
    let &[t, b, l, r] = pad else {
        return None;
    };
    let (h, w) = (t.min(b), l.min(r));
    Some(([h, h, w, w], [t - h, b - h, l - w, r - w]))
}

/// TOSA's `[top, bottom, left, right]` padding as symmetric `[ph, pw]`, with two 2-element
/// attributes; `None` where padding is uneven or a list is short or negative.
fn conv_geometry(
    pad: &[i64],
    a: &[i64],
    b: &[i64],
) -> Option<([usize; 2], [usize; 2], [usize; 2])> {
    let two = |v: &[i64]| -> Option<[usize; 2]> {
        match v {
            [x, y] if *x >= 0 && *y >= 0 => Some([*x as usize, *y as usize]),
            _ => None,
        }
    };
    let [t, bo, l, r] = pad else {
        return None;
    };
    if t != bo || l != r {
        return None;
    }
    Some((two(&[*t, *l])?, two(a)?, two(b)?))
}

/// A constant operand's integers.
fn ints(o: &Operand) -> Option<Vec<i64>> {
    match o {
        Operand::Constant(c) => c.ints(),
        _ => None,
    }
}

/// A scalar (or one-element) float constant.
fn scalar_f32(o: &Operand) -> Option<f32> {
    match o {
        Operand::Constant(c @ Constant { .. }) => c.floats()?.first().copied(),
        _ => None,
    }
}

fn to_isize(v: &[i64]) -> Vec<isize> {
    v.iter().map(|&x| x as isize).collect()
}

/// A tensor type's shape as sizes.
fn dims(shape: Option<&[u64]>, what: &str) -> Result<Vec<usize>> {
    let shape = shape.ok_or_else(|| unsupported(format!("{what} is unranked")))?;
    shape
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| unsupported(format!("{what}: dimension {d}"))))
        .collect()
}

/// The compute delegate's dtype of a float element.
fn dtype(e: Element, what: &str) -> Result<DType> {
    match e {
        Element::Float(32) => Ok(DType::F32),
        Element::Float(16) => Ok(DType::F16),
        other => Err(unsupported(format!("{what}: {other:?} elements"))),
    }
}
