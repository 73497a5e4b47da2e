//! The receiver of a host device over TCP: one thread, one event loop over the device's
//! listener, every connection peers opened to it, and the return direction of every
//! connection its ranks opened (on which peers send only Done epochs, scratch sizes,
//! RDMA answers, failures and Close: see the [module docs](super)); and, with RDMA, the
//! inbox's descriptor. What each frame does is in [`frames`].
//!
//! A connection is a small state machine ([`Rx`]): its hello, then frame headers, each
//! Write's payload read straight into the target buffer. Nothing is read from a
//! connection before its hello's secret was checked, and a Write's bounds are checked
//! against the target buffer before its payload is read. A connection that ends without
//! a Close frame means its rank is gone: the device stops, naming it, and tells its own
//! peers. Sockets are non-blocking, so a slow peer never holds the others up.
//!
//! The connections live in a [`Receiver`] behind a lock, so that two threads may drive
//! them: the receiver thread, asleep in the event loop until a socket is readable, and
//! the device's submitting thread while it waits for a small call ([`poll_while`]). The
//! latter takes a peer's post the moment its process runs, without waking the receiver
//! and then a worker in between: on a machine with fewer cores than ranks, each of those
//! wakeups waits for a time slice, and a latency-bound call is a chain of them.

mod frames;

use super::readiness::Ready;
use super::{setup, TcpLinks, ACCEPTED, WRONG_SHAPE};
use crate::error::{DeviceError, PeerLoss};
use crate::host::launch::Shared;
use crate::host::shm::Poller;
use crate::ir::Rank;
use crate::transport::tcp::wire::{Hello, HEADER_LEN, HELLO_LEN};
pub(crate) use frames::post;
use frames::{connect_info, frame, land_held, take_rdma_posts};
use polling::Events;
use std::io::{ErrorKind, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// The event key of the listener; connection `i` has key `i + 1`.
const LISTENER: usize = 0;
/// The event key of the RDMA inbox's descriptor (see [`crate::host::rdma`]).
const INBOX: usize = usize::MAX;
/// How long a connection may take to present its hello before it is dropped.
const HELLO_WAIT: Duration = Duration::from_secs(10);

/// Where a connection's reading is.
enum Rx {
    Hello {
        got: usize,
        buf: [u8; HELLO_LEN],
    },
    Header {
        got: usize,
        buf: [u8; HEADER_LEN],
    },
    /// The rest of a Write's payload: `left` bytes from `at`.
    Payload {
        at: *mut u8,
        left: usize,
    },
    /// An Rdma frame's connect info (at most
    /// [`MAX_RDMA_INFO`](crate::transport::tcp::wire::MAX_RDMA_INFO) bytes).
    Info {
        got: usize,
        buf: Vec<u8>,
    },
}

/// The listener and the accepted connections, driven by whichever thread holds them.
pub(crate) struct Receiver {
    listener: TcpListener,
    conns: Vec<Option<Conn>>,
}

// SAFETY: a connection's raw pointer (the rest of a Write's payload) points into a
// registered buffer of the device, valid from any thread; the lock around the receiver
// gives one thread at a time.
unsafe impl Send for Receiver {}

/// Bytes a connection reads ahead.
const INBOX_BYTES: usize = 64 << 10;
/// A payload at least this long (still to come) is read straight into its target.
const DIRECT_BYTES: usize = 16 << 10;

/// Looks without finding work before a waiting submitter stops polling.
const POLLS: usize = 256;
/// Empty looks a waiting submitter yields through before it may sleep in a look.
const SPINS: usize = 16;
/// How long one sleeping look lasts at most.
const SLICE: Duration = Duration::from_millis(1);
/// How many scratch allocations a peer's announcement may be ahead of this rank's.
const SCRATCH_AHEAD: usize = 1024;

/// One accepted connection.
struct Conn {
    stream: TcpStream,
    addr: SocketAddr,
    opened: Instant,
    /// (from rank, local slot, to rank), once its hello was taken.
    link: Option<(Rank, usize, Rank)>,
    /// The return direction of a connection a local rank opened: its peer may send only
    /// what a subscriber is told (Done, Scratch, Failed, Close), never data or posts.
    reverse: bool,
    rx: Rx,
    /// Its rank said Close: the end of the stream is no failure.
    closed: bool,
    /// Bytes read ahead: `inbox[head..tail]` are not taken yet ([`HELLO_LEN`] bytes
    /// before the hello is taken, [`INBOX_BYTES`] after).
    inbox: Box<[u8]>,
    head: usize,
    tail: usize,
    /// The Write whose payload is being read, when it came a call early (see
    /// [`early`](super::early)): the payload goes into its own buffer.
    held: Option<HeldWrite>,
}

/// A Write of the call after its rank's current one, as its payload comes.
struct HeldWrite {
    epoch: u64,
    at: super::early::Target,
    data: Box<[u8]>,
}

/// What to do with a connection after reading from it.
enum Next {
    Keep,
    Drop,
    /// The stream ended (with the read error, if it was not an orderly end): see
    /// [`ended`], which [`handle`] calls once the rank's other connections are read.
    Ended(Option<std::io::Error>),
}

/// Start the receiver of the device behind `shared`.
pub(crate) fn start(shared: &Arc<Shared>, links: Arc<TcpLinks>) -> Result<(), DeviceError> {
    let listener = links.job.listener.try_clone().map_err(setup("listener"))?;
    listener.set_nonblocking(true).map_err(setup("listener"))?;
    links
        .ready
        .add(&listener, LISTENER)
        .map_err(setup("event loop"))?;
    if let Some(rdma) = &links.rdma {
        links
            .ready
            .add(rdma.recv_fd(), INBOX)
            .map_err(setup("event loop"))?;
        rdma.arm()?;
    }
    links
        .ready
        .watch_from(&links.poller)
        .map_err(setup("event loop"))?;
    *links.rx.lock() = Some(Receiver {
        listener,
        conns: Vec::new(),
    });
    let weak = Arc::downgrade(shared);
    std::thread::Builder::new()
        .name("oxccl-tcp-rx".into())
        .spawn(move || serve(&weak, &links))
        .map_err(setup("receiver thread"))?;
    Ok(())
}

fn serve(shared: &Weak<Shared>, links: &TcpLinks) {
    let mut events = Events::new();
    let mut found = Ready::new();
    loop {
        events.clear();
        let pending = links
            .rx
            .lock()
            .as_ref()
            .is_some_and(|rx| rx.conns.iter().flatten().any(|c| c.link.is_none()));
        let timeout = pending.then_some(Duration::from_secs(1));
        if let Err(err) = links.poller.wait(&mut events, timeout) {
            if err.kind() != ErrorKind::Interrupted {
                tracing::error!(%err, "the TCP receiver's event loop failed");
                break;
            }
        }
        if links.closing.load(Ordering::SeqCst) {
            break;
        }
        let Some(shared) = shared.upgrade() else {
            break;
        };
        // Blocking: a polling submitter that holds the connections is taking the same
        // frames; its lock is short.
        let mut rx = links.rx.lock();
        if let Some(rx) = rx.as_mut() {
            if let Err(err) = links.ready.ready(&mut found, Duration::ZERO) {
                tracing::error!(%err, "the TCP receiver's readiness set failed");
                break;
            }
            handle(&shared, links, rx, &found);
            drop_late_hellos(links, &mut rx.conns);
        }
    }
    if let Some(rx) = links.rx.lock().take() {
        for conn in rx.conns.iter().flatten() {
            links.ready.delete(&conn.stream);
        }
        links.ready.delete(&rx.listener);
    }
    if let Some(rdma) = &links.rdma {
        links.ready.delete(rdma.recv_fd());
    }
}

/// Act on the readiness of the sources a look `found`.
fn handle(shared: &Arc<Shared>, links: &TcpLinks, rx: &mut Receiver, found: &Ready) {
    for key in found.keys() {
        if key == INBOX {
            take_rdma_posts(shared, links);
            continue;
        }
        if key == LISTENER {
            accept(links, &rx.listener, &mut rx.conns);
            continue;
        }
        let Some(conn) = rx.conns.get_mut(key - 1).and_then(Option::as_mut) else {
            continue;
        };
        match drive(shared, links, conn) {
            Next::Keep => {}
            Next::Drop => close(links, &mut rx.conns, key - 1),
            Next::Ended(error) => {
                let from = conn.link.map(|(from, _, _)| from);
                read_rest_of(shared, links, &mut rx.conns, (from, key - 1));
                if let Some(conn) = &rx.conns[key - 1] {
                    ended(shared, links, conn, error);
                }
                close(links, &mut rx.conns, key - 1);
            }
        }
    }
}

/// Stop watching connection `index` and drop it.
fn close(links: &TcpLinks, conns: &mut [Option<Conn>], index: usize) {
    if let Some(conn) = conns[index].take() {
        links.ready.delete(&conn.stream);
    }
}

/// Connection `ended` of rank `from` ended: first take what the rank's other connections
/// still hold.
/// A rank that fails tells its peers (a Failed frame naming the rank the failure started
/// at) before its process exits and its sockets close, but that frame may wait on another
/// of its connections than the one whose end was seen first; taken first, it names the
/// failure as it started rather than the relaying rank's exit.
fn read_rest_of(
    shared: &Arc<Shared>,
    links: &TcpLinks,
    conns: &mut [Option<Conn>],
    (from, ended): (Option<Rank>, usize),
) {
    let Some(from) = from else {
        return;
    };
    for index in (0..conns.len()).filter(|&i| i != ended) {
        let Some(conn) = conns[index].as_mut() else {
            continue;
        };
        if conn.link.map(|(f, _, _)| f) != Some(from) {
            continue;
        }
        match drive(shared, links, conn) {
            Next::Keep => {}
            // Its end is the same rank's: the caller names it once.
            Next::Drop | Next::Ended(_) => close(links, conns, index),
        }
    }
}

/// The submitting thread, while `busy()`: take the frames peers sent and run what they
/// wake, and the pool's queued jobs ([`POLLS`] empty looks at most; then it sleeps as
/// usual and the receiver thread takes over).
///
/// It holds the connections throughout and pauses the receiver thread (see
/// [`Readiness`](super::readiness::Readiness)): the frames wake this thread alone, and
/// one `epoll_wait` per look says which connections to read. The first [`SPINS`] empty
/// looks yield the core; after them a device that serves one rank (a process per rank,
/// the usual job) sleeps in the readiness set for up to [`SLICE`] per look, so that on a
/// host with more ranks than cores a waiting rank gives its core to the ranks that work
/// until its frames come. A device with more local ranks keeps yielding: their streams
/// may end its call from another thread, which no socket would announce.
///
/// In a job across hosts the device also has shared-memory peers (`shm`): each look takes
/// their posts as well ([`Poller::look`]), and the thread never sleeps in the readiness
/// set, which their posts do not wake.
///
/// Unless the call is `small` (its programs move at most a socket buffer's worth), a job
/// from the pool may be a stream that blocks in a send: the receiver thread then reads
/// while it runs, so that two ranks sending to each other always drain.
pub(crate) fn poll_while(
    shared: &Arc<Shared>,
    small: bool,
    shm: Option<&Poller<'_>>,
    mut busy: impl FnMut() -> bool,
) {
    let Some(links) = shared.tcp.as_ref() else {
        return;
    };
    let mut rx = links.rx.lock();
    if rx.is_none() {
        return;
    }
    links.ready.pause(&links.poller);
    // Shared-memory peers' posts do not make a socket readable: with them, never sleep.
    let may_sleep = shared.config.local_ranks.len() == 1 && shm.is_none();
    let mut found = Ready::new();
    let mut idle = 0;
    while busy() && idle < POLLS {
        let mut ran = shm.is_some_and(Poller::look);
        if small {
            ran |= shared.pool.run_one();
        } else if shared.pool.has_jobs() {
            links.ready.resume(&links.poller);
            drop(rx);
            ran |= shared.pool.run_one();
            rx = links.rx.lock();
            links.ready.pause(&links.poller);
        }
        let Some(receiver) = rx.as_mut() else {
            break;
        };
        let wait = match may_sleep && idle >= SPINS {
            true => SLICE,
            false => Duration::ZERO,
        };
        if let Err(err) = links.ready.ready(&mut found, wait) {
            tracing::error!(%err, "the TCP readiness set failed; the receiver takes over");
            break;
        }
        handle(shared, links, receiver, &found);
        if ran || !found.is_empty() {
            idle = 0;
        } else {
            idle += 1;
            if wait.is_zero() {
                std::thread::yield_now();
            }
        }
    }
    links.ready.resume(&links.poller);
}

/// Watch the return direction of the connection local slot `slot` (rank `to`) opened to
/// rank `from`: `stream` is a blocking clone of it, read without blocking.
pub(crate) fn adopt(
    links: &TcpLinks,
    stream: TcpStream,
    (from, slot, to): (Rank, usize, Rank),
) -> std::io::Result<()> {
    let mut rx = links.rx.lock();
    let rx = rx
        .as_mut()
        .ok_or_else(|| std::io::Error::other("the TCP receiver has ended"))?;
    let conn = Conn {
        addr: stream.peer_addr()?,
        stream,
        opened: Instant::now(),
        link: Some((from, slot, to)),
        reverse: true,
        rx: header(),
        closed: false,
        inbox: vec![0; INBOX_BYTES].into_boxed_slice(),
        head: 0,
        tail: 0,
        held: None,
    };
    insert(links, &mut rx.conns, conn)
}

/// Put `conn` in the first free place of `conns` and watch it.
fn insert(links: &TcpLinks, conns: &mut Vec<Option<Conn>>, conn: Conn) -> std::io::Result<()> {
    let index = conns
        .iter()
        .position(Option::is_none)
        .unwrap_or(conns.len());
    links.ready.add(&conn.stream, index + 1)?;
    match conns.get_mut(index) {
        Some(slot) => *slot = Some(conn),
        None => conns.push(Some(conn)),
    }
    Ok(())
}

/// Take every connection waiting on the listener.
fn accept(links: &TcpLinks, listener: &TcpListener, conns: &mut Vec<Option<Conn>>) {
    loop {
        let (stream, addr) = match listener.accept() {
            Ok(s) => s,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(err) => {
                tracing::warn!(%err, "the TCP listener could not accept a connection");
                return;
            }
        };
        let configured = stream
            .set_nonblocking(true)
            .and_then(|()| stream.set_nodelay(true));
        if let Err(err) = configured.and_then(|()| crate::transport::tcp::keep_alive(&stream)) {
            tracing::warn!(%addr, %err, "a TCP connection could not be configured; dropped");
            continue;
        }
        let conn = Conn {
            stream,
            addr,
            opened: Instant::now(),
            link: None,
            reverse: false,
            rx: Rx::Hello {
                got: 0,
                buf: [0; HELLO_LEN],
            },
            closed: false,
            // A hello's worth until the hello is taken: a stranger holds no more.
            inbox: vec![0; HELLO_LEN].into_boxed_slice(),
            head: 0,
            tail: 0,
            held: None,
        };
        if let Err(err) = insert(links, conns, conn) {
            tracing::warn!(%addr, %err, "a TCP connection could not be watched; dropped");
        }
    }
}

/// Drop the connections that did not present a hello in time (a stranger holding a
/// socket open).
fn drop_late_hellos(links: &TcpLinks, conns: &mut [Option<Conn>]) {
    for entry in conns.iter_mut() {
        let late = entry
            .as_ref()
            .is_some_and(|c| c.link.is_none() && c.opened.elapsed() > HELLO_WAIT);
        if late {
            let conn = entry.take().expect("checked");
            tracing::warn!(peer = %conn.addr, "dropped a TCP connection that sent no hello");
            links.ready.delete(&conn.stream);
        }
    }
}

/// Read what `conn` has, frame by frame, until it has no more.
///
/// Bytes come through the connection's inbox (one read takes every small frame that
/// arrived), except the bulk of a large Write's payload, which is read straight into its
/// target buffer.
///
/// A read that filled less than it asked for took everything the socket had: the
/// connection is left there, without a second read to hear `EAGAIN` (half of the
/// receiving system calls of a small call). Bytes that arrive after it make the
/// level-triggered readiness set report the connection again.
fn drive(shared: &Arc<Shared>, links: &TcpLinks, conn: &mut Conn) -> Next {
    let mut drained = false;
    loop {
        if conn.head < conn.tail {
            let n = take_from_inbox(conn);
            if let Err(next) = advance(shared, links, conn, n) {
                return next;
            }
            continue;
        }
        conn.head = 0;
        conn.tail = 0;
        if drained {
            return Next::Keep;
        }
        let direct = matches!(conn.rx, Rx::Payload { left, .. } if left >= DIRECT_BYTES);
        let read = match &mut conn.rx {
            // SAFETY: `at..at + left` lies in a registered buffer of a local rank (bounds
            // checked in `write_target`), which lives as long as the device, and the
            // program's signals keep every other access away from it until the Post that
            // follows this Write is taken.
            Rx::Payload { at, left } if direct => read_now(&conn.stream, unsafe {
                std::slice::from_raw_parts_mut(*at, *left)
            }),
            _ => read_now(&conn.stream, &mut conn.inbox),
        };
        let n = match read {
            Ok(0) => return Next::Ended(None),
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Next::Keep,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Next::Ended(Some(e)),
        };
        match direct {
            true => {
                drained = matches!(conn.rx, Rx::Payload { left, .. } if n < left);
                if let Err(next) = advance(shared, links, conn, n) {
                    return next;
                }
            }
            false => {
                drained = n < conn.inbox.len();
                conn.tail = n;
            }
        }
    }
}

/// Read what `stream` has without waiting, whether the socket blocks or not (the return
/// direction of an opened connection is a clone of a blocking socket).
fn read_now(stream: &TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    use rustix::net::{recv, RecvFlags};
    recv(stream, buf, RecvFlags::DONTWAIT)
        .map(|(n, _)| n)
        .map_err(Into::into)
}

/// Move inbox bytes into what the connection reads now; how many were taken.
fn take_from_inbox(conn: &mut Conn) -> usize {
    let avail = &conn.inbox[conn.head..conn.tail];
    let n = match &mut conn.rx {
        Rx::Hello { got, buf } => fill(&mut buf[*got..], avail),
        Rx::Header { got, buf } => fill(&mut buf[*got..], avail),
        Rx::Info { got, buf } => fill(&mut buf[*got..], avail),
        Rx::Payload { at, left } => {
            let n = (*left).min(avail.len());
            // SAFETY: `n <= left`: within the checked target range (see `drive`), which
            // cannot overlap this connection's inbox.
            unsafe { crate::reduce::copy_bytes(avail.as_ptr(), *at, n) };
            n
        }
    };
    conn.head += n;
    n
}

/// Copy what fits of `from` into `to`; how many bytes.
fn fill(to: &mut [u8], from: &[u8]) -> usize {
    let n = to.len().min(from.len());
    to[..n].copy_from_slice(&from[..n]);
    n
}

/// `n` more bytes of what the connection reads now are in place: act on a completed
/// hello or header, move a payload on.
fn advance(shared: &Arc<Shared>, links: &TcpLinks, conn: &mut Conn, n: usize) -> Result<(), Next> {
    match &mut conn.rx {
        Rx::Hello { got, buf } => {
            *got += n;
            if *got < HELLO_LEN {
                return Ok(());
            }
            let buf = *buf;
            hello(shared, links, conn, &buf)
        }
        Rx::Header { got, buf } => {
            *got += n;
            if *got < HEADER_LEN {
                return Ok(());
            }
            let buf = *buf;
            frame(shared, links, conn, &buf)
        }
        Rx::Info { got, buf } => {
            *got += n;
            if *got < buf.len() {
                return Ok(());
            }
            let buf = std::mem::take(buf);
            conn.rx = header();
            connect_info(shared, links, conn, &buf)
        }
        Rx::Payload { at, left } => {
            // SAFETY: `n <= left`, so the pointer stays within the checked range.
            *at = unsafe { (*at).add(n) };
            *left -= n;
            if *left == 0 {
                conn.rx = header();
                land_held(links, conn);
            }
            Ok(())
        }
    }
}

fn header() -> Rx {
    Rx::Header {
        got: 0,
        buf: [0; HEADER_LEN],
    }
}

/// The connection ended (`error`: how, if not by an orderly end of stream): without a
/// Close frame, its rank is gone.
fn ended(shared: &Arc<Shared>, links: &TcpLinks, conn: &Conn, error: Option<std::io::Error>) {
    let Some((from, _, _)) = conn.link else {
        tracing::debug!(peer = %conn.addr, "a TCP connection ended before its hello");
        return;
    };
    if !conn.closed && !links.closing.load(Ordering::SeqCst) {
        let how = error.map_or_else(|| "end of stream".to_string(), |e| e.to_string());
        tracing::error!(rank = from, %how, "a TCP peer went away without closing");
        shared.stop(shared.config.lost(from, None, PeerLoss::Died), None);
    }
}

/// Take or refuse a connection's hello.
fn hello(
    shared: &Shared,
    links: &TcpLinks,
    conn: &mut Conn,
    buf: &[u8; HELLO_LEN],
) -> Result<(), Next> {
    let hello = match Hello::decode(buf, &links.job.secret) {
        Ok(h) => h,
        Err(fault) => {
            tracing::warn!(peer = %conn.addr, ?fault, "dropped a TCP connection without the job's secret");
            return Err(Next::Drop);
        }
    };
    let (from, to) = (hello.from as usize, hello.to as usize);
    let slot = shared.slots.get(to).copied().flatten();
    let fits = links.reaches(from) && links.same_shape(&hello);
    let (Some(slot), true) = (slot, fits) else {
        tracing::warn!(peer = %conn.addr, from, to, "refused a TCP connection of another shape");
        let _ = conn.stream.write(&[WRONG_SHAPE]);
        return Err(Next::Drop);
    };
    if !links.accepted(from, to) {
        tracing::warn!(peer = %conn.addr, from, to, "refused a second TCP connection for one link");
        return Err(Next::Drop);
    }
    // A fresh socket's buffer takes one byte; a connection that cannot is gone.
    if conn.stream.write(&[ACCEPTED]).ok() != Some(1) {
        return Err(Next::Drop);
    }
    conn.link = Some((from, slot, to));
    conn.rx = header();
    let subscribed = conn
        .stream
        .try_clone()
        .map_err(setup("socket"))
        .and_then(|stream| links.subscribe(shared, (slot, from), stream));
    if let Err(err) = subscribed {
        tracing::warn!(peer = %conn.addr, from, to, %err, "a TCP connection could not be answered; dropped");
        return Err(Next::Drop);
    }
    // A peer's connection reads ahead in full; bytes after the hello carry over.
    let mut inbox = vec![0; INBOX_BYTES].into_boxed_slice();
    let ahead = conn.tail - conn.head;
    inbox[..ahead].copy_from_slice(&conn.inbox[conn.head..conn.tail]);
    (conn.inbox, conn.head, conn.tail) = (inbox, 0, ahead);
    Ok(())
}
