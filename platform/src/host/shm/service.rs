//! The doorbell service of a device over shared memory, and the polling of a call that
//! waits.

use super::ShmLinks;
use crate::host::launch::Shared;
use crate::transport::shm::futex;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How often the doorbell service looks at its peers without being rung.
pub(crate) const TICK: Duration = Duration::from_millis(50);

/// Looks without finding work before a waiting submitter goes to sleep.
const POLLS: usize = 256;

/// A submitting thread that will poll until its launches are done: while it lives, peers
/// skip the device's futex wake (the thread finds their changes itself). Made before the
/// launches start, so that a post that arrives while the thread still runs them wakes no
/// service thread either.
pub(crate) struct Poller<'a> {
    shared: &'a Arc<Shared>,
    links: &'a ShmLinks,
}

impl<'a> Poller<'a> {
    /// Mark the device as polled; `None` without shared-memory peers.
    pub(crate) fn start(shared: &'a Arc<Shared>) -> Option<Self> {
        let links = shared.shm.as_deref()?;
        links.own[0]
            .control()
            .polling
            .fetch_add(1, Ordering::SeqCst);
        Some(Poller { shared, links })
    }

    /// While `busy()`: take the streams peers woke and run them here, and the pool's
    /// queued jobs, yielding between empty looks ([`POLLS`] of them at most, then the
    /// caller sleeps as usual). A peer's post then reaches a waiting rank when its process
    /// is next scheduled, without a doorbell thread's wakeup in between: what a
    /// latency-bound call over processes costs most.
    pub(crate) fn poll_while(&self, mut busy: impl FnMut() -> bool) {
        let mut idle = 0;
        while busy() && idle < POLLS {
            if self.look() || self.shared.pool.run_one() {
                idle = 0;
            } else {
                idle += 1;
                std::thread::yield_now();
            }
        }
    }
}

impl Poller<'_> {
    /// One look: move the peers' fence proxies and run the streams peers woke; true when
    /// a stream ran. For a loop that also polls another transport (TCP, in a job across
    /// hosts), which must look here on every turn: while the poller lives, peers post
    /// without ringing, so nothing else would notice their posts.
    pub(crate) fn look(&self) -> bool {
        poll_once(self.shared, self.links)
    }
}

impl Drop for Poller<'_> {
    /// A peer that saw the flag did not ring: look once more after clearing it (the flag
    /// and the peers' changes are SeqCst, so either the peer saw it cleared and rang, or
    /// this look sees the change).
    fn drop(&mut self) {
        let polling = &self.links.own[0].control().polling;
        polling.fetch_sub(1, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        poll_once(self.shared, self.links);
    }
}

/// Move the peers' fence proxies and run the streams peers woke; true when a stream ran.
fn poll_once(shared: &Arc<Shared>, links: &ShmLinks) -> bool {
    refresh_fences(shared, links);
    let mut ran = false;
    for bank in &shared.banks {
        for (launch, stream) in bank.take_woken() {
            launch.wake_from_afar(stream);
            ran = true;
        }
    }
    ran
}

/// Move the local proxies of the peers' fences to the epochs they published.
pub(crate) fn refresh_fences(shared: &Shared, links: &ShmLinks) {
    for rank in links.peer_ranks() {
        let (Some(slot), done) = (shared.fence_slot(rank), links.peer_done(rank)) else {
            continue;
        };
        // Advancing takes the fence's lock: only when the peer moved.
        if shared.fences[slot].done() < done {
            shared.fences[slot].advance(done);
        }
    }
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
        if let Some((rank, pid, loss)) = links.lost_peer(check_pids).filter(|_| !stopped) {
            shared.stop(shared.config.lost(rank, Some(pid), loss), None);
            stopped = true;
        }
        drop(shared);
        futex::wait(links.own_bell(), seen, TICK);
    }
}
