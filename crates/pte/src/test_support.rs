//! Builders of small program files and Vulkan payloads for tests (well-formed and hand-broken
//! ones): not part of the stable API. Behind the feature `test-support`.

use flatbuffers::{FlatBufferBuilder, UnionWIPOffset, WIPOffset};

use crate::program_generated::executorch_flatbuffer as fb;
use crate::vkgraph_generated::vkgraph as vk;

/// Length of the extended header the builder writes (with the segment data size).
pub const EXTENDED_HEADER_LEN: usize = 32;
/// Alignment of segments in built files.
pub const SEGMENT_ALIGN: usize = 16;

/// A value of a plan.
#[derive(Debug, Clone, PartialEq)]
pub enum ValueSpec {
    /// None.
    Null,
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// A double.
    Double(f64),
    /// A tensor.
    Tensor {
        /// Raw scalar type.
        scalar_type: i8,
        /// Sizes.
        sizes: Vec<i32>,
        /// Constant or mutable data index.
        data_buffer_idx: u32,
        /// Planned memory `(memory_id, offset)`.
        allocation: Option<(u32, u64)>,
    },
    /// A string.
    String(String),
    /// Integers, boxed as ExecuTorch writes them: the indices of `Int` values.
    IntList(Vec<i64>),
    /// Doubles.
    DoubleList(Vec<f64>),
    /// Booleans.
    BoolList(Vec<bool>),
    /// Value indices.
    TensorList(Vec<i32>),
    /// Value indices or -1.
    OptionalTensorList(Vec<i32>),
}

/// An instruction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstrSpec {
    /// `KernelCall{op_index, args}`.
    Kernel(i32, Vec<i32>),
    /// `DelegateCall{delegate_index, args}`.
    Delegate(i32, Vec<i32>),
    /// `MoveCall{from, to}`.
    Move(i32, i32),
    /// `JumpFalseCall{cond, destination}`.
    JumpFalse(i32, i32),
    /// `FreeCall{value}`.
    Free(i32),
}

/// A delegate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelegateSpec {
    /// Backend id.
    pub id: String,
    /// INLINE (true) or SEGMENT.
    pub inline: bool,
    /// Index into the inline data or the segments.
    pub index: u32,
    /// Compile specs.
    pub compile_specs: Vec<(String, Vec<u8>)>,
}

/// An execution plan.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PlanSpec {
    /// Name.
    pub name: String,
    /// Values.
    pub values: Vec<ValueSpec>,
    /// Inputs.
    pub inputs: Vec<i32>,
    /// Outputs.
    pub outputs: Vec<i32>,
    /// The one chain's instructions.
    pub instructions: Vec<InstrSpec>,
    /// `(name, overload)`.
    pub operators: Vec<(String, String)>,
    /// Delegates.
    pub delegates: Vec<DelegateSpec>,
}

/// A whole program file.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProgramSpec {
    /// Plans.
    pub plans: Vec<PlanSpec>,
    /// `backend_delegate_data`.
    pub inline_data: Vec<Vec<u8>>,
    /// Segment contents, laid out after the program, each 16-byte aligned.
    pub segments: Vec<Vec<u8>>,
    /// `(key, segment_index)`.
    pub named_data: Vec<(String, u32)>,
    /// `(segment_index, offsets)`.
    pub constant_segment: Option<(u32, Vec<u64>)>,
    /// Legacy inline constants.
    pub constant_buffer: Vec<Vec<u8>>,
    /// Leave out the extended header.
    pub no_extended_header: bool,
}

fn align(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// Builds the file: the program FlatBuffer (`ET12`), the extended header inserted at offset 8
/// (the root offset moved past it), then the segments.
pub fn build_program(spec: &ProgramSpec) -> Vec<u8> {
    let mut offsets = Vec::new();
    let mut at = 0usize;
    for s in &spec.segments {
        offsets.push(at as u64);
        at = align(at + s.len(), SEGMENT_ALIGN);
    }
    let flat = program_flatbuffer(spec, &offsets);
    if spec.no_extended_header {
        return flat;
    }
    let mut out = Vec::with_capacity(flat.len() + EXTENDED_HEADER_LEN + at);
    let root =
        u32::from_le_bytes([flat[0], flat[1], flat[2], flat[3]]) + EXTENDED_HEADER_LEN as u32;
    out.extend_from_slice(&root.to_le_bytes());
    out.extend_from_slice(&flat[4..8]);
    let program_size = flat.len() + EXTENDED_HEADER_LEN;
    let base = if spec.segments.is_empty() {
        0
    } else {
        align(program_size, SEGMENT_ALIGN)
    };
    out.extend_from_slice(b"eh00");
    out.extend_from_slice(&(EXTENDED_HEADER_LEN as u32).to_le_bytes());
    out.extend_from_slice(&(program_size as u64).to_le_bytes());
    out.extend_from_slice(&(base as u64).to_le_bytes());
    out.extend_from_slice(&(at as u64).to_le_bytes());
    out.extend_from_slice(&flat[8..]);
    for (s, &o) in spec.segments.iter().zip(&offsets) {
        out.resize(base + o as usize, 0);
        out.extend_from_slice(s);
    }
    out.resize(base + at, 0);
    out
}

fn program_flatbuffer(spec: &ProgramSpec, segment_offsets: &[u64]) -> Vec<u8> {
    let mut fbb = FlatBufferBuilder::new();
    let plans: Vec<_> = spec.plans.iter().map(|p| plan(&mut fbb, p)).collect();
    let plans = fbb.create_vector(&plans);
    let inline: Vec<_> = spec
        .inline_data
        .iter()
        .map(|d| {
            let data = Some(fbb.create_vector(d));
            fb::BackendDelegateInlineData::create(
                &mut fbb,
                &fb::BackendDelegateInlineDataArgs { data },
            )
        })
        .collect();
    let inline = fbb.create_vector(&inline);
    let segments: Vec<_> = spec
        .segments
        .iter()
        .zip(segment_offsets)
        .map(|(s, &offset)| {
            let args = fb::DataSegmentArgs {
                offset,
                size: s.len() as u64,
            };
            fb::DataSegment::create(&mut fbb, &args)
        })
        .collect();
    let segments = fbb.create_vector(&segments);
    let named: Vec<_> = spec
        .named_data
        .iter()
        .map(|(k, i)| {
            let key = Some(fbb.create_string(k));
            let args = fb::NamedDataArgs {
                key,
                segment_index: *i,
            };
            fb::NamedData::create(&mut fbb, &args)
        })
        .collect();
    let named = fbb.create_vector(&named);
    let constant_segment = spec.constant_segment.as_ref().map(|(i, o)| {
        let offsets = Some(fbb.create_vector(o));
        let args = fb::SubsegmentOffsetsArgs {
            segment_index: *i,
            offsets,
        };
        fb::SubsegmentOffsets::create(&mut fbb, &args)
    });
    let buffers: Vec<_> = spec
        .constant_buffer
        .iter()
        .map(|b| {
            let storage = Some(fbb.create_vector(b));
            fb::Buffer::create(&mut fbb, &fb::BufferArgs { storage })
        })
        .collect();
    let buffers = (!buffers.is_empty()).then(|| fbb.create_vector(&buffers));
    let root = fb::Program::create(
        &mut fbb,
        &fb::ProgramArgs {
            version: 0,
            execution_plan: Some(plans),
            constant_buffer: buffers,
            backend_delegate_data: Some(inline),
            segments: Some(segments),
            constant_segment,
            mutable_data_segments: None,
            named_data: Some(named),
        },
    );
    fb::finish_program_buffer(&mut fbb, root);
    fbb.finished_data().to_vec()
}

fn plan<'a>(fbb: &mut FlatBufferBuilder<'a>, p: &PlanSpec) -> WIPOffset<fb::ExecutionPlan<'a>> {
    let name = Some(fbb.create_string(&p.name));
    let values: Vec<_> = p.values.iter().map(|v| value(fbb, v)).collect();
    let values = Some(fbb.create_vector(&values));
    let inputs = Some(fbb.create_vector(&p.inputs));
    let outputs = Some(fbb.create_vector(&p.outputs));
    let instructions: Vec<_> = p.instructions.iter().map(|i| instruction(fbb, i)).collect();
    let instructions = Some(fbb.create_vector(&instructions));
    let chain = fb::Chain::create(
        fbb,
        &fb::ChainArgs {
            inputs,
            outputs,
            instructions,
            stacktrace: None,
        },
    );
    let chains = Some(fbb.create_vector(&[chain]));
    let operators: Vec<_> = p
        .operators
        .iter()
        .map(|(n, o)| {
            let name = Some(fbb.create_string(n));
            let overload = Some(fbb.create_string(o));
            fb::Operator::create(fbb, &fb::OperatorArgs { name, overload })
        })
        .collect();
    let operators = Some(fbb.create_vector(&operators));
    let delegates: Vec<_> = p.delegates.iter().map(|d| delegate(fbb, d)).collect();
    let delegates = Some(fbb.create_vector(&delegates));
    let non_const_buffer_sizes = Some(fbb.create_vector(&[0i64, 64]));
    fb::ExecutionPlan::create(
        fbb,
        &fb::ExecutionPlanArgs {
            name,
            values,
            inputs,
            outputs,
            chains,
            operators,
            delegates,
            non_const_buffer_sizes,
            ..Default::default()
        },
    )
}

fn delegate<'a>(
    fbb: &mut FlatBufferBuilder<'a>,
    d: &DelegateSpec,
) -> WIPOffset<fb::BackendDelegate<'a>> {
    let id = Some(fbb.create_string(&d.id));
    let location = if d.inline {
        fb::DataLocation::INLINE
    } else {
        fb::DataLocation::SEGMENT
    };
    let processed = Some(fb::BackendDelegateDataReference::create(
        fbb,
        &fb::BackendDelegateDataReferenceArgs {
            location,
            index: d.index,
        },
    ));
    let specs: Vec<_> = d
        .compile_specs
        .iter()
        .map(|(k, v)| {
            let key = Some(fbb.create_string(k));
            let value = Some(fbb.create_vector(v));
            fb::CompileSpec::create(fbb, &fb::CompileSpecArgs { key, value })
        })
        .collect();
    let compile_specs = Some(fbb.create_vector(&specs));
    fb::BackendDelegate::create(
        fbb,
        &fb::BackendDelegateArgs {
            id,
            processed,
            compile_specs,
        },
    )
}

fn value<'a>(fbb: &mut FlatBufferBuilder<'a>, v: &ValueSpec) -> WIPOffset<fb::EValue<'a>> {
    use fb::KernelTypes as K;
    let (val_type, val): (K, WIPOffset<UnionWIPOffset>) = match v {
        ValueSpec::Null => (
            K::Null,
            fb::Null::create(fbb, &fb::NullArgs {}).as_union_value(),
        ),
        ValueSpec::Int(int_val) => (
            K::Int,
            fb::Int::create(fbb, &fb::IntArgs { int_val: *int_val }).as_union_value(),
        ),
        ValueSpec::Bool(bool_val) => (
            K::Bool,
            fb::Bool::create(
                fbb,
                &fb::BoolArgs {
                    bool_val: *bool_val,
                },
            )
            .as_union_value(),
        ),
        ValueSpec::Double(double_val) => (
            K::Double,
            fb::Double::create(
                fbb,
                &fb::DoubleArgs {
                    double_val: *double_val,
                },
            )
            .as_union_value(),
        ),
        ValueSpec::Tensor {
            scalar_type,
            sizes,
            data_buffer_idx,
            allocation,
        } => (
            K::Tensor,
            tensor(fbb, *scalar_type, sizes, *data_buffer_idx, *allocation),
        ),
        ValueSpec::String(s) => {
            let string_val = Some(fbb.create_string(s));
            (
                K::String,
                fb::String::create(fbb, &fb::StringArgs { string_val }).as_union_value(),
            )
        }
        ValueSpec::IntList(l) => {
            let items = Some(fbb.create_vector(l));
            (
                K::IntList,
                fb::IntList::create(fbb, &fb::IntListArgs { items }).as_union_value(),
            )
        }
        ValueSpec::DoubleList(l) => {
            let items = Some(fbb.create_vector(l));
            let t = fb::DoubleList::create(fbb, &fb::DoubleListArgs { items });
            (K::DoubleList, t.as_union_value())
        }
        ValueSpec::BoolList(l) => {
            let items = Some(fbb.create_vector(l));
            (
                K::BoolList,
                fb::BoolList::create(fbb, &fb::BoolListArgs { items }).as_union_value(),
            )
        }
        ValueSpec::TensorList(l) => {
            let items = Some(fbb.create_vector(l));
            let t = fb::TensorList::create(fbb, &fb::TensorListArgs { items });
            (K::TensorList, t.as_union_value())
        }
        ValueSpec::OptionalTensorList(l) => {
            let items = Some(fbb.create_vector(l));
            let t = fb::OptionalTensorList::create(fbb, &fb::OptionalTensorListArgs { items });
            (K::OptionalTensorList, t.as_union_value())
        }
    };
    fb::EValue::create(
        fbb,
        &fb::EValueArgs {
            val_type,
            val: Some(val),
        },
    )
}

fn tensor(
    fbb: &mut FlatBufferBuilder<'_>,
    scalar_type: i8,
    sizes: &[i32],
    data_buffer_idx: u32,
    allocation: Option<(u32, u64)>,
) -> WIPOffset<UnionWIPOffset> {
    let dim_order: Vec<u8> = (0..sizes.len() as u8).collect();
    let dim_order = Some(fbb.create_vector(&dim_order));
    let sizes = Some(fbb.create_vector(sizes));
    let allocation_info = allocation.map(|(memory_id, offset)| {
        let args = fb::AllocationDetailsArgs {
            memory_id,
            memory_offset_low: offset as u32,
            memory_offset_high: (offset >> 32) as u32,
        };
        fb::AllocationDetails::create(fbb, &args)
    });
    let args = fb::TensorArgs {
        scalar_type: fb::ScalarType(scalar_type),
        sizes,
        dim_order,
        data_buffer_idx,
        allocation_info,
        ..Default::default()
    };
    fb::Tensor::create(fbb, &args).as_union_value()
}

fn instruction<'a>(
    fbb: &mut FlatBufferBuilder<'a>,
    i: &InstrSpec,
) -> WIPOffset<fb::Instruction<'a>> {
    use fb::InstructionArguments as A;
    let (kind, args) = match i {
        InstrSpec::Kernel(op_index, args) => {
            let args = Some(fbb.create_vector(args));
            let k = fb::KernelCall::create(
                fbb,
                &fb::KernelCallArgs {
                    op_index: *op_index,
                    args,
                },
            );
            (A::KernelCall, k.as_union_value())
        }
        InstrSpec::Delegate(delegate_index, args) => {
            let args = Some(fbb.create_vector(args));
            let d = fb::DelegateCall::create(
                fbb,
                &fb::DelegateCallArgs {
                    delegate_index: *delegate_index,
                    args,
                },
            );
            (A::DelegateCall, d.as_union_value())
        }
        InstrSpec::Move(move_from, move_to) => {
            let args = fb::MoveCallArgs {
                move_from: *move_from,
                move_to: *move_to,
            };
            (
                A::MoveCall,
                fb::MoveCall::create(fbb, &args).as_union_value(),
            )
        }
        InstrSpec::JumpFalse(cond_value_index, destination_instruction) => {
            let args = fb::JumpFalseCallArgs {
                cond_value_index: *cond_value_index,
                destination_instruction: *destination_instruction,
            };
            (
                A::JumpFalseCall,
                fb::JumpFalseCall::create(fbb, &args).as_union_value(),
            )
        }
        InstrSpec::Free(value_index) => {
            let args = fb::FreeCallArgs {
                value_index: *value_index,
            };
            (
                A::FreeCall,
                fb::FreeCall::create(fbb, &args).as_union_value(),
            )
        }
    };
    fb::Instruction::create(
        fbb,
        &fb::InstructionArgs {
            instr_args_type: kind,
            instr_args: Some(args),
        },
    )
}

/// A value of a Vulkan graph.
#[derive(Debug, Clone, PartialEq)]
pub enum VkValueSpec {
    /// None.
    Null,
    /// An integer.
    Int(i64),
    /// A double.
    Double(f64),
    /// A boolean.
    Bool(bool),
    /// A tensor.
    Tensor {
        /// Raw `VkDataType`.
        datatype: i8,
        /// Sizes.
        dims: Vec<u32>,
        /// Constant id (negative: none).
        constant_id: i32,
        /// Shared memory slot (negative: none).
        mem_obj_id: i32,
    },
    /// Integers.
    IntList(Vec<i64>),
    /// Doubles.
    DoubleList(Vec<f64>),
    /// Booleans.
    BoolList(Vec<bool>),
    /// Value ids.
    ValueList(Vec<i32>),
    /// A string.
    String(String),
    /// A symbolic integer.
    SymInt(i32),
}

/// A Vulkan graph with its constant bytes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct VkGraphSpec {
    /// Values.
    pub values: Vec<VkValueSpec>,
    /// `(node_id, name, args)`.
    pub chain: Vec<(u32, String, Vec<i32>)>,
    /// Input ids.
    pub input_ids: Vec<u32>,
    /// Output ids.
    pub output_ids: Vec<u32>,
    /// `(offset, length, named_key)`.
    pub constants: Vec<(u64, u64, Option<String>)>,
    /// The payload's constant bytes.
    pub constant_bytes: Vec<u8>,
}

/// Offset of the flatbuffer in built payloads (the serializer pads the header to 32).
pub const VK_FLATBUFFER_OFFSET: usize = 32;

/// Builds a `VulkanBackend` payload: the 30-byte `VH00` header padded to 32, the `VkGraph`,
/// then the constant bytes, 16-byte aligned.
pub fn build_vulkan_payload(spec: &VkGraphSpec) -> Vec<u8> {
    let flat = vk_graph_flatbuffer(spec);
    let bytes_offset = align(VK_FLATBUFFER_OFFSET + flat.len(), 16);
    let mut out = Vec::with_capacity(bytes_offset + spec.constant_bytes.len());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(b"VH00");
    out.extend_from_slice(&30u16.to_le_bytes());
    out.extend_from_slice(&(VK_FLATBUFFER_OFFSET as u32).to_le_bytes());
    out.extend_from_slice(&(flat.len() as u32).to_le_bytes());
    out.extend_from_slice(&(bytes_offset as u32).to_le_bytes());
    out.extend_from_slice(&(spec.constant_bytes.len() as u64).to_le_bytes());
    out.resize(VK_FLATBUFFER_OFFSET, 0);
    out.extend_from_slice(&flat);
    out.resize(bytes_offset, 0);
    out.extend_from_slice(&spec.constant_bytes);
    out
}

fn vk_graph_flatbuffer(spec: &VkGraphSpec) -> Vec<u8> {
    let mut fbb = FlatBufferBuilder::new();
    let version = Some(fbb.create_string("0"));
    let values: Vec<_> = spec.values.iter().map(|v| vk_value(&mut fbb, v)).collect();
    let values = Some(fbb.create_vector(&values));
    let chain: Vec<_> = spec
        .chain
        .iter()
        .map(|(node_id, name, args)| {
            let name = Some(fbb.create_string(name));
            let args = Some(fbb.create_vector(args));
            let a = vk::OperatorCallArgs {
                node_id: *node_id,
                name,
                args,
            };
            vk::OperatorCall::create(&mut fbb, &a)
        })
        .collect();
    let chain = Some(fbb.create_vector(&chain));
    let input_ids = Some(fbb.create_vector(&spec.input_ids));
    let output_ids = Some(fbb.create_vector(&spec.output_ids));
    let constants: Vec<_> = spec
        .constants
        .iter()
        .map(|(offset, length, key)| {
            let named_key = key.as_ref().map(|k| fbb.create_string(k));
            let a = vk::VkBytesArgs {
                offset: *offset,
                length: *length,
                named_key,
            };
            vk::VkBytes::create(&mut fbb, &a)
        })
        .collect();
    let constants = Some(fbb.create_vector(&constants));
    let root = vk::VkGraph::create(
        &mut fbb,
        &vk::VkGraphArgs {
            version,
            chain,
            values,
            input_ids,
            output_ids,
            constants,
            ..Default::default()
        },
    );
    vk::finish_vk_graph_buffer(&mut fbb, root);
    fbb.finished_data().to_vec()
}

fn vk_value<'a>(fbb: &mut FlatBufferBuilder<'a>, v: &VkValueSpec) -> WIPOffset<vk::VkValue<'a>> {
    use vk::GraphTypes as G;
    let (value_type, value): (G, WIPOffset<UnionWIPOffset>) = match v {
        VkValueSpec::Null => (
            G::Null,
            vk::Null::create(fbb, &vk::NullArgs {}).as_union_value(),
        ),
        VkValueSpec::Int(int_val) => (
            G::Int,
            vk::Int::create(fbb, &vk::IntArgs { int_val: *int_val }).as_union_value(),
        ),
        VkValueSpec::Double(double_val) => (
            G::Double,
            vk::Double::create(
                fbb,
                &vk::DoubleArgs {
                    double_val: *double_val,
                },
            )
            .as_union_value(),
        ),
        VkValueSpec::Bool(bool_val) => (
            G::Bool,
            vk::Bool::create(
                fbb,
                &vk::BoolArgs {
                    bool_val: *bool_val,
                },
            )
            .as_union_value(),
        ),
        VkValueSpec::Tensor {
            datatype,
            dims,
            constant_id,
            mem_obj_id,
        } => {
            let dims = Some(fbb.create_vector(dims));
            let a = vk::VkTensorArgs {
                datatype: vk::VkDataType(*datatype),
                dims,
                constant_id: *constant_id,
                mem_obj_id: *mem_obj_id,
                ..Default::default()
            };
            (G::VkTensor, vk::VkTensor::create(fbb, &a).as_union_value())
        }
        VkValueSpec::IntList(l) => {
            let items = Some(fbb.create_vector(l));
            (
                G::IntList,
                vk::IntList::create(fbb, &vk::IntListArgs { items }).as_union_value(),
            )
        }
        VkValueSpec::DoubleList(l) => {
            let items = Some(fbb.create_vector(l));
            let t = vk::DoubleList::create(fbb, &vk::DoubleListArgs { items });
            (G::DoubleList, t.as_union_value())
        }
        VkValueSpec::BoolList(l) => {
            let items = Some(fbb.create_vector(l));
            (
                G::BoolList,
                vk::BoolList::create(fbb, &vk::BoolListArgs { items }).as_union_value(),
            )
        }
        VkValueSpec::ValueList(l) => {
            let items = Some(fbb.create_vector(l));
            let t = vk::ValueList::create(fbb, &vk::ValueListArgs { items });
            (G::ValueList, t.as_union_value())
        }
        VkValueSpec::String(s) => {
            let string_val = Some(fbb.create_string(s));
            (
                G::String,
                vk::String::create(fbb, &vk::StringArgs { string_val }).as_union_value(),
            )
        }
        VkValueSpec::SymInt(value) => (
            G::SymInt,
            vk::SymInt::create(fbb, &vk::SymIntArgs { value: *value }).as_union_value(),
        ),
    };
    vk::VkValue::create(
        fbb,
        &vk::VkValueArgs {
            value_type,
            value: Some(value),
        },
    )
}

/// Overwrites a little-endian u32 at `at`.
pub fn put_u32(bytes: &mut [u8], at: usize, v: u32) {
    if let Some(b) = bytes.get_mut(at..at + 4) {
        b.copy_from_slice(&v.to_le_bytes());
    }
}

/// Overwrites a little-endian u64 at `at`.
pub fn put_u64(bytes: &mut [u8], at: usize, v: u64) {
    if let Some(b) = bytes.get_mut(at..at + 8) {
        b.copy_from_slice(&v.to_le_bytes());
    }
}

/// Bytes of the constant the sample graph stores by key (`w0`).
pub const SAMPLE_NAMED: [u8; 16] = *b"named-weights-w0";
/// Bytes of the constant the sample graph stores in its payload.
pub const SAMPLE_INLINE_CONSTANT: [u8; 16] = *b"payload-constant";
/// The sample VGF payload (not a real VGF file).
pub const SAMPLE_VGF: &[u8] = b"VGF1 raw bytes of a VGF file";

/// A Vulkan graph with every value kind, three nodes of two ops, and one constant by offset
/// and one by the named data key `w0`.
pub fn sample_vk_graph() -> VkGraphSpec {
    use VkValueSpec as V;
    let tensor = |dims: Vec<u32>, constant_id, mem_obj_id| V::Tensor {
        datatype: 5,
        dims,
        constant_id,
        mem_obj_id,
    };
    VkGraphSpec {
        values: vec![
            tensor(vec![1, 2, 2, 2], -1, 0),
            tensor(vec![2, 2], 0, -1),
            tensor(vec![4], 1, -1),
            V::Null,
            V::Int(7),
            V::Double(0.25),
            V::Bool(true),
            V::IntList(vec![1, -2, 3]),
            V::DoubleList(vec![1.5, 2.5]),
            V::BoolList(vec![false, true]),
            V::ValueList(vec![0, 1]),
            V::String("hello".to_owned()),
            V::SymInt(5),
            tensor(vec![1, 2, 2, 2], -1, 1),
        ],
        chain: vec![
            (0, "aten.add.Tensor".to_owned(), vec![0, 1, 13]),
            (1, "aten.mul.Tensor".to_owned(), vec![13, 2, 13]),
            (2, "aten.add.Tensor".to_owned(), vec![13, 4, 13]),
        ],
        input_ids: vec![0],
        output_ids: vec![13],
        constants: vec![(0, 16, None), (u64::MAX, 16, Some("w0".to_owned()))],
        constant_bytes: SAMPLE_INLINE_CONSTANT.to_vec(),
    }
}

/// A program with two plans: `forward` (every value kind, every instruction kind, a Vulkan
/// delegate in a segment and a VGF delegate inline) and `second`; named data `w0`; a constant
/// segment with one constant.
pub fn sample_program() -> ProgramSpec {
    use ValueSpec as V;
    let float = |sizes: Vec<i32>, data_buffer_idx, allocation| V::Tensor {
        scalar_type: 6,
        sizes,
        data_buffer_idx,
        allocation,
    };
    let forward = PlanSpec {
        name: "forward".to_owned(),
        values: vec![
            float(vec![1, 2, 2, 2], 0, Some((1, 0))),
            float(vec![2, 2], 1, None),
            V::Int(3),
            V::Bool(true),
            V::Double(0.5),
            V::String("hello".to_owned()),
            V::IntList(vec![2, 2]),
            V::DoubleList(vec![1.5]),
            V::BoolList(vec![true, false]),
            V::TensorList(vec![0, 1]),
            V::OptionalTensorList(vec![0, -1, 11]),
            V::Null,
            float(vec![1, 2, 2, 2], 0, Some((1, 1 << 32 | 32))),
        ],
        inputs: vec![0],
        outputs: vec![12],
        instructions: vec![
            InstrSpec::Delegate(0, vec![0, 12]),
            InstrSpec::Kernel(0, vec![12, 1, 12]),
            InstrSpec::Move(12, 0),
            InstrSpec::JumpFalse(3, 5),
            InstrSpec::Free(0),
            InstrSpec::Delegate(1, vec![12, 12]),
        ],
        operators: vec![("aten::add".to_owned(), "out".to_owned())],
        delegates: vec![
            DelegateSpec {
                id: "VulkanBackend".to_owned(),
                inline: false,
                index: 0,
                compile_specs: vec![("storage_type_override".to_owned(), vec![1, 0, 0, 0])],
            },
            DelegateSpec {
                id: "VgfBackend".to_owned(),
                inline: true,
                index: 0,
                compile_specs: vec![("tosa_spec".to_owned(), b"TOSA-1.0+FP".to_vec())],
            },
        ],
    };
    let second = PlanSpec {
        name: "second".to_owned(),
        values: vec![V::Int(1), float(vec![2], 0, Some((1, 0)))],
        inputs: vec![1],
        outputs: vec![1],
        instructions: vec![InstrSpec::Free(1)],
        ..Default::default()
    };
    let mut constants = vec![0u8; 16];
    constants.extend_from_slice(b"0123456789abcdef");
    ProgramSpec {
        plans: vec![forward, second],
        inline_data: vec![SAMPLE_VGF.to_vec()],
        segments: vec![
            build_vulkan_payload(&sample_vk_graph()),
            SAMPLE_NAMED.to_vec(),
            constants,
        ],
        named_data: vec![("w0".to_owned(), 1)],
        constant_segment: Some((2, vec![0, 16])),
        constant_buffer: Vec::new(),
        no_extended_header: false,
    }
}
