//! [`DecodeError`]: why a program, a Vulkan payload or a lookup in them failed.

/// Why an ExecuTorch program or a delegate payload could not be decoded, or a lookup in one
/// failed. Each variant names the field and the numbers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The data (or a fixed-size part of it) is shorter than its layout needs.
    #[error("{what} is {len} bytes long, shorter than the {need} bytes it must hold")]
    TooShort {
        /// What was being read.
        what: &'static str,
        /// Bytes present.
        len: u64,
        /// Bytes needed.
        need: u64,
    },
    /// A four-byte identifier or magic is not the expected one.
    #[error(
        "{what} is {found:02x?}, expected {:?}",
        String::from_utf8_lossy(expected)
    )]
    BadMagic {
        /// Which identifier (`program file identifier`, `VH00 header magic`, ...).
        what: &'static str,
        /// The bytes found.
        found: [u8; 4],
        /// The bytes expected.
        expected: [u8; 4],
    },
    /// A header field breaks a rule of its layout.
    #[error("{header} field {field} is {value}, expected {expected}")]
    BadHeaderField {
        /// `extended header` or `VH00 header`.
        header: &'static str,
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
        /// The rule, with its numbers.
        expected: String,
    },
    /// A byte range reaches past the end of the bytes it lies in.
    #[error("{field} (offset {offset}, size {size}) lies outside the {len} bytes of {within}")]
    OutOfBounds {
        /// The field (or field path) that gives the range.
        field: String,
        /// Its offset.
        offset: u64,
        /// Its size.
        size: u64,
        /// What it must lie in.
        within: &'static str,
        /// Length of that.
        len: u64,
    },
    /// A FlatBuffers buffer failed verification.
    #[error("the {what} is not a valid FlatBuffers buffer: {detail}")]
    FlatBuffer {
        /// `program` or `VkGraph`.
        what: &'static str,
        /// What the verifier said.
        detail: String,
    },
    /// A required field is absent.
    #[error("field {field} is missing")]
    Missing {
        /// The field path.
        field: String,
    },
    /// An enum or union tag holds a value the schema does not define.
    #[error("field {field} holds unknown value {value}")]
    UnknownEnum {
        /// The field path.
        field: String,
        /// The value.
        value: i64,
    },
    /// An index refers past the end of (or before) the table it indexes.
    #[error("field {field} is {index}, but the table it indexes ({table}) has {len} entries")]
    IndexOutOfRange {
        /// The field path.
        field: String,
        /// The index.
        index: i64,
        /// The table indexed.
        table: &'static str,
        /// Entries in that table.
        len: usize,
    },
    /// An index refers to a value of the wrong kind.
    #[error("field {field} refers to value {index}, a {found}, where a {expected} is required")]
    WrongValueKind {
        /// The field path.
        field: String,
        /// The value index.
        index: u32,
        /// The kind required.
        expected: &'static str,
        /// The kind found.
        found: &'static str,
    },
    /// The program lists segments but carries no extended header to locate them.
    #[error(
        "the program lists {segments} segment(s) but has no extended header (bytes 8..12 are {found:02x?}, expected \"eh00\")"
    )]
    SegmentsWithoutHeader {
        /// Entries of `Program.segments`.
        segments: usize,
        /// Bytes 8..12 of the file.
        found: [u8; 4],
    },
    /// Both the legacy constant buffer and the constant segment hold constants.
    #[error(
        "Program.constant_buffer has {buffers} entries and Program.constant_segment.offsets has {offsets}; only one may be used"
    )]
    ConflictingConstants {
        /// Entries of `constant_buffer`.
        buffers: usize,
        /// Entries of `constant_segment.offsets`.
        offsets: usize,
    },
    /// Two named data entries share a key.
    #[error("Program.named_data[{second}] repeats the key {key:?} of entry {first}")]
    DuplicateKey {
        /// The key.
        key: String,
        /// The first entry with it.
        first: usize,
        /// The entry repeating it.
        second: usize,
    },
    /// A size computed from the file overflows 64 bits.
    #[error("the size of {field} overflows 64 bits")]
    Overflow {
        /// The field path.
        field: String,
    },
    /// No execution plan has the requested name.
    #[error("the program has no execution plan named {name:?} (it has {available:?})")]
    NoSuchPlan {
        /// The requested name.
        name: String,
        /// The names the program has.
        available: Vec<String>,
    },
    /// The program's named data has no entry with the requested key.
    #[error("the program's named data has no key {key:?} ({count} keys present)")]
    NoNamedData {
        /// The requested key.
        key: String,
        /// Keys present.
        count: usize,
    },
    /// A delegate is not of the backend a decoder was asked for.
    #[error("delegate {index} has id {id:?}, expected {expected:?}")]
    WrongBackend {
        /// The delegate's index in its plan.
        index: usize,
        /// Its id.
        id: String,
        /// The id expected.
        expected: &'static str,
    },
}

/// `Result` with [`DecodeError`].
pub type Result<T, E = DecodeError> = std::result::Result<T, E>;
