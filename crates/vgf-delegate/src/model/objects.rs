//! [`Objects`]: every Vulkan object a model creates, destroyed in reverse dependency order.

use std::ptr;

use vk_core::arm::{self, DataGraphFns, TensorFns};
use vk_core::{Device, vk};

/// One allocation shared by the resources of an alias group (or holding one resource).
#[derive(Debug, Default)]
pub(super) struct Storage {
    pub(super) memory: vk::DeviceMemory,
    pub(super) mapped: Option<*mut u8>,
    pub(super) coherent: bool,
}

/// A host-visible buffer through which an input or output is copied.
#[derive(Debug)]
pub(super) struct Staging {
    pub(super) buffer: vk::Buffer,
    pub(super) memory: vk::DeviceMemory,
    pub(super) mapped: *mut u8,
    pub(super) coherent: bool,
}

/// All Vulkan objects of a model; destroyed in reverse dependency order on drop. Built
/// incrementally, so a failed load destroys what it had created.
pub(super) struct Objects {
    pub(super) device: Device,
    pub(super) tensor_fns: TensorFns,
    pub(super) data_graph_fns: Option<DataGraphFns>,
    pub(super) storages: Vec<Storage>,
    pub(super) tensors: Vec<arm::TensorARM>,
    pub(super) views: Vec<arm::TensorViewARM>,
    pub(super) buffers: Vec<vk::Buffer>,
    pub(super) staging: Vec<Staging>,
    pub(super) shader_modules: Vec<vk::ShaderModule>,
    pub(super) set_layouts: Vec<vk::DescriptorSetLayout>,
    pub(super) pipeline_layouts: Vec<vk::PipelineLayout>,
    pub(super) pipelines: Vec<vk::Pipeline>,
    pub(super) sessions: Vec<arm::DataGraphPipelineSessionARM>,
    pub(super) session_memory: Vec<vk::DeviceMemory>,
    pub(super) descriptor_pool: vk::DescriptorPool,
    pub(super) command_pool: vk::CommandPool,
    pub(super) fence: vk::Fence,
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
            command_pool: vk::CommandPool::null(),
            fence: vk::Fence::null(),
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
        let d = self.device.raw();
        let h = d.handle();
        // SAFETY: every handle was created from this device by this struct and is destroyed
        // once; the owner waited for its fence before dropping (no GPU work in flight uses
        // them). Null handles are skipped or accepted by the destroy calls.
        unsafe {
            if self.command_pool != vk::CommandPool::null() {
                d.destroy_command_pool(self.command_pool, None);
            }
            if self.fence != vk::Fence::null() {
                d.destroy_fence(self.fence, None);
            }
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
            for m in self.session_memory.drain(..) {
                d.free_memory(m, None);
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
            for s in self.staging.drain(..) {
                d.destroy_buffer(s.buffer, None);
                d.free_memory(s.memory, None);
            }
            for t in self.tensors.drain(..) {
                if !t.is_null() {
                    (self.tensor_fns.destroy_tensor)(h, t, ptr::null());
                }
            }
            for s in self.storages.drain(..) {
                if s.memory != vk::DeviceMemory::null() {
                    d.free_memory(s.memory, None);
                }
            }
        }
    }
}
