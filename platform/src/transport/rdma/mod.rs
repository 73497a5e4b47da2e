//! The RDMA transport (issue 16): the put-only protocol ([`crate::transport::put`]) over
//! RDMA reliable connections, for peers on other hosts.
//!
//! ## Design (studied from NCCL's `net_ib`, written anew)
//!
//! - **What is registered.** Each rank registers, once, the buffers a peer may write: its
//!   CCL buffers and scratch allocations (plus the local buffers it sends from). A peer
//!   learns them as [`RemoteRegion`]s (address, length, remote key) with the queue pair's
//!   endpoint, on the link's TCP connection, whose hello already proved the job's secret
//!   (the host device's side: `host/rdma.rs`).
//! - **A data hop** is one RDMA WRITE into the peer's region, at an offset checked against
//!   the region's length before it is posted ([`RdmaError::OutOfBounds`]); the peer's NIC
//!   checks the key and range again, so a peer that forges a request still cannot write
//!   outside what its target registered ([`RdmaError::KeyRefused`]).
//! - **A post** is a zero-length WRITE_WITH_IMM on the same queue pair: a reliable
//!   connection completes it at the receiver only after the writes before it landed, so
//!   the receiver's completion *is* the signal, as the last write carrying the immediate
//!   is in `net_ib`. The immediate holds the link word and the low bits of the sender's
//!   call epoch ([`encode_imm`]).
//! - **Completions.** Every request is signalled; [`link::RdmaLink`] waits for the
//!   completions of a hop in any order before it returns (so the source may be reused, the
//!   protocol's rule, and what the DataAck handshake of RDMA links in programs builds on).
//!   A completion that never comes is an error naming the peer and the request after the
//!   link's timeout ([`RdmaError::LostCompletion`]); an error status names the port, peer
//!   and status ([`RdmaError::QueuePair`]).
//! - **The receiver** ([`inbox::Inbox`]) keeps receives posted on every queue pair, polls
//!   the receive completions, and turns each immediate into a post of the sender's link
//!   word, reposting the receive it used. Idle, it sleeps on the receive queue's file
//!   descriptor (a completion channel, armed before the last look), so a quiet
//!   communicator holds no core, and the descriptor can join an event loop's sockets.
//!
//! Files: `verbs` (the calls used, as a trait), `link` (the sending side of a link, the
//! peer's regions, the endpoint's connect info), `inbox` (the receiving side), `fake` (a
//! fabric of fake NICs in this process: the test double that lets all of the above run in
//! CI, with lost and reordered completions and failing queue pairs), `ib` (feature `rdma`:
//! the real devices through libibverbs).
//!
//! Verified without hardware: everything above the verbs, against the fake fabric (also
//! under host devices and communicators: `host/rdma_tests.rs`,
//! `tests/tests/rdma_transport.rs`); with feature `rdma`, that the build links libibverbs
//! and that a machine without a device gets [`RdmaError::NoDevice`]. Not verified: the
//! real data path (no device and no soft-RoCE here); `ib`'s loopback test runs it where
//! `OXCCL_RDMA_TEST_DEVICE` names a device.

pub mod fake;
#[cfg(feature = "rdma")]
pub mod ib;
pub mod inbox;
pub mod link;
pub mod verbs;

use crate::ir::Rank;
use crate::transport::put::Target;
use std::sync::Arc;
use std::time::Duration;
pub use verbs::{Port, Status, Verbs, VerbsError};

/// What a peer needs to write into one of a rank's registered buffers.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RemoteRegion {
    pub target: Target,
    pub addr: u64,
    pub len: u64,
    pub rkey: u32,
}

/// A job whose ranks (some of them) reach each other over RDMA: the verbs of this
/// process's port and the peers they reach. RDMA rides on the TCP transport
/// ([`crate::transport::tcp::TcpJob::rdma`]): a peer's TCP connection carries the
/// connect info, Done epochs, scratch sizes, failures and Close, and its queue pair the
/// data and posts.
#[derive(Clone)]
pub struct RdmaJob {
    /// The port this process's ranks use.
    pub verbs: Arc<dyn Verbs>,
    /// Per communicator rank: true when it is reached over RDMA (it must be reached over
    /// TCP too).
    pub peers: Vec<bool>,
}

impl RdmaJob {
    /// True when `rank` is reached over RDMA.
    pub fn reaches(&self, rank: Rank) -> bool {
        self.peers.get(rank).copied().unwrap_or(false)
    }
}

impl std::fmt::Debug for RdmaJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaJob")
            .field("port", self.verbs.port())
            .field("peers", &self.peers)
            .finish()
    }
}

/// What went wrong on the RDMA transport; each names the device port and, where there is
/// one, the peer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RdmaError {
    #[error(
        "no RDMA device{}: found {}; name one with OXCCL_RDMA_DEVICE, or let the transport \
         table use TCP",
        wanted.as_ref().map(|w| format!(" named {w}")).unwrap_or_default(),
        if found.is_empty() { "none".to_string() } else { found.join(", ") }
    )]
    NoDevice {
        wanted: Option<String>,
        found: Vec<String>,
    },
    #[error("{port} is {state}, not active; check the cable and the subnet manager")]
    PortDown { port: Port, state: String },
    #[error(
        "the queue pair from rank {rank} to rank {peer} on {port} failed: {status} (work \
         request {wr_id}); the link is unusable and the call stops"
    )]
    QueuePair {
        port: Port,
        rank: Rank,
        peer: Rank,
        wr_id: u64,
        status: Status,
    },
    #[error(
        "rank {peer}'s NIC refused rank {rank}'s write of {len} bytes at offset {offset} of \
         its {target} on {port}: its memory key or range was refused"
    )]
    KeyRefused {
        port: Port,
        rank: Rank,
        peer: Rank,
        target: Target,
        offset: u64,
        len: u64,
    },
    #[error(
        "rank {rank} would write {len} bytes at offset {offset} of rank {peer}'s {target}, \
         which has {size} bytes: refused before anything was posted"
    )]
    OutOfBounds {
        rank: Rank,
        peer: Rank,
        target: Target,
        offset: u64,
        len: u64,
        size: u64,
    },
    #[error("rank {peer} registered no {target} for rank {rank} to write into")]
    UnknownTarget {
        rank: Rank,
        peer: Rank,
        target: Target,
    },
    #[error(
        "rank {rank} sends {len} bytes from {addr:#x}, which no region registered on {port} \
         holds"
    )]
    SourceNotRegistered {
        port: Port,
        rank: Rank,
        addr: u64,
        len: u64,
    },
    #[error(
        "rank {rank} waited {waited:?} for the completion of work request {wr_id} to rank \
         {peer} on {port}; the NIC lost it or the peer stopped answering"
    )]
    LostCompletion {
        port: Port,
        rank: Rank,
        peer: Rank,
        wr_id: u64,
        waited: Duration,
    },
    #[error(
        "rank {rank} opened an RDMA link to rank {peer} on {port} and had no answer within \
         {waited:?}; check that rank {peer} is running and reaches this rank over RDMA too"
    )]
    NoAnswer {
        port: Port,
        rank: Rank,
        peer: Rank,
        waited: Duration,
    },
    #[error(
        "{port}'s receive queue holds {capacity} completions: {links} links of {depth} \
         receives each would overflow it; use fewer peers per device (executors whose \
         links are fewer: ring, rhd) or a NIC with a larger queue"
    )]
    TooManyLinks {
        port: Port,
        links: usize,
        depth: usize,
        capacity: usize,
    },
    #[error("{name}={value:?} is not {expected}")]
    Setting {
        name: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error("link word {word} does not fit an immediate (at most {max})")]
    WordTooLarge { word: u64, max: u64 },
    #[error("{what} on {port} (rank {rank}, peer {peer}): {source}")]
    Verbs {
        port: Port,
        rank: Rank,
        peer: Rank,
        what: &'static str,
        #[source]
        source: VerbsError,
    },
    /// A verbs call of the device as a whole (opening it, its receive queue), which no
    /// one link owns.
    #[error("{what} on {port}: {source}")]
    Device {
        port: Port,
        what: &'static str,
        #[source]
        source: VerbsError,
    },
}

impl RdmaError {
    /// A failed verbs call doing `what` on `port`: on the link (rank, peer) when one owns
    /// it, else on the device.
    pub fn verbs(
        port: &Port,
        link: Option<(Rank, Rank)>,
        what: &'static str,
        source: VerbsError,
    ) -> RdmaError {
        let port = port.clone();
        match link {
            Some((rank, peer)) => RdmaError::Verbs {
                port,
                rank,
                peer,
                what,
                source,
            },
            None => RdmaError::Device { port, what, source },
        }
    }
}

/// Where a rank's RDMA links leave from, and how (the environment's `OXCCL_RDMA_*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `OXCCL_RDMA_DEVICE`: the device by name (`mlx5_0`); unset, the first listed.
    pub device: Option<String>,
    /// `OXCCL_RDMA_PORT`: the device's port, from 1 (default 1).
    pub port: u8,
    /// `OXCCL_RDMA_GID_INDEX`: the GID table entry RoCE addresses use (default 0; RoCE v2
    /// over IPv4 is often 3).
    pub gid_index: u32,
    /// `OXCCL_RDMA_TC`: the traffic class of the queue pairs (default 0).
    pub traffic_class: u8,
}

impl Settings {
    /// The settings `OXCCL_RDMA_*` give, each checked.
    pub fn from_env() -> Result<Settings, RdmaError> {
        Settings::from_vars(|name| std::env::var(name).ok())
    }

    /// The settings the variables `var` returns give (the environment, or a test's).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Settings, RdmaError> {
        let device = var("OXCCL_RDMA_DEVICE").filter(|d| !d.trim().is_empty());
        Ok(Settings {
            device: device.map(|d| d.trim().to_string()),
            port: number(&var, "OXCCL_RDMA_PORT", 1, "a port number from 1 to 255").and_then(
                |p: u8| match p {
                    0 => Err(setting(
                        "OXCCL_RDMA_PORT",
                        "0",
                        "a port number from 1 to 255",
                    )),
                    p => Ok(p),
                },
            )?,
            gid_index: number(&var, "OXCCL_RDMA_GID_INDEX", 0, "a GID table index")?,
            traffic_class: number(&var, "OXCCL_RDMA_TC", 0, "a traffic class from 0 to 255")?,
        })
    }
}

fn setting(name: &'static str, value: &str, expected: &'static str) -> RdmaError {
    RdmaError::Setting {
        name,
        value: value.into(),
        expected,
    }
}

/// Variable `name` as a number, `default` when unset.
fn number<T: std::str::FromStr>(
    var: &impl Fn(&str) -> Option<String>,
    name: &'static str,
    default: T,
    expected: &'static str,
) -> Result<T, RdmaError> {
    match var(name) {
        None => Ok(default),
        Some(v) => v.trim().parse().map_err(|_| setting(name, &v, expected)),
    }
}

/// Bits of an immediate that carry the sender's call epoch.
const EPOCH_BITS: u32 = 8;
/// The largest link word an immediate carries.
pub const MAX_IMM_WORD: u64 = (1 << (32 - EPOCH_BITS)) - 1;

/// The immediate of a post of link word `word` for call `epoch`: the word above the low
/// [`EPOCH_BITS`] bits of the epoch.
pub fn encode_imm(word: u64, epoch: u64) -> Result<u32, RdmaError> {
    if word > MAX_IMM_WORD {
        return Err(RdmaError::WordTooLarge {
            word,
            max: MAX_IMM_WORD,
        });
    }
    let low = epoch & ((1 << EPOCH_BITS) - 1);
    Ok(((word << EPOCH_BITS) | low) as u32)
}

/// The (word, epoch) of immediate `imm`, the epoch completed from its low bits as the one
/// nearest `current` (the receiver's call): a sender is never more than a few calls away
/// from its receiver, far less than the 128 either way the bits tell apart.
pub fn decode_imm(imm: u32, current: u64) -> (u64, u64) {
    let word = u64::from(imm >> EPOCH_BITS);
    let span = 1u64 << EPOCH_BITS;
    let low = u64::from(imm) & (span - 1);
    let base = current & !(span - 1);
    let candidates = [
        base.checked_sub(span).map(|b| b | low),
        Some(base | low),
        base.checked_add(span).map(|b| b | low),
    ];
    let epoch = candidates
        .into_iter()
        .flatten()
        .min_by_key(|e| e.abs_diff(current))
        .unwrap_or(low);
    (word, epoch)
}

#[cfg(test)]
mod tests;
