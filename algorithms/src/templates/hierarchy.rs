//! The server decomposition of HCCL's hierarchical executors: level 0 inside each server,
//! level 1 across servers, on server shapes that may differ in size (8+4, 3+2).
//!
//! The data is cut into `L` chunks, `L` the widest server's rank count. On a server of `m`
//! ranks, chunk `c` is owned by local rank `c % m`, so every server owns every chunk and a
//! rank of a small server owns several. The **level-1 group** of chunk `c` is its owner on
//! every server, one rank per server in server order; a rank belongs to the groups of all
//! the chunks it owns and runs them one after another in increasing chunk order, so two
//! ranks that share two groups meet in them in the same order.
//!
//! Level 0 synchronises a server with [`server_round`]: post one signal to every other
//! rank of the server, then wait for theirs, on the main stream; [`pull_from_server`]
//! pulls from every server peer at once, one slave stream per peer, and
//! [`server_all_gather`] is the level-0 all-gather of owned chunks built from both.
//! Level 1 runs a ring-like template over each group, picked by [`Level1`]: every template
//! has the contract of [`ring_reduce_scatter()`] / [`ring_all_gather()`] over
//! `RingParams::order`, and ends each exchange with a full handshake, so consecutive
//! groups may share links and channels.

use super::nhr::{nhr_all_gather, nhr_peers, nhr_reduce_scatter};
use super::peer_round::Round;
use super::rhd::{rhd_all_gather, rhd_all_reduce, rhd_peers, rhd_reduce_scatter};
use super::ring::RingParams;
use super::{ring_all_gather, ring_neighbours, ring_reduce_scatter};
use oxccl_framework::platform::Rank;
use oxccl_framework::{
    BufRange, Constraints, Error, KernelCtx, LinkNeed, Peers, ResourceRequest, Topology,
};

oxccl_framework::register_template! {
    name: "server_all_gather",
    description: "a \"chunks ready\" round with the server, then every chunk pulled from its owner in the server (hierarchical level 0)",
}

oxccl_framework::register_template! {
    name: "server_round",
    description: "post one signal to every other rank of the server, then wait for theirs (hierarchical level 0)",
}

/// Which template runs the level-1 (inter-server) phase of a hierarchical executor.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Level1 {
    /// Ring reduce-scatter / all-gather over the group.
    Ring,
    /// Recursive halving-doubling over the group.
    Rhd,
    /// Non-uniform hierarchical ring (log-step ring) over the group.
    Nhr,
}

impl Level1 {
    /// The reduce-scatter of this level-1 algorithm over `p.order`.
    pub fn reduce_scatter(self, ctx: &mut KernelCtx<'_>, p: &RingParams<'_>) -> Result<(), Error> {
        match self {
            Level1::Ring => ring_reduce_scatter(ctx, p),
            Level1::Rhd => rhd_reduce_scatter(ctx, p),
            Level1::Nhr => nhr_reduce_scatter(ctx, p),
        }
    }

    /// The all-gather of this level-1 algorithm over `p.order`.
    pub fn all_gather(self, ctx: &mut KernelCtx<'_>, p: &RingParams<'_>) -> Result<(), Error> {
        match self {
            Level1::Ring => ring_all_gather(ctx, p),
            Level1::Rhd => rhd_all_gather(ctx, p),
            Level1::Nhr => nhr_all_gather(ctx, p),
        }
    }

    /// The AllReduce of this level-1 algorithm over `p.order`, in `p.output`.
    pub fn all_reduce(self, ctx: &mut KernelCtx<'_>, p: &RingParams<'_>) -> Result<(), Error> {
        match self {
            Level1::Ring | Level1::Nhr => {
                self.reduce_scatter(ctx, p)?;
                self.all_gather(ctx, p)
            }
            Level1::Rhd => rhd_all_reduce(ctx, p),
        }
    }

    /// The members of `group` that `rank` exchanges with in this algorithm.
    pub fn peers(self, group: &[Rank], rank: Rank) -> Vec<Rank> {
        match self {
            Level1::Ring => ring_neighbours(group, rank),
            Level1::Rhd => rhd_peers(group, rank),
            Level1::Nhr => nhr_peers(group, rank),
        }
    }
}

/// The servers of a topology, seen by the hierarchical executors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Servers {
    /// First rank of each server.
    starts: Vec<Rank>,
    /// Ranks of each server.
    sizes: Vec<usize>,
}

impl Servers {
    /// The servers of `topology`.
    pub fn of(topology: &Topology) -> Self {
        let sizes = topology.server_sizes().to_vec();
        let starts = (0..sizes.len())
            .map(|s| topology.server_ranks(s).start)
            .collect();
        Servers { starts, sizes }
    }

    /// Number of servers.
    pub fn count(&self) -> usize {
        self.sizes.len()
    }

    /// `L`: the widest server's rank count, the number of level-0 chunks.
    pub fn widest(&self) -> usize {
        self.sizes.iter().copied().max().unwrap_or(1)
    }

    /// Ranks of server `s`.
    pub fn size(&self, s: usize) -> usize {
        self.sizes[s]
    }

    /// The server of `rank`.
    pub fn server_of(&self, rank: Rank) -> usize {
        self.starts.partition_point(|&start| start <= rank) - 1
    }

    /// `rank`'s index inside its server.
    pub fn local(&self, rank: Rank) -> usize {
        rank - self.starts[self.server_of(rank)]
    }

    /// The rank with local index `local` on server `s`.
    pub fn rank(&self, s: usize, local: usize) -> Rank {
        debug_assert!(local < self.sizes[s]);
        self.starts[s] + local
    }

    /// The ranks of `rank`'s server, `rank` included.
    pub fn server_ranks(&self, rank: Rank) -> std::ops::Range<Rank> {
        let s = self.server_of(rank);
        self.starts[s]..self.starts[s] + self.sizes[s]
    }

    /// The other ranks of `rank`'s server.
    pub fn server_peers(&self, rank: Rank) -> Vec<Rank> {
        self.server_ranks(rank).filter(|&r| r != rank).collect()
    }

    /// The owner of chunk `c` on server `s`.
    pub fn owner(&self, s: usize, c: usize) -> Rank {
        self.rank(s, c % self.sizes[s])
    }

    /// The chunks (of `0..widest()`) that `rank` owns, in increasing order.
    pub fn owned_chunks(&self, rank: Rank) -> Vec<usize> {
        let (m, local) = (self.sizes[self.server_of(rank)], self.local(rank));
        (0..self.widest()).filter(|c| c % m == local).collect()
    }

    /// The level-1 group of chunk `c`: its owner on every server, in server order.
    pub fn group(&self, c: usize) -> Vec<Rank> {
        (0..self.count()).map(|s| self.owner(s, c)).collect()
    }

    /// Every peer `rank` needs: the rest of its server, and its `level1` partners in the
    /// groups of the chunks it owns; sorted, without duplicates.
    pub fn peers(&self, rank: Rank, level1: Level1) -> Vec<Rank> {
        let mut peers = self.server_peers(rank);
        for c in self.owned_chunks(rank) {
            peers.extend(level1.peers(&self.group(c), rank));
        }
        peers.sort_unstable();
        peers.dedup();
        peers
    }
}

/// Append a round with every other rank of `ctx.rank`'s server on link `channel`, on the
/// main stream: after it, every rank of the server has reached this point of its program.
/// Rounds that follow each other must alternate their signal or their channel.
pub fn server_round(
    ctx: &mut KernelCtx<'_>,
    servers: &Servers,
    channel: usize,
    round: Round,
) -> Result<(), Error> {
    let links = servers
        .server_peers(ctx.rank)
        .into_iter()
        .map(|p| ctx.link(p, channel))
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

/// Slave streams the level-0 pulls of `rank` use: one per other rank of its server.
pub fn server_slaves(servers: &Servers, rank: Rank) -> usize {
    servers.server_ranks(rank).len() - 1
}

/// The request of a hierarchical executor for `rank`: its server peers and its `level1`
/// partners ([`Servers::peers`]), one slave stream per server peer ([`server_slaves`]).
pub fn hier_request(servers: &Servers, rank: Rank, level1: Level1) -> ResourceRequest {
    ResourceRequest {
        slave_streams: server_slaves(servers, rank),
        ..ResourceRequest::with_peers(Peers::List(servers.peers(rank, level1)))
    }
}

/// The constraints of a hierarchical executor with a put level 1 (`hier-put-ring`): its
/// level-1 partners are fixed by rank, so it needs a full mesh; it is a hint on two
/// servers or more; it loads and stores only inside servers, so it runs where the links
/// between servers are put-only, and zero-copy there (`planner::executor_mode`).
pub const HIER_PUT_CONSTRAINTS: Constraints = Constraints {
    full_mesh: true,
    min_servers: 2,
    links: LinkNeed::LoadStoreWithinServer,
    ..Constraints::ANY
};

/// Append level-0 pulls: from each other rank `q` of `ctx.rank`'s server, the pieces
/// `pieces(q)` (`(byte offset, byte length)` in `output`) into the same place of the own
/// output. Peer `i` of the server (in rank order, skipping the own rank) is served by
/// slave stream `first_slave + i`, all between a fork and a join, when the rank has those
/// streams (see [`server_slaves`]); otherwise everything runs on the main stream.
pub fn pull_from_server(
    ctx: &mut KernelCtx<'_>,
    servers: &Servers,
    output: BufRange,
    first_slave: usize,
    pieces: impl Fn(Rank) -> Vec<(usize, usize)>,
) {
    let me = ctx.rank;
    let peers = servers.server_peers(me);
    let slaves = first_slave..first_slave + peers.len();
    let parallel = !peers.is_empty() && ctx.slaves() >= slaves.end - 1 && first_slave > 0;
    if parallel {
        ctx.fork(slaves.start..=slaves.end - 1);
    }
    for (i, &q) in peers.iter().enumerate() {
        let stream = if parallel { slaves.start + i } else { 0 };
        for (off, len) in pieces(q) {
            let (src, dst) = (output.at(q, off, len), output.at(me, off, len));
            ctx.stream(stream).copy(src, dst);
        }
    }
    if parallel {
        ctx.join(slaves.start..=slaves.end - 1);
    }
}

/// Append a level-0 all-gather: a DataSignal round with `ctx.rank`'s server ("my chunks
/// are ready"), then every chunk of `chunks` (`(byte offset, byte length)` in `output`,
/// indexed by chunk) that the rank does not own pulled from its owner in the server, one
/// slave stream per owner from `first_slave` on (see [`pull_from_server`]).
/// Nothing says "I am done reading your output": a caller whose peers overwrite their
/// output next (a staged loop) adds a round for it.
pub fn server_all_gather(
    ctx: &mut KernelCtx<'_>,
    servers: &Servers,
    output: BufRange,
    chunks: &[(usize, usize)],
    (channel, first_slave): (usize, usize),
) -> Result<(), Error> {
    if servers.server_ranks(ctx.rank).len() == 1 {
        return Ok(());
    }
    server_round(ctx, servers, channel, Round::DataSignal)?;
    let owned = |q: Rank| {
        servers
            .owned_chunks(q)
            .into_iter()
            .map(|c| chunks[c])
            .collect()
    };
    pull_from_server(ctx, servers, output, first_slave, owned);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uneven_servers_own_every_chunk() {
        let servers = Servers::of(&Topology::servers(vec![8, 4]).unwrap());
        assert_eq!(servers.widest(), 8);
        assert_eq!(servers.server_of(7), 0);
        assert_eq!(servers.server_of(8), 1);
        assert_eq!(servers.local(10), 2);
        assert_eq!(servers.owned_chunks(3), vec![3]);
        assert_eq!(servers.owned_chunks(9), vec![1, 5]);
        assert_eq!(servers.group(5), vec![5, 9]);
        assert_eq!(servers.peers(9, Level1::Ring).len(), 3 + 2);
    }

    #[test]
    fn every_chunk_has_one_owner_per_server() {
        let servers = Servers::of(&Topology::servers(vec![3, 2, 3]).unwrap());
        for c in 0..servers.widest() {
            let group = servers.group(c);
            assert_eq!(group.len(), 3);
            for (s, &r) in group.iter().enumerate() {
                assert_eq!(servers.server_of(r), s);
                assert!(servers.owned_chunks(r).contains(&c));
            }
        }
    }

    #[test]
    fn one_server_has_singleton_groups() {
        let servers = Servers::of(&Topology::single_server(4));
        assert_eq!(servers.group(2), vec![2]);
        assert_eq!(servers.peers(2, Level1::Ring), vec![0, 1, 3]);
    }
}
