//! Products over 4-bit weights unpacked on the device (`dequant_q4.comp` before a GEMM: a
//! prompt's `linear_q4gsw`), multiplied in fp16 in graphs that compute in fp32 where the
//! device's fp16 GEMMs are fast ([`GraphBuilder::with_unpacked_products_in_f16`]).
//!
//! The weights are 4-bit values times an f32 scale: in fp16 they lose only their scale's
//! rounding (2^-11, far below the 4-bit step), and the GEMM sums in fp32 as in every fp16
//! graph. The input and the result are rounded to fp16 once each, as llama.cpp's and
//! ExecuTorch's own 4-bit prompt kernels do. Where the device runs fp16 GEMMs on cooperative
//! matrices this is the fast path by far (fp32 GEMMs have no matrix units to run on).

use vk_core::DType;

use crate::fusion::Uses;
use crate::graph::{GraphBuilder, Node, Op, StorageKind, storage_bytes};
use crate::kernels::Kernel;

/// The environment variable that, set to `on` or `off`, decides whether fp32 graphs multiply
/// 4-bit weights unpacked on the device in fp16 (default: where the device runs fp16 GEMMs on
/// cooperative matrices; [`crate::BuildOptions::packed_products_in_f16`] decides first).
pub const PACKED_F16_ENV: &str = "VKDELEGATE_PACKED_F16";

/// Whether `wanted` (an option), else [`PACKED_F16_ENV`], else `fast` (the device's fp16
/// GEMMs run on cooperative matrices) turns the fp16 products on.
pub(crate) fn in_f16(wanted: Option<bool>, fast: impl FnOnce() -> bool) -> bool {
    if let Some(on) = wanted {
        return on;
    }
    match std::env::var(PACKED_F16_ENV).as_deref() {
        Ok("on") => true,
        Ok("off") => false,
        _ => fast(),
    }
}

impl GraphBuilder {
    /// The fp32 products `x @ w` whose `w` is a 4-bit weight unpacked by the node before
    /// (`dequant_q4.comp`), read by that product alone: `(product, unpacking node)`.
    fn unpacked_f32_products(&self) -> Vec<(usize, usize)> {
        let uses = Uses::of(self);
        let mut found = Vec::new();
        for (k, node) in self.nodes.iter().enumerate() {
            let Op::Matmul {
                a,
                b,
                bias: None,
                linear: false,
                norm: None,
            } = node.op
            else {
                continue;
            };
            let f32s = [a, node.out]
                .iter()
                .all(|t| self.tensors[t.0].dtype == DType::F32);
            let st = self.tensors[b.0].storage;
            let unpacked = match uses.writers[st][..] {
                [j] => {
                    matches!(
                        self.nodes[j].op,
                        Op::Kernel {
                            kernel: Kernel::DequantQ4,
                            precision: None,
                            ..
                        }
                    ) && self.nodes[j].out == b
                        && self.tensors[b.0].dtype == DType::F32
                        && matches!(self.storages[st].kind, StorageKind::Temp)
                        && uses.readers[st] == 1
                }
                _ => false,
            };
            if f32s && unpacked {
                found.push((k, uses.writers[st][0]));
            }
        }
        found
    }

    /// Whether the graph reads 4-bit weights packed (`linear_q4gsw` and its kin): one to four
    /// rows on `gemv_q4.comp`, more unpacked on the device. The same program built for more
    /// rows (a language model's prompt after its one-token step, on the device the one-token
    /// program opened) has products that may multiply in fp16, so such a graph asks for the
    /// f16 features, optionally ([`GraphBuilder::requirements`]).
    pub fn reads_packed_four_bit_weights(&self) -> bool {
        self.nodes.iter().any(|n| {
            matches!(
                n.op,
                Op::Kernel {
                    kernel: Kernel::GemvQ4 | Kernel::GemvQ4Teams | Kernel::DequantQ4,
                    ..
                }
            )
        })
    }

    /// Whether an fp32 product reads 4-bit weights unpacked on the device.
    pub(crate) fn has_unpacked_f32_products(&self) -> bool {
        !self.unpacked_f32_products().is_empty()
    }

    /// The graph with each fp32 product over 4-bit weights unpacked on the device computed in
    /// fp16: the weights unpacked to fp16, the input cast to fp16 before the product, its fp16
    /// result cast back to the fp32 tensor after it. `None` where there is none.
    pub(crate) fn with_unpacked_products_in_f16(&self) -> Option<GraphBuilder> {
        let found = self.unpacked_f32_products();
        if found.is_empty() {
            return None;
        }
        let mut g = self.clone();
        // From the last, so that inserting nodes leaves the earlier positions as they are.
        for &(k, _) in found.iter().rev() {
            let Op::Matmul { a, b, .. } = self.nodes[k].op else {
                continue;
            };
            let out = self.nodes[k].out;
            let st = g.tensors[b.0].storage;
            g.tensors[b.0].dtype = DType::F16;
            g.storages[st].bytes = storage_bytes(DType::F16, &g.tensors[b.0].shape);
            let (an, ashape) = (g.tensors[a.0].name.clone(), g.tensors[a.0].shape.clone());
            let (yn, yshape) = (
                g.tensors[out.0].name.clone(),
                g.tensors[out.0].shape.clone(),
            );
            let a16 = g.push_temp(format!("{an}_f16"), DType::F16, ashape);
            let y16 = g.push_temp(format!("{yn}_f16"), DType::F16, yshape);
            g.nodes[k] = Node {
                op: Op::Matmul {
                    a: a16,
                    b,
                    bias: None,
                    linear: false,
                    norm: None,
                },
                out: y16,
            };
            let back = Node {
                op: Op::Cast {
                    x: y16,
                    to: DType::F32,
                },
                out,
            };
            g.nodes.insert(k + 1, back);
            let narrow = Node {
                op: Op::Cast {
                    x: a,
                    to: DType::F16,
                },
                out: a16,
            };
            g.nodes.insert(k, narrow);
        }
        Some(g)
    }
}
