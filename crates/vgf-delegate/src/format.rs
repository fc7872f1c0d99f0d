//! The VGF decoder: header, module table, model sequence table, model resource table and
//! constants, with every count, offset and index checked.
//!
//! [`Vgf::decode`] borrows the file: SPIR-V code, constant data and names point into it. Small
//! metadata (bindings, shapes) is copied into vectors whose lengths come from verified
//! FlatBuffers vectors (each element occupies bytes of the file, so no allocation exceeds a
//! small multiple of the file size).

use std::borrow::Cow;
use std::fmt;

use flatbuffers::{ForwardsUOffset, Vector, VerifierOptions};

use crate::error::DecodeError;
pub use crate::version::FormatVersion;
use crate::vgf_generated::vgf as fb;

/// Size of the fixed header.
pub const HEADER_SIZE: usize = 128;
/// The FourCC magic.
pub const MAGIC: [u8; 4] = *b"VGF1";
/// The deprecated pre-FourCC magic (a little-endian u32).
pub const MAGIC_OLD: u32 = 0xF0E1_D2C3;
/// The tag that opens a raw constants section.
pub const CONST00: [u8; 8] = *b"CONST00\0";
/// `VK_DESCRIPTOR_TYPE_TENSOR_ARM`, as VGF stores it.
pub const DESCRIPTOR_TYPE_TENSOR_ARM: u32 = 1_000_460_000;
/// "No value" for optional u32 fields (descriptor type, set index, alias group).
pub const UNSET: u32 = u32::MAX;

#[cfg(any(test, feature = "test-support"))]
#[doc(hidden)]
pub mod test_support;

const SECTION_NAMES: [&str; 4] = [
    "module table",
    "model sequence table",
    "model resource table",
    "constants",
];

/// One section of the file: offset from the file start and size in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Section {
    /// Offset from the start of the file.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
}

/// The fixed 128-byte header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Whether the file carries the deprecated pre-FourCC magic.
    pub legacy_magic: bool,
    /// Vulkan header version of the encoder (0 when not recorded).
    pub vk_header_version: u16,
    /// Format version.
    pub version: FormatVersion,
    /// Module table, sequence table, resource table, constants.
    pub sections: [Section; 4],
}

/// COMPUTE or GRAPH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModuleType {
    /// A compute shader, run as a compute pipeline.
    Compute,
    /// A SPIR-V graph, run as a data-graph pipeline.
    Graph,
}

impl ModuleType {
    /// `COMPUTE` or `GRAPH`, as `vgf_dump` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ModuleType::Compute => "COMPUTE",
            ModuleType::Graph => "GRAPH",
        }
    }
}

/// SPIR-V code borrowed from the file (little-endian words).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Spirv<'a> {
    bytes: &'a [u8],
}

impl fmt::Debug for Spirv<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Spirv({} words)", self.word_count())
    }
}

impl<'a> Spirv<'a> {
    /// The code as bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Number of 32-bit words.
    pub fn word_count(&self) -> usize {
        self.bytes.len() / 4
    }

    /// The words: borrowed when the file bytes are 4-byte aligned on a little-endian host,
    /// copied otherwise.
    pub fn words(&self) -> Cow<'a, [u32]> {
        if cfg!(target_endian = "little") {
            // SAFETY: every bit pattern is a valid u32; `align_to` only yields the middle part
            // at a correctly aligned address.
            let (head, mid, tail) = unsafe { self.bytes.align_to::<u32>() };
            if head.is_empty() && tail.is_empty() {
                return Cow::Borrowed(mid);
            }
        }
        Cow::Owned(
            self.bytes
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        )
    }
}

/// One module of the module table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Module<'a> {
    /// COMPUTE or GRAPH.
    pub kind: ModuleType,
    /// Name.
    pub name: &'a str,
    /// Entry point.
    pub entry_point: &'a str,
    /// SPIR-V code, when the file carries it (a module without code expects it from
    /// elsewhere).
    pub spirv: Option<Spirv<'a>>,
}

/// A binding slot: a descriptor binding and the resource it refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Binding {
    /// Descriptor binding number.
    pub binding: u32,
    /// Index into the model resource table.
    pub mrt_index: u32,
}

/// One descriptor set of a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorSet {
    /// The set number: explicit, or the position in the segment's list.
    pub set_index: u32,
    /// Whether the set number was explicit in the file.
    pub explicit_index: bool,
    /// Its bindings.
    pub bindings: Vec<Binding>,
}

/// A push constant range of a COMPUTE segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushConstantRange {
    /// `VkShaderStageFlags`.
    pub stage_flags: u32,
    /// Offset in bytes.
    pub offset: u32,
    /// Size in bytes.
    pub size: u32,
}

/// Which graph constant id takes which constant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConstantBinding {
    /// The `OpGraphConstantARM` id in the module.
    pub graph_constant_id: u32,
    /// Index into the constants section.
    pub constant_index: u32,
}

/// One segment of the model sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment<'a> {
    /// COMPUTE or GRAPH (equal to its module's type).
    pub kind: ModuleType,
    /// Name.
    pub name: &'a str,
    /// Index into the module table.
    pub module_index: u32,
    /// Descriptor sets.
    pub descriptor_sets: Vec<DescriptorSet>,
    /// Inputs.
    pub inputs: Vec<Binding>,
    /// Outputs.
    pub outputs: Vec<Binding>,
    /// Indices into the constants section.
    pub constants: Vec<u32>,
    /// Dispatch shape (COMPUTE), when present.
    pub dispatch_shape: Option<[u32; 3]>,
    /// Push constant ranges (COMPUTE).
    pub push_constant_ranges: Vec<PushConstantRange>,
    /// Explicit graph constant bindings (0.5.x); empty when the file has none.
    pub constant_bindings: Vec<ConstantBinding>,
}

impl Segment<'_> {
    /// The graph constants of this segment as (graph constant id, constant index): the explicit
    /// bindings when present, otherwise each constant's id equals its index.
    pub fn graph_constants(&self) -> Vec<ConstantBinding> {
        if self.constant_bindings.is_empty() {
            self.constants
                .iter()
                .map(|&c| ConstantBinding {
                    graph_constant_id: c,
                    constant_index: c,
                })
                .collect()
        } else {
            self.constant_bindings.clone()
        }
    }
}

/// The model sequence table.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Sequence<'a> {
    /// Segments, in execution order.
    pub segments: Vec<Segment<'a>>,
    /// Model inputs, in order.
    pub inputs: Vec<Binding>,
    /// Model outputs, in order.
    pub outputs: Vec<Binding>,
    /// Names of the inputs (empty, or one per input).
    pub input_names: Vec<&'a str>,
    /// Names of the outputs (empty, or one per output).
    pub output_names: Vec<&'a str>,
}

/// Resource categories.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    /// A model input.
    Input,
    /// A model output.
    Output,
    /// Between segments.
    Intermediate,
    /// A constant (graph constant).
    Constant,
}

impl Category {
    /// As `vgf_dump` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Input => "INPUT",
            Category::Output => "OUTPUT",
            Category::Intermediate => "INTERMEDIATE",
            Category::Constant => "CONSTANT",
        }
    }
}

/// Sampler configuration of an image resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SamplerConfig {
    /// `VkFilter`.
    pub min_filter: u32,
    /// `VkFilter`.
    pub mag_filter: u32,
    /// `VkSamplerAddressMode`.
    pub address_mode_u: u32,
    /// `VkSamplerAddressMode`.
    pub address_mode_v: u32,
    /// `VkBorderColor`.
    pub border_color: u32,
}

/// One model resource table entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// Position in the table.
    pub index: usize,
    /// Category.
    pub category: Category,
    /// `VkDescriptorType`, if any (constants have none).
    pub vk_descriptor_type: Option<u32>,
    /// `VkFormat`.
    pub vk_format: u32,
    /// Shape (outermost first).
    pub shape: Vec<i64>,
    /// Strides in bytes (empty: packed).
    pub strides: Vec<i64>,
    /// Sampler configuration, if any.
    pub sampler: Option<SamplerConfig>,
    /// Alias group (entries of one group share storage), if any.
    pub alias_group: Option<u32>,
}

/// How the constants section is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConstantsLayout {
    /// No constants section (size 0).
    Empty,
    /// `CONST00` raw layout.
    Const00,
    /// The legacy FlatBuffers layout.
    Legacy,
}

/// One constant.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Constant<'a> {
    /// Index into the model resource table (its shape and format).
    pub mrt_index: u32,
    /// Sparsity dimension (-1: dense).
    pub sparsity_dimension: i64,
    /// The data, borrowed from the file.
    pub data: &'a [u8],
}

impl fmt::Debug for Constant<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Constant")
            .field("mrt_index", &self.mrt_index)
            .field("sparsity_dimension", &self.sparsity_dimension)
            .field("bytes", &self.data.len())
            .finish()
    }
}

/// A decoded VGF file, borrowing from its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vgf<'a> {
    /// Header.
    pub header: Header,
    /// Module table.
    pub modules: Vec<Module<'a>>,
    /// Model sequence table.
    pub sequence: Sequence<'a>,
    /// Model resource table.
    pub resources: Vec<Resource>,
    /// Constants section layout.
    pub constants_layout: ConstantsLayout,
    /// Constants.
    pub constants: Vec<Constant<'a>>,
}

// ---- little helpers --------------------------------------------------------------------

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn verifier_options(len: usize) -> VerifierOptions {
    VerifierOptions {
        max_depth: 16,
        // A table needs at least 4 bytes of the buffer.
        max_tables: len / 4 + 1,
        max_apparent_size: len.saturating_mul(16).min(1 << 31),
        ignore_missing_null_terminator: false,
    }
}

fn verified_root<'a, T>(bytes: &'a [u8]) -> Result<T::Inner, flatbuffers::InvalidFlatbuffer>
where
    T: flatbuffers::Follow<'a> + flatbuffers::Verifiable + 'a,
{
    let opts = verifier_options(bytes.len());
    flatbuffers::root_with_opts::<T>(&opts, bytes)
}

fn flatbuffer_error(section: &'static str, e: &flatbuffers::InvalidFlatbuffer) -> DecodeError {
    DecodeError::FlatBuffer {
        section,
        detail: e.to_string().lines().next().unwrap_or("").to_string(),
    }
}

fn root<'a, T>(section: &'static str, bytes: &'a [u8]) -> Result<T::Inner, DecodeError>
where
    T: flatbuffers::Follow<'a> + flatbuffers::Verifiable + 'a,
{
    verified_root::<T>(bytes).map_err(|e| flatbuffer_error(section, &e))
}

/// Collects a verified vector of binding slots.
fn bindings(v: Option<Vector<'_, ForwardsUOffset<fb::BindingSlot<'_>>>>) -> Vec<Binding> {
    v.map(|v| {
        v.iter()
            .map(|b| Binding {
                binding: b.binding(),
                mrt_index: b.mrt_index(),
            })
            .collect()
    })
    .unwrap_or_default()
}

impl<'a> Vgf<'a> {
    /// Decodes a VGF file. Every section is verified before use; the error names the field
    /// and the numbers involved.
    pub fn decode(bytes: &'a [u8]) -> Result<Vgf<'a>, DecodeError> {
        DECODES.with(|c| c.set(c.get() + 1));
        let header = decode_header(bytes)?;
        let section = |i: usize| -> &'a [u8] {
            let s = header.sections[i];
            // In range: checked by `decode_header`.
            &bytes[s.offset as usize..(s.offset + s.size) as usize]
        };
        let modules = decode_modules(section(0))?;
        let resources = decode_resources(section(2))?;
        let (constants_layout, constants) = decode_constants(section(3))?;
        let sequence = decode_sequence(section(1))?;
        let vgf = Vgf {
            header,
            modules,
            sequence,
            resources,
            constants_layout,
            constants,
        };
        vgf.check_references()?;
        Ok(vgf)
    }

    /// Checks every index between tables.
    fn check_references(&self) -> Result<(), DecodeError> {
        let n_res = self.resources.len();
        let mrt = |field: String, index: u32| -> Result<(), DecodeError> {
            if (index as usize) < n_res {
                Ok(())
            } else {
                Err(DecodeError::IndexOutOfRange {
                    field,
                    index: index.into(),
                    len: n_res,
                })
            }
        };
        for (i, c) in self.constants.iter().enumerate() {
            mrt(format!("constants[{i}].mrt_index"), c.mrt_index)?;
        }
        let seq = &self.sequence;
        for (i, b) in seq.inputs.iter().enumerate() {
            mrt(format!("sequence.inputs[{i}].mrt_index"), b.mrt_index)?;
        }
        for (i, b) in seq.outputs.iter().enumerate() {
            mrt(format!("sequence.outputs[{i}].mrt_index"), b.mrt_index)?;
        }
        for (which, names, slots) in [
            ("input_names", &seq.input_names, seq.inputs.len()),
            ("output_names", &seq.output_names, seq.outputs.len()),
        ] {
            if !names.is_empty() && names.len() != slots {
                return Err(DecodeError::CountMismatch {
                    field: format!("sequence.{which}"),
                    count: names.len(),
                    expected: slots,
                });
            }
        }
        for (s, seg) in seq.segments.iter().enumerate() {
            let module = self.modules.get(seg.module_index as usize).ok_or_else(|| {
                DecodeError::IndexOutOfRange {
                    field: format!("segments[{s}].module_index"),
                    index: seg.module_index.into(),
                    len: self.modules.len(),
                }
            })?;
            if module.kind != seg.kind {
                return Err(DecodeError::TypeMismatch {
                    segment: s,
                    segment_type: seg.kind.as_str(),
                    module: seg.module_index,
                    module_type: module.kind.as_str(),
                });
            }
            for (d, set) in seg.descriptor_sets.iter().enumerate() {
                for (k, b) in set.bindings.iter().enumerate() {
                    mrt(
                        format!("segments[{s}].set_infos[{d}].bindings[{k}].mrt_index"),
                        b.mrt_index,
                    )?;
                }
            }
            for (k, b) in seg.inputs.iter().enumerate() {
                mrt(format!("segments[{s}].inputs[{k}].mrt_index"), b.mrt_index)?;
            }
            for (k, b) in seg.outputs.iter().enumerate() {
                mrt(format!("segments[{s}].outputs[{k}].mrt_index"), b.mrt_index)?;
            }
            let n_const = self.constants.len();
            let cst = |field: String, index: u32| -> Result<(), DecodeError> {
                if (index as usize) < n_const {
                    Ok(())
                } else {
                    Err(DecodeError::IndexOutOfRange {
                        field,
                        index: index.into(),
                        len: n_const,
                    })
                }
            };
            for (k, &c) in seg.constants.iter().enumerate() {
                cst(format!("segments[{s}].constants[{k}]"), c)?;
            }
            for (k, b) in seg.constant_bindings.iter().enumerate() {
                cst(
                    format!("segments[{s}].constant_bindings[{k}].constant_index"),
                    b.constant_index,
                )?;
            }
        }
        Ok(())
    }

    /// The resource at `index`, if any.
    pub fn resource(&self, index: u32) -> Option<&Resource> {
        self.resources.get(index as usize)
    }
}

fn decode_header(bytes: &[u8]) -> Result<Header, DecodeError> {
    if bytes.len() < HEADER_SIZE {
        return Err(DecodeError::TooShort {
            len: bytes.len(),
            need: HEADER_SIZE,
        });
    }
    let magic = [bytes[0], bytes[1], bytes[2], bytes[3]];
    let legacy_magic = if magic == MAGIC {
        false
    } else if u32_at(bytes, 0) == MAGIC_OLD {
        true
    } else {
        return Err(DecodeError::BadMagic { found: magic });
    };
    let version = FormatVersion {
        major: bytes[8],
        minor: bytes[9],
        patch: bytes[10],
    };
    if version.major != 0 || !(4..=5).contains(&version.minor) {
        return Err(DecodeError::UnsupportedVersion { version });
    }
    let mut sections = [Section { offset: 0, size: 0 }; 4];
    let file_len = bytes.len() as u64;
    for (i, s) in sections.iter_mut().enumerate() {
        let at = 16 + 16 * i;
        *s = Section {
            offset: u64_at(bytes, at),
            size: u64_at(bytes, at + 8),
        };
        let name = SECTION_NAMES[i];
        let end = s.offset.checked_add(s.size);
        if end.is_none_or(|e| e > file_len) {
            return Err(DecodeError::SectionOutOfFile {
                section: name,
                offset: s.offset,
                size: s.size,
                file_len,
            });
        }
        if s.size > 0 && s.offset < HEADER_SIZE as u64 {
            return Err(DecodeError::SectionInHeader {
                section: name,
                offset: s.offset,
            });
        }
        let aligned_from = FormatVersion {
            major: 0,
            minor: 4,
            patch: 3,
        };
        if s.size > 0 && version >= aligned_from && s.offset % 8 != 0 {
            return Err(DecodeError::MisalignedSection {
                section: name,
                offset: s.offset,
            });
        }
    }
    for i in 0..4 {
        for j in i + 1..4 {
            let (a, b) = (sections[i], sections[j]);
            if a.size > 0
                && b.size > 0
                && a.offset < b.offset + b.size
                && b.offset < a.offset + a.size
            {
                return Err(DecodeError::SectionsOverlap {
                    first: SECTION_NAMES[i],
                    first_range: (a.offset, a.offset + a.size),
                    second: SECTION_NAMES[j],
                    second_range: (b.offset, b.offset + b.size),
                });
            }
        }
    }
    Ok(Header {
        legacy_magic,
        vk_header_version: u16_at(bytes, 4),
        version,
        sections,
    })
}

fn module_type(
    field: impl FnOnce() -> String,
    t: fb::ModuleType,
) -> Result<ModuleType, DecodeError> {
    match t {
        fb::ModuleType::COMPUTE => Ok(ModuleType::Compute),
        fb::ModuleType::GRAPH => Ok(ModuleType::Graph),
        other => Err(DecodeError::UnknownEnum {
            field: field(),
            value: other.0.into(),
        }),
    }
}

fn decode_modules(bytes: &[u8]) -> Result<Vec<Module<'_>>, DecodeError> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let table = root::<fb::ModuleTable<'_>>("module table", bytes)?;
    let Some(list) = table.modules() else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        let kind = module_type(|| format!("modules[{i}].type"), m.type_())?;
        let spirv = match m.code_type() {
            fb::ModuleCode::NONE => None,
            fb::ModuleCode::SPIRV => {
                let code = m.code_as_spirv().ok_or_else(|| DecodeError::Missing {
                    field: format!("modules[{i}].code"),
                })?;
                let bytes =
                    code.words()
                        .map(|w| w.bytes())
                        .ok_or_else(|| DecodeError::Missing {
                            field: format!("modules[{i}].code.words"),
                        })?;
                Some(Spirv { bytes })
            }
            fb::ModuleCode::GLSL => {
                return Err(DecodeError::UnsupportedModuleCode {
                    module: i,
                    code: "GLSL",
                });
            }
            fb::ModuleCode::HLSL => {
                return Err(DecodeError::UnsupportedModuleCode {
                    module: i,
                    code: "HLSL",
                });
            }
            other => {
                return Err(DecodeError::UnknownEnum {
                    field: format!("modules[{i}].code_type"),
                    value: other.0.into(),
                });
            }
        };
        out.push(Module {
            kind,
            name: m.name().unwrap_or(""),
            entry_point: m.entry_point().unwrap_or(""),
            spirv,
        });
    }
    Ok(out)
}

fn names<'a>(v: Option<Vector<'a, ForwardsUOffset<&'a str>>>) -> Vec<&'a str> {
    v.map(|v| v.iter().collect()).unwrap_or_default()
}

fn decode_sequence(bytes: &[u8]) -> Result<Sequence<'_>, DecodeError> {
    if bytes.is_empty() {
        return Ok(Sequence::default());
    }
    let table = root::<fb::ModelSequenceTable<'_>>("model sequence table", bytes)?;
    let mut segments = Vec::new();
    if let Some(list) = table.segments() {
        segments.reserve(list.len());
        for (s, seg) in list.iter().enumerate() {
            let kind = module_type(|| format!("segments[{s}].type"), seg.type_())?;
            let mut descriptor_sets = Vec::new();
            if let Some(sets) = seg.set_infos() {
                for (d, set) in sets.iter().enumerate() {
                    let explicit = set.set_index() != UNSET;
                    descriptor_sets.push(DescriptorSet {
                        set_index: if explicit {
                            set.set_index()
                        } else {
                            u32::try_from(d).unwrap_or(UNSET)
                        },
                        explicit_index: explicit,
                        bindings: bindings(set.bindings()),
                    });
                }
            }
            let dispatch_shape = match seg.dispatch_shape() {
                None => None,
                Some(v) if v.is_empty() => None,
                Some(v) if v.len() == 3 => Some([v.get(0), v.get(1), v.get(2)]),
                Some(v) => {
                    return Err(DecodeError::CountMismatch {
                        field: format!("segments[{s}].dispatch_shape"),
                        count: v.len(),
                        expected: 3,
                    });
                }
            };
            segments.push(Segment {
                kind,
                name: seg.name().unwrap_or(""),
                module_index: seg.module_index(),
                descriptor_sets,
                inputs: bindings(seg.inputs()),
                outputs: bindings(seg.outputs()),
                constants: seg
                    .constants()
                    .map(|v| v.iter().collect())
                    .unwrap_or_default(),
                dispatch_shape,
                push_constant_ranges: seg
                    .push_constant_ranges()
                    .map(|v| {
                        v.iter()
                            .map(|p| PushConstantRange {
                                stage_flags: p.stage_flags(),
                                offset: p.offset(),
                                size: p.size(),
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
                constant_bindings: seg
                    .constant_bindings()
                    .map(|v| {
                        v.iter()
                            .map(|b| ConstantBinding {
                                graph_constant_id: b.graph_constant_id(),
                                constant_index: b.constant_index(),
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            });
        }
    }
    Ok(Sequence {
        segments,
        inputs: bindings(table.inputs()),
        outputs: bindings(table.outputs()),
        input_names: names(table.input_names()),
        output_names: names(table.output_names()),
    })
}

fn decode_resources(bytes: &[u8]) -> Result<Vec<Resource>, DecodeError> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let table = root::<fb::ModelResourceTable<'_>>("model resource table", bytes)?;
    let Some(list) = table.mrt_entry() else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, e) in list.iter().enumerate() {
        let category = match e.category() {
            fb::ResourceCategory::INPUT => Category::Input,
            fb::ResourceCategory::OUTPUT => Category::Output,
            fb::ResourceCategory::INTERMEDIATE => Category::Intermediate,
            fb::ResourceCategory::CONSTANT => Category::Constant,
            other => {
                return Err(DecodeError::UnknownEnum {
                    field: format!("resources[{i}].category"),
                    value: other.0.into(),
                });
            }
        };
        let (shape, strides): (Vec<i64>, Vec<i64>) = match e.description() {
            None => (Vec::new(), Vec::new()),
            Some(d) => (
                d.shape()
                    .map(|v| v.iter().map(|x| x.value()).collect())
                    .unwrap_or_default(),
                d.strides()
                    .map(|v| v.iter().map(|x| x.value()).collect())
                    .unwrap_or_default(),
            ),
        };
        if !strides.is_empty() && strides.len() != shape.len() {
            return Err(DecodeError::CountMismatch {
                field: format!("resources[{i}].description.strides"),
                count: strides.len(),
                expected: shape.len(),
            });
        }
        let sampler = match e.extra_config_type() {
            fb::ExtraConfig::NONE => None,
            fb::ExtraConfig::SamplerConfig => {
                let s = e
                    .extra_config_as_sampler_config()
                    .ok_or_else(|| DecodeError::Missing {
                        field: format!("resources[{i}].extra_config"),
                    })?;
                Some(SamplerConfig {
                    min_filter: s.min_filter(),
                    mag_filter: s.mag_filter(),
                    address_mode_u: s.address_mode_u(),
                    address_mode_v: s.address_mode_v(),
                    border_color: s.border_color(),
                })
            }
            other => {
                return Err(DecodeError::UnknownEnum {
                    field: format!("resources[{i}].extra_config_type"),
                    value: other.0.into(),
                });
            }
        };
        let dt = e.vk_descriptor_type();
        let group = e.alias_group_id();
        out.push(Resource {
            index: i,
            category,
            vk_descriptor_type: (dt != UNSET).then_some(dt),
            vk_format: e.vk_format(),
            shape,
            strides,
            sampler,
            alias_group: (group != UNSET).then_some(group),
        });
    }
    Ok(out)
}

fn decode_constants(bytes: &[u8]) -> Result<(ConstantsLayout, Vec<Constant<'_>>), DecodeError> {
    if bytes.is_empty() {
        return Ok((ConstantsLayout::Empty, Vec::new()));
    }
    if bytes.len() >= 8 && bytes[..8] == CONST00 {
        return decode_const00(bytes).map(|c| (ConstantsLayout::Const00, c));
    }
    let table = root::<fb::ConstantSection<'_>>("constants", bytes)?;
    let mut out = Vec::new();
    if let Some(list) = table.data() {
        out.reserve(list.len());
        for (i, c) in list.iter().enumerate() {
            let sparsity_dimension = c.sparsity_dimension();
            if sparsity_dimension < -1 {
                return Err(DecodeError::BadSparsity {
                    index: i,
                    value: sparsity_dimension,
                });
            }
            out.push(Constant {
                mrt_index: c.mrt_index(),
                sparsity_dimension,
                data: c.raw().map(|v| v.bytes()).unwrap_or(&[]),
            });
        }
    }
    Ok((ConstantsLayout::Legacy, out))
}

const CONST00_RECORD: usize = 24;

fn decode_const00(bytes: &[u8]) -> Result<Vec<Constant<'_>>, DecodeError> {
    if bytes.len() < 16 {
        return Err(DecodeError::TooShort {
            len: bytes.len(),
            need: 16,
        });
    }
    let count = u64_at(bytes, 8);
    let max = ((bytes.len() - 16) / CONST00_RECORD) as u64;
    if count > max {
        return Err(DecodeError::HugeCount {
            field: "constants.count",
            count,
            max,
        });
    }
    // `count <= max`, which fits in usize.
    let count = count as usize;
    let payload_start = 16 + count * CONST00_RECORD;
    let payload = &bytes[payload_start..];
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let at = 16 + i * CONST00_RECORD;
        let mrt_index = u32_at(bytes, at);
        let sparsity = u32_at(bytes, at + 4) as i32;
        let size = u64_at(bytes, at + 8);
        let offset = u64_at(bytes, at + 16);
        if sparsity < -1 {
            return Err(DecodeError::BadSparsity {
                index: i,
                value: sparsity.into(),
            });
        }
        let end = offset.checked_add(size);
        let data = end
            .filter(|&e| e <= payload.len() as u64)
            .map(|e| &payload[offset as usize..e as usize])
            .ok_or(DecodeError::ConstantOutOfSection {
                index: i,
                offset,
                size,
                payload_len: payload.len() as u64,
            })?;
        out.push(Constant {
            mrt_index,
            sparsity_dimension: sparsity.into(),
            data,
        });
    }
    Ok(out)
}

thread_local! {
    static DECODES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many times the calling thread has called [`Vgf::decode`] (subtract two readings to
/// count those of one load: a program decodes each VGF payload it is given once).
pub fn decode_count() -> u64 {
    DECODES.with(std::cell::Cell::get)
}

self_cell::self_cell!(
    /// The bytes and their decoding, owned together.
    struct OwnedVgf {
        owner: std::sync::Arc<[u8]>,
        #[covariant]
        dependent: Vgf,
    }
);

/// A VGF file's bytes with their decoding, made once: what a program keeps to wire, check
/// and load a VGF step without decoding it again.
pub struct VgfFile(OwnedVgf);

impl VgfFile {
    /// Decodes `bytes` (as [`Vgf::decode`]) and keeps both.
    pub fn decode(bytes: std::sync::Arc<[u8]>) -> Result<VgfFile, DecodeError> {
        OwnedVgf::try_new(bytes, |b| Vgf::decode(b)).map(VgfFile)
    }

    /// The decoded file.
    pub fn vgf(&self) -> &Vgf<'_> {
        self.0.borrow_dependent()
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &std::sync::Arc<[u8]> {
        self.0.borrow_owner()
    }
}

impl fmt::Debug for VgfFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VgfFile")
            .field("bytes", &self.bytes().len())
            .field("modules", &self.vgf().modules.len())
            .field("resources", &self.vgf().resources.len())
            .finish()
    }
}
