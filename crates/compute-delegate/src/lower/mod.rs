//! Lowering: every node of a [`GraphBuilder`] becomes one or more dispatches of the op library,
//! each naming the storages it reads and writes. The driver sends each node to its family's
//! `record_<family>` (in `crate::ops`); this module holds the dispatch helpers, the strided
//! copy, the activation fusion, and the GEMM engine products and convolutions record through
//! (`gemm.rs`: tiling, split-K, `gemv.comp`; `coop.rs`: cooperative matrices).

mod coop;
mod epilogue;
mod gemm;

use vk_core::{DType, Limits};

use crate::coop::CoopConfig;
use crate::error::{Error, Result};
use crate::graph::{
    BinaryOp, GraphBuilder, Op, Storage, StorageKind, TensorId, TensorInfo, UnaryOp, storage_bytes,
};
use crate::kernels::{Kernel, Precision, Shader, push};
use crate::placement::Placement;
use epilogue::Epilogue;
pub(crate) use epilogue::claimed_by_products;

/// One compute dispatch.
#[derive(Debug, Clone)]
pub(crate) struct Dispatch {
    pub op: &'static str,
    pub node: usize,
    pub kernel: Shader,
    pub spec: Vec<u32>,
    /// `(storage, written)` per binding.
    pub bindings: Vec<(usize, bool)>,
    pub push: Vec<u32>,
    pub groups: [u32; 3],
    /// Each invocation reads exactly the elements it writes (vec4 elementwise kernels), so
    /// the output may take the buffer of an input that dies here.
    pub in_place: bool,
}

/// The lowered graph.
#[derive(Debug)]
pub(crate) struct Plan {
    pub storages: Vec<Storage>,
    pub dispatches: Vec<Dispatch>,
    /// Per storage: the storage it lies in and its byte offset there (`placement.rs`).
    pub within: Vec<Option<(usize, u64)>>,
    /// The cooperative kernels and tiles the dispatches run on, each to be checked on the
    /// device before the plan runs ([`crate::coop::without_failures`]).
    pub cooperative: std::collections::BTreeSet<crate::coop::Checked>,
}

/// A push-constant struct (`kernels::push`) as the words a dispatch pushes.
pub(crate) fn words<P: bytemuck::NoUninit>(push: &P) -> Vec<u32> {
    bytemuck::bytes_of(push)
        .chunks_exact(4)
        .map(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]))
        .collect()
}

pub(crate) fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

pub(crate) const MAX_RANK: usize = 6;

/// Rows shorter than this are reduced by one thread each, longer ones by a work group.
pub(crate) const ROW_KERNEL_MIN: usize = 64;
/// Work groups of a row kernel (each loops over rows when there are more).
pub(crate) const ROW_GROUPS: usize = 8192;

/// GEMMs with fewer output tiles than this are split along K ...
pub(crate) const SPLIT_BELOW_TILES: u64 = 264;
/// ... into about this many work groups.
pub(crate) const SPLIT_TARGET_TILES: u64 = 528;
/// `gemv.comp` runs products of at most this many rows ...
pub(crate) const GEMV_MAX_ROWS: usize = 4;
/// `gemv_t.comp` (a linear layer's `[n][k]` weights read as stored) runs products of at most
/// this many rows (on an H100, 4096 x 14336 weights: 55 us for 4 rows on it, 100 us for 5 and
/// 8 on the workgroup-scope GEMM).
pub(crate) const GEMV_T_MAX_ROWS: usize = 8;
/// ... over this many columns per work group ...
pub(crate) const GEMV_COLUMNS: u64 = 256;
/// ... and splits K no finer than this.
pub(crate) const GEMV_MIN_K_SPLIT: u64 = 64;
/// Packed 4-bit gated products of at least this many work groups (of 4 gated columns) run
/// `gemv_q4_teams.comp`; every other packed product runs `gemv_q4.comp`. Measured on an H200:
/// Llama-3.2-1B's gated product (2 x 8192 columns of 2048) took 21-22 us on the teams' layout
/// against 30-34 on `gemv_q4.comp`, while its 128256-column output matrix took 75-81 us on
/// `gemv_q4.comp` against 99 on the teams'.
pub(crate) const GEMV_Q4_TEAMS_FROM: u32 = 1024;

/// The shader a kernel node of `groups` work groups runs: its own; for a packed 4-bit
/// product the layout that suits its width; for attention over a cache its subgroup form
/// where the device has subgroup arithmetic (`subgroups`). Each pair takes the same bindings
/// and push block.
fn layout(kernel: Kernel, groups: u32, spec: &[u32], push: &[u32], subgroups: bool) -> Kernel {
    match kernel {
        Kernel::GemvQ4 => gemv_q4_layout(groups, spec, push),
        Kernel::AttendSplit if subgroups => Kernel::AttendSplitSg,
        Kernel::AttendCache if subgroups => Kernel::AttendCacheSg,
        k => k,
    }
}

/// Environment variable for tuning the packed 4-bit products' layout: `narrow`
/// (`gemv_q4.comp`) or `teams` (`gemv_q4_teams.comp`); unset or anything else, the default by
/// width.
pub const ENV_GEMV_Q4: &str = "VKDELEGATE_GEMV_Q4";

/// The packed 4-bit product's kernel for a node of `groups` work groups of 8 columns (4 gated
/// ones where its `GLU` is set): the teams' layout for wide gated products, else
/// `gemv_q4.comp`, which alone writes into a KV cache.
fn gemv_q4_layout(groups: u32, spec: &[u32], push: &[u32]) -> Kernel {
    use push::GemvQ4Push as P;
    let into_cache = push.get(std::mem::offset_of!(P, cache_rows) / 4) > Some(&0);
    if into_cache {
        return Kernel::GemvQ4;
    }
    let gated = spec.get(1) == Some(&1);
    match std::env::var(ENV_GEMV_Q4).as_deref() {
        Ok("narrow") => return Kernel::GemvQ4,
        Ok("teams") => return Kernel::GemvQ4Teams,
        _ => {}
    }
    if gated && groups >= GEMV_Q4_TEAMS_FROM {
        Kernel::GemvQ4Teams
    } else {
        Kernel::GemvQ4
    }
}

/// Environment variable for measuring `gemv_t.comp`'s 16-byte loads of f16 weights: `0`
/// reads them as 8-byte vec4s; unset or anything else, in 16-byte words where they fit.
pub const ENV_GEMV_WIDE: &str = "VKDELEGATE_GEMV_WIDE";

/// Environment variable for tuning `gemv_t.comp`'s lanes per column: `32`, `64` or `128`
/// (default 64, 32 from [`GEMV_T_NARROW_FROM`] columns).
pub const ENV_GEMV_T_LANES: &str = "VKDELEGATE_GEMV_T_LANES";

/// `gemv_t.comp` products this wide take 32 lanes a column, narrower ones 64: a language
/// model's output matrix keeps every lane of a wave busy with 8 words in flight (on an H200,
/// a 1B Llama's 128256 x 2048 in 128 us against 136 at 64 lanes; its narrower products were
/// slower at 32).
const GEMV_T_NARROW_FROM: u32 = 65536;

/// Environment variable for tuning `gemv_q4.comp`'s columns per work group: 2, 4, 8 or 16
/// (default: [`gemv_q4_default_columns`]).
pub const ENV_GEMV_Q4_COLUMNS: &str = "VKDELEGATE_GEMV_Q4_COLUMNS";

/// Products at least this wide take 8 columns a work group by default, narrower ones 4.
const GEMV_Q4_WIDE: u32 = 32768;

/// `gemv_q4.comp`'s default columns per work group for `n` columns: 4, so that a decoder
/// layer's products (512 to 8192 columns) spread over twice the work groups (on an H200, a
/// 2048x2048 product in a chain took 5.3 against 7.7 us, and a 1B model decoded 4% faster),
/// and 8 for a language model's output matrix (128256 columns: 79 against 90 us).
fn gemv_q4_default_columns(n: u32) -> u32 {
    if n >= GEMV_Q4_WIDE { 8 } else { 4 }
}

/// `gemv_q4.comp`'s columns per work group (its `COLS`) and lanes (within `shared` bytes of
/// shared memory), with the push block's count of column groups and the work groups to
/// match; other kernels as they are.
fn gemv_q4_columns(
    kernel: Kernel,
    spec: &[u32],
    push: &[u32],
    groups: u32,
    shared: u32,
) -> (Vec<u32>, Vec<u32>, u32) {
    let (mut spec, mut push) = (spec.to_vec(), push.to_vec());
    if kernel != Kernel::GemvQ4 {
        return (spec, push, groups);
    }
    use push::GemvQ4Push as P;
    let word = |field: usize| push.get(field / 4).copied().unwrap_or(0);
    let (n, k) = (
        word(std::mem::offset_of!(P, n)),
        word(std::mem::offset_of!(P, k)),
    );
    let cols = match std::env::var(ENV_GEMV_Q4_COLUMNS).as_deref() {
        Ok("2") => 2,
        Ok("4") => 4,
        Ok("8") => 8,
        Ok("16") => 16,
        _ => gemv_q4_default_columns(n),
    };
    if spec.is_empty() {
        spec.push(1);
    }
    spec.resize(5, 0);
    spec[3] = cols;
    spec[4] = gemv_q4_threads(k, cols, spec[0].max(1), shared);
    if cols == 8 {
        return (spec, push, groups);
    }
    let per = if spec.get(1) == Some(&1) {
        cols / 2
    } else {
        cols
    };
    let col_groups = n.div_ceil(per);
    if let Some(w) = push.get_mut(std::mem::offset_of!(P, col_groups) / 4) {
        *w = col_groups;
    }
    (spec, push, col_groups.clamp(1, 65535))
}

/// Environment variable for tuning `gemv_q4.comp`'s lanes per work group: 64, 128 or 256
/// (default: as many as a row's 16-byte words, within those).
pub const ENV_GEMV_Q4_THREADS: &str = "VKDELEGATE_GEMV_Q4_THREADS";

/// `gemv_q4.comp`'s lanes per work group for rows of `k` weights: enough that each lane reads
/// one 16-byte word of a row (32 weights), from 64 to 256, so that a deep product (a language
/// model's down projection, k 8192) is not walked in serial steps by few work groups; fewer
/// where the partial sums of `cols` columns and `rows` rows (a word a lane and output, plus
/// a row of sums of squares) would not fit in `shared` bytes, 64 at least.
fn gemv_q4_threads(k: u32, cols: u32, rows: u32, shared: u32) -> u32 {
    let wanted = match std::env::var(ENV_GEMV_Q4_THREADS).as_deref() {
        Ok("64") => 64,
        Ok("128") => 128,
        Ok("256") => 256,
        _ => (k / 32).next_power_of_two().clamp(64, 256),
    };
    let bytes = |t: u32| (cols * rows + rows) * (t + 1) * 4;
    let mut t = wanted;
    while t > 64 && bytes(t) > shared {
        t /= 2;
    }
    t
}

impl Lowerer<'_> {
    /// The scratch storages a kernel binds after its operands, each written: for a split
    /// attention, its shares' partial results (a temporary) and each query's count of shares
    /// done (zeros uploaded at build, which the kernel leaves as it found them).
    fn scratch(&mut self, kernel: Kernel, push: &[u32], tensor: TensorId) -> Vec<(usize, bool)> {
        if kernel != Kernel::AttendSplit {
            return Vec::new();
        }
        use push::AttendCachePush as P;
        let field = |at: usize| push.get(at / 4).map_or(0, |&w| w as usize);
        let groups = field(std::mem::offset_of!(P, groups));
        let chunks = field(std::mem::offset_of!(P, chunks));
        let d = field(std::mem::offset_of!(P, d));
        let parts = self.temp(tensor, groups * chunks * (d + 2));
        self.storages.push(Storage {
            kind: StorageKind::Const(vec![0u8; groups * 4].into()),
            bytes: storage_bytes(DType::I32, &[groups]),
            tensor,
        });
        vec![(parts, true), (self.storages.len() - 1, true)]
    }

    /// `gemv_t.comp`'s specialization constants `spec` for a node of push words `push`, with
    /// its `WIDE` (constant 4) set where the product is f16 and K and B's strides are
    /// multiples of 8, so that B is read in 16-byte words (unless [`ENV_GEMV_WIDE`] is `0`).
    pub(crate) fn gemv_t_spec(&self, spec: &[u32], push: &[u32]) -> Vec<u32> {
        use push::GemvTPush as P;
        let word = |field: usize| push.get(field / 4).copied().unwrap_or(1);
        let eights = [
            std::mem::offset_of!(P, k),
            std::mem::offset_of!(P, sb_b),
            std::mem::offset_of!(P, sb_n),
        ]
        .iter()
        .all(|&f| word(f) % 8 == 0);
        let off = std::env::var(ENV_GEMV_WIDE).as_deref() == Ok("0");
        let wide = self.precision == Precision::F16 && eights && !off;
        let lanes = match std::env::var(ENV_GEMV_T_LANES).as_deref() {
            Ok("32") => 32,
            Ok("64") => 64,
            Ok("128") => 128,
            _ if word(std::mem::offset_of!(P, n)) >= GEMV_T_NARROW_FROM => 32,
            _ => 64,
        };
        let mut spec = spec.to_vec();
        spec.resize(6, 0);
        spec[4] = u32::from(wide);
        spec[5] = lanes;
        spec
    }

    /// `gemv_t.comp`, or its subgroup form where the device has subgroup arithmetic with
    /// subgroups that split a column's lanes (`spec`'s constant 5) evenly.
    pub(crate) fn gemv_t_kernel(&self, spec: &[u32]) -> Kernel {
        let size = self.limits.subgroup_size;
        let lanes = spec.get(5).copied().unwrap_or(64);
        let wide = spec
            .first()
            .is_some_and(|&rows| rows as usize > GEMV_MAX_ROWS);
        match (
            self.subgroups && (1..=lanes).contains(&size) && lanes % size == 0,
            wide,
        ) {
            (true, false) => Kernel::GemvTSg,
            (true, true) => Kernel::GemvTSg8,
            (false, false) => Kernel::GemvT,
            (false, true) => Kernel::GemvT8,
        }
    }
}

/// Drops size-1 dims and merges adjacent dims that are contiguous in every stride set.
pub(crate) fn collapse(dims: &[usize], strides: &[Vec<usize>]) -> (Vec<usize>, Vec<Vec<usize>>) {
    let mut d: Vec<usize> = Vec::new();
    let mut s: Vec<Vec<usize>> = vec![Vec::new(); strides.len()];
    for i in 0..dims.len() {
        if dims[i] == 1 {
            continue;
        }
        let mergeable = !d.is_empty()
            && strides
                .iter()
                .zip(&s)
                .all(|(src, dst)| dst.last().copied() == Some(src[i] * dims[i]));
        if mergeable {
            if let Some(last) = d.last_mut() {
                *last *= dims[i];
            }
            for (src, dst) in strides.iter().zip(s.iter_mut()) {
                if let Some(last) = dst.last_mut() {
                    *last = src[i];
                }
            }
        } else {
            d.push(dims[i]);
            for (src, dst) in strides.iter().zip(s.iter_mut()) {
                dst.push(src[i]);
            }
        }
    }
    if d.is_empty() {
        d.push(1);
        for dst in &mut s {
            dst.push(0);
        }
    }
    (d, s)
}

/// Up to six sizes or strides as a push constant's `uint x[6]`, zero-padded.
pub(crate) fn rank6(v: &[usize]) -> [u32; MAX_RANK] {
    std::array::from_fn(|i| v.get(i).copied().unwrap_or(0) as u32)
}

/// The tensor a node writes: its id, the storage it goes to (that of a fused activation's
/// output when there is one), the fused clamp, and the tensor's info.
pub(crate) struct Target {
    pub(crate) out: TensorId,
    pub(crate) o: usize,
    pub(crate) act: Option<(f32, f32)>,
    pub(crate) info: TensorInfo,
}

pub(crate) struct Lowerer<'a> {
    pub(crate) b: &'a GraphBuilder,
    pub(crate) limits: &'a Limits,
    pub(crate) storages: Vec<Storage>,
    pub(crate) out: Vec<Dispatch>,
    pub(crate) node: usize,
    pub(crate) op: &'static str,
    /// The current node's epilogue (`epilogue.rs`), and whether a dispatch took it.
    pub(crate) epilogue: Option<Epilogue>,
    pub(crate) epilogue_taken: bool,
    /// Subgroup arithmetic is available in compute shaders.
    pub(crate) subgroups: bool,
    /// fp16 GEMMs run on cooperative matrices with this configuration.
    pub(crate) coop: Option<CoopConfig>,
    /// The cooperative kernels and tiles the dispatches so far run on.
    pub(crate) cooperative: std::collections::BTreeSet<crate::coop::Checked>,
    /// The current product's folded layer norm (`Op::Matmul`'s `norm`): the storage of its
    /// column sums and its epsilon, until a cooperative GEMM takes it.
    pub(crate) row_norm: Option<(usize, f32)>,
    /// The current node's precision: its float operands' dtype (kernels without an f16
    /// variant run as f32).
    pub(crate) precision: Precision,
    /// Where storages lie in others: a cat copies only the parts not already in place.
    pub(crate) placement: &'a Placement,
    /// The device is a CPU driver (lavapipe): layouts that spread few outputs over many
    /// lanes to fill a GPU do not pay there.
    pub(crate) cpu: bool,
    /// Who reads and writes each storage of the graph.
    pub(crate) uses: crate::fusion::Uses,
    /// Per storage: a split-K product's result whose summing pass the elementwise chain
    /// reading it does (`gemm.rs`'s `sum_partials`, `chain_partials`).
    pub(crate) deferred_sums: std::collections::HashMap<usize, gemm::DeferredSum>,
}

impl Lowerer<'_> {
    pub(crate) fn t(&self, id: TensorId) -> &TensorInfo {
        &self.b.tensors[id.0]
    }

    pub(crate) fn st(&self, id: TensorId) -> usize {
        self.b.tensors[id.0].storage
    }

    /// Work groups of 256 threads for a grid-stride loop over `n` items.
    pub(crate) fn linear_groups(&self, n: u64) -> u32 {
        let cap = self.limits.max_compute_work_group_count[0].min(65535);
        (n.div_ceil(256).max(1)).min(u64::from(cap)) as u32
    }

    pub(crate) fn check_groups(&self, groups: [u64; 3]) -> Result<[u32; 3]> {
        let mut g = [0u32; 3];
        for (i, &n) in groups.iter().enumerate() {
            let limit = self.limits.max_compute_work_group_count[i];
            if n > u64::from(limit) {
                return Err(Error::TooManyGroups {
                    op: self.op,
                    dim: i,
                    groups: n,
                    limit,
                });
            }
            g[i] = n.max(1) as u32;
        }
        Ok(g)
    }

    /// A dispatch of `kernel` in the current node's precision (a kernel without that variant
    /// fails the build with an internal error when its module is made).
    /// `push` is the kernel's push-constant struct (`kernels::push`, generated from its
    /// shader's block).
    pub(crate) fn push<P: bytemuck::NoUninit>(
        &mut self,
        kernel: Kernel,
        spec: Vec<u32>,
        bindings: Vec<(usize, bool)>,
        push: &P,
        groups: [u32; 3],
    ) {
        self.push_words(kernel, spec, bindings, words(push), groups);
    }

    /// A dispatch whose push constants are already words (a generic kernel node's).
    pub(crate) fn push_words(
        &mut self,
        kernel: Kernel,
        spec: Vec<u32>,
        bindings: Vec<(usize, bool)>,
        push: Vec<u32>,
        groups: [u32; 3],
    ) {
        self.out.push(Dispatch {
            op: self.op,
            node: self.node,
            kernel: Shader {
                kernel,
                precision: self.precision,
            },
            spec,
            bindings,
            push,
            groups,
            in_place: matches!(kernel, Kernel::Unary | Kernel::Binary),
        });
    }

    /// A temporary of `elements` sized as f32 (enough for either precision; fp16 GEMMs keep
    /// their split-K partials in f32).
    pub(crate) fn temp(&mut self, tensor: TensorId, elements: usize) -> usize {
        self.storages.push(Storage {
            kind: StorageKind::Temp,
            bytes: storage_bytes(DType::F32, &[elements]),
            tensor,
        });
        self.storages.len() - 1
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn copy(
        &mut self,
        src: usize,
        dst: usize,
        dims: &[usize],
        ss: Vec<usize>,
        ds: Vec<usize>,
        src_off: usize,
        dst_off: usize,
    ) -> Result<()> {
        let (d, s) = collapse(dims, &[ss, ds]);
        if d.len() > MAX_RANK {
            return Err(Error::Shape {
                op: self.op,
                detail: format!(
                    "{} dims remain after merging contiguous ones ({dims:?}); at most {MAX_RANK}",
                    d.len()
                ),
            });
        }
        let n: usize = dims.iter().product();
        let push = push::CopyPush {
            n: n as u32,
            rank: d.len() as u32,
            src_off: src_off as u32,
            dst_off: dst_off as u32,
            dims: rank6(&d),
            ss: rank6(&s[0]),
            ds: rank6(&s[1]),
        };
        let g = self.linear_groups(n as u64);
        self.push(
            Kernel::Copy,
            vec![],
            vec![(src, false), (dst, true)],
            &push,
            [g, 1, 1],
        );
        Ok(())
    }

    /// Where a cat copies part `x` from: the storage, strides and offset of the tensor that
    /// the permutes and slices making `x` copied, where there is one (`GraphBuilder::strided`),
    /// else `x` itself.
    pub(crate) fn cat_source(&self, x: TensorId) -> (usize, Vec<usize>, usize) {
        let xi = self.t(x);
        let s = self.b.strided(&self.uses, x, &mut Vec::new());
        if s.src != x && s.shape == xi.shape {
            (self.st(s.src), s.strides, s.off)
        } else {
            (xi.storage, contiguous_strides(&xi.shape), 0)
        }
    }

    /// Lowers one node through its op family's function (one file per family).
    pub(crate) fn lower_node(&mut self, op: &Op, out: TensorId) -> Result<()> {
        let t = Target {
            out,
            o: self.st(self.epilogue.map_or(out, |e| e.writes)),
            act: self.epilogue.and_then(|e| e.clamp()),
            info: self.t(out).clone(),
        };
        match op {
            Op::Unary { .. } | Op::Binary { .. } | Op::Where { .. } => {
                self.record_elementwise(op, &t)
            }
            Op::Softmax { .. } => self.record_softmax(op, &t),
            Op::Reduce { .. } => self.record_reduce(op, &t),
            Op::LayerNorm { .. } => self.record_norm(op, &t),
            Op::Pool { .. } => self.record_pool(op, &t),
            Op::Conv { .. } => self.record_conv(op, &t),
            Op::Matmul { .. } => self.matmul(op, &t),
            Op::Permute { .. } | Op::Cat { .. } | Op::Cast { .. } | Op::Slice { .. } => {
                self.record_shape(op, &t)
            }
            Op::Gather { .. } => self.record_index(op, &t),
            Op::QAdd { .. } | Op::QConv { .. } => self.record_quantized(op, &t),
            Op::Kernel {
                kernel,
                inputs,
                push,
                groups,
                spec,
                ..
            } => {
                // One invocation per output element (or the node's work groups), the operands
                // then the output bound.
                let mut bindings: Vec<(usize, bool)> =
                    inputs.iter().map(|&x| (self.st(x), false)).collect();
                bindings.extend(self.scratch(*kernel, push, t.out));
                bindings.push((t.o, true));
                let g = match groups {
                    Some(n) => (*n).clamp(1, 65535) as u32,
                    None => self.linear_groups(t.info.numel() as u64),
                };
                let (kernel, spec) = match layout(*kernel, g, spec, push, self.subgroups) {
                    Kernel::GemvT => {
                        let spec = self.gemv_t_spec(spec, push);
                        (self.gemv_t_kernel(&spec), spec)
                    }
                    k => (k, spec.clone()),
                };
                let shared = self.limits.max_compute_shared_memory_size;
                let (mut spec, mut push, g) = gemv_q4_columns(kernel, &spec, push, g, shared);
                if kernel == Kernel::Elementwise {
                    self.chain_partials(inputs, &mut spec, &mut push, &mut bindings)?;
                }
                self.push_words(kernel, spec, bindings, push, [g, 1, 1]);
                Ok(())
            }
            #[cfg(feature = "bench")]
            Op::FmaProbe { groups, iters } => {
                let g = self.check_groups([u64::from(*groups), 1, 1])?;
                self.push(
                    Kernel::FmaPeak,
                    vec![],
                    vec![(t.o, true)],
                    &push::FmaPeakPush {
                        iters: *iters,
                        a: 0.999,
                        b: 1e-3,
                    },
                    g,
                );
                Ok(())
            }
        }
    }

    /// A family's function was given another family's op.
    pub(crate) fn not_in_family(&self) -> Error {
        Error::Graph(format!(
            "internal: {} lowered by the wrong op family",
            self.op
        ))
    }
}

fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Unary { op, .. } => op.name(),
        Op::Binary { op, .. } => op.name(),
        Op::Softmax { log: false, .. } => "softmax",
        Op::Softmax { log: true, .. } => "log_softmax",
        Op::Pool { max: false, .. } => "avg_pool2d",
        Op::Pool { max: true, .. } => "max_pool2d",
        Op::Conv { .. } => "conv2d",
        Op::Matmul { linear: true, .. } => "linear",
        Op::Matmul { .. } => "matmul",
        Op::Reduce { mean: true, .. } => "mean",
        Op::Reduce { .. } => "sum",
        Op::LayerNorm { .. } => "layer_norm",
        Op::Permute { .. } => "permute",
        Op::Cat { .. } => "cat",
        Op::Slice { .. } => "slice",
        #[cfg(feature = "bench")]
        Op::FmaProbe { .. } => "fma_probe",
        Op::Cast { .. } => "cast",
        Op::Where { .. } => "where",
        Op::Gather { .. } => "embedding",
        Op::QAdd { .. } => "add_q8",
        Op::QConv { .. } => "conv2d_q8",
        Op::Kernel { name, .. } => name,
    }
}

/// A node's precision: its output's dtype (the float operands of an op share it), except for
/// casts, which convert through 32-bit words (`cast.comp` has one variant), and kernels that
/// name theirs.
fn node_precision(b: &GraphBuilder, op: &Op, out: TensorId) -> Precision {
    match op {
        Op::Cast { .. } => Precision::F32,
        Op::Kernel {
            precision: Some(p), ..
        } => Precision::of(*p),
        _ => Precision::of(b.tensors[out.0].dtype),
    }
}

/// Per node: a permute or slice whose result only the cats reading through it read, or other
/// such copies (each cat copies its part from the tensor the copies copied,
/// `Lowerer::cat_source`), so it needs no dispatch. A cat's parts placed in its storage by
/// their producers are not read.
fn copies_cats_read_through(
    b: &GraphBuilder,
    uses: &crate::fusion::Uses,
    placement: &Placement,
) -> Vec<bool> {
    let n = b.nodes.len();
    let mut gone = vec![false; n];
    // Per cat: the storages of the parts it reads through.
    let mut through: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (c, node) in b.nodes.iter().enumerate() {
        let Op::Cat { xs, dim } = &node.op else {
            continue;
        };
        if placement.placed[c] {
            continue;
        }
        let oi = &b.tensors[node.out.0];
        let ds = contiguous_strides(&oi.shape);
        let (root, at) = placement.root(oi.storage);
        let mut off = 0;
        for &x in xs {
            let xi = &b.tensors[x.0];
            let bytes = (off * ds[*dim] * oi.dtype.size()) as u64;
            off += xi.shape[*dim];
            if placement.root(xi.storage) == (root, at + bytes) {
                continue;
            }
            let mut absorbed = Vec::new();
            let s = b.strided(uses, x, &mut absorbed);
            if s.src == x || s.shape != xi.shape {
                continue;
            }
            through[c].push(xi.storage);
            for j in absorbed {
                let st = b.tensors[b.nodes[j].out.0].storage;
                gone[j] = matches!(b.storages[st].kind, StorageKind::Temp);
            }
        }
    }
    // Keep the copies something else reads: a graph output, a node that is not a cat reading
    // through them, or a copy kept.
    let output = |st: usize| b.outputs.iter().any(|t| b.tensors[t.0].storage == st);
    loop {
        let mut changed = false;
        for j in 0..n {
            if !gone[j] {
                continue;
            }
            let st = b.tensors[b.nodes[j].out.0].storage;
            let needed = output(st)
                || b.nodes.iter().enumerate().any(|(r, node)| {
                    let reads = node
                        .op
                        .inputs()
                        .iter()
                        .any(|t| b.tensors[t.0].storage == st);
                    reads && !gone[r] && !through[r].contains(&st)
                });
            if needed {
                gone[j] = false;
                changed = true;
            }
        }
        if !changed {
            return gone;
        }
    }
}

/// Lowers every node, in order.
#[cfg(test)]
pub(crate) fn lower(
    b: &GraphBuilder,
    limits: &Limits,
    subgroups: bool,
    coop: Option<CoopConfig>,
) -> Result<Plan> {
    let none = Placement::none(b.storages.len(), b.nodes.len());
    lower_placed(b, limits, (subgroups, false), coop, &none, true)
}

/// [`lower`], with the cats that `placement` lays out in place left without dispatches.
/// `(subgroups, cpu)`: the device has subgroup arithmetic; it is a CPU driver. Without
/// `epilogues` (a graph built unfused), products and convolutions fuse only the clamps after
/// them, and cats copy their parts as written.
pub(crate) fn lower_placed(
    b: &GraphBuilder,
    limits: &Limits,
    (subgroups, cpu): (bool, bool),
    coop: Option<CoopConfig>,
    placement: &Placement,
    epilogues: bool,
) -> Result<Plan> {
    let mut l = Lowerer {
        b,
        limits,
        coop,
        cooperative: std::collections::BTreeSet::new(),
        row_norm: None,
        storages: b.storages.clone(),
        out: Vec::new(),
        node: 0,
        op: "",
        epilogue: None,
        epilogue_taken: false,
        subgroups,
        precision: Precision::F32,
        placement,
        cpu,
        uses: crate::fusion::Uses::of(b),
        deferred_sums: std::collections::HashMap::new(),
    };
    let fusion = epilogue::fuse_epilogues(b, epilogues);
    let cat_read = match epilogues {
        true => copies_cats_read_through(b, &l.uses, placement),
        false => vec![false; b.nodes.len()],
    };
    for (i, node) in b.nodes.iter().enumerate() {
        if fusion.skip[i].is_some() || placement.placed[i] || cat_read[i] {
            continue;
        }
        l.node = i;
        l.op = op_name(&node.op);
        l.epilogue = fusion.epilogue[i];
        l.epilogue_taken = false;
        l.precision = node_precision(b, &node.op, node.out);
        l.lower_node(&node.op, node.out)?;
        l.finish_epilogue(l.st(fusion.epilogue[i].map_or(node.out, |e| e.writes)))?;
    }
    if !l.deferred_sums.is_empty() {
        return Err(Error::Graph(
            "internal: a split-K product's summing pass was left to a chain that never ran".into(),
        ));
    }
    let mut within = placement.within.clone();
    within.resize(l.storages.len(), None);
    Ok(Plan {
        storages: l.storages,
        dispatches: l.out,
        within,
        cooperative: l.cooperative,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collapse_merges_contiguous_dims_and_drops_ones() {
        let dims = [2, 1, 3, 4];
        let s = contiguous_strides(&dims);
        let (d, st) = collapse(&dims, &[s.clone(), s]);
        assert_eq!(d, vec![24]);
        assert_eq!(st, vec![vec![1], vec![1]]);
        // A broadcast operand keeps its dims apart.
        let (d, st) = collapse(&[2, 3, 4], &[vec![12, 4, 1], vec![0, 4, 1]]);
        assert_eq!(d, vec![2, 12]);
        assert_eq!(st, vec![vec![12, 1], vec![0, 1]]);
    }

    #[test]
    fn four_bit_products_take_the_lanes_their_shared_memory_allows() {
        // One 16-byte word of a row a lane, 64 to 256.
        assert_eq!(gemv_q4_threads(2048, 4, 1, 49152), 64);
        assert_eq!(gemv_q4_threads(4096, 4, 1, 49152), 128);
        assert_eq!(gemv_q4_threads(8192, 4, 1, 49152), 256);
        assert_eq!(gemv_q4_threads(65536, 4, 1, 49152), 256);
        // 8 columns of 4 rows at 256 lanes need 37008 bytes: 128 lanes on 32 KiB.
        assert_eq!(gemv_q4_threads(8192, 8, 4, 49152), 256);
        assert_eq!(gemv_q4_threads(8192, 8, 4, 32768), 128);
        assert_eq!(gemv_q4_threads(8192, 16, 4, 16384), 64);
    }

    fn limits() -> Limits {
        Limits {
            max_storage_buffer_range: u32::MAX,
            max_compute_work_group_count: [65535; 3],
            max_compute_work_group_size: [1024, 1024, 64],
            max_compute_work_group_invocations: 1024,
            max_compute_shared_memory_size: 32768,
            max_push_constants_size: 128,
            non_coherent_atom_size: 64,
            min_storage_buffer_offset_alignment: 16,
            timestamp_period_bits: 1f32.to_bits(),
            subgroup_size: 32,
            subgroup_size_range: [32, 32],
        }
    }

    #[test]
    fn f16_nodes_lower_to_f16_shaders_with_fp32_split_k_partials() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F16, &[8, 1024]).unwrap();
        let w = b.input("w", DType::F16, &[1024, 8]).unwrap();
        let y = b.matmul(x, w).unwrap();
        let y = b.relu(y).unwrap();
        let z = b.cast(y, DType::F32).unwrap();
        b.output(z).unwrap();
        let plan = lower(&b, &limits(), true, None).unwrap();
        let shaders: Vec<String> = plan
            .dispatches
            .iter()
            .map(|d| d.kernel.to_string())
            .collect();
        // The split GEMM writes fp32 partials (spec constant 9), summed and clamped in fp32 and
        // narrowed once in one pass (ACT on); then the graph's own cast.
        assert_eq!(shaders, ["Gemm_f16", "SplitSum_f16", "Cast"]);
        assert_eq!(plan.dispatches[1].spec, [1, 0]);
        assert_eq!(plan.dispatches[0].spec[9], 1);
        // The same graph in f32 keeps one precision throughout.
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, &[8, 1024]).unwrap();
        let w = b.input("w", DType::F32, &[1024, 8]).unwrap();
        let y = b.matmul(x, w).unwrap();
        b.output(y).unwrap();
        let plan = lower(&b, &limits(), true, None).unwrap();
        let shaders: Vec<String> = plan
            .dispatches
            .iter()
            .map(|d| d.kernel.to_string())
            .collect();
        assert_eq!(shaders, ["Gemm", "SplitSum"]);
        assert_eq!(plan.dispatches[0].spec[9], 0);
    }

    #[test]
    fn products_with_large_outputs_split_along_k_twice_as_deep() {
        let product = |m: usize, k: usize, n: usize| {
            let mut b = GraphBuilder::new();
            let x = b.input("x", DType::F32, &[m, k]).unwrap();
            let w = b.input("w", DType::F32, &[k, n]).unwrap();
            let y = b.matmul(x, w).unwrap();
            b.output(y).unwrap();
            lower(&b, &limits(), true, None).unwrap()
        };
        // Swin-T's first MLP: 3136 x 384 outputs of a 96-deep sum are not split at all; 3136 x
        // 96 outputs of a 384-deep sum six ways (64 deep), not twelve.
        assert_eq!(shaders(&product(3136, 96, 384)), ["Gemm"]);
        let plan = product(3136, 384, 96);
        assert_eq!(shaders(&plan), ["Gemm", "SplitSum"]);
        assert_eq!(plan.dispatches[0].groups[2], 6);
        // A late CNN layer's few outputs split 32 deep.
        let plan = product(49, 320, 160);
        assert_eq!(shaders(&plan), ["Gemm", "SplitSum"]);
        assert_eq!(plan.dispatches[0].groups[2], 10);
    }

    #[test]
    fn few_row_products_lower_to_the_gemv_kernel_split_along_k() {
        for (dtype, sum) in [
            (DType::F32, vec!["Gemv", "SplitSum"]),
            (DType::F16, vec!["Gemv_f16", "SplitSum_f16"]),
        ] {
            let mut b = GraphBuilder::new();
            let x = b.input("x", dtype, &[1, 4096]).unwrap();
            let w = b.input("w", dtype, &[4096, 4096]).unwrap();
            let y = b.matmul(x, w).unwrap();
            b.output(y).unwrap();
            let plan = lower(&b, &limits(), true, None).unwrap();
            assert_eq!(shaders(&plan), sum);
            // 16 column groups; K split into 32 splits of 128 rows.
            assert_eq!(plan.dispatches[0].groups, [16, 32, 1]);
            assert_eq!(plan.dispatches[0].spec, [1, 0, 1]);
        }
        // Five rows, or columns not in vec4s, take the tiled kernel.
        for (m, n) in [(5, 64), (1, 63)] {
            let mut b = GraphBuilder::new();
            let x = b.input("x", DType::F32, &[m, 64]).unwrap();
            let w = b.input("w", DType::F32, &[64, n]).unwrap();
            let y = b.matmul(x, w).unwrap();
            b.output(y).unwrap();
            let plan = lower(&b, &limits(), true, None).unwrap();
            assert_eq!(shaders(&plan), ["Gemm"], "{m}x{n}");
        }
    }

    const NV2: CoopConfig = CoopConfig::Nv2 {
        tiles: [
            Some(crate::coop::Nv2Tile {
                bm: 128,
                bn: 128,
                bk: 32,
                threads: 128,
                unroll: 4,
            }),
            None,
            None,
            None,
        ],
        conv: Some(crate::coop::Nv2Tile {
            bm: 128,
            bn: 64,
            bk: 32,
            threads: 128,
            unroll: 1,
        }),
    };

    fn shaders(plan: &Plan) -> Vec<String> {
        plan.dispatches
            .iter()
            .map(|d| d.kernel.to_string())
            .collect()
    }

    #[test]
    fn fp16_products_lower_to_the_cooperative_kernel_and_fp32_ones_do_not() {
        let gemm = |dtype| {
            let mut b = GraphBuilder::new();
            let x = b.input("x", dtype, &[300, 200]).unwrap();
            let w = b.input("w", dtype, &[200, 72]).unwrap();
            let y = b.matmul(x, w).unwrap();
            b.output(y).unwrap();
            lower(&b, &limits(), true, Some(NV2)).unwrap()
        };
        let plan = gemm(DType::F16);
        assert_eq!(shaders(&plan), ["GemmCoop2"]);
        let d = &plan.dispatches[0];
        // Spec: threads, bm, bn, bk, B transposed, activation, bias per row, unrolled steps,
        // split, residual.
        assert_eq!(d.spec, [128, 128, 128, 32, 0, 0, 0, 4, 0, 0]);
        assert_eq!(d.groups, [1, 3, 1]);
        // Push: m, n, k, strides of A (batch, row), B (batch, row), C (batch, row), bias.
        assert_eq!(&d.push[..10], &[300, 72, 200, 0, 200, 0, 72, 21600, 72, 0]);
        // The plan names the tile, to be checked on the device before it runs.
        let tile = NV2.nv2_tiles().find(|t| t.bm == 128 && t.bn == 128);
        let used: Vec<_> = plan.cooperative.iter().copied().collect();
        assert_eq!(
            used,
            tile.map(crate::coop::Checked::Tile)
                .into_iter()
                .collect::<Vec<_>>()
        );
        // The plain kernel, split along K (300 x 72 is three tiles) and summed.
        let plain = gemm(DType::F32);
        assert_eq!(shaders(&plain), ["Gemm", "SplitSum"]);
        assert!(plain.cooperative.is_empty());
    }

    #[test]
    fn fp16_convolutions_go_through_a_patch_matrix_with_a_bias_per_channel() {
        let deep = |k: usize, cin: usize, limits: &Limits| {
            let mut b = GraphBuilder::new();
            let x = b.input("x", DType::F16, &[2, cin, 10, 12]).unwrap();
            let w = b.input("w", DType::F16, &[16, cin, k, k]).unwrap();
            let bias = b.input("b", DType::F16, &[16]).unwrap();
            let p = crate::Conv2d {
                padding: [k / 2, k / 2],
                ..crate::Conv2d::default()
            };
            let y = b.conv2d(x, w, Some(bias), p).unwrap();
            b.output(y).unwrap();
            lower(&b, limits, true, Some(NV2)).unwrap()
        };
        let conv = |k: usize, limits: &Limits| deep(k, 8, limits);
        let plan = conv(3, &limits());
        assert_eq!(shaders(&plan), ["Im2col_f16", "GemmCoop2"]);
        let g = &plan.dispatches[1];
        assert_eq!(g.spec[6], 1, "bias per output channel");
        // One GEMM per image: M = 16 channels, N = 120 pixels, K = 72, batch 2.
        assert_eq!(&g.push[..3], &[16, 120, 72]);
        assert_eq!(g.groups[2], 2);
        // 1x1: the input itself is B, no patch matrix (deep: split along K).
        assert_eq!(
            shaders(&deep(1, 512, &limits())),
            ["GemmCoop2", "SplitSum_f16"]
        );
        assert_eq!(shaders(&conv(1, &limits())), ["GemmCoop2"]);
        // A patch matrix beyond one binding's range: the implicit GEMM instead.
        let small = Limits {
            max_storage_buffer_range: 4096,
            ..limits()
        };
        assert_eq!(shaders(&conv(3, &small)), ["Gemm_f16"]);
    }

    #[test]
    fn large_fp16_convolutions_of_stride_1_are_implicit_gemms() {
        let conv = |shape: [usize; 4], stride: usize| {
            let mut b = GraphBuilder::new();
            let x = b.input("x", DType::F16, &shape).unwrap();
            let w = b.input("w", DType::F16, &[96, shape[1], 3, 3]).unwrap();
            let p = crate::Conv2d {
                padding: [1, 1],
                stride: [stride, stride],
                ..crate::Conv2d::default()
            };
            let y = b.conv2d(x, w, None, p).unwrap();
            let y = b.relu(y).unwrap();
            b.output(y).unwrap();
            lower(&b, &limits(), true, Some(NV2)).unwrap()
        };
        let plan = conv([2, 64, 112, 100], 1);
        assert_eq!(shaders(&plan), ["ConvPack", "ConvCoop2"]);
        // Packed: 2 images of 114 x 106 pixels of 64 channels, 9 taps of 64 x 128 weights.
        let pack = &plan.dispatches[0].push;
        assert_eq!(pack[..11], [64, 112, 100, 64, 114, 106, 1, 1, 96, 128, 9]);
        assert_eq!(pack[11..], [2 * 114 * 106 * 8, 9 * 64 * 16, 0]);
        let d = &plan.dispatches[1];
        // Spec: threads, bm, bn, patch width and height, bk, activation (the clamp), residual.
        assert_eq!(d.spec, [128, 128, 64, 8, 16, 32, 1, 0]);
        // Patches of 8 x 16 pixels: 13 x 7 of them, two blocks of channels, two images.
        assert_eq!(d.groups, [91, 2, 2]);
        assert_eq!(
            d.push[..13],
            [2, 64, 114, 106, 128, 96, 112, 100, 3, 3, 1, 1, 0]
        );
        assert_eq!(d.push[15], 13);
        // Too few blocks to fill the device, or stride 2: a patch matrix (and a split K).
        for (shape, stride) in [([1, 64, 16, 16], 1), ([2, 64, 112, 100], 2)] {
            let plan = shaders(&conv(shape, stride));
            assert_eq!(plan, ["Im2col_f16", "GemmCoop2", "SplitSum_f16"]);
        }
    }

    #[test]
    fn cooperative_gemms_read_a_linears_constant_weights_as_stored() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F16, &[300, 200]).unwrap();
        let w = b
            .constant_f16("w", &[72, 200], &vec![0.5; 72 * 200])
            .unwrap();
        let y = b.linear(x, w, None).unwrap();
        b.output(y).unwrap();
        let plan = lower(&b, &limits(), true, Some(NV2)).unwrap();
        assert_eq!(shaders(&plan), ["GemmCoop2"]);
        let d = &plan.dispatches[0];
        assert_eq!(d.spec[4], 1, "B read through a transposing load");
        // No transposed copy: one constant, the weights as stored.
        let consts = |p: &Plan| {
            p.storages
                .iter()
                .filter(|s| matches!(s.kind, StorageKind::Const(_)))
                .count()
        };
        assert_eq!(consts(&plan), 1);
        assert_eq!(consts(&lower(&b, &limits(), true, None).unwrap()), 2);
    }

    #[test]
    fn workgroup_scope_kernels_apply_residuals_and_activations() {
        // A linear, a residual add and a GELU: one GEMM.
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F16, &[300, 200]).unwrap();
        let w = b.input("w", DType::F16, &[200, 72]).unwrap();
        let r = b.input("r", DType::F16, &[300, 72]).unwrap();
        let y = b.matmul(x, w).unwrap();
        let y = b.add(y, r).unwrap();
        let y = b.gelu(y, false).unwrap();
        b.output(y).unwrap();
        let plan = lower(&b, &limits(), true, Some(NV2)).unwrap();
        assert_eq!(shaders(&plan), ["GemmCoop2"]);
        let d = &plan.dispatches[0];
        assert_eq!((d.spec[5], d.spec[8], d.spec[9]), (2, 0, 1), "GELU, added");
        assert_eq!(d.bindings.len(), 5);
        // A convolution, a residual add and a relu: one implicit GEMM after the packing.
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F16, &[2, 64, 112, 100]).unwrap();
        let w = b.input("w", DType::F16, &[64, 64, 3, 3]).unwrap();
        let p = crate::Conv2d {
            padding: [1, 1],
            ..crate::Conv2d::default()
        };
        let y = b.conv2d(x, w, None, p).unwrap();
        let y = b.add(y, x).unwrap();
        let y = b.relu(y).unwrap();
        b.output(y).unwrap();
        let plan = lower(&b, &limits(), true, Some(NV2)).unwrap();
        assert_eq!(shaders(&plan), ["ConvPack", "ConvCoop2"]);
        let d = &plan.dispatches[1];
        assert_eq!((d.spec[6], d.spec[7]), (1, 1), "clamp, added");
        assert_eq!(d.bindings.len(), 5);
    }

    #[test]
    fn on_subgroup_scope_matrices_convolutions_of_stride_1_are_implicit_gemms() {
        let khr = CoopConfig::Khr {
            tm: 16,
            tn: 16,
            tk: 16,
            threads: 128,
        };
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F16, &[2, 20, 112, 100]).unwrap();
        let w = b.input("w", DType::F16, &[96, 20, 3, 3]).unwrap();
        let bias = b.input("b", DType::F16, &[96]).unwrap();
        let p = crate::Conv2d {
            padding: [1, 1],
            ..crate::Conv2d::default()
        };
        let y = b.conv2d(x, w, Some(bias), p).unwrap();
        b.output(y).unwrap();
        let plan = lower(&b, &limits(), true, Some(khr)).unwrap();
        assert_eq!(shaders(&plan), ["ConvPack", "GemmCoop"]);
        // Packed: 2 images of 114 x 102 pixels of 24 channels; weights [96][9][24].
        let pack = &plan.dispatches[0].push;
        assert_eq!(pack[3..6], [24, 114, 102]);
        assert_eq!(pack[11..], [2 * 114 * 102 * 3, 96 * 9 * 3, 1]);
        let d = &plan.dispatches[1];
        // Spec: threads, fragment, B transposed, 16-byte loads, clamp, bias per row, CONV,
        // the block (128 x 128), no residual.
        assert_eq!(d.spec, [128, 16, 16, 16, 1, 1, 0, 1, 1, 128, 128, 0]);
        // 11200 pixels in 88 blocks of 128, one block of channels, two images.
        assert_eq!(d.groups, [88, 1, 2]);
        // M, N, K, then the strides of A, B and C, the bias, and the CONV parameters.
        assert_eq!(d.push[..3], [96, 11200, 216]);
        assert_eq!(d.push[12..], [24, 102, 100, 3, 1, 1]);
    }

    #[test]
    fn strides_are_row_major() {
        assert_eq!(contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(contiguous_strides(&[5]), vec![1]);
    }
}
