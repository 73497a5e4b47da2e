//! Gather tree: a binomial tree towards the root, each rank collecting its subtree's
//! blocks.
//!
//! In MPICH's numbering ([`crate::templates::BinomialTree`]) a subtree is a
//! contiguous range of virtual ranks, so an inner rank collects its subtree's blocks
//! packed in scratch, in virtual order, its own input first. It takes its children one
//! after the other, smallest subtree first: waits for the child's Ack ("my subtree is
//! ready"), pulls the child's blocks (a leaf's input, an inner child's scratch in one
//! piece), answers DataSignal ("done reading"); then it tells its parent its subtree is
//! ready and waits for the parent's answer. The root pulls each child's blocks block by
//! block into its output. Cost `⌈log2 p⌉α + (p−1)/p·nβ`, `n` the root's whole output. It
//! needs only the `p − 1` links of the tree.
//!
//! Scratch holds at most the largest subtree under the root; the request caps the
//! elements per loop iteration so that it stays within
//! [`SCRATCH_BYTES`](crate::scatter::tree::SCRATCH_BYTES). Every rank but the root waits
//! for its parent's DataSignal before its iteration ends, so nobody reads its buffers
//! any more and the staged loop may reuse them.

use super::{peer_input, root_places_its_block};
use crate::broadcast::root_of;
use crate::scatter::tree::{scratch, subtree_scratch};
use crate::templates::BinomialTree;
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, PlanCtx, ResourceRequest,
};

/// The binomial-tree Gather executor.
pub struct TreeGather;

oxccl_framework::register_executor! {
    name: "tree",
    op: OpKind::Gather,
    description: "binomial tree towards the root, each rank collecting its subtree's blocks",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 10,
    make: || Box::new(TreeGather),
}

impl Executor for TreeGather {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let tree = BinomialTree::new(ctx.ranks, root_of(ctx.op, "tree")?);
        Ok(subtree_scratch(ctx, &tree))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let root = root_of(&args.op, "tree")?;
        let tree = BinomialTree::new(ctx.ranks, root);
        let me = ctx.rank;
        let blocks = args.blocks(ctx.ranks);
        let len = args.op.count * args.op.dtype.size();
        let mine = tree.subtree(me);
        let hold = scratch(mine.len(), len);
        let children = tree.children(me);
        if me == root {
            root_places_its_block(ctx, args);
        } else if !children.is_empty() {
            ctx.main()
                .copy(args.input.at(me, 0, len), hold.at(me, 0, len));
        }
        for child in children {
            let link = ctx.link(child, 0)?;
            let theirs = tree.subtree(child);
            // A leaf's block is its input; an inner child's blocks are in its scratch.
            let src = |i: usize| match theirs.len() {
                1 => peer_input(args, me, child, len),
                _ => scratch(theirs.len(), len).at(child, i * len, len),
            };
            link.rx_ack(ctx.main());
            if me == root {
                for (i, v) in theirs.clone().enumerate() {
                    let (off, _) = blocks[tree.real_rank(v)];
                    ctx.main().copy(src(i), args.output.at(me, off, len));
                }
            } else {
                let all = theirs.len() * len;
                let from = match theirs.len() {
                    1 => peer_input(args, me, child, len),
                    _ => scratch(theirs.len(), len).at(child, 0, all),
                };
                let at = (theirs.start - mine.start) * len;
                ctx.main().copy(from, hold.at(me, at, all));
            }
            link.tx_data_signal(ctx.main());
        }
        if let Some(parent) = tree.parent(me) {
            let link = ctx.link(parent, 0)?;
            link.tx_ack(ctx.main());
            link.rx_data_signal(ctx.main());
        }
        Ok(())
    }
}
