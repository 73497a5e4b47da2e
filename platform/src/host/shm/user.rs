//! User buffers that peers in other processes map: zero-copy across processes.
//!
//! With [`ShmJob::user_buffers`], a rank's user memory comes from
//! [`Device::alloc_shared`]: its `n`-th allocation (its **turn** `n`) is a segment named
//! `/oxccl-<tag>-r<rank>-u<n>`, and the process that makes its own turn `n` first maps
//! every peer's turn `n` (MPI's `MPI_Win_allocate_shared` shape: collective, sizes free).
//! As for scratch, a segment's name goes once every peer mapped it, and an allocation
//! returns only then: its owner may drop it at once without taking it from a peer.
//!
//! A call tells its peers where its buffers lie through a **binding record** in its
//! block's control area: per buffer the turn, offset and length, stamped with the call's
//! epoch. The rank writes it when the call starts running, before any of its Posts, so a
//! peer that touches the buffers after the ready signal the analyzer requires (its
//! `peer_ready` rule) finds it; the peer maps the turn to its own mapping of that
//! segment and checks the slice against the mapping's length, never against what the
//! record claims, so a faulty record cannot make it reach outside the segment.
//!
//! A call's buffers outside this memory are refused before the call starts
//! ([`DeviceError::NotShared`]): that stops the device, so the peers waiting for the
//! rank are released at once.
//!
//! [`ShmJob::user_buffers`]: crate::device::ShmJob::user_buffers
//! [`Device::alloc_shared`]: crate::device::Device::alloc_shared

use super::block::{BindingRecord, BINDINGS};
use super::{shm_err, ShmLinks};
use crate::error::{DeviceError, SliceFault};
use crate::host::memory::{Region, UserRegions};
use crate::ir::{Buf, Rank};
use crate::transport::shm::{segment_name, Segment};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

/// This device's shared user allocations and its mappings of its peers'.
#[derive(Default)]
pub(crate) struct UserSegments {
    /// Per local slot: its next turn and its live allocations.
    own: Vec<Mutex<OwnTurns>>,
    /// Peers' segments mapped here, by turn: with how many local allocations of that turn
    /// are alive (the mappings go with the last).
    peers: Mutex<HashMap<u64, PeerTurn>>,
    /// Held while a turn's peer segments are mapped (which may wait for them), so that a
    /// device maps each turn once without holding `peers`, which tasks look up.
    mapping: Mutex<()>,
}

#[derive(Default)]
struct OwnTurns {
    next: u64,
    /// (turn, first byte, length) of each live allocation.
    live: Vec<(u64, usize, usize)>,
}

struct PeerTurn {
    holders: usize,
    segments: HashMap<Rank, Arc<Segment>>,
}

impl UserSegments {
    pub(super) fn new(local: usize) -> Self {
        UserSegments {
            own: (0..local).map(|_| Mutex::default()).collect(),
            peers: Mutex::default(),
            mapping: Mutex::default(),
        }
    }
}

/// One allocation of a local rank: its segment, mapped until dropped.
struct OwnAllocation {
    links: Arc<ShmLinks>,
    slot: usize,
    turn: u64,
    segment: Arc<Segment>,
}

impl Drop for OwnAllocation {
    fn drop(&mut self) {
        let user = &self.links.user;
        user.own[self.slot]
            .lock()
            .live
            .retain(|&(turn, ..)| turn != self.turn);
        let mut peers = user.peers.lock();
        if let Some(t) = peers.get_mut(&self.turn) {
            t.holders -= 1;
            if t.holders == 0 {
                peers.remove(&self.turn);
            }
        }
    }
}

impl ShmLinks {
    /// Local slot `slot` (rank `rank`) allocates its next turn of `bytes`: its segment,
    /// then (first of this device at that turn) every peer's of the same turn, mapped.
    /// Returns the memory and what keeps it mapped.
    pub(crate) fn alloc_user(
        self: &Arc<Self>,
        slot: usize,
        rank: Rank,
        bytes: usize,
    ) -> Result<(*mut u8, Box<dyn std::any::Any + Send + Sync>), DeviceError> {
        let turn = {
            let mut own = self.user.own[slot].lock();
            own.next += 1;
            own.next - 1
        };
        let remote = self.peer_ranks().count() as u32;
        let name = segment_name(&self.tag, rank, &format!("u{turn}"));
        // Created before this thread waits for anyone's: every rank's segment of a turn
        // appears without waiting, so the waits below cannot form a cycle.
        let segment = Arc::new(Segment::create(&name, bytes, remote).map_err(shm_err)?);
        self.map_peer_turn(turn)?;
        let ptr = segment.payload().0;
        self.user.own[slot]
            .lock()
            .live
            .push((turn, ptr as usize, bytes));
        // From here on, dropping `keep` undoes the allocation (a failure below included).
        let keep = OwnAllocation {
            links: self.clone(),
            slot,
            turn,
            segment,
        };
        // And every peer mapped this one before it can be dropped: a rank whose call has
        // nothing to wait for (count 0) may drop its buffers at once.
        let peers_alive = || self.peer_ranks().all(|r| self.peer_alive(r));
        keep.segment
            .wait_mapped(self.wait, peers_alive)
            .map_err(shm_err)?;
        Ok((ptr, Box::new(keep)))
    }

    /// Count one more local allocation of `turn`; the first maps every peer's segment
    /// of that turn (waiting for it to appear, within the device's timeout).
    fn map_peer_turn(&self, turn: u64) -> Result<(), DeviceError> {
        let _mapping = self.user.mapping.lock();
        if let Some(t) = self.user.peers.lock().get_mut(&turn) {
            t.holders += 1;
            return Ok(());
        }
        let mut segments = HashMap::new();
        for rank in self.peer_ranks() {
            let name = segment_name(&self.tag, rank, &format!("u{turn}"));
            let alive = || self.peer_alive(rank);
            let segment =
                Segment::attach_while(&name, self.wait, self.weight, alive).map_err(shm_err)?;
            segments.insert(rank, Arc::new(segment));
        }
        self.user.peers.lock().insert(
            turn,
            PeerTurn {
                holders: 1,
                segments,
            },
        );
        Ok(())
    }

    /// Where `region` lies in local slot `slot`'s live allocations: (turn + 1, offset);
    /// (0, 0) for an empty region, which needs none. `None`: outside every allocation.
    fn locate(&self, slot: usize, region: Region) -> Option<(u64, u64)> {
        if region.len == 0 {
            return Some((0, 0));
        }
        let start = region.ptr as usize;
        let end = start.checked_add(region.len)?;
        let own = self.user.own[slot].lock();
        own.live.iter().find_map(|&(turn, base, len)| {
            let inside = start >= base && end <= base + len;
            inside.then(|| (turn + 1, (start - base) as u64))
        })
    }

    /// Refuse a call of local slot `slot` whose buffers peers cannot map.
    pub(crate) fn check_shared(
        &self,
        slot: usize,
        rank: Rank,
        user: &UserRegions,
    ) -> Result<(), DeviceError> {
        for (buf, region) in [(Buf::Input, user.input), (Buf::Output, user.output)] {
            if self.locate(slot, region).is_none() {
                return Err(DeviceError::NotShared { rank, buf });
            }
        }
        Ok(())
    }

    /// Publish where the buffers of local slot `slot`'s call of `user.epoch` lie, before
    /// the call's streams start (see the module docs).
    pub(crate) fn publish_binding(&self, slot: usize, user: &UserRegions) {
        let record = self.own[slot].control().binding(user.epoch);
        record.epoch.store(0, Ordering::Relaxed);
        fence(Ordering::Release);
        for (words, region) in record.buffers.iter().zip([user.input, user.output]) {
            // A buffer outside the allocations was refused when the call was admitted.
            let (turn, offset) = self.locate(slot, region).unwrap_or((0, 0));
            words[0].store(turn, Ordering::Relaxed);
            words[1].store(offset, Ordering::Relaxed);
            words[2].store(region.len as u64, Ordering::Relaxed);
        }
        record.epoch.store(user.epoch, Ordering::Release);
    }

    /// Peer `rank`'s `buf` for a task of `epoch`, in this process's mapping of it, and
    /// what keeps that mapping. The caller checks the slice against `Region::len`.
    pub(crate) fn peer_user(
        &self,
        rank: Rank,
        buf: Buf,
        epoch: u64,
    ) -> Result<(Region, Arc<Segment>), SliceFault> {
        let peer = self.peer(rank).ok_or(SliceFault::Unbound { rank, buf })?;
        let record = peer.block.control().binding(epoch);
        let (turn, offset, len) = read_record(record, buf, epoch).map_err(|bound| match bound {
            0 => SliceFault::Unbound { rank, buf },
            bound => SliceFault::OtherEpoch {
                rank,
                bound,
                running: epoch,
            },
        })?;
        let unbound = SliceFault::Unbound { rank, buf };
        let turn = turn.checked_sub(1).ok_or(unbound.clone())?;
        let segment = {
            let peers = self.user.peers.lock();
            let t = peers.get(&turn).ok_or(unbound.clone())?;
            t.segments.get(&rank).ok_or(unbound)?.clone()
        };
        let (base, mapped) = segment.payload();
        let inside = usize::try_from(offset)
            .ok()
            .zip(usize::try_from(len).ok())
            .filter(|&(o, l)| o.checked_add(l).is_some_and(|end| end <= mapped));
        let Some((offset, len)) = inside else {
            return Err(SliceFault::OutOfBounds { buffer_len: mapped });
        };
        let region = Region {
            // SAFETY: `offset + len` is within the mapped payload (checked above).
            ptr: unsafe { base.add(offset) },
            len,
            writable: buf == Buf::Output,
        };
        Ok((region, segment))
    }
}

/// Read `buf`'s words of `record` for `epoch`: (turn + 1, offset, length), or the epoch
/// the record holds instead (0 while rewritten, or never written).
fn read_record(record: &BindingRecord, buf: Buf, epoch: u64) -> Result<(u64, u64, u64), u64> {
    let before = record.epoch.load(Ordering::Acquire);
    if before != epoch {
        return Err(before);
    }
    let words = &record.buffers[usize::from(buf == Buf::Output)];
    let read = (
        words[0].load(Ordering::Relaxed),
        words[1].load(Ordering::Relaxed),
        words[2].load(Ordering::Relaxed),
    );
    fence(Ordering::Acquire);
    match record.epoch.load(Ordering::Relaxed) {
        after if after == epoch => Ok(read),
        after => Err(after),
    }
}

impl super::block::Control {
    /// The binding record of `epoch`.
    pub(super) fn binding(&self, epoch: u64) -> &BindingRecord {
        &self.bindings[(epoch % BINDINGS as u64) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::host::shm_tests::{pair_with, tag};
    use crate::host::HostDevice;
    use std::time::Duration;

    /// Write rank `rank`'s record of `epoch` (served by `dev`) by hand: `buffers` as
    /// (turn + 1, offset, length) for Input, then Output.
    fn forge(dev: &HostDevice, rank: Rank, epoch: u64, buffers: [[u64; 3]; 2]) {
        let links = dev.shared.shm.as_ref().expect("shm");
        let slot = dev.shared.slot(rank).expect("local");
        let record = links.own[slot].control().binding(epoch);
        for (words, values) in record.buffers.iter().zip(buffers) {
            for (w, v) in words.iter().zip(values) {
                w.store(v, Ordering::Relaxed);
            }
        }
        record.epoch.store(epoch, Ordering::Release);
    }

    #[test]
    fn a_record_is_checked_against_the_mapping_not_trusted() {
        let (a, b) = pair_with(&tag("forged"), Duration::from_secs(20), true);
        let len = 4096;
        let _memory = std::thread::scope(|s| {
            let ranks = [(&a, 0), (&a, 1), (&b, 2), (&b, 3)];
            let threads: Vec<_> = ranks
                .iter()
                .map(|&(dev, r)| s.spawn(move || dev.alloc_shared(r, len).expect("alloc")))
                .collect();
            threads
                .into_iter()
                .map(|t| t.join().unwrap())
                .collect::<Vec<_>>()
        });
        let links = a.shared.shm.as_ref().expect("shm");
        let look = |buf| links.peer_user(2, buf, 1);
        // Inside the allocation: found, read-only as an Input.
        forge(&b, 2, 1, [[1, 8, 100], [1, 0, len as u64]]);
        let (input, _) = look(Buf::Input).expect("inside");
        assert_eq!((input.len, input.writable), (100, false));
        assert!(look(Buf::Output).expect("inside").0.writable);
        // Past the end of the mapping, or wrapping: refused, whatever the record says.
        forge(&b, 2, 1, [[1, len as u64 - 8, 9], [1, u64::MAX, 2]]);
        let past = look(Buf::Input).unwrap_err();
        assert!(matches!(past, SliceFault::OutOfBounds { buffer_len } if buffer_len == len));
        assert!(matches!(
            look(Buf::Output),
            Err(SliceFault::OutOfBounds { .. })
        ));
        // A turn this process never mapped, or no allocation: unbound.
        forge(&b, 2, 1, [[7, 0, 8], [0, 0, 8]]);
        assert!(matches!(
            look(Buf::Input),
            Err(SliceFault::Unbound { rank: 2, .. })
        ));
        assert!(matches!(
            look(Buf::Output),
            Err(SliceFault::Unbound { rank: 2, .. })
        ));
        // Another call's record: named as such.
        let other = links
            .peer_user(2, Buf::Input, 1 + BINDINGS as u64)
            .unwrap_err();
        assert!(
            matches!(other, SliceFault::OtherEpoch { bound: 1, .. }),
            "{other:?}"
        );
    }
}
