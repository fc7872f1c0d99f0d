//! Compute pipelines and their layouts, shared by every graph built on one device.
//!
//! A device keeps one pipeline per kernel and specialization, and one set layout and pipeline
//! layout per binding count, for its lifetime ([`DevicePipelines`], a [`Device::memo`] value):
//! a program of many delegates compiles each pipeline once, and a graph built again compiles
//! nothing. Builds on several threads at once compile each pipeline once: one compiles it,
//! the others wait for it. A build given pipeline-cache data ([`BuildOptions::pipeline_cache`]) compiles and
//! keeps its own pipelines instead, so that the data its graph hands back holds them all.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::DerefMut;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use vk_core::pipeline_cache::header_matches;
use vk_core::{Device, VkResultExt, vk};

use crate::error::Result;
use crate::kernels::{PUSH_BYTES, Shader};
use crate::lower::Plan;
use crate::options::BuildOptions;
use crate::runtime::Objects;

/// A pipeline's kernel and specialization constants: the precision is part of the kernel
/// ([`Shader`]), so an f16 pipeline has a key of its own.
type Key = (Shader, Vec<u32>);

/// A set layout and the pipeline layout made of it (one set, the push-constant block).
pub(crate) type Layout = (vk::DescriptorSetLayout, vk::PipelineLayout);

/// The pipelines and layouts of one device. Holds the device's function table, not the
/// [`Device`]: memo values are dropped before the device is destroyed.
pub(crate) struct DevicePipelines {
    raw: ash::Device,
    push_bytes: u32,
    layouts: Mutex<BTreeMap<usize, Layout>>,
    pipelines: Mutex<BTreeMap<Key, vk::Pipeline>>,
    /// The pipelines some build is compiling now, and the signal that one finished.
    compiling: Mutex<BTreeSet<Key>>,
    finished: Condvar,
}

impl DevicePipelines {
    /// The device's pipelines (made empty on first use).
    pub(crate) fn of(device: &Device) -> Arc<DevicePipelines> {
        device.memo("compute pipelines", || DevicePipelines {
            raw: device.raw().clone(),
            push_bytes: PUSH_BYTES.min(device.capabilities().limits.max_push_constants_size),
            layouts: Mutex::default(),
            pipelines: Mutex::default(),
            compiling: Mutex::default(),
            finished: Condvar::new(),
        })
    }

    /// The layout of kernels with `n` storage-buffer bindings (made on first use).
    fn layout(&self, n: usize) -> Result<Layout> {
        let mut layouts = lock(&self.layouts);
        if let Some(&l) = layouts.get(&n) {
            return Ok(l);
        }
        let l = self.make_layout(n)?;
        layouts.insert(n, l);
        Ok(l)
    }

    fn make_layout(&self, n: usize) -> Result<Layout> {
        let types = vec![vk::DescriptorType::STORAGE_BUFFER; n];
        // SAFETY: `raw` is this value's live device, which destroys both layouts in `Drop`.
        Ok(unsafe { vk_core::compute_layouts(&self.raw, &types, self.push_bytes) }?)
    }

    fn find(&self, key: &Key) -> Option<vk::Pipeline> {
        lock(&self.pipelines).get(key).copied()
    }

    /// Keeps `made` for `key` and returns it, or, when another build kept one first,
    /// destroys `made` and returns that one.
    fn keep(&self, key: Key, made: vk::Pipeline) -> vk::Pipeline {
        let mut pipelines = lock(&self.pipelines);
        match pipelines.get(&key) {
            Some(&kept) => {
                // SAFETY: `made` was just created on this device and is used by nothing.
                unsafe { self.raw.destroy_pipeline(made, None) };
                kept
            }
            None => {
                pipelines.insert(key, made);
                made
            }
        }
    }
}

impl DevicePipelines {
    /// The pipelines of `keys` (none of them kept yet when looked up), compiled through
    /// `cache` unless another build is compiling them already: those are waited for, and
    /// compiled here after all where that build failed. Returns them and how many this build
    /// compiled.
    fn compiled_once(
        &self,
        device: &Device,
        cache: vk::PipelineCache,
        keys: &[Key],
    ) -> Result<(Vec<vk::Pipeline>, usize)> {
        let (mine, theirs) = self.claim(keys);
        let mut count = mine.len();
        {
            let _release = Release(self, &mine);
            let made = compile(device, self, cache, &mine)?;
            for (key, p) in mine.iter().zip(made) {
                self.keep(key.clone(), p);
            }
        }
        let late = self.wait_for(&theirs);
        count += late.len();
        for (key, p) in late.iter().zip(compile(device, self, cache, &late)?) {
            self.keep(key.clone(), p);
        }
        let pipelines = keys
            .iter()
            .map(|k| {
                self.find(k).ok_or_else(|| {
                    crate::Error::Graph(format!("internal: pipeline {} was not kept", k.0))
                })
            })
            .collect::<Result<_>>()?;
        Ok((pipelines, count))
    }

    /// Splits `keys` into those this build compiles (now marked as compiling) and those
    /// another build is compiling; drops those kept meanwhile.
    fn claim(&self, keys: &[Key]) -> (Vec<Key>, Vec<Key>) {
        let mut compiling = lock(&self.compiling);
        let (mut mine, mut theirs) = (Vec::new(), Vec::new());
        for k in keys.iter().filter(|k| self.find(k).is_none()) {
            match compiling.insert(k.clone()) {
                true => mine.push(k.clone()),
                false => theirs.push(k.clone()),
            }
        }
        (mine, theirs)
    }

    /// Waits until no build is compiling any of `keys`; returns those still not kept.
    fn wait_for(&self, keys: &[Key]) -> Vec<Key> {
        let mut compiling = lock(&self.compiling);
        while keys.iter().any(|k| compiling.contains(k)) {
            compiling = self
                .finished
                .wait(compiling)
                .unwrap_or_else(|e| e.into_inner());
        }
        keys.iter()
            .filter(|k| self.find(k).is_none())
            .cloned()
            .collect()
    }
}

/// Unmarks a build's claimed keys as compiling when it is done with them, however it ends.
struct Release<'a>(&'a DevicePipelines, &'a [Key]);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        let mut compiling = lock(&self.0.compiling);
        for k in self.1 {
            compiling.remove(k);
        }
        self.0.finished.notify_all();
    }
}

impl Drop for DevicePipelines {
    fn drop(&mut self) {
        let d = &self.raw;
        // SAFETY: every graph that used these objects held the `Device` and waited for its
        // work when dropped, so none is in use; the device is still alive (memo values are
        // dropped first); each handle is destroyed once, pipelines before their layouts.
        unsafe {
            for (_, p) in std::mem::take(lock(&self.pipelines).deref_mut()) {
                d.destroy_pipeline(p, None);
            }
            for (_, (sl, pl)) in std::mem::take(lock(&self.layouts).deref_mut()) {
                d.destroy_pipeline_layout(pl, None);
                d.destroy_descriptor_set_layout(sl, None);
            }
        }
    }
}

/// Locks `m`, whatever a panicking holder left.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Each dispatch's pipeline and layout: the device's pipelines where it has them, the others
/// compiled in one batch through the graph's pipeline cache (`objects.cache`: the caller's
/// data, else the disk cache's, written back when it grew).
pub(crate) fn create_pipelines(
    objects: &mut Objects,
    plan: &Plan,
    options: &BuildOptions,
) -> Result<Vec<(vk::Pipeline, Layout)>> {
    let device = objects.device.clone();
    let shared = DevicePipelines::of(&device);
    let own = options.pipeline_cache.is_some();
    let mut keys: Vec<Key> = plan
        .dispatches
        .iter()
        .map(|x| (x.kernel, x.spec.clone()))
        .collect();
    keys.sort();
    keys.dedup();
    let mut pipeline_of: BTreeMap<Key, vk::Pipeline> = BTreeMap::new();
    if !own {
        pipeline_of.extend(
            keys.iter()
                .filter_map(|k| Some((k.clone(), shared.find(k)?))),
        );
    }
    let missing: Vec<Key> = keys
        .into_iter()
        .filter(|k| !pipeline_of.contains_key(k))
        .collect();
    let opened = std::time::Instant::now();
    let (file, disk) = open_cache(objects, options)?;
    log::debug!(
        "compute graph: pipeline cache of {} bytes opened in {:.1} ms",
        disk.len(),
        opened.elapsed().as_secs_f64() * 1e3
    );
    log::debug!(
        "compute graph: {} pipelines for {} dispatches, {} compiled",
        pipeline_of.len() + missing.len(),
        plan.dispatches.len(),
        missing.len()
    );
    let made = match own {
        true => {
            let made = compile(&device, &shared, objects.cache, &missing)?;
            objects.pipelines.extend(&made);
            objects.compiled = made.len();
            made
        }
        false => {
            let (made, compiled) = shared.compiled_once(&device, objects.cache, &missing)?;
            objects.compiled = compiled;
            made
        }
    };
    pipeline_of.extend(missing.into_iter().zip(made));
    if let Some(file) = &file {
        let storing = std::time::Instant::now();
        store_cache(device.raw(), objects.cache, file, &disk);
        log::debug!(
            "compute graph: pipeline cache checked for new data in {:.1} ms",
            storing.elapsed().as_secs_f64() * 1e3
        );
    }
    plan.dispatches
        .iter()
        .map(|x| {
            let layout = shared.layout(x.kernel.kernel.bindings())?;
            Ok((pipeline_of[&(x.kernel, x.spec.clone())], layout))
        })
        .collect()
}

/// Creates the graph's pipeline cache from the caller's data, else the disk cache's file;
/// returns the file (when the disk cache is used) and the data it held.
fn open_cache(
    objects: &mut Objects,
    options: &BuildOptions,
) -> Result<(Option<vk_core::CacheFile>, Vec<u8>)> {
    let caps = objects.device.capabilities();
    let file = match options.pipeline_cache {
        Some(_) => None,
        None => options
            .disk_cache
            .file(caps, crate::kernels::shader_set_hash()),
    };
    let disk = file
        .as_ref()
        .map(vk_core::CacheFile::load)
        .unwrap_or_default();
    let uuid = &caps.pipeline_cache_uuid;
    let initial = match options.pipeline_cache.as_deref() {
        Some(data) if header_matches(data, caps.vendor_id, caps.device_id, uuid) => data,
        Some(data) if !data.is_empty() => {
            log::warn!(
                "compute graph: ignoring pipeline-cache data made for another device or driver"
            );
            &[]
        }
        Some(_) => &[],
        None => &disk[..],
    };
    // SAFETY: valid create info; the driver ignores incompatible initial data.
    objects.cache = unsafe {
        objects.device.raw().create_pipeline_cache(
            &vk::PipelineCacheCreateInfo::default().initial_data(initial),
            None,
        )
    }
    .vk("vkCreatePipelineCache")?;
    Ok((file, disk))
}

/// Compiles the pipelines of `keys` through `cache`, each from a shader module made for the
/// batch and destroyed after it, with the device's layouts.
fn compile(
    device: &Device,
    shared: &DevicePipelines,
    cache: vk::PipelineCache,
    keys: &[Key],
) -> Result<Vec<vk::Pipeline>> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let d = device.raw();
    let mut kernels: Vec<Shader> = keys.iter().map(|(k, _)| *k).collect();
    kernels.dedup();
    let mut module_of: BTreeMap<Shader, vk::ShaderModule> = BTreeMap::new();
    let made = (|| {
        for k in &kernels {
            let code = k.words()?;
            // SAFETY: valid SPIR-V compiled by the xtask.
            let m = unsafe {
                d.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&code), None)
            }
            .vk("vkCreateShaderModule")?;
            module_of.insert(*k, m);
        }
        let layouts: Vec<Layout> = keys
            .iter()
            .map(|(k, _)| shared.layout(k.kernel.bindings()))
            .collect::<Result<_>>()?;
        compile_with(device, cache, keys, &module_of, &layouts)
    })();
    for m in module_of.into_values() {
        // SAFETY: the pipelines made from it are created (or failed); Vulkan lets a module go
        // once its pipelines exist.
        unsafe { d.destroy_shader_module(m, None) };
    }
    made
}

fn compile_with(
    device: &Device,
    cache: vk::PipelineCache,
    keys: &[Key],
    module_of: &BTreeMap<Shader, vk::ShaderModule>,
    layouts: &[Layout],
) -> Result<Vec<vk::Pipeline>> {
    let entries: Vec<Vec<vk::SpecializationMapEntry>> = keys
        .iter()
        .map(|(_, spec)| {
            (0..spec.len() as u32)
                .map(|i| {
                    vk::SpecializationMapEntry::default()
                        .constant_id(i)
                        .offset(i * 4)
                        .size(4)
                })
                .collect()
        })
        .collect();
    let data: Vec<Vec<u8>> = keys
        .iter()
        .map(|(_, spec)| spec.iter().flat_map(|v| v.to_ne_bytes()).collect())
        .collect();
    let spec_infos: Vec<vk::SpecializationInfo<'_>> = entries
        .iter()
        .zip(&data)
        .map(|(e, d)| vk::SpecializationInfo::default().map_entries(e).data(d))
        .collect();
    let capture = vk_core::pipeline_stats::capture_flags(device);
    let infos: Vec<vk::ComputePipelineCreateInfo<'_>> = keys
        .iter()
        .zip(&spec_infos)
        .zip(layouts)
        .map(|(((k, _), spec), layout)| {
            let stage = vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(module_of[k])
                .name(c"main")
                .specialization_info(spec);
            vk::ComputePipelineCreateInfo::default()
                .flags(capture)
                .stage(stage)
                .layout(layout.1)
        })
        .collect();
    // SAFETY: create infos reference live modules, layouts and specialization data.
    let (pipelines, took) = unsafe { create_in_parallel(device.raw(), cache, &infos) }
        .map_err(|e| vk_core::VkError::new("vkCreateComputePipelines", e))?;
    report(device, keys, &pipelines, &took, !capture.is_empty());
    Ok(pipelines)
}

/// Logs the slowest compiles (debug) and, when captured, each pipeline's statistics.
fn report(
    device: &Device,
    keys: &[Key],
    pipelines: &[vk::Pipeline],
    took: &[Duration],
    stats: bool,
) {
    if log::log_enabled!(log::Level::Debug) {
        let mut slowest: Vec<_> = keys.iter().zip(took).collect();
        slowest.sort_by_key(|(_, t)| std::cmp::Reverse(**t));
        for ((k, spec), t) in slowest.into_iter().take(8) {
            log::debug!("pipeline {k} {spec:?}: {:.1} ms", t.as_secs_f64() * 1e3);
        }
    }
    if stats {
        for ((k, spec), &p) in keys.iter().zip(pipelines) {
            // SAFETY: `p` was just created on this device.
            unsafe { vk_core::pipeline_stats::log_statistics(device, p, &format!("{k} {spec:?}")) };
        }
    }
}

/// Creates one pipeline per create info, one `vkCreateComputePipelines` call each, on up to
/// 16 threads (`each_on_threads`): drivers compile the pipelines of one call one after
/// another, and a cooperative-matrix pipeline takes seconds on some (about 3 s each on an
/// NVIDIA H200 with an empty driver cache). The pipeline cache is internally synchronized.
/// Returns the pipelines with the time each took. On failure every pipeline made is destroyed
/// and the first error returned.
///
/// # Safety
/// Every info must be valid for `vkCreateComputePipelines` on `d`, with `cache`.
unsafe fn create_in_parallel(
    d: &ash::Device,
    cache: vk::PipelineCache,
    infos: &[vk::ComputePipelineCreateInfo<'_>],
) -> std::result::Result<(Vec<vk::Pipeline>, Vec<Duration>), vk::Result> {
    /// The infos, shared read-only by the creating threads.
    struct Shared<'a, 'b>(&'a [vk::ComputePipelineCreateInfo<'b>]);
    // SAFETY: the infos and the modules, layouts and specialization data they point to are
    // only read, and outlive the scoped threads; Vulkan allows creating pipelines on one
    // device from several threads at once.
    unsafe impl Sync for Shared<'_, '_> {}
    let shared = Shared(infos);
    let results = crate::threads::each_on_threads(infos.len(), |i| {
        let shared = &shared;
        let t = std::time::Instant::now();
        // SAFETY: the caller's contract for this info.
        let r = unsafe { d.create_compute_pipelines(cache, &shared.0[i..=i], None) };
        r.map(|p| (p[0], t.elapsed())).map_err(|(_, e)| e)
    });
    let failed = results.iter().flatten().find_map(|r| r.err());
    let complete = results.iter().all(Option::is_some);
    let made = results.into_iter().flatten().filter_map(|r| r.ok());
    if failed.is_none() && complete {
        return Ok(made.unzip());
    }
    for (p, _) in made {
        // SAFETY: made above, never used.
        unsafe { d.destroy_pipeline(p, None) };
    }
    Err(failed.unwrap_or(vk::Result::ERROR_UNKNOWN))
}

/// Writes `cache`'s data to `file` when the build added pipelines to what the file held
/// (`loaded`), merged with what another build wrote there meanwhile. Builds of one process
/// store one at a time, so that two merging at once do not each write what the other lacks
/// (a cooperative-matrix check builds a dozen graphs at once).
fn store_cache(
    d: &ash::Device,
    cache: vk::PipelineCache,
    file: &vk_core::CacheFile,
    loaded: &[u8],
) {
    static STORING: Mutex<()> = Mutex::new(());
    let _one = lock(&STORING);
    // SAFETY: `cache` is a live pipeline cache of `d`.
    let Ok(mut data) = (unsafe { d.get_pipeline_cache_data(cache) }) else {
        return;
    };
    if data.len() <= loaded.len() {
        return;
    }
    let now = file.load();
    if !now.is_empty() && now != loaded {
        // SAFETY: `now` passed the header check for this device; the temporary cache is
        // merged into `cache` (no other thread uses either now) and destroyed.
        unsafe {
            let info = vk::PipelineCacheCreateInfo::default().initial_data(&now);
            if let Ok(other) = d.create_pipeline_cache(&info, None) {
                let merged = d.merge_pipeline_caches(cache, &[other]);
                d.destroy_pipeline_cache(other, None);
                if merged.is_ok() {
                    data = d.get_pipeline_cache_data(cache).unwrap_or(data);
                }
            }
        }
    }
    file.store(&data);
}
