//! Frames that come one operation early, held until their rank may take them.
//!
//! ## Why
//!
//! The entry fence (see [`crate::device`]) makes a call of epoch `e` wait until every
//! fence peer finished `e - 1`. Towards a peer reached over TCP that costs a message on
//! every call: the peer's Done for `e - 1` leaves when its call ends and arrives a hop
//! later, so a latency-bound call is its rounds plus one (a call of 8 ranks' recursive
//! doubling, 3 rounds, took about 4 hops).
//!
//! What that fence protects towards a put-only peer P is P's side only: P never reads this
//! rank's buffers, and every byte and post P sent this rank in `e - 1` was taken by this
//! rank in `e - 1` (a Write is always followed by the Post that announces it, on the same
//! connection, and the program waits for that Post). So this rank's writes and posts of
//! `e` may *travel* while P still runs `e - 1`, provided P's device does not *apply* them
//! until P finished `e - 1`. That is this module: NCCL's proxy receives into buffers of
//! its own in the same spirit.
//!
//! ## The rule
//!
//! - A rank fences on a peer it reaches by TCP frames with a lag of two: a call of `e`
//!   waits for the peer's Done of `e - 2` ([`crate::host::launch::Shared::fence_lag`]),
//!   which left a call earlier and is there already in a steady job.
//! - Every Write and Post frame names its epoch. For local rank S with last finished
//!   epoch `done`, a frame of epoch `f <= done + 1` lands now (`f` is S's current call, or
//!   one it already finished: a late post is reported as before). A frame of `done + 2` is
//!   held here: a Write's payload is read into a buffer of its own (its bounds checked
//!   first, as any Write's), a Post is queued. A frame further ahead is refused: an honest
//!   peer cannot send it, because its fence waits for S's Done of `f - 2`.
//! - When S finishes an epoch ([`Early::finished`], before its Done is published or its
//!   next call may start), the held Writes of the next epoch land in the order they came,
//!   under the same lock the receiver decides under, so a Post that lands now never
//!   announces bytes still held; then the held Posts are set (their order among
//!   themselves does not matter: each wait takes its own word).
//! - What is held is bounded: an honest peer writes at most one call's first iteration
//!   ahead (after it, it waits for a post of S's next call), which fits in S's buffers, so
//!   more than [`HELD_BUFFERS`] times their size stops the device, naming the peer.
//!
//! Ranks reached through RDMA keep the lag of one: their writes land through the NIC,
//! which nothing here can hold back.

use crate::ir::Rank;
use crate::transport::tcp::wire::EPOCH_TAG;
use parking_lot::Mutex;

/// Held bytes allowed per local rank, in multiples of its buffers' size.
const HELD_BUFFERS: usize = 2;

/// The held frames of every local rank of a device.
pub(crate) struct Early {
    slots: Box<[Mutex<Held>]>,
}

#[derive(Default)]
struct Held {
    /// The last epoch the rank finished, as this module was told (before its fence).
    done: u64,
    frames: Vec<HeldFrame>,
    bytes: usize,
}

/// A frame of the call after the rank's current one.
pub(crate) enum HeldFrame {
    /// Bytes for `at`, in a buffer of the rank checked when the Write came.
    Write { at: Target, data: Box<[u8]> },
    /// A post of link word `word` of the slot's rank, from rank `from`'s call `epoch`.
    Post { from: Rank, word: u64, epoch: u64 },
}

/// The first byte of a checked range of a local rank's registered buffer.
pub(crate) struct Target(pub *mut u8);

// SAFETY: the pointer is into a buffer the device owns for its lifetime. It is written
// once, by `Early::finished` (under the slot's lock, before the rank's next epoch may
// start) or by `Early::landed` (once that epoch is the rank's current one), as the Write
// would have been had it come then: the program leaves that range to it.
unsafe impl Send for Target {}

/// Whether a frame lands now or is held.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum When {
    Now,
    Held,
}

impl Early {
    pub(crate) fn new(local_ranks: usize) -> Self {
        Early {
            slots: (0..local_ranks).map(|_| Mutex::default()).collect(),
        }
    }

    /// When a Write whose header names `tag` (its epoch's low bits) lands on local slot
    /// `slot`, and its full epoch; `len` payload bytes are counted against `budget` (the
    /// bytes the slot may hold) when it is held.
    pub(crate) fn write(
        &self,
        slot: usize,
        tag: u64,
        len: usize,
        budget: impl FnOnce() -> usize,
    ) -> Result<(When, u64), String> {
        let mut held = self.slots[slot].lock();
        let next = held.done.saturating_add(1);
        let ahead = tag.wrapping_sub(next) & EPOCH_TAG;
        let epoch = match ahead {
            0 => return Ok((When::Now, next)),
            1 => next.saturating_add(1),
            // Behind the current call: as any late frame, it lands (a late post is then
            // reported by the post itself).
            a if a > EPOCH_TAG / 2 => {
                return Ok((When::Now, next.saturating_sub(EPOCH_TAG + 1 - a)))
            }
            _ => return Err(too_far(tag, held.done)),
        };
        let total = held.bytes.saturating_add(len);
        let allowed = budget().saturating_mul(HELD_BUFFERS);
        if total > allowed {
            return Err(format!(
                "{total} bytes written one operation ahead of this rank, more than the \
                 {allowed} an honest peer can send before it waits for this rank"
            ));
        }
        held.bytes = total;
        Ok((When::Held, epoch))
    }

    /// A held Write's payload is all here: land it now if the rank finished the epoch
    /// before meanwhile, else keep it for [`Self::finished`].
    pub(crate) fn landed(&self, slot: usize, epoch: u64, at: Target, data: Box<[u8]>) {
        let mut held = self.slots[slot].lock();
        if epoch <= held.done.saturating_add(1) {
            held.bytes = held.bytes.saturating_sub(data.len());
            drop(held);
            copy_in(&at, &data);
            return;
        }
        held.frames.push(HeldFrame::Write { at, data });
    }

    /// When a Post of `epoch` for local slot `slot` lands; held ones are kept here.
    pub(crate) fn post(
        &self,
        slot: usize,
        from: Rank,
        word: u64,
        epoch: u64,
    ) -> Result<When, String> {
        let mut held = self.slots[slot].lock();
        let next = held.done.saturating_add(1);
        if epoch <= next {
            return Ok(When::Now);
        }
        if epoch - next > 1 {
            return Err(too_far(epoch, held.done));
        }
        held.frames.push(HeldFrame::Post { from, word, epoch });
        Ok(When::Held)
    }

    /// Local slot `slot` finished `epoch`: from now on frames of `epoch + 1` land. The
    /// held Writes land now, under the slot's lock, in the order they came; the held
    /// Posts are returned, for the caller to set after the lock is let go (a post may
    /// wake a stream, which may end an epoch and come back here). Nothing is lost by
    /// setting them after: a Write that comes meanwhile lands at once, and no wait of
    /// `epoch + 1` can start before the rank's fence moves, after this. Called before the
    /// rank's fence moves.
    #[must_use]
    pub(crate) fn finished(&self, slot: usize, epoch: u64) -> Vec<HeldFrame> {
        let mut held = self.slots[slot].lock();
        if epoch <= held.done {
            return Vec::new();
        }
        held.done = epoch;
        held.bytes = 0;
        let mut posts = Vec::new();
        for frame in std::mem::take(&mut held.frames) {
            match frame {
                HeldFrame::Write { at, data } => copy_in(&at, &data),
                post => posts.push(post),
            }
        }
        posts
    }
}

fn copy_in(at: &Target, data: &[u8]) {
    // SAFETY: `at..at + data.len()` was checked inside a registered buffer of the rank
    // when the Write came (`write_target`), and the buffer lives as long as the device.
    unsafe { crate::reduce::copy_bytes(data.as_ptr(), at.0, data.len()) };
}

fn too_far(epoch: u64, done: u64) -> String {
    format!(
        "a frame of operation {epoch} (or its low bits) while this rank finished {done}: \
         more than one operation ahead, which the fence rules out"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_of_the_next_call_is_held_until_the_current_one_ends() {
        let early = Early::new(1);
        assert_eq!(early.post(0, 1, 3, 1), Ok(When::Now));
        assert_eq!(early.post(0, 1, 3, 2), Ok(When::Held));
        assert!(early.post(0, 1, 3, 3).is_err(), "two calls ahead");
        let mut dst = [0u8; 4];
        let at = Target(dst.as_mut_ptr());
        assert_eq!(early.write(0, 2, 4, || 8), Ok((When::Held, 2)));
        early.landed(0, 2, at, vec![7; 4].into());
        assert_eq!(dst, [0; 4], "held until epoch 1 ends");
        let posted: Vec<(u64, u64)> = early
            .finished(0, 1)
            .into_iter()
            .filter_map(|f| match f {
                HeldFrame::Post { word, epoch, .. } => Some((word, epoch)),
                HeldFrame::Write { .. } => None,
            })
            .collect();
        assert_eq!(dst, [7; 4]);
        assert_eq!(posted, [(3, 2)]);
        assert_eq!(early.write(0, 2, 4, || 8), Ok((When::Now, 2)));
        assert_eq!(early.post(0, 1, 3, 3), Ok(When::Held));
    }

    #[test]
    fn a_payload_that_completes_after_its_call_began_lands_at_once() {
        let early = Early::new(1);
        let mut dst = [0u8; 2];
        assert_eq!(early.write(0, 2, 2, || 8), Ok((When::Held, 2)));
        assert!(early.finished(0, 1).is_empty(), "nothing held yet");
        early.landed(0, 2, Target(dst.as_mut_ptr()), vec![5; 2].into());
        assert_eq!(dst, [5; 2]);
    }

    #[test]
    fn epochs_are_read_from_their_low_bits_and_bounded() {
        let early = Early::new(1);
        assert!(early.finished(0, EPOCH_TAG + 5).is_empty());
        let next = EPOCH_TAG + 6;
        assert_eq!(
            early.write(0, next & EPOCH_TAG, 1, || 8),
            Ok((When::Now, next))
        );
        assert_eq!(
            early.write(0, (next + 1) & EPOCH_TAG, 1, || 8),
            Ok((When::Held, next + 1))
        );
        let behind = (EPOCH_TAG + 5) & EPOCH_TAG;
        assert_eq!(
            early.write(0, behind, 1, || 8),
            Ok((When::Now, EPOCH_TAG + 5)),
            "a late write lands"
        );
        assert!(early.write(0, (next + 2) & EPOCH_TAG, 1, || 8).is_err());
        let held = early.write(0, (next + 1) & EPOCH_TAG, 16, || 8);
        assert!(held.unwrap_err().contains("more than the 16"), "the budget");
    }
}
