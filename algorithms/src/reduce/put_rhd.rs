//! Reduce put-rhd: a put RHD reduce-scatter, then every rank puts its reduced chunk into
//! the root's output.
//!
//! The put-based Reduce for clusters, over put-only links. [`put_mesh`](super::put_mesh)
//! sends every input whole to the root, which takes `n - 1` slots of scratch per
//! iteration (so an iteration holds a CCL buffer over `n - 1`) and `n - 1` inputs
//! through the root's link; on 1024 ranks a 16 MiB Reduce is thousands of iterations.
//! Here the reduction is spread: a put RHD reduce-scatter
//! ([`put_rhd_reduce_scatter`](crate::templates::put_rhd)) leaves chunk `r` of the sum on
//! rank `r` (in its partials: see [`Partials`]; zero-copy after the receive area), then
//! the root opens its output to every rank (Ack), each puts its chunk where it belongs and
//! signals, and the root waits for all (see [`crate::templates::put`](mod@crate::templates::put)).
//! The root receives `(n - 1)/n` of the vector once; an iteration holds a whole CCL
//! buffer. Links: the RHD partners and the root. It cannot route around a broken one: it
//! declares `full_mesh`, and a topology with a broken or missing link refuses it
//! (`relay-mesh` and `ring` run there).

use super::{with_partials, Partials};
use crate::broadcast::root_of;
use crate::templates::{
    await_puts, finish_puts, open_for_puts, put, put_rhd_reduce_scatter, require_links, rhd_peers,
    PutRhd, PutRhdShape, RingTargets,
};
use oxccl_framework::{
    BufRange, Constraints, Error, Executor, KernelArgs, KernelCtx, LinkNeed, OpKind, Peers,
    PlanCtx, ResourceRequest,
};

/// The put RHD Reduce executor.
pub struct PutRhdReduce;

const NAME: &str = "put-rhd";

oxccl_framework::register_executor! {
    name: NAME,
    op: OpKind::Reduce,
    description: "put RHD reduce-scatter, then every rank puts its reduced chunk into the root's output; runs over put-only links",
    constraints: Constraints {
        full_mesh: true,
        links: LinkNeed::Put,
        ..Constraints::ANY
    },
    preference: 5,
    make: || Box::new(PutRhdReduce),
}

impl Executor for PutRhdReduce {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let root = root_of(ctx.op, NAME)?;
        let order: Vec<usize> = (0..ctx.ranks).collect();
        // The root hears from every rank (its RHD partners among them); the others from
        // their partners, and put to the root.
        let peers: Vec<usize> = match ctx.rank == root {
            true => (0..ctx.ranks).filter(|&p| p != root).collect(),
            false => {
                let mut peers = rhd_peers(&order, ctx.rank);
                peers.push(root);
                peers.sort_unstable();
                peers.dedup();
                peers
            }
        };
        let peers = require_links(ctx.topology, NAME, ctx.rank, peers)?;
        let request = ResourceRequest::with_peers(Peers::List(peers));
        if ctx.ranks == 1 {
            return Ok(request);
        }
        // The receive area: one iteration, capped at one CCL buffer; then the partials.
        let request = crate::all_reduce::with_chunk_slots(ctx, request, ctx.ranks);
        Ok(with_partials(ctx, request))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let root = root_of(&args.op, NAME)?;
        let (n, me) = (ctx.ranks, ctx.rank);
        if n == 1 {
            args.copy_input_to_output(ctx);
            return Ok(());
        }
        let (count, es) = (args.op.count, args.op.dtype.size());
        let shape = ctx.memo((count, es), || PutRhdShape::even(n, count, es));
        let g = PutRhd::on_shape(&shape, args, false);
        let partials = Partials::new(args, root, shape.recv_bytes()).of(me);
        let targets = RingTargets {
            partials,
            partial_chunks: &shape.chunks,
            result: None,
        };
        put_rhd_reduce_scatter(ctx, &g, &targets)?;
        // A put may not write a user buffer: zero-copy, the chunks land in the root's
        // receive area (free again: the root consumed it before it opens for the puts)
        // and the root copies them out.
        let landing = match args.output.buf.is_user() {
            true => g.recv,
            false => args.output,
        };
        if me == root {
            let peers: Vec<usize> = (0..n).filter(|&p| p != root).collect();
            let links = open_for_puts(ctx, 0, &peers)?;
            await_puts(ctx, 0, &links);
            if landing != args.output {
                copy_out_but(ctx, &shape.chunks, root, landing, args.output);
            }
            return Ok(());
        }
        let (offset, len) = shape.chunks[me];
        let mine = partials.at(me, offset, len);
        let link = put(ctx, 0, root, &[(landing.at(root, offset, len), mine)])?;
        finish_puts(ctx, 0, &[link]);
        Ok(())
    }
}

/// Copy every chunk but `own` from `from` to `to` on this rank: the chunks before it,
/// then those after it (the chunks lie one after another).
fn copy_out_but(
    ctx: &mut KernelCtx<'_>,
    chunks: &[(usize, usize)],
    own: usize,
    from: BufRange,
    to: BufRange,
) {
    let me = ctx.rank;
    let start = chunks[own].0;
    let end = chunks[own].0 + chunks[own].1;
    let total = chunks.last().map_or(0, |&(offset, len)| offset + len);
    for (offset, len) in [(0, start), (end, total - end)] {
        ctx.main()
            .copy(from.at(me, offset, len), to.at(me, offset, len));
    }
}
