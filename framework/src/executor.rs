//! The executor contract: resource calculation as data, then `kernel_run` appends tasks.
//!
//! There is no inheritance tower. An executor answers two questions:
//! 1. [`Executor::resources`]: what it needs on this rank (slave streams, private
//!    notifies, scratch bytes, which peers it talks to, the largest element count one loop
//!    iteration may take);
//! 2. [`Executor::kernel_run`]: the tasks of one loop iteration, appended through a
//!    [`KernelCtx`] onto the rank's streams, over the buffers named in [`KernelArgs`].
//!
//! The framework's orchestration loop calls `kernel_run` once per iteration with either the
//! CCL buffers (staged eager mode) or the user's buffers (zero-copy mode) bound, so the same
//! executor serves both.

use crate::error::Error;
use crate::op::{OpKind, OpParam};
use crate::topology::Topology;
use oxccl_platform::{
    Buf, Link, LinkKind, NotifyId, NotifyLayout, Rank, RankProgram, Slice, StreamProgram,
};
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

/// How the orchestration loop binds an executor's buffers.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Eager, HCCL style: user input is copied into CclIn, the kernel runs from CclIn to
    /// CclOut, and CclOut is copied to the user's output, one buffer-full at a time.
    Staged,
    /// The kernel runs directly on the user's buffers, which peers may access (graph mode,
    /// and eager mode on devices that can expose user buffers, like the host).
    Direct,
}

/// What an executor is asked to plan for.
#[derive(Copy, Clone, Debug)]
pub struct PlanCtx<'a> {
    pub rank: Rank,
    pub ranks: usize,
    pub op: &'a OpParam,
    pub topology: &'a Topology,
    pub mode: Mode,
    /// Bytes of each CCL buffer.
    pub ccl_bytes: usize,
    /// Notify channels per link ([`KernelCtx::link`] refuses a channel past them).
    pub link_channels: usize,
    /// The user called the in-place form (input and output are one buffer).
    pub in_place: bool,
}

/// Which peers an executor needs links to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Peers {
    /// Every other rank (mesh).
    All,
    /// Exactly these ranks.
    List(Vec<Rank>),
}

impl Peers {
    /// The peer ranks of rank `me` in a communicator of `ranks`: every other rank for
    /// [`Peers::All`], the list as given (unchecked) for [`Peers::List`].
    pub fn expand(&self, me: Rank, ranks: usize) -> Vec<Rank> {
        match self {
            Peers::All => (0..ranks).filter(|&p| p != me).collect(),
            Peers::List(list) => list.clone(),
        }
    }
}

/// An executor's own plan for one rank, computed once in [`Executor::resources`] and read
/// back by every [`Executor::kernel_run`] call of the operation through
/// [`KernelCtx::plan`]: a ring order, a schedule of rounds, the levels of a hierarchy —
/// whatever the executor would otherwise recompute each loop iteration. HCCL's
/// request → response, without its setters: the executor defines the type, the framework
/// carries it type-erased and hands it back typed.
///
/// Two plans are equal when they are the same value (one `Arc`) or both absent: the
/// framework never looks inside.
#[derive(Clone, Default)]
pub struct Plan(Option<(Arc<dyn Any + Send + Sync>, &'static str)>);

impl Plan {
    /// A plan holding `value`.
    pub fn new<T: Any + Send + Sync>(value: T) -> Plan {
        Plan(Some((Arc::new(value), std::any::type_name::<T>())))
    }

    /// The plan as a `T`, if it is one.
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.0.as_ref().and_then(|(v, _)| v.downcast_ref::<T>())
    }

    /// The stored type's name, or "no plan".
    pub fn type_name(&self) -> &'static str {
        self.0.as_ref().map_or("no plan", |(_, name)| name)
    }
}

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Plan({})", self.type_name())
    }
}

impl PartialEq for Plan {
    fn eq(&self, other: &Plan) -> bool {
        match (&self.0, &other.0) {
            (None, None) => true,
            (Some((a, _)), Some((b, _))) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for Plan {}

/// An executor's resource request for one rank, as data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceRequest {
    /// Slave streams besides the main stream.
    pub slave_streams: usize,
    /// Executor-private local notifies (fork/join notifies are added by the framework).
    pub local_notifies: usize,
    /// Scratch bytes per rank.
    pub scratch_bytes: usize,
    /// Peers this rank exchanges data or signals with.
    pub peers: Peers,
    /// The most elements one loop iteration may take; `None`: whatever the buffers allow.
    pub max_count_per_loop: Option<usize>,
    /// The executor's own plan, handed to every `kernel_run` ([`KernelCtx::plan`]).
    pub plan: Plan,
}

impl ResourceRequest {
    /// Check the request against [`crate::limits`]: a plugin's request is input too.
    pub fn check(&self, executor: &str, rank: Rank) -> Result<(), Error> {
        use crate::limits::{MAX_BUFFER_BYTES, MAX_LOCAL_NOTIFIES, MAX_SLAVE_STREAMS};
        let over = [
            ("slave streams", self.slave_streams, MAX_SLAVE_STREAMS),
            ("local notifies", self.local_notifies, MAX_LOCAL_NOTIFIES),
            ("scratch bytes", self.scratch_bytes, MAX_BUFFER_BYTES),
        ]
        .into_iter()
        .find(|(_, asked, limit)| asked > limit);
        match over {
            Some((what, asked, limit)) => Err(Error::BadProgram {
                executor: executor.into(),
                rank,
                reason: format!(
                    "the resource request asks for {asked} {what}, more than the {limit} \
                     allowed (oxccl::framework::limits)"
                ),
            }),
            None => Ok(()),
        }
    }

    /// Local notifies of the rank's table this request needs: a fork and a join notify
    /// per slave stream, then the executor's own (exact once [`ResourceRequest::check`]
    /// passed).
    pub fn local_notify_count(&self) -> usize {
        2 * self.slave_streams + self.local_notifies
    }

    /// A request for links to `peers` and nothing else.
    pub fn with_peers(peers: Peers) -> Self {
        ResourceRequest {
            slave_streams: 0,
            local_notifies: 0,
            scratch_bytes: 0,
            peers,
            max_count_per_loop: None,
            plan: Plan::default(),
        }
    }

    /// This request carrying `plan` for `kernel_run` ([`KernelCtx::plan`]).
    pub fn with_plan<T: Any + Send + Sync>(self, plan: T) -> Self {
        ResourceRequest {
            plan: Plan::new(plan),
            ..self
        }
    }
}

/// A byte range of one buffer kind, the same on every rank (symmetric addressing).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct BufRange {
    pub buf: Buf,
    pub offset: usize,
    pub len: usize,
}

impl BufRange {
    /// `len` bytes at `offset` into this range, on `rank`.
    ///
    /// Never panics, in any build: a slice past the range (or past `usize::MAX`) is
    /// built as asked, saturating, and refused where programs are checked — the
    /// analyzer's bounds check and the device's compile name the executor, rank and task.
    pub fn at(&self, rank: Rank, offset: usize, len: usize) -> Slice {
        Slice::new(rank, self.buf, self.offset.saturating_add(offset), len)
    }
}

/// The buffers and element count of one loop iteration.
#[derive(Clone, Debug)]
pub struct KernelArgs {
    /// The operator, with `count` set to this iteration's element count.
    pub op: OpParam,
    pub input: BufRange,
    pub output: BufRange,
    /// The iteration's first element within the whole operation.
    pub first_element: usize,
    /// Index of this loop iteration (0 for the first). Executors whose iterations would
    /// otherwise repeat a round on the same notifies back to back alternate link channels
    /// by its parity.
    pub iteration: usize,
    /// This is the operation's last iteration. What touches this rank's buffers after it
    /// is the rank's next call, whose tasks start only once every peer granted to this
    /// call finished it (the device's entry fence): so a closing round whose only news is
    /// "I no longer read your CclIn" (which the next iteration would overwrite at once)
    /// may be left out here. A round that says data arrived may not.
    pub last: bool,
    /// `input` and `output` are the same memory on every rank (an in-place call in
    /// [`Mode::Direct`]); a peer may then still read the input the executor overwrites.
    /// For AllGather the input is then the rank's own block of the output, for
    /// ReduceScatter the output is the rank's own block of the input.
    pub aliased: bool,
    /// How the buffers are bound. In [`Mode::Staged`] the next iteration overwrites the
    /// input right after this one ends, and copies the output out right after this one's
    /// tasks: so when a rank's iteration ends, its output must be final and no peer may
    /// read its input any more.
    pub mode: Mode,
    /// Block layout of gathers and scatters: bytes from one rank's block to the next in
    /// the buffer that holds one block per rank (AllGather's `output`, ReduceScatter's
    /// `input`). Each block holds this iteration's `op.count` elements, block `r` starting
    /// `r * block_stride` bytes into the range (see [`KernelArgs::blocks`]). In
    /// [`Mode::Staged`] the blocks are packed in the CCL buffer (`block_stride` is
    /// `op.count * es`); in [`Mode::Direct`] they are slices of the user's buffer, one
    /// user block apart (`block_stride` is the whole operation's `count * es`), so an
    /// iteration touches `[first, first + count)` of every block. For operators without
    /// blocks (AllReduce, Broadcast, Reduce) it equals `op.count * es`.
    pub block_stride: usize,
    /// Bytes of each CCL buffer (CclIn and CclOut). Executors of the vector operators and
    /// Barrier, which get the user's buffers in both modes, stage through them themselves
    /// in [`Mode::Staged`].
    pub ccl_bytes: usize,
}

impl KernelArgs {
    /// Copy this rank's input to its output, unless they are the same memory: the whole of
    /// an AllReduce-like operation (or a gather or scatter) on a single rank.
    pub fn copy_input_to_output(&self, ctx: &mut KernelCtx<'_>) {
        let len = self.op.count * self.op.dtype.size();
        if !self.aliased {
            let (src, dst) = (
                self.input.at(ctx.rank, 0, len),
                self.output.at(ctx.rank, 0, len),
            );
            ctx.main().copy(src, dst);
        }
    }

    /// `(byte offset, byte length)` of every rank's block, relative to the range that
    /// holds one block per rank (see [`KernelArgs::block_stride`]).
    pub fn blocks(&self, ranks: usize) -> Vec<(usize, usize)> {
        let len = self.op.count * self.op.dtype.size();
        (0..ranks).map(|r| (r * self.block_stride, len)).collect()
    }
}

/// Where an executor appends its tasks.
pub struct KernelCtx<'a> {
    pub rank: Rank,
    pub ranks: usize,
    pub topology: &'a Topology,
    pub(crate) executor: &'static str,
    pub(crate) program: &'a mut RankProgram,
    pub(crate) links: &'a [Option<LinkKind>],
    pub(crate) layout: NotifyLayout,
    pub(crate) slaves: usize,
    pub(crate) plan: &'a Plan,
    pub(crate) memo: &'a mut Memo,
}

/// Values an executor derives from an iteration's shape, kept for one rank's whole loop
/// ([`KernelCtx::memo`]): one map per (key type, value type).
#[derive(Default)]
pub(crate) struct Memo(HashMap<TypeId, Box<dyn Any + Send + Sync>>);

impl Memo {
    fn get_or<K, T>(&mut self, key: K, build: impl FnOnce() -> T) -> Arc<T>
    where
        K: Hash + Eq + Send + Sync + 'static,
        T: Send + Sync + 'static,
    {
        let map = self
            .0
            .entry(TypeId::of::<(K, T)>())
            .or_insert_with(|| Box::new(HashMap::<K, Arc<T>>::new()));
        match map.downcast_mut::<HashMap<K, Arc<T>>>() {
            Some(map) => map.entry(key).or_insert_with(|| Arc::new(build())).clone(),
            // Unreachable (the entry is keyed by its own type); building again is right.
            None => Arc::new(build()),
        }
    }
}

impl<'a> KernelCtx<'a> {
    /// Stream `s` (0 is the main stream).
    pub fn stream(&mut self, s: usize) -> &mut StreamProgram {
        &mut self.program.streams[s]
    }

    /// The main stream.
    pub fn main(&mut self) -> &mut StreamProgram {
        self.stream(0)
    }

    /// Number of slave streams.
    pub fn slaves(&self) -> usize {
        self.slaves
    }

    /// The value `build` makes for `key`, built once per rank and handed to every later
    /// iteration that asks with an equal key (and the same types).
    ///
    /// What an iteration derives from its shape alone (the chunk table of its element
    /// count, a group order, where the chunks stop running on) costs O(group) to build;
    /// built every iteration, a 32-iteration loop on 4096 ranks builds it 32 times on
    /// every rank, O(n²) each time over the job. Iterations of one shape share one.
    /// `key` must determine the value (an element count and a stride, never an iteration
    /// number unless the value depends on it).
    pub fn memo<K, T>(&mut self, key: K, build: impl FnOnce() -> T) -> Arc<T>
    where
        K: Hash + Eq + Send + Sync + 'static,
        T: Send + Sync + 'static,
    {
        self.memo.get_or(key, build)
    }

    /// The plan [`Executor::resources`] stored in the request
    /// ([`ResourceRequest::with_plan`]), as a `T`; [`Error::PlanType`] naming the executor
    /// and both types when it holds something else or nothing.
    pub fn plan<T: Any>(&self) -> Result<&'a T, Error> {
        let plan: &'a Plan = self.plan;
        plan.get::<T>().ok_or_else(|| Error::PlanType {
            executor: self.executor.to_string(),
            expected: std::any::type_name::<T>(),
            found: plan.type_name(),
        })
    }

    /// Refuse, before appending them, `rounds` more rounds of about `tasks_per_round`
    /// tasks each when the program would pass [`crate::limits::MAX_TASKS`]. Executors and
    /// templates whose round count grows with the data (pieces through CCL slots) call it
    /// first, so no input makes program building run away with memory.
    pub fn reserve_rounds(&self, rounds: usize, tasks_per_round: usize) -> Result<(), Error> {
        let planned = rounds
            .checked_mul(tasks_per_round.max(1))
            .and_then(|t| t.checked_add(self.program.task_count()));
        check_task_count(self.executor, self.rank, planned)
    }

    /// The link to `peer` on notify `channel`, with the kind and access the topology
    /// gives it; an error if it was not requested, is broken, or does not exist.
    pub fn link(&self, peer: Rank, channel: usize) -> Result<Link, Error> {
        let no_link = |why| Error::NoLink {
            executor: self.executor.to_string(),
            rank: self.rank,
            peer,
            why,
        };
        if peer == self.rank || peer >= self.ranks {
            return Err(no_link("is not a peer of this rank"));
        }
        if channel >= self.layout.link_channels {
            return Err(Error::BadProgram {
                executor: self.executor.into(),
                rank: self.rank,
                reason: format!(
                    "link channel {channel} requested, the communicator has {}",
                    self.layout.link_channels
                ),
            });
        }
        let kind = self.links[peer].ok_or_else(|| no_link("is broken or was not requested"))?;
        let access = self
            .topology
            .link_access(self.rank, peer)
            .ok_or_else(|| no_link("is broken or was not requested"))?;
        Ok(Link::new(self.rank, peer, kind, channel, self.layout).with_access(access))
    }

    /// Executor-private local notify `i` (must be below the requested count).
    pub fn notify(&self, i: usize) -> NotifyId {
        self.layout.local(self.rank, 2 * self.slaves + i)
    }

    fn fork_notify(&self, slave: usize) -> NotifyId {
        self.layout.local(self.rank, 2 * (slave - 1))
    }

    fn join_notify(&self, slave: usize) -> NotifyId {
        self.layout.local(self.rank, 2 * (slave - 1) + 1)
    }

    /// Start slave streams `slaves` (1-based) after everything the main stream did so far.
    pub fn fork(&mut self, slaves: std::ops::RangeInclusive<usize>) {
        for s in slaves {
            let n = self.fork_notify(s);
            self.main().post(n);
            self.stream(s).wait(n);
        }
    }

    /// Make the main stream wait until slave streams `slaves` finished what they have.
    pub fn join(&mut self, slaves: std::ops::RangeInclusive<usize>) {
        for s in slaves {
            let n = self.join_notify(s);
            self.stream(s).post(n);
            self.main().wait(n);
        }
    }
}

/// Refuse a program of `tasks` tasks (`None`: the count overflowed) beyond
/// [`MAX_TASKS`](crate::limits::MAX_TASKS): the op is too large for the CCL buffers it
/// stages through.
pub(crate) fn check_task_count(
    executor: &str,
    rank: usize,
    tasks: Option<usize>,
) -> Result<(), Error> {
    use crate::limits::MAX_TASKS;
    match tasks {
        Some(t) if t <= MAX_TASKS => Ok(()),
        _ => Err(Error::TooManyTasks {
            executor: executor.to_string(),
            rank,
            limit: MAX_TASKS,
        }),
    }
}

/// A collective algorithm.
pub trait Executor: Send + Sync {
    /// What this rank needs for `ctx`.
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error>;

    /// Append the tasks of one loop iteration.
    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error>;
}

/// Declared applicability of an executor, read by selection and by `oxccl algs`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Constraints {
    pub min_ranks: usize,
    pub max_ranks: usize,
    /// Needs every pair of ranks linked (no broken links).
    pub full_mesh: bool,
    /// Size hint: the preference fallback considers it only up to this many bytes per
    /// rank. The hints (`max_bytes`, `min_bytes`, `min_servers`) were hand-made proxies
    /// for the cost model: the model-driven choice ignores them and times every candidate
    /// that can run; only the preference fallback (zero bytes, point-to-point operators)
    /// still reads them. `oxccl algs` and selection explanations show them.
    pub max_bytes: Option<usize>,
    /// Size hint: the preference fallback considers it only from this many bytes per rank
    /// (a pipeline that pays off for large data).
    pub min_bytes: Option<usize>,
    /// Topology hint: the preference fallback considers it only on topologies of at least
    /// this many servers (hierarchical executors); it still runs anywhere when forced by
    /// name or chosen by the model.
    pub min_servers: usize,
    /// What the executor does over its links: whether it needs load/store links (it reads
    /// peers' buffers or writes their user buffers) or only puts. Selection screens on it.
    pub links: LinkNeed,
    /// It runs element counts that are multiples of this (1: any count). An algorithm that
    /// cuts its buffers into a fixed number of whole chunks (an imported MSCCL-IR file)
    /// refuses other counts from `resources`; the conformance matrix checks it on
    /// multiples of the unit, and checks that it refuses the rest.
    pub count_unit: usize,
    /// Rank pairs it always talks over, whatever the topology (an imported MSCCL-IR file
    /// names its links and cannot route around a broken one): a topology on which one of
    /// them is broken or missing excludes it. Empty for executors that plan their links
    /// from the topology.
    pub fixed_links: &'static [(usize, usize)],
    /// The one root a rooted operator's executor runs (an imported file is written for
    /// one), `None` for any root. It refuses the others from `resources`; the conformance
    /// matrix gives it this root.
    pub root: Option<usize>,
    /// Link channels it needs at the least (1: any communicator). An imported file needs
    /// one per message slot of each of its channels; `Config::from_env` raises its default
    /// to what the registered executors need.
    pub link_channels: usize,
}

/// What an executor needs of the links it uses (see [`oxccl_platform::LinkAccess`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum LinkNeed {
    /// Load/store on every link it uses: it reads peers' buffers, or writes their user
    /// buffers. The default, and what every executor written before link capabilities
    /// existed assumes.
    LoadStore,
    /// Load/store between ranks of one server; across servers it only puts into peers'
    /// CCL buffers and scratch and signals (hierarchical executors).
    LoadStoreWithinServer,
    /// Puts only, on every link: it never reads a peer's buffer and writes only peers'
    /// CclIn, CclOut and Scratch. Runs over TCP and RDMA.
    Put,
}

impl LinkNeed {
    /// Short name, for listings (`oxccl algs`).
    pub const fn name(self) -> &'static str {
        match self {
            LinkNeed::LoadStore => "load-store",
            LinkNeed::LoadStoreWithinServer => "load-store within servers",
            LinkNeed::Put => "put",
        }
    }

    /// Why an executor with this need cannot run on `topology`, naming a put-only link it
    /// would have to read over, if there is one. The check is over every link of the
    /// topology the executor may use (all of them for [`LinkNeed::LoadStore`], those inside
    /// servers for [`LinkNeed::LoadStoreWithinServer`]), not over one rank's peers, so
    /// selection and a forced executor get the same answer on every rank.
    pub fn refusal(self, topology: &Topology) -> Option<String> {
        let (within, scope) = match self {
            LinkNeed::Put => return None,
            LinkNeed::LoadStore => (false, "every link"),
            LinkNeed::LoadStoreWithinServer => (true, "the links inside servers"),
        };
        topology.put_only_link(within).map(|(a, b)| {
            format!(
                "needs load/store access on {scope} (it reads peers' buffers or writes their \
                 user buffers), but the link {a}-{b} is put-only; choose an executor whose \
                 links column in `oxccl algs` says put"
            )
        })
    }
}

impl Constraints {
    /// Any rank count, any topology, any size.
    pub const ANY: Constraints = Constraints {
        min_ranks: 1,
        max_ranks: usize::MAX,
        full_mesh: false,
        max_bytes: None,
        min_bytes: None,
        min_servers: 1,
        links: LinkNeed::LoadStore,
        count_unit: 1,
        fixed_links: &[],
        root: None,
        link_channels: 1,
    };

    /// Why the preference fallback should not pick it for `bytes` per rank on `topology`
    /// although it could run (the model-driven choice does not ask) ([`Constraints::max_bytes`], [`Constraints::min_bytes`],
    /// [`Constraints::min_servers`]).
    pub fn auto_selection_veto(&self, bytes: usize, topology: &Topology) -> Option<String> {
        if let Some(max) = self.max_bytes.filter(|&max| bytes > max) {
            return Some(format!("only auto-selected up to {max} B"));
        }
        if let Some(min) = self.min_bytes.filter(|&min| bytes < min) {
            return Some(format!("only auto-selected from {min} B"));
        }
        let servers = topology.server_sizes().len();
        (servers < self.min_servers).then(|| {
            format!(
                "only auto-selected on {}+ servers (the topology has {servers})",
                self.min_servers
            )
        })
    }

    /// Why the constraints fail for `ranks` ranks on `topology`, if they do.
    pub fn check(&self, ranks: usize, topology: &Topology) -> Option<String> {
        if ranks < self.min_ranks || ranks > self.max_ranks {
            let max = if self.max_ranks == usize::MAX {
                "any".to_string()
            } else {
                self.max_ranks.to_string()
            };
            return Some(format!("supports {}..={max} ranks", self.min_ranks));
        }
        if self.full_mesh && !topology.is_full_mesh() {
            return Some("needs a full mesh, and the topology has broken or missing links".into());
        }
        let missing = self
            .fixed_links
            .iter()
            .find(|&&(a, b)| topology.link_kind(a, b).is_none());
        if let Some((a, b)) = missing {
            return Some(format!(
                "talks over the link {a}-{b}, which is broken or missing on this topology"
            ));
        }
        self.links.refusal(topology)
    }

    /// A one-line summary for listings.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.min_ranks > 1 || self.max_ranks != usize::MAX {
            let max = if self.max_ranks == usize::MAX {
                "".to_string()
            } else {
                self.max_ranks.to_string()
            };
            parts.push(format!("ranks {}..{max}", self.min_ranks));
        }
        if self.full_mesh {
            parts.push("full mesh".into());
        }
        if self.count_unit > 1 {
            parts.push(format!("counts multiple of {}", self.count_unit));
        }
        if let Some(root) = self.root {
            parts.push(format!("root {root}"));
        }
        if self.link_channels > 1 {
            parts.push(format!("{} link channels", self.link_channels));
        }
        if let Some(b) = self.max_bytes {
            parts.push(format!("auto-selected up to {b} B"));
        }
        if let Some(b) = self.min_bytes {
            parts.push(format!("auto-selected from {b} B"));
        }
        if self.min_servers > 1 {
            parts.push(format!("auto-selected on {}+ servers", self.min_servers));
        }
        if parts.is_empty() {
            "any".into()
        } else {
            parts.join(", ")
        }
    }
}

/// A registered executor (constant data, collected at link time).
pub struct ExecutorEntry {
    pub name: &'static str,
    pub op: OpKind,
    pub description: &'static str,
    /// The crate that registered it (filled in by [`register_executor!`](crate::register_executor)).
    pub crate_name: &'static str,
    pub constraints: Constraints,
    /// Breaks ties between equal modelled times, and decides alone where the model cannot
    /// (zero bytes, point-to-point operators): higher wins.
    pub preference: i32,
    /// Builds the executor ([`ExecutorEntry::instantiate`]).
    pub make: Make,
    /// The algorithm file it was read from, for executors imported at run time
    /// ([`crate::msccl`]); `None` for one a crate registered.
    pub file: Option<&'static AlgoFile>,
}

/// How a registry entry builds its executor.
#[derive(Copy, Clone)]
pub enum Make {
    /// A constructor a crate registered at link time.
    Static(fn() -> Box<dyn Executor>),
    /// An executor built at run time from data (an imported algorithm file): one shared
    /// value behind every instance.
    Shared(&'static (dyn Fn() -> Box<dyn Executor> + Send + Sync)),
}

/// Where an imported executor came from: shown by `oxccl algs`, and fed to the selection
/// digest by content (never by path: ranks on different hosts keep their files in
/// different places, and must agree on what the files say).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlgoFile {
    /// The path it was read from, as given.
    pub path: String,
    /// The `name` attribute of the file's algorithm, before it was made unique.
    pub name: String,
    /// A digest of the file's bytes (FNV-1a, [`crate::digest::Digest`]).
    pub content: u64,
}

impl ExecutorEntry {
    /// A new instance of the executor.
    pub fn instantiate(&self) -> Box<dyn Executor> {
        match self.make {
            Make::Static(make) => make(),
            Make::Shared(make) => make(),
        }
    }
}

impl std::fmt::Debug for ExecutorEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{} ({})", self.op, self.name, self.crate_name)
    }
}

/// A registered template: a reusable pattern that executors call with a typed parameter
/// struct. The registry lists them for `oxccl algs` and rejects duplicate names.
#[derive(Debug)]
pub struct TemplateEntry {
    pub name: &'static str,
    pub description: &'static str,
    pub crate_name: &'static str,
}

inventory::collect!(ExecutorEntry);
inventory::collect!(TemplateEntry);

/// Register an executor at link time.
///
/// ```
/// use oxccl_framework::{
///     Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, Peers, PlanCtx,
///     ResourceRequest,
/// };
///
/// struct RingAllReduce;
///
/// impl Executor for RingAllReduce {
///     fn resources(&self, _ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
///         Ok(ResourceRequest::with_peers(Peers::All))
///     }
///     fn kernel_run(&self, _ctx: &mut KernelCtx<'_>, _args: &KernelArgs) -> Result<(), Error> {
///         Ok(()) // a real executor appends its tasks here
///     }
/// }
///
/// oxccl_framework::register_executor! {
///     name: "doc-ring",
///     op: OpKind::AllReduce,
///     description: "ring reduce-scatter then ring all-gather",
///     constraints: Constraints::ANY,
///     preference: 10,
///     make: || Box::new(RingAllReduce),
/// }
///
/// let registry = oxccl_framework::registry().unwrap();
/// assert!(registry.executor(OpKind::AllReduce, "doc-ring").is_ok());
/// ```
#[macro_export]
macro_rules! register_executor {
    (
        name: $name:expr,
        op: $op:expr,
        description: $desc:expr,
        constraints: $constraints:expr,
        preference: $pref:expr,
        make: $make:expr $(,)?
    ) => {
        $crate::inventory::submit! {
            $crate::executor::ExecutorEntry {
                name: $name,
                op: $op,
                description: $desc,
                crate_name: env!("CARGO_PKG_NAME"),
                constraints: $constraints,
                preference: $pref,
                make: $crate::executor::Make::Static($make),
                file: None,
            }
        }
    };
}

/// Register a template at link time.
#[macro_export]
macro_rules! register_template {
    (name: $name:expr, description: $desc:expr $(,)?) => {
        $crate::inventory::submit! {
            $crate::executor::TemplateEntry {
                name: $name,
                description: $desc,
                crate_name: env!("CARGO_PKG_NAME"),
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_needs_are_refused_only_where_a_link_is_put_only() {
        use crate::topology::presets::preset;
        let (mesh, two, tcp) = (
            preset("mesh8").unwrap(),
            preset("2x8").unwrap(),
            preset("tcp8").unwrap(),
        );
        for t in [&mesh, &two, &tcp] {
            assert_eq!(LinkNeed::Put.refusal(t), None);
        }
        assert_eq!(LinkNeed::LoadStore.refusal(&mesh), None);
        let why = LinkNeed::LoadStore.refusal(&two).unwrap();
        assert!(why.contains("the link 0-8 is put-only"), "{why}");
        assert!(LinkNeed::LoadStore.refusal(&tcp).unwrap().contains("0-1"));
        assert_eq!(LinkNeed::LoadStoreWithinServer.refusal(&two), None);
        assert_eq!(
            LinkNeed::LoadStoreWithinServer.refusal(&tcp),
            None,
            "no intra links"
        );
        let put_inside = Topology::single_server(4).with_fabric_access(
            oxccl_platform::LinkAccess::Put,
            oxccl_platform::LinkAccess::Put,
        );
        let why = LinkNeed::LoadStoreWithinServer
            .refusal(&put_inside)
            .unwrap();
        assert!(
            why.contains("inside servers") && why.contains("0-1"),
            "{why}"
        );
        let c = Constraints {
            links: LinkNeed::LoadStore,
            ..Constraints::ANY
        };
        assert!(c.check(16, &two).unwrap().contains("put-only"));
        assert_eq!(c.check(8, &mesh), None);
    }

    #[test]
    fn resource_requests_past_the_limits_are_refused_naming_what() {
        let ok = ResourceRequest {
            slave_streams: 7,
            local_notifies: 3,
            ..ResourceRequest::with_peers(Peers::All)
        };
        assert!(ok.check("x", 0).is_ok());
        assert_eq!(ok.local_notify_count(), 17);
        for (req, what) in [
            (
                ResourceRequest {
                    slave_streams: usize::MAX,
                    ..ok.clone()
                },
                "slave streams",
            ),
            (
                ResourceRequest {
                    local_notifies: usize::MAX / 2,
                    ..ok.clone()
                },
                "local notifies",
            ),
            (
                ResourceRequest {
                    scratch_bytes: usize::MAX,
                    ..ok.clone()
                },
                "scratch bytes",
            ),
        ] {
            let err = req.check("greedy", 3).unwrap_err().to_string();
            assert!(err.contains(what) && err.contains("greedy"), "{err}");
        }
    }
}
