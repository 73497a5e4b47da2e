//! AllGatherV relay-mesh: the mesh AllGatherV for topologies with broken links.
//!
//! Every rank is the root of its own block. A round has two phases:
//! 1. direct: with every linked peer, on the peer's slave stream, "my block is ready"
//!    both ways (DataSignal, channel 0), then the peer's block is pulled, as in
//!    [`mesh`](super::mesh);
//! 2. relayed: a rank relays, for every pair `(s, d)` without a link of which it is a
//!    common neighbour, its piece of block `s` ([`relayed_pieces`](crate::templates::relay_rooted::relayed_pieces)), which it pulled in
//!    phase 1. Once phase 1 is done it tells each such `d` (Ack, channel 1; one signal per
//!    destination whatever the number of blocks), and `d` pulls the pieces out of the
//!    relay's buffer on the relay's slave stream ([`relayed_all_gather`]).
//!
//! Zero-copy, one round runs on the outputs. Staged, the blocks move in rounds through
//! CclOut slots as in [`mesh`](super::mesh): the own piece into the own slot, the two
//! phases on the slots, the slots out to the output, and an Ack round with every linked
//! peer ("done reading your CclOut") before the slots are refilled. After the last round
//! no task says it: the device's entry fence holds the rank's own next call until the
//! linked peers that read its slots finished this one, but (staged, no exit fence) not a
//! third rank linked to it and not to such a reader, should the next executor write into
//! the rank's CclOut (a put executor); the analyzer's sequence matrix has no broken-link
//! shape, so that case is not proved. Signals on a link
//! alternate DataSignal (channel 0), Ack (channel 1) and Ack (channel 0), each consumed
//! before it is posted again. Cost per round: `α + bβ` then `α + f·b/m·β` for blocks of
//! `b` and `f` far blocks relayed over `m` relays. On a healthy mesh it is the mesh
//! AllGatherV. It needs a route through at most one relay between every pair of ranks.

use super::gather_v_blocks;
use crate::templates::relay_rooted::{linked_peers, peers_round, relayed_all_gather};
use crate::templates::{require_routes, Round};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, Peers, PlanCtx, ResourceRequest,
};

/// The relaying mesh AllGatherV executor.
pub struct RelayMeshAllGatherV;

const NAME: &str = "relay-mesh";
const KIND: OpKind = OpKind::AllGatherV;

oxccl_framework::register_executor! {
    name: NAME,
    op: KIND,
    description: "mesh AllGatherV; blocks between unlinked ranks travel in pieces through every common neighbour",
    constraints: Constraints::ANY,
    preference: 15,
    make: || Box::new(RelayMeshAllGatherV),
}

impl Executor for RelayMeshAllGatherV {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let linked = linked_peers(ctx.topology, ctx.rank);
        require_routes(ctx.topology, NAME, KIND, None)?;
        Ok(ResourceRequest {
            slave_streams: ctx.ranks - 1,
            ..ResourceRequest::with_peers(Peers::List(linked))
        })
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let es = args.op.dtype.size();
        let linked = linked_peers(ctx.topology, ctx.rank);
        gather_v_blocks(
            ctx,
            args,
            NAME,
            |ctx, buffer, chunks| relayed_all_gather(ctx, buffer, chunks, es, NAME, KIND),
            |ctx, last| match last {
                true => Ok(()),
                false => peers_round(ctx, &linked, 0, Round::Ack),
            },
        )
    }
}
