//! The submission unit every delegate uses: a command pool, its command buffers and one fence,
//! with the pending state that keeps resources alive while the GPU may still use them.
//!
//! A [`Submission`] submits one of its command buffers at a time, through the device queue's
//! guard (held only around `vkQueueSubmit`), optionally waiting on and signalling semaphores
//! (binary or timeline). It is *pending* from a successful submit until a wait on its fence
//! succeeds: a failed or timed-out wait leaves it pending, so that [`Drop`] still waits before
//! destroying the pool and fence. A wait that cannot finish in `Drop` leaks the pool and fence
//! rather than destroying objects the GPU may still use.
//!
//! Waits use one policy, [`WaitPolicy`]: a timeout per wait (default
//! [`WaitPolicy::DEFAULT_TIMEOUT`]), after polling the fence for a short while (default
//! [`WaitPolicy::DEFAULT_SPIN`]) so that short executions do not pay a blocked thread's wake-up;
//! a timed-out wait returns [`Error::Timeout`] and leaves the work pending. A lost device makes
//! the submission fail every later call with [`Error::DeviceLost`]; a wait that reports the loss first waits for the submission's own
//! pending work (a lost device answers at once), so that its owner may destroy what that
//! work uses once the wait returns, whichever call saw the loss.

use std::fmt;
use std::time::Duration;

use ash::vk;

use crate::device::device::Device;
use crate::device::fault::FaultPoint;
use crate::error::{Error, VkError, VkResultExt};

/// A semaphore a submission waits on before `stage`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SemaphoreWait {
    /// The semaphore.
    pub semaphore: vk::Semaphore,
    /// The stages that wait.
    pub stage: vk::PipelineStageFlags,
    /// The value to wait for (timeline semaphores); ignored for binary ones.
    pub value: u64,
}

impl SemaphoreWait {
    /// A wait on a binary semaphore.
    pub fn binary(semaphore: vk::Semaphore, stage: vk::PipelineStageFlags) -> Self {
        SemaphoreWait {
            semaphore,
            stage,
            value: 0,
        }
    }
}

/// A semaphore a submission signals when it completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SemaphoreSignal {
    /// The semaphore.
    pub semaphore: vk::Semaphore,
    /// The value to signal (timeline semaphores); ignored for binary ones.
    pub value: u64,
}

impl SemaphoreSignal {
    /// A signal of a binary semaphore.
    pub fn binary(semaphore: vk::Semaphore) -> Self {
        SemaphoreSignal {
            semaphore,
            value: 0,
        }
    }
}

/// How long waits for submitted work may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitPolicy {
    /// The longest one fence wait may take.
    pub timeout: Duration,
    /// How long a wait first polls the fence (`vkGetFenceStatus`) before it blocks in
    /// `vkWaitForFences`: a blocked thread is woken tens of microseconds after the GPU
    /// finishes, which dominates the host cost of short executions.
    pub spin: Duration,
    /// A wait also polls until 1.25x the time the submission's previous work took from submit
    /// to finish (repeated executions of one model take about the same time), up to this
    /// long after the submit; then it blocks. Zero polls for `spin` only.
    pub spin_max: Duration,
}

impl WaitPolicy {
    /// Ten minutes: long enough for any model on a CPU driver, short enough that a hung GPU
    /// becomes an error rather than a hang.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
    /// Polling before blocking: 200 us.
    pub const DEFAULT_SPIN: Duration = Duration::from_micros(200);
    /// Polling for work of known length: up to 2 ms after the submit.
    pub const DEFAULT_SPIN_MAX: Duration = Duration::from_millis(2);
}

impl Default for WaitPolicy {
    fn default() -> Self {
        WaitPolicy {
            timeout: Self::DEFAULT_TIMEOUT,
            spin: Self::DEFAULT_SPIN,
            spin_max: Self::DEFAULT_SPIN_MAX,
        }
    }
}

/// A command pool with `n` primary command buffers and one fence.
pub struct Submission {
    device: Device,
    pool: vk::CommandPool,
    buffers: Vec<vk::CommandBuffer>,
    fence: vk::Fence,
    pending: bool,
    policy: WaitPolicy,
    what: String,
    /// When the pending work was submitted.
    submitted: Option<std::time::Instant>,
    /// How long the previous work took from submit until its wait saw it finish.
    last_busy: Duration,
}

impl fmt::Debug for Submission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Submission")
            .field("what", &self.what)
            .field("buffers", &self.buffers.len())
            .field("pending", &self.pending)
            .finish()
    }
}

impl Submission {
    /// A pool on the device queue's family with `count` primary command buffers, and an
    /// unsignaled fence. `what` names the owner in errors (e.g. `compute graph`).
    pub fn new(device: &Device, count: u32, what: impl Into<String>) -> Result<Self, Error> {
        let d = device.raw();
        let info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(device.queue().family())
            .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
        // SAFETY: valid create info for the device's own queue family.
        let pool = unsafe { d.create_command_pool(&info, None) }.vk("vkCreateCommandPool")?;
        let mut s = Submission {
            device: device.clone(),
            pool,
            buffers: Vec::new(),
            fence: vk::Fence::null(),
            pending: false,
            policy: WaitPolicy::default(),
            what: what.into(),
            submitted: None,
            last_busy: Duration::ZERO,
        };
        if count > 0 {
            let alloc = vk::CommandBufferAllocateInfo::default()
                .command_pool(pool)
                .level(vk::CommandBufferLevel::PRIMARY)
                .command_buffer_count(count);
            // SAFETY: valid allocate info from a live pool; freed with the pool (in `Drop`).
            s.buffers =
                unsafe { d.allocate_command_buffers(&alloc) }.vk("vkAllocateCommandBuffers")?;
        }
        // SAFETY: valid create info; destroyed in `Drop`.
        s.fence =
            unsafe { d.create_fence(&vk::FenceCreateInfo::default(), None) }.vk("vkCreateFence")?;
        Ok(s)
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Command buffer `index` (allocated with the pool).
    ///
    /// # Panics
    /// When `index` is not below the count given to [`Submission::new`].
    pub fn command_buffer(&self, index: usize) -> vk::CommandBuffer {
        self.buffers[index]
    }

    /// The number of command buffers.
    pub fn len(&self) -> usize {
        self.buffers.len()
    }

    /// Whether there are no command buffers.
    pub fn is_empty(&self) -> bool {
        self.buffers.is_empty()
    }

    /// The wait policy.
    pub fn policy(&self) -> WaitPolicy {
        self.policy
    }

    /// Sets the wait policy.
    pub fn set_policy(&mut self, policy: WaitPolicy) {
        self.policy = policy;
    }

    /// Whether submitted work may still run.
    pub fn is_pending(&self) -> bool {
        self.pending
    }

    /// Waits for earlier work, then begins recording command buffer `index` (one-time use
    /// off: it can be replayed).
    pub fn begin(&mut self, index: usize) -> Result<vk::CommandBuffer, Error> {
        self.wait()?;
        let cmd = self.buffers[index];
        let info = vk::CommandBufferBeginInfo::default();
        // SAFETY: `cmd` belongs to this pool (created with RESET_COMMAND_BUFFER) and is not
        // pending: the wait above finished every submission of it.
        unsafe { self.device.raw().begin_command_buffer(cmd, &info) }.vk("vkBeginCommandBuffer")?;
        Ok(cmd)
    }

    /// Ends recording command buffer `index`.
    pub fn end(&self, index: usize) -> Result<(), Error> {
        // SAFETY: the buffer is recording (begun with `begin`).
        unsafe { self.device.raw().end_command_buffer(self.buffers[index]) }
            .vk("vkEndCommandBuffer")?;
        Ok(())
    }

    /// Waits for earlier work, then submits command buffer `index`, waiting on `waits` and
    /// signalling `signals`. Returns once submitted; [`Submission::wait`] waits for it.
    ///
    /// # Safety
    /// The command buffer must be executable and everything it uses alive until the wait;
    /// every semaphore must be a live semaphore of this device whose state allows the wait or
    /// signal, as `vkQueueSubmit` requires (binary waits signaled or with a pending signal,
    /// binary signals unsignaled, timeline values increasing).
    pub unsafe fn submit(
        &mut self,
        index: usize,
        waits: &[SemaphoreWait],
        signals: &[SemaphoreSignal],
    ) -> Result<(), Error> {
        self.wait()?;
        self.check_lost()?;
        let cmds = [self.buffers[index]];
        let wait_sems: Vec<vk::Semaphore> = waits.iter().map(|w| w.semaphore).collect();
        let stages: Vec<vk::PipelineStageFlags> = waits.iter().map(|w| w.stage).collect();
        let wait_values: Vec<u64> = waits.iter().map(|w| w.value).collect();
        let signal_sems: Vec<vk::Semaphore> = signals.iter().map(|s| s.semaphore).collect();
        let signal_values: Vec<u64> = signals.iter().map(|s| s.value).collect();
        let mut timeline = vk::TimelineSemaphoreSubmitInfo::default()
            .wait_semaphore_values(&wait_values)
            .signal_semaphore_values(&signal_values);
        let mut info = vk::SubmitInfo::default()
            .command_buffers(&cmds)
            .wait_semaphores(&wait_sems)
            .wait_dst_stage_mask(&stages)
            .signal_semaphores(&signal_sems);
        if wait_values.iter().chain(&signal_values).any(|&v| v != 0) {
            info = info.push_next(&mut timeline);
        }
        let result = match self.device.take_fault(FaultPoint::Submit) {
            Some(r) => Err(VkError::new("vkQueueSubmit", r)),
            None => {
                let guard = self.device.queue().lock();
                // SAFETY: the caller's contract covers the command buffer and semaphores; the
                // fence is unsignaled (reset after every successful wait) and not in use. The
                // guard is held only around the submission.
                unsafe { guard.submit(&[info], self.fence) }
            }
        };
        result.map_err(|e| self.note_loss(e))?;
        self.pending = true;
        self.submitted = Some(std::time::Instant::now());
        Ok(())
    }

    /// Waits for the last submission, if any, under the wait policy; then resets the fence.
    pub fn wait(&mut self) -> Result<(), Error> {
        if let Err(lost) = self.check_lost() {
            self.settle_after_loss();
            return Err(lost);
        }
        if !self.pending {
            return Ok(());
        }
        let timeout = self.policy.timeout;
        let ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        let waited = match self.device.take_fault(FaultPoint::Wait) {
            Some(r) => Err(VkError::new("vkWaitForFences", r)),
            None => match self.poll() {
                Ok(true) => Ok(()),
                // SAFETY: the fence belongs to this device.
                Ok(false) => unsafe { self.device.wait_for_fence(self.fence, ns) },
                Err(e) => Err(e),
            },
        };
        match waited {
            Ok(()) => {}
            Err(e) if e.result == vk::Result::TIMEOUT => {
                return Err(Error::Timeout {
                    what: self.what.clone(),
                    timeout,
                });
            }
            Err(e) => {
                let e = self.note_loss(e);
                if matches!(e, Error::DeviceLost { .. }) {
                    self.settle_after_loss();
                }
                return Err(e);
            }
        }
        if let Some(t) = self.submitted.take() {
            self.last_busy = t.elapsed();
        }
        // SAFETY: the fence is signaled and no submission uses it.
        unsafe { self.device.raw().reset_fences(&[self.fence]) }.vk("vkResetFences")?;
        self.pending = false;
        Ok(())
    }

    /// How long [`Submission::poll`] polls from `now`: the policy's `spin`, or until 1.25x the
    /// previous work's time after the submit (at most `spin_max` after it), whichever is later.
    fn spin_budget(&self, now: std::time::Instant) -> Duration {
        let expected = self.last_busy.mul_f64(1.25).min(self.policy.spin_max);
        let since_submit = self.submitted.map_or(Duration::ZERO, |t| now - t);
        self.policy.spin.max(expected.saturating_sub(since_submit))
    }

    /// Polls the fence for up to [`Submission::spin_budget`]; whether it signaled.
    fn poll(&self) -> Result<bool, VkError> {
        let start = std::time::Instant::now();
        let budget = self.spin_budget(start);
        loop {
            // SAFETY: the fence belongs to this device.
            match unsafe { self.device.raw().get_fence_status(self.fence) } {
                Ok(true) => return Ok(true),
                Ok(false) if start.elapsed() < budget => std::hint::spin_loop(),
                Ok(false) => return Ok(false),
                Err(r) => return Err(VkError::new("vkGetFenceStatus", r)),
            }
        }
    }

    /// On a lost device, waits for this submission's pending work, if any: the loss may have
    /// been seen elsewhere (another submission, an injected fault) while this work still runs.
    /// A lost device answers at once; once the fence is signaled or the driver reports the
    /// loss, nothing is pending and the owner may destroy what the work used. Any other
    /// outcome (a time-out) leaves the work pending, for [`Drop`] to judge.
    fn settle_after_loss(&mut self) {
        if !self.pending {
            return;
        }
        let ns = u64::try_from(self.policy.timeout.as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: the fence belongs to this device.
        match unsafe { self.device.wait_for_fence(self.fence, ns) } {
            Ok(()) => {
                // SAFETY: the fence is signaled and no submission uses it. A failure here
                // changes nothing: no submission follows on a lost device.
                let _ = unsafe { self.device.raw().reset_fences(&[self.fence]) };
                self.pending = false;
            }
            Err(e) if e.is_device_lost() => self.pending = false,
            Err(e) => log::error!("{}: waiting after the device loss: {e}", self.what),
        }
    }

    /// Turns a device loss into the lasting [`Error::DeviceLost`] of the whole device; other
    /// errors pass.
    fn note_loss(&mut self, e: VkError) -> Error {
        if e.is_device_lost() {
            self.device
                .mark_lost(format!("in {} (seen by {})", e.call, self.what));
            if let Err(lost) = self.check_lost() {
                return lost;
            }
        }
        e.into()
    }

    /// [`Error::DeviceLost`] once anything on this device saw it lost.
    fn check_lost(&self) -> Result<(), Error> {
        match self.device.lost() {
            Some(when) => Err(Error::DeviceLost {
                device: self.device.capabilities().name.clone(),
                when,
            }),
            None => Ok(()),
        }
    }
}

impl Drop for Submission {
    fn drop(&mut self) {
        if self.pending {
            // A real wait, even after a loss: a lost device answers at once, and objects may
            // only be destroyed once the driver says their work is over (or can never run).
            let ns = u64::try_from(self.policy.timeout.as_nanos()).unwrap_or(u64::MAX);
            // SAFETY: the fence belongs to this device.
            match unsafe { self.device.wait_for_fence(self.fence, ns) } {
                Ok(()) => {}
                Err(e) if e.is_device_lost() => {}
                Err(e) => {
                    // The GPU may still use the command buffers: leak them rather than
                    // destroy objects in use.
                    log::error!("{}: {e}; leaking its command pool and fence", self.what);
                    return;
                }
            }
        }
        // SAFETY: nothing submitted is pending (waited above) or the device is lost (then no
        // work will run again); both objects belong to this device and are destroyed once.
        unsafe {
            self.device.raw().destroy_fence(self.fence, None);
            self.device.raw().destroy_command_pool(self.pool, None);
        }
    }
}
