//! The `VulkanBackend` payload: the `VH00` header, the `VK00` [`VkGraph`] and its constant bytes.

use std::fmt;

use flatbuffers::{ForwardsUOffset, Vector};

use crate::error::{DecodeError, Result};
use crate::plan::index;
use crate::program::{Program, four, le_u16, le_u32, le_u64, slice, verifier_options};
use crate::vkgraph_generated::vkgraph as fb;

/// The backend id of Vulkan delegates.
pub const VULKAN_BACKEND_ID: &str = "VulkanBackend";
/// The magic of the payload header (bytes 4..8).
pub const VULKAN_HEADER_MAGIC: [u8; 4] = *b"VH00";
/// The FlatBuffers file identifier of a `VkGraph`.
pub const VK_GRAPH_IDENTIFIER: [u8; 4] = *b"VK00";
/// The header length the runtime requires at least (its last field ends there).
pub const VULKAN_HEADER_MIN_LEN: u16 = 30;
/// `VkBytes.offset` meaning "look `named_key` up in the program's named data".
pub const NAMED_DATA_OFFSET: u64 = u64::MAX;

const HEADER: &str = "VH00 header";

/// The payload header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VulkanHeader {
    /// Header length in bytes.
    pub header_len: u16,
    /// Offset of the `VkGraph` FlatBuffers data in the payload.
    pub flatbuffer_offset: u32,
    /// Its size.
    pub flatbuffer_size: u32,
    /// Offset of the constant bytes in the payload.
    pub bytes_offset: u32,
    /// Their size.
    pub bytes_size: u64,
}

impl VulkanHeader {
    /// Reads and checks the header as the runtime does: length at least 30, the flatbuffer
    /// after the header and non-empty, the constant bytes after the flatbuffer, both within
    /// the payload.
    pub fn parse(payload: &[u8]) -> Result<VulkanHeader> {
        let min = usize::from(VULKAN_HEADER_MIN_LEN);
        if payload.len() < min {
            return Err(DecodeError::TooShort {
                what: "the VulkanBackend payload",
                len: payload.len() as u64,
                need: min as u64,
            });
        }
        let found = four(payload, 4);
        if found != VULKAN_HEADER_MAGIC {
            return Err(DecodeError::BadMagic {
                what: "the VulkanBackend payload magic (bytes 4..8)",
                found,
                expected: VULKAN_HEADER_MAGIC,
            });
        }
        let h = VulkanHeader {
            header_len: le_u16(payload, 8),
            flatbuffer_offset: le_u32(payload, 10),
            flatbuffer_size: le_u32(payload, 14),
            bytes_offset: le_u32(payload, 18),
            bytes_size: le_u64(payload, 22),
        };
        h.check(payload.len() as u64)?;
        Ok(h)
    }

    fn check(&self, len: u64) -> Result<()> {
        let bad = |field, value, expected: String| DecodeError::BadHeaderField {
            header: HEADER,
            field,
            value,
            expected,
        };
        if self.header_len < VULKAN_HEADER_MIN_LEN {
            return Err(bad(
                "header_len",
                u64::from(self.header_len),
                format!("at least {VULKAN_HEADER_MIN_LEN}"),
            ));
        }
        if self.flatbuffer_offset < u32::from(self.header_len) {
            return Err(bad(
                "flatbuffer_offset",
                u64::from(self.flatbuffer_offset),
                format!("at least the header length {}", self.header_len),
            ));
        }
        if self.flatbuffer_size == 0 {
            return Err(bad("flatbuffer_size", 0, "more than 0".to_owned()));
        }
        let fb_end = u64::from(self.flatbuffer_offset) + u64::from(self.flatbuffer_size);
        if u64::from(self.bytes_offset) < fb_end {
            return Err(bad(
                "bytes_offset",
                u64::from(self.bytes_offset),
                format!("at least the flatbuffer's end {fb_end}"),
            ));
        }
        if fb_end > len {
            return Err(DecodeError::OutOfBounds {
                field: "the VH00 header's flatbuffer".to_owned(),
                offset: u64::from(self.flatbuffer_offset),
                size: u64::from(self.flatbuffer_size),
                within: "the payload",
                len,
            });
        }
        if u64::from(self.bytes_offset)
            .checked_add(self.bytes_size)
            .is_none_or(|end| end > len)
        {
            return Err(DecodeError::OutOfBounds {
                field: "the VH00 header's constant bytes".to_owned(),
                offset: u64::from(self.bytes_offset),
                size: self.bytes_size,
                within: "the payload",
                len,
            });
        }
        Ok(())
    }
}

/// Element type of a Vulkan tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum VkDataType {
    Bool,
    UInt8,
    Int8,
    Int32,
    Float16,
    Float32,
    Float64,
    Int64,
    /// Not set (for `staging_datatype`: the same as `datatype`).
    Unset,
}

impl VkDataType {
    fn from_fb(t: fb::VkDataType) -> Option<VkDataType> {
        Some(match t {
            fb::VkDataType::BOOL => VkDataType::Bool,
            fb::VkDataType::UINT8 => VkDataType::UInt8,
            fb::VkDataType::INT8 => VkDataType::Int8,
            fb::VkDataType::INT32 => VkDataType::Int32,
            fb::VkDataType::FLOAT16 => VkDataType::Float16,
            fb::VkDataType::FLOAT32 => VkDataType::Float32,
            fb::VkDataType::FLOAT64 => VkDataType::Float64,
            fb::VkDataType::INT64 => VkDataType::Int64,
            fb::VkDataType::UNSET => VkDataType::Unset,
            _ => return None,
        })
    }

    /// Size of one element in bytes (0 for `Unset`).
    pub fn element_size(self) -> u64 {
        match self {
            VkDataType::Bool | VkDataType::UInt8 | VkDataType::Int8 => 1,
            VkDataType::Float16 => 2,
            VkDataType::Int32 | VkDataType::Float32 => 4,
            VkDataType::Float64 | VkDataType::Int64 => 8,
            VkDataType::Unset => 0,
        }
    }
}

/// What kind of GPU resource holds a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum VkStorageType {
    Buffer,
    Texture3D,
    Texture2D,
    /// Chosen by the runtime (or the graph's override).
    Default,
}

impl VkStorageType {
    fn from_fb(t: fb::VkStorageType) -> Option<VkStorageType> {
        Some(match t {
            fb::VkStorageType::BUFFER => VkStorageType::Buffer,
            fb::VkStorageType::TEXTURE_3D => VkStorageType::Texture3D,
            fb::VkStorageType::TEXTURE_2D => VkStorageType::Texture2D,
            fb::VkStorageType::DEFAULT_STORAGE => VkStorageType::Default,
            _ => return None,
        })
    }
}

/// How a tensor is laid out in GPU memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum VkMemoryLayout {
    WidthPacked,
    HeightPacked,
    ChannelsPacked,
    PackedInt8_4W4C,
    PackedInt8_4H4W,
    PackedInt8_4W,
    PackedInt8_4C,
    PackedInt8_4C1W,
    PackedInt8Conv2d,
    /// Chosen by the runtime (or the graph's override).
    Default,
}

impl VkMemoryLayout {
    fn from_fb(t: fb::VkMemoryLayout) -> Option<VkMemoryLayout> {
        use fb::VkMemoryLayout as L;
        Some(match t {
            L::TENSOR_WIDTH_PACKED => VkMemoryLayout::WidthPacked,
            L::TENSOR_HEIGHT_PACKED => VkMemoryLayout::HeightPacked,
            L::TENSOR_CHANNELS_PACKED => VkMemoryLayout::ChannelsPacked,
            L::PACKED_INT8_4W4C => VkMemoryLayout::PackedInt8_4W4C,
            L::PACKED_INT8_4H4W => VkMemoryLayout::PackedInt8_4H4W,
            L::PACKED_INT8_4W => VkMemoryLayout::PackedInt8_4W,
            L::PACKED_INT8_4C => VkMemoryLayout::PackedInt8_4C,
            L::PACKED_INT8_4C1W => VkMemoryLayout::PackedInt8_4C1W,
            L::PACKED_INT8_CONV2D => VkMemoryLayout::PackedInt8Conv2d,
            L::DEFAULT_LAYOUT => VkMemoryLayout::Default,
            _ => return None,
        })
    }
}

/// A tensor of a Vulkan graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VkTensor {
    /// Element type.
    pub datatype: VkDataType,
    /// Sizes, outermost first.
    pub dims: Vec<u32>,
    /// Index into the graph's constants (checked), `None` for a non-constant tensor.
    pub constant_id: Option<u32>,
    /// Shared memory slot, `None` when the tensor has its own memory.
    pub mem_obj_id: Option<u32>,
    /// Storage type.
    pub storage_type: VkStorageType,
    /// Memory layout.
    pub memory_layout: VkMemoryLayout,
    /// Element type of the staging buffer (`Unset`: `datatype`).
    pub staging_datatype: VkDataType,
}

/// A value of a Vulkan graph.
#[derive(Debug, Clone, PartialEq)]
pub enum VkValue<'a> {
    /// None.
    Null,
    /// An integer.
    Int(i64),
    /// A double.
    Double(f64),
    /// A boolean.
    Bool(bool),
    /// A tensor.
    Tensor(VkTensor),
    /// A list of integers.
    IntList(Vec<i64>),
    /// A list of doubles.
    DoubleList(Vec<f64>),
    /// A list of booleans.
    BoolList(Vec<bool>),
    /// A list of value ids (checked).
    ValueList(Vec<u32>),
    /// A string.
    String(&'a str),
    /// A symbolic integer with its initial value.
    SymInt(i32),
}

impl VkValue<'_> {
    /// The kind's name, as the schema spells it.
    pub fn kind(&self) -> &'static str {
        match self {
            VkValue::Null => "Null",
            VkValue::Int(_) => "Int",
            VkValue::Double(_) => "Double",
            VkValue::Bool(_) => "Bool",
            VkValue::Tensor(_) => "VkTensor",
            VkValue::IntList(_) => "IntList",
            VkValue::DoubleList(_) => "DoubleList",
            VkValue::BoolList(_) => "BoolList",
            VkValue::ValueList(_) => "ValueList",
            VkValue::String(_) => "String",
            VkValue::SymInt(_) => "SymInt",
        }
    }
}

/// One node of the graph: an op by its ExecuTorch name and its argument value ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorCall<'a> {
    /// The node id the exporter gave it.
    pub node_id: u32,
    /// The op (`aten.convolution.default`, `et_vk.conv_with_clamp.default`, ...).
    pub name: &'a str,
    /// Value ids (checked), in the op's schema order, the output last.
    pub args: Vec<u32>,
}

/// A region of raw bytes: in the payload's constant bytes, or under a named data key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VkBytes<'a> {
    /// Offset into the payload's constant bytes; [`NAMED_DATA_OFFSET`] for named data.
    pub offset: u64,
    /// Length in bytes.
    pub length: u64,
    /// The key in the program's named data, if any.
    pub named_key: Option<&'a str>,
}

impl VkBytes<'_> {
    /// Whether the bytes are looked up in the program's named data.
    pub fn is_named(&self) -> bool {
        self.offset == NAMED_DATA_OFFSET && self.named_key.is_some()
    }
}

/// A decoded `VulkanBackend` payload, borrowing it.
#[derive(Clone, PartialEq)]
pub struct VkGraph<'a> {
    /// The payload header.
    pub header: VulkanHeader,
    /// The schema version string.
    pub version: &'a str,
    /// The nodes, in execution order.
    pub chain: Vec<OperatorCall<'a>>,
    /// Every value.
    pub values: Vec<VkValue<'a>>,
    /// Value ids of the inputs (checked).
    pub input_ids: Vec<u32>,
    /// Value ids of the outputs (checked).
    pub output_ids: Vec<u32>,
    /// Constant data regions, indexed by `VkTensor::constant_id`.
    pub constants: Vec<VkBytes<'a>>,
    /// Custom shaders.
    pub shaders: Vec<VkBytes<'a>>,
    /// Storage type for tensors that leave theirs to the runtime.
    pub storage_type_override: VkStorageType,
    /// Memory layout for tensors that leave theirs to the runtime.
    pub memory_layout_override: VkMemoryLayout,
    constant_bytes: &'a [u8],
}

type FbVec<'a, T> = Vector<'a, ForwardsUOffset<T>>;

impl fmt::Debug for VkGraph<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VkGraph")
            .field("header", &self.header)
            .field("version", &self.version)
            .field("chain", &self.chain)
            .field("values", &self.values)
            .field("input_ids", &self.input_ids)
            .field("output_ids", &self.output_ids)
            .field("constants", &self.constants)
            .field("shaders", &self.shaders)
            .field("storage_type_override", &self.storage_type_override)
            .field("memory_layout_override", &self.memory_layout_override)
            .field("constant_bytes_len", &self.constant_bytes.len())
            .finish()
    }
}

impl<'a> VkGraph<'a> {
    /// Decodes a `VulkanBackend` payload: header, verified `VkGraph`, every value id and
    /// constant id checked, and every offset-based constant checked to lie within the
    /// payload's constant bytes (named constants need the program: [`VkGraph::constant`]).
    pub fn decode(payload: &'a [u8]) -> Result<VkGraph<'a>> {
        crate::counts::count_vk_graph();
        let header = VulkanHeader::parse(payload)?;
        let fb_bytes = slice(
            payload,
            u64::from(header.flatbuffer_offset),
            u64::from(header.flatbuffer_size),
            || "the VH00 header's flatbuffer".to_owned(),
            "the payload",
        )?;
        let constant_bytes = slice(
            payload,
            u64::from(header.bytes_offset),
            header.bytes_size,
            || "the VH00 header's constant bytes".to_owned(),
            "the payload",
        )?;
        let found = four(fb_bytes, 4);
        if found != VK_GRAPH_IDENTIFIER {
            return Err(DecodeError::BadMagic {
                what: "the VkGraph file identifier",
                found,
                expected: VK_GRAPH_IDENTIFIER,
            });
        }
        let root = flatbuffers::root_with_opts::<fb::VkGraph<'a>>(
            &verifier_options(fb_bytes.len()),
            fb_bytes,
        )
        .map_err(|e| DecodeError::FlatBuffer {
            what: "VkGraph",
            detail: e.to_string(),
        })?;
        Self::from_root(header, root, constant_bytes)
    }

    fn from_root(
        header: VulkanHeader,
        root: fb::VkGraph<'a>,
        constant_bytes: &'a [u8],
    ) -> Result<VkGraph<'a>> {
        let constants = decode_bytes(root.constants());
        let shaders = decode_bytes(root.shaders());
        for (i, c) in constants.iter().enumerate() {
            if !c.is_named() {
                let field = || format!("VkGraph.constants[{i}]");
                slice(
                    constant_bytes,
                    c.offset,
                    c.length,
                    field,
                    "the constant bytes",
                )?;
            }
        }
        let values = decode_values(root.values(), constants.len())?;
        let n = values.len();
        let ids = |list: Option<Vector<'a, u32>>, field: &str| -> Result<Vec<u32>> {
            list.into_iter()
                .flatten()
                .enumerate()
                .map(|(i, v)| {
                    index(
                        i64::from(v),
                        || format!("VkGraph.{field}[{i}]"),
                        "values",
                        n,
                    )
                })
                .collect()
        };
        let input_ids = ids(root.input_ids(), "input_ids")?;
        let output_ids = ids(root.output_ids(), "output_ids")?;
        let mut chain = Vec::new();
        for (c, call) in root.chain().into_iter().flatten().enumerate() {
            let path = format!("VkGraph.chain[{c}]");
            let name = call.name().ok_or_else(|| DecodeError::Missing {
                field: format!("{path}.name"),
            })?;
            let args = call
                .args()
                .into_iter()
                .flatten()
                .enumerate()
                .map(|(i, a)| index(i64::from(a), || format!("{path}.args[{i}]"), "values", n))
                .collect::<Result<Vec<u32>>>()?;
            chain.push(OperatorCall {
                node_id: call.node_id(),
                name,
                args,
            });
        }
        let enum_err = |field: &str, value: u8| DecodeError::UnknownEnum {
            field: format!("VkGraph.{field}"),
            value: i64::from(value),
        };
        let storage = root.storage_type_override();
        let layout = root.memory_layout_override();
        Ok(VkGraph {
            header,
            version: root.version().unwrap_or_default(),
            chain,
            values,
            input_ids,
            output_ids,
            constants,
            shaders,
            storage_type_override: VkStorageType::from_fb(storage)
                .ok_or_else(|| enum_err("storage_type_override", storage.0))?,
            memory_layout_override: VkMemoryLayout::from_fb(layout)
                .ok_or_else(|| enum_err("memory_layout_override", layout.0))?,
            constant_bytes,
        })
    }

    /// The payload's constant bytes region.
    pub fn constant_bytes(&self) -> &'a [u8] {
        self.constant_bytes
    }

    /// The bytes of constant `id`: from the program's named data when its offset is
    /// [`NAMED_DATA_OFFSET`] and it has a key, otherwise from the payload's constant bytes.
    pub fn constant(&self, id: usize, program: &Program<'a>) -> Result<&'a [u8]> {
        let c = self
            .constants
            .get(id)
            .ok_or_else(|| DecodeError::IndexOutOfRange {
                field: "constant id".to_owned(),
                index: i64::try_from(id).unwrap_or(i64::MAX),
                table: "VkGraph.constants",
                len: self.constants.len(),
            })?;
        match c.named_key {
            Some(key) if c.offset == NAMED_DATA_OFFSET => program.named_data(key),
            _ => slice(
                self.constant_bytes,
                c.offset,
                c.length,
                || format!("VkGraph.constants[{id}]"),
                "the constant bytes",
            ),
        }
    }

    /// The distinct op names of the chain, in order of first use, each with the node ids
    /// that use it.
    pub fn op_names(&self) -> Vec<(&'a str, Vec<u32>)> {
        let mut out: Vec<(&'a str, Vec<u32>)> = Vec::new();
        for call in &self.chain {
            match out.iter_mut().find(|(name, _)| *name == call.name) {
                Some((_, nodes)) => nodes.push(call.node_id),
                None => out.push((call.name, vec![call.node_id])),
            }
        }
        out
    }
}

fn decode_bytes<'a>(list: Option<FbVec<'a, fb::VkBytes<'a>>>) -> Vec<VkBytes<'a>> {
    list.into_iter()
        .flatten()
        .map(|b| VkBytes {
            offset: b.offset(),
            length: b.length(),
            named_key: b.named_key(),
        })
        .collect()
}

fn decode_values<'a>(
    list: Option<FbVec<'a, fb::VkValue<'a>>>,
    n_constants: usize,
) -> Result<Vec<VkValue<'a>>> {
    let n = list.map_or(0, |l| l.len());
    let list = list.into_iter().flatten();
    let mut values = Vec::with_capacity(n);
    for (i, v) in list.enumerate() {
        values.push(decode_value(
            v,
            &format!("VkGraph.values[{i}]"),
            n,
            n_constants,
        )?);
    }
    Ok(values)
}

fn decode_value<'a>(
    v: fb::VkValue<'a>,
    path: &str,
    n_values: usize,
    n_constants: usize,
) -> Result<VkValue<'a>> {
    use fb::GraphTypes as G;
    let absent = || DecodeError::Missing {
        field: format!("{path}.value"),
    };
    let items = |field: &str| DecodeError::Missing {
        field: format!("{path}.value.{field}"),
    };
    Ok(match v.value_type() {
        G::Null => VkValue::Null,
        G::Int => VkValue::Int(v.value_as_int().ok_or_else(absent)?.int_val()),
        G::Double => VkValue::Double(v.value_as_double().ok_or_else(absent)?.double_val()),
        G::Bool => VkValue::Bool(v.value_as_bool().ok_or_else(absent)?.bool_val()),
        G::VkTensor => VkValue::Tensor(decode_tensor(
            v.value_as_vk_tensor().ok_or_else(absent)?,
            path,
            n_constants,
        )?),
        G::IntList => {
            let l = v.value_as_int_list().ok_or_else(absent)?;
            VkValue::IntList(l.items().ok_or_else(|| items("items"))?.iter().collect())
        }
        G::DoubleList => {
            let l = v.value_as_double_list().ok_or_else(absent)?;
            VkValue::DoubleList(l.items().ok_or_else(|| items("items"))?.iter().collect())
        }
        G::BoolList => {
            let l = v.value_as_bool_list().ok_or_else(absent)?;
            VkValue::BoolList(l.items().ok_or_else(|| items("items"))?.iter().collect())
        }
        G::ValueList => {
            let l = v.value_as_value_list().ok_or_else(absent)?;
            let list = l.items().ok_or_else(|| items("items"))?;
            let ids = list
                .iter()
                .enumerate()
                .map(|(i, x)| {
                    index(
                        i64::from(x),
                        || format!("{path}.value.items[{i}]"),
                        "values",
                        n_values,
                    )
                })
                .collect::<Result<Vec<u32>>>()?;
            VkValue::ValueList(ids)
        }
        G::String => VkValue::String(
            v.value_as_string()
                .ok_or_else(absent)?
                .string_val()
                .ok_or_else(|| items("string_val"))?,
        ),
        G::SymInt => VkValue::SymInt(v.value_as_sym_int().ok_or_else(absent)?.value()),
        G::NONE => return Err(absent()),
        other => {
            return Err(DecodeError::UnknownEnum {
                field: format!("{path}.value_type"),
                value: i64::from(other.0),
            });
        }
    })
}

fn decode_tensor(t: fb::VkTensor<'_>, path: &str, n_constants: usize) -> Result<VkTensor> {
    let unknown = |field: &str, value: i64| DecodeError::UnknownEnum {
        field: format!("{path}.value.{field}"),
        value,
    };
    let datatype = VkDataType::from_fb(t.datatype())
        .ok_or_else(|| unknown("datatype", i64::from(t.datatype().0)))?;
    let staging_datatype = VkDataType::from_fb(t.staging_datatype())
        .ok_or_else(|| unknown("staging_datatype", i64::from(t.staging_datatype().0)))?;
    let storage_type = VkStorageType::from_fb(t.storage_type())
        .ok_or_else(|| unknown("storage_type", i64::from(t.storage_type().0)))?;
    let memory_layout = VkMemoryLayout::from_fb(t.memory_layout())
        .ok_or_else(|| unknown("memory_layout", i64::from(t.memory_layout().0)))?;
    let constant_id = match t.constant_id() {
        c if c < 0 => None,
        c => Some(index(
            i64::from(c),
            || format!("{path}.value.constant_id"),
            "VkGraph.constants",
            n_constants,
        )?),
    };
    Ok(VkTensor {
        datatype,
        dims: t.dims().map(|d| d.iter().collect()).unwrap_or_default(),
        constant_id,
        mem_obj_id: u32::try_from(t.mem_obj_id()).ok(),
        storage_type,
        memory_layout,
        staging_datatype,
    })
}
