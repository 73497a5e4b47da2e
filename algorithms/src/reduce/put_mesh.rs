//! Reduce put-mesh: every rank writes its input into a Scratch slot of the root, which
//! reduces them locally.
//!
//! The put-based twin of [`super::mesh`] for put-only links, where the root may not read
//! the peers' inputs. The root opens its slots (Ack to every rank), every rank writes its
//! input into slot `peer` of the root's Scratch and signals, and the root reduces its own
//! input with the `n - 1` slots into its output (see [`crate::templates::put`](mod@crate::templates::put)). The
//! slots cost the root `(n - 1)` times one iteration's bytes of scratch, so an iteration
//! takes at most `ccl_bytes / (n - 1)` bytes: every rank asks for the same cap so that
//! all iterate alike, and for the same scratch, which is addressed symmetrically. One synchronisation step: for small and medium messages. Links:
//! every rank to the root.

use crate::broadcast::mesh::star_peers;
use crate::broadcast::root_of;
use crate::templates::{await_puts, finish_puts, open_for_puts, put};
use oxccl_framework::platform::{Buf, Slice};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, LinkNeed, OpKind, PlanCtx, ResourceRequest,
};

/// The put-mesh Reduce executor.
pub struct PutMeshReduce;

oxccl_framework::register_executor! {
    name: "put-mesh",
    op: OpKind::Reduce,
    description: "every rank writes its input into the root's scratch, the root reduces locally (put-only links)",
    constraints: Constraints { links: LinkNeed::Put, ..Constraints::ANY },
    preference: 10,
    make: || Box::new(PutMeshReduce),
}

/// The most elements of one iteration: the root's `n - 1` slots fit in one CCL buffer's
/// worth of scratch (at least one element each).
fn per_loop(ctx: &PlanCtx<'_>) -> usize {
    let slots = ctx.ranks.saturating_sub(1).max(1);
    (ctx.ccl_bytes / slots / ctx.op.dtype.size()).max(1)
}

/// The slot of `peer` in the root's scratch: peers in rank order, the root skipped.
fn slot(peer: usize, root: usize) -> usize {
    if peer < root {
        peer
    } else {
        peer - 1
    }
}

impl Executor for PutMeshReduce {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let root = root_of(ctx.op, "put-mesh")?;
        let count = per_loop(ctx);
        // Scratch is addressed symmetrically (a rank checks a slice of the root's scratch
        // against its own request), so every rank asks for the root's slots.
        let scratch_bytes = ctx
            .ranks
            .saturating_sub(1)
            .checked_mul(count)
            .and_then(|b| b.checked_mul(ctx.op.dtype.size()))
            .ok_or_else(|| Error::BadProgram {
                executor: "put-mesh".into(),
                rank: ctx.rank,
                reason: format!(
                    "{} scratch slots of {count} elements overflow a usize",
                    ctx.ranks - 1
                ),
            })?;
        Ok(ResourceRequest {
            scratch_bytes,
            max_count_per_loop: Some(count),
            ..star_peers(ctx, root)
        })
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let root = root_of(&args.op, "put-mesh")?;
        let (me, len) = (ctx.rank, args.op.count * args.op.dtype.size());
        if me != root {
            let slot = Slice::new(root, Buf::Scratch, slot(me, root) * len, len);
            let link = put(ctx, 0, root, &[(slot, args.input.at(me, 0, len))])?;
            finish_puts(ctx, 0, &[link]);
            return Ok(());
        }
        let peers: Vec<usize> = (0..ctx.ranks).filter(|&p| p != root).collect();
        if peers.is_empty() {
            args.copy_input_to_output(ctx);
            return Ok(());
        }
        let links = open_for_puts(ctx, 0, &peers)?;
        await_puts(ctx, 0, &links);
        let mut srcs = vec![args.input.at(me, 0, len)];
        srcs.extend((0..peers.len()).map(|s| Slice::new(me, Buf::Scratch, s * len, len)));
        let dst = args.output.at(me, 0, len);
        ctx.main()
            .reduce_to(srcs, vec![dst], args.op.dtype, args.op.op);
        Ok(())
    }
}
