//! The GPU plumbing every delegate uses, over the [`crate::device`] layer: submissions,
//! memory, barriers, queries and timings, host tensors and host transfers, compute kernels, the
//! statistics of compiled pipelines and pipeline caches kept on disk. Imports nothing of [`crate::io`].

pub mod barrier;
pub mod command;
pub mod host;
pub(crate) mod kernel;
pub mod memory;
pub mod pipeline_cache;
pub mod pipeline_stats;
pub mod query;
pub mod selftest;
pub mod timing;
pub mod transfer;
