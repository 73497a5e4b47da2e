//! # oxccl-plugin-bidir-ring
//!
//! An example vendor plugin, built exactly as a third party would build one: it depends on
//! the public `oxccl` crate only, and registers one executor, `bidir-ring`, for AllReduce.
//!
//! The data is split in two halves. The first half runs a ring reduce-scatter and
//! all-gather clockwise over a given ring order on the main stream; the second half runs
//! the same counter-clockwise on a slave stream, on its own link channel. Both directions
//! of every link carry data at once, and the order can be chosen to avoid a broken link:
//! on 8 ranks with the 0–1 link cut, `1,2,3,4,5,6,0,7` is a cycle of healthy links.
//!
//! The order comes from `OXCCL_BIDIR_RING_ORDER` (comma-separated ranks, a permutation of
//! `0..n`); without it the natural order `0..n` is used when its links are healthy, else
//! a cycle of healthy links found on the topology (so it runs on any topology that has
//! one). Code can also build the executor with an explicit order:
//! [`BidirRing::with_order`].
//!
//! Select it with `OXCCL_ALGO=all_reduce=bidir-ring` or `oxccl perf all-reduce --algo
//! bidir-ring`. A binary or test must name this crate (`use oxccl_plugin_bidir_ring as _;`)
//! for it to be linked.

use oxccl::templates::{
    even_chunks, healthy_ring, ring_all_gather, ring_neighbours, ring_reduce_scatter, RingParams,
};
use oxccl::{
    BufRange, Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, Peers, PlanCtx,
    ResourceRequest, Topology,
};

/// Environment variable holding the ring order.
pub const ORDER_VAR: &str = "OXCCL_BIDIR_RING_ORDER";

/// Bidirectional ring AllReduce over a ring order.
#[derive(Clone, Debug, Default)]
pub struct BidirRing {
    /// `None`: `OXCCL_BIDIR_RING_ORDER`, or the natural order.
    order: Option<Vec<usize>>,
}

oxccl::register_executor! {
    name: "bidir-ring",
    op: OpKind::AllReduce,
    description: "two rings on half the data each, clockwise on the main stream and \
                  counter-clockwise on a slave stream, over a given order (example plugin)",
    constraints: Constraints::ANY,
    preference: 0,
    make: || Box::new(BidirRing::default()),
}

impl BidirRing {
    /// An executor over an explicit ring order.
    pub fn with_order(order: Vec<usize>) -> Self {
        BidirRing { order: Some(order) }
    }

    /// The ring order on `topology`: the given order or `OXCCL_BIDIR_RING_ORDER` (see
    /// [`Self::order`]), else the natural order when its links are healthy, else a cycle
    /// of healthy links.
    pub fn order_on(&self, topology: &Topology) -> Result<Vec<usize>, Error> {
        let n = topology.ranks();
        let chosen = self.order.is_some() || std::env::var_os(ORDER_VAR).is_some();
        let natural_is_healthy =
            (0..n).all(|r| n < 2 || topology.link_kind(r, (r + 1) % n).is_some());
        if chosen || natural_is_healthy {
            return self.order(n);
        }
        healthy_ring(topology).ok_or_else(|| Error::Unsupported {
            executor: "bidir-ring".into(),
            op: OpKind::AllReduce,
            ranks: n,
            reason: "the topology has no cycle of healthy links through every rank".into(),
        })
    }

    /// The ring order for `ranks` ranks, checked to be a permutation of `0..ranks`.
    pub fn order(&self, ranks: usize) -> Result<Vec<usize>, Error> {
        let (order, origin) = match (&self.order, std::env::var(ORDER_VAR)) {
            (Some(o), _) => (o.clone(), "the given order"),
            (None, Ok(text)) => (parse_order(&text)?, ORDER_VAR),
            (None, Err(_)) => ((0..ranks).collect(), "the natural order"),
        };
        let mut sorted = order.clone();
        sorted.sort_unstable();
        if sorted != (0..ranks).collect::<Vec<_>>() {
            return Err(Error::Unsupported {
                executor: "bidir-ring".into(),
                op: OpKind::AllReduce,
                ranks,
                reason: format!("{origin} {order:?} is not a permutation of 0..{ranks}"),
            });
        }
        Ok(order)
    }
}

fn parse_order(text: &str) -> Result<Vec<usize>, Error> {
    text.split(',')
        .map(|r| r.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|e| {
            oxccl::ConfigError::new(ORDER_VAR, text, "expected comma-separated ranks")
                .caused_by(e)
                .into()
        })
}

/// Byte range `[from, from + len)` of `r`.
fn part(r: BufRange, from: usize, len: usize) -> BufRange {
    BufRange {
        buf: r.buf,
        offset: r.offset + from,
        len,
    }
}

impl Executor for BidirRing {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        // Found once per operation (a healthy ring may take a search): every iteration's
        // kernel_run reads it back from the plan.
        let order = self.order_on(ctx.topology)?;
        Ok(ResourceRequest {
            slave_streams: 1,
            ..ResourceRequest::with_peers(Peers::List(ring_neighbours(&order, ctx.rank)))
                .with_plan(order)
        })
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let op = &args.op;
        let es = op.dtype.size();
        if ctx.ranks == 1 {
            args.copy_input_to_output(ctx);
            return Ok(());
        }
        let forward = ctx.plan::<Vec<usize>>()?.clone();
        let backward: Vec<usize> = forward.iter().rev().copied().collect();
        let first_half = op.count.div_ceil(2);
        ctx.fork(1..=1);
        for (stream, order, from, count) in [
            (0, &forward, 0, first_half),
            (1, &backward, first_half, op.count - first_half),
        ] {
            let chunks = even_chunks(count, ctx.ranks, es);
            let positions: Vec<usize> = (0..ctx.ranks).collect();
            let p = RingParams {
                order,
                stream,
                channel: stream,
                chunks: &chunks,
                chunk_at: &positions,
                input: part(args.input, from * es, count * es),
                output: part(args.output, from * es, count * es),
                dtype: op.dtype,
                op: op.op,
            };
            ring_reduce_scatter(ctx, &p)?;
            ring_all_gather(ctx, &p)?;
        }
        ctx.join(1..=1);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_must_be_a_permutation() {
        assert_eq!(
            BidirRing::with_order(vec![1, 0, 2]).order(3).unwrap(),
            vec![1, 0, 2]
        );
        let err = BidirRing::with_order(vec![0, 0, 2])
            .order(3)
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a permutation"), "{err}");
        assert!(parse_order("1, 2,x").is_err());
    }
}
