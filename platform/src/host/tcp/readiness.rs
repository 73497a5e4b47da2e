//! Which of a device's sockets have bytes to read: a level-triggered epoll set over the
//! listener and the accepted connections, that either of two threads asks.
//!
//! The receiver thread does not sleep on this set directly but on an outer event loop
//! ([`TcpLinks::poller`]) that holds the set's own descriptor (an epoll set is itself
//! readable while a member is). A submitting thread that waits for its call takes the
//! connections and *pauses* the receiver by clearing its interest in the set (one
//! `epoll_ctl`): the peers' frames then wake only the thread that takes them, not a
//! second one that would find them gone and compete for a core. One `epoll_wait` tells
//! the waiting thread which connections to read, where reading each would be a system
//! call per connection per look.
//!
//! [`TcpLinks::poller`]: super::TcpLinks::poller

use polling::{Event, PollMode, Poller};
use rustix::buffer::spare_capacity;
use rustix::event::epoll;
use rustix::fd::{AsFd, OwnedFd};
use std::io;
use std::time::Duration;

/// The key of the readiness set in the receiver's outer event loop.
const SET: usize = 0;
/// Readiness reports taken per look.
const BATCH: usize = 64;

/// What one look found: the keys of the ready sources. Kept by its thread across looks,
/// so that a look allocates nothing.
pub(crate) struct Ready {
    events: Vec<epoll::Event>,
}

impl Ready {
    pub(crate) fn new() -> Self {
        Ready {
            events: Vec::with_capacity(BATCH),
        }
    }

    /// The keys of the sources the last look found ready.
    pub(crate) fn keys(&self) -> impl Iterator<Item = usize> + '_ {
        self.events.iter().map(|e| e.data.u64() as usize)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}

/// A level-triggered epoll set, keyed by `usize`.
pub(crate) struct Readiness {
    set: OwnedFd,
}

impl Readiness {
    pub(crate) fn new() -> io::Result<Self> {
        let set = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        Ok(Readiness { set })
    }

    /// Report `source` under `key` while it has bytes to read (or has ended).
    pub(crate) fn add(&self, source: impl AsFd, key: usize) -> io::Result<()> {
        let flags = epoll::EventFlags::IN | epoll::EventFlags::RDHUP;
        epoll::add(
            &self.set,
            source,
            epoll::EventData::new_u64(key as u64),
            flags,
        )?;
        Ok(())
    }

    /// Stop reporting `source`.
    pub(crate) fn delete(&self, source: impl AsFd) {
        let _ = epoll::delete(&self.set, source);
    }

    /// Look which sources are ready, waiting up to `wait` for one (zero: just look);
    /// `found` holds them afterwards.
    pub(crate) fn ready(&self, found: &mut Ready, wait: Duration) -> io::Result<()> {
        found.events.clear();
        let timeout = crate::transport::timespec(wait);
        match epoll::wait(&self.set, spare_capacity(&mut found.events), Some(&timeout)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Put the set into the receiver's outer event loop `outer`.
    pub(crate) fn watch_from(&self, outer: &Poller) -> io::Result<()> {
        // SAFETY: the set lives in the same `TcpLinks` as `outer` and is deleted from it
        // before it is dropped (`TcpLinks`'s drop).
        unsafe { outer.add_with_mode(&self.set, Event::readable(SET), PollMode::Level) }
    }

    /// Take the set out of `outer` (before the set is dropped).
    pub(crate) fn unwatch_from(&self, outer: &Poller) {
        let _ = outer.delete(&self.set);
    }

    /// The receiver sleeping on `outer` is not woken by this set's readiness until
    /// [`Self::resume`] (a submitting thread takes the frames itself).
    pub(crate) fn pause(&self, outer: &Poller) {
        let _ = outer.modify_with_mode(&self.set, Event::none(SET), PollMode::Level);
    }

    /// The receiver is woken again (at once, if a source is ready meanwhile).
    pub(crate) fn resume(&self, outer: &Poller) {
        // Fails only on a closed or exhausted event loop; then the receiver is gone too
        // and the device's calls end at their timeout, which names what they waited for.
        if let Err(err) = outer.modify_with_mode(&self.set, Event::readable(SET), PollMode::Level) {
            tracing::error!(%err, "the TCP receiver could not be woken again");
        }
    }
}
