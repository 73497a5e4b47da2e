//! Scatter tree: a binomial tree from the root, each rank forwarding its subtree's blocks.
//!
//! In MPICH's numbering ([`crate::templates::BinomialTree`]) a subtree is a
//! contiguous range of virtual ranks, so a rank keeps its whole subtree's blocks packed in
//! scratch, in virtual order, its own first. It waits for its parent's Ack, pulls its
//! subtree's blocks (from the root's input block by block, or in one piece from the
//! parent's scratch), answers DataSignal ("done reading"), copies its own block to its
//! output and serves its children one after the other, largest subtree first. A leaf
//! pulls its one block straight into its output. Cost `⌈log2 p⌉α + (p−1)/p·nβ`, `n` the
//! root's whole input: the latency of a tree at the bandwidth of a mesh. It needs only
//! the `p − 1` links of the tree.
//!
//! Scratch holds at most the largest subtree under the root; the request caps the
//! elements per loop iteration so that it stays within [`SCRATCH_BYTES`]. Every rank
//! waits for its children's DataSignal before its iteration ends, so its scratch and
//! buffers are free when the next iteration starts.

use super::root_keeps_its_block;
use crate::broadcast::root_of;
use crate::templates::BinomialTree;
use oxccl_framework::platform::Buf;
use oxccl_framework::{
    BufRange, Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, Peers, PlanCtx,
    ResourceRequest,
};

/// The binomial-tree Scatter executor.
pub struct TreeScatter;

/// Scratch per rank, which bounds the elements per loop iteration.
pub const SCRATCH_BYTES: usize = 1 << 20;

oxccl_framework::register_executor! {
    name: "tree",
    op: OpKind::Scatter,
    description: "binomial tree from the root, each rank forwarding its subtree's blocks",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 10,
    make: || Box::new(TreeScatter),
}

/// The scratch request of a tree scatter or gather: room for the largest subtree below
/// the root (only inner ranks use it), the same on every rank.
pub(crate) fn subtree_scratch(ctx: &PlanCtx<'_>, tree: &BinomialTree) -> ResourceRequest {
    let peers = ResourceRequest::with_peers(Peers::List(tree.neighbours(ctx.rank)));
    let blocks = tree.largest_child_subtree();
    if blocks < 2 {
        return peers;
    }
    ResourceRequest {
        scratch_bytes: SCRATCH_BYTES,
        max_count_per_loop: Some((SCRATCH_BYTES / (blocks * ctx.op.dtype.size())).max(1)),
        ..peers
    }
}

/// The scratch range holding a subtree of `blocks` blocks of `len` bytes.
pub(crate) fn scratch(blocks: usize, len: usize) -> BufRange {
    BufRange {
        buf: Buf::Scratch,
        offset: 0,
        len: blocks * len,
    }
}

impl Executor for TreeScatter {
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
        match tree.parent(me) {
            None => root_keeps_its_block(ctx, args),
            Some(parent) => {
                let link = ctx.link(parent, 0)?;
                let leaf = mine.len() == 1;
                // Where each pulled block goes: the output for a leaf, else scratch.
                let dst = |i: usize| match leaf {
                    true => args.output.at(me, 0, len),
                    false => hold.at(me, i * len, len),
                };
                link.rx_ack(ctx.main());
                if parent == root {
                    for (i, v) in mine.clone().enumerate() {
                        let (off, _) = blocks[tree.real_rank(v)];
                        ctx.main().copy(args.input.at(root, off, len), dst(i));
                    }
                } else {
                    let from = tree.subtree(parent).start;
                    let all = mine.len() * len;
                    let src = scratch(tree.subtree(parent).len(), len).at(
                        parent,
                        (mine.start - from) * len,
                        all,
                    );
                    let to = match leaf {
                        true => args.output.at(me, 0, len),
                        false => hold.at(me, 0, all),
                    };
                    ctx.main().copy(src, to);
                }
                link.tx_data_signal(ctx.main());
                if !leaf {
                    ctx.main()
                        .copy(hold.at(me, 0, len), args.output.at(me, 0, len));
                }
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
