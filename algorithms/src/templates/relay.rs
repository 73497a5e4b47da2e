//! Routes around broken links: which healthy ranks relay between two ranks that are not
//! linked, and how a transfer between them is spread over those relays.
//!
//! A pair `(a, b)` whose link is broken (or missing) is served by every rank linked to
//! both: its *relays*, their common neighbours. The bytes `a` and `b` exchange are cut into
//! one piece per relay ([`relay_pieces`]), so each relay carries `1/m` of them and no link
//! carries more than its share. Every rank computes the same routes from the topology
//! alone, so a relay knows which pieces it forwards without any exchange.
//!
//! Pairs with no common neighbour (the graph is connected only through longer paths) have
//! no [`Route`]; executors built on relays refuse such topologies in `resources()`, and
//! rings or trees take over.

use crate::templates::even_chunks;
use oxccl_framework::platform::Rank;
use oxccl_framework::{Error, OpKind, Topology};

/// How rank `a` reaches rank `b`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// Over their own healthy link.
    Direct,
    /// Through these ranks (ascending, never empty), each carrying one piece.
    Relayed(Vec<Rank>),
}

/// Ranks with a healthy link to both `a` and `b`, ascending.
pub fn common_neighbours(topology: &Topology, a: Rank, b: Rank) -> Vec<Rank> {
    topology
        .peers(a)
        .filter(|&k| k != b && topology.link(k, b).is_some())
        .collect()
}

/// The route from `a` to `b` using at most `max_relays` relays (`None`: all of them), or
/// `None` when they are neither linked nor share a neighbour.
pub fn route(topology: &Topology, a: Rank, b: Rank, max_relays: Option<usize>) -> Option<Route> {
    if a == b || topology.link(a, b).is_some() {
        return Some(Route::Direct);
    }
    let mut relays = common_neighbours(topology, a, b);
    if let Some(max) = max_relays {
        relays.truncate(max.max(1));
    }
    (!relays.is_empty()).then_some(Route::Relayed(relays))
}

/// The error of executor `executor` of `op` when some pair of ranks has no route.
pub fn require_routes(
    topology: &Topology,
    executor: &str,
    op: OpKind,
    max_relays: Option<usize>,
) -> Result<(), Error> {
    let n = topology.ranks();
    for a in 0..n {
        for b in a + 1..n {
            if route(topology, a, b, max_relays).is_none() {
                return Err(Error::Unsupported {
                    executor: executor.into(),
                    op,
                    ranks: n,
                    reason: format!(
                        "ranks {a} and {b} are neither linked nor have a common healthy \
                         neighbour to relay through"
                    ),
                });
            }
        }
    }
    Ok(())
}

/// The pieces of the byte range `(offset, len)` (whole elements of `elem_size` bytes), one
/// per relay of `relays`, in relay order, as `(relay, byte offset, byte length)`.
pub fn relay_pieces(
    relays: &[Rank],
    (offset, len): (usize, usize),
    elem_size: usize,
) -> Vec<(Rank, usize, usize)> {
    even_chunks(len / elem_size, relays.len(), elem_size)
        .into_iter()
        .zip(relays)
        .map(|((o, l), &k)| (k, offset + o, l))
        .collect()
}

/// The pairs `(a, b)` (`a < b`, not linked) that `rank` relays for, with its position
/// among their relays and the relay count, as `(a, b, index, of)`.
pub fn relay_duties(
    topology: &Topology,
    rank: Rank,
    max_relays: Option<usize>,
) -> Vec<(Rank, Rank, usize, usize)> {
    let n = topology.ranks();
    let mut duties = Vec::new();
    for a in 0..n {
        for b in a + 1..n {
            if let Some(Route::Relayed(relays)) = route(topology, a, b, max_relays) {
                if let Some(i) = relays.iter().position(|&k| k == rank) {
                    duties.push((a, b, i, relays.len()));
                }
            }
        }
    }
    duties
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
    fn relays_are_the_common_neighbours() {
        let t = mesh8_broken(&[(0, 1), (1, 2)]);
        assert_eq!(route(&t, 0, 2, None), Some(Route::Direct));
        assert_eq!(
            route(&t, 0, 1, None),
            Some(Route::Relayed(vec![3, 4, 5, 6, 7]))
        );
        assert_eq!(route(&t, 1, 0, Some(1)), Some(Route::Relayed(vec![3])));
        assert_eq!(relay_duties(&t, 3, None), vec![(0, 1, 0, 5), (1, 2, 0, 5)]);
        assert!(relay_duties(&t, 1, None).is_empty());
    }

    #[test]
    fn pieces_cover_the_range() {
        let p = relay_pieces(&[2, 5, 7], (100, 40), 4);
        assert_eq!(p, vec![(2, 100, 16), (5, 116, 12), (7, 128, 12)]);
    }

    #[test]
    fn no_route_without_a_common_neighbour() {
        // A path 0 - 1 - 2 - 3: 0 and 3 share no neighbour.
        let t = mesh8_broken(&[]);
        let mut t4 = Topology::single_server(4);
        for (a, b) in [(0, 2), (0, 3), (1, 3)] {
            t4 = t4.with_broken(a, b).unwrap();
        }
        assert!(route(&t4, 0, 3, None).is_none());
        assert!(require_routes(&t4, "x", OpKind::AllReduce, None).is_err());
        assert!(require_routes(&t, "x", OpKind::AllReduce, None).is_ok());
    }
}
