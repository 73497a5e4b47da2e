//! The host device over TCP: the connections of its ranks to the peers it reaches over
//! sockets, and what travels on them.
//!
//! With [`DeviceConfig::tcp`] set, every local rank opens one connection to every rank the
//! job lists there (its *TCP peers*), and the device's **receiver** thread accepts the
//! connections those peers open to it ([`receiver`]). A task that writes a TCP peer's
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
//! Connections are set up eagerly when the device is created (each rank to every TCP
//! peer, all at once, so that a peer that cannot be reached is reported at init rather
//! than in the middle of a call); executors that talk to few peers pay a socket per peer
//! they never use, which is NCCL's choice for its bootstrap ring, not its data links.
//! Lazy connection from the resource requests is the next step.
//!
//! [`DeviceConfig::tcp`]: crate::device::DeviceConfig::tcp

mod readiness;
pub(crate) mod receiver;

use crate::device::DeviceConfig;
use crate::error::{AbortCause, DeviceError, PeerLoss};
use crate::ir::Rank;
use crate::transport::tcp::wire::{Frame, Hello, Target};
use crate::transport::tcp::{connect, keep_alive, send, send_all, TcpError, TcpJob};
use parking_lot::{Condvar, Mutex};
use std::io::{IoSlice, Read};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The answer to a hello that was taken.
pub(crate) const ACCEPTED: u8 = 0xA5;
/// The answer to a hello whose shape (rank count, CCL buffer size, signal words) differs.
pub(crate) const WRONG_SHAPE: u8 = 0x5A;

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
    /// Per local slot, per communicator rank: the connection this rank sends on.
    out: Vec<Vec<Mutex<Option<TcpStream>>>>,
    /// Per communicator rank: the scratch sizes it announced, by scratch id.
    scratch: Mutex<Vec<Vec<Option<u64>>>>,
    scratch_changed: Condvar,
    /// Connections accepted, as (from, to) pairs.
    accepted: Mutex<Vec<(Rank, Rank)>>,
    accepted_changed: Condvar,
    /// Set when the device goes away: the receiver ends, ends of streams are no failures.
    pub closing: AtomicBool,
    /// The receiver's event loop: it holds [`Self::ready`] and is notified when the
    /// device closes.
    pub poller: polling::Poller,
    /// Which of the listener and the accepted connections have bytes to read.
    pub ready: readiness::Readiness,
    /// The listener and connections, set when the receiver starts.
    pub rx: Mutex<Option<receiver::Receiver>>,
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
    /// The TCP side of a device of `config` (nothing is connected yet: see [`connect_all`]).
    ///
    /// [`connect_all`]: TcpLinks::connect_all
    pub(crate) fn new(
        config: &DeviceConfig,
        job: &TcpJob,
        link_words: usize,
    ) -> Result<Self, DeviceError> {
        let ranks = config.ranks;
        Ok(TcpLinks {
            job: job.clone(),
            local: config.local_ranks.clone(),
            ranks,
            ccl_bytes: config.ccl_bytes,
            link_words,
            out: config
                .local_ranks
                .iter()
                .map(|_| (0..ranks).map(|_| Mutex::new(None)).collect())
                .collect(),
            scratch: Mutex::new(vec![Vec::new(); ranks]),
            scratch_changed: Condvar::new(),
            accepted: Mutex::new(Vec::new()),
            accepted_changed: Condvar::new(),
            closing: AtomicBool::new(false),
            poller: polling::Poller::new().map_err(setup("event loop"))?,
            ready: readiness::Readiness::new().map_err(setup("event loop"))?,
            rx: Mutex::new(None),
            wait: config.exec_timeout,
        })
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

    /// Open every local rank's connection to every TCP peer (with the receiver already
    /// running, so that peers doing the same are answered), then wait until every peer's
    /// connections to the local ranks were accepted.
    pub(crate) fn connect_all(&self) -> Result<(), DeviceError> {
        let deadline = Instant::now() + self.wait;
        for (slot, &from) in self.local.iter().enumerate() {
            for to in self.job.peer_ranks() {
                let stream = self.open(from, to, deadline)?;
                *self.out[slot][to].lock() = Some(stream);
            }
        }
        self.wait_accepted(deadline)
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
        self.accepted_changed.notify_all();
        true
    }

    fn wait_accepted(&self, deadline: Instant) -> Result<(), DeviceError> {
        let want = self.local.len() * self.job.peer_ranks().count();
        let mut accepted = self.accepted.lock();
        while accepted.len() < want {
            if self
                .accepted_changed
                .wait_until(&mut accepted, deadline)
                .timed_out()
            {
                break;
            }
        }
        for &to in &self.local {
            let missing: Vec<Rank> = self
                .job
                .peer_ranks()
                .filter(|&from| !accepted.contains(&(from, to)))
                .collect();
            if !missing.is_empty() {
                return Err(DeviceError::Tcp(TcpError::NotConnected {
                    rank: to,
                    missing: missing.len(),
                    ranks: missing,
                    waited: self.wait,
                }));
            }
        }
        Ok(())
    }

    /// Send `frame` (and `payload`) from local slot `slot` to `to`.
    pub(crate) fn send(
        &self,
        slot: usize,
        to: Rank,
        frame: Frame,
        payload: &[u8],
    ) -> Result<(), DeviceError> {
        let header = frame.encode();
        self.send_bufs(
            slot,
            to,
            &mut [IoSlice::new(&header), IoSlice::new(payload)],
        )
    }

    /// Send `bufs`, in order and whole, from local slot `slot` to `to`.
    fn send_bufs(
        &self,
        slot: usize,
        to: Rank,
        bufs: &mut [IoSlice<'_>],
    ) -> Result<(), DeviceError> {
        let from = self.local[slot];
        let mut conn = self.out[slot][to].lock();
        let stream = conn
            .as_mut()
            .ok_or_else(|| self.send_error(from, to, None))?;
        send_all(stream, bufs).map_err(|e| self.send_error(from, to, Some(e)))
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
    /// `then_post`) post that link word of `to` in the same system call: the pair a
    /// put-only link's data hop is made of.
    pub(crate) fn write(
        &self,
        slot: usize,
        to: Rank,
        (target, offset): (Target, usize),
        bytes: &[u8],
        then_post: Option<usize>,
    ) -> Result<(), DeviceError> {
        let write = Frame::Write {
            target,
            offset: offset as u64,
            len: bytes.len() as u64,
        }
        .encode();
        let post = then_post.map(|word| Frame::Post { word: word as u64 }.encode());
        let post = post.as_ref().map_or(&[][..], |p| &p[..]);
        let mut bufs = [
            IoSlice::new(&write),
            IoSlice::new(bytes),
            IoSlice::new(post),
        ];
        self.send_bufs(slot, to, &mut bufs)
    }

    /// Post link word `word` of `to`, from local slot `slot`.
    pub(crate) fn post(&self, slot: usize, to: Rank, word: usize) -> Result<(), DeviceError> {
        self.send(slot, to, Frame::Post { word: word as u64 }, &[])
    }

    /// Tell every TCP peer that local slot `slot` finished `epoch`. A peer that cannot be
    /// told is gone: its own receiver (or this one) reports it.
    pub(crate) fn publish_done(&self, slot: usize, epoch: u64) {
        for to in self.job.peer_ranks() {
            if let Err(err) = self.send(slot, to, Frame::Done { epoch }, &[]) {
                tracing::debug!(%err, "a done epoch was not sent");
            }
        }
    }

    /// Announce every local rank's scratch `id` of `bytes` to every TCP peer, then wait
    /// until every peer announced its own (every rank allocates the same scratch at the
    /// same call), so that a program never writes a scratch its peer has not made yet.
    pub(crate) fn exchange_scratch(&self, id: usize, bytes: usize) -> Result<(), DeviceError> {
        for slot in 0..self.local.len() {
            for to in self.job.peer_ranks() {
                let frame = Frame::Scratch {
                    id: id as u64,
                    bytes: bytes as u64,
                };
                self.send(slot, to, frame, &[])?;
            }
        }
        let deadline = Instant::now() + self.wait;
        let mut scratch = self.scratch.lock();
        for peer in self.job.peer_ranks() {
            while scratch[peer].get(id).copied().flatten().is_none() {
                if self
                    .scratch_changed
                    .wait_until(&mut scratch, deadline)
                    .timed_out()
                {
                    return Err(DeviceError::Tcp(TcpError::ScratchTimeout {
                        rank: self.local[0],
                        peer,
                        id,
                        waited: self.wait,
                    }));
                }
            }
        }
        Ok(())
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

    /// Bytes of `rank`'s scratch `id`, if the peer announced it.
    pub(crate) fn scratch_len(&self, rank: Rank, id: usize) -> Option<usize> {
        let scratch = self.scratch.lock();
        let bytes = (*scratch.get(rank)?.get(id)?)?;
        usize::try_from(bytes).ok()
    }

    /// Tell every TCP peer what stopped this device (a peer's loss is relayed as is, so
    /// every rank names the rank that was lost first). A connection busy with a long
    /// send is skipped after a short wait: that peer learns from the socket's end.
    pub(crate) fn announce_failure(&self, cause: &AbortCause) {
        let (origin, pid, died) = match cause {
            AbortCause::PeerProcess {
                rank, pid, loss, ..
            } => (*rank, *pid, *loss == PeerLoss::Died),
            AbortCause::PeerFailed { rank, .. } | AbortCause::UserAbort { rank } => {
                (*rank, std::process::id(), false)
            }
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
    }
}

impl Drop for TcpLinks {
    fn drop(&mut self) {
        self.ready.unwatch_from(&self.poller);
    }
}
