//! [`Objects`]: every Vulkan object a model creates, destroyed in reverse dependency order.

use std::ptr;

use vk_core::arm::{self, DataGraphFns, TensorFns};
use vk_core::{Buffer, Device, MemoryBlock, vk};

/// All Vulkan objects of a model; destroyed in reverse dependency order on drop. Built
/// incrementally, so a failed load destroys what it had created. Memory comes from the
/// device's allocator ([`MemoryBlock`], [`Buffer`]) and is freed after the objects bound to
/// it (fields drop after [`Drop::drop`]).
pub(super) struct Objects {
    pub(super) device: Device,
    pub(super) tensor_fns: TensorFns,
    pub(super) data_graph_fns: Option<DataGraphFns>,
    /// One block per storage (alias group, or resource outside any group).
    pub(super) storages: Vec<MemoryBlock>,
    pub(super) tensors: Vec<arm::TensorARM>,
    pub(super) views: Vec<arm::TensorViewARM>,
    pub(super) buffers: Vec<vk::Buffer>,
    /// Host staging buffers of inputs and outputs.
    pub(super) staging: Vec<Buffer>,
    pub(super) shader_modules: Vec<vk::ShaderModule>,
    pub(super) set_layouts: Vec<vk::DescriptorSetLayout>,
    pub(super) pipeline_layouts: Vec<vk::PipelineLayout>,
    pub(super) pipelines: Vec<vk::Pipeline>,
    pub(super) sessions: Vec<arm::DataGraphPipelineSessionARM>,
    /// Memory bound at the sessions' bind points.
    pub(super) session_memory: Vec<MemoryBlock>,
    pub(super) descriptor_pool: vk::DescriptorPool,
    /// Set when the GPU may still use the objects (a wait failed): nothing is destroyed.
    pub(super) leak: bool,
}

impl Objects {
    /// No objects yet, `n_res` empty resource slots.
    pub(super) fn new(
        device: &Device,
        tensor_fns: TensorFns,
        data_graph_fns: Option<DataGraphFns>,
        n_res: usize,
    ) -> Objects {
        Objects {
            device: device.clone(),
            tensor_fns,
            data_graph_fns,
            storages: Vec::new(),
            tensors: vec![arm::TensorARM::NULL; n_res],
            views: vec![arm::TensorViewARM::NULL; n_res],
            buffers: vec![vk::Buffer::null(); n_res],
            staging: Vec::new(),
            shader_modules: Vec::new(),
            set_layouts: Vec::new(),
            pipeline_layouts: Vec::new(),
            pipelines: Vec::new(),
            sessions: Vec::new(),
            session_memory: Vec::new(),
            descriptor_pool: vk::DescriptorPool::null(),
            leak: false,
        }
    }
}

impl std::fmt::Debug for Objects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Objects")
            .field("tensors", &self.tensors.len())
            .field("pipelines", &self.pipelines.len())
            .field("sessions", &self.sessions.len())
            .finish()
    }
}

impl Drop for Objects {
    fn drop(&mut self) {
        if self.leak {
            // The GPU may still use them: leak rather than free memory in use.
            std::mem::forget(std::mem::take(&mut self.storages));
            std::mem::forget(std::mem::take(&mut self.staging));
            std::mem::forget(std::mem::take(&mut self.session_memory));
            return;
        }
        let d = self.device.raw();
        let h = d.handle();
        // SAFETY: every handle was created from this device by this struct and is destroyed
        // once; the owner waited for its submission before dropping (no GPU work in flight
        // uses them; otherwise `leak` is set). Null handles are skipped.
        unsafe {
            if self.descriptor_pool != vk::DescriptorPool::null() {
                d.destroy_descriptor_pool(self.descriptor_pool, None);
            }
            if let Some(dg) = &self.data_graph_fns {
                for s in self.sessions.drain(..) {
                    (dg.destroy_data_graph_pipeline_session)(h, s, ptr::null());
                }
            }
            for p in self.pipelines.drain(..) {
                d.destroy_pipeline(p, None);
            }
            for l in self.pipeline_layouts.drain(..) {
                d.destroy_pipeline_layout(l, None);
            }
            for l in self.set_layouts.drain(..) {
                d.destroy_descriptor_set_layout(l, None);
            }
            for m in self.shader_modules.drain(..) {
                d.destroy_shader_module(m, None);
            }
            for v in self.views.drain(..) {
                if !v.is_null() {
                    (self.tensor_fns.destroy_tensor_view)(h, v, ptr::null());
                }
            }
            for b in self.buffers.drain(..) {
                if b != vk::Buffer::null() {
                    d.destroy_buffer(b, None);
                }
            }
            for t in self.tensors.drain(..) {
                if !t.is_null() {
                    (self.tensor_fns.destroy_tensor)(h, t, ptr::null());
                }
            }
        }
    }
}
