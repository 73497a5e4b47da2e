//! AllReduce hierarchical, pipelined: the levels of [`hier-ring`](super::hier_levels)
//! overlapped over segments of the data.
//!
//! The iteration is cut into segments; each runs the three phases of the hierarchical
//! AllReduce (level-0 reduce-scatter, level-1 ring AllReduce across servers, level-0
//! all-gather). Level 0 runs on the main stream (its all-gather pulls on slave streams 2
//! and up, one per server peer), level 1 on slave stream 1, so that
//! segment `i`'s inter-server phase overlaps segment `i + 1`'s intra-server
//! reduce-scatter and segment `i − 1`'s all-gather:
//!
//! ```text
//! main:  RS0 fork RS1 join fork AG0 RS2 join fork AG1 ... join AG(K-1)
//! slave:      L1(0)           L1(1)           L1(2) ...
//! ```
//!
//! The main stream joins segment `i`'s level 1 before it forks segment `i + 1`'s, so a
//! fork or join notify is never posted twice before its wait. With `K` segments the
//! time approaches `max(level 0, level 1)` instead of their sum, for `K − 1` extra
//! synchronisation rounds of each level: worth it only for large messages, so segments
//! are at least [`MIN_SEGMENT_BYTES`] and at most [`MAX_SEGMENTS`].
//!
//! Level-0 rounds alternate link channels by segment (two reduce-scatter Ack rounds may
//! follow each other); the staged loop's closing Ack round takes the iteration's channel,
//! which the next iteration's first round does not use. Level-1 rings end every step with
//! a full handshake and use their own links, so they need no care.

use super::hier_levels::{level0_reduce_scatter, level1_all_reduce};
use crate::templates::{
    even_chunks, server_all_gather, server_round, server_slaves, Level1, Round, Servers,
};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, Peers, PlanCtx,
    ResourceRequest,
};

/// The pipelined hierarchical AllReduce executor.
pub struct HierPipelinedAllReduce;

/// The smallest segment worth a pipeline stage.
pub const MIN_SEGMENT_BYTES: usize = 32 << 20;
/// The most segments one iteration is cut into.
pub const MAX_SEGMENTS: usize = 8;

oxccl_framework::register_executor! {
    name: "hier-pipelined",
    op: OpKind::AllReduce,
    description: "hierarchical AllReduce over segments, level 1 of one segment on a slave stream while level 0 of the next runs",
    constraints: Constraints {
        full_mesh: true,
        min_servers: 2,
        min_bytes: Some(64 << 20),
        ..Constraints::ANY
    },
    preference: 27,
    make: || Box::new(HierPipelinedAllReduce),
}

impl Executor for HierPipelinedAllReduce {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let servers = Servers::of(ctx.topology);
        Ok(ResourceRequest {
            slave_streams: 1 + server_slaves(&servers, ctx.rank),
            ..ResourceRequest::with_peers(Peers::List(servers.peers(ctx.rank, Level1::Ring)))
        })
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        if ctx.ranks == 1 {
            args.copy_input_to_output(ctx);
            return Ok(());
        }
        let servers = Servers::of(ctx.topology);
        let es = args.op.dtype.size();
        let parts = (args.op.count * es / MIN_SEGMENT_BYTES).clamp(1, MAX_SEGMENTS);
        let segments: Vec<Vec<(usize, usize)>> = even_chunks(args.op.count, parts, es)
            .into_iter()
            .map(|(base, len)| {
                even_chunks(len / es, servers.widest(), es)
                    .into_iter()
                    .map(|(off, l)| (base + off, l))
                    .collect()
            })
            .collect();
        let channel = |i: usize| (i + args.iteration) % 2;
        let me = ctx.rank;
        for (i, chunks) in segments.iter().enumerate() {
            level0_reduce_scatter(ctx, args, &servers, chunks, channel(i))?;
            if i > 0 {
                ctx.join(1..=1);
            }
            ctx.fork(1..=1);
            for c in servers.owned_chunks(me) {
                let group = servers.group(c);
                level1_all_reduce(ctx, args, Level1::Ring, &group, chunks[c], (1, channel(0)))?;
            }
            if i > 0 {
                let prev = &segments[i - 1];
                server_all_gather(ctx, &servers, args.output, prev, (channel(i - 1), 2))?;
            }
        }
        ctx.join(1..=1);
        let last = segments.len() - 1;
        server_all_gather(
            ctx,
            &servers,
            args.output,
            &segments[last],
            (channel(last), 2),
        )?;
        if args.mode == Mode::Staged {
            server_round(ctx, &servers, channel(0), Round::Ack)?;
        }
        Ok(())
    }
}
