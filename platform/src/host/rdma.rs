//! The host device over RDMA: the data and posts of its TCP peers that the job reaches
//! over RDMA ([`TcpJob::rdma`]) go through queue pairs, and everything else stays on the
//! TCP connection (NCCL's net_ib keeps a socket beside its queue pairs the same way).
//!
//! A link is made on the TCP connection the first compile that needs it opened
//! ([`TcpLinks::ensure`]), after the hello proved the job's secret:
//!
//! 1. the opener creates a queue pair and sends its endpoint in an Rdma frame;
//! 2. the receiver creates its own, connects it to the opener's, posts its receives (the
//!    [`Inbox`]), registers its CCL buffers and scratch (once per device), and answers on
//!    the connection's return direction with its endpoint and those regions;
//! 3. the opener connects its queue pair to that endpoint and makes the [`RdmaLink`];
//!    the compile that waited for it goes on.
//!
//! A scratch allocation made later is registered and announced to every RDMA subscriber
//! in an Rdma frame *before* its Scratch frame, so an opener that learned the size knows
//! the region. The receiver thread sleeps on the inbox's descriptor beside the sockets,
//! so an idle device holds no core; each immediate is a post, checked and applied as a
//! Post frame is.
//!
//! Sources: the device's CCL buffers and scratch are registered and written from in
//! place; anything else (a user's buffer, the temporary of a reduction) is staged
//! through a registered bounce buffer per link ([`RdmaLink::with_bounce`]).
//!
//! [`TcpJob::rdma`]: crate::transport::tcp::TcpJob::rdma
//! [`TcpLinks::ensure`]: super::tcp::TcpLinks::ensure

use crate::device::DeviceConfig;
use crate::error::{AbortCause, DeviceError};
use crate::host::launch::Shared;
use crate::ir::{Buf, Rank};
use crate::transport::put::{Hop, PutWire, Target};
use crate::transport::rdma::inbox::{Inbox, Posted};
use crate::transport::rdma::link::{ConnectInfo, RdmaLink};
use crate::transport::rdma::verbs::{QpId, Registered};
use crate::transport::rdma::{RdmaError, RdmaJob, RemoteRegion, Verbs};
use parking_lot::{Condvar, Mutex};
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

/// Bytes of each link's bounce buffer: large enough that a staged hop is a few writes,
/// small enough that a link per peer costs little.
const BOUNCE_BYTES: usize = 1 << 20;

type Link = RdmaLink<dyn Verbs>;
/// A link as the receiver names it: (from rank, local slot, to rank).
type LinkEnds = (Rank, usize, Rank);

/// Links by (local slot, peer): the queue pairs made towards peers that have not
/// answered yet, and the links made.
#[derive(Default)]
struct Pending {
    opened: Vec<(usize, Rank, QpId)>,
    made: Vec<(usize, Rank)>,
    /// What stopped the device: no answer is waited for after it.
    stopped: Option<AbortCause>,
}

/// The RDMA side of a host device.
pub(crate) struct RdmaLinks {
    /// The port's verbs (`job.verbs`) and the peers reached over RDMA.
    job: RdmaJob,
    local: Vec<Rank>,
    /// Per local slot, per rank: the link from the slot to the rank, once its peer
    /// answered.
    out: Vec<Vec<Mutex<Option<Link>>>>,
    /// Per local slot, per rank: regions the peer announced after the link was made (a
    /// scratch allocation), which the link takes before its next use. The receiver
    /// thread leaves them here rather than wait for a link a stream is sending on.
    announced: Vec<Vec<Mutex<Vec<RemoteRegion>>>>,
    /// The links asked for and those made, which compiles wait for.
    pending: Mutex<Pending>,
    answered: Condvar,
    /// The receiving side of every queue pair peers connected to this device's ranks.
    inbox: Mutex<Inbox<dyn Verbs>>,
    /// Per incoming queue pair: the link it carries, as (from, local slot, to).
    incoming: Mutex<Vec<(QpId, LinkEnds)>>,
    /// This device's registered buffers: (local slot, target, region).
    registered: Mutex<Vec<(usize, Target, Registered)>>,
    wait: Duration,
}

impl RdmaLinks {
    pub(crate) fn new(config: &DeviceConfig, job: &RdmaJob) -> Result<Self, DeviceError> {
        let verbs = job.verbs.clone();
        let first = config.local_ranks.first().copied().unwrap_or(0);
        let inbox = Inbox::new(verbs.clone(), first, Vec::new()).map_err(DeviceError::from)?;
        let local = config.local_ranks.len();
        Ok(RdmaLinks {
            job: job.clone(),
            local: config.local_ranks.clone(),
            out: (0..local)
                .map(|_| (0..config.ranks).map(|_| Mutex::new(None)).collect())
                .collect(),
            announced: (0..local)
                .map(|_| (0..config.ranks).map(|_| Mutex::default()).collect())
                .collect(),
            pending: Mutex::default(),
            answered: Condvar::new(),
            inbox: Mutex::new(inbox),
            incoming: Mutex::new(Vec::new()),
            registered: Mutex::new(Vec::new()),
            wait: config.exec_timeout,
        })
    }

    /// True when `rank`'s data and posts go over RDMA.
    pub(crate) fn reaches(&self, rank: Rank) -> bool {
        self.job.reaches(rank)
    }

    /// Ask for the next immediate to make [`Self::recv_fd`] readable.
    pub(crate) fn arm(&self) -> Result<(), DeviceError> {
        self.inbox.lock().arm().map_err(DeviceError::from)
    }

    /// The descriptor that turns readable when an immediate arrives (once armed).
    pub(crate) fn recv_fd(&self) -> BorrowedFd<'_> {
        self.job.verbs.recv_fd()
    }

    /// Local slot `slot`'s `target`, registered (once) with the device.
    fn register(
        &self,
        shared: &Shared,
        slot: usize,
        target: Target,
    ) -> Result<Registered, DeviceError> {
        let mut registered = self.registered.lock();
        if let Some(&(_, _, r)) = registered
            .iter()
            .find(|(s, t, _)| *s == slot && *t == target)
        {
            return Ok(r);
        }
        let (buf, scratch) = match target {
            Target::CclIn => (Buf::CclIn, None),
            Target::CclOut => (Buf::CclOut, None),
            Target::Scratch(id) => (Buf::Scratch, Some(id as usize)),
        };
        let rank = self.local[slot];
        let region = shared
            .memory
            .device_region(slot, buf, scratch)
            .map_err(|_| {
                DeviceError::from(RdmaError::UnknownTarget {
                    rank,
                    peer: rank,
                    target,
                })
            })?;
        // SAFETY: CCL buffers and scratch live as long as the device's memory, which
        // outlives these links (they are dropped with the device's shared state).
        let r = unsafe { self.job.verbs.register(region.ptr, region.len) }.map_err(|e| {
            DeviceError::from(RdmaError::verbs(
                self.job.verbs.port(),
                Some((rank, rank)),
                "registering a buffer",
                e,
            ))
        })?;
        registered.push((slot, target, r));
        Ok(r)
    }

    /// What a peer may write of local slot `slot`: its CCL buffers and every scratch
    /// allocated so far, registered.
    fn regions_of(&self, shared: &Shared, slot: usize) -> Result<Vec<RemoteRegion>, DeviceError> {
        let scratch = (0..shared.memory.scratch_sets() as u64).map(Target::Scratch);
        [Target::CclIn, Target::CclOut]
            .into_iter()
            .chain(scratch)
            .map(|target| self.region(shared, slot, target))
            .collect()
    }

    /// Local slot `slot`'s `target`, registered, as the region a peer is told.
    pub(crate) fn region(
        &self,
        shared: &Shared,
        slot: usize,
        target: Target,
    ) -> Result<RemoteRegion, DeviceError> {
        let r = self.register(shared, slot, target)?;
        Ok(RemoteRegion {
            target,
            addr: r.addr,
            len: r.len,
            rkey: r.rkey,
        })
    }

    /// Step 1 (the opener): a queue pair for the link from local slot `slot` to `to`,
    /// and the connect info to send it with.
    pub(crate) fn open(&self, slot: usize, to: Rank) -> Result<ConnectInfo, DeviceError> {
        let from = self.local[slot];
        let (qp, endpoint) = self.job.verbs.create_qp().map_err(|e| {
            let port = self.job.verbs.port();
            DeviceError::from(RdmaError::verbs(
                port,
                Some((from, to)),
                "creating a queue pair",
                e,
            ))
        })?;
        self.pending.lock().opened.push((slot, to, qp));
        Ok(ConnectInfo {
            endpoint,
            regions: Vec::new(),
        })
    }

    /// Step 2 (the receiver): rank `from` opened a link to local slot `slot` (rank `to`)
    /// with `info`; make and connect this side's queue pair, post its receives, and
    /// return what to answer.
    pub(crate) fn accept(
        &self,
        shared: &Shared,
        (from, slot, to): LinkEnds,
        info: &ConnectInfo,
    ) -> Result<ConnectInfo, DeviceError> {
        let failed = |what| {
            move |e| {
                let port = self.job.verbs.port();
                DeviceError::from(RdmaError::verbs(port, Some((to, from)), what, e))
            }
        };
        let regions = self.regions_of(shared, slot)?;
        let (qp, endpoint) = self
            .job
            .verbs
            .create_qp()
            .map_err(failed("creating a queue pair"))?;
        self.job
            .verbs
            .connect(qp, info.endpoint)
            .map_err(failed("connecting a queue pair"))?;
        self.incoming.lock().push((qp, (from, slot, to)));
        self.inbox
            .lock()
            .add_peer(qp, from)
            .map_err(DeviceError::from)?;
        Ok(ConnectInfo { endpoint, regions })
    }

    /// Step 3 (the opener): peer `peer` answered local slot `slot`'s link with `info`:
    /// connect and make the link; on a link already made, `info` adds regions (taken at
    /// the link's next use: see the `announced` field).
    pub(crate) fn answered(
        &self,
        shared: &Shared,
        (peer, slot): (Rank, usize),
        info: ConnectInfo,
    ) -> Result<(), DeviceError> {
        let qp = {
            let mut pending = self.pending.lock();
            if pending.made.contains(&(slot, peer)) {
                self.announced[slot][peer].lock().extend(info.regions);
                return Ok(());
            }
            let opened = &mut pending.opened;
            let at = opened.iter().position(|&(s, p, _)| s == slot && p == peer);
            let Some(at) = at else {
                return Err(self.unasked(slot, peer));
            };
            opened.swap_remove(at).2
        };
        // Only the receiver takes a connection's frames, one at a time: no second answer
        // for this link races this one.
        *self.out[slot][peer].lock() = Some(self.link(shared, (slot, peer), qp, info)?);
        self.pending.lock().made.push((slot, peer));
        self.answered.notify_all();
        Ok(())
    }

    fn unasked(&self, slot: usize, peer: Rank) -> DeviceError {
        let rank = self.local[slot];
        DeviceError::from(RdmaError::verbs(
            self.job.verbs.port(),
            Some((rank, peer)),
            "taking a peer's connect info",
            crate::transport::rdma::VerbsError::Call {
                call: "answer",
                reason: "no queue pair was opened towards it".into(),
            },
        ))
    }

    fn link(
        &self,
        shared: &Shared,
        (slot, peer): (usize, Rank),
        qp: QpId,
        info: ConnectInfo,
    ) -> Result<Link, DeviceError> {
        let rank = self.local[slot];
        let failed = |what| {
            move |e| {
                let port = self.job.verbs.port();
                DeviceError::from(RdmaError::verbs(port, Some((rank, peer)), what, e))
            }
        };
        self.job
            .verbs
            .connect(qp, info.endpoint)
            .map_err(failed("connecting a queue pair"))?;
        let local = (0..self.local.len())
            .flat_map(|s| [(s, Target::CclIn), (s, Target::CclOut)])
            .map(|(s, t)| self.register(shared, s, t))
            .collect::<Result<Vec<_>, _>>()?;
        let mut bounce = vec![0u8; BOUNCE_BYTES].into_boxed_slice();
        // SAFETY: the bounce buffer moves into the link (a box does not move its heap
        // memory) and lives as long as it; nothing but this link's own writes read it.
        let region = unsafe { self.job.verbs.register(bounce.as_mut_ptr(), bounce.len()) }
            .map_err(failed("registering a bounce buffer"))?;
        let link = RdmaLink::new(
            self.job.verbs.clone(),
            qp,
            (rank, peer),
            info.regions,
            local,
            self.wait,
        );
        Ok(link.with_bounce(bounce, region))
    }

    /// Wait (at most the execution timeout) until the link from local slot `slot` to
    /// `to` is made: its peer's answer comes through the TCP receiver.
    pub(crate) fn wait_link(&self, slot: usize, to: Rank) -> Result<(), DeviceError> {
        let deadline = Instant::now() + self.wait;
        let mut pending = self.pending.lock();
        while !pending.made.contains(&(slot, to)) {
            if let Some(cause) = &pending.stopped {
                return Err(DeviceError::Aborted {
                    rank: self.local[slot],
                    cause: cause.clone(),
                });
            }
            if self.answered.wait_until(&mut pending, deadline).timed_out() {
                return Err(DeviceError::from(RdmaError::NoAnswer {
                    port: self.job.verbs.port().clone(),
                    rank: self.local[slot],
                    peer: to,
                    waited: self.wait,
                }));
            }
        }
        Ok(())
    }

    fn stray(&self, qp: QpId) -> DeviceError {
        DeviceError::from(RdmaError::Device {
            port: self.job.verbs.port().clone(),
            what: "taking an immediate",
            source: crate::transport::rdma::VerbsError::Call {
                call: "poll_recv",
                reason: format!(
                    "queue pair {qp} is none of this device's links: is the NIC shared with \
                     another communicator? Give each its own (Config::rdma_nic)"
                ),
            },
        })
    }

    /// The device stopped for `cause`: a compile waiting for a peer's answer stops too.
    pub(crate) fn release(&self, cause: &AbortCause) {
        self.pending
            .lock()
            .stopped
            .get_or_insert_with(|| cause.clone());
        self.answered.notify_all();
    }

    /// Run `send` on the link from local slot `slot` to `to`.
    fn on_link(
        &self,
        slot: usize,
        to: Rank,
        send: impl FnOnce(&mut Link) -> Result<(), RdmaError>,
    ) -> Result<(), DeviceError> {
        let mut link = self.out[slot][to].lock();
        let link = link.as_mut().ok_or_else(|| {
            DeviceError::from(RdmaError::UnknownTarget {
                rank: self.local[slot],
                peer: to,
                target: Target::CclIn,
            })
        })?;
        let announced = std::mem::take(&mut *self.announced[slot][to].lock());
        if !announced.is_empty() {
            link.add_regions(announced);
        }
        send(link).map_err(DeviceError::from)
    }

    /// [`PutWire::put`] on the link from local slot `slot` to `to`.
    pub(crate) fn put(&self, slot: usize, to: Rank, hop: Hop<'_>) -> Result<(), DeviceError> {
        self.on_link(slot, to, |link| link.put(hop))
    }

    /// [`PutWire::post`] on the link from local slot `slot` to `to`.
    pub(crate) fn post(
        &self,
        slot: usize,
        to: Rank,
        (word, epoch): (u64, u64),
    ) -> Result<(), DeviceError> {
        self.on_link(slot, to, |link| link.post(word, epoch))
    }

    /// Take the immediates that arrived, each as the post of its link, then ask the
    /// descriptor to wake the receiver for the next (arming before the last look, so
    /// none is missed). `post` applies one; its error stops the taking.
    pub(crate) fn drain(
        &self,
        shared: &Shared,
        mut post: impl FnMut(LinkEnds, &Posted) -> Result<(), DeviceError>,
    ) -> Result<usize, DeviceError> {
        // Held while the inbox is: `accept` takes the two one after the other, never
        // both, so the order cannot deadlock; and no copy is made per wakeup.
        let incoming = self.incoming.lock();
        let link_of = |qp: QpId| incoming.iter().find(|(q, _)| *q == qp).map(|&(_, l)| l);
        // The epoch of a post completes near the call its receiving rank is in.
        let current = |qp| link_of(qp).map_or(0, |(_, slot, _)| shared.fences[slot].ended() + 1);
        let mut inbox = self.inbox.lock();
        inbox.arm().map_err(DeviceError::from)?;
        let mut failed = None;
        let taken = inbox.take(current, |p| {
            if failed.is_some() {
                return;
            }
            failed = match link_of(p.qp) {
                Some(link) => post(link, &p).err(),
                // The NIC's receive queue holds only this device's queue pairs, unless
                // its verbs are shared with another communicator.
                None => Some(self.stray(p.qp)),
            };
        });
        match (taken, failed) {
            (_, Some(err)) => Err(err),
            (taken, None) => taken.map_err(DeviceError::from),
        }
    }
}
