//! VGF models on the compute delegate's kernels, without `VK_ARM_data_graph`: the data graph of
//! a file's GRAPH segment ([`vgf_delegate::tosa`]) lowered onto a
//! [`compute_delegate::GraphBuilder`].
//!
//! [`graph_of`] takes a decoded file whose one segment is a GRAPH segment. TOSA computes in
//! NHWC; the compute delegate's convolutions and pools in NCHW: their results stay in NCHW
//! through the elementwise ops after them, and are permuted back only where an operator
//! needs TOSA's layout (a file's own transposes at its edges cancel against them). Graph constants are read in place from
//! the file. Integer graphs lower where they are the int8 kernels' patterns (a RESCALE to int8
//! closing an int32 CONV2D, or an ADD of two RESCALEd int8 inputs), bit-exact with TOSA's
//! single rounding. Operators it cannot lower are named all at once, each with its word
//! offset in the module.

use compute_delegate::ops::{Arg, Math};
use compute_delegate::{BinaryOp, Conv2d, GraphBuilder, Pool2d, TensorId, UnaryOp};
use std::collections::HashMap;
use vgf_delegate::format::ModuleType;
use vgf_delegate::tosa::{Constant, Element, Node, Operand, Operator, TosaError, TosaGraph};
use vgf_delegate::{Vgf, VgfFile};
use vk_core::{DType, HostTensor};

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

/// The operators the native path lowers on float tensors (comparisons give booleans of float
/// operands).
fn lowered(op: Operator) -> bool {
    use Operator::*;
    math_of(op).is_some()
        || matches!(
            op,
            Add | Sub
                | Mul
                | Maximum
                | Minimum
                | Pow
                | Clamp
                | Sigmoid
                | Tanh
                | Negate
                | Greater
                | GreaterEqual
                | Equal
                | Select
                | Transpose
                | Reshape
                | Conv2d
                | Conv3d
                | DepthwiseConv2d
                | TransposeConv2d
                | Matmul
                | AvgPool2d
                | MaxPool2d
                | ReduceSum
                | ReduceMax
                | ReduceMin
                | Concat
                | Slice
                | Pad
                | Tile
                | Rescale
                | Table
                | LogicalAnd
                | LogicalOr
                | LogicalXor
                | LogicalNot
                | Cast
                | Gather
                | Resize
                | Reverse
                | BitwiseAnd
                | BitwiseOr
                | BitwiseXor
                | BitwiseNot
                | LogicalLeftShift
                | LogicalRightShift
                | ArithmeticRightShift
                | Intdiv
                | Clz
                | ReduceProduct
                | ReduceAny
                | ReduceAll
                | Argmax
        )
}

/// The float math functions of one operand, by operator.
fn math_of(op: Operator) -> Option<Math> {
    use Operator::*;
    Some(match op {
        Abs => Math::Abs,
        Exp => Math::Exp,
        Log => Math::Log,
        Floor => Math::Floor,
        Ceil => Math::Ceil,
        Rsqrt => Math::Rsqrt,
        Reciprocal => Math::Reciprocal,
        Sin => Math::Sin,
        Cos => Math::Cos,
        Erf => Math::Erf,
        _ => return None,
    })
}

/// Whether an operator's result type is one the native path computes: floats, booleans of
/// comparisons, and the integer patterns `Lowering::quantized` lowers (int8 and int32 values
/// between RESCALEs, int8 pooling and data movement).
fn typed(n: &Node) -> bool {
    use Operator::*;
    match (n.op, n.result.element) {
        (_, Element::Float(16 | 32)) => true,
        (Greater | GreaterEqual | Equal, Element::Bool) => true,
        (LogicalAnd | LogicalOr | LogicalXor | LogicalNot | Cast, Element::Bool) => true,
        (Cast, Element::Int(8 | 16 | 32)) => true,
        (Gather, Element::Int(8 | 32)) => true,
        // int8 nearest, int8 bilinear's int32 sums; int16 ones the same.
        (Resize, Element::Int(8 | 16 | 32 | 64)) => true,
        (
            BitwiseAnd | BitwiseOr | BitwiseXor | BitwiseNot | LogicalLeftShift | LogicalRightShift
            | ArithmeticRightShift,
            Element::Int(8 | 16 | 32),
        ) => true,
        (Intdiv, Element::Int(32)) => true,
        (ReduceAny | ReduceAll, Element::Bool) => true,
        (Rescale, Element::Int(8 | 16 | 32)) => true,
        (Conv2d | DepthwiseConv2d | Add | Sub | Mul | Maximum | Minimum, Element::Int(32)) => true,
        // int16 convolutions' and products' int48 accumulators, rescaled by the RESCALE that
        // reads them.
        (Conv2d | Conv3d | DepthwiseConv2d | TransposeConv2d | Matmul, Element::Int(64)) => true,
        (Conv3d | Argmax, Element::Int(32)) => true,
        (Table, Element::Int(32)) => true,
        (Matmul | TransposeConv2d, Element::Int(32)) => true,
        (ReduceSum, Element::Int(32)) => true,
        (ReduceMax | ReduceMin | Negate | Clamp | Select, Element::Int(8 | 16 | 32)) => true,
        // TOSA defines these on int32 only.
        (Abs | Clz, Element::Int(32)) => true,
        (Table, Element::Int(8)) => true,
        (Reshape | Transpose, Element::Int(16 | 32)) => true,
        (AvgPool2d, Element::Int(16)) => true,
        // Moved through exact float copies (int8 and int16 values are exact in f32).
        (Concat | Pad | Tile | Slice | MaxPool2d | Reverse, Element::Int(8 | 16)) => true,
        // Edge transposes of int8 tensors cancel against NCHW convolutions.
        (Transpose | Reshape | AvgPool2d, Element::Int(8)) => true,
        _ => false,
    }
}

/// Every operator the native path cannot run, at once.
fn check(graph: &TosaGraph) -> Result<()> {
    let bad: Vec<String> = graph
        .nodes
        .iter()
        .filter_map(|n| match (lowered(n.op), typed(n)) {
            (true, true) => None,
            (true, false) => Some(format!(
                "{} on {:?} at word {} (integer operators run natively as TOSA's integer \
                 arithmetic, RESCALEs, TABLEs, reductions, convolutions, products and \
                 reshapes, and int8 and int16 pools and data movement)",
                n.op.name(),
                n.result.element,
                n.at
            )),
            (false, _) => Some(format!("{} at word {}", n.op.name(), n.at)),
        })
        .collect();
    match bad.is_empty() {
        true => Ok(()),
        false => Err(NativeError::Unsupported(bad)),
    }
}

/// What an operator's result became: a tensor as TOSA has it, or a 4-D one held in NCHW
/// (the TOSA value, NHWC, is its permute, made only where something reads it so). Chains of
/// convolutions, pools and elementwise ops between them so stay in NCHW, and a file's own
/// NCHW-to-NHWC transposes at its edges cancel against them.
#[derive(Debug, Clone, Copy)]
enum Value {
    Tosa(TensorId),
    Nchw(TensorId),
    /// An int32 intermediate of a quantized pattern (a convolution's accumulators, an
    /// addition of rescaled inputs), made by the RESCALE that reads it.
    Pending,
}

/// A float constant's values (as f32), element type and shape.
type FloatConstant = (Vec<f32>, Element, Vec<usize>);

/// NHWC to NCHW and back.
const TO_NCHW: [isize; 4] = [0, 3, 1, 2];
const TO_NHWC: [isize; 4] = [0, 2, 3, 1];

/// The state of one lowering: the builder and what each graph value became.
struct Lowering<'a> {
    file: &'a VgfFile,
    graph: &'a TosaGraph,
    g: GraphBuilder,
    inputs: Vec<Option<TensorId>>,
    nodes: Vec<Value>,
    /// Nodes held in NCHW, once permuted back to TOSA's layout.
    nhwc: HashMap<usize, TensorId>,
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
            nhwc: HashMap::new(),
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
            let v = self.node(node)?;
            let v = self.typed_as(node, v)?;
            self.nodes.push(v);
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
            let result = self.graph.results[j].clone();
            let mut t = self.tensor(&result)?;
            // int16 values are held widened.
            if self.element_of(&result) == Some(Element::Int(16))
                && self.g.dtype(t) != Some(DType::I16)
            {
                t = self.g.cast(t, DType::I16)?;
            }
            if let Some(spec) = out_specs.get(k) {
                self.g.set_name(t, spec.name.clone())?;
            }
            self.g.output(t)?;
        }
        Ok(self.g)
    }

    /// `v` in its operator's float result type where it was made in another (an fp16 MATMUL
    /// with an fp32 result).
    fn typed_as(&mut self, n: &Node, v: Value) -> Result<Value> {
        let Element::Float(_) = n.result.element else {
            return Ok(v);
        };
        let want = dtype(n.result.element, n.op.name())?;
        let cast = |g: &mut GraphBuilder, t: TensorId| -> Result<TensorId> {
            match g.dtype(t) {
                Some(d) if d != want => Ok(g.cast(t, want)?),
                _ => Ok(t),
            }
        };
        Ok(match v {
            Value::Tosa(t) => Value::Tosa(cast(&mut self.g, t)?),
            Value::Nchw(t) => Value::Nchw(cast(&mut self.g, t)?),
            Value::Pending => Value::Pending,
        })
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
            Operand::Node(n) => match self.nodes[*n] {
                Value::Tosa(t) => Ok(t),
                Value::Pending => {
                    let node = &self.graph.nodes[*n];
                    if node.result.element == Element::Int(64) {
                        return Err(unsupported(format!(
                            "the int48 result of {} at word {} is read by other than a RESCALE",
                            node.op.name(),
                            node.at
                        )));
                    }
                    if matches!(
                        node.op,
                        Operator::Conv2d | Operator::Conv3d | Operator::DepthwiseConv2d
                    ) {
                        return Err(unsupported(format!(
                            "the int32 result of {} at word {} is read by other than a \
                             RESCALE to int8",
                            node.op.name(),
                            node.at
                        )));
                    }
                    let t = self.integer(node)?;
                    self.nodes[*n] = Value::Tosa(t);
                    Ok(t)
                }
                Value::Nchw(t) => {
                    if let Some(&done) = self.nhwc.get(n) {
                        return Ok(done);
                    }
                    let done = self.relayout(t, &TO_NHWC)?;
                    self.nhwc.insert(*n, done);
                    Ok(done)
                }
            },
            Operand::GraphConstant { id, ty } => {
                if let Some(&t) = self.constants.get(id) {
                    return Ok(t);
                }
                let t = self.graph_constant(*id, ty.element, ty.shape.as_deref())?;
                self.constants.insert(*id, t);
                Ok(t)
            }
            Operand::Constant(c) if matches!(c.element, Element::Int(_)) => {
                // Integer constants are held widened to int32 words.
                let shape = dims(c.shape.as_deref(), "a constant")?;
                let values: Vec<i32> = c
                    .ints()
                    .unwrap_or_default()
                    .iter()
                    .map(|&v| i32::try_from(v))
                    .collect::<std::result::Result<_, _>>()
                    .map_err(|_| unsupported("an integer constant beyond 32 bits".into()))?;
                let t = HostTensor::from_i32(shape, &values)
                    .map_err(|e| unsupported(format!("an integer constant: {e}")))?;
                let name = format!("tosa_constant_{}", self.nodes.len());
                Ok(self.g.constant(&name, t)?)
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

    /// An operand as a 4-D tensor in NCHW (TOSA's NHWC value permuted, unless held so).
    fn nchw(&mut self, o: &Operand) -> Result<TensorId> {
        if let Operand::Node(n) = o
            && let Value::Nchw(t) = self.nodes[*n]
        {
            return Ok(t);
        }
        let t = self.tensor(o)?;
        self.relayout(t, &TO_NCHW)
    }

    /// `t` permuted: a reshape where only dims of size 1 move; int8 and int16 tensors through
    /// int32 words (int16 values stay widened).
    fn relayout(&mut self, t: TensorId, perm: &[isize]) -> Result<TensorId> {
        let shape = self.shape(t);
        let size = |p: isize| shape.get(p as usize).copied().unwrap_or(0);
        let moved: Vec<isize> = perm.iter().copied().filter(|&p| size(p) != 1).collect();
        if moved.windows(2).all(|w| w[0] < w[1]) {
            let to: Vec<isize> = perm.iter().map(|&p| size(p) as isize).collect();
            return Ok(self.g.reshape(t, &to)?);
        }
        match self.g.dtype(t) {
            // int8 tensors take no permute: through int32 words.
            Some(DType::I8) => {
                let wide = self.g.cast(t, DType::I32)?;
                let moved = self.g.permute(wide, perm)?;
                return Ok(self.g.cast(moved, DType::I8)?);
            }
            // int16 values are held widened.
            Some(DType::I16) => {
                let wide = self.g.cast(t, DType::I32)?;
                return Ok(self.g.permute(wide, perm)?);
            }
            _ => {}
        }
        Ok(self.g.permute(t, perm)?)
    }

    /// The operand's value where it is held in NCHW.
    fn held_nchw(&self, o: &Operand) -> Option<TensorId> {
        match o {
            Operand::Node(n) => match self.nodes[*n] {
                Value::Nchw(t) => Some(t),
                Value::Tosa(_) | Value::Pending => None,
            },
            _ => None,
        }
    }

    /// Graph constant `id`, read in place from the file.
    fn graph_constant(
        &mut self,
        id: u32,
        element: Element,
        shape: Option<&[u64]>,
    ) -> Result<TensorId> {
        let data = self.constant_data(id)?;
        let base = self.file.bytes().as_ptr() as usize;
        let start = (data.as_ptr() as usize).wrapping_sub(base);
        let name = format!("graph_constant_{id}");
        let shape = dims(shape, &name)?;
        let dt = dtype(element, &name)?;
        let t = self.g.constant_shared(
            &name,
            dt,
            &shape,
            self.file.bytes().clone(),
            start..start + data.len(),
        )?;
        Ok(t)
    }

    /// The bytes of graph constant `id`, in the file.
    fn constant_data(&self, id: u32) -> Result<&'a [u8]> {
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
        Ok(constant.data)
    }

    /// A float constant operand's values, element type and shape (`None` for other operands).
    fn constant_floats(&self, o: &Operand) -> Result<Option<FloatConstant>> {
        let (values, element, shape) = match o {
            Operand::GraphConstant { id, ty } => {
                let data = self.constant_data(*id)?;
                let values: Vec<f32> = match ty.element {
                    Element::Float(32) => data
                        .chunks_exact(4)
                        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                        .collect(),
                    Element::Float(16) => data
                        .chunks_exact(2)
                        .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                        .collect(),
                    _ => return Ok(None),
                };
                (values, ty.element, ty.shape.clone())
            }
            Operand::Constant(c) => match c.floats() {
                Some(v) => (v, c.element, c.shape.clone()),
                None => return Ok(None),
            },
            _ => return Ok(None),
        };
        let shape = dims(shape.as_deref(), "a constant")?;
        if shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)) != Some(values.len()) {
            return Err(unsupported(format!(
                "a constant of shape {shape:?} holds {} values",
                values.len()
            )));
        }
        Ok(Some((values, element, shape)))
    }

    /// Convolution weights in the compute delegate's layout: constants permuted once, here;
    /// others by a permute in the graph.
    fn weights(&mut self, o: &Operand, perm: [usize; 4]) -> Result<TensorId> {
        let Some((values, element, shape)) = self.constant_floats(o)? else {
            let w = self.tensor(o)?;
            let perm: Vec<isize> = perm.iter().map(|&p| p as isize).collect();
            return Ok(self.g.permute(w, &perm)?);
        };
        let Ok(shape4) = <[usize; 4]>::try_from(shape.as_slice()) else {
            return Err(unsupported(format!("4-D weights, not {shape:?}")));
        };
        let (values, shape) = permute4(&values, shape4, perm);
        let name = format!("weights_{}", self.nodes.len());
        Ok(match element {
            Element::Float(16) => self.g.constant_f16(&name, &shape, &values)?,
            _ => self.g.constant_f32(&name, &shape, &values)?,
        })
    }

    /// One operator.
    fn node(&mut self, n: &Node) -> Result<Value> {
        let o = &n.operands;
        let bad = |why: &str| unsupported(format!("{} at word {}: {why}", n.op.name(), n.at));
        use Operator::*;
        if n.result.element == Element::Int(32)
            && matches!(n.op, Conv2d | Conv3d | DepthwiseConv2d | Add | Rescale)
            || n.result.element == Element::Int(64)
                && matches!(
                    n.op,
                    Conv2d | Conv3d | DepthwiseConv2d | TransposeConv2d | Matmul
                )
        {
            return Ok(Value::Pending);
        }
        if matches!(n.result.element, Element::Int(_)) && n.op != Reshape {
            // An int8 RESCALE closing a pattern of the int8 kernels, else TOSA's arithmetic.
            if n.op == Rescale
                && let Ok(v) = self.quantized(n)
            {
                return Ok(v);
            }
            match n.op {
                Transpose | AvgPool2d | MaxPool2d | Conv2d | DepthwiseConv2d => {}
                TransposeConv2d => return Ok(Value::Nchw(self.conv_transpose_q8(n, &bad)?)),
                _ => return Ok(Value::Tosa(self.integer(n)?)),
            }
        }
        if matches!(n.op, Greater | GreaterEqual | Equal) && self.is_integer(&o[0]) {
            let op = match n.op {
                Greater => compute_delegate::IntBinary::Greater,
                GreaterEqual => compute_delegate::IntBinary::GreaterEqual,
                _ => compute_delegate::IntBinary::Equal,
            };
            let (a, b) = (self.wide(&o[0])?, self.wide(&o[1])?);
            // Booleans are f32 masks, whatever compared them.
            let mask = self.g.int_binary(op, a, b)?;
            return Ok(Value::Tosa(self.g.cast(mask, DType::F32)?));
        }
        let t = match n.op {
            Rescale => self.quantized(n)?,
            Add => self.binary(BinaryOp::Add, &o[0], &o[1])?,
            Sub => self.binary(BinaryOp::Sub, &o[0], &o[1])?,
            Maximum => self.binary(BinaryOp::Maximum, &o[1], &o[2])?,
            Minimum => self.binary(BinaryOp::Minimum, &o[1], &o[2])?,
            Mul => {
                if ints(&o[2]).is_some_and(|s| s.iter().any(|&v| v != 0)) {
                    return Err(bad("a shift on floats"));
                }
                self.binary(BinaryOp::Mul, &o[0], &o[1])?
            }
            Clamp => {
                let (lo, hi) = (scalar_f32(&o[0]), scalar_f32(&o[1]));
                let (Some(lo), Some(hi)) = (lo, hi) else {
                    return Err(bad("bounds that are not float constants"));
                };
                self.unary(UnaryOp::Clamp(lo, hi), &o[3])?
            }
            Sigmoid => self.unary(UnaryOp::Sigmoid, &o[0])?,
            Tanh => self.unary(UnaryOp::Tanh, &o[0])?,
            op if math_of(op).is_some() => {
                let f = math_of(op).ok_or_else(|| bad("not a math function"))?;
                self.each(&o[0], |g, x| g.math(f, x, 0.0))?
            }
            Negate => {
                if [&o[1], &o[2]]
                    .iter()
                    .any(|z| scalar_f32(z).is_some_and(|v| v != 0.0))
                {
                    return Err(bad("zero points on floats"));
                }
                self.each(&o[0], |g, x| g.math(Math::Neg, x, 0.0))?
            }
            Pow => self.binary(BinaryOp::Pow, &o[0], &o[1])?,
            LogicalAnd => self.binary(BinaryOp::And, &o[0], &o[1])?,
            LogicalOr => self.binary(BinaryOp::Or, &o[0], &o[1])?,
            // On masks of 0 and 1, exclusive or is inequality.
            LogicalXor => self.binary(BinaryOp::Ne, &o[0], &o[1])?,
            LogicalNot => self.each(&o[0], |g, x| g.logical_not(x))?,
            Cast => Value::Tosa(self.cast_node(n)?),
            Resize => Value::Tosa(self.resize(n)?),
            Reverse => {
                let axis = ints(&o[0]).and_then(|a| a.first().copied());
                let axis = axis.ok_or_else(|| bad("an axis that is not constant"))?;
                let x = self.tensor(&o[1])?;
                Value::Tosa(self.registry(
                    "aten.flip.default",
                    vec![Arg::Tensor(x), Arg::Ints(vec![axis])],
                )?)
            }
            Gather => Value::Tosa(self.gather(n)?),
            Greater => self.binary(BinaryOp::Gt, &o[0], &o[1])?,
            GreaterEqual => self.binary(BinaryOp::Ge, &o[0], &o[1])?,
            Equal => self.binary(BinaryOp::Eq, &o[0], &o[1])?,
            Select => self.select(&o[0], &o[1], &o[2])?,
            Matmul => {
                if [&o[2], &o[3]]
                    .iter()
                    .any(|z| scalar_f32(z).is_some_and(|v| v != 0.0))
                {
                    return Err(bad("zero points on floats"));
                }
                let (a, b) = (self.tensor(&o[0])?, self.tensor(&o[1])?);
                Value::Tosa(self.g.bmm(a, b)?)
            }
            Pad => Value::Tosa(self.pad(n, &bad)?),
            Tile => {
                let times = ints(&o[1]).ok_or_else(|| bad("multiples that are not constant"))?;
                let x = self.tensor(&o[0])?;
                Value::Tosa(self.registry(
                    "aten.repeat.default",
                    vec![Arg::Tensor(x), Arg::Ints(times)],
                )?)
            }
            TransposeConv2d => Value::Nchw(self.conv_transpose(n, &bad)?),
            Transpose => {
                let perm = ints(&o[0]).ok_or_else(|| bad("perms that are not constants"))?;
                let perm = to_isize(&perm);
                if perm == TO_NCHW
                    && let Some(t) = self.held_nchw(&o[1])
                {
                    Value::Tosa(t)
                } else {
                    let x = self.tensor(&o[1])?;
                    match perm == TO_NHWC {
                        true => Value::Nchw(x),
                        false => Value::Tosa(self.relayout(x, &perm)?),
                    }
                }
            }
            Reshape => {
                let shape = ints(&o[1]).ok_or_else(|| bad("a shape that is not constant"))?;
                let x = self.tensor(&o[0])?;
                Value::Tosa(self.g.reshape(x, &to_isize(&shape))?)
            }
            Conv2d | DepthwiseConv2d => Value::Nchw(self.conv(n, &bad)?),
            Conv3d => Value::Tosa(self.conv3d(n, None)?),
            AvgPool2d | MaxPool2d => Value::Nchw(self.pool(n, &bad)?),
            ReduceSum | ReduceMax | ReduceMin | ReduceProduct | ReduceAny | ReduceAll => {
                let axis = ints(&o[0]).and_then(|a| a.first().copied());
                let axis = axis.ok_or_else(|| bad("an axis that is not constant"))? as isize;
                let x = self.tensor(o.last().unwrap_or(&o[0]))?;
                Value::Tosa(match n.op {
                    ReduceSum => self.g.sum(x, &[axis], true)?,
                    ReduceProduct => self.g.prod(x, &[axis], true)?,
                    // On masks of 0 and 1: any is the largest, all the smallest.
                    op => self
                        .g
                        .extreme(x, &[axis], true, matches!(op, ReduceMin | ReduceAll))?,
                })
            }
            Concat => {
                let axis = ints(&o[0]).and_then(|a| a.first().copied());
                let axis = axis.ok_or_else(|| bad("an axis that is not constant"))? as isize;
                let xs = o[1..]
                    .iter()
                    .map(|x| self.tensor(x))
                    .collect::<Result<Vec<_>>>()?;
                Value::Tosa(self.g.cat(&xs, axis)?)
            }
            Slice => {
                let x = self.tensor(&o[0])?;
                Value::Tosa(self.sliced(n, x)?)
            }
            _ => return Err(bad("not lowered")),
        };
        Ok(t)
    }

    /// A RESCALE to int8 and the int32 pattern it closes: CONV2D (`conv2d_q8`, in NCHW), or
    /// ADD of two inputs each RESCALEd from int8 (`add_q8`). Bit-exact with TOSA's single
    /// rounding.
    fn quantized(&mut self, n: &Node) -> Result<Value> {
        let bad = |why: &str| unsupported(format!("RESCALE at word {}: {why}", n.at));
        if n.result.element != Element::Int(8) {
            return Err(bad("a result other than int8 or int32"));
        }
        let out = self.rescale_of(n)?;
        if out.in_zp != 0 {
            return Err(bad("an int32 input with a zero point"));
        }
        if out.double_round {
            return Err(bad("double rounding"));
        }
        let Operand::Node(k) = n.operands[5] else {
            return Err(bad("an input that is not an int32 CONV2D or ADD"));
        };
        let inner = &self.graph.nodes[k];
        match inner.op {
            Operator::Conv2d | Operator::DepthwiseConv2d => {
                Ok(Value::Nchw(self.conv_q8(inner, &out)?))
            }
            Operator::Add => {
                let sides = [&inner.operands[0], &inner.operands[1]].map(|o| match o {
                    Operand::Node(j) if self.graph.nodes[*j].op == Operator::Rescale => {
                        Some(&self.graph.nodes[*j])
                    }
                    _ => None,
                });
                let [Some(a), Some(b)] = sides else {
                    return Err(bad("an ADD whose operands are not RESCALEs of int8"));
                };
                let (ra, rb) = (self.rescale_of(a)?, self.rescale_of(b)?);
                if ra.double_round || rb.double_round {
                    return Err(bad("an input RESCALE with double rounding"));
                }
                let one = |r: &Requantize| -> Result<compute_delegate::Rescale> {
                    match (&r.scales[..], r.out_zp) {
                        ([s], 0) => Ok(*s),
                        _ => Err(bad(
                            "an input RESCALE per channel or with an output zero point",
                        )),
                    }
                };
                let q = compute_delegate::QAdd {
                    a_zp: ra.in_zp as i32,
                    b_zp: rb.in_zp as i32,
                    out_zp: out.out_zp as i32,
                    left_shift: 0,
                    a: one(&ra)?,
                    b: one(&rb)?,
                    out: one(&Requantize {
                        out_zp: 0,
                        ..out.clone()
                    })?,
                };
                let (x, y) = (&a.operands[5], &b.operands[5]);
                // Elementwise: in NCHW where both are held so.
                if let (Some(x), Some(y)) = (self.held_nchw(x), self.held_nchw(y))
                    && self.shape(x) == self.shape(y)
                {
                    return Ok(Value::Nchw(self.g.add_q8(x, y, &q)?));
                }
                let (x, y) = (self.tensor(x)?, self.tensor(y)?);
                Ok(Value::Tosa(self.g.add_q8(x, y, &q)?))
            }
            _ => Err(bad("an input that is not an int32 convolution or ADD")),
        }
    }

    /// A RESCALE of a convolution's or an int16 product's sums (int32, or int48 ones), as one
    /// op with them; `None` where its input is anything else.
    fn fused_rescale(&mut self, n: &Node) -> Result<Option<TensorId>> {
        let Operand::Node(k) = n.operands[5] else {
            return Ok(None);
        };
        let graph = self.graph;
        let inner = &graph.nodes[k];
        let wide = inner.result.element == Element::Int(64);
        Ok(Some(match inner.op {
            Operator::Conv2d | Operator::DepthwiseConv2d => self.conv_rescaled(inner, n)?,
            Operator::Conv3d => self.conv3d(inner, Some(n))?,
            Operator::TransposeConv2d if wide => self.transpose_conv_rescaled(inner, n)?,
            Operator::Matmul if wide => self.matmul_rescaled(inner, n)?,
            _ => return Ok(None),
        }))
    }

    /// An integer operator as TOSA computes it (`compute_delegate::IntBinary` and friends on
    /// int32 words), its result narrowed to int8 where TOSA's is int8 (int16 results stay
    /// widened).
    fn integer(&mut self, n: &Node) -> Result<TensorId> {
        use compute_delegate::{IntBinary, IntReduce, IntRescale, IntUnary};
        let o = &n.operands;
        let bad = |why: &str| unsupported(format!("{} at word {}: {why}", n.op.name(), n.at));
        let t = match n.op {
            Operator::Rescale => match self.fused_rescale(n)? {
                Some(t) => t,
                None => {
                    let r = self.rescale_of(n)?;
                    let range = range_of(n.result.element);
                    let x = self.wide(&o[5])?;
                    let r = IntRescale {
                        scales: r.scales,
                        in_zp: r.in_zp as i32,
                        out_zp: r.out_zp as i32,
                        range,
                        double_round: r.double_round,
                    };
                    self.g.int_rescale(x, &r)?
                }
            },
            Operator::Add | Operator::Sub | Operator::Mul => {
                let op = match n.op {
                    Operator::Add => IntBinary::Add,
                    Operator::Sub => IntBinary::Sub,
                    _ => {
                        let shift = self.ints_of(&o[2])?.and_then(|v| v.first().copied());
                        let shift = shift.ok_or_else(|| bad("a shift that is not constant"))?;
                        let shift = u32::try_from(shift).map_err(|_| bad("a negative shift"))?;
                        IntBinary::Mul { shift }
                    }
                };
                let (a, b) = (self.wide(&o[0])?, self.wide(&o[1])?);
                self.g.int_binary(op, a, b)?
            }
            Operator::Maximum | Operator::Minimum => {
                let op = match n.op {
                    Operator::Maximum => IntBinary::Maximum,
                    _ => IntBinary::Minimum,
                };
                let (a, b) = (self.wide(&o[1])?, self.wide(&o[2])?);
                self.g.int_binary(op, a, b)?
            }
            Operator::ReduceSum | Operator::ReduceMax | Operator::ReduceMin => {
                let axis = ints(&o[0]).and_then(|a| a.first().copied());
                let axis = axis.ok_or_else(|| bad("an axis that is not constant"))? as isize;
                let op = match n.op {
                    Operator::ReduceSum => IntReduce::Sum,
                    Operator::ReduceMax => IntReduce::Max,
                    _ => IntReduce::Min,
                };
                let x = self.wide(o.last().unwrap_or(&o[0]))?;
                self.g.int_reduce(x, axis, op)?
            }
            Operator::Abs | Operator::BitwiseNot | Operator::Clz => {
                let op = match n.op {
                    Operator::Abs => IntUnary::Abs,
                    Operator::BitwiseNot => IntUnary::BitNot,
                    _ => IntUnary::LeadingZeros,
                };
                let x = self.wide(&o[0])?;
                self.g.int_unary(op, x)?
            }
            Operator::BitwiseAnd
            | Operator::BitwiseOr
            | Operator::BitwiseXor
            | Operator::LogicalLeftShift
            | Operator::LogicalRightShift
            | Operator::Intdiv => {
                let op = match (n.op, n.result.element) {
                    (Operator::BitwiseAnd, _) => IntBinary::BitAnd,
                    (Operator::BitwiseOr, _) => IntBinary::BitOr,
                    (Operator::BitwiseXor, _) => IntBinary::BitXor,
                    (Operator::LogicalLeftShift, _) => IntBinary::ShiftLeft,
                    (Operator::LogicalRightShift, Element::Int(bits)) => {
                        IntBinary::ShiftRightLogical { bits }
                    }
                    _ => IntBinary::Div,
                };
                let (a, b) = (self.wide(&o[0])?, self.wide(&o[1])?);
                let t = self.g.int_binary(op, a, b)?;
                // A left shift of int8 or int16 wraps to the type.
                match (n.op, n.result.element) {
                    (Operator::LogicalLeftShift, Element::Int(bits @ (8 | 16))) => {
                        self.g.int_unary(IntUnary::Wrap { bits }, t)?
                    }
                    _ => t,
                }
            }
            Operator::ArithmeticRightShift => {
                let round = match &o[0] {
                    Operand::Constant(c) => c.values.first().is_some_and(|&v| v != 0),
                    _ => return Err(bad("a round flag that is not constant")),
                };
                let (a, b) = (self.wide(&o[1])?, self.wide(&o[2])?);
                self.g
                    .int_binary(IntBinary::ShiftRightArithmetic { round }, a, b)?
            }
            Operator::Negate => {
                let (in_zp, out_zp) = (self.zero_point(n, 1)?, self.zero_point(n, 2)?);
                let x = self.wide(&o[0])?;
                let range = range_of(n.result.element);
                self.g.int_unary(
                    IntUnary::Negate {
                        in_zp,
                        out_zp,
                        range,
                    },
                    x,
                )?
            }
            Operator::Clamp => {
                let bound = |i: usize| -> Result<i32> {
                    let v = self.ints_of(&o[i])?.and_then(|v| v.first().copied());
                    v.and_then(|v| i32::try_from(v).ok())
                        .ok_or_else(|| bad("bounds that are not integer constants"))
                };
                let range = (bound(0)?, bound(1)?);
                let x = self.wide(&o[3])?;
                self.g.int_unary(IntUnary::Clamp { range }, x)?
            }
            Operator::Select => {
                let (c, a, b) = (self.wide(&o[0])?, self.wide(&o[1])?, self.wide(&o[2])?);
                self.g.int_select(c, a, b)?
            }
            Operator::Matmul => {
                let zps = (self.zero_point(n, 2)?, self.zero_point(n, 3)?);
                let (a, b) = (self.wide(&o[0])?, self.wide(&o[1])?);
                self.g.int_matmul(a, b, zps)?
            }
            Operator::Concat
            | Operator::Pad
            | Operator::Tile
            | Operator::Slice
            | Operator::Reverse => {
                return self.moved_exactly(n);
            }
            Operator::Cast => return self.cast_node(n),
            Operator::Argmax => {
                let axis = ints(&o[0]).and_then(|a| a.first().copied());
                let axis = axis.ok_or_else(|| bad("an axis that is not constant"))? as isize;
                // PROPAGATE (1, the default): the first NaN wins, as the kernel does; IGNORE
                // skips NaNs.
                if ints(&o[1]).is_some_and(|m| m.first().is_some_and(|&v| v != 1)) {
                    return Err(bad("NaNs ignored (nan_mode IGNORE)"));
                }
                // Integers through an exact f32 copy; the first of equal values wins.
                let x = match self.is_integer(&o[2]) {
                    true => self.float_copy(&o[2])?,
                    false => self.tensor(&o[2])?,
                };
                let y = self.g.arg_extreme(x, axis, false, false)?;
                self.g.cast(y, DType::I32)?
            }
            Operator::Resize => self.resize(n)?,
            Operator::Gather => return self.gather(n),
            Operator::Table => {
                let entries: Option<Vec<i32>> = self
                    .ints_of(&o[1])?
                    .and_then(|v| v.iter().map(|&e| i32::try_from(e).ok()).collect());
                let x = self.wide(&o[0])?;
                if self.element_of(&o[0]) == Some(Element::Int(16)) {
                    let table: [i32; 513] = entries
                        .and_then(|v| v.try_into().ok())
                        .ok_or_else(|| bad("an int16 table other than 513 constant entries"))?;
                    self.g.int_table16(x, &table)?
                } else {
                    let table: [i32; 256] = entries
                        .and_then(|v| v.try_into().ok())
                        .ok_or_else(|| bad("a table other than 256 constant int8 entries"))?;
                    self.g.int_table(x, &table)?
                }
            }
            _ => return Err(bad("not lowered on integers")),
        };
        Ok(match n.result.element {
            Element::Int(8) => self.g.cast(t, DType::I8)?,
            _ => t,
        })
    }

    /// A RESCALE of an integer CONV2D's or DEPTHWISE_CONV2D's accumulators (int16 inputs' int48
    /// sums, or int8 ones outside the int8 kernels' patterns), as one op in TOSA's layout.
    fn conv_rescaled(&mut self, conv: &Node, rescale: &Node) -> Result<TensorId> {
        let o = &conv.operands;
        let bad = |why: &str| unsupported(format!("{} at word {}: {why}", conv.op.name(), conv.at));
        let attr = |i: usize| ints(&o[i]).ok_or_else(|| bad("attributes that are not constants"));
        let (pad, stride, dilation) = (attr(0)?, attr(1)?, attr(2)?);
        let size = |v: &[i64]| -> Option<Vec<usize>> {
            v.iter().map(|&x| usize::try_from(x).ok()).collect()
        };
        let (Some(pad), Some(stride), Some(dilation)) =
            (size(&pad), size(&stride), size(&dilation))
        else {
            return Err(bad("negative padding, strides or dilations"));
        };
        let (Ok(padding), Ok(stride), Ok(dilation)) = (
            <[usize; 4]>::try_from(pad.as_slice()),
            <[usize; 2]>::try_from(stride.as_slice()),
            <[usize; 2]>::try_from(dilation.as_slice()),
        ) else {
            return Err(bad(
                "padding of other than 4 values, or strides or dilations of other than 2",
            ));
        };
        let Operand::GraphConstant { id, ty } = &o[6] else {
            return Err(bad("weights that are not an integer graph constant"));
        };
        let shape = dims(ty.shape.as_deref(), "the weights")?;
        let values: Vec<i32> = self
            .ints_of(&o[6])?
            .ok_or_else(|| bad("weights that are not an integer graph constant"))?
            .iter()
            .map(|&v| v as i32)
            .collect();
        if shape.len() != 4 || checked_numel(&shape) != Some(values.len()) {
            return Err(bad(&format!(
                "weights {shape:?} of {} values",
                values.len()
            )));
        }
        let t = HostTensor::from_i32(shape.clone(), &values).map_err(|e| bad(&e.to_string()))?;
        let name = format!("weights_{}_{id}", self.nodes.len());
        let w = self.g.constant(&name, t)?;
        let geometry = compute_delegate::IntConv {
            padding,
            stride,
            dilation,
            depth_multiplier: (conv.op == Operator::DepthwiseConv2d).then(|| shape[3]),
            ..self.int_conv_of(conv, rescale, [7, 8, 9])?
        };
        let x = self.wide(&o[5])?;
        Ok(self.g.int_conv_rescaled(x, w, &geometry)?)
    }

    /// An `IntConv` of stride 1 and no padding (the caller sets the geometry) with integer
    /// convolution `conv`'s bias and zero points (operands `[bias, x_zp, w_zp]`) and the
    /// scales of `rescale`, the RESCALE of its sums.
    fn int_conv_of(
        &self,
        conv: &Node,
        rescale: &Node,
        [bias, x_zp, w_zp]: [usize; 3],
    ) -> Result<compute_delegate::IntConv> {
        let bad = |why: &str| unsupported(format!("{} at word {}: {why}", conv.op.name(), conv.at));
        let bias = self
            .ints_of(&conv.operands[bias])?
            .ok_or_else(|| bad("a bias that is not an integer constant"))?;
        let r = self.rescale_of(rescale)?;
        if r.in_zp != 0 {
            return Err(bad("a RESCALE of its sums with an input zero point"));
        }
        // int48 sums take 16-bit multipliers (TOSA: scale32 is false for int48 inputs).
        if conv.result.element == Element::Int(64) && r.scale32 {
            return Err(bad("int48 sums rescaled with 32-bit multipliers"));
        }
        if r.double_round {
            return Err(bad("a RESCALE of its sums with double rounding"));
        }
        Ok(compute_delegate::IntConv {
            padding: [0; 4],
            stride: [1, 1],
            dilation: [1, 1],
            depth_multiplier: None,
            x_zp: self.zero_point(conv, x_zp)?,
            w_zp: self.zero_point(conv, w_zp)?,
            bias,
            scales: r.scales,
            out_zp: r.out_zp as i32,
            range: range_of(rescale.result.element),
        })
    }

    /// A RESCALE of an int16 TRANSPOSE_CONV2D's int48 sums (weights `[OC, KH, KW, IC]`,
    /// `out_pad` `[top, bottom, left, right]`), as one `IntConv` of stride 1 over the input
    /// spread by its strides and padded by `K - 1 + out_pad` (`spread2d`: zeros between and
    /// around, which count as zero with the input zero point of 0 that int16 takes), the
    /// weights flipped.
    fn transpose_conv_rescaled(&mut self, conv: &Node, rescale: &Node) -> Result<TensorId> {
        let o = &conv.operands;
        let bad = |why: &str| unsupported(format!("{} at word {}: {why}", conv.op.name(), conv.at));
        let attr = |i: usize| ints(&o[i]).ok_or_else(|| bad("attributes that are not constants"));
        let (out_pad, stride) = (attr(0)?, attr(1)?);
        let (&[t, b, l, r], &[sy, sx]) = (&out_pad[..], &stride[..]) else {
            return Err(bad(
                "out_pad of other than 4 values or stride of other than 2",
            ));
        };
        let p = self.int_conv_of(conv, rescale, [6, 7, 8])?;
        if p.x_zp != 0 {
            return Err(bad("an input zero point with int48 sums"));
        }
        let Operand::GraphConstant { ty, .. } = &o[5] else {
            return Err(bad("weights that are not an integer graph constant"));
        };
        let shape = dims(ty.shape.as_deref(), "the weights")?;
        let values = self
            .ints_of(&o[5])?
            .ok_or_else(|| bad("weights that are not an integer graph constant"))?;
        let (&[oc, kh, kw, ic], true) = (&shape[..], checked_numel(&shape) == Some(values.len()))
        else {
            return Err(bad(&format!(
                "weights {shape:?} of {} values",
                values.len()
            )));
        };
        let x = self.wide(&o[4])?;
        let xs = self.shape(x);
        let &[_, ih, iw, xic] = &xs[..] else {
            return Err(bad(&format!("an input {xs:?} that is not 4-D")));
        };
        // Where the spread input starts, and its size: (I - 1) s + 1 + (K - 1 + before) +
        // (K - 1 + after), at least K.
        let side = |i: usize, k: usize, s: i64, before: i64, after: i64| -> Option<(i64, usize)> {
            let s = usize::try_from(s)
                .ok()
                .filter(|s| (1..=1 << 16).contains(s))?;
            let (k1, i1) = (i64::try_from(k).ok()? - 1, i64::try_from(i).ok()? - 1);
            let (lo, hi) = (k1.checked_add(before)?, k1.checked_add(after)?);
            let len = i1
                .checked_mul(s as i64)?
                .checked_add(1 + lo)?
                .checked_add(hi)?;
            let len = usize::try_from(len)
                .ok()
                .filter(|&v| lo >= 0 && hi >= 0 && v >= k)?;
            Some((lo, len))
        };
        let (Some((top, oh)), Some((left, ow)), true) = (
            side(ih, kh, sy, t, b),
            side(iw, kw, sx, l, r),
            xic == ic && kh * kw > 0,
        ) else {
            return Err(bad(&format!(
                "out_pad {out_pad:?} and stride {stride:?} for an input {xs:?} and weights {shape:?}"
            )));
        };
        let mut flipped = vec![0i32; values.len()];
        for (at, v) in flipped.iter_mut().enumerate() {
            let (c, rest) = (at % ic, at / ic);
            let (x, rest) = (rest % kw, rest / kw);
            let (y, f) = (rest % kh, rest / kh);
            *v = values[((f * kh + kh - 1 - y) * kw + kw - 1 - x) * ic + c] as i32;
        }
        let w = HostTensor::from_i32(vec![oc, kh, kw, ic], &flipped)
            .map_err(|e| bad(&e.to_string()))?;
        let name = format!("weights_{}", self.nodes.len());
        let w = self.g.constant(&name, w)?;
        let x = self.relayout(x, &TO_NCHW)?;
        let spread = [sy as usize, sx as usize];
        let x = self.g.spread2d(x, spread, [top, left], [oh, ow])?;
        let x = self.relayout(x, &TO_NHWC)?;
        Ok(self.g.int_conv_rescaled(x, w, &p)?)
    }

    /// CONV3D (input `[N, D, H, W, IC]`, weights `[OC, KD, KH, KW, IC]`, padding `[front,
    /// back, top, bottom, left, right]`) as one 2-D convolution: the input padded (with zeros,
    /// or the input's zero point, which counts as zero), the KD depth slices each output depth
    /// reads side by side along channels, `[N * OD, H, W, KD * IC]`, and the weights laid out
    /// to match, `[OC, KH, KW, KD * IC]`. Float, or integer with `rescale`, the RESCALE of its
    /// sums (as `IntConv`). The result `[N, OD, OH, OW, OC]`.
    fn conv3d(&mut self, n: &Node, rescale: Option<&Node>) -> Result<TensorId> {
        let o = &n.operands;
        let bad = |why: &str| unsupported(format!("{} at word {}: {why}", n.op.name(), n.at));
        let attr = |i: usize| -> Result<Vec<usize>> {
            let v = ints(&o[i]).ok_or_else(|| bad("attributes that are not constants"))?;
            v.iter()
                .map(|&x| usize::try_from(x).map_err(|_| bad("negative attributes")))
                .collect()
        };
        let (pad, stride, dilation) = (attr(0)?, attr(1)?, attr(2)?);
        let (&[p0, p1, pt, pb, pl, pr], &[sd, sy, sx], &[dd, dy, dx]) =
            (&pad[..], &stride[..], &dilation[..])
        else {
            return Err(bad(
                "padding of other than 6 values, or strides or dilations of other than 3",
            ));
        };
        if [sd, sy, sx, dd, dy, dx].contains(&0) {
            return Err(bad("a stride or dilation of 0"));
        }
        let int = rescale.is_some();
        let x_zp = if int { self.zero_point(n, 8)? } else { 0 };
        let x = match int {
            true => self.float_copy(&o[5])?,
            false => self.tensor(&o[5])?,
        };
        let (ws, w_values) = match int {
            true => {
                let Operand::GraphConstant { ty, .. } = &o[6] else {
                    return Err(bad("weights that are not a graph constant"));
                };
                let v = self
                    .ints_of(&o[6])?
                    .ok_or_else(|| bad("weights that are not integers"))?;
                (
                    dims(ty.shape.as_deref(), "the weights")?,
                    v.iter().map(|&v| v as f32).collect(),
                )
            }
            false => {
                let (v, _, shape) = self
                    .constant_floats(&o[6])?
                    .ok_or_else(|| bad("weights that are not a float constant"))?;
                (shape, v)
            }
        };
        let xs = self.shape(x);
        let (&[nb, _, _, _, ic], &[oc, kd, kh, kw, wic]) = (&xs[..], &ws[..]) else {
            return Err(bad(&format!("input {xs:?} and weights {ws:?}: not 5-D")));
        };
        if wic != ic || checked_numel(&ws) != Some(w_values.len()) || kd == 0 {
            return Err(bad(&format!("input {xs:?} and weights {ws:?}")));
        }
        // The registry's pad lists the last dim first.
        let pads = [0, 0, pl, pr, pt, pb, p0, p1].map(|v| v as i64).to_vec();
        let x = self.registry(
            "aten.constant_pad_nd.default",
            vec![Arg::Tensor(x), Arg::Ints(pads), Arg::Float(f64::from(x_zp))],
        )?;
        let Some(r) = rescale else {
            // Floats: the compute delegate's 3-D convolution, in NCDHW, the weights as
            // [OC, IC, KD, KH, KW].
            let mut w = vec![0f32; w_values.len()];
            for (at, v) in w.iter_mut().enumerate() {
                let (c, rest) = (at % kw, at / kw);
                let (h, rest) = (rest % kh, rest / kh);
                let (d, rest) = (rest % kd, rest / kd);
                let (i, f) = (rest % ic, rest / ic);
                *v = w_values[(((f * kd + d) * kh + h) * kw + c) * ic + i];
            }
            let name = format!("weights_{}", self.nodes.len());
            let w = self.g.constant_f32(&name, &[oc, ic, kd, kh, kw], &w)?;
            let w = match self.g.dtype(x) {
                Some(DType::F16) => self.g.cast(w, DType::F16)?,
                _ => w,
            };
            let x = self.g.permute(x, &[0, 4, 1, 2, 3])?;
            let bias = self.tensor(&o[7])?;
            let per_channel = checked_numel(&self.shape(bias)) == Some(oc);
            let b = per_channel
                .then(|| self.g.reshape(bias, &[oc as isize]))
                .transpose()?;
            let p = compute_delegate::Conv3d {
                stride: [sd, sy, sx],
                padding: [0; 3],
                dilation: [dd, dy, dx],
            };
            let y = self.g.conv3d(x, w, b, &p)?;
            let y = self.g.permute(y, &[0, 2, 3, 4, 1])?;
            return Ok(match per_channel {
                true => y,
                false => self.g.add(y, bias)?,
            });
        };
        let &[_, dp, hp, wp, _] = &self.shape(x)[..] else {
            return Err(bad("a padded input that is not 5-D"));
        };
        let span = (kd - 1).checked_mul(dd).and_then(|v| v.checked_add(1));
        let Some(od) = span.and_then(|s| dp.checked_sub(s)).map(|v| v / sd + 1) else {
            return Err(bad("a window deeper than the padded input"));
        };
        let mut parts = Vec::with_capacity(kd);
        for k in 0..kd {
            let start = (k * dd) as i64;
            let end = start + ((od - 1) * sd + 1) as i64;
            let args = vec![
                Arg::Tensor(x),
                Arg::Int(1),
                Arg::Int(start),
                Arg::Int(end),
                Arg::Int(sd as i64),
            ];
            parts.push(self.registry("aten.slice_copy.Tensor", args)?);
        }
        let x = self.g.cat(&parts, 4)?;
        let rows = [
            (nb * od) as isize,
            hp as isize,
            wp as isize,
            (kd * ic) as isize,
        ];
        let x = self.g.reshape(x, &rows)?;
        // [OC, KD, KH, KW, IC] to [OC, KH, KW, KD, IC]: channel kd * IC + ic, as the slices.
        let mut w = vec![0f32; w_values.len()];
        for (at, v) in w.iter_mut().enumerate() {
            let (i, r) = (at % ic, at / ic);
            let (d, r) = (r % kd, r / kd);
            let (c, r) = (r % kw, r / kw);
            let (h, f) = (r % kh, r / kh);
            *v = w_values[(((f * kd + d) * kh + h) * kw + c) * ic + i];
        }
        let y = self.conv3d_int(n, r, x, &w, [oc, kh, kw, kd * ic], [sy, sx, dy, dx])?;
        let &[_, oh, ow, _] = &self.shape(y)[..] else {
            return Err(bad("a 2-D result that is not 4-D"));
        };
        let out = [nb, od, oh, ow, oc].map(|v| v as isize);
        Ok(self.g.reshape(y, &out)?)
    }

    /// The integer 2-D convolution of [`Lowering::conv3d`]: `x` an exact f32 copy `[N * OD, H,
    /// W, KD * IC]`, weights `w` of `shape`, with CONV3D `n`'s zero points and bias and the
    /// RESCALE `r` of its sums, as one `IntConv`.
    fn conv3d_int(
        &mut self,
        n: &Node,
        r: &Node,
        x: TensorId,
        w: &[f32],
        shape: [usize; 4],
        [sy, sx, dy, dx]: [usize; 4],
    ) -> Result<TensorId> {
        let bad = |why: &str| unsupported(format!("{} at word {}: {why}", n.op.name(), n.at));
        let w: Vec<i32> = w.iter().map(|&v| v as i32).collect();
        let t = HostTensor::from_i32(shape.to_vec(), &w).map_err(|e| bad(&e.to_string()))?;
        let name = format!("weights_{}", self.nodes.len());
        let w = self.g.constant(&name, t)?;
        let p = compute_delegate::IntConv {
            stride: [sy, sx],
            dilation: [dy, dx],
            ..self.int_conv_of(n, r, [7, 8, 9])?
        };
        let x = self.g.cast(x, DType::I32)?;
        Ok(self.g.int_conv_rescaled(x, w, &p)?)
    }

    /// A RESCALE of an int16 MATMUL's int48 sums, as one op.
    fn matmul_rescaled(&mut self, product: &Node, rescale: &Node) -> Result<TensorId> {
        let bad = |why: &str| {
            unsupported(format!(
                "{} at word {}: {why}",
                product.op.name(),
                product.at
            ))
        };
        let r = self.rescale_of(rescale)?;
        // TOSA: int48 inputs take 16-bit multipliers and no zero point.
        if r.scale32 || r.in_zp != 0 {
            return Err(bad(
                "int48 sums rescaled with 32-bit multipliers or an input zero point",
            ));
        }
        let zps = (self.zero_point(product, 2)?, self.zero_point(product, 3)?);
        let r = compute_delegate::IntRescale {
            scales: r.scales,
            in_zp: 0,
            out_zp: r.out_zp as i32,
            range: range_of(rescale.result.element),
            double_round: false,
        };
        let (a, b) = (
            self.wide(&product.operands[0])?,
            self.wide(&product.operands[1])?,
        );
        Ok(self.g.int_matmul_rescaled(a, b, zps, &r)?)
    }

    /// `x` sliced as SLICE `n`'s constant start and size say, dim by dim.
    fn sliced(&mut self, n: &Node, mut x: TensorId) -> Result<TensorId> {
        let o = &n.operands;
        let (Some(start), Some(size)) = (ints(&o[1]), ints(&o[2])) else {
            return Err(unsupported(format!(
                "SLICE at word {}: a start or size that is not constant",
                n.at
            )));
        };
        for (d, (&s, &len)) in start.iter().zip(&size).enumerate() {
            let full = self.shape(x).get(d).copied().unwrap_or(0) as i64;
            if s != 0 || len != full {
                x = self
                    .g
                    .slice(x, d as isize, s as isize, (s + len) as isize, 1)?;
            }
        }
        Ok(x)
    }

    /// TOSA's RESIZE of an NHWC operand (`compute_delegate::Resize`): floats as they are,
    /// integers widened (bilinear gives their int32 sums, nearest int8 narrowed back).
    fn resize(&mut self, n: &Node) -> Result<TensorId> {
        let o = &n.operands;
        let bad = |why: &str| unsupported(format!("RESIZE at word {}: {why}", n.at));
        let mode = ints(&o[0]).and_then(|v| v.first().copied());
        let bilinear = match mode {
            Some(1) => false,
            Some(2) => true,
            _ => return Err(bad("a mode other than nearest (1) or bilinear (2)")),
        };
        let int4 = |i: usize| -> Option<Vec<i32>> {
            ints(&o[i])?
                .iter()
                .map(|&v| i32::try_from(v).ok())
                .collect()
        };
        let (Some(scale), Some(offset)) = (int4(2), int4(3)) else {
            return Err(bad("a scale or offset that is not constant"));
        };
        let (Ok(scale), Ok(offset)) = (<[i32; 4]>::try_from(scale), <[i32; 2]>::try_from(offset))
        else {
            return Err(bad(
                "a scale of other than 4 values or an offset of other than 2",
            ));
        };
        let shape = dims(n.result.shape.as_deref(), "RESIZE's result")?;
        let &[_, oh, ow, _] = &shape[..] else {
            return Err(bad("a result other than [N, H, W, C]"));
        };
        let border = int4(4)
            .and_then(|v| <[i32; 2]>::try_from(v).ok())
            .ok_or_else(|| bad("a border that is not 2 constants"))?;
        let in_shape = self.element_shape(&o[1]);
        let Some(&[_, ih, iw, _]) = in_shape.as_deref() else {
            return Err(bad("an input other than [N, H, W, C]"));
        };
        // TOSA's ERROR_IFs: the scales, offsets and borders in range, and each output size
        // the one they make.
        let axis = |(i, size, out): (usize, usize, usize)| -> bool {
            let (n, d, off, bord) = (
                i64::from(scale[2 * i]),
                i64::from(scale[2 * i + 1]),
                i64::from(offset[i]),
                i64::from(border[i]),
            );
            let span = (size as i64 - 1) * n - off + bord;
            (1..=2048).contains(&n)
                && (1..16 * n).contains(&d)
                && (-n..16 * n).contains(&off)
                && (-16 * n..n).contains(&bord)
                && (1..=1 << 14).contains(&size)
                && span >= 0
                && span % d == 0
                && span / d + 1 == out as i64
        };
        if ![(0, ih, oh), (1, iw, ow)].into_iter().all(axis) {
            return Err(bad(&format!(
                "scale {scale:?}, offset {offset:?} and border {border:?} from {ih}x{iw} to \
                 {oh}x{ow}, outside TOSA's rules"
            )));
        }
        // int16 bilinear sums are int48: they must fit int32 here.
        if bilinear
            && self.element_of(&o[1]) == Some(Element::Int(16))
            && i64::from(scale[0]) * i64::from(scale[2]) * 32768 > i64::from(i32::MAX)
        {
            return Err(bad("int16 bilinear weights whose sums pass 32 bits"));
        }
        let r = compute_delegate::Resize {
            bilinear,
            scale,
            offset,
            out: [oh, ow],
        };
        let x = match self.is_integer(&o[1]) {
            true => self.wide(&o[1])?,
            false => self.tensor(&o[1])?,
        };
        let y = self.g.resize(x, &r)?;
        Ok(match n.result.element {
            Element::Int(8) => self.g.cast(y, DType::I8)?,
            _ => y,
        })
    }

    /// An int8 or int16 CONCAT, PAD, TILE, SLICE or REVERSE on exact f32 copies of its operands
    /// (every such value is an f32), through the float lowering's own operators, narrowed back.
    fn moved_exactly(&mut self, n: &Node) -> Result<TensorId> {
        let o = &n.operands;
        let bad = |why: &str| unsupported(format!("{} at word {}: {why}", n.op.name(), n.at));
        let t = match n.op {
            Operator::Concat => {
                let axis = ints(&o[0]).and_then(|a| a.first().copied());
                let axis = axis.ok_or_else(|| bad("an axis that is not constant"))? as isize;
                let xs = o[1..]
                    .iter()
                    .map(|x| self.float_copy(x))
                    .collect::<Result<Vec<_>>>()?;
                self.g.cat(&xs, axis)?
            }
            Operator::Pad => {
                let pads = ints(&o[1]).ok_or_else(|| bad("padding that is not constant"))?;
                let value = self.zero_point(n, 2)?;
                let x = self.float_copy(&o[0])?;
                let pad: Vec<i64> = pads.chunks(2).rev().flatten().copied().collect();
                self.registry(
                    "aten.constant_pad_nd.default",
                    vec![Arg::Tensor(x), Arg::Ints(pad), Arg::Float(f64::from(value))],
                )?
            }
            Operator::Tile => {
                let times = ints(&o[1]).ok_or_else(|| bad("multiples that are not constant"))?;
                let x = self.float_copy(&o[0])?;
                self.registry(
                    "aten.repeat.default",
                    vec![Arg::Tensor(x), Arg::Ints(times)],
                )?
            }
            Operator::Reverse => {
                let axis = ints(&o[0]).and_then(|a| a.first().copied());
                let axis = axis.ok_or_else(|| bad("an axis that is not constant"))?;
                let x = self.float_copy(&o[1])?;
                self.registry(
                    "aten.flip.default",
                    vec![Arg::Tensor(x), Arg::Ints(vec![axis])],
                )?
            }
            _ => {
                let x = self.float_copy(&o[0])?;
                self.sliced(n, x)?
            }
        };
        self.narrowed(t, n.result.element)
    }

    /// An exact f32 copy of integers back in the integer type held for `element` (int8 as
    /// int8, int16 widened).
    fn narrowed(&mut self, t: TensorId, element: Element) -> Result<TensorId> {
        let to = match element {
            Element::Int(8) => DType::I8,
            _ => DType::I32,
        };
        Ok(self.g.cast(t, to)?)
    }

    /// An int8 TRANSPOSE_CONV2D's int32 accumulators in NCHW, through the float transposed
    /// convolution where they are exact (every partial sum under 2^24): the input less its
    /// zero point and the weights (zero point 0) as f32, the convolution, then the int32 bias.
    fn conv_transpose_q8(
        &mut self,
        n: &Node,
        bad: &dyn Fn(&str) -> NativeError,
    ) -> Result<TensorId> {
        let o = &n.operands;
        let (x_zp, w_zp) = (self.zero_point(n, 7)?, self.zero_point(n, 8)?);
        if w_zp != 0 {
            return Err(bad("a weight zero point"));
        }
        let Operand::GraphConstant { id, ty } = &o[5] else {
            return Err(bad("weights that are not an int8 graph constant"));
        };
        if ty.element != Element::Int(8) {
            return Err(bad("weights that are not an int8 graph constant"));
        }
        let data = self.constant_data(*id)?;
        let shape = dims(ty.shape.as_deref(), "the weights")?;
        let Ok(shape4) = <[usize; 4]>::try_from(shape.as_slice()) else {
            return Err(bad("weights that are not 4-D"));
        };
        if checked_numel(&shape) != Some(data.len()) {
            return Err(bad(&format!("weights {shape:?} of {} bytes", data.len())));
        }
        // Each output sums at most every weight of its channel times |x - x_zp| <= 255 (an
        // input reaches an output through one weight per input channel and tap).
        let per_oc = data.len() / shape4[0].max(1);
        let worst = data
            .chunks(per_oc.max(1))
            .map(|w| {
                w.iter()
                    .map(|&b| i64::from((b as i8).unsigned_abs()))
                    .sum::<i64>()
            })
            .max()
            .unwrap_or(0);
        if worst * 255 >= 1 << 24 {
            return Err(bad("sums too deep to be exact in f32"));
        }
        let values: Vec<f32> = data.iter().map(|&b| f32::from(b as i8)).collect();
        let (values, wshape) = permute4(&values, shape4, [3, 0, 1, 2]);
        let name = format!("weights_{}", self.nodes.len());
        let w = self.g.constant_f32(&name, &wshape, &values)?;
        let x = self.float_nchw(&o[4])?;
        let x = self.g.unary(UnaryOp::AddScalar(-(x_zp as f32)), x)?;
        let (padding, extra, stride) = transpose_geometry(n, bad)?;
        let p = Conv2d {
            stride,
            padding,
            dilation: [1, 1],
            groups: 1,
        };
        let y = self.g.conv_transpose2d(x, w, None, p, extra)?;
        let y = self.g.cast(y, DType::I32)?;
        let bias = self.wide(&o[6])?;
        let oc = wshape[1];
        if checked_numel(&self.shape(bias)) != Some(oc) {
            return Err(bad("a bias other than one per output channel"));
        }
        let bias = self.g.reshape(bias, &[1, oc as isize, 1, 1])?;
        Ok(self
            .g
            .int_binary(compute_delegate::IntBinary::Add, y, bias)?)
    }

    /// An int8 or int16 operand as an exact f32 copy, in TOSA's layout.
    fn float_copy(&mut self, o: &Operand) -> Result<TensorId> {
        if let Some(t) = self.held_nchw(o) {
            let f = self.g.cast(t, DType::F32)?;
            return self.relayout(f, &TO_NHWC);
        }
        let t = self.tensor(o)?;
        Ok(self.g.cast(t, DType::F32)?)
    }

    /// An int8 or int16 operand as an exact f32 copy, in NCHW (int MAX_POOL2D's input).
    fn float_nchw(&mut self, o: &Operand) -> Result<TensorId> {
        if let Some(t) = self.held_nchw(o) {
            return Ok(self.g.cast(t, DType::F32)?);
        }
        let t = self.tensor(o)?;
        let f = self.g.cast(t, DType::F32)?;
        self.relayout(f, &TO_NCHW)
    }

    /// TOSA's CAST: between floats, from integers or booleans (f32 masks) exactly, from
    /// floats to integers rounded half to even and saturated, to booleans as `x != 0`, and
    /// between integers where it widens.
    fn cast_node(&mut self, n: &Node) -> Result<TensorId> {
        let bad = |why: &str| unsupported(format!("CAST at word {}: {why}", n.at));
        let x = self.tensor(&n.operands[0])?;
        let from = self.g.dtype(x).ok_or_else(|| bad("an unknown operand"))?;
        let float = |d: DType| matches!(d, DType::F32 | DType::F16);
        Ok(match n.result.element {
            Element::Bool => {
                let x = if float(from) {
                    x
                } else {
                    self.g.cast(x, DType::F32)?
                };
                self.g
                    .compare_scalar(x, compute_delegate::Compare::Ne, 0.0)?
            }
            Element::Float(_) => {
                let to = dtype(n.result.element, "CAST")?;
                match from {
                    DType::I8 | DType::I32 if to == DType::F16 => {
                        let f = self.g.cast(x, DType::F32)?;
                        self.g.cast(f, to)?
                    }
                    _ => self.g.cast(x, to)?,
                }
            }
            Element::Int(bits @ (8 | 16 | 32)) => {
                // int16 values are held widened.
                let to = match bits {
                    8 => DType::I8,
                    _ => DType::I32,
                };
                if float(from) {
                    let r = self.g.math(Math::Round, x, 0.0)?;
                    let t = self.g.cast(r, to)?;
                    match bits {
                        16 => self.g.int_unary(
                            compute_delegate::IntUnary::Clamp {
                                range: range_of(Element::Int(16)),
                            },
                            t,
                        )?,
                        _ => t,
                    }
                } else if from.size() <= to.size() && bits != 16 {
                    self.g.cast(x, to)?
                } else {
                    // Narrowing wraps: the low bits, sign-extended.
                    let wide = self.wide(&n.operands[0])?;
                    let t = self
                        .g
                        .int_unary(compute_delegate::IntUnary::Wrap { bits }, wide)?;
                    self.g.cast(t, to)?
                }
            }
            e => return Err(bad(&format!("a {e:?} result"))),
        })
    }

    /// TOSA's GATHER: rows `[N, W, C]` of values `[N, K, C]` at int32 indices `[N, W]`, as one
    /// embedding lookup in values `[N K, C]` (the indices of batch item `n` offset by `n K`).
    fn gather(&mut self, n: &Node) -> Result<TensorId> {
        let bad = |why: &str| unsupported(format!("GATHER at word {}: {why}", n.at));
        let o = &n.operands;
        let mut values = self.tensor(&o[0])?;
        if self.g.dtype(values) == Some(DType::I8) {
            values = self.g.cast(values, DType::I32)?;
        }
        let ids = self.wide(&o[1])?;
        let (&[nb, k, c], &[nb2, _]) = (&self.shape(values)[..], &self.shape(ids)[..]) else {
            return Err(bad(
                "values other than [N, K, C] or indices other than [N, W]",
            ));
        };
        if nb != nb2 {
            return Err(bad("values and indices of different batches"));
        }
        let table = self.g.reshape(values, &[(nb * k) as isize, c as isize])?;
        let ids = if nb > 1 {
            let offsets: Vec<i32> = (0..nb)
                .map(|i| i32::try_from(i * k).map_err(|_| bad("more rows than 32 bits count")))
                .collect::<Result<_>>()?;
            let t = HostTensor::from_i32(vec![nb, 1], &offsets).map_err(|e| bad(&e.to_string()))?;
            let name = format!("gather_offsets_{}", self.nodes.len());
            let offsets = self.g.constant(&name, t)?;
            self.g
                .int_binary(compute_delegate::IntBinary::Add, ids, offsets)?
        } else {
            ids
        };
        let rows = self.g.embedding(table, ids)?;
        Ok(match n.result.element {
            Element::Int(8) => self.g.cast(rows, DType::I8)?,
            _ => rows,
        })
    }

    /// An operand's TOSA shape, where declared.
    fn element_shape(&self, o: &Operand) -> Option<Vec<usize>> {
        let shape = match o {
            Operand::Node(k) => self.graph.nodes[*k].result.shape.clone(),
            Operand::Input(i) => self.graph.inputs.get(*i)?.ty.shape.clone(),
            Operand::GraphConstant { ty, .. } => ty.shape.clone(),
            Operand::Constant(c) => c.shape.clone(),
        }?;
        shape.iter().map(|&d| usize::try_from(d).ok()).collect()
    }

    /// An operand's TOSA element type.
    fn element_of(&self, o: &Operand) -> Option<Element> {
        match o {
            Operand::Node(k) => Some(self.graph.nodes[*k].result.element),
            Operand::Input(i) => self.graph.inputs.get(*i).map(|p| p.ty.element),
            Operand::GraphConstant { ty, .. } => Some(ty.element),
            Operand::Constant(c) => Some(c.element),
        }
    }

    /// Whether an operand is an integer tensor.
    fn is_integer(&self, o: &Operand) -> bool {
        matches!(self.element_of(o), Some(Element::Int(_)))
    }

    /// An integer operand widened to int32 words.
    fn wide(&mut self, o: &Operand) -> Result<TensorId> {
        let t = self.tensor(o)?;
        Ok(match self.g.dtype(t) {
            Some(DType::I32) => t,
            _ => self.g.cast(t, DType::I32)?,
        })
    }

    /// A RESCALE's parameters, where it is one the kernels compute: 16- or 32-bit multipliers,
    /// single rounding, signed input and output.
    fn rescale_of(&self, n: &Node) -> Result<Requantize> {
        let o = &n.operands;
        let bad = |why: &str| unsupported(format!("RESCALE at word {}: {why}", n.at));
        let flag = |i: usize| match &o[i] {
            Operand::Constant(c) => c.values.first().map(|&v| v != 0),
            _ => None,
        };
        // SINGLE_ROUND (1); INEXACT_ROUND (2) lets an implementation round once; DOUBLE_ROUND
        // (3) needs 32-bit multipliers.
        let double_round = match ints(&o[1]).and_then(|v| v.first().copied()) {
            Some(1 | 2) => false,
            Some(3) if flag(0) == Some(true) => true,
            _ => {
                return Err(bad(
                    "a rounding mode other than single, inexact or double (with 32-bit multipliers)",
                ));
            }
        };
        if flag(0).is_none() {
            return Err(bad("a scale32 flag that is not constant"));
        }
        if flag(3) != Some(false) || flag(4) != Some(false) {
            return Err(bad("an unsigned input or output"));
        }
        let (Some(m), Some(sh)) = (self.ints_of(&o[6])?, self.ints_of(&o[7])?) else {
            return Err(bad("multipliers or shifts that are not constants"));
        };
        let per_channel = flag(2).ok_or_else(|| bad("a per-channel flag that is not constant"))?;
        if m.len() != sh.len() || m.is_empty() || (!per_channel && m.len() != 1) {
            return Err(bad(&format!(
                "{} multipliers and {} shifts (per channel: {per_channel})",
                m.len(),
                sh.len()
            )));
        }
        let scales = m
            .iter()
            .zip(&sh)
            .map(|(&m, &s)| match (i32::try_from(m), u32::try_from(s)) {
                (Ok(multiplier), Ok(shift)) if (1..=62).contains(&shift) && multiplier >= 0 => {
                    Ok(compute_delegate::Rescale { multiplier, shift })
                }
                _ => Err(bad(&format!("multiplier {m} with shift {s}"))),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Requantize {
            scales,
            scale32: flag(0) == Some(true),
            double_round,
            in_zp: self.zero_point(n, 8)?.into(),
            out_zp: self.zero_point(n, 9)?.into(),
        })
    }

    /// Operand `i` of `n` as a zero point: the first value of an integer constant (a tensor or
    /// graph constant), 0 where it holds none, an error where it is not an integer constant
    /// or outside 32 bits.
    fn zero_point(&self, n: &Node, i: usize) -> Result<i32> {
        let bad = || unsupported(format!("{} at word {}: zero point {i}", n.op.name(), n.at));
        let v = self.ints_of(&n.operands[i])?.ok_or_else(bad)?;
        i32::try_from(v.first().copied().unwrap_or(0)).map_err(|_| bad())
    }

    /// An integer constant operand's values: a tensor constant, or a graph constant read from
    /// the file (`None` for other operands).
    fn ints_of(&self, o: &Operand) -> Result<Option<Vec<i64>>> {
        let Operand::GraphConstant { id, ty } = o else {
            return Ok(ints(o));
        };
        let data = self.constant_data(*id)?;
        let v = match ty.element {
            Element::Int(8) => data.iter().map(|&b| i64::from(b as i8)).collect(),
            Element::Int(16) => data
                .chunks_exact(2)
                .map(|b| i64::from(i16::from_le_bytes([b[0], b[1]])))
                .collect(),
            Element::Int(32) => data
                .chunks_exact(4)
                .map(|b| i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])))
                .collect(),
            Element::Int(64) => data
                .chunks_exact(8)
                .map(|b| i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
                .collect(),
            _ => return Ok(None),
        };
        Ok(Some(v))
    }

    /// An int8 CONV2D or DEPTHWISE_CONV2D with int32 accumulators, requantized by `out`, in
    /// NCHW.
    fn conv_q8(&mut self, n: &Node, out: &Requantize) -> Result<TensorId> {
        let o = &n.operands;
        let bad = |why: &str| unsupported(format!("{} at word {}: {why}", n.op.name(), n.at));
        let attr = |i: usize| ints(&o[i]).ok_or_else(|| bad("attributes that are not constants"));
        let (pad, stride, dilation) = (attr(0)?, attr(1)?, attr(2)?);
        // Padding adds no terms: the bottom and right's only set the output's size.
        let &[t, b, l, r] = &pad[..] else {
            return Err(bad(&format!("padding {pad:?}")));
        };
        let (padding, stride, dilation) = conv_geometry(&[t, t, l, l], &stride, &dilation)
            .ok_or_else(|| bad("negative padding, strides or dilations"))?;
        let end = [b, r]
            .map(|p| usize::try_from(p).map_err(|_| bad(&format!("padding {pad:?}"))))
            .into_iter()
            .collect::<Result<Vec<_>>>()?;
        let (x_zp, w_zp) = (self.zero_point(n, 8)?, self.zero_point(n, 9)?);
        let x = self.nchw(&o[5])?;
        let (w, groups) = self.weights_q8(n, &bad)?;
        let bias = match &o[7] {
            Operand::Constant(c) if c.element == Element::Int(32) => {
                let v = c.ints().unwrap_or_default();
                let bytes = v.iter().flat_map(|&b| (b as i32).to_le_bytes()).collect();
                let t = HostTensor::new(DType::I32, vec![v.len()], bytes)
                    .map_err(|e| bad(&e.to_string()))?;
                let name = format!("bias_{}", self.nodes.len());
                Some(self.g.constant(&name, t)?)
            }
            Operand::GraphConstant { id, ty } if ty.element == Element::Int(32) => {
                Some(self.graph_constant(*id, ty.element, ty.shape.as_deref())?)
            }
            _ => return Err(bad("a bias that is not an int32 constant")),
        };
        let q = compute_delegate::QConv {
            conv: Conv2d {
                stride,
                padding,
                dilation,
                groups,
            },
            x_zp,
            w_zp,
            out_zp: out.out_zp as i32,
            pad_end: (end[..] != padding[..]).then_some([end[0], end[1]]),
        };
        Ok(self.g.conv2d_q8(x, w, bias, &out.scales, &q)?)
    }

    /// An int8 convolution's constant weights in the compute delegate's layout, and its
    /// groups: CONV2D's `[OC, KH, KW, IC]` as `[OC, IC, KH, KW]`; DEPTHWISE_CONV2D's
    /// `[KH, KW, C, M]` as `[C * M, 1, KH, KW]` in C groups.
    fn weights_q8(
        &mut self,
        n: &Node,
        bad: &dyn Fn(&str) -> NativeError,
    ) -> Result<(TensorId, usize)> {
        let Operand::GraphConstant { id, ty } = &n.operands[6] else {
            return Err(bad("weights that are not an int8 graph constant"));
        };
        if ty.element != Element::Int(8) {
            return Err(bad("weights that are not an int8 graph constant"));
        }
        let data = self.constant_data(*id)?;
        let shape = dims(ty.shape.as_deref(), "the weights")?;
        let Ok(shape4) = <[usize; 4]>::try_from(shape.as_slice()) else {
            return Err(bad("weights that are not 4-D"));
        };
        if shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)) != Some(data.len()) {
            return Err(bad(&format!("weights {shape:?} of {} bytes", data.len())));
        }
        let values: Vec<f32> = data.iter().map(|&b| f32::from(b as i8)).collect();
        let (values, shape, groups) = match n.op {
            Operator::DepthwiseConv2d => {
                let (v, s) = permute4(&values, shape4, [2, 3, 0, 1]);
                (v, vec![s[0] * s[1], 1, s[2], s[3]], shape4[2])
            }
            _ => {
                let (v, s) = permute4(&values, shape4, [0, 3, 1, 2]);
                (v, s, 1)
            }
        };
        let bytes = values.iter().map(|&v| v as i8 as u8).collect();
        let t = HostTensor::new(DType::I8, shape, bytes).map_err(|e| bad(&e.to_string()))?;
        let name = format!("weights_{}", self.nodes.len());
        Ok((self.g.constant(&name, t)?, groups))
    }

    /// An elementwise op of one operand, in the operand's layout.
    fn unary(&mut self, op: UnaryOp, x: &Operand) -> Result<Value> {
        self.each(x, |g, t| g.unary(op, t))
    }

    /// `f` of one operand, element by element, in the operand's layout.
    fn each(
        &mut self,
        x: &Operand,
        f: impl FnOnce(&mut GraphBuilder, TensorId) -> compute_delegate::Result<TensorId>,
    ) -> Result<Value> {
        if let Some(t) = self.held_nchw(x) {
            return Ok(Value::Nchw(f(&mut self.g, t)?));
        }
        let x = self.tensor(x)?;
        Ok(Value::Tosa(f(&mut self.g, x)?))
    }

    /// SELECT: `a` where `cond` holds, else `b`; in NCHW where all three are held so with one
    /// shape.
    fn select(&mut self, cond: &Operand, a: &Operand, b: &Operand) -> Result<Value> {
        let held = [cond, a, b].map(|o| self.held_nchw(o));
        if let [Some(c), Some(x), Some(y)] = held
            && self.shape(c) == self.shape(x)
            && self.shape(x) == self.shape(y)
        {
            return Ok(Value::Nchw(self.g.where_(c, x, y)?));
        }
        let (c, x, y) = (self.tensor(cond)?, self.tensor(a)?, self.tensor(b)?);
        // A mask of another float type than the values.
        let c = match (self.g.dtype(c), self.g.dtype(x)) {
            (Some(m), Some(v)) if m != v => self.g.cast(c, v)?,
            _ => c,
        };
        Ok(Value::Tosa(self.g.where_(c, x, y)?))
    }

    /// An op of the compute delegate's registry, by name, and its one result.
    fn registry(&mut self, name: &str, args: Vec<Arg>) -> Result<TensorId> {
        let def = compute_delegate::ops::find(name)
            .ok_or_else(|| unsupported(format!("the registry has no {name}")))?;
        Ok(def.call(&mut self.g, args)?[0])
    }

    /// PAD with a constant: TOSA's `[before, after]` per dim, in TOSA's layout.
    fn pad(&mut self, n: &Node, bad: &dyn Fn(&str) -> NativeError) -> Result<TensorId> {
        let o = &n.operands;
        let pads = ints(&o[1]).ok_or_else(|| bad("padding that is not constant"))?;
        let value = scalar_f32(&o[2]).ok_or_else(|| bad("a pad value that is not a constant"))?;
        let x = self.tensor(&o[0])?;
        // The registry's pad lists the last dim first.
        let pad: Vec<i64> = pads.chunks(2).rev().flatten().copied().collect();
        self.registry(
            "aten.constant_pad_nd.default",
            vec![Arg::Tensor(x), Arg::Ints(pad), Arg::Float(f64::from(value))],
        )
    }

    /// TRANSPOSE_CONV2D (weights `[OC, KH, KW, IC]`, `out_pad` `[top, bottom, left, right]`),
    /// its result in NCHW: PyTorch's transposed convolution with padding `-top` and
    /// `-left`, the rest output padding.
    fn conv_transpose(&mut self, n: &Node, bad: &dyn Fn(&str) -> NativeError) -> Result<TensorId> {
        let o = &n.operands;
        let (padding, extra, stride) = transpose_geometry(n, bad)?;
        let x = self.nchw(&o[4])?;
        let w = self.weights(&o[5], [3, 0, 1, 2])?;
        let bias = self.tensor(&o[6])?;
        let oc = self.shape(w).get(1).copied().unwrap_or(0);
        let per_channel = self
            .shape(bias)
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            == Some(oc);
        let p = Conv2d {
            stride,
            padding,
            dilation: [1, 1],
            groups: 1,
        };
        let y = self
            .g
            .conv_transpose2d(x, w, per_channel.then_some(bias), p, extra)?;
        Ok(match per_channel {
            true => y,
            false => self.g.add(y, bias)?,
        })
    }

    /// An elementwise op of two operands: in NCHW where both are held so with one shape.
    fn binary(&mut self, op: BinaryOp, a: &Operand, b: &Operand) -> Result<Value> {
        if let (Some(x), Some(y)) = (self.held_nchw(a), self.held_nchw(b))
            && self.shape(x) == self.shape(y)
        {
            return Ok(Value::Nchw(self.g.binary(op, x, y)?));
        }
        let (x, y) = (self.tensor(a)?, self.tensor(b)?);
        Ok(Value::Tosa(self.g.binary(op, x, y)?))
    }

    /// CONV2D and DEPTHWISE_CONV2D (weights `[OC, KH, KW, IC]` and `[KH, KW, C, M]`), its
    /// result in NCHW.
    fn conv(&mut self, n: &Node, bad: &dyn Fn(&str) -> NativeError) -> Result<TensorId> {
        let o = &n.operands;
        let attr = |i: usize| ints(&o[i]).ok_or_else(|| bad("attributes that are not constants"));
        let (pad, stride, dilation) = (attr(0)?, attr(1)?, attr(2)?);
        let mut x = self.nchw(&o[5])?;
        let (w, groups) = match n.op {
            Operator::DepthwiseConv2d => {
                // [KH, KW, C, M] to [C, M, KH, KW], read as [C * M, 1, KH, KW].
                let w = self.weights(&o[6], [2, 3, 0, 1])?;
                let ws = self.shape(w);
                let &[c, m, kh, kw] = &ws[..] else {
                    return Err(bad("weights that are not [KH, KW, C, M]"));
                };
                let w = self
                    .g
                    .reshape(w, &[(c * m) as isize, 1, kh as isize, kw as isize])?;
                (w, c)
            }
            _ => (self.weights(&o[6], [0, 3, 1, 2])?, 1),
        };
        let (padding, stride, dilation, extra) =
            self.conv_padding(n, x, w, &pad, &stride, &dilation)?;
        if extra.iter().any(|&p| p != 0) {
            // The uneven part first, as zeros: (left, right) of W, then (top, bottom) of H.
            let pad = vec![extra[2], extra[3], extra[0], extra[1]];
            x = self.registry(
                "aten.constant_pad_nd.default",
                vec![Arg::Tensor(x), Arg::Ints(pad), Arg::Float(0.0)],
            )?;
        }
        let oc = self.shape(w).first().copied().unwrap_or(0);
        let bias = self.tensor(&o[7])?;
        let per_channel = self
            .shape(bias)
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            == Some(oc);
        let p = Conv2d {
            stride,
            padding,
            dilation,
            groups,
        };
        let y = self.g.conv2d(x, w, per_channel.then_some(bias), p)?;
        Ok(match per_channel {
            true => y,
            false => self.g.add(y, bias)?,
        })
    }

    /// A float convolution's padding as the compute delegate's symmetric padding (with its
    /// strides and dilations), and what is left to pad first. TOSA pads stride-2 layers
    /// unevenly; where the top and left pad more, padding all sides as much gives TOSA's
    /// output (the extra bottom and right rows fall past the last window), and nothing is
    /// left; otherwise the sides' common part is the convolution's and the rest a pad.
    #[allow(clippy::type_complexity)]
    fn conv_padding(
        &self,
        n: &Node,
        x: TensorId,
        w: TensorId,
        pad: &[i64],
        stride: &[i64],
        dilation: &[i64],
    ) -> Result<([usize; 2], [usize; 2], [usize; 2], [i64; 4])> {
        let bad = |why: &str| unsupported(format!("{} at word {}: {why}", n.op.name(), n.at));
        let (xs, ws) = (self.shape(x), self.shape(w));
        let want = n.result.shape.as_deref().unwrap_or(&[]);
        if let ([t, b, l, r], [_, _, h, wd], [_, _, kh, kw], [_, oh, ow, _]) =
            (pad, &xs[..], &ws[..], want)
            && t >= b
            && l >= r
            && let Some(geometry @ ([pt, pl], [sy, sx], [dy, dx])) =
                conv_geometry(&[*t, *t, *l, *l], stride, dilation)
        {
            let out = |size: usize, p: usize, k: usize, s: usize, d: usize| {
                let span = d.saturating_mul(k.saturating_sub(1)).saturating_add(1);
                let padded = size.saturating_add(p.saturating_mul(2));
                padded.checked_sub(span).map(|v| v / s.max(1) + 1)
            };
            if out(*h, pt, *kh, sy, dy) == Some(*oh as usize)
                && out(*wd, pl, *kw, sx, dx) == Some(*ow as usize)
            {
                return Ok((geometry.0, geometry.1, geometry.2, [0; 4]));
            }
        }
        let (even, extra) =
            split_padding(pad).ok_or_else(|| bad("a padding of other than 4 values"))?;
        let (padding, stride, dilation) = conv_geometry(&even, stride, dilation)
            .ok_or_else(|| bad("negative padding, strides or dilations"))?;
        Ok((padding, stride, dilation, extra))
    }

    /// AVG_POOL2D (float, int8 on `avg_pool2d_q8`, int16 on `avg_pool2d_int`) and MAX_POOL2D
    /// (integers on exact f32 copies), the result in NCHW.
    fn pool(&mut self, n: &Node, bad: &dyn Fn(&str) -> NativeError) -> Result<TensorId> {
        let o = &n.operands;
        let attr = |i: usize| ints(&o[i]).ok_or_else(|| bad("attributes that are not constants"));
        let (kernel, stride, pad) = (attr(0)?, attr(1)?, attr(2)?);
        let (padding, stride, kernel) = conv_geometry(&pad, &stride, &kernel)
            .ok_or_else(|| bad("uneven padding (top != bottom or left != right)"))?;
        // The input follows acc_type (AVG_POOL2D) or nan_mode (MAX_POOL2D).
        let int_max = n.op == Operator::MaxPool2d && matches!(n.result.element, Element::Int(_));
        let x = match int_max {
            true => self.float_nchw(&o[4])?,
            false => self.nchw(&o[4])?,
        };
        let p = Pool2d {
            kernel,
            stride,
            padding,
            ceil_mode: false,
            count_include_pad: false,
        };
        Ok(match (n.op, n.result.element) {
            (Operator::AvgPool2d, Element::Int(8)) => {
                let (in_zp, out_zp) = (self.zero_point(n, 5)?, self.zero_point(n, 6)?);
                self.g.avg_pool2d_q8(x, p, in_zp, out_zp)?
            }
            (Operator::AvgPool2d, Element::Int(16)) => {
                let zps = (self.zero_point(n, 5)?, self.zero_point(n, 6)?);
                // int16 values are held widened.
                let x = match self.g.dtype(x) {
                    Some(DType::I32) => x,
                    _ => self.g.cast(x, DType::I32)?,
                };
                let range = range_of(Element::Int(16));
                self.g.avg_pool2d_int(x, p, zps, range)?
            }
            (Operator::AvgPool2d, _) => self.g.avg_pool2d(x, p)?,
            (_, Element::Int(_)) => {
                let y = self.g.max_pool2d(x, p)?;
                self.narrowed(y, n.result.element)?
            }
            _ => self.g.max_pool2d(x, p)?,
        })
    }
}

/// The elements of `shape`, `None` past `usize`.
fn checked_numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

/// The range of an integer element type held in int32 words.
fn range_of(e: Element) -> (i32, i32) {
    match e {
        Element::Int(8) => (-128, 127),
        Element::Int(16) => (-32768, 32767),
        _ => (i32::MIN, i32::MAX),
    }
}

/// TRANSPOSE_CONV2D's `out_pad` `[top, bottom, left, right]` and stride as PyTorch's
/// transposed convolution: padding `-top` and `-left`, the rest output padding.
fn transpose_geometry(
    n: &Node,
    bad: &dyn Fn(&str) -> NativeError,
) -> Result<([usize; 2], [usize; 2], [usize; 2])> {
    let o = &n.operands;
    let attr = |i: usize| ints(&o[i]).ok_or_else(|| bad("attributes that are not constants"));
    let (out_pad, stride) = (attr(0)?, attr(1)?);
    let (&[t, b, l, r], &[sy, sx]) = (&out_pad[..], &stride[..]) else {
        return Err(bad(
            "out_pad of other than 4 values or stride of other than 2",
        ));
    };
    let geometry = (|| {
        let pad = [
            usize::try_from(t.checked_neg()?).ok()?,
            usize::try_from(l.checked_neg()?).ok()?,
        ];
        let extra = [
            usize::try_from(b.checked_sub(t)?).ok()?,
            usize::try_from(r.checked_sub(l)?).ok()?,
        ];
        let stride = [usize::try_from(sy).ok()?, usize::try_from(sx).ok()?];
        (stride.iter().all(|&s| (1..=1 << 16).contains(&s))).then_some((pad, extra, stride))
    })();
    geometry.ok_or_else(|| bad(&format!("out_pad {out_pad:?} with stride {stride:?}")))
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

/// A 4-D row-major tensor's values permuted: output dim `i` is input dim `perm[i]`.
fn permute4(values: &[f32], shape: [usize; 4], perm: [usize; 4]) -> (Vec<f32>, Vec<usize>) {
    let out: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let mut stride = [0usize; 4];
    let mut s = 1;
    for d in (0..4).rev() {
        stride[d] = s;
        s *= shape[d];
    }
    let mut v = Vec::with_capacity(values.len());
    for a in 0..out[0] {
        for b in 0..out[1] {
            for c in 0..out[2] {
                for d in 0..out[3] {
                    let at = [a, b, c, d]
                        .iter()
                        .zip(perm)
                        .map(|(&i, p)| i * stride[p])
                        .sum::<usize>();
                    v.push(values.get(at).copied().unwrap_or(0.0));
                }
            }
        }
    }
    (v, out)
}

/// A RESCALE's parameters: its scales (one, or one per channel), whether their multipliers
/// are 32-bit, zero points.
#[derive(Debug, Clone)]
struct Requantize {
    scales: Vec<compute_delegate::Rescale>,
    scale32: bool,
    /// TOSA's DOUBLE_ROUND (standalone RESCALEs only).
    double_round: bool,
    in_zp: i64,
    out_zp: i64,
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
        Element::Int(8) => Ok(DType::I8),
        Element::Int(16) => Ok(DType::I16),
        Element::Int(32) => Ok(DType::I32),
        other => Err(unsupported(format!("{what}: {other:?} elements"))),
    }
}
