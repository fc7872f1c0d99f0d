//! An application's own buffers as a program's inputs and outputs ([`AppBuffer`]): the checks
//! at build time and, per step, the slices its inputs and outputs are bound to.
//!
//! A bound input is read where the application wrote it: its consumers are loaded bound to
//! the application's slice, so the plan records no upload. A bound output is written where the
//! application reads it: its producer is loaded with that output bound to the slice (compute:
//! `ExternalBindings::bind_output`; VGF: an `External` output). Where a producer cannot bind
//! it (a VGF output in an alias group), the plan records one device copy into the slice.

use std::collections::BTreeMap;

use vk_core::{BufferSlice, Device, TensorSpec, vk};

use super::error::{BindingError, BindingProblem, ProgramError, Result};
use super::image::BoundImages;
use super::spec::HandOff;
use super::step::Prepared;
use super::wiring::{Source, Wiring};

/// A buffer range of the application's, with the usage its buffer was created with (Vulkan
/// cannot be asked for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppBuffer {
    /// Where the tensor's bytes are (packed, row-major, from `slice.offset`).
    pub slice: BufferSlice,
    /// The usage `slice.buffer` was created with.
    pub usage: vk::BufferUsageFlags,
    /// The queue family that owns the buffer when it was created with
    /// `VK_SHARING_MODE_EXCLUSIVE` and is used by another family than the program's
    /// ([`AppBuffer::exclusive_to`]); `None`: concurrent sharing, or owned by the program's
    /// family.
    pub exclusive_family: Option<u32>,
}

impl AppBuffer {
    /// A range of a buffer created with `usage`.
    pub fn new(slice: BufferSlice, usage: vk::BufferUsageFlags) -> AppBuffer {
        AppBuffer {
            slice,
            usage,
            exclusive_family: None,
        }
    }

    /// States that the buffer is owned by queue family `family` (`VK_SHARING_MODE_EXCLUSIVE`).
    /// A program on another family's queue refuses it with [`BindingProblem::QueueFamily`]:
    /// transfer the buffer's ownership to the program's family first (a release barrier on
    /// the engine's queue, an acquire on the program's), or create it with
    /// `VK_SHARING_MODE_CONCURRENT`.
    pub fn exclusive_to(mut self, family: u32) -> AppBuffer {
        self.exclusive_family = Some(family);
        self
    }
}

/// The application's buffers of a program, resolved against its wiring.
#[derive(Debug, Clone, Default)]
pub(super) struct Bound {
    /// Per program input.
    pub inputs: Vec<Option<AppBuffer>>,
    /// Per program output.
    pub outputs: Vec<Option<AppBuffer>>,
}

fn problem(tensor: &str, problem: BindingProblem) -> ProgramError {
    ProgramError::Binding(Box::new(BindingError {
        tensor: tensor.to_owned(),
        problem,
    }))
}

fn is_compute(p: &Prepared) -> bool {
    match p {
        Prepared::Compute(_) => true,
        #[cfg(feature = "compute")]
        Prepared::Graph(_) => true,
        Prepared::Vgf(_) => false,
    }
}

/// Bytes a bound tensor must hold: its packed bytes, padded to whole vec4s where a compute
/// step reads or writes it (its shaders touch whole vec4s). The padding is to 16 bytes in
/// either precision: a vec4 of f32, or two f16vec4s (8 bytes each) of an f16 tensor, as the
/// compute delegate pads its own storages.
fn need(spec: &TensorSpec, compute: bool) -> u64 {
    let bytes = spec.bytes().unwrap_or(usize::MAX) as u64;
    if compute {
        bytes.div_ceil(16).saturating_mul(16)
    } else {
        bytes
    }
}

fn check_buffer(
    spec: &TensorSpec,
    b: &AppBuffer,
    need: u64,
    usage: vk::BufferUsageFlags,
) -> Result<()> {
    if b.slice.size < need {
        return Err(problem(
            &spec.name,
            BindingProblem::TooSmall {
                size: b.slice.size,
                need,
            },
        ));
    }
    let missing = usage & !b.usage;
    if !missing.is_empty() {
        return Err(problem(
            &spec.name,
            BindingProblem::MissingUsage {
                missing,
                need: usage,
            },
        ));
    }
    Ok(())
}

/// Resolves `inputs` and `outputs` (by tensor name) against `wiring`, checking every device-free
/// property: names, hand-off, all-or-none (an input or output bound to an image counts as
/// bound), sizes and usage.
pub(super) fn resolve(
    inputs: &BTreeMap<String, AppBuffer>,
    outputs: &BTreeMap<String, AppBuffer>,
    wiring: &Wiring,
    prepared: &[Prepared],
    hand_off: HandOff,
    images: &BoundImages,
) -> Result<Bound> {
    if inputs.is_empty() && outputs.is_empty() {
        return Ok(Bound::default());
    }
    for (names, specs, unknown) in [
        (inputs, &wiring.inputs, true),
        (outputs, &outputs_of(wiring), false),
    ] {
        if let Some(name) = names.keys().find(|n| !specs.iter().any(|s| &s.name == *n)) {
            let known = specs.iter().map(|s| s.name.clone()).collect();
            let p = if unknown {
                BindingProblem::UnknownInput { inputs: known }
            } else {
                BindingProblem::UnknownOutput { outputs: known }
            };
            return Err(problem(name, p));
        }
    }
    if hand_off == HandOff::Host {
        let name = inputs.keys().chain(outputs.keys()).next();
        return Err(problem(
            name.map_or("", String::as_str),
            BindingProblem::HostHandOff,
        ));
    }
    let mut bound = Bound::default();
    for (i, spec) in wiring.inputs.iter().enumerate() {
        let Some(b) = inputs.get(&spec.name) else {
            if images.input(i) {
                bound.inputs.push(None);
                continue;
            }
            return Err(problem(&spec.name, BindingProblem::Unbound { input: true }));
        };
        let compute = wiring
            .steps
            .iter()
            .zip(prepared)
            .any(|(w, p)| is_compute(p) && w.sources.contains(&Source::ProgramInput(i)));
        let mut usage = vk::BufferUsageFlags::STORAGE_BUFFER;
        if compute {
            usage |= vk::BufferUsageFlags::TRANSFER_DST;
        }
        check_buffer(spec, b, need(spec, compute), usage)?;
        bound.inputs.push(Some(*b));
    }
    for (o, (spec, source)) in wiring.outputs.iter().enumerate() {
        let Some(b) = outputs.get(&spec.name) else {
            if images.output(o) {
                bound.outputs.push(None);
                continue;
            }
            return Err(problem(
                &spec.name,
                BindingProblem::Unbound { input: false },
            ));
        };
        let compute = match source {
            Source::Step { step, .. } => prepared.get(*step).is_some_and(is_compute),
            Source::ProgramInput(_) => false,
        };
        let mut usage = vk::BufferUsageFlags::STORAGE_BUFFER;
        if compute {
            usage |= vk::BufferUsageFlags::TRANSFER_SRC;
        }
        check_buffer(spec, b, need(spec, compute), usage)?;
        bound.outputs.push(Some(*b));
    }
    Ok(bound)
}

fn outputs_of(wiring: &Wiring) -> Vec<TensorSpec> {
    wiring.outputs.iter().map(|(s, _)| s.clone()).collect()
}

impl Bound {
    /// Whether the application's buffers hold the inputs and outputs (those not bound to
    /// images).
    pub fn is_bound(&self) -> bool {
        !(self.inputs.is_empty() && self.outputs.is_empty())
    }

    /// Checks every buffer's queue family and every slice's offset against the device's
    /// `minStorageBufferOffsetAlignment`.
    pub fn check_alignment(&self, wiring: &Wiring, device: &Device) -> Result<()> {
        let alignment = device
            .capabilities()
            .limits
            .min_storage_buffer_offset_alignment
            .max(1);
        let specs = wiring
            .inputs
            .iter()
            .zip(&self.inputs)
            .chain(wiring.outputs.iter().map(|(s, _)| s).zip(&self.outputs));
        let queue = device.queue().family();
        for (spec, b) in specs {
            if let Some(b) = b {
                if let Some(owner) = b.exclusive_family.filter(|&f| f != queue) {
                    return Err(problem(
                        &spec.name,
                        BindingProblem::QueueFamily { owner, queue },
                    ));
                }
                if b.slice.offset % alignment != 0 {
                    return Err(problem(
                        &spec.name,
                        BindingProblem::Misaligned {
                            offset: b.slice.offset,
                            alignment,
                        },
                    ));
                }
            }
        }
        Ok(())
    }

    /// The application's slice for program input `i`, if bound.
    pub fn input(&self, i: usize) -> Option<BufferSlice> {
        self.inputs.get(i).copied().flatten().map(|b| b.slice)
    }

    /// Per output of step `k`, the application's slice it is written to, if bound.
    pub fn step_outputs(&self, wiring: &Wiring, k: usize) -> Vec<Option<BufferSlice>> {
        let n = wiring.steps[k].io.outputs.len();
        (0..n)
            .map(|j| {
                wiring
                    .outputs
                    .iter()
                    .zip(&self.outputs)
                    .find(|((_, s), _)| *s == Source::Step { step: k, output: j })
                    .and_then(|(_, b)| b.map(|b| b.slice))
            })
            .collect()
    }

    /// Checks, for program output `o` whose producer could not bind it (`produced` lies
    /// elsewhere), that the application's buffer can receive the plan's copy.
    pub fn check_copy_target(&self, wiring: &Wiring, o: usize) -> Result<()> {
        let (Some((spec, _)), Some(Some(b))) = (wiring.outputs.get(o), self.outputs.get(o)) else {
            return Ok(());
        };
        if b.usage.contains(vk::BufferUsageFlags::TRANSFER_DST) {
            return Ok(());
        }
        Err(problem(
            &spec.name,
            BindingProblem::MissingUsage {
                missing: vk::BufferUsageFlags::TRANSFER_DST,
                need: vk::BufferUsageFlags::TRANSFER_DST,
            },
        ))
    }
}

/// Whether `produced` (where a producer writes an output) is `app` (the same memory and offset:
/// a VGF model's own buffer over the application's memory counts).
pub(super) fn written_in_place(produced: &BufferSlice, app: &BufferSlice) -> bool {
    produced.buffer == app.buffer && produced.offset == app.offset
        || produced.memory == app.memory && produced.memory_offset == app.memory_offset
}

#[cfg(test)]
mod tests {
    use super::*;
    use vk_core::DType;

    #[test]
    fn compute_bindings_need_whole_vec4s_in_either_precision() {
        let f16 = TensorSpec::new("h", DType::F16, vec![5]);
        assert_eq!(need(&f16, false), 10);
        assert_eq!(need(&f16, true), 16);
        let f16 = TensorSpec::new("h", DType::F16, vec![8]);
        assert_eq!(need(&f16, true), 16);
        let f32 = TensorSpec::new("x", DType::F32, vec![5]);
        assert_eq!(need(&f32, true), 32);
    }
}
