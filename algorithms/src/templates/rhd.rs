//! Recursive halving-doubling (RHD) over a group of ranks, HCCL's `H-D_R`.
//!
//! With `m = 2^k` the largest power of two not above the group size `n`, the group runs
//! `k` pairwise steps among `m` participants; participant `v` exchanges with `v ^ d` for
//! `d` a power of two. A group that is not a power of two folds first, the HCCL way: of
//! the first `2(n - m)` positions, each odd one hands its data to the even one before it,
//! which from then on represents both (and owns both their chunks); after the log steps
//! the pair unfolds again. Participant `v` is position `2v` for `v < n - m`, else
//! position `v + n - m`, so the positions a run of participants represents are
//! contiguous.
//!
//! - [`rhd_reduce_scatter`]: fold (the even position reduces the odd one's input into
//!   its own), then halving with `d = m/2, ..., 1`: each participant keeps the half of its
//!   current chunk range that holds its own chunks, reducing the partner's partial sums of
//!   it into its own; then unfold (the odd position pulls its reduced chunk).
//! - [`rhd_all_gather`]: fold (the even position pulls the odd one's chunk), doubling
//!   with `d = 1, ..., m/2`: each participant pulls the chunks its partner holds; then
//!   unfold (the odd position pulls every other chunk).
//! - [`rhd_all_reduce`]: both, without the unfold and fold in the middle.
//!
//! All pull: every step is a `pull_step` with the partner, so the input may be
//! read-only and the output may alias it, and when a template returns nobody reads this
//! rank's buffers any more. A group of one does nothing (like the ring templates).
//! HCCL cost of the AllReduce on a power of two: `2log2(p)α + 2(p−1)/p·nβ + (p−1)/p·nγ`;
//! otherwise two more steps, each moving the whole vector: `(2⌊log2 p⌋ + 2)α +
//! (2(p'−1)/p' + 2)·nβ + ((p'−1)/p' + 1)·nγ` with `p' = 2^⌊log2 p⌋`.

use super::ring::RingParams;
use super::ring_reduce_scatter::RingTargets;
use oxccl_framework::platform::{Link, Rank, Slice};
use oxccl_framework::{Error, KernelCtx, PlanCtx, Topology};
use std::ops::Range;

oxccl_framework::register_template! {
    name: "rhd_reduce_scatter",
    description: "recursive halving among 2^k participants, non-powers of two folded pairwise first",
}

oxccl_framework::register_template! {
    name: "rhd_all_gather",
    description: "recursive doubling among 2^k participants, non-powers of two folded pairwise first",
}

oxccl_framework::register_template! {
    name: "rhd_all_reduce",
    description: "fold, recursive halving, recursive doubling, unfold",
}

/// The participants of RHD over a group of `n` positions.
#[derive(Copy, Clone, Debug)]
pub(crate) struct RhdShape {
    /// Participants: the largest power of two not above `n`.
    pub m: usize,
    /// Folded pairs: positions `0..2r` fold into participants `0..r`.
    pub r: usize,
}

impl RhdShape {
    pub(crate) fn new(n: usize) -> Self {
        let m = if n == 0 { 0 } else { 1 << n.ilog2() };
        RhdShape { m, r: n - m }
    }

    /// The participant of position `pos`; `None` for an odd position that folded away.
    pub(crate) fn participant(&self, pos: usize) -> Option<usize> {
        match pos < 2 * self.r {
            true => (pos & 1 == 0).then_some(pos / 2),
            false => Some(pos - self.r),
        }
    }

    /// The position that participant `v` runs on.
    pub(crate) fn position(&self, v: usize) -> usize {
        match v < self.r {
            true => 2 * v,
            false => v + self.r,
        }
    }

    /// The positions participants `v` (a range) represent.
    pub(crate) fn positions(&self, v: Range<usize>) -> Range<usize> {
        let end = |v: usize| match v < self.r {
            true => 2 * v + 2,
            false => v + self.r + 1,
        };
        self.position(v.start)..end(v.end - 1)
    }

    /// The participants of the aligned block of `d` containing participant `v`.
    pub(crate) fn block(v: usize, d: usize) -> Range<usize> {
        let lo = v / d * d;
        lo..lo + d
    }

    /// The partner distances of the halving, largest first.
    pub(crate) fn halving(&self) -> impl Iterator<Item = usize> {
        let k = if self.m == 0 { 0 } else { self.m.ilog2() };
        (0..k).rev().map(|i| 1 << i)
    }

    /// The partner distances of the doubling, smallest first.
    pub(crate) fn doubling(&self) -> impl Iterator<Item = usize> {
        let k = if self.m == 0 { 0 } else { self.m.ilog2() };
        (0..k).map(|i| 1 << i)
    }
}

/// The group members `rank` exchanges with in any RHD template over `order`, sorted.
pub fn rhd_peers(order: &[Rank], rank: Rank) -> Vec<Rank> {
    let shape = RhdShape::new(order.len());
    let Some(pos) = order.iter().position(|&r| r == rank) else {
        return Vec::new();
    };
    let mut peers = Vec::new();
    if pos < 2 * shape.r {
        peers.push(order[pos ^ 1]);
    }
    if let Some(v) = shape.participant(pos) {
        peers.extend(shape.doubling().map(|d| order[shape.position(v ^ d)]));
    }
    peers.sort_unstable();
    peers.dedup();
    peers
}

/// The peers of `ctx.rank` in the RHD schedule over the ranks in order (its fold partner
/// and its doubling partners), each with a healthy link, as [`require_links`] checks.
pub fn rhd_links(ctx: &PlanCtx<'_>, executor: &str) -> Result<Vec<Rank>, Error> {
    let order: Vec<usize> = (0..ctx.ranks).collect();
    require_links(
        ctx.topology,
        executor,
        ctx.rank,
        rhd_peers(&order, ctx.rank),
    )
}

/// `peers`, or [`Error::NoLink`] for the first one `rank` has no healthy link to: the
/// log-step executors need specific links and run over nothing else.
pub fn require_links(
    topology: &Topology,
    executor: &str,
    rank: Rank,
    peers: Vec<Rank>,
) -> Result<Vec<Rank>, Error> {
    match peers
        .iter()
        .find(|&&p| topology.link_kind(rank, p).is_none())
    {
        Some(&peer) => Err(Error::NoLink {
            executor: executor.into(),
            rank,
            peer,
            why: topology.link_status(rank, peer).refusal(),
        }),
        None => Ok(peers),
    }
}

/// One pull exchange on `stream`: this rank reads from `read_from`'s buffers and
/// `read_by` reads from its own (either may be absent, both may be the same peer).
///
/// The provider's DataSignal says "what you read in this step is ready", the reader's Ack
/// "I am done reading it"; the provider waits for that Ack before its next step, so no
/// notify is posted twice before its wait and, when a step ends, nobody reads this rank's
/// buffers any more.
pub(crate) fn pull_step(
    ctx: &mut KernelCtx<'_>,
    stream: usize,
    read_from: Option<Link>,
    read_by: Option<Link>,
    data_task: impl FnOnce(&mut KernelCtx<'_>),
) {
    if let Some(l) = read_by {
        l.tx_data_signal(ctx.stream(stream));
    }
    if let Some(l) = read_from {
        l.rx_data_signal(ctx.stream(stream));
    }
    data_task(ctx);
    if let Some(l) = read_from {
        l.tx_ack(ctx.stream(stream));
    }
    if let Some(l) = read_by {
        l.rx_ack(ctx.stream(stream));
    }
}

/// `items` (each a task's slices, sources then destination) merged into runs: an item
/// joins the previous run when each of its slices continues the run's.
pub(crate) fn merge_runs<const K: usize>(
    items: impl IntoIterator<Item = [Slice; K]>,
) -> Vec<[Slice; K]> {
    let mut runs: Vec<[Slice; K]> = Vec::new();
    for item in items {
        if let Some(run) = runs.last_mut() {
            let continues = run
                .iter()
                .zip(&item)
                .all(|(a, b)| a.rank == b.rank && a.buf == b.buf && a.offset + a.len == b.offset);
            if continues {
                run.iter_mut().zip(&item).for_each(|(a, b)| a.len += b.len);
                continue;
            }
        }
        runs.push(item);
    }
    runs
}

/// Append merged copies `[src, dst]` to `stream`.
pub(crate) fn copy_runs(ctx: &mut KernelCtx<'_>, stream: usize, items: Vec<[Slice; 2]>) {
    for [src, dst] in merge_runs(items) {
        ctx.stream(stream).copy(src, dst);
    }
}

/// Append merged two-source reductions `[a, b, dst]` to `stream`.
pub(crate) fn reduce_runs(ctx: &mut KernelCtx<'_>, p: &RingParams<'_>, items: Vec<[Slice; 3]>) {
    for [a, b, dst] in merge_runs(items) {
        ctx.stream(p.stream).reduce(vec![a, b], dst, p.dtype, p.op);
    }
}

/// `ctx.rank`'s position in the group.
pub(crate) fn group_position(ctx: &KernelCtx<'_>, order: &[Rank]) -> Result<usize, Error> {
    order
        .iter()
        .position(|&r| r == ctx.rank)
        .ok_or_else(|| Error::BadProgram {
            executor: "log-step template".into(),
            rank: ctx.rank,
            reason: format!("rank {} is not in the group {order:?}", ctx.rank),
        })
}

/// This rank in an RHD group.
struct Member<'p, 'a> {
    p: &'p RingParams<'a>,
    shape: RhdShape,
    pos: usize,
}

impl Member<'_, '_> {
    fn link_to_position(&self, ctx: &KernelCtx<'_>, pos: usize) -> Result<Link, Error> {
        ctx.link(self.p.order[pos], self.p.channel)
    }

    /// The chunk indices of `positions`.
    fn chunks_of(&self, positions: Range<usize>) -> impl Iterator<Item = usize> + '_ {
        positions.map(|q| self.p.chunk_at[q])
    }

    /// Fold before a reduce-scatter: the even position of a pair reduces the odd one's
    /// input and its own into its partial sums, for every chunk.
    fn fold_reduce(&self, ctx: &mut KernelCtx<'_>, t: &RingTargets<'_>) -> Result<(), Error> {
        let (p, pos) = (self.p, self.pos);
        if pos >= 2 * self.shape.r {
            return Ok(());
        }
        let peer = self.link_to_position(ctx, pos ^ 1)?;
        if pos & 1 == 1 {
            pull_step(ctx, p.stream, None, Some(peer), |_| {});
            return Ok(());
        }
        let me = ctx.rank;
        let items = (0..p.chunks.len())
            .map(|c| {
                let ((off, len), (poff, _)) = (p.chunks[c], t.partial_chunks[c]);
                let srcs = [p.input.at(peer.remote, off, len), p.input.at(me, off, len)];
                [srcs[0], srcs[1], t.partials.at(me, poff, len)]
            })
            .collect();
        pull_step(ctx, p.stream, Some(peer), None, |ctx| {
            reduce_runs(ctx, p, items)
        });
        Ok(())
    }

    /// Recursive halving: participant `v` ends with its own chunks fully reduced (into
    /// `t.result` for the own position's chunk when it is set).
    fn halving(&self, ctx: &mut KernelCtx<'_>, t: &RingTargets<'_>) -> Result<(), Error> {
        let (p, shape, me) = (self.p, self.shape, ctx.rank);
        let Some(v) = shape.participant(self.pos) else {
            return Ok(());
        };
        let own = p.chunk_at[self.pos];
        for d in shape.halving() {
            let w = v ^ d;
            let link = self.link_to_position(ctx, shape.position(w))?;
            let first = d == shape.m / 2;
            let (theirs_partial, mine_partial) = (!first || w < shape.r, !first || v < shape.r);
            let side = |rank: Rank, partial: bool, c: usize| {
                let len = p.chunks[c].1;
                match partial {
                    true => t.partials.at(rank, t.partial_chunks[c].0, len),
                    false => p.input.at(rank, p.chunks[c].0, len),
                }
            };
            let items = self
                .chunks_of(shape.positions(RhdShape::block(v, d)))
                .map(|c| {
                    let len = p.chunks[c].1;
                    let dst = match t.result {
                        Some(result) if d == 1 && c == own => result.at(me, 0, len),
                        _ => t.partials.at(me, t.partial_chunks[c].0, len),
                    };
                    [
                        side(link.remote, theirs_partial, c),
                        side(me, mine_partial, c),
                        dst,
                    ]
                })
                .collect();
            pull_step(ctx, p.stream, Some(link), Some(link), |ctx| {
                reduce_runs(ctx, p, items)
            });
        }
        Ok(())
    }

    /// Unfold after a reduce-scatter: the odd position of a pair pulls its reduced chunk
    /// from the even one's partial sums.
    fn unfold_reduced(&self, ctx: &mut KernelCtx<'_>, t: &RingTargets<'_>) -> Result<(), Error> {
        let (p, pos) = (self.p, self.pos);
        if pos >= 2 * self.shape.r {
            return Ok(());
        }
        let peer = self.link_to_position(ctx, pos ^ 1)?;
        if pos & 1 == 0 {
            pull_step(ctx, p.stream, None, Some(peer), |_| {});
            return Ok(());
        }
        let c = p.chunk_at[pos];
        let (poff, len) = t.partial_chunks[c];
        let src = t.partials.at(peer.remote, poff, len);
        let dst = match t.result {
            Some(result) => result.at(ctx.rank, 0, len),
            None => t.partials.at(ctx.rank, poff, len),
        };
        pull_step(ctx, p.stream, Some(peer), None, |ctx| {
            ctx.stream(p.stream).copy(src, dst)
        });
        Ok(())
    }

    /// Fold before an all-gather: the even position of a pair pulls the odd one's chunk.
    fn fold_gather(&self, ctx: &mut KernelCtx<'_>) -> Result<(), Error> {
        let (p, pos) = (self.p, self.pos);
        if pos >= 2 * self.shape.r {
            return Ok(());
        }
        let peer = self.link_to_position(ctx, pos ^ 1)?;
        if pos & 1 == 1 {
            pull_step(ctx, p.stream, None, Some(peer), |_| {});
            return Ok(());
        }
        let items = self.copies_from(ctx.rank, peer.remote, self.chunks_of(pos + 1..pos + 2));
        pull_step(ctx, p.stream, Some(peer), None, |ctx| {
            copy_runs(ctx, p.stream, items)
        });
        Ok(())
    }

    /// Copies of `chunks` from `from`'s output into `me`'s.
    fn copies_from(
        &self,
        me: Rank,
        from: Rank,
        chunks: impl Iterator<Item = usize>,
    ) -> Vec<[Slice; 2]> {
        let out = self.p.output;
        chunks
            .map(|c| {
                let (off, len) = self.p.chunks[c];
                [out.at(from, off, len), out.at(me, off, len)]
            })
            .collect()
    }

    /// Recursive doubling: every participant ends with every chunk.
    fn doubling(&self, ctx: &mut KernelCtx<'_>) -> Result<(), Error> {
        let (p, shape) = (self.p, self.shape);
        let Some(v) = shape.participant(self.pos) else {
            return Ok(());
        };
        for d in shape.doubling() {
            let w = v ^ d;
            let link = self.link_to_position(ctx, shape.position(w))?;
            let chunks = self.chunks_of(shape.positions(RhdShape::block(w, d)));
            let items = self.copies_from(ctx.rank, link.remote, chunks);
            pull_step(ctx, p.stream, Some(link), Some(link), |ctx| {
                copy_runs(ctx, p.stream, items)
            });
        }
        Ok(())
    }

    /// Unfold after an all-gather: the odd position of a pair pulls every chunk from the
    /// even one, but its own when `has_own`.
    fn unfold_gathered(&self, ctx: &mut KernelCtx<'_>, has_own: bool) -> Result<(), Error> {
        let (p, pos) = (self.p, self.pos);
        if pos >= 2 * self.shape.r {
            return Ok(());
        }
        let peer = self.link_to_position(ctx, pos ^ 1)?;
        if pos & 1 == 0 {
            pull_step(ctx, p.stream, None, Some(peer), |_| {});
            return Ok(());
        }
        let own = p.chunk_at[pos];
        let chunks = (0..p.chunks.len()).filter(|&c| !has_own || c != own);
        let items = self.copies_from(ctx.rank, peer.remote, chunks);
        pull_step(ctx, p.stream, Some(peer), None, |ctx| {
            copy_runs(ctx, p.stream, items)
        });
        Ok(())
    }
}

fn member<'p, 'a>(ctx: &KernelCtx<'_>, p: &'p RingParams<'a>) -> Result<Member<'p, 'a>, Error> {
    Ok(Member {
        p,
        shape: RhdShape::new(p.order.len()),
        pos: group_position(ctx, p.order)?,
    })
}

/// Append an RHD reduce-scatter on `p.stream`: partial sums and the result in
/// `p.output`, at each chunk's offset.
pub fn rhd_reduce_scatter(ctx: &mut KernelCtx<'_>, p: &RingParams<'_>) -> Result<(), Error> {
    let targets = RingTargets {
        partials: p.output,
        partial_chunks: p.chunks,
        result: None,
    };
    rhd_reduce_scatter_into(ctx, p, &targets)
}

/// Append an RHD reduce-scatter on `p.stream` that reads `p.input` and writes `t`.
pub fn rhd_reduce_scatter_into(
    ctx: &mut KernelCtx<'_>,
    p: &RingParams<'_>,
    t: &RingTargets<'_>,
) -> Result<(), Error> {
    let m = member(ctx, p)?;
    m.fold_reduce(ctx, t)?;
    m.halving(ctx, t)?;
    m.unfold_reduced(ctx, t)
}

/// Append an RHD all-gather on `p.stream`.
pub fn rhd_all_gather(ctx: &mut KernelCtx<'_>, p: &RingParams<'_>) -> Result<(), Error> {
    let m = member(ctx, p)?;
    m.fold_gather(ctx)?;
    m.doubling(ctx)?;
    m.unfold_gathered(ctx, true)
}

/// Append an RHD all-reduce on `p.stream`: after it every member's `p.output` holds the
/// reduction of every member's `p.input`, over all of `p.chunks`.
pub fn rhd_all_reduce(ctx: &mut KernelCtx<'_>, p: &RingParams<'_>) -> Result<(), Error> {
    let m = member(ctx, p)?;
    let targets = RingTargets {
        partials: p.output,
        partial_chunks: p.chunks,
        result: None,
    };
    m.fold_reduce(ctx, &targets)?;
    m.halving(ctx, &targets)?;
    m.doubling(ctx)?;
    m.unfold_gathered(ctx, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn participants_cover_every_position_once() {
        for n in 1..40 {
            let s = RhdShape::new(n);
            assert!(s.m.is_power_of_two() && s.m <= n && n < 2 * s.m);
            let mut covered = Vec::new();
            for v in 0..s.m {
                assert_eq!(s.participant(s.position(v)), Some(v));
                covered.extend(s.positions(v..v + 1));
            }
            assert_eq!(covered, (0..n).collect::<Vec<_>>());
            assert_eq!(s.positions(0..s.m), 0..n);
        }
    }

    #[test]
    fn peers_are_symmetric() {
        for n in 1..20 {
            let order: Vec<Rank> = (0..n).collect();
            for a in 0..n {
                for b in rhd_peers(&order, a) {
                    assert!(rhd_peers(&order, b).contains(&a), "{n}: {a} {b}");
                }
            }
        }
    }
}
