//! How many decodes this thread has made, so that a loader (and its tests) can check it
//! decodes each program and each Vulkan payload once.

use std::cell::Cell;

thread_local! {
    static PROGRAMS: Cell<u64> = const { Cell::new(0) };
    static VK_GRAPHS: Cell<u64> = const { Cell::new(0) };
}

/// Decodes made on one thread since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecodeCounts {
    /// Calls of [`crate::Program::decode`].
    pub programs: u64,
    /// Calls of [`crate::VkGraph::decode`].
    pub vk_graphs: u64,
}

/// The decodes the calling thread has made so far (subtract two readings to count those of
/// one load).
pub fn decode_counts() -> DecodeCounts {
    DecodeCounts {
        programs: PROGRAMS.with(Cell::get),
        vk_graphs: VK_GRAPHS.with(Cell::get),
    }
}

pub(crate) fn count_program() {
    PROGRAMS.with(|c| c.set(c.get() + 1));
}

pub(crate) fn count_vk_graph() {
    VK_GRAPHS.with(|c| c.set(c.get() + 1));
}
