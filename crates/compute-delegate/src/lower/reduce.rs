//! Row reductions: softmax / log_softmax, sum / mean over dims, layer_norm.

use super::*;

impl Lowerer<'_> {
    /// Lowers a node of this family.
    pub(super) fn reduction(&mut self, op: &Op, t: &Target) -> Result<()> {
        let (out, o, oi, n) = (t.out, t.o, &t.info, t.info.numel());
        match op {
            Op::Softmax { x, dim, log } => {
                let s = &oi.shape;
                let outer: usize = s[..*dim].iter().product();
                let inner: usize = s[dim + 1..].iter().product();
                let rows = inner == 1 && s[*dim] >= ROW_KERNEL_MIN;
                let vec4 = rows && s[*dim] % 4 == 0;
                // vec4s per thread kept in registers (rows up to 8192 elements).
                let per_thread = (s[*dim] / 4).div_ceil(256);
                let cache = if vec4 && per_thread <= 8 {
                    per_thread as u32
                } else {
                    0
                };
                let g = if rows {
                    outer.min(ROW_GROUPS) as u32
                } else {
                    self.linear_groups((outer * inner) as u64)
                };
                let x = self.st(*x);
                let kernel = if rows && self.subgroups {
                    Kernel::SoftmaxSg
                } else {
                    Kernel::Softmax
                };
                self.push(
                    kernel,
                    vec![u32::from(*log), u32::from(rows), u32::from(vec4), cache],
                    vec![(x, false), (o, true)],
                    vec![outer as u32, s[*dim] as u32, inner as u32],
                    [g, 1, 1],
                );
            }
            Op::Reduce { x, dims, mean } => {
                let xi = self.t(*x).clone();
                let mut cur = xi.shape.clone();
                // Runs of consecutive reduced dims, reduced last run first.
                let mut runs: Vec<(usize, usize)> = Vec::new();
                for &d in dims {
                    match runs.last_mut() {
                        Some((_, end)) if *end == d => *end += 1,
                        _ => runs.push((d, d + 1)),
                    }
                }
                let mut src = xi.storage;
                for (i, &(start, end)) in runs.iter().enumerate().rev() {
                    let outer: usize = cur[..start].iter().product();
                    let r: usize = cur[start..end].iter().product();
                    let inner: usize = cur[end..].iter().product();
                    for c in &mut cur[start..end] {
                        *c = 1;
                    }
                    let dst = if i == 0 {
                        o
                    } else {
                        self.temp(out, outer * inner)
                    };
                    let scale = if *mean { 1.0 / r as f32 } else { 1.0 };
                    let rows = inner == 1 && r >= ROW_KERNEL_MIN;
                    let g = if rows {
                        outer.min(ROW_GROUPS) as u32
                    } else {
                        self.linear_groups((outer * inner) as u64)
                    };
                    let kernel = if rows && self.subgroups {
                        Kernel::ReduceSg
                    } else {
                        Kernel::Reduce
                    };
                    self.push(
                        kernel,
                        vec![u32::from(rows)],
                        vec![(src, false), (dst, true)],
                        vec![outer as u32, r as u32, inner as u32, scale.to_bits()],
                        [g, 1, 1],
                    );
                    src = dst;
                }
            }
            Op::LayerNorm {
                x,
                weight,
                bias,
                d,
                eps,
            } => {
                let x = self.st(*x);
                let w = weight.map(|w| self.st(w));
                let b = bias.map(|b| self.st(b));
                let rows = n / d;
                let per_thread = *d < ROW_KERNEL_MIN;
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
                self.push(
                    kernel,
                    vec![
                        u32::from(w.is_some()),
                        u32::from(b.is_some()),
                        u32::from(per_thread),
                    ],
                    vec![
                        (x, false),
                        (w.unwrap_or(x), false),
                        (b.unwrap_or(x), false),
                        (o, true),
                    ],
                    vec![rows as u32, *d as u32, eps.to_bits()],
                    [g, 1, 1],
                );
            }
            _ => return Err(self.not_in_family()),
        }
        Ok(())
    }
}
