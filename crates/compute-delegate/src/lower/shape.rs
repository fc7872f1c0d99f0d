//! Shape ops and casts: permute, cat, slice (strided copies), cast, and the row gather of
//! `embedding`.

use super::*;

impl Lowerer<'_> {
    /// Lowers a node of this family.
    pub(super) fn shape_op(&mut self, op: &Op, t: &Target) -> Result<()> {
        let (o, oi, n) = (t.o, &t.info, t.info.numel());
        match op {
            Op::Permute { x, perm } => {
                let xi = self.t(*x).clone();
                let cs = contiguous_strides(&xi.shape);
                let ss = perm.iter().map(|&p| cs[p]).collect();
                let ds = contiguous_strides(&oi.shape);
                self.copy(xi.storage, o, &oi.shape, ss, ds, 0, 0)?;
            }
            Op::Cat { xs, dim } => {
                let ds = contiguous_strides(&oi.shape);
                let mut off = 0;
                for &x in xs {
                    let xi = self.t(x).clone();
                    let ss = contiguous_strides(&xi.shape);
                    self.copy(xi.storage, o, &xi.shape, ss, ds.clone(), 0, off * ds[*dim])?;
                    off += xi.shape[*dim];
                }
            }
            Op::Cast { x, to } => {
                let xi = self.t(*x).clone();
                let code = |d| {
                    crate::graph::cast_code(d).ok_or_else(|| Error::DType {
                        op: "cast",
                        tensor: xi.name.clone(),
                        actual: d,
                        expected: "f32, f16, i32, i8 or i64",
                    })
                };
                let (src, dst) = (code(xi.dtype)?, code(*to)?);
                let quads = n.div_ceil(4);
                let g = self.linear_groups(quads as u64);
                self.push(
                    Kernel::Cast,
                    vec![src, dst],
                    vec![(xi.storage, false), (o, true)],
                    vec![quads as u32],
                    [g, 1, 1],
                );
            }
            Op::Slice {
                x,
                dim,
                start,
                step,
            } => {
                let xi = self.t(*x).clone();
                let cs = contiguous_strides(&xi.shape);
                let mut ss = cs.clone();
                ss[*dim] *= step;
                let ds = contiguous_strides(&oi.shape);
                self.copy(xi.storage, o, &oi.shape, ss, ds, start * cs[*dim], 0)?;
            }
            Op::Gather { table, ids } => {
                let ti = self.t(*table).clone();
                let ids = self.st(*ids);
                let g = self.linear_groups(n as u64);
                self.push(
                    Kernel::Gather,
                    vec![],
                    vec![(ti.storage, false), (ids, false), (o, true)],
                    vec![n as u32, ti.shape[1] as u32, ti.shape[0] as u32],
                    [g, 1, 1],
                );
            }
            _ => return Err(self.not_in_family()),
        }
        Ok(())
    }
}
