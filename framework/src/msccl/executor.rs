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

use super::geometry::{Alias, Geometry, Loc};
use super::lower::Lower;
use super::model::{Algorithm, BufName};
use super::validate::buffer_chunks;
use super::wiring::Wiring;
use crate::error::Error;
use crate::executor::{Executor, KernelArgs, KernelCtx, Mode, Peers, PlanCtx, ResourceRequest};
use oxccl_platform::Rank;
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
pub(super) struct SlotPlan {
    /// Landing slots per connection.
    pub(super) slots: usize,
    /// Per connection: the chunk of the receiver's scratch where its slot 0 begins.
    pub(super) landing: Vec<usize>,
    /// Bytes of a chunk of the largest iteration: scratch positions are counted in these,
    /// so a slot lies at the same bytes in every iteration (a last, shorter iteration
    /// must not write where another connection's slot of the previous one is still read).
    pub(super) stride: usize,
    /// This rank's dependency edges.
    pub(super) edges: Edges,
}

/// One rank's dependency edges between threadblocks, one private notify each, found once
/// per plan: per consumer (tb, step) the notify it waits on, per producer the notifies it
/// posts.
#[derive(Default)]
pub(super) struct Edges {
    pub(super) waits: BTreeMap<(usize, usize), usize>,
    pub(super) posts: BTreeMap<(usize, usize), Vec<usize>>,
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
    pub(super) fn multiplier(&self) -> usize {
        let (i, o) = self.algo.coll.buffer_counts(1, self.algo.ngpus);
        i.max(o).max(1)
    }

    /// The smallest element count whose chunks are whole: counts must be multiples of it.
    pub fn unit(&self) -> usize {
        let (n, m) = (self.algo.nchunksperloop, self.multiplier());
        n / crate::arith::gcd(n, m)
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

    /// Per connection, the scratch position of its first of `slots` landing slots on
    /// the receiver; and the scratch positions the busiest rank needs.
    fn landing(&self, slots: usize) -> (Vec<usize>, usize) {
        let mut next: Vec<usize> = self.algo.gpus.iter().map(|g| g.s_chunks).collect();
        let mut landing = Vec::with_capacity(self.wiring.connections.len());
        for c in &self.wiring.connections {
            landing.push(next[c.to]);
            next[c.to] = next[c.to].saturating_add(slots.saturating_mul(c.max_cnt));
        }
        (landing, next.iter().copied().max().unwrap_or(0))
    }

    /// `rank`'s dependency edges.
    fn edges(&self, rank: Rank) -> Edges {
        let mut edges = Edges::default();
        for (e, (producer, consumer)) in self.wiring.edges(rank).into_iter().enumerate() {
            edges.waits.insert(consumer, e);
            edges.posts.entry(producer).or_default().push(e);
        }
        edges
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
    pub(super) fn alias(&self, rank: Rank) -> Option<Alias> {
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

impl Executor for FileExecutor {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let imp = &self.0;
        if let Some(why) = imp.refusal(ctx) {
            return Err(imp.unsupported(ctx, why));
        }
        // Every link channel the file's channels leave free deepens its FIFOs (more
        // messages in flight), up to the most the depth search tries.
        let slots = (ctx.link_channels / imp.algo.nchannels).min(super::depth::MAX_DEPTH);
        let (landing, scratch_chunks) = imp.landing(slots);
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
        let edges = imp.edges(ctx.rank);
        let gpu = &imp.algo.gpus[ctx.rank];
        let local_notifies = edges.waits.len();
        let plan = SlotPlan {
            slots,
            landing,
            stride: chunk_bytes,
            edges,
        };
        Ok(ResourceRequest {
            slave_streams: gpu.tbs.len().saturating_sub(1),
            local_notifies,
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
        let chunk_bytes = (total / n).saturating_mul(args.op.dtype.size());
        let geometry = Geometry::new(imp, ctx.rank, args, chunk_bytes, plan.stride);
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
        let lower = Lower {
            imp,
            plan,
            geometry: &geometry,
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
