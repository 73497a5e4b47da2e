//! What flows back to the ranks that connected to a local rank (its *subscribers*, see
//! the [module docs](super)): the subscription at the hello, Done epochs on a lease (the
//! Want frames that ask for them, on both sides), scratch announcements, and the answer
//! to an RDMA link's setup.

use super::{send, send_nonblocking, TcpLinks, LEASE};
use crate::error::DeviceError;
use crate::host::launch::Shared;
use crate::ir::{Buf, Rank};
use crate::transport::rdma::link::ConnectInfo;
use crate::transport::rdma::verbs::QpEndpoint;
use crate::transport::tcp::wire::{Frame, Target};
use crate::transport::tcp::TcpError;
use std::net::TcpStream;
use std::sync::atomic::Ordering;

/// A rank that connected to a local rank: the write side of its connection, and (once it
/// made an RDMA link) the endpoint of the queue pair this side made for it.
pub(super) struct Subscriber {
    pub(super) rank: Rank,
    pub(super) stream: TcpStream,
    pub(super) rdma: Option<QpEndpoint>,
    /// The last Done epoch it asked for (its lease).
    pub(super) until: u64,
}

impl TcpLinks {
    /// Rank `from` connected to local slot `slot` of the device behind `shared` (its hello
    /// was taken): keep `stream`, the connection's write side, as its subscription, and
    /// send on it what it may already wait for: every scratch size of the slot and the
    /// slot's Done epoch (see the module docs for why this and [`Self::publish_done`]
    /// never both miss).
    pub(crate) fn subscribe(
        &self,
        shared: &Shared,
        (slot, from): (usize, Rank),
        mut stream: TcpStream,
    ) -> Result<(), DeviceError> {
        let mut subscribers = self.subscribers[slot].lock();
        let scratch_len = |id| {
            let region = shared.memory.device_region(slot, Buf::Scratch, Some(id));
            region.ok().map(|r| r.len)
        };
        let mut frames = Vec::new();
        for (id, bytes) in (0..).map_while(|id| scratch_len(id).map(|b| (id, b))) {
            let frame = Frame::Scratch {
                id: id as u64,
                bytes: bytes as u64,
            };
            frames.extend_from_slice(&frame.encode());
        }
        let done = shared.fences[slot].done();
        frames.extend_from_slice(&Frame::Done { epoch: done }.encode());
        send_nonblocking(&mut stream, &frames, self.wait)
            .map_err(|e| self.send_error(self.local[slot], from, Some(e)))?;
        subscribers.push(Subscriber {
            rank: from,
            stream,
            rdma: None,
            until: 0,
        });
        Ok(())
    }

    /// Rank `from`, a subscriber of local slot `slot`, wants its Done epochs up to
    /// `until`: extend its lease and send it `done()`, the slot's epoch now (read under
    /// the list's lock, as [`Self::publish_done`] sends under it: see the module docs).
    pub(crate) fn wanted(&self, slot: usize, from: Rank, until: u64, done: impl Fn() -> u64) {
        let mut subscribers = self.subscribers[slot].lock();
        let Some(s) = subscribers.iter_mut().find(|s| s.rank == from) else {
            return;
        };
        s.until = s.until.max(until);
        let frame = Frame::Done { epoch: done() }.encode();
        if let Err(err) = send_nonblocking(&mut s.stream, &frame, self.wait) {
            tracing::debug!(%err, rank = from, "a subscriber was not told");
        }
    }

    /// Local slot `slot` submits a call whose fence needs TCP peer `to` to finish
    /// `needed`: ask for its epochs when the lease does not cover `needed` (waiting for
    /// the connection if a stream is sending on it), or renew it when half of it is used
    /// (skipped while the connection is busy: the next call renews).
    pub(crate) fn want(&self, slot: usize, to: Rank, needed: u64) -> Result<(), DeviceError> {
        let leased = &self.leased[slot][to];
        let have = leased.load(Ordering::Relaxed);
        if have >= needed.saturating_add(LEASE / 2) {
            return Ok(());
        }
        let from = self.local[slot];
        let must = have < needed;
        let mut conn = match must {
            true => self.out[slot][to].lock(),
            false => match self.out[slot][to].try_lock() {
                Some(conn) => conn,
                None => return Ok(()),
            },
        };
        let stream = conn
            .as_mut()
            .ok_or_else(|| self.send_error(from, to, None))?;
        let until = needed.saturating_add(LEASE);
        let frame = Frame::Want { until }.encode();
        send(stream, &frame, &[]).map_err(|e| self.send_error(from, to, Some(e)))?;
        leased.fetch_max(until, Ordering::Relaxed);
        Ok(())
    }

    /// Rank `from` opened an RDMA link to local slot `slot` (rank `to`) with `info`: make
    /// this side and answer on its subscription with the endpoint and the regions it may
    /// write. Under the slot's subscriber lock, so that a scratch allocated meanwhile is
    /// either among the regions or announced to it after (see [`Self::announce_scratch`]).
    pub(crate) fn rdma_opened(
        &self,
        shared: &Shared,
        (from, slot, to): (Rank, usize, Rank),
        info: &ConnectInfo,
    ) -> Result<(), DeviceError> {
        let rdma = self
            .rdma
            .as_ref()
            .filter(|r| r.reaches(from))
            .ok_or_else(|| {
                DeviceError::Tcp(TcpError::BadFrame {
                    from,
                    to,
                    what: "an RDMA link from a rank this job does not reach over RDMA".into(),
                })
            })?;
        let mut subscribers = self.subscribers[slot].lock();
        let subscriber = subscribers
            .iter_mut()
            .find(|s| s.rank == from)
            .ok_or_else(|| self.send_error(to, from, None))?;
        let answer = rdma.accept(shared, (from, slot, to), info)?;
        subscriber.rdma = Some(answer.endpoint);
        let bytes = answer.encode();
        let frame = Frame::Rdma {
            len: bytes.len() as u64,
        };
        let mut message = frame.encode().to_vec();
        message.extend_from_slice(&bytes);
        send_nonblocking(&mut subscriber.stream, &message, self.wait)
            .map_err(|e| self.send_error(to, from, Some(e)))
    }

    /// Send `frame` to the subscribers of local slot `slot` that `to` picks (see
    /// [`Self::subscribe`]). A subscriber that cannot be told is gone: the receiver
    /// reports it.
    fn tell_subscribers(&self, slot: usize, frame: Frame, to: impl Fn(&Subscriber) -> bool) {
        let bytes = frame.encode();
        for s in self.subscribers[slot].lock().iter_mut().filter(|s| to(s)) {
            if let Err(err) = send_nonblocking(&mut s.stream, &bytes, self.wait) {
                tracing::debug!(%err, rank = s.rank, "a subscriber was not told");
            }
        }
    }

    /// Tell the ranks that fence on local slot `slot` (its subscribers whose lease covers
    /// `epoch`) that it finished `epoch`, except those its call of `epoch` posted to over
    /// frames ([`Self::posted_in`]).
    ///
    /// Those need no Done: a Post frame of `epoch` says that its sender finished `epoch -
    /// 1` (the receiver moves its fence so, see `receiver::frames`), and a subscriber S
    /// that this slot posted to in `epoch` took that post before it ended `epoch`. S's next
    /// call, `epoch + 1`, fences on this slot with a lag of two (see [`super::early`]): it
    /// needs `epoch - 1`, which S has. For `epoch + 2` it needs `epoch`, which the posts of
    /// this slot's `epoch + 1` bring, or, when that call does not post to S, its Done.
    /// That holds because both sides agree that their frames are held: a rank reached
    /// over RDMA both ways is never skipped (the job's RDMA links are mutual).
    pub(crate) fn publish_done(&self, slot: usize, epoch: u64) {
        let told_by_posts =
            |rank: Rank| self.frames_from(rank) && self.posted_in(slot, rank) >= epoch;
        self.tell_subscribers(slot, Frame::Done { epoch }, |s| {
            s.until >= epoch && !told_by_posts(s.rank)
        });
    }

    /// Tell every local rank's subscribers that its scratch `id` has `bytes` (allocated
    /// before this is called). A rank that connects later is told by [`Self::subscribe`].
    /// A subscriber with an RDMA link learns the registered region first, in an Rdma
    /// frame, so the size never comes before the region.
    pub(crate) fn announce_scratch(
        &self,
        shared: &Shared,
        id: usize,
        bytes: usize,
    ) -> Result<(), DeviceError> {
        let frame = Frame::Scratch {
            id: id as u64,
            bytes: bytes as u64,
        }
        .encode();
        for slot in 0..self.local.len() {
            let mut subscribers = self.subscribers[slot].lock();
            let mut region = None;
            for s in subscribers.iter_mut() {
                let mut message = Vec::new();
                if let (Some(endpoint), Some(rdma)) = (s.rdma, self.rdma.as_ref()) {
                    let r = match region {
                        Some(r) => r,
                        None => {
                            *region.insert(rdma.region(shared, slot, Target::Scratch(id as u64))?)
                        }
                    };
                    let info = ConnectInfo {
                        endpoint,
                        regions: vec![r],
                    }
                    .encode();
                    let head = Frame::Rdma {
                        len: info.len() as u64,
                    };
                    message.extend_from_slice(&head.encode());
                    message.extend_from_slice(&info);
                }
                message.extend_from_slice(&frame);
                if let Err(err) = send_nonblocking(&mut s.stream, &message, self.wait) {
                    tracing::debug!(%err, rank = s.rank, "a subscriber was not told");
                }
            }
        }
        Ok(())
    }
}
