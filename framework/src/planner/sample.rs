//! Representative ranks: the few ranks whose programs stand for all of them on a
//! topology too large to plan (and replay) every rank.
//!
//! On a *symmetric* topology (every server the same size, no broken link, no per-pair
//! override) ranks differ only by their position: first or last in their server, first or
//! last server, the root of a rooted operator. Planning one rank of each position says
//! what every rank's program looks like: how many tasks, which links carry how many
//! bytes, how many signals it waits for. [`representative_ranks`] picks those positions;
//! on an asymmetric topology it adds the ranks that break the symmetry (both ends of
//! every broken or overridden link, and the first rank of every server whose size
//! differs from the first), bounded by [`MAX_SAMPLED`] so the estimate stays cheap.
//!
//! The sample is a function of the topology and the operation alone, so every rank that
//! asks gets the same ranks, and the same selection.

use crate::op::OpParam;
use crate::topology::Topology;
use oxccl_platform::Rank;
use std::collections::BTreeSet;

/// Most ranks one estimate plans.
pub const MAX_SAMPLED: usize = 16;

/// The ranks whose programs stand for every rank of `op` on `topology`, ascending.
pub fn representative_ranks(topology: &Topology, op: &OpParam) -> Vec<Rank> {
    let n = topology.ranks();
    let servers = topology.server_sizes();
    let mut picked = BTreeSet::new();
    let mut add = |rank: Rank| {
        if rank < n && picked.len() < MAX_SAMPLED {
            picked.insert(rank);
        }
    };
    if let Some(root) = op.root.filter(|_| op.kind.has_root()) {
        add(root);
    }
    // First and last rank of the first, a middle and the last server; the second rank of
    // the first server (ring neighbours of rank 0 differ from rank 0 by direction only).
    let middle = servers.len() / 2;
    for server in [0, middle, servers.len() - 1] {
        let ranks = topology.server_ranks(server);
        add(ranks.start);
        add(ranks.end - 1);
    }
    add(1);
    add(n / 2);
    for (a, b) in topology.broken_links() {
        add(a);
        add(b);
    }
    for &(a, b) in topology.overridden_pairs() {
        add(a);
        add(b);
    }
    let first_size = servers[0];
    for (server, &size) in servers.iter().enumerate() {
        if size != first_size {
            add(topology.server_ranks(server).start);
        }
    }
    picked.into_iter().collect()
}

/// Whether every rank sits in an equal position: servers of one size, no broken link and
/// no per-pair override (see the module doc).
pub fn is_symmetric(topology: &Topology) -> bool {
    let servers = topology.server_sizes();
    servers.iter().all(|&s| s == servers[0])
        && topology.broken_links().next().is_none()
        && topology.overridden_pairs().next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxccl_platform::{DataType, ReduceOp};

    #[test]
    fn symmetric_clusters_sample_a_few_positions() {
        let t = Topology::servers(vec![8; 128]).unwrap();
        assert!(is_symmetric(&t));
        let op = OpParam::all_reduce(1, DataType::F32, ReduceOp::Sum);
        let ranks = representative_ranks(&t, &op);
        assert_eq!(ranks, vec![0, 1, 7, 512, 519, 1016, 1023]);
        let op = OpParam::rooted(
            crate::op::OpKind::Broadcast,
            4,
            DataType::F32,
            ReduceOp::Sum,
            300,
        );
        assert!(representative_ranks(&t, &op).contains(&300));
    }

    #[test]
    fn asymmetry_adds_the_ranks_that_break_it() {
        let t = Topology::servers(vec![8, 8, 4])
            .unwrap()
            .with_broken(3, 9)
            .unwrap();
        assert!(!is_symmetric(&t));
        let ranks = representative_ranks(&t, &OpParam::barrier());
        for r in [3, 9, 16] {
            assert!(ranks.contains(&r), "{ranks:?}");
        }
        assert!(ranks.len() <= MAX_SAMPLED);
    }
}
