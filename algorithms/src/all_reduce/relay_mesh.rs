//! AllReduce relay-mesh: the mesh AllReduce on a mesh with broken links, the traffic of
//! every missing link spread over all the common neighbours of its two ends.
//!
//! Reduce-scatter then all-gather with every healthy neighbour at once, one slave stream
//! each ([`relay_mesh_reduce_scatter`], [`relay_mesh_all_gather`]). When `r` and `p` are
//! not linked, each of their `m` relays pre-reduces `1/m` of chunk `r` from its own input
//! and `p`'s into scratch, and `r` takes that piece's contribution of both from the
//! relay's scratch; in the all-gather `r` pulls `1/m` of chunk `p` from each relay's
//! output. No link carries more than `1 + 1/m` chunks per phase, so on `mesh8` with `0-1`
//! broken ranks 0 and 1 move `2(n-1)/n` of the data over their six links: the bound
//! `6 · 56 / (2 · 7/8) = 192` GB/s of algbw. On a healthy mesh there is nothing to relay
//! and it behaves like the mesh AllReduce. It refuses topologies where some pair of ranks
//! has no common neighbour. Small chunks use fewer relays, about `sqrt(chunk / 16 KiB)`
//! ([`relays_for`](crate::templates::relays_for)), since each relay costs a few tasks.
//!
//! Modelled on `mesh8` with `0-1` broken (`oxccl check`): 68 us at 1 KiB, 73.9 us at
//! 1 MiB, 189.8 GB/s algbw at 1 GiB (the bidir-ring plugin over 1,2,3,4,5,6,0,7: 94 us,
//! 110 us, 63.6 GB/s; `relay-mesh-single`: 68 us, 77.4 us, 89.1 GB/s).
//!
//! [`RelayMeshAllReduce::single`] is the same schedule restricted to one relay per missing
//! link (`relay-mesh-single`).

use crate::templates::{
    even_chunks, iteration_count_bound, relay_mesh_all_gather, relay_mesh_reduce_scatter,
    relay_mesh_resources, relay_scratch_bytes, RelayMeshParams, RelayPlan,
};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, PlanCtx, ResourceRequest,
};

/// The relayed mesh AllReduce, with at most `max_relays` relays per missing link.
pub struct RelayMeshAllReduce {
    name: &'static str,
    max_relays: Option<usize>,
}

impl RelayMeshAllReduce {
    /// Every common neighbour relays (`relay-mesh`).
    pub const fn all() -> Self {
        RelayMeshAllReduce {
            name: "relay-mesh",
            max_relays: None,
        }
    }

    /// The lowest common neighbour alone relays (`relay-mesh-single`).
    pub const fn single() -> Self {
        RelayMeshAllReduce {
            name: "relay-mesh-single",
            max_relays: Some(1),
        }
    }

    /// Each chunk's length for `count` elements of `es` bytes.
    fn chunk_lens(count: usize, ranks: usize, es: usize) -> Vec<usize> {
        even_chunks(count, ranks, es)
            .into_iter()
            .map(|c| c.1)
            .collect()
    }
}

oxccl_framework::register_executor! {
    name: "relay-mesh",
    op: OpKind::AllReduce,
    description: "mesh reduce-scatter + all-gather on a broken mesh, every missing link relayed through all common neighbours",
    constraints: Constraints::ANY,
    preference: 18,
    make: || Box::new(RelayMeshAllReduce::all()),
}

impl Executor for RelayMeshAllReduce {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let (op, es) = (OpKind::AllReduce, ctx.op.dtype.size());
        let plan = RelayPlan::new(ctx.topology, self.name, op, self.max_relays)?;
        let lens = Self::chunk_lens(iteration_count_bound(ctx, false), ctx.ranks, es);
        let scratch = relay_scratch_bytes(ctx.topology, self.name, op, self.max_relays, &lens, es)?;
        Ok(relay_mesh_resources(&plan, ctx.rank, scratch))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        if ctx.ranks == 1 {
            args.copy_input_to_output(ctx);
            return Ok(());
        }
        let op = &args.op;
        let chunks = even_chunks(op.count, ctx.ranks, op.dtype.size());
        let lens: Vec<usize> = chunks.iter().map(|c| c.1).collect();
        let plan = RelayPlan::for_chunks(
            ctx.topology,
            self.name,
            OpKind::AllReduce,
            self.max_relays,
            &lens,
        )?;
        let p = RelayMeshParams {
            plan: &plan,
            chunks: &chunks,
            out_chunks: &chunks,
            input: args.input,
            output: args.output,
            aliased: args.aliased,
            dtype: op.dtype,
            op: op.op,
        };
        relay_mesh_reduce_scatter(ctx, &p)?;
        relay_mesh_all_gather(ctx, &p)
    }
}
