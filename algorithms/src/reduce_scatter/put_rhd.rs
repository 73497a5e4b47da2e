//! ReduceScatter put RHD: recursive halving by puts, for put-only links.
//!
//! The schedule of [`rhd`](super::rhd) (non-powers of two fold pairwise first, and the
//! odd position of a pair gets its block back at the end), each exchange a put of the
//! partner's half into its Scratch receive area followed by a local reduce (see
//! [`put_rhd`](crate::templates::put_rhd)). Scratch holds a receive area and the partial
//! sums, one block per rank each; an iteration is capped at the CCL buffer over the ranks.
//! Its partners are fixed by rank, so it cannot route around a broken link: it declares
//! `full_mesh`, and a topology with a broken or missing link refuses it (`relay-mesh` and
//! the rings run there).

use crate::templates::{put_rhd_reduce_scatter, rhd_links, PutRhd, PutRhdShape, RingTargets};
use oxccl_framework::platform::Buf;
use oxccl_framework::{
    BufRange, Constraints, Error, Executor, KernelArgs, KernelCtx, LinkNeed, OpKind, Peers,
    PlanCtx, ResourceRequest,
};

/// The put RHD ReduceScatter executor.
pub struct PutRhdReduceScatter;

const NAME: &str = "put-rhd";

oxccl_framework::register_executor! {
    name: NAME,
    op: OpKind::ReduceScatter,
    description: "recursive halving by puts into the partner's Scratch, reduced locally; non-powers of two fold pairwise; runs over put-only links",
    constraints: Constraints {
        full_mesh: true,
        links: LinkNeed::Put,
        ..Constraints::ANY
    },
    preference: 5,
    make: || Box::new(PutRhdReduceScatter),
}

impl Executor for PutRhdReduceScatter {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let peers = rhd_links(ctx, NAME)?;
        let request = ResourceRequest::with_peers(Peers::List(peers));
        Ok(super::with_put_scratch(ctx, request, 2 * ctx.ranks))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let n = ctx.ranks;
        if n == 1 {
            args.copy_input_to_output(ctx);
            return Ok(());
        }
        let len = args.op.count * args.op.dtype.size();
        let shape = ctx.memo((len, args.block_stride), || {
            PutRhdShape::blocks(args.blocks(n), len)
        });
        let area = |i: usize| BufRange {
            buf: Buf::Scratch,
            offset: i * n * len,
            len: n * len,
        };
        let g = PutRhd::on_shape(&shape, args, false);
        let targets = RingTargets {
            partials: area(1),
            partial_chunks: &shape.recv_chunks,
            result: Some(args.output),
        };
        put_rhd_reduce_scatter(ctx, &g, &targets)
    }
}
