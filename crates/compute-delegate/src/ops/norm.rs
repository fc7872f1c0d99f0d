//! Normalisations: layer norm, RMS norm, group norm and batch norm (inference: no running statistics
//! are updated, and the mean and reciprocal deviation outputs are not computed). Batch norm
//! with constant statistics folds into one scale and shift per channel at build.

use super::{Call, Fallback, Kind, OpDef, Param, one};
use crate::error::Result;
use crate::graph::{GraphBuilder, Op, TensorId, shape_err};
use crate::kernels::{Kernel, push};
use crate::lower::{Lowerer, ROW_GROUPS, ROW_KERNEL_MIN, Target};
use vk_core::DType;

const EPS: Param = Param::new("eps", Kind::Float, Fallback::Float(1e-5));

/// The ops of this family, one registration line each.
#[rustfmt::skip]
pub(super) const OPS: &[OpDef] = &[
    OpDef::new(&["aten.native_layer_norm.default", "layer_norm"], &[Param::tensor("input"), Param::new("normalized_shape", Kind::Ints, Fallback::Required), Param::opt_tensor("weight"), Param::opt_tensor("bias"), EPS], layer_norm),
    OpDef::new(&["aten._native_batch_norm_legit_no_training.default", "batch_norm"], &[Param::tensor("input"), Param::opt_tensor("weight"), Param::opt_tensor("bias"), Param::tensor("running_mean"), Param::tensor("running_var"), Param::new("momentum", Kind::Float, Fallback::Float(0.1)), EPS], batch_norm),
    OpDef::new(&["et_vk.rms_norm.default", "rms_norm"], &[Param::tensor("x|input"), Param::tensor("weight"), EPS], rms_norm),
    OpDef::new(&["aten.native_group_norm.default"], &[Param::tensor("input"), Param::opt_tensor("weight"), Param::opt_tensor("bias"), Param::new("N", Kind::Int, Fallback::Null), Param::new("C", Kind::Int, Fallback::Null), Param::new("HxW", Kind::Int, Fallback::Null), Param::new("group", Kind::Int, Fallback::Required), EPS], group_norm),
];

fn layer_norm(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, shape) = (c.tensor(0)?, c.counts(1)?);
    let (w, b, eps) = (c.opt_tensor(2)?, c.opt_tensor(3)?, c.f32(4)?);
    one(c.g.layer_norm(x, &shape, w, b, eps)?)
}

fn batch_norm(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, w, b) = (c.tensor(0)?, c.opt_tensor(1)?, c.opt_tensor(2)?);
    let (mean, var, eps) = (c.tensor(3)?, c.tensor(4)?, c.f32(6)?);
    one(c.g.batch_norm(x, [w, b], [mean, var], eps)?)
}

fn rms_norm(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, w, eps) = (c.tensor(0)?, c.tensor(1)?, c.f32(2)?);
    one(c.g.rms_norm(x, w, eps)?)
}

fn group_norm(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, w, b) = (c.tensor(0)?, c.opt_tensor(1)?, c.opt_tensor(2)?);
    let (groups, eps) = (c.count(6)?, c.f32(7)?);
    one(c.g.group_norm(x, groups, w, b, eps)?)
}

// Shape and dtype inference: the builder's methods of this family, each checking its
// operands and naming the tensor and the numbers on error.

impl GraphBuilder {
    /// `x / sqrt(mean(x^2 over the last dim) + eps) * weight`, in f32, given in `x`'s dtype
    /// (ExecuTorch's `et_vk.rms_norm`): one dispatch (`layer_norm.comp` without the mean).
    pub fn rms_norm(&mut self, x: TensorId, weight: TensorId, eps: f32) -> Result<TensorId> {
        const OP: &str = "rms_norm";
        let xi = self.float_operand(OP, x)?;
        let d = xi.shape.last().copied().unwrap_or(1);
        let wi = self.info(OP, weight)?.clone();
        if wi.numel() != d {
            return Err(shape_err(
                OP,
                format!(
                    "weight '{}' {:?} for '{}' {:?}: one per element of the last dim",
                    wi.name, wi.shape, xi.name, xi.shape
                ),
            ));
        }
        let w = self.as_dtype(weight, xi.dtype)?;
        let op = Op::LayerNorm {
            x,
            weight: Some(w),
            bias: None,
            d,
            eps,
            rms: true,
            plane: 0,
        };
        self.node(op, OP, xi.dtype, xi.shape)
    }

    /// Batch norm over dim 1 of `x` (`[n, c, ..]`) with constant running statistics `[mean,
    /// var]` and optional constant `[weight, bias]`, all of `c` elements: folded at build into
    /// `x * scale + shift` per channel, `scale = weight / sqrt(var + eps)`,
    /// `shift = bias - mean * scale`.
    pub fn batch_norm(
        &mut self,
        x: TensorId,
        [weight, bias]: [Option<TensorId>; 2],
        [mean, var]: [TensorId; 2],
        eps: f32,
    ) -> Result<TensorId> {
        const OP: &str = "batch_norm";
        let xi = self.float_operand(OP, x)?;
        let c = *xi.shape.get(1).ok_or_else(|| {
            shape_err(
                OP,
                format!("'{}' {:?} has no channel dim", xi.name, xi.shape),
            )
        })?;
        let values = |g: &Self, t: Option<TensorId>, default: f32| -> Result<Vec<f32>> {
            let Some(t) = t else {
                return Ok(vec![default; c]);
            };
            let info = g.info(OP, t)?;
            let v = g.constant_values(t).ok_or_else(|| {
                shape_err(
                    OP,
                    format!("'{}' must be a constant f32 or f16 tensor", info.name),
                )
            })?;
            if v.len() != c {
                return Err(shape_err(
                    OP,
                    format!(
                        "'{}' has {} elements, the input {c} channels",
                        info.name,
                        v.len()
                    ),
                ));
            }
            Ok(v)
        };
        let (m, v) = (
            values(self, Some(mean), 0.0)?,
            values(self, Some(var), 1.0)?,
        );
        let (w, b) = (values(self, weight, 1.0)?, values(self, bias, 0.0)?);
        let scale: Vec<f32> = (0..c).map(|i| w[i] / (v[i] + eps).sqrt()).collect();
        let shift: Vec<f32> = (0..c).map(|i| b[i] - m[i] * scale[i]).collect();
        // [c, 1, ..] broadcasts over the dims after the channels.
        let mut shape = vec![c];
        shape.extend(std::iter::repeat_n(1, xi.shape.len().saturating_sub(2)));
        let name = format!("{}_bn", xi.name);
        let (s, t) = match xi.dtype {
            DType::F16 => (
                self.constant_f16(&format!("{name}_scale"), &shape, &scale)?,
                self.constant_f16(&format!("{name}_shift"), &shape, &shift)?,
            ),
            _ => (
                self.constant_f32(&format!("{name}_scale"), &shape, &scale)?,
                self.constant_f32(&format!("{name}_shift"), &shape, &shift)?,
            ),
        };
        let y = self.mul(x, s)?;
        self.add(y, t)
    }

    /// `layer_norm` over the trailing `normalized_shape`, with optional elementwise weight and
    /// bias of that shape.
    pub fn layer_norm(
        &mut self,
        x: TensorId,
        normalized_shape: &[usize],
        weight: Option<TensorId>,
        bias: Option<TensorId>,
        eps: f32,
    ) -> Result<TensorId> {
        const OP: &str = "layer_norm";
        let xi = self.float_operand(OP, x)?;
        let k = normalized_shape.len();
        if k == 0 || k > xi.shape.len() || xi.shape[xi.shape.len() - k..] != *normalized_shape {
            return Err(shape_err(
                OP,
                format!(
                    "normalized_shape {normalized_shape:?} is not the trailing dims of '{}' {:?}",
                    xi.name, xi.shape
                ),
            ));
        }
        for p in [weight, bias].into_iter().flatten() {
            let pi = self.same_float(OP, p, &xi)?;
            if pi.shape != normalized_shape {
                return Err(shape_err(
                    OP,
                    format!(
                        "'{}' has shape {:?}, expected normalized_shape {normalized_shape:?}",
                        pi.name, pi.shape
                    ),
                ));
            }
        }
        let d = normalized_shape.iter().product();
        self.node(
            Op::LayerNorm {
                x,
                weight,
                bias,
                d,
                eps,
                rms: false,
                plane: 0,
            },
            OP,
            xi.dtype,
            xi.shape,
        )
    }

    /// `group_norm` of `x` `[n, c, ..]` over `groups` groups of channels, with optional
    /// per-channel weight and bias `[c]`: a layer norm of each group, then the affine.
    pub fn group_norm(
        &mut self,
        x: TensorId,
        groups: usize,
        weight: Option<TensorId>,
        bias: Option<TensorId>,
        eps: f32,
    ) -> Result<TensorId> {
        const OP: &str = "group_norm";
        let xi = self.float_operand(OP, x)?;
        let (n, c) = match xi.shape.as_slice() {
            [n, c, ..] => (*n, *c),
            _ => (0, 0),
        };
        if c == 0 || groups == 0 || c % groups != 0 {
            return Err(shape_err(
                OP,
                format!(
                    "'{}' {:?} must be [n, c, ..] with c divisible by {groups} groups",
                    xi.name, xi.shape
                ),
            ));
        }
        let per = xi.numel() / (n * groups);
        let g = self.reshape(x, &[n as isize, groups as isize, per as isize])?;
        let y = self.layer_norm(g, &[per], None, None, eps)?;
        let full: Vec<isize> = xi.shape.iter().map(|&v| v as isize).collect();
        let mut y = self.reshape(y, &full)?;
        // Per-channel parameters as [c, 1, ..] broadcast over the spatial dims.
        let mut pshape = vec![c as isize];
        pshape.resize(xi.shape.len() - 1, 1);
        for (p, mul) in [(weight, true), (bias, false)] {
            let Some(p) = p else { continue };
            let pi = self.same_float(OP, p, &xi)?;
            if pi.shape != [c] {
                return Err(shape_err(
                    OP,
                    format!("'{}' has shape {:?}, expected [{c}]", pi.name, pi.shape),
                ));
            }
            let p = self.reshape(p, &pshape)?;
            y = if mul {
                self.mul(y, p)?
            } else {
                self.add(y, p)?
            };
        }
        Ok(y)
    }
}

/// Layer norms of at least this many rows, each at most [`SG_ROW_MAX_D`] long and contiguous,
/// take a subgroup per row where the device has subgroup arithmetic (`layer_norm.glsl`'s
/// `SG_ROWS`) instead of a work group: on an NVIDIA H100 a ConvNeXt-Tiny's norms of 3136
/// rows of 96 channels took 9-11 us each on work groups of 256 invocations.
/// [`ENV_NORM_SUBGROUP_ROWS`] changes it.
const SG_ROWS_MIN: usize = 512;
/// See [`SG_ROWS_MIN`].
const SG_ROW_MAX_D: usize = 1024;

/// Environment variable for tuning: the fewest rows a layer norm takes a subgroup per row
/// with (default [`SG_ROWS_MIN`]).
pub const ENV_NORM_SUBGROUP_ROWS: &str = "VKDELEGATE_NORM_SUBGROUP_ROWS";

/// [`ENV_NORM_SUBGROUP_ROWS`], else [`SG_ROWS_MIN`].
fn sg_rows_min() -> usize {
    let Ok(v) = std::env::var(ENV_NORM_SUBGROUP_ROWS) else {
        return SG_ROWS_MIN;
    };
    v.trim().parse().unwrap_or_else(|_| {
        log::warn!("{ENV_NORM_SUBGROUP_ROWS}={v}: expected a row count; using the default");
        SG_ROWS_MIN
    })
}

// Recording: what this family's nodes become, dispatches of the op library.
impl Lowerer<'_> {
    /// Records a node of this family.
    pub(crate) fn record_norm(&mut self, op: &Op, t: &Target) -> Result<()> {
        let (o, n) = (t.o, t.info.numel());
        match op {
            Op::LayerNorm {
                x,
                weight,
                bias,
                d,
                eps,
                rms,
                plane,
            } => {
                let x = self.st(*x);
                let w = weight.map(|w| self.st(w));
                let b = bias.map(|b| self.st(b));
                let rows = n / d;
                // Channels-first rows: a thread a row, so that a subgroup's loads of one
                // channel are of neighbouring pixels.
                let per_thread = *d < ROW_KERNEL_MIN || *plane > 0;
                let g = if per_thread {
                    self.linear_groups(rows as u64)
                } else {
                    rows.min(ROW_GROUPS) as u32
                };
                let kernel = if !per_thread && self.subgroups {
                    Kernel::LayerNormSg
                } else {
                    Kernel::LayerNorm
                };
                // Many short contiguous rows: a subgroup each.
                let width = self.limits.subgroup_size.max(1) as usize;
                let by_subgroup = kernel == Kernel::LayerNormSg
                    && *plane == 0
                    && *d <= SG_ROW_MAX_D
                    && rows >= sg_rows_min();
                let g = if by_subgroup {
                    self.linear_groups((rows * width) as u64)
                } else {
                    g
                };
                self.push(
                    kernel,
                    vec![
                        u32::from(w.is_some()),
                        u32::from(b.is_some()),
                        u32::from(per_thread),
                        u32::from(*rms),
                        u32::from(by_subgroup),
                    ],
                    vec![
                        (x, false),
                        (w.unwrap_or(x), false),
                        (b.unwrap_or(x), false),
                        (o, true),
                    ],
                    &push::LayerNormPush {
                        rows: rows as u32,
                        d: *d as u32,
                        eps: *eps,
                        plane: *plane as u32,
                    },
                    [g, 1, 1],
                );
            }
            _ => return Err(self.not_in_family()),
        }
        Ok(())
    }
}
