//! One rank's submission on the cuda backend: queued on its streams (at once, or by the
//! thread that opens its gate), then polled to its end by the waiter, which is also the
//! watchdog (see the module docs of [`super`]).

use super::compile::{CudaProgram, Op};
use super::device::{Shared, MAX_POLL_SLEEP};
use super::driver::cu;
use super::exec::{self, Bases};
use super::memory::staging;
use super::CudaError;
use crate::device::{Compiled, Completion, Submission, UserBuffers};
use crate::error::{AbortCause, ConfigFault, DeviceError, GateRefusal, TaskLocation};
use cudarc::driver::sys::{self, CUdeviceptr};
use parking_lot::Mutex;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The user's buffers of one submission.
#[derive(Copy, Clone, Debug)]
enum Binding {
    /// Host memory, staged through the rank's device buffers.
    Host {
        input: *const u8,
        output: *mut u8,
        in_place: bool,
    },
    /// Device memory of the rank's GPU, used as it is.
    Device {
        input: CUdeviceptr,
        output: CUdeviceptr,
    },
}

enum State {
    /// Waiting for its gate.
    Gated,
    /// On the streams; the done event is recorded.
    Queued,
    /// Over before its work finished on the GPU (refused, failed to queue, timed out at
    /// the gate): the outcome.
    Ended(Result<(), DeviceError>),
    /// Over and recorded for the rank ([`Launch::finish`]): the outcome handed to the
    /// waiter.
    Done(Result<(), DeviceError>),
}

pub(crate) struct Launch {
    shared: Arc<Shared>,
    compiled: Arc<Compiled>,
    program: Arc<CudaProgram>,
    epoch: u64,
    binding: Binding,
    /// Local slots of the entry fence: this program's fence peers and the previous ones.
    entry_slots: Vec<usize>,
    started: Instant,
    state: Mutex<State>,
    /// The watchdog's verdict on this launch, reported once its streams drained.
    hung: Mutex<Option<DeviceError>>,
    last_flood: Mutex<Option<Instant>>,
}

// SAFETY: the raw pointers of `Binding` are the user's buffers, which `submit`'s contract
// keeps valid and untouched by the caller until the completion reported its outcome.
unsafe impl Send for Launch {}
// SAFETY: as above; the mutable state is behind locks.
unsafe impl Sync for Launch {}

impl Launch {
    /// Check and start `s`: queued now, or when its gate opens.
    pub(crate) fn start(
        shared: &Arc<Shared>,
        s: Submission<'_>,
    ) -> Result<CudaCompletion, DeviceError> {
        let compiled = s.compiled;
        if compiled.device_id != shared.id {
            return Err(ConfigFault::ForeignProgram.into());
        }
        let program: Arc<CudaProgram> = compiled
            .backend
            .clone()
            .downcast()
            .map_err(|_| DeviceError::from(ConfigFault::ForeignProgram))?;
        compiled.check_binding(&s.user)?;
        let rank = compiled.rank;
        let slot = program.slot;
        let binding = bind(shared, slot, rank, &compiled, &s.user)?;
        if let Some(cause) = shared.stopped() {
            return Err(DeviceError::Aborted { rank, cause });
        }
        if shared.busy[slot].swap(true, Ordering::AcqRel) {
            return Err(DeviceError::Busy { rank });
        }
        let entry_slots = {
            let mut prev = shared.prev_peers[slot].lock();
            let mut all = program.peer_slots.clone();
            all.extend(prev.iter().filter(|p| !program.peer_slots.contains(p)));
            *prev = program.peer_slots.clone();
            all.retain(|&p| p != slot);
            all
        };
        let launch = Arc::new(Launch {
            shared: shared.clone(),
            compiled,
            program,
            epoch: s.epoch,
            binding,
            entry_slots,
            started: Instant::now(),
            state: Mutex::new(State::Gated),
            hung: Mutex::new(None),
            last_flood: Mutex::new(None),
        });
        match s.gate {
            Some(gate) => {
                let gated = launch.clone();
                gate.when_decided(Box::new(move |outcome| gated.decided(outcome)));
            }
            None => launch.queue_or_fail(),
        }
        Ok(CudaCompletion { launch })
    }

    fn rank(&self) -> usize {
        self.compiled.rank
    }

    fn decided(self: &Arc<Self>, outcome: Result<(), GateRefusal>) {
        match outcome {
            Ok(()) => self.queue_or_fail(),
            Err(cause) => {
                let mut state = self.state.lock();
                if matches!(*state, State::Gated) {
                    *state = State::Ended(Err(DeviceError::Refused {
                        rank: self.rank(),
                        cause,
                    }));
                }
            }
        }
    }

    /// Queue the work unless the launch already ended; a failure stops the device (the
    /// peers would wait for this rank's posts).
    fn queue_or_fail(self: &Arc<Self>) {
        let mut state = self.state.lock();
        if !matches!(*state, State::Gated) {
            return;
        }
        if let Some(cause) = self.shared.stopped() {
            let rank = self.rank();
            *state = State::Ended(Err(DeviceError::Aborted { rank, cause }));
            return;
        }
        match self.queue() {
            Ok(()) => *state = State::Queued,
            Err(error) => {
                *state = State::Ended(Err(error.clone()));
                drop(state);
                self.shared.stop(AbortCause::PeerFailed {
                    rank: self.rank(),
                    error: Arc::new(error),
                });
            }
        }
    }

    /// Put the whole program on the rank's streams: entry fence, fork, tasks, join,
    /// epoch, exit fence, done event.
    fn queue(&self) -> Result<(), DeviceError> {
        let shared = &self.shared;
        let slot = self.program.slot;
        let memory = &shared.ranks[slot];
        let gpu = &memory.gpu;
        gpu.bind()?;
        let rs = shared.streams[slot].lock();
        let n = self.program.streams.len();
        let s0 = rs.streams[0];
        let bases = self.stage_in(s0)?;
        let word = |i: usize| shared.mapped.dev_addr(i);
        for s in 0..n {
            shared.mapped.store(shared.progress_word(slot, s), 0);
        }
        let needed = self.epoch.wrapping_sub(1) as u32;
        for &peer in &self.entry_slots {
            exec::wait_at_least(s0, word(shared.epoch_word(peer)), needed)?;
        }
        if n > 1 {
            cu!(cuEventRecord(rs.fork, s0))?;
            for &stream in &rs.streams[1..n] {
                cu!(cuStreamWaitEvent(stream, rs.fork, 0))?;
            }
        }
        for (s, ops) in self.program.streams.iter().enumerate() {
            let stream = rs.streams[s];
            for (t, op) in ops.iter().enumerate() {
                if let Op::Wait { .. } = op {
                    let reached = u32::try_from(t + 1).unwrap_or(u32::MAX);
                    exec::write_word(stream, word(shared.progress_word(slot, s)), reached)?;
                }
                exec::enqueue(gpu, stream, op, &bases)?;
            }
        }
        for s in 1..n {
            cu!(cuEventRecord(rs.joins[s], rs.streams[s]))?;
            cu!(cuStreamWaitEvent(s0, rs.joins[s], 0))?;
        }
        exec::write_word(s0, word(shared.epoch_word(slot)), self.epoch as u32)?;
        if self.compiled.exit_fence {
            for &peer in &self.program.peer_slots {
                exec::wait_at_least(s0, word(shared.epoch_word(peer)), self.epoch as u32)?;
            }
        }
        cu!(cuEventRecord(rs.done, s0))?;
        Ok(())
    }

    /// The device addresses of the user's buffers, host slices copied into the staging
    /// buffers first (the output too: bytes the program does not write must come back
    /// as they were).
    fn stage_in(&self, s0: sys::CUstream) -> Result<Bases, DeviceError> {
        let (input, output, in_place) = match self.binding {
            Binding::Device { input, output } => return Ok(Bases { input, output }),
            Binding::Host {
                input,
                output,
                in_place,
            } => (input, output, in_place),
        };
        let memory = &self.shared.ranks[self.program.slot];
        let (ext_in, ext_out) = self.compiled.user_extent;
        let mut st = memory.staging.lock();
        if in_place {
            let len = ext_in.max(ext_out);
            let dev = staging(&memory.gpu, &mut st.1, len, "staging for the user's buffer")?;
            copy_in(s0, dev, output, len)?;
            return Ok(Bases {
                input: dev,
                output: dev,
            });
        }
        let dev_in = staging(
            &memory.gpu,
            &mut st.0,
            ext_in,
            "staging for the user's input",
        )?;
        let dev_out = staging(
            &memory.gpu,
            &mut st.1,
            ext_out,
            "staging for the user's output",
        )?;
        copy_in(s0, dev_in, input, ext_in)?;
        copy_in(s0, dev_out, output, ext_out)?;
        Ok(Bases {
            input: dev_in,
            output: dev_out,
        })
    }

    /// Copy a host binding's output back from its staging buffer.
    fn stage_out(&self) -> Result<(), DeviceError> {
        let Binding::Host { output, .. } = self.binding else {
            return Ok(());
        };
        let (ext_in, ext_out) = self.compiled.user_extent;
        let len = match self.compiled.in_place {
            true => ext_in.max(ext_out),
            false => ext_out,
        };
        if len == 0 {
            return Ok(());
        }
        let slot = self.program.slot;
        let memory = &self.shared.ranks[slot];
        memory.gpu.bind()?;
        let st = memory.staging.lock();
        let dev = st.1.as_ref().map_or(0, |a| a.ptr);
        // On the rank's own stream 0, which is idle now: a synchronous copy would order
        // itself after the legacy stream instead.
        let s0 = self.shared.streams[slot].lock().streams[0];
        cu!(cuMemcpyDtoHAsync_v2(output.cast(), dev, len, s0))?;
        cu!(cuStreamSynchronize(s0))?;
        Ok(())
    }

    /// The outcome if the launch is over, else `None`; the watchdog's checks run here.
    fn poll(&self) -> Option<Result<(), DeviceError>> {
        let mut state = self.state.lock();
        let outcome = match &mut *state {
            State::Done(outcome) => return Some(outcome.clone()),
            State::Ended(outcome) => outcome.clone(),
            State::Gated => {
                if let Some(cause) = self.shared.stopped() {
                    let rank = self.rank();
                    Err(DeviceError::Aborted { rank, cause })
                } else if self.started.elapsed() > self.shared.config.exec_timeout {
                    Err(DeviceError::GateTimeout {
                        rank: self.rank(),
                        waited: self.started.elapsed(),
                    })
                } else {
                    return None;
                }
            }
            State::Queued => self.poll_queued()?,
        };
        let outcome = self.finish(outcome);
        *state = State::Done(outcome.clone());
        Some(outcome)
    }

    /// A queued launch: done when its done event fired (after a stop, once its streams
    /// drained under the flood).
    fn poll_queued(&self) -> Option<Result<(), DeviceError>> {
        let shared = &self.shared;
        let slot = self.program.slot;
        if shared.ranks[slot].gpu.bind().is_err() {
            return None;
        }
        let done = shared.streams[slot].lock().done;
        // SAFETY: `done` is a live event of this rank.
        let ready = unsafe { sys::cuEventQuery(done) };
        match ready {
            sys::CUresult::CUDA_SUCCESS => {}
            sys::CUresult::CUDA_ERROR_NOT_READY => {
                if shared.stopped().is_some() {
                    self.flood_now_and_then();
                } else if self.started.elapsed() > shared.config.exec_timeout {
                    let error = self.watchdog();
                    *self.hung.lock() = Some(error.clone());
                    shared.stop(AbortCause::PeerFailed {
                        rank: self.rank(),
                        error: Arc::new(error),
                    });
                }
                return None;
            }
            other => {
                let error =
                    DeviceError::from(super::driver::check("cuEventQuery", other).unwrap_err());
                shared.stop(AbortCause::PeerFailed {
                    rank: self.rank(),
                    error: Arc::new(error.clone()),
                });
                return Some(Err(error));
            }
        }
        if let Some(error) = self.hung.lock().take() {
            return Some(Err(error));
        }
        if let Some(cause) = shared.stopped() {
            return Some(Err(DeviceError::Aborted {
                rank: self.rank(),
                cause,
            }));
        }
        Some(self.stage_out())
    }

    fn flood_now_and_then(&self) {
        let mut last = self.last_flood.lock();
        if last.is_none_or(|t| t.elapsed() >= Duration::from_millis(1)) {
            self.shared.flood();
            *last = Some(Instant::now());
        }
    }

    /// Which stream of the rank never finished, and where it was: the last Wait its
    /// progress word names (every stream writes it before each Wait).
    fn watchdog(&self) -> DeviceError {
        let shared = &self.shared;
        let slot = self.program.slot;
        let rank = self.rank();
        let waited = self.started.elapsed();
        let rs = shared.streams[slot].lock();
        let n = self.program.streams.len();
        let unfinished = |s: usize| {
            // SAFETY: a live event of this rank.
            s == 0 || unsafe { sys::cuEventQuery(rs.joins[s]) } != sys::CUresult::CUDA_SUCCESS
        };
        let s = (1..n).find(|&s| unfinished(s)).unwrap_or(0);
        let progress = shared.mapped.load(shared.progress_word(slot, s)) as usize;
        if let Some(Op::Wait { notify, .. }) = progress
            .checked_sub(1)
            .and_then(|t| self.program.streams[s].get(t))
        {
            return DeviceError::WaitTimeout {
                at: TaskLocation {
                    rank,
                    stream: s,
                    task: progress - 1,
                },
                notify: *notify,
                notify_desc: shared.layout.describe(*notify),
                waited,
            };
        }
        let task = match progress {
            0 if s == 0 => "the entry fence (peers finishing their previous call)".to_string(),
            0 => "the fork from stream 0".to_string(),
            t => format!("a task after task {}", t - 1),
        };
        CudaError::Hung {
            rank,
            stream: s,
            task,
            waited,
        }
        .into()
    }

    /// Record the end of the launch for its rank: epochs for every outcome but a failure
    /// (a failure stops the device).
    fn finish(&self, outcome: Result<(), DeviceError>) -> Result<(), DeviceError> {
        let shared = &self.shared;
        let slot = self.program.slot;
        if matches!(outcome, Ok(()) | Err(DeviceError::Refused { .. })) {
            shared.done[slot].fetch_max(self.epoch, Ordering::AcqRel);
            shared
                .mapped
                .store(shared.epoch_word(slot), self.epoch as u32);
        }
        shared.busy[slot].store(false, Ordering::Release);
        outcome
    }
}

/// Queue a copy of `len` bytes of host memory at `src` into device memory at `dst` on
/// `stream` (the driver stages pageable memory before it returns, so `src` may change
/// afterwards; the copy lands before the stream's next work).
fn copy_in(
    stream: sys::CUstream,
    dst: CUdeviceptr,
    src: *const u8,
    len: usize,
) -> Result<(), DeviceError> {
    if len > 0 {
        cu!(cuMemcpyHtoDAsync_v2(dst, src.cast(), len, stream))?;
    }
    Ok(())
}

/// The binding of `user` for local rank `rank`: device memory must be on its GPU.
fn bind(
    shared: &Shared,
    slot: usize,
    rank: usize,
    compiled: &Compiled,
    user: &UserBuffers<'_>,
) -> Result<Binding, DeviceError> {
    Ok(match user {
        UserBuffers::OutOfPlace { input, output } => Binding::Host {
            input: input.as_ptr(),
            output: output.as_ptr().cast_mut(),
            in_place: false,
        },
        UserBuffers::InPlace(buf) => Binding::Host {
            input: buf.as_ptr(),
            output: buf.as_ptr().cast_mut(),
            in_place: true,
        },
        UserBuffers::Device { input, output, .. } => {
            let ordinal = shared.ranks[slot].gpu.ordinal;
            let (ext_in, ext_out) = compiled.user_extent;
            for (what, span, extent) in [("input", input, ext_in), ("output", output, ext_out)] {
                if extent == 0 {
                    continue;
                }
                shared.ranks[slot].gpu.bind()?;
                let found = ordinal_of(span.addr);
                if found != Some(ordinal) {
                    return Err(CudaError::ForeignMemory {
                        rank,
                        what,
                        ordinal,
                        found,
                    }
                    .into());
                }
            }
            Binding::Device {
                input: input.addr,
                output: output.addr,
            }
        }
    })
}

/// The CUDA device whose memory `addr` is (`None`: not device memory).
fn ordinal_of(addr: CUdeviceptr) -> Option<usize> {
    let mut ordinal: i32 = -1;
    let attr = sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL;
    let mut kind: u32 = 0;
    let kind_attr = sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE;
    cu!(cuPointerGetAttribute(
        (&mut kind as *mut u32).cast(),
        kind_attr,
        addr
    ))
    .ok()?;
    if kind != sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32 {
        return None;
    }
    cu!(cuPointerGetAttribute(
        (&mut ordinal as *mut i32).cast(),
        attr,
        addr
    ))
    .ok()?;
    usize::try_from(ordinal).ok()
}

/// A cuda submission in flight.
pub(crate) struct CudaCompletion {
    launch: Arc<Launch>,
}

impl Completion for CudaCompletion {
    fn wait(&mut self, timeout: Duration) -> Option<Result<(), DeviceError>> {
        let deadline = Instant::now() + timeout;
        let mut sleep = Duration::from_micros(1);
        loop {
            if let Some(outcome) = self.launch.poll() {
                return Some(outcome);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            if sleep <= Duration::from_micros(8) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(sleep.min(deadline - now));
            }
            sleep = (sleep * 2).min(MAX_POLL_SLEEP);
        }
    }
}

impl Drop for CudaCompletion {
    /// A completion dropped before its outcome was read still waits for it: the GPU may
    /// touch the user's buffers until then.
    fn drop(&mut self) {
        let collected = matches!(*self.launch.state.lock(), State::Done(_));
        if !collected {
            let timeout = self.launch.shared.config.exec_timeout;
            while self.wait(timeout).is_none() {}
        }
    }
}
