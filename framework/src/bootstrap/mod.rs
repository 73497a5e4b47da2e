//! Bootstrap: how the ranks of a job of many processes, on many hosts, find each other.
//!
//! NCCL's shape. One process creates the job's [`UniqueId`] ([`UniqueId::new`]), which
//! starts the job's **root** in that process (`root`); the launcher or the application
//! hands the id to every rank (an environment variable, a file, MPI: see [`launcher`]);
//! every rank calls [`join`] with the id, the rank count and its own rank. The root
//! gathers each rank's [`RankInfo`] — its host ([`HostId`]: hostname and boot id), its
//! process id, and the digests of everything that decides algorithm selection
//! ([`crate::digest`]) — and answers every rank with the whole [`JobTable`], or with a
//! [`Refusal`] that says what went wrong: ranks built or configured differently (which
//! part differs, on which ranks), a rank that never came, a rank claimed twice.
//!
//! What the table is for: the ranks sharing a host ([`JobTable::hosts`]) become one
//! server of the job's topology and may share memory; the transports (`platform`'s
//! `transport/`) connect the peers that the executors' resource requests name.
//!
//! Security: the id carries a random secret. The root drops, and logs, every connection
//! that does not open with it, before it reads anything else, and never takes a rank's
//! claim from a connection without it.
//!
//! Every wait has a deadline: a rank waits at most its timeout for the root to come up
//! and answer; the root waits at most its own timeout for every rank, then tells the ranks
//! that came which ranks did not.

mod error;
mod host;
mod id;
pub mod launcher;
mod root;
#[cfg(test)]
mod tests;
mod wire;

pub use error::BootstrapError;
pub use host::{hostname, HostId};
pub use id::{Secret, UniqueId, ROOT_TIMEOUT, SECRET_BYTES, UNIQUE_ID_BYTES};
pub use launcher::{Launch, Launcher, Rendezvous};

use crate::error::rank_list;
use oxccl_platform::Rank;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::TcpStream;
use std::time::{Duration, Instant};
use wire::{Answer, Hello, MAX_ANSWER};

/// How long a rank waits between attempts to reach a root that is not up yet.
const RETRY: Duration = Duration::from_millis(20);

/// One named digest of a selection input (`registry`, `tuning`, `topology`, `planning`,
/// `transport`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DigestPart {
    pub part: String,
    pub value: u64,
}

/// What a rank tells the others.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankInfo {
    pub rank: Rank,
    pub host: HostId,
    pub pid: u32,
    /// The digests of what decides selection, in a fixed order of parts.
    pub digests: Vec<DigestPart>,
    /// Where this rank's TCP transport listens (`host:port`), if it does.
    #[serde(default)]
    pub tcp: Option<String>,
    /// The RDMA port this rank opened (`mlx5_0 port 1`), if it did.
    #[serde(default)]
    pub rdma: Option<String>,
    /// Rank 0 only: its host's measured figures for the cost model
    /// (`HostFigures::to_text`), which every rank of the job models its host with, so
    /// that all reach the same selections (see `Communicator::init_rank`).
    #[serde(default)]
    pub host_figures: Option<String>,
}

impl RankInfo {
    /// This process as rank `rank`, with its selection digests.
    pub fn this(rank: Rank, digests: Vec<DigestPart>) -> RankInfo {
        RankInfo {
            rank,
            host: HostId::this(),
            pid: std::process::id(),
            digests,
            tcp: None,
            rdma: None,
            host_figures: None,
        }
    }
}

/// Every rank's info, indexed by rank: the same on every rank of a job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobTable {
    pub ranks: Vec<RankInfo>,
}

impl JobTable {
    /// The job's hosts, each with its ranks ascending, ordered by their first rank.
    pub fn hosts(&self) -> Vec<(HostId, Vec<Rank>)> {
        let mut by_host: BTreeMap<&HostId, Vec<Rank>> = BTreeMap::new();
        for info in &self.ranks {
            by_host.entry(&info.host).or_default().push(info.rank);
        }
        let mut hosts: Vec<(HostId, Vec<Rank>)> = by_host
            .into_iter()
            .map(|(h, ranks)| (h.clone(), ranks))
            .collect();
        hosts.sort_by_key(|(_, ranks)| ranks[0]);
        hosts
    }

    /// Ranks per server, for [`crate::Topology::servers`]: one server per host, hosts in
    /// the order of their first rank. A topology's servers hold consecutive ranks, so a
    /// host whose ranks are not consecutive (a cyclic placement) is refused, naming it.
    pub fn server_sizes(&self) -> Result<Vec<usize>, BootstrapError> {
        self.hosts()
            .into_iter()
            .map(|(host, ranks)| {
                let consecutive = ranks.windows(2).all(|w| w[1] == w[0] + 1);
                match consecutive {
                    true => Ok(ranks.len()),
                    false => Err(BootstrapError::ScatteredHost {
                        host: host.hostname,
                        ranks: rank_list(&ranks),
                    }),
                }
            })
            .collect()
    }

    /// The ranks on `rank`'s host, ascending (`rank` among them).
    pub fn host_ranks(&self, rank: Rank) -> Vec<Rank> {
        let host = &self.ranks[rank].host;
        self.ranks
            .iter()
            .filter(|i| &i.host == host)
            .map(|i| i.rank)
            .collect()
    }
}

/// Ranks that hold one value of a digest part (`None`: they sent no such part).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DigestGroup {
    pub value: Option<u64>,
    pub ranks: Vec<Rank>,
}

/// One selection input on which the ranks disagree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DigestMismatch {
    pub part: String,
    /// The values, ordered by their first rank.
    pub groups: Vec<DigestGroup>,
}

impl std::fmt::Display for DigestMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let groups: Vec<String> = self
            .groups
            .iter()
            .map(|g| {
                let value = g
                    .value
                    .map_or_else(|| "nothing".to_string(), |v| format!("{v:#018x}"));
                format!("{value} on ranks {}", rank_list(&g.ranks))
            })
            .collect();
        write!(f, "{}: {}", self.part, groups.join(", "))
    }
}

/// Why the root turned a rank, or the whole job, away.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum Refusal {
    #[error("rank {rank} is not in 0..{ranks}")]
    OutOfRange { rank: Rank, ranks: usize },
    #[error(
        "rank {rank} joined twice; give every process its own rank (the launcher's \
         rank variable, or init_rank's argument)"
    )]
    Duplicate { rank: Rank },
    #[error("rank {rank} was started for {claimed} ranks; a job has 1 to {max}")]
    RankCountOutOfRange {
        rank: Rank,
        claimed: usize,
        max: usize,
    },
    #[error(
        "rank {rank} was started for {claimed} ranks, the job has {expected}; start every \
         rank with the same rank count"
    )]
    RankCount {
        rank: Rank,
        claimed: usize,
        expected: usize,
    },
    #[error(
        "the ranks were built or configured differently and would select different \
         algorithms ({}); build every rank from the same binary and plugins, with the same \
         OXCCL_TUNE_FILE, OXCCL_TOPO_FILE and OXCCL_* settings",
        mismatches.iter().map(|m| m.to_string()).collect::<Vec<_>>().join("; ")
    )]
    Digests { mismatches: Vec<DigestMismatch> },
    #[error(
        "ranks {} of {expected} never joined before the root's deadline; check that every \
         rank was started and given the same id",
        rank_list(ranks)
    )]
    Missing { ranks: Vec<Rank>, expected: usize },
}

/// Every digest part on which `infos` disagree, in the order of rank 0's parts (parts only
/// other ranks sent follow).
pub(crate) fn digest_mismatches(infos: &[RankInfo]) -> Vec<DigestMismatch> {
    let mut parts: Vec<&str> = Vec::new();
    for info in infos {
        for d in &info.digests {
            if !parts.contains(&d.part.as_str()) {
                parts.push(&d.part);
            }
        }
    }
    parts
        .into_iter()
        .filter_map(|part| {
            let mut groups: Vec<DigestGroup> = Vec::new();
            for info in infos {
                let value = info
                    .digests
                    .iter()
                    .find(|d| d.part == part)
                    .map(|d| d.value);
                match groups.iter_mut().find(|g| g.value == value) {
                    Some(g) => g.ranks.push(info.rank),
                    None => groups.push(DigestGroup {
                        value,
                        ranks: vec![info.rank],
                    }),
                }
            }
            (groups.len() > 1).then(|| DigestMismatch {
                part: part.to_string(),
                groups,
            })
        })
        .collect()
}

/// Join the job of `id` as rank `info.rank` of `ranks`: reach the root (retrying until it
/// is up, for at most `timeout`), present the secret and `info`, and wait (again within
/// `timeout`) for every rank's info.
pub fn join(
    id: &UniqueId,
    ranks: usize,
    info: RankInfo,
    timeout: Duration,
) -> Result<JobTable, BootstrapError> {
    let rank = info.rank;
    if rank >= ranks || (id.ranks != 0 && id.ranks != ranks) {
        return Err(BootstrapError::BadRank {
            rank,
            ranks: if id.ranks != 0 { id.ranks } else { ranks },
        });
    }
    let deadline = Instant::now() + timeout;
    let mut stream = connect(id, deadline, timeout)?;
    let peer = id.root.to_string();
    let remaining = deadline.saturating_duration_since(Instant::now());
    stream
        .set_read_timeout(Some(remaining.max(Duration::from_millis(1))))
        .and_then(|()| stream.set_nodelay(true))
        .map_err(|e| BootstrapError::io(&peer, "configuring the connection", e))?;
    wire::send_hello(&mut stream, &id.secret.0, &Hello { ranks, info }, &peer)?;
    let answer: Answer = wire::read_frame(&mut stream, MAX_ANSWER, &peer)?;
    // An answer to the whole job (a table, digests that differ, ranks missing) goes to
    // every rank before the root ends: where the root runs in this process, this rank
    // stays until it has, so that exiting cannot cut the others' answers short.
    if answer.is_for_everyone() {
        root::wait_local(id.root);
    }
    match answer {
        Answer::Refused(refusal) => Err(BootstrapError::Refused { rank, refusal }),
        Answer::Table(table) => check_table(table, ranks, &peer),
    }
}

/// The digests a rank of a communicator configured with `config` on `topology` in `mode`
/// presents ([`crate::digest::selection_digest_parts`], then the transport choice).
pub fn digest_parts(
    config: &crate::Config,
    topology: &crate::Topology,
    mode: crate::Mode,
) -> Result<Vec<DigestPart>, crate::Error> {
    let parts = crate::digest::with_inputs_of(
        config,
        topology,
        mode,
        crate::digest::selection_digest_parts,
    )?;
    let mut parts: Vec<DigestPart> = parts
        .into_iter()
        .map(|(part, value)| DigestPart {
            part: part.to_string(),
            value,
        })
        .collect();
    // The transport decides the links' access, hence selection: ranks must agree on it.
    parts.push(DigestPart {
        part: "transport".into(),
        value: config.transport as u64,
    });
    // Whether peers map user buffers decides the mode (zero-copy or staged), hence the
    // programs: a rank that stages while its peers read its buffers would fail them.
    parts.push(DigestPart {
        part: "shared buffers".into(),
        value: u64::from(config.shared_buffers && config.zero_copy),
    });
    Ok(parts)
}

/// Join the job this process was launched into ([`Launch`]): get its id as the launch's
/// rendezvous says, join it with `digests`, and (rank 0) remove the rendezvous file.
pub fn join_launch(
    launch: &Launch,
    digests: Vec<DigestPart>,
    timeout: Duration,
) -> Result<JobTable, BootstrapError> {
    let id = launch.unique_id(timeout)?;
    let info = RankInfo::this(launch.rank, digests);
    let table = join(&id, launch.size, info, timeout);
    launch.joined();
    table
}

/// Connect to the root, retrying while it is not up yet.
fn connect(
    id: &UniqueId,
    deadline: Instant,
    timeout: Duration,
) -> Result<TcpStream, BootstrapError> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let attempt = TcpStream::connect_timeout(&id.root, left.max(Duration::from_millis(1)));
        match attempt {
            Ok(stream) => return Ok(stream),
            Err(e) if Instant::now() + RETRY >= deadline => {
                return Err(BootstrapError::RootUnreachable {
                    addr: id.root,
                    waited: timeout,
                    source: Some(std::sync::Arc::new(e)),
                })
            }
            Err(_) => std::thread::sleep(RETRY),
        }
    }
}

/// A table is usable when it has every rank once, in order.
fn check_table(table: JobTable, ranks: usize, peer: &str) -> Result<JobTable, BootstrapError> {
    let in_order = table
        .ranks
        .iter()
        .enumerate()
        .all(|(i, info)| info.rank == i);
    if table.ranks.len() != ranks || !in_order {
        return Err(BootstrapError::Protocol {
            peer: peer.to_string(),
            reason: format!(
                "the table has {} entries, not the job's {ranks} ranks in order",
                table.ranks.len()
            ),
        });
    }
    Ok(table)
}
