//! One rank's block in its segment: where its parts lie, its control area, its regions.

use super::super::memory::Region;
use crate::error::{ConfigFault, DeviceError};
use crate::ir::Rank;
use crate::signal::ExternalStates;
use crate::transport::shm::Segment;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// Bytes of a block's control area.
pub(super) const CONTROL: usize = 512;
const _: () = assert!(std::mem::size_of::<Control>() <= CONTROL);
/// Alignment of the CCL buffers in a block.
pub(super) const PAGE: usize = 4096;

/// The device serving the block's rank runs.
pub(super) const LIVE: u32 = 0;
/// The device stopped on a failure: its peers stop too.
pub(super) const FAILED: u32 = 1;
/// The device was dropped in order: its process may exit without being a failure.
pub(super) const CLOSED: u32 = 2;

/// The control area at the start of a block.
#[repr(C)]
pub(super) struct Control {
    pub(super) done: AtomicU64,
    pub(super) doorbell: AtomicU32,
    /// [`LIVE`], [`FAILED`] or [`CLOSED`].
    pub(super) status: AtomicU32,
    pub(super) pid: AtomicU32,
    /// The rank whose doorbell the device serving this rank sleeps on.
    pub(super) bell_rank: AtomicU32,
    pub(super) link_words: AtomicU64,
    pub(super) ccl_bytes: AtomicU64,
    /// With [`FAILED`]: the rank whose loss stopped the device (itself, or a peer whose
    /// loss it relays), that rank's pid, and how it was lost (0: failed, 1: died).
    pub(super) origin_rank: AtomicU32,
    pub(super) origin_pid: AtomicU32,
    pub(super) origin_loss: AtomicU32,
    /// Nonzero while a thread of the device polls its words and peers ([`super::Poller`]):
    /// a peer then skips the doorbell's futex wake, which would only wake the service
    /// thread to compete with the poller for a core.
    pub(super) polling: AtomicU32,
    /// Launches of the device not yet complete. A device with none has no stream parked
    /// and no launch fenced: a peer's published epoch needs no wake (the device's next
    /// launch reads the peers' epochs after counting itself; see
    /// [`super::ShmLinks::launch_started`]).
    pub(super) in_flight: AtomicU32,
    /// The last epoch whose streams all ended on the rank: a peer that posts one of its
    /// words for that epoch or an earlier one posts too late (see the host's notifies
    /// left set).
    pub(super) ended: AtomicU64,
    /// Where the user buffers of the rank's last calls lie, for peers that map them (see
    /// `user.rs`): the record of epoch `e` is `bindings[e % BINDINGS]`.
    pub(super) bindings: [BindingRecord; BINDINGS],
}

/// Binding records per control area: the calls of a rank whose records can be read at
/// once. A record is rewritten only when a call `BINDINGS` epochs later starts, after its
/// entry fence (every fence peer finished the epoch before), so two would do.
pub(super) const BINDINGS: usize = 4;

/// One call's user buffers, as a peer finds them: per buffer (Input, then Output) the
/// allocation's turn plus one (0: none), the offset in it and the length. `epoch` is 0
/// while the record is rewritten (a seqlock: readers check it before and after).
#[repr(C)]
#[derive(Default)]
pub(super) struct BindingRecord {
    pub(super) epoch: AtomicU64,
    pub(super) buffers: [[AtomicU64; 3]; 2],
}

/// Where the parts of a block lie.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct Layout {
    pub(super) link_words: usize,
    pub(super) ccl_bytes: usize,
    pub(super) ccl_in: usize,
    pub(super) ccl_out: usize,
    pub(super) total: usize,
}

impl Layout {
    pub(super) fn new(link_words: usize, ccl_bytes: usize) -> Option<Layout> {
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
    pub(super) segment: Arc<Segment>,
    pub(super) layout: Layout,
}

impl Block {
    fn base(&self) -> *mut u8 {
        self.segment.payload().0
    }

    pub(super) fn control(&self) -> &Control {
        // SAFETY: the payload is page aligned and at least CONTROL bytes (the layout was
        // checked against it); the control area is only accessed through atomics.
        unsafe { &*self.base().cast::<Control>() }
    }

    /// The link region's state words.
    fn states(&self) -> *const AtomicU32 {
        // SAFETY: CONTROL is within the payload.
        unsafe { self.base().add(CONTROL).cast::<AtomicU32>() }
    }

    pub(super) fn state(&self, word: usize) -> Option<&AtomicU32> {
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
    pub(super) fn check(&self, rank: Rank) -> Result<(), DeviceError> {
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
