//! Topology: which ranks sit in which server, which links join them, and how fast they are.
//!
//! The framework needs a topology to hand out links (a link that does not exist or is
//! broken is refused); the cost model needs it to know how long bytes take to cross a link.
//! Both read the same table, so what the analyzer proves and what the cost model times is
//! the machine the user described.
//!
//! A topology is a list of servers (ranks are numbered server by server) and a link table
//! held as rules rather than as a list of pairs, so a 4096-rank mesh costs a few bytes:
//!
//! - an **intra-server fabric** and an **inter-server fabric**, each a default
//!   [`LinkSpec`] (kind, bandwidth per direction, latency) and a [`Wiring`] that says which
//!   pairs it joins (a full mesh, a ring of neighbours, rank `i` of every server, or none);
//! - an optional **shared NIC** bandwidth per rank: every RDMA transfer of a rank, whatever
//!   the peer, goes through its one NIC, so concurrent inter-server transfers share it;
//! - **per-pair overrides**, one spec per direction, which may also add a link the wiring
//!   lacks;
//! - **link access**: every spec says whether the link is *load/store* (the peer's buffers
//!   are readable and writable: HCCS, shared memory) or *put-only* (only writes into the
//!   peer's CCL buffers and scratch, and signals: RoCE, TCP). Executors declare which they
//!   need ([`crate::LinkNeed`]); selection screens on it and the analyzer refuses a task
//!   that reads a peer's buffer, or writes its user buffers, over a put-only link;
//! - **broken links**, which do not exist for anyone: [`Topology::link_kind`] and
//!   [`Topology::link`] answer `None` for them, as for pairs that have no link at all.
//!
//! Built-in shapes live in [`presets`] (with the sources of their figures), the file format
//! in [`file`](mod@file). [`Topology::parse_spec`] accepts either: a preset name or a path to a TOML
//! file.

pub mod file;
pub mod presets;
pub mod processor;

use crate::error::ConfigError;
use crate::limits::MAX_RANKS;
use oxccl_platform::host::calibration::HostFigures;
use oxccl_platform::{LinkAccess, LinkKind, Rank};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

pub use file::{parse_broken, TopologyError};
pub use presets::PRESETS;
pub use processor::{Processor, RanksRun};

/// The speed of one direction of a link.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct LinkSpec {
    /// Intra-server DMA-like ([`LinkKind::Sdma`]) or inter-server RDMA-like
    /// ([`LinkKind::Rdma`]); it decides the handshake executors append.
    pub kind: LinkKind,
    /// Bandwidth in one direction, GB/s (1e9 bytes per second).
    pub bandwidth_gbps: f64,
    /// One-way latency of a transfer or a signal, microseconds.
    pub latency_us: f64,
    /// What the link lets a rank do with the peer's memory: load/store (read and write
    /// every buffer) or put-only (write the peer's CCL buffers and scratch, and signal).
    pub access: LinkAccess,
}

impl LinkSpec {
    /// Bandwidth in bytes per second.
    pub fn bytes_per_s(&self) -> f64 {
        self.bandwidth_gbps * 1e9
    }

    /// Latency in seconds.
    pub fn latency_s(&self) -> f64 {
        self.latency_us * 1e-6
    }
}

/// Which pairs a fabric joins.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Wiring {
    /// Every pair.
    Mesh,
    /// Intra-server only: each rank with its two neighbours in the server, cyclically.
    Ring,
    /// Inter-server only: rank `i` of a server with rank `i` of every other server (HCCL's
    /// level-1 planes).
    Plane,
    /// No pair.
    None,
}

impl Wiring {
    /// The name used in topology files.
    pub const fn name(self) -> &'static str {
        match self {
            Wiring::Mesh => "mesh",
            Wiring::Ring => "ring",
            Wiring::Plane => "plane",
            Wiring::None => "none",
        }
    }
}

/// A default link spec and the pairs it applies to.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Fabric {
    pub spec: LinkSpec,
    pub wiring: Wiring,
}

/// What joins two ranks.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum LinkStatus {
    /// A healthy link, with the spec of the direction asked for.
    Up(LinkSpec),
    /// The link exists in the machine but is marked broken: nobody may use it.
    Broken,
    /// There is no link between the two ranks (or they are the same rank).
    Missing,
}

impl LinkStatus {
    /// Why a link cannot be used, phrased to follow "the link to rank N".
    pub const fn refusal(&self) -> &'static str {
        match self {
            LinkStatus::Up(_) => "is healthy",
            LinkStatus::Broken => "is broken",
            LinkStatus::Missing => "does not exist in the topology",
        }
    }
}

/// The specs of both directions of one overridden pair `(low, high)`.
#[derive(Copy, Clone, Debug, PartialEq)]
pub(crate) struct PairSpec {
    /// low -> high.
    pub up: LinkSpec,
    /// high -> low.
    pub down: LinkSpec,
}

/// Who shares a NIC (see [`Topology::nic_gbps`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum NicScope {
    /// Each rank has a NIC of its own: an accelerator's port (HCCL's one RoCE port per
    /// NPU, a GPU's rail). The presets of accelerator servers.
    #[default]
    Rank,
    /// Every rank of a server shares one: a CPU host's Ethernet port, which carries the
    /// TCP of every process on the host (the `hosts` presets).
    Server,
}

impl NicScope {
    /// The name a topology file gives it (`nic_shared_by`).
    pub const fn name(self) -> &'static str {
        match self {
            NicScope::Rank => "rank",
            NicScope::Server => "server",
        }
    }
}

/// Servers, their ranks, and the link table.
#[derive(Clone, Debug, PartialEq)]
pub struct Topology {
    /// Ranks per server; ranks are numbered server by server.
    servers: Vec<usize>,
    /// First rank of each server, plus the total at the end.
    starts: Vec<usize>,
    intra: Fabric,
    inter: Fabric,
    /// Shared RDMA bandwidth per NIC, GB/s per direction; `None`: unlimited.
    nic_gbps: Option<f64>,
    /// Who shares a NIC: each rank has its own (a port per accelerator), or every rank of
    /// a server shares one (a CPU host's Ethernet port).
    nic_scope: NicScope,
    /// Copy bandwidth of each server's memory system, shared by every Copy and Reduce of
    /// its ranks, GB/s of data copied; `None`: every rank has memory of its own (NPUs and
    /// GPUs). A CPU host's ranks are threads over one memory bus: [`presets::host`].
    memory_gbps: Option<f64>,
    /// How each server runs its ranks' tasks when they are threads of a CPU host
    /// ([`processor`]); `None`: on engines of their own (NPUs and GPUs).
    processor: Option<Processor>,
    /// Per-pair overrides keyed by (low, high).
    overrides: BTreeMap<(Rank, Rank), PairSpec>,
    /// Broken links, stored as (low, high).
    broken: BTreeSet<(Rank, Rank)>,
}

impl Topology {
    /// Servers of the given sizes joined by the given fabrics. Errors on an empty server list,
    /// an empty server, or more than [`MAX_RANKS`] ranks in all.
    pub fn from_fabrics(
        ranks_per_server: Vec<usize>,
        intra: Fabric,
        inter: Fabric,
        nic_gbps: Option<f64>,
    ) -> Result<Self, ConfigError> {
        let bad = |reason: String| ConfigError {
            var: "topology",
            value: format!("{ranks_per_server:?}"),
            reason,
            source: None,
        };
        if ranks_per_server.is_empty() || ranks_per_server.contains(&0) {
            return Err(bad("every server needs at least one rank".into()));
        }
        let total = ranks_per_server
            .iter()
            .try_fold(0usize, |sum, &size| sum.checked_add(size));
        if total.is_none_or(|total| total > MAX_RANKS) {
            let found = total.map_or("more than fit in a usize".to_string(), |t| t.to_string());
            return Err(bad(format!(
                "{found} ranks in all, but a topology holds at most {MAX_RANKS} \
                 (oxccl_framework::limits::MAX_RANKS); describe fewer or smaller servers"
            )));
        }
        Ok(Topology::unchecked(
            ranks_per_server,
            intra,
            inter,
            nic_gbps,
        ))
    }

    /// [`Topology::from_fabrics`] for server sizes known to be valid.
    fn unchecked(servers: Vec<usize>, intra: Fabric, inter: Fabric, nic_gbps: Option<f64>) -> Self {
        let mut starts = vec![0];
        for size in &servers {
            starts.push(starts.last().copied().unwrap_or(0) + size);
        }
        Topology {
            servers,
            starts,
            intra,
            inter,
            nic_gbps,
            nic_scope: NicScope::Rank,
            memory_gbps: None,
            processor: None,
            overrides: BTreeMap::new(),
            broken: BTreeSet::new(),
        }
    }

    /// One server with `ranks` ranks in a full mesh of the generic figures (see
    /// [`presets`]). Zero ranks is treated as one; the communicator rejects the mismatch.
    pub fn single_server(ranks: usize) -> Self {
        presets::generic(&[ranks.max(1)])
    }

    /// The machine backend `kind` is modelled on when no topology is given, with servers
    /// of the given sizes: CPU hosts ([`presets::host`], joined by TCP) when its ranks
    /// share a memory bus, else the generic servers of [`Topology::servers`] (also for a
    /// kind that is not registered, which is refused when the device is made).
    ///
    /// A CPU host's [`Processor`] gets this machine's cores as its workers: what the host
    /// device's pool has (one thread per core), and what the processes of a job on one
    /// host share between them. Hosts of one job with different core counts therefore
    /// describe different topologies, and `init_rank` refuses them by their digests, as
    /// it refuses any disagreement on what selection sees; describe such a cluster in an
    /// `OXCCL_TOPO_FILE`.
    pub fn default_for_device(
        kind: &str,
        ranks_per_server: Vec<usize>,
    ) -> Result<Self, ConfigError> {
        use oxccl_platform::registry::{memory_of, Memory};
        match memory_of(kind) {
            Some(Memory::SharedBus) => {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                presets::hosts(ranks_per_server)?.with_processor(Some(Processor::reference(cores)))
            }
            Some(Memory::PerRank) | None => Topology::servers(ranks_per_server),
        }
    }

    /// Servers with the given rank counts (may differ), a full mesh inside each and RDMA
    /// links between every pair across servers, with the generic figures (see [`presets`]).
    pub fn servers(ranks_per_server: Vec<usize>) -> Result<Self, ConfigError> {
        Topology::from_fabrics(
            ranks_per_server,
            presets::hccs(Wiring::Mesh),
            presets::roce(Wiring::Mesh),
            Some(presets::ROCE_GBPS),
        )
    }

    /// This topology with this machine's measured copy rates, caches and task cost
    /// (`oxccl_platform::host::calibration`, measured once per machine) in place of the
    /// reference figures, where it is a CPU host (it has a processor); other topologies,
    /// and a host that could not be measured, are returned as they are. The links within
    /// a server take the thread's copy rate (a rank copies a peer's memory with one
    /// thread), the memory system the rate of the processor's workers copying at once.
    pub fn with_measured_host(self) -> Self {
        match self.measured_host_figures() {
            Some(measured) => self.with_host_figures(&measured),
            None => self,
        }
    }

    /// What [`Topology::with_measured_host`] applies: this machine's figures with the
    /// processor's workers; `None` for a topology without a processor, or a host that
    /// could not be measured.
    pub fn measured_host_figures(&self) -> Option<HostFigures> {
        let p = self.processor?;
        let measured = oxccl_platform::host::calibration::this_host(p.workers, false);
        if measured.is_none() {
            tracing::warn!(
                "could not measure this host's copy rates; the model keeps the reference machine's"
            );
        }
        measured.map(|(figures, _)| figures)
    }

    /// This topology with `figures` (a host's measurement, this machine's or a job's
    /// rank 0's) in place of its processor's, memory system's and intra-server links'
    /// figures, where it is a CPU host; other topologies are returned as they are.
    pub fn with_host_figures(mut self, figures: &HostFigures) -> Self {
        let Some(p) = self.processor else {
            return self;
        };
        self.processor = Some(p.with_measured(figures));
        self.memory_gbps = Some(figures.memory_gbps);
        self.intra.spec.bandwidth_gbps = figures.thread_gbps;
        self
    }

    /// This topology with the access of its two fabrics replaced (per-pair overrides
    /// keep theirs): e.g. servers joined by load/store links across servers (a scale-up
    /// domain spanning servers), or a single server whose links are put-only.
    pub fn with_fabric_access(mut self, intra: LinkAccess, inter: LinkAccess) -> Self {
        self.intra.spec.access = intra;
        self.inter.spec.access = inter;
        self
    }

    /// Mark the link between `a` and `b` broken. Errors when either rank is out of range,
    /// when they are equal, or when there is no link between them to break.
    pub fn with_broken(mut self, a: Rank, b: Rank) -> Result<Self, ConfigError> {
        let bad = |reason: String| ConfigError {
            var: "broken link",
            value: format!("{a}-{b}"),
            reason,
            source: None,
        };
        if a == b || a >= self.ranks() || b >= self.ranks() {
            return Err(bad(format!(
                "needs two distinct ranks below {}",
                self.ranks()
            )));
        }
        if self.wired_spec(a, b).is_none() {
            return Err(bad(
                "there is no link between these ranks to break; name a pair that is linked".into(),
            ));
        }
        self.broken.insert((a.min(b), a.max(b)));
        Ok(self)
    }

    /// Override the spec of the link `from -> to` (one direction), creating the pair's link
    /// (with `spec` both ways) when the wiring has none.
    pub fn with_link(mut self, from: Rank, to: Rank, spec: LinkSpec) -> Result<Self, ConfigError> {
        if from == to || from >= self.ranks() || to >= self.ranks() {
            return Err(ConfigError {
                var: "link",
                value: format!("{from}->{to}"),
                reason: format!("needs two distinct ranks below {}", self.ranks()),
                source: None,
            });
        }
        let key = (from.min(to), from.max(to));
        let mut pair = match self.wired_spec(from, to) {
            Some(_) => PairSpec {
                up: self.wired_spec(key.0, key.1).unwrap_or(spec),
                down: self.wired_spec(key.1, key.0).unwrap_or(spec),
            },
            None => PairSpec {
                up: spec,
                down: spec,
            },
        };
        if from < to {
            pair.up = spec;
        } else {
            pair.down = spec;
        }
        self.overrides.insert(key, pair);
        Ok(self)
    }

    /// Total ranks.
    pub fn ranks(&self) -> usize {
        self.starts.last().copied().unwrap_or(0)
    }

    /// Ranks per server.
    pub fn server_sizes(&self) -> &[usize] {
        &self.servers
    }

    /// The server that holds `rank`. Panics when `rank` is out of range.
    pub fn server_of(&self, rank: Rank) -> usize {
        assert!(
            rank < self.ranks(),
            "rank {rank} is not in a topology of {} ranks",
            self.ranks()
        );
        self.starts.partition_point(|&s| s <= rank) - 1
    }

    /// The ranks of `server` (the level-0 plane of hierarchical algorithms).
    pub fn server_ranks(&self, server: usize) -> std::ops::Range<Rank> {
        self.starts[server]..self.starts[server + 1]
    }

    /// The intra-server fabric.
    pub fn intra(&self) -> &Fabric {
        &self.intra
    }

    /// The inter-server fabric.
    pub fn inter(&self) -> &Fabric {
        &self.inter
    }

    /// Shared RDMA bandwidth of each NIC, GB/s per direction (`None`: unlimited); who
    /// shares one is [`Topology::nic_scope`].
    pub fn nic_gbps(&self) -> Option<f64> {
        self.nic_gbps
    }

    /// Who shares a NIC: each rank its own, or every rank of a server one.
    pub fn nic_scope(&self) -> NicScope {
        self.nic_scope
    }

    /// The topology with NICs shared as `scope` says.
    pub fn with_nic_scope(mut self, scope: NicScope) -> Self {
        self.nic_scope = scope;
        self
    }

    /// The NIC that `rank`'s transfers across servers go through: an index, the same for
    /// the ranks that share it (the rank, or its server).
    pub fn nic_of(&self, rank: Rank) -> usize {
        match self.nic_scope {
            NicScope::Rank => rank,
            NicScope::Server => self.server_of(rank),
        }
    }

    /// Copy bandwidth of each server's shared memory system, GB/s (`None`: each rank
    /// has its own memory).
    pub fn memory_gbps(&self) -> Option<f64> {
        self.memory_gbps
    }

    /// This topology with every server's ranks sharing a memory system of `gbps` GB/s
    /// of copy bandwidth (`None`: each rank has its own). Errors on a figure that is not
    /// a positive number.
    pub fn with_memory_gbps(mut self, gbps: Option<f64>) -> Result<Self, ConfigError> {
        if let Some(g) = gbps.filter(|g| !(g.is_finite() && *g > 0.0)) {
            return Err(ConfigError::new(
                "topology",
                format!("memory_gbps = {g}"),
                "a server's memory bandwidth must be a positive number of GB/s",
            ));
        }
        self.memory_gbps = gbps;
        Ok(self)
    }

    /// How each server runs its ranks' tasks when they are threads of a CPU host (see
    /// [`processor`]); `None` for NPUs and GPUs.
    pub fn processor(&self) -> Option<&Processor> {
        self.processor.as_ref()
    }

    /// This topology with its servers' tasks run as `processor` says (`None`: on engines
    /// of their own). Errors on figures the model cannot use.
    pub fn with_processor(mut self, processor: Option<Processor>) -> Result<Self, ConfigError> {
        if let Some(p) = &processor {
            p.validate()?;
        }
        self.processor = processor;
        Ok(self)
    }

    /// A short identity of the topology's shape: server sizes, broken links and which
    /// links are put-only, as in `[8] broken 0-1,2-3`, `[8,8] put inter` (the links
    /// across servers are put-only) or `[8] put all` (`[8]` when nothing is broken and
    /// every link is load/store). Tuning tables are keyed by it: it names what changes
    /// which algorithm runs (link access screens executors), and not the link figures,
    /// which the host device does not have.
    pub fn describe(&self) -> String {
        describe_parts(&self.servers, &self.broken, self.put_scope())
    }

    /// Which links are put-only, for [`Topology::describe`].
    fn put_scope(&self) -> PutScope {
        if self.all_load_store() {
            return PutScope::None;
        }
        let intra_any = self.intra.wiring != Wiring::None && self.servers.iter().any(|&s| s > 1);
        let inter_any = self.inter.wiring != Wiring::None && self.servers.len() > 1;
        let intra_put = intra_any && self.intra.spec.access == LinkAccess::Put;
        let inter_put = inter_any && self.inter.spec.access == LinkAccess::Put;
        let overridden_put = self
            .overrides
            .values()
            .any(|p| p.up.access == LinkAccess::Put || p.down.access == LinkAccess::Put);
        if overridden_put {
            PutScope::Some
        } else if (intra_put || !intra_any) && (inter_put || !inter_any) {
            PutScope::All
        } else if intra_put {
            PutScope::Intra
        } else {
            PutScope::Inter
        }
    }

    /// The first healthy put-only link `(a, b)` (a < b, either direction put-only), among
    /// the links inside servers when `within_servers`, else among all links; `None` when
    /// there is none. Answered from the fabrics without a scan when they are load/store,
    /// so a 1024-rank load/store machine costs nothing; otherwise the scan stops at the
    /// first put-only pair, which on the presets is found at once.
    pub fn put_only_link(&self, within_servers: bool) -> Option<(Rank, Rank)> {
        let override_put = self
            .overrides
            .iter()
            .filter(|(&(a, b), _)| !within_servers || self.server_of(a) == self.server_of(b))
            .any(|(_, p)| p.up.access == LinkAccess::Put || p.down.access == LinkAccess::Put);
        let fabric_put = self.intra.spec.access == LinkAccess::Put
            || (!within_servers && self.inter.spec.access == LinkAccess::Put);
        if !override_put && !fabric_put {
            return None;
        }
        let put = |a: Rank, b: Rank| {
            self.link_access(a, b) == Some(LinkAccess::Put)
                || self.link_access(b, a) == Some(LinkAccess::Put)
        };
        let n = self.ranks();
        (0..n).find_map(|a| {
            let end = if within_servers {
                self.starts[self.server_of(a) + 1]
            } else {
                n
            };
            (a + 1..end).find(|&b| put(a, b)).map(|b| (a, b))
        })
    }

    /// The access of the healthy link `a -> b`, or `None` when it is broken or missing.
    pub fn link_access(&self, a: Rank, b: Rank) -> Option<LinkAccess> {
        self.link(a, b).map(|l| l.access)
    }

    /// True when every link that exists (healthy or not) is load/store, so every peer's
    /// buffers are readable and writable: the condition for [`Mode::Direct`]-style
    /// zero-copy on user buffers. Decided from the fabrics and overrides, not pair by pair.
    ///
    /// [`Mode::Direct`]: crate::Mode::Direct
    pub fn all_load_store(&self) -> bool {
        self.every_link_is(LinkAccess::LoadStore)
    }

    /// True when every link the topology has (its wiring, not counting servers of one
    /// rank or a single server's missing inter links) has `access`.
    fn every_link_is(&self, access: LinkAccess) -> bool {
        let intra = self.intra.spec.access == access
            || self.intra.wiring == Wiring::None
            || self.servers.iter().all(|&s| s <= 1);
        let inter = self.inter.spec.access == access
            || self.inter.wiring == Wiring::None
            || self.servers.len() == 1;
        let overrides = self
            .overrides
            .values()
            .all(|p| p.up.access == access && p.down.access == access);
        intra && inter && overrides
    }

    /// True when no link of the topology is load/store: every rank reaches every peer by
    /// puts (ranks each on a host of its own, or TCP forced), so no peer ever touches a
    /// rank's user buffers (see [`crate::planner::mode_for`]).
    pub fn all_put(&self) -> bool {
        self.every_link_is(LinkAccess::Put)
    }

    /// True when every link inside servers is load/store and some server has two ranks
    /// or more: the ranks of a server can run zero-copy among themselves, whatever
    /// links join the servers (see [`crate::planner::executor_mode`]).
    pub fn load_store_within_servers(&self) -> bool {
        self.servers.iter().any(|&s| s >= 2) && self.put_only_link(true).is_none()
    }

    /// True when the link between `a` and `b` is broken.
    pub fn is_broken(&self, a: Rank, b: Rank) -> bool {
        self.broken.contains(&(a.min(b), a.max(b)))
    }

    /// Broken links as (low, high) pairs, sorted.
    pub fn broken_links(&self) -> impl Iterator<Item = (Rank, Rank)> + '_ {
        self.broken.iter().copied()
    }

    /// Whether `a -> b` is healthy, broken or missing.
    pub fn link_status(&self, a: Rank, b: Rank) -> LinkStatus {
        match self.wired_spec(a, b) {
            None => LinkStatus::Missing,
            Some(_) if self.is_broken(a, b) => LinkStatus::Broken,
            Some(spec) => LinkStatus::Up(spec),
        }
    }

    /// The spec of the healthy link `a -> b`, or `None` when it is broken or missing.
    pub fn link(&self, a: Rank, b: Rank) -> Option<LinkSpec> {
        match self.link_status(a, b) {
            LinkStatus::Up(spec) => Some(spec),
            LinkStatus::Broken | LinkStatus::Missing => None,
        }
    }

    /// The kind of the link between two distinct ranks, or `None` if it is broken or there
    /// is no link.
    pub fn link_kind(&self, a: Rank, b: Rank) -> Option<LinkKind> {
        self.link(a, b).map(|l| l.kind)
    }

    /// True when every pair of distinct ranks has a healthy link.
    pub fn is_full_mesh(&self) -> bool {
        let n = self.ranks();
        let structurally = (self.intra.wiring == Wiring::Mesh
            || self.servers.iter().all(|&s| s <= 1)
            || (self.intra.wiring == Wiring::Ring && self.servers.iter().all(|&s| s <= 3)))
            && (self.inter.wiring == Wiring::Mesh || self.servers.len() == 1);
        if structurally {
            return self.broken.is_empty();
        }
        (0..n).all(|a| (a + 1..n).all(|b| self.link(a, b).is_some()))
    }

    /// The groups of ranks that reach each other over paths of healthy links (connected
    /// components), each ascending, ordered by first rank: one group when the topology
    /// is connected.
    pub fn components(&self) -> Vec<Vec<Rank>> {
        let n = self.ranks();
        if self.connected_by_wiring() {
            return vec![(0..n).collect()];
        }
        let mut group = vec![usize::MAX; n];
        let mut groups: Vec<Vec<Rank>> = Vec::new();
        for start in 0..n {
            if group[start] != usize::MAX {
                continue;
            }
            let id = groups.len();
            group[start] = id;
            let mut members = vec![start];
            let mut next = 0;
            while let Some(&rank) = members.get(next) {
                next += 1;
                for peer in self.peers(rank) {
                    if group[peer] == usize::MAX {
                        group[peer] = id;
                        members.push(peer);
                    }
                }
            }
            members.sort_unstable();
            groups.push(members);
        }
        groups
    }

    /// True when every rank can reach every other over healthy links.
    pub fn is_connected(&self) -> bool {
        self.components().len() <= 1
    }

    /// [`Error::Disconnected`](crate::Error::Disconnected), naming the groups of ranks that
    /// cannot reach each other, unless the topology is connected.
    pub fn check_connected(&self) -> Result<(), crate::error::Error> {
        let groups = self.components();
        match groups.len() {
            0 | 1 => Ok(()),
            _ => Err(crate::error::Error::Disconnected { groups }),
        }
    }

    /// Connected without a search: meshes everywhere and nothing broken (per-pair
    /// overrides only change figures or add links).
    fn connected_by_wiring(&self) -> bool {
        self.broken.is_empty()
            && self.intra.wiring == Wiring::Mesh
            && (self.servers.len() == 1 || self.inter.wiring == Wiring::Mesh)
    }

    /// Ranks `rank` has a healthy link to, ascending.
    ///
    /// Only the ranks the wiring can join are looked at (the own server on a mesh, the
    /// same position on other servers on planes, both neighbours on a ring, and per-pair
    /// overrides), so a walk over every rank's peers costs the links, not n²: a search
    /// of a 4096-rank plane topology looks at 2 million links, not 16 million.
    pub fn peers(&self, rank: Rank) -> impl Iterator<Item = Rank> + '_ {
        let mut candidates = match rank < self.ranks() {
            true => self.wired_candidates(rank),
            false => Vec::new(),
        };
        for &(a, b) in self.overrides.keys() {
            match rank {
                r if r == a => candidates.push(b),
                r if r == b => candidates.push(a),
                _ => {}
            }
        }
        candidates.sort_unstable();
        candidates.dedup();
        // Every candidate is wired (or overridden) to `rank`: only a broken link is left
        // to rule out.
        candidates
            .into_iter()
            .filter(move |&p| p != rank && !self.is_broken(rank, p))
    }

    /// Every rank the intra- and inter-server wiring joins to `rank` (on a ring of one or
    /// two ranks, `rank` itself or a neighbour twice: the caller drops both).
    fn wired_candidates(&self, rank: Rank) -> Vec<Rank> {
        let server = self.server_of(rank);
        let local = rank - self.starts[server];
        let own = self.server_ranks(server);
        let mut out: Vec<Rank> = match self.intra.wiring {
            Wiring::Mesh => own.clone().collect(),
            Wiring::Ring => {
                let size = self.servers[server];
                [(local + 1) % size, (local + size - 1) % size]
                    .into_iter()
                    .map(|l| own.start + l)
                    .collect()
            }
            Wiring::Plane | Wiring::None => Vec::new(),
        };
        match self.inter.wiring {
            Wiring::Mesh => out.extend((0..self.ranks()).filter(|r| !own.contains(r))),
            Wiring::Plane => out.extend(
                (0..self.servers.len())
                    .filter(|&s| s != server && local < self.servers[s])
                    .map(|s| self.starts[s] + local),
            ),
            Wiring::Ring | Wiring::None => {}
        }
        out
    }

    /// The spec of `a -> b` before broken links are applied.
    fn wired_spec(&self, a: Rank, b: Rank) -> Option<LinkSpec> {
        if a == b || a >= self.ranks() || b >= self.ranks() {
            return None;
        }
        if let Some(pair) = self.overrides.get(&(a.min(b), a.max(b))) {
            return Some(if a < b { pair.up } else { pair.down });
        }
        let (sa, sb) = (self.server_of(a), self.server_of(b));
        let joined = if sa == sb {
            self.intra_joined(sa, a, b)
        } else {
            self.inter_joined(a - self.starts[sa], b - self.starts[sb])
        };
        joined.then_some(if sa == sb {
            self.intra.spec
        } else {
            self.inter.spec
        })
    }

    fn intra_joined(&self, server: usize, a: Rank, b: Rank) -> bool {
        match self.intra.wiring {
            Wiring::Mesh => true,
            Wiring::Ring => {
                let size = self.servers[server];
                let (la, lb) = (a - self.starts[server], b - self.starts[server]);
                (la + 1) % size == lb || (lb + 1) % size == la
            }
            Wiring::Plane | Wiring::None => false,
        }
    }

    fn inter_joined(&self, local_a: usize, local_b: usize) -> bool {
        match self.inter.wiring {
            Wiring::Mesh => true,
            Wiring::Plane => local_a == local_b,
            Wiring::Ring | Wiring::None => false,
        }
    }

    /// The pairs (low, high) whose links have a per-pair override, ascending.
    pub fn overridden_pairs(&self) -> impl Iterator<Item = &(Rank, Rank)> {
        self.overrides.keys()
    }

    pub(crate) fn overrides(&self) -> impl Iterator<Item = (&(Rank, Rank), &PairSpec)> {
        self.overrides.iter()
    }
}

impl fmt::Display for Topology {
    /// A one-paragraph summary, for `oxccl topo` and logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fabric = |fab: &Fabric| {
            format!(
                "{} of {:?} {} links, {} GB/s per direction, {} us",
                fab.wiring.name(),
                fab.spec.kind,
                fab.spec.access.name(),
                fab.spec.bandwidth_gbps,
                fab.spec.latency_us
            )
        };
        write!(
            f,
            "{} ranks in {} server(s) {:?}; inside a server: {}",
            self.ranks(),
            self.servers.len(),
            self.servers,
            fabric(&self.intra)
        )?;
        if let Some(memory) = self.memory_gbps {
            write!(f, ", one {memory} GB/s memory system per server")?;
        }
        if let Some(p) = &self.processor {
            write!(
                f,
                ", {} worker thread(s) per server ({} us per task, {} GB/s per thread)",
                p.workers, p.task_us, p.thread_gbps
            )?;
        }
        if self.servers.len() > 1 {
            write!(f, "; across servers: {}", fabric(&self.inter))?;
            if let Some(nic) = self.nic_gbps {
                write!(f, ", one {nic} GB/s NIC per {}", self.nic_scope.name())?;
            }
        }
        if !self.overrides.is_empty() {
            write!(f, "; {} overridden pair(s)", self.overrides.len())?;
        }
        let broken: Vec<String> = self
            .broken
            .iter()
            .map(|(a, b)| format!("{a}-{b}"))
            .collect();
        if !broken.is_empty() {
            write!(f, "; broken: {}", broken.join(", "))?;
        }
        Ok(())
    }
}

/// Which links of a topology are put-only, as [`Topology::describe`] names it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum PutScope {
    /// Every link is load/store: nothing is written.
    None,
    /// The links inside servers (`put intra`).
    Intra,
    /// The links across servers (`put inter`).
    Inter,
    /// Every link (`put all`).
    All,
    /// Some per-pair links (`put some`).
    Some,
}

impl PutScope {
    /// The word after `put` in a description; `None` for [`PutScope::None`].
    pub(crate) const fn word(self) -> Option<&'static str> {
        match self {
            PutScope::None => None,
            PutScope::Intra => Some("intra"),
            PutScope::Inter => Some("inter"),
            PutScope::All => Some("all"),
            PutScope::Some => Some("some"),
        }
    }

    /// The scope a description's word names.
    pub(crate) fn from_word(word: &str) -> Option<PutScope> {
        [
            PutScope::Intra,
            PutScope::Inter,
            PutScope::All,
            PutScope::Some,
        ]
        .into_iter()
        .find(|s| s.word() == Some(word))
    }
}

/// [`Topology::describe`]'s text for these server sizes, broken (low, high) pairs and
/// put-only links.
pub(crate) fn describe_parts(
    servers: &[usize],
    broken: &BTreeSet<(Rank, Rank)>,
    put: PutScope,
) -> String {
    let sizes: Vec<String> = servers.iter().map(usize::to_string).collect();
    let mut text = format!("[{}]", sizes.join(","));
    if !broken.is_empty() {
        let pairs: Vec<String> = broken.iter().map(|(a, b)| format!("{a}-{b}")).collect();
        text.push_str(&format!(" broken {}", pairs.join(",")));
    }
    if let Some(word) = put.word() {
        text.push_str(&format!(" put {word}"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_takes_this_machines_measured_figures_and_a_server_keeps_its_own() {
        let host = presets::host(8).with_measured_host();
        let p = *host.processor().expect("a host");
        let (measured, _) = oxccl_platform::host::calibration::this_host(p.workers, false)
            .expect("this machine measures");
        assert_eq!(p.thread_gbps, measured.thread_gbps);
        assert_eq!(
            (p.cache_bytes, p.cache_gbps, p.llc_bytes),
            (
                measured.cache_bytes,
                measured.cache_gbps,
                measured.llc_bytes
            )
        );
        assert_eq!(
            p.forward_gbps,
            measured
                .forward_gbps
                .unwrap_or(Processor::reference(p.workers).forward_gbps)
        );
        assert_eq!(host.memory_gbps(), Some(measured.memory_gbps));
        assert_eq!(
            host.link(0, 7).unwrap().bandwidth_gbps,
            measured.thread_gbps
        );
        assert_eq!(p.task_us, measured.task_us.unwrap_or(presets::HOST_TASK_US));
        // What is not measured stays the reference's.
        assert_eq!(p.wake_us, presets::HOST_WAKE_US);
        let npu = Topology::single_server(8);
        assert_eq!(npu.clone().with_measured_host(), npu);
    }

    #[test]
    fn only_a_defaulted_in_process_host_is_measured() {
        use crate::communicator::in_process_topology;
        let reference = crate::Config {
            host_figures: crate::HostFiguresFrom::Reference,
            ..crate::Config::default()
        };
        let default = Topology::default_for_device("host", vec![4]).unwrap();
        assert_eq!(in_process_topology(&reference, 4).unwrap(), default);
        let measured = in_process_topology(&crate::Config::default(), 4).unwrap();
        assert_eq!(measured, default.clone().with_measured_host());
        let given = crate::Config {
            topology: Some(presets::host(4)),
            ..crate::Config::default()
        };
        assert_eq!(in_process_topology(&given, 4).unwrap(), presets::host(4));
    }

    #[test]
    fn kinds_and_broken_links() {
        let t = Topology::servers(vec![2, 3])
            .unwrap()
            .with_broken(3, 1)
            .unwrap();
        assert_eq!(t.ranks(), 5);
        assert_eq!(t.server_of(1), 0);
        assert_eq!(t.server_of(2), 1);
        assert_eq!(t.server_of(4), 1);
        assert_eq!(t.server_ranks(1), 2..5);
        assert_eq!(t.link_kind(0, 1), Some(LinkKind::Sdma));
        assert_eq!(t.link_kind(0, 4), Some(LinkKind::Rdma));
        assert_eq!(t.link_kind(1, 3), None);
        assert_eq!(t.link_status(1, 3), LinkStatus::Broken);
        assert!(t.is_broken(3, 1));
        assert!(!t.is_full_mesh());
        assert!(Topology::single_server(2).with_broken(1, 1).is_err());
        assert!(Topology::servers(vec![2, 0]).is_err());
    }

    #[test]
    fn rank_totals_past_the_limit_are_refused() {
        assert_eq!(
            Topology::servers(vec![MAX_RANKS]).unwrap().ranks(),
            MAX_RANKS
        );
        for sizes in [vec![MAX_RANKS, 1], vec![usize::MAX, 2], vec![MAX_RANKS + 1]] {
            let err = Topology::servers(sizes.clone()).unwrap_err();
            assert!(err.reason.contains("at most 4096"), "{sizes:?}: {err}");
        }
    }

    #[test]
    fn ring_wiring_has_only_neighbour_links() {
        let t = presets::preset("ring8").unwrap();
        assert_eq!(t.link_status(0, 4), LinkStatus::Missing);
        assert!(t.link(0, 7).is_some() && t.link(3, 4).is_some());
        assert_eq!(t.peers(0).collect::<Vec<_>>(), vec![1, 7]);
        assert!(!t.is_full_mesh());
        assert!(t.clone().with_broken(0, 4).is_err(), "no link to break");
    }

    #[test]
    fn peers_are_every_healthy_link_whatever_the_wiring() {
        let spec = LinkSpec {
            kind: LinkKind::Rdma,
            access: LinkAccess::Put,
            bandwidth_gbps: 10.0,
            latency_us: 5.0,
        };
        let mut shapes: Vec<Topology> = ["ring8", "mesh8", "2x8", "tcp8"]
            .iter()
            .map(|p| presets::preset(p).unwrap())
            .collect();
        shapes.push(Topology::servers(vec![3, 5, 1, 4]).unwrap());
        shapes.push(shapes[2].clone().with_broken(1, 9).unwrap());
        shapes.push(shapes[0].clone().with_link(0, 4, spec).unwrap());
        shapes.push(shapes[4].clone().with_link(2, 11, spec).unwrap());
        for t in &shapes {
            for rank in 0..t.ranks() {
                let every: Vec<Rank> = (0..t.ranks())
                    .filter(|&p| t.link(rank, p).is_some())
                    .collect();
                assert_eq!(t.peers(rank).collect::<Vec<_>>(), every, "{}", t.describe());
            }
        }
    }

    #[test]
    fn components_follow_healthy_links() {
        let mesh = presets::preset("mesh8").unwrap();
        assert!(mesh.is_connected());
        let cut = (1..8).fold(mesh, |t, p| t.with_broken(0, p).unwrap());
        assert_eq!(cut.components(), vec![vec![0], (1..8).collect::<Vec<_>>()]);
        let err = cut.check_connected().unwrap_err().to_string();
        assert!(err.contains("{0} and {1,...,7}"), "{err}");
        let ring = presets::preset("ring8").unwrap();
        assert!(ring.is_connected());
        let halves = ring.with_broken(0, 7).unwrap().with_broken(3, 4).unwrap();
        assert_eq!(
            halves.components(),
            vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]
        );
        assert!(Topology::servers(vec![4, 4]).unwrap().is_connected());
    }

    #[test]
    fn one_direction_override_leaves_the_other() {
        let mesh = Topology::single_server(4);
        let slow = LinkSpec {
            bandwidth_gbps: 1.0,
            ..mesh.link(0, 1).unwrap()
        };
        let t = mesh.clone().with_link(2, 1, slow).unwrap();
        assert_eq!(t.link(2, 1), Some(slow));
        assert_eq!(t.link(1, 2), mesh.link(1, 2));
        assert!(t.is_full_mesh());
    }
}
