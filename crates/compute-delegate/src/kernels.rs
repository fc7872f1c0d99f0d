//! The embedded SPIR-V of the op library (`shaders/compute-delegate/*.comp`, compiled by
//! `cargo xtask shaders`).

/// A compute shader of the op library.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Kernel {
    Unary,
    Binary,
    BinaryBcast,
    Copy,
    Cast,
    Softmax,
    SoftmaxSg,
    Reduce,
    ReduceSg,
    LayerNorm,
    LayerNormSg,
    Pool,
    Pool2x2,
    ConvDw,
    Gemm,
    GemmCoop,
    GemmCoop2,
    FmaPeak,
    CopyVec4,
    QAdd,
    QConv,
    Where,
    Gather,
}

impl Kernel {
    /// The SPIR-V words, as bytes.
    pub fn spirv(self) -> &'static [u8] {
        match self {
            Kernel::Unary => include_bytes!("../spirv/unary.spv"),
            Kernel::Binary => include_bytes!("../spirv/binary.spv"),
            Kernel::BinaryBcast => include_bytes!("../spirv/binary_bcast.spv"),
            Kernel::Copy => include_bytes!("../spirv/copy_strided.spv"),
            Kernel::Cast => include_bytes!("../spirv/cast.spv"),
            Kernel::Softmax => include_bytes!("../spirv/softmax.spv"),
            Kernel::SoftmaxSg => include_bytes!("../spirv/softmax_sg.spv"),
            Kernel::Reduce => include_bytes!("../spirv/reduce.spv"),
            Kernel::ReduceSg => include_bytes!("../spirv/reduce_sg.spv"),
            Kernel::LayerNorm => include_bytes!("../spirv/layer_norm.spv"),
            Kernel::LayerNormSg => include_bytes!("../spirv/layer_norm_sg.spv"),
            Kernel::Pool => include_bytes!("../spirv/pool2d.spv"),
            Kernel::Pool2x2 => include_bytes!("../spirv/pool2x2.spv"),
            Kernel::ConvDw => include_bytes!("../spirv/conv_dw.spv"),
            Kernel::Gemm => include_bytes!("../spirv/gemm.spv"),
            Kernel::GemmCoop => include_bytes!("../spirv/gemm_coop.spv"),
            Kernel::GemmCoop2 => include_bytes!("../spirv/gemm_coop2.spv"),
            Kernel::FmaPeak => include_bytes!("../spirv/fma_peak.spv"),
            Kernel::CopyVec4 => include_bytes!("../spirv/copy_vec4.spv"),
            Kernel::QAdd => include_bytes!("../spirv/qadd.spv"),
            Kernel::QConv => include_bytes!("../spirv/qconv.spv"),
            Kernel::Where => include_bytes!("../spirv/where.spv"),
            Kernel::Gather => include_bytes!("../spirv/gather.spv"),
        }
    }

    /// The SPIR-V words, for `vkCreateShaderModule`.
    pub fn words(self) -> crate::Result<Vec<u32>> {
        ash::util::read_spv(&mut std::io::Cursor::new(self.spirv())).map_err(|e| {
            crate::Error::Graph(format!(
                "internal: embedded SPIR-V of {self:?} is unreadable: {e}"
            ))
        })
    }

    /// The shader's name (its source file's stem).
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Unary => "unary",
            Kernel::Binary => "binary",
            Kernel::BinaryBcast => "binary_bcast",
            Kernel::Copy => "copy_strided",
            Kernel::Cast => "cast",
            Kernel::Softmax => "softmax",
            Kernel::SoftmaxSg => "softmax_sg",
            Kernel::Reduce => "reduce",
            Kernel::ReduceSg => "reduce_sg",
            Kernel::LayerNorm => "layer_norm",
            Kernel::LayerNormSg => "layer_norm_sg",
            Kernel::Pool => "pool2d",
            Kernel::Pool2x2 => "pool2x2",
            Kernel::ConvDw => "conv_dw",
            Kernel::Gemm => "gemm",
            Kernel::GemmCoop => "gemm_coop",
            Kernel::GemmCoop2 => "gemm_coop2",
            Kernel::FmaPeak => "fma_peak",
            Kernel::CopyVec4 => "copy_vec4",
            Kernel::QAdd => "qadd",
            Kernel::QConv => "qconv",
            Kernel::Where => "where",
            Kernel::Gather => "gather",
        }
    }

    /// Number of storage-buffer bindings (set 0, bindings 0..n).
    pub fn bindings(self) -> usize {
        match self {
            Kernel::FmaPeak => 1,
            Kernel::Unary
            | Kernel::Copy
            | Kernel::CopyVec4
            | Kernel::Cast
            | Kernel::Softmax
            | Kernel::SoftmaxSg
            | Kernel::Reduce
            | Kernel::ReduceSg
            | Kernel::Pool
            | Kernel::Pool2x2 => 2,
            Kernel::Binary | Kernel::BinaryBcast | Kernel::QAdd | Kernel::Gather => 3,
            Kernel::LayerNorm
            | Kernel::LayerNormSg
            | Kernel::ConvDw
            | Kernel::Gemm
            | Kernel::GemmCoop
            | Kernel::GemmCoop2
            | Kernel::Where => 4,
            Kernel::QConv => 6,
        }
    }
}

/// The most push-constant bytes any kernel declares.
pub(crate) const PUSH_BYTES: u32 = 128;
