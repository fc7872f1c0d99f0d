//! The data graph of a GRAPH module, decoded: its SPIR-V (`SPV_ARM_graph`, `SPV_ARM_tensors`)
//! and the TOSA.001000.1 extended instructions in it, as a list of TOSA operators over typed
//! tensors, with their attributes and constants resolved.
//!
//! [`TosaGraph::decode`] reads the module's words once, front to back. Types, constants,
//! interface variables and their decorations come from the module's preamble; the graph's
//! body holds only `OpGraphInputARM`, `OpExtInst` of the TOSA set and `OpGraphSetOutputARM`.
//! Every id, count and index is checked: a malformed module is a [`TosaError`] that names the
//! word where the problem is, never a panic. Nothing here touches Vulkan.

use std::collections::HashMap;

/// The name of the extended instruction set of TOSA 1.0 in SPIR-V.
pub const TOSA_SET: &str = "TOSA.001000.1";

/// Why a GRAPH module could not be decoded. `at` is the word offset of the instruction.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TosaError {
    /// Not a SPIR-V module.
    #[error("not SPIR-V: {words} words, first word {first:#x} (expected the magic 0x07230203)")]
    NotSpirv {
        /// Words present.
        words: usize,
        /// The first word.
        first: u32,
    },
    /// An instruction's word count is zero or runs past the end.
    #[error("the instruction at word {at} has word count {count}, but {remain} words remain")]
    Truncated {
        /// Where it starts.
        at: usize,
        /// Its word count.
        count: usize,
        /// Words left in the module.
        remain: usize,
    },
    /// An instruction has fewer operands than its kind needs.
    #[error("the {what} at word {at} has {found} operand words, fewer than the {need} it needs")]
    ShortInstruction {
        /// The instruction.
        what: &'static str,
        /// Where it starts.
        at: usize,
        /// Operand words present.
        found: usize,
        /// Operand words needed.
        need: usize,
    },
    /// An id is used before anything defines it, or is defined twice.
    #[error("the instruction at word {at} uses id {id}, which {why}")]
    BadId {
        /// Where it is used.
        at: usize,
        /// The id.
        id: u32,
        /// "nothing defines before it", "is already defined", ...
        why: &'static str,
    },
    /// An id names the wrong kind of thing.
    #[error("the instruction at word {at} needs {expected} for id {id}")]
    WrongKind {
        /// Where it is used.
        at: usize,
        /// The id.
        id: u32,
        /// What it must be.
        expected: &'static str,
    },
    /// An extended instruction of a set other than TOSA.001000.1.
    #[error("the extended instruction at word {at} belongs to '{set}', not to {TOSA_SET}")]
    NotTosa {
        /// Where it is.
        at: usize,
        /// The set's name.
        set: String,
    },
    /// A TOSA instruction number outside TOSA 1.0.
    #[error(
        "the extended instruction at word {at} is TOSA instruction {number}, which TOSA 1.0 does not define"
    )]
    UnknownOperator {
        /// Where it is.
        at: usize,
        /// The number.
        number: u32,
    },
    /// A TOSA operator with the wrong number of operands.
    #[error("{op} at word {at} has {found} operands; it takes {expected}")]
    OperandCount {
        /// The operator.
        op: &'static str,
        /// Where it is.
        at: usize,
        /// Operands present.
        found: usize,
        /// What it takes ("10", "2 or more").
        expected: String,
    },
    /// A SPIR-V instruction the graph's body may not hold.
    #[error(
        "the graph's body holds opcode {opcode} at word {at}; only OpGraphInputARM, OpExtInst and OpGraphSetOutputARM may appear there"
    )]
    UnexpectedInBody {
        /// Where it is.
        at: usize,
        /// Its opcode.
        opcode: u32,
    },
    /// Something this decoder does not take (a tensor array, a 64-bit literal, ...).
    #[error("word {at}: {what} is not supported")]
    Unsupported {
        /// Where it is.
        at: usize,
        /// What.
        what: String,
    },
    /// The module's graph is missing, or its interface does not add up.
    #[error("{0}")]
    Graph(String),
}

/// The element type of a tensor or a scalar. SPIR-V integers carry no sign here (TOSA's
/// operators say how to read them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Element {
    /// `OpTypeBool`.
    Bool,
    /// `OpTypeInt` of this many bits.
    Int(u32),
    /// `OpTypeFloat` of this many bits.
    Float(u32),
}

/// A tensor's element type and shape (`None`: unranked).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TensorType {
    /// Its elements.
    pub element: Element,
    /// Its dimensions.
    pub shape: Option<Vec<u64>>,
}

impl TensorType {
    /// Elements in it (1 for rank 0; `None` when unranked or beyond u64).
    pub fn numel(&self) -> Option<u64> {
        self.shape
            .as_ref()?
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d))
    }
}

/// A constant written in the module: a scalar or a whole tensor, each element as its bits
/// (an f32's bits, an f16's in the low half, an integer zero-extended, a bool as 0 or 1).
#[derive(Debug, Clone, PartialEq)]
pub struct Constant {
    /// Its element type.
    pub element: Element,
    /// The tensor's shape; `None` for a scalar.
    pub shape: Option<Vec<u64>>,
    /// The elements, row-major.
    pub values: Vec<u64>,
}

impl Constant {
    /// The elements as signed integers of the element's width (`None` unless integers).
    pub fn ints(&self) -> Option<Vec<i64>> {
        let Element::Int(bits) = self.element else {
            return None;
        };
        let shift = 64 - bits.clamp(1, 64);
        Some(
            self.values
                .iter()
                .map(|&v| ((v << shift) as i64) >> shift)
                .collect(),
        )
    }

    /// The elements as f32 (`None` unless 16- or 32-bit floats).
    pub fn floats(&self) -> Option<Vec<f32>> {
        match self.element {
            Element::Float(32) => Some(
                self.values
                    .iter()
                    .map(|&v| f32::from_bits(v as u32))
                    .collect(),
            ),
            Element::Float(16) => Some(
                self.values
                    .iter()
                    .map(|&v| half::f16::from_bits(v as u16).to_f32())
                    .collect(),
            ),
            _ => None,
        }
    }
}

/// An operator's operand.
#[derive(Debug, Clone, PartialEq)]
pub enum Operand {
    /// The graph's input of this index.
    Input(usize),
    /// The result of the operator of this index in [`TosaGraph::nodes`].
    Node(usize),
    /// A graph constant (`OpGraphConstantARM`): its id, whose data the segment binds.
    GraphConstant {
        /// The `GraphConstantID`.
        id: u32,
        /// Its type.
        ty: TensorType,
    },
    /// A constant in the module.
    Constant(Constant),
}

/// One TOSA operator of the graph.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// The operator.
    pub op: Operator,
    /// Its operands in SPIR-V order (attributes first, then inputs, as the TOSA.001000.1
    /// grammar lists them).
    pub operands: Vec<Operand>,
    /// Its result's type.
    pub result: TensorType,
    /// The word offset of its `OpExtInst`.
    pub at: usize,
}

/// A graph input or output: its tensor type and the descriptor set and binding of its
/// interface variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    /// Its type.
    pub ty: TensorType,
    /// `DescriptorSet`, where decorated.
    pub set: Option<u32>,
    /// `Binding`, where decorated.
    pub binding: Option<u32>,
}

/// A decoded data graph.
#[derive(Debug, Clone, PartialEq)]
pub struct TosaGraph {
    /// The entry point's name.
    pub name: String,
    /// The graph's inputs, in index order.
    pub inputs: Vec<Port>,
    /// The graph's outputs, in index order.
    pub outputs: Vec<Port>,
    /// The operators, in the module's order (each after its operands).
    pub nodes: Vec<Node>,
    /// What each output is set to.
    pub results: Vec<Operand>,
}

macro_rules! operators {
    ($($number:literal $variant:ident $name:literal $min:literal $($more:ident)?;)*) => {
        /// The operators of TOSA 1.0, numbered as the TOSA.001000.1 instruction set numbers
        /// them.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[allow(missing_docs)]
        pub enum Operator {
            $($variant,)*
        }

        impl Operator {
            /// The operator of an instruction number.
            pub fn from_number(n: u32) -> Option<Self> {
                match n {
                    $($number => Some(Self::$variant),)*
                    _ => None,
                }
            }

            /// Its name in the TOSA specification.
            pub fn name(self) -> &'static str {
                match self {
                    $(Self::$variant => $name,)*
                }
            }

            /// Operands it takes, and whether it takes more (a variadic list).
            fn arity(self) -> (usize, bool) {
                match self {
                    $(Self::$variant => ($min, operators!(@more $($more)?)),)*
                }
            }
        }
    };
    (@more) => { false };
    (@more more) => { true };
}

operators! {
    0 Argmax "ARGMAX" 3;
    1 AvgPool2d "AVG_POOL2D" 7;
    2 Conv2d "CONV2D" 10;
    3 Conv3d "CONV3D" 10;
    4 DepthwiseConv2d "DEPTHWISE_CONV2D" 10;
    5 Fft2d "FFT2D" 4;
    6 Matmul "MATMUL" 4;
    7 MaxPool2d "MAX_POOL2D" 5;
    8 Rfft2d "RFFT2D" 2;
    9 TransposeConv2d "TRANSPOSE_CONV2D" 9;
    10 Clamp "CLAMP" 4;
    11 Erf "ERF" 1;
    12 Sigmoid "SIGMOID" 1;
    13 Tanh "TANH" 1;
    14 Add "ADD" 2;
    15 ArithmeticRightShift "ARITHMETIC_RIGHT_SHIFT" 3;
    16 BitwiseAnd "BITWISE_AND" 2;
    17 BitwiseOr "BITWISE_OR" 2;
    18 BitwiseXor "BITWISE_XOR" 2;
    19 Intdiv "INTDIV" 2;
    20 LogicalAnd "LOGICAL_AND" 2;
    21 LogicalLeftShift "LOGICAL_LEFT_SHIFT" 2;
    22 LogicalRightShift "LOGICAL_RIGHT_SHIFT" 2;
    23 LogicalOr "LOGICAL_OR" 2;
    24 LogicalXor "LOGICAL_XOR" 2;
    25 Maximum "MAXIMUM" 3;
    26 Minimum "MINIMUM" 3;
    27 Mul "MUL" 3;
    28 Pow "POW" 2;
    29 Sub "SUB" 2;
    30 Table "TABLE" 2;
    31 Abs "ABS" 1;
    32 BitwiseNot "BITWISE_NOT" 1;
    33 Ceil "CEIL" 1;
    34 Clz "CLZ" 1;
    35 Cos "COS" 1;
    36 Exp "EXP" 1;
    37 Floor "FLOOR" 1;
    38 Log "LOG" 1;
    39 LogicalNot "LOGICAL_NOT" 1;
    40 Negate "NEGATE" 3;
    41 Reciprocal "RECIPROCAL" 1;
    42 Rsqrt "RSQRT" 1;
    43 Sin "SIN" 1;
    44 Select "SELECT" 3;
    45 Equal "EQUAL" 2;
    46 Greater "GREATER" 2;
    47 GreaterEqual "GREATER_EQUAL" 2;
    48 ReduceAll "REDUCE_ALL" 2;
    49 ReduceAny "REDUCE_ANY" 2;
    50 ReduceMax "REDUCE_MAX" 3;
    51 ReduceMin "REDUCE_MIN" 3;
    52 ReduceProduct "REDUCE_PRODUCT" 2;
    53 ReduceSum "REDUCE_SUM" 2;
    54 Concat "CONCAT" 2 more;
    55 Pad "PAD" 3;
    56 Reshape "RESHAPE" 2;
    57 Reverse "REVERSE" 2;
    58 Slice "SLICE" 3;
    59 Tile "TILE" 2;
    60 Transpose "TRANSPOSE" 2;
    61 Gather "GATHER" 2;
    62 Scatter "SCATTER" 3;
    63 Resize "RESIZE" 5;
    64 Cast "CAST" 1;
    65 Rescale "RESCALE" 10;
}

/// What an id stands for, as the decoder meets it.
#[derive(Debug, Clone)]
enum Def {
    Scalar(Element),
    Array { element: u32, length: u64 },
    Tensor(TensorType),
    Pointer(u32),
    Graph { inputs: usize, types: Vec<u32> },
    Constant(Constant),
    Variable(u32),
    Import(String),
    Value(Operand),
    GraphId,
}

const MAGIC: u32 = 0x0723_0203;

mod op {
    pub const NAME: u32 = 5;
    pub const EXT_INST_IMPORT: u32 = 11;
    pub const EXT_INST: u32 = 12;
    pub const TYPE_BOOL: u32 = 20;
    pub const TYPE_INT: u32 = 21;
    pub const TYPE_FLOAT: u32 = 22;
    pub const TYPE_ARRAY: u32 = 28;
    pub const TYPE_POINTER: u32 = 32;
    pub const CONSTANT_TRUE: u32 = 41;
    pub const CONSTANT_FALSE: u32 = 42;
    pub const CONSTANT: u32 = 43;
    pub const CONSTANT_COMPOSITE: u32 = 44;
    pub const CONSTANT_NULL: u32 = 46;
    pub const VARIABLE: u32 = 59;
    pub const DECORATE: u32 = 71;
    pub const TYPE_TENSOR: u32 = 4163;
    pub const GRAPH_CONSTANT: u32 = 4181;
    pub const GRAPH_ENTRY_POINT: u32 = 4182;
    pub const GRAPH: u32 = 4183;
    pub const GRAPH_INPUT: u32 = 4184;
    pub const GRAPH_SET_OUTPUT: u32 = 4185;
    pub const GRAPH_END: u32 = 4186;
    pub const TYPE_GRAPH: u32 = 4190;
    pub const CONSTANT_COMPOSITE_REPLICATE: u32 = 4461;
}

const DECORATION_BINDING: u32 = 33;
const DECORATION_DESCRIPTOR_SET: u32 = 34;

/// Elements a constant may hold: a guard against a shape that claims more than memory.
const MAX_CONSTANT_ELEMENTS: u64 = 1 << 24;

/// The decoder's state over one module.
#[derive(Default)]
struct Decoder {
    defs: HashMap<u32, Def>,
    sets: HashMap<u32, u32>,
    bindings: HashMap<u32, u32>,
    entry: Option<(u32, String, Vec<u32>, usize)>,
    graph: Option<(u32, u32)>,
    in_body: bool,
    ended: bool,
    nodes: Vec<Node>,
    results: HashMap<usize, Operand>,
}

impl TosaGraph {
    /// Decodes the one data graph of a GRAPH module's SPIR-V words.
    pub fn decode(words: &[u32]) -> Result<Self, TosaError> {
        if words.len() < 5 || words[0] != MAGIC {
            return Err(TosaError::NotSpirv {
                words: words.len(),
                first: words.first().copied().unwrap_or(0),
            });
        }
        let mut d = Decoder::default();
        let mut at = 5;
        while at < words.len() {
            let count = (words[at] >> 16) as usize;
            let opcode = words[at] & 0xffff;
            if count == 0 || at + count > words.len() {
                return Err(TosaError::Truncated {
                    at,
                    count,
                    remain: words.len() - at,
                });
            }
            d.instruction(opcode, &words[at + 1..at + count], at)?;
            at += count;
        }
        d.finish()
    }
}

/// An instruction's operand words, read with bounds checks.
struct Words<'a> {
    w: &'a [u32],
    at: usize,
    what: &'static str,
}

impl Words<'_> {
    fn get(&self, i: usize) -> Result<u32, TosaError> {
        self.w.get(i).copied().ok_or(TosaError::ShortInstruction {
            what: self.what,
            at: self.at,
            found: self.w.len(),
            need: i + 1,
        })
    }

    /// The literal string from word `i` on.
    fn string(&self, i: usize) -> Result<(String, usize), TosaError> {
        let rest = self.w.get(i..).unwrap_or(&[]);
        let mut bytes = Vec::new();
        for (n, word) in rest.iter().enumerate() {
            for b in word.to_le_bytes() {
                if b == 0 {
                    return Ok((String::from_utf8_lossy(&bytes).into_owned(), i + n + 1));
                }
                bytes.push(b);
            }
        }
        Err(TosaError::ShortInstruction {
            what: self.what,
            at: self.at,
            found: self.w.len(),
            need: self.w.len() + 1,
        })
    }
}

impl Decoder {
    fn instruction(&mut self, opcode: u32, w: &[u32], at: usize) -> Result<(), TosaError> {
        let what = name_of(opcode);
        let w = Words { w, at, what };
        if self.ended {
            return Ok(());
        }
        if self.in_body {
            return self.body(opcode, &w);
        }
        match opcode {
            op::EXT_INST_IMPORT => {
                let (name, _) = w.string(1)?;
                self.define(w.get(0)?, Def::Import(name), at)
            }
            op::TYPE_BOOL => self.define(w.get(0)?, Def::Scalar(Element::Bool), at),
            op::TYPE_INT => self.define(w.get(0)?, Def::Scalar(Element::Int(w.get(1)?)), at),
            op::TYPE_FLOAT => self.define(w.get(0)?, Def::Scalar(Element::Float(w.get(1)?)), at),
            op::TYPE_ARRAY => {
                let length = self.scalar_int(w.get(2)?, at)?;
                let element = w.get(1)?;
                self.define(w.get(0)?, Def::Array { element, length }, at)
            }
            op::TYPE_POINTER => self.define(w.get(0)?, Def::Pointer(w.get(2)?), at),
            op::TYPE_TENSOR => self.tensor_type(&w),
            op::TYPE_GRAPH => {
                let inputs = w.get(1)? as usize;
                let types = w.w.get(2..).unwrap_or(&[]).to_vec();
                if inputs > types.len() {
                    return Err(TosaError::Graph(format!(
                        "the graph type at word {at} has {inputs} inputs but {} types",
                        types.len()
                    )));
                }
                self.define(w.get(0)?, Def::Graph { inputs, types }, at)
            }
            op::CONSTANT_TRUE | op::CONSTANT_FALSE => {
                let c = Constant {
                    element: Element::Bool,
                    shape: None,
                    values: vec![u64::from(opcode == op::CONSTANT_TRUE)],
                };
                self.define(w.get(1)?, Def::Constant(c), at)
            }
            op::CONSTANT => self.constant(&w),
            op::CONSTANT_COMPOSITE => self.composite(&w),
            op::CONSTANT_NULL | op::CONSTANT_COMPOSITE_REPLICATE => self.filled(opcode, &w),
            op::VARIABLE => self.define(w.get(1)?, Def::Variable(w.get(0)?), at),
            op::DECORATE => {
                let (target, decoration) = (w.get(0)?, w.get(1)?);
                match decoration {
                    DECORATION_BINDING => _ = self.bindings.insert(target, w.get(2)?),
                    DECORATION_DESCRIPTOR_SET => _ = self.sets.insert(target, w.get(2)?),
                    _ => {}
                }
                Ok(())
            }
            op::GRAPH_CONSTANT => {
                let ty = self.tensor(w.get(0)?, at)?;
                let id = w.get(2)?;
                self.define(w.get(1)?, Def::Value(Operand::GraphConstant { id, ty }), at)
            }
            op::GRAPH_ENTRY_POINT => {
                let graph = w.get(0)?;
                let (name, next) = w.string(1)?;
                let interface = w.w.get(next..).unwrap_or(&[]).to_vec();
                if self.entry.is_some() {
                    return Err(TosaError::Unsupported {
                        at,
                        what: "a second graph entry point".into(),
                    });
                }
                self.entry = Some((graph, name, interface, at));
                Ok(())
            }
            op::GRAPH => {
                let ty = w.get(0)?;
                if !matches!(self.defs.get(&ty), Some(Def::Graph { .. })) {
                    return Err(self.kind(ty, at, "a graph type (OpTypeGraphARM)"));
                }
                let id = w.get(1)?;
                self.define(id, Def::GraphId, at)?;
                self.graph = Some((id, ty));
                self.in_body = true;
                Ok(())
            }
            op::EXT_INST | op::GRAPH_INPUT | op::GRAPH_SET_OUTPUT | op::GRAPH_END => {
                Err(TosaError::Graph(format!(
                    "{what} at word {at} lies outside a graph (no OpGraphARM before it)"
                )))
            }
            _ => Ok(()),
        }
    }

    /// An instruction of the graph's body.
    fn body(&mut self, opcode: u32, w: &Words<'_>) -> Result<(), TosaError> {
        let at = w.at;
        match opcode {
            op::GRAPH_INPUT => {
                self.tensor(w.get(0)?, at)?;
                if w.w.len() > 3 {
                    return Err(TosaError::Unsupported {
                        at,
                        what: "a graph input's element index (tensor arrays)".into(),
                    });
                }
                let index = self.scalar_int(w.get(2)?, at)? as usize;
                self.define(w.get(1)?, Def::Value(Operand::Input(index)), at)
            }
            op::EXT_INST => self.operator(w),
            op::GRAPH_SET_OUTPUT => {
                if w.w.len() > 2 {
                    return Err(TosaError::Unsupported {
                        at,
                        what: "a graph output's element index (tensor arrays)".into(),
                    });
                }
                let value = self.operand(w.get(0)?, at)?;
                let index = self.scalar_int(w.get(1)?, at)? as usize;
                if self.results.insert(index, value).is_some() {
                    return Err(TosaError::Graph(format!(
                        "output {index} is set twice (again at word {at})"
                    )));
                }
                Ok(())
            }
            op::GRAPH_END => {
                self.in_body = false;
                self.ended = true;
                Ok(())
            }
            // OpNop, OpName, OpLine, OpNoLine: allowed anywhere.
            0 | op::NAME | 8 | 317 => Ok(()),
            _ => Err(TosaError::UnexpectedInBody { at, opcode }),
        }
    }

    /// `OpExtInst` of the TOSA set: one operator.
    fn operator(&mut self, w: &Words<'_>) -> Result<(), TosaError> {
        let at = w.at;
        let result = self.tensor(w.get(0)?, at)?;
        let set = w.get(2)?;
        match self.defs.get(&set) {
            Some(Def::Import(name)) if name == TOSA_SET => {}
            Some(Def::Import(name)) => {
                return Err(TosaError::NotTosa {
                    at,
                    set: name.clone(),
                });
            }
            _ => return Err(self.kind(set, at, "an extended instruction set (OpExtInstImport)")),
        }
        let number = w.get(3)?;
        let op = Operator::from_number(number).ok_or(TosaError::UnknownOperator { at, number })?;
        let ids = w.w.get(4..).unwrap_or(&[]);
        let (min, more) = op.arity();
        if ids.len() < min || (!more && ids.len() != min) {
            return Err(TosaError::OperandCount {
                op: op.name(),
                at,
                found: ids.len(),
                expected: if more {
                    format!("{min} or more")
                } else {
                    min.to_string()
                },
            });
        }
        let operands = ids
            .iter()
            .map(|&id| self.operand(id, at))
            .collect::<Result<Vec<_>, _>>()?;
        let index = self.nodes.len();
        self.nodes.push(Node {
            op,
            operands,
            result,
            at,
        });
        self.define(w.get(1)?, Def::Value(Operand::Node(index)), at)
    }

    /// What an operand id stands for: a value of the graph, or a constant.
    fn operand(&self, id: u32, at: usize) -> Result<Operand, TosaError> {
        match self.defs.get(&id) {
            Some(Def::Value(v)) => Ok(v.clone()),
            Some(Def::Constant(c)) => Ok(Operand::Constant(c.clone())),
            Some(_) => Err(self.kind(id, at, "a tensor value or a constant")),
            None => Err(TosaError::BadId {
                at,
                id,
                why: "nothing defines before it",
            }),
        }
    }

    fn define(&mut self, id: u32, def: Def, at: usize) -> Result<(), TosaError> {
        if self.defs.insert(id, def).is_some() {
            return Err(TosaError::BadId {
                at,
                id,
                why: "is already defined",
            });
        }
        Ok(())
    }

    fn kind(&self, id: u32, at: usize, expected: &'static str) -> TosaError {
        match self.defs.get(&id) {
            None => TosaError::BadId {
                at,
                id,
                why: "nothing defines before it",
            },
            Some(_) => TosaError::WrongKind { at, id, expected },
        }
    }

    /// The tensor type of id `ty`.
    fn tensor(&self, ty: u32, at: usize) -> Result<TensorType, TosaError> {
        match self.defs.get(&ty) {
            Some(Def::Tensor(t)) => Ok(t.clone()),
            _ => Err(self.kind(ty, at, "a tensor type (OpTypeTensorARM)")),
        }
    }

    /// The value of a scalar integer constant.
    fn scalar_int(&self, id: u32, at: usize) -> Result<u64, TosaError> {
        match self.defs.get(&id) {
            Some(Def::Constant(Constant {
                element: Element::Int(_),
                shape: None,
                values,
            })) => Ok(values.first().copied().unwrap_or(0)),
            _ => Err(self.kind(id, at, "a scalar integer constant")),
        }
    }

    /// `OpTypeTensorARM`: element type, then an optional rank and shape.
    fn tensor_type(&mut self, w: &Words<'_>) -> Result<(), TosaError> {
        let at = w.at;
        let element = match self.defs.get(&w.get(1)?) {
            Some(Def::Scalar(e)) => *e,
            _ => return Err(self.kind(w.get(1)?, at, "a scalar type")),
        };
        let shape = match w.w.len() {
            2 => None,
            3 => {
                return Err(TosaError::Unsupported {
                    at,
                    what: "a tensor type with a rank but no shape".into(),
                });
            }
            _ => {
                let rank = self.scalar_int(w.get(2)?, at)?;
                let dims = match self.defs.get(&w.get(3)?) {
                    Some(Def::Constant(c)) if c.shape.is_some() => c.values.clone(),
                    _ => return Err(self.kind(w.get(3)?, at, "a constant array of dimensions")),
                };
                if dims.len() as u64 != rank {
                    return Err(TosaError::Graph(format!(
                        "the tensor type at word {at} has rank {rank} but {} dimensions",
                        dims.len()
                    )));
                }
                Some(dims)
            }
        };
        self.define(w.get(0)?, Def::Tensor(TensorType { element, shape }), at)
    }

    /// `OpConstant` of a 32-bit (or narrower) scalar.
    fn constant(&mut self, w: &Words<'_>) -> Result<(), TosaError> {
        let at = w.at;
        let element = match self.defs.get(&w.get(0)?) {
            Some(Def::Scalar(e)) => *e,
            _ => return Err(self.kind(w.get(0)?, at, "a scalar type")),
        };
        let value = match w.w.len() {
            3 => u64::from(w.get(2)?),
            4 => u64::from(w.get(2)?) | u64::from(w.get(3)?) << 32,
            n => {
                return Err(TosaError::Unsupported {
                    at,
                    what: format!("a constant of {} words", n.saturating_sub(2)),
                });
            }
        };
        let c = Constant {
            element,
            shape: None,
            values: vec![value],
        };
        self.define(w.get(1)?, Def::Constant(c), at)
    }

    /// The element type and shape of a composite's type: an array (rank 1) or a tensor.
    fn composite_type(&self, ty: u32, at: usize) -> Result<(Element, Vec<u64>), TosaError> {
        match self.defs.get(&ty) {
            Some(Def::Tensor(t)) => {
                let shape = t.shape.clone().ok_or_else(|| TosaError::Unsupported {
                    at,
                    what: "an unranked tensor constant".into(),
                })?;
                Ok((t.element, shape))
            }
            Some(Def::Array { element, length }) => match self.defs.get(element) {
                Some(Def::Scalar(e)) => Ok((*e, vec![*length])),
                _ => Err(self.kind(*element, at, "an array of scalars")),
            },
            _ => Err(self.kind(ty, at, "a tensor or array type")),
        }
    }

    /// `OpConstantComposite`: its constituents' elements, flattened.
    fn composite(&mut self, w: &Words<'_>) -> Result<(), TosaError> {
        let at = w.at;
        let (element, shape) = self.composite_type(w.get(0)?, at)?;
        let mut values = Vec::new();
        for &id in w.w.get(2..).unwrap_or(&[]) {
            match self.defs.get(&id) {
                Some(Def::Constant(c)) => values.extend_from_slice(&c.values),
                _ => return Err(self.kind(id, at, "a constant")),
            }
        }
        let numel = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
        if numel != Some(values.len() as u64) {
            return Err(TosaError::Graph(format!(
                "the constant at word {at} has {} elements for a shape of {shape:?}",
                values.len()
            )));
        }
        let c = Constant {
            element,
            shape: Some(shape),
            values,
        };
        self.define(w.get(1)?, Def::Constant(c), at)
    }

    /// `OpConstantNull` (zeros) or `OpConstantCompositeReplicateEXT` (one value throughout).
    fn filled(&mut self, opcode: u32, w: &Words<'_>) -> Result<(), TosaError> {
        let at = w.at;
        let ty = w.get(0)?;
        let (element, shape) = match self.defs.get(&ty) {
            Some(Def::Scalar(e)) if opcode == op::CONSTANT_NULL => (*e, None),
            _ => {
                let (e, s) = self.composite_type(ty, at)?;
                (e, Some(s))
            }
        };
        let numel = match &shape {
            None => 1,
            Some(s) => s
                .iter()
                .try_fold(1u64, |n, &d| n.checked_mul(d))
                .unwrap_or(u64::MAX),
        };
        if numel > MAX_CONSTANT_ELEMENTS {
            return Err(TosaError::Unsupported {
                at,
                what: format!("a constant of {numel} elements"),
            });
        }
        let value = match opcode {
            op::CONSTANT_NULL => 0,
            _ => match self.defs.get(&w.get(2)?) {
                Some(Def::Constant(c)) if c.values.len() == 1 => c.values[0],
                _ => return Err(self.kind(w.get(2)?, at, "a scalar constant")),
            },
        };
        let c = Constant {
            element,
            shape,
            values: vec![value; numel as usize],
        };
        self.define(w.get(1)?, Def::Constant(c), at)
    }

    /// The graph, once the whole module is read.
    fn finish(self) -> Result<TosaGraph, TosaError> {
        let Some((graph, ty)) = self.graph else {
            return Err(TosaError::Graph(
                "the module has no graph (OpGraphARM)".into(),
            ));
        };
        if !self.ended {
            return Err(TosaError::Graph(
                "the graph has no end (OpGraphEndARM)".into(),
            ));
        }
        let Some((entry, name, interface, at)) = self.entry.clone() else {
            return Err(TosaError::Graph(
                "the module has no graph entry point (OpGraphEntryPointARM)".into(),
            ));
        };
        if entry != graph {
            return Err(self.kind(entry, at, "the module's graph"));
        }
        let Some(Def::Graph { inputs, types }) = self.defs.get(&ty) else {
            return Err(self.kind(ty, at, "a graph type"));
        };
        if interface.len() != types.len() {
            return Err(TosaError::Graph(format!(
                "the entry point names {} interface variables for a graph of {} inputs and outputs",
                interface.len(),
                types.len()
            )));
        }
        let ports = interface
            .iter()
            .map(|&v| self.port(v, at))
            .collect::<Result<Vec<_>, _>>()?;
        let (ins, outs) = ports.split_at(*inputs);
        let mut results = Vec::with_capacity(outs.len());
        for i in 0..outs.len() {
            let r =
                self.results.get(&i).cloned().ok_or_else(|| {
                    TosaError::Graph(format!("output {i} of the graph is never set"))
                })?;
            results.push(r);
        }
        if let Some(extra) = self.results.keys().find(|&&i| i >= outs.len()) {
            return Err(TosaError::Graph(format!(
                "output {extra} is set, but the graph has {} outputs",
                outs.len()
            )));
        }
        let uses = self
            .nodes
            .iter()
            .flat_map(|n| n.operands.iter().map(move |o| (n.at, o)));
        for (at, o) in uses.chain(results.iter().map(|o| (at, o))) {
            if let Operand::Input(i) = o
                && *i >= ins.len()
            {
                return Err(TosaError::Graph(format!(
                    "word {at} reads graph input {i}; the graph has {}",
                    ins.len()
                )));
            }
        }
        Ok(TosaGraph {
            name,
            inputs: ins.to_vec(),
            outputs: outs.to_vec(),
            nodes: self.nodes,
            results,
        })
    }

    /// An interface variable: its tensor type and decorations.
    fn port(&self, var: u32, at: usize) -> Result<Port, TosaError> {
        let pointer = match self.defs.get(&var) {
            Some(Def::Variable(p)) => *p,
            _ => return Err(self.kind(var, at, "an interface variable (OpVariable)")),
        };
        let ty = match self.defs.get(&pointer) {
            Some(Def::Pointer(t)) => *t,
            _ => return Err(self.kind(pointer, at, "a pointer type")),
        };
        Ok(Port {
            ty: self.tensor(ty, at)?,
            set: self.sets.get(&var).copied(),
            binding: self.bindings.get(&var).copied(),
        })
    }
}

/// An instruction's name for errors.
fn name_of(opcode: u32) -> &'static str {
    match opcode {
        op::EXT_INST_IMPORT => "OpExtInstImport",
        op::EXT_INST => "OpExtInst",
        op::TYPE_BOOL => "OpTypeBool",
        op::TYPE_INT => "OpTypeInt",
        op::TYPE_FLOAT => "OpTypeFloat",
        op::TYPE_ARRAY => "OpTypeArray",
        op::TYPE_POINTER => "OpTypePointer",
        op::CONSTANT_TRUE => "OpConstantTrue",
        op::CONSTANT_FALSE => "OpConstantFalse",
        op::CONSTANT => "OpConstant",
        op::CONSTANT_COMPOSITE => "OpConstantComposite",
        op::CONSTANT_NULL => "OpConstantNull",
        op::VARIABLE => "OpVariable",
        op::DECORATE => "OpDecorate",
        op::TYPE_TENSOR => "OpTypeTensorARM",
        op::GRAPH_CONSTANT => "OpGraphConstantARM",
        op::GRAPH_ENTRY_POINT => "OpGraphEntryPointARM",
        op::GRAPH => "OpGraphARM",
        op::GRAPH_INPUT => "OpGraphInputARM",
        op::GRAPH_SET_OUTPUT => "OpGraphSetOutputARM",
        op::GRAPH_END => "OpGraphEndARM",
        op::TYPE_GRAPH => "OpTypeGraphARM",
        op::CONSTANT_COMPOSITE_REPLICATE => "OpConstantCompositeReplicateEXT",
        _ => "instruction",
    }
}
