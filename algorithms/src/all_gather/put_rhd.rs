//! AllGather put RHD: recursive doubling by puts, for put-only links.
//!
//! The schedule of [`rhd`](super::rhd) (non-powers of two fold pairwise first), each
//! exchange a put of the blocks a rank holds into its partner (see
//! [`put_rhd`](crate::templates::put_rhd)): straight into the partner's CclOut blocks when
//! staged, into a Scratch receive area of one block per rank when zero-copy (copied into
//! place by the receiver; an iteration is then capped at the CCL buffer over the ranks).
//! Its partners are fixed by rank, so it cannot route around a broken link: it declares
//! `full_mesh`, and a topology with a broken or missing link refuses it (`relay-mesh` and
//! the rings run there).

use super::place_own_block;
use crate::templates::{put_rhd_all_gather, rhd_links, PutRhd, PutRhdShape};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, LinkNeed, OpKind, Peers, PlanCtx,
    ResourceRequest,
};

/// The put RHD AllGather executor.
pub struct PutRhdAllGather;

const NAME: &str = "put-rhd";

oxccl_framework::register_executor! {
    name: NAME,
    op: OpKind::AllGather,
    description: "recursive doubling by puts into the partner's CclOut (staged) or Scratch (zero-copy); non-powers of two fold pairwise; runs over put-only links",
    constraints: Constraints {
        full_mesh: true,
        links: LinkNeed::Put,
        ..Constraints::ANY
    },
    preference: 5,
    make: || Box::new(PutRhdAllGather),
}

impl Executor for PutRhdAllGather {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let peers = rhd_links(ctx, NAME)?;
        let request = ResourceRequest::with_peers(Peers::List(peers));
        Ok(super::with_slot_scratch(ctx, request, ctx.ranks))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let n = ctx.ranks;
        let blocks = args.blocks(n);
        place_own_block(ctx, args, &blocks);
        if n == 1 {
            return Ok(());
        }
        let len = blocks[0].1;
        let shape = ctx.memo((len, args.block_stride), || {
            PutRhdShape::blocks(blocks, len)
        });
        let g = PutRhd::on_shape(&shape, args, !args.output.buf.is_user());
        put_rhd_all_gather(ctx, &g)
    }
}
