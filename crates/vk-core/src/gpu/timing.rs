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

/// Min, median and max of several runs of one measurement, in milliseconds.
///
/// Every constructor takes (or converts to) milliseconds; [`Summary::NAN`] stands for a
/// measurement that could not be taken.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// Fastest run, in milliseconds.
    pub min: f64,
    /// Median run, in milliseconds: the upper median for an even count from
    /// [`Summary::of`] and [`Summary::of_durations`], the mean of the two middle runs from
    /// [`Summary::of_mean_median`].
    pub median: f64,
    /// Slowest run, in milliseconds.
    pub max: f64,
    /// Number of runs (0 for [`Summary::NAN`]).
    pub runs: usize,
}

impl Summary {
    /// All NaN, no runs: not measured.
    pub const NAN: Summary = Summary {
        min: f64::NAN,
        median: f64::NAN,
        max: f64::NAN,
        runs: 0,
    };

    /// Summarises `samples`, in milliseconds, with the upper median for an even count;
    /// `None` when there are none or one is not a number.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        Self::sorted(samples).map(|v| Self::from_sorted(&v, v[v.len() / 2]))
    }

    /// Summarises `samples`, in milliseconds, with the mean of the two middle runs as the
    /// median of an even count; `None` when there are none or one is not a number.
    pub fn of_mean_median(samples: &[f64]) -> Option<Summary> {
        Self::sorted(samples).map(|v| {
            let n = v.len();
            let median = if n % 2 == 1 {
                v[n / 2]
            } else {
                (v[n / 2 - 1] + v[n / 2]) / 2.0
            };
            Self::from_sorted(&v, median)
        })
    }

    /// Summarises durations, in milliseconds, as [`Summary::of`] does.
    pub fn of_durations(samples: &[Duration]) -> Option<Summary> {
        Self::of(&samples.iter().map(|&d| ms(d)).collect::<Vec<_>>())
    }

    /// `samples` sorted, or `None` when empty or holding a NaN.
    fn sorted(samples: &[f64]) -> Option<Vec<f64>> {
        if samples.is_empty() || samples.iter().any(|s| s.is_nan()) {
            return None;
        }
        let mut v = samples.to_vec();
        v.sort_by(f64::total_cmp);
        Some(v)
    }

    /// The summary of the sorted, non-empty `v` with the given median.
    fn from_sorted(v: &[f64], median: f64) -> Summary {
        Summary {
            min: v[0],
            median,
            max: v[v.len() - 1],
            runs: v.len(),
        }
    }

    /// `(max - min) / median`, a fraction: 0.1 means the runs spread over 10% of the median.
    /// NaN when the median is not positive (or not measured).
    pub fn spread(&self) -> f64 {
        if self.median > 0.0 {
            (self.max - self.min) / self.median
        } else {
            f64::NAN
        }
    }

    /// Whether the spread is over `limit`, a fraction (e.g. 0.10); false when it is NaN.
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
        let t = Summary::of_durations(&[d(2), d(4)]).unwrap_or_else(|| panic!("durations"));
        assert_eq!((t.min, t.median, t.max, t.runs), (2.0, 4.0, 4.0, 2));
    }

    #[test]
    fn the_mean_median_averages_the_middle_runs() {
        let odd = Summary::of_mean_median(&[3.0, 1.0, 2.0]).unwrap_or_else(|| panic!("odd"));
        assert_eq!((odd.min, odd.median, odd.max, odd.runs), (1.0, 2.0, 3.0, 3));
        let even =
            Summary::of_mean_median(&[1.06, 1.0, 1.04, 1.02]).unwrap_or_else(|| panic!("even"));
        assert!((even.median - 1.03).abs() < 1e-12, "{even:?}");
        assert!(!even.is_noisy(0.10), "{even:?}");
        assert_eq!(Summary::of_mean_median(&[]), None);
        assert_eq!(Summary::of_mean_median(&[1.0, f64::NAN]), None);
    }

    #[test]
    fn not_measured_is_nan_and_never_noisy() {
        let n = Summary::NAN;
        assert_eq!(n.runs, 0);
        assert!(n.median.is_nan() && n.spread().is_nan() && !n.is_noisy(0.0));
        let zero = Summary::of(&[0.0, 0.0]).unwrap_or_else(|| panic!("zero"));
        assert!(zero.spread().is_nan() && !zero.is_noisy(0.0));
    }
}
