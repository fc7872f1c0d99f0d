//! Inputs and outputs bound to memory the caller provides ([`External`]): which resource each
//! names, and the checks (device, size, alignment, alias groups) before binding.

use vk_core::{BufferSlice, Device, vk};

use super::resources::Tensors;
use crate::error::{BindError, Result};
use crate::format::{Binding, Vgf};

/// An input or output, by position or name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IoRef {
    /// Input `i`.
    Input(usize),
    /// Output `i`.
    Output(usize),
    /// The input or output of this name (`input_<i>` / `output_<i>` where the file has none).
    Name(String),
}

impl From<&str> for IoRef {
    fn from(name: &str) -> IoRef {
        IoRef::Name(name.to_owned())
    }
}

impl std::fmt::Display for IoRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IoRef::Input(i) => write!(f, "input {i}"),
            IoRef::Output(i) => write!(f, "output {i}"),
            IoRef::Name(n) => write!(f, "input or output '{n}'"),
        }
    }
}

/// Memory a caller provides for an input or output tensor: the tensor (and the model's buffer
/// over it) is bound at `slice.memory` + `slice.memory_offset` instead of memory of its own.
#[derive(Debug, Clone)]
pub struct External {
    io: IoRef,
    slice: BufferSlice,
    device: Device,
}

impl External {
    /// Binds `io` to `slice`, memory of `device`.
    ///
    /// # Safety
    /// `slice.memory` must be memory of `device` that stays allocated while the model lives,
    /// holding `slice.size` bytes from `slice.memory_offset` of a memory type the tensor may
    /// be bound to (any device-local type of an allocation made for a storage buffer on the
    /// devices this crate runs on). The caller orders every other access to those bytes
    /// against the model's work (barriers or semaphores).
    pub unsafe fn new(io: impl Into<IoRef>, slice: BufferSlice, device: &Device) -> External {
        External {
            io: io.into(),
            slice,
            device: device.clone(),
        }
    }

    /// The input or output.
    pub fn io(&self) -> &IoRef {
        &self.io
    }

    /// The memory.
    pub fn slice(&self) -> BufferSlice {
        self.slice
    }
}

/// The name of input or output `i` (the file's, or `<prefix>_<i>`).
pub(super) fn io_name(names: &[&str], i: usize, prefix: &str) -> String {
    names
        .get(i)
        .filter(|n| !n.is_empty())
        .map(|n| n.to_string())
        .unwrap_or_else(|| format!("{prefix}_{i}"))
}

/// The resource `io` names.
fn resource_of(vgf: &Vgf<'_>, io: &IoRef) -> Option<usize> {
    let seq = &vgf.sequence;
    let at = |slots: &[Binding], i: usize| slots.get(i).map(|b| b.mrt_index as usize);
    match io {
        IoRef::Input(i) => at(&seq.inputs, *i),
        IoRef::Output(i) => at(&seq.outputs, *i),
        IoRef::Name(n) => {
            let find = |slots: &[Binding], names: &[&str], prefix: &str| {
                (0..slots.len())
                    .find(|&i| io_name(names, i, prefix) == *n)
                    .and_then(|i| at(slots, i))
            };
            find(&seq.inputs, &seq.input_names, "input")
                .or_else(|| find(&seq.outputs, &seq.output_names, "output"))
        }
    }
}

/// Per resource, the external memory it is bound to: each [`External`] resolved and checked
/// against the tensor's requirements.
pub(super) fn resolve(
    vgf: &Vgf<'_>,
    device: &Device,
    externals: &[External],
    tensors: &Tensors,
) -> Result<Vec<Option<BufferSlice>>> {
    let mut out = vec![None; vgf.resources.len()];
    for e in externals {
        let io = e.io.to_string();
        let mrt = resource_of(vgf, &e.io).ok_or(BindError::UnknownIo { io: io.clone() })?;
        if out[mrt].is_some() {
            return Err(BindError::Twice { io }.into());
        }
        if !e.device.same_as(device) {
            return Err(BindError::OtherDevice { io }.into());
        }
        let req: vk::MemoryRequirements =
            tensors.reqs[mrt].ok_or(BindError::UnknownIo { io: io.clone() })?;
        if e.slice.size < req.size {
            return Err(BindError::TooSmall {
                io,
                need: req.size,
                size: e.slice.size,
            }
            .into());
        }
        if req.alignment > 1 && e.slice.memory_offset % req.alignment != 0 {
            return Err(BindError::Misaligned {
                io,
                offset: e.slice.memory_offset,
                alignment: req.alignment,
            }
            .into());
        }
        if let Some(group) = vgf.resources[mrt].alias_group {
            let shared = vgf.resources.iter().any(|r| {
                r.index != mrt && r.alias_group == Some(group) && tensors.reqs[r.index].is_some()
            });
            if shared {
                return Err(BindError::Aliased { io, group }.into());
            }
        }
        out[mrt] = Some(e.slice);
    }
    Ok(out)
}
