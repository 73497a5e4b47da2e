//! Broadcast relay-mesh: the mesh broadcast for topologies with broken links.
//!
//! Every rank linked to the root pulls the whole vector from the root at once, as in
//! [`mesh`](super::mesh). A *far* rank (no link to the root) gets it in pieces from its
//! relays, the common healthy neighbours of the root and it
//! ([`relay_rooted`](crate::templates::relay_rooted)): each relay pulls its piece first,
//! tells the far rank (Ack), then pulls the rest; the far rank pulls the pieces out of the
//! relays' outputs, one slave stream per relay. The root's links carry one vector each,
//! the relay links `1/m` of it: cost `α + nβ` plus `α + n/m·β` for the far ranks, which
//! overlaps the relays' own pulls. On a healthy mesh it is the mesh broadcast.
//!
//! Staged, every reader answers "done reading" (DataSignal) and the rank read from waits
//! for all answers before its iteration ends, so the next iteration may overwrite CclIn and
//! CclOut; zero-copy runs one iteration without answers: only user buffers are read, and
//! the device's exit fence returns a call only after every granted peer finished it. It
//! needs a route through at most one relay between every pair of ranks.

use super::{root_keeps_its_data, root_of};
use crate::templates::relay_pieces;
use crate::templates::relay_rooted::{
    far_ranks, linked_peers, served_pieces, split_by_pieces, star_peers, FarRank,
};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, Peers, PlanCtx,
    ResourceRequest,
};

/// The relaying mesh Broadcast executor.
pub struct RelayMeshBroadcast;

const NAME: &str = "relay-mesh";
const KIND: OpKind = OpKind::Broadcast;

oxccl_framework::register_executor! {
    name: NAME,
    op: KIND,
    description: "mesh broadcast; ranks without a link to the root get pieces through every common neighbour",
    constraints: Constraints::ANY,
    preference: 15,
    make: || Box::new(RelayMeshBroadcast),
}

impl Executor for RelayMeshBroadcast {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let root = root_of(ctx.op, NAME)?;
        let far = far_ranks(ctx.topology, root, NAME, KIND)?;
        let slave_streams = far
            .iter()
            .find(|f| f.rank == ctx.rank)
            .map_or(0, |f| f.relays.len());
        Ok(ResourceRequest {
            slave_streams,
            ..ResourceRequest::with_peers(Peers::List(star_peers(
                ctx.topology,
                root,
                &far,
                ctx.rank,
            )))
        })
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let root = root_of(&args.op, NAME)?;
        let far = far_ranks(ctx.topology, root, NAME, KIND)?;
        let me = ctx.rank;
        // Zero-copy runs one iteration: the exit fence stands for "done reading".
        let answer = args.mode == Mode::Staged;
        if me == root {
            return root_side(ctx, args, answer);
        }
        match far.iter().find(|f| f.rank == me) {
            Some(f) => far_side(ctx, args, f, answer),
            None => linked_side(ctx, args, root, &far, answer),
        }
    }
}

/// The root: "my input is ready" to every linked rank, then wait until all have read it.
fn root_side(ctx: &mut KernelCtx<'_>, args: &KernelArgs, answer: bool) -> Result<(), Error> {
    let links = linked_peers(ctx.topology, ctx.rank)
        .into_iter()
        .map(|p| ctx.link(p, 0))
        .collect::<Result<Vec<_>, _>>()?;
    links.iter().for_each(|l| l.tx_ack(ctx.main()));
    root_keeps_its_data(ctx, args);
    if answer {
        links.iter().for_each(|l| l.rx_data_signal(ctx.main()));
    }
    Ok(())
}

/// A linked rank: pull the pieces it relays first and announce them, then the rest.
fn linked_side(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    root: usize,
    far: &[FarRank],
    answer: bool,
) -> Result<(), Error> {
    let (me, es) = (ctx.rank, args.op.dtype.size());
    let len = args.op.count * es;
    let served = served_pieces(far, me, (0, len), es);
    let pieces: Vec<(usize, usize)> = served.iter().map(|&(_, p)| p).collect();
    let (covered, rest) = split_by_pieces((0, len), &pieces);
    let up = ctx.link(root, 0)?;
    let down = served
        .iter()
        .map(|&(f, _)| ctx.link(f, 0))
        .collect::<Result<Vec<_>, _>>()?;
    up.rx_ack(ctx.main());
    for &(off, l) in &covered {
        let (src, dst) = (args.input.at(root, off, l), args.output.at(me, off, l));
        ctx.main().copy(src, dst);
    }
    down.iter().for_each(|l| l.tx_ack(ctx.main()));
    for &(off, l) in &rest {
        let (src, dst) = (args.input.at(root, off, l), args.output.at(me, off, l));
        ctx.main().copy(src, dst);
    }
    if answer {
        up.tx_data_signal(ctx.main());
        down.iter().for_each(|l| l.rx_data_signal(ctx.main()));
    }
    Ok(())
}

/// A far rank: its relays' pieces, one slave stream per relay.
fn far_side(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    far: &FarRank,
    answer: bool,
) -> Result<(), Error> {
    let (me, es) = (ctx.rank, args.op.dtype.size());
    let len = args.op.count * es;
    let pieces = relay_pieces(&far.relays, (0, len), es);
    ctx.fork(1..=pieces.len());
    for (slave, &(k, off, l)) in (1..).zip(&pieces) {
        let link = ctx.link(k, 0)?;
        let (src, dst) = (args.output.at(k, off, l), args.output.at(me, off, l));
        let s = ctx.stream(slave);
        link.rx_ack(s);
        s.copy(src, dst);
        if answer {
            link.tx_data_signal(s);
        }
    }
    ctx.join(1..=pieces.len());
    Ok(())
}
