//! Barrier spanning-tree: fan-in then fan-out over a breadth-first spanning tree of the
//! healthy links, rooted at a centre of the link graph.
//!
//! Why a tree rather than a relayed dissemination: dissemination needs the link to
//! `r ± 2^k` in every round, and relaying a missing one costs a round per hop and signals
//! that every relay must forward in order; a tree over the healthy links needs nothing
//! but the links it uses, works on any connected graph (a ring, a path, a mesh with any
//! links broken) and costs `2·depth` signal hops. Rooting the breadth-first tree at a
//! rank of least eccentricity keeps the depth at the graph's radius: 1 on a healthy mesh
//! (a star around rank 0), 2 on a mesh with links broken.
//!
//! Fan-in: a rank waits for the Ack of each child ("my subtree has arrived"), then posts
//! its parent's. Fan-out: it waits for its parent's DataSignal ("everybody has arrived"),
//! then posts each child's. Each notify is posted once per barrier, and the next post on
//! it follows a wait for a signal the peer sent after consuming it (a child posts the next
//! Ack after the parent's DataSignal, which the parent posts after taking the child's
//! Ack), so no wakeup is lost; between barriers the device's epoch fence does the same (a
//! peer posts in the next barrier only after this rank finished this one).
//! A disconnected graph is refused with `Unsupported`.
//! Cost: `2·radius·α`.

use oxccl_framework::platform::Rank;
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, LinkNeed, OpKind, Peers, PlanCtx,
    ResourceRequest, Topology,
};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// The spanning-tree barrier executor.
///
/// It keeps the tree of the last topology it was asked about: selection and recording
/// ask every rank of one topology in turn, and the tree is one search of the whole link
/// graph (a few per candidate root), which thousands of ranks must not each repeat.
#[derive(Default)]
pub struct SpanningTreeBarrier {
    last: Mutex<Option<(Topology, Arc<Tree>)>>,
}

/// The breadth-first tree every rank of a topology runs the barrier over.
struct Tree {
    parents: Vec<Option<Rank>>,
    children: Vec<Vec<Rank>>,
}

impl SpanningTreeBarrier {
    fn tree(&self, topology: &Topology) -> Result<Arc<Tree>, Error> {
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((seen, tree)) = &*last {
            if seen == topology {
                return Ok(Arc::clone(tree));
            }
        }
        let tree = Arc::new(build_tree(topology)?);
        *last = Some((topology.clone(), Arc::clone(&tree)));
        Ok(tree)
    }

    /// `(parent, children)` of `rank` in the tree.
    fn links_of(
        &self,
        topology: &Topology,
        rank: Rank,
    ) -> Result<(Option<Rank>, Vec<Rank>), Error> {
        let tree = self.tree(topology)?;
        Ok((tree.parents[rank], tree.children[rank].clone()))
    }
}

const NAME: &str = "spanning-tree";

oxccl_framework::register_executor! {
    name: NAME,
    op: OpKind::Barrier,
    description: "fan-in then fan-out over a BFS spanning tree of the healthy links, rooted at a graph centre",
    // Signals only: no data crosses a link, so put-only links (TCP, RDMA) serve it.
    constraints: Constraints { links: LinkNeed::Put, ..Constraints::ANY },
    preference: 5,
    make: || Box::<SpanningTreeBarrier>::default(),
}

/// Breadth-first parents from `root` over the healthy links (`None` for the root and for
/// ranks it cannot reach); neighbours are visited in ascending order.
fn bfs_parents(topology: &Topology, root: Rank) -> Vec<Option<Rank>> {
    let n = topology.ranks();
    let mut parent = vec![None; n];
    let mut seen = vec![false; n];
    seen[root] = true;
    let mut queue = VecDeque::from([root]);
    while let Some(r) = queue.pop_front() {
        for p in topology.peers(r) {
            if !seen[p] {
                seen[p] = true;
                parent[p] = Some(r);
                queue.push_back(p);
            }
        }
    }
    parent
}

/// Depth of the breadth-first tree from `root`, or `None` when it misses a rank.
fn eccentricity(topology: &Topology, root: Rank) -> Option<usize> {
    let parent = bfs_parents(topology, root);
    (0..topology.ranks())
        .map(|r| {
            let mut depth = 0;
            let mut at = r;
            while let Some(p) = parent[at] {
                depth += 1;
                at = p;
            }
            (at == root).then_some(depth)
        })
        .try_fold(0, |max, d| d.map(|d| max.max(d)))
}

/// Ranks up to which every rank is tried as the root.
const SEARCH_EVERY_ROOT: usize = 64;

/// Most roots tried on a larger asymmetric topology.
const MAX_ROOTS: usize = 8;

/// The ranks whose eccentricity decides the root. Every rank on a small topology. On a
/// symmetric one (servers of one size, nothing broken or overridden: every rank sits
/// alike, so all share one eccentricity and the least rank wins the tie) rank 0 alone.
/// Otherwise the ranks that break the symmetry (both ends of broken and overridden
/// links) and the first rank of spread-out servers, bounded by [`MAX_ROOTS`]:
/// a root that is not a centre only deepens the tree, it stays a right one.
fn candidate_roots(topology: &Topology) -> Vec<Rank> {
    let n = topology.ranks();
    if n <= SEARCH_EVERY_ROOT {
        return (0..n).collect();
    }
    if oxccl_framework::planner::sample::is_symmetric(topology) {
        return vec![0];
    }
    let mut roots: Vec<Rank> = topology
        .broken_links()
        .chain(topology.overridden_pairs().copied())
        .flat_map(|(a, b)| [a, b])
        .take(MAX_ROOTS / 2)
        .collect();
    let servers = topology.server_sizes().len();
    let step = servers.div_ceil(MAX_ROOTS / 2).max(1);
    roots.extend(
        (0..servers)
            .step_by(step)
            .map(|server| topology.server_ranks(server).start),
    );
    roots.sort_unstable();
    roots.dedup();
    roots
}

/// The tree of `topology`, rooted at a candidate of least eccentricity, or
/// `Unsupported` on a disconnected graph.
fn build_tree(topology: &Topology) -> Result<Tree, Error> {
    let n = topology.ranks();
    let root = candidate_roots(topology)
        .into_iter()
        .filter_map(|r| eccentricity(topology, r).map(|e| (e, r)))
        .min()
        .map(|(_, r)| r)
        .ok_or_else(|| Error::Unsupported {
            executor: NAME.into(),
            op: OpKind::Barrier,
            ranks: n,
            reason: "the healthy links do not connect every rank; no barrier can reach a \
                     rank that has no path to the others"
                .into(),
        })?;
    let parents = bfs_parents(topology, root);
    let mut children = vec![Vec::new(); n];
    for (child, parent) in parents.iter().enumerate() {
        if let Some(p) = parent {
            children[*p].push(child);
        }
    }
    Ok(Tree { parents, children })
}

impl Executor for SpanningTreeBarrier {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let (parent, mut peers) = self.links_of(ctx.topology, ctx.rank)?;
        peers.extend(parent);
        peers.sort_unstable();
        Ok(ResourceRequest::with_peers(Peers::List(peers)))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, _args: &KernelArgs) -> Result<(), Error> {
        let (parent, children) = self.links_of(ctx.topology, ctx.rank)?;
        let children = children
            .into_iter()
            .map(|c| ctx.link(c, 0))
            .collect::<Result<Vec<_>, _>>()?;
        let parent = parent.map(|p| ctx.link(p, 0)).transpose()?;
        children.iter().for_each(|c| c.rx_ack(ctx.main()));
        if let Some(p) = &parent {
            p.tx_ack(ctx.main());
            p.rx_data_signal(ctx.main());
        }
        children.iter().for_each(|c| c.tx_data_signal(ctx.main()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree_links(t: &Topology, rank: Rank) -> Result<(Option<Rank>, Vec<Rank>), Error> {
        SpanningTreeBarrier::default().links_of(t, rank)
    }

    #[test]
    fn a_cluster_tree_is_built_once_and_reaches_every_rank() {
        let t = Topology::servers(vec![8; 128]).unwrap();
        let barrier = SpanningTreeBarrier::default();
        let tree = barrier.tree(&t).unwrap();
        assert!(Arc::ptr_eq(&tree, &barrier.tree(&t).unwrap()));
        assert_eq!(tree.parents[0], None);
        assert!(tree.parents[1..].iter().all(Option::is_some));
        let broken = t.with_broken(0, 8).unwrap();
        let other = barrier.tree(&broken).unwrap();
        assert!(!Arc::ptr_eq(&tree, &other));
        assert!(other.parents.iter().filter(|p| p.is_none()).count() == 1);
    }

    #[test]
    fn a_healthy_mesh_is_a_star_around_rank_0() {
        let t = Topology::single_server(5);
        assert_eq!(tree_links(&t, 0).unwrap(), (None, vec![1, 2, 3, 4]));
        assert_eq!(tree_links(&t, 3).unwrap(), (Some(0), vec![]));
    }

    #[test]
    fn broken_links_move_the_root_to_a_centre() {
        let t = Topology::single_server(4)
            .with_broken(0, 1)
            .and_then(|t| t.with_broken(0, 2))
            .unwrap();
        // Rank 3 reaches everybody directly.
        assert_eq!(tree_links(&t, 3).unwrap(), (None, vec![0, 1, 2]));
        assert_eq!(eccentricity(&t, 0), Some(2));
    }

    #[test]
    fn a_path_is_rooted_in_its_middle_and_disconnection_is_refused() {
        let mut path = Topology::single_server(5);
        for (a, b) in [(0, 2), (0, 3), (0, 4), (1, 3), (1, 4), (2, 4)] {
            path = path.with_broken(a, b).unwrap();
        }
        assert_eq!(tree_links(&path, 2).unwrap(), (None, vec![1, 3]));
        assert_eq!(tree_links(&path, 0).unwrap(), (Some(1), vec![]));
        let cut = [(0, 1), (0, 2), (0, 3), (0, 4)]
            .iter()
            .fold(path, |t, &(a, b)| t.with_broken(a, b).unwrap());
        assert!(matches!(
            tree_links(&cut, 2),
            Err(Error::Unsupported { .. })
        ));
    }
}
