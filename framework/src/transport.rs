//! Which transport reaches each peer of a rank in a multi-process job: the ordered table
//! (NCCL's `selectTransport`), and `OXCCL_TRANSPORT`, which forces one.
//!
//! The table, in order, for a rank joined with [`crate::Communicator::init_rank`] (its
//! device serves it alone):
//!
//! 1. **in-process**: never, since every rank of `init_rank` has a device of its own;
//! 2. **shm**: the peer's process runs on this host (same hostname and boot id), unless
//!    `OXCCL_TRANSPORT=tcp`. Load/store links through mapped segments;
//! 3. **rdma**: the peer is on another host (or `OXCCL_TRANSPORT=rdma` forces it on this
//!    one), both ranks opened an RDMA port and published it, and both published a TCP
//!    listener (the link's setup, epochs and failures travel on a TCP connection; its
//!    data and posts on a queue pair). Put-only links. A rank opens its port at init
//!    (`OXCCL_RDMA_DEVICE`, `OXCCL_RDMA_PORT`, ... in a build with the `rdma` feature, or
//!    [`Config::rdma_nic`]); when it cannot, it says why in its log, publishes no port,
//!    and TCP carries its inter-host links.
//! 4. **tcp**: the peer published a listener address, unless `OXCCL_TRANSPORT` is `shm`
//!    or `rdma`. Put-only links.
//!
//! The first candidate that can connect wins; when none can, [`Error::NoTransport`] lists
//! each with why it refused; when a later one wins over rdma, the rdma refusal is logged.
//! The choice is symmetric (it depends on the two ranks' hosts, on both ranks' published
//! ports and on `OXCCL_TRANSPORT`, which every rank's digest covers), so two ranks always
//! agree on the transport between them.
//!
//! [`Config::rdma_nic`]: crate::Config::rdma_nic
//!
//! [`Error::NoTransport`]: crate::Error::NoTransport

use crate::bootstrap::JobTable;
use crate::error::{ConfigError, Error};
use crate::topology::Topology;
use oxccl_platform::transport::rdma::Verbs;
use oxccl_platform::{LinkAccess, Rank};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::sync::Arc;

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
    /// RDMA for every peer, also on this host (for tests, and to compare): a peer that
    /// cannot be reached over RDMA has no transport.
    Rdma,
}

impl TransportChoice {
    /// The name `OXCCL_TRANSPORT` takes.
    pub const fn name(self) -> &'static str {
        match self {
            TransportChoice::Auto => "auto",
            TransportChoice::Shm => "shm",
            TransportChoice::Tcp => "tcp",
            TransportChoice::Rdma => "rdma",
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
            "rdma" => Ok(TransportChoice::Rdma),
            _ => Err(ConfigError::new(
                "OXCCL_TRANSPORT",
                value,
                "use auto (shared memory on a host, RDMA or else TCP between hosts), shm, tcp \
                 or rdma",
            )),
        }
    }
}

/// How a rank reaches one peer.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum PeerTransport {
    Shm,
    Tcp(SocketAddr),
    /// Data and posts over RDMA; the rest on a TCP connection to this address.
    Rdma(SocketAddr),
}

/// A candidate's name and why it refused a peer.
pub(crate) type Refusal = (&'static str, String);

/// The RDMA device a communicator uses instead of opening one from the environment: a
/// NIC opened by the caller, or a test double of the verbs (the fake fabric of
/// `oxccl_platform::transport::rdma::fake`).
#[derive(Clone)]
pub struct RdmaNic(pub Arc<dyn Verbs>);

impl std::fmt::Debug for RdmaNic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RdmaNic({})", self.0.port())
    }
}

/// The RDMA port of this rank for `choice`: the configured NIC, or the one the
/// environment names (a build with the `rdma` feature); else why there is none.
pub(crate) fn open_rdma(
    choice: TransportChoice,
    nic: Option<&RdmaNic>,
) -> Result<Arc<dyn Verbs>, String> {
    if matches!(choice, TransportChoice::Shm | TransportChoice::Tcp) {
        return Err(format!("OXCCL_TRANSPORT={}", choice.name()));
    }
    if let Some(nic) = nic {
        return Ok(nic.0.clone());
    }
    open_from_env()
}

#[cfg(feature = "rdma")]
fn open_from_env() -> Result<Arc<dyn Verbs>, String> {
    use oxccl_platform::transport::rdma::{ib::IbNic, Settings};
    let settings = Settings::from_env().map_err(|e| e.to_string())?;
    let nic = IbNic::open(&settings).map_err(|e| e.to_string())?;
    Ok(nic)
}

#[cfg(not(feature = "rdma"))]
fn open_from_env() -> Result<Arc<dyn Verbs>, String> {
    Err("this build has no RDMA (build with the rdma feature)".into())
}

/// The transport from `rank` to `peer` of `table`, with the refusals of the candidates
/// before it; or every candidate's refusal. `no_rdma`: why this rank has no RDMA port,
/// when it has none.
pub(crate) fn choose(
    table: &JobTable,
    (rank, peer): (Rank, Rank),
    choice: TransportChoice,
    no_rdma: Option<&str>,
) -> Result<(PeerTransport, Vec<Refusal>), Vec<Refusal>> {
    let there = &table.ranks[peer];
    let same_host = there.host == table.ranks[rank].host;
    let mut refusals = vec![(
        "in-process",
        "each rank of init_rank has a device of its own".to_string(),
    )];
    match (same_host, choice) {
        (true, TransportChoice::Auto | TransportChoice::Shm) => {
            return Ok((PeerTransport::Shm, refusals))
        }
        (true, forced) => refusals.push(("shm", format!("OXCCL_TRANSPORT={}", forced.name()))),
        (false, _) => refusals.push((
            "shm",
            format!(
                "the rank is on host {}, not on this one",
                there.host.hostname
            ),
        )),
    }
    let addr = match there.tcp.as_deref().map(str::parse::<SocketAddr>) {
        Some(Ok(addr)) => Ok(addr),
        Some(Err(_)) => Err("the rank published no valid address"),
        None => Err("the rank published no listener"),
    };
    let rdma = match (choice, same_host) {
        (TransportChoice::Shm | TransportChoice::Tcp, _) => {
            Err(format!("OXCCL_TRANSPORT={}", choice.name()))
        }
        (TransportChoice::Auto, true) => Err("the rank is on this host".into()),
        _ => rdma_between(table, (rank, peer), no_rdma, addr),
    };
    match rdma {
        Ok(addr) => return Ok((PeerTransport::Rdma(addr), refusals)),
        Err(why) => refusals.push(("rdma", why)),
    }
    match (choice, addr) {
        (TransportChoice::Shm | TransportChoice::Rdma, _) => {
            refusals.push(("tcp", format!("OXCCL_TRANSPORT={}", choice.name())))
        }
        (_, Ok(addr)) => return Ok((PeerTransport::Tcp(addr), refusals)),
        (_, Err(why)) => refusals.push(("tcp", why.into())),
    }
    Err(refusals)
}

/// The control address of an RDMA link from `rank` to `peer`, when both published a port
/// (and the peer a listener); else why not.
fn rdma_between(
    table: &JobTable,
    (rank, peer): (Rank, Rank),
    no_rdma: Option<&str>,
    addr: Result<SocketAddr, &str>,
) -> Result<SocketAddr, String> {
    if table.ranks[rank].rdma.is_none() {
        let why = no_rdma.unwrap_or("it published none");
        return Err(format!("this rank has no RDMA port: {why}"));
    }
    if table.ranks[peer].rdma.is_none() {
        return Err("the rank published no RDMA port (its log says why)".into());
    }
    addr.map_err(|why| format!("{why} for the link's setup"))
}

/// How `rank` reaches every rank of `table` (`None` for itself), or the first peer it
/// cannot reach, with every candidate's refusal. A peer that TCP reaches because RDMA
/// refused is logged with the reason (once per reason).
pub(crate) fn links_of(
    table: &JobTable,
    rank: Rank,
    choice: TransportChoice,
    no_rdma: Option<&str>,
) -> Result<Vec<Option<PeerTransport>>, Error> {
    let mut fell_back: Vec<(String, Vec<Rank>)> = Vec::new();
    let links = (0..table.ranks.len())
        .map(|peer| {
            if peer == rank {
                return Ok(None);
            }
            let (link, refusals) =
                choose(table, (rank, peer), choice, no_rdma).map_err(|refusals| {
                    Error::NoTransport {
                        rank,
                        peer,
                        host: table.ranks[peer].host.hostname.clone(),
                        refusals,
                    }
                })?;
            let rdma_refusal = refusals.into_iter().find(|(name, _)| *name == "rdma");
            if let (PeerTransport::Tcp(_), Some((_, why))) = (link, rdma_refusal) {
                match fell_back.iter_mut().find(|(w, _)| *w == why) {
                    Some((_, peers)) => peers.push(peer),
                    None => fell_back.push((why, vec![peer])),
                }
            }
            Ok(Some(link))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    if choice == TransportChoice::Auto {
        for (why, peers) in fell_back {
            // A build without RDMA is a choice; a build with it that cannot use it is not.
            if cfg!(feature = "rdma") {
                tracing::warn!(rank, ?peers, reason = %why, "RDMA refused; TCP carries these links");
            } else {
                tracing::info!(rank, ?peers, reason = %why, "RDMA refused; TCP carries these links");
            }
        }
    }
    Ok(links)
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
    let forced = matches!(choice, TransportChoice::Tcp | TransportChoice::Rdma);
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
        table_with(hosts, tcp, &[])
    }

    /// `hosts`' ranks, those in `rdma` with an RDMA port published.
    fn table_with(hosts: &[&str], tcp: bool, rdma: &[Rank]) -> JobTable {
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
                    rdma: rdma.contains(&rank).then(|| "mlx5_0 port 1".to_string()),
                    host_figures: None,
                })
                .collect(),
        }
    }

    #[test]
    fn the_table_prefers_shared_memory_on_a_host_and_tcp_across() {
        let t = table(&["a", "a", "b"], true);
        let pick = |t: &JobTable, (r, p), choice| choose(t, (r, p), choice, None).map(|c| c.0);
        assert_eq!(
            pick(&t, (0, 1), TransportChoice::Auto),
            Ok(PeerTransport::Shm)
        );
        let addr = "127.0.0.1:1002".parse().unwrap();
        assert_eq!(
            pick(&t, (0, 2), TransportChoice::Auto),
            Ok(PeerTransport::Tcp(addr))
        );
        let forced = pick(&t, (2, 1), TransportChoice::Tcp);
        assert_eq!(
            forced,
            Ok(PeerTransport::Tcp("127.0.0.1:1001".parse().unwrap()))
        );
        assert!(pick(&t, (0, 1), TransportChoice::Tcp).is_ok());
    }

    #[test]
    fn rdma_comes_before_tcp_across_hosts_when_both_ranks_published_a_port() {
        let t = table_with(&["a", "a", "b"], true, &[0, 2]);
        let (link, refusals) = choose(&t, (0, 2), TransportChoice::Auto, None).unwrap();
        assert_eq!(link, PeerTransport::Rdma("127.0.0.1:1002".parse().unwrap()));
        assert_eq!(refusals.len(), 2, "in-process and shm refused first");
        // On one host, shared memory wins; across, a rank without a port falls to TCP
        // with the reason kept for the log.
        let (link, _) = choose(&t, (0, 1), TransportChoice::Auto, None).unwrap();
        assert_eq!(link, PeerTransport::Shm);
        let t = table_with(&["a", "b"], true, &[0]);
        let (link, refusals) = choose(&t, (0, 1), TransportChoice::Auto, None).unwrap();
        assert_eq!(link, PeerTransport::Tcp("127.0.0.1:1001".parse().unwrap()));
        assert!(
            refusals[2].1.contains("published no RDMA port"),
            "{refusals:?}"
        );
        let (link, refusals) =
            choose(&t, (1, 0), TransportChoice::Auto, Some("no device")).unwrap();
        assert!(matches!(link, PeerTransport::Tcp(_)), "symmetric");
        assert!(refusals[2].1.contains("no device"), "{refusals:?}");
    }

    #[test]
    fn forced_rdma_takes_peers_on_this_host_and_refuses_a_rank_without_a_port() {
        let t = table_with(&["a", "a", "a"], true, &[0, 1]);
        let (link, _) = choose(&t, (0, 1), TransportChoice::Rdma, None).unwrap();
        assert!(matches!(link, PeerTransport::Rdma(_)));
        let refusals = choose(&t, (0, 2), TransportChoice::Rdma, None).unwrap_err();
        let names: Vec<&str> = refusals.iter().map(|r| r.0).collect();
        assert_eq!(names, ["in-process", "shm", "rdma", "tcp"]);
        assert!(
            refusals[3].1.contains("OXCCL_TRANSPORT=rdma"),
            "{refusals:?}"
        );
        let err = links_of(&t, 2, TransportChoice::Rdma, Some("no device")).unwrap_err();
        assert!(err.to_string().contains("no device"), "{err}");
    }

    #[test]
    fn without_a_candidate_every_refusal_is_listed() {
        let t = table(&["a", "b"], true);
        let refusals = choose(&t, (0, 1), TransportChoice::Shm, None).unwrap_err();
        let names: Vec<&str> = refusals.iter().map(|r| r.0).collect();
        assert_eq!(names, ["in-process", "shm", "rdma", "tcp"]);
        assert!(refusals[1].1.contains("host b"), "{refusals:?}");
        let t = table(&["a", "b"], false);
        let refusals = choose(&t, (0, 1), TransportChoice::Auto, None).unwrap_err();
        assert!(refusals[3].1.contains("no listener"), "{refusals:?}");
    }

    #[test]
    fn choices_parse_and_bad_ones_name_the_variable() {
        let parse = |v: &str| v.parse::<TransportChoice>().ok();
        assert_eq!(parse("tcp"), Some(TransportChoice::Tcp));
        assert_eq!(parse(" shm "), Some(TransportChoice::Shm));
        assert_eq!(parse("auto"), Some(TransportChoice::Auto));
        assert_eq!(parse("rdma"), Some(TransportChoice::Rdma));
        let err = "verbs".parse::<TransportChoice>().unwrap_err();
        assert!(err.to_string().contains("OXCCL_TRANSPORT"), "{err}");
    }
}
