//! Independent jobs on a few scoped threads: pipeline creation and the cooperative-matrix
//! check, where drivers take seconds per pipeline and compile one call's pipelines one after
//! another.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The most threads [`each_on_threads`] starts.
const MAX_THREADS: usize = 16;

/// Runs `job(i)` for every `i` in `0..count` on up to 16 scoped threads (the host's
/// parallelism), each taking the next index in turn, and returns each job's result in index
/// order: `None` for the jobs of a thread that panicked. One job, or one core, runs on the
/// calling thread.
pub(crate) fn each_on_threads<R: Send>(
    count: usize,
    job: impl Fn(usize) -> R + Sync,
) -> Vec<Option<R>> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(MAX_THREADS)
        .min(count);
    if threads <= 1 {
        return (0..count).map(|i| Some(job(i))).collect();
    }
    let next = AtomicUsize::new(0);
    let worker = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= count {
                return done;
            }
            done.push((i, job(i)));
        }
    };
    let mut out: Vec<Option<R>> = (0..count).map(|_| None).collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads).map(|_| scope.spawn(worker)).collect();
        for h in handles {
            for (i, r) in h.join().unwrap_or_default() {
                out[i] = Some(r);
            }
        }
    });
    out
}

/// Fills `out`, cut into chunks of `chunk` bytes, by `fill(index, chunk)` for every chunk, on
/// up to 16 scoped threads, each taking a contiguous run of chunks (a constant's rows made at
/// build).
pub(crate) fn fill_on_threads(
    out: &mut [u8],
    chunk: usize,
    fill: impl Fn(usize, &mut [u8]) + Sync,
) {
    if out.is_empty() {
        return;
    }
    let chunks = out.len().div_ceil(chunk.max(1));
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(MAX_THREADS)
        .min(chunks)
        .max(1);
    let per = chunks.div_ceil(threads);
    let fill = &fill;
    std::thread::scope(|scope| {
        for (t, run) in out.chunks_mut(per * chunk.max(1)).enumerate() {
            scope.spawn(move || {
                for (i, c) in run.chunks_mut(chunk.max(1)).enumerate() {
                    fill(t * per + i, c);
                }
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_chunk_is_filled_with_its_index() {
        for (len, chunk) in [(0usize, 4usize), (12, 4), (1000, 8), (10, 3)] {
            let mut out = vec![0u8; len];
            fill_on_threads(&mut out, chunk, |i, c| c.fill(i as u8));
            let want: Vec<u8> = (0..len).map(|b| (b / chunk) as u8).collect();
            assert_eq!(out, want);
        }
    }

    #[test]
    fn every_job_runs_once_in_index_order() {
        for count in [0, 1, 7, 100] {
            let got = each_on_threads(count, |i| i * i);
            let want: Vec<Option<usize>> = (0..count).map(|i| Some(i * i)).collect();
            assert_eq!(got, want);
        }
    }
}
