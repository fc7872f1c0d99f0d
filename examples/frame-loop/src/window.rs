//! The windowed loop: a winit window, its surface and swapchain, one frame per redraw.

use std::sync::Arc;

use ash::vk;
use winit::application::ApplicationHandler;
use winit::dpi::PhysicalSize;
use winit::event::WindowEvent;
use winit::event_loop::{ActiveEventLoop, EventLoop};
use winit::raw_window_handle::{HasDisplayHandle, HasWindowHandle};
use winit::window::{Window, WindowId};

use crate::engine::{Engine, WindowHandles};
use crate::error::{Error, Result};
use crate::frame::Settings;
use crate::run::Run;
use crate::target::{Swapchain, Target};

/// The application: the window and, once it exists, the run drawing into it. Field order is
/// drop order: the run (and its surface) before the window.
struct App {
    run: Option<Run>,
    window: Option<Arc<Window>>,
    settings: Settings,
    frames: Option<u32>,
    error: Option<Error>,
    stats: Option<String>,
}

fn handles(window: &Window) -> Result<WindowHandles> {
    let display = window
        .display_handle()
        .map_err(|e| Error::Window(e.to_string()))?
        .as_raw();
    let window = window
        .window_handle()
        .map_err(|e| Error::Window(e.to_string()))?
        .as_raw();
    Ok(WindowHandles { display, window })
}

impl App {
    fn start(&mut self, event_loop: &ActiveEventLoop) -> Result<()> {
        let vk::Extent2D { width, height } = self.settings.extent;
        let attributes = Window::default_attributes()
            .with_title("frame-loop")
            .with_inner_size(PhysicalSize::new(width, height));
        let window = Arc::new(
            event_loop
                .create_window(attributes)
                .map_err(|e| Error::Window(e.to_string()))?,
        );
        // SAFETY: the window outlives the engine: `App` drops the run (which owns it) first.
        let engine = unsafe { Engine::new(Some(handles(&window)?)) }?;
        let size = window.inner_size();
        let extent = vk::Extent2D {
            width: size.width.max(1),
            height: size.height.max(1),
        };
        let target = Target::Window(Swapchain::new(&engine, extent)?);
        self.run = Some(Run::new(
            engine,
            target,
            self.settings.clone(),
            self.frames,
        )?);
        self.window = Some(window);
        Ok(())
    }

    fn redraw(&mut self) -> Result<bool> {
        let Some(run) = &mut self.run else {
            return Ok(false);
        };
        run.step()?;
        let mode = self.settings.mode.name();
        if let (Some(title), Some(window)) = (run.title(mode), &self.window) {
            window.set_title(&title);
        }
        if run.done() {
            self.stats = Some(run.stats_line(mode));
            return Ok(true);
        }
        Ok(false)
    }

    fn fail(&mut self, event_loop: &ActiveEventLoop, e: Error) {
        self.error = Some(e);
        event_loop.exit();
    }
}

impl ApplicationHandler for App {
    fn resumed(&mut self, event_loop: &ActiveEventLoop) {
        if self.window.is_none() && self.error.is_none() {
            if let Err(e) = self.start(event_loop) {
                self.fail(event_loop, e);
            }
        }
    }

    fn window_event(&mut self, event_loop: &ActiveEventLoop, _id: WindowId, event: WindowEvent) {
        match event {
            WindowEvent::CloseRequested => event_loop.exit(),
            WindowEvent::RedrawRequested => match self.redraw() {
                Ok(true) => event_loop.exit(),
                Ok(false) => {}
                Err(e) => self.fail(event_loop, e),
            },
            _ => {}
        }
    }

    fn about_to_wait(&mut self, _event_loop: &ActiveEventLoop) {
        if let Some(window) = &self.window {
            window.request_redraw();
        }
    }

    fn exiting(&mut self, _event_loop: &ActiveEventLoop) {
        if self.stats.is_none() {
            self.stats = self
                .run
                .as_ref()
                .map(|r| r.stats_line(self.settings.mode.name()));
        }
        self.run = None;
    }
}

/// Runs the loop in a window until it is closed or `frames` are drawn; returns the stats
/// line.
pub fn run(settings: Settings, frames: Option<u32>) -> Result<String> {
    let event_loop = EventLoop::new().map_err(|e| Error::Window(e.to_string()))?;
    let mut app = App {
        run: None,
        window: None,
        settings,
        frames,
        error: None,
        stats: None,
    };
    event_loop
        .run_app(&mut app)
        .map_err(|e| Error::Window(e.to_string()))?;
    app.run = None;
    match app.error.take() {
        Some(e) => Err(e),
        None => Ok(app.stats.take().unwrap_or_default()),
    }
}
