//! Per-rank `done_epoch` and the launches fenced on it (see the epoch fence in
//! [`crate::device`]).
//!
//! A launch waiting for a peer to reach an epoch registers a callback with the peer's
//! [`RankFence`] and holds no thread; the peer's advance runs it. The check and the
//! registration happen under the fence's lock, as does the advance, so no advance is
//! missed. A stopped device drains every waiting callback (their launches are aborted and
//! ignore it), which also breaks the reference cycle a waiting launch forms with the
//! device.
//!
//! Besides `done`, a rank marks the epochs whose streams `ended`: the end-of-call check
//! for notifies left set (see `launch.rs`) runs between the two.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What runs when a peer reached the epoch a launch waits for.
pub(crate) type FenceCallback = Box<dyn FnOnce() + Send>;

/// One local rank's progress through epochs.
#[derive(Default)]
pub(crate) struct RankFence {
    done: AtomicU64,
    /// The last epoch whose streams all ended on the rank, set before the rank looks for
    /// notifies left set and before `done` (see [`RankFence::end`]).
    ended: AtomicU64,
    waiters: Mutex<Vec<(u64, FenceCallback)>>,
    /// Local slots of the fence peers of the rank's last launch.
    last_peers: Mutex<Arc<[usize]>>,
}

impl RankFence {
    /// The last epoch the rank finished.
    pub(crate) fn done(&self) -> u64 {
        self.done.load(Ordering::Acquire)
    }

    /// The last epoch whose streams all ended on the rank.
    pub(crate) fn ended(&self) -> u64 {
        self.ended.load(Ordering::SeqCst)
    }

    /// Every stream of `epoch` ended on the rank: from now on a post of `epoch` into its
    /// notifies is late (nothing of the epoch is left to wait for it). The rank then looks
    /// for notifies left set and only then advances `done`, which lets peers start the
    /// next epoch; so a word it finds set was posted in `epoch`, and a post it does not
    /// find is one whose poster sees this mark (both sides are SeqCst: one sees the other).
    pub(crate) fn end(&self, epoch: u64) {
        self.ended.fetch_max(epoch, Ordering::SeqCst);
    }

    /// The rank finished `epoch` (monotone: an older epoch changes nothing); run every
    /// callback waiting for it.
    pub(crate) fn advance(&self, epoch: u64) {
        let ready: Vec<FenceCallback> = {
            let mut waiters = self.waiters.lock();
            let done = self.done.fetch_max(epoch, Ordering::AcqRel).max(epoch);
            if waiters.is_empty() {
                return;
            }
            let (ready, waiting): (Vec<_>, Vec<_>) =
                waiters.drain(..).partition(|(needed, _)| *needed <= done);
            *waiters = waiting;
            ready.into_iter().map(|(_, f)| f).collect()
        };
        for callback in ready {
            callback();
        }
    }

    /// True when the rank already finished `needed`; otherwise registers the callback
    /// `make` builds, to run when it does, and returns false.
    pub(crate) fn reached_or_register(
        &self,
        needed: u64,
        make: impl FnOnce() -> FenceCallback,
    ) -> bool {
        if self.done() >= needed {
            return true;
        }
        let mut waiters = self.waiters.lock();
        if self.done() >= needed {
            return true;
        }
        waiters.push((needed, make()));
        false
    }

    /// The peers a launch of this rank with fence peers `current` waits for at entry: its
    /// own and those of the rank's previous launch. The previous call may have granted
    /// peers this one does not (a mesh before a ring): they may still read this rank's CCL
    /// buffers or hold its notifies for that call, so its start waits for them as well (the
    /// analyzer's sequence check found a staged mesh followed by a ring racing without it).
    /// Remembers `current` for the next launch; launches of one rank are sequential.
    ///
    /// A rank that repeats its executor (the usual case) gets `current` back: no union is
    /// built on the launch path unless the set changed.
    pub(crate) fn entry_peers(&self, current: &Arc<[usize]>) -> Arc<[usize]> {
        let mut last = self.last_peers.lock();
        if Arc::ptr_eq(&last, current) || **last == **current {
            return current.clone();
        }
        let mut union: Vec<usize> = current.iter().chain(last.iter()).copied().collect();
        union.sort_unstable();
        union.dedup();
        *last = current.clone();
        union.into()
    }

    /// Drop every waiting callback without running it (the device stopped).
    pub(crate) fn release_all(&self) {
        let dropped = std::mem::take(&mut *self.waiters.lock());
        drop(dropped);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_peers_include_the_previous_launch_s() {
        let fence = RankFence::default();
        let set = |s: &[usize]| -> Arc<[usize]> { s.into() };
        assert_eq!(&*fence.entry_peers(&set(&[1, 2, 3])), &[1, 2, 3]);
        assert_eq!(&*fence.entry_peers(&set(&[1])), &[1, 2, 3]);
        assert_eq!(&*fence.entry_peers(&set(&[4])), &[1, 4]);
        assert_eq!(&*fence.entry_peers(&set(&[])), &[4]);
        assert!(fence.entry_peers(&set(&[])).is_empty());
    }

    #[test]
    fn callbacks_run_when_their_epoch_is_reached_and_not_before() {
        let fence = RankFence::default();
        let ran = Arc::new(AtomicU64::new(0));
        let counter = |n: &Arc<AtomicU64>| {
            let n = n.clone();
            move || {
                Box::new(move || {
                    n.fetch_add(1, Ordering::Relaxed);
                }) as FenceCallback
            }
        };
        assert!(fence.reached_or_register(0, counter(&ran)));
        assert!(!fence.reached_or_register(2, counter(&ran)));
        assert!(!fence.reached_or_register(1, counter(&ran)));
        fence.advance(1);
        assert_eq!(ran.load(Ordering::Relaxed), 1);
        fence.advance(0);
        assert_eq!(fence.done(), 1, "monotone");
        fence.advance(2);
        assert_eq!(ran.load(Ordering::Relaxed), 2);
        assert!(!fence.reached_or_register(3, counter(&ran)));
        fence.release_all();
        fence.advance(3);
        assert_eq!(
            ran.load(Ordering::Relaxed),
            2,
            "released callbacks never run"
        );
    }
}
