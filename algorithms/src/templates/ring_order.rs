//! Finding a ring of healthy links: a Hamiltonian cycle of the topology's link graph.
//!
//! Rings need a link from every rank to the next. On a full mesh the natural order
//! `0, 1, ..., n-1` is one; with broken links (or on topologies with few links) another
//! order may exist. The search is a depth-first walk from rank 0 that tries the natural
//! successor first (so healthy topologies cost `O(n)`), then the others in increasing
//! distance, with a budget on explored nodes so that large graphs without a cycle fail fast
//! instead of searching forever.

use oxccl_framework::platform::Rank;
use oxccl_framework::{Error, OpKind, Topology};

/// Explored partial paths before the search gives up.
const SEARCH_BUDGET: usize = 1 << 20;

/// A cyclic order of all ranks in which consecutive ranks (and the last and the first) are
/// linked, or `None` if none was found.
pub fn healthy_ring(topology: &Topology) -> Option<Vec<Rank>> {
    let n = topology.ranks();
    if n <= 2 {
        let linked = n < 2 || topology.link_kind(0, 1).is_some();
        return linked.then(|| (0..n).collect());
    }
    let mut search = Search {
        topology,
        n,
        path: vec![0],
        used: vec![false; n],
        budget: SEARCH_BUDGET,
    };
    search.used[0] = true;
    search.extend().then_some(search.path)
}

struct Search<'a> {
    topology: &'a Topology,
    n: usize,
    path: Vec<Rank>,
    used: Vec<bool>,
    budget: usize,
}

impl Search<'_> {
    /// Depth-first: true once `path` is a closed cycle over every rank.
    fn extend(&mut self) -> bool {
        let last = *self.path.last().expect("path starts at rank 0");
        if self.path.len() == self.n {
            return self.topology.link_kind(last, self.path[0]).is_some();
        }
        for step in 1..self.n {
            let next = (last + step) % self.n;
            if self.used[next] || self.topology.link_kind(last, next).is_none() {
                continue;
            }
            if self.budget == 0 {
                return false;
            }
            self.budget -= 1;
            self.used[next] = true;
            self.path.push(next);
            if self.extend() {
                return true;
            }
            self.path.pop();
            self.used[next] = false;
        }
        false
    }
}

/// [`healthy_ring`], or the error executor `executor` of `op` reports when there is none.
pub fn healthy_ring_for(
    topology: &Topology,
    executor: &str,
    op: OpKind,
) -> Result<Vec<Rank>, Error> {
    healthy_ring(topology).ok_or_else(|| Error::Unsupported {
        executor: executor.into(),
        op,
        ranks: topology.ranks(),
        reason: "no ring of healthy links exists (no Hamiltonian cycle was found)".into(),
    })
}

/// The ring order an executor computes once in `resources()` and hands to every
/// `kernel_run()` as its typed plan (`KernelCtx::plan::<RingOrder>()`): the search for a
/// Hamiltonian cycle of healthy links is not repeated per loop iteration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingOrder(pub Vec<Rank>);

/// The two neighbours of `rank` in `order`, sorted, without duplicates or `rank` itself.
pub fn ring_neighbours(order: &[Rank], rank: Rank) -> Vec<Rank> {
    let n = order.len();
    let Some(pos) = order.iter().position(|&r| r == rank) else {
        return Vec::new();
    };
    let mut peers = vec![order[(pos + n - 1) % n], order[(pos + 1) % n]];
    peers.sort_unstable();
    peers.dedup();
    peers.retain(|&p| p != rank);
    peers
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_healthy_ring(t: &Topology, order: &[Rank]) -> bool {
        let n = order.len();
        let mut sorted = order.to_vec();
        sorted.sort_unstable();
        sorted == (0..n).collect::<Vec<_>>()
            && (0..n).all(|i| n < 2 || t.link_kind(order[i], order[(i + 1) % n]).is_some())
    }

    #[test]
    fn natural_order_on_a_healthy_mesh() {
        assert_eq!(
            healthy_ring(&Topology::single_server(8)).unwrap(),
            (0..8).collect::<Vec<_>>()
        );
        assert_eq!(healthy_ring(&Topology::single_server(1)).unwrap(), vec![0]);
    }

    #[test]
    fn avoids_broken_links() {
        let t = Topology::single_server(8)
            .with_broken(0, 1)
            .unwrap()
            .with_broken(3, 4)
            .unwrap()
            .with_broken(2, 5)
            .unwrap();
        let order = healthy_ring(&t).unwrap();
        assert!(is_healthy_ring(&t, &order), "{order:?}");
    }

    #[test]
    fn reports_when_no_ring_exists() {
        // Rank 0 keeps a single link: no cycle can pass through it.
        let mut t = Topology::single_server(5);
        for p in 2..5 {
            t = t.with_broken(0, p).unwrap();
        }
        assert_eq!(healthy_ring(&t), None);
        assert_eq!(
            healthy_ring(&Topology::single_server(2).with_broken(0, 1).unwrap()),
            None
        );
    }

    #[test]
    fn neighbours_without_duplicates() {
        assert_eq!(ring_neighbours(&[1, 2, 3, 0], 0), vec![1, 3]);
        assert_eq!(ring_neighbours(&[0, 1], 0), vec![1]);
        assert_eq!(ring_neighbours(&[0], 0), Vec::<usize>::new());
    }
}
