//! Signal banks: one rank's notifies as atomic words, with a small waker per word.
//!
//! Every local rank owns a [`SignalBank`]: the words behind its notifies, laid out as
//! [`NotifyLayout`](crate::NotifyLayout) says (the fixed link region, then the local
//! region). There is no device-wide lock: a Post and the Wait it satisfies meet on one
//! word with compare-and-swap, and a bank grows its local region segment by segment
//! without stopping anyone who uses the words already there.
//!
//! ## The word
//!
//! A word is [`CLEAR`], [`SET`] (posted, not yet consumed), [`PARKED`] (a stream waits on
//! it and its waker is in the word's slot) or [`WOKEN`] (see below):
//!
//! - `wait`: `SET → CLEAR` consumes the post and goes on. Otherwise the waiter puts its
//!   waker in the slot and tries `CLEAR → PARKED`; when a post raced in (`SET`), it takes
//!   its waker back and consumes the post.
//! - `post`: `CLEAR → SET`; or `PARKED → CLEAR` and wake the waker taken from the slot
//!   (the post is consumed by the wait it resumes, in-process a direct resume of the
//!   parked stream: one queue push); or, on `SET`, a **lost wakeup**.
//!
//! The IR's contract is binary (a notify is set or not), and this keeps it observable:
//! a post that finds its word set is reported, never counted silently. The analyzer
//! proves that no program of one operation does that, and the device's epoch fence (see
//! [`crate::device`]) proves that no operation posts into a notify a peer's previous
//! operation left set (the analyzer also proves every post is consumed within its
//! operation). A counting lowering (MSCCL++-style semaphores) would hide a broken
//! program instead of reporting it, so the words stay binary.
//!
//! ## Memory ordering
//!
//! The post's transition is `Release` and the wait's is `Acquire` (both `AcqRel` CAS), so
//! every write the posting stream made before its Post happens-before every task after the
//! Wait. The waker slot is written before `CLEAR → PARKED` (release) and read after
//! `PARKED → CLEAR` (acquire), so a poster always finds the waker there.
//!
//! ## Other processes
//!
//! A word is a state (a plain `AtomicU32`) and a waker slot kept apart: the link region's
//! states may live in a shared-memory segment ([`SignalBank::with_external_link`]) that
//! peers in other processes map, while the slots stay in the owner's memory, because only
//! the process that parked a stream can resume it. A peer in another process posts with
//! [`post_from_afar`]: `CLEAR -> SET`, or, when a stream is parked, `PARKED -> WOKEN`
//! and a ring of the owner's doorbell; the owner's doorbell service then takes the wakers
//! of the woken words ([`SignalBank::take_woken`]) and resumes their streams. The TCP
//! transport's receiver runs in the owner's process, so it posts as a local thread does.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

/// The word is clear: no post pending, no waiter.
pub const CLEAR: u32 = 0;
/// A post is pending.
pub const SET: u32 = 1;
/// A stream is parked on the word; its waker is in the slot.
pub const PARKED: u32 = 2;
/// A process that cannot reach the waker (another process, through shared memory) posted
/// a parked word: the owner's doorbell service hands the waker back ([`Word::take_woken`]).
pub const WOKEN: u32 = 3;

/// Where a waiter's waker waits: process-local, beside (not inside) the word.
pub type WakerSlot<W> = parking_lot::Mutex<Option<W>>;

/// One notify word and the slot for the waker of the stream parked on it: a view of a
/// state word (which may live in shared memory) and a process-local slot.
pub struct Word<'a, W> {
    state: &'a AtomicU32,
    waker: &'a WakerSlot<W>,
}

/// A word with its slot, stored together (the local region, and tests).
pub struct OwnedWord<W> {
    state: AtomicU32,
    waker: WakerSlot<W>,
}

impl<W> Default for OwnedWord<W> {
    fn default() -> Self {
        OwnedWord {
            state: AtomicU32::new(CLEAR),
            waker: parking_lot::Mutex::new(None),
        }
    }
}

impl<W> OwnedWord<W> {
    /// The word.
    pub fn word(&self) -> Word<'_, W> {
        Word {
            state: &self.state,
            waker: &self.waker,
        }
    }
}

/// What a post did.
#[derive(Debug, PartialEq, Eq)]
pub enum Posted<W> {
    /// Nobody waited: the word is now set.
    Set,
    /// A parked stream was waiting: resume it with this waker.
    Woke(W),
    /// The word was already set: a lost wakeup.
    AlreadySet,
}

/// What a post from another process did ([`post_from_afar`]).
#[derive(Debug, PartialEq, Eq)]
pub enum PostedAfar {
    /// Nobody waited: the word is now set.
    Set,
    /// A stream was parked: ring the owner's doorbell so that it resumes it.
    Ring,
    /// The word was already set: a lost wakeup.
    AlreadySet,
}

/// What a wait did.
#[derive(Debug, PartialEq, Eq)]
pub enum Waited {
    /// A post was pending and is consumed: go on.
    Consumed,
    /// The stream is parked; a post (or [`Word::unpark`]) hands its waker back.
    Parked,
    /// Another stream already waits on this word.
    Occupied,
}

/// Post a word whose waker slot this process cannot reach (its owner is another process):
/// `CLEAR -> SET`, or `PARKED -> WOKEN` for the owner to resume its stream.
pub fn post_from_afar(state: &AtomicU32) -> PostedAfar {
    let mut current = state.load(Ordering::Relaxed);
    loop {
        let (next, outcome) = match current {
            CLEAR => (SET, PostedAfar::Set),
            PARKED => (WOKEN, PostedAfar::Ring),
            _ => return PostedAfar::AlreadySet,
        };
        match state.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => return outcome,
            Err(seen) => current = seen,
        }
    }
}

impl<W> Word<'_, W> {
    /// The word's state ([`CLEAR`], [`SET`], [`PARKED`] or [`WOKEN`]).
    pub fn state(&self) -> u32 {
        self.state.load(Ordering::Acquire)
    }

    /// Post the word.
    pub fn post(&self) -> Posted<W> {
        let mut current = self.state.load(Ordering::Relaxed);
        loop {
            let (next, outcome) = match current {
                CLEAR => (SET, None),
                PARKED => (CLEAR, Some(())),
                _ => return Posted::AlreadySet,
            };
            match self.state.compare_exchange_weak(
                current,
                next,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) if outcome.is_some() => {
                    let waker = self.waker.lock().take();
                    // The waiter stored its waker before it parked (see the module docs).
                    return Posted::Woke(waker.expect("a parked word has a waker"));
                }
                Ok(_) => return Posted::Set,
                Err(seen) => current = seen,
            }
        }
    }

    /// The waker of a stream that another process woke (`WOKEN -> CLEAR`), if it did.
    pub fn take_woken(&self) -> Option<W> {
        self.state
            .compare_exchange(WOKEN, CLEAR, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .and_then(|_| self.waker.lock().take())
    }

    /// Consume a pending post, if there is one (a wait's fast path).
    pub fn try_consume(&self) -> bool {
        self.state
            .compare_exchange(SET, CLEAR, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Wait on the word: consume a pending post, or park with `waker`.
    pub fn wait(&self, waker: impl FnOnce() -> W) -> Waited {
        if self.try_consume() {
            return Waited::Consumed;
        }
        {
            let mut slot = self.waker.lock();
            if slot.is_some() {
                return Waited::Occupied;
            }
            *slot = Some(waker());
        }
        match self
            .state
            .compare_exchange(CLEAR, PARKED, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Waited::Parked,
            Err(SET) => {
                // A post raced in between: take the waker back and consume it.
                self.waker.lock().take();
                let consumed =
                    self.state
                        .compare_exchange(SET, CLEAR, Ordering::AcqRel, Ordering::Acquire);
                debug_assert!(consumed.is_ok(), "only this waiter consumes a set word");
                Waited::Consumed
            }
            Err(_) => {
                self.waker.lock().take();
                Waited::Occupied
            }
        }
    }

    /// Take a parked waiter off the word (an abort): its waker, or `None` when a post
    /// resumed it (or another process woke it: the doorbell service resumes it) first.
    pub fn unpark(&self) -> Option<W> {
        self.state
            .compare_exchange(PARKED, CLEAR, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .and_then(|_| self.waker.lock().take())
    }
}

/// Words of the first local-region segment; each next segment doubles.
const FIRST_SEGMENT: usize = 64;
/// Segments of the local region: `64 * (2^40 - 1)` words, far beyond any program.
const SEGMENTS: usize = 40;

/// Link-region state words that live outside the bank: in a shared-memory segment that
/// other processes map and post.
pub struct ExternalStates {
    /// The first of `len` words, 4-byte aligned, valid while `keep` lives.
    pub first: *const AtomicU32,
    pub len: usize,
    /// Whatever owns the memory (the segment).
    pub keep: Arc<dyn Send + Sync>,
}

/// The link region's state words.
enum LinkStates {
    Owned(Box<[AtomicU32]>),
    External(ExternalStates),
}

// SAFETY: the external words are atomics in memory that `keep` keeps mapped; sharing
// references to atomics across threads is what they are for.
unsafe impl Send for LinkStates {}
// SAFETY: as above.
unsafe impl Sync for LinkStates {}

impl LinkStates {
    fn as_slice(&self) -> &[AtomicU32] {
        match self {
            LinkStates::Owned(words) => words,
            // SAFETY: `first..first + len` are aligned atomics kept mapped by `keep`, which
            // lives as long as `self`.
            LinkStates::External(e) => unsafe { std::slice::from_raw_parts(e.first, e.len) },
        }
    }
}

/// One rank's notify words: the fixed link region, then a local region that grows.
pub struct SignalBank<W> {
    link: LinkStates,
    link_wakers: Box<[WakerSlot<W>]>,
    local: [OnceLock<Box<[OwnedWord<W>]>>; SEGMENTS],
}

impl<W> SignalBank<W> {
    /// A bank with `link_words` words in the link region and an empty local region.
    pub fn new(link_words: usize) -> Self {
        let states = (0..link_words).map(|_| AtomicU32::new(CLEAR)).collect();
        Self::with_link(LinkStates::Owned(states))
    }

    /// A bank whose link-region states are `states` (zeroed: every word clear), for
    /// peers in other processes to post.
    pub fn with_external_link(states: ExternalStates) -> Self {
        Self::with_link(LinkStates::External(states))
    }

    fn with_link(link: LinkStates) -> Self {
        let words = link.as_slice().len();
        SignalBank {
            link,
            link_wakers: (0..words).map(|_| parking_lot::Mutex::new(None)).collect(),
            local: std::array::from_fn(|_| OnceLock::new()),
        }
    }

    /// Words of the link region.
    pub fn link_words(&self) -> usize {
        self.link_wakers.len()
    }

    /// The link region's state words (what a transport exports).
    pub fn link_states(&self) -> &[AtomicU32] {
        self.link.as_slice()
    }

    /// Make sure the local region has at least `local` words. Segments already there stay
    /// where they are, so words in use never move and nobody waits for the growth.
    pub fn reserve_local(&self, local: usize) {
        let mut covered = 0;
        for (k, segment) in self.local.iter().enumerate() {
            if covered >= local {
                return;
            }
            let len = FIRST_SEGMENT << k;
            segment.get_or_init(|| (0..len).map(|_| OwnedWord::default()).collect());
            covered += len;
        }
    }

    /// Words the bank holds now (link region plus the local segments allocated).
    pub fn len(&self) -> usize {
        let mut len = self.link_words();
        for (k, segment) in self.local.iter().enumerate() {
            if segment.get().is_none() {
                break;
            }
            len += FIRST_SEGMENT << k;
        }
        len
    }

    /// True when the bank has no word at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The word at `index`, if it exists.
    pub fn word(&self, index: usize) -> Option<Word<'_, W>> {
        if let Some(state) = self.link.as_slice().get(index) {
            return Some(Word {
                state,
                waker: &self.link_wakers[index],
            });
        }
        let local = index - self.link_words();
        // Segment k starts at FIRST_SEGMENT * (2^k - 1).
        let k = (local / FIRST_SEGMENT + 1).ilog2() as usize;
        let start = FIRST_SEGMENT * ((1usize << k) - 1);
        self.local
            .get(k)?
            .get()?
            .get(local - start)
            .map(OwnedWord::word)
    }

    /// Resume every link-region waiter another process woke: the wakers of the words in
    /// state [`WOKEN`] (what a doorbell ring asks the owner to do).
    pub fn take_woken(&self) -> Vec<W> {
        (0..self.link_words())
            .filter(|&i| self.link.as_slice()[i].load(Ordering::Relaxed) == WOKEN)
            .filter_map(|i| self.word(i).and_then(|w| w.take_woken()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_post_then_a_wait_consumes_and_a_second_post_is_a_lost_wakeup() {
        let owned: OwnedWord<u32> = OwnedWord::default();
        let word = owned.word();
        assert_eq!(word.post(), Posted::Set);
        assert_eq!(
            word.post(),
            Posted::AlreadySet,
            "binary contract observable"
        );
        assert_eq!(word.wait(|| 7), Waited::Consumed);
        assert_eq!(word.state(), CLEAR);
        assert_eq!(word.post(), Posted::Set, "consumed: may be posted again");
    }

    #[test]
    fn a_parked_waiter_is_woken_by_the_post_with_its_waker() {
        let owned: OwnedWord<u32> = OwnedWord::default();
        let word = owned.word();
        assert_eq!(word.wait(|| 7), Waited::Parked);
        assert_eq!(word.wait(|| 8), Waited::Occupied, "one waiter per word");
        assert_eq!(word.post(), Posted::Woke(7));
        assert_eq!(word.state(), CLEAR, "the post went to the woken waiter");
        assert_eq!(word.unpark(), None);
    }

    #[test]
    fn a_post_from_another_process_is_handed_to_the_owner_to_resume() {
        let bank: SignalBank<u32> = SignalBank::new(2);
        let w = bank.word(1).unwrap();
        assert_eq!(w.wait(|| 5), Waited::Parked);
        let state = &bank.link_states()[1];
        assert_eq!(post_from_afar(state), PostedAfar::Ring);
        assert_eq!(
            post_from_afar(state),
            PostedAfar::AlreadySet,
            "binary contract"
        );
        assert_eq!(
            w.unpark(),
            None,
            "the wake came first: an abort leaves it to the owner"
        );
        assert_eq!(bank.take_woken(), vec![5]);
        assert_eq!(w.state(), CLEAR);
        assert_eq!(post_from_afar(state), PostedAfar::Set);
        assert_eq!(w.wait(|| 6), Waited::Consumed);
        assert!(bank.take_woken().is_empty());
    }

    #[test]
    fn unpark_releases_a_waiter_nobody_posts() {
        let owned: OwnedWord<u32> = OwnedWord::default();
        let word = owned.word();
        assert_eq!(word.wait(|| 3), Waited::Parked);
        assert_eq!(word.unpark(), Some(3));
        assert_eq!(word.post(), Posted::Set);
    }

    #[test]
    fn racing_posts_and_waits_pair_up_exactly() {
        // One poster, one waiter, many rounds: every wait is satisfied by exactly one
        // post, whether it parked or found the word set.
        let word: Arc<OwnedWord<std::sync::mpsc::Sender<()>>> = Arc::new(OwnedWord::default());
        let rounds = 20_000;
        let (ack_tx, ack_rx) = std::sync::mpsc::channel::<()>();
        let waiter = {
            let word = word.clone();
            std::thread::spawn(move || {
                for _ in 0..rounds {
                    let (tx, rx) = std::sync::mpsc::channel();
                    if word.word().wait(|| tx) == Waited::Parked {
                        rx.recv_timeout(std::time::Duration::from_secs(20))
                            .expect("a parked waiter is woken");
                    }
                    ack_tx.send(()).unwrap();
                }
            })
        };
        for _ in 0..rounds {
            match word.word().post() {
                Posted::Set => {}
                Posted::Woke(tx) => tx.send(()).unwrap(),
                Posted::AlreadySet => panic!("post before the previous one was consumed"),
            }
            ack_rx
                .recv_timeout(std::time::Duration::from_secs(20))
                .expect("the waiter consumed the post");
        }
        waiter.join().unwrap();
        assert_eq!(word.word().state(), CLEAR);
    }

    #[test]
    fn the_local_region_grows_without_moving_words() {
        let bank: SignalBank<u32> = SignalBank::new(10);
        assert_eq!(bank.len(), 10);
        assert!(bank.word(9).is_some());
        assert!(bank.word(10).is_none());
        bank.reserve_local(1);
        assert_eq!(bank.len(), 10 + 64);
        let before = bank.word(10).unwrap().state as *const AtomicU32;
        assert_eq!(bank.word(10).unwrap().post(), Posted::Set);
        bank.reserve_local(200);
        assert_eq!(bank.len(), 10 + 64 + 128 + 256);
        assert!(
            std::ptr::eq(before, bank.word(10).unwrap().state),
            "words never move"
        );
        assert_eq!(bank.word(10).unwrap().state(), SET);
        for i in 0..bank.len() {
            assert!(bank.word(i).is_some(), "word {i}");
        }
        assert!(bank.word(bank.len()).is_none());
    }
}
