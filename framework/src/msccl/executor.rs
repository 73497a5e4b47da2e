//! An imported algorithm as an executor: threadblocks become streams, messages become
//! puts into the receiver's scratch with the signals they need, dependencies become
//! waits.
//!
//! # Translation
//!
//! - **Streams.** Threadblock `t` of a gpu (file order) runs on stream `t` of its rank:
//!   the first on the main stream, the others on slave streams forked at the start of
//!   each loop iteration and joined at its end.
//! - **Messages.** Every connection (channel, sender, receiver) gets `D` landing slots in
//!   the receiver's scratch, each the size of its largest message. Message `k` goes
//!   through slot `k mod D` on link channel `chan * D + k mod D`: the sender writes the
//!   data into the slot (a put: only the receiver's scratch is written, so the executor
//!   runs over put-only links, TCP included) and posts the receiver's DataSignal; the
//!   receiver waits for it, consumes the slot (copy it out, reduce it with local chunks,
//!   pass it on) and posts the sender's Ack as a credit. The sender waits for the credit
//!   of message `k - D` before it writes message `k`, and for the last `D` credits before
//!   its threadblock ends, so every signal is consumed within the iteration: the next
//!   iteration (or call) starts with every slot free. `D` is the link channels over the
//!   file's channels (two slots per connection with the default two link channels and
//!   one MSCCL channel), which is MSCCL's FIFO with fewer steps; a file whose schedule
//!   needs deeper FIFOs ([`super::depth`]) is refused until `OXCCL_LINK_CHANNELS` gives
//!   them.
//! - **Step types.** `s` copies its source into the slot; `r` copies the slot to its
//!   destination; `rcs` copies the slot to its destination and to the next receiver's slot
//!   in one task; `rrs`, `rrc` and `rrcs` reduce the slot with the source into the next
//!   slot, the destination, or both; `cpy` and `re` are local copies and reductions
//!   (`dst = dst op src`); `nop` only carries its dependency.
//! - **Dependencies.** A step with `depid`/`deps` on another threadblock waits on a private
//!   notify that the step it names posts when it completes; one notify per edge, since a
//!   notify is binary. A dependency on an earlier step of its own threadblock is stream
//!   order already.
//! - **Chunks.** One chunk is `count x multiplier / nchunksperloop` elements of the loop
//!   iteration (multiplier: 1 for AllReduce, Broadcast and Reduce; the rank count for the
//!   others). Chunk `c` of a side with one block per rank lies in block
//!   `c / (nchunksperloop / ranks)`, at the block stride the orchestration gives; the
//!   scratch holds the file's `s_chunks`, then the landing slots.
//! - **Loop.** Each iteration takes a multiple of the size unit (the smallest count whose
//!   chunks are whole) that fits the CCL buffers, and scratch of at most twice a CCL
//!   buffer.

use super::model::{Algorithm, BufName, StepKind};
use super::validate::buffer_chunks;
use super::wiring::{End, Wiring};
use crate::error::Error;
use crate::executor::{Executor, KernelArgs, KernelCtx, Mode, Peers, PlanCtx, ResourceRequest};
use oxccl_platform::{Buf, Rank, Slice, Task};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A file's algorithm with what is derived from it once.
#[derive(Debug)]
pub struct Imported {
    /// The registered (unique) name.
    pub name: &'static str,
    pub algo: Algorithm,
    pub wiring: Wiring,
    /// The least message slots per connection its schedule needs
    /// ([`super::depth::fifo_depth`]).
    pub depth: usize,
}

/// The executor of one imported algorithm.
pub struct FileExecutor(pub Arc<Imported>);

/// What `resources` decides for every iteration.
struct SlotPlan {
    /// Landing slots per connection.
    slots: usize,
    /// Per connection: the chunk of the receiver's scratch where its slot 0 begins.
    landing: Vec<usize>,
    /// Bytes of a chunk of the largest iteration: scratch positions are counted in these,
    /// so a slot lies at the same bytes in every iteration (a last, shorter iteration
    /// must not write where another connection's slot of the previous one is still read).
    stride: usize,
}

impl Imported {
    fn unsupported(&self, ctx: &PlanCtx<'_>, reason: String) -> Error {
        Error::Unsupported {
            executor: self.name.to_string(),
            op: ctx.op.kind,
            ranks: ctx.ranks,
            reason,
        }
    }

    /// The rank count's multiple of `count` the chunks divide (MSCCL's size multiplier).
    fn multiplier(&self) -> usize {
        let (i, o) = self.algo.coll.buffer_counts(1, self.algo.ngpus);
        i.max(o).max(1)
    }

    /// The smallest element count whose chunks are whole: counts must be multiples of it.
    pub fn unit(&self) -> usize {
        let (n, m) = (self.algo.nchunksperloop, self.multiplier());
        n / gcd(n, m)
    }

    /// Why this file cannot run `ctx`, as select_alg's explanation shows it.
    fn refusal(&self, ctx: &PlanCtx<'_>) -> Option<String> {
        let a = &self.algo;
        if ctx.ranks != a.ngpus {
            return Some(format!("the file is for ngpus={} ranks", a.ngpus));
        }
        if ctx.op.kind != a.coll {
            return Some(format!("the file's collective is {}", a.coll));
        }
        if a.coll.has_root() && ctx.op.root != Some(a.root) {
            return Some(format!("the file is for root {}", a.root));
        }
        if ctx.in_place && !a.inplace {
            return Some("the file does not run in place (inplace=\"0\")".into());
        }
        if !ctx.in_place && !a.outofplace {
            return Some("the file runs in place only (outofplace=\"0\")".into());
        }
        let bytes = ctx
            .op
            .count
            .saturating_mul(ctx.op.dtype.size())
            .saturating_mul(self.multiplier());
        if bytes < a.min_bytes || a.max_bytes.is_some_and(|max| bytes > max) {
            let max = a
                .max_bytes
                .map_or("unbounded".to_string(), |m| m.to_string());
            return Some(format!(
                "{bytes} bytes (count x type size x multiplier) is outside the file's range \
                 minBytes={} maxBytes={max}",
                a.min_bytes
            ));
        }
        let (unit, m) = (self.unit(), self.multiplier());
        if !ctx.op.count.is_multiple_of(unit) {
            return Some(format!(
                "count {} x multiplier {m} is not divisible by nchunksperloop={} (counts must \
                 be multiples of {unit})",
                ctx.op.count, a.nchunksperloop
            ));
        }
        if ctx.link_channels / a.nchannels < self.depth {
            let need = a.nchannels * self.depth;
            return Some(format!(
                "the file needs {} message slots on each of its {} channels per peer, one \
                 link channel each, and the communicator has {} link channels; set \
                 OXCCL_LINK_CHANNELS to at least {need}",
                self.depth, a.nchannels, ctx.link_channels
            ));
        }
        None
    }

    /// Landing slots of every connection, and the scratch chunks the busiest rank needs.
    fn slot_plan(&self, slots: usize) -> (SlotPlan, usize) {
        let mut next: Vec<usize> = self.algo.gpus.iter().map(|g| g.s_chunks).collect();
        let mut landing = Vec::with_capacity(self.wiring.connections.len());
        for c in &self.wiring.connections {
            landing.push(next[c.to]);
            next[c.to] = next[c.to].saturating_add(slots.saturating_mul(c.max_cnt));
        }
        let most = next.iter().copied().max().unwrap_or(0);
        let plan = SlotPlan {
            slots,
            landing,
            stride: 0,
        };
        (plan, most)
    }

    /// Elements per loop iteration: a multiple of the unit that fits the CCL buffers and
    /// keeps scratch within twice a CCL buffer; `None` when not even one unit does.
    fn per_loop(&self, ctx: &PlanCtx<'_>, scratch_chunks: usize) -> Option<usize> {
        let es = ctx.op.dtype.size();
        let (m, n) = (self.multiplier(), self.algo.nchunksperloop);
        let buffer_cap = match ctx.mode {
            Mode::Staged if m > 1 => (ctx.ccl_bytes / ctx.ranks / 128 * 128).max(1) / es,
            Mode::Staged => ctx.ccl_bytes / es,
            Mode::Direct => usize::MAX,
        };
        // scratch bytes = scratch_chunks * (count * m / n) * es <= 2 * ccl_bytes
        let per_chunk_count = scratch_chunks.saturating_mul(m).saturating_mul(es).max(1);
        let scratch_cap = ctx.ccl_bytes.saturating_mul(2).saturating_mul(n) / per_chunk_count;
        let unit = self.unit();
        let cap = buffer_cap.min(scratch_cap).min(ctx.op.count.max(unit));
        let per_loop = cap / unit * unit;
        (per_loop > 0).then_some(per_loop)
    }

    /// Every rank pair a message passes between, as (lower, higher), sorted.
    pub fn links(&self) -> Vec<(Rank, Rank)> {
        let mut links: Vec<(Rank, Rank)> = self
            .wiring
            .connections
            .iter()
            .map(|c| (c.from.min(c.to), c.from.max(c.to)))
            .collect();
        links.sort_unstable();
        links.dedup();
        links
    }

    /// The one-buffer view of an algorithm that runs in place, for `rank`.
    fn alias(&self, rank: Rank) -> Option<Alias> {
        let a = &self.algo;
        if !a.inplace {
            return None;
        }
        let (i, o) = a.coll.buffer_counts(1, a.ngpus);
        let block = a.nchunksperloop / a.ngpus;
        Some(match (i, o) {
            (i, o) if i == o => Alias {
                from: BufName::Input,
                to: BufName::Output,
                base: 0,
            },
            (i, o) if i < o => Alias {
                from: BufName::Input,
                to: BufName::Output,
                base: rank * block,
            },
            _ => Alias {
                from: BufName::Output,
                to: BufName::Input,
                base: rank * block,
            },
        })
    }

    fn peers(&self, rank: Rank) -> Vec<Rank> {
        let mut peers: Vec<Rank> = self
            .wiring
            .connections
            .iter()
            .filter_map(|c| match (c.from == rank, c.to == rank) {
                (true, _) => Some(c.to),
                (_, true) => Some(c.from),
                _ => None,
            })
            .collect();
        peers.sort_unstable();
        peers.dedup();
        peers
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a.max(1)
    } else {
        gcd(b, a % b)
    }
}

impl Executor for FileExecutor {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let imp = &self.0;
        if let Some(why) = imp.refusal(ctx) {
            return Err(imp.unsupported(ctx, why));
        }
        // Every link channel the file's channels leave free deepens its FIFOs (more
        // messages in flight), up to the most the depth search tries.
        let slots = (ctx.link_channels / imp.algo.nchannels).min(super::depth::MAX_DEPTH);
        let (plan, scratch_chunks) = imp.slot_plan(slots);
        let per_loop = imp.per_loop(ctx, scratch_chunks).ok_or_else(|| {
            imp.unsupported(
                ctx,
                format!(
                    "a CCL buffer of {} bytes holds less than one loop of the file ({} \
                     elements)",
                    ctx.ccl_bytes,
                    imp.unit()
                ),
            )
        })?;
        // per_loop keeps the scratch within twice a CCL buffer, so this cannot wrap.
        let chunk_bytes = per_loop
            .min(ctx.op.count)
            .saturating_mul(imp.multiplier())
            .saturating_mul(ctx.op.dtype.size())
            / imp.algo.nchunksperloop;
        let plan = SlotPlan {
            stride: chunk_bytes,
            ..plan
        };
        let gpu = &imp.algo.gpus[ctx.rank];
        Ok(ResourceRequest {
            slave_streams: gpu.tbs.len().saturating_sub(1),
            local_notifies: imp.wiring.edges(ctx.rank).len(),
            scratch_bytes: scratch_chunks.saturating_mul(chunk_bytes),
            peers: Peers::List(imp.peers(ctx.rank)),
            max_count_per_loop: Some(per_loop),
            plan: Default::default(),
        }
        .with_plan(plan))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let imp = &*self.0;
        let plan: &SlotPlan = ctx.plan()?;
        let count = args.op.count;
        let (m, n) = (imp.multiplier(), imp.algo.nchunksperloop);
        if count == 0 {
            return Ok(());
        }
        let Some(total) = count.checked_mul(m).filter(|t| t.is_multiple_of(n)) else {
            return Err(Error::BadProgram {
                executor: imp.name.into(),
                rank: ctx.rank,
                reason: format!("an iteration of {count} elements is not whole chunks"),
            });
        };
        let (in_chunks, out_chunks) = buffer_chunks(&imp.algo);
        let geometry = Geometry {
            rank: ctx.rank,
            args,
            chunk_bytes: (total / n).saturating_mul(args.op.dtype.size()),
            stride: plan.stride,
            alias: None,
            outofplace: imp.algo.outofplace,
            in_block: None,
            out_block: None,
        }
        .blocks(imp, in_chunks, out_chunks);
        let geometry = Geometry {
            alias: imp.alias(ctx.rank),
            ..geometry
        };
        let tbs = imp.algo.gpus[ctx.rank].tbs.len();
        let main = 0;
        if let Some(alias) = geometry.remap().filter(|a| a.to == BufName::Output) {
            // In place, the input is part of the one buffer: put it there first.
            let from = Loc::Local(BufName::Input, 0);
            geometry.copy(
                ctx,
                main,
                from,
                Loc::Local(BufName::Output, alias.base),
                in_chunks,
            );
        }
        if tbs > 1 {
            ctx.fork(1..=tbs - 1);
        }
        let edges = imp.wiring.edges(ctx.rank);
        let mut waits = BTreeMap::new();
        let mut posts: BTreeMap<(usize, usize), Vec<usize>> = BTreeMap::new();
        for (e, (producer, consumer)) in edges.iter().enumerate() {
            waits.insert(*consumer, e);
            posts.entry(*producer).or_default().push(e);
        }
        let lower = Lower {
            imp,
            plan,
            geometry: &geometry,
            waits: &waits,
            posts: &posts,
        };
        for t in 0..tbs {
            for s in 0..imp.algo.gpus[ctx.rank].tbs[t].steps.len() {
                lower.step(ctx, t, s)?;
            }
            lower.drain(ctx, t)?;
        }
        if tbs > 1 {
            ctx.join(1..=tbs - 1);
        }
        if let Some(alias) = geometry.remap().filter(|a| a.to == BufName::Input) {
            // In place, the output is part of the one buffer: take it from there.
            let from = Loc::Local(BufName::Input, alias.base);
            geometry.copy(ctx, main, from, Loc::Local(BufName::Output, 0), out_chunks);
        }
        Ok(())
    }
}

/// How an algorithm that runs in place sees the one buffer: its references to
/// `from` are chunks `base..` of `to` (the larger side: AllGather's input is block `rank`
/// of the output, ReduceScatter's output block `rank` of the input, AllReduce's input is
/// the output). msccl-tools writes in-place programs either way (chunks of the input, or
/// the same chunks of the output): read through this, both meet in one buffer.
///
/// - A file that runs in place only is remapped through it when the buffers bound are not
///   one (staged through the CCL buffers): the input is copied into place first, or the
///   output out of it last.
/// - Bound in place (zero-copy), input and output are one memory already, with the user's
///   input read-only: references stand, and a `cpy` of chunks onto themselves (a rank's
///   own block into its place) is dropped; a file that writes the input there is refused
///   by the analyzer.
/// - A file that also runs out of place names two buffers whenever the call does not bind
///   them as one: nothing is remapped or dropped then.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Alias {
    from: BufName,
    to: BufName,
    base: usize,
}

/// Where a file's chunks lie in one iteration's buffers.
struct Geometry<'a> {
    rank: Rank,
    args: &'a KernelArgs,
    chunk_bytes: usize,
    /// Bytes per scratch chunk position ([`SlotPlan::stride`]).
    stride: usize,
    /// The one-buffer view of an algorithm that runs in place.
    alias: Option<Alias>,
    /// The algorithm also runs out of place (its input and output references name two
    /// buffers unless the call binds them as one).
    outofplace: bool,
    /// Chunks per block of the input and output, for the sides with one block per rank.
    in_block: Option<usize>,
    out_block: Option<usize>,
}

/// A run of chunks in some rank's buffer.
#[derive(Copy, Clone, Debug)]
enum Loc {
    Local(BufName, usize),
    /// Chunk of `rank`'s scratch (landing slots).
    Scratch(Rank, usize),
}

impl Geometry<'_> {
    fn blocks(self, imp: &Imported, in_chunks: usize, out_chunks: usize) -> Self {
        let n = imp.algo.nchunksperloop;
        let per_block = n / imp.algo.ngpus;
        Geometry {
            in_block: (imp.multiplier() > 1 && in_chunks == n).then_some(per_block),
            out_block: (imp.multiplier() > 1 && out_chunks == n).then_some(per_block),
            ..self
        }
    }

    /// The one-buffer view, where references must be moved through it: the buffers
    /// bound are not one. Bound in place (zero-copy), input and output are one memory
    /// already, with the user's input read-only: references stand as they are.
    fn remap(&self) -> Option<Alias> {
        self.alias
            .filter(|_| !self.args.aliased && !self.outofplace)
    }

    /// Whether input and output are one buffer in this iteration: bound in place, or
    /// seen as one ([`Geometry::remap`]).
    fn one_buffer(&self) -> bool {
        self.alias.is_some() && (self.args.aliased || self.remap().is_some())
    }

    /// Where a step's chunk reference lies (through the one-buffer view when remapped).
    fn local(&self, chunk: super::model::ChunkRef) -> Loc {
        match self.remap() {
            Some(a) if a.from == chunk.buf => Loc::Local(a.to, a.base + chunk.off),
            _ => Loc::Local(chunk.buf, chunk.off),
        }
    }

    /// Whether `a` and `b` are the same chunks (of the one buffer, when input and output
    /// are one): a copy between them moves nothing.
    fn same(&self, a: Loc, b: Loc) -> bool {
        let view = self.alias.filter(|_| self.one_buffer());
        let one = |l: Loc| match (view, l) {
            (Some(al), Loc::Local(buf, c)) if al.from == buf => Loc::Local(al.to, al.base + c),
            _ => l,
        };
        matches!((one(a), one(b)), (Loc::Local(x, i), Loc::Local(y, j)) if x == y && i == j)
    }

    /// Copy `cnt` chunks from `from` to `to` on stream `s`, in runs no block boundary
    /// crosses.
    fn copy(&self, ctx: &mut KernelCtx<'_>, s: usize, from: Loc, to: Loc, cnt: usize) {
        for run in self.runs(&[from, to], cnt) {
            ctx.stream(s).copy(run[0], run[1]);
        }
    }

    /// Chunks per block of `loc`'s buffer, if it has blocks.
    fn block(&self, loc: Loc) -> Option<usize> {
        match loc {
            Loc::Local(BufName::Input, _) => self.in_block,
            Loc::Local(BufName::Output, _) => self.out_block,
            _ => None,
        }
    }

    /// Whether chunk `k` of `loc` starts a new block (a run must not cross it).
    fn breaks_at(&self, loc: Loc, k: usize) -> bool {
        let first = match loc {
            Loc::Local(_, c) | Loc::Scratch(_, c) => c,
        };
        self.block(loc)
            .is_some_and(|b| (first + k).is_multiple_of(b))
    }

    /// Chunks `[k, k + len)` of `loc` as one slice (no block boundary inside).
    fn slice(&self, loc: Loc, k: usize, len: usize) -> Slice {
        let bytes = len * self.chunk_bytes;
        match loc {
            // A landing slot is read and written whole (or cut at the same chunks by both
            // ends): its chunks are packed after its position.
            Loc::Scratch(rank, c) => Slice::new(rank, Buf::Scratch, self.scratch_at(c, k), bytes),
            // The file's own scratch is this rank's alone, and the iteration's streams join
            // before the next: packed at this iteration's chunk size.
            Loc::Local(BufName::Scratch, c) => {
                Slice::new(self.rank, Buf::Scratch, (c + k) * self.chunk_bytes, bytes)
            }
            Loc::Local(side, c) => {
                let range = match side {
                    BufName::Input => self.args.input,
                    _ => self.args.output,
                };
                let chunk = c + k;
                let offset = match self.block(loc) {
                    Some(b) => {
                        (chunk / b) * self.args.block_stride + (chunk % b) * self.chunk_bytes
                    }
                    None => chunk * self.chunk_bytes,
                };
                range.at(self.rank, offset, bytes)
            }
        }
    }

    /// Byte offset of chunk `k` of the landing slot at scratch position `c`. Positions
    /// are `stride` bytes apart (the file's own `s_chunks` come first, each at most
    /// `stride` bytes in any iteration), so a slot lies at the same bytes in every
    /// iteration; a slot's chunks are packed after its position.
    fn scratch_at(&self, c: usize, k: usize) -> usize {
        c * self.stride + k * self.chunk_bytes
    }

    /// `cnt` chunks of every location in `locs`, cut into runs that no block boundary
    /// crosses: for each run, one slice per location.
    fn runs(&self, locs: &[Loc], cnt: usize) -> Vec<Vec<Slice>> {
        let mut cuts = vec![0];
        cuts.extend((1..cnt).filter(|&k| locs.iter().any(|&l| self.breaks_at(l, k))));
        cuts.push(cnt);
        cuts.windows(2)
            .map(|w| {
                locs.iter()
                    .map(|&l| self.slice(l, w[0], w[1] - w[0]))
                    .collect()
            })
            .collect()
    }
}

/// Lowering one rank's steps.
struct Lower<'a> {
    imp: &'a Imported,
    plan: &'a SlotPlan,
    geometry: &'a Geometry<'a>,
    /// Per consumer (tb, step): the edge notify it waits on.
    waits: &'a BTreeMap<(usize, usize), usize>,
    /// Per producer (tb, step): the edge notifies it posts.
    posts: &'a BTreeMap<(usize, usize), Vec<usize>>,
}

impl Lower<'_> {
    /// Link channel and landing slot (a scratch chunk on the receiver) of message `end`.
    fn slot(&self, end: End) -> (usize, usize) {
        let c = &self.imp.wiring.connections[end.conn];
        let j = end.k % self.plan.slots;
        (
            c.chan * self.plan.slots + j,
            self.plan.landing[end.conn] + j * c.max_cnt,
        )
    }

    fn step(&self, ctx: &mut KernelCtx<'_>, t: usize, s: usize) -> Result<(), Error> {
        let rank = ctx.rank;
        let step = self.imp.algo.gpus[rank].tbs[t].steps[s].clone();
        if let Some(&e) = self.waits.get(&(t, s)) {
            let notify = ctx.notify(e);
            ctx.stream(t).wait(notify);
        }
        let wiring = &self.imp.wiring;
        let recv = wiring.recvs.get(&(rank, t, s)).copied();
        let send = wiring.sends.get(&(rank, t, s)).copied();
        let mut landing = None;
        let mut from_link = None;
        if let Some(end) = recv {
            let (channel, chunk) = self.slot(end);
            let link = ctx.link(wiring.connections[end.conn].from, channel)?;
            link.rx_data_signal(ctx.stream(t));
            landing = Some(Loc::Scratch(rank, chunk));
            from_link = Some(link);
        }
        let mut remote = None;
        let mut to_link = None;
        if let Some(end) = send {
            let c = &wiring.connections[end.conn];
            let (channel, chunk) = self.slot(end);
            let link = ctx.link(c.to, channel)?;
            if end.k >= self.plan.slots {
                link.rx_ack(ctx.stream(t));
            }
            remote = Some(Loc::Scratch(c.to, chunk));
            to_link = Some(link);
        }
        self.data(ctx, t, &step, landing, remote);
        if let Some(link) = from_link {
            link.tx_ack(ctx.stream(t));
        }
        if let Some(link) = to_link {
            link.tx_data_signal(ctx.stream(t));
        }
        for &e in self.posts.get(&(t, s)).into_iter().flatten() {
            let notify = ctx.notify(e);
            ctx.stream(t).post(notify);
        }
        Ok(())
    }

    /// The step's copy or reduction, from and to the locations it names.
    fn data(
        &self,
        ctx: &mut KernelCtx<'_>,
        t: usize,
        step: &super::model::Step,
        landing: Option<Loc>,
        remote: Option<Loc>,
    ) {
        let src = self.geometry.local(step.src);
        let dst = self.geometry.local(step.dst);
        // (sources, destinations); a reduction has two sources.
        let (srcs, dsts): (Vec<Loc>, Vec<Loc>) = match step.kind {
            StepKind::Nop => return,
            StepKind::Send => (vec![src], remote.into_iter().collect()),
            StepKind::Recv => (landing.into_iter().collect(), vec![dst]),
            StepKind::RecvCopySend => (
                landing.into_iter().collect(),
                std::iter::once(dst).chain(remote).collect(),
            ),
            StepKind::RecvReduceSend => (
                landing.into_iter().chain([src]).collect(),
                remote.into_iter().collect(),
            ),
            StepKind::RecvReduceCopy => (landing.into_iter().chain([src]).collect(), vec![dst]),
            StepKind::RecvReduceCopySend => (
                landing.into_iter().chain([src]).collect(),
                std::iter::once(dst).chain(remote).collect(),
            ),
            StepKind::Copy => (vec![src], vec![dst]),
            StepKind::Reduce => (vec![dst, src], vec![dst]),
        };
        // Copying chunks onto themselves (an in-place file's `cpy` of its input into its
        // place in the output, when they are one buffer) moves nothing.
        let dsts: Vec<Loc> = match srcs[..] {
            [one] => dsts
                .into_iter()
                .filter(|&d| !self.geometry.same(one, d))
                .collect(),
            _ => dsts,
        };
        if dsts.is_empty() {
            return;
        }
        let locs: Vec<Loc> = srcs.iter().chain(&dsts).copied().collect();
        let (dtype, op) = (self.geometry.args.op.dtype, self.geometry.args.op.op);
        for run in self.geometry.runs(&locs, step.cnt) {
            let (from, to) = run.split_at(srcs.len());
            let task = match from {
                [one] => Task::Copy {
                    src: *one,
                    dsts: to.to_vec(),
                },
                _ => Task::Reduce {
                    srcs: from.to_vec(),
                    dsts: to.to_vec(),
                    dtype,
                    op,
                },
            };
            ctx.stream(t).tasks.push(task);
        }
    }

    /// The credits still owed to threadblock `t`'s sends: waited before it ends.
    fn drain(&self, ctx: &mut KernelCtx<'_>, t: usize) -> Result<(), Error> {
        for (conn, c) in self.imp.wiring.connections.iter().enumerate() {
            if c.from != ctx.rank || c.send_tb != t {
                continue;
            }
            let total = c.messages.len();
            for k in total.saturating_sub(self.plan.slots)..total {
                let (channel, _) = self.slot(End { conn, k });
                let link = ctx.link(c.to, channel)?;
                link.rx_ack(ctx.stream(t));
            }
        }
        Ok(())
    }
}
