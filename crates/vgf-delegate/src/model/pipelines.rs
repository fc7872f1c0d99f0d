//! Segments: descriptor set layouts, pipeline layouts and shader modules per segment; GRAPH
//! segments become data-graph pipelines (graph constants from the constants section) with a
//! pipeline session and its bind-point memory, COMPUTE segments compute pipelines with their
//! push constant ranges and dispatch shape; then one descriptor pool and the sets.

use std::ffi::{CString, c_void};
use std::ptr;

use vk_core::arm::{self, DataGraphFns};
use vk_core::host::element_count;
use vk_core::{MemoryBlock, MemoryLocation, vk};

use super::objects::Objects;
use super::resources::{Desc, dims_usize, dtype_of};
use super::{unsupported, vkerr};
use crate::error::Result;
use crate::format::{ModuleType, Segment, Vgf};

/// A descriptor set of a segment: set number, layout, (binding, resource) pairs.
pub(super) type SetPlan = (u32, vk::DescriptorSetLayout, Vec<(u32, usize)>);

/// One segment as recorded.
#[derive(Debug)]
pub(super) struct SegmentRun {
    pub(super) kind: ModuleType,
    pub(super) pipeline: vk::Pipeline,
    pub(super) layout: vk::PipelineLayout,
    pub(super) session: arm::DataGraphPipelineSessionARM,
    /// (set index, set layout, (binding, resource) pairs)
    pub(super) sets: Vec<SetPlan>,
    pub(super) push: Vec<(vk::ShaderStageFlags, u32, u32)>,
    pub(super) dispatch: [u32; 3],
}

/// Creates every segment's layouts, module and pipeline (and session for GRAPH segments).
/// Returns the segments and the number of tensor descriptors their sets hold.
pub(super) fn create_segments(
    objects: &mut Objects,
    vgf: &Vgf<'_>,
    descs: &[Option<Desc>],
) -> Result<(Vec<SegmentRun>, u32)> {
    let mut runs = Vec::with_capacity(vgf.sequence.segments.len());
    let mut tensor_descriptors = 0u32;
    for seg in &vgf.sequence.segments {
        let (run, n) = create_segment(objects, vgf, seg, descs)?;
        tensor_descriptors += n;
        runs.push(run);
    }
    Ok((runs, tensor_descriptors))
}

fn create_segment(
    objects: &mut Objects,
    vgf: &Vgf<'_>,
    seg: &Segment<'_>,
    descs: &[Option<Desc>],
) -> Result<(SegmentRun, u32)> {
    let module = &vgf.modules[seg.module_index as usize];
    let spirv = module.spirv.ok_or_else(|| {
        unsupported(format!(
            "segment '{}' uses module {} ('{}'), which carries no code",
            seg.name, seg.module_index, module.name
        ))
    })?;
    let (layouts, sets, tensor_descriptors) = create_set_layouts(objects, seg)?;
    let push: Vec<(vk::ShaderStageFlags, u32, u32)> = seg
        .push_constant_ranges
        .iter()
        .map(|p| {
            (
                vk::ShaderStageFlags::from_raw(p.stage_flags),
                p.offset,
                p.size,
            )
        })
        .collect();
    let layout = create_pipeline_layout(objects, &layouts, &push)?;
    let d = objects.device.raw();
    let words = spirv.words();
    let info = vk::ShaderModuleCreateInfo::default().code(&words);
    // SAFETY: the code is a SPIR-V module whose preamble was scanned.
    let shader =
        unsafe { d.create_shader_module(&info, None) }.map_err(vkerr("vkCreateShaderModule"))?;
    objects.shader_modules.push(shader);
    let entry = CString::new(module.entry_point).map_err(|_| {
        unsupported(format!(
            "module {} entry point contains a NUL byte",
            seg.module_index
        ))
    })?;
    let mut run = SegmentRun {
        kind: seg.kind,
        pipeline: vk::Pipeline::null(),
        layout,
        session: arm::DataGraphPipelineSessionARM::NULL,
        sets,
        push,
        dispatch: seg.dispatch_shape.unwrap_or([1, 1, 1]),
    };
    match seg.kind {
        ModuleType::Compute => {
            run.pipeline = create_compute_pipeline(objects, shader, &entry, layout)?;
        }
        ModuleType::Graph => {
            let dg = objects
                .data_graph_fns
                .ok_or_else(|| unsupported("no data graph"))?;
            let shader = (shader, entry.as_c_str());
            run.pipeline = create_graph_pipeline(objects, &dg, vgf, seg, shader, &run, descs)?;
            run.session = create_session(objects, &dg, run.pipeline)?;
        }
    }
    Ok((run, tensor_descriptors))
}

/// Descriptor set layouts, one per set number from 0 to the highest used. Returns the
/// layouts, the non-empty sets and their number of tensor descriptors.
fn create_set_layouts(
    objects: &mut Objects,
    seg: &Segment<'_>,
) -> Result<(Vec<vk::DescriptorSetLayout>, Vec<SetPlan>, u32)> {
    let stage = match seg.kind {
        ModuleType::Graph => vk::ShaderStageFlags::ALL,
        ModuleType::Compute => vk::ShaderStageFlags::COMPUTE,
    };
    let mut layouts = Vec::new();
    let mut sets = Vec::new();
    let mut tensor_descriptors = 0u32;
    let Some(max_set) = seg.descriptor_sets.iter().map(|s| s.set_index).max() else {
        return Ok((layouts, sets, 0));
    };
    if max_set > 31 {
        return Err(unsupported(format!(
            "segment '{}' uses descriptor set {max_set}",
            seg.name
        )));
    }
    let d = objects.device.raw();
    for set_index in 0..=max_set {
        let bindings: Vec<(u32, usize)> = seg
            .descriptor_sets
            .iter()
            .filter(|s| s.set_index == set_index)
            .flat_map(|s| s.bindings.iter())
            .map(|b| (b.binding, b.mrt_index as usize))
            .collect();
        let vk_bindings: Vec<vk::DescriptorSetLayoutBinding<'_>> = bindings
            .iter()
            .map(|(binding, _)| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(*binding)
                    .descriptor_type(arm::DESCRIPTOR_TYPE_TENSOR_ARM)
                    .descriptor_count(1)
                    .stage_flags(stage)
            })
            .collect();
        let info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&vk_bindings);
        // SAFETY: valid create info.
        let layout = unsafe { d.create_descriptor_set_layout(&info, None) }
            .map_err(vkerr("vkCreateDescriptorSetLayout"))?;
        objects.set_layouts.push(layout);
        layouts.push(layout);
        tensor_descriptors += bindings.len() as u32;
        if !bindings.is_empty() {
            sets.push((set_index, layout, bindings));
        }
    }
    Ok((layouts, sets, tensor_descriptors))
}

fn create_pipeline_layout(
    objects: &mut Objects,
    layouts: &[vk::DescriptorSetLayout],
    push: &[(vk::ShaderStageFlags, u32, u32)],
) -> Result<vk::PipelineLayout> {
    let ranges: Vec<vk::PushConstantRange> = push
        .iter()
        .map(|&(stage_flags, offset, size)| vk::PushConstantRange {
            stage_flags,
            offset,
            size,
        })
        .collect();
    let info = vk::PipelineLayoutCreateInfo::default()
        .set_layouts(layouts)
        .push_constant_ranges(&ranges);
    // SAFETY: valid create info.
    let layout = unsafe { objects.device.raw().create_pipeline_layout(&info, None) }
        .map_err(vkerr("vkCreatePipelineLayout"))?;
    objects.pipeline_layouts.push(layout);
    Ok(layout)
}

fn create_compute_pipeline(
    objects: &mut Objects,
    shader: vk::ShaderModule,
    entry: &CString,
    layout: vk::PipelineLayout,
) -> Result<vk::Pipeline> {
    let stage_info = vk::PipelineShaderStageCreateInfo::default()
        .stage(vk::ShaderStageFlags::COMPUTE)
        .module(shader)
        .name(entry);
    let info = vk::ComputePipelineCreateInfo::default()
        .stage(stage_info)
        .layout(layout);
    // SAFETY: valid create info.
    let pipelines = unsafe {
        objects
            .device
            .raw()
            .create_compute_pipelines(vk::PipelineCache::null(), &[info], None)
    }
    .map_err(|(_, r)| vkerr("vkCreateComputePipelines")(r))?;
    let pipeline = pipelines[0];
    objects.pipelines.push(pipeline);
    Ok(pipeline)
}

/// The descriptions of a GRAPH segment's graph constants, checked: dense, and holding the
/// bytes their resource's shape and dtype need.
fn graph_constant_descs(vgf: &Vgf<'_>, seg: &Segment<'_>) -> Result<Vec<Desc>> {
    let bindings = seg.graph_constants();
    let mut descs = Vec::with_capacity(bindings.len());
    for b in &bindings {
        let c = &vgf.constants[b.constant_index as usize];
        if c.sparsity_dimension != -1 {
            return Err(unsupported(format!(
                "constant {} is sparse (dimension {}); only dense constants are supported",
                b.constant_index, c.sparsity_dimension
            )));
        }
        let r = &vgf.resources[c.mrt_index as usize];
        let shape = dims_usize(r)?;
        let dtype = dtype_of(r)?;
        let need = element_count(&shape).and_then(|n| n.checked_mul(dtype.size()));
        if need != Some(c.data.len()) {
            return Err(unsupported(format!(
                "constant {} holds {} bytes, but resource {} ({} {:?}) needs {:?}",
                b.constant_index,
                c.data.len(),
                r.index,
                dtype,
                shape,
                need
            )));
        }
        descs.push(Desc::of(r, arm::TENSOR_USAGE_DATA_GRAPH_BIT_ARM));
    }
    Ok(descs)
}

/// A data-graph pipeline for a GRAPH segment: its module with the graph constants, and a
/// resource info (with its tensor description) per binding of every set.
fn create_graph_pipeline(
    objects: &mut Objects,
    dg: &DataGraphFns,
    vgf: &Vgf<'_>,
    seg: &Segment<'_>,
    (shader, entry): (vk::ShaderModule, &std::ffi::CStr),
    run: &SegmentRun,
    descs: &[Option<Desc>],
) -> Result<vk::Pipeline> {
    let bindings = seg.graph_constants();
    let const_descs = graph_constant_descs(vgf, seg)?;
    let const_vk: Vec<arm::TensorDescriptionARM> = const_descs.iter().map(Desc::vk).collect();
    let constants: Vec<arm::DataGraphPipelineConstantARM> = bindings
        .iter()
        .zip(&const_vk)
        .map(|(b, desc)| arm::DataGraphPipelineConstantARM {
            p_next: (desc as *const arm::TensorDescriptionARM).cast::<c_void>(),
            id: b.graph_constant_id,
            p_constant_data: vgf.constants[b.constant_index as usize]
                .data
                .as_ptr()
                .cast::<c_void>(),
            ..Default::default()
        })
        .collect();
    let mut res_vk: Vec<arm::TensorDescriptionARM> = Vec::new();
    let mut res_keys: Vec<(u32, u32)> = Vec::new();
    for (set_index, _, bindings) in &run.sets {
        for &(binding, mrt) in bindings {
            let desc = descs[mrt]
                .as_ref()
                .ok_or_else(|| unsupported(format!("resource {mrt} has no tensor")))?;
            res_vk.push(desc.vk());
            res_keys.push((*set_index, binding));
        }
    }
    let resource_infos: Vec<arm::DataGraphPipelineResourceInfoARM> = res_keys
        .iter()
        .zip(&res_vk)
        .map(
            |(&(set, binding), desc)| arm::DataGraphPipelineResourceInfoARM {
                p_next: (desc as *const arm::TensorDescriptionARM).cast::<c_void>(),
                descriptor_set: set,
                binding,
                array_element: 0,
                ..Default::default()
            },
        )
        .collect();
    let module_info = arm::DataGraphPipelineShaderModuleCreateInfoARM {
        module: shader,
        p_name: entry.as_ptr(),
        constant_count: constants.len() as u32,
        p_constants: constants.as_ptr(),
        ..Default::default()
    };
    let info = arm::DataGraphPipelineCreateInfoARM {
        p_next: (&module_info as *const arm::DataGraphPipelineShaderModuleCreateInfoARM)
            .cast::<c_void>(),
        layout: run.layout,
        resource_info_count: resource_infos.len() as u32,
        p_resource_infos: resource_infos.as_ptr(),
        ..Default::default()
    };
    let mut pipeline = vk::Pipeline::null();
    // SAFETY: every pointer in `info` and its chain points into locals (descriptions,
    // constants borrowed from the file, resource infos, entry point) that outlive the call.
    let res = unsafe {
        (dg.create_data_graph_pipelines)(
            objects.device.raw().handle(),
            vk::DeferredOperationKHR::null(),
            vk::PipelineCache::null(),
            1,
            &info,
            ptr::null(),
            &mut pipeline,
        )
    };
    if res != vk::Result::SUCCESS {
        return Err(vkerr("vkCreateDataGraphPipelinesARM")(res));
    }
    objects.pipelines.push(pipeline);
    Ok(pipeline)
}

/// A session for a data-graph pipeline, with memory bound at every bind point.
fn create_session(
    objects: &mut Objects,
    dg: &DataGraphFns,
    pipeline: vk::Pipeline,
) -> Result<arm::DataGraphPipelineSessionARM> {
    let h = objects.device.raw().handle();
    let info = arm::DataGraphPipelineSessionCreateInfoARM {
        data_graph_pipeline: pipeline,
        ..Default::default()
    };
    let mut session = arm::DataGraphPipelineSessionARM::NULL;
    // SAFETY: valid create info for a live data-graph pipeline.
    let res =
        unsafe { (dg.create_data_graph_pipeline_session)(h, &info, ptr::null(), &mut session) };
    if res != vk::Result::SUCCESS {
        return Err(vkerr("vkCreateDataGraphPipelineSessionARM")(res));
    }
    objects.sessions.push(session);
    for r in &bind_point_requirements(objects, dg, session)? {
        if r.bind_point_type != arm::DATA_GRAPH_PIPELINE_SESSION_BIND_POINT_TYPE_MEMORY_ARM {
            return Err(unsupported(format!(
                "data-graph session bind point {} has type {}, only memory bind points are \
                 supported",
                r.bind_point, r.bind_point_type
            )));
        }
        for object_index in 0..r.num_objects {
            bind_session_memory(objects, dg, session, r.bind_point, object_index)?;
        }
    }
    Ok(session)
}

fn bind_point_requirements(
    objects: &Objects,
    dg: &DataGraphFns,
    session: arm::DataGraphPipelineSessionARM,
) -> Result<Vec<arm::DataGraphPipelineSessionBindPointRequirementARM>> {
    const CALL: &str = "vkGetDataGraphPipelineSessionBindPointRequirementsARM";
    let h = objects.device.raw().handle();
    let req_info = arm::DataGraphPipelineSessionBindPointRequirementsInfoARM {
        session,
        ..Default::default()
    };
    let mut count = 0u32;
    // SAFETY: count query.
    let res = unsafe {
        (dg.get_data_graph_pipeline_session_bind_point_requirements)(
            h,
            &req_info,
            &mut count,
            ptr::null_mut(),
        )
    };
    if res != vk::Result::SUCCESS {
        return Err(vkerr(CALL)(res));
    }
    let mut reqs =
        vec![arm::DataGraphPipelineSessionBindPointRequirementARM::default(); count as usize];
    // SAFETY: `reqs` holds `count` initialized output structures.
    let res = unsafe {
        (dg.get_data_graph_pipeline_session_bind_point_requirements)(
            h,
            &req_info,
            &mut count,
            reqs.as_mut_ptr(),
        )
    };
    if res != vk::Result::SUCCESS && res != vk::Result::INCOMPLETE {
        return Err(vkerr(CALL)(res));
    }
    reqs.truncate(count as usize);
    Ok(reqs)
}

/// Allocates and binds the memory of one object of a session bind point (none when the
/// session needs none there).
fn bind_session_memory(
    objects: &mut Objects,
    dg: &DataGraphFns,
    session: arm::DataGraphPipelineSessionARM,
    bind_point: arm::DataGraphPipelineSessionBindPointARM,
    object_index: u32,
) -> Result<()> {
    let device = objects.device.clone();
    let d = device.raw();
    let h = d.handle();
    let info = arm::DataGraphPipelineSessionMemoryRequirementsInfoARM {
        session,
        bind_point,
        object_index,
        ..Default::default()
    };
    let mut req2 = vk::MemoryRequirements2::default();
    // SAFETY: valid query for a live session.
    unsafe { (dg.get_data_graph_pipeline_session_memory_requirements)(h, &info, &mut req2) };
    let req = req2.memory_requirements;
    if req.size == 0 {
        return Ok(());
    }
    let what = format!("data-graph session bind point {bind_point} object {object_index}");
    let block = MemoryBlock::new(&device, &req, MemoryLocation::Device, &what)?;
    let (memory, memory_offset) = (block.memory(), block.offset());
    objects.session_memory.push(block);
    let bind = arm::BindDataGraphPipelineSessionMemoryInfoARM {
        session,
        bind_point,
        object_index,
        memory,
        memory_offset,
        ..Default::default()
    };
    // SAFETY: session and memory are live; the block meets the requirements (the allocator
    // was given them) from `memory_offset` on.
    let res = unsafe { (dg.bind_data_graph_pipeline_session_memory)(h, 1, &bind) };
    if res != vk::Result::SUCCESS {
        return Err(vkerr("vkBindDataGraphPipelineSessionMemoryARM")(res));
    }
    Ok(())
}

/// One descriptor pool for every segment's sets; allocates and writes the sets (a tensor
/// view per binding). Returns the sets per segment.
pub(super) fn create_descriptor_sets(
    objects: &mut Objects,
    runs: &[SegmentRun],
    tensor_descriptors: u32,
) -> Result<Vec<Vec<vk::DescriptorSet>>> {
    let device = objects.device.clone();
    let d = device.raw();
    let n_sets: u32 = runs.iter().map(|r| r.sets.len() as u32).sum();
    if n_sets > 0 {
        let sizes = [vk::DescriptorPoolSize {
            ty: arm::DESCRIPTOR_TYPE_TENSOR_ARM,
            descriptor_count: tensor_descriptors.max(1),
        }];
        let info = vk::DescriptorPoolCreateInfo::default()
            .max_sets(n_sets)
            .pool_sizes(&sizes);
        // SAFETY: valid create info.
        objects.descriptor_pool = unsafe { d.create_descriptor_pool(&info, None) }
            .map_err(vkerr("vkCreateDescriptorPool"))?;
    }
    let mut allocated = Vec::with_capacity(runs.len());
    for run in runs {
        if run.sets.is_empty() {
            allocated.push(Vec::new());
            continue;
        }
        let layouts: Vec<vk::DescriptorSetLayout> = run.sets.iter().map(|s| s.1).collect();
        let info = vk::DescriptorSetAllocateInfo::default()
            .descriptor_pool(objects.descriptor_pool)
            .set_layouts(&layouts);
        // SAFETY: the pool has room for every set (counted above).
        let sets = unsafe { d.allocate_descriptor_sets(&info) }
            .map_err(vkerr("vkAllocateDescriptorSets"))?;
        for (set, (_, _, bindings)) in sets.iter().zip(&run.sets) {
            for &(binding, mrt) in bindings {
                write_tensor_descriptor(d, *set, binding, objects.views[mrt]);
            }
        }
        allocated.push(sets);
    }
    Ok(allocated)
}

fn write_tensor_descriptor(
    d: &vk_core::ash::Device,
    set: vk::DescriptorSet,
    binding: u32,
    view: arm::TensorViewARM,
) {
    let tensor_write = arm::WriteDescriptorSetTensorARM {
        tensor_view_count: 1,
        p_tensor_views: &view,
        ..Default::default()
    };
    let mut write = vk::WriteDescriptorSet::default()
        .dst_set(set)
        .dst_binding(binding)
        .descriptor_type(arm::DESCRIPTOR_TYPE_TENSOR_ARM);
    write.descriptor_count = 1;
    write.p_next = (&tensor_write as *const arm::WriteDescriptorSetTensorARM).cast::<c_void>();
    // SAFETY: the chained tensor write points at a live view; the set and binding exist with
    // the tensor descriptor type.
    unsafe { d.update_descriptor_sets(&[write], &[]) };
}
