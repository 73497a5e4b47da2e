//! One rank's submission on the cuda backend: checked, then brought to its GPU's group
//! (at once, or by the thread that opens its gate), launched with the other ranks of the
//! GPU by the last of them ([`super::group`]), then polled to its end by its waiter, which
//! is also the watchdog (see the module docs of [`super`]).

use super::compile::{CudaProgram, Op};
use super::device::{pause, Shared};
use super::driver::cu;
use super::group::{Arrival, GpuGroup};
use super::memory::{staging, Mapped};
use super::pointers::ordinal_of;
use super::zero_copy::UserSide;
use super::CudaError;
use crate::device::{Compiled, Completion, Submission, UserBuffers};
use crate::error::{AbortCause, ConfigFault, DeviceError, GateRefusal, TaskLocation};
use cudarc::driver::sys::{self, CUdeviceptr};
use parking_lot::Mutex;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Where the rank's own Input and Output are for one launch.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Bases {
    pub input: CUdeviceptr,
    pub output: CUdeviceptr,
}

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
        in_place: bool,
    },
}

enum State {
    /// Waiting for its gate.
    Gated,
    /// At its GPU's group, waiting for the other ranks of the GPU to make the call.
    Gathering,
    /// Launched; the group's done event is recorded.
    Queued,
    /// Over before its work ran on the GPU (refused, failed to launch, timed out while
    /// gathering): the outcome.
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
    /// Bytes of the user's (Input, Output).
    lens: (usize, usize),
    /// Bytes of (Input, Output) this launch's programs reach (the rank's own and its
    /// peers', zero-copy): what is staged in and out for host slices.
    reach: Mutex<(usize, usize)>,
    /// Local slots of the entry fence: this program's fence peers and the previous ones.
    entry_slots: Vec<usize>,
    started: Instant,
    state: Mutex<State>,
    /// The watchdog's verdict on this launch, reported once the kernel exited.
    hung: Mutex<Option<DeviceError>>,
    /// Where its fault and progress words are when a CUDA graph runs it (a block of
    /// the graph's, and the index of its fault word there, its progress words after it):
    /// each step of a replayed sequence has words of its own, so the watchdog tells a
    /// stuck step from those before it. Unset: the rank's words in the device's block,
    /// which every eager call of the rank reuses.
    graph_words: OnceLock<(Arc<Mapped>, usize)>,
    /// It marked its rank busy, and frees it when it ends.
    claims_busy: bool,
}

// SAFETY: the raw pointers of `Binding` are the user's buffers, which `submit`'s contract
// keeps valid and untouched by the caller until the completion reported its outcome.
unsafe impl Send for Launch {}
// SAFETY: as above; the mutable state is behind locks.
unsafe impl Sync for Launch {}

/// A submission that passed the checks every launch makes: its program and buffers.
pub(crate) struct Checked<'s, 'a> {
    submission: &'s Submission<'a>,
    program: Arc<CudaProgram>,
    binding: Binding,
}

impl Checked<'_, '_> {
    /// The program, as compiled for this device.
    pub(crate) fn program(&self) -> &Arc<CudaProgram> {
        &self.program
    }

    /// The program as every backend knows it.
    pub(crate) fn compiled(&self) -> &Arc<Compiled> {
        &self.submission.compiled
    }

    /// The call's epoch.
    pub(crate) fn epoch(&self) -> u64 {
        self.submission.epoch
    }
}

impl Launch {
    /// What every launch checks of `s` before it touches any state: its program is this
    /// device's, its buffers fit the program, device memory is on the rank's GPU, and the
    /// device has not stopped.
    pub(crate) fn check<'s, 'a>(
        shared: &Shared,
        s: &'s Submission<'a>,
    ) -> Result<Checked<'s, 'a>, DeviceError> {
        let compiled = &s.compiled;
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
        let binding = bind(shared, program.slot, rank, compiled, &s.user)?;
        if let Some(cause) = shared.stopped() {
            return Err(DeviceError::Aborted { rank, cause });
        }
        Ok(Checked {
            submission: s,
            program,
            binding,
        })
    }

    /// Check and start `s`: queued now, or when its gate opens.
    pub(crate) fn start(
        shared: &Arc<Shared>,
        s: Submission<'_>,
    ) -> Result<CudaCompletion, DeviceError> {
        let checked = Self::check(shared, &s)?;
        let slot = checked.program.slot;
        if shared.busy[slot].swap(true, Ordering::AcqRel) {
            return Err(DeviceError::Busy {
                rank: s.compiled.rank,
            });
        }
        let launch = Self::prepare(shared, checked, true);
        match s.gate {
            Some(gate) => {
                let gated = launch.clone();
                gate.when_decided(Box::new(move |outcome| gated.decided(outcome)));
            }
            None => launch.arrive(),
        }
        Ok(CudaCompletion { launch })
    }

    /// The launch of a checked submission, not yet brought to its GPU: its entry fence
    /// (this program's peers and the previous call's) is fixed here, so submissions of a
    /// rank are prepared in epoch order. `claims_busy`: the launch marked its rank busy
    /// and frees it when it ends (a graph replay claims its ranks for all its steps).
    pub(crate) fn prepare(
        shared: &Arc<Shared>,
        checked: Checked<'_, '_>,
        claims_busy: bool,
    ) -> Arc<Launch> {
        let Checked {
            submission: s,
            program,
            binding,
        } = checked;
        let slot = program.slot;
        let entry_slots = {
            let mut prev = shared.prev_peers[slot].lock();
            let mut all = program.peer_slots.clone();
            all.extend(prev.iter().filter(|p| !program.peer_slots.contains(p)));
            *prev = program.peer_slots.clone();
            all.retain(|&p| p != slot);
            all
        };
        Arc::new(Launch {
            shared: shared.clone(),
            compiled: s.compiled.clone(),
            program,
            epoch: s.epoch,
            binding,
            lens: s.user.lens(),
            reach: Mutex::new((0, 0)),
            entry_slots,
            started: Instant::now(),
            state: Mutex::new(State::Gated),
            hung: Mutex::new(None),
            graph_words: OnceLock::new(),
            claims_busy,
        })
    }

    pub(crate) fn program(&self) -> &CudaProgram {
        &self.program
    }

    /// The completion of a launch that is under way (a graph replay's step).
    pub(crate) fn completion(self: &Arc<Self>) -> CudaCompletion {
        CudaCompletion {
            launch: self.clone(),
        }
    }

    fn group(&self) -> &GpuGroup {
        self.shared.group_of(self.program.slot)
    }

    /// Bring the program to the GPU's group (which may launch the call at once).
    fn arrive(self: &Arc<Self>) {
        *self.state.lock() = State::Gathering;
        let slot = self.program.slot;
        let run = Arrival::Run(self.clone());
        self.group().arrive(&self.shared, slot, self.epoch, run);
    }

    /// The group launched the call (`Ok`) or could not (the device's stop cause).
    /// A graph's launches are never gated: they go from prepared to launched.
    pub(crate) fn launched(&self, outcome: Result<(), AbortCause>) {
        let mut state = self.state.lock();
        if !matches!(*state, State::Gathering | State::Gated) {
            return;
        }
        *state = match outcome {
            Ok(()) => State::Queued,
            Err(cause) => State::Ended(Err(DeviceError::Aborted {
                rank: self.rank(),
                cause,
            })),
        };
    }

    /// The epoch words of the entry fence's and the exit fence's peers on other GPUs (the
    /// ranks of this GPU are ordered by its stream, see [`super::group`]).
    pub(crate) fn fence_words(&self) -> (Vec<u64>, Vec<u64>) {
        let shared = &self.shared;
        let gpu = self.group().gpu.ordinal;
        let elsewhere = |slots: &[usize]| -> Vec<u64> {
            slots
                .iter()
                .filter(|&&p| shared.ranks[p].gpu.ordinal != gpu)
                .map(|&p| shared.mapped.dev_addr(shared.epoch_word(p)))
                .collect()
        };
        let exit = match self.compiled.exit_fence {
            true => elsewhere(&self.program.peer_slots),
            false => Vec::new(),
        };
        (elsewhere(&self.entry_slots), exit)
    }

    pub(crate) fn rank(&self) -> usize {
        self.compiled.rank
    }

    fn decided(self: &Arc<Self>, outcome: Result<(), GateRefusal>) {
        match outcome {
            Ok(()) => self.arrive(),
            Err(cause) => {
                {
                    let mut state = self.state.lock();
                    if !matches!(*state, State::Gated) {
                        return;
                    }
                    *state = State::Ended(Err(DeviceError::Refused {
                        rank: self.rank(),
                        cause,
                    }));
                }
                let slot = self.program.slot;
                self.group()
                    .arrive(&self.shared, slot, self.epoch, Arrival::Nothing);
            }
        }
    }

    /// The run's user buffers and its program's reach, as its launch checks them
    /// ([`super::zero_copy`]).
    pub(crate) fn user_side(&self) -> UserSide<'_> {
        let device = match self.binding {
            Binding::Host { .. } => None,
            Binding::Device {
                input,
                output,
                in_place,
            } => Some((input, output, in_place)),
        };
        UserSide {
            rank: self.rank(),
            lens: self.lens,
            device,
            own: self.compiled.user_extent,
            peers: &self.program.peer_reach,
        }
    }

    /// The device addresses of the user's buffers, host slices copied into the staging
    /// buffers first (the output too: bytes the program does not write must come back
    /// as they were). `reach`: the bytes of (Input, Output) the launch's programs reach,
    /// within the binding ([`super::zero_copy::reach`]).
    pub(crate) fn stage_in(
        &self,
        s0: sys::CUstream,
        reach: (usize, usize),
    ) -> Result<Bases, DeviceError> {
        *self.reach.lock() = reach;
        let (input, output, in_place) = match self.binding {
            Binding::Device { input, output, .. } => return Ok(Bases { input, output }),
            Binding::Host {
                input,
                output,
                in_place,
            } => (input, output, in_place),
        };
        let memory = &self.shared.ranks[self.program.slot];
        let (ext_in, ext_out) = reach;
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
        let (ext_in, ext_out) = *self.reach.lock();
        let len = match self.compiled.in_place {
            true => ext_in.max(ext_out),
            false => ext_out,
        };
        if len == 0 {
            return Ok(());
        }
        let slot = self.program.slot;
        let memory = &self.shared.ranks[slot];
        let _current = memory.gpu.bind()?;
        let st = memory.staging.lock();
        let dev = st.1.as_ref().map_or(0, |a| a.ptr);
        // On the rank's own stream: a synchronous copy would order itself after the
        // legacy stream instead.
        let stream = self.shared.stage_streams[slot];
        cu!(cuMemcpyDtoHAsync_v2(output.cast(), dev, len, stream))?;
        cu!(cuStreamSynchronize(stream))?;
        Ok(())
    }

    /// The outcome if the launch is over, else `None`; the watchdog's checks run here.
    fn poll(&self) -> Option<Result<(), DeviceError>> {
        let mut state = self.state.lock();
        let outcome = match &mut *state {
            State::Done(outcome) => return Some(outcome.clone()),
            State::Ended(outcome) => outcome.clone(),
            State::Gated => self.poll_gated()?,
            State::Gathering => self.poll_gathering()?,
            State::Queued => self.poll_queued()?,
        };
        let outcome = self.finish(outcome);
        *state = State::Done(outcome.clone());
        Some(outcome)
    }

    fn poll_gated(&self) -> Option<Result<(), DeviceError>> {
        let rank = self.rank();
        if let Some(cause) = self.shared.stopped() {
            return Some(Err(DeviceError::Aborted { rank, cause }));
        }
        let waited = self.started.elapsed();
        if waited > self.shared.config.exec_timeout {
            return Some(Err(DeviceError::GateTimeout { rank, waited }));
        }
        None
    }

    /// Still gathering: over if the device stopped or the other ranks of the GPU never
    /// came, but only once the call is withdrawn from the group (else it is being
    /// launched, and the kernel will touch the buffers).
    fn poll_gathering(&self) -> Option<Result<(), DeviceError>> {
        let shared = &self.shared;
        let rank = self.rank();
        let stopped = shared.stopped();
        let waited = self.started.elapsed();
        if stopped.is_none() && waited <= shared.config.exec_timeout {
            return None;
        }
        let group = self.group();
        let missing = group.missing(shared, self.epoch);
        if !group.withdraw(self.program.slot, self.epoch) {
            return None;
        }
        if let Some(cause) = stopped {
            return Some(Err(DeviceError::Aborted { rank, cause }));
        }
        let error = DeviceError::from(CudaError::NeverCalled {
            rank,
            epoch: self.epoch,
            missing,
            waited,
        });
        shared.stop(AbortCause::PeerFailed {
            rank,
            error: Arc::new(error.clone()),
        });
        Some(Err(error))
    }

    /// Launched: done when the group's done event fired (after a stop, once the kernel
    /// saw the abort word).
    fn poll_queued(&self) -> Option<Result<(), DeviceError>> {
        let shared = &self.shared;
        let group = self.group();
        let _current = match group.gpu.bind() {
            Ok(current) => current,
            Err(e) => {
                // Without its context nothing of the call can be waited for or read back:
                // a lasting failure (polling again would spin for ever), so the device stops.
                let error = DeviceError::from(e);
                shared.stop(AbortCause::PeerFailed {
                    rank: self.rank(),
                    error: Arc::new(error.clone()),
                });
                return Some(Err(error));
            }
        };
        // SAFETY: `done` is a live event of the group.
        let ready = unsafe { sys::cuEventQuery(group.done) };
        match ready {
            sys::CUresult::CUDA_SUCCESS => {}
            sys::CUresult::CUDA_ERROR_NOT_READY => {
                if shared.stopped().is_none() && self.started.elapsed() > shared.config.exec_timeout
                {
                    let error = self.declare_hung();
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
        if let Some(error) = self.lost_wakeup() {
            shared.stop(AbortCause::PeerFailed {
                rank: self.rank(),
                error: Arc::new(error.clone()),
            });
            return Some(Err(error));
        }
        Some(self.stage_out())
    }

    /// A Post of this rank that found its word set, as the kernel recorded it.
    fn lost_wakeup(&self) -> Option<DeviceError> {
        let shared = &self.shared;
        let fault = self.word(Word::Fault, |m, i| m.swap(i, 0));
        if fault == 0 {
            return None;
        }
        let stream = (fault >> 24) as usize;
        let task = ((fault & 0xff_ffff) as usize).checked_sub(1)?;
        let at = TaskLocation {
            rank: self.rank(),
            stream,
            task,
        };
        let notify = match self.program.streams.get(stream)?.get(task)? {
            Op::Post { notify, .. } => *notify,
            _ => return None,
        };
        Some(DeviceError::LostWakeup {
            at,
            notify,
            notify_desc: shared.layout.describe(notify),
        })
    }

    /// Run `f` on the block holding `word` of this launch and the word's index there.
    fn word<R>(&self, word: Word, f: impl FnOnce(&Mapped, usize) -> R) -> R {
        if let Some((block, first)) = self.graph_words.get() {
            let index = match word {
                Word::Fault => *first,
                Word::Progress(s) => first + 1 + s,
            };
            return f(block, index);
        }
        let shared = &self.shared;
        let slot = self.program.slot;
        let index = match word {
            Word::Fault => shared.fault_word(slot),
            Word::Progress(s) => shared.progress_word(slot, s),
        };
        f(&shared.mapped, index)
    }

    /// The device address of `word` of this launch, for its descriptor.
    pub(crate) fn word_addr(&self, word: Word) -> u64 {
        self.word(word, |m, i| m.dev_addr(i))
    }

    /// Zero the progress words before the launch, so a kernel still queued is not
    /// mistaken for one that ran its streams to the end.
    pub(crate) fn reset_progress(&self) {
        for s in 0..self.program.streams.len() {
            self.word(Word::Progress(s), |m, i| m.store(i, 0));
        }
    }

    /// Let a CUDA graph's block hold this launch's words, from index `first` (the fault
    /// word, then a progress word per stream); once, before the launch.
    pub(crate) fn use_graph_words(&self, block: Arc<Mapped>, first: usize) {
        let _ = self.graph_words.set((block, first));
    }

    /// Whether every stream of the launch ran to its end (its progress words say so).
    pub(crate) fn streams_done(&self) -> bool {
        (0..self.program.streams.len())
            .all(|s| self.word(Word::Progress(s), |m, i| m.load(i)) == PROGRESS_DONE)
    }

    /// Take the watchdog's verdict on this launch as its outcome, and return it.
    pub(crate) fn declare_hung(&self) -> DeviceError {
        let error = self.watchdog();
        *self.hung.lock() = Some(error.clone());
        error
    }

    /// Which stream of the rank never finished, and where it was: the last Wait its
    /// progress word names (the kernel writes it before each Wait, and a mark at the end).
    fn watchdog(&self) -> DeviceError {
        let shared = &self.shared;
        let rank = self.rank();
        let waited = self.started.elapsed();
        let n = self.program.streams.len();
        let progress = |s: usize| self.word(Word::Progress(s), |m, i| m.load(i));
        let Some(s) = (0..n).find(|&s| progress(s) != PROGRESS_DONE) else {
            return CudaError::Hung {
                rank,
                stream: 0,
                task: "the exit fence (peers on other GPUs finishing the call)".into(),
                waited,
            }
            .into();
        };
        let reached = progress(s) as usize;
        if let Some(Op::Wait { notify, .. }) = reached
            .checked_sub(1)
            .and_then(|t| self.program.streams[s].get(t))
        {
            return DeviceError::WaitTimeout {
                at: TaskLocation {
                    rank,
                    stream: s,
                    task: reached - 1,
                },
                notify: *notify,
                notify_desc: shared.layout.describe(*notify),
                waited,
            };
        }
        let task = match reached {
            0 => "the start (the entry fence, or other ranks of the GPU starting)".to_string(),
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
            // The highest epoch finished: a graph's steps are settled after its end, and
            // the word must never go back to an earlier one that peers' fences read.
            let done = shared.done[slot]
                .fetch_max(self.epoch, Ordering::AcqRel)
                .max(self.epoch);
            shared.mapped.store(shared.epoch_word(slot), done as u32);
        }
        if self.claims_busy {
            shared.busy[slot].store(false, Ordering::Release);
        }
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
        UserBuffers::Device {
            input,
            output,
            in_place,
        } => {
            let ordinal = shared.ranks[slot].gpu.ordinal;
            let (ext_in, ext_out) = compiled.user_extent;
            for (what, span, extent) in [("input", input, ext_in), ("output", output, ext_out)] {
                // Zero-copy, peers may reach a buffer its own program does not touch.
                if extent == 0 && span.len == 0 {
                    continue;
                }
                let _current = shared.ranks[slot].gpu.bind()?;
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
                in_place: *in_place,
            }
        }
    })
}

/// A launch's word in mapped host memory ([`Launch::word_addr`]).
#[derive(Copy, Clone, Debug)]
pub(crate) enum Word {
    /// Where a Post that found its word set records itself.
    Fault,
    /// How far stream `s` got: the task of its last Wait, [`PROGRESS_DONE`] at its end.
    Progress(usize),
}

/// The progress word of a stream that ran to its end (`program.cu`).
const PROGRESS_DONE: u32 = u32::MAX;

/// A cuda submission in flight.
pub(crate) struct CudaCompletion {
    launch: Arc<Launch>,
}

impl Completion for CudaCompletion {
    fn wait(&mut self, timeout: Duration) -> Option<Result<(), DeviceError>> {
        let start = Instant::now();
        let deadline = start + timeout;
        loop {
            if let Some(outcome) = self.launch.poll() {
                return Some(outcome);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            pause(now - start, deadline - now);
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
