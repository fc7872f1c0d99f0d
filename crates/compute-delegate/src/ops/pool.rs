//! 2-D pooling (average and max) and resampling (nearest and bilinear upsampling), NCHW;
//! TOSA's RESIZE (its integer coordinates, NHWC, floats and integers) through the Rust API.

use super::{Call, Fallback, Kind, Math, OpDef, Param, one};
use crate::error::Result;
use crate::graph::{
    BinaryOp, Compare, GraphBuilder, Op, Pool2d, TensorId, TensorInfo, pool_out, shape_err,
};
use crate::kernels::{Kernel, push};
use crate::lower::{Lowerer, Target};
use vk_core::DType;

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
    OpDef::new(&["aten.avg_pool3d.default", "avg_pool3d"], &[SELF, KERNEL, STRIDE, PADDING, CEIL, COUNT_PAD, DIVISOR], |c| pool3d(c, false)),
    OpDef::new(&["aten.max_pool3d_with_indices.default", "aten.max_pool3d.default", "max_pool3d"], &[SELF, KERNEL, STRIDE, PADDING, DILATION, CEIL], |c| pool3d(c, true)),
    OpDef::new(&["aten._adaptive_avg_pool2d.default", "aten.adaptive_avg_pool2d.default", "adaptive_avg_pool2d"], &[SELF, Param::new("output_size|size", Kind::Ints, Fallback::Required)], adaptive_avg_pool2d),
    OpDef::new(&["aten.grid_sampler_2d.default", "grid_sampler_2d"], &[Param::tensor("input"), Param::tensor("grid"), Param::new("interpolation_mode", Kind::Int, Fallback::Int(0)), Param::new("padding_mode", Kind::Int, Fallback::Int(0)), Param::new("align_corners", Kind::Bool, Fallback::Bool(false))], grid_sampler),
    OpDef::new(&["aten.upsample_nearest2d.vec", "upsample_nearest2d"], &[Param::tensor("input"), Param::new("output_size|size", Kind::Ints, Fallback::Null), Param::new("scale_factors|scale", Kind::Floats, Fallback::Null)], |c| upsample(c, false)),
    OpDef::new(&["aten.upsample_bilinear2d.vec", "upsample_bilinear2d"], &[Param::tensor("input"), Param::new("output_size|size", Kind::Ints, Fallback::Null), Param::new("align_corners", Kind::Bool, Fallback::Bool(false)), Param::new("scale_factors|scale", Kind::Floats, Fallback::Null)], |c| upsample(c, true)),
];

/// Average pooling to `output_size`: the mean over the plane for 1 x 1, else windows of
/// `input / output` (the input must divide by the output, as where PyTorch's adaptive windows
/// are all equal).
fn adaptive_avg_pool2d(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, out) = (c.tensor(0)?, c.pair(1)?);
    let shape = c.shape(x);
    let [.., h, w] = shape.as_slice() else {
        return Err(c.err(0, format!("must have at least 2 dims, found {shape:?}")));
    };
    if out == [1, 1] {
        return one(c.g.mean(x, &[-2, -1], true)?);
    }
    if out.contains(&0) {
        return Err(c.err(1, format!("{out:?}: sizes must be positive")));
    }
    if h % out[0] != 0 || w % out[1] != 0 {
        return one(adaptive_by_matrix(c, x, [*h, *w], out)?);
    }
    let kernel = [h / out[0], w / out[1]];
    let p = Pool2d {
        kernel,
        stride: kernel,
        padding: [0, 0],
        ceil_mode: false,
        count_include_pad: true,
    };
    one(c.g.avg_pool2d(x, p)?)
}

/// Adaptive average pooling with unequal (or overlapping, or repeated) windows, as PyTorch
/// places them: output row `i` averages input rows `floor(i * h / oh)` to
/// `ceil((i + 1) * h / oh)`. The windows form a constant `[h * w, oh * ow]` matrix that the
/// input's planes are multiplied by.
fn adaptive_by_matrix(
    c: &mut Call<'_>,
    x: TensorId,
    [h, w]: [usize; 2],
    [oh, ow]: [usize; 2],
) -> Result<TensorId> {
    let shape = c.shape(x);
    let window =
        |i: usize, size: usize, out: usize| (i * size / out)..(((i + 1) * size).div_ceil(out));
    let mut m = vec![0f32; h * w * oh * ow];
    for (o, cell) in (0..oh)
        .flat_map(|i| (0..ow).map(move |j| (i, j)))
        .enumerate()
    {
        let (rows, cols) = (window(cell.0, h, oh), window(cell.1, w, ow));
        let weight = 1.0 / (rows.len() * cols.len()) as f32;
        for r in rows {
            for q in cols.clone() {
                m[(r * w + q) * oh * ow + o] = weight;
            }
        }
    }
    let planes: usize = shape[..shape.len() - 2].iter().product();
    let name = format!("adaptive_windows{}", x.index());
    let mut matrix = c.g.constant_f32(&name, &[h * w, oh * ow], &m)?;
    let float = c.g.dtype(x).unwrap_or(DType::F32);
    if float != DType::F32 {
        matrix = c.g.cast(matrix, float)?;
    }
    let flat = c.g.reshape(x, &[planes as isize, (h * w) as isize])?;
    let y = c.g.matmul(flat, matrix)?;
    let mut out: Vec<isize> = shape[..shape.len() - 2]
        .iter()
        .map(|&d| d as isize)
        .collect();
    out.extend([oh as isize, ow as isize]);
    c.g.reshape(y, &out)
}

/// `input` `[N, C, H, W]` sampled at `grid` `[N, Ho, Wo, 2]` (x, y in -1..1), as PyTorch's
/// `grid_sample`: bilinear (0) or nearest (1), zeros (0) or border (1) padding. Composed of
/// elementwise ops and one gather per corner: the input, channels last and flattened, is
/// indexed by each corner's pixel (an index past the end, for corners outside, reads 0).
fn grid_sampler(c: &mut Call<'_>) -> Result<Vec<TensorId>> {
    let (x, grid) = (c.tensor(0)?, c.tensor(1)?);
    let (mode, padding, align) = (c.int(2)?, c.int(3)?, c.bool(4)?);
    if !matches!(mode, 0 | 1) {
        return Err(c.err(
            2,
            format!("mode {mode}: bilinear (0) and nearest (1) are supported"),
        ));
    }
    if !matches!(padding, 0 | 1) {
        return Err(c.err(
            3,
            format!("mode {padding}: zeros (0) and border (1) are supported"),
        ));
    }
    let (xs, gs) = (c.shape(x), c.shape(grid));
    let [n, ch, h, w] = xs[..] else {
        return Err(c.err(0, format!("{xs:?}: [N, C, H, W] is supported")));
    };
    if gs.len() != 4 || gs[0] != n || gs[3] != 2 {
        return Err(c.err(
            1,
            format!("{gs:?} for input {xs:?}: [N, Ho, Wo, 2] is needed"),
        ));
    }
    let (ho, wo) = (gs[1], gs[2]);
    let dtype = c.g.info("grid_sampler_2d", x)?.dtype;
    let g = &mut *c.g;
    // Pixel coordinates, clamped to the border for border padding.
    let grid = g.as_dtype(grid, DType::F32)?;
    let coord = |g: &mut GraphBuilder, k: isize, size: usize| -> Result<TensorId> {
        let v = g.select(grid, 3, k)?;
        let half = if align {
            (size as f32 - 1.0) / 2.0
        } else {
            size as f32 / 2.0
        };
        let v = g.mul_scalar(v, half)?;
        let v = g.add_scalar(v, (size as f32 - 1.0) / 2.0)?;
        if padding == 1 {
            g.clamp(v, 0.0, size as f32 - 1.0)
        } else {
            Ok(v)
        }
    };
    let (ix, iy) = (coord(g, 0, w)?, coord(g, 1, h)?);
    // The input channels last, [N*H*W, C]; each corner's rows, offset by its batch.
    let table = g.as_dtype(x, DType::F32)?;
    let table = g.permute(table, &[0, 2, 3, 1])?;
    let table = g.reshape(table, &[(n * h * w) as isize, ch as isize])?;
    let offsets: Vec<f32> = (0..n).map(|b| (b * h * w) as f32).collect();
    let offsets = g.constant_f32(&format!("grid_batch{}", x.index()), &[n, 1, 1], &offsets)?;
    // Where a corner falls outside, its index is past the end: the gather reads 0 there.
    let past = g.full_as(
        &format!("grid_past{}", x.index()),
        &[1],
        (n * h * w) as f32,
        DType::F32,
    )?;
    let within = |g: &mut GraphBuilder, v: TensorId, size: usize| -> Result<TensorId> {
        let lo = g.compare_scalar(v, Compare::Ge, 0.0)?;
        let hi = g.compare_scalar(v, Compare::Le, size as f32 - 1.0)?;
        g.binary(BinaryOp::And, lo, hi)
    };
    let corner = |g: &mut GraphBuilder,
                  cx: TensorId,
                  cy: TensorId,
                  weight: Option<TensorId>|
     -> Result<TensorId> {
        let (in_x, in_y) = (within(g, cx, w)?, within(g, cy, h)?);
        let inside = g.binary(BinaryOp::And, in_x, in_y)?;
        let row = g.mul_scalar(cy, w as f32)?;
        let at = g.add(row, cx)?;
        let at = g.add(at, offsets)?;
        let at = g.where_(inside, at, past)?;
        let at = g.cast(at, DType::I32)?;
        let at = g.reshape(at, &[-1])?;
        let rows = g.index_along(table, 0, at, false)?;
        let rows = g.reshape(rows, &[n as isize, ho as isize, wo as isize, ch as isize])?;
        match weight {
            Some(wt) => {
                let wt = g.reshape(wt, &[n as isize, ho as isize, wo as isize, 1])?;
                g.mul(rows, wt)
            }
            None => Ok(rows),
        }
    };
    let out = if mode == 1 {
        let (rx, ry) = (g.math(Math::Round, ix, 0.0)?, g.math(Math::Round, iy, 0.0)?);
        corner(g, rx, ry, None)?
    } else {
        let (x0, y0) = (g.math(Math::Floor, ix, 0.0)?, g.math(Math::Floor, iy, 0.0)?);
        let (x1, y1) = (g.add_scalar(x0, 1.0)?, g.add_scalar(y0, 1.0)?);
        let (wx1, wy1) = (g.sub(ix, x0)?, g.sub(iy, y0)?);
        let (wx0, wy0) = (g.rsub_scalar(wx1, 1.0)?, g.rsub_scalar(wy1, 1.0)?);
        let mut sum = None;
        for (cx, cy, wx, wy) in [
            (x0, y0, wx0, wy0),
            (x1, y0, wx1, wy0),
            (x0, y1, wx0, wy1),
            (x1, y1, wx1, wy1),
        ] {
            let wt = g.mul(wx, wy)?;
            let v = corner(g, cx, cy, Some(wt))?;
            sum = Some(match sum {
                None => v,
                Some(s) => g.add(s, v)?,
            });
        }
        sum.ok_or_else(|| shape_err("grid_sampler_2d", "no corner".to_string()))?
    };
    let out = g.permute(out, &[0, 3, 1, 2])?;
    one(if dtype == DType::F32 {
        out
    } else {
        g.cast(out, dtype)?
    })
}

/// Nearest or bilinear resampling of the last two dims to `output_size`, or by
/// `scale_factors` (output size rounded down, coordinates mapped by one over it).
fn upsample(c: &mut Call<'_>, bilinear: bool) -> Result<Vec<TensorId>> {
    let x = c.tensor(0)?;
    // Bilinear: whether corners align (nearest has no such argument).
    let bilinear = if bilinear { Some(c.bool(2)?) } else { None };
    let (sizes, scales) = (
        c.counts(1)?,
        c.floats(if bilinear.is_some() { 3 } else { 2 })?,
    );
    let shape = c.shape(x);
    let [.., h, w] = shape.as_slice() else {
        return Err(c.err(0, format!("must have at least 2 dims, found {shape:?}")));
    };
    let (h, w) = (*h, *w);
    let ((oh, ow), (sh, sw)) = match (sizes.as_slice(), scales.as_slice()) {
        ([oh, ow], _) => ((*oh, *ow), (h as f32 / *oh as f32, w as f32 / *ow as f32)),
        ([], [fh, fw]) if *fh > 0.0 && *fw > 0.0 => (
            ((h as f64 * fh) as usize, (w as f64 * fw) as usize),
            ((1.0 / fh) as f32, (1.0 / fw) as f32),
        ),
        _ => {
            let why = format!("needs an output size or two scale factors, found {sizes:?}");
            return Err(c.err(1, why));
        }
    };
    if oh == 0 || ow == 0 {
        return Err(c.err(1, format!("an output of {oh} x {ow} pixels")));
    }
    let mut out = shape[..shape.len() - 2].to_vec();
    out.extend([oh, ow]);
    let word = |v: usize| u32::try_from(v).map_err(|_| c.err(0, format!("{v} is over 2^32")));
    let push = push::UpsamplePush {
        total: word(out.iter().product())?,
        h: word(h)?,
        w: word(w)?,
        oh: word(oh)?,
        ow: word(ow)?,
        mode: u32::from(bilinear.is_some()),
        align_corners: u32::from(bilinear == Some(true)),
        scale_h: sh,
        scale_w: sw,
    };
    let dtype = c.g.dtype(x).unwrap_or(DType::F32);
    if !matches!(dtype, DType::F32 | DType::F16) {
        return Err(c.err(0, format!("is {dtype}; f32 or f16 is required")));
    }
    let name = if bilinear.is_some() {
        "upsample_bilinear2d"
    } else {
        "upsample_nearest2d"
    };
    one(c
        .g
        .kernel_node(name, Kernel::Upsample, &[x], (dtype, out), &push)?)
}

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

/// `avg_pool3d` and `max_pool3d` (the values only) of `x` `[n, c, d, h, w]`, without
/// `ceil_mode`, dilation or a divisor override.
fn pool3d(c: &mut Call<'_>, max: bool) -> Result<Vec<TensorId>> {
    let x = c.tensor(0)?;
    let triple = |c: &Call<'_>, i: usize, default: Option<[usize; 3]>| -> Result<[usize; 3]> {
        match (c.counts(i)?.as_slice(), default) {
            (&[], Some(d)) => Ok(d),
            (&[v], _) => Ok([v; 3]),
            (&[d, h, w], _) => Ok([d, h, w]),
            (other, _) => Err(c.err(i, format!("one or three sizes, found {other:?}"))),
        }
    };
    let kernel = triple(c, 1, None)?;
    let p = Pool3d {
        kernel,
        stride: triple(c, 2, Some(kernel))?,
        padding: triple(c, 3, None)?,
        count_include_pad: !max && c.bool(5)?,
    };
    let (ceil, extra) = match max {
        true => (c.bool(5)?, triple(c, 4, None)? != [1, 1, 1]),
        false => (c.bool(4)?, c.opt_int(6)?.is_some()),
    };
    if ceil || extra {
        return Err(c.err(
            4,
            "a 3-D pool with ceil_mode, a dilation or a divisor override is not supported",
        ));
    }
    one(c.g.pool3d(x, max, &p)?)
}

/// A 3-D pool's window, per dim `[d, h, w]`: padding on both sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool3d {
    /// Window sizes.
    pub kernel: [usize; 3],
    /// Strides.
    pub stride: [usize; 3],
    /// Padding, before and after.
    pub padding: [usize; 3],
    /// Average pools: padded positions count in the divisor.
    pub count_include_pad: bool,
}

// Shape and dtype inference: the builder's methods of this family, each checking its
// operands and naming the tensor and the numbers on error.

/// TOSA's RESIZE of an NHWC tensor: output `(oy, ox)` reads input coordinates
/// `(oy * scale[1] + offset[0]) / scale[0]` and `(ox * scale[3] + offset[1]) / scale[2]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resize {
    /// Bilinear, else nearest.
    pub bilinear: bool,
    /// `[scale_y_n, scale_y_d, scale_x_n, scale_x_d]`, each positive.
    pub scale: [i32; 4],
    /// `[offset_y, offset_x]`.
    pub offset: [i32; 2],
    /// The output's height and width.
    pub out: [usize; 2],
}

impl GraphBuilder {
    /// TOSA's RESIZE (see [`Resize`]) of `x` `[N, H, W, C]`: f32 or f16, or i32 words of int8
    /// or int16 values (bilinear then sums the four weighted neighbours in int32, which TOSA
    /// rescales afterwards).
    pub fn resize(&mut self, x: TensorId, r: &Resize) -> Result<TensorId> {
        const OP: &str = "resize";
        let xi = self.info(OP, x)?.clone();
        let int = match xi.dtype {
            DType::F32 | DType::F16 => 0,
            DType::I32 => 1,
            d => {
                return Err(crate::Error::DType {
                    op: OP,
                    tensor: xi.name.clone(),
                    actual: d,
                    expected: "f32, f16 or i32",
                });
            }
        };
        let &[n, ih, iw, c] = &xi.shape[..] else {
            return Err(shape_err(OP, format!("{:?} is not [N, H, W, C]", xi.shape)));
        };
        let [oh, ow] = r.out;
        let empty = ih == 0 || iw == 0 || oh == 0 || ow == 0;
        if r.scale.iter().any(|&s| s <= 0) || empty || oh >= 1 << 14 || ow >= 1 << 14 {
            return Err(shape_err(
                OP,
                format!(
                    "scale {:?} to {oh}x{ow} (scales positive, sizes 1 to 16383)",
                    r.scale
                ),
            ));
        }
        let word = |v: usize| u32::try_from(v).map_err(|_| shape_err(OP, format!("{v} elements")));
        let shape = vec![n, oh, ow, c];
        let push = push::ResizePush {
            total: word(
                [n, oh, ow, c]
                    .iter()
                    .try_fold(1usize, |a, &d| a.checked_mul(d))
                    .unwrap_or(usize::MAX),
            )?,
            ih: word(ih)?,
            iw: word(iw)?,
            c: word(c)?,
            oh: word(oh)?,
            ow: word(ow)?,
            scale_y_n: r.scale[0],
            scale_y_d: r.scale[1],
            scale_x_n: r.scale[2],
            scale_x_d: r.scale[3],
            offset_y: r.offset[0],
            offset_x: r.offset[1],
        };
        let out = crate::graph::KernelOut {
            dtype: xi.dtype,
            shape,
            storage: None,
            groups: None,
            precision: None,
            spec: vec![u32::from(r.bilinear), int],
        };
        self.kernel_node_into(OP, Kernel::Resize, &[x], out, &push)
    }
}

impl GraphBuilder {
    fn pool_impl(&mut self, x: TensorId, p: Pool2d, max: bool) -> Result<TensorId> {
        let op = if max { "max_pool2d" } else { "avg_pool2d" };
        let xi = self.float_operand(op, x)?;
        let out = pool_shape(op, &xi, &p)?;
        self.node(Op::Pool { x, max, p }, op, xi.dtype, out)
    }

    /// Average pooling over the last two dims.
    pub fn avg_pool2d(&mut self, x: TensorId, p: Pool2d) -> Result<TensorId> {
        self.pool_impl(x, p, false)
    }

    /// Max pooling over the last two dims.
    pub fn max_pool2d(&mut self, x: TensorId, p: Pool2d) -> Result<TensorId> {
        self.pool_impl(x, p, true)
    }

    /// Max or average pooling of `x` `[n, c, d, h, w]` over its last three dims: a 2-D pool of
    /// every depth slice, then the extreme or the sum of the `kd` slices each output depth
    /// reads (the depth padded with what changes neither), divided by the positions counted.
    pub fn pool3d(&mut self, x: TensorId, max: bool, p: &Pool3d) -> Result<TensorId> {
        const OP: &str = "pool3d";
        let xi = self.float_operand(OP, x)?;
        let Ok([n, c, d, h, w]) = <[usize; 5]>::try_from(xi.shape.as_slice()) else {
            return Err(shape_err(
                OP,
                format!("'{}' {:?} is not [n, c, d, h, w]", xi.name, xi.shape),
            ));
        };
        let ([kd, kh, kw], [sd, sh, sw], [pd, ph, pw]) = (p.kernel, p.stride, p.padding);
        let bad = |why: &str| {
            shape_err(
                OP,
                format!("{p:?} over '{}' {:?}: {why}", xi.name, xi.shape),
            )
        };
        if kd == 0 || sd == 0 || pd > kd / 2 {
            return Err(bad(
                "a depth window of 0, a stride of 0 or padding past half the window",
            ));
        }
        // pd <= kd / 2: 2 pd does not overflow.
        let padded = d.checked_add(2 * pd);
        let Some(od) = padded.and_then(|p| p.checked_sub(kd)).map(|v| v / sd + 1) else {
            return Err(bad("a window deeper than the input"));
        };
        // Each depth slice pooled in 2-D: [n * d, c, h, w].
        let x = self.permute(x, &[0, 2, 1, 3, 4])?;
        let x = self.reshape(x, &[(n * d) as isize, c as isize, h as isize, w as isize])?;
        let plane = Pool2d {
            kernel: [kh, kw],
            stride: [sh, sw],
            padding: [ph, pw],
            ceil_mode: false,
            count_include_pad: p.count_include_pad,
        };
        let y = match max {
            true => self.max_pool2d(x, plane)?,
            false => self.avg_pool2d(x, plane)?,
        };
        let ys = self.info(OP, y)?.shape.clone();
        let (oh, ow) = (ys[2], ys[3]);
        let mut y = self.reshape(
            y,
            &[n as isize, d as isize, c as isize, oh as isize, ow as isize],
        )?;
        if pd > 0 {
            let fill = if max { f32::NEG_INFINITY } else { 0.0 };
            let side = self.full_as(
                &format!("{}_depth_pad", xi.name),
                &[n, pd, c, oh, ow],
                fill,
                xi.dtype,
            )?;
            y = self.cat(&[side, y, side], 1)?;
        }
        let mut acc: Option<TensorId> = None;
        for k in 0..kd {
            let end = (k + (od - 1) * sd + 1) as isize;
            let part = self.slice(y, 1, k as isize, end, sd)?;
            acc = Some(match (acc, max) {
                (None, _) => part,
                (Some(a), true) => self.binary(BinaryOp::Maximum, a, part)?,
                (Some(a), false) => self.add(a, part)?,
            });
        }
        let mut y = acc.ok_or_else(|| bad("an empty window"))?;
        if !max {
            // The 2-D pools divided by the positions of their planes; the depth's count: the
            // whole window, or the input's positions in it.
            let counts: Vec<f32> = (0..od)
                .map(|o| {
                    let start = (o * sd) as isize - pd as isize;
                    let inside = (start..start + kd as isize)
                        .filter(|&z| (0..d as isize).contains(&z))
                        .count();
                    1.0 / if p.count_include_pad {
                        kd
                    } else {
                        inside.max(1)
                    } as f32
                })
                .collect();
            let name = format!("{}_depth_counts", xi.name);
            let scale = self.constant_f32(&name, &[1, od, 1, 1, 1], &counts)?;
            let scale = self.as_dtype(scale, xi.dtype)?;
            y = self.mul(y, scale)?;
        }
        self.permute(y, &[0, 2, 1, 3, 4])
    }
}

/// The output shape of pooling `xi` (`[c, h, w]` or `[n, c, h, w]`) with `p`.
pub(crate) fn pool_shape(op: &'static str, xi: &TensorInfo, p: &Pool2d) -> Result<Vec<usize>> {
    let r = xi.shape.len();
    if r < 3 {
        return Err(shape_err(
            op,
            format!(
                "'{}' {:?} needs rank 3 or 4 ([c, h, w] or [n, c, h, w])",
                xi.name, xi.shape
            ),
        ));
    }
    let (h, w) = (xi.shape[r - 2], xi.shape[r - 1]);
    let mut out = xi.shape.clone();
    for i in 0..2 {
        let (k, s, pad) = (p.kernel[i], p.stride[i], p.padding[i]);
        if k == 0 || s == 0 || pad * 2 > k {
            return Err(shape_err(
                op,
                format!(
                    "kernel {:?}, stride {:?}, padding {:?}: need kernel and stride >= 1 \
                     and padding at most half the kernel",
                    p.kernel, p.stride, p.padding
                ),
            ));
        }
        let size = [h, w][i];
        let o = pool_out(size, k, s, pad, p.ceil_mode).ok_or_else(|| {
            shape_err(
                op,
                format!(
                    "'{}' {:?}: kernel {k} with padding {pad} does not fit a dim of {size}",
                    xi.name, xi.shape
                ),
            )
        })?;
        out[r - 2 + i] = o;
    }
    Ok(out)
}

// Recording: what this family's nodes become, dispatches of the op library.
impl Lowerer<'_> {
    /// Records a node of this family.
    pub(crate) fn record_pool(&mut self, op: &Op, t: &Target) -> Result<()> {
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
                        &push::Pool2x2Push {
                            total: total as u32,
                            w4: (w / 4) as u32,
                            oh: oh as u32,
                        },
                        [g, 1, 1],
                    );
                    return Ok(());
                }
                let g = self.linear_groups(n as u64);
                self.push(
                    Kernel::Pool,
                    vec![u32::from(*max)],
                    vec![(xi.storage, false), (o, true)],
                    &push::PoolPush {
                        total: n as u32,
                        h: h as u32,
                        w: w as u32,
                        oh: oh as u32,
                        ow: ow as u32,
                        kh: p.kernel[0] as u32,
                        kw: p.kernel[1] as u32,
                        sh: p.stride[0] as u32,
                        sw: p.stride[1] as u32,
                        ph: p.padding[0] as u32,
                        pw: p.padding[1] as u32,
                        include_pad: u32::from(p.count_include_pad),
                    },
                    [g, 1, 1],
                );
            }
            _ => return Err(self.not_in_family()),
        }
        Ok(())
    }
}
