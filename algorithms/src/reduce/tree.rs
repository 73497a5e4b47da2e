//! Reduce tree: a binomial tree towards the root, `ceil(log2 p)` rounds.
//!
//! Each rank waits until every child has its partial reduction ready (Ack), then reduces
//! its own input with the children's partials in one Reduce into its partials (a leaf's
//! partial is its input, an inner rank's where [`Partials`] says), answers every child
//! "done reading" (DataSignal), and tells its
//! parent its own partial is ready. The root's Reduce writes the result
//! ([`crate::templates::BinomialTree`], MPICH's numbering). Cost
//! `⌈log2 p⌉(α + nβ + nγ)`; it needs only the `p − 1` links of the tree.
//!
//! Every rank but the root waits for its parent's DataSignal before its iteration ends,
//! so nobody reads its buffers any more and the staged loop may reuse them.

use super::{with_partials, Partials};
use crate::broadcast::root_of;
use crate::templates::BinomialTree;
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, Peers, PlanCtx, ResourceRequest,
};

/// The binomial-tree Reduce executor.
pub struct TreeReduce;

oxccl_framework::register_executor! {
    name: "tree",
    op: OpKind::Reduce,
    description: "binomial tree towards the root, each rank reducing its children's partials",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 10,
    make: || Box::new(TreeReduce),
}

impl Executor for TreeReduce {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let tree = BinomialTree::new(ctx.ranks, root_of(ctx.op, "tree")?);
        let request = ResourceRequest::with_peers(Peers::List(tree.neighbours(ctx.rank)));
        Ok(with_partials(ctx, request))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let root = root_of(&args.op, "tree")?;
        let tree = BinomialTree::new(ctx.ranks, root);
        let partials = Partials::new(args, root, 0);
        let op = &args.op;
        let (me, len) = (ctx.rank, op.count * op.dtype.size());
        if ctx.ranks == 1 {
            args.copy_input_to_output(ctx);
            return Ok(());
        }
        let children = tree.children(me);
        let links = children
            .iter()
            .map(|&c| ctx.link(c, 0))
            .collect::<Result<Vec<_>, _>>()?;
        links.iter().for_each(|l| l.rx_ack(ctx.main()));
        let mut srcs = vec![args.input.at(me, 0, len)];
        for &c in &children {
            let theirs = match tree.children(c).is_empty() {
                true => args.input,
                false => partials.of(c),
            };
            srcs.push(theirs.at(c, 0, len));
        }
        let dst = partials.of(me).at(me, 0, len);
        // A leaf's partial is its input: it has nothing to write.
        if !children.is_empty() {
            ctx.main().reduce(srcs, dst, op.dtype, op.op);
        }
        links.iter().for_each(|l| l.tx_data_signal(ctx.main()));
        if let Some(parent) = tree.parent(me) {
            let link = ctx.link(parent, 0)?;
            link.tx_ack(ctx.main());
            link.rx_data_signal(ctx.main());
        }
        Ok(())
    }
}
