//! Cooperative-matrix kernels (`VK_KHR_cooperative_matrix`): whether a device may run them,
//! with which fragment shape, and the once-per-device checks that they compute what the plain
//! kernels compute.
//!
//! Drivers are known to advertise cooperative matrices and compute wrong results with them.
//! Each kernel and tile a graph's dispatches run on ([`Checked`]) is checked the first time a
//! graph on the device needs it: small graphs of each kind the lowering emits (matmul with a
//! ragged K tail, linear with its weight read transposed, an unaligned shape on the scalar
//! load path, a padded 3x3 conv2d through the patch matrix with a bias per output channel) run
//! with that tile forced and are compared with a host reference of the same fp16 inputs. A
//! failure or a mismatch logs a warning and graphs on the device go without that tile (without
//! cooperative matrices where the kind's first check fails, [`usable`]). Checking only what a
//! graph uses keeps a driver's slow compiles of tiles no product takes (seconds each) out of
//! its load. The outcomes are kept per device ([`vk_core::Device::memo`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Condvar, Mutex, MutexGuard};

use vk_core::{CoopComponent, Device, Features, HostTensor, Version};

use crate::graph::GraphBuilder;
use crate::kernels::Kernel;
use crate::options::BuildOptions;

/// When graphs use cooperative-matrix kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CoopPolicy {
    /// Where the device enables them and they pass the check on it.
    #[default]
    Auto,
    /// Never: the plain kernels.
    Off,
    /// Where the device enables them, without the check (the check itself; tests).
    Unchecked,
}

/// The cooperative GEMM a device runs, with its tile shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CoopConfig {
    /// `gemm_coop.comp`: subgroup-scope fragments of `tm x tn x tk`, four subgroups of
    /// `threads / 4` lanes.
    Khr {
        tm: u32,
        tn: u32,
        tk: u32,
        threads: u32,
    },
    /// `gemm_coop2.comp` with one to [`NV2_SLOTS`] tiles, largest first (see
    /// [`CoopConfig::nv2_tile`]), and `conv_coop2.comp` (the implicit-GEMM conv2d) on its tile,
    /// if it runs.
    Nv2 {
        tiles: [Option<Nv2Tile>; NV2_SLOTS],
        conv: Option<Nv2Tile>,
    },
}

/// A tile of `gemm_coop2.comp`: one workgroup-scope `bm x bn` accumulator stepping K by `bk`,
/// on `threads` invocations, `unroll` K steps unrolled in the fast path (`conv_coop2.comp`
/// does not unroll).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Nv2Tile {
    pub bm: u32,
    pub bn: u32,
    pub bk: u32,
    pub threads: u32,
    pub unroll: u32,
}

/// How many tiles the workgroup-scope kernel may have.
pub(crate) const NV2_SLOTS: usize = 4;

/// The default tiles, largest first: 128 x 256 stepping K by 32 with sixteen steps unrolled
/// for large products (measured fastest on 4096^3 on an H200, in both layouts of B), 128 x 128,
/// 64 x 64, and 32 x 64 stepping K by 64 on 256 invocations for products of a few hundred rows
/// (on an H100, ViT-B/16's products of 197 rows took 0.946 ms on 32 x 64 against 1.083 on
/// 64 x 64, and ViT-B fp16 ran 1.43 ms host to host against 1.61; stepping K by 64 with two
/// steps unrolled instead of by 32 with four took ViT-B fp16 from 1.46 to 1.41 ms and
/// ConvNeXt-T fp16 from 1.04 to 1.02; 256 invocations instead of 128 took them to 1.23 and
/// 0.94 ms, while 64 took them to 2.01 and 1.28).
const NV2_TILES: [Nv2Tile; NV2_SLOTS] = [
    Nv2Tile {
        bm: 128,
        bn: 256,
        bk: 32,
        threads: 256,
        unroll: 16,
    },
    Nv2Tile {
        bm: 128,
        bn: 128,
        bk: 32,
        threads: 128,
        unroll: 4,
    },
    Nv2Tile {
        bm: 64,
        bn: 64,
        bk: 32,
        threads: 128,
        unroll: 4,
    },
    Nv2Tile {
        bm: 32,
        bn: 64,
        bk: 64,
        threads: 256,
        unroll: 2,
    },
];

/// The tile of `conv_coop2.comp`: 128 output pixels (`bm`) of 64 output channels (`bn`).
const NV2_CONV: Nv2Tile = Nv2Tile {
    bm: 128,
    bn: 64,
    bk: 32,
    threads: 128,
    unroll: 1,
};

/// A product takes the largest tile that gives it at least this many work groups (about two
/// per multiprocessor of a large GPU), else the smallest; [`ENV_COOP2_FILL`] changes it. On an
/// H100 a 512-token prompt's products of 256 groups on 64 x 64 ran faster there than on
/// 32 x 64.
pub(crate) const NV2_MIN_GROUPS: u64 = 256;

/// Products at least this deep ...
const NV2_DEEP_K: usize = 4096;
/// ... take the largest tile that gives them this many work groups instead: a large tile does
/// more in each K step, and the split along K makes up the work groups.
const NV2_DEEP_MIN_GROUPS: u64 = 64;

/// Environment variable for tuning which tile a product takes: `GROUPS[,DEEP_K,DEEP_GROUPS]`,
/// the work groups a tile must give a product (see [`NV2_MIN_GROUPS`]), and those it must give
/// one at least `DEEP_K` deep (see [`NV2_DEEP_K`]).
pub const ENV_COOP2_FILL: &str = "VKDELEGATE_COOP2_FILL";

/// The work groups a tile must give a product of depth `k`: [`NV2_MIN_GROUPS`] or
/// [`NV2_DEEP_MIN_GROUPS`], or what [`ENV_COOP2_FILL`] says.
fn nv2_min_groups(k: usize) -> u64 {
    let default = (NV2_MIN_GROUPS, NV2_DEEP_K, NV2_DEEP_MIN_GROUPS);
    let (least, deep_k, deep) = match std::env::var(ENV_COOP2_FILL) {
        Err(_) => default,
        Ok(v) => parse_fill(&v).unwrap_or_else(|| {
            log::warn!(
                "{ENV_COOP2_FILL}={v}: expected GROUPS or GROUPS,DEEP_K,DEEP_GROUPS; using \
                 the default"
            );
            default
        }),
    };
    if k >= deep_k { deep } else { least }
}

/// [`ENV_COOP2_FILL`]'s value: `GROUPS` (products of every depth) or
/// `GROUPS,DEEP_K,DEEP_GROUPS`.
fn parse_fill(v: &str) -> Option<(u64, usize, u64)> {
    let p: Vec<u64> = crate::options::tuning_numbers(v)?;
    match p[..] {
        [g] => Some((g, usize::MAX, g)),
        [g, k, d] => Some((g, usize::try_from(k).ok()?, d)),
        _ => None,
    }
}

/// Whether blocks of `bm x bn` give an `m x n` product of `batch` matrices at least `least`
/// work groups and pad its rows by at most a quarter (a 64-row product on 128-row blocks would
/// compute twice its work): the rule both cooperative GEMMs choose their blocks by.
pub(crate) fn block_fills([m, n, batch]: [usize; 3], (bm, bn): (u32, u32), least: u64) -> bool {
    let (m, n, bm, bn) = (m as u64, n as u64, u64::from(bm), u64::from(bn));
    let padded = m.div_ceil(bm) * bm;
    m.div_ceil(bm) * n.div_ceil(bn) * batch as u64 >= least && 4 * (padded - m) <= padded
}

impl CoopConfig {
    /// This configuration without what `failed` names: `None` where nothing cooperative is
    /// left (the subgroup-scope kernel failed, or every tile did).
    fn without(self, failed: &[Checked]) -> Option<CoopConfig> {
        match self {
            CoopConfig::Khr { .. } => (!failed.contains(&Checked::Subgroup)).then_some(self),
            CoopConfig::Nv2 { tiles, conv } => {
                let mut left = tiles
                    .into_iter()
                    .flatten()
                    .filter(|t| !failed.contains(&Checked::Tile(*t)));
                let tiles: [Option<Nv2Tile>; NV2_SLOTS] = std::array::from_fn(|_| left.next());
                let conv = conv.filter(|t| !failed.contains(&Checked::Conv(*t)));
                tiles[0]
                    .is_some()
                    .then_some(CoopConfig::Nv2 { tiles, conv })
            }
        }
    }

    /// The workgroup-scope tiles, largest first (none for the subgroup-scope kernel).
    pub fn nv2_tiles(self) -> impl Iterator<Item = Nv2Tile> {
        let tiles = match self {
            CoopConfig::Nv2 { tiles, .. } => tiles,
            CoopConfig::Khr { .. } => [None; NV2_SLOTS],
        };
        tiles.into_iter().flatten()
    }

    /// The tile an `m x n` product of depth `k` of `batch` matrices runs on: the largest that
    /// gives it [`NV2_MIN_GROUPS`] work groups ([`NV2_DEEP_MIN_GROUPS`] where `k` is at least
    /// [`NV2_DEEP_K`]) and pads its rows by at most a quarter (a 64-row product on 128-row
    /// tiles would compute twice its work), else the smallest; `None` for the subgroup-scope
    /// kernel.
    pub fn nv2_tile(self, m: usize, n: usize, k: usize, batch: usize) -> Option<Nv2Tile> {
        let least = nv2_min_groups(k);
        let mut last = None;
        for t in self.nv2_tiles() {
            if block_fills([m, n, batch], (t.bm, t.bn), least) {
                return Some(t);
            }
            last = Some(t);
        }
        last
    }

    /// The implicit-GEMM conv2d's tile, if the device runs it.
    pub fn nv2_conv(self) -> Option<Nv2Tile> {
        match self {
            CoopConfig::Nv2 { conv, .. } => conv,
            CoopConfig::Khr { .. } => None,
        }
    }

    /// The kernel of the implicit-GEMM conv2d: `conv_coop2.comp` where the workgroup-scope
    /// configuration has its tile, `gemm_coop.comp` (its CONV mode) on the subgroup-scope
    /// kernel; `None` where convolutions go through a patch matrix.
    fn implicit_conv_kernel(self) -> Option<&'static str> {
        match self {
            CoopConfig::Nv2 { conv: Some(_), .. } => Some("ConvCoop2"),
            CoopConfig::Nv2 { conv: None, .. } => None,
            CoopConfig::Khr { .. } => (!implicit_conv_off()).then_some("GemmCoop"),
        }
    }

    /// The kernel a 3x3 conv2d of stride 1 runs on: the implicit GEMM's, else the GEMM's
    /// after a patch matrix.
    fn conv_kernel_name(self) -> &'static str {
        self.implicit_conv_kernel()
            .unwrap_or_else(|| self.kernel_name())
    }

    /// The kernel's name.
    pub fn kernel_name(self) -> &'static str {
        match self {
            CoopConfig::Khr { .. } => "GemmCoop",
            CoopConfig::Nv2 { .. } => "GemmCoop2",
        }
    }
}

/// The features `gemm_coop2.comp` needs (`VK_NV_cooperative_matrix2`).
pub(crate) const NV2_FEATURES: Features = Features::COOPERATIVE_MATRIX_WORKGROUP_SCOPE_NV
    .union(Features::COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_NV)
    .union(Features::COOPERATIVE_MATRIX_TENSOR_ADDRESSING_NV)
    .union(Features::COOPERATIVE_MATRIX_PER_ELEMENT_OPERATIONS_NV);

/// Every feature a cooperative GEMM or attention may use: asked for, optionally, by graphs
/// with fp16 GEMMs.
pub const COOPERATIVE_FEATURES: Features = Features::COOPERATIVE_MATRIX
    .union(Features::SHADER_FLOAT16)
    .union(Features::STORAGE_BUFFER_16BIT)
    .union(Features::MAINTENANCE_4)
    .union(Features::VULKAN_MEMORY_MODEL)
    .union(Features::VULKAN_MEMORY_MODEL_DEVICE_SCOPE)
    .union(NV2_FEATURES)
    .union(crate::coop_attention::NV2_ATTENTION_FEATURES);

/// The subgroup-scope kernel's largest block is 128 x 128 split among 2 x 2 subgroups (each
/// 64 x 64), stepping K by 32; its smaller blocks take only the shapes that divide them
/// (`lower::coop`'s `khr_block`).
const WARP_TILE: u32 = 64;
const BLOCK_K: u32 = 32;

/// What the device offers, without the check, best first. Both kinds need Vulkan 1.3 (the
/// kernels are SPIR-V 1.6) and `cooperativeMatrix`, `shaderFloat16`, 16-bit storage,
/// `maintenance4` (work-group sizes by id) and the Vulkan memory model (their SPIR-V declares
/// it) enabled. The workgroup-scope kernel needs the four
/// `VK_NV_cooperative_matrix2` features it uses, and each of its tiles a reported
/// flexible-dimension shape (fp16 x fp16 -> fp32 on the tile's work-group size) whose
/// granularities divide the tile; the subgroup-scope kernel a reported
/// fp16 x fp16 -> fp32 shape that tiles its blocks (16 x 16 x 16 preferred) and subgroups of
/// 16 to 64 lanes.
pub(crate) fn offered(device: &Device) -> Vec<CoopConfig> {
    let enabled = device.enabled();
    let need = Features::COOPERATIVE_MATRIX
        | Features::SHADER_FLOAT16
        | Features::STORAGE_BUFFER_16BIT
        | Features::MAINTENANCE_4
        | Features::VULKAN_MEMORY_MODEL
        | Features::VULKAN_MEMORY_MODEL_DEVICE_SCOPE;
    if enabled.api_version < Version::V1_3 || !enabled.features.contains(need) {
        return Vec::new();
    }
    let mut out = Vec::new();
    if enabled.features.contains(NV2_FEATURES) {
        let invocations = device
            .capabilities()
            .limits
            .max_compute_work_group_invocations;
        if let Some(tiles) = nv2_tiles() {
            let caps = device.capabilities();
            let fits = |t: &Nv2Tile| {
                let (h, f) = (CoopComponent::F16, CoopComponent::F32);
                let reported = caps.coop_workgroup_fits(h, f, [t.bm, t.bn, t.bk], t.threads);
                if !reported {
                    log::debug!(
                        "workgroup-scope tile {t:?}: no flexible-dimension shape of '{}' fits it",
                        caps.name
                    );
                }
                t.threads <= invocations && reported
            };
            let mut fitting = tiles.into_iter().flatten().filter(fits);
            let tiles = std::array::from_fn(|_| fitting.next());
            let conv = nv2_conv().filter(fits);
            if tiles[0].is_some() {
                out.push(CoopConfig::Nv2 { tiles, conv });
            }
        }
    }
    out.extend(khr(device));
    out
}

/// Environment variable for tuning the workgroup-scope kernel: `off`, or one to four tiles
/// `threads,bm,bn,bk[,unroll]` separated by `;`, largest first (each kind is still checked
/// before use; a product takes them as it takes the defaults, see [`CoopConfig::nv2_tile`]).
pub const ENV_COOP2: &str = "VKDELEGATE_COOP2";

/// The tiles of the workgroup-scope kernel: the defaults, those [`ENV_COOP2`] names, or none
/// (`off`).
fn nv2_tiles() -> Option<[Option<Nv2Tile>; NV2_SLOTS]> {
    let default = NV2_TILES.map(Some);
    let Ok(v) = std::env::var(ENV_COOP2) else {
        return Some(default);
    };
    if v == "off" {
        return None;
    }
    match parse_nv2_tiles(&v) {
        Some(tiles) => Some(tiles),
        None => {
            log::warn!(
                "{ENV_COOP2}={v}: expected `off` or one to four `threads,bm,bn,bk[,unroll]` \
                 separated by `;` (threads 32 to 1024, tiles nonzero multiples of 16 up to \
                 512, unroll 1 to 64); using the default"
            );
            Some(default)
        }
    }
}

/// One to [`NV2_SLOTS`] tiles of [`parse_nv2`] separated by `;`.
fn parse_nv2_tiles(v: &str) -> Option<[Option<Nv2Tile>; NV2_SLOTS]> {
    let tiles: Vec<Nv2Tile> = v.split(';').map(parse_nv2).collect::<Option<_>>()?;
    if tiles.len() > NV2_SLOTS {
        return None;
    }
    let mut out = [None; NV2_SLOTS];
    for (slot, t) in out.iter_mut().zip(tiles) {
        *slot = Some(t);
    }
    Some(out)
}

/// Environment variable for tuning the implicit-GEMM conv2d: `off` (patch matrices instead, on
/// either kind), or `threads,bm,bn,bk` (the workgroup-scope kernel's tile: `bm` output pixels
/// of `bn` output channels per work group).
pub const ENV_CONV2: &str = "VKDELEGATE_CONV2";

/// Whether [`ENV_CONV2`] is `off`: convolutions through patch matrices on either kind.
pub(crate) fn implicit_conv_off() -> bool {
    std::env::var(ENV_CONV2).is_ok_and(|v| v == "off")
}

/// `off` transposes a linear's constant weights for the cooperative GEMMs too (a copy of
/// their own, as for the other GEMMs) instead of reading them as stored, `[n][k]`, through a
/// transposing load: for comparisons.
pub const ENV_COOP_WEIGHTS_AS_STORED: &str = "VKDELEGATE_COOP_WEIGHTS_AS_STORED";

/// Whether cooperative GEMMs read a linear's constant weights as stored (the default; see
/// [`ENV_COOP_WEIGHTS_AS_STORED`]).
pub(crate) fn weights_as_stored() -> bool {
    std::env::var(ENV_COOP_WEIGHTS_AS_STORED).map_or(true, |v| v != "off")
}

/// The implicit-GEMM conv2d's tile: the default, the one [`ENV_CONV2`] names, or none.
fn nv2_conv() -> Option<Nv2Tile> {
    let Ok(v) = std::env::var(ENV_CONV2) else {
        return Some(NV2_CONV);
    };
    if v == "off" {
        return None;
    }
    parse_nv2(&v).or_else(|| {
        log::warn!(
            "{ENV_CONV2}={v}: expected `off` or `threads,bm,bn,bk` (threads 32 to 1024, \
             tiles nonzero multiples of 16); using the default"
        );
        Some(NV2_CONV)
    })
}

/// `threads,bm,bn,bk[,unroll]`, each a number; threads 32..=1024, tiles nonzero multiples of
/// 16, unroll 1..=64 (4 when left out).
fn parse_nv2(v: &str) -> Option<Nv2Tile> {
    let p: Vec<u32> = crate::options::tuning_numbers(v)?;
    let (threads, bm, bn, bk, unroll) = match p[..] {
        [t, m, n, k] => (t, m, n, k, 4),
        [t, m, n, k, u] => (t, m, n, k, u),
        _ => return None,
    };
    let tile = |t: u32| t > 0 && t % 16 == 0 && t <= 512;
    let ok = (32..=1024).contains(&threads)
        && tile(bm)
        && tile(bn)
        && tile(bk)
        && (1..=64).contains(&unroll);
    ok.then_some(Nv2Tile {
        bm,
        bn,
        bk,
        threads,
        unroll,
    })
}

/// The subgroup-scope kernel: only where the subgroup size is fixed (its work group is four
/// subgroups; a driver free to pick another size would break that, see `gemm_coop.comp`),
/// with a reported shape whose offsets stay 16-byte aligned (`k`, `n` multiples of 8) and
/// within the device's work-group and shared-memory limits.
fn khr(device: &Device) -> Option<CoopConfig> {
    let caps = device.capabilities();
    let limits = &caps.limits;
    let sg = limits.subgroup_size;
    let fixed = limits.subgroup_size_range == [sg, sg] || limits.subgroup_size_range == [0, 0];
    if !(16..=64).contains(&sg) || !fixed || 4 * sg > limits.max_compute_work_group_invocations {
        return None;
    }
    let fits = |s: &&vk_core::CoopMatrixShape| {
        s.m > 0
            && s.n % 8 == 0
            && s.k % 8 == 0
            && s.n > 0
            && s.k > 0
            && WARP_TILE % s.m == 0
            && WARP_TILE % s.n == 0
            && BLOCK_K % s.k == 0
            && khr_shared_bytes(s) <= limits.max_compute_shared_memory_size
    };
    let shapes: Vec<_> = caps
        .coop_shapes(CoopComponent::F16, CoopComponent::F32)
        .filter(fits)
        .collect();
    let best = shapes
        .iter()
        .find(|s| (s.m, s.n, s.k) == (16, 16, 16))
        .or_else(|| shapes.first())?;
    Some(CoopConfig::Khr {
        tm: best.m,
        tn: best.n,
        tk: best.k,
        threads: 4 * sg,
    })
}

/// Shared memory of `gemm_coop.comp` with fragments of `s`: two stages of A (128 x 40 halves)
/// and B (32 x 136 halves at most), and one fp32 fragment per subgroup.
fn khr_shared_bytes(s: &vk_core::CoopMatrixShape) -> u32 {
    2 * 128 * 40 * 2 + 2 * 32 * 136 * 2 + 4 * s.m * s.n * 4
}

/// The configuration graphs built with `options` use on `device`, if any: under
/// [`CoopPolicy::Auto`] the best offered kind whose first check ([`Checked::first`]) passes.
/// Its other tiles are checked when a graph first needs them ([`without_failures`]).
pub(crate) fn usable(device: &Device, options: &BuildOptions) -> Option<CoopConfig> {
    if let Some(c) = forced() {
        return Some(c);
    }
    let offered = offered(device);
    match options.cooperative {
        CoopPolicy::Off => None,
        CoopPolicy::Unchecked => offered.first().copied(),
        CoopPolicy::Auto => offered
            .into_iter()
            .find(|&c| outcomes(device, options, c, &[Checked::first(c)]) == [true]),
    }
}

/// What one check on a device covers: the subgroup-scope kernel, one tile of the
/// workgroup-scope GEMM, or the implicit-GEMM conv2d on its tile. A plan names those its
/// dispatches run on ([`crate::lower::Plan::cooperative`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Checked {
    /// `gemm_coop.comp`, in its GEMM and CONV modes.
    Subgroup,
    /// `gemm_coop2.comp` on this tile.
    Tile(Nv2Tile),
    /// `conv_coop2.comp` on this tile.
    Conv(Nv2Tile),
}

impl Checked {
    /// The kernel it covers.
    pub(crate) fn kernel(self) -> Kernel {
        match self {
            Checked::Subgroup => Kernel::GemmCoop,
            Checked::Tile(_) => Kernel::GemmCoop2,
            Checked::Conv(_) => Kernel::ConvCoop2,
        }
    }

    /// The first check of `config`, before any graph uses it: the subgroup-scope kernel, or
    /// the workgroup-scope kernel's smallest tile (the quickest to compile).
    fn first(config: CoopConfig) -> Checked {
        config
            .nv2_tiles()
            .last()
            .map_or(Checked::Subgroup, Checked::Tile)
    }

    /// The configuration its check forces: `config` narrowed to this tile (for the conv2d,
    /// `config`'s smallest GEMM tile beside it, which its check of stride 2 takes).
    fn forced(self, config: CoopConfig) -> CoopConfig {
        let only = |t: Option<Nv2Tile>| [t, None, None, None];
        match self {
            Checked::Subgroup => config,
            Checked::Tile(t) => CoopConfig::Nv2 {
                tiles: only(Some(t)),
                conv: None,
            },
            Checked::Conv(t) => CoopConfig::Nv2 {
                tiles: only(config.nv2_tiles().last()),
                conv: Some(t),
            },
        }
    }
}

/// `config` without what `used` (a plan's [`crate::lower::Plan::cooperative`]) names that
/// fails its check on `device`, each checked the first time a plan needs it; `None` where all
/// pass, or `policy` checks nothing, or a check is running. A plan that relied on a failing
/// tile is lowered again on what is left.
pub(crate) fn without_failures(
    device: &Device,
    options: &BuildOptions,
    config: CoopConfig,
    used: &BTreeSet<Checked>,
) -> Option<Option<CoopConfig>> {
    if options.cooperative != CoopPolicy::Auto || checking() || used.is_empty() {
        return None;
    }
    let used: Vec<Checked> = used.iter().copied().collect();
    let failed: Vec<Checked> = used
        .iter()
        .zip(outcomes(device, options, config, &used))
        .filter_map(|(&c, ok)| (!ok).then_some(c))
        .collect();
    (!failed.is_empty()).then(|| config.without(&failed))
}

/// The outcomes of a device's checks: `None` while one runs.
#[derive(Default)]
struct Checks {
    outcome: Mutex<BTreeMap<Checked, Option<bool>>>,
    settled: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether each of `what` passes its check on `device` (for `config`): those never checked
/// there, nor recorded as passed beside the disk cache of `options` ([`records`]), run now,
/// together on parallel threads; those another build is checking are waited for.
fn outcomes(
    device: &Device,
    options: &BuildOptions,
    config: CoopConfig,
    what: &[Checked],
) -> Vec<bool> {
    let checks = device.memo("compute-delegate: cooperative checks", Checks::default);
    let mine: Vec<Checked> = {
        let mut outcome = lock(&checks.outcome);
        let new: Vec<Checked> = what
            .iter()
            .copied()
            .filter(|c| !outcome.contains_key(c))
            .collect();
        outcome.extend(new.iter().map(|&c| (c, None)));
        new
    };
    /// Settles this build's checks however they end (a panic counts as a failure).
    struct Settle<'a>(&'a Checks, Vec<(Checked, bool)>, &'a [Checked]);
    impl Drop for Settle<'_> {
        fn drop(&mut self) {
            let mut outcome = lock(&self.0.outcome);
            for &c in self.2 {
                let ok = self.1.iter().find(|(d, _)| *d == c).is_some_and(|p| p.1);
                outcome.insert(c, Some(ok));
            }
            self.0.settled.notify_all();
        }
    }
    if !mine.is_empty() {
        let mut settle = Settle(&checks, Vec::new(), &mine);
        let file = records(device, options);
        let passed = recorded_passes(file.as_ref());
        let (known, unknown): (Vec<Checked>, Vec<Checked>) = mine
            .iter()
            .partition(|c| passed.contains(&record_key(&format!("{c:?}"))));
        if !known.is_empty() {
            log::debug!("cooperative-matrix checks {known:?} passed before on this driver");
        }
        let ran = unknown.iter().copied().zip(check(device, config, &unknown));
        settle.1 = known.iter().map(|&c| (c, true)).chain(ran).collect();
        let new: Vec<String> = settle
            .1
            .iter()
            .filter(|o| o.1)
            .map(|(c, _)| record_key(&format!("{c:?}")))
            .collect();
        record_passes(file.as_ref(), &passed, &new);
    }
    let mut outcome = lock(&checks.outcome);
    loop {
        let settled: Option<Vec<bool>> = what
            .iter()
            .map(|c| outcome.get(c).copied().flatten())
            .collect();
        if let Some(v) = settled {
            return v;
        }
        outcome = checks
            .settled
            .wait(outcome)
            .unwrap_or_else(|e| e.into_inner());
    }
}

thread_local! {
    /// The kind a running check forces (the check builds graphs itself).
    static FORCED: std::cell::Cell<Option<CoopConfig>> = const { std::cell::Cell::new(None) };
}

fn forced() -> Option<CoopConfig> {
    FORCED.with(|f| f.get())
}

/// Whether a check is running: its graphs take the cooperative kernels whatever their size.
pub(crate) fn checking() -> bool {
    forced().is_some()
}

/// The cooperative GEMM kernel fp16 GEMMs use on `device` under the default policy
/// (`"GemmCoop2"` or `"GemmCoop"`, as [`crate::Graph::kernels`] names them), if any; runs the checks on first call. For reports and
/// tests.
pub fn cooperative_gemm_kernel(device: &Device) -> Option<&'static str> {
    usable(device, &BuildOptions::default()).map(CoopConfig::kernel_name)
}

/// The implicit-GEMM kernel large fp16 conv2d of stride 1 run on `device` under the default
/// policy (`"ConvCoop2"`, or `"GemmCoop"` in its CONV mode), if the device runs one; runs the
/// checks (the kind's first, then the convolution's) on first call. For reports and tests.
pub fn cooperative_conv_kernel(device: &Device) -> Option<&'static str> {
    let options = BuildOptions::default();
    let config = usable(device, &options)?;
    let used: BTreeSet<Checked> = config.nv2_conv().map(Checked::Conv).into_iter().collect();
    let config = match without_failures(device, &options, config, &used) {
        Some(fewer) => fewer?,
        None => config,
    };
    config.implicit_conv_kernel()
}

/// One check problem: `[m, k] x [k, n]` (or linear with a `[n, k]` weight and a bias).
struct Problem {
    m: usize,
    n: usize,
    k: usize,
    linear: bool,
}

const PROBLEMS: &[Problem] = &[
    // A ragged K tail and a partial block on both sides, 16-byte loads.
    Problem {
        m: 136,
        n: 72,
        k: 48,
        linear: false,
    },
    // Linear: the weight read transposed, plus a bias.
    Problem {
        m: 40,
        n: 136,
        k: 64,
        linear: true,
    },
    // Rows not a multiple of 8 halves: the scalar load path.
    Problem {
        m: 33,
        n: 21,
        k: 45,
        linear: false,
    },
    // Whole blocks: the unclamped fast path, unrolled steps and their remainder, both layouts
    // of B.
    Problem {
        m: 256,
        n: 256,
        k: 320,
        linear: false,
    },
    Problem {
        m: 256,
        n: 256,
        k: 320,
        linear: true,
    },
    // One block and a deep K: split along K, fp32 partial sums, the bias added once.
    Problem {
        m: 64,
        n: 64,
        k: 1024,
        linear: true,
    },
];

/// The file beside the pipeline cache of `options` on `device` that names the checks passed
/// with this driver and these shaders (one per line), where the disk cache is on: a process
/// after the first runs none of them again.
pub(crate) fn records(device: &Device, options: &BuildOptions) -> Option<vk_core::RecordFile> {
    if options.pipeline_cache.is_some() {
        return None;
    }
    let shaders = crate::kernels::shader_set_hash();
    let file = options.disk_cache.file(device.capabilities(), shaders)?;
    Some(file.beside("checks-passed"))
}

/// Which check problems a record covers: changed whenever the checks change while the
/// shaders do not (the shader hash keys the file).
const CHECKS_VERSION: u32 = 1;

/// A check's line in the records file.
pub(crate) fn record_key(what: &str) -> String {
    format!("v{CHECKS_VERSION} {what}")
}

/// The checks `file` names as passed.
pub(crate) fn recorded_passes(file: Option<&vk_core::RecordFile>) -> BTreeSet<String> {
    file.map(|f| f.load().lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Adds the checks `new` to those `file` named (`before`), where any is new.
pub(crate) fn record_passes(
    file: Option<&vk_core::RecordFile>,
    before: &BTreeSet<String>,
    new: &[String],
) {
    let Some(file) = file else {
        return;
    };
    if new.iter().all(|n| before.contains(n)) {
        return;
    }
    // One writer of this process at a time (the attention's check runs beside the GEMMs');
    // another process may have added its own meanwhile.
    static RECORDING: Mutex<()> = Mutex::new(());
    let _one = lock(&RECORDING);
    let mut all = recorded_passes(Some(file));
    all.extend(new.iter().cloned());
    let text: String = all.iter().map(|l| format!("{l}\n")).collect();
    file.store(&text);
}

/// Runs the checks of `what` (for `config`) together and says which passed; logs each pass.
fn check(device: &Device, config: CoopConfig, what: &[Checked]) -> Vec<bool> {
    let jobs: Vec<(CoopConfig, Job)> = what
        .iter()
        .flat_map(|c| {
            let kind = c.forced(config);
            jobs_of(kind).into_iter().map(move |j| (kind, j))
        })
        .collect();
    let outcomes = run_jobs(device, &jobs);
    what.iter()
        .map(|c| {
            let kind = c.forced(config);
            let pass = jobs
                .iter()
                .zip(&outcomes)
                .filter(|((k, _), _)| *k == kind)
                .all(|(_, &ok)| ok);
            if pass {
                log::info!(
                    "cooperative-matrix {c:?} passed its check on '{}'",
                    device.capabilities().name
                );
            }
            pass
        })
        .collect()
}

/// One check of a kind: a GEMM problem, or the conv2d of a stride.
#[derive(Clone, Copy)]
enum Job {
    Gemm(&'static Problem),
    Conv(usize),
}

/// The checks of `kind`: every GEMM problem (none for the implicit-GEMM conv2d's kind, whose
/// GEMM tile is checked on its own), then the conv2d of stride 1 and 2.
fn jobs_of(kind: CoopConfig) -> Vec<Job> {
    let mut jobs: Vec<Job> = if kind.nv2_conv().is_some() {
        Vec::new()
    } else {
        PROBLEMS.iter().map(Job::Gemm).collect()
    };
    jobs.extend([Job::Conv(1), Job::Conv(2)]);
    jobs
}

/// Runs every job (its own graph, built and run with its kind forced) and says which passed,
/// each failure logged. The jobs run on up to 16 threads at once: drivers take seconds to
/// compile a cooperative-matrix pipeline (about 3 s each on an NVIDIA H200 with an empty
/// driver cache), and a check compiles a dozen or more.
fn run_jobs(device: &Device, jobs: &[(CoopConfig, Job)]) -> Vec<bool> {
    let run = |(kind, job): (CoopConfig, Job)| {
        /// Clears the forced kind however the job ends (a panic included).
        struct Unforce;
        impl Drop for Unforce {
            fn drop(&mut self) {
                FORCED.with(|f| f.set(None));
            }
        }
        let _unforce = Unforce;
        FORCED.with(|f| f.set(Some(kind)));
        match job {
            Job::Gemm(p) => {
                let what = format!("a {}x{}x{} check", p.m, p.n, p.k);
                passed(device, kind, "GEMM", &what, check_one(device, p, kind))
            }
            Job::Conv(stride) => {
                let what = format!("its stride-{stride} check");
                let outcome = check_conv(device, kind, stride);
                passed(device, kind, "conv2d", &what, outcome)
            }
        }
    };
    // A job whose thread panicked did not pass.
    crate::threads::each_on_threads(jobs.len(), |i| run(jobs[i]))
        .into_iter()
        .map(|ok| ok.unwrap_or(false))
        .collect()
}

/// Whether one check problem's `outcome` (the worst mismatch, if any) is a pass; logs a
/// warning naming the `kind` of product and the check otherwise.
fn passed(
    device: &Device,
    config: CoopConfig,
    kind: &str,
    check: &str,
    outcome: crate::Result<Option<String>>,
) -> bool {
    let name = &device.capabilities().name;
    match outcome {
        Ok(None) => true,
        Ok(Some(worst)) => {
            log::warn!(
                "cooperative-matrix {kind} {config:?} on '{name}' is wrong on {check} \
                 ({worst}); not using it"
            );
            false
        }
        Err(e) => {
            log::warn!(
                "cooperative-matrix {kind} {config:?} check on '{name}' failed ({e}); not using it"
            );
            false
        }
    }
}

/// The conv2d paths: a 3x3 convolution with padding and a bias per output channel, two
/// images; of stride 1 on the implicit GEMM where the device runs one (two blocks of output
/// channels, a ragged block of input channels, two columns of pixel patches), of stride 2
/// through the patch matrix.
fn check_conv(device: &Device, config: CoopConfig, stride: usize) -> crate::Result<Option<String>> {
    let (nb, cin, h, w, cout) = (2, 40, 9, 37, 72);
    let (oh, ow) = ((h - 1) / stride + 1, (w - 1) / stride + 1);
    let x = values(nb * cin * h * w, 7);
    let wt = values(cout * cin * 9, 8);
    let bias = values(cout, 9);
    let mut g = GraphBuilder::new();
    let xi = g.input("x", vk_core::DType::F16, &[nb, cin, h, w])?;
    let wi = g.constant("w", f16_tensor(vec![cout, cin, 3, 3], &wt)?)?;
    let bi = g.constant("b", f16_tensor(vec![cout], &bias)?)?;
    let p = crate::Conv2d {
        padding: [1, 1],
        stride: [stride, stride],
        ..crate::Conv2d::default()
    };
    let y = g.conv2d(xi, wi, Some(bi), p)?;
    g.output(y)?;
    let options = BuildOptions {
        cooperative: CoopPolicy::Unchecked,
        ..BuildOptions::default()
    };
    let mut graph = g.build_with(device, &options)?;
    let want = if stride == 1 {
        config.conv_kernel_name()
    } else {
        config.kernel_name()
    };
    if !graph.kernels().iter().any(|k| k == want) {
        return Ok(Some("the cooperative kernel was not chosen".into()));
    }
    let out = graph.execute(&[f16_tensor(vec![nb, cin, h, w], &x)?])?;
    let got = f16_values(&out[0]);
    for img in 0..nb {
        for co in 0..cout {
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut r = f64::from(bias[co]);
                    for ci in 0..cin {
                        for ky in 0..3 {
                            for kx in 0..3 {
                                // Coordinates in the padded input.
                                let (iy, ix) = (oy * stride + ky, ox * stride + kx);
                                if iy < 1 || ix < 1 || iy > h || ix > w {
                                    continue;
                                }
                                let xv = x[((img * cin + ci) * h + iy - 1) * w + ix - 1];
                                r += f64::from(xv)
                                    * f64::from(wt[(co * cin + ci) * 9 + ky * 3 + kx]);
                            }
                        }
                    }
                    let v = f64::from(got[((img * cout + co) * oh + oy) * ow + ox]);
                    if (v - r).abs() > 2e-3 + 2e-3 * r.abs() {
                        return Ok(Some(format!(
                            "[{img}][{co}][{oy}][{ox}] = {v}, expected {r}"
                        )));
                    }
                }
            }
        }
    }
    Ok(None)
}

pub(crate) fn f16_values(t: &HostTensor) -> Vec<f32> {
    t.bytes()
        .chunks_exact(2)
        .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect()
}

/// Deterministic values in [-1, 1), rounded to fp16.
pub(crate) fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            let v = (s >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0;
            half::f16::from_f32(v).to_f32()
        })
        .collect()
}

pub(crate) fn f16_tensor(shape: Vec<usize>, v: &[f32]) -> crate::Result<HostTensor> {
    let bytes: Vec<u8> = v
        .iter()
        .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
        .collect();
    HostTensor::new(vk_core::DType::F16, shape, bytes)
        .map_err(|e| crate::Error::Graph(format!("check input: {e}")))
}

/// `None` when the cooperative kernel matches the reference, else the worst element.
fn check_one(device: &Device, p: &Problem, config: CoopConfig) -> crate::Result<Option<String>> {
    let a = values(p.m * p.k, 1);
    let w = values(p.k * p.n, 2);
    let bias = values(p.n, 3);
    let mut g = GraphBuilder::new();
    let x = g.input("a", vk_core::DType::F16, &[p.m, p.k])?;
    let y = if p.linear {
        let wt = g.input("w", vk_core::DType::F16, &[p.n, p.k])?;
        let b = g.constant("bias", f16_tensor(vec![p.n], &bias)?)?;
        g.linear(x, wt, Some(b))?
    } else {
        let b = g.input("b", vk_core::DType::F16, &[p.k, p.n])?;
        g.matmul(x, b)?
    };
    g.output(y)?;
    let options = BuildOptions {
        cooperative: CoopPolicy::Unchecked,
        ..BuildOptions::default()
    };
    let mut graph = g.build_with(device, &options)?;
    if !graph.kernels().iter().any(|k| k == config.kernel_name()) {
        return Ok(Some("the cooperative kernel was not chosen".into()));
    }
    let shape_b = if p.linear {
        vec![p.n, p.k]
    } else {
        vec![p.k, p.n]
    };
    let inputs = [f16_tensor(vec![p.m, p.k], &a)?, f16_tensor(shape_b, &w)?];
    let out = graph.execute(&inputs)?;
    let got = f16_values(&out[0]);
    for i in 0..p.m {
        for j in 0..p.n {
            let mut r = 0f64;
            for kk in 0..p.k {
                let wv = if p.linear {
                    w[j * p.k + kk]
                } else {
                    w[kk * p.n + j]
                };
                r += f64::from(a[i * p.k + kk]) * f64::from(wv);
            }
            if p.linear {
                r += f64::from(bias[j]);
            }
            let v = f64::from(got[i * p.n + j]);
            // fp16 output rounding (2^-11 relative) plus accumulation-order noise.
            if (v - r).abs() > 2e-3 + 2e-3 * r.abs() {
                return Ok(Some(format!("[{i}][{j}] = {v}, expected {r}")));
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuning_values_are_parsed_strictly() {
        assert_eq!(
            parse_nv2("128, 128,256,32"),
            Some(Nv2Tile {
                bm: 128,
                bn: 256,
                bk: 32,
                threads: 128,
                unroll: 4,
            })
        );
        assert_eq!(parse_nv2("256,128,256,32,8").map(|t| t.unroll), Some(8));
        for bad in [
            "",
            "128,128,128",
            "128,x,128,128,32",
            "128,0,128,32",
            "128,128,128,8",
            "8,128,128,32",
            "128,128,128,32,0",
            "128,128,128,32,4,1",
        ] {
            assert_eq!(parse_nv2(bad), None, "{bad}");
        }
        let two = parse_nv2_tiles("256,128,256,32,16; 128,64,64,64,2").unwrap();
        assert_eq!(two[0].map(|t| (t.bm, t.bn, t.bk)), Some((128, 256, 32)));
        assert_eq!(
            two[1].map(|t| (t.bm, t.bn, t.bk, t.unroll)),
            Some((64, 64, 64, 2))
        );
        assert_eq!(two[2], None);
        assert!(parse_nv2_tiles("128,64,64,64").is_some());
        for bad in ["", "128,64,64,64;", "128,64,64,64;x", "1;2;3;4"] {
            assert_eq!(parse_nv2_tiles(bad), None, "{bad}");
        }
        let four = ["128,64,64,64"; 4].join(";");
        assert!(parse_nv2_tiles(&four).is_some_and(|t| t[3].is_some()));
        let five = ["128,64,64,64"; 5].join(";");
        assert_eq!(parse_nv2_tiles(&five), None);
    }

    #[test]
    fn products_take_the_largest_tile_that_fills_the_device() {
        let all = CoopConfig::Nv2 {
            tiles: NV2_TILES.map(Some),
            conv: None,
        };
        assert_eq!(all.nv2_tile(4096, 4096, 768, 1), Some(NV2_TILES[0]));
        assert_eq!(all.nv2_tile(64, 50176, 768, 1), Some(NV2_TILES[2]));
        assert_eq!(all.nv2_tile(96, 50176, 768, 1), Some(NV2_TILES[1]));
        // 80 rows would be 128 on 64-row tiles.
        assert_eq!(all.nv2_tile(80, 50176, 768, 1), Some(NV2_TILES[3]));
        assert_eq!(all.nv2_tile(320, 49, 768, 1), Some(NV2_TILES[3]));
        assert_eq!(all.nv2_tile(256, 256, 768, 16), Some(NV2_TILES[2]));
        assert_eq!(all.nv2_tile(512, 1024, 768, 16), Some(NV2_TILES[0]));
        // A ViT-B's products of 197 rows; a 512-token prompt's.
        assert_eq!(all.nv2_tile(197, 2304, 768, 1), Some(NV2_TILES[3]));
        assert_eq!(all.nv2_tile(512, 2048, 768, 1), Some(NV2_TILES[2]));
        // Deep products take larger tiles, split along K: llama.cpp's 512 x 4096 x 14336.
        assert_eq!(all.nv2_tile(512, 4096, 14336, 1), Some(NV2_TILES[0]));
        assert_eq!(all.nv2_tile(512, 2048, 4095, 1), Some(NV2_TILES[2]));
        let one = CoopConfig::Nv2 {
            tiles: [Some(NV2_TILES[1]), None, None, None],
            conv: None,
        };
        assert_eq!(one.nv2_tile(4096, 4096, 768, 1), Some(NV2_TILES[1]));
        assert_eq!(one.nv2_tile(8, 8, 768, 1), Some(NV2_TILES[1]));
        let khr = CoopConfig::Khr {
            tm: 16,
            tn: 16,
            tk: 16,
            threads: 128,
        };
        assert_eq!(khr.nv2_tile(4096, 4096, 768, 1), None);
    }

    #[test]
    fn a_failing_check_drops_its_tile_and_keeps_the_rest() {
        let all = CoopConfig::Nv2 {
            tiles: NV2_TILES.map(Some),
            conv: Some(NV2_CONV),
        };
        assert_eq!(Checked::first(all), Checked::Tile(NV2_TILES[3]));
        let Some(fewer) = all.without(&[Checked::Tile(NV2_TILES[1])]) else {
            panic!("three tiles are left");
        };
        let left: Vec<Nv2Tile> = fewer.nv2_tiles().collect();
        assert_eq!(left, [NV2_TILES[0], NV2_TILES[2], NV2_TILES[3]]);
        assert_eq!(fewer.nv2_conv(), Some(NV2_CONV));
        // A product that took the failed tile takes the next one.
        assert_eq!(fewer.nv2_tile(96, 50176, 768, 1), Some(NV2_TILES[2]));
        let no_conv = all.without(&[Checked::Conv(NV2_CONV)]);
        assert_eq!(no_conv.and_then(CoopConfig::nv2_conv), None);
        let every: Vec<Checked> = NV2_TILES.iter().map(|&t| Checked::Tile(t)).collect();
        assert_eq!(all.without(&every), None);
        let khr = CoopConfig::Khr {
            tm: 16,
            tn: 16,
            tk: 16,
            threads: 128,
        };
        assert_eq!(Checked::first(khr), Checked::Subgroup);
        assert_eq!(khr.without(&[Checked::Tile(NV2_TILES[0])]), Some(khr));
        assert_eq!(khr.without(&[Checked::Subgroup]), None);
        // The conv2d's check takes the smallest GEMM tile beside it.
        let conv = Checked::Conv(NV2_CONV).forced(all);
        assert_eq!(conv.nv2_tiles().collect::<Vec<_>>(), [NV2_TILES[3]]);
        assert_eq!(conv.nv2_conv(), Some(NV2_CONV));
    }

    #[test]
    fn fill_tuning_takes_one_count_or_a_depth_and_a_count_for_deep_products() {
        assert_eq!(parse_fill("128"), Some((128, usize::MAX, 128)));
        assert_eq!(parse_fill("256, 4096, 64"), Some((256, 4096, 64)));
        assert_eq!(parse_fill("256,4096"), None);
        assert_eq!(parse_fill("lots"), None);
    }

    #[test]
    fn the_subgroup_kernel_fits_its_shared_memory_in_48_kib_at_16x16() {
        let s = vk_core::CoopMatrixShape {
            m: 16,
            n: 16,
            k: 16,
            a: CoopComponent::F16,
            b: CoopComponent::F16,
            c: CoopComponent::F32,
            result: CoopComponent::F32,
            subgroup_scope: true,
        };
        assert!(khr_shared_bytes(&s) <= 48 * 1024);
    }
}
