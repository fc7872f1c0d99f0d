//! What every delegate says about its inputs and outputs: [`TensorSpec`] (name, dtype, shape),
//! the one input check ([`check_inputs`]), and [`DeviceTensor`], a tensor resident in a device
//! buffer that another delegate on the same device can read or write directly.

use std::fmt;

pub use crate::error::IoError;
use crate::gpu::host::{DType, HostTensor, element_count};
pub use crate::gpu::memory::BufferSlice;

/// A named tensor's element type and shape.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TensorSpec {
    /// Name (from the model; `input_<i>` / `output_<i>` where it has none).
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape, outermost dimension first.
    pub shape: Vec<usize>,
}

impl TensorSpec {
    /// A spec.
    pub fn new(name: impl Into<String>, dtype: DType, shape: Vec<usize>) -> TensorSpec {
        TensorSpec {
            name: name.into(),
            dtype,
            shape,
        }
    }

    /// Packed size in bytes (`None` on overflow).
    pub fn bytes(&self) -> Option<usize> {
        element_count(&self.shape)?.checked_mul(self.dtype.size())
    }

    /// Its dtype and shape as one reads them: `f32[1, 3, 224, 224]`.
    pub fn layout(&self) -> String {
        format!("{}{:?}", self.dtype.name(), self.shape)
    }

    /// Whether `other` has the same dtype and shape (names may differ).
    pub fn same_layout(&self, other: &TensorSpec) -> bool {
        self.dtype == other.dtype && self.shape == other.shape
    }

    /// Checks a host tensor given as input `index` against this spec.
    pub fn check(&self, index: usize, tensor: &HostTensor) -> Result<(), IoError> {
        let bytes = self.bytes().unwrap_or(usize::MAX);
        if tensor.dtype() == self.dtype
            && tensor.shape() == self.shape.as_slice()
            && tensor.bytes().len() == bytes
        {
            return Ok(());
        }
        Err(IoError::Mismatch {
            index,
            name: self.name.clone(),
            want_dtype: self.dtype,
            want_shape: self.shape.clone(),
            got_dtype: tensor.dtype(),
            got_shape: tensor.shape().to_vec(),
        })
    }
}

impl fmt::Display for TensorSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "'{}' {}{:?}", self.name, self.dtype, self.shape)
    }
}

/// Checks inputs against specs: the count, then each input's dtype and shape.
pub fn check_inputs(specs: &[TensorSpec], inputs: &[HostTensor]) -> Result<(), IoError> {
    if specs.len() != inputs.len() {
        return Err(IoError::Count {
            expected: specs.len(),
            actual: inputs.len(),
        });
    }
    specs
        .iter()
        .zip(inputs)
        .enumerate()
        .try_for_each(|(i, (s, t))| s.check(i, t))
}

/// A tensor resident on the device: what it is and where its bytes are (packed, row-major).
/// Valid while the delegate that owns the buffer is alive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceTensor {
    /// Name, dtype and shape.
    pub spec: TensorSpec,
    /// Where the bytes are.
    pub slice: BufferSlice,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_checked_by_count_then_each_spec() {
        let specs = vec![TensorSpec::new("x", DType::F32, vec![2, 3])];
        let ok = HostTensor::zeros(DType::F32, vec![2, 3]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(check_inputs(&specs, std::slice::from_ref(&ok)), Ok(()));
        let e = check_inputs(&specs, &[]).unwrap_err();
        assert_eq!(e.to_string(), "expected 1 input(s), got 0");
        let bad = HostTensor::zeros(DType::I8, vec![3, 2]).unwrap_or_else(|e| panic!("{e}"));
        let e = check_inputs(&specs, &[bad]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "input 'x' (#0): expected f32[2, 3], got i8[3, 2]"
        );
    }
}
