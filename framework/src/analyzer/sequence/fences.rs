//! The epoch fence as barriers: per operation `k` and rank `A`, a barrier `end(k, A)`
//! after every stream of `A`'s operation `k`, and for `k ≥ 1` a barrier `start(k, A)`
//! before every stream of it, after `end(k-1, A)`, after `end(k-1, P)` for every peer `P`
//! granted to `A` in operation `k` (entry fence) and, when operation `k-1` ran in
//! [`Mode::Direct`], for every peer granted to `A` in operation `k-1` (exit fence).

use super::super::fence::{Barrier, Closure, Fences};
use super::super::index::{Index, NONE};
use super::super::recording::Recording;
use super::FenceModel;
use crate::executor::{Mode, Peers};
use oxccl_platform::Rank;

/// Per operation and rank, the peers it granted ([`granted`]): the fences and the grant
/// rule both read them.
pub(super) type Grants = Vec<Vec<Vec<Rank>>>;

/// Every operation's grants in `idx`.
pub(super) fn grants(idx: &Index<'_>) -> Grants {
    let n = idx.rec.rank_count();
    idx.recs
        .iter()
        .map(|rec| (0..n).map(|r| granted(rec, r)).collect())
        .collect()
}

/// The peers granted to `owner` in `rec`, in ascending order, without `owner`.
fn granted(rec: &Recording, owner: Rank) -> Vec<Rank> {
    let n = rec.rank_count();
    let mut peers: Vec<Rank> = match &rec.ranks[owner].request.peers {
        Peers::All => (0..n).filter(|&p| p != owner).collect(),
        Peers::List(list) => list
            .iter()
            .copied()
            .filter(|&p| p != owner && p < n)
            .collect(),
    };
    peers.sort_unstable();
    peers.dedup();
    peers
}

/// The fence barriers of the sequence in `idx`, and their closure.
pub(super) fn build(idx: &Index<'_>, grants: &Grants, model: FenceModel) -> (Fences, Closure) {
    let (ops, n) = (idx.recs.len(), idx.rec.rank_count());
    let mut fences = Fences::none(idx.streams.len());
    let mut end = vec![vec![NONE; n]; ops];
    let mut direct: Vec<Vec<Vec<Rank>>> = vec![vec![Vec::new(); n]; ops];
    let mut streams_of = vec![vec![Vec::new(); n]; ops];
    for (g, s) in idx.streams.iter().enumerate() {
        streams_of[s.op][s.rank].push(g as u32);
    }
    for k in 0..ops {
        for a in 0..n {
            let mut ends = Vec::new();
            if k > 0 {
                let start = fences.barriers.len() as u32;
                direct[k][a] = start_after(idx, grants, model, k, a);
                fences.barriers.push(Barrier {
                    streams: Vec::new(),
                    barriers: direct[k][a].iter().map(|&p| end[k - 1][p]).collect(),
                });
                streams_of[k][a]
                    .iter()
                    .for_each(|&g| fences.start[g as usize] = start);
                ends.push(start);
            }
            end[k][a] = fences.barriers.len() as u32;
            fences.barriers.push(Barrier {
                streams: std::mem::take(&mut streams_of[k][a]),
                barriers: ends,
            });
        }
    }
    let stream_op_rank = idx
        .streams
        .iter()
        .map(|s| (s.op as u32, s.rank as u32))
        .collect();
    (fences, Closure::new(n, stream_op_rank, &direct))
}

/// The ranks whose operation `k-1` rank `a`'s operation `k` starts after.
fn start_after(
    idx: &Index<'_>,
    grants: &Grants,
    model: FenceModel,
    k: usize,
    a: Rank,
) -> Vec<Rank> {
    let mut peers = vec![a];
    if model.entry {
        peers.extend(&grants[k][a]);
    }
    let exit = model.exit && idx.recs[k - 1].mode == Mode::Direct;
    if exit || (model.entry && model.entry_previous) {
        peers.extend(&grants[k - 1][a]);
    }
    peers.sort_unstable();
    peers.dedup();
    peers
}
