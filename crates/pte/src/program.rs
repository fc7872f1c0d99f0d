//! The program file: identifier, extended header, segments, named data, constants and plans.

use std::collections::HashMap;
use std::fmt;

use flatbuffers::VerifierOptions;

use crate::error::{DecodeError, Result};
use crate::plan::{self, DataLocation, Delegate, ExecutionPlan, Tables, Tensor};
use crate::program_generated::executorch_flatbuffer as fb;

/// The FlatBuffers file identifier of a program (bytes 4..8).
pub const PROGRAM_IDENTIFIER: [u8; 4] = *b"ET12";
/// The magic of the extended header.
pub const EXTENDED_HEADER_MAGIC: [u8; 4] = *b"eh00";
/// Where the extended header starts.
pub const EXTENDED_HEADER_OFFSET: usize = 8;
/// The shortest extended header: magic, length, program size, segment base offset.
pub const EXTENDED_HEADER_MIN_LEN: u32 = 24;
/// The extended header that also records the segment data size.
const EXTENDED_HEADER_LEN_WITH_DATA_SIZE: u32 = 32;

/// The name of the default plan.
pub const FORWARD: &str = "forward";

/// The extended header at offset 8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtendedHeader {
    /// Length of the header in bytes (from its magic on).
    pub length: u32,
    /// Size of the FlatBuffers program at the start of the file.
    pub program_size: u64,
    /// Offset from the start of the file that segment offsets are relative to.
    pub segment_base_offset: u64,
    /// Bytes of segment data after the base, when the header records it.
    pub segment_data_size: Option<u64>,
}

/// One entry of `Program.segments`, as the file states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataSegment {
    /// Offset relative to the segment base offset.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
}

/// One entry of the named data map: a key and the segment holding its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamedData<'a> {
    /// The key.
    pub key: &'a str,
    /// Index into `Program.segments` (checked).
    pub segment_index: u32,
}

/// Where the program's constant tensors are.
#[derive(Clone, PartialEq, Eq)]
pub enum Constants<'a> {
    /// In a segment: `offsets[i]` is where constant `i` starts (entry 0 is a placeholder for
    /// non-constant tensors).
    Segment {
        /// Index into `Program.segments`.
        segment_index: u32,
        /// Offsets into that segment (each checked to lie within it).
        offsets: Vec<u64>,
        /// The segment's bytes.
        data: &'a [u8],
    },
    /// Inline, in the legacy `Program.constant_buffer` (entry 0 is a placeholder).
    Buffers(Vec<&'a [u8]>),
}

impl Constants<'_> {
    /// Number of constants, the placeholder included.
    pub fn len(&self) -> usize {
        match self {
            Constants::Segment { offsets, .. } => offsets.len(),
            Constants::Buffers(b) => b.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl fmt::Debug for Constants<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Constants::Segment {
                segment_index,
                offsets,
                data,
            } => f
                .debug_struct("Segment")
                .field("segment_index", segment_index)
                .field("offsets", offsets)
                .field("data_len", &data.len())
                .finish(),
            Constants::Buffers(b) => {
                let lens: Vec<usize> = b.iter().map(|b| b.len()).collect();
                f.debug_tuple("Buffers").field(&lens).finish()
            }
        }
    }
}

/// A decoded program, borrowing the file's bytes.
///
/// Every index in it has been checked: plans' value, operator and delegate indices, delegate
/// payload references, segment ranges, named data segments and constant offsets.
#[derive(Clone)]
pub struct Program<'a> {
    data: &'a [u8],
    version: u32,
    header: Option<ExtendedHeader>,
    segment_table: Vec<DataSegment>,
    segments: Vec<&'a [u8]>,
    inline_data: Vec<&'a [u8]>,
    named_data: Vec<NamedData<'a>>,
    named_index: HashMap<&'a str, usize>,
    constants: Constants<'a>,
    plans: Vec<ExecutionPlan<'a>>,
}

impl fmt::Debug for Program<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Program")
            .field("len", &self.data.len())
            .field("version", &self.version)
            .field("extended_header", &self.header)
            .field("segments", &self.segment_table)
            .field("inline_delegate_data", &self.inline_data.len())
            .field("named_data", &self.named_data)
            .field("constants", &self.constants)
            .field("plans", &self.plans)
            .finish()
    }
}

impl<'a> Program<'a> {
    /// Decodes a `.pte` file. The bytes are untrusted: the program's FlatBuffers data is
    /// verified before use and every offset, size and index is checked.
    pub fn decode(data: &'a [u8]) -> Result<Program<'a>> {
        crate::counts::count_program();
        if data.len() < EXTENDED_HEADER_OFFSET {
            return Err(DecodeError::TooShort {
                what: "the program file",
                len: data.len() as u64,
                need: EXTENDED_HEADER_OFFSET as u64,
            });
        }
        let found = four(data, 4);
        if found != PROGRAM_IDENTIFIER {
            return Err(DecodeError::BadMagic {
                what: "the program file identifier (bytes 4..8)",
                found,
                expected: PROGRAM_IDENTIFIER,
            });
        }
        let header = parse_extended_header(data)?;
        let program_len = match header {
            // Checked against the file length by `parse_extended_header`.
            Some(h) => h.program_size as usize,
            None => data.len(),
        };
        let program_bytes = data.get(..program_len).unwrap_or(data);
        let root = flatbuffers::root_with_opts::<fb::Program<'a>>(
            &verifier_options(program_bytes.len()),
            program_bytes,
        )
        .map_err(|e| DecodeError::FlatBuffer {
            what: "program",
            detail: e.to_string(),
        })?;
        Self::from_root(data, header, root)
    }

    fn from_root(
        data: &'a [u8],
        header: Option<ExtendedHeader>,
        root: fb::Program<'a>,
    ) -> Result<Program<'a>> {
        let (segment_table, segments) = resolve_segments(data, header, root.segments())?;
        let inline_data: Vec<&'a [u8]> = root
            .backend_delegate_data()
            .into_iter()
            .flatten()
            .map(|d| d.data().map(|v| v.bytes()).unwrap_or_default())
            .collect();
        let (named_data, named_index) = decode_named_data(root.named_data(), segments.len())?;
        let constants = decode_constants(&root, &segments)?;
        let mutable = decode_mutable_counts(&root, &segments)?;
        let tables = Tables {
            inline_data: inline_data.len(),
            segments: segments.len(),
            constants: constants.len(),
            mutable: &mutable,
        };
        let mut plans = Vec::new();
        for (p, plan) in root.execution_plan().into_iter().flatten().enumerate() {
            plans.push(plan::decode_plan(
                plan,
                &format!("execution_plan[{p}]"),
                &tables,
            )?);
        }
        Ok(Program {
            data,
            version: root.version(),
            header,
            segment_table,
            segments,
            inline_data,
            named_data,
            named_index,
            constants,
            plans,
        })
    }

    /// The whole file.
    pub fn bytes(&self) -> &'a [u8] {
        self.data
    }

    /// The schema version the program records.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The extended header, when the file has one.
    pub fn extended_header(&self) -> Option<&ExtendedHeader> {
        self.header.as_ref()
    }

    /// Every execution plan, in file order.
    pub fn plans(&self) -> &[ExecutionPlan<'a>] {
        &self.plans
    }

    /// The names of the plans, in file order.
    pub fn plan_names(&self) -> Vec<&'a str> {
        self.plans.iter().map(|p| p.name).collect()
    }

    /// The plan named `name`; the error lists the names there are.
    pub fn plan(&self, name: &str) -> Result<&ExecutionPlan<'a>> {
        self.plans
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| DecodeError::NoSuchPlan {
                name: name.to_owned(),
                available: self.plans.iter().map(|p| p.name.to_owned()).collect(),
            })
    }

    /// The `forward` plan.
    pub fn forward(&self) -> Result<&ExecutionPlan<'a>> {
        self.plan(FORWARD)
    }

    /// `Program.segments` as the file states them (offsets relative to the segment base).
    pub fn segment_table(&self) -> &[DataSegment] {
        &self.segment_table
    }

    /// The bytes of segment `index`.
    pub fn segment(&self, index: usize) -> Result<&'a [u8]> {
        self.segments
            .get(index)
            .copied()
            .ok_or_else(|| DecodeError::IndexOutOfRange {
                field: "segment index".to_owned(),
                index: i64::try_from(index).unwrap_or(i64::MAX),
                table: "segments",
                len: self.segments.len(),
            })
    }

    /// The payload of a delegate: its inline data or its segment.
    pub fn delegate_payload(&self, delegate: &Delegate<'_>) -> Result<&'a [u8]> {
        let index = delegate.processed.index as usize;
        let (table, name) = match delegate.processed.location {
            DataLocation::Inline => (&self.inline_data, "backend_delegate_data"),
            DataLocation::Segment => (&self.segments, "segments"),
        };
        table
            .get(index)
            .copied()
            .ok_or_else(|| DecodeError::IndexOutOfRange {
                field: format!("delegate {:?} processed.index", delegate.id),
                index: i64::from(delegate.processed.index),
                table: name,
                len: table.len(),
            })
    }

    /// The named data entries, in file order.
    pub fn named_data_entries(&self) -> &[NamedData<'a>] {
        &self.named_data
    }

    /// The bytes stored under `key` in the named data map.
    pub fn named_data(&self, key: &str) -> Result<&'a [u8]> {
        let entry = self
            .named_index
            .get(key)
            .and_then(|&i| self.named_data.get(i))
            .ok_or_else(|| DecodeError::NoNamedData {
                key: key.to_owned(),
                count: self.named_data.len(),
            })?;
        self.segment(entry.segment_index as usize)
    }

    /// Where the constant tensors are, when the program has any.
    pub fn constants(&self) -> &Constants<'a> {
        &self.constants
    }

    /// The data of a constant tensor (`None` for a tensor that is not one); its size is the
    /// tensor's size in bytes, checked to lie within the constant's storage.
    pub fn constant_data(&self, tensor: &Tensor<'_>) -> Result<Option<&'a [u8]>> {
        if !tensor.is_constant() {
            return Ok(None);
        }
        let idx = tensor.data_buffer_idx as usize;
        let field = || format!("constant {idx}");
        let size = tensor
            .nbytes()
            .ok_or_else(|| DecodeError::Overflow { field: field() })?;
        let (bytes, offset, within) = match &self.constants {
            Constants::Segment { offsets, data, .. } => {
                let offset = offsets.get(idx).copied();
                (*data, offset, "the constant segment")
            }
            Constants::Buffers(b) => (
                b.get(idx).copied().unwrap_or_default(),
                Some(0),
                "its buffer",
            ),
        };
        let offset = offset.ok_or_else(|| DecodeError::IndexOutOfRange {
            field: "data_buffer_idx".to_owned(),
            index: i64::from(tensor.data_buffer_idx),
            table: "constants",
            len: self.constants.len(),
        })?;
        slice(bytes, offset, size, field, within).map(Some)
    }
}

/// `bytes[offset..offset + size]`, or an error naming `field`.
pub(crate) fn slice<'a>(
    bytes: &'a [u8],
    offset: u64,
    size: u64,
    field: impl FnOnce() -> String,
    within: &'static str,
) -> Result<&'a [u8]> {
    offset
        .checked_add(size)
        .and_then(|end| bytes.get(usize::try_from(offset).ok()?..usize::try_from(end).ok()?))
        .ok_or_else(|| DecodeError::OutOfBounds {
            field: field(),
            offset,
            size,
            within,
            len: bytes.len() as u64,
        })
}

pub(crate) fn four(data: &[u8], at: usize) -> [u8; 4] {
    let mut out = [0; 4];
    if let Some(b) = data.get(at..at + 4) {
        out.copy_from_slice(b);
    }
    out
}

pub(crate) fn le_u16(data: &[u8], at: usize) -> u16 {
    let mut out = [0; 2];
    if let Some(b) = data.get(at..at + 2) {
        out.copy_from_slice(b);
    }
    u16::from_le_bytes(out)
}

pub(crate) fn le_u32(data: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(four(data, at))
}

pub(crate) fn le_u64(data: &[u8], at: usize) -> u64 {
    let mut out = [0; 8];
    if let Some(b) = data.get(at..at + 8) {
        out.copy_from_slice(b);
    }
    u64::from_le_bytes(out)
}

/// Verifier limits: depth well above the schemas' nesting, at most one table per 4 bytes, and
/// an expanded size bounded by a small multiple of the buffer (so that copies of shared
/// vectors stay bounded).
pub(crate) fn verifier_options(len: usize) -> VerifierOptions {
    VerifierOptions {
        max_depth: 16,
        max_tables: len / 4 + 1,
        max_apparent_size: len.saturating_mul(16).min(1 << 31),
        ignore_missing_null_terminator: false,
    }
}

fn parse_extended_header(data: &[u8]) -> Result<Option<ExtendedHeader>> {
    const HEADER: &str = "extended header";
    if four(data, EXTENDED_HEADER_OFFSET) != EXTENDED_HEADER_MAGIC {
        return Ok(None);
    }
    let at = EXTENDED_HEADER_OFFSET;
    let need = (at + EXTENDED_HEADER_MIN_LEN as usize) as u64;
    if (data.len() as u64) < need {
        return Err(DecodeError::TooShort {
            what: "the program file with an extended header",
            len: data.len() as u64,
            need,
        });
    }
    let length = le_u32(data, at + 4);
    if length < EXTENDED_HEADER_MIN_LEN {
        return Err(DecodeError::BadHeaderField {
            header: HEADER,
            field: "length",
            value: u64::from(length),
            expected: format!("at least {EXTENDED_HEADER_MIN_LEN}"),
        });
    }
    let header_end = at as u64 + u64::from(length);
    if header_end > data.len() as u64 {
        return Err(DecodeError::OutOfBounds {
            field: "the extended header".to_owned(),
            offset: at as u64,
            size: u64::from(length),
            within: "the file",
            len: data.len() as u64,
        });
    }
    let header = ExtendedHeader {
        length,
        program_size: le_u64(data, at + 8),
        segment_base_offset: le_u64(data, at + 16),
        segment_data_size: (length >= EXTENDED_HEADER_LEN_WITH_DATA_SIZE)
            .then(|| le_u64(data, at + 24)),
    };
    check_extended_header(&header, header_end, data.len() as u64)?;
    Ok(Some(header))
}

fn check_extended_header(h: &ExtendedHeader, header_end: u64, file_len: u64) -> Result<()> {
    const HEADER: &str = "extended header";
    if h.program_size < header_end || h.program_size > file_len {
        return Err(DecodeError::BadHeaderField {
            header: HEADER,
            field: "program_size",
            value: h.program_size,
            expected: format!("between the header end {header_end} and the file length {file_len}"),
        });
    }
    if h.segment_base_offset != 0
        && (h.segment_base_offset < h.program_size || h.segment_base_offset > file_len)
    {
        return Err(DecodeError::BadHeaderField {
            header: HEADER,
            field: "segment_base_offset",
            value: h.segment_base_offset,
            expected: format!(
                "0, or between the program size {} and the file length {file_len}",
                h.program_size
            ),
        });
    }
    let data_size = h.segment_data_size.unwrap_or(0);
    if h.segment_base_offset
        .checked_add(data_size)
        .is_none_or(|end| end > file_len)
    {
        return Err(DecodeError::BadHeaderField {
            header: HEADER,
            field: "segment_data_size",
            value: data_size,
            expected: format!(
                "at most {} (the file length {file_len} less the segment base offset {})",
                file_len.saturating_sub(h.segment_base_offset),
                h.segment_base_offset
            ),
        });
    }
    Ok(())
}

type Segments<'a> = (Vec<DataSegment>, Vec<&'a [u8]>);

fn resolve_segments<'a>(
    data: &'a [u8],
    header: Option<ExtendedHeader>,
    list: Option<flatbuffers::Vector<'a, flatbuffers::ForwardsUOffset<fb::DataSegment<'a>>>>,
) -> Result<Segments<'a>> {
    let n = list.map_or(0, |l| l.len());
    let list = list.into_iter().flatten();
    let Some(header) = header else {
        if n == 0 {
            return Ok((Vec::new(), Vec::new()));
        }
        return Err(DecodeError::SegmentsWithoutHeader {
            segments: n,
            found: four(data, EXTENDED_HEADER_OFFSET),
        });
    };
    let base = header.segment_base_offset;
    let region = data
        .get(usize::try_from(base).unwrap_or(usize::MAX)..)
        .unwrap_or_default();
    let mut table = Vec::with_capacity(n);
    let mut bytes = Vec::with_capacity(n);
    for (i, s) in list.enumerate() {
        let entry = DataSegment {
            offset: s.offset(),
            size: s.size(),
        };
        let field = || format!("segments[{i}]");
        bytes.push(slice(
            region,
            entry.offset,
            entry.size,
            field,
            "the segment data",
        )?);
        table.push(entry);
    }
    Ok((table, bytes))
}

type NamedTable<'a> = (Vec<NamedData<'a>>, HashMap<&'a str, usize>);

fn decode_named_data<'a>(
    list: Option<flatbuffers::Vector<'a, flatbuffers::ForwardsUOffset<fb::NamedData<'a>>>>,
    segments: usize,
) -> Result<NamedTable<'a>> {
    let mut entries = Vec::new();
    let mut index = HashMap::new();
    for (i, n) in list.into_iter().flatten().enumerate() {
        let key = n.key().ok_or_else(|| DecodeError::Missing {
            field: format!("named_data[{i}].key"),
        })?;
        let segment_index = plan::index(
            i64::from(n.segment_index()),
            || format!("named_data[{i}].segment_index"),
            "segments",
            segments,
        )?;
        if let Some(&first) = index.get(key) {
            return Err(DecodeError::DuplicateKey {
                key: key.to_owned(),
                first,
                second: i,
            });
        }
        index.insert(key, i);
        entries.push(NamedData { key, segment_index });
    }
    Ok((entries, index))
}

fn decode_constants<'a>(root: &fb::Program<'a>, segments: &[&'a [u8]]) -> Result<Constants<'a>> {
    let buffers: Vec<&'a [u8]> = root
        .constant_buffer()
        .into_iter()
        .flatten()
        .map(|b| b.storage().map(|v| v.bytes()).unwrap_or_default())
        .collect();
    let segment = root.constant_segment();
    let offsets: Vec<u64> = segment
        .and_then(|cs| cs.offsets())
        .map(|o| o.iter().collect())
        .unwrap_or_default();
    // As the runtime decides: one offset is only the placeholder of non-constant tensors, and
    // then the constants (if any) are inline.
    let Some(cs) = segment.filter(|_| offsets.len() > 1) else {
        return Ok(Constants::Buffers(buffers));
    };
    if !buffers.is_empty() {
        return Err(DecodeError::ConflictingConstants {
            buffers: buffers.len(),
            offsets: offsets.len(),
        });
    }
    let segment_index = plan::index(
        i64::from(cs.segment_index()),
        || "constant_segment.segment_index".to_owned(),
        "segments",
        segments.len(),
    )?;
    let data = segments
        .get(segment_index as usize)
        .copied()
        .unwrap_or_default();
    for (i, &o) in offsets.iter().enumerate() {
        let field = || format!("constant_segment.offsets[{i}]");
        slice(data, o, 0, field, "the constant segment")?;
    }
    Ok(Constants::Segment {
        segment_index,
        offsets,
        data,
    })
}

/// The number of offsets of each `mutable_data_segments` entry, each checked against its
/// segment.
fn decode_mutable_counts(root: &fb::Program<'_>, segments: &[&[u8]]) -> Result<Vec<usize>> {
    let mut counts = Vec::new();
    for (m, sub) in root
        .mutable_data_segments()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let index = plan::index(
            i64::from(sub.segment_index()),
            || format!("mutable_data_segments[{m}].segment_index"),
            "segments",
            segments.len(),
        )?;
        let data = segments.get(index as usize).copied().unwrap_or_default();
        counts.push(sub.offsets().map_or(0, |l| l.len()));
        for (i, o) in sub.offsets().into_iter().flatten().enumerate() {
            slice(
                data,
                o,
                0,
                || format!("mutable_data_segments[{m}].offsets[{i}]"),
                "its segment",
            )?;
        }
    }
    Ok(counts)
}
