//! The frame loop: render the scene, run the model on it, blit the result into the target,
//! present; timed on the host (frame time) and on the device (timestamps: "image rendered"
//! to "result written").
//!
//! Per frame, with the model on the device (the program's input bound to the scene image,
//! its output to the result image: `ProgramBuilder::bind_input_image` / `bind_output_image`):
//! 1. the engine's render submission draws the scene, signalling the timeline at `t + 1`;
//! 2. `Program::submit` waits for `t + 1`, reads the scene image into its input tensor, runs,
//!    writes its output into the result image, and signals `t + 2`;
//! 3. the engine's present submission waits for `t + 2` (and the swapchain's acquire), blits
//!    the result image into the target and signals the present.
//!
//! Timestamps: "image rendered" at the end of the render pass, "result written" at the start
//! of the present submission (after its wait for the program's signal).
//!
//! With `--host-path` the render submission copies the scene into a host buffer instead and
//! is waited for; `Program::execute` runs on host tensors; the present submission uploads the
//! result. With `--no-model` the scene itself is blitted.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ash::vk;
use shared_runtime::{ContextParts, SharedContext, SharedKey, SharingOptions};
use vk_core::{
    AppImage, Buffer, Device, HostTensor, ImageToTensor, MemoryLocation, SemaphoreSignal,
    SemaphoreWait, Submission, TensorToImage, Timestamps,
};
use vkdelegate::program::{DeviceChoice, Program};

use crate::engine::Engine;
use crate::error::{Error, Result, VkCall};
use crate::image::{self, Image, LAYER, Use};
use crate::model;
use crate::scene::Scene;
use crate::target::{Acquired, Target};

/// What runs between render and present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The model on the device, bound to the engine's buffers, ordered by semaphores.
    Model,
    /// Render only: the scene is presented as drawn.
    NoModel,
    /// The model through the host: download, `Program::execute`, upload.
    HostPath,
}

impl Mode {
    /// Its name in the stats line.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Model => "model",
            Mode::NoModel => "no-model",
            Mode::HostPath => "host-path",
        }
    }
}

/// How the program gets the engine's device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// Registered with shared-runtime (`register_external`), the program built with
    /// `DeviceChoice::Shared` on that key.
    Shared,
    /// Given to the program directly (`DeviceChoice::Device`).
    Direct,
}

/// The frame loop's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Render size.
    pub extent: vk::Extent2D,
    /// What runs between render and present.
    pub mode: Mode,
    /// How the program gets the device.
    pub sharing: Sharing,
    /// Where to write the last presented image.
    pub screenshot: Option<PathBuf>,
    /// Where to write the last rendered scene (the model's input).
    pub scene_dump: Option<PathBuf>,
}

/// Timings of one frame.
#[derive(Debug, Clone, Copy)]
pub struct FrameTimes {
    /// Host wall time from the frame's start to its last submission's completion.
    pub frame: Duration,
    /// Device time from "image rendered" to "result written" (`None`: no model, or no
    /// timestamps on this queue).
    pub render_to_result: Option<Duration>,
    /// The program's own time (its steps' timings: device timestamps on the device path,
    /// host wall time per step on the host path).
    pub model: Option<Duration>,
}

/// The timeline semaphore ordering the engine's submissions and the program's.
struct Timeline {
    device: Device,
    raw: vk::Semaphore,
    value: u64,
}

impl Timeline {
    fn new(device: &Device) -> Result<Timeline> {
        let mut kind = vk::SemaphoreTypeCreateInfo::default()
            .semaphore_type(vk::SemaphoreType::TIMELINE)
            .initial_value(0);
        let info = vk::SemaphoreCreateInfo::default().push_next(&mut kind);
        // SAFETY: valid create info (timeline semaphores are enabled); destroyed in `Drop`.
        let raw = unsafe { device.raw().create_semaphore(&info, None) }.vk("vkCreateSemaphore")?;
        Ok(Timeline {
            device: device.clone(),
            raw,
            value: 0,
        })
    }

    fn wait(&self, value: u64, stage: vk::PipelineStageFlags) -> SemaphoreWait {
        SemaphoreWait {
            semaphore: self.raw,
            stage,
            value,
        }
    }

    fn signal(&self, value: u64) -> SemaphoreSignal {
        SemaphoreSignal {
            semaphore: self.raw,
            value,
        }
    }
}

impl Drop for Timeline {
    fn drop(&mut self) {
        // SAFETY: dropped after the program and the engine's submissions, which waited for
        // every batch using it.
        unsafe { self.device.raw().destroy_semaphore(self.raw, None) };
    }
}

/// The model's side of the loop.
enum Model {
    None,
    /// Input bound to the scene image, output to the result image.
    Device {
        program: Program,
    },
    /// Unbound; `down` receives the scene, `up` holds the result to upload.
    Host {
        program: Program,
        down: Buffer,
        up: Buffer,
    },
}

/// The key the engine registers its device under.
pub const SHARED_TOKEN: &str = "frame-loop";

/// Queries: frame start, image rendered, result written, frame end.
const QUERIES: u32 = 4;

/// Everything the loop owns. Field order is drop order: the program and the submissions wait
/// for their work first, the engine (which destroys the device) goes last.
pub struct FrameLoop {
    model: Model,
    render: Submission,
    present: Submission,
    timestamps: Option<Timestamps>,
    timeline: Timeline,
    result: Image,
    scene: Scene,
    target: Target,
    shared: Option<Arc<SharedContext>>,
    settings: Settings,
    frame: u32,
    device_name: String,
    engine: Engine,
}

impl std::fmt::Debug for FrameLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameLoop")
            .field("settings", &self.settings)
            .field("frame", &self.frame)
            .finish_non_exhaustive()
    }
}

/// Result image usage: the model writes it as a storage image, the host path uploads into it,
/// the blit reads it.
const RESULT_USAGE: vk::ImageUsageFlags = vk::ImageUsageFlags::from_raw(
    vk::ImageUsageFlags::STORAGE.as_raw()
        | vk::ImageUsageFlags::TRANSFER_SRC.as_raw()
        | vk::ImageUsageFlags::TRANSFER_DST.as_raw(),
);

/// The device choice for the program, registering the engine's device when shared.
fn device_choice(
    device: &Device,
    sharing: Sharing,
) -> Result<(DeviceChoice, Option<Arc<SharedContext>>)> {
    match sharing {
        Sharing::Direct => Ok((DeviceChoice::Device(device.clone()), None)),
        Sharing::Shared => {
            let key = SharedKey::new(SHARED_TOKEN, 0);
            let parts = ContextParts {
                device: device.clone(),
                anchor: None,
            };
            let context = shared_runtime::global().register_external(key, parts)?;
            let options = SharingOptions {
                token: SHARED_TOKEN.into(),
                ..SharingOptions::with_mode(shared_runtime::Mode::LookupOnly)
            };
            Ok((DeviceChoice::Shared(options), Some(context)))
        }
    }
}

/// `image` as the program sees it.
fn app_image(image: &Image, usage: vk::ImageUsageFlags) -> AppImage {
    AppImage::new(
        image.raw(),
        image.view(),
        image::FORMAT,
        image.extent(),
        usage,
    )
}

/// The model's side for `mode`.
fn build_model(
    device: &Device,
    settings: &Settings,
    choice: DeviceChoice,
    scene: &Scene,
    result: &Image,
) -> Result<Model> {
    let vk::Extent2D { width, height } = settings.extent;
    let builder = model::program(width, height, choice);
    match settings.mode {
        Mode::NoModel => Ok(Model::None),
        Mode::Model => {
            let scene = app_image(scene.image(), crate::scene::SCENE_USAGE);
            let result = app_image(result, RESULT_USAGE);
            // SAFETY: both images are live, of the program's device, made with the usage
            // stated, their views 2D colour views of mip 0 / layer 0, and they outlive the
            // program (`FrameLoop` drops it first). Both are in GENERAL whenever the program
            // runs (the render pass leaves the scene there, the render submission moves the
            // result there), and the engine orders its accesses to them against the program's
            // by the timeline semaphore passed to `submit`.
            let program = unsafe {
                builder
                    .bind_input_image(model::INPUT, scene, ImageToTensor::default())
                    .bind_output_image(model::OUTPUT, result, TensorToImage::default())
            }
            .build()?;
            Ok(Model::Device { program })
        }
        Mode::HostPath => {
            let bytes = 4 * u64::from(width) * u64::from(height);
            let down = Buffer::new(
                device,
                bytes,
                MemoryLocation::Host,
                vk::BufferUsageFlags::TRANSFER_DST,
                "download",
            )?;
            let up = Buffer::new(
                device,
                bytes,
                MemoryLocation::Host,
                vk::BufferUsageFlags::TRANSFER_SRC,
                "upload",
            )?;
            Ok(Model::Host {
                program: builder.build()?,
                down,
                up,
            })
        }
    }
}

impl FrameLoop {
    /// The loop on `engine`, presenting to `target`.
    pub fn new(engine: Engine, target: Target, settings: Settings) -> Result<FrameLoop> {
        let device = engine.device().clone();
        let device_name = device.capabilities().name.clone();
        let scene = Scene::new(&device, settings.extent)?;
        let result = Image::new(&device, settings.extent, RESULT_USAGE, "result image")?;
        let render = Submission::new(&device, 1, "frame-loop render")?;
        let present = Submission::new(&device, 1, "frame-loop present")?;
        let timestamps = Timestamps::new(&device, QUERIES)?;
        let timeline = Timeline::new(&device)?;
        // Registered last: nothing after it fails but the model, which unregisters it.
        let (choice, shared) = device_choice(&device, settings.sharing)?;
        let model = match build_model(&device, &settings, choice, &scene, &result) {
            Ok(m) => m,
            Err(e) => {
                if let Some(context) = &shared {
                    let _ = shared_runtime::global().unregister(context);
                }
                return Err(e);
            }
        };
        Ok(FrameLoop {
            model,
            render,
            present,
            timestamps,
            timeline,
            result,
            scene,
            target,
            shared,
            settings,
            frame: 0,
            device_name,
            engine,
        })
    }

    /// The device's name.
    pub fn device_name(&self) -> &str {
        &self.device_name
    }

    /// The target's name (`window` or `offscreen`).
    pub fn target_name(&self) -> &'static str {
        self.target.name()
    }

    /// Validation errors reported so far.
    pub fn validation_errors(&self) -> u64 {
        self.engine.validation_errors()
    }

    /// The model's last device time per execution (its steps' timestamps), if it has one.
    pub fn model_time(&self) -> Option<Duration> {
        let program = match &self.model {
            Model::Device { program, .. } | Model::Host { program, .. } => program,
            Model::None => return None,
        };
        let steps = &program.last_timings().steps;
        (!steps.is_empty()).then(|| steps.iter().map(|(_, d)| *d).sum())
    }

    fn device(&self) -> &Device {
        self.engine.device()
    }

    /// Renders, runs the model on and presents one frame; with `capture`, also reads back the
    /// scene and the presented image and writes them where the settings say.
    pub fn frame(&mut self, capture: bool) -> Result<FrameTimes> {
        let start = Instant::now();
        let t = self.timeline.value;
        let scene_dump = if capture && self.settings.scene_dump.is_some() {
            Some(self.readback(self.settings.extent, "scene dump")?)
        } else {
            None
        };
        self.record_render(scene_dump.as_ref())?;
        let render_waits: [SemaphoreWait; 0] = [];
        let render_signals = [self.timeline.signal(t + 1)];
        // SAFETY: the command buffer is executable; the timeline's values only increase.
        unsafe { self.render.submit(0, &render_waits, &render_signals) }?;
        let ready = self.run_model(t)?;
        let target = self.target.acquire()?;
        let shot = if capture && self.settings.screenshot.is_some() {
            let extent = if self.target.readable() {
                target.extent
            } else {
                self.settings.extent
            };
            Some((self.readback(extent, "screenshot")?, extent))
        } else {
            None
        };
        self.record_present(target, shot.as_ref().map(|(b, _)| b))?;
        self.submit_present(target, ready)?;
        self.target.present(target.index)?;
        self.present.wait()?;
        self.render.wait()?;
        if let Model::Device { program, .. } = &mut self.model {
            program.wait()?;
        }
        self.timeline.value = t + 2;
        self.frame += 1;
        let frame = start.elapsed();
        self.write_captures(scene_dump.as_ref(), shot.as_ref())?;
        Ok(FrameTimes {
            frame,
            render_to_result: self.render_to_result()?,
            model: self.model_time(),
        })
    }

    /// Writes the read-back scene and screenshot as PNG files where the settings say.
    fn write_captures(
        &self,
        scene_dump: Option<&Buffer>,
        shot: Option<&(Buffer, vk::Extent2D)>,
    ) -> Result<()> {
        if let (Some(buffer), Some(path)) = (scene_dump, &self.settings.scene_dump) {
            let e = self.settings.extent;
            image::write_png(path, e.width, e.height, &read_rgba(buffer, e, false)?)?;
        }
        if let (Some((buffer, e)), Some(path)) = (shot, &self.settings.screenshot) {
            let bgra = self.target.readable() && self.target.bgra();
            image::write_png(path, e.width, e.height, &read_rgba(buffer, *e, bgra)?)?;
        }
        Ok(())
    }

    fn readback(&self, extent: vk::Extent2D, what: &str) -> Result<Buffer> {
        let bytes = 4 * u64::from(extent.width) * u64::from(extent.height);
        Ok(Buffer::new(
            self.device(),
            bytes,
            MemoryLocation::Host,
            vk::BufferUsageFlags::TRANSFER_DST,
            what,
        )?)
    }

    /// The render submission: timestamps, the scene, and the copy out of it for the model.
    fn record_render(&mut self, dump: Option<&Buffer>) -> Result<()> {
        let device = self.engine.device().clone();
        let d = device.raw();
        let cmd = self.render.begin(0)?;
        let scene = self.scene.image();
        let result = &self.result;
        let copy = [vk::BufferImageCopy::default()
            .image_subresource(LAYER)
            .image_extent(scene.extent().into())];
        // SAFETY: `cmd` is recording, outside a render pass; every object is live; the
        // render pass leaves the scene in GENERAL with its writes available to compute and
        // transfer reads.
        unsafe {
            if let Some(ts) = &self.timestamps {
                ts.reset(cmd);
                ts.write(cmd, vk::PipelineStageFlags::TOP_OF_PIPE, 0);
            }
            self.scene.record(cmd, self.frame);
            if let Some(ts) = &self.timestamps {
                ts.write(cmd, vk::PipelineStageFlags::COLOR_ATTACHMENT_OUTPUT, 1);
            }
            match &self.model {
                Model::Device { .. } => {
                    // The program writes the whole result image: discard the last frame's.
                    image::barrier(
                        &device,
                        cmd,
                        result.raw(),
                        Use::DISCARD_AFTER_TRANSFER,
                        Use::COMPUTE_WRITE,
                    );
                }
                Model::Host { down, .. } => {
                    d.cmd_copy_image_to_buffer(
                        cmd,
                        scene.raw(),
                        vk::ImageLayout::GENERAL,
                        down.raw(),
                        &copy,
                    );
                    vk_core::barrier::host_read_barrier(&device, cmd);
                }
                Model::None => {}
            }
            if let Some(buffer) = dump {
                d.cmd_copy_image_to_buffer(
                    cmd,
                    scene.raw(),
                    vk::ImageLayout::GENERAL,
                    buffer.raw(),
                    &copy,
                );
                vk_core::barrier::host_read_barrier(&device, cmd);
            }
        }
        self.render.end(0)?;
        Ok(())
    }

    /// Runs the model after the render submission; returns the timeline value the present
    /// submission waits for.
    fn run_model(&mut self, t: u64) -> Result<u64> {
        let extent = self.settings.extent;
        match &mut self.model {
            Model::None => Ok(t + 1),
            Model::Device { program, .. } => {
                let waits = [self
                    .timeline
                    .wait(t + 1, vk::PipelineStageFlags::ALL_COMMANDS)];
                let signals = [self.timeline.signal(t + 2)];
                // SAFETY: the timeline is live on the program's device and its values only
                // increase; the engine touches the bound buffers only ordered by it.
                unsafe { program.submit(&waits, &signals) }?;
                Ok(t + 2)
            }
            Model::Host { program, down, up } => {
                self.render.wait()?;
                let mut rgba = vec![0u8; down.size() as usize];
                down.read(0, &mut rgba)?;
                let x = model::to_tensor(&rgba, extent.width, extent.height);
                let x = HostTensor::from_f32(model::shape(extent.width, extent.height), &x)
                    .map_err(|e| Error::HostTensor(e.to_string()))?;
                let y = program.execute(&[x])?;
                let y = y
                    .first()
                    .and_then(HostTensor::to_f32)
                    .ok_or_else(|| Error::HostTensor("the model returned no f32 output".into()))?;
                up.write(0, &model::to_rgba(&y, extent.width, extent.height))?;
                Ok(t + 1)
            }
        }
    }

    /// The present submission: the host path's upload into the result image, the blit into
    /// the target, the screenshot copy.
    fn record_present(&mut self, target: Acquired, shot: Option<&Buffer>) -> Result<()> {
        let device = self.engine.device().clone();
        let cmd = self.present.begin(0)?;
        let result = &self.result;
        let copy = [vk::BufferImageCopy::default()
            .image_subresource(LAYER)
            .image_extent(result.extent().into())];
        // SAFETY: `cmd` is recording, outside a render pass; every object is live; layouts
        // follow the barriers recorded here.
        unsafe {
            let src = match &self.model {
                // Written by the program's submission, which this one waits for.
                Model::Device { .. } => result,
                Model::Host { up, .. } => {
                    image::barrier(&device, cmd, result.raw(), Use::NONE, Use::TRANSFER_WRITE);
                    device.raw().cmd_copy_buffer_to_image(
                        cmd,
                        up.raw(),
                        result.raw(),
                        vk::ImageLayout::GENERAL,
                        &copy,
                    );
                    image::barrier(
                        &device,
                        cmd,
                        result.raw(),
                        Use::TRANSFER_WRITE,
                        Use::TRANSFER_READ,
                    );
                    result
                }
                Model::None => self.scene.image(),
            };
            if let Some(ts) = &self.timestamps {
                ts.write(cmd, vk::PipelineStageFlags::ALL_COMMANDS, 2);
            }
            self.target.record_blit(&device, cmd, src, target, shot);
            if let Some(ts) = &self.timestamps {
                ts.write(cmd, vk::PipelineStageFlags::ALL_COMMANDS, 3);
            }
        }
        self.present.end(0)?;
        Ok(())
    }

    fn submit_present(&mut self, target: Acquired, ready: u64) -> Result<()> {
        let mut waits = vec![self.timeline.wait(
            ready,
            vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
        )];
        if let Some(acquired) = self.target.wait_semaphore() {
            waits.push(SemaphoreWait::binary(
                acquired,
                vk::PipelineStageFlags::TRANSFER,
            ));
        }
        let signals: Vec<SemaphoreSignal> = self
            .target
            .signal_semaphore(target.index)
            .map(SemaphoreSignal::binary)
            .into_iter()
            .collect();
        // SAFETY: the command buffer is executable; `ready` is signalled by a batch already
        // submitted; the acquire semaphore has a pending signal, the present semaphore none.
        unsafe { self.present.submit(0, &waits, &signals) }?;
        Ok(())
    }

    fn render_to_result(&self) -> Result<Option<Duration>> {
        let Some(ts) = &self.timestamps else {
            return Ok(None);
        };
        if self.settings.mode == Mode::NoModel {
            return Ok(None);
        }
        Ok(ts.elapsed(&[(1, 2)])?.first().copied())
    }
}

/// The pixels of `buffer` (`extent`, tightly packed) as RGBA, swapping blue and red when the
/// image was stored blue first.
fn read_rgba(buffer: &Buffer, extent: vk::Extent2D, bgra: bool) -> Result<Vec<u8>> {
    let mut px = vec![0u8; 4 * extent.width as usize * extent.height as usize];
    buffer.read(0, &mut px)?;
    if bgra {
        for p in px.chunks_exact_mut(4) {
            p.swap(0, 2);
        }
    }
    Ok(px)
}

impl Drop for FrameLoop {
    fn drop(&mut self) {
        // Holders keep the context; only discoverability ends, so the device's last
        // reference goes with the program.
        if let Some(context) = self.shared.take() {
            let _ = shared_runtime::global().unregister(&context);
        }
    }
}
