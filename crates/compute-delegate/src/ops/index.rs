//! Index and create ops: embedding lookups, `index_select` and `gather` along a dim, fills,
//! ranges and scalars.

use vk_core::{DType, HostTensor};

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
    OpDef::new(&["aten.index_select.default", "index_select"], &[Param::tensor("self"), Param::new("dim", Kind::Int, Fallback::Required), Param::tensor("index")], |c| index_dim(c, false)),
    OpDef::new(&["aten.index.Tensor", "aten::index.Tensor_out", "index"], &[Param::tensor("self"), Param::new("indices", Kind::OptTensors, Fallback::Required)], index_tensor),
    OpDef::new(&["aten.zeros.default", "zeros"], &[Param::new("size", Kind::Ints, Fallback::Required), DTYPE], |c| fill(c, 0.0)),
    OpDef::new(&["aten.ones.default", "ones"], &[Param::new("size", Kind::Ints, Fallback::Required), DTYPE], |c| fill(c, 1.0)),
    OpDef::new(&["aten.gather.default", "gather"], &[Param::tensor("self"), Param::new("dim", Kind::Int, Fallback::Required), Param::tensor("index"), Param::new("sparse_grad", Kind::Bool, Fallback::Bool(false))], |c| index_dim(c, true)),
    OpDef::new(&["et_vk.grid_priors.default", "grid_priors"], &[Param::tensor("self"), Param::new("stride", Kind::Int, Fallback::Required), Param::new("offset", Kind::Float, Fallback::Required)], grid_priors),
    OpDef::new(&["aten.arange.start_step", "arange"], &[Param::new("start", Kind::Float, Fallback::Required), Param::new("end", Kind::Float, Fallback::Required), Param::new("step", Kind::Float, Fallback::Float(1.0)), DTYPE], arange),
    OpDef::new(&["aten.full.default", "full"], &[Param::new("size", Kind::Ints, Fallback::Required), Param::new("fill_value|value", Kind::Float, Fallback::Required), DTYPE], full),
    OpDef::new(&["aten.scalar_tensor.default", "aten::scalar_tensor.out", "scalar_tensor"], &[Param::new("s|value", Kind::Float, Fallback::Required), DTYPE], scalar_tensor),
];

/// ExecuTorch's `ScalarType` of a created tensor (none: as the values say).
const DTYPE: Param = Param::new("dtype", Kind::Int, Fallback::Null);

/// The most values a constant fill holds (`full`, and the pads of `constant_pad_nd`): they
/// are made on the host, so a file cannot ask for gigabytes of them.
pub(crate) const FULL_MAX: usize = 1 << 26;

/// Whether a created tensor of ScalarType `code` holds integers (Byte to Long), or, without
/// one, whether its values are all whole (`arange`'s default for integer scalars; `full` and
/// `scalar_tensor` without a dtype are floats).
fn integral(code: Option<i64>, values: &[f64]) -> bool {
    match code {
        Some(code) => (0..=4).contains(&code),
        None => values.iter().all(|v| v.fract() == 0.0),
    }
}

/// A created constant: i32 for integers, else the graph's float dtype.
fn created(
    c: &mut Call<'_>,
    name: &str,
    shape: &[usize],
    values: &[f64],
    int: bool,
) -> Result<Vec<TensorId>> {
    let name = format!("{name}_{}", c.g.node_count());
    if int {
        let v: Vec<i32> = values.iter().map(|&v| v as i32).collect();
        let t = HostTensor::from_i32(shape.to_vec(), &v).map_err(|e| c.err(0, e.to_string()))?;
        return one(c.g.constant(&name, t)?);
    }
    let v: Vec<f32> = values.iter().map(|&v| v as f32).collect();
    match c.g.float() {
        DType::F16 => one(c.g.constant_f16(&name, shape, &v)?),
        _ => one(c.g.constant_f32(&name, shape, &v)?),
    }
}

/// `start, start + step, ...` below `end` (above it for a negative step).
fn arange(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (start, end, step) = (c.float(0)?, c.float(1)?, c.float(2)?);
    let n = ((end - start) / step).ceil();
    if step == 0.0 || !(0.0..=FULL_MAX as f64).contains(&n) {
        return Err(c.err(2, format!("{step} makes no range from {start} to {end}")));
    }
    let values: Vec<f64> = (0..n as usize).map(|i| start + i as f64 * step).collect();
    if values.is_empty() {
        return Err(c.err(1, format!("{end}: an empty range from {start}")));
    }
    let int = integral(c.opt_int(3)?, &[start, end, step]);
    created(c, "arange", &[values.len()], &values, int)
}

/// A constant of `size`, every element `fill_value`.
fn full(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (size, value) = (c.counts(0)?, c.float(1)?);
    let shape = if size.is_empty() { vec![1] } else { size };
    let values = vec![value; fill_count(c, &shape)?];
    let int = c.opt_int(2)?.is_some_and(|code| integral(Some(code), &[]));
    created(c, "full", &shape, &values, int)
}

/// A constant of `size`, every element `value`.
fn fill(c: &mut Call<'_>, value: f64) -> Result<Vec<TensorId>> {
    let size = c.counts(0)?;
    let shape = if size.is_empty() { vec![1] } else { size };
    let values = vec![value; fill_count(c, &shape)?];
    let int = c.opt_int(1)?.is_some_and(|code| integral(Some(code), &[]));
    created(c, "fill", &shape, &values, int)
}

/// The values a constant fill of `shape` holds: at most [`FULL_MAX`], made on the host.
fn fill_count(c: &Call<'_>, shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= FULL_MAX)
        .ok_or_else(|| {
            c.err(
                0,
                format!("{shape:?}: more than 2^26 values to fill on the host"),
            )
        })
}

/// A one-element constant.
fn scalar_tensor(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let value = c.float(0)?;
    let int = c.opt_int(1)?.is_some_and(|code| integral(Some(code), &[]));
    created(c, "scalar", &[1], &[value], int)
}

/// `index_select` (`gather` false: a 1-D index picks along `dim`) or `gather` (an index of the
/// output's shape, its rank that of `self`).
fn index_dim(c: &mut Call<'_>, gather: bool) -> Result<Vec<TensorId>> {
    let (x, dim, index) = (c.tensor(0)?, c.dim(1)?, c.tensor(2)?);
    let rank = c.shape(x).len() as isize;
    let d = if dim < 0 { dim + rank } else { dim };
    if d < 0 || d >= rank {
        return Err(c.err(1, format!("dim {dim} of a tensor of rank {rank}")));
    }
    one(c.g.index_along(x, d as usize, index, gather)?)
}

/// `self[indices]` with one index tensor, at position `k` of `indices` (the others None): the
/// index's shape takes the place of dim `k`.
fn index_tensor(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let x = c.tensor(0)?;
    let given: Vec<(usize, TensorId)> = c
        .opt_tensors(1)?
        .into_iter()
        .enumerate()
        .filter_map(|(k, t)| t.map(|t| (k, t)))
        .collect();
    let shape = c.shape(x);
    let (Some(&(first, _)), Some(&(last, _))) = (given.first(), given.last()) else {
        return Err(c.err(1, "no index tensor"));
    };
    if last >= shape.len() || last + 1 - first != given.len() {
        let dims: Vec<usize> = given.iter().map(|&(k, _)| k).collect();
        let why =
            format!("index tensors for dims {dims:?} of {shape:?}: consecutive dims are supported");
        return Err(c.err(1, why));
    }
    // The picked dims flattened into one, indexed by the broadcast linear index.
    let index = linear_index(c, &given, &shape[..=last])?;
    let ishape = c.shape(index);
    let size = |dims: &[usize]| dims.iter().product::<usize>() as isize;
    let x3 = c.g.reshape(
        x,
        &[
            size(&shape[..first]),
            size(&shape[first..=last]),
            size(&shape[last + 1..]),
        ],
    )?;
    let flat = c.g.reshape(index, &[-1])?;
    let y = c.g.index_along(x3, 1, flat, false)?;
    let mut out: Vec<isize> = shape[..first].iter().map(|&s| s as isize).collect();
    out.extend(ishape.iter().map(|&s| s as isize));
    out.extend(shape[last + 1..].iter().map(|&s| s as isize));
    one(c.g.reshape(y, &out)?)
}

/// `sum_j index_j * stride_j` over the indexed dims (`shape` up to the last of them),
/// broadcast, as i32; computed in f32, exact below 2^24 elements. One index is itself.
fn linear_index(
    c: &mut Call<'_>,
    given: &[(usize, TensorId)],
    shape: &[usize],
) -> Result<TensorId> {
    if let [(_, index)] = given {
        return Ok(*index);
    }
    let mut sum: Option<TensorId> = None;
    for &(k, index) in given {
        let stride: usize = shape[k + 1..].iter().product();
        let t = c.g.cast(index, DType::F32)?;
        let t = if stride == 1 {
            t
        } else {
            c.g.mul_scalar(t, stride as f32)?
        };
        sum = Some(match sum {
            None => t,
            Some(s) => c.g.add(s, t)?,
        });
    }
    let sum = sum.ok_or_else(|| c.err(1, "no index tensor"))?;
    c.g.cast(sum, DType::I32)
}

/// The anchor points of `self`'s last two dims `[.., h, w]`: `[h * w, 2]`, row `y * w + x`
/// holding `((x + offset) * stride, (y + offset) * stride)`. They depend on the shape alone,
/// so they are a constant.
fn grid_priors(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let x = c.tensor(0)?;
    let (stride, offset) = (c.int(1)? as f32, c.f32(2)?);
    let shape = c.shape(x);
    let [.., h, w] = shape[..] else {
        return Err(c.err(0, format!("{shape:?}: two dims or more are needed")));
    };
    let values: Vec<f32> = (0..h * w)
        .flat_map(|i| {
            [
                ((i % w) as f32 + offset) * stride,
                ((i / w) as f32 + offset) * stride,
            ]
        })
        .collect();
    let name = format!("grid_priors{}", x.index());
    let priors = c.g.constant_f32(&name, &[h * w, 2], &values)?;
    let float = c.g.float();
    one(if float == DType::F32 {
        priors
    } else {
        c.g.cast(priors, float)?
    })
}

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
    let (table, mut ids) = (c.tensor(0)?, c.tensor(1)?);
    // Indices computed through float arithmetic (integer elementwise ops, masks cast to
    // integers) hold whole numbers: read as i32.
    if matches!(c.g.dtype(ids), Some(DType::F32 | DType::F16)) {
        ids = c.g.cast(ids, DType::I32)?;
    }
    one(c.g.embedding(table, ids)?)
}

/// A constant of `self`'s shape in the graph's float dtype.
fn full_like(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let value = c.f32(1)?;
    fill_like(c, value)
}

// Shape and dtype inference: the builder's methods of this family, each checking its
// operands and naming the tensor and the numbers on error.

impl GraphBuilder {
    /// Elements of `x` (f32, f16 or i32, rank up to 6) picked along `dim` by the i32 `index`
    /// on `index_dim.comp`: `gather` false, a 1-D index replacing dim `dim`'s size; true, an
    /// index of the output's shape and `x`'s rank. Negative indices count from the end; out of
    /// range gives 0.
    pub fn index_along(
        &mut self,
        x: TensorId,
        dim: usize,
        index: TensorId,
        gather: bool,
    ) -> Result<TensorId> {
        let op = if gather { "gather" } else { "index_select" };
        let xi = self.info(op, x)?.clone();
        let ii = self.info(op, index)?.clone();
        let (shape, rank) = (&xi.shape, xi.shape.len());
        if dim >= rank || rank > 6 {
            return Err(shape_err(
                op,
                format!("dim {dim} of '{}' {shape:?}", xi.name),
            ));
        }
        if ii.dtype != DType::I32 {
            return Err(shape_err(
                op,
                format!("index '{}' is {}, not i32", ii.name, ii.dtype),
            ));
        }
        let out = match (gather, ii.shape.as_slice()) {
            (true, s) if s.len() == rank => s.to_vec(),
            (false, [n]) => {
                let mut out = shape.clone();
                out[dim] = *n;
                out
            }
            (_, s) => {
                let want = if gather { "the rank of" } else { "1-D, for" };
                return Err(shape_err(
                    op,
                    format!(
                        "index '{}' {s:?} must be {want} '{}' {shape:?}",
                        ii.name, xi.name
                    ),
                ));
            }
        };
        if !matches!(xi.dtype, DType::F32 | DType::F16 | DType::I32) {
            return Err(shape_err(
                op,
                format!("'{}' is {}; f32, f16 or i32 is required", xi.name, xi.dtype),
            ));
        }
        let strides = crate::lower::contiguous_strides(shape);
        let word =
            |v: usize| u32::try_from(v).map_err(|_| shape_err(op, format!("{v} is over 2^32")));
        let push = push::IndexDimPush {
            total: word(out.iter().product())?,
            rank: rank as u32,
            dim: dim as u32,
            mode: u32::from(gather),
            dims: crate::lower::rank6(&out),
            xs: crate::lower::rank6(&strides),
            size: word(shape[dim])?,
        };
        self.kernel_node(op, Kernel::IndexDim, &[x, index], (xi.dtype, out), &push)
    }

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
        self.node(Op::Gather { table, ids }, OP, ti.dtype, shape)
    }

    /// A constant f32 tensor of `shape` filled with `value` (at most 2^26 values).
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
        let n: usize = shape.iter().product();
        if n > FULL_MAX {
            return Err(shape_err(
                "full",
                format!("'{name}' {shape:?}: more than 2^26 values to fill on the host"),
            ));
        }
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
