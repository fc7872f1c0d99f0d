//! Driving the frame loop: frame count, capture of the last frame, stats, and the title.

use std::time::{Duration, Instant};

use vk_core::timing::ms;

use crate::engine::Engine;
use crate::error::Result;
use crate::frame::{FrameLoop, Settings};
use crate::stats::Stats;
use crate::target::Target;

/// How often the window title is refreshed.
const TITLE_EVERY: Duration = Duration::from_millis(500);

/// A run of the frame loop: frames drawn so far and their timings.
#[derive(Debug)]
pub struct Run {
    frame_loop: FrameLoop,
    stats: Stats,
    frames: Option<u32>,
    title_at: Instant,
}

impl Run {
    /// A run of `frames` frames (`None`: until stopped) on `engine`, presenting to `target`.
    pub fn new(
        engine: Engine,
        target: Target,
        settings: Settings,
        frames: Option<u32>,
    ) -> Result<Run> {
        Ok(Run {
            frame_loop: FrameLoop::new(engine, target, settings)?,
            stats: Stats::default(),
            frames,
            title_at: Instant::now(),
        })
    }

    /// Whether every frame asked for is drawn.
    pub fn done(&self) -> bool {
        self.frames.is_some_and(|n| self.stats.len() >= n as usize)
    }

    /// Draws the next frame, capturing it when it is the last one asked for.
    pub fn step(&mut self) -> Result<()> {
        let last = self
            .frames
            .is_some_and(|n| self.stats.len() + 1 == n as usize);
        let t = self.frame_loop.frame(last)?;
        self.stats.push(t);
        Ok(())
    }

    /// A title for the window, twice a second: frame time, render-to-result time and
    /// the model's own time.
    pub fn title(&mut self, mode: &str) -> Option<String> {
        if self.title_at.elapsed() < TITLE_EVERY {
            return None;
        }
        self.title_at = Instant::now();
        let frame = self.stats.recent_frame_ms(30)?;
        let r2r = self
            .stats
            .recent_render_to_result_ms(30)
            .map_or_else(|| "-".to_owned(), |t| format!("{t:.2} ms"));
        let model = self
            .frame_loop
            .model_time()
            .map_or_else(|| "-".to_owned(), |d| format!("{:.2} ms", ms(d)));
        Some(format!(
            "frame-loop [{mode}] frame {frame:.2} ms, rendered->result {r2r}, model {model} on {}",
            self.frame_loop.device_name()
        ))
    }

    /// The stats line.
    pub fn stats_line(&self, mode: &str) -> String {
        self.stats.line(
            mode,
            self.frame_loop.target_name(),
            self.frame_loop.device_name(),
            self.frame_loop.validation_errors(),
        )
    }
}
