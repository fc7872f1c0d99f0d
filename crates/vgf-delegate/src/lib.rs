//! vgf-delegate (see ARCHITECTURE.md).
