//! `frame-loop`: an engine's frame loop with a vkdelegate program on its device.
//!
//! The engine (this crate) makes its own Vulkan instance and device with `ash`, renders an
//! animated scene with a graphics pipeline, and hands the rendered image to a model (an
//! edge-and-blur filter, [`model`]) that runs on the same device and queue: the device is
//! adopted by vk-core and registered with shared-runtime (`register_external`), the program
//! is bound to the engine's buffers and ordered by its timeline semaphore. The model's result
//! is blitted into the swapchain image (or an offscreen image) and presented.
//!
//! The crate's README says how to run it; `ARCHITECTURE.md` lists its files.

pub mod engine;
pub mod error;
pub mod frame;
pub mod image;
pub mod model;
pub mod run;
pub mod scene;
pub mod stats;
pub mod target;
pub mod window;

pub use error::{Error, Result};
pub use frame::{Mode, Settings, Sharing};

use engine::Engine;
use run::Run;
use target::Target;

/// Frames drawn offscreen when no count is given.
pub const OFFSCREEN_FRAMES: u32 = 100;

/// Runs the loop without a display: `frames` frames into an offscreen image; returns the
/// stats line.
pub fn run_offscreen(settings: Settings, frames: Option<u32>) -> Result<String> {
    // SAFETY: no window.
    let engine = unsafe { Engine::new(None) }?;
    let target = Target::offscreen(engine.device(), settings.extent)?;
    let mut run = Run::new(
        engine,
        target,
        settings.clone(),
        Some(frames.unwrap_or(OFFSCREEN_FRAMES)),
    )?;
    while !run.done() {
        run.step()?;
    }
    Ok(run.stats_line(settings.mode.name()))
}

/// Runs the loop in a window (see [`window::run`]).
pub fn run_windowed(settings: Settings, frames: Option<u32>) -> Result<String> {
    window::run(settings, frames)
}
