//! `vkdelegate`: run ML models on any Vulkan GPU.
//!
//! This umbrella crate joins the layers by cargo feature; pick only what you need:
//!
//! | feature   | brings                                   | crate                |
//! |-----------|------------------------------------------|----------------------|
//! | `vgf`     | Arm VGF files through `VK_ARM_data_graph`| [`vgf-delegate`]     |
//! | `compute` | compute graphs of GLSL shaders           | [`compute-delegate`] |
//! | `shared`  | one device and queue for every delegate  | [`shared-runtime`]   |
//! | `bench`   | the compiled-in delegates' benchmarks    | (the delegates')     |
//!
//! `vgf`, `compute` and `shared` are on by default; `bench` (for `vkdelegate bench`) is not.
//! Features only add code: a `vgf`-only build holds no compute code and a `compute`-only build
//! no VGF code (`cargo xtask ci` checks the dependency trees).
//! Whether a delegate runs standalone or on a shared device is chosen at run time, from its
//! options, never by a build flag.
//!
//! [`vgf-delegate`]: https://docs.rs/vgf-delegate
//! [`compute-delegate`]: https://docs.rs/compute-delegate
//! [`shared-runtime`]: https://docs.rs/shared-runtime

pub use vk_core;

#[cfg(feature = "compute")]
pub use compute_delegate as compute;
#[cfg(feature = "shared")]
pub use shared_runtime as shared;
#[cfg(feature = "vgf")]
pub use vgf_delegate as vgf;

#[cfg(feature = "compute")]
pub mod llm;
#[cfg(any(feature = "vgf", feature = "compute"))]
pub mod program;
#[cfg(any(feature = "vgf", feature = "compute"))]
pub mod pte;
#[cfg(all(feature = "vgf", feature = "compute"))]
pub mod vgf_native;

/// The delegates compiled into this build, by name.
pub fn compiled_delegates() -> &'static [&'static str] {
    &[
        #[cfg(feature = "vgf")]
        "vgf",
        #[cfg(feature = "compute")]
        "compute",
    ]
}

/// Whether the `shared` runtime is compiled in.
pub const SHARED: bool = cfg!(feature = "shared");

#[cfg(test)]
mod tests {
    #[test]
    fn compiled_delegates_follow_the_features() {
        let names = super::compiled_delegates();
        assert_eq!(names.contains(&"vgf"), cfg!(feature = "vgf"));
        assert_eq!(names.contains(&"compute"), cfg!(feature = "compute"));
    }
}
