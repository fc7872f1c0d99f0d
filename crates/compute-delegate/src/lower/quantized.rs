//! int8 ops: add_q8 and conv2d_q8 with TOSA-style rescales.

use super::*;

impl Lowerer<'_> {
    /// Lowers a node of this family.
    pub(super) fn quantized(&mut self, op: &Op, t: &Target) -> Result<()> {
        let (o, oi, n) = (t.o, &t.info, t.info.numel());
        match op {
            Op::QAdd { a, b, q } => {
                let words = n.div_ceil(4);
                let g = self.linear_groups(words as u64);
                let (sa, sb) = (self.st(*a), self.st(*b));
                let push = vec![
                    words as u32,
                    q.a_zp as u32,
                    q.b_zp as u32,
                    q.out_zp as u32,
                    q.left_shift,
                    q.a.multiplier as u32,
                    q.a.shift,
                    q.b.multiplier as u32,
                    q.b.shift,
                    q.out.multiplier as u32,
                    q.out.shift,
                ];
                self.push(
                    Kernel::QAdd,
                    vec![],
                    vec![(sa, false), (sb, false), (o, true)],
                    push,
                    [g, 1, 1],
                );
            }
            Op::QConv {
                x,
                w,
                bias,
                mult,
                shift,
                q,
            } => {
                let (xi, wi) = (self.t(*x).clone(), self.t(*w).clone());
                let p = q.conv;
                let words = n.div_ceil(4);
                let g = self.linear_groups(words as u64);
                let b = bias.map(|b| self.st(b));
                let push = [
                    n as u32,
                    xi.shape[1] as u32,
                    xi.shape[2] as u32,
                    xi.shape[3] as u32,
                    oi.shape[1] as u32,
                    oi.shape[2] as u32,
                    oi.shape[3] as u32,
                    wi.shape[2] as u32,
                    wi.shape[3] as u32,
                    p.stride[0] as u32,
                    p.stride[1] as u32,
                    p.padding[0] as u32,
                    p.padding[1] as u32,
                    p.dilation[0] as u32,
                    p.dilation[1] as u32,
                    p.groups as u32,
                    q.x_zp as u32,
                    q.w_zp as u32,
                    q.out_zp as u32,
                    u32::from(b.is_some()),
                ];
                let (sm, ss) = (self.st(*mult), self.st(*shift));
                self.push(
                    Kernel::QConv,
                    vec![],
                    vec![
                        (xi.storage, false),
                        (wi.storage, false),
                        (b.unwrap_or(sm), false),
                        (sm, false),
                        (ss, false),
                        (o, true),
                    ],
                    push.to_vec(),
                    [g, 1, 1],
                );
            }
            _ => return Err(self.not_in_family()),
        }
        Ok(())
    }
}
