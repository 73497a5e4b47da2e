//! Relayed mesh templates: the pull-based mesh reduce-scatter and all-gather of
//! [`mesh`](super::mesh) on a mesh with broken links, the traffic of every missing link
//! spread over all the common neighbours of its two ends (see [`relay`](super::relay)).
//!
//! Rank `r` owns chunk `r`. When `r` and `p` are not linked, the route from `r` to `p`
//! names relays `k_1 .. k_m` (their common neighbours) and cuts a chunk into one piece
//! per relay ([`relay_pieces`]):
//!
//! - **reduce-scatter**: relay `k_j` pre-reduces piece `j` of chunk `r` from its own input
//!   and `p`'s (read over the healthy `p - k_j` link) into its scratch; `r` takes that
//!   piece's contribution of `k_j` *and* `p` from `k_j`'s scratch instead of `k_j`'s input.
//!   The `k_j -> r` link carries no extra byte, the `p -> k_j` link `1/m` of a chunk more.
//!   When `r` misses several peers, chunk `r` is cut at every piece boundary of every
//!   route into *segments*; a segment's relays each pre-reduce the sources they cover
//!   ([`RelayLayout`]). `r` reduces a segment in two steps: the directly reachable inputs
//!   first (no wait), then the relays' partials once they signal.
//! - **all-gather**: `r` pulls chunk `q` from every neighbour `q`; piece `j` of chunk `p`
//!   it pulls from `k_j`'s output once `k_j` has it (`k_j` needs chunk `p` anyway, and
//!   copies the pieces it forwards first).
//!
//! Each link then carries at most `1 + 1/m` chunks per phase: for `mesh8` with `0-1`
//! broken, ranks 0 and 1 move `2(n-1)/n` of the data over six links, the lower bound.
//!
//! # Streams and signals
//!
//! Slave stream `i` (1-based) serves the `i`-th healthy neighbour counted from the rank
//! upwards (mod n), as in the mesh. On each stream the relay work comes first, so that
//! forwarded pieces do not wait behind bulk transfers; a segment with two or more relays
//! (only when a rank misses several peers) is reduced on the main stream, its partials
//! added after the join.
//!
//! | signal | meaning |
//! |---|---|
//! | channel 0 Ack, round on the main stream | reduce-scatter: "my input is in place" (and, from the second loop iteration, "I am done with your output and scratch") |
//! | channel 1 DataSignal, relay to target | "my partials of your chunk are in my scratch" |
//! | channel 0 DataSignal, per stream | all-gather: "my chunk is in my output" (after a reduce-scatter also "I am done reading your input") |
//! | channel 1 Ack, relay to target | "the pieces I forward to you are in my output" |
//!
//! Each notify is posted once per loop iteration, and the next post follows the waiter's
//! consumption through the next iteration's opening round, so no wakeup is lost. A relay
//! that forwards pieces of several chunks to one target posts after its join and the
//! target pulls them after its own join (posts before waits, so no cycle): rare, and
//! correct before fast. Whether a rank relays for another is decided by the topology and
//! the iteration's count, the same on every rank, so both ends of a signal agree; a relay
//! whose piece is empty (a chunk of fewer elements than relays) still signals.
//!
//! # Relay count
//!
//! Every relay costs the ranks on its route a few tasks, about a microsecond of dispatch
//! each, so small chunks use fewer relays: about `sqrt(chunk / RELAY_COST_BYTES)`
//! ([`relays_for`]); on `mesh8` all six common neighbours relay from 576 KiB chunks.

mod plan;

pub use plan::{
    relay_scratch_bytes, relays_for, RelayLayout, RelayPlan, Segment, SegmentRelay,
    RELAY_COST_BYTES,
};

use crate::templates::relay_pieces;
use oxccl_framework::platform::{Buf, DataType, Rank, ReduceOp, Slice};
use oxccl_framework::{BufRange, Error, KernelCtx, Mode, Peers, PlanCtx, ResourceRequest};

oxccl_framework::register_template! {
    name: "relay_mesh_reduce_scatter",
    description: "mesh reduce-scatter on a broken mesh: relays pre-reduce the missing peers' pieces into scratch",
}

oxccl_framework::register_template! {
    name: "relay_mesh_all_gather",
    description: "mesh all-gather on a broken mesh: the missing peers' chunks pulled piecewise from every relay",
}

/// The channel of the mesh handshakes.
const MESH_CHANNEL: usize = 0;
/// The channel of the relay signals.
const RELAY_CHANNEL: usize = 1;

/// Which signal a round on the main stream uses.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum NeighbourRound {
    Ack,
    DataSignal,
}

/// The most elements one loop iteration of an executor of `ctx`'s op may take: the
/// whole count zero-copy, at most the CCL buffer (over the rank count when `blocks`)
/// staged. Chunk sizes grow with the count, so scratch sized for it fits every iteration.
pub fn iteration_count_bound(ctx: &PlanCtx<'_>, blocks: bool) -> usize {
    let es = ctx.op.dtype.size();
    match ctx.mode {
        Mode::Direct => ctx.op.count,
        Mode::Staged => {
            let per = if blocks { ctx.ranks } else { 1 };
            ctx.op.count.min(ctx.ccl_bytes / per / es)
        }
    }
}

/// The request of a relayed mesh executor on `rank`: links to its healthy neighbours
/// only, one slave stream each, and `scratch_bytes` of scratch.
pub fn relay_mesh_resources(plan: &RelayPlan, rank: Rank, scratch_bytes: usize) -> ResourceRequest {
    let mut peers = plan.neighbours(rank);
    let slave_streams = peers.len();
    peers.sort_unstable();
    ResourceRequest {
        slave_streams,
        scratch_bytes,
        ..ResourceRequest::with_peers(Peers::List(peers))
    }
}

/// Parameters of the relayed mesh templates.
#[derive(Clone, Debug)]
pub struct RelayMeshParams<'a> {
    pub plan: &'a RelayPlan,
    /// `(byte offset, byte length)` of each rank's chunk, relative to `input` (and to
    /// `output` for [`relay_mesh_all_gather`]).
    pub chunks: &'a [(usize, usize)],
    /// Where [`relay_mesh_reduce_scatter`] puts each rank's reduced chunk, relative to
    /// `output`.
    pub out_chunks: &'a [(usize, usize)],
    pub input: BufRange,
    pub output: BufRange,
    /// `input` and `output` are the same memory (an in-place call).
    pub aliased: bool,
    pub dtype: DataType,
    pub op: ReduceOp,
}

impl RelayMeshParams<'_> {
    fn layout(&self) -> RelayLayout {
        let lens: Vec<usize> = self.chunks.iter().map(|c| c.1).collect();
        RelayLayout::new(self.plan, &lens, self.dtype.size())
    }
}

/// A round with every healthy neighbour on the main stream: post to all, wait for all.
pub fn neighbour_round(
    ctx: &mut KernelCtx<'_>,
    plan: &RelayPlan,
    round: NeighbourRound,
) -> Result<(), Error> {
    let links = plan
        .neighbours(ctx.rank)
        .into_iter()
        .map(|q| ctx.link(q, MESH_CHANNEL))
        .collect::<Result<Vec<_>, _>>()?;
    for l in &links {
        match round {
            NeighbourRound::Ack => l.tx_ack(ctx.main()),
            NeighbourRound::DataSignal => l.tx_data_signal(ctx.main()),
        }
    }
    for l in &links {
        match round {
            NeighbourRound::Ack => l.rx_ack(ctx.main()),
            NeighbourRound::DataSignal => l.rx_data_signal(ctx.main()),
        }
    }
    Ok(())
}

/// After it, `output[out_chunks[me]]` holds the reduction of every rank's
/// `input[chunks[me]]`. Opens with an Ack round ("my input is in place"). Needs one slave
/// stream per healthy neighbour and the scratch of [`RelayLayout`].
pub fn relay_mesh_reduce_scatter(
    ctx: &mut KernelCtx<'_>,
    p: &RelayMeshParams<'_>,
) -> Result<(), Error> {
    let me = ctx.rank;
    let layout = p.layout();
    let my_relays = p.plan.relays_of(me);
    // Only the streams of neighbours this rank relays for, or that relay for it, have
    // work; the others are not forked at all.
    let busy: Vec<(usize, Rank)> = (1..)
        .zip(p.plan.neighbours(me))
        .filter(|&(_, q)| my_relays.contains(&q) || p.plan.relays_of(q).contains(&me))
        .collect();
    neighbour_round(ctx, p.plan, NeighbourRound::Ack)?;
    busy.iter().for_each(|&(s, _)| ctx.fork(s..=s));
    for &(s, q) in &busy {
        pre_reduce_for(ctx, s, q, &layout, p)?;
        let own = |seg: &&Segment| seg.relays.len() == 1 && seg.relays[0].relay == q;
        for seg in layout.segments(me).iter().filter(own) {
            reduce_direct(ctx, s, seg, p);
        }
        if my_relays.contains(&q) {
            ctx.link(q, RELAY_CHANNEL)?.rx_data_signal(ctx.stream(s));
        }
        for seg in layout.segments(me).iter().filter(own) {
            add_partials(ctx, s, seg, p);
        }
    }
    let shared = |seg: &&Segment| seg.relays.len() != 1;
    for seg in layout.segments(me).iter().filter(shared) {
        reduce_direct(ctx, 0, seg, p);
    }
    busy.iter().for_each(|&(s, _)| ctx.join(s..=s));
    for seg in layout.segments(me).iter().filter(shared) {
        add_partials(ctx, 0, seg, p);
    }
    Ok(())
}

/// Relay side, on stream `s` of `target`: pre-reduce this rank's segments of chunk
/// `target` into scratch, then signal `target` (when this rank relays for it at all).
fn pre_reduce_for(
    ctx: &mut KernelCtx<'_>,
    s: usize,
    target: Rank,
    layout: &RelayLayout,
    p: &RelayMeshParams<'_>,
) -> Result<(), Error> {
    let me = ctx.rank;
    let (chunk_off, _) = p.chunks[target];
    for seg in layout.segments(target) {
        let Some(part) = seg.relays.iter().find(|r| r.relay == me) else {
            continue;
        };
        let at = chunk_off + seg.offset;
        let srcs = std::iter::once(me)
            .chain(part.sources.iter().copied())
            .map(|x| p.input.at(x, at, seg.len))
            .collect();
        let dst = Slice::new(me, Buf::Scratch, part.slot, seg.len);
        ctx.stream(s).reduce(srcs, dst, p.dtype, p.op);
    }
    if p.plan.relays_of(target).contains(&me) {
        ctx.link(target, RELAY_CHANNEL)?
            .tx_data_signal(ctx.stream(s));
    }
    Ok(())
}

/// Target side, step 1: reduce a segment of the own chunk from every input this rank
/// reaches directly, except the relays' (their partials carry them).
fn reduce_direct(ctx: &mut KernelCtx<'_>, s: usize, seg: &Segment, p: &RelayMeshParams<'_>) {
    let me = ctx.rank;
    let (chunk_off, _) = p.chunks[me];
    let (out_off, _) = p.out_chunks[me];
    let direct: Vec<Rank> = (0..ctx.ranks)
        .filter(|&x| p.plan.is_direct(me, x) && !seg.relays.iter().any(|r| r.relay == x))
        .collect();
    let dst = p.output.at(me, out_off + seg.offset, seg.len);
    if direct == [me] && p.aliased {
        return;
    }
    let srcs = direct
        .iter()
        .map(|&x| p.input.at(x, chunk_off + seg.offset, seg.len))
        .collect();
    ctx.stream(s).reduce(srcs, dst, p.dtype, p.op);
}

/// Target side, step 2: add the relays' partials of a segment.
fn add_partials(ctx: &mut KernelCtx<'_>, s: usize, seg: &Segment, p: &RelayMeshParams<'_>) {
    let me = ctx.rank;
    let (out_off, _) = p.out_chunks[me];
    let dst = p.output.at(me, out_off + seg.offset, seg.len);
    let srcs = std::iter::once(dst)
        .chain(
            seg.relays
                .iter()
                .map(|r| Slice::new(r.relay, Buf::Scratch, r.slot, seg.len)),
        )
        .collect();
    ctx.stream(s).reduce(srcs, dst, p.dtype, p.op);
}

/// After it, every `output[chunks[r]]` holds rank `r`'s `output[chunks[r]]`. Each
/// neighbour's DataSignal says "my chunk is ready", so the own chunk must be in place
/// before it. Nothing here says "I am done reading your output": a caller whose peers
/// overwrite their output next (a staged loop) adds a round for it.
pub fn relay_mesh_all_gather(
    ctx: &mut KernelCtx<'_>,
    p: &RelayMeshParams<'_>,
) -> Result<(), Error> {
    let me = ctx.rank;
    let peers = p.plan.neighbours(me);
    ctx.fork(1..=peers.len());
    for (i, &q) in peers.iter().enumerate() {
        let s = i + 1;
        let link = ctx.link(q, MESH_CHANNEL)?;
        link.tx_data_signal(ctx.stream(s));
        link.rx_data_signal(ctx.stream(s));
        forward_chunk(ctx, s, q, p)?;
        if p.plan.forwards_early(q, me) {
            ctx.link(q, RELAY_CHANNEL)?.rx_ack(ctx.stream(s));
            pull_forwarded(ctx, s, q, p);
        }
    }
    ctx.join(1..=peers.len());
    for r in p.plan.targets_of(me) {
        if !p.plan.forwards_early(me, r) {
            ctx.link(r, RELAY_CHANNEL)?.tx_ack(ctx.main());
        }
    }
    for k in p.plan.relays_of(me) {
        if !p.plan.forwards_early(k, me) {
            ctx.link(k, RELAY_CHANNEL)?.rx_ack(ctx.main());
            pull_forwarded(ctx, 0, k, p);
        }
    }
    Ok(())
}

/// Relay and receiver side, on stream `s` of neighbour `q`: copy chunk `q`, the pieces
/// this rank forwards first, and tell their targets as soon as those are in place.
fn forward_chunk(
    ctx: &mut KernelCtx<'_>,
    s: usize,
    q: Rank,
    p: &RelayMeshParams<'_>,
) -> Result<(), Error> {
    let me = ctx.rank;
    let (off, len) = p.chunks[q];
    let mut firsts: Vec<(usize, usize)> = Vec::new();
    let mut early = Vec::new();
    for (target, relays) in (0..ctx.ranks).filter_map(|r| route_via(p.plan, r, q, me)) {
        let pieces = relay_pieces(&relays, (off, len), p.dtype.size());
        firsts.extend(pieces.iter().filter(|x| x.0 == me).map(|&(_, o, l)| (o, l)));
        if p.plan.forwards_early(me, target) {
            early.push(target);
        }
    }
    let firsts = merge(firsts);
    for &(o, l) in &firsts {
        ctx.stream(s)
            .copy(p.output.at(q, o, l), p.output.at(me, o, l));
    }
    for target in early {
        ctx.link(target, RELAY_CHANNEL)?.tx_ack(ctx.stream(s));
    }
    for (o, l) in complement((off, len), &firsts) {
        ctx.stream(s)
            .copy(p.output.at(q, o, l), p.output.at(me, o, l));
    }
    Ok(())
}

/// `(target, relays)` when `target` has no link to `source` and `relay` is one of its
/// relays to it.
fn route_via(
    plan: &RelayPlan,
    target: Rank,
    source: Rank,
    relay: Rank,
) -> Option<(Rank, Vec<Rank>)> {
    plan.unlinked(target)
        .iter()
        .find(|(x, relays)| *x == source && relays.contains(&relay))
        .map(|(_, relays)| (target, relays.clone()))
}

/// Receiver side: copy every piece `relay` forwards to this rank from its output.
fn pull_forwarded(ctx: &mut KernelCtx<'_>, s: usize, relay: Rank, p: &RelayMeshParams<'_>) {
    let me = ctx.rank;
    for (source, relays) in p.plan.unlinked(me) {
        if !relays.contains(&relay) {
            continue;
        }
        let pieces = relay_pieces(relays, p.chunks[*source], p.dtype.size());
        for (_, o, l) in pieces.into_iter().filter(|x| x.0 == relay) {
            ctx.stream(s)
                .copy(p.output.at(relay, o, l), p.output.at(me, o, l));
        }
    }
}

/// Sorted, disjoint, non-empty ranges covering the same bytes as `ranges`.
fn merge(mut ranges: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
    ranges.retain(|r| r.1 > 0);
    ranges.sort_unstable();
    let mut out: Vec<(usize, usize)> = Vec::new();
    for (o, l) in ranges {
        match out.last_mut() {
            Some(last) if o <= last.0 + last.1 => last.1 = last.1.max(o + l - last.0),
            _ => out.push((o, l)),
        }
    }
    out
}

/// The parts of `(off, len)` that the sorted, disjoint `taken` ranges leave out.
fn complement((off, len): (usize, usize), taken: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = off;
    for &(o, l) in taken {
        if o > at {
            out.push((at, o - at));
        }
        at = at.max(o + l);
    }
    if off + len > at {
        out.push((at, off + len - at));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_and_complement() {
        assert_eq!(
            merge(vec![(8, 4), (0, 4), (4, 2), (20, 0)]),
            vec![(0, 6), (8, 4)]
        );
        assert_eq!(
            complement((0, 16), &[(0, 6), (8, 4)]),
            vec![(6, 2), (12, 4)]
        );
        assert_eq!(complement((4, 4), &[]), vec![(4, 4)]);
    }
}
