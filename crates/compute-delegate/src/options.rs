//! How a graph is built: [`BuildOptions`], with the buffers of other delegates it is bound to
//! ([`ExternalBindings`]).

use std::collections::BTreeMap;

use vk_core::BufferSlice;

/// The environment variable that, set to `off`, builds every graph without the fusion
/// passes ([`BuildOptions::unfused`]).
pub const FUSION_ENV: &str = "VKDELEGATE_FUSION";

/// The comma-separated numbers of a tuning variable's value (`None` if any is not one).
pub(crate) fn tuning_numbers<T: std::str::FromStr>(v: &str) -> Option<Vec<T>> {
    v.split(',').map(|x| x.trim().parse().ok()).collect()
}

impl BuildOptions {
    /// Whether the fusion passes run: not with [`BuildOptions::unfused`], nor with
    /// [`FUSION_ENV`] set to `off`.
    pub(crate) fn fuses(&self) -> bool {
        !self.unfused && std::env::var(FUSION_ENV).map_or(true, |v| v != "off")
    }
}

/// Options for [`crate::GraphBuilder::build_with`].
#[derive(Debug, Clone, Default)]
pub struct BuildOptions {
    /// Data from [`crate::Graph::pipeline_cache_data`] of an earlier build on the same driver;
    /// incompatible data is ignored by the driver.
    pub pipeline_cache: Option<Vec<u8>>,
    /// Where pipeline caches are kept between runs when [`BuildOptions::pipeline_cache`] is
    /// `None` (default: the user's cache folder, or `VKDELEGATE_PIPELINE_CACHE`; see
    /// [`vk_core::DiskCache`]). A build that compiles pipelines the file lacks writes them back.
    pub disk_cache: vk_core::DiskCache,
    /// Copy inputs, outputs and weights through host staging buffers even where device memory
    /// is host-visible (the discrete-GPU path, for tests on unified-memory devices).
    pub force_staging: bool,
    /// How host inputs and outputs move (`None`: [`vk_core::HostPath::for_device`], the
    /// device's rule unless `VKDELEGATE_HOST_PATH` overrides it). `Direct` needs host-visible
    /// device-local memory; [`BuildOptions::force_staging`] turns it into staging.
    pub host_path: Option<vk_core::HostPath>,
    /// Use shared-memory reductions even where subgroup arithmetic is available.
    pub disable_subgroups: bool,
    /// Lay kernels out as for a GPU even on a CPU driver, which otherwise keeps layouts that
    /// spread few outputs over many lanes (the split int8 convolutions) for GPUs: for tests
    /// that run every kernel on lavapipe.
    pub gpu_layouts: bool,
    /// Layer norms over the channels of a permute that moved them last read the
    /// channels-first tensor, a thread a pixel, instead of the permute's copy. Off by default:
    /// with few pixels a thread each loops over every channel, and on an NVIDIA H100 a
    /// ConvNeXt-Tiny's norms took 0.06-0.21 ms each this way (3.8 of its 4.9 ms), where the
    /// copy and a norm over contiguous rows take about 0.01.
    pub channel_norms_read_through: bool,
    /// When fp16 GEMMs run on cooperative matrices (default: where the device enables them
    /// and they pass their check on it).
    pub cooperative: crate::CoopPolicy,
    /// Inputs read from, and outputs written to, buffers of other delegates on the device.
    pub external: ExternalBindings,
    /// The graph runs only inside its owner's command buffers ([`crate::Graph::record_into`],
    /// as a program's device hand-off records it): it gets no staging buffers, host transfers,
    /// timestamps or command buffers of its own, and its host-side calls (`execute`,
    /// `write_input`, `read_output`, `submit`) fail with a named error. Profiling still works.
    pub embedded: bool,
    /// The most bytes one buffer binding may span, below the device's `maxStorageBufferRange`
    /// (`None`: that limit). Products and lookups whose constant operand is larger are split
    /// into pieces that fit; any other tensor that is larger fails the build by name.
    pub max_binding_bytes: Option<u64>,
    /// Build the graph as written, without the fusion passes of `fusion.rs` (residual adds,
    /// a gated MLP's SiLU and product, RMS norms computed by the products around them): for
    /// comparing the two, and for a diagnosis. [`FUSION_ENV`] set to `off` does the same for
    /// every build.
    pub unfused: bool,
    /// Build the graph as written, without first running the nodes that read only constants
    /// (a mask made of fills and concats, a bias table's lookup by a constant index) once on
    /// the device and making their results constants.
    pub unfolded: bool,
    /// Whether graphs that compute in fp32 multiply 4-bit weights unpacked on the device (a
    /// prompt's `linear_q4gsw`) in fp16, with fp32 sums (`None`: `VKDELEGATE_PACKED_F16` if
    /// set to `on` or `off`, else where the device runs fp16 GEMMs on cooperative matrices);
    /// never on a device without [`crate::F16_FEATURES`].
    pub packed_products_in_f16: Option<bool>,
    /// Constants shared with the other graphs built with a clone of this pool on the same
    /// device: each constant of one name and the same bytes gets one buffer, and state a graph
    /// writes in place (a KV cache) is seen by the others. `None`: the graph's own buffers.
    pub constants: Option<crate::ConstantPool>,
}

/// Graph inputs and outputs bound to buffer slices that the graph does not own (another
/// delegate's output, a consumer's input), by index. Such an input or output gets no buffer of
/// its own: the graph's descriptors point at the slice. Host execution still works: it copies
/// through a staging buffer into or out of the slice.
///
/// A slice must hold the tensor's bytes padded to whole vec4s (the shaders read and write
/// whole vec4s; [`vk_core::DeviceTensor`]s of compute graphs always do) and start at a
/// multiple of `minStorageBufferOffsetAlignment`; [`crate::GraphBuilder::build_with`] checks
/// both and names the tensor.
#[derive(Debug, Clone, Default)]
pub struct ExternalBindings {
    pub(crate) inputs: BTreeMap<usize, BufferSlice>,
    pub(crate) outputs: BTreeMap<usize, BufferSlice>,
}

impl ExternalBindings {
    /// Binds input `index` to `slice`.
    ///
    /// # Safety
    /// `slice.buffer` must be a live buffer of the device the graph is built on, created with
    /// `STORAGE_BUFFER` and `TRANSFER_DST` usage, and must outlive every use of the graph
    /// (its submissions and the command buffers it was recorded into). The slice must not
    /// overlap memory the graph writes (its outputs) unless the caller orders the accesses.
    pub unsafe fn bind_input(&mut self, index: usize, slice: BufferSlice) -> &mut Self {
        self.inputs.insert(index, slice);
        self
    }

    /// Binds output `index` to `slice`.
    ///
    /// # Safety
    /// As [`ExternalBindings::bind_input`], with `TRANSFER_SRC` usage instead of
    /// `TRANSFER_DST`.
    pub unsafe fn bind_output(&mut self, index: usize, slice: BufferSlice) -> &mut Self {
        self.outputs.insert(index, slice);
        self
    }

    /// The slice bound to input `index`, if any.
    pub fn input(&self, index: usize) -> Option<BufferSlice> {
        self.inputs.get(&index).copied()
    }

    /// The slice bound to output `index`, if any.
    pub fn output(&self, index: usize) -> Option<BufferSlice> {
        self.outputs.get(&index).copied()
    }
}
