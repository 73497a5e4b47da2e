//! The epoch fence as barriers: per operation `k` and rank `A`, a barrier `end(k, A)`
//! after every stream of `A`'s operation `k`, and for `k ≥ 1` a barrier `start(k, A)`
//! before every stream of it, after `end(k-1, A)`, after `end(k-1, P)` for every peer `P`
//! granted to `A` in operation `k` (entry fence) and, when operation `k-1` ran in
//! [`Mode::Direct`], for every peer granted to `A` in operation `k-1` (exit fence).

use super::super::fence::{Barrier, Fences};
use super::super::index::{Index, NONE};
use super::super::recording::Recording;
use super::FenceModel;
use crate::executor::{Mode, Peers};
use oxccl_platform::Rank;

/// The peers granted to `owner` in `rec`, in ascending order, without `owner`.
pub(super) fn granted(rec: &Recording, owner: Rank) -> Vec<Rank> {
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

/// The fence barriers of the sequence in `idx`.
pub(super) fn build(idx: &Index<'_>, model: FenceModel) -> Fences {
    let (ops, n) = (idx.recs.len(), idx.rec.rank_count());
    let mut fences = Fences::none(idx.streams.len());
    let mut end = vec![vec![NONE; n]; ops];
    let mut streams_of = vec![vec![Vec::new(); n]; ops];
    for (g, s) in idx.streams.iter().enumerate() {
        streams_of[s.op][s.rank].push(g as u32);
    }
    for k in 0..ops {
        for a in 0..n {
            let mut ends = Vec::new();
            if k > 0 {
                let start = fences.barriers.len() as u32;
                fences.barriers.push(Barrier {
                    streams: Vec::new(),
                    barriers: start_after(idx, model, &end[k - 1], k, a),
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
    fences
}

/// The end barriers of operation `k-1` that rank `a`'s operation `k` starts after.
fn start_after(
    idx: &Index<'_>,
    model: FenceModel,
    prev_end: &[u32],
    k: usize,
    a: Rank,
) -> Vec<u32> {
    let mut peers = vec![a];
    if model.entry {
        peers.extend(granted(idx.recs[k], a));
    }
    let exit = model.exit && (model.exit_always || idx.recs[k - 1].mode == Mode::Direct);
    if exit || (model.entry && model.entry_previous) {
        peers.extend(granted(idx.recs[k - 1], a));
    }
    peers.sort_unstable();
    peers.dedup();
    peers.into_iter().map(|p| prev_end[p]).collect()
}
