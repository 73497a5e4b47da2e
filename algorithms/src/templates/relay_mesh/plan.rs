//! The routes of the relayed mesh, as data: which ranks every rank misses, who relays
//! for whom ([`RelayPlan`]), how each chunk is cut into segments with the same relays and
//! where every relay keeps its partials ([`RelayLayout`]), how many relays a size is
//! worth ([`relays_for`]) and the scratch that takes ([`relay_scratch_bytes`]).
//!
//! Every rank builds the same plan from the topology and the iteration's count, so a relay
//! and its target agree on pieces, slots and signals without any exchange.

use crate::templates::{relay_pieces, require_routes, route, Route};
use oxccl_framework::platform::Rank;
use oxccl_framework::{Error, OpKind, Topology};

/// Every rank's missing peers and their relays, derived from the topology alone.
#[derive(Clone, Debug)]
pub struct RelayPlan {
    /// For every rank `r`: `(p, relays of r -> p)` for every `p` it has no link to.
    unlinked: Vec<Vec<(Rank, Vec<Rank>)>>,
}

impl RelayPlan {
    /// The plan of `executor` for `op` with at most `max_relays` relays per missing link
    /// (`None`: every common neighbour); [`Error::Unsupported`] when some pair of ranks
    /// has no route.
    pub fn new(
        topology: &Topology,
        executor: &str,
        op: OpKind,
        max_relays: Option<usize>,
    ) -> Result<Self, Error> {
        let n = topology.ranks();
        if topology.is_full_mesh() {
            return Ok(RelayPlan {
                unlinked: vec![Vec::new(); n],
            });
        }
        require_routes(topology, executor, op, max_relays)?;
        let unlinked = (0..n)
            .map(|r| {
                (0..n)
                    .filter_map(|p| match route(topology, r, p, max_relays) {
                        Some(Route::Relayed(relays)) => Some((p, relays)),
                        _ => None,
                    })
                    .collect()
            })
            .collect();
        Ok(RelayPlan { unlinked })
    }

    /// The plan for chunks of `chunk_lens` bytes: as [`RelayPlan::new`], with fewer relays
    /// where pieces are too small to pay for them (see [`relays_for`]).
    pub fn for_chunks(
        topology: &Topology,
        executor: &str,
        op: OpKind,
        max_relays: Option<usize>,
        chunk_lens: &[usize],
    ) -> Result<Self, Error> {
        let smallest = chunk_lens.iter().copied().min().unwrap_or(0);
        Self::new(topology, executor, op, relays_for(max_relays, smallest))
    }

    /// The most relays any missing link uses.
    pub fn most_relays(&self) -> usize {
        self.unlinked
            .iter()
            .flat_map(|routes| routes.iter().map(|(_, relays)| relays.len()))
            .max()
            .unwrap_or(0)
    }

    /// The ranks `r` has no link to, with the relays of each.
    pub fn unlinked(&self, r: Rank) -> &[(Rank, Vec<Rank>)] {
        &self.unlinked[r]
    }

    /// Whether `a` reaches `b` without a relay (itself included).
    pub fn is_direct(&self, a: Rank, b: Rank) -> bool {
        !self.unlinked[a].iter().any(|&(p, _)| p == b)
    }

    /// `rank`'s healthy neighbours in stream order: from `rank + 1` upwards, mod n.
    pub fn neighbours(&self, rank: Rank) -> Vec<Rank> {
        let n = self.unlinked.len();
        (1..n)
            .map(|i| (rank + i) % n)
            .filter(|&q| self.is_direct(rank, q))
            .collect()
    }

    /// Every rank that relays something for `target`, ascending.
    pub fn relays_of(&self, target: Rank) -> Vec<Rank> {
        let mut all: Vec<Rank> = self.unlinked[target]
            .iter()
            .flat_map(|(_, relays)| relays.iter().copied())
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// The missing peers of `target` whose traffic goes (partly) through `relay`.
    pub fn sources_via(&self, relay: Rank, target: Rank) -> Vec<Rank> {
        self.unlinked[target]
            .iter()
            .filter(|(_, relays)| relays.contains(&relay))
            .map(|&(p, _)| p)
            .collect()
    }

    /// The ranks `relay` relays for, ascending.
    pub fn targets_of(&self, relay: Rank) -> Vec<Rank> {
        (0..self.unlinked.len())
            .filter(|&r| !self.sources_via(relay, r).is_empty())
            .collect()
    }

    /// Whether `relay` forwards pieces of exactly one chunk to `target`: it signals
    /// from that chunk's stream; otherwise after its join.
    pub fn forwards_early(&self, relay: Rank, target: Rank) -> bool {
        self.sources_via(relay, target).len() == 1
    }
}

/// What one relay costs, in bytes of link time. Each relay adds a few tasks on the ranks
/// of its route (a partial, a signal, a forward: dispatch time on the critical path,
/// about `a` = 0.3 us together at 56 GB/s), and each relay takes `1/m` of the relayed
/// bytes off the others. Finishing time grows like `a·m + chunk / (m·B)`, least at
/// `m = sqrt(chunk / (a·B))`; `a·B` is this constant, fitted to the cost model on `mesh8`
/// with `0-1` broken (best: 2 relays for 64 to 128 KiB chunks, 4 for 256 KiB, all six
/// from 576 KiB).
pub const RELAY_COST_BYTES: usize = 16 << 10;

/// How many relays a missing link gets for chunks of at least `chunk_len` bytes: at most
/// `max_relays`, and about `sqrt(chunk_len / RELAY_COST_BYTES)` (at least one; see
/// [`RELAY_COST_BYTES`]). Every rank derives the same number from the iteration's count.
pub fn relays_for(max_relays: Option<usize>, chunk_len: usize) -> Option<usize> {
    let by_size = (chunk_len / RELAY_COST_BYTES).isqrt().max(1);
    Some(max_relays.map_or(by_size, |m| m.min(by_size)))
}

/// Scratch bytes a relayed mesh executor requests on every rank, for chunks of at most
/// `chunk_lens` bytes: what the busiest relay needs (scratch is symmetric, every rank gets
/// the same size), with any relay count [`relays_for`] may choose for smaller chunks
/// (pieces grow when relays drop out, so the most over every count is taken).
pub fn relay_scratch_bytes(
    topology: &Topology,
    executor: &str,
    op: OpKind,
    max_relays: Option<usize>,
    chunk_lens: &[usize],
    es: usize,
) -> Result<usize, Error> {
    let full = RelayPlan::new(topology, executor, op, max_relays)?;
    let mut most = 0;
    for m in 1..=full.most_relays() {
        let plan = RelayPlan::new(topology, executor, op, Some(m))?;
        let layout = RelayLayout::new(&plan, chunk_lens, es);
        most = (0..topology.ranks()).fold(most, |most, k| most.max(layout.scratch_bytes(k)));
    }
    Ok(most)
}

/// One relay's part of a segment: the missing peers whose input it pre-reduces with its
/// own, and where the partial sits in its scratch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentRelay {
    pub relay: Rank,
    pub sources: Vec<Rank>,
    /// Byte offset in the relay's scratch.
    pub slot: usize,
}

/// A byte range of a chunk (offset relative to the chunk) with the same relays
/// throughout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    pub offset: usize,
    pub len: usize,
    pub relays: Vec<SegmentRelay>,
}

/// The segments of every chunk and the scratch every relay needs for them: partials
/// packed target by target, segment by segment, in each relay's scratch.
#[derive(Clone, Debug)]
pub struct RelayLayout {
    segments: Vec<Vec<Segment>>,
    scratch: Vec<usize>,
}

impl RelayLayout {
    /// The layout for chunks of `chunk_lens[r]` bytes (whole elements of `es` bytes).
    pub fn new(plan: &RelayPlan, chunk_lens: &[usize], es: usize) -> Self {
        let mut scratch = vec![0; chunk_lens.len()];
        let segments = chunk_lens
            .iter()
            .enumerate()
            .map(|(target, &len)| {
                let mut segs = segments_of(plan.unlinked(target), len, es);
                for rel in segs.iter_mut().flat_map(|s| {
                    let len = s.len;
                    s.relays.iter_mut().map(move |r| (r, len))
                }) {
                    let (relay, len) = rel;
                    relay.slot = scratch[relay.relay];
                    scratch[relay.relay] += len;
                }
                segs
            })
            .collect();
        RelayLayout { segments, scratch }
    }

    /// The segments of chunk `target`.
    pub fn segments(&self, target: Rank) -> &[Segment] {
        &self.segments[target]
    }

    /// Scratch bytes `relay` needs.
    pub fn scratch_bytes(&self, relay: Rank) -> usize {
        self.scratch[relay]
    }
}

/// The pieces of one missing peer's route: `(peer, [(relay, byte offset, byte length)])`.
type RoutePieces = (Rank, Vec<(Rank, usize, usize)>);

/// Cut a chunk of `len` bytes at every piece boundary of every route in `routes`.
fn segments_of(routes: &[(Rank, Vec<Rank>)], len: usize, es: usize) -> Vec<Segment> {
    let pieces: Vec<RoutePieces> = routes
        .iter()
        .map(|(p, relays)| (*p, relay_pieces(relays, (0, len), es)))
        .collect();
    let mut cuts: Vec<usize> = pieces
        .iter()
        .flat_map(|(_, ps)| ps.iter().flat_map(|&(_, o, l)| [o, o + l]))
        .chain([0, len])
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    cuts.windows(2)
        .map(|w| Segment {
            offset: w[0],
            len: w[1] - w[0],
            relays: relays_at(&pieces, w[0]),
        })
        .collect()
}

/// The relays of byte `at` of a chunk, each with the missing peers it covers there.
fn relays_at(pieces: &[RoutePieces], at: usize) -> Vec<SegmentRelay> {
    let mut relays: Vec<SegmentRelay> = Vec::new();
    for (p, ps) in pieces {
        let Some(&(k, _, _)) = ps.iter().find(|&&(_, o, l)| o <= at && at < o + l) else {
            continue;
        };
        match relays.iter_mut().find(|r| r.relay == k) {
            Some(r) => r.sources.push(*p),
            None => relays.push(SegmentRelay {
                relay: k,
                sources: vec![*p],
                slot: 0,
            }),
        }
    }
    relays.sort_by_key(|r| r.relay);
    relays
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mesh8_broken(pairs: &[(Rank, Rank)]) -> Topology {
        pairs.iter().fold(Topology::single_server(8), |t, &(a, b)| {
            t.with_broken(a, b).unwrap()
        })
    }

    fn plan(t: &Topology, max: Option<usize>) -> RelayPlan {
        RelayPlan::new(t, "test", OpKind::AllReduce, max).unwrap()
    }

    #[test]
    fn one_missing_link_spreads_over_every_common_neighbour() {
        let p = plan(&mesh8_broken(&[(0, 1)]), None);
        assert_eq!(p.neighbours(0), vec![2, 3, 4, 5, 6, 7]);
        assert_eq!(p.neighbours(7), vec![0, 1, 2, 3, 4, 5, 6]);
        assert_eq!(p.relays_of(0), vec![2, 3, 4, 5, 6, 7]);
        assert_eq!(p.targets_of(4), vec![0, 1]);
        let layout = RelayLayout::new(&p, &[48; 8], 4);
        let segs = layout.segments(0);
        assert_eq!(segs.len(), 6);
        assert!(segs.iter().all(|s| s.len == 8 && s.relays.len() == 1));
        assert_eq!(segs[2].relays[0].relay, 4);
        assert_eq!(segs[2].relays[0].sources, vec![1]);
        // Relay 4 holds one piece of chunk 0 and one of chunk 1, packed.
        assert_eq!(layout.scratch_bytes(4), 16);
        assert_eq!(layout.segments(1)[2].relays[0].slot, 8);
        assert_eq!(layout.scratch_bytes(0), 0);
        assert_eq!(layout.segments(3).len(), 1);
        assert!(layout.segments(3)[0].relays.is_empty());
    }

    #[test]
    fn two_missing_peers_cut_the_chunk_at_every_piece_boundary() {
        let p = plan(&mesh8_broken(&[(0, 1), (0, 2)]), None);
        // 0 -> 1 through 3..=7 and 0 -> 2 through 3..=7: the same relays, one segment
        // each, every relay covering both missing peers.
        let layout = RelayLayout::new(&p, &[40; 8], 4);
        let segs = layout.segments(0);
        assert_eq!(segs.len(), 5);
        assert_eq!(segs[0].relays[0].sources, vec![1, 2]);
        assert_eq!(p.sources_via(3, 0), vec![1, 2]);
        assert!(!p.forwards_early(3, 0));
        let single = plan(&mesh8_broken(&[(0, 1), (0, 2)]), Some(1));
        let segs = RelayLayout::new(&single, &[40; 8], 4).segments(0).to_vec();
        assert_eq!(segs.len(), 1);
        assert_eq!(segs[0].relays[0].relay, 3);
    }

    #[test]
    fn tiny_chunks_leave_relays_without_segments_but_keep_the_signals() {
        let p = plan(&mesh8_broken(&[(0, 1)]), None);
        let layout = RelayLayout::new(&p, &[4; 8], 4);
        assert_eq!(layout.segments(0).len(), 1);
        assert_eq!(layout.scratch_bytes(3), 0);
        assert_eq!(p.relays_of(0).len(), 6);
    }

    #[test]
    fn relay_count_grows_with_the_square_root_of_the_chunk() {
        assert_eq!(relays_for(None, 0), Some(1));
        assert_eq!(relays_for(None, 64 << 10), Some(2));
        assert_eq!(relays_for(None, 256 << 10), Some(4));
        assert_eq!(relays_for(Some(3), 1 << 30), Some(3));
        assert_eq!(relays_for(Some(1), 1 << 30), Some(1));
    }

    #[test]
    fn scratch_covers_every_relay_count() {
        // With one relay a piece is the whole chunk: more than with all six.
        let t = mesh8_broken(&[(0, 1)]);
        let bytes = relay_scratch_bytes(&t, "x", OpKind::AllReduce, None, &[60; 8], 4).unwrap();
        assert_eq!(bytes, 2 * 60);
        let healthy = Topology::single_server(8);
        let none = relay_scratch_bytes(&healthy, "x", OpKind::AllReduce, None, &[60; 8], 4);
        assert_eq!(none.unwrap(), 0);
    }

    #[test]
    fn no_route_is_unsupported() {
        let t = Topology::single_server(2).with_broken(0, 1).unwrap();
        let err = RelayPlan::new(&t, "x", OpKind::AllGather, None).unwrap_err();
        assert!(matches!(err, Error::Unsupported { .. }), "{err}");
    }
}
