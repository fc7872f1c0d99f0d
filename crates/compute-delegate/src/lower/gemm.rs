//! GEMM: linear, matmul and bmm, with split-K.

use super::*;
use crate::chains::{MAX_INPUTS as MAX_CHAIN_INPUTS, PARTIALS_BINDING, SPEC_WORDS};
use crate::lower::epilogue::Taken;

/// A split-K product's partial sums, left for the elementwise chain that reads its result.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeferredSum {
    partial: usize,
    splits: u32,
    out_numel: usize,
    final_out: (usize, bool),
}

/// Environment variable: `0` gives every split-K product its own summing pass, even where
/// the elementwise chain reading its result could sum the partials.
pub const ENV_CHAIN_SPLIT_SUMS: &str = "VKDELEGATE_CHAIN_SPLIT_SUMS";

fn chain_split_sums() -> bool {
    std::env::var(ENV_CHAIN_SPLIT_SUMS).map_or(true, |v| v.trim() != "0")
}

/// The distance between two splits' partial sums of an output of `out_numel` elements: a
/// multiple of 4, so that the summing pass reads them as vec4s.
pub(super) fn split_stride(out_numel: usize) -> usize {
    out_numel.next_multiple_of(4)
}

/// The strides and bias flag in a GEMM's push-constant `params` (`gemm.comp`'s order, after
/// m, n, k): `[sa_b, sa_m, sa_k, sb_b, sb_k, sb_n, sc_b, sc_m, has_bias]`.
pub(super) fn gemm_layout(params: &[usize; 26]) -> [usize; 9] {
    [3, 4, 5, 6, 7, 8, 9, 10, 11].map(|i| params[i])
}

/// `gemm.comp`'s push constants: the geometry `params` (its first 26 fields, in its order),
/// the split along K (`[splits, k_split, c_split]`) and the fused clamp.
pub(crate) fn gemm_push(
    params: &[usize; 26],
    [splits, k_split, c_split]: [u64; 3],
    act: Option<(f32, f32)>,
) -> push::GemmPush {
    let p = |i: usize| params[i] as u32;
    let (act_lo, act_hi) = act.unwrap_or((0.0, 0.0));
    push::GemmPush {
        m: p(0),
        n: p(1),
        k: p(2),
        sa_b: p(3),
        sa_m: p(4),
        sa_k: p(5),
        sb_b: p(6),
        sb_k: p(7),
        sb_n: p(8),
        sc_b: p(9),
        sc_m: p(10),
        has_bias: p(11),
        cin_g: p(12),
        h: p(13),
        w: p(14),
        oh: p(15),
        ow: p(16),
        kh: p(17),
        kw: p(18),
        sh: p(19),
        sw: p(20),
        ph: p(21),
        pw: p(22),
        dh: p(23),
        dw: p(24),
        cout: p(25),
        splits: splits as u32,
        k_split: k_split as u32,
        c_split: c_split as u32,
        act_lo,
        act_hi,
    }
}

/// Environment variable for tuning the plain GEMM's register tiles: `rows` (8 x 8 per thread,
/// each warp spanning all columns of two row quads), `warp` (8 x 8 per thread in warp tiles of
/// 32 x 64) or `wide` (8 x 16 per thread: 128 x 128 tiles on 128 threads); see `gemm.comp`.
pub const ENV_GEMM_LAYOUT: &str = "VKDELEGATE_GEMM_LAYOUT";

/// How the plain GEMM lays its 128 x 128 tiles over threads ([`ENV_GEMM_LAYOUT`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GemmLayout {
    Rows,
    Warp,
    Wide,
}

/// What [`ENV_GEMM_LAYOUT`] names, else `None` (the default: the wide variant for whole
/// products of 128 x 128 tiles, `rows` elsewhere; anything unknown is ignored with a warning).
fn tile_layout() -> Option<GemmLayout> {
    match std::env::var(ENV_GEMM_LAYOUT).as_deref() {
        Err(_) => None,
        Ok("rows") => Some(GemmLayout::Rows),
        Ok("warp") => Some(GemmLayout::Warp),
        Ok("wide") => Some(GemmLayout::Wide),
        Ok(v) => {
            log::warn!(
                "{ENV_GEMM_LAYOUT}={v}: expected `rows`, `warp` or `wide`; using the default"
            );
            None
        }
    }
}

/// Environment variable for tuning when the plain GEMM splits along K:
/// `MIN_K,PER_SPLIT[,LARGE]` (the depth a product needs before it is split, the least depth of
/// one split, and the output size, in elements, from which a split is at least twice that
/// deep; 0: never). The default `64,32,262144`:
/// - on an NVIDIA H200 `64,32` took the zoo's CNNs (squeezenet, googlenet, densenet, resnet50,
///   MobileNets) 10-35% below `256,128` host to host, and `32,16` was slower on resnet50,
///   resnext and efficientnet_v2;
/// - each split writes its partial sums of the whole output and the summing pass reads them
///   back: on an H100, Swin-T (first stage: 3136 x 96 outputs, sums 96 and 384 deep, split 3
///   and 12 ways 32 deep) ran in 2.00 ms with splits at least 64 deep against 2.26, and ViT-B
///   (outputs of 197 x 768 to 3072) as fast either way, while regnet, mobilenet_v3 and
///   shufflenet, whose split products have small outputs, ran 5-14% slower with them.
pub const ENV_SPLIT_K: &str = "VKDELEGATE_SPLIT_K";

/// How the plain GEMM splits along K ([`ENV_SPLIT_K`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SplitK {
    min_k: u64,
    per_split: u64,
    /// Outputs of at least this many elements split at least `2 * per_split` deep
    /// (`u64::MAX`: none).
    large: u64,
}

impl SplitK {
    /// The least depth of one split of a product with `out_numel` outputs.
    fn depth(self, out_numel: u64) -> u64 {
        if out_numel >= self.large {
            2 * self.per_split
        } else {
            self.per_split
        }
    }
}

/// The default [`SplitK`].
const SPLIT_K: SplitK = SplitK {
    min_k: 64,
    per_split: 32,
    large: 1 << 18,
};

/// [`ENV_SPLIT_K`], else the default (anything malformed is ignored with a warning).
fn split_k() -> SplitK {
    let Ok(v) = std::env::var(ENV_SPLIT_K) else {
        return SPLIT_K;
    };
    parse_split_k(&v).unwrap_or_else(|| {
        log::warn!(
            "{ENV_SPLIT_K}={v}: expected `MIN_K,PER_SPLIT[,LARGE]` (depths 8 or more); using \
             the default"
        );
        SPLIT_K
    })
}

/// `MIN_K,PER_SPLIT[,LARGE]`, depths 8 or more, `LARGE` 0 meaning never.
fn parse_split_k(v: &str) -> Option<SplitK> {
    let parsed: Vec<u64> = crate::options::tuning_numbers(v)?;
    let (min_k, per_split, large) = match parsed[..] {
        [m, p] => (m, p, SPLIT_K.large),
        [m, p, 0] => (m, p, u64::MAX),
        [m, p, l] => (m, p, l),
        _ => return None,
    };
    (min_k >= 8 && per_split >= 8).then_some(SplitK {
        min_k,
        per_split,
        large,
    })
}

/// Products with fewer 128 x 128 tiles than this take 64 x 64 tiles: first (the default), or
/// where they are not split at least three ways along K ([`ENV_GEMM_TILES`] `128`).
const SMALL_TILES_BELOW: u64 = 256;

/// Environment variable for the plain GEMM's output tiles of products too small to fill a
/// large GPU on 128 x 128 tiles (fewer than [`SMALL_TILES_BELOW`]): unset or `64`, they take
/// 64 x 64 tiles before any split along K; `128` keeps them on 128 x 128 tiles, split along K
/// where they are deep enough. On an H100, host to host: ViT-B/16 fp32 (products of 197 rows)
/// ran in 2.96 ms on 64 x 64 tiles against 3.46 on split 128 x 128 ones, and Swin-T fp32 in
/// 1.85 against 2.02 ms; of the CNNs, whose convolutions are products too, mobilenet_v2
/// (0.434 against 0.463 ms) and shufflenet_v2 (0.449 against 0.480) gained, while resnet50,
/// regnet_y_400mf, efficientnet_b0, mobilenet_v3_large and squeezenet stayed within noise.
pub const ENV_GEMM_TILES: &str = "VKDELEGATE_GEMM_TILES";

/// Whether a product too small for 128 x 128 tiles takes 64 x 64 tiles first
/// ([`ENV_GEMM_TILES`]).
fn small_tiles_first() -> bool {
    match std::env::var(ENV_GEMM_TILES).as_deref().map(str::trim) {
        Err(_) | Ok("64") => true,
        Ok("128") => false,
        Ok(v) => {
            log::warn!("{ENV_GEMM_TILES}={v}: expected `64` or `128`; using the default");
            true
        }
    }
}

impl Lowerer<'_> {
    /// The plain GEMM kernel and layout for tiles of `8 * tx` columns by `8 * ty` rows in the
    /// current node's precision (the register-tiled `gemm.comp`, fp32 accumulators in both
    /// precisions), with the `TX` it is specialized with; [`Lowerer::gemm`] first offers fp16
    /// products to the cooperative kernels. 128 x 128 tiles of a matmul (`mode` 0) without
    /// split-K take the wide variant (half the threads, twice the columns each): on an NVIDIA
    /// H200 it ran 4096^3 in 2.90 ms against 3.05 for the 8 x 8 tiles, while the split-K
    /// conv2d of 256 channels at 56 x 56 ran 7% slower on it.
    fn gemm_kernel(&self, tx: u64, ty: u64, mode: u32, splits: u64) -> (Kernel, u64, GemmLayout) {
        let default = if mode == 0 && splits == 1 {
            GemmLayout::Wide
        } else {
            GemmLayout::Rows
        };
        match tile_layout().unwrap_or(default) {
            GemmLayout::Wide if tx == 16 && ty == 16 => (Kernel::GemmWide, 8, GemmLayout::Wide),
            GemmLayout::Wide => (Kernel::Gemm, tx, GemmLayout::Rows),
            layout => (Kernel::Gemm, tx, layout),
        }
    }

    /// A GEMM dispatch (see `gemm.comp`), split along K into several dispatches' worth of
    /// work groups plus a summing pass when the output has too few tiles to fill a large GPU.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn gemm(
        &mut self,
        m: usize,
        n: usize,
        k: usize,
        batch: usize,
        mode: u32,
        params: [usize; 26],
        bindings: Vec<(usize, bool)>,
        out: TensorId,
        act: Option<(f32, f32)>,
    ) -> Result<()> {
        // Products of a few rows read B once (`gemv.comp`).
        if mode == 0 && self.gemv(m, n, k, batch, &params, &bindings, out)? {
            return Ok(());
        }
        if mode == 0 && self.gemv_t(m, n, k, batch, &params, &bindings)? {
            return Ok(());
        }
        // fp16 products on cooperative matrices where the device runs them (`coop.rs`).
        if mode == 0 && self.coop_gemm(m, n, k, batch, &params, &bindings, out, act)? {
            return Ok(());
        }
        // Kernel size baked into the implicit-GEMM pipeline.
        let (khs, kws) = if mode == 1 {
            (params[17] as u32, params[18] as u32)
        } else {
            (0, 0)
        };
        let mut ty: u64 = if m <= 64 { 8 } else { 16 };
        let mut tx: u64 = if n <= 64 { 8 } else { 16 };
        let tiles = |tx: u64, ty: u64| {
            (m as u64).div_ceil(8 * ty) * (n as u64).div_ceil(8 * tx) * batch as u64
        };
        if tiles(tx, ty) < SMALL_TILES_BELOW && small_tiles_first() {
            (tx, ty) = (8, 8);
        }
        let mut splits: u64 = 1;
        let t = tiles(tx, ty);
        let sk = split_k();
        let out_numel = self.t(out).numel();
        if t < SPLIT_BELOW_TILES && k as u64 >= sk.min_k {
            splits = SPLIT_TARGET_TILES
                .div_ceil(t)
                .min(k as u64 / sk.depth(out_numel as u64))
                .clamp(1, 16);
        }
        // The summing pass costs about a small dispatch: a split must at least triple the work
        // groups to pay for it; else smaller tiles make more of them.
        if splits < 3 {
            splits = 1;
            if t < SMALL_TILES_BELOW && ty == 16 && tx == 16 {
                ty = 8;
                tx = 8;
            }
        }
        let k_split = (k as u64).div_ceil(splits).div_ceil(8) * 8;
        let splits = (k as u64).div_ceil(k_split);
        let groups = self.check_groups([
            (n as u64).div_ceil(8 * tx),
            (m as u64).div_ceil(8 * ty),
            batch as u64 * splits,
        ])?;
        let mut bindings = bindings;
        let final_out = bindings[3];
        let stride = split_stride(out_numel);
        let partial = (splits > 1).then(|| self.temp(out, stride * splits as usize));
        if let Some(p) = partial {
            bindings[3] = (p, true);
        }
        // With split-K the epilogue follows the summing pass.
        let epilogue = if partial.is_none() {
            self.take_epilogue()
        } else {
            None
        };
        let (act_code, bounds, resid, resid_code) = match epilogue {
            Some(e) => (e.act, Some((e.lo, e.hi)), e.residual, e.resid),
            None => (0, None, None, 0),
        };
        // A residual or an activation other than a clamp takes the EPILOGUE variant.
        let whole = resid.is_some() || act_code > 1;
        if whole {
            bindings.push((resid.unwrap_or(bindings[0].0), false));
        }
        let push = gemm_push(&params, [splits, k_split, stride as u64], bounds);
        // vec4 loads where rows are contiguous and everything is a multiple of 4.
        let [sa_b, sa_m, sa_k, sb_b, sb_k, sb_n, ..] = gemm_layout(&params);
        let vec_a = sa_k == 1 && k % 4 == 0 && sa_m % 4 == 0 && sa_b % 4 == 0;
        let vec_b = mode == 0 && sb_n == 1 && n % 4 == 0 && sb_k % 4 == 0 && sb_b % 4 == 0;
        let (kernel, spec_tx, layout) = self.gemm_kernel(tx, ty, mode, splits);
        let kernel = match (kernel, whole) {
            (Kernel::Gemm, true) => Kernel::GemmEpi,
            (Kernel::GemmWide, true) => Kernel::GemmWideEpi,
            (kernel, _) => kernel,
        };
        // fp16 products write fp32 partial sums.
        let partial_f32 = partial.is_some() && self.precision == Precision::F16;
        self.push(
            kernel,
            vec![
                (spec_tx * ty) as u32,
                spec_tx as u32,
                ty as u32,
                mode,
                khs,
                kws,
                act_code,
                u32::from(vec_a),
                u32::from(vec_b),
                u32::from(partial_f32),
                u32::from(layout == GemmLayout::Warp),
                resid_code,
            ],
            bindings,
            &push,
            groups,
        );
        match partial {
            Some(p) => self.sum_partials(p, splits as u32, out_numel, final_out),
            None => Ok(()),
        }
    }

    /// A GEMM of at most [`GEMV_MAX_ROWS`] rows with B row-major in vec4s (the `params` and
    /// `bindings` of [`Lowerer::gemm`]'s MODE 0) as `gemv.comp`, split along K until it has
    /// enough work groups to fill a large GPU; `false` when it does not apply.
    #[allow(clippy::too_many_arguments)]
    fn gemv(
        &mut self,
        m: usize,
        n: usize,
        k: usize,
        batch: usize,
        params: &[usize; 26],
        bindings: &[(usize, bool)],
        out: TensorId,
    ) -> Result<bool> {
        let [sa_b, sa_m, sa_k, sb_b, sb_k, sb_n, sc_b, sc_m, has_bias] = gemm_layout(params);
        let vec_b = sb_n == 1 && [n, sb_k, sb_b, sc_m, sc_b].iter().all(|v| v % 4 == 0);
        if m == 0 || m > GEMV_MAX_ROWS || k == 0 || sa_k != 1 || !vec_b {
            return Ok(false);
        }
        let cols = (n as u64).div_ceil(GEMV_COLUMNS);
        let splits = SPLIT_TARGET_TILES
            .div_ceil(cols * batch as u64)
            .clamp(1, (k as u64).div_ceil(GEMV_MIN_K_SPLIT));
        let k_split = (k as u64).div_ceil(splits).div_ceil(4) * 4;
        let splits = (k as u64).div_ceil(k_split);
        let groups = self.check_groups([cols, splits, batch as u64])?;
        let out_numel = self.t(out).numel();
        let mut bindings = bindings.to_vec();
        let final_out = bindings[3];
        let partial = (splits > 1).then(|| self.temp(out, out_numel * splits as usize));
        if let Some(p) = partial {
            bindings[3] = (p, true);
        }
        // With split-K the epilogue follows the summing pass.
        let e = if partial.is_none() {
            self.take_activation()
        } else {
            None
        };
        let (act, act_lo, act_hi) = e.map_or((0, 0.0, 0.0), |e| (e.act, e.lo, e.hi));
        let w = |v: usize| v as u32;
        let push = &push::GemvPush {
            m: w(m),
            n: w(n),
            k: w(k),
            sa_b: w(sa_b),
            sa_m: w(sa_m),
            sb_b: w(sb_b),
            sb_k: w(sb_k),
            sc_b: w(sc_b),
            sc_m: w(sc_m),
            has_bias: w(has_bias),
            k_split: k_split as u32,
            c_split: w(out_numel),
            act_lo,
            act_hi,
        };
        let spec = vec![m as u32, act, u32::from(partial.is_some())];
        self.push(Kernel::Gemv, spec, bindings, push, groups);
        if let Some(p) = partial {
            self.sum_partials(p, splits as u32, out_numel, final_out)?;
        }
        Ok(true)
    }

    /// A GEMM of at most [`GEMV_T_MAX_ROWS`] rows with B stored transposed (`[N][K]`, a linear
    /// layer's weights) in vec4s, as `gemv_t.comp`: one dot product per output column, four
    /// columns per work group; `false` when it does not apply.
    #[allow(clippy::too_many_arguments)]
    fn gemv_t(
        &mut self,
        m: usize,
        n: usize,
        k: usize,
        batch: usize,
        params: &[usize; 26],
        bindings: &[(usize, bool)],
    ) -> Result<bool> {
        let [sa_b, sa_m, sa_k, sb_b, sb_k, sb_n, sc_b, sc_m, has_bias] = gemm_layout(params);
        let vec4s = [k, sa_m, sa_b, sb_n, sb_b].iter().all(|v| v % 4 == 0);
        if m == 0 || m > GEMV_T_MAX_ROWS || k == 0 || sa_k != 1 || sb_k != 1 || !vec4s {
            return Ok(false);
        }
        let groups = self.check_groups([(n as u64).div_ceil(4), 1, batch as u64])?;
        let e = self.take_activation();
        let (act, act_lo, act_hi) = e.map_or((0, 0.0, 0.0), |e| (e.act, e.lo, e.hi));
        let w = |v: usize| v as u32;
        let push = &push::GemvTPush {
            m: w(m),
            n: w(n),
            k: w(k),
            sa_b: w(sa_b),
            sa_m: w(sa_m),
            sb_b: w(sb_b),
            sb_n: w(sb_n),
            sc_b: w(sc_b),
            sc_m: w(sc_m),
            has_bias: w(has_bias),
            act_lo,
            act_hi,
            ..Default::default()
        };
        let spec = self.gemv_t_spec(&[m as u32, act, 0, 0], &super::words(push));
        // B2 and the norm's weights, read only by the gated and normalised products of the
        // fusion passes, bound to B and A; so are a cache's position and rotary tables.
        let mut bindings = bindings.to_vec();
        bindings.insert(3, bindings[1]);
        for at in 4..8 {
            bindings.insert(at, bindings[0]);
        }
        self.push(self.gemv_t_kernel(&spec), spec, bindings, push, groups);
        Ok(true)
    }

    /// The summing pass of a split-K GEMM (`split_sum.comp`) in one dispatch: the fp32
    /// partial sums `split_stride(out_numel)` elements apart are summed in fp32, the node's
    /// epilogue applied (a residual added, an activation), and stored in the node's precision.
    /// Where the node has no epilogue and its result's one reader is an elementwise chain,
    /// the chain sums the partials as it reads them instead ([`Lowerer::chain_partials`]):
    /// a ConvNeXt block's second linear, whose layer scale, permute and residual are a chain.
    pub(super) fn sum_partials(
        &mut self,
        partial: usize,
        splits: u32,
        out_numel: usize,
        final_out: (usize, bool),
    ) -> Result<()> {
        let d = DeferredSum {
            partial,
            splits,
            out_numel,
            final_out,
        };
        if self.chain_sums(final_out.0) {
            self.deferred_sums.insert(final_out.0, d);
            return Ok(());
        }
        let e = self.take_epilogue();
        self.split_sum(d, e)
    }

    fn split_sum(&mut self, d: DeferredSum, e: Option<Taken>) -> Result<()> {
        let quads = d.out_numel.div_ceil(4);
        let g = self.linear_groups(quads as u64);
        let (act, act_lo, act_hi) = e.map_or((0, 0.0, 0.0), |e| (e.act, e.lo, e.hi));
        let resid = e.and_then(|e| e.residual);
        self.push(
            Kernel::SplitSum,
            vec![act, e.map_or(0, |e| e.resid)],
            vec![
                (d.partial, false),
                d.final_out,
                (resid.unwrap_or(d.partial), false),
            ],
            &push::SplitSumPush {
                quads: quads as u32,
                splits: d.splits,
                stride4: (split_stride(d.out_numel) / 4) as u32,
                act_lo,
                act_hi,
            },
            [g, 1, 1],
        );
        Ok(())
    }

    /// Whether the current node's result in storage `s` may be left as partial sums for the
    /// elementwise chain that alone reads it: the node has no epilogue, and `s` is a
    /// temporary of its own, no graph output, that only this node writes.
    fn chain_sums(&self, s: usize) -> bool {
        if !chain_split_sums() || self.epilogue.is_some_and(|_| !self.epilogue_taken) {
            return false;
        }
        let Some(st) = self.b.storages.get(s) else {
            return false;
        };
        let output = self.b.outputs.iter().any(|&t| self.st(t) == s);
        let own = matches!(st.kind, StorageKind::Temp)
            && !output
            && self.placement.within.get(s).is_some_and(Option::is_none)
            && self.uses.writers[s] == [self.node];
        if !own {
            return false;
        }
        // Every node reading `s`: one chain, among its inputs proper.
        let mut readers = self
            .b
            .nodes
            .iter()
            .filter(|n| n.op.inputs().iter().any(|&t| self.st(t) == s));
        let (Some(n), None) = (readers.next(), readers.next()) else {
            return false;
        };
        match &n.op {
            Op::Kernel {
                kernel: Kernel::Elementwise,
                inputs,
                spec,
                ..
            } => {
                let n_in = spec.first().map_or(0, |&v| v as usize);
                let read = |t: &TensorId| self.st(*t) == s;
                inputs.iter().take(n_in).any(read)
                    && !inputs.iter().skip(MAX_CHAIN_INPUTS).any(read)
            }
            _ => false,
        }
    }

    /// An elementwise chain's partial sums (`elementwise.comp`'s binding 5, `SPLIT_MASK`,
    /// `SPLITS`, `split_stride`): the inputs whose product left its summing pass to this chain
    /// read its partials. A second such product among the inputs gets its summing pass here.
    pub(super) fn chain_partials(
        &mut self,
        inputs: &[TensorId],
        spec: &mut Vec<u32>,
        push: &mut [u32],
        bindings: &mut Vec<(usize, bool)>,
    ) -> Result<()> {
        let n_in = spec.first().map_or(0, |&v| v as usize);
        let mut chosen: Option<DeferredSum> = None;
        let mut mask = 0u32;
        for (k, &t) in inputs.iter().enumerate().take(n_in) {
            let s = self.st(t);
            let Some(d) = self.deferred_sums.get(&s).copied() else {
                continue;
            };
            match chosen {
                None => chosen = Some(d),
                Some(c) if c.partial == d.partial => {}
                Some(_) => {
                    self.deferred_sums.remove(&s);
                    self.split_sum(d, None)?;
                    continue;
                }
            }
            mask |= 1 << k;
        }
        if let Some(d) = chosen {
            self.deferred_sums.remove(&d.final_out.0);
        }
        let partials = chosen.map_or(bindings[0].0, |d| d.partial);
        bindings.insert(PARTIALS_BINDING, (partials, false));
        spec.resize(SPEC_WORDS, 0);
        spec.push(mask);
        spec.push(chosen.map_or(1, |d| d.splits));
        if let Some(w) = push.get_mut(std::mem::offset_of!(push::ElementwisePush, split_stride) / 4)
        {
            *w = chosen.map_or(0, |d| split_stride(d.out_numel) as u32);
        }
        Ok(())
    }

    /// Lowers a node of this family.
    pub(super) fn matmul(&mut self, op: &Op, t: &Target) -> Result<()> {
        let (out, o, act) = (t.out, t.o, t.act);
        match op {
            Op::Matmul {
                a,
                b,
                bias,
                linear,
                norm,
            } => {
                self.row_norm = norm.map(|n| (self.st(n.colsum), n.eps));
                let (ai, bi) = (self.t(*a).clone(), self.t(*b).clone());
                let ra = ai.shape.len();
                let k = ai.shape[ra - 1];
                let bias_st = bias.map(|t| self.st(t));
                let has_bias = usize::from(bias_st.is_some());
                if *linear {
                    let nout = bi.shape[0];
                    let m = ai.numel() / k;
                    // Constant weights are transposed once to [k, n] for coalesced loads,
                    // except for products of a few rows, which read them as they are, one
                    // dot product per output (`gemv_t.comp`: a decode step's layout), and
                    // for the cooperative GEMMs, whose loads transpose them: so a language
                    // model's prompt and its decode step share one copy of the weights.
                    let es = bi.dtype.size();
                    let few_rows = m <= GEMV_T_MAX_ROWS && k % 4 == 0;
                    let coop_reads = self.coop.is_some()
                        && self.t(out).dtype == DType::F16
                        && crate::coop::weights_as_stored();
                    let (bst, sb_k, sb_n) = match &self.storages[bi.storage].kind {
                        StorageKind::Const(bytes) if !few_rows && !coop_reads => {
                            let t = crate::layout::transposed(bytes, nout, k, es);
                            let bytes_len = storage_bytes(bi.dtype, &[nout * k]);
                            self.storages.push(Storage {
                                kind: StorageKind::Const(t.into()),
                                bytes: bytes_len,
                                tensor: *b,
                            });
                            (self.storages.len() - 1, nout, 1)
                        }
                        _ => (bi.storage, 1, k),
                    };
                    let params = [
                        m, nout, k, 0, k, 1, 0, sb_k, sb_n, 0, nout, has_bias, 0, 0, 0, 0, 0, 0, 0,
                        0, 0, 0, 0, 0, 0, 0,
                    ];
                    let bindings = vec![
                        (ai.storage, false),
                        (bst, false),
                        (bias_st.unwrap_or(ai.storage), false),
                        (o, true),
                    ];
                    self.gemm(m, nout, k, 1, 0, params, bindings, out, act)?;
                    if self.row_norm.take().is_some() {
                        return Err(Error::Graph(
                            "internal: a layer norm folded into a product that did not run on \
                             the workgroup-scope cooperative kernel"
                                .into(),
                        ));
                    }
                } else {
                    let rb = bi.shape.len();
                    let m = ai.shape[ra - 2];
                    let nn = bi.shape[rb - 1];
                    let batch_a: usize = ai.shape[..ra - 2].iter().product();
                    let batch_b: usize = bi.shape[..rb - 2].iter().product();
                    let (m_eff, batch) = if batch_b == 1 {
                        (m * batch_a, 1)
                    } else {
                        (m, batch_b.max(batch_a))
                    };
                    let sa_b = if batch_a == 1 { 0 } else { m * k };
                    let sb_b = if batch_b == 1 { 0 } else { k * nn };
                    let params = [
                        m_eff,
                        nn,
                        k,
                        sa_b,
                        k,
                        1,
                        sb_b,
                        nn,
                        1,
                        m * nn,
                        nn,
                        has_bias,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                    ];
                    let bindings = vec![
                        (ai.storage, false),
                        (bi.storage, false),
                        (bias_st.unwrap_or(ai.storage), false),
                        (o, true),
                    ];
                    self.gemm(m_eff, nn, k, batch, 0, params, bindings, out, act)?;
                }
            }
            _ => return Err(self.not_in_family()),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_k_tuning_is_parsed_strictly() {
        assert_eq!(
            parse_split_k("128, 64"),
            Some(SplitK {
                min_k: 128,
                per_split: 64,
                large: SPLIT_K.large,
            })
        );
        assert_eq!(parse_split_k("64,32,0").map(|s| s.large), Some(u64::MAX));
        assert_eq!(parse_split_k("64,32,4096").map(|s| s.large), Some(4096));
        assert_eq!(SPLIT_K.depth(1 << 18), 64);
        assert_eq!(SPLIT_K.depth((1 << 18) - 1), 32);
        for bad in ["", "64", "4,32", "64,x", "64,32,1,1"] {
            assert_eq!(parse_split_k(bad), None, "{bad}");
        }
    }
}
