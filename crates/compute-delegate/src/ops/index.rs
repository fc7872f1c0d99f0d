//! Index and create ops: embedding lookups and fills.

use vk_core::DType;

use super::{Call, Fallback, Kind, OpDef, Param, one};
use crate::error::{Error, Result};
use crate::graph::{GraphBuilder, Op, TensorId, shape_err};
use crate::kernels::{Kernel, push};
use crate::lower::{Lowerer, Target};

/// The ops of this family, one registration line each.
#[rustfmt::skip]
pub(super) const OPS: &[OpDef] = &[
    OpDef::new(&["aten.embedding.default", "embedding"], &[Param::tensor("weight"), Param::tensor("indices")], embedding),
    OpDef::new(&["aten.full_like.default", "full_like"], &[Param::tensor("self"), Param::new("fill_value|value", Kind::Float, Fallback::Required)], full_like),
    OpDef::new(&["aten.zeros_like.default", "zeros_like"], &[Param::tensor("self")], |c| fill_like(c, 0.0)),
    OpDef::new(&["aten.ones_like.default", "ones_like"], &[Param::tensor("self")], |c| fill_like(c, 1.0)),
];

/// A constant of `self`'s shape in the graph's float dtype, every element `value`.
fn fill_like(c: &mut Call<'_>, value: f32) -> Result<Vec<TensorId>> {
    let x = c.tensor(0)?;
    let shape = c.shape(x);
    let name = format!("fill_like_{}", x.index());
    let dtype = c.g.float();
    one(c.g.full_as(&name, &shape, value, dtype)?)
}

/// Rows of `weight` picked by `indices` (padding index and sparsity only matter to training).
fn embedding(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (table, ids) = (c.tensor(0)?, c.tensor(1)?);
    one(c.g.embedding(table, ids)?)
}

/// A constant of `self`'s shape in the graph's float dtype.
fn full_like(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, value) = (c.tensor(0)?, c.f32(1)?);
    let shape = c.shape(x);
    let name = format!("full_like_{}", x.index());
    let dtype = c.g.float();
    one(c.g.full_as(&name, &shape, value, dtype)?)
}

// Shape and dtype inference: the builder's methods of this family, each checking its
// operands and naming the tensor and the numbers on error.

impl GraphBuilder {
    /// `table[ids]`: rows of the 32-bit or f16 `table` `[v, d]` picked by the i32 `ids` (any
    /// shape); the result has shape `ids.shape + [d]`. An id outside `0..v` gives a row of
    /// zeros.
    pub fn embedding(&mut self, table: TensorId, ids: TensorId) -> Result<TensorId> {
        const OP: &str = "embedding";
        let ti = self.word_operand(OP, table)?;
        let ii = self.info(OP, ids)?.clone();
        if ii.dtype != DType::I32 {
            return Err(Error::DType {
                op: OP,
                tensor: ii.name,
                actual: ii.dtype,
                expected: "i32",
            });
        }
        if ti.shape.len() != 2 {
            return Err(shape_err(
                OP,
                format!("table '{}' {:?} must be [v, d]", ti.name, ti.shape),
            ));
        }
        let mut shape = ii.shape.clone();
        shape.push(ti.shape[1]);
        Self::check_shape(OP, &ii.name, &shape)?;
        Ok(self.node(Op::Gather { table, ids }, OP, ti.dtype, shape))
    }

    /// A constant f32 tensor of `shape` filled with `value`.
    pub fn full(&mut self, name: &str, shape: &[usize], value: f32) -> Result<TensorId> {
        self.full_as(name, shape, value, DType::F32)
    }

    /// A constant float tensor (f32 or f16) of `shape` filled with `value`.
    pub fn full_as(
        &mut self,
        name: &str,
        shape: &[usize],
        value: f32,
        dtype: DType,
    ) -> Result<TensorId> {
        Self::check_shape("full", name, shape)?;
        let n = shape.iter().product();
        match dtype {
            DType::F32 => self.constant_f32(name, shape, &vec![value; n]),
            DType::F16 => self.constant_f16(name, shape, &vec![value; n]),
            other => Err(Error::DType {
                op: "full",
                tensor: name.to_string(),
                actual: other,
                expected: "f32 or f16",
            }),
        }
    }
}

// Recording: what this family's nodes become, dispatches of the op library.
impl Lowerer<'_> {
    /// Records a node of this family.
    pub(crate) fn record_index(&mut self, op: &Op, t: &Target) -> Result<()> {
        let (o, n) = (t.o, t.info.numel());
        match op {
            Op::Gather { table, ids } => {
                let ti = self.t(*table).clone();
                let ids = self.st(*ids);
                let g = self.linear_groups(n as u64);
                self.push(
                    Kernel::Gather,
                    vec![],
                    vec![(ti.storage, false), (ids, false), (o, true)],
                    &push::GatherPush {
                        n: n as u32,
                        d: ti.shape[1] as u32,
                        v: ti.shape[0] as u32,
                    },
                    [g, 1, 1],
                );
            }
            _ => return Err(self.not_in_family()),
        }
        Ok(())
    }
}
