//! Binomial trees relative to a root, in MPICH's numbering.
//!
//! Ranks are renumbered relative to the root (`v = (rank - root) mod n`, so the root is
//! virtual rank 0). The parent of `v > 0` is `v` with its lowest set bit cleared; the
//! children of `v` are `v + 2^j` for every `2^j` below the lowest set bit of `v` (every
//! `2^j < n` for the root) that is still below `n`. The subtree of `v` is then the
//! contiguous virtual range `[v, v + lowbit(v))` cut at `n` (the whole range for the
//! root), which lets scatters and gathers move a whole subtree's blocks in one packed
//! piece. Depth: `ceil(log2 n)` rounds; in round `k` (counting from the root) the
//! children `v + 2^(h - k)` of every `v` that already has the data receive it.

use oxccl_framework::platform::Rank;

oxccl_framework::register_template! {
    name: "binomial_tree",
    description: "binomial tree relative to a root: parent, children, contiguous subtrees",
}

/// A binomial tree over `ranks` ranks, rooted at `root`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct BinomialTree {
    pub ranks: usize,
    pub root: Rank,
}

impl BinomialTree {
    /// The tree over `ranks` ranks rooted at `root`.
    pub fn new(ranks: usize, root: Rank) -> Self {
        assert!(root < ranks, "root {root} of {ranks} ranks");
        BinomialTree { ranks, root }
    }

    /// The virtual rank of `rank` (the root is 0).
    pub fn virtual_rank(&self, rank: Rank) -> usize {
        (rank + self.ranks - self.root) % self.ranks
    }

    /// The real rank of virtual rank `v`.
    pub fn real_rank(&self, v: usize) -> Rank {
        (v + self.root) % self.ranks
    }

    /// The parent of `rank`; `None` for the root.
    pub fn parent(&self, rank: Rank) -> Option<Rank> {
        let v = self.virtual_rank(rank);
        (v > 0).then(|| self.real_rank(v & (v - 1)))
    }

    /// The virtual subtree span of virtual rank `v`: `lowbit(v)`, or every rank for the
    /// root (before the cut at `n`).
    fn span(&self, v: usize) -> usize {
        if v == 0 {
            self.ranks.next_power_of_two()
        } else {
            1 << v.trailing_zeros()
        }
    }

    /// The children of `rank`, smallest subtree first.
    pub fn children(&self, rank: Rank) -> Vec<Rank> {
        let v = self.virtual_rank(rank);
        let span = self.span(v);
        (0..)
            .map(|j| 1usize << j)
            .take_while(|&m| m < span && v + m < self.ranks)
            .map(|m| self.real_rank(v + m))
            .collect()
    }

    /// The virtual ranks of `rank`'s subtree, itself first: `[v, v + size)`.
    pub fn subtree(&self, rank: Rank) -> std::ops::Range<usize> {
        let v = self.virtual_rank(rank);
        v..(v + self.span(v)).min(self.ranks)
    }

    /// The most ranks in the subtree of any child of the root (0 for one rank): the most
    /// blocks a non-root rank holds in a tree scatter or gather.
    pub fn largest_child_subtree(&self) -> usize {
        self.children(self.root)
            .into_iter()
            .map(|c| self.subtree(c).len())
            .max()
            .unwrap_or(0)
    }

    /// The peers `rank` talks to: its parent and its children, sorted.
    pub fn neighbours(&self, rank: Rank) -> Vec<Rank> {
        let mut peers = self.children(rank);
        peers.extend(self.parent(rank));
        peers.sort_unstable();
        peers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rank_but_the_root_has_one_parent_that_lists_it() {
        for n in 1..=33 {
            for root in [0, n / 2, n - 1] {
                let t = BinomialTree::new(n, root);
                assert_eq!(t.parent(root), None);
                let mut seen = vec![false; n];
                seen[root] = true;
                for r in 0..n {
                    for c in t.children(r) {
                        assert_eq!(t.parent(c), Some(r), "n {n} root {root}");
                        assert!(!seen[c]);
                        seen[c] = true;
                    }
                }
                assert!(seen.iter().all(|&s| s), "n {n} root {root}");
            }
        }
    }

    #[test]
    fn a_subtree_is_the_rank_and_its_childrens_subtrees() {
        for n in 1..=33 {
            let t = BinomialTree::new(n, n / 3);
            for r in 0..n {
                let sub = t.subtree(r);
                let mut covered = 1;
                for c in t.children(r) {
                    let cs = t.subtree(c);
                    assert!(cs.start >= sub.start && cs.end <= sub.end);
                    covered += cs.len();
                }
                assert_eq!(covered, sub.len(), "n {n} rank {r}");
            }
            assert_eq!(t.subtree(n / 3), 0..n);
        }
    }

    #[test]
    fn depth_is_logarithmic() {
        let t = BinomialTree::new(13, 5);
        let depth = |mut r: Rank| {
            let mut d = 0;
            while let Some(p) = t.parent(r) {
                r = p;
                d += 1;
            }
            d
        };
        assert_eq!((0..13).map(depth).max(), Some(3));
        assert_eq!(t.children(5), vec![6, 7, 9, 0]);
        assert_eq!(t.largest_child_subtree(), 5);
        assert_eq!(BinomialTree::new(2, 1).largest_child_subtree(), 1);
    }
}
