//! The op registry: every op a front end can call, by every name it answers to.
//!
//! Ops live in one file per family. Each family file holds, for each of its ops: one
//! registration line in its `OPS` table ([`OpDef::new`]: the names it answers to, its
//! parameters in ExecuTorch's order, its build function); the build function, which reads and
//! checks the arguments; the [`GraphBuilder`] methods that infer the output's shape and dtype
//! and add the node; and the `record_<family>` function that turns the family's nodes into
//! dispatches. An op with a kernel of its own adds it with `GraphBuilder::kernel_node` and its
//! generated `#[repr(C)]` push-constant struct, and touches nothing outside its family file
//! and its shader (the recipe is in ARCHITECTURE.md, "Adding an op").
//!
//! Names: ExecuTorch's as its Vulkan backend serialises them (`aten.add.Tensor`,
//! `et_vk.conv_with_clamp.default`), its portable CPU kernels' (`aten::mul.Scalar_out`), and
//! the program file's (`add`). A parameter named `a|b` answers to both: the first is
//! ExecuTorch's name, the last the program file's.
//!
//! Front ends read their own encoding of arguments into [`Arg`]s, positionally (a `VkGraph`
//! node, a CPU kernel's values) or by parameter name (a program file's attributes), and call
//! [`OpDef::call`], which fills absent arguments from the parameters' fallbacks and checks
//! every kind before the op runs.

mod activation;
mod attention;
pub use activation::Math;
pub use conv::Conv3d;
pub(crate) use conv::depthwise_outputs_channels_last;
mod conv;
mod elementwise;
mod gemm;
mod index;
mod integer;
pub use integer::{IntBinary, IntConv, IntReduce, IntRescale, IntUnary};
pub use pool::{Pool3d, Resize};
mod norm;
mod pool;
mod quantized;
mod reduce;
mod shape;
mod softmax;

use crate::error::{Error, Result};
use crate::graph::{GraphBuilder, TensorId};

/// Every family's table.
const FAMILIES: &[&[OpDef]] = &[
    elementwise::OPS,
    activation::OPS,
    reduce::OPS,
    norm::OPS,
    softmax::OPS,
    conv::OPS,
    gemm::OPS,
    pool::OPS,
    shape::OPS,
    index::OPS,
    quantized::OPS,
    attention::OPS,
];

/// The op answering to `name`, if any.
pub fn find(name: &str) -> Option<&'static OpDef> {
    all().find(|d| d.names.contains(&name))
}

/// The op a portable CPU kernel (`aten::add.out`, `aten::mul.Scalar_out`,
/// `dim_order_ops::_to_dim_order_copy.out`) runs: a name registered as such, else the graph
/// op its out variant belongs to. ExecuTorch names an op's out variant after its overload:
/// `.out` for the default, `Tensor`, `dim` or `int` overload, `<overload>_out` for the others
/// (`sum.dim_IntList` gives `sum.IntList_out`); the out variant takes the op's arguments, then
/// the out tensor.
pub fn find_kernel(name: &str) -> Option<&'static OpDef> {
    if let Some(def) = find(name) {
        return Some(def);
    }
    let (space, rest) = name.split_once("::")?;
    let (op, overload) = rest.rsplit_once('.')?;
    let graph = |o: &str| find(&format!("{space}.{op}.{o}"));
    match overload.strip_suffix("_out") {
        None if overload == "out" => ["default", "Tensor", "dim", "int", "self"]
            .into_iter()
            .find_map(graph),
        None => None,
        Some(o) => graph(o).or_else(|| graph(&format!("dim_{o}"))),
    }
}

/// Every registered op.
pub fn all() -> impl Iterator<Item = &'static OpDef> {
    FAMILIES.iter().flat_map(|f| f.iter())
}

/// What an argument holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A tensor.
    Tensor,
    /// A list of tensors.
    Tensors,
    /// A list of tensors and Nones (advanced indexing's indices).
    OptTensors,
    /// An integer (a bool reads as 0 or 1).
    Int,
    /// A number (an integer reads as one).
    Float,
    /// True or false.
    Bool,
    /// A list of integers (one integer reads as a list of one).
    Ints,
    /// A list of numbers (integers read as numbers).
    Floats,
    /// A string.
    Str,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Tensor => "a tensor",
            Kind::Tensors => "a list of tensors",
            Kind::OptTensors => "a list of tensors or Nones",
            Kind::Int => "an integer",
            Kind::Float => "a number",
            Kind::Bool => "a bool",
            Kind::Ints => "a list of integers",
            Kind::Floats => "a list of numbers",
            Kind::Str => "a string",
        }
    }
}

/// What an absent argument (or ExecuTorch's `None`) becomes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fallback {
    /// Nothing: the argument must be given.
    Required,
    /// `None`: the op reads it as absent (an optional tensor, an open slice end).
    Null,
    /// This integer.
    Int(i64),
    /// This number.
    Float(f64),
    /// This bool.
    Bool(bool),
    /// These integers.
    Ints(&'static [i64]),
    /// This string.
    Str(&'static str),
}

/// One parameter of an op.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Param {
    names: &'static str,
    /// What it holds.
    pub kind: Kind,
    /// What it is when absent.
    pub fallback: Fallback,
}

impl Param {
    /// A parameter answering to `names` (`a|b`: ExecuTorch's name, then the program file's).
    pub const fn new(names: &'static str, kind: Kind, fallback: Fallback) -> Param {
        Param {
            names,
            kind,
            fallback,
        }
    }

    /// A required tensor.
    pub const fn tensor(names: &'static str) -> Param {
        Param::new(names, Kind::Tensor, Fallback::Required)
    }

    /// An optional tensor.
    pub const fn opt_tensor(names: &'static str) -> Param {
        Param::new(names, Kind::Tensor, Fallback::Null)
    }

    /// ExecuTorch's name.
    pub fn name(&self) -> &'static str {
        self.names.split('|').next().unwrap_or(self.names)
    }

    /// The program file's name.
    pub fn file_name(&self) -> &'static str {
        self.names.rsplit('|').next().unwrap_or(self.names)
    }

    /// Whether it answers to `name`.
    pub fn answers_to(&self, name: &str) -> bool {
        self.names.split('|').any(|n| n == name)
    }

    /// Whether it takes tensors.
    pub fn is_tensor(&self) -> bool {
        matches!(self.kind, Kind::Tensor | Kind::Tensors | Kind::OptTensors)
    }
}

/// One argument, in a front end's terms.
#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    /// Absent, or ExecuTorch's `None`.
    None,
    /// A tensor of the graph being built.
    Tensor(TensorId),
    /// Tensors.
    Tensors(Vec<TensorId>),
    /// Tensors and Nones.
    OptTensors(Vec<Option<TensorId>>),
    /// An integer.
    Int(i64),
    /// A number.
    Float(f64),
    /// A bool.
    Bool(bool),
    /// Integers.
    Ints(Vec<i64>),
    /// Numbers.
    Floats(Vec<f64>),
    /// A string.
    Str(String),
    /// An integer known only on the device: the one element of the i32 tensor `value`, plus
    /// `plus` (ExecuTorch's SymInt read from a tensor, `et_vk.select_as_symint`, and sums of
    /// it). Parameters that take positions (a start, a cache position) read it; others refuse it.
    DeviceInt {
        /// A one-element i32 tensor.
        value: TensorId,
        /// Added to it.
        plus: i64,
    },
}

/// An integer argument that may be known only on the device.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Position {
    /// Known at build.
    Static(i64),
    /// The one element of an i32 tensor `[1]`, plus a constant.
    Device(TensorId, i64),
}

impl Arg {
    fn describe(&self) -> String {
        match self {
            Arg::None => "None".into(),
            Arg::Tensor(t) => format!("tensor {}", t.index()),
            Arg::Tensors(ts) => format!("{} tensors", ts.len()),
            Arg::OptTensors(ts) => format!("{} tensors or Nones", ts.len()),
            Arg::Int(v) => format!("the integer {v}"),
            Arg::Float(v) => format!("the number {v}"),
            Arg::Bool(v) => format!("{v}"),
            Arg::Ints(v) => format!("{v:?}"),
            Arg::Floats(v) => format!("{v:?}"),
            Arg::Str(v) => format!("{v:?}"),
            Arg::DeviceInt { value, plus } => {
                format!(
                    "an integer known only on the device (tensor {} + {plus})",
                    value.index()
                )
            }
        }
    }

    /// The argument as `kind`, converting where that loses nothing, or `None`.
    fn into_kind(self, kind: Kind) -> Option<Arg> {
        Some(match (kind, self) {
            (_, Arg::None) => Arg::None,
            (Kind::Tensor, a @ Arg::Tensor(_)) => a,
            (Kind::Tensors, a @ Arg::Tensors(_)) => a,
            (Kind::Tensors, Arg::Tensor(t)) => Arg::Tensors(vec![t]),
            (Kind::OptTensors, a @ Arg::OptTensors(_)) => a,
            (Kind::OptTensors, Arg::Tensors(ts)) => {
                Arg::OptTensors(ts.into_iter().map(Some).collect())
            }
            (Kind::OptTensors, Arg::Tensor(t)) => Arg::OptTensors(vec![Some(t)]),
            (Kind::Int, a @ Arg::Int(_)) => a,
            (Kind::Int, a @ Arg::DeviceInt { .. }) => a,
            (Kind::Int, Arg::Bool(b)) => Arg::Int(i64::from(b)),
            (Kind::Int, Arg::Float(v)) if v.fract() == 0.0 && v.abs() < 9e15 => Arg::Int(v as i64),
            (Kind::Float, a @ Arg::Float(_)) => a,
            (Kind::Float, Arg::Int(v)) => Arg::Float(v as f64),
            (Kind::Float, Arg::Bool(b)) => Arg::Float(f64::from(u8::from(b))),
            (Kind::Bool, a @ Arg::Bool(_)) => a,
            (Kind::Bool, Arg::Int(v @ (0 | 1))) => Arg::Bool(v == 1),
            (Kind::Ints, a @ Arg::Ints(_)) => a,
            (Kind::Ints, Arg::Int(v)) => Arg::Ints(vec![v]),
            (Kind::Floats, a @ Arg::Floats(_)) => a,
            (Kind::Floats, Arg::Float(v)) => Arg::Floats(vec![v]),
            (Kind::Floats, Arg::Int(v)) => Arg::Floats(vec![v as f64]),
            (Kind::Floats, Arg::Ints(v)) => Arg::Floats(v.into_iter().map(|i| i as f64).collect()),
            (Kind::Str, a @ Arg::Str(_)) => a,
            _ => return None,
        })
    }
}

impl Fallback {
    fn arg(self) -> Option<Arg> {
        Some(match self {
            Fallback::Required => return None,
            Fallback::Null => Arg::None,
            Fallback::Int(v) => Arg::Int(v),
            Fallback::Float(v) => Arg::Float(v),
            Fallback::Bool(v) => Arg::Bool(v),
            Fallback::Ints(v) => Arg::Ints(v.to_vec()),
            Fallback::Str(v) => Arg::Str(v.to_owned()),
        })
    }
}

/// Adds an op to a graph from its checked arguments; returns its outputs.
pub type BuildFn = fn(&mut Call<'_>) -> Result<Vec<TensorId>>;

/// One registered op.
#[derive(Clone, Copy)]
pub struct OpDef {
    /// The names it answers to; the first names it in errors.
    pub names: &'static [&'static str],
    /// Its parameters, in ExecuTorch's order.
    pub params: &'static [Param],
    build: BuildFn,
}

impl std::fmt::Debug for OpDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpDef")
            .field("names", &self.names)
            .field("params", &self.params)
            .finish_non_exhaustive()
    }
}

impl OpDef {
    /// An op's registration: its names, parameters and build function.
    pub const fn new(
        names: &'static [&'static str],
        params: &'static [Param],
        build: BuildFn,
    ) -> OpDef {
        OpDef {
            names,
            params,
            build,
        }
    }

    /// Its first name.
    pub fn name(&self) -> &'static str {
        self.names.first().copied().unwrap_or("?")
    }

    /// The parameter answering to `name`.
    pub fn param(&self, name: &str) -> Option<usize> {
        self.params.iter().position(|p| p.answers_to(name))
    }

    /// Adds the op to `g` with `args` in parameter order (absent trailing ones take their
    /// fallback); returns its outputs. Each argument is checked against its parameter first.
    pub fn call(&'static self, g: &mut GraphBuilder, args: Vec<Arg>) -> Result<Vec<TensorId>> {
        if args.len() > self.params.len() {
            return Err(Error::Arg {
                op: self.name(),
                param: "*",
                problem: format!(
                    "{} arguments given; it takes at most {}",
                    args.len(),
                    self.params.len()
                ),
            });
        }
        let mut checked = Vec::with_capacity(self.params.len());
        let mut given = args.into_iter();
        for p in self.params {
            let arg = match given.next().unwrap_or(Arg::None) {
                Arg::None => p
                    .fallback
                    .arg()
                    .ok_or_else(|| self.arg_err(p, "is required"))?,
                a => a,
            };
            let shown = arg.describe();
            let arg = arg.into_kind(p.kind).ok_or_else(|| {
                self.arg_err(p, &format!("must be {}, found {shown}", p.kind.name()))
            })?;
            checked.push(arg);
        }
        let mut call = Call {
            g,
            def: self,
            args: checked,
        };
        (self.build)(&mut call)
    }

    fn arg_err(&self, p: &Param, problem: &str) -> Error {
        Error::Arg {
            op: self.name(),
            param: p.name(),
            problem: problem.to_owned(),
        }
    }
}

/// An op being added: the graph and its checked arguments, read by position.
#[derive(Debug)]
pub struct Call<'g> {
    /// The graph the op is added to.
    pub(crate) g: &'g mut GraphBuilder,
    def: &'static OpDef,
    args: Vec<Arg>,
}

impl Call<'_> {
    /// An error about argument `i`.
    pub(crate) fn err(&self, i: usize, problem: impl Into<String>) -> Error {
        Error::Arg {
            op: self.def.name(),
            param: self.def.params.get(i).map_or("?", Param::name),
            problem: problem.into(),
        }
    }

    fn get(&self, i: usize) -> &Arg {
        self.args.get(i).unwrap_or(&Arg::None)
    }

    /// Argument `i`, a tensor.
    pub(crate) fn tensor(&self, i: usize) -> Result<TensorId> {
        self.opt_tensor(i)?
            .ok_or_else(|| self.err(i, "is None; a tensor is required"))
    }

    /// Argument `i`, a tensor or `None`.
    pub(crate) fn opt_tensor(&self, i: usize) -> Result<Option<TensorId>> {
        match self.get(i) {
            Arg::Tensor(t) => Ok(Some(*t)),
            Arg::None => Ok(None),
            other => Err(self.err(i, format!("must be a tensor, found {}", other.describe()))),
        }
    }

    /// Argument `i`, tensors.
    pub(crate) fn tensors(&self, i: usize) -> Result<Vec<TensorId>> {
        match self.get(i) {
            Arg::Tensors(ts) => Ok(ts.clone()),
            other => Err(self.err(i, format!("must be tensors, found {}", other.describe()))),
        }
    }

    /// Argument `i`, tensors and Nones.
    pub(crate) fn opt_tensors(&self, i: usize) -> Result<Vec<Option<TensorId>>> {
        match self.get(i) {
            Arg::OptTensors(ts) => Ok(ts.clone()),
            other => Err(self.err(i, format!("must be tensors, found {}", other.describe()))),
        }
    }

    /// Argument `i`, an integer or `None`.
    pub(crate) fn opt_int(&self, i: usize) -> Result<Option<i64>> {
        match self.get(i) {
            Arg::Int(v) => Ok(Some(*v)),
            Arg::None => Ok(None),
            other => Err(self.err(i, format!("must be an integer, found {}", other.describe()))),
        }
    }

    /// Argument `i`, a position: an integer, or one known only on the device.
    pub(crate) fn position(&self, i: usize) -> Result<Position> {
        match self.get(i) {
            Arg::Int(v) => Ok(Position::Static(*v)),
            Arg::DeviceInt { value, plus } => Ok(Position::Device(*value, *plus)),
            other => Err(self.err(i, format!("must be an integer, found {}", other.describe()))),
        }
    }

    /// Argument `i`, an integer.
    pub(crate) fn int(&self, i: usize) -> Result<i64> {
        self.opt_int(i)?
            .ok_or_else(|| self.err(i, "is None; an integer is required"))
    }

    /// Argument `i`, a dimension (negative counts from the end).
    pub(crate) fn dim(&self, i: usize) -> Result<isize> {
        let v = self.int(i)?;
        isize::try_from(v).map_err(|_| self.err(i, format!("{v} is out of range")))
    }

    /// Argument `i`, a count (not negative).
    pub(crate) fn count(&self, i: usize) -> Result<usize> {
        let v = self.int(i)?;
        usize::try_from(v).map_err(|_| self.err(i, format!("{v} must not be negative")))
    }

    /// Argument `i`, a number.
    pub(crate) fn float(&self, i: usize) -> Result<f64> {
        match self.get(i) {
            Arg::Float(v) => Ok(*v),
            other => Err(self.err(i, format!("must be a number, found {}", other.describe()))),
        }
    }

    /// Argument `i`, a number or None.
    pub(crate) fn opt_float(&self, i: usize) -> Result<Option<f64>> {
        match self.get(i) {
            Arg::None => Ok(None),
            _ => self.float(i).map(Some),
        }
    }

    /// Argument `i`, a number held as f32 (clamped to f32's finite range).
    pub(crate) fn f32(&self, i: usize) -> Result<f32> {
        let v = self.float(i)?;
        Ok(v.clamp(f64::from(f32::MIN), f64::from(f32::MAX)) as f32)
    }

    /// Argument `i`, a bool.
    pub(crate) fn bool(&self, i: usize) -> Result<bool> {
        match self.get(i) {
            Arg::Bool(v) => Ok(*v),
            other => Err(self.err(i, format!("must be a bool, found {}", other.describe()))),
        }
    }

    /// Argument `i`, integers (`None`: empty).
    pub(crate) fn ints(&self, i: usize) -> Result<Vec<i64>> {
        match self.get(i) {
            Arg::Ints(v) => Ok(v.clone()),
            Arg::None => Ok(Vec::new()),
            other => Err(self.err(i, format!("must be integers, found {}", other.describe()))),
        }
    }

    /// Argument `i`, numbers (`None`: empty).
    pub(crate) fn floats(&self, i: usize) -> Result<Vec<f64>> {
        match self.get(i) {
            Arg::Floats(v) => Ok(v.clone()),
            Arg::None => Ok(Vec::new()),
            other => Err(self.err(i, format!("must be numbers, found {}", other.describe()))),
        }
    }

    /// Argument `i`, dimensions.
    pub(crate) fn dims(&self, i: usize) -> Result<Vec<isize>> {
        self.ints(i)?
            .into_iter()
            .map(|v| isize::try_from(v).map_err(|_| self.err(i, format!("{v} is out of range"))))
            .collect()
    }

    /// Argument `i`, counts (none negative).
    pub(crate) fn counts(&self, i: usize) -> Result<Vec<usize>> {
        self.ints(i)?
            .into_iter()
            .map(|v| {
                usize::try_from(v).map_err(|_| self.err(i, format!("{v} must not be negative")))
            })
            .collect()
    }

    /// Argument `i`, one count for both spatial dims or one each (`[h, w]`).
    pub(crate) fn pair(&self, i: usize) -> Result<[usize; 2]> {
        match self.counts(i)?.as_slice() {
            [a] => Ok([*a, *a]),
            [a, b] => Ok([*a, *b]),
            other => Err(self.err(i, format!("must hold one or two sizes, found {other:?}"))),
        }
    }

    /// Argument `i`, a string or `None`.
    pub(crate) fn str(&self, i: usize) -> Result<Option<&str>> {
        match self.get(i) {
            Arg::Str(s) => Ok(Some(s)),
            Arg::None => Ok(None),
            other => Err(self.err(i, format!("must be a string, found {}", other.describe()))),
        }
    }

    /// The shape of tensor `t`.
    pub(crate) fn shape(&self, t: TensorId) -> Vec<usize> {
        self.g.shape(t).map(<[usize]>::to_vec).unwrap_or_default()
    }
}

/// One output.
fn one(t: TensorId) -> Result<Vec<TensorId>> {
    Ok(vec![t])
}

#[cfg(test)]
mod tests {
    use super::*;
    use vk_core::DType;

    #[test]
    fn every_name_answers_to_one_op() {
        let mut seen = std::collections::BTreeMap::new();
        for d in all() {
            assert!(!d.names.is_empty());
            for n in d.names {
                if let Some(other) = seen.insert(*n, d.name()) {
                    panic!("{n} is registered by both {other} and {}", d.name());
                }
            }
        }
    }

    #[test]
    fn arguments_take_fallbacks_and_are_checked() {
        let mut g = GraphBuilder::new();
        let x = g.input("x", DType::F32, &[2, 3]).unwrap();
        let sum = find("aten.sum.dim_IntList").unwrap();
        // keepdim falls back to false.
        let y = sum
            .call(&mut g, vec![Arg::Tensor(x), Arg::Ints(vec![1])])
            .unwrap();
        assert_eq!(g.shape(y[0]), Some(&[2][..]));
        let e = sum
            .call(&mut g, vec![Arg::Tensor(x), Arg::Str("a".into())])
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "aten.sum.dim_IntList: argument `dim`: must be a list of integers, found \"a\""
        );
        let e = find("aten.add.Tensor")
            .unwrap()
            .call(&mut g, vec![Arg::Tensor(x)])
            .unwrap_err();
        assert!(e.to_string().contains("`other`: is required"), "{e}");
    }
}
