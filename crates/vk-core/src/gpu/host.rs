//! Host-side tensors: the common vocabulary delegates use for inputs and outputs.
//!
//! A [`HostTensor`] is a dtype, a shape and the contiguous (row-major, NCHW for images) bytes.
//! Constructors check that the byte size matches the shape and dtype.

use std::fmt;

use ash::vk;

/// Element types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit float.
    F32,
    /// 16-bit float (IEEE half).
    F16,
    /// 64-bit signed integer.
    I64,
    /// 32-bit signed integer.
    I32,
    /// 16-bit signed integer.
    I16,
    /// 8-bit signed integer.
    I8,
    /// 8-bit unsigned integer.
    U8,
    /// Boolean, one byte per element.
    Bool,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::I16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
        }
    }

    /// Short name (`f32`, `i8`, ...), as numpy spells it where it can.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::I64 => "i64",
            DType::I32 => "i32",
            DType::I16 => "i16",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::Bool => "bool",
        }
    }

    /// The single-channel `VkFormat` used for tensors of this dtype.
    pub fn to_vk_format(self) -> vk::Format {
        match self {
            DType::F32 => vk::Format::R32_SFLOAT,
            DType::F16 => vk::Format::R16_SFLOAT,
            DType::I64 => vk::Format::R64_SINT,
            DType::I32 => vk::Format::R32_SINT,
            DType::I16 => vk::Format::R16_SINT,
            DType::I8 => vk::Format::R8_SINT,
            DType::U8 => vk::Format::R8_UINT,
            DType::Bool => crate::device::arm::FORMAT_R8_BOOL_ARM,
        }
    }

    /// The dtype of a single-channel tensor format, if it is one.
    pub fn from_vk_format(format: vk::Format) -> Option<DType> {
        Some(match format {
            vk::Format::R32_SFLOAT => DType::F32,
            vk::Format::R16_SFLOAT => DType::F16,
            vk::Format::R64_SINT => DType::I64,
            vk::Format::R32_SINT => DType::I32,
            vk::Format::R16_SINT => DType::I16,
            vk::Format::R8_SINT => DType::I8,
            vk::Format::R8_UINT => DType::U8,
            crate::device::arm::FORMAT_R8_BOOL_ARM => DType::Bool,
            _ => return None,
        })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a host tensor could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostTensorError {
    /// The data length does not match shape × element size.
    #[error("{dtype} tensor of shape {shape:?} needs {expected} bytes, got {actual}")]
    ByteSize {
        /// Element type.
        dtype: DType,
        /// Shape.
        shape: Vec<usize>,
        /// Bytes the shape needs.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// The shape's element count overflows `usize`.
    #[error("shape {0:?} has too many elements")]
    Overflow(Vec<usize>),
}

/// A tensor in host memory: dtype, shape, contiguous little-endian bytes.
#[derive(Clone, PartialEq)]
pub struct HostTensor {
    dtype: DType,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl fmt::Debug for HostTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostTensor")
            .field("dtype", &self.dtype)
            .field("shape", &self.shape)
            .field("bytes", &self.data.len())
            .finish()
    }
}

/// At or above this many bytes, [`zeroed_bytes`] advises huge pages.
const HUGE_PAGE_ADVICE_MIN: usize = 8 << 20;

/// `len` zero bytes, for host memory a device copy is about to fill (an output tensor). On
/// Linux, allocations of 8 MiB or more are advised to use transparent huge pages
/// (`MADV_HUGEPAGE`) before anything touches them: a fresh allocation is otherwise mapped
/// one 4 KiB page fault at a time as the copy first writes it, which cost more than the
/// copy itself for a 1 GiB output on an NVIDIA H200 host (120 ms against 33 ms). It is
/// advice only: where the kernel has huge pages off, nothing changes.
pub fn zeroed_bytes(len: usize) -> Vec<u8> {
    let data = vec![0u8; len];
    #[cfg(target_os = "linux")]
    if len >= HUGE_PAGE_ADVICE_MIN {
        advise_huge_pages(&data);
    }
    data
}

/// Advises `MADV_HUGEPAGE` for the 2 MiB-aligned pages inside `data`.
#[cfg(target_os = "linux")]
fn advise_huge_pages(data: &[u8]) {
    const HUGE: usize = 2 << 20;
    let begin = data.as_ptr() as usize;
    let start = begin.next_multiple_of(HUGE);
    let end = (begin + data.len()) / HUGE * HUGE;
    if end <= start {
        return;
    }
    // SAFETY: the range lies inside `data`'s allocation, which lives across the call;
    // `MADV_HUGEPAGE` changes neither the bytes nor the mapping's validity, only how the
    // kernel backs it.
    let r = unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    if r != 0 {
        log::debug!(
            "madvise(MADV_HUGEPAGE) of {} bytes: {}",
            end - start,
            std::io::Error::last_os_error()
        );
    }
}

/// Number of elements of `shape`, or `None` on overflow.
pub fn element_count(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

impl HostTensor {
    /// A tensor from raw bytes; the length must match.
    pub fn new(dtype: DType, shape: Vec<usize>, data: Vec<u8>) -> Result<Self, HostTensorError> {
        let n = element_count(&shape).ok_or_else(|| HostTensorError::Overflow(shape.clone()))?;
        let expected = n
            .checked_mul(dtype.size())
            .ok_or_else(|| HostTensorError::Overflow(shape.clone()))?;
        if expected != data.len() {
            return Err(HostTensorError::ByteSize {
                dtype,
                shape,
                expected,
                actual: data.len(),
            });
        }
        Ok(HostTensor { dtype, shape, data })
    }

    /// A zero-filled tensor (its bytes from [`zeroed_bytes`], ready to receive an output).
    pub fn zeros(dtype: DType, shape: Vec<usize>) -> Result<Self, HostTensorError> {
        let n = element_count(&shape).ok_or_else(|| HostTensorError::Overflow(shape.clone()))?;
        let bytes = n
            .checked_mul(dtype.size())
            .ok_or_else(|| HostTensorError::Overflow(shape.clone()))?;
        Ok(HostTensor {
            dtype,
            shape,
            data: zeroed_bytes(bytes),
        })
    }

    /// An f32 tensor.
    pub fn from_f32(shape: Vec<usize>, values: &[f32]) -> Result<Self, HostTensorError> {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        HostTensor::new(DType::F32, shape, data)
    }

    /// An i8 tensor.
    pub fn from_i8(shape: Vec<usize>, values: &[i8]) -> Result<Self, HostTensorError> {
        let data = values.iter().map(|&v| v as u8).collect();
        HostTensor::new(DType::I8, shape, data)
    }

    /// An i32 tensor.
    pub fn from_i32(shape: Vec<usize>, values: &[i32]) -> Result<Self, HostTensorError> {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        HostTensor::new(DType::I32, shape, data)
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len() / self.dtype.size()
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// The bytes, mutably.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.data
    }

    /// Consumes the tensor, returning its bytes.
    pub fn into_bytes(self) -> Vec<u8> {
        self.data
    }

    /// Same data under another shape with the same element count.
    pub fn reshaped(mut self, shape: Vec<usize>) -> Result<Self, HostTensorError> {
        let n = element_count(&shape).ok_or_else(|| HostTensorError::Overflow(shape.clone()))?;
        if n != self.len() {
            return Err(HostTensorError::ByteSize {
                dtype: self.dtype,
                expected: n * self.dtype.size(),
                shape,
                actual: self.data.len(),
            });
        }
        self.shape = shape;
        Ok(self)
    }

    /// The values as f32 (`None` unless the dtype is f32).
    pub fn to_f32(&self) -> Option<Vec<f32>> {
        (self.dtype == DType::F32).then(|| {
            self.data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
    }

    /// The values as i8 (`None` unless the dtype is i8).
    pub fn to_i8(&self) -> Option<Vec<i8>> {
        (self.dtype == DType::I8).then(|| self.data.iter().map(|&b| b as i8).collect())
    }

    /// The values as i32 (`None` unless the dtype is i32).
    pub fn to_i32(&self) -> Option<Vec<i32>> {
        (self.dtype == DType::I32).then(|| {
            self.data
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_bytes_are_zero_at_every_size() {
        for len in [0, 1, 4095, (8 << 20) - 1, (8 << 20) + 4097, 5 << 21] {
            let v = zeroed_bytes(len);
            assert_eq!(v.len(), len);
            assert!(v.iter().all(|&b| b == 0), "{len}");
        }
    }

    #[test]
    fn byte_size_is_checked_with_the_numbers() {
        let err = HostTensor::new(DType::F32, vec![2, 3], vec![0; 20]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "f32 tensor of shape [2, 3] needs 24 bytes, got 20"
        );
        assert!(HostTensor::new(DType::F32, vec![usize::MAX, 2], vec![]).is_err());
    }

    #[test]
    fn f32_round_trip_and_reshape() {
        let t = HostTensor::from_f32(vec![2, 2], &[1.0, -2.0, 3.5, 0.0]).unwrap();
        assert_eq!(t.to_f32().unwrap(), vec![1.0, -2.0, 3.5, 0.0]);
        assert!(t.to_i8().is_none());
        let r = t.clone().reshaped(vec![4]).unwrap();
        assert_eq!(r.shape(), &[4]);
        assert!(t.reshaped(vec![3]).is_err());
    }

    #[test]
    fn formats_map_both_ways() {
        for d in [
            DType::F32,
            DType::F16,
            DType::I32,
            DType::I8,
            DType::I64,
            DType::I16,
            DType::U8,
        ] {
            assert_eq!(DType::from_vk_format(d.to_vk_format()), Some(d));
        }
    }
}
