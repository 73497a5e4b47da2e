//! The host device over TCP: the connections of its ranks to the peers it reaches over
//! sockets, and what travels on them.
//!
//! With [`DeviceConfig::tcp`] set, a local rank opens a connection to a rank the job lists
//! there (a *TCP peer*) when it first compiles a program that fences on it or sends to it,
//! and the device's **receiver** thread accepts the connections peers open to it
//! ([`receiver`]). A task that writes a TCP peer's
//! CclIn, CclOut or scratch sends a Write frame from the stream's thread, then the next
//! task goes on (the bytes are in the kernel's socket buffer, so the source may be
//! reused); a Post to a TCP peer sends a Post frame on the same connection, so it arrives
//! after the data it announces. The receiver checks each Write against the target
//! buffer's bounds, reads the bytes straight into it, and posts signals, moves fence
//! proxies and records peers' scratch sizes as frames come.
//!
//! The programs are the analyzer's, over put-only links: a task never reads a TCP peer's
//! buffer (compile refuses it), and the order of every byte is proved by Posts and Waits.
//!
//! ## Lazy connections, and what flows back on them
//!
//! Connections are made lazily, from the resource requests (NCCL's choice for its data
//! links): compiling a program connects its rank to every TCP peer in its fence set and
//! every TCP peer it writes or posts to, once. A job whose executors talk to few peers
//! opens few sockets; a peer that cannot be reached is reported by the first compile
//! that needs it (naming both ranks and the address), not at init.
//!
//! Data and posts travel only on the connections a rank opened. The other direction of
//! each connection carries what the *opener* needs from the rank it connected to: that
//! rank's Done epochs (the fence), its scratch sizes, its failure and its Close.
//!
//! Done epochs go only to the ranks that fence on the sender *now*, on a **lease**: a
//! rank A that fences on a TCP peer B asks for B's epochs with a Want frame, which names
//! the last epoch it wants (`until`, [`LEASE`] calls ahead); B sends each Done up to it,
//! and its current one at once. A renews the lease from the submitting thread when it
//! submits a call whose fence needs B and half the lease is used, so a steady job sends
//! one Want per `LEASE / 2` calls and each rank's Done goes to its fence peers of the
//! moment, not to every rank that ever connected to it (under `oxccl perf --procs 8`,
//! the harness's barriers connect every pair: 7 Done frames per call before, the
//! algorithm's 1 to 3 after). A fence that is not mutual (A fences on B, B never on A)
//! gets its epochs the same way, and a lapsed lease costs one round trip, never a hang:
//! a call whose fence needs an epoch past the lease asks before it waits.
//!
//! Posts stand in for most Done frames: a Post frame of epoch `e` tells its receiver that
//! the sender finished `e - 1` (its fence moves so), and a call that posted to a
//! subscriber sends it no Done ([`TcpLinks::publish_done`] says why that is enough). A
//! call of recursive doubling on 8 ranks thus sends 3 frames per rank, not 6. And a rank
//! fences on a TCP peer one call further back, because a peer's frames of the call after
//! this rank's current one are held until it ends ([`early`]).
//!
//! - When B takes A's hello, it registers the connection's write side as A's
//!   *subscription* and sends, on it, its scratch sizes and its current Done epoch.
//! - B sends every new scratch size to its subscribers, and each Done epoch to those
//!   whose lease covers it; a Want from A extends A's lease and sends B's current epoch.
//!
//! Each step holds the slot's subscriber list, and an epoch or a scratch set is recorded
//! before it is sent, so whichever comes second sends the newest (a repeated epoch or
//! size is harmless: epochs are taken as a maximum, sizes are the same).
//!
//! [`DeviceConfig::tcp`]: crate::device::DeviceConfig::tcp

pub(crate) mod early;
mod readiness;
pub(crate) mod receiver;
mod subscribers;

use subscribers::Subscriber;

use crate::device::DeviceConfig;
use crate::error::{AbortCause, DeviceError, PeerLoss};
use crate::host::launch::Shared;
use crate::host::rdma::RdmaLinks;
use crate::ir::Rank;
use crate::transport::put::{Hop, PutWire};
use crate::transport::tcp::wire::{Frame, Hello, Target};
use crate::transport::tcp::{
    connect, keep_alive, send, send_nonblocking, Framed, TcpError, TcpJob,
};
use parking_lot::{Condvar, Mutex};
use std::io::Read;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The answer to a hello that was taken.
pub(crate) const ACCEPTED: u8 = 0xA5;
/// The answer to a hello whose shape (rank count, CCL buffer size, signal words) differs.
pub(crate) const WRONG_SHAPE: u8 = 0x5A;

/// Calls ahead of the one that asks that a Want covers (see the module docs).
pub(crate) const LEASE: u64 = 64;

/// How long a failure announcement may wait for a connection a stream is sending on.
const ANNOUNCE_WAIT: Duration = Duration::from_millis(200);

/// The TCP side of a host device.
pub(crate) struct TcpLinks {
    pub job: TcpJob,
    /// The device's ranks, by local slot.
    local: Vec<Rank>,
    ranks: usize,
    ccl_bytes: usize,
    link_words: usize,
    /// Per local slot, per communicator rank: the connection this rank sends on, opened
    /// by the first compile that needs it.
    out: Vec<Vec<Mutex<Option<TcpStream>>>>,
    /// Per local slot, per communicator rank: the last Done epoch of that rank this slot
    /// asked for (its lease on the peer's epochs).
    leased: Vec<Vec<AtomicU64>>,
    /// Per local slot, per communicator rank: the last epoch this slot sent that rank a
    /// Post frame in (see [`Self::publish_done`]).
    posted: Vec<Vec<AtomicU64>>,
    /// Per local slot: the ranks that connected to it, each with the write side of its
    /// connection (its subscription to the slot's Done epochs and scratch sizes; see
    /// [`Self::subscribe`]). Non-blocking, as the receiver's sockets are. One lock per
    /// slot, so a Done epoch costs one lock and a send per subscriber, not a lock per
    /// rank of the job.
    subscribers: Vec<Mutex<Vec<Subscriber>>>,
    /// Per communicator rank: the scratch sizes it announced, by scratch id.
    scratch: Mutex<Vec<Vec<Option<u64>>>>,
    scratch_changed: Condvar,
    /// Connections accepted, as (from, to) pairs.
    accepted: Mutex<Vec<(Rank, Rank)>>,
    /// Set when the device goes away: the receiver ends, ends of streams are no failures.
    pub closing: AtomicBool,
    /// The peers whose data and posts go over RDMA (see [`crate::host::rdma`]).
    pub rdma: Option<RdmaLinks>,
    /// The receiver's event loop: it holds [`Self::ready`] and is notified when the
    /// device closes.
    pub poller: polling::Poller,
    /// Which of the listener and the accepted connections have bytes to read.
    pub ready: readiness::Readiness,
    /// The listener and connections, set when the receiver starts.
    pub rx: Mutex<Option<receiver::Receiver>>,
    /// Frames of the call after a local rank's current one, held until it ends.
    pub early: early::Early,
    wait: Duration,
}

fn setup(what: &'static str) -> impl FnOnce(std::io::Error) -> DeviceError {
    move |e| {
        DeviceError::Tcp(TcpError::Setup {
            what,
            source: Arc::new(e),
        })
    }
}

impl TcpLinks {
    /// The TCP side of a device of `config` (nothing is connected yet: see
    /// [`Self::ensure`]).
    pub(crate) fn new(
        config: &DeviceConfig,
        job: &TcpJob,
        link_words: usize,
    ) -> Result<Self, DeviceError> {
        let ranks = config.ranks;
        let local = config.local_ranks.len();
        Ok(TcpLinks {
            job: job.clone(),
            local: config.local_ranks.clone(),
            ranks,
            ccl_bytes: config.ccl_bytes,
            link_words,
            out: (0..local)
                .map(|_| (0..ranks).map(|_| Mutex::new(None)).collect())
                .collect(),
            leased: (0..local)
                .map(|_| (0..ranks).map(|_| AtomicU64::new(0)).collect())
                .collect(),
            posted: (0..local)
                .map(|_| (0..ranks).map(|_| AtomicU64::new(0)).collect())
                .collect(),
            subscribers: (0..local).map(|_| Mutex::new(Vec::new())).collect(),
            rdma: match &job.rdma {
                Some(rdma) => Some(RdmaLinks::new(config, rdma)?),
                None => None,
            },
            scratch: Mutex::new(vec![Vec::new(); ranks]),
            scratch_changed: Condvar::new(),
            accepted: Mutex::new(Vec::new()),
            closing: AtomicBool::new(false),
            poller: polling::Poller::new().map_err(setup("event loop"))?,
            ready: readiness::Readiness::new().map_err(setup("event loop"))?,
            rx: Mutex::new(None),
            early: early::Early::new(local),
            wait: config.exec_timeout,
        })
    }

    /// True when `rank`'s writes and posts come as frames on its connections (over TCP,
    /// not RDMA): they can be held (see [`early`]), so this device's ranks fence on it
    /// with a lag of two.
    pub(crate) fn frames_from(&self, rank: Rank) -> bool {
        self.reaches(rank) && !self.rdma.as_ref().is_some_and(|r| r.reaches(rank))
    }

    /// Local slot `slot` finished `epoch`: land the frames held for `epoch + 1` (see
    /// [`early`]). A held post that is refused stops the device, as it would have when it
    /// came.
    pub(crate) fn finished(&self, shared: &Shared, slot: usize, epoch: u64) {
        let to = self.local[slot];
        for frame in self.early.finished(slot, epoch) {
            let early::HeldFrame::Post { from, word, epoch } = frame else {
                continue;
            };
            if let Err(err) = receiver::post(shared, (from, slot, to), word, epoch) {
                tracing::error!(%err, "a TCP peer's post, held one operation, was refused");
                let cause = AbortCause::PeerFailed {
                    rank: from,
                    error: Arc::new(DeviceError::Tcp(err)),
                };
                shared.stop(cause, None);
            }
        }
    }

    /// True when `rank` is reached over TCP.
    pub(crate) fn reaches(&self, rank: Rank) -> bool {
        self.job.reaches(rank)
    }

    /// The hello rank `from` (local) sends to `to`.
    fn hello(&self, from: Rank, to: Rank) -> Hello {
        Hello {
            secret: self.job.secret,
            from: from as u32,
            to: to as u32,
            ranks: self.ranks as u32,
            ccl_bytes: self.ccl_bytes as u64,
            link_words: self.link_words as u64,
        }
    }

    /// Whether a hello's shape is this device's.
    pub(crate) fn same_shape(&self, hello: &Hello) -> bool {
        hello.ranks as usize == self.ranks
            && hello.ccl_bytes == self.ccl_bytes as u64
            && hello.link_words == self.link_words as u64
    }

    /// Connect local slot `slot` to TCP peer `to` unless it is connected: open the
    /// connection, then hand its other direction to the receiver (`to`'s Done epochs,
    /// scratch sizes, failure and Close come back on it). Called by compile, for the ranks
    /// a program fences on or sends to; a no-op after the first time.
    ///
    /// A peer reached over RDMA gets its link made on the new connection as well (see
    /// [`crate::host::rdma`]); this returns once it is.
    pub(crate) fn ensure(&self, slot: usize, to: Rank) -> Result<(), DeviceError> {
        let from = self.local[slot];
        let rdma = self.rdma.as_ref().filter(|r| r.reaches(to));
        let back = {
            let mut out = self.out[slot][to].lock();
            match (out.as_mut(), rdma) {
                (Some(_), None) => return Ok(()),
                (Some(_), Some(rdma)) => {
                    drop(out);
                    return rdma.wait_link(slot, to);
                }
                (None, _) => {}
            }
            let mut stream = self.open(from, to, Instant::now() + self.wait)?;
            let back = stream.try_clone().map_err(setup("socket"))?;
            if let Some(rdma) = rdma {
                let info = rdma.open(slot, to)?.encode();
                let frame = Frame::Rdma {
                    len: info.len() as u64,
                };
                send(&mut stream, &frame.encode(), &info)
                    .map_err(|e| self.send_error(from, to, Some(e)))?;
            }
            *out = Some(stream);
            back
        };
        receiver::adopt(self, back, (to, slot, from)).map_err(setup("event loop"))?;
        match rdma {
            Some(rdma) => rdma.wait_link(slot, to),
            None => Ok(()),
        }
    }

    /// The TCP peers local slot `slot` has connected to, ascending.
    #[cfg(test)]
    pub(crate) fn connected(&self, slot: usize) -> Vec<Rank> {
        (0..self.ranks)
            .filter(|&to| self.out[slot][to].lock().is_some())
            .collect()
    }

    fn open(&self, from: Rank, to: Rank, deadline: Instant) -> Result<TcpStream, DeviceError> {
        let addr = self.job.peers[to].expect("a TCP peer has an address");
        let failed = |e: std::io::Error| {
            DeviceError::Tcp(TcpError::Connect {
                from,
                to,
                addr,
                waited: self.wait,
                source: Arc::new(e),
            })
        };
        let mut stream = connect(addr, deadline).map_err(failed)?;
        stream.set_nodelay(true).map_err(setup("socket options"))?;
        keep_alive(&stream).map_err(setup("TCP keepalive"))?;
        let left = deadline.saturating_duration_since(Instant::now());
        stream
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .map_err(setup("socket options"))?;
        send(&mut stream, &self.hello(from, to).encode(), &[]).map_err(failed)?;
        let mut answer = [0u8; 1];
        stream.read_exact(&mut answer).map_err(failed)?;
        let refused = |reason| {
            DeviceError::Tcp(TcpError::Refused {
                from,
                to,
                addr,
                reason,
            })
        };
        match answer[0] {
            ACCEPTED => {}
            WRONG_SHAPE => {
                return Err(refused(
                    "its rank count, CCL buffer size or link channels differ from this rank's",
                ))
            }
            _ => return Err(refused("it did not answer as oxccl does")),
        }
        // A send blocks at most this long on a peer that stopped reading.
        stream
            .set_write_timeout(Some(self.wait))
            .map_err(setup("socket options"))?;
        Ok(stream)
    }

    /// The receiver took the connection from `from` to local rank `to`.
    pub(crate) fn accepted(&self, from: Rank, to: Rank) -> bool {
        let mut accepted = self.accepted.lock();
        if accepted.contains(&(from, to)) {
            return false;
        }
        accepted.push((from, to));
        true
    }

    fn send_error(&self, from: Rank, to: Rank, e: Option<std::io::Error>) -> DeviceError {
        let e = e.unwrap_or_else(|| std::io::ErrorKind::NotConnected.into());
        DeviceError::Tcp(TcpError::Send {
            from,
            to,
            source: Arc::new(e),
        })
    }

    /// Write `bytes` at `offset` of `to`'s `target`, from local slot `slot`, then (with
    /// `then_post`) post that link word of `to` for `epoch` in the same system call: the
    /// pair a put-only link's data hop is made of.
    pub(crate) fn write(
        &self,
        slot: usize,
        to: Rank,
        (target, offset): (Target, usize),
        bytes: &[u8],
        (then_post, epoch): (Option<usize>, u64),
    ) -> Result<(), DeviceError> {
        let hop = Hop {
            target,
            offset: offset as u64,
            bytes,
            then_post: then_post.map(|word| word as u64),
            epoch,
        };
        match self.rdma.as_ref().filter(|r| r.reaches(to)) {
            Some(rdma) => rdma.put(slot, to, hop),
            None => {
                self.on_wire(slot, to, |wire| wire.put(hop))?;
                if then_post.is_some() {
                    self.posted[slot][to].fetch_max(epoch, Ordering::Release);
                }
                Ok(())
            }
        }
    }

    /// The last epoch local slot `slot` sent `rank` a Post frame in.
    pub(crate) fn posted_in(&self, slot: usize, rank: Rank) -> u64 {
        self.posted[slot][rank].load(Ordering::Acquire)
    }

    /// Post link word `word` of `to` for the call of `epoch`, from local slot `slot`.
    pub(crate) fn post(
        &self,
        slot: usize,
        to: Rank,
        word: usize,
        epoch: u64,
    ) -> Result<(), DeviceError> {
        match self.rdma.as_ref().filter(|r| r.reaches(to)) {
            Some(rdma) => rdma.post(slot, to, (word as u64, epoch)),
            None => {
                self.on_wire(slot, to, |wire| wire.post(word as u64, epoch))?;
                self.posted[slot][to].fetch_max(epoch, Ordering::Release);
                Ok(())
            }
        }
    }

    /// Run `send` on the put protocol of the connection local slot `slot` opened to `to`.
    fn on_wire(
        &self,
        slot: usize,
        to: Rank,
        send: impl FnOnce(&mut Framed<'_>) -> std::io::Result<()>,
    ) -> Result<(), DeviceError> {
        let from = self.local[slot];
        let mut conn = self.out[slot][to].lock();
        let stream = conn
            .as_mut()
            .ok_or_else(|| self.send_error(from, to, None))?;
        send(&mut Framed(stream)).map_err(|e| self.send_error(from, to, Some(e)))
    }

    /// Peer `from` announced scratch `id` of `bytes`.
    pub(crate) fn scratch_announced(&self, from: Rank, id: usize, bytes: u64) {
        let mut scratch = self.scratch.lock();
        let ids = &mut scratch[from];
        if ids.len() <= id {
            ids.resize(id + 1, None);
        }
        ids[id] = Some(bytes);
        self.scratch_changed.notify_all();
    }

    /// Bytes of each CCL buffer, on every rank (the hello checks it).
    pub(crate) fn ccl_bytes(&self) -> usize {
        self.ccl_bytes
    }

    /// Bytes of TCP peer `rank`'s scratch `id` for local slot `slot`'s program, which
    /// connected to it: waits (at most the execution timeout) for the peer to allocate it
    /// and say so. Every rank allocates the same scratch at the same call, so a peer that
    /// never does is not making this call.
    pub(crate) fn scratch_len(
        &self,
        slot: usize,
        rank: Rank,
        id: usize,
    ) -> Result<usize, DeviceError> {
        let deadline = Instant::now() + self.wait;
        let mut scratch = self.scratch.lock();
        loop {
            if let Some(bytes) = scratch[rank].get(id).copied().flatten() {
                // Announced from a `usize` by a peer of this machine's word size.
                return Ok(usize::try_from(bytes).unwrap_or(usize::MAX));
            }
            if self
                .scratch_changed
                .wait_until(&mut scratch, deadline)
                .timed_out()
            {
                return Err(DeviceError::Tcp(TcpError::ScratchTimeout {
                    rank: self.local[slot],
                    peer: rank,
                    id,
                    waited: self.wait,
                }));
            }
        }
    }

    /// Tell every connected TCP peer (both the ranks this device's ranks connected to and
    /// their subscribers) what stopped this device; a peer's loss is relayed as is, so
    /// every rank names the rank that was lost first, and a peer connected to none of
    /// them learns it from one that is. A connection busy with a long send is skipped
    /// after a short wait: that peer learns from the socket's end.
    pub(crate) fn announce_failure(&self, cause: &AbortCause) {
        if let Some(rdma) = &self.rdma {
            rdma.release(cause);
        }
        let (origin, pid, died) = match cause {
            AbortCause::PeerProcess {
                rank, pid, loss, ..
            } => (*rank, *pid, *loss == PeerLoss::Died),
            AbortCause::PeerFailed { rank, .. }
            | AbortCause::UserAbort { rank }
            | AbortCause::CallFailed { rank, .. } => (*rank, std::process::id(), false),
        };
        let frame = Frame::Failed {
            origin: origin as u64,
            pid: u64::from(pid),
            died,
        }
        .encode();
        for row in &self.out {
            for conn in row {
                if let Some(mut conn) = conn.try_lock_for(ANNOUNCE_WAIT) {
                    if let Some(stream) = conn.as_mut() {
                        let _ = send(stream, &frame, &[]);
                    }
                }
            }
        }
        for subscribers in &self.subscribers {
            if let Some(mut subscribers) = subscribers.try_lock_for(ANNOUNCE_WAIT) {
                for s in subscribers.iter_mut() {
                    let _ = send_nonblocking(&mut s.stream, &frame, ANNOUNCE_WAIT);
                }
            }
        }
    }

    /// The device goes away in order: say so on every connection, and close them.
    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
        let _ = self.poller.notify();
        let frame = Frame::Close.encode();
        for row in &self.out {
            for conn in row {
                if let Some(mut stream) =
                    conn.try_lock_for(ANNOUNCE_WAIT).and_then(|mut c| c.take())
                {
                    let _ = send(&mut stream, &frame, &[]);
                    let _ = stream.shutdown(std::net::Shutdown::Write);
                }
            }
        }
        for subscribers in &self.subscribers {
            if let Some(mut subscribers) = subscribers.try_lock_for(ANNOUNCE_WAIT) {
                for mut s in subscribers.drain(..) {
                    let _ = send_nonblocking(&mut s.stream, &frame, ANNOUNCE_WAIT);
                }
            }
        }
    }
}

impl Drop for TcpLinks {
    fn drop(&mut self) {
        self.ready.unwatch_from(&self.poller);
    }
}
