//! The embedded SPIR-V of the op library (`shaders/compute-delegate/*.comp`, compiled by
//! `cargo xtask shaders`): per kernel the plain (fp32) module and, for kernels with a
//! `// variant: f16` line, the fp16-storage module `<name>_f16.spv`.

use vk_core::DType;

/// The element type a kernel's tensors are stored in (its arithmetic is fp32 either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub(crate) enum Precision {
    /// f32 tensors (and the integer kernels).
    #[default]
    F32,
    /// f16 tensors (`-DDTYPE_F16`).
    F16,
}

impl Precision {
    /// The precision of an op whose float operands have `dtype`.
    pub fn of(dtype: DType) -> Precision {
        if dtype == DType::F16 {
            Precision::F16
        } else {
            Precision::F32
        }
    }
}

/// A kernel compiled for a precision: what a shader module and a pipeline are made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Shader {
    pub kernel: Kernel,
    pub precision: Precision,
}

impl std::fmt::Display for Shader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let fp16_by_nature = self.kernel.fp16_by_nature();
        match self.precision {
            Precision::F16 if !fp16_by_nature => write!(f, "{:?}_f16", self.kernel),
            _ => write!(f, "{:?}", self.kernel),
        }
    }
}

impl Shader {
    /// The float type the kernel stores its tensors in and computes its products from:
    /// f16 for fp16 variants and for the kernels that are fp16 by nature (cooperative
    /// matrices and their operand packing), f32 otherwise (integer kernels included).
    pub fn float_type(self) -> DType {
        if self.precision == Precision::F16 || self.kernel.fp16_by_nature() {
            DType::F16
        } else {
            DType::F32
        }
    }

    /// The SPIR-V words, for `vkCreateShaderModule`.
    pub fn words(self) -> crate::Result<Vec<u32>> {
        let bytes = self.kernel.spirv_for(self.precision).ok_or_else(|| {
            crate::Error::Graph(format!(
                "internal: {:?} has no {:?} variant",
                self.kernel, self.precision
            ))
        })?;
        ash::util::read_spv(&mut std::io::Cursor::new(bytes)).map_err(|e| {
            crate::Error::Graph(format!(
                "internal: embedded SPIR-V of {self:?} is unreadable: {e}"
            ))
        })
    }
}

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
    /// `gemm.comp` with 8 x 16 register tiles (its `wide` variants).
    GemmWide,
    GemmCoop,
    GemmCoop2,
    ConvCoop2,
    ConvPack,
    Gemv,
    SplitSum,
    Im2col,
    FmaPeak,
    CopyVec4,
    QAdd,
    QConv,
    Where,
    Gather,
}

impl Kernel {
    /// Whether the kernel has fp16 operands whatever the graph's precision (one module).
    pub fn fp16_by_nature(self) -> bool {
        matches!(
            self,
            Kernel::GemmCoop | Kernel::GemmCoop2 | Kernel::ConvCoop2 | Kernel::ConvPack
        )
    }

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
            Kernel::GemmWide => include_bytes!("../spirv/gemm_wide.spv"),
            Kernel::GemmCoop => include_bytes!("../spirv/gemm_coop.spv"),
            Kernel::GemmCoop2 => include_bytes!("../spirv/gemm_coop2.spv"),
            Kernel::ConvCoop2 => include_bytes!("../spirv/conv_coop2.spv"),
            Kernel::ConvPack => include_bytes!("../spirv/conv_pack.spv"),
            Kernel::Gemv => include_bytes!("../spirv/gemv.spv"),
            Kernel::SplitSum => include_bytes!("../spirv/split_sum.spv"),
            Kernel::Im2col => include_bytes!("../spirv/im2col.spv"),
            Kernel::FmaPeak => include_bytes!("../spirv/fma_peak.spv"),
            Kernel::CopyVec4 => include_bytes!("../spirv/copy_vec4.spv"),
            Kernel::QAdd => include_bytes!("../spirv/qadd.spv"),
            Kernel::QConv => include_bytes!("../spirv/qconv.spv"),
            Kernel::Where => include_bytes!("../spirv/where.spv"),
            Kernel::Gather => include_bytes!("../spirv/gather.spv"),
        }
    }

    /// The fp16-storage SPIR-V, for kernels that have it.
    fn spirv_f16(self) -> Option<&'static [u8]> {
        Some(match self {
            Kernel::Unary => include_bytes!("../spirv/unary_f16.spv"),
            Kernel::Binary => include_bytes!("../spirv/binary_f16.spv"),
            Kernel::BinaryBcast => include_bytes!("../spirv/binary_bcast_f16.spv"),
            Kernel::Copy => include_bytes!("../spirv/copy_strided_f16.spv"),
            Kernel::Softmax => include_bytes!("../spirv/softmax_f16.spv"),
            Kernel::SoftmaxSg => include_bytes!("../spirv/softmax_sg_f16.spv"),
            Kernel::Reduce => include_bytes!("../spirv/reduce_f16.spv"),
            Kernel::ReduceSg => include_bytes!("../spirv/reduce_sg_f16.spv"),
            Kernel::LayerNorm => include_bytes!("../spirv/layer_norm_f16.spv"),
            Kernel::LayerNormSg => include_bytes!("../spirv/layer_norm_sg_f16.spv"),
            Kernel::Pool => include_bytes!("../spirv/pool2d_f16.spv"),
            Kernel::Pool2x2 => include_bytes!("../spirv/pool2x2_f16.spv"),
            Kernel::ConvDw => include_bytes!("../spirv/conv_dw_f16.spv"),
            Kernel::Gemm => include_bytes!("../spirv/gemm_f16.spv"),
            Kernel::GemmWide => include_bytes!("../spirv/gemm_wide_f16.spv"),
            Kernel::Gemv => include_bytes!("../spirv/gemv_f16.spv"),
            Kernel::SplitSum => include_bytes!("../spirv/split_sum_f16.spv"),
            Kernel::Where => include_bytes!("../spirv/where_f16.spv"),
            Kernel::Gather => include_bytes!("../spirv/gather_f16.spv"),
            // fp16 kernels by nature.
            Kernel::GemmCoop => include_bytes!("../spirv/gemm_coop.spv"),
            Kernel::GemmCoop2 => include_bytes!("../spirv/gemm_coop2.spv"),
            Kernel::ConvCoop2 => include_bytes!("../spirv/conv_coop2.spv"),
            Kernel::ConvPack => include_bytes!("../spirv/conv_pack.spv"),
            Kernel::Im2col => include_bytes!("../spirv/im2col_f16.spv"),
            Kernel::Cast | Kernel::FmaPeak | Kernel::CopyVec4 | Kernel::QAdd | Kernel::QConv => {
                return None;
            }
        })
    }

    /// The SPIR-V of the kernel compiled for `precision`, if it has that variant.
    pub fn spirv_for(self, precision: Precision) -> Option<&'static [u8]> {
        match precision {
            Precision::F32 => Some(self.spirv()),
            Precision::F16 => self.spirv_f16(),
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
            | Kernel::Pool2x2
            | Kernel::Im2col
            | Kernel::SplitSum => 2,
            Kernel::Binary | Kernel::BinaryBcast | Kernel::QAdd | Kernel::Gather => 3,
            Kernel::LayerNorm
            | Kernel::LayerNormSg
            | Kernel::ConvDw
            | Kernel::Gemm
            | Kernel::GemmWide
            | Kernel::Gemv
            | Kernel::GemmCoop
            | Kernel::GemmCoop2
            | Kernel::ConvCoop2
            | Kernel::ConvPack
            | Kernel::Where => 4,
            Kernel::QConv => 6,
        }
    }
}

/// The most push-constant bytes any kernel declares.
pub(crate) const PUSH_BYTES: u32 = 128;

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Kernel; 26] = [
        Kernel::Unary,
        Kernel::Binary,
        Kernel::BinaryBcast,
        Kernel::Copy,
        Kernel::Cast,
        Kernel::Softmax,
        Kernel::SoftmaxSg,
        Kernel::Reduce,
        Kernel::ReduceSg,
        Kernel::LayerNorm,
        Kernel::LayerNormSg,
        Kernel::Pool,
        Kernel::Pool2x2,
        Kernel::ConvDw,
        Kernel::Gemm,
        Kernel::GemmWide,
        Kernel::Gemv,
        Kernel::SplitSum,
        Kernel::Im2col,
        Kernel::ConvPack,
        Kernel::FmaPeak,
        Kernel::CopyVec4,
        Kernel::QAdd,
        Kernel::QConv,
        Kernel::Where,
        Kernel::Gather,
    ];

    /// Every module of the plain kernels (the cooperative ones need extensions a CPU driver
    /// lacks) is created on the test device with validation on, including those that only a
    /// GPU with cooperative matrices runs (the patch matrix of `im2col.comp`, the packed
    /// operands of `conv_pack.comp`).
    #[test]
    fn every_plain_module_is_valid_on_the_test_device() {
        let Some((instance, device)) = vk_core::testing::device(
            "every_plain_module_is_valid_on_the_test_device",
            &crate::f16_requirements(),
        ) else {
            return;
        };
        let cooperative = [Kernel::GemmCoop, Kernel::GemmCoop2];
        for k in ALL.into_iter().filter(|k| !cooperative.contains(k)) {
            for precision in [Precision::F32, Precision::F16] {
                if k.spirv_for(precision).is_none() {
                    continue;
                }
                let shader = Shader {
                    kernel: k,
                    precision,
                };
                let words = shader.words().expect("embedded SPIR-V");
                let info = ash::vk::ShaderModuleCreateInfo::default().code(&words);
                // SAFETY: valid create info with SPIR-V words; destroyed right away.
                let module = unsafe { device.raw().create_shader_module(&info, None) }
                    .unwrap_or_else(|e| panic!("{shader}: {e}"));
                // SAFETY: the module was created above and is used by nothing.
                unsafe { device.raw().destroy_shader_module(module, None) };
            }
        }
        drop(device);
        vk_core::testing::assert_no_validation_errors(&instance);
    }

    #[test]
    fn every_variant_is_readable_and_distinct() {
        for k in ALL {
            let f32 = Shader {
                kernel: k,
                precision: Precision::F32,
            };
            assert!(f32.words().is_ok(), "{k:?}");
            let f16 = Shader {
                kernel: k,
                precision: Precision::F16,
            };
            let has_f16 = k.spirv_for(Precision::F16).is_some();
            assert_eq!(f16.words().is_ok(), has_f16, "{k:?}");
            if has_f16 && !k.fp16_by_nature() {
                assert_ne!(k.spirv_for(Precision::F16), Some(k.spirv()), "{k:?}");
            }
        }
    }
}
