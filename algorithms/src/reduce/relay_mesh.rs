//! Reduce relay-mesh: the mesh reduce for topologies with broken links.
//!
//! The mirror of the relaying broadcast. A *far* rank (no link to the root) tells its
//! relays, the common healthy neighbours of the root and it, that its input is ready; each
//! relay pre-reduces its piece of every far rank it serves with its own input into its
//! scratch ([`relay_pre_reduce`]) and then tells the root it is ready. The root reduces its
//! range segment by segment ([`root_reduce`]): its own input, every linked rank's input and,
//! where a relay pre-reduced, that relay's scratch instead. The root's links carry one
//! vector each, as in [`mesh`](super::mesh); a relay link carries `1/m` of a far rank's.
//! Cost `2α + nβ + n/m·β` plus the reductions. On a healthy mesh it is the mesh reduce.
//!
//! Every reader answers "done reading" (DataSignal) and the rank read from waits for the
//! answer before its iteration ends, so staged inputs and the relays' scratch may be
//! refilled. The scratch holds one iteration, so zero-copy runs in iterations of at most
//! a CCL buffer where there are far ranks; without far ranks zero-copy runs one iteration
//! without the root's answer: only user buffers are read, and the device's exit fence
//! returns a call only after every granted peer finished it. It needs a route through at
//! most one relay between every pair of ranks.

use crate::broadcast::root_of;
use crate::templates::relay_rooted::{
    far_ranks, linked_peers, relay_pre_reduce, root_reduce, segments, star_peers, FarRank,
    ReduceSides,
};
use oxccl_framework::platform::{Buf, Slice};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, Peers, PlanCtx,
    ResourceRequest,
};

/// The relaying mesh Reduce executor.
pub struct RelayMeshReduce;

const NAME: &str = "relay-mesh";
const KIND: OpKind = OpKind::Reduce;

oxccl_framework::register_executor! {
    name: NAME,
    op: KIND,
    description: "mesh reduce; ranks without a link to the root are pre-reduced by every common neighbour",
    constraints: Constraints::ANY,
    preference: 15,
    make: || Box::new(RelayMeshReduce),
}

impl Executor for RelayMeshReduce {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let root = root_of(ctx.op, NAME)?;
        let far = far_ranks(ctx.topology, root, NAME, KIND)?;
        let peers = star_peers(ctx.topology, root, &far, ctx.rank);
        let request = ResourceRequest::with_peers(Peers::List(peers));
        if far.is_empty() {
            return Ok(request);
        }
        let per_loop = (ctx.ccl_bytes / ctx.op.dtype.size()).max(1);
        Ok(ResourceRequest {
            scratch_bytes: per_loop * ctx.op.dtype.size(),
            max_count_per_loop: Some(per_loop),
            ..request
        })
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let root = root_of(&args.op, NAME)?;
        let far = far_ranks(ctx.topology, root, NAME, KIND)?;
        let me = ctx.rank;
        if ctx.ranks == 1 {
            args.copy_input_to_output(ctx);
            return Ok(());
        }
        if let Some(f) = far.iter().find(|f| f.rank == me) {
            return far_side(ctx, f);
        }
        let len = args.op.count * args.op.dtype.size();
        let input = |r, off, l| args.input.at(r, off, l);
        let scratch = |r, off, l| Slice::new(r, Buf::Scratch, off, l);
        let output = |off, l| args.output.at(me, off, l);
        let sides = ReduceSides {
            input: &input,
            scratch: &scratch,
            dtype: args.op.dtype,
            op: args.op.op,
        };
        let segs = segments(&far, (0, len), args.op.dtype.size());
        // Zero-copy without far ranks runs one iteration: the exit fence releases.
        let answer = args.mode == Mode::Staged || !far.is_empty();
        if me == root {
            let linked = linked_peers(ctx.topology, me);
            let links = linked
                .iter()
                .map(|&p| ctx.link(p, 0))
                .collect::<Result<Vec<_>, _>>()?;
            links.iter().for_each(|l| l.rx_ack(ctx.main()));
            root_reduce(ctx.main(), me, &linked, &segs, &sides, &output);
            if answer {
                links.iter().for_each(|l| l.tx_data_signal(ctx.main()));
            }
            return Ok(());
        }
        linked_side(ctx, root, &far, answer, |ctx| {
            relay_pre_reduce(ctx.main(), me, &segs, &sides);
        })
    }
}

/// A far rank: "my input is ready" to every relay, then wait until all have read it.
fn far_side(ctx: &mut KernelCtx<'_>, far: &FarRank) -> Result<(), Error> {
    let links = far
        .relays
        .iter()
        .map(|&k| ctx.link(k, 0))
        .collect::<Result<Vec<_>, _>>()?;
    links.iter().for_each(|l| l.tx_ack(ctx.main()));
    links.iter().for_each(|l| l.rx_data_signal(ctx.main()));
    Ok(())
}

/// A linked rank: wait for the far ranks it serves, pre-reduce (`pre_reduce`), release
/// them, then offer its input and scratch to the root until the root has read them.
fn linked_side(
    ctx: &mut KernelCtx<'_>,
    root: usize,
    far: &[FarRank],
    answer: bool,
    pre_reduce: impl FnOnce(&mut KernelCtx<'_>),
) -> Result<(), Error> {
    let me = ctx.rank;
    let down = far
        .iter()
        .filter(|f| f.relays.contains(&me))
        .map(|f| ctx.link(f.rank, 0))
        .collect::<Result<Vec<_>, _>>()?;
    let up = ctx.link(root, 0)?;
    down.iter().for_each(|l| l.rx_ack(ctx.main()));
    pre_reduce(ctx);
    down.iter().for_each(|l| l.tx_data_signal(ctx.main()));
    up.tx_ack(ctx.main());
    if answer {
        up.rx_data_signal(ctx.main());
    }
    Ok(())
}
