//! Execution plans: values, inputs and outputs, chains of instructions, operators and
//! delegates, with every index checked against the table it indexes.

use std::fmt;

use flatbuffers::{ForwardsUOffset, Vector};

use crate::error::{DecodeError, Result};
use crate::program_generated::executorch_flatbuffer as fb;
use crate::scalar::ScalarType;

/// One entry point of a program (`forward`, ...).
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutionPlan<'a> {
    /// The method name.
    pub name: &'a str,
    /// Every value of the plan; instructions, inputs and outputs refer to them by index.
    pub values: Vec<Value<'a>>,
    /// Indices of the values that are the plan's inputs.
    pub inputs: Vec<u32>,
    /// Indices of the values that are the plan's outputs.
    pub outputs: Vec<u32>,
    /// Chains of instructions (programs hold one).
    pub chains: Vec<Chain>,
    /// The CPU kernels `KernelCall`s name.
    pub operators: Vec<Operator<'a>>,
    /// The delegates `DelegateCall`s run.
    pub delegates: Vec<Delegate<'a>>,
    /// Sizes of the non-constant memory buffers (entry 0 is unused by the runtime).
    pub non_const_buffer_sizes: Vec<i64>,
}

impl<'a> ExecutionPlan<'a> {
    /// The delegates whose id is `id`, with their indices.
    pub fn delegates_with_id<'s>(
        &'s self,
        id: &'s str,
    ) -> impl Iterator<Item = (usize, &'s Delegate<'a>)> + 's {
        self.delegates
            .iter()
            .enumerate()
            .filter(move |(_, d)| d.id == id)
    }

    /// Every instruction of every chain, in order.
    pub fn instructions(&self) -> impl Iterator<Item = &Instruction> {
        self.chains.iter().flat_map(|c| c.instructions.iter())
    }
}

/// A value of an execution plan.
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    /// None.
    Null,
    /// An integer (enums are stored as integers too).
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// A double.
    Double(f64),
    /// A tensor.
    Tensor(Tensor<'a>),
    /// A string.
    String(&'a str),
    /// A list of integers. ExecuTorch stores it boxed, as the indices of `Int` values (so
    /// that an element may be symbolic); the decoder resolves them to the integers.
    IntList(Vec<i64>),
    /// A list of doubles.
    DoubleList(Vec<f64>),
    /// A list of booleans.
    BoolList(Vec<bool>),
    /// A list of tensors, as indices of tensor values.
    TensorList(Vec<u32>),
    /// A list of optional tensors, as indices of tensor or null values (`None`: stored as -1).
    OptionalTensorList(Vec<Option<u32>>),
}

impl Value<'_> {
    /// The kind's name, as the schema spells it.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "Null",
            Value::Int(_) => "Int",
            Value::Bool(_) => "Bool",
            Value::Double(_) => "Double",
            Value::Tensor(_) => "Tensor",
            Value::String(_) => "String",
            Value::IntList(_) => "IntList",
            Value::DoubleList(_) => "DoubleList",
            Value::BoolList(_) => "BoolList",
            Value::TensorList(_) => "TensorList",
            Value::OptionalTensorList(_) => "OptionalTensorList",
        }
    }

    /// The tensor, if this is one.
    pub fn as_tensor(&self) -> Option<&Tensor<'_>> {
        match self {
            Value::Tensor(t) => Some(t),
            _ => None,
        }
    }
}

/// How a tensor's shape may change at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShapeDynamism {
    /// Static shape.
    Static,
    /// Dynamic, bounded by `sizes`.
    DynamicBound,
    /// Dynamic without bound (`sizes` is not meaningful).
    DynamicUnbound,
}

/// Where a tensor's memory is planned: a memory id and an offset in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    /// Index of the memory (a non-constant buffer).
    pub memory_id: u32,
    /// Offset in bytes (the low and high halves of the file joined).
    pub offset: u64,
}

/// The rarely present part of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtraTensorInfo<'a> {
    /// Index into `Program.mutable_data_segments` of the tensor's initial data.
    pub mutable_data_segments_idx: u64,
    /// The tensor's fully qualified name (`mod.linear.weight`), if recorded.
    pub fully_qualified_name: Option<&'a str>,
    /// Whether the data lives outside the file (found by `fully_qualified_name`).
    pub external: bool,
    /// Device type (0: CPU, 1: CUDA).
    pub device_type: i8,
    /// Device index.
    pub device_index: i8,
}

/// A tensor value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tensor<'a> {
    /// Element type.
    pub scalar_type: ScalarType,
    /// Offset in elements of the data from the buffer start (0 in practice).
    pub storage_offset: i32,
    /// Sizes, outermost first (upper bounds for dynamically bounded shapes).
    pub sizes: Vec<i32>,
    /// Order of the dimensions in memory, outermost first.
    pub dim_order: &'a [u8],
    /// Whether gradients are required.
    pub requires_grad: bool,
    /// Index of the constant (no allocation) or of the initial data (with an allocation); 0
    /// for none.
    pub data_buffer_idx: u32,
    /// Planned memory, for non-constant tensors that have it.
    pub allocation: Option<Allocation>,
    /// Shape dynamism.
    pub shape_dynamism: ShapeDynamism,
    /// The rarely present part.
    pub extra: Option<ExtraTensorInfo<'a>>,
}

impl Tensor<'_> {
    /// Whether the tensor is a constant stored in the program (a data index and no planned
    /// memory, data not external).
    pub fn is_constant(&self) -> bool {
        self.data_buffer_idx > 0 && self.allocation.is_none() && !self.is_external()
    }

    /// Whether the data lives outside the program file.
    pub fn is_external(&self) -> bool {
        self.extra.is_some_and(|e| e.external)
    }

    /// Number of elements (the product of the sizes), `None` when a size is negative or the
    /// product overflows.
    pub fn numel(&self) -> Option<u64> {
        self.sizes.iter().try_fold(1u64, |acc, &s| {
            u64::try_from(s).ok().and_then(|s| acc.checked_mul(s))
        })
    }

    /// Size of the data in bytes, `None` as for [`Tensor::numel`].
    pub fn nbytes(&self) -> Option<u64> {
        self.numel()?.checked_mul(self.scalar_type.element_size())
    }
}

/// A chain of instructions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// Indices of the chain's input values.
    pub inputs: Vec<u32>,
    /// Indices of the chain's output values.
    pub outputs: Vec<u32>,
    /// The instructions, in order.
    pub instructions: Vec<Instruction>,
}

/// One instruction; every index in it is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Instruction {
    /// Run a CPU kernel.
    KernelCall {
        /// Index into the plan's operators.
        op_index: u32,
        /// Value indices, inputs then outputs.
        args: Vec<u32>,
    },
    /// Run a delegate.
    DelegateCall {
        /// Index into the plan's delegates.
        delegate_index: u32,
        /// Value indices, inputs then outputs.
        args: Vec<u32>,
    },
    /// Copy one value into another.
    MoveCall {
        /// Source value index.
        move_from: u32,
        /// Destination value index.
        move_to: u32,
    },
    /// Jump when a boolean value is false.
    JumpFalseCall {
        /// Index of the boolean value.
        cond_value_index: u32,
        /// Index of the instruction (in the same chain) to jump to.
        destination_instruction: u32,
    },
    /// Free a tensor's data.
    FreeCall {
        /// Index of the tensor value.
        value_index: u32,
    },
}

impl Instruction {
    /// The kind's name, as the schema spells it.
    pub fn kind(&self) -> &'static str {
        match self {
            Instruction::KernelCall { .. } => "KernelCall",
            Instruction::DelegateCall { .. } => "DelegateCall",
            Instruction::MoveCall { .. } => "MoveCall",
            Instruction::JumpFalseCall { .. } => "JumpFalseCall",
            Instruction::FreeCall { .. } => "FreeCall",
        }
    }
}

/// A CPU kernel: name and overload (`aten::add`, `out`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operator<'a> {
    /// Name.
    pub name: &'a str,
    /// Overload (may be empty).
    pub overload: &'a str,
}

impl fmt::Display for Operator<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.overload.is_empty() {
            f.write_str(self.name)
        } else {
            write!(f, "{}.{}", self.name, self.overload)
        }
    }
}

/// Where a delegate's payload is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataLocation {
    /// In `Program.backend_delegate_data`.
    Inline,
    /// In `Program.segments`.
    Segment,
}

/// A checked reference to a delegate's payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataReference {
    /// Which table `index` indexes.
    pub location: DataLocation,
    /// Index into it.
    pub index: u32,
}

/// One compile spec: a key and its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompileSpec<'a> {
    /// Key.
    pub key: &'a str,
    /// Value (its encoding depends on the backend and key).
    pub value: &'a [u8],
}

/// A backend delegate of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delegate<'a> {
    /// The backend id (`VulkanBackend`, `VgfBackend`, ...).
    pub id: &'a str,
    /// Where its payload is; [`crate::Program::delegate_payload`] resolves it.
    pub processed: DataReference,
    /// Compile specs, in file order.
    pub compile_specs: Vec<CompileSpec<'a>>,
}

impl<'a> Delegate<'a> {
    /// The value of the first compile spec with this key.
    pub fn compile_spec(&self, key: &str) -> Option<&'a [u8]> {
        self.compile_specs
            .iter()
            .find(|s| s.key == key)
            .map(|s| s.value)
    }
}

/// Sizes of the program's tables that plans index into.
pub(crate) struct Tables<'t> {
    /// Entries of `backend_delegate_data`.
    pub inline_data: usize,
    /// Entries of `segments`.
    pub segments: usize,
    /// Constants (legacy buffers, or constant segment offsets).
    pub constants: usize,
    /// Offsets in each mutable data segment entry.
    pub mutable: &'t [usize],
}

type FbVec<'a, T> = Vector<'a, ForwardsUOffset<T>>;

/// Decodes and checks plan `p` (`path` is `execution_plan[p]`).
pub(crate) fn decode_plan<'a>(
    plan: fb::ExecutionPlan<'a>,
    path: &str,
    tables: &Tables<'_>,
) -> Result<ExecutionPlan<'a>> {
    let name = plan.name().ok_or_else(|| missing(path, "name"))?;
    let values = decode_values(plan.values(), path, tables)?;
    check_list_kinds(&values, path)?;
    let n_values = values.len();
    let inputs = indices(plan.inputs(), &format!("{path}.inputs"), "values", n_values)?;
    let outputs = indices(
        plan.outputs(),
        &format!("{path}.outputs"),
        "values",
        n_values,
    )?;
    let operators = decode_operators(plan.operators(), path)?;
    let delegates = decode_delegates(plan.delegates(), path, tables)?;
    let counts = Counts {
        values: n_values,
        operators: operators.len(),
        delegates: delegates.len(),
    };
    let mut chains = Vec::new();
    for (c, chain) in plan.chains().into_iter().flatten().enumerate() {
        chains.push(decode_chain(
            chain,
            &format!("{path}.chains[{c}]"),
            &counts,
        )?);
    }
    let non_const_buffer_sizes = plan
        .non_const_buffer_sizes()
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    Ok(ExecutionPlan {
        name,
        values,
        inputs,
        outputs,
        chains,
        operators,
        delegates,
        non_const_buffer_sizes,
    })
}

fn missing(path: &str, field: &str) -> DecodeError {
    DecodeError::Missing {
        field: format!("{path}.{field}"),
    }
}

/// Checks a list of `int` indices into a table of `len` entries.
pub(crate) fn indices(
    list: Option<Vector<'_, i32>>,
    field: &str,
    table: &'static str,
    len: usize,
) -> Result<Vec<u32>> {
    list.into_iter()
        .flatten()
        .enumerate()
        .map(|(i, v)| index(i64::from(v), || format!("{field}[{i}]"), table, len))
        .collect()
}

/// Checks one index into a table of `len` entries.
pub(crate) fn index(
    value: i64,
    field: impl FnOnce() -> String,
    table: &'static str,
    len: usize,
) -> Result<u32> {
    match u32::try_from(value) {
        Ok(i) if (i as usize) < len => Ok(i),
        _ => Err(DecodeError::IndexOutOfRange {
            field: field(),
            index: value,
            table,
            len,
        }),
    }
}

struct Counts {
    values: usize,
    operators: usize,
    delegates: usize,
}

fn decode_values<'a>(
    list: Option<FbVec<'a, fb::EValue<'a>>>,
    path: &str,
    tables: &Tables<'_>,
) -> Result<Vec<Value<'a>>> {
    let n = list.map_or(0, |l| l.len());
    let list = list.into_iter().flatten();
    let mut values = Vec::with_capacity(n);
    for (i, v) in list.enumerate() {
        values.push(decode_value(v, &format!("{path}.values[{i}]"), n, tables)?);
    }
    let unboxed = (0..values.len())
        .map(|i| match &values[i] {
            Value::IntList(boxed) => unbox_ints(boxed, &values, &format!("{path}.values[{i}]"))
                .map(|ints| Some((i, ints))),
            _ => Ok(None),
        })
        .collect::<Result<Vec<_>>>()?;
    for (i, ints) in unboxed.into_iter().flatten() {
        values[i] = Value::IntList(ints);
    }
    Ok(values)
}

/// The integers of an `IntList` whose items are the indices of `Int` values.
fn unbox_ints(boxed: &[i64], values: &[Value<'_>], path: &str) -> Result<Vec<i64>> {
    let field = format!("{path}.val.items");
    boxed
        .iter()
        .map(|&index| {
            let at = usize::try_from(index).ok().filter(|&i| i < values.len());
            match at.map(|i| &values[i]) {
                Some(Value::Int(n)) => Ok(*n),
                Some(other) => Err(DecodeError::WrongValueKind {
                    field: field.clone(),
                    index: index as u32,
                    expected: "Int",
                    found: other.kind(),
                }),
                None => Err(DecodeError::IndexOutOfRange {
                    field: field.clone(),
                    index,
                    table: "values",
                    len: values.len(),
                }),
            }
        })
        .collect()
}

fn decode_value<'a>(
    v: fb::EValue<'a>,
    path: &str,
    n_values: usize,
    tables: &Tables<'_>,
) -> Result<Value<'a>> {
    use fb::KernelTypes as K;
    let absent = || missing(path, "val");
    let items = |field: &str| missing(path, &format!("val.{field}"));
    Ok(match v.val_type() {
        K::Null => Value::Null,
        K::Int => Value::Int(v.val_as_int().ok_or_else(absent)?.int_val()),
        K::Bool => Value::Bool(v.val_as_bool().ok_or_else(absent)?.bool_val()),
        K::Double => Value::Double(v.val_as_double().ok_or_else(absent)?.double_val()),
        K::Tensor => Value::Tensor(decode_tensor(
            v.val_as_tensor().ok_or_else(absent)?,
            path,
            tables,
        )?),
        K::String => Value::String(
            v.val_as_string()
                .ok_or_else(absent)?
                .string_val()
                .ok_or_else(|| items("string_val"))?,
        ),
        K::IntList => {
            let l = v.val_as_int_list().ok_or_else(absent)?;
            Value::IntList(l.items().ok_or_else(|| items("items"))?.iter().collect())
        }
        K::DoubleList => {
            let l = v.val_as_double_list().ok_or_else(absent)?;
            Value::DoubleList(l.items().ok_or_else(|| items("items"))?.iter().collect())
        }
        K::BoolList => {
            let l = v.val_as_bool_list().ok_or_else(absent)?;
            Value::BoolList(l.items().ok_or_else(|| items("items"))?.iter().collect())
        }
        K::TensorList => {
            let l = v.val_as_tensor_list().ok_or_else(absent)?;
            let field = format!("{path}.val.items");
            Value::TensorList(indices(
                Some(l.items().ok_or_else(|| items("items"))?),
                &field,
                "values",
                n_values,
            )?)
        }
        K::OptionalTensorList => {
            let l = v.val_as_optional_tensor_list().ok_or_else(absent)?;
            let list = l.items().ok_or_else(|| items("items"))?;
            let mut out = Vec::with_capacity(list.len());
            for (i, x) in list.iter().enumerate() {
                out.push(match x {
                    -1 => None,
                    x => Some(index(
                        i64::from(x),
                        || format!("{path}.val.items[{i}]"),
                        "values",
                        n_values,
                    )?),
                });
            }
            Value::OptionalTensorList(out)
        }
        K::NONE => return Err(absent()),
        other => {
            return Err(DecodeError::UnknownEnum {
                field: format!("{path}.val_type"),
                value: i64::from(other.0),
            });
        }
    })
}

fn decode_tensor<'a>(t: fb::Tensor<'a>, path: &str, tables: &Tables<'_>) -> Result<Tensor<'a>> {
    let scalar_type =
        ScalarType::from_raw(t.scalar_type().0).ok_or_else(|| DecodeError::UnknownEnum {
            field: format!("{path}.val.scalar_type"),
            value: i64::from(t.scalar_type().0),
        })?;
    let shape_dynamism = match t.shape_dynamism() {
        fb::TensorShapeDynamism::STATIC => ShapeDynamism::Static,
        fb::TensorShapeDynamism::DYNAMIC_BOUND => ShapeDynamism::DynamicBound,
        fb::TensorShapeDynamism::DYNAMIC_UNBOUND => ShapeDynamism::DynamicUnbound,
        other => {
            return Err(DecodeError::UnknownEnum {
                field: format!("{path}.val.shape_dynamism"),
                value: i64::from(other.0),
            });
        }
    };
    let allocation = t.allocation_info().map(|a| Allocation {
        memory_id: a.memory_id(),
        offset: u64::from(a.memory_offset_high()) << 32 | u64::from(a.memory_offset_low()),
    });
    let extra = match t.extra_tensor_info() {
        None => None,
        Some(e) => Some(decode_extra(e, path)?),
    };
    let tensor = Tensor {
        scalar_type,
        storage_offset: t.storage_offset(),
        sizes: t.sizes().map(|s| s.iter().collect()).unwrap_or_default(),
        dim_order: t.dim_order().map(|d| d.bytes()).unwrap_or_default(),
        requires_grad: t.requires_grad(),
        data_buffer_idx: t.data_buffer_idx(),
        allocation,
        shape_dynamism,
        extra,
    };
    check_tensor_data(&tensor, path, tables)?;
    Ok(tensor)
}

fn decode_extra<'a>(e: fb::ExtraTensorInfo<'a>, path: &str) -> Result<ExtraTensorInfo<'a>> {
    let external = match e.location() {
        fb::TensorDataLocation::SEGMENT => false,
        fb::TensorDataLocation::EXTERNAL => true,
        other => {
            return Err(DecodeError::UnknownEnum {
                field: format!("{path}.val.extra_tensor_info.location"),
                value: i64::from(other.0),
            });
        }
    };
    Ok(ExtraTensorInfo {
        mutable_data_segments_idx: e.mutable_data_segments_idx(),
        fully_qualified_name: e.fully_qualified_name(),
        external,
        device_type: e.device_type().0,
        device_index: e.device_index(),
    })
}

/// Checks a tensor's data index against the constants or the mutable data it refers to.
fn check_tensor_data(t: &Tensor<'_>, path: &str, tables: &Tables<'_>) -> Result<()> {
    if t.data_buffer_idx == 0 || t.is_external() {
        return Ok(());
    }
    let field = || format!("{path}.val.data_buffer_idx");
    let idx = i64::from(t.data_buffer_idx);
    if t.allocation.is_none() {
        index(idx, field, "constants", tables.constants)?;
        return Ok(());
    }
    let segment = t.extra.map_or(0, |e| e.mutable_data_segments_idx);
    let offsets = usize::try_from(segment)
        .ok()
        .and_then(|s| tables.mutable.get(s))
        .ok_or_else(|| DecodeError::IndexOutOfRange {
            field: format!("{path}.val.extra_tensor_info.mutable_data_segments_idx"),
            index: i64::try_from(segment).unwrap_or(i64::MAX),
            table: "mutable_data_segments",
            len: tables.mutable.len(),
        })?;
    index(idx, field, "mutable_data_segments offsets", *offsets)?;
    Ok(())
}

/// Checks that tensor lists hold tensors, and optional tensor lists tensors or nulls.
fn check_list_kinds(values: &[Value<'_>], path: &str) -> Result<()> {
    let kind_of = |i: u32| values.get(i as usize).map_or("missing value", Value::kind);
    for (v, value) in values.iter().enumerate() {
        let items: Vec<(usize, u32, bool)> = match value {
            Value::TensorList(l) => l.iter().enumerate().map(|(i, &x)| (i, x, false)).collect(),
            Value::OptionalTensorList(l) => l
                .iter()
                .enumerate()
                .filter_map(|(i, x)| x.map(|x| (i, x, true)))
                .collect(),
            _ => continue,
        };
        for (i, x, null_ok) in items {
            let found = kind_of(x);
            if found != "Tensor" && !(null_ok && found == "Null") {
                return Err(DecodeError::WrongValueKind {
                    field: format!("{path}.values[{v}].val.items[{i}]"),
                    index: x,
                    expected: if null_ok { "Tensor or Null" } else { "Tensor" },
                    found,
                });
            }
        }
    }
    Ok(())
}

fn decode_operators<'a>(
    list: Option<FbVec<'a, fb::Operator<'a>>>,
    path: &str,
) -> Result<Vec<Operator<'a>>> {
    list.into_iter()
        .flatten()
        .enumerate()
        .map(|(i, op)| {
            Ok(Operator {
                name: op
                    .name()
                    .ok_or_else(|| missing(&format!("{path}.operators[{i}]"), "name"))?,
                overload: op.overload().unwrap_or_default(),
            })
        })
        .collect()
}

fn decode_delegates<'a>(
    list: Option<FbVec<'a, fb::BackendDelegate<'a>>>,
    path: &str,
    tables: &Tables<'_>,
) -> Result<Vec<Delegate<'a>>> {
    let mut out = Vec::new();
    for (i, d) in list.into_iter().flatten().enumerate() {
        let dpath = format!("{path}.delegates[{i}]");
        let id = d.id().ok_or_else(|| missing(&dpath, "id"))?;
        let processed = d.processed().ok_or_else(|| missing(&dpath, "processed"))?;
        let (location, table, len) = match processed.location() {
            fb::DataLocation::INLINE => (
                DataLocation::Inline,
                "backend_delegate_data",
                tables.inline_data,
            ),
            fb::DataLocation::SEGMENT => (DataLocation::Segment, "segments", tables.segments),
            other => {
                return Err(DecodeError::UnknownEnum {
                    field: format!("{dpath}.processed.location"),
                    value: i64::from(other.0),
                });
            }
        };
        let index = index(
            i64::from(processed.index()),
            || format!("{dpath}.processed.index"),
            table,
            len,
        )?;
        let mut compile_specs = Vec::new();
        for (s, spec) in d.compile_specs().into_iter().flatten().enumerate() {
            let spath = format!("{dpath}.compile_specs[{s}]");
            compile_specs.push(CompileSpec {
                key: spec.key().ok_or_else(|| missing(&spath, "key"))?,
                value: spec.value().map(|v| v.bytes()).unwrap_or_default(),
            });
        }
        out.push(Delegate {
            id,
            processed: DataReference { location, index },
            compile_specs,
        });
    }
    Ok(out)
}

fn decode_chain(chain: fb::Chain<'_>, path: &str, counts: &Counts) -> Result<Chain> {
    let n = counts.values;
    let inputs = indices(chain.inputs(), &format!("{path}.inputs"), "values", n)?;
    let outputs = indices(chain.outputs(), &format!("{path}.outputs"), "values", n)?;
    let n_instructions = chain.instructions().map_or(0, |l| l.len());
    let list = chain.instructions().into_iter().flatten();
    let mut instructions = Vec::with_capacity(n_instructions);
    for (i, instr) in list.enumerate() {
        let ipath = format!("{path}.instructions[{i}]");
        instructions.push(decode_instruction(instr, &ipath, counts, n_instructions)?);
    }
    Ok(Chain {
        inputs,
        outputs,
        instructions,
    })
}

fn decode_instruction(
    instr: fb::Instruction<'_>,
    path: &str,
    counts: &Counts,
    n_instructions: usize,
) -> Result<Instruction> {
    use fb::InstructionArguments as A;
    let absent = || missing(path, "instr_args");
    let n = counts.values;
    let value =
        |v: i32, field: &str| index(i64::from(v), || format!("{path}.{field}"), "values", n);
    Ok(match instr.instr_args_type() {
        A::KernelCall => {
            let k = instr.instr_args_as_kernel_call().ok_or_else(absent)?;
            Instruction::KernelCall {
                op_index: index(
                    i64::from(k.op_index()),
                    || format!("{path}.op_index"),
                    "operators",
                    counts.operators,
                )?,
                args: indices(k.args(), &format!("{path}.args"), "values", n)?,
            }
        }
        A::DelegateCall => {
            let d = instr.instr_args_as_delegate_call().ok_or_else(absent)?;
            Instruction::DelegateCall {
                delegate_index: index(
                    i64::from(d.delegate_index()),
                    || format!("{path}.delegate_index"),
                    "delegates",
                    counts.delegates,
                )?,
                args: indices(d.args(), &format!("{path}.args"), "values", n)?,
            }
        }
        A::MoveCall => {
            let m = instr.instr_args_as_move_call().ok_or_else(absent)?;
            Instruction::MoveCall {
                move_from: value(m.move_from(), "move_from")?,
                move_to: value(m.move_to(), "move_to")?,
            }
        }
        A::JumpFalseCall => {
            let j = instr.instr_args_as_jump_false_call().ok_or_else(absent)?;
            Instruction::JumpFalseCall {
                cond_value_index: value(j.cond_value_index(), "cond_value_index")?,
                destination_instruction: index(
                    i64::from(j.destination_instruction()),
                    || format!("{path}.destination_instruction"),
                    "instructions",
                    n_instructions,
                )?,
            }
        }
        A::FreeCall => {
            let f = instr.instr_args_as_free_call().ok_or_else(absent)?;
            Instruction::FreeCall {
                value_index: value(f.value_index(), "value_index")?,
            }
        }
        A::NONE => return Err(absent()),
        other => {
            return Err(DecodeError::UnknownEnum {
                field: format!("{path}.instr_args_type"),
                value: i64::from(other.0),
            });
        }
    })
}
