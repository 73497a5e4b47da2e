//! Scatter relay-mesh: the mesh scatter for topologies with broken links.
//!
//! Every rank linked to the root pulls its block from the root, as in [`mesh`](super::mesh).
//! The block of a *far* rank (no link to the root) travels in pieces through its relays,
//! the common healthy neighbours of the root and it
//! ([`relay_rooted`](crate::templates::relay_rooted)): each relay first pulls its piece of
//! every far block it serves into its scratch and tells that far rank (Ack), then pulls its
//! own block; the far rank pulls the pieces out of the relays' scratch, one slave stream
//! per relay. The root's link to a relay carries the relay's block plus `1/m` of a far
//! block: cost `α + (1 + f/m)·bβ` then `α + b/m·β` for `f` far ranks and blocks of `b`.
//! On a healthy mesh it is the mesh scatter.
//!
//! Every reader answers "done reading" (DataSignal) and the rank read from waits for all
//! answers before its iteration ends. A relay's scratch holds one slot per rank, so with
//! far ranks zero-copy runs in iterations of at most a CCL buffer, as staged does; without
//! them zero-copy runs one iteration without answers: only user buffers are read, and the
//! device's exit fence returns a call only after every granted peer finished it. It
//! needs a route through at most one relay between every pair of ranks.

use super::root_keeps_its_block;
use crate::broadcast::root_of;
use crate::templates::relay_pieces;
use crate::templates::relay_rooted::{far_ranks, linked_peers, served_pieces, star_peers, FarRank};
use oxccl_framework::platform::{Buf, Rank, Slice};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, Peers, PlanCtx,
    ResourceRequest,
};

/// The relaying mesh Scatter executor.
pub struct RelayMeshScatter;

const NAME: &str = "relay-mesh";
const KIND: OpKind = OpKind::Scatter;

oxccl_framework::register_executor! {
    name: NAME,
    op: KIND,
    description: "mesh scatter; blocks of ranks without a link to the root travel in pieces through every common neighbour",
    constraints: Constraints::ANY,
    preference: 15,
    make: || Box::new(RelayMeshScatter),
}

/// The request of a relayed star that moves one block per rank through the relays'
/// scratch: the star's peers, a slave stream per relay of a far rank, and (where there are
/// far ranks) a scratch slot per rank of at most a CCL buffer over the rank count.
pub(crate) fn relayed_blocks_request(
    ctx: &PlanCtx<'_>,
    root: Rank,
    far: &[FarRank],
    far_slaves: bool,
) -> ResourceRequest {
    let peers = star_peers(ctx.topology, root, far, ctx.rank);
    let mine = far.iter().find(|f| f.rank == ctx.rank);
    let request = ResourceRequest {
        slave_streams: mine.filter(|_| far_slaves).map_or(0, |f| f.relays.len()),
        ..ResourceRequest::with_peers(Peers::List(peers))
    };
    if far.is_empty() {
        return request;
    }
    let es = ctx.op.dtype.size();
    let per_loop = (ctx.ccl_bytes / (ctx.ranks * es)).max(1);
    ResourceRequest {
        scratch_bytes: ctx.ranks * per_loop * es,
        max_count_per_loop: Some(per_loop),
        ..request
    }
}

/// Bytes `(off, len)` of the scratch slot that holds `far`'s block of `block` bytes.
pub(crate) fn slot(rank: Rank, far: Rank, block: usize, (off, len): (usize, usize)) -> Slice {
    Slice::new(rank, Buf::Scratch, far * block + off, len)
}

impl Executor for RelayMeshScatter {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let root = root_of(ctx.op, NAME)?;
        let far = far_ranks(ctx.topology, root, NAME, KIND)?;
        Ok(relayed_blocks_request(ctx, root, &far, true))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let root = root_of(&args.op, NAME)?;
        let far = far_ranks(ctx.topology, root, NAME, KIND)?;
        let me = ctx.rank;
        // Zero-copy without far ranks runs one iteration: the exit fence releases.
        let answer = args.mode == Mode::Staged || !far.is_empty();
        if me == root {
            let links = linked_peers(ctx.topology, me)
                .into_iter()
                .map(|p| ctx.link(p, 0))
                .collect::<Result<Vec<_>, _>>()?;
            links.iter().for_each(|l| l.tx_ack(ctx.main()));
            root_keeps_its_block(ctx, args);
            if answer {
                links.iter().for_each(|l| l.rx_data_signal(ctx.main()));
            }
            return Ok(());
        }
        match far.iter().find(|f| f.rank == me) {
            Some(f) => far_side(ctx, args, f),
            None => linked_side(ctx, args, root, &far, answer),
        }
    }
}

/// A linked rank: the pieces it relays into its scratch, announced, then its own block.
fn linked_side(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    root: Rank,
    far: &[FarRank],
    answer: bool,
) -> Result<(), Error> {
    let (me, es) = (ctx.rank, args.op.dtype.size());
    let len = args.op.count * es;
    let blocks = args.blocks(ctx.ranks);
    let served = served_pieces(far, me, (0, len), es);
    let up = ctx.link(root, 0)?;
    let down = served
        .iter()
        .map(|&(f, _)| ctx.link(f, 0))
        .collect::<Result<Vec<_>, _>>()?;
    up.rx_ack(ctx.main());
    for (&(f, (off, l)), link) in served.iter().zip(&down) {
        let src = args.input.at(root, blocks[f].0 + off, l);
        ctx.main().copy(src, slot(me, f, len, (off, l)));
        link.tx_ack(ctx.main());
    }
    let (off, l) = blocks[me];
    let (src, dst) = (args.input.at(root, off, l), args.output.at(me, 0, l));
    ctx.main().copy(src, dst);
    if answer {
        up.tx_data_signal(ctx.main());
    }
    down.iter().for_each(|l| l.rx_data_signal(ctx.main()));
    Ok(())
}

/// A far rank: its block's pieces out of its relays' scratch, one slave stream per relay.
fn far_side(ctx: &mut KernelCtx<'_>, args: &KernelArgs, far: &FarRank) -> Result<(), Error> {
    let (me, es) = (ctx.rank, args.op.dtype.size());
    let len = args.op.count * es;
    let pieces = relay_pieces(&far.relays, (0, len), es);
    ctx.fork(1..=pieces.len());
    for (slave, &(k, off, l)) in (1..).zip(&pieces) {
        let link = ctx.link(k, 0)?;
        let (src, dst) = (slot(k, me, len, (off, l)), args.output.at(me, off, l));
        let s = ctx.stream(slave);
        link.rx_ack(s);
        s.copy(src, dst);
        link.tx_data_signal(s);
    }
    ctx.join(1..=pieces.len());
    Ok(())
}
