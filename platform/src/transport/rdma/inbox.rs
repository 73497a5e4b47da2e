//! The receiving side of a device's RDMA links: receives kept posted for the peers'
//! immediates, and each immediate turned into a post of the link word it names.
//!
//! The data needs no receiver at all (the peer's NIC wrote it into the registered buffer);
//! only the posts do. A WRITE_WITH_IMM consumes one posted receive of its queue pair, so
//! each queue pair keeps [`Inbox::DEPTH`] of them, and every receive the inbox takes it
//! posts again before it hands the post on: a peer never finds the queue empty while the
//! number of its posts in flight stays under the depth (a program's posts to one peer
//! are bounded by its link words, far fewer).

use super::verbs::{Completion, QpId, Status, Verbs};
use super::{decode_imm, RdmaError};
use crate::ir::Rank;
use std::sync::Arc;
use std::time::Duration;

/// One post an immediate carried: link word `word` of this rank, from `peer`'s call
/// `epoch`, on queue pair `qp`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Posted {
    pub qp: QpId,
    pub peer: Rank,
    pub word: u64,
    pub epoch: u64,
}

/// The receiving side of one rank's links.
pub struct Inbox<V: Verbs + ?Sized> {
    verbs: Arc<V>,
    rank: Rank,
    /// The peer behind each queue pair this inbox serves.
    peers: Vec<(QpId, Rank)>,
    next_wr: u64,
    completions: Vec<Completion>,
}

impl<V: Verbs + ?Sized> Inbox<V> {
    /// Receives kept posted per queue pair.
    pub const DEPTH: usize = 64;

    /// The inbox of `rank` for the queue pairs `peers` (each with the peer it leads to),
    /// their receives posted.
    pub fn new(verbs: Arc<V>, rank: Rank, peers: Vec<(QpId, Rank)>) -> Result<Self, RdmaError> {
        let mut inbox = Inbox {
            verbs,
            rank,
            peers: Vec::with_capacity(peers.len()),
            next_wr: 0,
            completions: Vec::new(),
        };
        for (qp, peer) in peers {
            inbox.add_peer(qp, peer)?;
        }
        Ok(inbox)
    }

    /// Serve one more queue pair, leading to `peer`: its receives are posted before this
    /// returns, so the peer may post as soon as it learns the queue pair.
    /// Refused when the receive queue could overflow ([`Verbs::recv_capacity`]).
    pub fn add_peer(&mut self, qp: QpId, peer: Rank) -> Result<(), RdmaError> {
        let links = self.peers.len() + 1;
        let capacity = self.verbs.recv_capacity();
        if links.saturating_mul(Self::DEPTH) > capacity {
            return Err(RdmaError::TooManyLinks {
                port: self.verbs.port().clone(),
                links,
                depth: Self::DEPTH,
                capacity,
            });
        }
        self.peers.push((qp, peer));
        for _ in 0..Self::DEPTH {
            self.repost(qp)?;
        }
        Ok(())
    }

    fn peer_of(&self, qp: QpId) -> Option<Rank> {
        self.peers.iter().find(|(q, _)| *q == qp).map(|&(_, p)| p)
    }

    fn repost(&mut self, qp: QpId) -> Result<(), RdmaError> {
        self.next_wr += 1;
        let link = self.peer_of(qp).map(|peer| (self.rank, peer));
        self.verbs
            .post_recv(qp, self.next_wr)
            .map_err(|e| RdmaError::verbs(self.verbs.port(), link, "posting a receive", e))
    }

    /// Take the immediates that arrived: each reposts its receive and goes to `posted`,
    /// its epoch completed against `current(qp)` (the call of the rank its queue pair
    /// leads to); how many came. A failed receive is the error of its queue pair, naming
    /// the peer.
    pub fn take(
        &mut self,
        current: impl Fn(QpId) -> u64,
        mut posted: impl FnMut(Posted),
    ) -> Result<usize, RdmaError> {
        let mut completions = std::mem::take(&mut self.completions);
        completions.clear();
        let polled = self.verbs.poll_recv(&mut completions);
        let result = polled
            .map_err(|e| self.verbs_error("polling receive completions", e))
            .and_then(|()| {
                for c in &completions {
                    self.take_one(c, current(c.qp), &mut posted)?;
                }
                Ok(completions.len())
            });
        self.completions = completions;
        result
    }

    /// Ask for the next receive completion to make [`Verbs::recv_fd`] readable, taking
    /// the readiness it signalled: for an event loop that sleeps on the descriptor, which
    /// then calls [`Self::take`] (a completion that came before the arm is not announced).
    pub fn arm(&self) -> Result<(), RdmaError> {
        self.verbs
            .arm_recv()
            .map_err(|e| self.verbs_error("arming the receive queue", e))
    }

    /// As [`Self::take`], sleeping up to `wait` for an immediate when none is there: the
    /// receive queue's file descriptor wakes this thread, so an idle link holds no core
    /// (what an event loop over the descriptor, with the sockets, does as well).
    pub fn wait(
        &mut self,
        wait: Duration,
        current: impl Fn(QpId) -> u64,
        mut posted: impl FnMut(Posted),
    ) -> Result<usize, RdmaError> {
        self.arm()?;
        let n = self.take(&current, &mut posted)?;
        if n > 0 {
            return Ok(n);
        }
        self.sleep(wait)?;
        self.take(current, posted)
    }

    /// Sleep until the receive queue's descriptor is readable, `wait` at most.
    fn sleep(&self, wait: Duration) -> Result<(), RdmaError> {
        use rustix::event::{poll, PollFd, PollFlags};
        let fd = self.verbs.recv_fd();
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        let timeout = crate::transport::timespec(wait);
        match poll(&mut fds, Some(&timeout)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => Ok(()),
            Err(e) => {
                let source = super::VerbsError::Call {
                    call: "poll",
                    reason: std::io::Error::from(e).to_string(),
                };
                Err(self.verbs_error("waiting for the receive queue", source))
            }
        }
    }

    /// The error of a verbs call on the receive queue, which all links share.
    fn verbs_error(&self, what: &'static str, source: super::VerbsError) -> RdmaError {
        RdmaError::verbs(self.verbs.port(), None, what, source)
    }

    fn take_one(
        &mut self,
        c: &Completion,
        current: u64,
        posted: &mut impl FnMut(Posted),
    ) -> Result<(), RdmaError> {
        let peer = self.peer_of(c.qp).unwrap_or(self.rank);
        let failed = |status| RdmaError::QueuePair {
            port: self.verbs.port().clone(),
            rank: self.rank,
            peer,
            wr_id: c.wr_id,
            status,
        };
        match (c.status, c.imm) {
            (Status::Success, Some(imm)) => {
                self.repost(c.qp)?;
                let (word, epoch) = decode_imm(imm, current);
                posted(Posted {
                    qp: c.qp,
                    peer,
                    word,
                    epoch,
                });
                Ok(())
            }
            // A receive completes only for an immediate: one without is a peer that sent
            // what this protocol never sends.
            (Status::Success, None) => Err(failed(Status::Other(0))),
            (status, _) => Err(failed(status)),
        }
    }
}
