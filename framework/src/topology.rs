//! Topology: which ranks sit in which server, and which links exist.
//!
//! This is the part the framework needs to hand out links: servers (ranks per server), the
//! link kind between two ranks (DMA-like inside a server, RDMA-like across servers) and
//! broken links, which do not exist. Link bandwidths, latencies and the presets used by the
//! cost model build on it.

use crate::error::ConfigError;
use oxccl_platform::{LinkKind, Rank};
use std::collections::BTreeSet;

/// Servers, their ranks, and the links that are broken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    /// Ranks per server; ranks are numbered server by server.
    servers: Vec<usize>,
    /// Broken links, stored as (low, high).
    broken: BTreeSet<(Rank, Rank)>,
}

impl Topology {
    /// One server with `ranks` ranks, fully connected.
    pub fn single_server(ranks: usize) -> Self {
        Topology {
            servers: vec![ranks],
            broken: BTreeSet::new(),
        }
    }

    /// Servers with the given rank counts (may differ), fully connected.
    pub fn servers(ranks_per_server: Vec<usize>) -> Result<Self, ConfigError> {
        if ranks_per_server.is_empty() || ranks_per_server.contains(&0) {
            return Err(ConfigError {
                var: "topology",
                value: format!("{ranks_per_server:?}"),
                reason: "every server needs at least one rank".into(),
            });
        }
        Ok(Topology {
            servers: ranks_per_server,
            broken: BTreeSet::new(),
        })
    }

    /// Mark the link between `a` and `b` broken.
    pub fn with_broken(mut self, a: Rank, b: Rank) -> Result<Self, ConfigError> {
        if a == b || a >= self.ranks() || b >= self.ranks() {
            return Err(ConfigError {
                var: "broken link",
                value: format!("{a}-{b}"),
                reason: format!("needs two distinct ranks below {}", self.ranks()),
            });
        }
        self.broken.insert((a.min(b), a.max(b)));
        Ok(self)
    }

    /// Total ranks.
    pub fn ranks(&self) -> usize {
        self.servers.iter().sum()
    }

    /// Ranks per server.
    pub fn server_sizes(&self) -> &[usize] {
        &self.servers
    }

    /// The server that holds `rank`.
    pub fn server_of(&self, rank: Rank) -> usize {
        let mut first = 0;
        for (server, &size) in self.servers.iter().enumerate() {
            if rank < first + size {
                return server;
            }
            first += size;
        }
        panic!("rank {rank} is not in a topology of {} ranks", self.ranks())
    }

    /// True when the link between `a` and `b` is broken.
    pub fn is_broken(&self, a: Rank, b: Rank) -> bool {
        self.broken.contains(&(a.min(b), a.max(b)))
    }

    /// Broken links as (low, high) pairs, sorted.
    pub fn broken_links(&self) -> impl Iterator<Item = (Rank, Rank)> + '_ {
        self.broken.iter().copied()
    }

    /// The kind of the link between two distinct ranks, or `None` if it is broken.
    pub fn link_kind(&self, a: Rank, b: Rank) -> Option<LinkKind> {
        if a == b || self.is_broken(a, b) {
            return None;
        }
        Some(if self.server_of(a) == self.server_of(b) {
            LinkKind::Sdma
        } else {
            LinkKind::Rdma
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_broken_links() {
        let t = Topology::servers(vec![2, 3])
            .unwrap()
            .with_broken(3, 1)
            .unwrap();
        assert_eq!(t.ranks(), 5);
        assert_eq!(t.server_of(1), 0);
        assert_eq!(t.server_of(2), 1);
        assert_eq!(t.link_kind(0, 1), Some(LinkKind::Sdma));
        assert_eq!(t.link_kind(0, 4), Some(LinkKind::Rdma));
        assert_eq!(t.link_kind(1, 3), None);
        assert!(t.is_broken(3, 1));
        assert!(Topology::single_server(2).with_broken(1, 1).is_err());
        assert!(Topology::servers(vec![2, 0]).is_err());
    }
}
