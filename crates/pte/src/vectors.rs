//! Verification of vectors of 8-byte scalars as ExecuTorch's writers lay them out.
//!
//! flatc's C++ builder aligns a vector's elements to their size only when the vector has
//! elements: an empty `[long]` or `[double]` is aligned for its 4-byte length alone, so its
//! (absent) elements may start at an offset ≡ 4 (mod 8). ExecuTorch writes its programs and
//! its Vulkan graphs with that builder, and the C++ verifier accepts such vectors (it checks
//! the length's alignment, not the elements'). The `flatbuffers` crate's verifier checks the
//! elements' alignment even when there are none, and so refused real exports (a 0-d tensor's
//! empty size list). The generated code verifies every vector of 8-byte scalars through
//! [`Scalars8`] instead (`schema/README.md`); reading them is unaffected, as the crate reads
//! scalars byte by byte.

use std::marker::PhantomData;

use flatbuffers::{InvalidFlatbuffer, SimpleToVerifyInSlice, Verifiable, Verifier};

/// A vector of 8-byte scalars (`T` is `i64`, `u64` or `f64`), for verification only: its
/// length is checked as the crate checks any vector's; its elements must be aligned and in
/// the buffer when there are any.
pub(crate) struct Scalars8<'a, T>(PhantomData<&'a T>);

impl<T: SimpleToVerifyInSlice> Verifiable for Scalars8<'_, T> {
    fn run_verifier(v: &mut Verifier<'_, '_>, pos: usize) -> Result<(), InvalidFlatbuffer> {
        let len = v.get_uoffset(pos)? as usize;
        if len == 0 {
            return Ok(());
        }
        let start = pos.saturating_add(size_of::<u32>());
        v.is_aligned::<T>(start)?;
        v.range_in_buffer(start, len.saturating_mul(size_of::<T>()))
    }
}
