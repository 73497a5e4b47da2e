//! One submission on the host device: gate, entry fence, streams, exit fence, abort and
//! timeouts.
//!
//! A [`Launch`] goes through phases: `Gated` (its gate is undecided), `Fenced` (a fence
//! peer has not finished the previous epoch), `Running` (workers advance its streams),
//! `Exiting` (its streams ended; in zero-copy mode it waits for its fence peers to finish
//! this epoch, so none touches its user buffers afterwards), then done. No phase holds a
//! thread: a gate decision, a peer's advance or a Post queues the launch again.
//!
//! Workers advance a stream until it finishes, parks on an unset notify, or hands a big
//! task to the chunk machinery (which resumes the stream when the last chunk is done).
//! Notifies are words of per-rank signal banks ([`crate::signal`]): a Post on a word whose
//! waiter is parked resumes that stream directly, so a wakeup is one queue push and no
//! lock is shared by all ranks.
//!
//! ## Notifies left set
//!
//! The IR's contract is that every post of an operation is consumed within it. A launch
//! whose streams all ended checks it before it lets peers start the next epoch: it marks
//! the epoch `ended` on its fence, then looks at the words its program may be posted on
//! (the link words of its fence peers, the words it waits on, its local region); a word
//! still set is [`DeviceError::NotifyLeftSet`], reported by this call. A post that arrives
//! later is caught by its poster, which after posting reads the owner's `ended` mark (in
//! this process, in the owner's shared-memory control area, or, over TCP, by the owner's
//! receiver with the epoch the Post frame carries) and, when the owner ended the epoch,
//! the word again: still set is [`DeviceError::PostAfterEnd`]; clear means a wait of the
//! epoch took the post before the owner ended, which is right. Both sides order their
//! write before their read (SeqCst), so one of them always sees the other, and nothing is
//! left for the next operation to trip over.

use super::compile::{HostProgram, Op};
use super::exec;
use super::fence::RankFence;
use super::memory::{Memory, UserRegions};
use super::pool::WorkerPool;
use crate::device::{Compiled, DeviceConfig};
use crate::error::{AbortCause, DeviceError, TaskFault, TaskLocation};
use crate::ir::{NotifyId, Rank};
use crate::notify::NotifyLayout;
use crate::signal::{Posted, PostedAfar, SignalBank, Waited, SET};
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a send that found its peer gone waits for the receiver to stop the device
/// with the peer's own account (see [`Shared::tcp_send_failed`]). The receiver reads a
/// dead peer's last frames and its end within microseconds on a live machine; this only
/// bounds the wait when it cannot.
const PEER_LOSS_GRACE: Duration = Duration::from_secs(1);

/// What a post hands back to resume a parked stream: the launch and the stream.
pub(crate) type Waker = (Arc<Launch>, usize);

/// State shared by every launch of one host device.
pub(crate) struct Shared {
    pub config: DeviceConfig,
    pub layout: NotifyLayout,
    /// Per communicator rank, its local slot.
    pub slots: Vec<Option<usize>>,
    pub memory: Memory,
    /// Per local slot.
    pub banks: Vec<SignalBank<Waker>>,
    /// Per fence slot: the local slots first, then one proxy per rank reached through
    /// shared memory (moved by the doorbell service to the `done_epoch` that rank
    /// publishes).
    pub fences: Vec<RankFence>,
    /// The rank of each fence slot.
    pub fence_ranks: Vec<Rank>,
    /// Per fence slot, how many epochs behind a launch's own it may be at the launch's
    /// entry ([`Shared::fence_lag`]).
    pub fence_lags: Vec<u64>,
    /// Per communicator rank, its fence slot.
    pub fence_of: Vec<Option<usize>>,
    /// The shm transport's blocks and peers, when ranks of other devices are reached
    /// through shared memory.
    pub shm: Option<Arc<super::shm::ShmLinks>>,
    /// The tcp transport's connections, when ranks are reached over TCP.
    pub tcp: Option<Arc<super::tcp::TcpLinks>>,
    pub pool: WorkerPool,
    pub running: Mutex<Running>,
    /// Notified when the device stops (`running.failure` is set).
    pub stopped: Condvar,
    /// Linked groups of sequences, run serially (see `serial`).
    pub schedules: super::serial::Schedules,
    /// Identifies this device's compiled programs.
    pub id: usize,
}

/// How a device reaches a rank of its communicator.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Reach {
    /// The device serves it: its local slot.
    Local(usize),
    /// Through shared memory: its block is mapped here (load/store).
    Shm,
    /// Over TCP (put-only).
    Tcp,
    /// Not at all.
    Not,
}

/// The launches in flight, and the failure that stopped the device, if any.
///
/// A device serves ranks whose programs wait on each other: when one launch fails, every
/// other launch in flight is aborted at once (its ranks would otherwise wait out
/// `exec_timeout` for posts that will never come), fence waiters are released, and every
/// later launch is refused with the same cause, because the failed program left notifies
/// and buffers in an unknown state.
#[derive(Default)]
pub(crate) struct Running {
    launches: Vec<std::sync::Weak<Launch>>,
    failure: Option<AbortCause>,
}

impl Shared {
    /// Why the device stopped, once it did.
    pub(crate) fn failure(&self) -> Option<AbortCause> {
        self.running.lock().failure.clone()
    }

    /// The shm transport when peers in other processes map the user buffers of
    /// `compiled`'s calls: zero-copy (its peers touch them: the exit fence) with shared
    /// user buffers ([`crate::device::ShmJob::user_buffers`]).
    pub(crate) fn shm_mapping_user(
        &self,
        compiled: &Compiled,
    ) -> Option<&Arc<super::shm::ShmLinks>> {
        let shm = self.shm.as_ref()?;
        (compiled.exit_fence && shm.user_buffers && shm.peer_ranks().next().is_some())
            .then_some(shm)
    }

    /// The local slot of `rank`, or the refusal for a rank this device does not serve.
    pub(crate) fn slot(&self, rank: Rank) -> Result<usize, DeviceError> {
        self.slots
            .get(rank)
            .copied()
            .flatten()
            .ok_or_else(|| self.config.not_served(rank))
    }

    /// How this device reaches `rank`.
    pub(crate) fn reach(&self, rank: Rank) -> Reach {
        if let Some(slot) = self.slots.get(rank).copied().flatten() {
            return Reach::Local(slot);
        }
        if self.shm.as_ref().is_some_and(|s| s.peer(rank).is_some()) {
            return Reach::Shm;
        }
        if self.tcp.as_ref().is_some_and(|t| t.reaches(rank)) {
            return Reach::Tcp;
        }
        Reach::Not
    }

    /// How many epochs behind a launch's own a fence peer may be at its entry: one, or
    /// two for a rank whose frames this device holds when they come early (see
    /// `tcp::early`).
    pub(crate) fn fence_lag(&self, fence_slot: usize) -> u64 {
        self.fence_lags.get(fence_slot).copied().unwrap_or(1)
    }

    /// The fence slot of `rank` (local or a peer's proxy), if the device reaches it.
    pub(crate) fn fence_slot(&self, rank: Rank) -> Option<usize> {
        self.fence_of.get(rank).copied().flatten()
    }

    /// Local slot `slot` finished `epoch`: run what waits for it here, and publish it to
    /// the peers in other devices.
    /// Every stream of `epoch` ended on local slot `slot`: mark it where posters look
    /// (this process's fence, and the slot's shared-memory control area).
    pub(crate) fn end(&self, slot: usize, epoch: u64) {
        self.fences[slot].end(epoch);
        if let Some(shm) = &self.shm {
            shm.publish_ended(slot, epoch);
        }
    }

    pub(crate) fn advance(&self, slot: usize, epoch: u64) {
        // Frames held for the next epoch land before anything may start it.
        if let Some(tcp) = &self.tcp {
            tcp.finished(self, slot, epoch);
        }
        self.fences[slot].advance(epoch);
        if let Some(shm) = &self.shm {
            shm.publish_done(slot, epoch);
        }
        if let Some(tcp) = &self.tcp {
            tcp.publish_done(slot, epoch);
        }
    }

    /// A TCP send that failed because its peer's end is gone (reset, broken pipe) is that
    /// peer's loss, as the end of its stream is to the receiver: stop the device for it and
    /// report it so, naming the rank that died rather than the send that noticed first.
    /// Any other error is returned as it is.
    ///
    /// The peer may have gone because it stopped for another rank's loss: it sent a
    /// `Failed` frame naming that rank before it exited, and the receiver reads it before
    /// the connection's end. A send can notice the reset before the receiver has read that
    /// frame, so it first gives the receiver [`PEER_LOSS_GRACE`] to stop the device, and
    /// blames `to` only if nothing did. Every rank then names the rank lost first.
    pub(crate) fn tcp_send_failed(&self, err: DeviceError) -> DeviceError {
        use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset};
        let DeviceError::Tcp(crate::transport::tcp::TcpError::Send { from, to, source }) = &err
        else {
            return err;
        };
        if !matches!(
            source.kind(),
            ConnectionReset | BrokenPipe | ConnectionAborted
        ) {
            return err;
        }
        let cause = self
            .failure_within(PEER_LOSS_GRACE)
            .unwrap_or_else(|| self.config.lost(*to, None, crate::error::PeerLoss::Died));
        let cause = self.stop(cause, None);
        DeviceError::Aborted { rank: *from, cause }
    }

    /// Why the device stopped, waiting up to `grace` for it to stop.
    fn failure_within(&self, grace: Duration) -> Option<AbortCause> {
        let deadline = Instant::now() + grace;
        let mut running = self.running.lock();
        while running.failure.is_none() {
            if self.stopped.wait_until(&mut running, deadline).timed_out() {
                break;
            }
        }
        running.failure.clone()
    }

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
        drop(running);
        if let Some(shm) = &self.shm {
            shm.launch_started();
            super::shm::refresh_fences(self, shm);
        }
        Ok(())
    }

    /// Stop the device for `cause`: abort every launch in flight but `except`, release
    /// every fence waiter, refuse every later launch. A device stops once: if it had
    /// stopped already, its launches keep that first cause. Returns the cause the device
    /// stopped for.
    pub(crate) fn stop(&self, cause: AbortCause, except: Option<&Arc<Launch>>) -> AbortCause {
        let (others, first, cause) = {
            let mut running = self.running.lock();
            let first = running.failure.is_none();
            let cause = running.failure.get_or_insert(cause).clone();
            let others = running
                .launches
                .iter()
                .filter_map(std::sync::Weak::upgrade)
                .collect::<Vec<Arc<Launch>>>();
            (others, first, cause)
        };
        self.stopped.notify_all();
        // Peers in other processes wait on this device's ranks: tell them at once.
        if let (true, Some(shm)) = (first, &self.shm) {
            shm.announce_failure(&cause);
        }
        if let (true, Some(tcp)) = (first, &self.tcp) {
            tcp.announce_failure(&cause);
        }
        let skip = |o: &Arc<Launch>| except.is_some_and(|e| Arc::ptr_eq(o, e));
        for other in others.iter().filter(|o| !skip(o)) {
            let rank = other.rank();
            other.abort(DeviceError::Aborted {
                rank,
                cause: cause.clone(),
            });
        }
        for fence in &self.fences {
            fence.release_all();
        }
        cause
    }
}

/// What a stream does after a task.
pub(crate) enum Step {
    /// Go on with the next task.
    Next,
    /// The stream is parked on a notify or resumed by the chunk machinery: stop here.
    Suspended,
}

/// Where a launch is (see the module docs).
#[derive(Copy, Clone)]
enum Phase {
    Gated(Instant),
    /// Waiting for fence peer `peers[index]` to finish `needed`, since then (`None`:
    /// not waited yet; the clock is read only when a peer is found missing, which keeps
    /// it off the path of small operations).
    Fenced {
        since: Option<Instant>,
        index: usize,
        needed: u64,
    },
    Running,
    /// As `Fenced`, for the exit fence.
    Exiting {
        since: Option<Instant>,
        index: usize,
    },
    /// Ended before it started (its gate refused it, or the device stopped).
    Cancelled,
    Done,
}

/// One rank's submission in flight.
pub(crate) struct Launch {
    pub shared: Arc<Shared>,
    pub compiled: Arc<Compiled>,
    pub program: Arc<HostProgram>,
    /// Fence slots the entry fence waits for: the rank itself (its previous epoch: a rank
    /// may have several submissions queued, which run one after the other), this
    /// program's fence peers and those of the rank's previous launch
    /// ([`RankFence::entry_peers`]).
    entry_peers: Arc<[usize]>,
    pub epoch: u64,
    /// The rank's own user buffers (a copy: the launch's own tasks are over before it
    /// completes, so it does not hold the registration peers count on).
    pub user: UserRegions,
    phase: Mutex<Phase>,
    pc: Vec<AtomicUsize>,
    /// Per stream: the notify it waits on, since when, at which task.
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
        compiled: Arc<Compiled>,
        program: Arc<HostProgram>,
        epoch: u64,
        user: UserRegions,
        gated: bool,
    ) -> Arc<Self> {
        let streams = program.streams.len();
        let entry_peers = shared.fences[program.slot].entry_peers(&program.entry_slots);
        let phase = match gated {
            true => Phase::Gated(Instant::now()),
            false => Phase::Fenced {
                since: None,
                index: 0,
                needed: epoch.saturating_sub(1),
            },
        };
        Arc::new(Launch {
            shared,
            compiled,
            program,
            entry_peers,
            epoch,
            user,
            phase: Mutex::new(phase),
            pc: (0..streams).map(|_| AtomicUsize::new(0)).collect(),
            parked: Mutex::new(vec![None; streams]),
            remaining: AtomicUsize::new(streams),
            aborted: AtomicBool::new(false),
            error: Mutex::new(None),
            done: Mutex::new(false),
            done_cv: Condvar::new(),
        })
    }

    pub(crate) fn rank(&self) -> Rank {
        self.compiled.rank
    }

    /// Ask the TCP peers this launch's fences wait for to send the epochs they need, or
    /// renew the lease (see `tcp`'s module docs). From the submitting thread, before the
    /// launch starts: a fence's callbacks may run on the receiver thread, which must not
    /// wait for a connection a stream is sending on.
    pub(crate) fn want_peer_epochs(&self) -> Result<(), DeviceError> {
        let Some(tcp) = &self.shared.tcp else {
            return Ok(());
        };
        let slot = self.program.slot;
        let entry = self.entry_peers.iter().map(|&p| (p, self.entry_needs(p)));
        let exit = match self.compiled.exit_fence {
            true => &self.program.exit_slots[..],
            false => &[],
        };
        for (peer, needed) in entry.chain(exit.iter().map(|&p| (p, self.epoch))) {
            let rank = self.shared.fence_ranks[peer];
            if tcp.reaches(rank) {
                tcp.want(slot, rank, needed)?;
            }
        }
        Ok(())
    }

    /// The epoch fence slot `peer` must have finished before this launch starts: the one
    /// before its own, or the one before that for a peer whose early frames the device
    /// holds ([`Shared::fence_lag`]).
    fn entry_needs(&self, peer: usize) -> u64 {
        self.epoch.saturating_sub(self.shared.fence_lag(peer))
    }

    /// The gate decided: pass the entry fence and run, or end the launch before any task
    /// ran.
    pub(crate) fn gate_decided(self: &Arc<Self>, outcome: Result<(), crate::GateRefusal>) {
        match outcome {
            Ok(()) => {
                let mut phase = self.phase.lock();
                if let Phase::Gated(_) = *phase {
                    *phase = Phase::Fenced {
                        since: None,
                        index: 0,
                        needed: self.epoch.saturating_sub(1),
                    };
                    drop(phase);
                    self.pass_entry_fence(0);
                }
            }
            Err(cause) => {
                let rank = self.rank();
                self.abort(DeviceError::Refused { rank, cause });
            }
        }
    }

    /// Wait (parked, as a callback on the peer's fence) until every fence peer from
    /// `index` on finished the previous epoch, then queue every stream.
    pub(crate) fn pass_entry_fence(self: &Arc<Self>, mut index: usize) {
        // Usually every peer is there already: skip them without taking the phase lock.
        while let Some(&peer) = self.entry_peers.get(index) {
            if self.shared.fences[peer].done() < self.entry_needs(peer) {
                break;
            }
            index += 1;
        }
        while let Some(&peer) = self.entry_peers.get(index) {
            let needed = self.entry_needs(peer);
            {
                let mut phase = self.phase.lock();
                if !matches!(*phase, Phase::Fenced { .. }) {
                    return;
                }
                *phase = Phase::Fenced {
                    since: match *phase {
                        Phase::Fenced { since, .. } => since.or_else(|| Some(Instant::now())),
                        _ => Some(Instant::now()),
                    },
                    index,
                    needed,
                };
            }
            let me = self.clone();
            let next = index;
            let reached = self.shared.fences[peer]
                .reached_or_register(needed, move || Box::new(move || me.pass_entry_fence(next)));
            if !reached {
                return;
            }
            index += 1;
        }
        {
            let mut phase = self.phase.lock();
            if !matches!(*phase, Phase::Fenced { .. }) {
                return;
            }
            *phase = Phase::Running;
        }
        self.publish_binding();
        if self.program.streams.is_empty() {
            self.streams_done();
        }
        for s in 0..self.program.streams.len() {
            self.schedule(s);
        }
    }

    /// A serial run drives this launch (see `serial`): it runs from now on, its tasks
    /// run by the submitting thread. False when it was cancelled or ended meanwhile.
    pub(crate) fn start_serially(&self) -> bool {
        let mut phase = self.phase.lock();
        match *phase {
            Phase::Gated(_) | Phase::Fenced { .. } => {
                *phase = Phase::Running;
                self.publish_binding();
                true
            }
            _ => false,
        }
    }

    /// Tell peers in other processes where this call's user buffers lie, when they map
    /// them: before any stream runs, so before any Post that lets them in.
    fn publish_binding(&self) {
        if let Some(shm) = self.shared.shm_mapping_user(&self.compiled) {
            shm.publish_binding(self.program.slot, &self.user);
        }
    }

    /// A serial run ran every task of `launches` (one epoch's, or stopped at a fault):
    /// their streams end, and each launch ends as any does (notifies left set, the fence,
    /// its outcome). Every rank finishes the epoch before any passes its exit fence, so
    /// none waits for a peer that is next in line.
    pub(crate) fn end_serially(launches: &[&Arc<Self>]) {
        let running = |l: &&&Arc<Self>| matches!(*l.phase.lock(), Phase::Running);
        let ending: Vec<&Arc<Self>> = launches.iter().filter(running).copied().collect();
        for launch in &ending {
            launch.remaining.store(0, Ordering::Release);
            // No signal of the run was touched: nothing can be left set.
            launch.shared.end(launch.program.slot, launch.epoch);
            launch.shared.advance(launch.program.slot, launch.epoch);
        }
        for launch in ending {
            launch.exit();
        }
    }

    /// Every stream ended: this rank finished the epoch. Then wait for the exit fence
    /// (zero-copy, no error) or complete.
    fn streams_done(self: &Arc<Self>) {
        self.finish_epoch();
        self.exit();
    }

    /// Look for notifies left set, then mark the epoch finished on the rank's fence.
    fn finish_epoch(self: &Arc<Self>) {
        if self.error.lock().is_none() && !self.is_aborted() {
            if let Some(err) = self.left_set() {
                self.abort(err);
            }
        }
        self.shared.advance(self.program.slot, self.epoch);
    }

    /// After the epoch: wait for the exit fence (zero-copy, no error) or complete.
    fn exit(self: &Arc<Self>) {
        let exit = self.compiled.exit_fence && self.error.lock().is_none();
        {
            let mut phase = self.phase.lock();
            if matches!(*phase, Phase::Done) {
                return;
            }
            if !exit {
                *phase = Phase::Done;
                drop(phase);
                return self.complete();
            }
            *phase = Phase::Exiting {
                since: None,
                index: 0,
            };
        }
        self.pass_exit_fence(0);
    }

    fn pass_exit_fence(self: &Arc<Self>, mut index: usize) {
        while let Some(&peer) = self.program.exit_slots.get(index) {
            if self.shared.fences[peer].done() < self.epoch {
                break;
            }
            index += 1;
        }
        while let Some(&peer) = self.program.exit_slots.get(index) {
            {
                let mut phase = self.phase.lock();
                let Phase::Exiting { since, .. } = *phase else {
                    return;
                };
                let since = since.or_else(|| Some(Instant::now()));
                *phase = Phase::Exiting { since, index };
            }
            let me = self.clone();
            let next = index;
            let reached = self.shared.fences[peer].reached_or_register(self.epoch, move || {
                Box::new(move || me.pass_exit_fence(next))
            });
            if !reached {
                return;
            }
            index += 1;
        }
        {
            let mut phase = self.phase.lock();
            if !matches!(*phase, Phase::Exiting { .. }) {
                return;
            }
            *phase = Phase::Done;
        }
        self.complete();
    }

    /// Mark the epoch ended, then look for a word of the rank still set (see the module
    /// docs): the first one found, as an error.
    fn left_set(&self) -> Option<DeviceError> {
        let slot = self.program.slot;
        self.shared.end(slot, self.epoch);
        fence(Ordering::SeqCst);
        let bank = &self.shared.banks[slot];
        let set = |&&w: &&usize| bank.word(w).is_some_and(|word| word.state() == SET);
        let &word = self.program.watched.iter().find(set)?;
        let notify = NotifyId {
            rank: self.rank(),
            index: word as u32,
        };
        Some(DeviceError::NotifyLeftSet {
            rank: self.rank(),
            epoch: self.epoch,
            notify,
            notify_desc: self.shared.layout.describe(notify),
        })
    }

    /// After a post that set a word of `owner` (nobody waited on it yet): an error when
    /// `owner` already ended this epoch (`ended`, read after the post) and the word is
    /// still set (`still_set`, read after `ended`), since no wait is left to consume it.
    /// A word found clear was consumed by a wait of the epoch between the post and the
    /// look at `ended`: the owner ended after it, which is right. Only this rank's stream
    /// posts this word in this epoch, so a set word is this post.
    fn late_post(
        &self,
        ended: u64,
        still_set: impl FnOnce() -> bool,
        (owner, notify): (Rank, NotifyId),
        at: TaskLocation,
    ) -> Result<(), DeviceError> {
        if ended < self.epoch || !still_set() {
            return Ok(());
        }
        Err(DeviceError::PostAfterEnd {
            at,
            owner,
            epoch: self.epoch,
            notify,
            notify_desc: self.shared.layout.describe(notify),
        })
    }

    /// The launch is over (once: a second call changes nothing).
    fn complete(&self) {
        let mut done = self.done.lock();
        if *done {
            return;
        }
        *done = true;
        drop(done);
        if let Some(shm) = &self.shared.shm {
            shm.launch_ended();
        }
        self.done_cv.notify_all();
    }

    /// End a launch whose streams were never queued (gated or fenced): it counts as
    /// finished. Also ends an exiting launch at once. False when it runs (or ended).
    fn cancel_unstarted(self: &Arc<Self>) -> bool {
        let mut phase = self.phase.lock();
        match *phase {
            Phase::Gated(_) | Phase::Fenced { .. } => {
                *phase = Phase::Cancelled;
                drop(phase);
                // A refused call still consumed its epoch: peers must not wait for it.
                self.shared.advance(self.program.slot, self.epoch);
                self.complete();
                true
            }
            Phase::Exiting { .. } => {
                *phase = Phase::Done;
                drop(phase);
                self.complete();
                true
            }
            Phase::Cancelled | Phase::Done => true,
            Phase::Running => false,
        }
    }

    /// Queue stream `s` to run from its current task: a small program's quietly, for the
    /// submitting thread to run (see the pool).
    pub(crate) fn schedule(self: &Arc<Self>, s: usize) {
        let me = self.clone();
        let job = Box::new(move || run_stream(&me, s));
        match self.program.small() {
            true => self.shared.pool.push_quiet(job),
            false => self.shared.pool.push(job),
        }
    }

    /// Make stream `s` runnable again: a small program's quietly; otherwise next on this
    /// worker if the others are busy (see the pool).
    pub(crate) fn resume(self: &Arc<Self>, s: usize) {
        let me = self.clone();
        let job = Box::new(move || run_stream(&me, s));
        match self.program.small() {
            true => self.shared.pool.push_quiet(job),
            false => self.shared.pool.push_local(job),
        }
    }

    /// Stream `s` is no longer parked, and is past the Wait a post consumed.
    fn unpark_past_wait(&self, s: usize) {
        self.parked.lock()[s] = None;
        self.advance(s);
    }

    /// Move stream `s` past its current task (used by the chunk machinery).
    pub(crate) fn advance(&self, s: usize) {
        self.pc[s].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::SeqCst)
    }

    fn finish_stream(self: &Arc<Self>) {
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.streams_done();
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
            let cause = AbortCause::PeerFailed {
                rank: self.rank(),
                error: Arc::new(error),
            };
            self.shared.stop(cause, Some(self));
        }
        self.aborted.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if self.cancel_unstarted() {
            return;
        }
        // Release parked streams; a stream that parks after this sees the flag and
        // releases itself (see `wait`).
        let waiting: Vec<(usize, NotifyId)> = self
            .parked
            .lock()
            .iter()
            .enumerate()
            .filter_map(|(s, p)| p.map(|(n, ..)| (s, n)))
            .collect();
        for (s, notify) in waiting {
            self.release_parked(s, notify);
        }
    }

    /// Take stream `s` off the word of `notify` it parked on and finish it, unless a post
    /// resumed it first.
    fn release_parked(self: &Arc<Self>, s: usize, notify: NotifyId) {
        let bank = &self.shared.banks[self.program.slot];
        let word = bank
            .word(notify.index as usize)
            .expect("checked at compile");
        if word.unpark().is_some() {
            self.parked.lock()[s] = None;
            self.finish_stream();
        }
    }

    /// True once the launch completed.
    pub(crate) fn is_done(&self) -> bool {
        *self.done.lock()
    }

    /// The outcome, once done.
    pub(crate) fn result(&self) -> Result<(), DeviceError> {
        match self.error.lock().clone() {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }

    /// Block up to `timeout` for the launch to complete, reporting a gate, fence or Wait
    /// that waited longer than `exec_timeout` on the way: its outcome, or `None`.
    pub(crate) fn wait_done(
        self: &Arc<Self>,
        timeout: Duration,
    ) -> Option<Result<(), DeviceError>> {
        let mut done = self.done.lock();
        if *done {
            drop(done);
            return Some(self.result());
        }
        let limit = self.shared.config.exec_timeout;
        let tick = (limit / 8).clamp(Duration::from_millis(1), Duration::from_millis(500));
        let deadline = crate::gate::deadline_after(timeout);
        while !*done {
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            self.done_cv.wait_for(&mut done, tick.min(deadline - now));
            if *done {
                break;
            }
            // A quiet job left by a drainer that stopped (see the pool) must not wait for
            // the next push.
            self.shared.pool.kick();
            if let Some(err) = self.overdue() {
                drop(done);
                self.abort(err);
                done = self.done.lock();
            }
        }
        drop(done);
        Some(self.result())
    }

    /// The error of a gate, fence or Wait that waited longer than `exec_timeout`.
    fn overdue(&self) -> Option<DeviceError> {
        let timeout = self.shared.config.exec_timeout;
        // The entry fence walks `entry_peers`, the exit fence the program's own peers;
        // both hold local slots, whose communicator rank the configuration names.
        let fence_timeout = |since: Option<Instant>, slots: &[usize], index: usize, needed: u64| {
            let waited = since?.elapsed();
            let slot = slots.get(index)?;
            (waited >= timeout).then(|| DeviceError::FenceTimeout {
                rank: self.rank(),
                epoch: self.epoch,
                peer: self.shared.fence_ranks[*slot],
                needed,
                reached: self.shared.fences[*slot].done(),
                waited,
            })
        };
        match *self.phase.lock() {
            Phase::Gated(since) => {
                let waited = since.elapsed();
                return (waited >= timeout).then(|| DeviceError::GateTimeout {
                    rank: self.rank(),
                    waited,
                });
            }
            Phase::Fenced {
                since,
                index,
                needed,
            } => return fence_timeout(since, &self.entry_peers, index, needed),
            Phase::Exiting { since, index } => {
                return fence_timeout(since, &self.program.exit_slots, index, self.epoch)
            }
            Phase::Running => {}
            Phase::Cancelled | Phase::Done => return None,
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

    fn post(
        &self,
        slot: usize,
        word: usize,
        notify: NotifyId,
        at: TaskLocation,
    ) -> Result<(), DeviceError> {
        let word = self.shared.banks[slot]
            .word(word)
            .expect("compile reserved every word a program posts");
        match word.post() {
            Posted::Set if slot == self.program.slot => Ok(()),
            Posted::Set => {
                fence(Ordering::SeqCst);
                let ended = self.shared.fences[slot].ended();
                let still_set = || word.state() == SET;
                self.late_post(ended, still_set, (notify.rank, notify), at)
            }
            Posted::Woke((waiter, s)) => {
                waiter.wake(s);
                Ok(())
            }
            Posted::AlreadySet => Err(self.lost_wakeup(notify, at)),
        }
    }

    fn lost_wakeup(&self, notify: NotifyId, at: TaskLocation) -> DeviceError {
        DeviceError::LostWakeup {
            at,
            notify,
            notify_desc: self.shared.layout.describe(notify),
        }
    }

    /// Post word `word` of `rank`, served by another device and reached through shared
    /// memory (a parked waiter is resumed by its own device's doorbell service).
    fn post_afar(
        &self,
        rank: Rank,
        word: usize,
        notify: NotifyId,
        at: TaskLocation,
    ) -> Result<(), DeviceError> {
        let shm = self.shared.shm.as_ref().expect("compile resolved the peer");
        let posted = shm
            .post(rank, word)
            .expect("compile resolved the peer's word");
        match posted {
            PostedAfar::Set => {
                fence(Ordering::SeqCst);
                let ended = shm.ended(rank).unwrap_or(0);
                let still_set = || shm.state(rank, word) == Some(SET);
                self.late_post(ended, still_set, (rank, notify), at)
            }
            PostedAfar::Ring => Ok(()),
            PostedAfar::AlreadySet => Err(self.lost_wakeup(notify, at)),
        }
    }

    /// A post consumed stream `s`'s wait: move it past its Wait and make it runnable.
    pub(crate) fn wake(self: &Arc<Self>, s: usize) {
        self.unpark_past_wait(s);
        self.resume(s);
    }

    /// As [`Launch::wake`], from the shm doorbell service or a polling submitter: a small
    /// program's stream runs on this thread at once (its tasks are latency-bound, and a
    /// worker's wakeup would cost more than they do); a big one's is queued for the
    /// workers.
    pub(crate) fn wake_from_afar(self: &Arc<Self>, s: usize) {
        self.unpark_past_wait(s);
        match self.program.small() {
            true => run_stream(self, s),
            false => self.resume(s),
        }
    }

    fn wait(
        self: &Arc<Self>,
        index: usize,
        notify: NotifyId,
        at: TaskLocation,
    ) -> Result<Step, DeviceError> {
        let word = self.shared.banks[self.program.slot]
            .word(index)
            .expect("compile reserved the rank's local region");
        if word.try_consume() {
            return Ok(Step::Next);
        }
        // Recorded before parking, so that an abort (which reads this list after raising
        // its flag) or the watchdog finds the stream.
        self.parked.lock()[at.stream] = Some((notify, Instant::now(), at.task));
        match word.wait(|| (self.clone(), at.stream)) {
            Waited::Consumed => {
                self.parked.lock()[at.stream] = None;
                Ok(Step::Next)
            }
            Waited::Parked => {
                // An abort that read the parked list before the entry above was written
                // raised its flag first: release this stream here (once: the CAS in
                // `unpark` decides between this, the abort and a post).
                fence(Ordering::SeqCst);
                if self.is_aborted() {
                    self.release_parked(at.stream, notify);
                }
                Ok(Step::Suspended)
            }
            Waited::Occupied => {
                self.parked.lock()[at.stream] = None;
                Err(DeviceError::InvalidTask {
                    at,
                    fault: TaskFault::TwoWaiters {
                        notify_desc: self.shared.layout.describe(notify),
                    },
                })
            }
        }
    }
}

/// Run stream `s` of `launch` until it finishes, parks, or hands off a big task.
pub(crate) fn run_stream(launch: &Arc<Launch>, s: usize) {
    let ops = &launch.program.streams[s];
    loop {
        let pc = launch.pc[s].load(Ordering::Relaxed);
        let Some(op) = ops.get(pc).filter(|_| !launch.is_aborted()) else {
            launch.finish_stream();
            return;
        };
        let at = TaskLocation {
            rank: launch.rank(),
            stream: s,
            task: pc,
        };
        let step = match op {
            Op::Post { slot, word, notify } => {
                launch.post(*slot, *word, *notify, at).map(|()| Step::Next)
            }
            Op::PostAfar { rank, word, notify } => launch
                .post_afar(*rank, *word, *notify, at)
                .map(|()| Step::Next),
            Op::PostTcp { rank, word } => launch
                .shared
                .tcp
                .as_ref()
                .expect("compile made a tcp post only over tcp")
                .post(launch.program.slot, *rank, *word, launch.epoch)
                .map_err(|e| launch.shared.tcp_send_failed(e))
                .map(|()| Step::Next),
            Op::Fused => Ok(Step::Next),
            Op::Wait { word, notify } => launch.wait(*word, *notify, at),
            Op::Data(data) => exec::run_data_task(launch, data, at),
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
