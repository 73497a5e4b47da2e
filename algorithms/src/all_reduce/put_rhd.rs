//! AllReduce put RHD: recursive halving then doubling by puts, for put-only links.
//!
//! The schedule of [`rhd`](super::rhd) (non-powers of two fold pairwise first), each
//! exchange a put into the partner's Scratch receive area followed by a local reduce or
//! copy (see [`put_rhd`](crate::templates::put_rhd)); the doubling puts straight into the
//! partner's CclOut when staged. `2log2(p)` steps on a power of two, two more otherwise.
//! The receive area holds one iteration (capped at one CCL buffer, the staged loop's cap).
//! Its partners are fixed by rank, so it cannot route around a broken link: it declares
//! `full_mesh`, and a topology with a broken or missing link refuses it (`relay-mesh` and
//! the rings run there).

use crate::templates::{put_rhd_all_reduce, rhd_links, PutRhd, PutRhdShape};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, LinkNeed, OpKind, Peers, PlanCtx,
    ResourceRequest,
};

/// The put RHD AllReduce executor.
pub struct PutRhdAllReduce;

const NAME: &str = "put-rhd";

oxccl_framework::register_executor! {
    name: NAME,
    op: OpKind::AllReduce,
    description: "recursive halving then doubling by puts into the partner's Scratch, reduced locally; non-powers of two fold pairwise; runs over put-only links",
    constraints: Constraints {
        full_mesh: true,
        links: LinkNeed::Put,
        ..Constraints::ANY
    },
    preference: 5,
    make: || Box::new(PutRhdAllReduce),
}

impl Executor for PutRhdAllReduce {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let peers = rhd_links(ctx, NAME)?;
        let request = ResourceRequest::with_peers(Peers::List(peers));
        if ctx.ranks == 1 {
            return Ok(request);
        }
        Ok(super::with_chunk_slots(ctx, request, ctx.ranks))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        if ctx.ranks == 1 {
            args.copy_input_to_output(ctx);
            return Ok(());
        }
        let (n, count, es) = (ctx.ranks, args.op.count, args.op.dtype.size());
        let shape = ctx.memo((count, es), || PutRhdShape::even(n, count, es));
        let g = PutRhd::on_shape(&shape, args, !args.output.buf.is_user());
        put_rhd_all_reduce(ctx, &g)
    }
}
