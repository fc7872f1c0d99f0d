//! An application's images as a program's inputs and outputs ([`AppImage`], converted by
//! `vk_core::image_io`'s kernels): the builder and rebinding calls, and the checks at build.
//!
//! An image-bound input is read by a conversion kernel into the program's own input buffer
//! (the buffer of its first consumer, where an unbound input is uploaded) at the start of the
//! program's command buffer; an image-bound output is converted from its producer's buffer at
//! the end. Images mix with host inputs and outputs (run by `execute`) and with
//! application buffers (run by `submit`; every input and output then bound to a buffer or an
//! image).

use std::collections::{BTreeMap, BTreeSet};

use vk_core::{AppImage, ImageError, ImageToTensor, TensorSpec, TensorToImage};

use super::error::{BindingError, BindingProblem, ProgramError, Result};
use super::spec::HandOff;
use super::wiring::Wiring;
use super::{Program, ProgramBuilder};

/// The images bound to a program, per program input and output (`None`: not an image).
#[derive(Debug, Clone, Default)]
pub(super) struct BoundImages {
    /// Per program input.
    pub inputs: Vec<Option<(AppImage, ImageToTensor)>>,
    /// Per program output.
    pub outputs: Vec<Option<(AppImage, TensorToImage)>>,
}

pub(super) fn problem(tensor: &str, problem: BindingProblem) -> ProgramError {
    ProgramError::Binding(Box::new(BindingError {
        tensor: tensor.to_owned(),
        problem,
    }))
}

/// A conversion error as a program error: a problem with the binding, or a Vulkan error.
pub(super) fn image_error(tensor: &str, e: ImageError) -> ProgramError {
    match e {
        ImageError::Problem(p) => problem(tensor, BindingProblem::Image(p)),
        ImageError::Vk(e) => ProgramError::Vk(e),
    }
}

fn unknown(name: &str, specs: &[TensorSpec], input: bool) -> ProgramError {
    let known = specs.iter().map(|s| s.name.clone()).collect();
    let p = if input {
        BindingProblem::UnknownInput { inputs: known }
    } else {
        BindingProblem::UnknownOutput { outputs: known }
    };
    problem(name, p)
}

/// Resolves the image bindings (by tensor name) against `wiring`, with every device-free
/// check: names, hand-off, a tensor bound to both a buffer and an image, and each
/// conversion's checks (dtype, shape, channels, extent, usage, format, palette).
pub(super) fn resolve(
    inputs: &BTreeMap<String, (AppImage, ImageToTensor)>,
    outputs: &BTreeMap<String, (AppImage, TensorToImage)>,
    buffers: (&BTreeSet<&str>, &BTreeSet<&str>),
    wiring: &Wiring,
    hand_off: HandOff,
) -> Result<BoundImages> {
    if inputs.is_empty() && outputs.is_empty() {
        return Ok(BoundImages::default());
    }
    let output_specs: Vec<TensorSpec> = wiring.outputs.iter().map(|(s, _)| s.clone()).collect();
    for (name, specs, input) in inputs
        .keys()
        .map(|n| (n, &wiring.inputs, true))
        .chain(outputs.keys().map(|n| (n, &output_specs, false)))
    {
        if !specs.iter().any(|s| &s.name == name) {
            return Err(unknown(name, specs, input));
        }
        let both = if input { buffers.0 } else { buffers.1 };
        if both.contains(name.as_str()) {
            return Err(problem(name, BindingProblem::BoundTwice));
        }
    }
    if hand_off == HandOff::Host {
        let name = inputs.keys().chain(outputs.keys()).next();
        return Err(problem(
            name.map_or("", String::as_str),
            BindingProblem::HostHandOff,
        ));
    }
    let mut bound = BoundImages::default();
    for spec in &wiring.inputs {
        let b = inputs.get(&spec.name);
        if let Some((image, conv)) = b {
            conv.check(image, spec)
                .map_err(|p| problem(&spec.name, BindingProblem::Image(p)))?;
        }
        bound.inputs.push(b.cloned());
    }
    for spec in &output_specs {
        let b = outputs.get(&spec.name);
        if let Some((image, conv)) = b {
            conv.check(image, spec)
                .map_err(|p| problem(&spec.name, BindingProblem::Image(p)))?;
        }
        bound.outputs.push(b.cloned());
    }
    Ok(bound)
}

impl BoundImages {
    /// Whether program input `i` is bound to an image.
    pub fn input(&self, i: usize) -> bool {
        matches!(self.inputs.get(i), Some(Some(_)))
    }

    /// Whether program output `o` is bound to an image.
    pub fn output(&self, o: usize) -> bool {
        matches!(self.outputs.get(o), Some(Some(_)))
    }

    /// Whether every one of `inputs` inputs and `outputs` outputs is bound to an image.
    pub fn all(&self, inputs: usize, outputs: usize) -> bool {
        (0..inputs).all(|i| self.input(i)) && (0..outputs).all(|o| self.output(o))
    }
}

impl ProgramBuilder {
    /// Binds program input `name` to the application's image: at the start of each execution
    /// a conversion kernel reads it into the program's own input buffer, as `conv` says
    /// (`tensor = (texel - mean) * scale`, NCHW or NHWC, `C` in `1..=4` from the tensor's
    /// shape, `H` x `W` the image's extent, f32 or f16). Images mix with host inputs (run by
    /// [`Program::execute`], which then takes only the inputs not bound to an image) and with
    /// [`ProgramBuilder::bind_input`]'s buffers (every input and output then bound to a buffer
    /// or an image; run by [`Program::submit`]). Checked at [`ProgramBuilder::build`], each
    /// failure a [`ProgramError::Binding`] ([`BindingProblem::Image`] for the image's own
    /// problems; `docs/engine.md`, "The images").
    ///
    /// # Safety
    /// `image.image` and `image.view` are live handles of the program's device (the view a 2D
    /// colour view of mip 0 / layer 0 of the image, of `image.format`; the image created with
    /// `image.usage` and of `image.extent`), and outlive the program (its last submission
    /// included). The image is in `VK_IMAGE_LAYOUT_GENERAL` whenever the program's submission
    /// runs, and the caller orders its other accesses to it against the program's
    /// submissions (semaphores passed to [`Program::submit`], or host waits around
    /// [`Program::execute`]).
    pub unsafe fn bind_input_image(
        mut self,
        name: &str,
        image: AppImage,
        conv: ImageToTensor,
    ) -> Self {
        self.image_inputs.insert(name.to_owned(), (image, conv));
        self
    }

    /// Binds program output `name` to the application's image: at the end of each execution
    /// a conversion kernel writes its producer's tensor into the image through `conv`'s
    /// colour map. [`Program::execute`] returns such an output as an empty tensor (shape
    /// `[0]`): its values are in the image. Checked as [`ProgramBuilder::bind_input_image`]
    /// is.
    ///
    /// # Safety
    /// As [`ProgramBuilder::bind_input_image`].
    pub unsafe fn bind_output_image(
        mut self,
        name: &str,
        image: AppImage,
        conv: TensorToImage,
    ) -> Self {
        self.image_outputs.insert(name.to_owned(), (image, conv));
        self
    }
}

impl Program {
    /// The inputs [`Program::execute`] takes, in order: those not bound to an image.
    pub fn host_inputs(&self) -> Vec<TensorSpec> {
        self.inputs
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.images.input(*i))
            .map(|(_, s)| s.clone())
            .collect()
    }

    /// Binds image-bound input `name` to another image of the same extent and format class
    /// (`R8G8B8A8_UNORM` and `B8G8R8A8_UNORM` are one class), checked as at build. Waits for
    /// a pending submission, rewrites the conversion's descriptor set and re-records the
    /// program's one command buffer (Vulkan invalidates a command buffer whose descriptor set
    /// is updated): no pipeline, buffer or step is made again. Binding the image already
    /// bound does nothing.
    ///
    /// # Safety
    /// As [`ProgramBuilder::bind_input_image`] for `image`.
    pub unsafe fn rebind_input_image(&mut self, name: &str, image: AppImage) -> Result<()> {
        let Some(i) = self.inputs.iter().position(|s| s.name == name) else {
            return Err(unknown(name, &self.inputs, true));
        };
        // SAFETY: the caller's contract.
        unsafe { self.rebind_image(name, true, i, image) }
    }

    /// As [`Program::rebind_input_image`], for an image-bound output.
    ///
    /// # Safety
    /// As [`ProgramBuilder::bind_output_image`] for `image`.
    pub unsafe fn rebind_output_image(&mut self, name: &str, image: AppImage) -> Result<()> {
        let Some(o) = self.outputs.iter().position(|s| s.name == name) else {
            return Err(unknown(name, &self.outputs, false));
        };
        // SAFETY: the caller's contract.
        unsafe { self.rebind_image(name, false, o, image) }
    }

    /// # Safety
    /// As [`ProgramBuilder::bind_input_image`] for `image`.
    unsafe fn rebind_image(
        &mut self,
        name: &str,
        input: bool,
        index: usize,
        image: AppImage,
    ) -> Result<()> {
        let is_image = if input {
            self.images.input(index)
        } else {
            self.images.output(index)
        };
        let plan = self.plan.as_mut().filter(|_| is_image);
        let Some(plan) = plan else {
            return Err(problem(name, BindingProblem::NotImage { input }));
        };
        let runners: Vec<&dyn super::runner::Runner> =
            self.steps.iter().map(|s| &*s.runner).collect();
        // SAFETY: the caller's contract; the steps outlive the plan.
        unsafe { plan.rebind_image(&runners, name, input, index, image) }?;
        if input {
            if let Some(Some((bound, _))) = self.images.inputs.get_mut(index) {
                *bound = image;
            }
        } else if let Some(Some((bound, _))) = self.images.outputs.get_mut(index) {
            *bound = image;
        }
        Ok(())
    }
}
