//! fp16 GEMMs and convolutions on cooperative matrices (`gemm_coop.comp`, `gemm_coop2.comp`),
//! on devices where [`crate::coop::usable`] allows them: matmul, bmm and linear directly;
//! conv2d (one group) as a GEMM per image over the input itself (1x1, stride 1, no padding),
//! as an implicit GEMM over packed operands (`conv_pack.comp`, then `conv_coop2.comp` or
//! `gemm_coop.comp`'s CONV mode; stride 1, large enough to fill the device) or over its patch
//! matrix (`im2col.comp` into a temporary).

use super::epilogue::Taken;
use super::*;
use crate::coop::Checked;
use crate::graph::Conv2d;

/// One cooperative GEMM: `C[z] (m x n) = A[z] (m x k) * B[z] (k x n)` for `z < batch`, A
/// row-major, B row-major or (`b_t`) the transpose of a row-major `[n][k]`, strides in
/// elements.
struct CoopGemm {
    m: usize,
    n: usize,
    k: usize,
    batch: usize,
    sa_b: usize,
    sa_m: usize,
    sb_b: usize,
    /// Row stride of B as stored (`[k][n]`, or `[n][k]` with `b_t`).
    sb_row: usize,
    b_t: bool,
    sc_b: usize,
    sc_m: usize,
    has_bias: bool,
    /// The bias is per row of C (an output channel) instead of per column.
    bias_row: bool,
}

/// A conv2d of stride 1 and one group, as the implicit GEMMs see it.
struct ImplicitConv {
    nb: usize,
    cin: usize,
    h: usize,
    w: usize,
    cout: usize,
    kh: usize,
    kw: usize,
    oh: usize,
    ow: usize,
    pad: [usize; 2],
    dil: [usize; 2],
    has_bias: bool,
    act: Option<(f32, f32)>,
}

/// The packed operands of an implicit GEMM (`conv_pack.comp`): images of `hp x wp` pixels of
/// `cp` channels (a multiple of 8), and weights `[tap][cp][coutp]` or, `co_major`,
/// `[c_out][tap][cp]` (then `coutp` is `c_out`).
struct Packing {
    cp: usize,
    hp: usize,
    wp: usize,
    coutp: usize,
    co_major: bool,
}

/// The largest temporary patch matrix a convolution may use, in elements.
const MAX_PATCH_ELEMENTS: usize = 1 << 30;

impl Lowerer<'_> {
    /// Records that the plan relies on what `c` checks, and returns its kernel.
    fn used(&mut self, c: Checked) -> Kernel {
        self.cooperative.insert(c);
        c.kernel()
    }

    /// Lowers a GEMM (the `params` and `bindings` of [`Lowerer::gemm`]'s MODE 0) to a
    /// cooperative kernel, or returns `false` when none applies: no cooperative configuration,
    /// not fp16, A not contiguous along K, or B contiguous along neither dimension.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn coop_gemm(
        &mut self,
        m: usize,
        n: usize,
        k: usize,
        batch: usize,
        params: &[usize; 26],
        bindings: &[(usize, bool)],
        out: TensorId,
        act: Option<(f32, f32)>,
    ) -> Result<bool> {
        if self.coop.is_none() || self.t(out).dtype != DType::F16 {
            return Ok(false);
        }
        let [sa_b, sa_m, sa_k, sb_b, sb_k, sb_n, sc_b, sc_m, has_bias] =
            super::gemm::gemm_layout(params);
        // B row-major (N contiguous) or the transpose of a row-major [N][K] (K contiguous).
        let (b_t, sb_row) = match (sb_n, sb_k) {
            (1, s) => (false, s),
            (s, 1) => (true, s),
            _ => return Ok(false),
        };
        if sa_k != 1 || k == 0 {
            return Ok(false);
        }
        let g = CoopGemm {
            m,
            n,
            k,
            batch,
            sa_b,
            sa_m,
            sb_b,
            sb_row,
            b_t,
            sc_b,
            sc_m,
            has_bias: has_bias == 1,
            bias_row: false,
        };
        self.push_coop(&g, bindings.to_vec(), act, out)?;
        Ok(true)
    }

    /// Lowers a one-group fp16 conv2d to cooperative GEMMs, or returns `false` when it does
    /// not apply. `bindings` are the GEMM's: weights, input, bias, output.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn coop_conv(
        &mut self,
        (x, in_last): (&TensorInfo, bool),
        w_shape: &[usize],
        p: &Conv2d,
        out_hw: (usize, usize),
        bindings: &[(usize, bool)],
        has_bias: bool,
        out: TensorId,
        act: Option<(f32, f32)>,
    ) -> Result<bool> {
        if self.coop.is_none() || self.t(out).dtype != DType::F16 || p.groups != 1 {
            return Ok(false);
        }
        let (nb, cin, h, wd) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
        let (cout, kh, kw) = (w_shape[0], w_shape[2], w_shape[3]);
        let (oh, ow) = out_hw;
        let ohw = oh * ow;
        let k = cin * kh * kw;
        let pointwise = kh == 1 && kw == 1 && p.stride == [1, 1] && p.padding == [0, 0];
        if !pointwise && self.implicit_conv(x, w_shape, p, out_hw, bindings, has_bias, act, out)? {
            return Ok(true);
        }
        let mut b = bindings[1];
        if !pointwise {
            let total = nb * k * ohw;
            // The patch matrix must fit one storage buffer binding; else the implicit GEMM
            // (no temporary) runs.
            let range = u64::from(self.limits.max_storage_buffer_range);
            if total > MAX_PATCH_ELEMENTS || 2 * total as u64 > range {
                return Ok(false);
            }
            let patches = self.temp(out, total.div_ceil(2));
            let w = |v: usize| v as u32;
            let push = push::Im2colPush {
                total: w(total),
                c_in: w(cin),
                h: w(h),
                w: w(wd),
                oh: w(oh),
                ow: w(ow),
                kh: w(kh),
                kw: w(kw),
                sh: w(p.stride[0]),
                sw: w(p.stride[1]),
                ph: w(p.padding[0]),
                pw: w(p.padding[1]),
                dh: w(p.dilation[0]),
                dw: w(p.dilation[1]),
            };
            // Eight pixels per thread where the rows allow it (see `im2col.comp`).
            let threads = if ohw % 8 == 0 { total / 8 } else { total };
            let g = self.linear_groups(threads as u64);
            self.push(
                Kernel::Im2col,
                vec![],
                vec![b, (patches, true)],
                &push,
                [g, 1, 1],
            );
            b = (patches, false);
        }
        let g = CoopGemm {
            m: cout,
            n: ohw,
            k,
            batch: nb,
            sa_b: 0,
            sa_m: k,
            sb_b: k * ohw,
            // A channels-last input (1x1 only) is B transposed, `[pixel][channel]`.
            sb_row: if in_last { k } else { ohw },
            b_t: in_last,
            sc_b: cout * ohw,
            sc_m: ohw,
            has_bias,
            bias_row: true,
        };
        self.push_coop(&g, vec![bindings[0], b, bindings[2], bindings[3]], act, out)?;
        Ok(true)
    }

    /// Lowers a conv2d of stride 1 to an implicit GEMM over packed operands
    /// (`conv_pack.comp`, then `conv_coop2.comp` or `gemm_coop.comp`'s CONV mode) where the
    /// device runs one and the convolution fills the device (a check's graphs take it at any
    /// size); else returns `false` (a patch matrix and a GEMM, which can split small ones
    /// along K).
    #[allow(clippy::too_many_arguments)]
    fn implicit_conv(
        &mut self,
        x: &TensorInfo,
        w_shape: &[usize],
        p: &Conv2d,
        (oh, ow): (usize, usize),
        bindings: &[(usize, bool)],
        has_bias: bool,
        act: Option<(f32, f32)>,
        out: TensorId,
    ) -> Result<bool> {
        if p.stride != [1, 1] || crate::coop::implicit_conv_off() {
            return Ok(false);
        }
        let c = ImplicitConv {
            nb: x.shape[0],
            cin: x.shape[1],
            h: x.shape[2],
            w: x.shape[3],
            cout: w_shape[0],
            kh: w_shape[2],
            kw: w_shape[3],
            oh,
            ow,
            pad: p.padding,
            dil: p.dilation,
            has_bias,
            act,
        };
        match self.coop {
            Some(CoopConfig::Nv2 { conv: Some(t), .. }) => self.conv_nv2(&c, t, bindings, out),
            Some(CoopConfig::Khr {
                tm,
                tn,
                tk,
                threads,
            }) => self.conv_khr(&c, [threads, tm, tn, tk], bindings, out),
            _ => Ok(false),
        }
    }

    /// `conv_coop2.comp`: TH x TW pixel patches by `t.bn` output channels; the input padded so
    /// that every patch's window lies inside, the weights as `[tap][cp][coutp]`.
    fn conv_nv2(
        &mut self,
        c: &ImplicitConv,
        t: crate::coop::Nv2Tile,
        bindings: &[(usize, bool)],
        out: TensorId,
    ) -> Result<bool> {
        let (bm, bn, bk) = (t.bm as usize, t.bn as usize, t.bk as usize);
        let tw = patch_width(c.oh, c.ow, bm);
        let th = bm / tw;
        let (tiles_x, tiles_y) = (c.ow.div_ceil(tw), c.oh.div_ceil(th));
        if !fills_device((tiles_x * tiles_y * c.cout.div_ceil(bn) * c.nb) as u64) {
            return Ok(false);
        }
        let pk = Packing {
            cp: c.cin.next_multiple_of(bk),
            hp: tiles_y * th + (c.kh - 1) * c.dil[0],
            wp: tiles_x * tw + (c.kw - 1) * c.dil[1],
            coutp: c.cout.next_multiple_of(bn),
            co_major: false,
        };
        let groups = self.check_groups([
            (tiles_x * tiles_y) as u64,
            c.cout.div_ceil(bn) as u64,
            c.nb as u64,
        ])?;
        let Some((px, pw)) = self.pack_conv(c, &pk, bindings, out) else {
            return Ok(false);
        };
        // The whole epilogue (spec 6: the activation, 7: the residual, binding 4).
        let e = self.take_epilogue().unwrap_or_else(|| Taken::clamp(c.act));
        let w = |v: usize| v as u32;
        let push = push::ConvCoop2Push {
            images: w(c.nb),
            cp: w(pk.cp),
            hp: w(pk.hp),
            wp: w(pk.wp),
            coutp: w(pk.coutp),
            c_out: w(c.cout),
            oh: w(c.oh),
            ow: w(c.ow),
            kh: w(c.kh),
            kw: w(c.kw),
            dh: w(c.dil[0]),
            dw: w(c.dil[1]),
            has_bias: u32::from(c.has_bias),
            act_lo: e.lo,
            act_hi: e.hi,
            tiles_x: w(tiles_x),
        };
        let spec = vec![
            t.threads, t.bm, t.bn, tw as u32, th as u32, t.bk, e.act, e.resid,
        ];
        let conv_bindings = vec![
            (px, false),
            (pw, false),
            bindings[2],
            bindings[3],
            (e.residual.unwrap_or(px), false),
        ];
        let kernel = self.used(Checked::Conv(t));
        self.push(kernel, spec, conv_bindings, &push, groups);
        Ok(true)
    }

    /// `gemm_coop.comp`'s CONV mode: `C[co][pixel]` per image, its 128 x 128 blocks over the
    /// output channels and the output pixels in order; the input padded by the kernel's reach,
    /// the weights as `[c_out][tap][cp]`. `khr` is the configuration's threads and fragment
    /// shape.
    fn conv_khr(
        &mut self,
        c: &ImplicitConv,
        khr: [u32; 4],
        bindings: &[(usize, bool)],
        out: TensorId,
    ) -> Result<bool> {
        let pixels = c.oh * c.ow;
        if !fills_device((pixels.div_ceil(128) * c.cout.div_ceil(128) * c.nb) as u64) {
            return Ok(false);
        }
        let pk = Packing {
            cp: c.cin.next_multiple_of(8),
            hp: c.oh + (c.kh - 1) * c.dil[0],
            wp: c.ow + (c.kw - 1) * c.dil[1],
            coutp: c.cout,
            co_major: true,
        };
        let groups = self.check_groups([
            pixels.div_ceil(128) as u64,
            c.cout.div_ceil(128) as u64,
            c.nb as u64,
        ])?;
        let Some((px, pw)) = self.pack_conv(c, &pk, bindings, out) else {
            return Ok(false);
        };
        let (act_lo, act_hi) = c.act.unwrap_or((0.0, 0.0));
        let k = c.kh * c.kw * pk.cp;
        let w = |v: usize| v as u32;
        let push = push::GemmCoopPush {
            m: w(c.cout),
            n: w(pixels),
            k: w(k),
            sa_b: 0,
            sa_m: w(k),
            sb_b: w(pk.hp * pk.wp * pk.cp),
            sb_k: w(pk.cp),
            sc_b: w(c.cout * pixels),
            sc_m: w(pixels),
            has_bias: u32::from(c.has_bias),
            act_lo,
            act_hi,
            cp: w(pk.cp),
            wp: w(pk.wp),
            ow: w(c.ow),
            kw: w(c.kw),
            dh: w(c.dil[0]),
            dw: w(c.dil[1]),
        };
        let [threads, tm, tn, tk] = khr;
        // Spec: threads, fragment, B transposed, 16-byte loads, clamp, bias per row, CONV.
        let act = u32::from(c.act.is_some());
        let spec = vec![threads, tm, tn, tk, 1, 1, act, 1, 1, 128, 128, 0];
        let conv_bindings = vec![
            (pw, false),
            (px, false),
            bindings[2],
            bindings[3],
            (pw, false),
        ];
        let kernel = self.used(Checked::Subgroup);
        self.push(kernel, spec, conv_bindings, &push, groups);
        Ok(true)
    }

    /// `conv_pack.comp` into two temporaries (the packed input, the packed weights), or `None`
    /// when either would not fit one binding. `bindings` are the GEMM's: weights, input, bias,
    /// output.
    fn pack_conv(
        &mut self,
        c: &ImplicitConv,
        pk: &Packing,
        bindings: &[(usize, bool)],
        out: TensorId,
    ) -> Option<(usize, usize)> {
        let taps = c.kh * c.kw;
        let packed_x = c.nb * pk.hp * pk.wp * pk.cp;
        let packed_w = taps * pk.cp * pk.coutp;
        let range = u64::from(self.limits.max_storage_buffer_range);
        if 2 * packed_x.max(packed_w) as u64 > range || packed_x > MAX_PATCH_ELEMENTS {
            return None;
        }
        let (px, pw) = (self.temp(out, packed_x / 2), self.temp(out, packed_w / 2));
        let w = |v: usize| v as u32;
        let push = push::ConvPackPush {
            c_in: w(c.cin),
            h: w(c.h),
            w: w(c.w),
            cp: w(pk.cp),
            hp: w(pk.hp),
            wp: w(pk.wp),
            ph: w(c.pad[0]),
            pw: w(c.pad[1]),
            c_out: w(c.cout),
            coutp: w(pk.coutp),
            taps: w(taps),
            groups_p: w(packed_x / 8),
            groups_w: w(packed_w / 8),
            w_layout: u32::from(pk.co_major),
        };
        let g = self.linear_groups(((packed_x + packed_w) / 8) as u64);
        self.push(
            Kernel::ConvPack,
            vec![],
            vec![bindings[1], bindings[0], (px, true), (pw, true)],
            &push,
            [g, 1, 1],
        );
        Some((px, pw))
    }

    /// The dispatch of one cooperative GEMM on the device's configuration; `bindings` are A,
    /// B, the bias and C. On the workgroup-scope kernel a product with too few blocks to fill
    /// the device and a deep K is split along K (fp32 partial sums, then a summing pass).
    fn push_coop(
        &mut self,
        g: &CoopGemm,
        bindings: Vec<(usize, bool)>,
        act: Option<(f32, f32)>,
        out: TensorId,
    ) -> Result<()> {
        let Some(c) = self.coop else {
            return Err(Error::Graph(
                "internal: cooperative GEMM without a device configuration".into(),
            ));
        };
        // 16-byte loads where every row (and, with a batch, every matrix) starts at a multiple
        // of 8 halves.
        let batch_strides = if g.batch > 1 {
            [g.sa_b, g.sb_b]
        } else {
            [0, 0]
        };
        let vec = [g.sa_m, g.sb_row, batch_strides[0], batch_strides[1]]
            .iter()
            .all(|s| s % 8 == 0);
        let (b_t, bias_row) = (u32::from(g.b_t), u32::from(g.bias_row));
        let (kernel, mut spec, bm, bn, bk) = match c {
            CoopConfig::Khr {
                tm,
                tn,
                tk,
                threads,
            } => {
                let (bm, bn) = khr_block(g.m, g.n, g.batch, [threads, tm, tn]);
                (
                    self.used(Checked::Subgroup),
                    // CONV 0, then the block.
                    vec![
                        threads,
                        tm,
                        tn,
                        tk,
                        b_t,
                        u32::from(vec),
                        0,
                        bias_row,
                        0,
                        bm,
                        bn,
                    ],
                    u64::from(bm),
                    u64::from(bn),
                    None,
                )
            }
            CoopConfig::Nv2 { .. } => {
                let Some(t) = c.nv2_tile(g.m, g.n, g.k, g.batch) else {
                    return Err(Error::Graph(
                        "internal: workgroup-scope GEMM without a tile".into(),
                    ));
                };
                (
                    self.used(Checked::Tile(t)),
                    vec![t.threads, t.bm, t.bn, t.bk, b_t, 0, bias_row, t.unroll],
                    u64::from(t.bm),
                    u64::from(t.bn),
                    Some(u64::from(t.bk)),
                )
            }
        };
        let blocks = (g.n as u64).div_ceil(bn) * (g.m as u64).div_ceil(bm) * g.batch as u64;
        // A folded layer norm needs whole rows of A: never split.
        let norm = match kernel {
            Kernel::GemmCoop2 => self.row_norm.take(),
            _ => None,
        };
        let (splits, k_split) = match bk {
            Some(bk) if norm.is_none() => coop_splits(blocks, g.k as u64, bk),
            _ => (1, g.k as u64),
        };
        let groups = self.check_groups([
            (g.n as u64).div_ceil(bn),
            (g.m as u64).div_ceil(bm),
            g.batch as u64 * splits,
        ])?;
        let out_numel = self.t(out).numel();
        let mut bindings = bindings;
        let final_out = bindings[3];
        let stride = super::gemm::split_stride(out_numel);
        let partial = (splits > 1).then(|| self.temp(out, stride * splits as usize));
        if let Some(p) = partial {
            bindings[3] = (p, true);
        }
        // Where the result is final, the kernel applies the whole epilogue (the activation:
        // spec 5 of `gemm_coop2.comp`, 6 of `gemm_coop.comp`; the residual: spec 9 or 11,
        // binding 4). With split-K the summing pass applies it.
        let whole = partial.is_none();
        // With a folded norm, binding 4 holds its column sums: no residual.
        let e = match (whole, norm) {
            (true, None) => self.take_epilogue(),
            (true, Some(_)) => self.take_activation(),
            (false, _) => None,
        }
        .unwrap_or_else(|| Taken::clamp(act));
        if kernel == Kernel::GemmCoop {
            spec.push(e.resid); // RESID
            bindings.push((e.residual.unwrap_or(bindings[0].0), false));
        }
        if kernel == Kernel::GemmCoop2 {
            spec.push(u32::from(partial.is_some())); // PARTIAL
            spec.push(e.resid); // RESID
            let fourth = match norm {
                Some((colsum, _)) => colsum,
                None => e.residual.unwrap_or(bindings[0].0),
            };
            bindings.push((fourth, false));
            if let Some((_, eps)) = norm {
                spec.extend([1, eps.to_bits()]); // NORM, EPS
            }
        }
        let act_slot = if kernel == Kernel::GemmCoop { 6 } else { 5 };
        spec[act_slot] = if splits == 1 { e.act } else { 0 };
        let (act_lo, act_hi) = (e.lo, e.hi);
        let w = |v: usize| v as u32;
        // The two kernels share the first twelve fields; `gemm_coop.comp`'s CONV fields are
        // unused outside its CONV mode, `gemm_coop2.comp` takes the split along K.
        match kernel {
            Kernel::GemmCoop2 => self.push(
                kernel,
                spec,
                bindings,
                &push::GemmCoop2Push {
                    m: w(g.m),
                    n: w(g.n),
                    k: w(g.k),
                    sa_b: w(g.sa_b),
                    sa_m: w(g.sa_m),
                    sb_b: w(g.sb_b),
                    sb_k: w(g.sb_row),
                    sc_b: w(g.sc_b),
                    sc_m: w(g.sc_m),
                    has_bias: u32::from(g.has_bias),
                    act_lo,
                    act_hi,
                    splits: splits as u32,
                    k_split: k_split as u32,
                    c_split: stride as u32,
                },
                groups,
            ),
            _ => self.push(
                kernel,
                spec,
                bindings,
                &push::GemmCoopPush {
                    m: w(g.m),
                    n: w(g.n),
                    k: w(g.k),
                    sa_b: w(g.sa_b),
                    sa_m: w(g.sa_m),
                    sb_b: w(g.sb_b),
                    sb_k: w(g.sb_row),
                    sc_b: w(g.sc_b),
                    sc_m: w(g.sc_m),
                    has_bias: u32::from(g.has_bias),
                    act_lo,
                    act_hi,
                    ..push::GemmCoopPush::default()
                },
                groups,
            ),
        }
        if let Some(p) = partial {
            self.sum_partials(p, splits as u32, out_numel, final_out)?;
        }
        Ok(())
    }
}

/// `gemm_coop.comp`'s blocks, largest first: 128 x 128, then 64 x 64 and 32 x 64 for products
/// of few rows.
const KHR_BLOCKS: [(u32, u32); 3] = [(128, 128), (64, 64), (32, 64)];

/// Environment variable: `0` keeps `gemm_coop.comp` on 128 x 128 blocks.
pub const ENV_COOP_SMALL_BLOCKS: &str = "VKDELEGATE_COOP_SMALL_BLOCKS";

/// The block of `gemm_coop.comp` for an `m x n` product of `batch` matrices on `threads`
/// invocations and fragments of `tm x tn`: of the [`KHR_BLOCKS`] that these divide (whole
/// 16-byte loads per invocation, whole fragments per subgroup), the largest that gives it 256
/// work groups and pads its rows by at most a quarter, else the smallest (`coop::block_fills`,
/// the workgroup-scope tiles' rule). Under a check, the largest the product fills, so that the
/// check's problems cover every block.
fn khr_block(m: usize, n: usize, batch: usize, [threads, tm, tn]: [u32; 3]) -> (u32, u32) {
    let divides = |&(bm, bn): &(u32, u32)| {
        let loads = |rows: u32| (rows * 32 / 8) % threads == 0;
        loads(bm) && loads(bn) && (bm / 2) % tm == 0 && (bn / 2) % tn == 0
    };
    let blocks: Vec<(u32, u32)> = KHR_BLOCKS.into_iter().filter(divides).collect();
    let off = std::env::var(ENV_COOP_SMALL_BLOCKS).is_ok_and(|v| v.trim() == "0");
    let (Some(&smallest), false) = (blocks.last(), off) else {
        return KHR_BLOCKS[0];
    };
    let pick = |&(bm, bn): &(u32, u32)| match crate::coop::checking() {
        true => m >= bm as usize && n >= bn as usize,
        false => crate::coop::block_fills([m, n, batch], (bm, bn), crate::coop::NV2_MIN_GROUPS),
    };
    blocks.into_iter().find(pick).unwrap_or(smallest)
}

/// Whether an implicit-GEMM conv2d of `blocks` work groups fills a large GPU (a check's graphs
/// take it at any size); smaller ones go through a patch matrix, whose GEMM can split K.
fn fills_device(blocks: u64) -> bool {
    blocks >= COOP_SPLIT_BELOW_BLOCKS || crate::coop::checking()
}

/// The width of the implicit GEMM's pixel patches of `bn` pixels on an `oh x ow` output: the
/// one of 8, 16, 32 and 64 pixels that covers it with the fewest pixels, the widest of equals.
fn patch_width(oh: usize, ow: usize, bn: usize) -> usize {
    let covered = |tw: usize| ow.div_ceil(tw) * tw * oh.div_ceil(bn / tw) * (bn / tw);
    [64, 32, 16, 8]
        .into_iter()
        .filter(|&tw| tw <= bn && bn % tw == 0)
        .min_by_key(|&tw| covered(tw))
        .unwrap_or(bn)
}

/// Products with fewer blocks than this and a K of at least [`COOP_SPLIT_MIN_K`] are split
/// along K ...
const COOP_SPLIT_BELOW_BLOCKS: u64 = 132;
/// ... into about this many work groups, ...
const COOP_SPLIT_TARGET_BLOCKS: u64 = 264;
/// ... each split at least four K steps deep.
const COOP_SPLIT_MIN_K: u64 = 256;

/// Environment variable for tuning the workgroup-scope products' split along K:
/// `BELOW,TARGET` (products of fewer blocks than `BELOW` are split into about `TARGET` work
/// groups; the default `132,264`).
pub const ENV_COOP_SPLIT: &str = "VKDELEGATE_COOP_SPLIT";

/// [`ENV_COOP_SPLIT`], else the default.
fn coop_split_blocks() -> (u64, u64) {
    let default = (COOP_SPLIT_BELOW_BLOCKS, COOP_SPLIT_TARGET_BLOCKS);
    let Ok(v) = std::env::var(ENV_COOP_SPLIT) else {
        return default;
    };
    let p: Option<Vec<u64>> = crate::options::tuning_numbers(&v);
    match p.as_deref() {
        Some(&[below, target]) if target > 0 => (below, target),
        _ => {
            log::warn!("{ENV_COOP_SPLIT}={v}: expected `BELOW,TARGET`; using the default");
            default
        }
    }
}

/// Splits and split depth (a multiple of the K step `bk`) for a workgroup-scope product of
/// `blocks` blocks and depth `k`.
fn coop_splits(blocks: u64, k: u64, bk: u64) -> (u64, u64) {
    let (below, target) = coop_split_blocks();
    if blocks >= below || k < COOP_SPLIT_MIN_K {
        return (1, k);
    }
    let splits = target.div_ceil(blocks).min(k / (4 * bk)).clamp(1, 16);
    let k_split = k.div_ceil(splits).div_ceil(bk) * bk;
    (k.div_ceil(k_split), k_split)
}

#[cfg(test)]
mod tests {
    use super::{coop_splits, khr_block, patch_width};

    #[test]
    fn subgroup_scope_products_of_few_rows_take_small_blocks() {
        let nv = [128, 16, 16];
        assert_eq!(khr_block(4096, 4096, 1, nv), (128, 128));
        // 8 x 32 blocks of 64 x 64.
        assert_eq!(khr_block(512, 2048, 1, nv), (64, 64));
        // ViT-B/16's 197 rows: 7 x 36 blocks of 32 x 64.
        assert_eq!(khr_block(197, 2304, 1, nv), (32, 64));
        assert_eq!(khr_block(8, 8, 1, nv), (32, 64));
        // 256 invocations (subgroups of 64): 32 rows are 128 loads of 16 bytes, too few.
        assert_eq!(khr_block(197, 2304, 1, [256, 16, 16]), (64, 64));
        // Fragments of 32 x 32: a 32-row block's subgroups would hold none.
        assert_eq!(khr_block(197, 2304, 1, [128, 32, 32]), (64, 64));
        assert_eq!(khr_block(197, 2304, 1, [128, 64, 64]), (128, 128));
    }

    #[test]
    fn pixel_patches_are_as_wide_as_covers_the_output_with_least_waste() {
        assert_eq!(patch_width(224, 224, 256), 32);
        assert_eq!(patch_width(56, 56, 256), 64);
        assert_eq!(patch_width(7, 7, 256), 32);
        assert_eq!(patch_width(100, 20, 128), 8);
        assert_eq!(patch_width(4, 4, 16), 8);
    }

    #[test]
    fn only_small_deep_products_are_split_into_whole_k_steps() {
        assert_eq!(coop_splits(512, 4096, 64), (1, 4096));
        assert_eq!(coop_splits(3, 160, 32), (1, 160));
        // 3 blocks, K = 960 in steps of 32: 7 splits asked, 6 of 160 deep.
        assert_eq!(coop_splits(3, 960, 32), (6, 160));
        assert_eq!(coop_splits(1, 4096, 32), (16, 256));
        let (s, d) = coop_splits(20, 1000, 32);
        assert!(s > 1 && d % 32 == 0 && (s - 1) * d < 1000 && s * d >= 1000);
    }
}
