//! Timestamp queries, read back as durations.

use std::fmt;
use std::time::Duration;

use ash::vk;

use crate::device::device::Device;
use crate::error::{Error, VkResultExt};

/// A pool of `count` timestamp queries on one device.
pub struct Timestamps {
    device: Device,
    pool: vk::QueryPool,
    count: u32,
}

impl fmt::Debug for Timestamps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timestamps")
            .field("count", &self.count)
            .finish()
    }
}

impl Timestamps {
    /// A pool of `count` queries, or `None` where the device queue writes no timestamps
    /// (`timestampValidBits` of its family is 0, or the period is unknown).
    pub fn new(device: &Device, count: u32) -> Result<Option<Timestamps>, Error> {
        if !Self::supported(device) || count == 0 {
            return Ok(None);
        }
        let info = vk::QueryPoolCreateInfo::default()
            .query_type(vk::QueryType::TIMESTAMP)
            .query_count(count);
        // SAFETY: valid create info; destroyed in `Drop`.
        let pool =
            unsafe { device.raw().create_query_pool(&info, None) }.vk("vkCreateQueryPool")?;
        Ok(Some(Timestamps {
            device: device.clone(),
            pool,
            count,
        }))
    }

    /// Whether the device's queue writes timestamps.
    pub fn supported(device: &Device) -> bool {
        let caps = device.capabilities();
        let family = device.queue().family() as usize;
        caps.queue_families
            .get(family)
            .is_some_and(|f| f.timestamp_valid_bits > 0)
            && caps.limits.timestamp_period() > 0.0
    }

    /// The number of queries.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Records a reset of every query.
    ///
    /// # Safety
    /// `cmd` is a command buffer of this device, recording, outside a render pass.
    pub unsafe fn reset(&self, cmd: vk::CommandBuffer) {
        // SAFETY: the caller's contract; the range is the whole pool.
        unsafe {
            self.device
                .raw()
                .cmd_reset_query_pool(cmd, self.pool, 0, self.count)
        };
    }

    /// Records a timestamp into query `index` once `stage` has completed for prior commands.
    ///
    /// # Safety
    /// As [`Timestamps::reset`]; `index < count`, reset earlier in the same submission order.
    pub unsafe fn write(&self, cmd: vk::CommandBuffer, stage: vk::PipelineStageFlags, index: u32) {
        // SAFETY: the caller's contract.
        unsafe {
            self.device
                .raw()
                .cmd_write_timestamp(cmd, stage, self.pool, index)
        };
    }

    /// Reads queries `0..n` (waiting for them), as ticks.
    pub fn read_ticks(&self, n: u32) -> Result<Vec<u64>, Error> {
        let mut ticks = vec![0u64; n.min(self.count) as usize];
        // SAFETY: the queries were written by work the caller waited for.
        unsafe {
            self.device.raw().get_query_pool_results(
                self.pool,
                0,
                &mut ticks,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )
        }
        .vk("vkGetQueryPoolResults")?;
        Ok(ticks)
    }

    /// `ticks` of this device's timestamps as a duration.
    pub fn duration(&self, ticks: u64) -> Duration {
        let period = f64::from(self.device.capabilities().limits.timestamp_period());
        Duration::from_nanos((ticks as f64 * period) as u64)
    }

    /// The time from query `from` to query `to` for each pair, reading the pool once.
    pub fn elapsed(&self, pairs: &[(u32, u32)]) -> Result<Vec<Duration>, Error> {
        let n = pairs.iter().map(|&(a, b)| a.max(b) + 1).max().unwrap_or(0);
        let ticks = self.read_ticks(n)?;
        let period = f64::from(self.device.capabilities().limits.timestamp_period());
        Ok(pairs
            .iter()
            .map(|&(a, b)| {
                let (ta, tb) = (ticks[a as usize], ticks[b as usize]);
                Duration::from_nanos((tb.wrapping_sub(ta) as f64 * period) as u64)
            })
            .collect())
    }
}

impl Drop for Timestamps {
    fn drop(&mut self) {
        // SAFETY: created from this device, destroyed once; owners wait for their work first.
        unsafe { self.device.raw().destroy_query_pool(self.pool, None) };
    }
}
