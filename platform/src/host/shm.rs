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
//! when a peer's failure flag is up or its process is gone (checked every [`TICK`]), so
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
//! [`DeviceConfig::shm`]: crate::device::DeviceConfig::shm
//! [`SignalBank::take_woken`]: crate::signal::SignalBank::take_woken

use super::launch::Shared;
use super::memory::Region;
use crate::device::DeviceConfig;
use crate::error::{AbortCause, ConfigFault, DeviceError, PeerLoss};
use crate::ir::Rank;
use crate::signal::{post_from_afar, ExternalStates, PostedAfar};
use crate::transport::shm::{futex, segment_name, Segment, ShmError};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How often the doorbell service looks at its peers without being rung.
pub(crate) const TICK: Duration = Duration::from_millis(50);

/// Bytes of a block's control area.
const CONTROL: usize = 64;
/// Alignment of the CCL buffers in a block.
const PAGE: usize = 4096;

/// The device serving the block's rank runs.
const LIVE: u32 = 0;
/// The device stopped on a failure: its peers stop too.
const FAILED: u32 = 1;
/// The device was dropped in order: its process may exit without being a failure.
const CLOSED: u32 = 2;

/// The control area at the start of a block.
#[repr(C)]
struct Control {
    done: AtomicU64,
    doorbell: AtomicU32,
    /// [`LIVE`], [`FAILED`] or [`CLOSED`].
    status: AtomicU32,
    pid: AtomicU32,
    /// The rank whose doorbell the device serving this rank sleeps on.
    bell_rank: AtomicU32,
    link_words: AtomicU64,
    ccl_bytes: AtomicU64,
    /// With [`FAILED`]: the rank whose loss stopped the device (itself, or a peer whose
    /// loss it relays), that rank's pid, and how it was lost (0: failed, 1: died).
    origin_rank: AtomicU32,
    origin_pid: AtomicU32,
    origin_loss: AtomicU32,
    /// Nonzero while a thread of the device polls its words and peers ([`poll_while`]):
    /// a peer then skips the doorbell's futex wake, which would only wake the service
    /// thread to compete with the poller for a core.
    polling: AtomicU32,
}

/// Where the parts of a block lie.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Layout {
    link_words: usize,
    ccl_bytes: usize,
    ccl_in: usize,
    ccl_out: usize,
    total: usize,
}

impl Layout {
    fn new(link_words: usize, ccl_bytes: usize) -> Option<Layout> {
        let states = link_words.checked_mul(4)?;
        let ccl_in = CONTROL
            .checked_add(states)?
            .checked_next_multiple_of(PAGE)?;
        let ccl_out = ccl_in
            .checked_add(ccl_bytes)?
            .checked_next_multiple_of(PAGE)?;
        let total = ccl_out.checked_add(ccl_bytes)?;
        Some(Layout {
            link_words,
            ccl_bytes,
            ccl_in,
            ccl_out,
            total,
        })
    }
}

/// One rank's block, mapped (this device's own, or a peer's).
pub(crate) struct Block {
    segment: Arc<Segment>,
    layout: Layout,
}

impl Block {
    fn base(&self) -> *mut u8 {
        self.segment.payload().0
    }

    fn control(&self) -> &Control {
        // SAFETY: the payload is page aligned and at least CONTROL bytes (the layout was
        // checked against it); the control area is only accessed through atomics.
        unsafe { &*self.base().cast::<Control>() }
    }

    /// The link region's state words.
    fn states(&self) -> *const AtomicU32 {
        // SAFETY: CONTROL is within the payload.
        unsafe { self.base().add(CONTROL).cast::<AtomicU32>() }
    }

    fn state(&self, word: usize) -> Option<&AtomicU32> {
        // SAFETY: `word` is below the block's link words, all inside the payload, 4-byte
        // aligned (CONTROL is), only accessed through atomics.
        (word < self.layout.link_words).then(|| unsafe { &*self.states().add(word) })
    }

    fn region(&self, offset: usize) -> Region {
        Region {
            // SAFETY: the offset and the buffer after it lie within the payload.
            ptr: unsafe { self.base().add(offset) },
            len: self.layout.ccl_bytes,
            writable: true,
        }
    }

    /// What keeps the block mapped.
    pub(crate) fn keep(&self) -> Arc<dyn Send + Sync> {
        self.segment.clone()
    }

    pub(crate) fn ccl_in(&self) -> Region {
        self.region(self.layout.ccl_in)
    }

    pub(crate) fn ccl_out(&self) -> Region {
        self.region(self.layout.ccl_out)
    }

    /// The link-region states, for a signal bank to use in place.
    pub(crate) fn external_states(&self) -> ExternalStates {
        ExternalStates {
            first: self.states(),
            len: self.layout.link_words,
            keep: self.segment.clone(),
        }
    }

    /// A mapped block must have the shape this device expects of every rank.
    fn check(&self, rank: Rank) -> Result<(), DeviceError> {
        let c = self.control();
        let theirs = (
            c.link_words.load(Ordering::Acquire) as usize,
            c.ccl_bytes.load(Ordering::Acquire) as usize,
        );
        let ours = (self.layout.link_words, self.layout.ccl_bytes);
        let fits = self.segment.payload().1 >= self.layout.total;
        match theirs == ours && fits {
            true => Ok(()),
            false => Err(ConfigFault::PeerShape { rank, theirs, ours }.into()),
        }
    }
}

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

    /// Ring the peer's device, unless `quiet` and it polls (its poller then finds the
    /// change itself: see [`poll_while`] for why none is missed).
    fn ring(&self, quiet: bool) {
        let c = self.bell_control();
        // Orders this thread's change (a post's CAS, a published epoch) before the look
        // at the flag; the poller fences between clearing the flag and its last look.
        std::sync::atomic::fence(Ordering::SeqCst);
        if quiet && c.polling.load(Ordering::SeqCst) != 0 {
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
    /// The local ranks' weight in a peer's segment count: how many ranks this device
    /// maps it for.
    weight: u32,
    /// How long to wait for a peer's segment to appear.
    wait: Duration,
    /// Scratch segments of the local ranks, kept mapped while the device lives.
    own_scratch: Mutex<Vec<Arc<Segment>>>,
}

fn shm_err(e: ShmError) -> DeviceError {
    DeviceError::Shm(e)
}

impl ShmLinks {
    /// Create the local ranks' blocks, map every peer's, and check their shapes.
    pub(crate) fn open(
        config: &DeviceConfig,
        tag: &str,
        link_words: usize,
    ) -> Result<ShmLinks, DeviceError> {
        let layout = Layout::new(link_words, config.ccl_bytes).ok_or(ConfigFault::TooLarge {
            what: "shared-memory block",
        })?;
        let local = config.local_ranks.len() as u32;
        let remote = (config.ranks as u32).saturating_sub(local);
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
        for rank in (0..config.ranks).filter(|r| !config.local_ranks.contains(r)) {
            let name = segment_name(tag, rank, "rank");
            let segment = Segment::attach(&name, wait, local).map_err(shm_err)?;
            let block = Block {
                segment: Arc::new(segment),
                layout,
            };
            block.check(rank)?;
            blocks[rank] = Some(block);
        }
        let peers = Self::peers(blocks)?;
        Ok(ShmLinks {
            tag: tag.to_string(),
            own,
            peers,
            weight: local,
            wait,
            own_scratch: Mutex::new(Vec::new()),
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
                let bell =
                    bells
                        .get(bell_rank)
                        .cloned()
                        .flatten()
                        .ok_or(ConfigFault::PeerShape {
                            rank,
                            theirs: (bell_rank, 0),
                            ours: (0, 0),
                        })?;
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

    /// Ring every peer device's doorbell (once per device), skipping the devices that
    /// poll (`quiet`; never for a failure, which must wake everyone).
    fn ring_all_but_polling(&self, quiet: bool) {
        let mut rung: Vec<*const Segment> = Vec::new();
        for peer in self.peers.iter().flatten() {
            let key = Arc::as_ptr(&peer.bell);
            if !rung.contains(&key) {
                rung.push(key);
                peer.ring(quiet);
            }
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
            AbortCause::PeerProcess { rank, pid, loss } => (*rank, *pid, *loss),
            AbortCause::PeerFailed { rank, .. } | AbortCause::UserAbort { rank } => {
                (*rank, std::process::id(), PeerLoss::Failed)
            }
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

    /// A peer that failed or whose process is gone, if any.
    fn lost_peer(&self, check_pids: bool) -> Option<AbortCause> {
        let me = std::process::id();
        self.peer_ranks().find_map(|rank| {
            let peer = self.peer(rank)?;
            let c = peer.block.control();
            match c.status.load(Ordering::Acquire) {
                FAILED => {
                    return Some(AbortCause::PeerProcess {
                        rank: c.origin_rank.load(Ordering::Relaxed) as usize,
                        pid: c.origin_pid.load(Ordering::Relaxed),
                        loss: match c.origin_loss.load(Ordering::Relaxed) {
                            1 => PeerLoss::Died,
                            _ => PeerLoss::Failed,
                        },
                    })
                }
                CLOSED => return None,
                _ => {}
            }
            let gone = check_pids && peer.pid != me && !process_alive(peer.pid);
            gone.then_some(AbortCause::PeerProcess {
                rank,
                pid: peer.pid,
                loss: PeerLoss::Died,
            })
        })
    }

    /// Scratch `id` of local rank `rank`: a segment of `bytes` that every peer maps.
    pub(crate) fn create_scratch(
        &self,
        rank: Rank,
        id: usize,
        bytes: usize,
    ) -> Result<Region, DeviceError> {
        let remote = self.peer_ranks().count() as u32;
        let name = segment_name(&self.tag, rank, &format!("s{id}"));
        let segment = Arc::new(Segment::create(&name, bytes, remote).map_err(shm_err)?);
        let region = Region {
            ptr: segment.payload().0,
            len: bytes,
            writable: true,
        };
        self.own_scratch.lock().push(segment);
        Ok(region)
    }

    /// Map scratch `id` of every peer (allocated on every rank at the same call).
    pub(crate) fn attach_scratch(&self, id: usize) -> Result<(), DeviceError> {
        for rank in self.peer_ranks().collect::<Vec<_>>() {
            let name = segment_name(&self.tag, rank, &format!("s{id}"));
            let segment = Segment::attach(&name, self.wait, self.weight).map_err(shm_err)?;
            let peer = self.peer(rank).expect("a peer rank");
            let mut scratch = peer.scratch.lock();
            if scratch.len() <= id {
                scratch.resize(id + 1, None);
            }
            scratch[id] = Some(Arc::new(segment));
        }
        Ok(())
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

/// True while process `pid` exists (a process of another user counts as existing).
fn process_alive(pid: u32) -> bool {
    let Some(pid) = rustix::process::Pid::from_raw(pid as i32) else {
        return false;
    };
    !matches!(
        rustix::process::test_kill_process(pid),
        Err(rustix::io::Errno::SRCH)
    )
}

/// Looks without finding work before a waiting submitter goes to sleep.
const POLLS: usize = 256;

/// The submitting thread, while `busy()`: take the streams peers woke and run them here,
/// and the pool's queued jobs, yielding between empty looks ([`POLLS`] of them at most,
/// then it sleeps as usual). A peer's post then reaches a waiting rank when its process
/// is next scheduled, without a doorbell thread's wakeup in between: what a latency-bound
/// call over processes costs most.
pub(crate) fn poll_while(shared: &Arc<Shared>, mut busy: impl FnMut() -> bool) {
    let Some(links) = shared.shm.as_ref() else {
        return;
    };
    let polling = &links.own[0].control().polling;
    polling.fetch_add(1, Ordering::SeqCst);
    let mut idle = 0;
    while busy() && idle < POLLS {
        if poll_once(shared, links) || shared.pool.run_one() {
            idle = 0;
        } else {
            idle += 1;
            std::thread::yield_now();
        }
    }
    // A peer that saw the flag did not ring: look once more after clearing it (the
    // flag and the peers' changes are SeqCst, so either the peer saw it cleared and
    // rang, or this look sees the change).
    polling.fetch_sub(1, Ordering::SeqCst);
    std::sync::atomic::fence(Ordering::SeqCst);
    poll_once(shared, links);
}

/// Move the peers' fence proxies and run the streams peers woke; true when a stream ran.
fn poll_once(shared: &Arc<Shared>, links: &ShmLinks) -> bool {
    for rank in links.peer_ranks() {
        if let Some(slot) = shared.fence_slot(rank) {
            shared.fences[slot].advance(links.peer_done(rank));
        }
    }
    let mut ran = false;
    for bank in &shared.banks {
        for (launch, stream) in bank.take_woken() {
            launch.wake_from_afar(stream);
            ran = true;
        }
    }
    ran
}

/// Start the doorbell service of the device behind `shared`.
pub(crate) fn start_service(shared: &Arc<Shared>, links: Arc<ShmLinks>) -> std::io::Result<()> {
    let weak = Arc::downgrade(shared);
    std::thread::Builder::new()
        .name("oxccl-shm-bell".into())
        .spawn(move || serve(&weak, &links))
        .map(|_| ())
}

/// The device goes away: tell the peers, and wake the doorbell service so that it ends.
pub(crate) fn close(links: &ShmLinks) {
    links.close();
    futex::ring(links.own_bell());
}

fn serve(shared: &Weak<Shared>, links: &ShmLinks) {
    let mut since_pids = std::time::Instant::now();
    let mut stopped = false;
    loop {
        let seen = links.own_bell().load(Ordering::Acquire);
        let Some(shared) = shared.upgrade() else {
            return;
        };
        poll_once(&shared, links);
        let check_pids = since_pids.elapsed() >= TICK;
        if check_pids {
            since_pids = std::time::Instant::now();
        }
        if let Some(cause) = links.lost_peer(check_pids).filter(|_| !stopped) {
            shared.stop(cause, None);
            stopped = true;
        }
        drop(shared);
        futex::wait(links.own_bell(), seen, TICK);
    }
}
