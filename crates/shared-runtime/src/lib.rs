//! shared-runtime (see ARCHITECTURE.md).
