//! 2-D pooling: average and max (NCHW).

use super::{Call, Fallback, Kind, OpDef, Param, one};
use crate::error::Result;
use crate::graph::{Pool2d, TensorId};

const SELF: Param = Param::tensor("self");
const KERNEL: Param = Param::new("kernel_size|kernel", Kind::Ints, Fallback::Required);
const STRIDE: Param = Param::new("stride", Kind::Ints, Fallback::Ints(&[]));
const PADDING: Param = Param::new("padding", Kind::Ints, Fallback::Ints(&[0]));
const DILATION: Param = Param::new("dilation", Kind::Ints, Fallback::Ints(&[1]));
const CEIL: Param = Param::new("ceil_mode", Kind::Bool, Fallback::Bool(false));
const COUNT_PAD: Param = Param::new("count_include_pad", Kind::Bool, Fallback::Bool(true));
const DIVISOR: Param = Param::new("divisor_override", Kind::Int, Fallback::Null);

/// The ops of this family, one registration line each.
#[rustfmt::skip]
pub(super) const OPS: &[OpDef] = &[
    OpDef::new(&["aten.avg_pool2d.default", "avg_pool2d"], &[SELF, KERNEL, STRIDE, PADDING, CEIL, COUNT_PAD, DIVISOR], avg_pool2d),
    OpDef::new(&["aten.max_pool2d_with_indices.default", "aten.max_pool2d.default", "max_pool2d"], &[SELF, KERNEL, STRIDE, PADDING, DILATION, CEIL], max_pool2d),
];

/// Window, stride (the window when empty) and padding.
fn window(c: &Call<'_>) -> Result<([usize; 2], [usize; 2], [usize; 2])> {
    let kernel = c.pair(1)?;
    let stride = if c.ints(2)?.is_empty() {
        kernel
    } else {
        c.pair(2)?
    };
    Ok((kernel, stride, c.pair(3)?))
}

fn avg_pool2d(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let x = c.tensor(0)?;
    if let Some(d) = c.opt_int(6)? {
        return Err(c.err(6, format!("a divisor override ({d}) is not supported")));
    }
    let (kernel, stride, padding) = window(c)?;
    let p = Pool2d {
        kernel,
        stride,
        padding,
        ceil_mode: c.bool(4)?,
        count_include_pad: c.bool(5)?,
    };
    one(c.g.avg_pool2d(x, p)?)
}

/// The values only: a front end refuses a graph that reads the indices.
fn max_pool2d(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let x = c.tensor(0)?;
    if c.pair(4)? != [1, 1] {
        return Err(c.err(4, "dilated pooling is not supported"));
    }
    let (kernel, stride, padding) = window(c)?;
    let p = Pool2d {
        kernel,
        stride,
        padding,
        ceil_mode: c.bool(5)?,
        count_include_pad: true,
    };
    one(c.g.max_pool2d(x, p)?)
}
