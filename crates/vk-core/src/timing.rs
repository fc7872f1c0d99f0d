//! Summaries of repeated timings: min, median, max and spread, in milliseconds.

use std::time::Duration;

/// Milliseconds in `d`.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The median of `v` (the upper one for an even count; zero when empty).
pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// Min, median and max of several runs of one measurement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// Fastest run.
    pub min: f64,
    /// Median run (the upper median for an even count).
    pub median: f64,
    /// Slowest run.
    pub max: f64,
    /// Number of runs.
    pub runs: usize,
}

impl Summary {
    /// Summarises `samples` (any unit); `None` when there are none or one is not a number.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() || samples.iter().any(|s| s.is_nan()) {
            return None;
        }
        let mut v = samples.to_vec();
        v.sort_by(f64::total_cmp);
        Some(Summary {
            min: v[0],
            median: v[v.len() / 2],
            max: v[v.len() - 1],
            runs: v.len(),
        })
    }

    /// Summarises durations, in milliseconds.
    pub fn of_durations(samples: &[Duration]) -> Option<Summary> {
        Self::of(&samples.iter().map(|&d| ms(d)).collect::<Vec<_>>())
    }

    /// `(max - min) / median`: 0.1 means the runs spread over 10% of the median.
    pub fn spread(&self) -> f64 {
        if self.median > 0.0 {
            (self.max - self.min) / self.median
        } else {
            0.0
        }
    }

    /// Whether the spread is over `limit` (e.g. 0.10).
    pub fn is_noisy(&self, limit: f64) -> bool {
        self.spread() > limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_median_max_and_spread() {
        let s = Summary::of(&[3.0, 1.0, 2.0, 10.0]).unwrap_or_else(|| panic!("summary"));
        assert_eq!((s.min, s.median, s.max, s.runs), (1.0, 3.0, 10.0, 4));
        assert!((s.spread() - 3.0).abs() < 1e-12);
        assert!(s.is_noisy(0.1));
        assert_eq!(Summary::of(&[]), None);
        assert_eq!(Summary::of(&[f64::NAN]), None);
        let d = |ms| Duration::from_millis(ms);
        assert_eq!(median(vec![d(3), d(1), d(2), d(10)]), d(3));
        assert_eq!(median(Vec::new()), Duration::ZERO);
    }
}
