//! The timings of a run and the `--stats` line.

use std::fmt::Write as _;
use std::time::Duration;

use vk_core::timing::Summary;

use crate::frame::FrameTimes;

/// Every frame's timings.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    frames: Vec<FrameTimes>,
}

impl Stats {
    /// Records one frame.
    pub fn push(&mut self, t: FrameTimes) {
        self.frames.push(t);
    }

    /// Frames recorded.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// Whether none were recorded.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// The median frame time of the last `n` frames, in milliseconds.
    pub fn recent_frame_ms(&self, n: usize) -> Option<f64> {
        let tail = &self.frames[self.frames.len().saturating_sub(n)..];
        let v: Vec<Duration> = tail.iter().map(|f| f.frame).collect();
        Summary::of_durations(&v).map(|s| s.median)
    }

    /// The median render-to-result time of the last `n` frames that have one, in
    /// milliseconds.
    pub fn recent_render_to_result_ms(&self, n: usize) -> Option<f64> {
        let tail = &self.frames[self.frames.len().saturating_sub(n)..];
        let v: Vec<Duration> = tail.iter().filter_map(|f| f.render_to_result).collect();
        Summary::of_durations(&v).map(|s| s.median)
    }

    /// The one-line summary: `key=value` pairs separated by spaces, times in milliseconds
    /// (`NaN` where there is none), the device name last and quoted.
    pub fn line(&self, mode: &str, target: &str, device: &str, validation_errors: u64) -> String {
        let frame: Vec<Duration> = self.frames.iter().map(|f| f.frame).collect();
        let r2r: Vec<Duration> = self
            .frames
            .iter()
            .filter_map(|f| f.render_to_result)
            .collect();
        let s = Summary::of_durations(&frame);
        let nan = f64::NAN;
        let (median, min, max) = s.map_or((nan, nan, nan), |s| (s.median, s.min, s.max));
        let r2r = Summary::of_durations(&r2r).map_or(nan, |s| s.median);
        let model: Vec<Duration> = self.frames.iter().filter_map(|f| f.model).collect();
        let model = Summary::of_durations(&model).map_or(nan, |s| s.median);
        let mut line = String::from("stats:");
        let _ = write!(
            line,
            " frames={} frame_ms_median={median:.3} frame_ms_min={min:.3} frame_ms_max={max:.3} \
             render_to_result_ms_median={r2r:.3} model_ms_median={model:.3} mode={mode} target={target} \
             validation_errors={validation_errors} device=\"{}\"",
            self.frames.len(),
            device.replace('"', "'"),
        );
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_parses_as_key_value_pairs() {
        let mut s = Stats::default();
        for ms in [3, 1, 2] {
            s.push(FrameTimes {
                frame: Duration::from_millis(ms),
                render_to_result: Some(Duration::from_micros(500)),
                model: None,
            });
        }
        let line = s.line("model", "offscreen", "llvmpipe \"x\"", 0);
        assert!(
            line.starts_with("stats: frames=3 frame_ms_median=2.000 frame_ms_min=1.000"),
            "{line}"
        );
        assert!(line.contains("render_to_result_ms_median=0.500"), "{line}");
        assert!(line.ends_with("device=\"llvmpipe 'x'\""), "{line}");
    }

    #[test]
    fn no_timestamps_read_as_nan() {
        let mut s = Stats::default();
        s.push(FrameTimes {
            frame: Duration::from_millis(1),
            render_to_result: None,
            model: None,
        });
        assert!(
            s.line("no-model", "window", "d", 0)
                .contains("render_to_result_ms_median=NaN")
        );
    }
}
