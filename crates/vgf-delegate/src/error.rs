//! Errors: [`DecodeError`] for files, [`Error`] for everything else.

use crate::version::FormatVersion;

/// Why a VGF file could not be decoded. Each variant names the field and the numbers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The file (or a fixed-size part of it) is shorter than its layout needs.
    #[error("VGF data is {len} bytes long, shorter than the {need} bytes it must hold")]
    TooShort {
        /// Bytes present.
        len: usize,
        /// Bytes needed.
        need: usize,
    },
    /// The magic is neither `VGF1` nor the deprecated one.
    #[error("not a VGF file: magic is {found:02x?}, expected \"VGF1\"")]
    BadMagic {
        /// The first four bytes.
        found: [u8; 4],
    },
    /// The format version is not 0.4.x or 0.5.x.
    #[error("VGF format version {version} is not supported (0.4.x and 0.5.x are)")]
    UnsupportedVersion {
        /// The version in the header.
        version: FormatVersion,
    },
    /// A section reaches past the end of the file.
    #[error(
        "the {section} section (offset {offset}, size {size}) lies outside the file of {file_len} bytes"
    )]
    SectionOutOfFile {
        /// Section name.
        section: &'static str,
        /// Its offset.
        offset: u64,
        /// Its size.
        size: u64,
        /// File length.
        file_len: u64,
    },
    /// A non-empty section starts inside the 128-byte header.
    #[error("the {section} section starts at offset {offset}, inside the 128-byte header")]
    SectionInHeader {
        /// Section name.
        section: &'static str,
        /// Its offset.
        offset: u64,
    },
    /// A section is not 8-byte aligned (required from format 0.4.3 on).
    #[error("the {section} section starts at offset {offset}, not a multiple of 8")]
    MisalignedSection {
        /// Section name.
        section: &'static str,
        /// Its offset.
        offset: u64,
    },
    /// Two sections overlap.
    #[error(
        "the {first} section (bytes {}..{}) overlaps the {second} section (bytes {}..{})",
        first_range.0, first_range.1, second_range.0, second_range.1
    )]
    SectionsOverlap {
        /// First section.
        first: &'static str,
        /// Its byte range.
        first_range: (u64, u64),
        /// Second section.
        second: &'static str,
        /// Its byte range.
        second_range: (u64, u64),
    },
    /// A FlatBuffers section failed verification.
    #[error("the {section} section is not a valid FlatBuffers table: {detail}")]
    FlatBuffer {
        /// Section name.
        section: &'static str,
        /// What the verifier said.
        detail: String,
    },
    /// A required field is absent.
    #[error("field {field} is missing")]
    Missing {
        /// The field path.
        field: String,
    },
    /// A module carries GLSL or HLSL source instead of SPIR-V.
    #[error(
        "unsupported module code: module {module} holds {code} source; only SPIR-V is supported"
    )]
    UnsupportedModuleCode {
        /// Module index.
        module: usize,
        /// `GLSL` or `HLSL`.
        code: &'static str,
    },
    /// An enum field holds an unknown value.
    #[error("field {field} holds unknown value {value}")]
    UnknownEnum {
        /// The field path.
        field: String,
        /// The value.
        value: u32,
    },
    /// An index refers past the end of the table it indexes.
    #[error("field {field} is {index}, but the table it indexes has {len} entries")]
    IndexOutOfRange {
        /// The field path.
        field: String,
        /// The index.
        index: u64,
        /// Entries in the indexed table.
        len: usize,
    },
    /// A list has the wrong number of entries.
    #[error("field {field} has {count} entries, expected {expected}")]
    CountMismatch {
        /// The field path.
        field: String,
        /// Entries present.
        count: usize,
        /// Entries expected.
        expected: usize,
    },
    /// A count cannot fit in the bytes that should hold its entries.
    #[error("field {field} is {count}, but the section has room for at most {max}")]
    HugeCount {
        /// The field.
        field: &'static str,
        /// The count.
        count: u64,
        /// The most that fits.
        max: u64,
    },
    /// A constant's data lies outside the constants payload.
    #[error(
        "constant {index} (offset {offset}, size {size}) lies outside the constants payload of {payload_len} bytes"
    )]
    ConstantOutOfSection {
        /// Constant index.
        index: usize,
        /// Offset in the payload.
        offset: u64,
        /// Size.
        size: u64,
        /// Payload length.
        payload_len: u64,
    },
    /// A sparsity dimension below -1.
    #[error("constant {index} has sparsity dimension {value} (valid: -1 for dense, or >= 0)")]
    BadSparsity {
        /// Constant index.
        index: usize,
        /// The value.
        value: i64,
    },
    /// A segment's type differs from its module's.
    #[error("segment {segment} is {segment_type} but its module {module} is {module_type}")]
    TypeMismatch {
        /// Segment index.
        segment: usize,
        /// Segment type.
        segment_type: &'static str,
        /// Module index.
        module: u32,
        /// Module type.
        module_type: &'static str,
    },
}

/// Everything that can go wrong loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file is malformed.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    File {
        /// The path.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Inputs that do not match the model (count, dtype, shape).
    #[error(transparent)]
    Io(#[from] vk_core::IoError),
    /// Memory a caller provides cannot hold an input or output.
    #[error(transparent)]
    Bind(#[from] BindError),
    /// The device layer failed (including unmet requirements).
    #[error(transparent)]
    Device(#[from] vk_core::Error),
    /// A Vulkan call failed.
    #[error(transparent)]
    Vk(#[from] vk_core::VkError),
    /// The model uses something this runtime does not support; the message says what.
    #[error("unsupported model: {0}")]
    Unsupported(String),
}

/// Why memory a caller provides ([`crate::model::External`]) cannot hold an input or output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    /// No input or output has that name or index.
    #[error("the model has no {io} to bind to external memory")]
    UnknownIo {
        /// The name or index asked for.
        io: String,
    },
    /// The same tensor was given external memory twice.
    #[error("{io} is given external memory twice")]
    Twice {
        /// The input or output.
        io: String,
    },
    /// The memory belongs to another device.
    #[error("the external memory for {io} belongs to another device")]
    OtherDevice {
        /// The input or output.
        io: String,
    },
    /// The slice is smaller than the tensor's memory requirements.
    #[error("the external memory for {io} is {size} bytes; its tensor needs {need}")]
    TooSmall {
        /// The input or output.
        io: String,
        /// Bytes the tensor and its buffer need.
        need: u64,
        /// Bytes in the slice.
        size: u64,
    },
    /// The slice's memory offset is not aligned as the tensor requires.
    #[error(
        "the external memory for {io} starts at offset {offset}, not a multiple of {alignment}"
    )]
    Misaligned {
        /// The input or output.
        io: String,
        /// Offset in the memory.
        offset: u64,
        /// Required alignment.
        alignment: u64,
    },
    /// The tensor shares an alias group with other resources, which must stay in one storage.
    #[error(
        "{io} is in alias group {group} with other resources: it cannot be bound to external memory"
    )]
    Aliased {
        /// The input or output.
        io: String,
        /// The alias group.
        group: u32,
    },
}

/// Shorthand for `Result<T, vgf_delegate::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;
