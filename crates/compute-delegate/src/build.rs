//! Building a graph on a device, as a sequence of steps: check the device, lower the nodes,
//! plan memory, allocate buffers (binding external slices), upload weights, create pipelines,
//! write descriptors, record the command buffers.

use std::collections::BTreeMap;

use vk_core::{
    Buffer, BufferSlice, Device, DeviceTensor, HostIo, HostPath, HostTransfer, MemoryLocation,
    Submission, TensorSpec, Timestamps, VkResultExt, vk,
};

use crate::constants::Pooled;
use crate::error::{Error, Result};
use crate::graph::{GraphBuilder, Op, Storage, StorageKind, TensorId};
use crate::lower::{Dispatch, Plan, lower_placed};
use crate::options::BuildOptions;
use crate::pipelines::Layout;
use crate::placement::{Placement, root_in};
use crate::runtime::{
    Graph, Io, MemoryReport, Objects, Recorded, check_binding, cmd, internal, staging_buffer,
};

/// Usage of every graph buffer.
pub(crate) const USAGE: vk::BufferUsageFlags = vk::BufferUsageFlags::from_raw(
    vk::BufferUsageFlags::STORAGE_BUFFER.as_raw()
        | vk::BufferUsageFlags::TRANSFER_SRC.as_raw()
        | vk::BufferUsageFlags::TRANSFER_DST.as_raw(),
);

impl GraphBuilder {
    /// Builds the graph on `device` (which must meet [`GraphBuilder::requirements`]: a graph
    /// that computes in f16 fails with [`vk_core::Error::Unsupported`] naming the missing
    /// features on a device without them).
    pub fn build(&self, device: &Device) -> Result<Graph> {
        self.build_with(device, &BuildOptions::default())
    }

    /// Builds the graph with options.
    pub fn build_with(&self, device: &Device, options: &BuildOptions) -> Result<Graph> {
        if self.outputs.is_empty() {
            return Err(Error::Graph("the graph has no outputs".into()));
        }
        device.check(&self.requirements())?;
        check_work_groups(device)?;
        let range = u64::from(device.capabilities().limits.max_storage_buffer_range);
        let limit = options.max_binding_bytes.map_or(range, |m| m.min(range));
        if let Some(cut) = self.with_constants_within(limit) {
            return cut.build_with(device, options);
        }
        if let Some(live) = self.without_dead_temps() {
            return live.build_with(device, options);
        }
        if let Some(folded) = (!options.unfolded)
            .then(|| self.with_constants_folded(device, options))
            .flatten()
        {
            return folded.build_with(device, options);
        }
        if self.has_unpacked_f32_products()
            && crate::supports_f16(device)
            && crate::packed::in_f16(options.packed_products_in_f16, || {
                crate::coop::usable(device, options).is_some()
            })
        {
            if let Some(f16) = self.with_unpacked_products_in_f16() {
                return f16.build_with(device, options);
            }
        }
        if let Some(merged) = self.with_common_nodes_merged() {
            return merged.build_with(device, options);
        }
        if let Some(fused) = self.with_silu_fused() {
            return fused.build_with(device, options);
        }
        if let Some(fewer) = self.with_round_trip_casts_removed() {
            return fewer.build_with(device, options);
        }
        if let Some(fewer) = options
            .fuses()
            .then(|| {
                self.with_integer_round_trips_removed()
                    .or_else(|| self.with_zero_point_shifts_folded())
            })
            .flatten()
        {
            return fewer.build_with(device, options);
        }
        if let Some(fewer) = self.with_elementwise_kept_in_f16() {
            return fewer.build_with(device, options);
        }
        if let Some(fewer) = self.with_arg_extremes_of_f16() {
            return fewer.build_with(device, options);
        }
        // A CPU driver (lavapipe): layouts that spread work over many lanes do not pay there
        // (the split int8 convolutions).
        let cpu_driver = device.capabilities().device_type == vk_core::DeviceType::Cpu;
        let cpu = cpu_driver && !options.gpu_layouts;
        if options.fuses() {
            let shared = device.capabilities().limits.max_compute_shared_memory_size;
            // Long fp16 attentions go straight onto the matrix kernel (its check runs only
            // where the graph has one).
            let tile = std::cell::OnceCell::new();
            let long = |g: &GraphBuilder, op: &Op| {
                let tile = *tile.get_or_init(|| {
                    let coop = crate::coop::usable(device, options);
                    crate::coop_attention::usable(device, options, coop)
                });
                g.attention_on_matrices(op, device, tile?)
            };
            let fused = self.with_attention_fused(shared, &long);
            let fused = fused
                .or_else(|| self.with_prompt_attention_blocked(shared))
                .or_else(|| self.with_gated_products_fused())
                .or_else(|| {
                    crate::layout::products_channels_first()
                        .then(|| {
                            self.with_products_written_channels_first(|| {
                                cpu_driver || crate::coop::usable(device, options).is_some()
                            })
                        })
                        .flatten()
                })
                .or_else(|| self.with_channel_scales_folded())
                .or_else(|| {
                    self.with_norms_folded_into_products(|| {
                        crate::fold::norms_into_products()
                            && !options.unfolded
                            && matches!(
                                crate::coop::usable(device, options),
                                Some(crate::coop::CoopConfig::Nv2 { .. })
                            )
                    })
                })
                .or_else(|| self.with_residuals_fused())
                .or_else(|| self.with_norms_fused())
                .or_else(|| self.with_rotations_fused())
                .or_else(|| self.with_cache_writes_fused())
                .or_else(|| self.with_layout_permutes_as_views())
                .or_else(|| {
                    crate::ops::depthwise_outputs_channels_last()
                        .then(|| self.with_depthwise_outputs_channels_last())
                        .flatten()
                })
                .or_else(|| {
                    options
                        .channel_norms_read_through
                        .then(|| self.with_channel_norms_read_through())
                        .flatten()
                })
                .or_else(|| self.with_elementwise_chains_fused());
            if let Some(fused) = fused {
                return fused.build_with(device, options);
            }
        }
        let started = std::time::Instant::now();
        let subgroups = !options.disable_subgroups && subgroup_arithmetic(device);
        let coop = if self.has_f16_gemm() || self.has_f16_attention() {
            // The attention's check (a slow compile) runs beside the GEMMs'.
            let ahead = options.fuses() && self.has_f16_attention();
            std::thread::scope(|s| {
                if ahead {
                    s.spawn(|| crate::coop_attention::check_ahead(device, options));
                }
                crate::coop::usable(device, options)
            })
        } else {
            None
        };
        if let Some(on) = (options.fuses() && self.has_f16_attention())
            .then(|| crate::coop_attention::usable(device, options, coop))
            .flatten()
            .and_then(|tile| self.with_attention_on_matrices(device, tile))
        {
            return on.build_with(device, options);
        }
        let limits = &device.capabilities().limits;
        let placement = match options.fuses() && concats_in_place() {
            true => self.concats_in_place(limits.min_storage_buffer_offset_alignment.max(16)),
            false => Placement::none(self.storages.len(), self.nodes.len()),
        };
        let epilogues = options.fuses();
        let lowered =
            |coop| lower_placed(self, limits, (subgroups, cpu), coop, &placement, epilogues);
        let mut plan = lowered(coop)?;
        // Each cooperative tile is checked on the device the first time a plan runs on it; a
        // plan that took a failing one is lowered again without it.
        let mut coop = coop;
        while let Some(fewer) =
            coop.and_then(|c| crate::coop::without_failures(device, options, c, &plan.cooperative))
        {
            if fewer == coop {
                break;
            }
            coop = fewer;
            plan = lowered(coop)?;
        }
        if scheduling() {
            let extent = |s: usize| storage_extent(&plan.storages, &plan.within, s);
            let order = scheduled(std::mem::take(&mut plan.dispatches), &extent);
            plan.dispatches = order;
        }
        self.check_sizes(&plan, limit)?;
        for (i, x) in plan.dispatches.iter().enumerate() {
            log::debug!(
                "dispatch {i}: {} (node {}) {:?} spec {:?} groups {:?}",
                x.op,
                x.node,
                x.kernel,
                x.spec,
                x.groups
            );
        }
        let lowered_at = started.elapsed();
        let mem = plan_memory(&plan.storages, &plan.dispatches, &plan.within);
        // The pipelines are made (compiled, or taken from the caches) on a thread of their own
        // while the memory is allocated and the weights uploaded.
        let mut objects = Objects::new(device);
        let (made, placed) = std::thread::scope(|s| {
            let making = s.spawn(|| {
                let made = crate::pipelines::create_pipelines(&mut objects, &plan, options);
                (made, started.elapsed())
            });
            let placed = self.place(device, options, &plan, &mem);
            let placed = (placed, started.elapsed());
            let made = making
                .join()
                .unwrap_or_else(|e| std::panic::resume_unwind(e));
            (made, placed)
        });
        let ((pipelines, compiled_at), (placed, uploaded_at)) = (made, placed);
        let pipelines = pipelines?;
        let Placed {
            submission,
            transfer,
            pooled,
            res,
            inputs,
            outputs,
            direct,
        } = placed?;
        let sets = allocate_sets(&mut objects, &plan, &pipelines)?;
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        log::debug!(
            "compute graph of {} dispatches: checks and lowering {:.1} ms, then at once memory \
             and weights {:.1} ms and pipelines {:.1} ms",
            plan.dispatches.len(),
            ms(lowered_at),
            ms(uploaded_at - lowered_at),
            ms(compiled_at - lowered_at)
        );

        let buffer_of = |s: usize| mem.slot_of[s].unwrap_or(usize::MAX);
        let barrier_flags = barriers(&plan.dispatches, &|s| mem.extent(&plan.storages, s));
        let recorded: Vec<Recorded> = plan
            .dispatches
            .iter()
            .zip(pipelines)
            .zip(sets)
            .zip(&barrier_flags)
            .map(
                |(((x, (pipeline, (_, layout))), set), &barrier_before)| Recorded {
                    op: x.op,
                    kernel: x.kernel,
                    pipeline,
                    layout,
                    set,
                    slots: x.bindings.iter().map(|&(s, _)| buffer_of(s)).collect(),
                    push: x.push.iter().flat_map(|v| v.to_ne_bytes()).collect(),
                    groups: x.groups,
                    barrier_before,
                    shape: self
                        .nodes
                        .get(x.node)
                        .map(|n| self.tensors[n.out.0].shape.clone())
                        .unwrap_or_default(),
                },
            )
            .collect();
        let input_specs = self.specs(&self.inputs);
        let output_specs = self.specs(&self.outputs);
        let device_tensors = |specs: &[TensorSpec], io: &[Io]| -> Vec<DeviceTensor> {
            specs
                .iter()
                .zip(io)
                .map(|(spec, io)| DeviceTensor {
                    spec: spec.clone(),
                    slice: res.slots[io.slot],
                })
                .collect()
        };
        let device_inputs = device_tensors(&input_specs, &inputs);
        let device_outputs = device_tensors(&output_specs, &outputs);
        let mut graph = Graph {
            submission,
            transfer,
            timestamps: match options.embedded {
                true => None,
                false => Timestamps::new(device, 2)?,
            },
            objects,
            buffers: res.buffers,
            _pooled: pooled.keep,
            slots: res.slots,
            recorded,
            inputs,
            outputs,
            input_specs,
            output_specs,
            device_inputs,
            device_outputs,
            memory: res.report,
            staging: !direct,
            last_device_time: None,
            barriers: barrier_flags.iter().filter(|&&b| b).count(),
            timed: false,
            embedded: options.embedded,
        };
        graph.write_descriptors(None);
        graph.record_all()?;
        log::debug!(
            "compute graph built in {:.1} ms",
            started.elapsed().as_secs_f64() * 1e3
        );
        Ok(graph)
    }

    /// Names, dtypes and shapes of the declared inputs, in order (no device needed).
    pub fn input_specs(&self) -> Vec<TensorSpec> {
        self.specs(&self.inputs)
    }

    /// Names, dtypes and shapes of the declared outputs, in order (no device needed): what
    /// the built graph's [`Graph::outputs`] will be.
    pub fn output_specs(&self) -> Vec<TensorSpec> {
        self.specs(&self.outputs)
    }

    fn specs(&self, list: &[TensorId]) -> Vec<TensorSpec> {
        list.iter()
            .map(|t| {
                let info = &self.tensors[t.0];
                TensorSpec::new(info.name.clone(), info.dtype, info.shape.clone())
            })
            .collect()
    }

    /// Sizes in bytes of the storages the dispatches bind against the binding limit, before
    /// anything is allocated.
    fn check_sizes(&self, plan: &Plan, limit: u64) -> Result<()> {
        // Each dispatch binds exactly its shader's buffers: more would be written past the
        // set's layout (undefined behaviour in the driver), fewer leave one unbound.
        if let Some(x) = plan
            .dispatches
            .iter()
            .find(|x| x.bindings.len() != x.kernel.kernel.bindings())
        {
            return Err(Error::Graph(format!(
                "internal: {} binds {} buffers to {:?}, whose shader declares {}",
                x.op,
                x.bindings.len(),
                x.kernel.kernel,
                x.kernel.kernel.bindings()
            )));
        }
        let bound: std::collections::BTreeSet<usize> = plan
            .dispatches
            .iter()
            .flat_map(|x| x.bindings.iter().map(|&(s, _)| s))
            .collect();
        let over = bound
            .into_iter()
            .map(|s| &plan.storages[s])
            .find(|st| st.bytes > limit);
        match over {
            Some(st) => {
                let t = &self.tensors[st.tensor.0];
                Err(Error::TooLarge {
                    tensor: t.name.clone(),
                    dtype: t.dtype,
                    shape: t.shape.clone(),
                    bytes: st.bytes,
                    limit,
                })
            }
            None => Ok(()),
        }
    }

    /// The graph's memory as `mem` plans it: external slices bound, pooled constants bound,
    /// the rest allocated, the inputs' and outputs' host paths made, the weights uploaded.
    fn place(
        &self,
        device: &Device,
        options: &BuildOptions,
        plan: &Plan,
        mem: &MemoryPlan,
    ) -> Result<Placed> {
        let external = self.external_slots(device, mem, options)?;
        let wanted = match options.host_path {
            Some(p) => p,
            None => HostPath::for_device(device)?,
        };
        let path = match wanted {
            HostPath::Direct if options.force_staging => HostPath::staged(),
            p => p,
        };
        let direct = path.io() == HostIo::Direct;
        let started = std::time::Instant::now();
        let mut submission = Submission::new(device, cmd::COUNT, "compute graph")?;
        let mut transfer = HostTransfer::new(device, path);
        let made = started.elapsed();
        let pooled = match &options.constants {
            Some(pool) => {
                let names: Vec<&str> = plan
                    .storages
                    .iter()
                    .map(|st| {
                        self.tensors
                            .get(st.tensor.0)
                            .map_or("", |t| t.name.as_str())
                    })
                    .collect();
                pool.bind(
                    device,
                    (&mut submission, &mut transfer),
                    (&plan.storages, &names, mem),
                    direct,
                )?
            }
            None => Pooled::default(),
        };
        let mut bound = external.clone();
        bound.extend(pooled.slices.iter().map(|(&k, &v)| (k, v)));
        let pooled_at = started.elapsed();
        let mut res = allocate(device, mem, &bound, direct)?;
        let allocated = started.elapsed();
        let host = (!options.embedded).then_some(path);
        let inputs = self.io(device, &self.inputs, mem, &mut res, host)?;
        let outputs = self.io(device, &self.outputs, mem, &mut res, host)?;
        let io_at = started.elapsed();
        upload_weights(
            device,
            (&mut submission, &mut transfer),
            &mut res,
            plan,
            mem,
        )?;
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        log::debug!(
            "compute graph memory: submission {:.1} ms, pooled constants {:.1} ms, {} buffers \
             {:.1} ms, inputs and outputs {:.1} ms, weights {:.1} ms",
            ms(made),
            ms(pooled_at - made),
            mem.buffers.len(),
            ms(allocated - pooled_at),
            ms(io_at - allocated),
            ms(started.elapsed() - io_at)
        );
        Ok(Placed {
            submission,
            transfer,
            pooled,
            res,
            inputs,
            outputs,
            direct,
        })
    }

    /// The external slices of `options`, checked, by planned buffer.
    fn external_slots(
        &self,
        device: &Device,
        mem: &MemoryPlan,
        options: &BuildOptions,
    ) -> Result<BTreeMap<usize, BufferSlice>> {
        let alignment = device
            .capabilities()
            .limits
            .min_storage_buffer_offset_alignment;
        let mut out = BTreeMap::new();
        for (kind, list, bound) in [
            ("input", &self.inputs, &options.external.inputs),
            ("output", &self.outputs, &options.external.outputs),
        ] {
            for (&index, &slice) in bound {
                let t = list.get(index).ok_or(Error::NoSuchIo {
                    io: kind,
                    index,
                    count: list.len(),
                })?;
                let info = &self.tensors[t.0];
                let slot = mem.slot_of[info.storage].ok_or_else(|| internal("unplanned I/O"))?;
                let need = mem.buffers[slot].0;
                out.insert(
                    slot,
                    check_binding(kind, index, &info.name, slice, need, alignment)?,
                );
            }
        }
        Ok(out)
    }

    /// The inputs or outputs `list`, each with a staging buffer where the host cannot map its
    /// slice, unless `path` moves it through the graph's [`HostTransfer`] (large tensors).
    fn io(
        &self,
        device: &Device,
        list: &[TensorId],
        mem: &MemoryPlan,
        res: &mut Resources,
        path: Option<HostPath>,
    ) -> Result<Vec<Io>> {
        let mut v = Vec::with_capacity(list.len());
        for &t in list {
            let info = &self.tensors[t.0];
            let slot = mem.slot_of[info.storage].ok_or_else(|| internal("unplanned I/O"))?;
            let own = res.own[slot];
            let bytes = (info.numel() * info.dtype.size()) as u64;
            let mapped = own.is_some_and(|b| res.buffers[b].is_mapped());
            // An embedded graph moves nothing to or from the host.
            let Some(path) = path else {
                v.push(Io {
                    bytes,
                    need: mem.buffers[slot].0,
                    slot,
                    own,
                    staging: None,
                    transfer: false,
                });
                continue;
            };
            let transfer = !mapped && path.transfers(bytes);
            let staging = if mapped || transfer {
                None
            } else {
                let b = staging_buffer(device, bytes, &info.name)?;
                res.report.staging += b.size();
                res.buffers.push(b);
                Some(res.buffers.len() - 1)
            };
            v.push(Io {
                bytes,
                need: mem.buffers[slot].0,
                slot,
                own,
                staging,
                transfer,
            });
        }
        Ok(v)
    }
}

/// The op library's work groups of 256 invocations must fit the device.
fn check_work_groups(device: &Device) -> Result<()> {
    let caps = device.capabilities();
    let lim = &caps.limits;
    if lim.max_compute_work_group_invocations < 256 || lim.max_compute_work_group_size[0] < 256 {
        return Err(Error::Unsupported(format!(
            "the op library uses work groups of 256 invocations; device '{}' allows {} \
             (maxComputeWorkGroupInvocations) and {} in x (maxComputeWorkGroupSize[0])",
            caps.name, lim.max_compute_work_group_invocations, lim.max_compute_work_group_size[0]
        )));
    }
    Ok(())
}

/// Physical buffer assignment of every storage.
pub(crate) struct MemoryPlan {
    /// Storage -> slot: an index into `buffers`, or past them into `ranges` (None: not used by
    /// any dispatch).
    pub slot_of: Vec<Option<usize>>,
    /// Sizes and kinds of the buffers to create.
    pub buffers: Vec<(u64, BufKind)>,
    /// The slots after the buffers': storages that lie in another (`placement.rs`), as
    /// (buffer, byte offset, bytes).
    pub ranges: Vec<(usize, u64, u64)>,
    pub report: MemoryReport,
}

impl MemoryPlan {
    /// The bytes that storage `s` binds, with its buffer as the root: a placed storage's
    /// range, else its whole buffer, as its descriptor binds it (a buffer reused by a smaller
    /// storage still binds whole, and a shader may touch any byte it binds, so validation
    /// counts them all).
    pub fn extent(&self, storages: &[Storage], s: usize) -> Extent {
        match self.slot_of[s] {
            Some(slot) if slot >= self.buffers.len() => {
                let (root, start, bytes) = self.ranges[slot - self.buffers.len()];
                Extent {
                    root,
                    start,
                    end: start + bytes,
                }
            }
            Some(slot) => Extent {
                root: slot,
                start: 0,
                end: self.buffers[slot].0.max(storages[s].bytes),
            },
            None => Extent {
                root: usize::MAX,
                start: 0,
                end: storages[s].bytes,
            },
        }
    }
}

/// The bytes a binding touches: a range of a root (a buffer, or a storage placed nowhere).
/// Two bindings conflict where their ranges overlap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Extent {
    pub root: usize,
    pub start: u64,
    pub end: u64,
}

impl Extent {
    fn overlaps(&self, o: &Extent) -> bool {
        self.root == o.root && self.start < o.end && o.start < self.end
    }
}

/// The bytes of storage `s` in its outermost storage.
pub(crate) fn storage_extent(
    storages: &[Storage],
    within: &[Option<(usize, u64)>],
    s: usize,
) -> Extent {
    let (root, start) = root_in(within, s);
    Extent {
        root,
        start,
        end: start + storages[s].bytes,
    }
}

/// What has touched each extent since some point: per extent, a value.
struct Touched<T>(BTreeMap<Extent, T>);

impl<T: Copy> Touched<T> {
    fn new() -> Self {
        Touched(BTreeMap::new())
    }

    /// The values of every extent that overlaps `e`.
    fn overlapping(&self, e: &Extent) -> impl Iterator<Item = T> + '_ {
        let e = *e;
        let from = Extent {
            root: e.root,
            start: 0,
            end: 0,
        };
        self.0
            .range(from..)
            .take_while(move |(k, _)| k.root == e.root && k.start < e.end)
            .filter(move |(k, _)| k.overlaps(&e))
            .map(|(_, &v)| v)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BufKind {
    Input,
    Output,
    Const,
    Temp,
}

/// First and last dispatch of each storage, a storage that others lie in covering theirs.
fn lifetimes(
    n: usize,
    dispatches: &[Dispatch],
    within: &[Option<(usize, u64)>],
) -> (Vec<usize>, Vec<usize>) {
    let mut first = vec![usize::MAX; n];
    let mut last = vec![0usize; n];
    for (i, d) in dispatches.iter().enumerate() {
        for &(s, _) in &d.bindings {
            let r = root_in(within, s).0;
            for t in [s, r] {
                first[t] = first[t].min(i);
                last[t] = last[t].max(i);
            }
        }
    }
    (first, last)
}

pub(crate) fn plan_memory(
    storages: &[Storage],
    dispatches: &[Dispatch],
    within: &[Option<(usize, u64)>],
) -> MemoryPlan {
    let n = storages.len();
    let placed = |s: usize| within.get(s).copied().flatten();
    let (first, last) = lifetimes(n, dispatches, within);
    let mut holds = vec![false; n];
    for w in within.iter().flatten() {
        holds[w.0] = true;
    }
    let mut slot_of = vec![None; n];
    let mut buffers: Vec<(u64, BufKind)> = Vec::new();
    let mut report = MemoryReport::default();
    // Dedicated buffers: inputs, outputs, constants.
    for (s, st) in storages.iter().enumerate() {
        let kind = match st.kind {
            StorageKind::Input => BufKind::Input,
            StorageKind::Output => BufKind::Output,
            StorageKind::Const(_) if first[s] != usize::MAX => BufKind::Const,
            _ => continue,
        };
        slot_of[s] = Some(buffers.len());
        buffers.push((st.bytes, kind));
        match kind {
            BufKind::Const => report.weights += st.bytes,
            _ => report.io += st.bytes,
        }
    }
    // Intermediates: in order of first use, each takes the best-fitting buffer freed before
    // its first use (or grows the largest free one, or gets a new one).
    let mut temps: Vec<usize> = (0..n)
        .filter(|&s| {
            matches!(storages[s].kind, StorageKind::Temp)
                && first[s] != usize::MAX
                && placed(s).is_none()
        })
        .collect();
    temps.sort_by_key(|&s| first[s]);
    // (buffer index, busy until dispatch index, its last storage holds others)
    let mut pool: Vec<(usize, usize, bool)> = Vec::new();
    for s in temps {
        let need = storages[s].bytes;
        report.intermediates_unshared += need;
        // Free: last used before `s` is first written, or last read by the very dispatch that
        // writes `s` when that dispatch works in place. Element for element, so only where
        // neither side holds others: a dispatch reading or writing one of those works at an
        // offset.
        let in_place = dispatches[first[s]].in_place && !holds[s];
        let free: Vec<usize> = (0..pool.len())
            .filter(|&i| pool[i].1 < first[s] || (in_place && !pool[i].2 && pool[i].1 == first[s]))
            .collect();
        let fit = free
            .iter()
            .copied()
            .filter(|&i| buffers[pool[i].0].0 >= need)
            .min_by_key(|&i| buffers[pool[i].0].0);
        let chosen = fit.or_else(|| free.iter().copied().max_by_key(|&i| buffers[pool[i].0].0));
        let b = match chosen {
            Some(i) => {
                let b = pool[i].0;
                buffers[b].0 = buffers[b].0.max(need);
                pool[i].1 = last[s];
                pool[i].2 = holds[s];
                b
            }
            None => {
                buffers.push((need, BufKind::Temp));
                pool.push((buffers.len() - 1, last[s], holds[s]));
                buffers.len() - 1
            }
        };
        slot_of[s] = Some(b);
    }
    // Storages inside others: a range of their root's buffer.
    let mut ranges = Vec::new();
    for s in 0..n {
        if let (Some((r, offset)), true) = (placed(s), first[s] != usize::MAX) {
            if let Some(b) = slot_of[r] {
                slot_of[s] = Some(buffers.len() + ranges.len());
                ranges.push((b, offset, storages[s].bytes));
            }
        }
    }
    report.intermediates = buffers
        .iter()
        .filter(|b| b.1 == BufKind::Temp)
        .map(|b| b.0)
        .sum();
    MemoryPlan {
        slot_of,
        buffers,
        ranges,
        report,
    }
}

/// Environment variable that turns the dispatch scheduling off (`0`), for measuring it.
pub const ENV_SCHEDULE: &str = "VKDELEGATE_SCHEDULE";

fn scheduling() -> bool {
    std::env::var(ENV_SCHEDULE).as_deref() != Ok("0")
}

/// Environment variable that keeps every concatenation's copies (`0`), for measuring
/// concatenations written in place (`placement.rs`).
pub const ENV_CONCAT_IN_PLACE: &str = "VKDELEGATE_CONCAT_IN_PLACE";

fn concats_in_place() -> bool {
    std::env::var(ENV_CONCAT_IN_PLACE).as_deref() != Ok("0")
}

/// `dispatches` in an order with fewer barriers: each at the earliest level its hazards
/// allow (reading bytes after their last write; writing them after their last read, or
/// after their last write by another node, as [`barriers`] judges them), levels in order and
/// the dispatches of a level in their given order. Every pair that [`barriers`] would
/// separate keeps its order, so the result computes the same; independent work (a language
/// model's position arithmetic and its first product, a network's branches) shares a level,
/// where it ran one barrier apart. Storages' extents, not buffers: memory is planned
/// afterwards, on this order.
pub(crate) fn scheduled(
    dispatches: Vec<Dispatch>,
    extent: &dyn Fn(usize) -> Extent,
) -> Vec<Dispatch> {
    // One past the level of the last write of an extent, and that write's node.
    let mut written: Touched<(usize, usize)> = Touched::new();
    // One past the highest level that read it.
    let mut read: Touched<usize> = Touched::new();
    let mut levels = Vec::with_capacity(dispatches.len());
    for d in &dispatches {
        let mut level = 0;
        for &(st, w) in &d.bindings {
            let e = extent(st);
            for (l, node) in written.overlapping(&e) {
                // Writes of one node may share a level (disjoint parts, no barrier between).
                level = level.max(if w && node == d.node { l - 1 } else { l });
            }
            if w {
                level = read.overlapping(&e).fold(level, usize::max);
            }
        }
        for &(st, w) in &d.bindings {
            let e = extent(st);
            if w {
                let top = written
                    .overlapping(&e)
                    .map(|(l, _)| l)
                    .fold(level + 1, usize::max);
                written.0.insert(e, (top, d.node));
            } else {
                let r = read.0.entry(e).or_default();
                *r = (*r).max(level + 1);
            }
        }
        levels.push(level);
    }
    let mut order: Vec<(usize, Dispatch)> = levels.into_iter().zip(dispatches).collect();
    order.sort_by_key(|(level, _)| *level);
    order.into_iter().map(|(_, d)| d).collect()
}

/// Which dispatches need a barrier before them: a read of bytes written since the last
/// barrier, or a write of bytes read or written since then (writes of one node to disjoint
/// parts of one buffer, as `cat` does, do not conflict; nor do writes to disjoint ranges).
pub(crate) fn barriers(dispatches: &[Dispatch], extent: &dyn Fn(usize) -> Extent) -> Vec<bool> {
    let mut written: Touched<usize> = Touched::new();
    let mut read: Touched<()> = Touched::new();
    let mut out = Vec::with_capacity(dispatches.len());
    for d in dispatches {
        let hazard = d.bindings.iter().any(|&(s, w)| {
            let e = extent(s);
            if w {
                read.overlapping(&e).next().is_some()
                    || written.overlapping(&e).any(|node| node != d.node)
            } else {
                written.overlapping(&e).next().is_some()
            }
        });
        if hazard {
            written.0.clear();
            read.0.clear();
        }
        out.push(hazard);
        for &(s, w) in &d.bindings {
            let e = extent(s);
            if w {
                written.0.insert(e, d.node);
            } else {
                read.0.insert(e, ());
            }
        }
    }
    out
}

/// A graph's memory, placed ([`GraphBuilder::place`]): the submission and host transfer that
/// uploaded its weights, its pooled constants, its buffers and its inputs' and outputs' paths.
struct Placed {
    submission: Submission,
    transfer: HostTransfer,
    pooled: Pooled,
    res: Resources,
    inputs: Vec<Io>,
    outputs: Vec<Io>,
    /// Host I/O goes straight to the buffers (no staging).
    direct: bool,
}

/// The buffers of a graph while it is built.
struct Resources {
    /// Own buffers (planned ones, then staging).
    buffers: Vec<Buffer>,
    /// Per planned buffer: its slice (own or external).
    slots: Vec<BufferSlice>,
    /// Per planned buffer: its index in `buffers` (`None` when external).
    own: Vec<Option<usize>>,
    report: MemoryReport,
}

/// Creates the planned buffers, except those bound to external slices. With `direct`,
/// inputs, outputs and constants are mapped device memory.
fn allocate(
    device: &Device,
    mem: &MemoryPlan,
    external: &BTreeMap<usize, BufferSlice>,
    direct: bool,
) -> Result<Resources> {
    let mut res = Resources {
        buffers: Vec::with_capacity(mem.buffers.len()),
        slots: Vec::with_capacity(mem.buffers.len()),
        own: Vec::with_capacity(mem.buffers.len()),
        report: mem.report,
    };
    for (i, &(bytes, kind)) in mem.buffers.iter().enumerate() {
        if let Some(slice) = external.get(&i) {
            match kind {
                BufKind::Const => res.report.weights -= bytes,
                _ => res.report.io -= bytes,
            }
            res.slots.push(*slice);
            res.own.push(None);
            continue;
        }
        let location = location(kind, direct);
        let what = format!("compute graph buffer {i} ({kind:?}, {bytes} bytes)");
        let b = Buffer::new(device, bytes, location, USAGE, &what)?;
        res.slots.push(b.slice(None));
        res.own.push(Some(res.buffers.len()));
        res.buffers.push(b);
    }
    for &(b, offset, bytes) in &mem.ranges {
        let whole = res.slots[b];
        res.slots.push(BufferSlice {
            offset: whole.offset + offset,
            size: bytes,
            memory_offset: whole.memory_offset + offset,
            ..whole
        });
        res.own.push(None);
    }
    Ok(res)
}

/// Where a planned buffer of `kind` lives: inputs, outputs and constants in mapped device
/// memory on the direct host path. (On an H100, constants in mapped device memory on the staged
/// path, written in place through a resizable BAR, loaded resnet50 fp16 15-20 ms faster, but
/// ViT-B ran 4-13% slower.)
pub(crate) fn location(kind: BufKind, direct: bool) -> MemoryLocation {
    match kind {
        BufKind::Input | BufKind::Output | BufKind::Const if direct => HostIo::Direct.io_location(),
        _ => MemoryLocation::Device,
    }
}

/// The graph's own constant buffers get their weights (pooled ones were filled by the pool).
fn upload_weights(
    device: &Device,
    io: (&mut Submission, &mut HostTransfer),
    res: &mut Resources,
    plan: &Plan,
    mem: &MemoryPlan,
) -> Result<()> {
    let mut items: Vec<(usize, &[u8])> = Vec::new();
    for (s, st) in plan.storages.iter().enumerate() {
        let (StorageKind::Const(data), Some(slot)) = (&st.kind, mem.slot_of[s]) else {
            continue;
        };
        if let Some(b) = res.own[slot] {
            items.push((b, data));
        }
    }
    upload(device, io, &mut res.buffers, &items)
}

/// Writes each `(buffer index, bytes)` into `buffers` from offset 0: directly where mapped,
/// large ones through the host transfer, the others through one staging buffer (each at an
/// offset of 16 bytes' alignment) and one copy submission.
pub(crate) fn upload(
    device: &Device,
    (submission, transfer): (&mut Submission, &mut HostTransfer),
    buffers: &mut [Buffer],
    items: &[(usize, &[u8])],
) -> Result<()> {
    let mut copies: Vec<StagedCopy<'_>> = Vec::new();
    let mut staged: u64 = 0;
    let started = std::time::Instant::now();
    let mut transferred = 0;
    for &(b, data) in items {
        if buffers[b].is_mapped() {
            buffers[b].write(0, data)?;
        } else if transfer.path().transfers(data.len() as u64) {
            // SAFETY: a buffer of the graph or its pool (TRANSFER_DST usage) holds the
            // constant; nothing else uses it yet.
            unsafe { transfer.upload(data, buffers[b].raw(), 0) }?;
            transferred += data.len();
        } else if !data.is_empty() {
            copies.push((staged, buffers[b].raw(), data));
            staged = (staged + data.len() as u64).next_multiple_of(16);
        }
    }
    let direct = started.elapsed();
    let [made, written, copied] = match copies.is_empty() {
        true => [std::time::Duration::ZERO; 3],
        false => copy_staged(device, submission, &copies, staged)?,
    };
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    log::debug!(
        "constants: {} items; mapped or transferred ({transferred} bytes) {:.1} ms, staging \
         of {staged} bytes made {:.1} ms, written {:.1} ms, copied {:.1} ms",
        items.len(),
        ms(direct),
        ms(made),
        ms(written),
        ms(copied)
    );
    Ok(())
}

/// A constant's copy through the staging buffer: its offset there, its buffer, its bytes.
type StagedCopy<'a> = (u64, vk::Buffer, &'a [u8]);

/// Writes `copies` into one staging buffer of `staged` bytes and copies them into their
/// buffers in one submission, waiting for it; returns how long the staging buffer took to
/// make, to write and to copy from.
fn copy_staged(
    device: &Device,
    submission: &mut Submission,
    copies: &[StagedCopy<'_>],
    staged: u64,
) -> Result<[std::time::Duration; 3]> {
    let started = std::time::Instant::now();
    let mut staging = Buffer::new(
        device,
        staged,
        MemoryLocation::Host,
        vk::BufferUsageFlags::TRANSFER_SRC,
        "weight staging",
    )?;
    let made = started.elapsed();
    for &(at, _, data) in copies {
        staging.write(at, data)?;
    }
    let written = started.elapsed();
    let c = submission.begin(cmd::SCRATCH)?;
    for &(at, dst, data) in copies {
        let region = vk::BufferCopy::default()
            .src_offset(at)
            .size(data.len() as u64);
        // SAFETY: `c` is recording; the copy stays within both buffers.
        unsafe {
            device
                .raw()
                .cmd_copy_buffer(c, staging.raw(), dst, &[region])
        };
    }
    submission.end(cmd::SCRATCH)?;
    // SAFETY: the command buffer is executable; the staging buffer lives until the wait below
    // has finished its use.
    unsafe { submission.submit(cmd::SCRATCH, &[], &[]) }?;
    submission.wait()?;
    Ok([made, written - made, started.elapsed() - written])
}

/// One descriptor set per dispatch, from a pool sized for exactly them (written later, by
/// [`Graph::write_descriptors`]).
fn allocate_sets(
    objects: &mut Objects,
    plan: &Plan,
    pipelines: &[(vk::Pipeline, Layout)],
) -> Result<Vec<vk::DescriptorSet>> {
    debug_assert_eq!(pipelines.len(), plan.dispatches.len());
    let d = objects.device.raw().clone();
    let total: u32 = plan
        .dispatches
        .iter()
        .map(|x| x.kernel.kernel.bindings() as u32)
        .sum();
    let sizes = [vk::DescriptorPoolSize::default()
        .ty(vk::DescriptorType::STORAGE_BUFFER)
        .descriptor_count(total.max(1))];
    // SAFETY: valid create info.
    objects.descriptor_pool = unsafe {
        d.create_descriptor_pool(
            &vk::DescriptorPoolCreateInfo::default()
                .max_sets((plan.dispatches.len() as u32).max(1))
                .pool_sizes(&sizes),
            None,
        )
    }
    .vk("vkCreateDescriptorPool")?;
    let set_layouts: Vec<vk::DescriptorSetLayout> =
        pipelines.iter().map(|(_, (set, _))| *set).collect();
    if set_layouts.is_empty() {
        return Ok(Vec::new());
    }
    // SAFETY: the pool was sized for exactly these sets.
    let sets = unsafe {
        d.allocate_descriptor_sets(
            &vk::DescriptorSetAllocateInfo::default()
                .descriptor_pool(objects.descriptor_pool)
                .set_layouts(&set_layouts),
        )
    }
    .vk("vkAllocateDescriptorSets")?;
    Ok(sets)
}

/// Whether compute shaders have subgroup arithmetic, with subgroups of at least 4
/// invocations that divide the 256 of a work group.
fn subgroup_arithmetic(device: &Device) -> bool {
    if device.enabled().api_version < vk_core::Version::V1_1 {
        return false;
    }
    let mut sg = vk::PhysicalDeviceSubgroupProperties::default();
    let mut props = vk::PhysicalDeviceProperties2::default().push_next(&mut sg);
    // SAFETY: the physical device belongs to this instance, whose API version is at least
    // 1.1 (the device's enabled version is not higher than the instance's).
    unsafe {
        device
            .instance()
            .raw()
            .get_physical_device_properties2(device.physical(), &mut props)
    };
    let ops = vk::SubgroupFeatureFlags::BASIC | vk::SubgroupFeatureFlags::ARITHMETIC;
    let min = device.capabilities().limits.subgroup_size_range[0];
    sg.supported_stages.contains(vk::ShaderStageFlags::COMPUTE)
        && sg.supported_operations.contains(ops)
        && sg.subgroup_size >= 4
        && 256 % sg.subgroup_size == 0
        && (min == 0 || min >= 4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Storage, TensorId};
    use crate::kernels::{Kernel, Precision, Shader};

    fn storage(kind: StorageKind, bytes: u64) -> Storage {
        Storage {
            kind,
            bytes,
            tensor: TensorId(0),
        }
    }

    fn dispatch(node: usize, bindings: &[(usize, bool)]) -> Dispatch {
        Dispatch {
            op: "test",
            node,
            kernel: Shader {
                kernel: Kernel::Unary,
                precision: Precision::F32,
            },
            spec: vec![],
            bindings: bindings.to_vec(),
            push: vec![],
            groups: [1, 1, 1],
            in_place: false,
        }
    }

    /// Each storage a root of its own, 16 bytes.
    fn whole(s: usize) -> Extent {
        Extent {
            root: s,
            start: 0,
            end: 16,
        }
    }

    #[test]
    fn a_dispatch_binding_other_than_its_shaders_buffers_is_refused() {
        let storages = vec![
            storage(StorageKind::Input, 16),
            storage(StorageKind::Temp, 16),
            storage(StorageKind::Output, 16),
        ];
        // `unary.comp` declares two buffers.
        let good = dispatch(0, &[(0, false), (2, true)]);
        let extra = dispatch(1, &[(0, false), (1, false), (2, true)]);
        let plan = |d: Vec<Dispatch>| Plan {
            storages: storages.clone(),
            dispatches: d,
            within: vec![None; 3],
            cooperative: Default::default(),
        };
        let b = GraphBuilder::new();
        assert!(b.check_sizes(&plan(vec![good.clone()]), u64::MAX).is_ok());
        let e = b
            .check_sizes(&plan(vec![good, extra]), u64::MAX)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("binds 3 buffers") && e.contains("declares 2"),
            "{e}"
        );
    }

    #[test]
    fn intermediates_reuse_buffers_freed_before_their_first_use() {
        // in -> t1 -> t2 -> t3 -> out, with t1 also read by the last op (so it stays live).
        let storages = vec![
            storage(StorageKind::Input, 64),
            storage(StorageKind::Temp, 64),
            storage(StorageKind::Temp, 32),
            storage(StorageKind::Temp, 128),
            storage(StorageKind::Output, 64),
            storage(StorageKind::Const(vec![0; 16].into()), 16),
            storage(StorageKind::Const(vec![0; 16].into()), 16), // unused: no buffer
        ];
        let d = vec![
            dispatch(0, &[(0, false), (5, false), (1, true)]),
            dispatch(1, &[(1, false), (2, true)]),
            dispatch(2, &[(2, false), (3, true)]),
            dispatch(3, &[(3, false), (1, false), (4, true)]),
        ];
        let plan = plan_memory(&storages, &d, &[]);
        assert_eq!(plan.slot_of[6], None);
        // t2 is dead after dispatch 2 but t3 starts at dispatch 2: no reuse between them; t1
        // lives to the end. Three temp buffers, t3 grows none of them.
        let temps: Vec<_> = [1, 2, 3].iter().map(|&s| plan.slot_of[s]).collect();
        assert!(temps.iter().all(Option::is_some));
        assert_eq!(plan.report.intermediates_unshared, 64 + 32 + 128);
        assert_eq!(plan.report.intermediates, 64 + 32 + 128);
        assert_eq!(plan.report.weights, 16);
        assert_eq!(plan.report.io, 128);

        // A chain: each temp dies right after its reader, so two buffers alternate.
        let storages = vec![
            storage(StorageKind::Input, 64),
            storage(StorageKind::Temp, 64),
            storage(StorageKind::Temp, 64),
            storage(StorageKind::Temp, 96),
            storage(StorageKind::Output, 64),
        ];
        let d = vec![
            dispatch(0, &[(0, false), (1, true)]),
            dispatch(1, &[(1, false), (2, true)]),
            dispatch(2, &[(2, false), (3, true)]),
            dispatch(3, &[(3, false), (4, true)]),
        ];
        let plan = plan_memory(&storages, &d, &[]);
        assert_eq!(plan.slot_of[1], plan.slot_of[3]);
        assert_ne!(plan.slot_of[1], plan.slot_of[2]);
        // The reused buffer grew to the larger tensor.
        assert_eq!(plan.report.intermediates, 96 + 64);

        // The same chain of in-place kernels needs one buffer.
        let d: Vec<Dispatch> = d
            .into_iter()
            .map(|x| Dispatch {
                in_place: true,
                ..x
            })
            .collect();
        let plan = plan_memory(&storages, &d, &[]);
        assert_eq!(plan.slot_of[1], plan.slot_of[2]);
        assert_eq!(plan.slot_of[2], plan.slot_of[3]);
        assert_eq!(plan.report.intermediates, 96);
    }

    #[test]
    fn storages_inside_others_bind_ranges_of_its_buffer_and_conflict_where_they_overlap() {
        // Storages 1 and 2 lie in 3, at 0 and 64: a cat written in place by two producers.
        let storages = vec![
            storage(StorageKind::Input, 64),
            storage(StorageKind::Temp, 64),
            storage(StorageKind::Temp, 64),
            storage(StorageKind::Temp, 128),
            storage(StorageKind::Output, 128),
            storage(StorageKind::Output, 64),
        ];
        let within = [None, Some((3, 0)), Some((3, 64)), None, None, None];
        let d = vec![
            dispatch(0, &[(0, false), (1, true)]), // writes the first part
            dispatch(1, &[(0, false), (2, true)]), // the second: disjoint, no barrier
            dispatch(2, &[(1, false), (5, true)]), // reads the first part: barrier
            dispatch(3, &[(3, false), (4, true)]), // reads the whole
        ];
        let plan = plan_memory(&storages, &d, &within);
        let whole = plan.slot_of[3].unwrap();
        assert!(whole < plan.buffers.len());
        assert_eq!(plan.buffers[whole], (128, BufKind::Temp));
        assert_eq!(plan.ranges.len(), 2);
        let extent = |s| plan.extent(&storages, s);
        assert_eq!(
            (extent(1).root, extent(1).start, extent(1).end),
            (whole, 0, 64)
        );
        assert_eq!(
            (extent(2).root, extent(2).start, extent(2).end),
            (whole, 64, 128)
        );
        assert_eq!(plan.report.intermediates, 128);
        assert_eq!(barriers(&d, &extent), vec![false, false, true, false]);
        // Scheduling keeps this order. A write of the second part given after a read of
        // the first is lifted to the level of the first write: other bytes.
        let on_storages = |s| storage_extent(&storages, &within, s);
        let order = scheduled(d.clone(), &on_storages);
        assert_eq!(
            order.iter().map(|x| x.node).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        let early = vec![
            d[0].clone(),
            dispatch(2, &[(1, false), (5, true)]),
            d[1].clone(),
        ];
        let order = scheduled(early, &on_storages);
        assert_eq!(order.iter().map(|x| x.node).collect::<Vec<_>>(), [0, 1, 2]);
    }

    #[test]
    fn in_place_kernels_never_reuse_a_buffer_that_holds_others() {
        // 1 and 2 lie in 3; an in-place kernel reads 2 (at 64 bytes) and writes 4, which must
        // not take 3's buffer: its element i would land on 2's element i - 16.
        let storages = vec![
            storage(StorageKind::Input, 64),
            storage(StorageKind::Temp, 64),
            storage(StorageKind::Temp, 64),
            storage(StorageKind::Temp, 128),
            storage(StorageKind::Temp, 64),
            storage(StorageKind::Output, 64),
        ];
        let within = [None, Some((3, 0)), Some((3, 64)), None, None, None];
        let mut d = vec![
            dispatch(0, &[(0, false), (1, true)]),
            dispatch(1, &[(0, false), (2, true)]),
            dispatch(2, &[(2, false), (4, true)]),
            dispatch(3, &[(4, false), (5, true)]),
        ];
        d[2].in_place = true;
        let plan = plan_memory(&storages, &d, &within);
        assert_ne!(plan.slot_of[4], plan.slot_of[3]);
        // Without the others inside it, it would.
        let plan = plan_memory(&storages, &d, &[]);
        assert_eq!(plan.slot_of[4], plan.slot_of[2]);
    }

    #[test]
    fn barriers_follow_read_after_write_and_write_after_read() {
        let id = whole;
        let d = vec![
            dispatch(0, &[(0, false), (1, true)]),             // writes 1
            dispatch(1, &[(0, false), (2, true)]),             // independent: no barrier
            dispatch(2, &[(1, false), (2, false), (3, true)]), // reads 1, 2: barrier
            dispatch(3, &[(0, false), (1, true)]), // writes 1 after it was read: barrier
            dispatch(4, &[(0, false), (5, true)]), // independent
            dispatch(4, &[(0, false), (5, true)]), // same node, disjoint writes: none
            dispatch(5, &[(0, false), (5, true)]), // another node writes 5: barrier
        ];
        assert_eq!(
            barriers(&d, &id),
            vec![false, false, true, true, false, false, true]
        );
    }

    #[test]
    fn scheduling_lifts_independent_work_and_keeps_every_hazard_in_order() {
        let id = whole;
        let d = vec![
            dispatch(0, &[(0, false), (1, true)]),             // level 0
            dispatch(1, &[(1, false), (2, true)]),             // after 0's write: 1
            dispatch(2, &[(2, false), (3, true)]),             // 2
            dispatch(3, &[(0, false), (4, true)]),             // independent: 0
            dispatch(4, &[(4, false), (5, true)]),             // 1
            dispatch(5, &[(0, false), (1, true)]),             // writes 1 after node 1 read it: 2
            dispatch(6, &[(0, false), (6, true)]),             // 0
            dispatch(6, &[(0, false), (6, true)]),             // same node, same storage: 0
            dispatch(7, &[(6, false), (3, false), (7, true)]), // after 2's and 6's: 3
        ];
        let nodes = |d: &[Dispatch]| d.iter().map(|x| x.node).collect::<Vec<_>>();
        let s = scheduled(d.clone(), &id);
        assert_eq!(nodes(&s), [0, 3, 6, 6, 1, 4, 2, 5, 7]);
        assert_eq!(
            barriers(&s, &id),
            vec![false, false, false, false, true, false, true, false, true]
        );
        // Three barriers where the given order had four.
        assert_eq!(barriers(&d, &id).iter().filter(|&&b| b).count(), 4);
    }
}
