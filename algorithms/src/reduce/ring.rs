//! Reduce ring: a pipelined chain towards the root along a ring of healthy links.
//!
//! The chain of [`RingBroadcast`](crate::broadcast::ring::RingBroadcast), run backwards:
//! the last rank of the chain offers its input, every other rank reduces its successor's
//! partial chunk with its own input into its partials (the root's output holds the
//! result; see [`Partials`]), chunk by chunk, as soon as the successor has it. Cost with
//! `c` chunks `(p − 2 + c)(α + n/c·(β + γ))`: close to `n(β + γ)` for large messages. It
//! needs only the links between chain neighbours.
//!
//! Per chunk a successor posts "chunk `k` is ready" and its predecessor answers "done
//! reading chunk `k`", alternating Ack and DataSignal by the chunk's parity; a rank waits
//! for the answer to chunk `k − 2` before it announces chunk `k`, and for the open
//! answers before its iteration ends.

use super::{with_partials, Partials};
use crate::broadcast::ring::{chain_peers, pipeline_chunks};
use crate::broadcast::{chain_from_root, chain_neighbours, root_of, rx_chunk, tx_chunk};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, PlanCtx, ResourceRequest,
};

/// The pipelined-chain Reduce executor.
pub struct RingReduce;

oxccl_framework::register_executor! {
    name: "ring",
    op: OpKind::Reduce,
    description: "pipelined chain towards the root along a ring of healthy links (large messages)",
    constraints: Constraints::ANY,
    preference: 20,
    make: || Box::new(RingReduce),
}

impl Executor for RingReduce {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let root = root_of(ctx.op, "ring")?;
        let chain = chain_from_root(ctx.topology, root, "ring", OpKind::Reduce)?;
        Ok(with_partials(ctx, chain_peers(&chain, ctx.rank)))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let root = root_of(&args.op, "ring")?;
        let chain = chain_from_root(ctx.topology, root, "ring", OpKind::Reduce)?;
        let (pred, succ) = chain_neighbours(&chain, ctx.rank);
        // Data flows from the end of the chain to the root: the upstream rank is the
        // chain successor.
        let up = succ.map(|s| ctx.link(s, 0)).transpose()?;
        let down = pred.map(|p| ctx.link(p, 0)).transpose()?;
        let last = chain.last().copied();
        let (me, op) = (ctx.rank, &args.op);
        if up.is_none() && down.is_none() {
            // A single rank: its input is the result.
            args.copy_input_to_output(ctx);
            return Ok(());
        }
        let partials = Partials::new(args, root, 0);
        let chunks = pipeline_chunks(op.count, op.dtype.size());
        for (k, &(off, len)) in chunks.iter().enumerate() {
            if let Some(up) = &up {
                let theirs = match Some(up.remote) == last {
                    true => args.input,
                    false => partials.of(up.remote),
                };
                let srcs = vec![theirs.at(up.remote, off, len), args.input.at(me, off, len)];
                rx_chunk(up, ctx.main(), k);
                let dst = partials.of(me).at(me, off, len);
                ctx.main().reduce(srcs, dst, op.dtype, op.op);
                tx_chunk(up, ctx.main(), k);
            }
            if let Some(down) = &down {
                if k >= 2 {
                    rx_chunk(down, ctx.main(), k - 2);
                }
                tx_chunk(down, ctx.main(), k);
            }
        }
        if let Some(down) = &down {
            for k in chunks.len().saturating_sub(2)..chunks.len() {
                rx_chunk(down, ctx.main(), k);
            }
        }
        Ok(())
    }
}
