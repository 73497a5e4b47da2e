//! One `execute` call on the host device: stream state, notifies, abort and timeouts.
//!
//! A [`Launch`] owns the program counters of one rank's streams. Workers advance a stream
//! until it finishes, parks on an unset notify, or hands a big task to the chunk machinery
//! (which resumes the stream when the last chunk is done). Notifies live in one table per
//! device behind a mutex: a Post on a notify whose waiter is parked resumes that stream
//! directly, so a wakeup is one queue push.
//!
//! Memory ordering: a Post and the Wait it satisfies both take the notify table's mutex,
//! so every write the posting stream made before its Post happens-before every task after
//! the Wait, on whichever worker those run.

use super::exec;
use super::memory::Memory;
use super::pool::WorkerPool;
use crate::device::DeviceConfig;
use crate::error::{DeviceError, TaskLocation};
use crate::ir::{NotifyId, RankProgram, Task};
use crate::notify::NotifyLayout;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// State shared by every launch of one host device.
pub(crate) struct Shared {
    pub config: DeviceConfig,
    pub layout: NotifyLayout,
    pub memory: Memory,
    pub notifies: Mutex<NotifyTable>,
    pub pool: WorkerPool,
    pub running: Mutex<Running>,
}

/// The launches in flight, and the failure that stopped the device, if any.
///
/// A device serves the ranks of one communicator, whose programs wait on each other: when
/// one launch fails, every other launch in flight is aborted at once (its ranks would
/// otherwise wait out `exec_timeout` for posts that will never come), and every later
/// launch is refused with the same cause, because the failed program left notifies and
/// buffers in an unknown state.
#[derive(Default)]
pub(crate) struct Running {
    launches: Vec<std::sync::Weak<Launch>>,
    failure: Option<String>,
}

impl Shared {
    /// Track `launch`, unless an earlier failure stopped the device.
    pub(crate) fn admit(&self, launch: &Arc<Launch>) -> Result<(), DeviceError> {
        let mut running = self.running.lock();
        if let Some(cause) = &running.failure {
            return Err(DeviceError::Aborted {
                rank: launch.rank(),
                cause: cause.clone(),
            });
        }
        running.launches.retain(|l| l.strong_count() > 0);
        running.launches.push(Arc::downgrade(launch));
        Ok(())
    }

    /// Stop the device after `failed`'s error: abort every other launch in flight.
    fn fail_all(&self, failed: &Arc<Launch>, error: &DeviceError) {
        self.stop(
            format!("rank {} failed: {error}", failed.rank()),
            Some(failed),
        );
    }

    /// Stop the device for `cause`: abort every launch in flight but `except`, refuse
    /// every later one.
    pub(crate) fn stop(&self, cause: String, except: Option<&Arc<Launch>>) {
        let others: Vec<Arc<Launch>> = {
            let mut running = self.running.lock();
            running.failure.get_or_insert_with(|| cause.clone());
            running
                .launches
                .iter()
                .filter_map(std::sync::Weak::upgrade)
                .collect()
        };
        let skip = |o: &Arc<Launch>| except.is_some_and(|e| Arc::ptr_eq(o, e));
        for other in others.iter().filter(|o| !skip(o)) {
            let rank = other.rank();
            other.abort(DeviceError::Aborted {
                rank,
                cause: cause.clone(),
            });
        }
    }
}

/// Every rank's notifies.
pub(crate) struct NotifyTable {
    pub ranks: Vec<Vec<Slot>>,
}

impl NotifyTable {
    /// The slot of `notify`, or an error naming the task that used a notify that does not
    /// exist.
    fn slot(&mut self, notify: NotifyId, at: TaskLocation) -> Result<&mut Slot, DeviceError> {
        let len = self.ranks.first().map_or(0, Vec::len);
        self.ranks
            .get_mut(notify.rank)
            .and_then(|r| r.get_mut(notify.index as usize))
            .ok_or_else(|| DeviceError::InvalidTask {
                at,
                reason: format!("notify {notify:?} does not exist (each table has {len})"),
            })
    }

    /// Grow every rank's table to `len` slots.
    pub(crate) fn reserve(&mut self, len: usize) {
        for rank in &mut self.ranks {
            if rank.len() < len {
                rank.resize_with(len, Slot::default);
            }
        }
    }
}

#[derive(Default)]
pub(crate) struct Slot {
    set: bool,
    waiter: Option<(Arc<Launch>, usize)>,
}

/// What a stream does after a task.
pub(crate) enum Step {
    /// Go on with the next task.
    Next,
    /// The stream is parked on a notify or resumed by the chunk machinery: stop here.
    Suspended,
}

/// Whether a launch's streams were queued.
#[derive(Copy, Clone)]
enum Phase {
    /// Waiting for its gate (see [`crate::gate`]) since then.
    Gated(Instant),
    Running,
    /// Ended before it started (its gate refused it, or the device stopped).
    Cancelled,
}

/// One rank's program in flight.
pub(crate) struct Launch {
    pub shared: Arc<Shared>,
    pub program: Arc<RankProgram>,
    pub scratch: Option<usize>,
    phase: Mutex<Phase>,
    pc: Vec<AtomicUsize>,
    parked: Mutex<Vec<Option<(NotifyId, Instant, usize)>>>,
    remaining: AtomicUsize,
    aborted: AtomicBool,
    error: Mutex<Option<DeviceError>>,
    done: Mutex<bool>,
    done_cv: Condvar,
}

impl Launch {
    pub(crate) fn new(
        shared: Arc<Shared>,
        program: Arc<RankProgram>,
        scratch: Option<usize>,
        gated: bool,
    ) -> Arc<Self> {
        let streams = program.streams.len();
        let phase = match gated {
            true => Phase::Gated(Instant::now()),
            false => Phase::Running,
        };
        Arc::new(Launch {
            shared,
            program,
            scratch,
            phase: Mutex::new(phase),
            pc: (0..streams).map(|_| AtomicUsize::new(0)).collect(),
            parked: Mutex::new(vec![None; streams]),
            remaining: AtomicUsize::new(streams),
            aborted: AtomicBool::new(false),
            error: Mutex::new(None),
            done: Mutex::new(streams == 0),
            done_cv: Condvar::new(),
        })
    }

    pub(crate) fn rank(&self) -> usize {
        self.program.rank
    }

    /// Queue every stream.
    pub(crate) fn start(self: &Arc<Self>) {
        for s in 0..self.program.streams.len() {
            self.schedule(s);
        }
    }

    /// The gate decided: queue every stream, or end the launch with `cause` before any
    /// task ran.
    pub(crate) fn gate_decided(self: &Arc<Self>, outcome: Result<(), String>) {
        match outcome {
            Ok(()) => {
                let mut phase = self.phase.lock();
                if let Phase::Gated(_) = *phase {
                    *phase = Phase::Running;
                    drop(phase);
                    self.start();
                }
            }
            Err(cause) => {
                let rank = self.rank();
                self.abort(DeviceError::Refused { rank, cause });
            }
        }
    }

    /// End a launch whose streams were never queued: they all count as finished. False
    /// when it already runs (or ended).
    fn cancel_unstarted(&self) -> bool {
        let mut phase = self.phase.lock();
        if let Phase::Gated(_) = *phase {
            *phase = Phase::Cancelled;
            drop(phase);
            for _ in 0..self.program.streams.len() {
                self.finish_stream();
            }
            return true;
        }
        false
    }

    /// Queue stream `s` to run from its current task.
    pub(crate) fn schedule(self: &Arc<Self>, s: usize) {
        let me = self.clone();
        self.shared.pool.push(Box::new(move || run_stream(&me, s)));
    }

    /// Make stream `s` runnable from a worker: run it next on this worker if the others
    /// are busy (see the pool).
    pub(crate) fn resume(self: &Arc<Self>, s: usize) {
        let me = self.clone();
        self.shared
            .pool
            .push_local(Box::new(move || run_stream(&me, s)));
    }

    /// Move stream `s` past its current task (used by the chunk machinery).
    pub(crate) fn advance(&self, s: usize) {
        self.pc[s].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::Acquire)
    }

    fn finish_stream(&self) {
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            *self.done.lock() = true;
            self.done_cv.notify_all();
        }
    }

    /// Record the first error, stop every stream of this launch, release parked ones. An
    /// error of this launch's own (not an abort on another's behalf) stops the whole
    /// device: see [`Running`].
    pub(crate) fn abort(self: &Arc<Self>, error: DeviceError) {
        let first = {
            let mut slot = self.error.lock();
            let first = slot.is_none();
            if first {
                *slot = Some(error.clone());
            }
            first
        };
        // A launch that never passed its gate ran no task: nothing to stop elsewhere (the
        // gate's owner tells the other launches).
        let own = !matches!(
            error,
            DeviceError::Aborted { .. }
                | DeviceError::Refused { .. }
                | DeviceError::GateTimeout { .. }
        );
        if first && own {
            self.shared.fail_all(self, &error);
        }
        self.aborted.store(true, Ordering::Release);
        if self.cancel_unstarted() {
            return;
        }
        let mut table = self.shared.notifies.lock();
        for slot in table.ranks[self.rank()].iter_mut() {
            if matches!(&slot.waiter, Some((l, _)) if Arc::ptr_eq(l, self)) {
                let (_, s) = slot.waiter.take().expect("matched above");
                self.parked.lock()[s] = None;
                self.finish_stream();
            }
        }
    }

    /// True once every stream finished.
    pub(crate) fn is_done(&self) -> bool {
        self.remaining.load(Ordering::Acquire) == 0
    }

    /// The outcome, once [`Launch::wait_done`] returned.
    pub(crate) fn result(&self) -> Result<(), DeviceError> {
        match self.error.lock().clone() {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }

    /// Block until every stream finished; report a Wait parked longer than the timeout.
    pub(crate) fn wait_done(self: &Arc<Self>) -> Result<(), DeviceError> {
        let timeout = self.shared.config.exec_timeout;
        let tick = (timeout / 8).clamp(
            std::time::Duration::from_millis(1),
            std::time::Duration::from_millis(500),
        );
        let mut done = self.done.lock();
        while !*done {
            self.done_cv.wait_for(&mut done, tick);
            if *done {
                break;
            }
            if let Some(err) = self.overdue_wait() {
                drop(done);
                self.abort(err);
                done = self.done.lock();
            }
        }
        drop(done);
        self.result()
    }

    fn overdue_wait(&self) -> Option<DeviceError> {
        let timeout = self.shared.config.exec_timeout;
        if let Phase::Gated(since) = *self.phase.lock() {
            let waited = since.elapsed();
            return (waited >= timeout).then(|| DeviceError::GateTimeout {
                rank: self.rank(),
                waited,
            });
        }
        let parked = self.parked.lock();
        parked.iter().enumerate().find_map(|(stream, p)| {
            let (notify, since, task) = (*p)?;
            let waited = since.elapsed();
            (waited >= timeout).then(|| DeviceError::WaitTimeout {
                at: TaskLocation {
                    rank: self.rank(),
                    stream,
                    task,
                },
                notify,
                notify_desc: self.shared.layout.describe(notify),
                waited,
            })
        })
    }

    fn post(&self, notify: NotifyId, at: TaskLocation) -> Result<(), DeviceError> {
        let mut table = self.shared.notifies.lock();
        let slot = table.slot(notify, at)?;
        if let Some((waiter, s)) = slot.waiter.take() {
            waiter.parked.lock()[s] = None;
            waiter.advance(s);
            waiter.resume(s);
        } else if slot.set {
            return Err(DeviceError::LostWakeup {
                at,
                notify,
                notify_desc: self.shared.layout.describe(notify),
            });
        } else {
            slot.set = true;
        }
        Ok(())
    }

    fn wait(self: &Arc<Self>, notify: NotifyId, at: TaskLocation) -> Result<Step, DeviceError> {
        if notify.rank != self.rank() {
            return Err(DeviceError::InvalidTask {
                at,
                reason: format!("Wait on notify {notify:?} of another rank; waits are local"),
            });
        }
        let mut table = self.shared.notifies.lock();
        // Checked under the table's lock: `abort` sets the flag before it takes the lock to
        // release parked streams, so a stream either sees the flag here or is parked in
        // time for `abort` to release it. Without this a stream that passed the flag check
        // in `run_stream` just before an abort would park after it, and wait out the
        // timeout. The loop in `run_stream` ends the stream.
        if self.is_aborted() {
            return Ok(Step::Next);
        }
        let slot = table.slot(notify, at)?;
        if slot.set {
            slot.set = false;
            return Ok(Step::Next);
        }
        if slot.waiter.is_some() {
            return Err(DeviceError::InvalidTask {
                at,
                reason: format!(
                    "two streams wait on {}",
                    self.shared.layout.describe(notify)
                ),
            });
        }
        slot.waiter = Some((self.clone(), at.stream));
        self.parked.lock()[at.stream] = Some((notify, Instant::now(), at.task));
        Ok(Step::Suspended)
    }
}

/// Run stream `s` of `launch` until it finishes, parks, or hands off a big task.
pub(crate) fn run_stream(launch: &Arc<Launch>, s: usize) {
    let tasks = &launch.program.streams[s].tasks;
    loop {
        let pc = launch.pc[s].load(Ordering::Relaxed);
        let Some(task) = tasks.get(pc).filter(|_| !launch.is_aborted()) else {
            launch.finish_stream();
            return;
        };
        let at = TaskLocation {
            rank: launch.rank(),
            stream: s,
            task: pc,
        };
        let step = match task {
            Task::Post { notify } => launch.post(*notify, at).map(|()| Step::Next),
            Task::Wait { notify } => launch.wait(*notify, at),
            Task::Copy { .. } | Task::Reduce { .. } => exec::run_data_task(launch, task, at),
        };
        match step {
            Ok(Step::Next) => launch.advance(s),
            Ok(Step::Suspended) => return,
            Err(err) => {
                launch.abort(err);
                launch.finish_stream();
                return;
            }
        }
    }
}
