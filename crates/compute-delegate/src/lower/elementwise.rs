//! Elementwise ops: unary (activations, scalar arithmetic, comparisons, copies), binary with
//! broadcasting, and `where` (three operands, broadcasting).

use super::*;

/// Strides of `t` read as a tensor of rank `r`: 0 on broadcast (size-1 or missing) dims.
fn bcast_strides(t: &TensorInfo, r: usize) -> Vec<usize> {
    let cs = contiguous_strides(&t.shape);
    let off = r - t.shape.len();
    (0..r)
        .map(|i| {
            if i < off || t.shape[i - off] == 1 {
                0
            } else {
                cs[i - off]
            }
        })
        .collect()
}

impl Lowerer<'_> {
    /// Lowers a node of this family.
    pub(super) fn elementwise(&mut self, op: &Op, t: &Target) -> Result<()> {
        let (o, oi, n) = (t.o, &t.info, t.info.numel());
        match op {
            Op::Unary { op, x } => {
                let (code, p0, p1) = op.code();
                let n4 = n.div_ceil(4);
                let g = self.linear_groups(n4.div_ceil(2) as u64); // two vec4s per thread
                let x = self.st(*x);
                self.push(
                    Kernel::Unary,
                    vec![code],
                    vec![(x, false), (o, true)],
                    vec![n4 as u32, p0.to_bits(), p1.to_bits()],
                    [g, 1, 1],
                );
            }
            Op::Binary { op, a, b } => {
                let (ai, bi) = (self.t(*a).clone(), self.t(*b).clone());
                let (sa, sb) = (ai.storage, bi.storage);
                if ai.shape == bi.shape {
                    let n4 = n.div_ceil(4);
                    let g = self.linear_groups(n4.div_ceil(2) as u64); // two vec4s per thread
                    self.push(
                        Kernel::Binary,
                        vec![op.code()],
                        vec![(sa, false), (sb, false), (o, true)],
                        vec![n4 as u32],
                        [g, 1, 1],
                    );
                } else {
                    let r = oi.shape.len();
                    let bstrides = |t: &TensorInfo| {
                        let cs = contiguous_strides(&t.shape);
                        let off = r - t.shape.len();
                        (0..r)
                            .map(|i| {
                                if i < off || t.shape[i - off] == 1 {
                                    0
                                } else {
                                    cs[i - off]
                                }
                            })
                            .collect::<Vec<_>>()
                    };
                    let (d, s) = collapse(
                        &oi.shape,
                        &[bstrides(&ai), bstrides(&bi), contiguous_strides(&oi.shape)],
                    );
                    if d.len() > MAX_RANK {
                        return Err(Error::Shape {
                            op: self.op,
                            detail: format!(
                                "broadcasting '{}' {:?} with '{}' {:?} needs {} dims; at most \
                                 {MAX_RANK}",
                                ai.name,
                                ai.shape,
                                bi.name,
                                bi.shape,
                                d.len()
                            ),
                        });
                    }
                    let mut push = vec![n as u32, d.len() as u32];
                    push.extend(pad6(&d));
                    push.extend(pad6(&s[0]));
                    push.extend(pad6(&s[1]));
                    let g = self.linear_groups(n as u64);
                    self.push(
                        Kernel::BinaryBcast,
                        vec![op.code()],
                        vec![(sa, false), (sb, false), (o, true)],
                        push,
                        [g, 1, 1],
                    );
                }
            }
            Op::Where { cond, a, b } => {
                let ins = [
                    self.t(*cond).clone(),
                    self.t(*a).clone(),
                    self.t(*b).clone(),
                ];
                let r = oi.shape.len();
                let strides: Vec<Vec<usize>> = ins.iter().map(|t| bcast_strides(t, r)).collect();
                let (d, s) = collapse(&oi.shape, &strides);
                if d.len() > MAX_RANK {
                    return Err(Error::Shape {
                        op: self.op,
                        detail: format!(
                            "broadcasting to {:?} needs {} dims; at most {MAX_RANK}",
                            oi.shape,
                            d.len()
                        ),
                    });
                }
                let mut push = vec![n as u32, d.len() as u32];
                push.extend(pad6(&d));
                for st in &s {
                    push.extend(pad6(st));
                }
                let g = self.linear_groups(n as u64);
                let bindings = ins
                    .iter()
                    .map(|t| (t.storage, false))
                    .chain([(o, true)])
                    .collect();
                self.push(Kernel::Where, vec![], bindings, push, [g, 1, 1]);
            }
            _ => return Err(self.not_in_family()),
        }
        Ok(())
    }
}
