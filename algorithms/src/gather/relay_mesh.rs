//! Gather relay-mesh: the mesh gather for topologies with broken links.
//!
//! The root pulls every linked rank's input at once, one slave stream per linked rank, as
//! in [`mesh`](super::mesh). The input of a *far* rank (no link to the root) travels in
//! pieces through its relays, the common healthy neighbours of the root and it
//! ([`relay_rooted`](crate::templates::relay_rooted)): a far rank tells its relays that its
//! input is ready, each relay pulls its piece into its scratch slot for that rank, then
//! tells the root (Ack) that its input and its slots are ready; the root's stream for that
//! relay pulls both. The root's link to a relay carries the relay's block plus `1/m` of
//! each far block it serves: cost `α + b/m·β` then `α + (1 + f/m)·bβ` for `f` far ranks
//! and blocks of `b`. On a healthy mesh it is the mesh gather.
//!
//! Every reader answers "done reading" (DataSignal) and the rank read from waits for the
//! answer before its iteration ends. A relay's scratch holds one slot per rank, so with far
//! ranks zero-copy runs in iterations of at most a CCL buffer, as staged does; without them
//! zero-copy runs one iteration without answers: only user buffers are read, and the
//! device's exit fence returns a call only after every granted peer finished it. It needs a
//! route through at most one relay between every pair of ranks.

use super::{peer_input, root_places_its_block};
use crate::broadcast::root_of;
use crate::scatter::relay_mesh::{relayed_blocks_request, slot};
use crate::templates::relay_rooted::{far_ranks, linked_peers, served_pieces, FarRank};
use oxccl_framework::platform::Rank;
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, PlanCtx, ResourceRequest,
};

/// The relaying mesh Gather executor.
pub struct RelayMeshGather;

const NAME: &str = "relay-mesh";
const KIND: OpKind = OpKind::Gather;

oxccl_framework::register_executor! {
    name: NAME,
    op: KIND,
    description: "mesh gather; inputs of ranks without a link to the root travel in pieces through every common neighbour",
    constraints: Constraints::ANY,
    preference: 15,
    make: || Box::new(RelayMeshGather),
}

impl Executor for RelayMeshGather {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let root = root_of(ctx.op, NAME)?;
        let far = far_ranks(ctx.topology, root, NAME, KIND)?;
        let request = relayed_blocks_request(ctx, root, &far, false);
        let slave_streams = match ctx.rank == root {
            true => linked_peers(ctx.topology, root).len(),
            false => 0,
        };
        Ok(ResourceRequest {
            slave_streams,
            ..request
        })
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let root = root_of(&args.op, NAME)?;
        let far = far_ranks(ctx.topology, root, NAME, KIND)?;
        let me = ctx.rank;
        // Zero-copy without far ranks runs one iteration: the exit fence releases.
        let answer = args.mode == Mode::Staged || !far.is_empty();
        if me == root {
            return root_side(ctx, args, &far, answer);
        }
        if let Some(f) = far.iter().find(|f| f.rank == me) {
            let links = f
                .relays
                .iter()
                .map(|&k| ctx.link(k, 0))
                .collect::<Result<Vec<_>, _>>()?;
            links.iter().for_each(|l| l.tx_ack(ctx.main()));
            links.iter().for_each(|l| l.rx_data_signal(ctx.main()));
            return Ok(());
        }
        linked_side(ctx, args, root, &far, answer)
    }
}

/// A linked rank: its pieces of the far inputs it serves into its scratch, then "ready"
/// to the root until the root has read its input and scratch.
fn linked_side(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    root: Rank,
    far: &[FarRank],
    answer: bool,
) -> Result<(), Error> {
    let (me, es) = (ctx.rank, args.op.dtype.size());
    let len = args.op.count * es;
    let served = served_pieces(far, me, (0, len), es);
    let up = ctx.link(root, 0)?;
    for &(f, (off, l)) in &served {
        let link = ctx.link(f, 0)?;
        let mut src = peer_input(args, me, f, len);
        (src.offset, src.len) = (src.offset + off, l);
        link.rx_ack(ctx.main());
        ctx.main().copy(src, slot(me, f, len, (off, l)));
        link.tx_data_signal(ctx.main());
    }
    up.tx_ack(ctx.main());
    if answer {
        up.rx_data_signal(ctx.main());
    }
    Ok(())
}

/// The root: every linked rank's input and relayed pieces, one slave stream per linked
/// rank.
fn root_side(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    far: &[FarRank],
    answer: bool,
) -> Result<(), Error> {
    let (me, es) = (ctx.rank, args.op.dtype.size());
    let len = args.op.count * es;
    root_places_its_block(ctx, args);
    let linked = linked_peers(ctx.topology, me);
    if linked.is_empty() {
        return Ok(());
    }
    let blocks = args.blocks(ctx.ranks);
    ctx.fork(1..=linked.len());
    for (slave, &k) in (1..).zip(&linked) {
        let link = ctx.link(k, 0)?;
        let (src, dst) = (
            peer_input(args, me, k, len),
            args.output.at(me, blocks[k].0, len),
        );
        let relayed = served_pieces(far, k, (0, len), es);
        let s = ctx.stream(slave);
        link.rx_ack(s);
        s.copy(src, dst);
        for (f, (off, l)) in relayed {
            s.copy(
                slot(k, f, len, (off, l)),
                args.output.at(me, blocks[f].0 + off, l),
            );
        }
        if answer {
            link.tx_data_signal(s);
        }
    }
    ctx.join(1..=linked.len());
    Ok(())
}
