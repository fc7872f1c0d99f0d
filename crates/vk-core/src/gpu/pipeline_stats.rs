//! What the driver reports about its compiled pipelines (`VK_KHR_pipeline_executable_properties`),
//! on request: with [`PIPELINE_STATS_ENV`] set, [`crate::Requirements::new`] asks for the
//! `pipelineExecutableInfo` feature where the device offers it, pipelines are created with
//! [`capture_flags`], and [`statistics`] reads each executable's figures (on NVIDIA: register
//! count, shared and local memory, binary size). Without the variable nothing is asked for and
//! nothing captured: capturing can slow pipeline creation and bypass caches.

use std::fmt;

use ash::vk;

use crate::device::conv::fixed_str;
use crate::device::device::Device;
use crate::device::features::Features;
pub use crate::device::requirements::{PIPELINE_STATS_ENV, pipeline_stats_requested as requested};
use crate::error::{Error, VkResultExt};

/// The creation flags that capture statistics on `device`: empty unless the device has
/// `pipelineExecutableInfo` enabled.
pub fn capture_flags(device: &Device) -> vk::PipelineCreateFlags {
    if device
        .enabled()
        .features
        .contains(Features::PIPELINE_EXECUTABLE_INFO)
    {
        vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR
    } else {
        vk::PipelineCreateFlags::empty()
    }
}

/// One value of a statistic, as the driver typed it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StatValue {
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
}

impl fmt::Display for StatValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StatValue::Bool(v) => write!(f, "{v}"),
            StatValue::Int(v) => write!(f, "{v}"),
            StatValue::Uint(v) => write!(f, "{v}"),
            StatValue::Float(v) => write!(f, "{v}"),
        }
    }
}

/// The statistics of one executable of a pipeline (a compute pipeline has one).
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutableStats {
    /// The executable's name as the driver gives it.
    pub name: String,
    /// The executable's subgroup size.
    pub subgroup_size: u32,
    /// `(name, value)` of every statistic, in the driver's order.
    pub values: Vec<(String, StatValue)>,
}

impl fmt::Display for ExecutableStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (subgroup {})", self.name, self.subgroup_size)?;
        for (name, value) in &self.values {
            write!(f, ", {name}: {value}")?;
        }
        Ok(())
    }
}

/// Reads the statistics of every executable of `pipeline`, created on `device` with
/// [`capture_flags`]. Empty when the device has `pipelineExecutableInfo` disabled.
///
/// # Safety
/// `pipeline` is a live pipeline of `device`.
pub unsafe fn statistics(
    device: &Device,
    pipeline: vk::Pipeline,
) -> Result<Vec<ExecutableStats>, Error> {
    if capture_flags(device).is_empty() {
        return Ok(Vec::new());
    }
    let fns = ash::khr::pipeline_executable_properties::Device::new(
        device.instance().raw(),
        device.raw(),
    );
    let info = vk::PipelineInfoKHR::default().pipeline(pipeline);
    // SAFETY: the caller's pipeline is live; the extension is enabled (feature checked above).
    let executables = unsafe { fns.get_pipeline_executable_properties(&info) }
        .vk("vkGetPipelineExecutablePropertiesKHR")?;
    let mut out = Vec::with_capacity(executables.len());
    for (index, props) in executables.iter().enumerate() {
        let exe = vk::PipelineExecutableInfoKHR::default()
            .pipeline(pipeline)
            .executable_index(index as u32);
        // SAFETY: as above; `index` is below the count just read.
        let stats = unsafe { fns.get_pipeline_executable_statistics(&exe) }
            .vk("vkGetPipelineExecutableStatisticsKHR")?;
        out.push(ExecutableStats {
            name: fixed_str(&props.name),
            subgroup_size: props.subgroup_size,
            values: stats.iter().map(stat).collect(),
        });
    }
    Ok(out)
}

fn stat(s: &vk::PipelineExecutableStatisticKHR<'_>) -> (String, StatValue) {
    // SAFETY: the driver wrote the union member named by `format`.
    let value = unsafe {
        match s.format {
            vk::PipelineExecutableStatisticFormatKHR::BOOL32 => StatValue::Bool(s.value.b32 != 0),
            vk::PipelineExecutableStatisticFormatKHR::INT64 => StatValue::Int(s.value.i64),
            vk::PipelineExecutableStatisticFormatKHR::FLOAT64 => StatValue::Float(s.value.f64),
            _ => StatValue::Uint(s.value.u64),
        }
    };
    (fixed_str(&s.name), value)
}

/// Logs (`info`) the statistics of `pipeline` under `label`, where capture is on; a failed
/// query is logged as a warning, never an error: statistics are diagnostics.
///
/// # Safety
/// As [`statistics`].
pub unsafe fn log_statistics(device: &Device, pipeline: vk::Pipeline, label: &str) {
    if capture_flags(device).is_empty() {
        return;
    }
    // SAFETY: forwarded contract.
    match unsafe { statistics(device, pipeline) } {
        Ok(list) => {
            for exe in list {
                log::info!("pipeline {label}: {exe}");
            }
        }
        Err(e) => log::warn!("pipeline {label}: no statistics: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_print_every_value() {
        let s = ExecutableStats {
            name: "Compute".into(),
            subgroup_size: 32,
            values: vec![
                ("Register Count".into(), StatValue::Uint(128)),
                ("Spills".into(), StatValue::Bool(false)),
            ],
        };
        assert_eq!(
            s.to_string(),
            "Compute (subgroup 32), Register Count: 128, Spills: false"
        );
    }
}
