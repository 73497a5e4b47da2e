//! AllReduce one-shot: every rank reduces the whole vector from every rank's input.
//!
//! One handshake round and one n-way Reduce (zero-copy, the device's exit fence keeps a
//! rank's call from returning while a peer still reads its input): the fewest
//! synchronisation steps of any AllReduce, all on the main stream, at the price of every
//! rank reading all `n` inputs in full. That trade wins for small messages, where the
//! steps cost more than the bytes; the built-in selector takes it up to 64 KiB.
//!
//! In place (input and output are one buffer, so a peer may still be reading the input
//! this rank would overwrite) the result goes to scratch first, and a second round
//! (DataSignal: "I am done reading your input") precedes the copy to the output. Staged,
//! the same round ends every iteration but the last, because the next one overwrites
//! CclIn at once; after the last, the next call's stage-in waits for every peer to have
//! finished this one (the entry fence), so a small staged call is one round, not two.
//! Iterations alternate link channels, so two iterations' ready rounds never post the same
//! notify back to back.

use crate::templates::{all_peers_round, Round};
use oxccl_framework::platform::Buf;
use oxccl_framework::{
    BufRange, Constraints, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, Peers, PlanCtx,
    ResourceRequest,
};

/// The one-shot AllReduce executor.
pub struct OneShotAllReduce;

/// Scratch per rank for in-place calls, which bounds their elements per loop iteration.
const SCRATCH_BYTES: usize = 1 << 20;

oxccl_framework::register_executor! {
    name: "one-shot",
    op: OpKind::AllReduce,
    description: "every rank reduces the full vector from all peers' inputs in one step (small messages)",
    constraints: Constraints { full_mesh: true, max_bytes: Some(64 << 10), ..Constraints::ANY },
    preference: 30,
    make: || Box::new(OneShotAllReduce),
}

impl Executor for OneShotAllReduce {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let peers = ResourceRequest::with_peers(Peers::All);
        // Only an in-place zero-copy call needs the scratch detour, and only it is capped.
        if !(ctx.in_place && ctx.mode == Mode::Direct) {
            return Ok(peers);
        }
        Ok(ResourceRequest {
            scratch_bytes: SCRATCH_BYTES,
            max_count_per_loop: Some(SCRATCH_BYTES / ctx.op.dtype.size()),
            ..peers
        })
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let op = &args.op;
        let (me, len) = (ctx.rank, op.count * op.dtype.size());
        let channel = args.iteration % 2;
        all_peers_round(ctx, channel, Round::Ack)?;
        let srcs = (0..ctx.ranks).map(|r| args.input.at(r, 0, len)).collect();
        let target = if args.aliased {
            BufRange {
                buf: Buf::Scratch,
                offset: 0,
                len,
            }
        } else {
            args.output
        };
        ctx.main()
            .reduce(srcs, target.at(me, 0, len), op.dtype, op.op);
        if args.aliased || (args.mode == Mode::Staged && !args.last) {
            all_peers_round(ctx, channel, Round::DataSignal)?;
        }
        if args.aliased {
            ctx.main()
                .copy(target.at(me, 0, len), args.output.at(me, 0, len));
        }
        Ok(())
    }
}
