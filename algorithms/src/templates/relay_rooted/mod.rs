//! Relayed rooted transfers: the shared arithmetic of the relaying executors of
//! Broadcast, Reduce, Scatter, Gather, AllGatherV and ReduceScatterV.
//!
//! Each of those operators is, per root (the Broadcast, Scatter, Reduce or Gather root;
//! every block owner for the V forms), a star around that root. Seen from a root, the
//! other ranks are *linked* (a healthy link to the root) or *far* (no link). A far rank's
//! traffic with the root is cut into one piece per relay, the common healthy neighbours
//! of the two ([`relay_pieces`]), so every relay carries `1/m` of it and no link carries
//! more than its share. Every rank derives the same routes from the topology alone.
//!
//! - Outbound (Broadcast, Scatter, AllGatherV): a relay pulls its piece of the far rank's
//!   data from the root, then the far rank pulls it from the relay (from the relay's output
//!   where the relay needs the data itself, from its scratch otherwise). With every rank a
//!   root this is the relayed mesh all-gather ([`relayed_all_gather`]).
//! - Inbound (Reduce, ReduceScatterV): a relay pre-reduces its piece of every far rank it
//!   serves with its own contribution into its scratch ([`relay_pre_reduce`]); the root then
//!   reduces, segment by segment, its own input, the linked ranks' inputs and, where a
//!   relay pre-reduced, that relay's scratch instead of its input ([`root_reduce`]). Every
//!   rank's contribution enters each output element exactly once. With every rank a root
//!   this is the relayed mesh reduce-scatter ([`relayed_reduce_scatter`]).
//!
//! Scratch addressing: a relay keeps the piece it holds for a root at the piece's offset
//! within the root's range, so pieces of one root never overlap in the scratch and a relay
//! serving several far ranks of one root reduces them all into one place.
//!
//! Pairs without a common neighbour have no relay: every entry point that computes routes
//! returns the `Unsupported` error of [`require_routes`] for such topologies.

mod all_gather;
mod reduce_scatter;

pub use all_gather::relayed_all_gather;
pub use reduce_scatter::{relayed_reduce_scatter, RelayedReduceScatter};

use crate::templates::{relay_pieces, require_routes, route, Round, Route};
use oxccl_framework::platform::{DataType, Rank, ReduceOp, Slice, StreamProgram};
use oxccl_framework::{Error, KernelCtx, OpKind, Topology};

oxccl_framework::register_template! {
    name: "relay_rooted",
    description: "a star around a root where far ranks reach it in pieces through all common neighbours",
}

/// A rank without a link to the root, and the ranks that relay between the two.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FarRank {
    pub rank: Rank,
    /// Common healthy neighbours of the far rank and the root, ascending, never empty.
    pub relays: Vec<Rank>,
}

/// The ranks without a link to `root`, with their relays; the error of `executor` of `op`
/// (from [`require_routes`]) when a pair of ranks has neither a link nor a relay.
pub fn far_ranks(
    topology: &Topology,
    root: Rank,
    executor: &str,
    op: OpKind,
) -> Result<Vec<FarRank>, Error> {
    require_routes(topology, executor, op, None)?;
    Ok((0..topology.ranks())
        .filter_map(|r| match route(topology, root, r, None) {
            Some(Route::Relayed(relays)) => Some(FarRank { rank: r, relays }),
            _ => None,
        })
        .collect())
}

/// One relayed piece of an all-to-all star (every rank a root): bytes `piece` of
/// `source`'s range reach `dest`, which has no link to `source`, through `relay`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RelayedPiece {
    pub source: Rank,
    pub dest: Rank,
    pub relay: Rank,
    /// `(byte offset, byte length)`, within `source`'s range (offsets are the buffer's).
    pub piece: (usize, usize),
}

/// Every relayed piece when every rank `s` is the root of its range `ranges[s]`; the error
/// of `executor` of `op` when a pair of ranks has neither a link nor a relay.
pub fn relayed_pieces(
    topology: &Topology,
    ranges: &[(usize, usize)],
    es: usize,
    executor: &str,
    op: OpKind,
) -> Result<Vec<RelayedPiece>, Error> {
    let mut all = Vec::new();
    for (source, &range) in ranges.iter().enumerate() {
        for f in far_ranks(topology, source, executor, op)? {
            all.extend(
                pieces_of(&f, range, es)
                    .into_iter()
                    .map(|(relay, piece)| RelayedPiece {
                        source,
                        dest: f.rank,
                        relay,
                        piece,
                    }),
            );
        }
    }
    Ok(all)
}

/// Whether some pair of ranks has no healthy link.
pub fn has_far_pairs(topology: &Topology) -> bool {
    let n = topology.ranks();
    (0..n).any(|r| topology.peers(r).count() + 1 < n)
}

/// The distinct values of `key` over `items`, ascending.
pub fn distinct<T>(items: &[T], key: impl Fn(&T) -> Rank) -> Vec<Rank> {
    let mut ranks: Vec<Rank> = items.iter().map(key).collect();
    ranks.sort_unstable();
    ranks.dedup();
    ranks
}

/// The slave stream (1-based) that serves `peer` on `rank`: the mesh convention of
/// [`mesh_peer`](crate::templates::mesh_peer), inverted.
pub fn peer_stream(rank: Rank, ranks: usize, peer: Rank) -> usize {
    (peer + ranks - rank) % ranks
}

/// One synchronisation round with `peers` on the main stream: post `round`'s signal on
/// link `channel` to each, then wait for each one's. The round of
/// [`all_peers_round`](crate::templates::all_peers_round) restricted to healthy links.
pub fn peers_round(
    ctx: &mut KernelCtx<'_>,
    peers: &[Rank],
    channel: usize,
    round: Round,
) -> Result<(), Error> {
    let links = peers
        .iter()
        .map(|&p| ctx.link(p, channel))
        .collect::<Result<Vec<_>, _>>()?;
    for l in &links {
        match round {
            Round::Ack => l.tx_ack(ctx.main()),
            Round::DataSignal => l.tx_data_signal(ctx.main()),
        }
    }
    for l in &links {
        match round {
            Round::Ack => l.rx_ack(ctx.main()),
            Round::DataSignal => l.rx_data_signal(ctx.main()),
        }
    }
    Ok(())
}

/// The healthy neighbours of `rank`, ascending.
pub fn linked_peers(topology: &Topology, rank: Rank) -> Vec<Rank> {
    topology.peers(rank).collect()
}

/// Whether `rank` is one of `far`.
pub fn is_far(far: &[FarRank], rank: Rank) -> bool {
    far.iter().any(|f| f.rank == rank)
}

/// The far ranks that `relay` serves, each with the relay's piece of `range` (`(byte
/// offset, byte length)`, whole elements of `es` bytes).
pub fn served_pieces(
    far: &[FarRank],
    relay: Rank,
    range: (usize, usize),
    es: usize,
) -> Vec<(Rank, (usize, usize))> {
    far.iter()
        .filter_map(|f| {
            relay_pieces(&f.relays, range, es)
                .into_iter()
                .find(|&(k, _, _)| k == relay)
                .map(|(_, off, len)| (f.rank, (off, len)))
        })
        .collect()
}

/// The relays of `far_rank` with their pieces of `range`, in relay order.
pub fn pieces_of(far: &FarRank, range: (usize, usize), es: usize) -> Vec<(Rank, (usize, usize))> {
    relay_pieces(&far.relays, range, es)
        .into_iter()
        .map(|(k, off, len)| (k, (off, len)))
        .collect()
}

/// The peers `rank` talks to in a relayed star around `root`: the root its healthy
/// neighbours; a far rank its relays; a linked rank the root and the far ranks it serves.
pub fn star_peers(topology: &Topology, root: Rank, far: &[FarRank], rank: Rank) -> Vec<Rank> {
    if rank == root {
        return linked_peers(topology, root);
    }
    if let Some(f) = far.iter().find(|f| f.rank == rank) {
        return f.relays.clone();
    }
    let mut peers: Vec<Rank> = std::iter::once(root)
        .chain(
            far.iter()
                .filter(|f| f.relays.contains(&rank))
                .map(|f| f.rank),
        )
        .collect();
    peers.sort_unstable();
    peers
}

/// `(byte offset, byte length)` ranges.
pub type ByteRanges = Vec<(usize, usize)>;

/// `range` cut into the union of `pieces` (merged, ascending) and what lies outside them:
/// `(covered, rest)`, both as `(byte offset, byte length)` lists without empty entries.
pub fn split_by_pieces(
    range: (usize, usize),
    pieces: &[(usize, usize)],
) -> (ByteRanges, ByteRanges) {
    let mut sorted: Vec<(usize, usize)> = pieces.iter().copied().filter(|p| p.1 > 0).collect();
    sorted.sort_unstable();
    let mut covered: Vec<(usize, usize)> = Vec::new();
    for (off, len) in sorted {
        match covered.last_mut() {
            Some(last) if off <= last.0 + last.1 => last.1 = last.1.max(off + len - last.0),
            _ => covered.push((off, len)),
        }
    }
    let (mut rest, mut at) = (Vec::new(), range.0);
    for &(off, len) in &covered {
        if off > at {
            rest.push((at, off - at));
        }
        at = at.max(off + len);
    }
    if range.0 + range.1 > at {
        rest.push((at, range.0 + range.1 - at));
    }
    (covered, rest)
}

/// A stretch of a root's range in which every far rank is served by one fixed relay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Byte offset, in the coordinates of the range.
    pub offset: usize,
    pub len: usize,
    /// `(far rank, its relay here)` for every far rank.
    pub via: Vec<(Rank, Rank)>,
}

impl Segment {
    /// The far ranks `relay` pre-reduces in this segment.
    pub fn served_by(&self, relay: Rank) -> impl Iterator<Item = Rank> + '_ {
        self.via
            .iter()
            .filter(move |&&(_, k)| k == relay)
            .map(|&(f, _)| f)
    }
}

/// `range` cut at every piece boundary of every far rank, so that in each segment every
/// far rank has exactly one relay. Empty segments are left out.
pub fn segments(far: &[FarRank], range: (usize, usize), es: usize) -> Vec<Segment> {
    let pieces: Vec<Vec<(Rank, (usize, usize))>> =
        far.iter().map(|f| pieces_of(f, range, es)).collect();
    let mut cuts: Vec<usize> = vec![range.0, range.0 + range.1];
    for (_, (off, len)) in pieces.iter().flatten() {
        cuts.extend([*off, off + len]);
    }
    cuts.sort_unstable();
    cuts.dedup();
    cuts.windows(2)
        .map(|w| Segment {
            offset: w[0],
            len: w[1] - w[0],
            via: far
                .iter()
                .zip(&pieces)
                .filter_map(|(f, p)| {
                    p.iter()
                        .find(|(_, (off, len))| *off <= w[0] && w[0] < off + len)
                        .map(|&(k, _)| (f.rank, k))
                })
                .collect(),
        })
        .filter(|s| s.len > 0)
        .collect()
}

/// Where the contributions of an inbound (reducing) star lie, seen from the rank that
/// appends the tasks. Offsets are those of the root's range (a segment's `offset`).
pub struct ReduceSides<'a> {
    /// `rank`'s contribution at `(offset, len)`.
    pub input: &'a dyn Fn(Rank, usize, usize) -> Slice,
    /// A relay's pre-reduced piece at `(offset, len)`, in that relay's scratch.
    pub scratch: &'a dyn Fn(Rank, usize, usize) -> Slice,
    pub dtype: DataType,
    pub op: ReduceOp,
}

/// Relay `me`'s part of an inbound star: for every segment in which it serves far ranks,
/// its scratch becomes the reduction of its own contribution and theirs. Returns whether
/// it wrote anything (whether the root reads its scratch).
pub fn relay_pre_reduce(
    stream: &mut StreamProgram,
    me: Rank,
    segs: &[Segment],
    sides: &ReduceSides<'_>,
) -> bool {
    let mut wrote = false;
    for s in segs {
        let far: Vec<Rank> = s.served_by(me).collect();
        if far.is_empty() {
            continue;
        }
        let srcs = std::iter::once(me)
            .chain(far)
            .map(|r| (sides.input)(r, s.offset, s.len))
            .collect();
        let dst = (sides.scratch)(me, s.offset, s.len);
        stream.reduce(srcs, dst, sides.dtype, sides.op);
        wrote = true;
    }
    wrote
}

/// The root's part of an inbound star: per segment, its output becomes the reduction of
/// its own contribution and every linked rank's, a relay's scratch standing in for its
/// input where it pre-reduced far ranks. `output` places the result at `(offset, len)`.
pub fn root_reduce(
    stream: &mut StreamProgram,
    root: Rank,
    linked: &[Rank],
    segs: &[Segment],
    sides: &ReduceSides<'_>,
    output: &dyn Fn(usize, usize) -> Slice,
) {
    for s in segs {
        let srcs = std::iter::once(root)
            .chain(linked.iter().copied())
            .map(|k| match s.served_by(k).next() {
                Some(_) => (sides.scratch)(k, s.offset, s.len),
                None => (sides.input)(k, s.offset, s.len),
            })
            .collect();
        let dst = output(s.offset, s.len);
        stream.reduce(srcs, dst, sides.dtype, sides.op);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mesh8_broken(pairs: &[(Rank, Rank)]) -> Topology {
        pairs.iter().fold(Topology::single_server(8), |t, &(a, b)| {
            t.with_broken(a, b).unwrap()
        })
    }

    #[test]
    fn far_ranks_are_the_unlinked_ones() {
        let t = mesh8_broken(&[(0, 1), (0, 2)]);
        let far = far_ranks(&t, 0, "x", OpKind::Broadcast).unwrap();
        assert_eq!(far.iter().map(|f| f.rank).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(far[0].relays, vec![3, 4, 5, 6, 7]);
        assert!(far_ranks(&mesh8_broken(&[]), 3, "x", OpKind::Reduce)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn split_covers_the_range_once() {
        let (covered, rest) = split_by_pieces((0, 100), &[(40, 10), (10, 5), (45, 20), (90, 0)]);
        assert_eq!(covered, vec![(10, 5), (40, 25)]);
        assert_eq!(rest, vec![(0, 10), (15, 25), (65, 35)]);
    }

    #[test]
    fn every_far_rank_has_one_relay_per_segment() {
        let t = mesh8_broken(&[(0, 1), (0, 2), (1, 3)]);
        let far = far_ranks(&t, 0, "x", OpKind::Reduce).unwrap();
        let segs = segments(&far, (8, 400), 4);
        assert_eq!(segs.iter().map(|s| s.len).sum::<usize>(), 400);
        for s in &segs {
            assert_eq!(s.via.len(), far.len());
            for &(f, k) in &s.via {
                let f = far.iter().find(|x| x.rank == f).unwrap();
                assert!(f.relays.contains(&k));
            }
        }
        let served: usize = segs
            .iter()
            .filter(|s| s.served_by(3).next().is_some())
            .map(|s| s.len)
            .sum();
        assert!(served > 0 && served < 400);
    }
}
