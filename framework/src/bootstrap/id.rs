//! The unique id a launcher hands every rank: where the root listens, the job's secret and
//! the rank count.
//!
//! NCCL's `ncclUniqueId` is 128 opaque bytes that the application broadcasts itself (MPI,
//! a file, a store). oxccl's id is the same size ([`UniqueId::to_bytes`], for the C ABI)
//! and also a short string ([`UniqueId`]'s `Display` and `FromStr`:
//! `oxccl1-<ranks>-<secret>@<host:port>`) that fits an environment variable or a file. It
//! carries the job's **secret**: the root and every transport socket drop a connection that
//! does not present it, so the id must travel only to the job's own ranks.

use super::error::BootstrapError;
use super::root;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, ToSocketAddrs};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// How long the root of [`UniqueId::new`] waits for every rank to join.
pub const ROOT_TIMEOUT: Duration = Duration::from_secs(600);

/// Bytes of a secret.
pub const SECRET_BYTES: usize = 16;

/// Bytes of [`UniqueId::to_bytes`] (NCCL's `NCCL_UNIQUE_ID_BYTES`).
pub const UNIQUE_ID_BYTES: usize = 128;

/// The version tag every id string starts with.
const TAG: &str = "oxccl1-";

/// A job's shared secret. `Debug` does not print it.
#[derive(Copy, Clone, PartialEq, Eq)]
pub struct Secret(pub(crate) [u8; SECRET_BYTES]);

impl Secret {
    /// Fresh random bytes from the operating system.
    pub fn random() -> Result<Secret, BootstrapError> {
        let mut bytes = [0u8; SECRET_BYTES];
        getrandom::fill(&mut bytes).map_err(|e| BootstrapError::Random {
            source: Arc::new(std::io::Error::other(e.to_string())),
        })?;
        Ok(Secret(bytes))
    }

    /// A secret every rank derives from what its launcher told it (see
    /// [`super::launcher`]): it keeps out programs that do not know the job, not an
    /// attacker who reads the environment. [`crate::digest::Digest`] over the parts,
    /// twice with different seeds, so that the 16 bytes are all used.
    pub fn derived(parts: &[&str]) -> Secret {
        let mut bytes = [0u8; SECRET_BYTES];
        for (half, seed) in [(0usize, "oxccl secret a"), (8, "oxccl secret b")] {
            let mut d = crate::digest::Digest::new();
            d.str(seed);
            for p in parts {
                d.str(p);
            }
            bytes[half..half + 8].copy_from_slice(&d.finish().to_le_bytes());
        }
        Secret(bytes)
    }

    /// Compare with `other` in time that does not depend on where they differ.
    pub fn matches(&self, other: &[u8]) -> bool {
        if other.len() != SECRET_BYTES {
            return false;
        }
        self.0
            .iter()
            .zip(other)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }

    fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn from_hex(s: &str) -> Option<Secret> {
        if s.len() != 2 * SECRET_BYTES || !s.is_ascii() {
            return None;
        }
        let mut bytes = [0u8; SECRET_BYTES];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(Secret(bytes))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// Where a job's root listens, the job's secret, and how many ranks it has (0: the root
/// takes the count from the first rank that joins and refuses any rank that disagrees).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct UniqueId {
    pub root: SocketAddr,
    pub secret: Secret,
    pub ranks: usize,
}

impl UniqueId {
    /// A new job of a rank count its ranks agree on: [`UniqueId::create`] with the count
    /// left open and the root waiting at most [`ROOT_TIMEOUT`].
    pub fn new() -> Result<UniqueId, BootstrapError> {
        UniqueId::create(0, ROOT_TIMEOUT)
    }

    /// A new job of `ranks` ranks (0: the first rank to join sets the count): start its root in this process (listening on every interface, on a port
    /// the system picks) and return the id to hand to every rank, this one included. The
    /// id names this host by the first address its hostname resolves to that is not a
    /// loopback address, or `127.0.0.1` when there is none; where that is not the address
    /// the other hosts reach, start the root with [`UniqueId::listen`] instead
    /// (`OXCCL_COMM_ID`). The root serves one job and then ends, or ends after `timeout`.
    pub fn create(ranks: usize, timeout: Duration) -> Result<UniqueId, BootstrapError> {
        let bind = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);
        let listener = bind_listener(&bind.to_string())?;
        let port = local_port(&listener)?;
        let id = UniqueId {
            root: SocketAddr::new(advertised_ip(), port),
            secret: Secret::random()?,
            ranks,
        };
        root::spawn(listener, id, timeout)?;
        Ok(id)
    }

    /// Start a job's root listening on `addr` with `secret` for `ranks` ranks (0: any
    /// count, agreed by the ranks): what rank 0 does for `OXCCL_COMM_ID`.
    pub fn listen(
        addr: SocketAddr,
        secret: Secret,
        ranks: usize,
        timeout: Duration,
    ) -> Result<UniqueId, BootstrapError> {
        let listener = bind_listener(&addr.to_string())?;
        let id = UniqueId {
            root: addr,
            secret,
            ranks,
        };
        root::spawn(listener, id, timeout)?;
        Ok(id)
    }

    /// A short name for the job, the same on every rank and different for every job
    /// (made from its secret and root): it names the job's shared-memory segments.
    pub fn job_tag(&self) -> String {
        let mut d = crate::digest::Digest::new();
        d.str("oxccl job tag")
            .bytes(&self.secret.0)
            .str(&self.root.to_string());
        format!("{:016x}", d.finish())
    }

    /// The id as 128 bytes (its string form, NUL padded): the C ABI's `oxcclUniqueId`.
    pub fn to_bytes(&self) -> [u8; UNIQUE_ID_BYTES] {
        let text = self.to_string();
        let mut bytes = [0u8; UNIQUE_ID_BYTES];
        // The string is at most 7 + 20 + 1 + 32 + 1 + 47 bytes (an IPv6 address with
        // scope and port), under 128: a longer one would be a bug here.
        let n = text.len().min(UNIQUE_ID_BYTES);
        bytes[..n].copy_from_slice(&text.as_bytes()[..n]);
        bytes
    }

    /// The id back from [`UniqueId::to_bytes`].
    pub fn from_bytes(bytes: &[u8]) -> Result<UniqueId, BootstrapError> {
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        let text = std::str::from_utf8(&bytes[..end]).map_err(|_| BootstrapError::BadId {
            reason: "the bytes are not UTF-8".into(),
        })?;
        text.parse()
    }
}

impl fmt::Display for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{TAG}{}-{}@{}", self.ranks, self.secret.hex(), self.root)
    }
}

impl FromStr for UniqueId {
    type Err = BootstrapError;

    fn from_str(s: &str) -> Result<UniqueId, BootstrapError> {
        let bad = |reason: &str| BootstrapError::BadId {
            reason: format!("{s:?}: {reason}"),
        };
        let rest = s
            .trim()
            .strip_prefix(TAG)
            .ok_or_else(|| bad("it does not start with `oxccl1-`"))?;
        let (head, addr) = rest
            .split_once('@')
            .ok_or_else(|| bad("no `@` before the root's address"))?;
        let (ranks, secret) = head
            .split_once('-')
            .ok_or_else(|| bad("no `-` between the rank count and the secret"))?;
        Ok(UniqueId {
            ranks: ranks
                .parse()
                .map_err(|_| bad("the rank count is not a number"))?,
            secret: Secret::from_hex(secret)
                .ok_or_else(|| bad("the secret is not 32 hexadecimal digits"))?,
            root: addr
                .parse()
                .map_err(|_| bad("the root's address is not ip:port"))?,
        })
    }
}

fn bind_listener(addr: &str) -> Result<TcpListener, BootstrapError> {
    TcpListener::bind(addr).map_err(|e| BootstrapError::Listen {
        addr: addr.to_string(),
        source: Arc::new(e),
    })
}

fn local_port(listener: &TcpListener) -> Result<u16, BootstrapError> {
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| BootstrapError::io("the root's listener", "asking its address", e))
}

/// The address other hosts most likely reach this one by (see [`UniqueId::new`]).
fn advertised_ip() -> IpAddr {
    let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let Some(host) = super::host::hostname() else {
        return loopback;
    };
    (host.as_str(), 0)
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.find(|a| a.is_ipv4() && !a.ip().is_loopback()))
        .map_or(loopback, |a| a.ip())
}

/// Resolve `host:port` (a name or an address) to the first address it names.
pub(crate) fn resolve(spec: &str) -> Result<SocketAddr, BootstrapError> {
    let failed = |source: Option<std::io::Error>| BootstrapError::Resolve {
        spec: spec.to_string(),
        source: source.map(|e| Arc::new(e) as crate::error::Cause),
    };
    spec.to_socket_addrs()
        .map_err(|e| failed(Some(e)))?
        .next()
        .ok_or_else(|| failed(None))
}
