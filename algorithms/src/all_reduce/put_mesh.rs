//! AllReduce put mesh: a put reduce-scatter round and a put all-gather round with every
//! peer, for put-only links and small messages.
//!
//! Rank `q` puts chunk `c` of its input into slot `q` of rank `c`'s Scratch and signals
//! (DataSignal); each rank reduces its chunk from its input and the `n - 1` slots, then
//! puts the result into every peer's CclOut chunk (staged) or a second set of Scratch
//! slots (zero-copy, copied into place) and signals (Ack). Two signal latencies in all,
//! like the pull mesh's, and no peer read; `2(n - 1)` puts of a chunk per rank. Needs
//! every pair of ranks linked. Between its phases and iterations no ready round is needed
//! (see [`put_mesh`](crate::templates::put_mesh)).

use crate::templates::{even_chunks, put_mesh_all_gather, put_mesh_reduce_scatter, PutMesh, Round};
use oxccl_framework::platform::{Buf, Rank};
use oxccl_framework::{
    BufRange, Constraints, Error, Executor, KernelArgs, KernelCtx, LinkNeed, Mode, OpKind, Peers,
    PlanCtx, ResourceRequest,
};

/// The put mesh AllReduce executor.
pub struct PutMeshAllReduce;

oxccl_framework::register_executor! {
    name: "put-mesh",
    op: OpKind::AllReduce,
    description: "every rank puts each chunk into its owner's Scratch slot, reduces its own locally, then puts the result to every peer; runs over put-only links",
    constraints: Constraints { full_mesh: true, links: LinkNeed::Put, ..Constraints::ANY },
    preference: 5,
    make: || Box::new(PutMeshAllReduce),
}

impl Executor for PutMeshAllReduce {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        // One slave stream per peer (see `put_mesh`).
        let request = ResourceRequest {
            slave_streams: ctx.ranks - 1,
            ..ResourceRequest::with_peers(Peers::All)
        };
        if ctx.ranks == 1 {
            return Ok(request);
        }
        // One slot per sender for the reduce-scatter; zero-copy, as many again for the
        // all-gather (staged, it puts into CclOut).
        let sets = if ctx.mode == Mode::Direct { 2 } else { 1 };
        Ok(super::with_chunk_slots(ctx, request, sets * ctx.ranks))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let (me, n) = (ctx.rank, ctx.ranks);
        if n == 1 {
            args.copy_input_to_output(ctx);
            return Ok(());
        }
        let op = &args.op;
        let chunks = even_chunks(op.count, n, op.dtype.size());
        let slot_len = chunks[0].1;
        let area = |set: usize| BufRange {
            buf: Buf::Scratch,
            offset: set * n * slot_len,
            len: n * slot_len,
        };
        let mesh = |set: usize, signal| PutMesh {
            channel: 0,
            slots: area(set),
            slot_len,
            ready: false,
            signal,
            dtype: op.dtype,
            op: op.op,
        };
        let input = |r: Rank, c: usize| args.input.at(r, chunks[c].0, chunks[c].1);
        let output = |r: Rank, c: usize| args.output.at(r, chunks[c].0, chunks[c].1);
        put_mesh_reduce_scatter(ctx, &mesh(0, Round::DataSignal), &input, output(me, me))?;
        put_mesh_all_gather(
            ctx,
            &mesh(1, Round::Ack),
            &output,
            !args.output.buf.is_user(),
        )
    }
}
