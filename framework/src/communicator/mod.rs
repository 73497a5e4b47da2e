//! Communicators: the ranks of one collective group and everything they share.
//!
//! [`Communicator::init_all`] creates `n` in-process ranks over one device. Each rank's
//! [`Communicator`] is used from its own thread (as one NCCL communicator per GPU); the
//! ranks share a [`Shared`]: the device, the topology, the configuration, scratch buffers
//! keyed by resource tag, and the first fatal error. A call runs select_alg, resource
//! calculation, orchestration and the device's compile once per op signature and caches
//! the compiled program, so a repeated call costs only its submission. The device is
//! created by kind through the platform's backend registry.

use crate::agreement::CallBoard;
use crate::config::Config;
use crate::error::{ArgError, Error};
use crate::executor::{Mode, ResourceRequest};
use crate::fast_hash::FastMap;
use crate::limits::{MAX_HOST_THREADS, MAX_RANKS};
use crate::op::OpParam;
use crate::planner;
use crate::planner::{Planned, Setting};
use crate::select::{select_alg, SelectRequest, Selection};
use crate::topology::Topology;
use crate::transport::{self, PeerTransport, TransportChoice};
use oxccl_platform::transport::rdma::RdmaJob;
use oxccl_platform::transport::tcp::TcpJob;
use oxccl_platform::{
    AbortCause, Buf, CompileRequest, Compiled, Device, DeviceConfig, Rank, RankProgram, ScratchId,
    UserBuffers,
};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

mod group_call;
mod sequence;
mod stuck;

pub use group_call::GroupCall;
pub use sequence::{Bound, Step};

/// State shared by all ranks of a communicator.
pub struct Shared {
    device: Arc<dyn Device>,
    topology: Topology,
    config: Config,
    scratch: Mutex<HashMap<(String, usize), ScratchId>>,
    failure: Mutex<Option<Arc<Error>>>,
    /// Where the ranks agree on every call before it runs (see [`crate::agreement`]).
    board: CallBoard,
    /// [`crate::digest::selection_digest`] of the inputs every rank selects with.
    selection_digest: u64,
}

impl Shared {
    /// The state the ranks on `device` share, with the digest of their selection inputs.
    fn new(
        device: Arc<dyn Device>,
        topology: Topology,
        config: Config,
    ) -> Result<Arc<Shared>, Error> {
        let mode = mode_of(&config, device.as_ref(), &topology);
        let selection_digest = digest_of(&config, &topology, mode)?;
        let ranks = topology.ranks();
        Ok(Arc::new(Shared {
            selection_digest,
            device,
            topology,
            config,
            scratch: Mutex::new(HashMap::new()),
            failure: Mutex::new(None),
            board: CallBoard::new(ranks),
        }))
    }

    fn scratch_for(&self, tag: &str, bytes: usize) -> Result<Option<ScratchId>, Error> {
        if bytes == 0 {
            return Ok(None);
        }
        let mut cache = self.scratch.lock();
        if let Some(id) = cache.get(&(tag.to_string(), bytes)) {
            return Ok(Some(*id));
        }
        let id = self.device.alloc_scratch(bytes)?;
        tracing::debug!(tag, bytes, "allocated scratch on every rank");
        cache.insert((tag.to_string(), bytes), id);
        Ok(Some(id))
    }

    /// Mark the communicator failed with `rank`'s error, and release every rank waiting
    /// for an agreement. An error of `rank`'s own is recorded as that rank's
    /// ([`Error::RankFailed`]); an abort `rank` only suffered already names the rank and
    /// cause that stopped it, and is recorded as it is, so a rank released by another's
    /// failure is never named as the one that failed first.
    fn fail_on(&self, rank: Rank, err: &Error) {
        match err {
            Error::Device(oxccl_platform::DeviceError::Aborted { .. }) | Error::Aborted { .. } => {
                self.fail(err)
            }
            own => self.fail(&Error::RankFailed {
                rank,
                cause: Arc::new(own.clone()),
            }),
        }
    }

    /// Mark the communicator failed and release every rank waiting for an agreement.
    fn fail(&self, err: &Error) {
        let cause = self
            .failure
            .lock()
            .get_or_insert_with(|| Arc::new(err.clone()))
            .clone();
        self.board.fail(&Error::Aborted { cause });
    }
}

/// Cache key of a built program.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ProgramKey {
    op: OpParam,
    in_place: bool,
}

/// A program ready to run.
#[derive(Clone, Debug)]
pub struct Prepared {
    pub selection: Selection,
    /// The executor's resource request for this rank.
    pub request: ResourceRequest,
    pub program: Arc<RankProgram>,
    /// The program as the device compiled it (what a call submits).
    pub compiled: Arc<Compiled>,
    pub scratch: Option<ScratchId>,
    pub mode: Mode,
    /// This rank's scratch request and the peers whose scratch its program touches: what
    /// the call agreement compares, since scratch is symmetric (see [`ScratchUse`]).
    pub scratch_use: ScratchUse,
}

/// One rank's use of scratch in a call: the bytes it requested and the peers whose
/// Scratch its program reads or writes.
///
/// Scratch is symmetric. A device allocates each request on every rank of the operation
/// (one allocation per executor and size), so a task of rank `a` on rank `b`'s Scratch
/// reaches `b`'s copy of `a`'s allocation; when `b` requested another size, `b`'s own
/// tasks use another allocation and the two never meet (wrong results with no error).
/// The analyzer refuses such a program (its bounds check); the call agreement refuses it
/// at run time ([`Error::AsymmetricScratch`]), before any task runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScratchUse {
    pub bytes: usize,
    /// Sorted, without this rank.
    pub peers: Arc<[Rank]>,
}

impl ScratchUse {
    /// `program`'s use of scratch on rank `me`, which requested `bytes`.
    fn of(program: &RankProgram, me: Rank, bytes: usize) -> Self {
        let mut peers: Vec<Rank> = program
            .streams
            .iter()
            .flat_map(|s| &s.tasks)
            .flat_map(|t| t.reads().iter().chain(t.writes()))
            .filter(|s| s.buf == Buf::Scratch && s.rank != me)
            .map(|s| s.rank)
            .collect();
        peers.sort_unstable();
        peers.dedup();
        ScratchUse {
            bytes,
            peers: peers.into(),
        }
    }
}

/// One rank of a communicator.
pub struct Communicator {
    rank: Rank,
    group: Arc<Shared>,
    /// Built programs, looked up on every call (hence the fast hash and the `Arc`).
    programs: Mutex<FastMap<ProgramKey, Arc<Prepared>>>,
    /// Calls this rank has made (the next call's number on the agreement board).
    calls: AtomicU64,
    /// Set while a call of this rank runs: a second thread's call is refused.
    busy: AtomicBool,
}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Communicator")
            .field("rank", &self.rank)
            .field("size", &self.size())
            .field("device", &self.group.device.kind())
            .finish()
    }
}

/// A prepared call waiting for its epoch: the compiled program, the user's buffers and
/// the gate of the call's agreement.
pub(crate) struct Ready<'a> {
    pub compiled: Arc<Compiled>,
    pub user: UserBuffers<'a>,
    pub gate: Option<Arc<oxccl_platform::Gate>>,
}

/// Cached programs per rank before the cache is cleared.
const PROGRAM_CACHE_LIMIT: usize = 256;

fn create_device(n: usize, config: &Config) -> Result<Arc<dyn Device>, Error> {
    // Every rank of an in-process communicator is local to its one device.
    create_device_for(n, (0..n).collect(), Transports::default(), config)
}

/// A device serving `local` of `n` ranks, reaching the others through `shm` and `tcp`
/// (if any).
fn create_device_for(
    n: usize,
    local: Vec<Rank>,
    reach: Transports,
    config: &Config,
) -> Result<Arc<dyn Device>, Error> {
    let dc = DeviceConfig {
        ranks: n,
        local_ranks: local,
        ccl_bytes: config.ccl_buffer_bytes,
        link_channels: config.link_channels,
        exec_timeout: config.exec_timeout,
        host_threads: config.host_threads,
        zero_copy: config.zero_copy,
        shm: reach.shm,
        tcp: reach.tcp,
        processes: reach.processes,
        gpus: config.gpus.clone(),
        cuda_graphs: config.cuda_graphs,
        pin_staging: config.pin_staging,
    };
    Ok(oxccl_platform::registry::create(&config.device, dc)?)
}

/// How a device reaches the ranks it does not serve, and where they run.
#[derive(Default)]
struct Transports {
    shm: Option<oxccl_platform::ShmJob>,
    tcp: Option<TcpJob>,
    processes: Vec<oxccl_platform::RankProcess>,
}

/// How a communicator with `config` on `device` over `topology` binds executors' buffers
/// ([`planner::mode_for`]).
fn mode_of(config: &Config, device: &dyn Device, topology: &Topology) -> Mode {
    planner::mode_for(
        config.zero_copy && device.capabilities().peer_user_buffers,
        topology,
    )
}

/// [`crate::digest::selection_digest`] of a communicator's shared selection inputs.
fn digest_of(config: &Config, topology: &Topology, mode: Mode) -> Result<u64, Error> {
    crate::digest::with_inputs_of(config, topology, mode, crate::digest::selection_digest)
}

/// `n` ranks are within [`MAX_RANKS`]: checked before anything is sized by `n`.
fn check_rank_count(n: usize) -> Result<(), Error> {
    if n > MAX_RANKS {
        return Err(crate::error::ConfigError {
            var: "ranks",
            value: n.to_string(),
            reason: format!(
                "at most {MAX_RANKS} ranks per communicator (oxccl::framework::limits::MAX_RANKS)"
            ),
            source: None,
        }
        .into());
    }
    Ok(())
}

/// The worker count and the topology suit `n` ranks.
fn check_init(n: usize, config: &Config, topology: &Topology) -> Result<(), Error> {
    if config.host_threads > MAX_HOST_THREADS {
        return Err(crate::error::ConfigError {
            var: "OXCCL_HOST_THREADS",
            value: config.host_threads.to_string(),
            reason: format!("at most {MAX_HOST_THREADS} worker threads; 0 means one per core"),
            source: None,
        }
        .into());
    }
    if n == 0 || topology.ranks() != n {
        return Err(crate::error::ConfigError {
            var: "ranks",
            value: n.to_string(),
            reason: format!(
                "need at least one rank, as many as the topology has ({}); check OXCCL_TOPO_FILE",
                topology.ranks()
            ),
            source: None,
        }
        .into());
    }
    Ok(())
}

/// The configured topology, else the device's machine with servers of `sizes`
/// ([`Topology::default_for_device`]).
/// `topology` for ranks that each have a device of their own (`init_rank`): a CPU host
/// then never runs a whole operation on one thread (see
/// [`Processor::ranks`](crate::topology::Processor::ranks)); each rank's
/// process runs its own streams, and a signal from another process must get that
/// process scheduled ([`HOST_PROCESS_WAKE_US`](crate::topology::presets::HOST_PROCESS_WAKE_US)).
pub(crate) fn ranks_apart(topology: Topology) -> Result<Topology, Error> {
    let apart = topology.processor().map(|p| crate::topology::Processor {
        ranks: crate::topology::RanksRun::Processes,
        wake_us: crate::topology::presets::HOST_PROCESS_WAKE_US,
        ..*p
    });
    Ok(topology.with_processor(apart)?)
}

/// What rank `rank` of a job of processes tells the others of its host's figures: rank
/// 0 its measured ones, when its configuration models a defaulted CPU host with
/// measured figures; every other rank nothing. `pre` is the topology rank 0 has before
/// the job's table (its own host's).
pub(crate) fn host_figures_to_share(config: &Config, rank: Rank, pre: &Topology) -> Option<String> {
    let measured = rank == 0
        && config.topology.is_none()
        && config.host_figures == crate::HostFiguresFrom::Measured;
    measured.then(|| pre.measured_host_figures().map(|f| f.to_text()))?
}

/// `topology`, a job's, with the host figures its rank 0 measured (see
/// [`host_figures_to_share`]), where it shared them and no topology was configured.
/// Every process of a job must reach the same selection from the same inputs, and its
/// hosts, measured apart, would differ: one host's figures (rank 0's, its worker count
/// among them) model them all, and rank 0's configuration decides whether they are
/// measured or the reference's.
/// Figures a rank cannot read (processes of different oxccl versions) are an error,
/// never a quiet fall back to other figures.
pub(crate) fn job_host_figures(
    config: &Config,
    table: &crate::bootstrap::JobTable,
    topology: Topology,
) -> Result<Topology, Error> {
    let shared = table.ranks.first().and_then(|r| r.host_figures.as_deref());
    let Some(text) = shared.filter(|_| config.topology.is_none()) else {
        return Ok(topology);
    };
    let figures = oxccl_platform::host::calibration::HostFigures::from_text(text).ok_or_else(|| {
        crate::error::ConfigError::new(
            "host figures",
            "rank 0's",
            "this rank cannot read the host figures rank 0 measured; run every rank of the job with the same oxccl build, or set OXCCL_HOST_FIGURES=reference on rank 0",
        )
    })?;
    Ok(topology.with_host_figures(&figures))
}

fn topology_of(config: &Config, sizes: Vec<usize>) -> Result<Topology, Error> {
    match &config.topology {
        Some(t) => Ok(t.clone()),
        None => Ok(Topology::default_for_device(&config.device, sizes)?),
    }
}

/// The topology of `n` ranks in this process: the configured one, else the device's
/// machine, a CPU host with this machine's measured figures unless the configuration
/// asks for the reference ones ([`crate::HostFiguresFrom`]). A job of processes models
/// its hosts with its rank 0's figures instead ([`job_host_figures`]).
pub fn in_process_topology(config: &Config, n: usize) -> Result<Topology, Error> {
    let topology = topology_of(config, vec![n])?;
    Ok(match config.topology {
        Some(_) => topology,
        None => config.host_figures.apply(topology),
    })
}

impl Communicator {
    /// Create `n` in-process ranks sharing one device. Refuses a topology whose healthy
    /// links do not join every rank to every other ([`Error::Disconnected`]): no
    /// collective could run on it.
    pub fn init_all(n: usize, config: Config) -> Result<Vec<Communicator>, Error> {
        check_rank_count(n)?;
        let topology = in_process_topology(&config, n)?;
        check_init(n, &config, &topology)?;
        topology.check_connected()?;
        config.algo.validate()?;
        let device = create_device(n, &config)?;
        // Recordings on `sim` (the analyzer, and select_alg modelling every candidate)
        // create communicators by the dozen: they log at debug level only.
        if !device.capabilities().executes {
            tracing::debug!(
                ranks = n,
                device = device.kind(),
                "recording communicator created"
            );
        } else {
            tracing::info!(
                ranks = n,
                device = device.kind(),
                ccl_bytes = config.ccl_buffer_bytes,
                servers = ?topology.server_sizes(),
                "communicator created"
            );
        }
        let group = Shared::new(device, topology, config)?;
        Ok((0..n)
            .map(|rank| Communicator::on(rank, group.clone()))
            .collect())
    }

    fn on(rank: Rank, group: Arc<Shared>) -> Communicator {
        Communicator {
            rank,
            group,
            programs: Mutex::new(FastMap::default()),
            calls: AtomicU64::new(0),
            busy: AtomicBool::new(false),
        }
    }

    /// Join the job of `id` as rank `rank` of `n` (NCCL's `ncclCommInitRank`): every rank
    /// calls it, in its own process or thread, with the same id and rank count (see
    /// [`crate::bootstrap`] for the id, and [`crate::bootstrap::launcher`] for getting it
    /// from mpirun, torchrun or Slurm).
    ///
    /// The ranks exchange their hosts and selection digests through the job's root
    /// (ranks built or configured differently are refused, naming what differs); the
    /// ranks sharing a host become one server of the topology (`OXCCL_TOPO_FILE`
    /// overrides). Each call gets a device of its own that serves this rank and reaches
    /// every other rank through the transport the table of [`crate::transport`] gives:
    /// shared memory on this host, TCP to other hosts (put-only links, which the
    /// topology's access then says, so selection only picks executors that put). Calls
    /// stage through the CCL buffers, unless `config.shared_buffers`
    /// (`OXCCL_SHARED_BUFFERS=1`): then peers on this host map each other's user buffers,
    /// which come from [`Communicator::alloc_shared`], and when every rank is on this host
    /// calls run zero-copy. Not yet: the agreement on every call
    /// ([`crate::agreement`]) is carried in-process only, so it is off across processes
    /// (a mismatched call times out, naming the wait).
    pub fn init_rank(
        id: &crate::bootstrap::UniqueId,
        n: usize,
        rank: Rank,
        mut config: Config,
    ) -> Result<Communicator, Error> {
        use crate::bootstrap::{digest_parts, join, RankInfo};
        check_rank_count(n)?;
        config.algo.validate()?;
        // The topology is the table's hosts unless a file gives it; the digests cover the
        // file's (or the one-host default's), so a rank given another file is refused.
        let pre = ranks_apart(topology_of(&config, vec![n])?)?;
        let digests = digest_parts(&config, &pre, Mode::Staged)?;
        let mut info = RankInfo::this(rank, digests);
        info.host_figures = host_figures_to_share(&config, rank, &pre);
        if let Some(name) = &config.host_id {
            info.host = crate::bootstrap::HostId::claimed(name);
        }
        let listener = match config.transport {
            TransportChoice::Shm => None,
            _ => Some(Arc::new(transport::listen_towards(id.root).map_err(
                |e| {
                    crate::error::ConfigError::new(
                    "OXCCL_TRANSPORT",
                    config.transport.name(),
                    "cannot open a TCP listener for this rank; use OXCCL_TRANSPORT=shm on one host",
                )
                .caused_by(e)
                },
            )?)),
        };
        info.tcp = listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
            .map(|a| a.to_string());
        // A port is opened before the exchange, so that the table says who has one.
        let verbs = match listener {
            Some(_) => transport::open_rdma(config.transport, config.rdma_nic.as_ref()),
            None => Err("no TCP listener to set RDMA links up on".into()),
        };
        info.rdma = verbs.as_ref().ok().map(|v| v.port().to_string());
        let no_rdma = verbs.as_ref().err().map(String::as_str);
        let table = join(id, n, info, config.exec_timeout)?;
        let links = transport::links_of(&table, rank, config.transport, no_rdma)?;
        let topology = topology_of(&config, table.server_sizes()?)?;
        let topology = job_host_figures(&config, &table, topology)?;
        let topology = transport::with_transport_access(topology, &table, config.transport);
        let topology = ranks_apart(topology)?;
        check_init(n, &config, &topology)?;
        topology.check_connected()?;
        let host = table.host_ranks(rank);
        // Every rank of the host has its own process (or device) and workers: left to
        // choose, each takes its share of the cores rather than all of them.
        if config.host_threads == 0 {
            let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
            config.host_threads = (cores / host.len()).max(1);
        }
        let any = |t: fn(&PeerTransport) -> bool| links.iter().flatten().any(t);
        let shm = any(|t| *t == PeerTransport::Shm).then(|| oxccl_platform::ShmJob {
            user_buffers: config.shared_buffers && config.zero_copy,
            ..oxccl_platform::ShmJob::new(id.job_tag())
        });
        let over_rdma = any(|t| matches!(t, PeerTransport::Rdma(_)));
        let rdma = verbs.ok().filter(|_| over_rdma).map(|verbs| RdmaJob {
            verbs,
            peers: links
                .iter()
                .map(|t| matches!(t, Some(PeerTransport::Rdma(_))))
                .collect(),
        });
        let tcp = match listener {
            Some(listener) if any(|t| !matches!(t, PeerTransport::Shm)) => Some(TcpJob {
                secret: id.secret.0,
                listener,
                peers: links
                    .iter()
                    .map(|t| match t {
                        Some(PeerTransport::Tcp(addr) | PeerTransport::Rdma(addr)) => Some(*addr),
                        _ => None,
                    })
                    .collect(),
                rdma,
            }),
            _ => None,
        };
        let over_tcp = any(|t| matches!(t, PeerTransport::Tcp(_)));
        let over_shm = shm.is_some();
        let processes = table
            .ranks
            .iter()
            .map(|r| oxccl_platform::RankProcess {
                pid: r.pid,
                host: r.host.hostname.clone(),
            })
            .collect();
        let reach = Transports {
            shm,
            tcp,
            processes,
        };
        let device = create_device_for(n, vec![rank], reach, &config)?;
        config.check_calls = false;
        tracing::info!(
            rank,
            ranks = n,
            servers = ?topology.server_sizes(),
            over_shm,
            over_tcp,
            over_rdma,
            "communicator rank joined its job"
        );
        Ok(Communicator::on(
            rank,
            Shared::new(device, topology, config)?,
        ))
    }

    /// `bytes` of zeroed, page-aligned host memory for this rank's user buffers, which
    /// the communicator's peers can reach (NCCL's `ncclMemAlloc` with its registration,
    /// in the collective shape of MPI's `MPI_Win_allocate_shared`).
    ///
    /// In a job of processes with `shared_buffers` (`OXCCL_SHARED_BUFFERS=1`) it is a
    /// shared-memory segment that the ranks on this host map, and every call's buffers
    /// must lie in such memory: the calls then run zero-copy, the peers reading and
    /// writing the buffers in place, instead of staging every byte through the CCL
    /// buffers. Otherwise it is this process's heap, which serves any call.
    ///
    /// **Collective**: every rank calls it, in the same order (sizes may differ), each
    /// from its own thread as for any collective; a rank that does not is named in the
    /// others' error after `OXCCL_EXEC_TIMEOUT`. The memory goes when the returned value
    /// is dropped (a peer's mapping, when it drops its allocation of the same turn).
    pub fn alloc_shared(&self, bytes: usize) -> Result<oxccl_platform::SharedMemory, Error> {
        self.usable()?;
        Ok(self.group.device.alloc_shared(self.rank, bytes)?)
    }

    /// Abort the communicator (NCCL's `ncclCommAbort`), from any thread: this rank's call
    /// in flight, if any, ends at once with an error, every later call is refused, and
    /// the ranks that share its device or reach it through a transport are stopped too
    /// (their calls end naming this rank), rather than waiting out `OXCCL_EXEC_TIMEOUT`.
    /// The communicator cannot be used again; create a new one.
    pub fn abort(&self) {
        self.stop_everywhere(AbortCause::UserAbort { rank: self.rank });
    }

    /// This rank cannot make the call its peers are making (an adapter could not make
    /// its input ready: the caller's stream failed, a staging copy failed): fail the
    /// communicator and stop it everywhere, naming `reason`, so that the peers return at
    /// once instead of waiting out `OXCCL_EXEC_TIMEOUT` for this rank.
    pub fn abort_failed_call(&self, reason: impl Into<String>) {
        self.stop_everywhere(AbortCause::CallFailed {
            rank: self.rank,
            reason: reason.into(),
        });
    }

    /// Fail the communicator and stop its device with `cause`: every call in flight on
    /// a rank of the device, or on a peer it reaches through a transport, ends at once
    /// naming this rank, instead of waiting out `OXCCL_EXEC_TIMEOUT` for tasks that
    /// will never run.
    pub(crate) fn stop_everywhere(&self, cause: AbortCause) {
        let err = Error::from(oxccl_platform::DeviceError::Aborted {
            rank: self.rank,
            cause: cause.clone(),
        });
        self.group.fail(&err);
        self.group.device.abort(cause);
    }

    /// The failure that broke the communicator, if one did (NCCL's
    /// `ncclCommGetAsyncError`): the first error a call of any rank met, or else why its
    /// device stopped (an abort, or a peer's failure it was told of) before a call met
    /// it. `None` while the communicator is usable.
    pub fn failure(&self) -> Option<Error> {
        if let Err(failed) = self.usable() {
            return Some(failed);
        }
        let cause = self.group.device.stopped()?;
        let rank = match &cause {
            AbortCause::UserAbort { rank }
            | AbortCause::CallFailed { rank, .. }
            | AbortCause::PeerFailed { rank, .. }
            | AbortCause::PeerProcess { rank, .. } => *rank,
        };
        Some(oxccl_platform::DeviceError::Aborted { rank, cause }.into())
    }

    /// `Ok` unless a call of any rank met a failure that broke the communicator
    /// ([`Error::Aborted`] with it): what every new call checks first.
    pub(crate) fn usable(&self) -> Result<(), Error> {
        match self.group.failure.lock().clone() {
            Some(cause) => Err(Error::Aborted { cause }),
            None => Ok(()),
        }
    }

    /// This rank's index.
    pub fn rank(&self) -> Rank {
        self.rank
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.group.topology.ranks()
    }

    /// The topology.
    pub fn topology(&self) -> &Topology {
        &self.group.topology
    }

    /// The configuration the communicator was created with.
    pub fn config(&self) -> &Config {
        &self.group.config
    }

    /// The device.
    pub fn device(&self) -> &Arc<dyn Device> {
        &self.group.device
    }

    /// The mode this communicator offers ([`planner::mode_for`]): [`Mode::Direct`] only
    /// when zero-copy is asked for, the device exposes user buffers, and the topology's
    /// links are load/store everywhere, or inside servers where some server has two
    /// ranks. Each call's executor runs in its own mode derived from it
    /// ([`planner::executor_mode`], [`Prepared::mode`]): what crosses a put-only link
    /// reaches a peer's registered buffers only, so an executor not made for that stages.
    pub fn mode(&self) -> Mode {
        mode_of(
            &self.group.config,
            self.group.device.as_ref(),
            &self.group.topology,
        )
    }

    /// The stable digest of everything this communicator's selection depends on: the
    /// registry and plugin selectors, the tuning table, the topology and the planning
    /// configuration (see [`crate::digest`]). Ranks compare it when they connect: equal
    /// digests mean equal choices for equal calls.
    pub fn selection_digest(&self) -> u64 {
        self.group.selection_digest
    }

    /// Select, plan and build (or fetch from the cache) this rank's program for `op`,
    /// after checking its shape ([`OpParam::validate_shape`]).
    pub fn prepare(&self, op: &OpParam, in_place: bool) -> Result<Prepared, Error> {
        op.validate_shape(self.rank, self.size())?;
        Ok(Prepared::clone(&*self.prepare_valid(op, in_place)?))
    }

    /// [`Communicator::prepare`] for an op already validated, as the cache keeps it.
    fn prepare_valid(&self, op: &OpParam, in_place: bool) -> Result<Arc<Prepared>, Error> {
        let key = ProgramKey {
            op: op.clone(),
            in_place,
        };
        if let Some(p) = self.programs.lock().get(&key) {
            return Ok(p.clone());
        }
        let prepared = Arc::new(self.build(op, in_place)?);
        let mut cache = self.programs.lock();
        if cache.len() >= PROGRAM_CACHE_LIMIT {
            cache.clear();
        }
        cache.insert(key, prepared.clone());
        Ok(prepared)
    }

    /// Which executor runs `op` on this communicator (select_alg with this rank's request
    /// and the communicator's override and tuning table).
    pub fn select(&self, op: &OpParam, in_place: bool) -> Result<Selection, Error> {
        op.validate_shape(self.rank, self.size())?;
        self.select_valid(op, in_place)
    }

    fn select_valid(&self, op: &OpParam, in_place: bool) -> Result<Selection, Error> {
        self.select_with(op, &self.setting(in_place))
    }

    /// What the planner plans this communicator's calls with (`in_place`: the form called).
    fn setting(&self, in_place: bool) -> Setting<'_> {
        let g = &*self.group;
        Setting {
            topology: &g.topology,
            mode: self.mode(),
            ccl_bytes: g.config.ccl_buffer_bytes,
            link_channels: g.config.link_channels,
            in_place,
        }
    }

    fn select_with(&self, op: &OpParam, setting: &Setting<'_>) -> Result<Selection, Error> {
        let g = &*self.group;
        let req = SelectRequest {
            op,
            ranks: self.size(),
            topology: setting.topology,
            bytes: SelectRequest::input_bytes(op, self.rank, self.size()),
            ccl_bytes: setting.ccl_bytes,
            mode: setting.mode,
            in_place: setting.in_place,
            link_channels: setting.link_channels,
            tune: g.config.tune.as_deref(),
        };
        select_alg(&req, &g.config.algo)
    }

    fn build(&self, op: &OpParam, in_place: bool) -> Result<Prepared, Error> {
        let g = &*self.group;
        let setting = self.setting(in_place);
        let selection = self.select_with(op, &setting)?;
        let entry = selection.executor;
        let executor = entry.instantiate();
        let plan = setting
            .for_links(entry.constraints.links)
            .ctx(self.rank, op);
        // Planning checks the request against the limits, so the device reserves only
        // for a program that exists.
        let Planned {
            request, program, ..
        } = planner::plan(
            entry.name,
            executor.as_ref(),
            &plan,
            g.device.config().layout(),
        )?;
        tracing::debug!(
            rank = self.rank,
            op = %op.kind,
            count = op.count,
            executor = entry.name,
            reason = %selection.reason,
            ?request,
            "algorithm selected"
        );
        let scratch = g.scratch_for(&selection.tag, request.scratch_bytes)?;
        let scratch_use = ScratchUse::of(&program, self.rank, request.scratch_bytes);
        let program = Arc::new(program);
        // The fence set: the peers granted to the request (see the platform's epoch fence).
        let peers = request.peers.expand(self.rank, self.size());
        let compiled = g.device.compile(CompileRequest {
            program: program.clone(),
            scratch,
            peers,
            local_notifies: request.local_notify_count(),
            in_place,
            exit_fence: plan.mode == Mode::Direct,
            footprint: self.footprint(op, in_place),
        })?;
        Ok(Prepared {
            selection,
            request,
            program,
            compiled,
            scratch,
            mode: plan.mode,
            scratch_use,
        })
    }

    /// What `op`'s user buffers take on this rank's server ([`OpParam::server_footprint`]).
    fn footprint(&self, op: &OpParam, in_place: bool) -> usize {
        let topology = &self.group.topology;
        let server = topology.server_ranks(topology.server_of(self.rank));
        op.server_footprint(self.rank, self.size(), server, in_place)
    }

    /// Run `op` with `user` bound; blocks until this rank's part is done.
    pub fn execute(&self, op: &OpParam, user: UserBuffers<'_>) -> Result<(), Error> {
        Self::execute_group(vec![(self, op.clone(), user)])
            .pop()
            .expect("one result per call")
    }

    /// Validate and prepare one call: its compiled program with the user's buffers and
    /// the executor's name, or `None` when there is nothing to run (count 0).
    pub(crate) fn checked_execution<'a>(
        &self,
        op: &OpParam,
        user: UserBuffers<'a>,
    ) -> Result<Option<(Ready<'a>, &'static str, ScratchUse)>, Error> {
        self.validate_step(op, user.lens_by_form())?;
        if !op.has_work() {
            return Ok(None);
        }
        let p = self.prepare_valid(op, user.is_in_place())?;
        let ready = Ready {
            compiled: p.compiled.clone(),
            user,
            gate: None,
        };
        Ok(Some((
            ready,
            p.selection.executor.name,
            p.scratch_use.clone(),
        )))
    }

    /// Check that a send and a receive buffer have the same number of elements.
    pub fn same_length(send: usize, recv: usize) -> Result<(), Error> {
        if send != recv {
            return Err(ArgError::LengthMismatch { send, recv }.into());
        }
        Ok(())
    }
}
