//! What a device must have to run VGF models: a base set for any model, and a per-model set
//! derived from the SPIR-V capabilities its modules declare.

use std::ffi::CStr;

use vk_core::{Features, QueueCaps, Requirements, Version, arm};

use crate::error::Error;
use crate::format::{ModuleType, Spirv, Vgf};

/// Who declares these requirements.
pub const REQUESTER: &str = "vgf-delegate";

/// `VK_EXT_shader_replicated_composites` (not in `ash` 0.38).
pub const REPLICATED_COMPOSITES_EXTENSION_NAME: &CStr = c"VK_EXT_shader_replicated_composites";

/// SPIR-V capability numbers this crate maps to device requirements.
pub mod capability {
    /// `Float16`.
    pub const FLOAT16: u32 = 9;
    /// `Float64`.
    pub const FLOAT64: u32 = 10;
    /// `Int64`.
    pub const INT64: u32 = 11;
    /// `Int16`.
    pub const INT16: u32 = 22;
    /// `Int8`.
    pub const INT8: u32 = 39;
    /// `StorageBuffer16BitAccess`.
    pub const STORAGE_BUFFER_16BIT: u32 = 4433;
    /// `StorageBuffer8BitAccess`.
    pub const STORAGE_BUFFER_8BIT: u32 = 4448;
    /// `TensorsARM`.
    pub const TENSORS_ARM: u32 = 4174;
    /// `GraphARM`.
    pub const GRAPH_ARM: u32 = 4191;
    /// `VulkanMemoryModel`.
    pub const VULKAN_MEMORY_MODEL: u32 = 5345;
    /// `VulkanMemoryModelDeviceScope`.
    pub const VULKAN_MEMORY_MODEL_DEVICE_SCOPE: u32 = 5346;
    /// `ReplicatedCompositesEXT`.
    pub const REPLICATED_COMPOSITES_EXT: u32 = 6024;
}

/// What a SPIR-V module declares: capabilities, extensions and extended instruction sets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpirvInfo {
    /// `OpCapability` operands, in order.
    pub capabilities: Vec<u32>,
    /// `OpExtension` names.
    pub extensions: Vec<String>,
    /// `OpExtInstImport` names.
    pub ext_inst_imports: Vec<String>,
}

fn literal_string(words: &[u32]) -> String {
    let mut bytes = Vec::new();
    'outer: for w in words {
        for b in w.to_le_bytes() {
            if b == 0 {
                break 'outer;
            }
            bytes.push(b);
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Scans a module's instructions for its capabilities, extensions and instruction-set imports.
pub fn scan_spirv(module: usize, spirv: &Spirv<'_>) -> Result<SpirvInfo, Error> {
    let words = spirv.words();
    let bad = |why: String| Error::Unsupported(format!("module {module}: invalid SPIR-V: {why}"));
    if words.len() < 5 || words[0] != 0x0723_0203 {
        return Err(bad(format!(
            "{} words, first word {:#x} (expected the SPIR-V magic 0x07230203)",
            words.len(),
            words.first().copied().unwrap_or(0)
        )));
    }
    let mut info = SpirvInfo::default();
    let mut at = 5;
    while at < words.len() {
        let count = (words[at] >> 16) as usize;
        let opcode = words[at] & 0xffff;
        if count == 0 || at + count > words.len() {
            return Err(bad(format!(
                "instruction at word {at} has word count {count}, {} words remain",
                words.len() - at
            )));
        }
        let operands = &words[at + 1..at + count];
        match opcode {
            // OpCapability
            17 if !operands.is_empty() => info.capabilities.push(operands[0]),
            // OpExtension
            10 => info.extensions.push(literal_string(operands)),
            // OpExtInstImport
            11 if operands.len() > 1 => info.ext_inst_imports.push(literal_string(&operands[1..])),
            // OpFunction: the preamble, where these live, is over.
            54 => break,
            _ => {}
        }
        at += count;
    }
    Ok(info)
}

/// The requirements of every VGF model: `VK_ARM_tensors` (feature `tensors`),
/// `VK_ARM_data_graph` (features `dataGraph`, `dataGraphShaderModule`: graphs come as SPIR-V
/// modules), `VK_ARM_data_graph_instruction_set_tosa`, `synchronization2` (barriers name the
/// data-graph stage, a `VkPipelineStageFlags2` bit), Vulkan 1.3, and one queue family with
/// COMPUTE and DATA_GRAPH.
pub fn requirements() -> Requirements {
    Requirements::new(REQUESTER)
        .min_api(Version::V1_3)
        .require_extension(arm::TENSORS_EXTENSION_NAME)
        .require_extension(arm::DATA_GRAPH_EXTENSION_NAME)
        .require_extension(arm::DATA_GRAPH_TOSA_EXTENSION_NAME)
        .require_features(
            Features::TENSORS_ARM
                | Features::DATA_GRAPH_ARM
                | Features::DATA_GRAPH_SHADER_MODULE_ARM
                | Features::SYNCHRONIZATION_2,
        )
        .require_queue(QueueCaps::COMPUTE | QueueCaps::DATA_GRAPH_ARM)
}

/// The requirements of one model: those of [`requirements()`] that it uses, plus what the
/// capabilities of its modules need:
///
/// | SPIR-V | device |
/// |---|---|
/// | `Int8`, `Int16`, `Int64`, `Float16`, `Float64` | `shaderInt8`, `shaderInt16`, `shaderInt64`, `shaderFloat16`, `shaderFloat64` |
/// | `VulkanMemoryModel` (+`DeviceScope`) | `vulkanMemoryModel` (+`vulkanMemoryModelDeviceScope`) |
/// | `StorageBuffer8BitAccess`, `StorageBuffer16BitAccess` | the features of those names |
/// | `TensorsARM` in a COMPUTE module | `shaderTensorAccess` |
/// | `ReplicatedCompositesEXT` | `VK_EXT_shader_replicated_composites`: required for COMPUTE modules; optional for GRAPH modules, whose SPIR-V the data-graph implementation consumes (Arm's emulation layer does without it) |
///
/// Without a GRAPH segment, `VK_ARM_data_graph` and the DATA_GRAPH queue are not required;
/// the TOSA instruction set is required when a module imports `TOSA.*`.
pub fn requirements_for(vgf: &Vgf<'_>) -> Result<Requirements, Error> {
    let has_graph = vgf
        .sequence
        .segments
        .iter()
        .any(|s| s.kind == ModuleType::Graph);
    let mut req = Requirements::new(REQUESTER)
        .min_api(Version::V1_3)
        .require_extension(arm::TENSORS_EXTENSION_NAME)
        .require_features(Features::TENSORS_ARM | Features::SYNCHRONIZATION_2);
    if has_graph {
        req = req
            .require_extension(arm::DATA_GRAPH_EXTENSION_NAME)
            .require_features(Features::DATA_GRAPH_ARM | Features::DATA_GRAPH_SHADER_MODULE_ARM)
            .require_queue(QueueCaps::COMPUTE | QueueCaps::DATA_GRAPH_ARM);
    } else {
        req = req.require_queue(QueueCaps::COMPUTE);
    }
    let mut tosa = false;
    let mut replicated_required = false;
    let mut replicated_optional = false;
    for (i, m) in vgf.modules.iter().enumerate() {
        let Some(spirv) = &m.spirv else { continue };
        let info = scan_spirv(i, spirv)?;
        tosa |= info.ext_inst_imports.iter().any(|s| s.starts_with("TOSA."));
        let mut f = Features::empty();
        for &c in &info.capabilities {
            f |= match c {
                capability::INT8 => Features::SHADER_INT8,
                capability::INT16 => Features::SHADER_INT16,
                capability::INT64 => Features::SHADER_INT64,
                capability::FLOAT16 => Features::SHADER_FLOAT16,
                capability::FLOAT64 => Features::SHADER_FLOAT64,
                capability::VULKAN_MEMORY_MODEL => Features::VULKAN_MEMORY_MODEL,
                capability::VULKAN_MEMORY_MODEL_DEVICE_SCOPE => {
                    Features::VULKAN_MEMORY_MODEL | Features::VULKAN_MEMORY_MODEL_DEVICE_SCOPE
                }
                capability::STORAGE_BUFFER_8BIT => Features::STORAGE_BUFFER_8BIT,
                capability::STORAGE_BUFFER_16BIT => Features::STORAGE_BUFFER_16BIT,
                capability::TENSORS_ARM if m.kind == ModuleType::Compute => {
                    Features::SHADER_TENSOR_ACCESS_ARM
                }
                capability::REPLICATED_COMPOSITES_EXT => {
                    if m.kind == ModuleType::Compute {
                        replicated_required = true;
                    } else {
                        replicated_optional = true;
                    }
                    Features::empty()
                }
                _ => Features::empty(),
            };
        }
        req = req.require_features(f);
    }
    if tosa {
        req = req.require_extension(arm::DATA_GRAPH_TOSA_EXTENSION_NAME);
    }
    if replicated_required {
        req = req.require_extension(REPLICATED_COMPOSITES_EXTENSION_NAME);
    } else if replicated_optional {
        req = req.optional_extension(REPLICATED_COMPOSITES_EXTENSION_NAME);
    }
    Ok(req)
}
