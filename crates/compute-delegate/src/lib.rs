//! compute-delegate (see ARCHITECTURE.md).
