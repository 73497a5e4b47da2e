//! The cost model: how long a recorded operation would take on a described machine.
//!
//! The analyzer proves a program right; the cost model times it. It replays the programs of
//! a [`Recording`] as a discrete-event simulation over the recording's [`Topology`]: every
//! stream runs its tasks in order, paying a dispatch cost per task; a Wait ends when its
//! notify is set, and a Post to a peer's notify lands one link latency after it is issued;
//! a Copy or Reduce that touches a peer's memory moves its bytes over that link (a read
//! pulls from the peer, a write pushes to it), taking the link's latency plus its bytes
//! over the bandwidth it gets, while the executing rank's copy engine does the local part.
//! Transfers that share a link direction (or, across servers, a rank's NIC) share its
//! bandwidth equally, and rates are recomputed whenever a transfer starts or ends (the
//! private `flows` module). The result is a modelled time and nccl-tests' algbw and
//! busbw, so algorithms can be compared on machines this one does not have.
//!
//! A CPU host (a topology with a [`Processor`], the host
//! device's) has no engines and no links inside a server: every Copy and Reduce costs
//! thread time (a fixed cost and its memory traffic at one thread's rate) on the server's
//! worker threads, which all its ranks share, a peer's buffer is memory, a signal is a
//! store, and a stream that becomes runnable waits for a worker's wake-up; an operation
//! small enough for the host device's inline path runs on one thread with no wake-ups.
//!
//! What it leaves out, on purpose: contention inside a device's memory system beyond the
//! copy engine, protocol overheads (packetisation, flow control), and any dependence of
//! bandwidth on message size beyond the latency term. Its figures are for comparing
//! algorithms, not for promising wall-clock times.
//!
//! The replay does a bounded amount of work per task, whatever the byte counts: a
//! 1024-rank ring AllReduce (about ten million tasks) models in seconds. [`trace`] writes the
//! same replay as a Chrome trace for Perfetto.

pub mod analytic;
mod engine;
mod flows;
mod forwarding;
pub mod trace;

use crate::planner::Recording;
use crate::topology::{Processor, Topology};
use oxccl_platform::{RankProgram, Task};
use std::fmt;

pub use analytic::estimate;
pub(crate) use forwarding::Writers;
pub use trace::{write_chrome_trace, TraceError};

/// The device figures of the model (links come from the topology).
///
/// Defaults model an Ascend 910B-class device; the sources, and which figures are
/// assumptions:
///
/// | field | default | source |
/// |---|---|---|
/// | `dispatch_us` | 1.0 | **assumption**: device-side issue of one stream task (DMA descriptor or notify op) is of the order of a microsecond on current NPUs and GPUs |
/// | `copy_gbps` | 800 | HBM2e at about 1.6 TB/s per 910B die (third-party reports: 3.2 TB/s for the two-die 910C); a local copy reads and writes every byte, so half of it |
/// | `reduce_gbps` | 400 | **assumption**: a two-input reduction reads two bytes and writes one per result byte (about 530 GB/s at 1.6 TB/s), derated for the vector unit |
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct CostParams {
    /// Time to issue one task on its stream, microseconds; paid before every task.
    pub dispatch_us: f64,
    /// Local copy bandwidth of a rank's copy engine, GB/s of data copied.
    pub copy_gbps: f64,
    /// Local reduction throughput, GB/s of result per extra source: a Reduce of `k`
    /// sources into `d` destinations costs `(k - 1) · len / reduce` plus `(d - 1) · len /
    /// copy` of engine time.
    pub reduce_gbps: f64,
}

impl Default for CostParams {
    fn default() -> Self {
        CostParams {
            dispatch_us: 1.0,
            copy_gbps: 800.0,
            reduce_gbps: 400.0,
        }
    }
}

impl CostParams {
    fn dispatch_s(&self) -> f64 {
        self.dispatch_us * 1e-6
    }

    /// Seconds of the executing rank's copy engine that a task needs.
    fn engine_seconds(&self, task: &Task) -> f64 {
        let (copy, reduce) = (self.copy_gbps * 1e9, self.reduce_gbps * 1e9);
        let len = task.bytes() as f64;
        match task {
            Task::Copy { dsts, .. } => len * dsts.len() as f64 / copy,
            Task::Reduce { srcs, dsts, .. } => {
                len * srcs.len().saturating_sub(1).max(1) as f64 / reduce
                    + len * dsts.len().saturating_sub(1) as f64 / copy
            }
            Task::Post { .. } | Task::Wait { .. } => 0.0,
        }
    }

    fn validate(&self) -> Result<(), CostError> {
        let ok = |v: f64, zero_ok: bool| v.is_finite() && (v > 0.0 || (zero_ok && v == 0.0));
        if ok(self.dispatch_us, true) && ok(self.copy_gbps, false) && ok(self.reduce_gbps, false) {
            Ok(())
        } else {
            Err(CostError::BadParams(*self))
        }
    }
}

/// Bytes of a shared memory system's copy bandwidth that a task uses (see
/// [`Topology::memory_gbps`]): half the bytes it reads and writes, so that a copy of `len`
/// bytes costs `len`, as the copy bandwidth memcpy benchmarks report counts it. A Copy
/// reads its source once and writes every destination; a Reduce reads every source.
pub(crate) fn memory_bytes(task: &Task) -> f64 {
    task.bytes() as f64 * operands(task) as f64 / 2.0
}

/// The slices a Copy or Reduce reads and writes: its source(s) and destinations.
fn operands(task: &Task) -> usize {
    task.reads().len() + task.writes().len()
}

/// Bytes a program's data tasks move: each one's length times its destinations (what
/// the host device compares with its inline threshold).
pub(crate) fn moved_bytes(program: &RankProgram) -> usize {
    let tasks = program.streams.iter().flat_map(|s| s.tasks.iter());
    tasks.fold(0usize, |sum, task| match task {
        Task::Copy { dsts, .. } | Task::Reduce { dsts, .. } => {
            sum.saturating_add(task.bytes().saturating_mul(dsts.len()))
        }
        Task::Post { .. } | Task::Wait { .. } => sum,
    })
}

/// What a CPU host's caches do for one operation, from its footprint on the server.
#[derive(Copy, Clone, Debug, PartialEq)]
pub(crate) struct Caches {
    /// The share of its memory traffic they serve ([`Processor::cached_share`]).
    pub cached: f64,
    /// Its footprint passes the last-level cache ([`Processor::passes_llc`]).
    pub passes_llc: bool,
    /// Its footprint on the server, bytes ([`footprints`]). [`thread_bytes`] asks the
    /// host kernel's `copy_streams` with it, as the kernel asks with the communicator's
    /// (`oxccl_platform::CompileRequest::footprint`, counted from the buffers rather than
    /// the tasks), so the model follows that rule whole.
    pub footprint: usize,
}

impl Caches {
    /// No cache: what a server that is no CPU host has.
    pub const NONE: Caches = Caches {
        cached: 0.0,
        passes_llc: false,
        footprint: 0,
    };

    /// The caches of `processor` for an operation touching `footprint` bytes on a server.
    pub fn of(processor: &Processor, footprint: usize) -> Self {
        Caches {
            cached: processor.cached_share(footprint),
            passes_llc: processor.passes_llc(footprint),
            footprint,
        }
    }
}

/// Bytes of copying a host thread does for a Copy or Reduce of a program whose data
/// tasks move `program_bytes` ([`moved_bytes`]), in an operation served by `caches`: its
/// [`memory_bytes`], except for a Copy to several destinations that the host kernel does
/// not stream (`oxccl_platform::reduce::copy_streams`) in an operation whose footprint
/// passes the last-level cache: that costs [`SCATTERED_COPY_COST`] copies per
/// destination.
///
/// The host kernel copies to several destinations a block of the source at a time
/// (`oxccl_platform::reduce::copy_part`), each block read again from the first-level
/// cache, so within the last-level cache the source counts once. Measured on 8
/// in-process ranks, by copies of `mesh-push` (each rank copies a piece into every
/// output) against the single copies of `mesh` (Broadcast: 7 ranks each copy the root's
/// input) and `rhd` (AllGather): Broadcast at 512 KiB ran 75.2 and 78.2 µs against 89.4
/// and 80.8 (two runs of `oxccl tune broadcast --ranks 8 -b 512K -e 4M -f 8`); AllGather
/// at 2 MiB (18 MiB of buffers) 259 against 331 µs (medians of three alternating runs of
/// `oxccl perf all-gather --ranks 8 -b 2M -e 4M -f 2 -n 30 -w 5`).
pub(crate) fn thread_bytes(task: &Task, program_bytes: usize, caches: Caches) -> f64 {
    let len = task.bytes();
    let scope = oxccl_platform::reduce::CopyScope {
        program_bytes,
        footprint: caches.footprint,
    };
    match task {
        Task::Copy { dsts, .. }
            if dsts.len() > 1
                && caches.passes_llc
                && !oxccl_platform::reduce::copy_streams(len, dsts.len(), scope) =>
        {
            len as f64 * dsts.len() as f64 * SCATTERED_COPY_COST
        }
        _ => memory_bytes(task),
    }
}

/// Copies per destination that a host thread's cached copy to several destinations
/// costs, in an operation whose buffers pass the last-level cache. Such a copy stores to
/// memory in as many streams as it has destinations, and it ran slower than as many
/// copies to one destination each; why was not found. The figure is fitted to these
/// measurements on 8 in-process ranks at 4 MiB (36 MiB of buffers against a 32 MiB L3),
/// `mesh-push` against the fastest of the executors that copy to one destination at a
/// time:
/// - AllGather, against `rhd`: 1.24x and 1.27x in two runs of `oxccl tune --all --ranks 8
///   -b 1K -e 64M -f 8`; 1.10x and 1.07x in two of `oxccl tune --all --ranks 8 -b 512K -e
///   4M -f 8`; 1.12x, medians of three alternating runs of `oxccl perf all-gather --ranks
///   8 -b 2M -e 4M -f 2 -n 30 -w 5`;
/// - Broadcast, against `mesh`: 1.26x and 1.18x in two runs of `oxccl tune broadcast
///   --ranks 8 -b 512K -e 4M -f 8`; 1.16x, medians of three runs of `oxccl perf broadcast`
///   as above.
///
/// Charged a copy per destination and no more, `mesh-push` modelled 0.5% faster than
/// `rhd` at that AllGather; any factor from 1.05 to 1.3 gives the same choices on `host8`
/// from 1 KiB to 32 MiB in steps of 8x.
const SCATTERED_COPY_COST: f64 = 1.15;

/// Seconds of one thread a Copy or Reduce of a program moving `program_bytes` takes on a
/// CPU host: its fixed cost, and its copying ([`thread_bytes`]) at one thread's copy rate,
/// the share the caches serve of it at the cached rate ([`Processor::cached_share`]), and
/// the share `forwarded` of it (what it reads of blocks other ranks write in the
/// operation, [`Writers::forwarded_share`]) at the rate of a block another core has just
/// written ([`Processor::forward_seconds_per_byte`]).
pub(crate) fn thread_seconds(
    processor: &Processor,
    task: &Task,
    caches: Caches,
    program_bytes: usize,
    forwarded: f64,
) -> f64 {
    let bytes = thread_bytes(task, program_bytes, caches);
    let own = processor.seconds_per_byte(caches.cached);
    let relayed = processor.forward_seconds_per_byte(caches.cached);
    processor.task_us * 1e-6 + bytes * ((1.0 - forwarded) * own + forwarded * relayed)
}

/// Whether the host shares `task` among its idle workers: it moves at least
/// `split_bytes` through memory, counted by the host device's own rule
/// ([`oxccl_platform::host::traffic_bytes`], which [`memory_bytes`] follows).
pub(crate) fn splits(processor: &Processor, task: &Task) -> bool {
    oxccl_platform::host::traffic_bytes(task.bytes(), operands(task)) >= processor.split_bytes
}

/// For every (rank, buffer) a task of `programs` reads or writes, the span from the
/// lowest byte touched to the highest (end exclusive).
pub(crate) type Spans = crate::fast_hash::FastMap<(usize, oxccl_platform::Buf), (usize, usize)>;

/// The [`Spans`] of `programs`.
pub(crate) fn spans<'p>(programs: impl IntoIterator<Item = &'p RankProgram>) -> Spans {
    let mut spans = Spans::default();
    let tasks = programs
        .into_iter()
        .flat_map(|p| p.streams.iter().flat_map(|s| s.tasks.iter()));
    for task in tasks {
        for slice in task.reads().iter().chain(task.writes()) {
            let end = slice.offset.saturating_add(slice.len);
            let span = spans
                .entry((slice.rank, slice.buf))
                .or_insert((slice.offset, end));
            *span = (span.0.min(slice.offset), span.1.max(end));
        }
    }
    spans
}

/// The bytes of memory that the tasks of `programs` touch, per owner: their [`spans`]
/// summed over the ranks `owner` maps to `Some` key (a server, say). What an operation
/// keeps in a host's caches between calls ([`Processor::cached_share`]).
pub(crate) fn footprints<'p>(
    programs: impl IntoIterator<Item = &'p RankProgram>,
    owners: usize,
    owner: impl Fn(usize) -> Option<usize>,
) -> Vec<usize> {
    let mut sums = vec![0usize; owners];
    for (&(rank, _), &(start, end)) in &spans(programs) {
        if let Some(sum) = owner(rank).and_then(|o| sums.get_mut(o)) {
            *sum = sum.saturating_add(end - start);
        }
    }
    sums
}

/// Whether ranks `a` and `b` are threads (or processes mapping each other's buffers) of
/// one CPU host: a peer's buffer is memory the task's own thread reads or writes, and a
/// signal is a store, with no link in between. Peers of one host joined by a put-only
/// transport (TCP between its processes) still go over their link.
pub(crate) fn host_memory(topology: &Topology, a: usize, b: usize) -> bool {
    topology.processor().is_some()
        && topology.server_of(a) == topology.server_of(b)
        && topology.link_access(a, b) == Some(oxccl_platform::LinkAccess::LoadStore)
}

/// The modelled cost of one operation.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct CostReport {
    /// Modelled time from the first task issued to the last task done, seconds.
    pub time_s: f64,
    /// nccl-tests algorithm bandwidth: `bytes / time_s`, GB/s.
    pub algbw_gbps: f64,
    /// nccl-tests bus bandwidth: algbw times [`OpKind::busbw_factor`](crate::OpKind::busbw_factor).
    pub busbw_gbps: f64,
    /// The op's size as nccl-tests counts it: the larger of a rank's input and output
    /// buffers (the whole gathered buffer for AllGather, ReduceScatter and AlltoAll).
    pub bytes: usize,
    /// Tasks replayed, over all ranks.
    pub tasks: usize,
    /// Bytes that crossed links, over all ranks.
    pub link_bytes: f64,
    /// Time streams spent blocked in Waits, summed over streams, seconds.
    pub blocked_s: f64,
}

impl fmt::Display for CostReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} B: {:.3} us, algbw {:.3} GB/s, busbw {:.3} GB/s ({} tasks)",
            self.bytes,
            self.time_s * 1e6,
            self.algbw_gbps,
            self.busbw_gbps,
            self.tasks
        )
    }
}

/// Why a replay could not finish.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CostError {
    #[error(
        "the cost model has {programs} programs but the topology has {topology} ranks; \
         record the programs on the topology you model"
    )]
    RankMismatch { programs: usize, topology: usize },
    #[error(
        "rank {rank} stream {stream} task {task} uses the link to rank {peer}, which {why}; \
         run the analyzer (`oxccl check`) on this program"
    )]
    NoLink {
        rank: usize,
        stream: usize,
        task: usize,
        peer: usize,
        why: &'static str,
    },
    #[error(
        "the programs cannot finish: rank {rank} stream {stream} task {task} {what} \
         ({stuck} streams stuck); run the analyzer (`oxccl check`) for the full diagnosis"
    )]
    Deadlock {
        rank: usize,
        stream: usize,
        task: usize,
        what: String,
        stuck: usize,
    },
    #[error(
        "rank {rank}: streams {} and {} wait on notify {notify} at once; a notify has one \
         waiter, so give each stream its own", streams.0, streams.1
    )]
    SharedWait {
        rank: usize,
        streams: (usize, usize),
        notify: u32,
    },
    #[error(
        "cost parameters {0:?} are invalid: bandwidths must be positive and the dispatch \
         cost zero or positive"
    )]
    BadParams(CostParams),
}

/// Model the recorded operation.
pub fn model(rec: &Recording, params: &CostParams) -> Result<CostReport, CostError> {
    let programs: Vec<&RankProgram> = rec.ranks.iter().map(|r| &*r.program).collect();
    model_with(rec, &programs, params, &mut ())
}

/// Modelled time, in seconds, of hand-built programs (indexed by rank) over `topology`.
pub fn model_programs(
    programs: &[&RankProgram],
    topology: &Topology,
    params: &CostParams,
) -> Result<f64, CostError> {
    params.validate()?;
    Ok(engine::run(programs, topology, params, &mut ())?.time_s)
}

/// The bytes that define `op`'s bandwidth on `ranks` ranks: the larger of rank 0's input
/// and output buffers (NCCL-tests' algbw numerator).
pub(crate) fn op_bytes(op: &crate::op::OpParam, ranks: usize) -> usize {
    let (input, output) = op.buffer_bytes(0, ranks);
    input.max(output)
}

/// Algorithm bandwidth, GB/s, of `bytes` moved in `time_s` seconds (0 for no time).
pub(crate) fn algbw_gbps(bytes: usize, time_s: f64) -> f64 {
    if time_s > 0.0 {
        bytes as f64 / time_s / 1e9
    } else {
        0.0
    }
}

fn model_with(
    rec: &Recording,
    programs: &[&RankProgram],
    params: &CostParams,
    observer: &mut dyn engine::Observer,
) -> Result<CostReport, CostError> {
    params.validate()?;
    let outcome = engine::run(programs, &rec.topology, params, observer)?;
    let bytes = op_bytes(&rec.ops[0], rec.rank_count());
    let algbw_gbps = algbw_gbps(bytes, outcome.time_s);
    Ok(CostReport {
        time_s: outcome.time_s,
        algbw_gbps,
        busbw_gbps: algbw_gbps * rec.op.kind.busbw_factor(rec.rank_count()),
        bytes,
        tasks: outcome.tasks,
        link_bytes: outcome.link_bytes,
        blocked_s: outcome.blocked_s,
    })
}

#[cfg(test)]
mod tests;
