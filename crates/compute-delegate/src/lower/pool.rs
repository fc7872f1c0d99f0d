//! 2-D average and max pooling.

use super::*;

impl Lowerer<'_> {
    /// Lowers a node of this family.
    pub(super) fn pool(&mut self, op: &Op, t: &Target) -> Result<()> {
        let (o, oi, n) = (t.o, &t.info, t.info.numel());
        match op {
            Op::Pool { x, max, p } => {
                let xi = self.t(*x).clone();
                let r = xi.shape.len();
                let (h, w) = (xi.shape[r - 2], xi.shape[r - 1]);
                let (oh, ow) = (oi.shape[r - 2], oi.shape[r - 1]);
                if p.kernel == [2, 2]
                    && p.stride == [2, 2]
                    && p.padding == [0, 0]
                    && h % 2 == 0
                    && w % 4 == 0
                {
                    // Vectorised 2x2 / stride 2 path: one vec4 from each of two rows.
                    let total = n / 2;
                    let g = self.linear_groups(total as u64);
                    self.push(
                        Kernel::Pool2x2,
                        vec![u32::from(*max)],
                        vec![(xi.storage, false), (o, true)],
                        vec![total as u32, (w / 4) as u32, oh as u32],
                        [g, 1, 1],
                    );
                    return Ok(());
                }
                let g = self.linear_groups(n as u64);
                self.push(
                    Kernel::Pool,
                    vec![u32::from(*max)],
                    vec![(xi.storage, false), (o, true)],
                    [
                        n,
                        h,
                        w,
                        oh,
                        ow,
                        p.kernel[0],
                        p.kernel[1],
                        p.stride[0],
                        p.stride[1],
                        p.padding[0],
                        p.padding[1],
                        usize::from(p.count_include_pad),
                    ]
                    .iter()
                    .map(|&v| v as u32)
                    .collect(),
                    [g, 1, 1],
                );
            }
            _ => return Err(self.not_in_family()),
        }
        Ok(())
    }
}
