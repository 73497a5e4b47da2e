//! Broadcast tree: a binomial tree rooted at the root, `ceil(log2 p)` rounds.
//!
//! Every rank but the root waits for its parent's Ack ("the data is ready in my buffer"),
//! pulls the whole vector from it (the root's input, another rank's output) into its own
//! output and answers DataSignal ("done reading"). Then it serves its children one after
//! the other, largest subtree first, each with an Ack and a wait for its DataSignal: one
//! transfer per rank per round, as in MPICH's binomial broadcast
//! ([`crate::templates::BinomialTree`]). Cost `⌈log2 p⌉(α + nβ)`: few
//! steps, but every step carries the whole vector, so it suits small and medium messages.
//! It needs only the `p − 1` links of the tree, so it runs where a mesh cannot.
//!
//! Every rank waits for its children's DataSignal before its iteration ends, so nobody
//! reads its buffers any more and the staged loop may reuse them.

use super::{root_keeps_its_data, root_of};
use crate::templates::BinomialTree;
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, Peers, PlanCtx, ResourceRequest,
};

/// The binomial-tree Broadcast executor.
pub struct TreeBroadcast;

oxccl_framework::register_executor! {
    name: "tree",
    op: OpKind::Broadcast,
    description: "binomial tree from the root, log2(p) rounds of whole-vector pulls",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 10,
    make: || Box::new(TreeBroadcast),
}

impl Executor for TreeBroadcast {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let tree = BinomialTree::new(ctx.ranks, root_of(ctx.op, "tree")?);
        Ok(ResourceRequest::with_peers(Peers::List(
            tree.neighbours(ctx.rank),
        )))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let root = root_of(&args.op, "tree")?;
        let tree = BinomialTree::new(ctx.ranks, root);
        let (me, len) = (ctx.rank, args.op.count * args.op.dtype.size());
        match tree.parent(me) {
            None => root_keeps_its_data(ctx, args),
            Some(parent) => {
                let link = ctx.link(parent, 0)?;
                let from = if parent == root {
                    args.input
                } else {
                    args.output
                };
                let (src, dst) = (from.at(parent, 0, len), args.output.at(me, 0, len));
                link.rx_ack(ctx.main());
                ctx.main().copy(src, dst);
                link.tx_data_signal(ctx.main());
            }
        }
        for child in tree.children(me).into_iter().rev() {
            let link = ctx.link(child, 0)?;
            link.tx_ack(ctx.main());
            link.rx_data_signal(ctx.main());
        }
        Ok(())
    }
}
