//! Tensor and image I/O, over the [`crate::gpu`] layer: the shared vocabulary of tensors and
//! the kernels converting an application's images from and to tensors.

pub mod image_io;
pub mod tensor;
