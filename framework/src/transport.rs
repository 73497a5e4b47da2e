//! Which transport reaches each peer of a rank in a multi-process job: the ordered table
//! (NCCL's `selectTransport`), and `OXCCL_TRANSPORT`, which forces one.
//!
//! The table, in order, for a rank joined with [`crate::Communicator::init_rank`] (its
//! device serves it alone):
//!
//! 1. **in-process**: never, since every rank of `init_rank` has a device of its own;
//! 2. **shm**: the peer's process runs on this host (same hostname and boot id), unless
//!    `OXCCL_TRANSPORT=tcp`. Load/store links through mapped segments;
//! 3. **tcp**: the peer published a listener address, unless `OXCCL_TRANSPORT=shm`.
//!    Put-only links.
//!
//! The first candidate that can connect wins; when none can, [`Error::NoTransport`] lists
//! each with why it refused. The choice is symmetric (it depends on the two ranks' hosts
//! and on `OXCCL_TRANSPORT`, which every rank's digest covers), so two ranks always agree
//! on the transport between them.
//!
//! [`Error::NoTransport`]: crate::Error::NoTransport

use crate::bootstrap::JobTable;
use crate::error::{ConfigError, Error};
use crate::topology::Topology;
use oxccl_platform::{LinkAccess, Rank};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, UdpSocket};

/// `OXCCL_TRANSPORT`: let the table choose, or force one transport for every peer in
/// another process.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum TransportChoice {
    /// Shared memory on this host, TCP to other hosts.
    #[default]
    Auto,
    /// Shared memory only: a rank on another host has no transport.
    Shm,
    /// TCP for every peer, also on this host (for tests, and to compare).
    Tcp,
}

impl TransportChoice {
    /// The name `OXCCL_TRANSPORT` takes.
    pub const fn name(self) -> &'static str {
        match self {
            TransportChoice::Auto => "auto",
            TransportChoice::Shm => "shm",
            TransportChoice::Tcp => "tcp",
        }
    }
}

impl std::str::FromStr for TransportChoice {
    type Err = ConfigError;

    fn from_str(value: &str) -> Result<Self, ConfigError> {
        match value.trim() {
            "" | "auto" => Ok(TransportChoice::Auto),
            "shm" => Ok(TransportChoice::Shm),
            "tcp" => Ok(TransportChoice::Tcp),
            _ => Err(ConfigError::new(
                "OXCCL_TRANSPORT",
                value,
                "use auto (shared memory on a host, TCP between hosts), shm or tcp",
            )),
        }
    }
}

/// How a rank reaches one peer.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum PeerTransport {
    Shm,
    Tcp(SocketAddr),
}

/// The transport from `rank` to `peer` of `table`, or every candidate's refusal.
pub(crate) fn choose(
    table: &JobTable,
    rank: Rank,
    peer: Rank,
    choice: TransportChoice,
) -> Result<PeerTransport, Vec<(&'static str, String)>> {
    let there = &table.ranks[peer];
    let same_host = there.host == table.ranks[rank].host;
    let mut refusals = vec![(
        "in-process",
        "each rank of init_rank has a device of its own".to_string(),
    )];
    match (same_host, choice) {
        (true, TransportChoice::Auto | TransportChoice::Shm) => return Ok(PeerTransport::Shm),
        (true, TransportChoice::Tcp) => refusals.push(("shm", "OXCCL_TRANSPORT=tcp".into())),
        (false, _) => refusals.push((
            "shm",
            format!(
                "the rank is on host {}, not on this one",
                there.host.hostname
            ),
        )),
    }
    let addr = there.tcp.as_deref().map(str::parse::<SocketAddr>);
    match (choice, addr) {
        (TransportChoice::Shm, _) => refusals.push(("tcp", "OXCCL_TRANSPORT=shm".into())),
        (_, Some(Ok(addr))) => return Ok(PeerTransport::Tcp(addr)),
        (_, Some(Err(_))) => refusals.push(("tcp", "the rank published no valid address".into())),
        (_, None) => refusals.push(("tcp", "the rank published no listener".into())),
    }
    Err(refusals)
}

/// How `rank` reaches every rank of `table` (`None` for itself), or the first peer it
/// cannot reach, with every candidate's refusal.
pub(crate) fn links_of(
    table: &JobTable,
    rank: Rank,
    choice: TransportChoice,
) -> Result<Vec<Option<PeerTransport>>, Error> {
    (0..table.ranks.len())
        .map(|peer| {
            if peer == rank {
                return Ok(None);
            }
            choose(table, rank, peer, choice)
                .map(Some)
                .map_err(|refusals| Error::NoTransport {
                    rank,
                    peer,
                    host: table.ranks[peer].host.hostname.clone(),
                    refusals,
                })
        })
        .collect()
}

/// `topology` with the access the transports give its links: put-only inside a server
/// when some pair of its ranks talks over TCP (ranks on two hosts, or TCP forced), and
/// across servers when ranks span hosts. Computed from the whole table, so every rank
/// gets the same topology (its selection digest was compared before the table was
/// known).
pub(crate) fn with_transport_access(
    topology: Topology,
    table: &JobTable,
    choice: TransportChoice,
) -> Topology {
    let forced = choice == TransportChoice::Tcp;
    let host = |r: Rank| &table.ranks[r].host;
    let spans = |mut ranks: std::ops::Range<Rank>| {
        let first = ranks.next();
        ranks.any(|r| first.is_some_and(|f| host(f) != host(r)))
    };
    let servers = topology.server_sizes().len();
    let intra_put = forced || (0..servers).any(|s| spans(topology.server_ranks(s)));
    let inter_put = forced || spans(0..table.ranks.len());
    let access = |put: bool, was: LinkAccess| if put { LinkAccess::Put } else { was };
    let intra = access(intra_put, topology.intra().spec.access);
    let inter = access(inter_put, topology.inter().spec.access);
    topology.with_fabric_access(intra, inter)
}

/// A listener for this rank's TCP connections, on the address this host uses to reach
/// `root` (the bootstrap root's), so that peers on other hosts reach it the way this host
/// reached the root. A root on loopback gives a loopback listener.
pub(crate) fn listen_towards(root: SocketAddr) -> std::io::Result<TcpListener> {
    let ip = local_ip_towards(root).unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
    TcpListener::bind(SocketAddr::new(ip, 0))
}

/// The local address of a route to `to` (a UDP socket's connect sends nothing).
fn local_ip_towards(to: SocketAddr) -> std::io::Result<IpAddr> {
    let any: SocketAddr = match to {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(any)?;
    socket.connect(to)?;
    Ok(socket.local_addr()?.ip())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::{HostId, RankInfo};

    fn table(hosts: &[&str], tcp: bool) -> JobTable {
        JobTable {
            ranks: hosts
                .iter()
                .enumerate()
                .map(|(rank, h)| RankInfo {
                    rank,
                    host: HostId {
                        hostname: h.to_string(),
                        boot_id: "b".into(),
                    },
                    pid: 1,
                    digests: Vec::new(),
                    tcp: tcp.then(|| format!("127.0.0.1:{}", 1000 + rank)),
                })
                .collect(),
        }
    }

    #[test]
    fn the_table_prefers_shared_memory_on_a_host_and_tcp_across() {
        let t = table(&["a", "a", "b"], true);
        assert_eq!(
            choose(&t, 0, 1, TransportChoice::Auto),
            Ok(PeerTransport::Shm)
        );
        let addr = "127.0.0.1:1002".parse().unwrap();
        assert_eq!(
            choose(&t, 0, 2, TransportChoice::Auto),
            Ok(PeerTransport::Tcp(addr))
        );
        let forced = choose(&t, 2, 1, TransportChoice::Tcp);
        assert_eq!(
            forced,
            Ok(PeerTransport::Tcp("127.0.0.1:1001".parse().unwrap()))
        );
        assert!(choose(&t, 0, 1, TransportChoice::Tcp).is_ok());
    }

    #[test]
    fn without_a_candidate_every_refusal_is_listed() {
        let t = table(&["a", "b"], true);
        let refusals = choose(&t, 0, 1, TransportChoice::Shm).unwrap_err();
        let names: Vec<&str> = refusals.iter().map(|r| r.0).collect();
        assert_eq!(names, ["in-process", "shm", "tcp"]);
        assert!(refusals[1].1.contains("host b"), "{refusals:?}");
        let t = table(&["a", "b"], false);
        let refusals = choose(&t, 0, 1, TransportChoice::Auto).unwrap_err();
        assert!(refusals[2].1.contains("no listener"), "{refusals:?}");
    }

    #[test]
    fn choices_parse_and_bad_ones_name_the_variable() {
        let parse = |v: &str| v.parse::<TransportChoice>().ok();
        assert_eq!(parse("tcp"), Some(TransportChoice::Tcp));
        assert_eq!(parse(" shm "), Some(TransportChoice::Shm));
        assert_eq!(parse("auto"), Some(TransportChoice::Auto));
        let err = "rdma".parse::<TransportChoice>().unwrap_err();
        assert!(err.to_string().contains("OXCCL_TRANSPORT"), "{err}");
    }
}
