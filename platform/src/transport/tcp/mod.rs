//! The TCP transport: put-only links to ranks on other hosts (or, forced, on this one).
//!
//! Each rank listens on a socket it opened before the job's ranks exchanged their
//! addresses (through the bootstrap root), and opens a connection to a peer it reaches
//! over TCP when a program first needs it: a rank sends data and posts on the
//! connections it opened and receives them on those it accepted; the return direction of
//! a connection carries only what the opener must hear from its peer (Done epochs,
//! scratch sizes, failure, Close). The link is **put-only**
//! ([`crate::LinkAccess::Put`]): a frame writes bytes into one of the receiver's registered
//! buffers (CclIn, CclOut, a scratch allocation) or posts one of its link signals; nothing
//! reads a peer's memory, and nothing reaches its user buffers. Frames of one connection
//! arrive in the order they were sent, so a Post sent after a Write announces bytes that
//! are already in place, exactly as a Post after a Copy does on a load/store link.
//!
//! Security: a connection opens with a hello that carries the job's secret (the one in
//! the unique id); the receiver reads nothing else before checking it, and drops (and
//! logs) a connection without it, so a claimed rank is never trusted on its word. A Write
//! is checked against the target buffer's bounds before a byte of it is read off the
//! socket: a faulty or hostile peer that knows the secret still cannot make a rank write
//! outside its registered buffers; such a frame stops the rank with
//! [`TcpError::OutOfBounds`] instead.
//!
//! Files: `wire` (hello and frames), this one (the job's description, errors, and the
//! sending side of a socket). The host device's use of it (its receiver thread, the
//! connections of its ranks) is in `host/tcp`.

pub mod wire;

use crate::ir::Rank;
use crate::transport::put::{Hop, PutWire};
use std::io::{IoSlice, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A job whose ranks (some of them) meet over TCP.
#[derive(Clone, Debug)]
pub struct TcpJob {
    /// The job's secret: every connection must present it.
    pub secret: [u8; 16],
    /// The listener of the device's ranks, opened before the addresses were exchanged.
    pub listener: Arc<TcpListener>,
    /// Per communicator rank: the address of its listener, for the ranks reached over
    /// TCP (`None` for the others).
    pub peers: Vec<Option<SocketAddr>>,
    /// The peers among those whose data and posts go over RDMA instead (`None`: none).
    pub rdma: Option<crate::transport::rdma::RdmaJob>,
}

impl TcpJob {
    /// True when `rank` is reached over TCP.
    pub fn reaches(&self, rank: Rank) -> bool {
        self.peers.get(rank).is_some_and(Option::is_some)
    }

    /// The ranks reached over TCP, ascending.
    pub fn peer_ranks(&self) -> impl Iterator<Item = Rank> + '_ {
        (0..self.peers.len()).filter(|&r| self.reaches(r))
    }
}

/// What went wrong on the TCP transport.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TcpError {
    #[error("cannot set up the TCP transport's {what}")]
    Setup {
        what: &'static str,
        #[source]
        source: Arc<std::io::Error>,
    },
    #[error(
        "rank {from} could not connect to rank {to} at {addr} within {waited:?}; check that \
         the address is reachable from this host (firewall, interface) and that rank {to} \
         is running"
    )]
    Connect {
        from: Rank,
        to: Rank,
        addr: SocketAddr,
        waited: Duration,
        #[source]
        source: Arc<std::io::Error>,
    },
    #[error(
        "rank {to} at {addr} refused the connection of rank {from}: {reason}; every rank of \
         a job must be configured alike"
    )]
    Refused {
        from: Rank,
        to: Rank,
        addr: SocketAddr,
        reason: &'static str,
    },
    #[error("rank {from} could not send to rank {to}")]
    Send {
        from: Rank,
        to: Rank,
        #[source]
        source: Arc<std::io::Error>,
    },
    #[error(
        "rank {from} sent rank {to} a write of {len} bytes at offset {offset} of its \
         {target}, which has {target_len} bytes: refused before a byte was written, and \
         the connection closed (a faulty or hostile peer)"
    )]
    OutOfBounds {
        from: Rank,
        to: Rank,
        target: wire::Target,
        offset: u64,
        len: u64,
        target_len: usize,
    },
    #[error("rank {from} sent rank {to} a frame it cannot take: {what}; connection closed")]
    BadFrame { from: Rank, to: Rank, what: String },
    #[error(
        "rank {rank} waited {waited:?} for rank {peer} to allocate scratch {id}; check that \
         every rank makes the same calls"
    )]
    ScratchTimeout {
        rank: Rank,
        peer: Rank,
        id: usize,
        waited: Duration,
    },
}

/// Connect to `addr` until `deadline` (the peer's listener exists before the addresses
/// are exchanged, so a refusal is a transient one: a peer's backlog full, a slow start).
pub fn connect(addr: SocketAddr, deadline: Instant) -> std::io::Result<TcpStream> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match TcpStream::connect_timeout(&addr, left.max(Duration::from_millis(1))) {
            Ok(stream) => return Ok(stream),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Silence on a transport connection before the kernel starts probing the peer.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(5);
/// Time between two keepalive probes.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
/// Unanswered probes after which the kernel declares the peer gone.
pub const KEEPALIVE_PROBES: u32 = 3;

/// Turn on TCP keepalive with oxccl's timings. A peer process that dies is seen at once
/// (its kernel closes the socket), but a host that vanishes (power, cable, kernel panic)
/// sends no FIN or RST: without probes a rank blocked reading from it would wait out
/// `OXCCL_EXEC_TIMEOUT` (and an idle connection, the kernel's default two hours). With
/// them the read fails with `ETIMEDOUT` after about `KEEPALIVE_IDLE + KEEPALIVE_PROBES x
/// KEEPALIVE_INTERVAL` (8 s) of silence, and the peer is reported lost.
pub fn keep_alive(stream: &TcpStream) -> std::io::Result<()> {
    use rustix::net::sockopt;
    sockopt::set_socket_keepalive(stream, true)?;
    sockopt::set_tcp_keepidle(stream, KEEPALIVE_IDLE)?;
    sockopt::set_tcp_keepintvl(stream, KEEPALIVE_INTERVAL)?;
    sockopt::set_tcp_keepcnt(stream, KEEPALIVE_PROBES)?;
    Ok(())
}

/// The put protocol ([`PutWire`]) as frames on a stream: a hop is a Write frame and its
/// payload, then its Post frame, in one vectored write; the stream's order keeps every
/// post behind the bytes it announces, and the bytes are in the kernel's socket buffer
/// (the source free again) when the write returns.
pub struct Framed<'a>(pub &'a mut TcpStream);

impl PutWire for Framed<'_> {
    type Error = std::io::Error;

    fn put(&mut self, hop: Hop<'_>) -> std::io::Result<()> {
        let write = wire::Frame::Write {
            target: hop.target,
            offset: hop.offset,
            len: hop.bytes.len() as u64,
            epoch: hop.epoch,
        }
        .encode();
        let post = hop.then_post.map(|word| {
            let epoch = hop.epoch;
            wire::Frame::Post { word, epoch }.encode()
        });
        let post = post.as_ref().map_or(&[][..], |p| &p[..]);
        let mut bufs = [
            IoSlice::new(&write),
            IoSlice::new(hop.bytes),
            IoSlice::new(post),
        ];
        send_all(self.0, &mut bufs)
    }

    fn post(&mut self, word: u64, epoch: u64) -> std::io::Result<()> {
        send(self.0, &wire::Frame::Post { word, epoch }.encode(), &[])
    }
}

/// Write `header` then `payload` in as few system calls as the socket takes.
pub fn send(stream: &mut TcpStream, header: &[u8], payload: &[u8]) -> std::io::Result<()> {
    send_all(stream, &mut [IoSlice::new(header), IoSlice::new(payload)])
}

/// Write every buffer of `bufs`, in order, in as few system calls as the socket takes.
pub fn send_all(stream: &mut TcpStream, bufs: &mut [IoSlice<'_>]) -> std::io::Result<()> {
    let mut bufs = bufs;
    while !bufs.is_empty() {
        match stream.write_vectored(bufs) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Write all of `bytes` to a non-blocking `stream`, waiting (at most `wait` in all) for
/// room when its buffer is full: the small frames a receiver sends back on a connection
/// it accepted.
pub fn send_nonblocking(
    stream: &mut TcpStream,
    mut bytes: &[u8],
    wait: Duration,
) -> std::io::Result<()> {
    use rustix::event::{poll, PollFd, PollFlags};
    let deadline = Instant::now() + wait;
    while !bytes.is_empty() {
        match stream.write(bytes) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(std::io::ErrorKind::TimedOut.into());
                }
                let mut fds = [PollFd::new(&*stream, PollFlags::OUT)];
                let timeout = crate::transport::timespec(left);
                match poll(&mut fds, Some(&timeout)) {
                    Ok(_) | Err(rustix::io::Errno::INTR) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::net::sockopt;
    use std::io::Read;
    use wire::{Frame, Target, HEADER_LEN};

    /// The next frame on `stream`, with its payload.
    fn next_frame(stream: &mut TcpStream) -> (Frame, Vec<u8>) {
        let mut header = [0u8; HEADER_LEN];
        stream.read_exact(&mut header).unwrap();
        let frame = Frame::decode(&header).unwrap();
        let len = match frame {
            Frame::Write { len, .. } => len as usize,
            _ => 0,
        };
        let mut payload = vec![0u8; len];
        stream.read_exact(&mut payload).unwrap();
        (frame, payload)
    }

    /// The put protocol on TCP: a hop is its Write frame and bytes, then its Post; a post
    /// alone is a Post frame; all in the order they were put.
    #[test]
    fn framed_puts_the_bytes_then_the_post_in_order() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut out = connect(addr, Instant::now() + Duration::from_secs(5)).unwrap();
        let (mut inbound, _) = listener.accept().unwrap();
        let bytes: Vec<u8> = (0..100).collect();
        let mut wire = Framed(&mut out);
        let hop = |offset, then_post| Hop {
            target: Target::CclOut,
            offset,
            bytes: &bytes,
            then_post,
            epoch: 4,
        };
        wire.put(hop(8, Some(3))).unwrap();
        wire.post(9, 5).unwrap();
        wire.put(hop(200, None)).unwrap();
        let write = |offset| Frame::Write {
            target: Target::CclOut,
            offset,
            len: 100,
            epoch: 4,
        };
        assert_eq!(next_frame(&mut inbound), (write(8), bytes.clone()));
        let post = |word, epoch| (Frame::Post { word, epoch }, Vec::new());
        assert_eq!(next_frame(&mut inbound), post(3, 4));
        assert_eq!(next_frame(&mut inbound), post(9, 5));
        assert_eq!(next_frame(&mut inbound), (write(200), bytes));
    }

    #[test]
    fn keep_alive_sets_oxccls_probe_timings_on_both_ends() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let out = connect(addr, Instant::now() + Duration::from_secs(5)).unwrap();
        let (inbound, _) = listener.accept().unwrap();
        for stream in [&out, &inbound] {
            assert!(
                !sockopt::socket_keepalive(stream).unwrap(),
                "off by default"
            );
            keep_alive(stream).unwrap();
            assert!(sockopt::socket_keepalive(stream).unwrap());
            assert_eq!(sockopt::tcp_keepidle(stream).unwrap(), KEEPALIVE_IDLE);
            assert_eq!(sockopt::tcp_keepintvl(stream).unwrap(), KEEPALIVE_INTERVAL);
            assert_eq!(sockopt::tcp_keepcnt(stream).unwrap(), KEEPALIVE_PROBES);
        }
    }
}
