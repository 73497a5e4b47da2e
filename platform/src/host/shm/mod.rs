//! The host device over shared memory: local ranks in segments, peers mapped.
//!
//! With [`DeviceConfig::shm`] set, every local rank's **block** lives in a segment named
//! `/oxccl-<tag>-r<rank>-rank` ([`segment_name`]): a control area (its `done_epoch`, the
//! doorbell, a failure flag, its pid and the shape of the block), then its link-region
//! signal states, then CclIn and CclOut, page aligned. Every rank the device does not
//! serve is a **peer**: its block is mapped here, so a task reads and writes the peer's
//! CCL buffers by address, as for a local rank, and a Post sets the peer's state word
//! with [`post_from_afar`] and rings the doorbell of the device that serves it. Scratch
//! allocations get a segment per rank (`...-s<id>`), mapped by every peer when allocated.
//!
//! Each device runs a **doorbell service** thread, asleep on its doorbell (a futex):
//! rung, it resumes the streams that peers woke ([`SignalBank::take_woken`]), moves the
//! local proxies of the peers' fences to the peers' `done_epoch`, and stops the device
//! when a peer's failure flag is up or its process is gone (checked every [`service::TICK`]), so
//! a peer that dies releases this rank within a tick, not after `exec_timeout`. A device
//! that stops raises its own flag and rings every peer.
//!
//! Names go as soon as every peer has mapped a segment (see [`Segment`]), so a process
//! killed afterwards leaves nothing in `/dev/shm`.
//!
//! The programs are the analyzer's: the order of every byte is proved by the Posts and
//! Waits, and the fence keeps operations apart across processes exactly as in one (the
//! `done_epoch` a peer reads is the one the owner publishes after its streams ended).
//!
//! Files: `block` (a rank's block: layout, control area, regions), `service` (the
//! doorbell service and the polling of a waiting call), `user` (user buffers that peers
//! map, for zero-copy across processes), this one (the device's blocks and its peers:
//! posts, published epochs, failures, scratch).
//!
//! [`DeviceConfig::shm`]: crate::device::DeviceConfig::shm
//! [`SignalBank::take_woken`]: crate::signal::SignalBank::take_woken

mod block;
mod service;
mod user;

pub(crate) use block::Block;
pub(crate) use service::{close, refresh_fences, start_service, Poller};

use super::memory::Region;
use crate::device::{DeviceConfig, ShmJob};
use crate::error::{AbortCause, ConfigFault, DeviceError, PeerLoss};
use crate::ir::Rank;
use crate::signal::{post_from_afar, PostedAfar};
use crate::transport::shm::{futex, segment_name, Segment, ShmError};
use block::{Control, Layout, CLOSED, FAILED, LIVE};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A rank served elsewhere, reached through its mapped block.
pub(crate) struct Peer {
    pub block: Block,
    /// The block whose doorbell wakes the device serving this peer.
    bell: Arc<Segment>,
    pid: u32,
    /// This peer's scratch segments, by scratch id.
    scratch: Mutex<Vec<Option<Arc<Segment>>>>,
}

impl Peer {
    /// The control area of the block whose doorbell wakes this peer's device.
    fn bell_control(&self) -> &Control {
        // SAFETY: the control area starts the payload of a mapped block.
        unsafe { &*self.bell.payload().0.cast::<Control>() }
    }

    /// Ring the peer's device, unless `quiet` and it polls or has no launch in flight (its
    /// poller, or its next launch, then finds the change itself: see [`Poller`] and
    /// [`ShmLinks::launch_started`] for why none is missed).
    ///
    /// A futex wake of a sleeping doorbell service costs a context switch, and the
    /// service then competes for a core with the processes doing the work: on an
    /// oversubscribed host, waking peers that did not need it was most of a small
    /// call's time.
    fn ring(&self, quiet: bool) {
        let c = self.bell_control();
        // Orders this thread's change (a post's CAS, a published epoch) before the looks
        // at the flag and the count; the device fences between changing either and its
        // next look at the peers.
        std::sync::atomic::fence(Ordering::SeqCst);
        let idle = || c.in_flight.load(Ordering::SeqCst) == 0;
        if quiet && (c.polling.load(Ordering::SeqCst) != 0 || idle()) {
            c.doorbell.fetch_add(1, Ordering::Release);
            return;
        }
        futex::ring(&c.doorbell);
    }
}

/// This device's blocks and its peers'.
pub(crate) struct ShmLinks {
    tag: String,
    /// Per local slot.
    pub own: Vec<Block>,
    /// Per communicator rank: `Some` for the ranks served elsewhere.
    pub peers: Vec<Option<Peer>>,
    /// One peer rank per peer device (the rank whose doorbell it sleeps on): whom to ring
    /// to reach every device once.
    devices: Vec<Rank>,
    /// The local ranks' weight in a peer's segment count: how many ranks this device
    /// maps it for.
    weight: u32,
    /// How long to wait for a peer's segment to appear.
    wait: Duration,
    /// Peers map the user buffers of calls ([`ShmJob::user_buffers`]).
    pub user_buffers: bool,
    /// Shared user allocations (see `user.rs`).
    user: user::UserSegments,
}

fn shm_err(e: ShmError) -> DeviceError {
    DeviceError::Shm(e)
}

impl ShmLinks {
    /// Create the local ranks' blocks, map every peer's, and check their shapes.
    pub(crate) fn open(
        config: &DeviceConfig,
        job: &ShmJob,
        link_words: usize,
    ) -> Result<ShmLinks, DeviceError> {
        let tag = job.tag.as_str();
        let layout = Layout::new(link_words, config.ccl_bytes).ok_or(ConfigFault::TooLarge {
            what: "shared-memory block",
        })?;
        let local = config.local_ranks.len() as u32;
        // The ranks reached over TCP map nothing of this device's.
        let by_tcp = |r: Rank| config.tcp.as_ref().is_some_and(|t| t.reaches(r));
        let over_tcp = (0..config.ranks).filter(|&r| by_tcp(r)).count() as u32;
        let remote = (config.ranks as u32)
            .saturating_sub(local)
            .saturating_sub(over_tcp);
        let bell_rank = config.local_ranks[0];
        let mut own = Vec::new();
        for &rank in &config.local_ranks {
            let name = segment_name(tag, rank, "rank");
            // The control area is written before the segment is published: a peer that
            // maps it finds the shape it checks.
            let init = |payload: *mut u8| {
                // SAFETY: the payload is page aligned, at least CONTROL bytes, and not
                // yet visible to any peer.
                let c = unsafe { &*payload.cast::<Control>() };
                c.pid.store(std::process::id(), Ordering::Relaxed);
                c.bell_rank.store(bell_rank as u32, Ordering::Relaxed);
                c.link_words.store(link_words as u64, Ordering::Relaxed);
                c.ccl_bytes
                    .store(config.ccl_bytes as u64, Ordering::Relaxed);
            };
            let segment =
                Segment::create_with(&name, layout.total, remote, init).map_err(shm_err)?;
            own.push(Block {
                segment: Arc::new(segment),
                layout,
            });
        }
        let wait = config.exec_timeout;
        let mut blocks: Vec<Option<Block>> = (0..config.ranks).map(|_| None).collect();
        for rank in (0..config.ranks).filter(|&r| !config.local_ranks.contains(&r) && !by_tcp(r)) {
            let name = segment_name(tag, rank, "rank");
            let alive = owner_alive(config, rank);
            let segment = Segment::attach_while(&name, wait, local, alive).map_err(shm_err)?;
            let block = Block {
                segment: Arc::new(segment),
                layout,
            };
            block.check(rank)?;
            blocks[rank] = Some(block);
        }
        let peers = Self::peers(blocks)?;
        let mut devices: Vec<Rank> = Vec::new();
        for (rank, peer) in peers.iter().enumerate() {
            let bell = peer.as_ref().map(|p| Arc::as_ptr(&p.bell));
            let seen = |&r: &Rank| peers[r].as_ref().map(|p| Arc::as_ptr(&p.bell)) == bell;
            if bell.is_some() && !devices.iter().any(seen) {
                devices.push(rank);
            }
        }
        Ok(ShmLinks {
            tag: tag.to_string(),
            own,
            peers,
            devices,
            weight: local,
            wait,
            user_buffers: job.user_buffers,
            user: user::UserSegments::new(config.local_ranks.len()),
        })
    }

    /// Each peer with the doorbell of the device that serves it.
    fn peers(blocks: Vec<Option<Block>>) -> Result<Vec<Option<Peer>>, DeviceError> {
        let bells: Vec<Option<Arc<Segment>>> = blocks
            .iter()
            .map(|b| b.as_ref().map(|b| b.segment.clone()))
            .collect();
        blocks
            .into_iter()
            .enumerate()
            .map(|(rank, block)| {
                let Some(block) = block else { return Ok(None) };
                let c = block.control();
                let bell_rank = c.bell_rank.load(Ordering::Acquire) as usize;
                let bell = bells
                    .get(bell_rank)
                    .cloned()
                    .flatten()
                    .ok_or(ConfigFault::PeerBell { rank, bell_rank })?;
                let pid = c.pid.load(Ordering::Acquire);
                Ok(Some(Peer {
                    block,
                    bell,
                    pid,
                    scratch: Mutex::new(Vec::new()),
                }))
            })
            .collect()
    }

    /// The peer `rank`, if it is one.
    pub(crate) fn peer(&self, rank: Rank) -> Option<&Peer> {
        self.peers.get(rank).and_then(Option::as_ref)
    }

    /// The ranks served elsewhere, ascending.
    pub(crate) fn peer_ranks(&self) -> impl Iterator<Item = Rank> + '_ {
        (0..self.peers.len()).filter(|&r| self.peers[r].is_some())
    }

    /// The doorbell this device sleeps on.
    fn own_bell(&self) -> &AtomicU32 {
        &self.own[0].control().doorbell
    }

    /// Publish that local slot `slot` finished `epoch`, and ring every peer device.
    pub(crate) fn publish_done(&self, slot: usize, epoch: u64) {
        self.own[slot]
            .control()
            .done
            .fetch_max(epoch, Ordering::SeqCst);
        self.ring_all_but_polling(true);
    }

    /// Local slot `slot` ended `epoch` (its streams): where its peers' posters look.
    pub(crate) fn publish_ended(&self, slot: usize, epoch: u64) {
        self.own[slot]
            .control()
            .ended
            .fetch_max(epoch, Ordering::SeqCst);
    }

    /// The last epoch peer `rank` ended, as it published it; `None` when `rank` is no
    /// peer.
    pub(crate) fn ended(&self, rank: Rank) -> Option<u64> {
        let peer = self.peer(rank)?;
        Some(peer.block.control().ended.load(Ordering::SeqCst))
    }

    /// The state of word `word` of peer `rank` (`None`: no peer, or no such word).
    pub(crate) fn state(&self, rank: Rank, word: usize) -> Option<u32> {
        let state = self.peer(rank)?.block.state(word)?;
        Some(state.load(Ordering::SeqCst))
    }

    /// Ring every peer device's doorbell (once per device), skipping the devices that
    /// poll (`quiet`; never for a failure, which must wake everyone).
    fn ring_all_but_polling(&self, quiet: bool) {
        for peer in self.devices.iter().filter_map(|&r| self.peer(r)) {
            peer.ring(quiet);
        }
    }

    fn ring_all(&self) {
        self.ring_all_but_polling(false);
    }

    /// Post word `word` of peer `rank`: what [`post_from_afar`] did, after ringing the
    /// peer's device when a stream was parked on it. `None` when `rank` is no peer.
    pub(crate) fn post(&self, rank: Rank, word: usize) -> Option<PostedAfar> {
        let peer = self.peer(rank)?;
        let outcome = post_from_afar(peer.block.state(word)?);
        if outcome == PostedAfar::Ring {
            peer.ring(true);
        }
        Some(outcome)
    }

    /// A launch of this device starts: count it, so that peers ring for what it may wait
    /// on. Then the caller looks at the peers' epochs ([`refresh_fences`]): a peer that
    /// published before seeing the count did not ring, and the count is SeqCst before
    /// that look, as the peer's epoch is before its look at the count, so one of the
    /// two sees the other.
    ///
    /// [`refresh_fences`]: service::refresh_fences
    pub(crate) fn launch_started(&self) {
        self.own[0]
            .control()
            .in_flight
            .fetch_add(1, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    /// A launch of this device completed.
    pub(crate) fn launch_ended(&self) {
        self.own[0]
            .control()
            .in_flight
            .fetch_sub(1, Ordering::SeqCst);
    }

    /// The last epoch peer `rank` published.
    pub(crate) fn peer_done(&self, rank: Rank) -> u64 {
        self.peer(rank)
            .map_or(0, |p| p.block.control().done.load(Ordering::Acquire))
    }

    /// Raise this device's failure flag, naming what stopped it (`cause`: a peer's loss
    /// is relayed as is, so every rank names the rank that was lost first), and ring
    /// every peer.
    pub(crate) fn announce_failure(&self, cause: &AbortCause) {
        let (rank, pid, loss) = match cause {
            AbortCause::PeerProcess {
                rank, pid, loss, ..
            } => (*rank, *pid, *loss),
            AbortCause::PeerFailed { rank, .. }
            | AbortCause::UserAbort { rank }
            | AbortCause::CallFailed { rank, .. } => (*rank, std::process::id(), PeerLoss::Failed),
        };
        for block in &self.own {
            let c = block.control();
            c.origin_rank.store(rank as u32, Ordering::Relaxed);
            c.origin_pid.store(pid, Ordering::Relaxed);
            c.origin_loss
                .store(u32::from(loss == PeerLoss::Died), Ordering::Relaxed);
        }
        self.set_status(FAILED);
    }

    /// The device goes away in order (its communicator was dropped): its process may
    /// exit without its peers taking that for a failure.
    pub(crate) fn close(&self) {
        self.set_status(CLOSED);
    }

    fn set_status(&self, status: u32) {
        for block in &self.own {
            let _ = block.control().status.compare_exchange(
                LIVE,
                status,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
        self.ring_all();
    }

    /// A peer that failed or whose process is gone, if any: the rank lost first, the
    /// process the report names, and how it was lost.
    ///
    /// A peer that stopped for another rank's loss raises its failure flag, naming that
    /// rank, before its process exits. Its status is read again once its process is seen
    /// gone: it may have raised the flag and exited between the first read and the pid
    /// check, and then the rank it names is the one lost first, not the peer.
    fn lost_peer(&self, check_pids: bool) -> Option<(Rank, u32, PeerLoss)> {
        let me = std::process::id();
        self.peer_ranks().find_map(|rank| {
            let peer = self.peer(rank)?;
            let c = peer.block.control();
            match c.status.load(Ordering::Acquire) {
                FAILED => return Some(relayed_loss(c)),
                CLOSED => return None,
                _ => {}
            }
            if !check_pids || peer.pid == me || process_alive(peer.pid) {
                return None;
            }
            match c.status.load(Ordering::Acquire) {
                FAILED => Some(relayed_loss(c)),
                _ => Some((rank, peer.pid, PeerLoss::Died)),
            }
        })
    }

    /// Scratch `id` of local rank `rank`: a segment of `bytes` that every peer maps, and
    /// what keeps it mapped.
    pub(crate) fn create_scratch(
        &self,
        rank: Rank,
        id: usize,
        bytes: usize,
    ) -> Result<(Region, Arc<dyn Send + Sync>), DeviceError> {
        let remote = self.peer_ranks().count() as u32;
        let name = segment_name(&self.tag, rank, &format!("s{id}"));
        let segment = Arc::new(Segment::create(&name, bytes, remote).map_err(shm_err)?);
        let region = Region {
            ptr: segment.payload().0,
            len: bytes,
            writable: true,
        };
        Ok((region, segment))
    }

    /// Map scratch `id` of every peer (allocated on every rank at the same call).
    pub(crate) fn attach_scratch(&self, id: usize) -> Result<(), DeviceError> {
        for rank in self.peer_ranks().collect::<Vec<_>>() {
            let name = segment_name(&self.tag, rank, &format!("s{id}"));
            let alive = || self.peer_alive(rank);
            let segment =
                Segment::attach_while(&name, self.wait, self.weight, alive).map_err(shm_err)?;
            let peer = self.peer(rank).expect("a peer rank");
            let mut scratch = peer.scratch.lock();
            if scratch.len() <= id {
                scratch.resize(id + 1, None);
            }
            scratch[id] = Some(Arc::new(segment));
        }
        Ok(())
    }

    /// Whether the process serving peer `rank` still runs (as far as its pid tells).
    fn peer_alive(&self, rank: Rank) -> bool {
        process_alive(self.peer(rank).map_or(0, |p| p.pid))
    }

    /// Scratch `id` of peer `rank`, mapped here.
    pub(crate) fn peer_scratch(&self, rank: Rank, id: usize) -> Option<Region> {
        let peer = self.peer(rank)?;
        let scratch = peer.scratch.lock();
        let segment = scratch.get(id)?.as_ref()?;
        let (ptr, len) = segment.payload();
        Some(Region {
            ptr,
            len,
            writable: true,
        })
    }
}

/// Whether the process of `rank` still runs, as far as `config` knows its pid.
fn owner_alive(config: &DeviceConfig, rank: Rank) -> impl Fn() -> bool + '_ {
    move || process_alive(config.pid_of(rank))
}

/// The loss a failed peer announced: the rank it names, that rank's process, and how it
/// was lost.
fn relayed_loss(c: &Control) -> (Rank, u32, PeerLoss) {
    let loss = match c.origin_loss.load(Ordering::Relaxed) {
        1 => PeerLoss::Died,
        _ => PeerLoss::Failed,
    };
    let origin = c.origin_rank.load(Ordering::Relaxed) as usize;
    (origin, c.origin_pid.load(Ordering::Relaxed), loss)
}

/// True while process `pid` exists and has not exited (a process of another user counts
/// as existing; 0 is taken for unknown, and alive). A process that exited but that its
/// parent has not reaped yet (a zombie) still answers signals, so its state is read from
/// `/proc`: a launcher that reaps its children late (or only in order, as a test harness
/// waiting on rank 0 first) would otherwise keep a peer waiting for a rank that is gone
/// until its timeout.
fn process_alive(pid: u32) -> bool {
    if pid == 0 {
        return true;
    }
    let Some(id) = rustix::process::Pid::from_raw(pid as i32) else {
        return false;
    };
    if matches!(
        rustix::process::test_kill_process(id),
        Err(rustix::io::Errno::SRCH)
    ) {
        return false;
    }
    !exited(pid)
}

/// Whether `/proc` reports process `pid` as a zombie or dead (`Z` or `X` in its stat
/// line). Where `/proc` cannot be read, the process is taken as running.
fn exited(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may hold any byte.
    let state = stat
        .rfind(')')
        .and_then(|at| stat[at + 1..].trim_start().chars().next());
    matches!(state, Some('Z' | 'X'))
}

#[cfg(test)]
mod tests {
    use super::process_alive;
    use std::time::{Duration, Instant};

    #[test]
    fn a_process_that_exited_is_gone_before_its_parent_reaps_it() {
        assert!(process_alive(std::process::id()));
        let Ok(mut child) = std::process::Command::new("true").spawn() else {
            eprintln!("skipped: cannot spawn `true` here");
            return;
        };
        // Not reaped until the end: while it is a zombie it still answers kill(pid, 0).
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut gone = false;
        while !gone && Instant::now() < deadline {
            gone = !process_alive(child.id());
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(gone, "an exited child still counts as alive");
        child.wait().unwrap();
    }
}
