//! Non-uniform hierarchical ring (NHR) over a group of ranks, HCCL's `NHR`.
//!
//! NHR runs the log-step ring schedule of [`super::nb`] with other step sizes: the held
//! counts halve from the top, `h_K = n`, `h_{k−1} = ⌈h_k / 2⌉`. The reduce-scatter's first
//! step thus moves `⌊n/2⌋` chunks to the position `⌈n/2⌉` behind, the next about half of
//! the rest, and so on down to one chunk from the neighbour: `⌈log2 n⌉` steps for any
//! `n`, every step a balanced half of the one before, no fold and no extra volume (each
//! rank moves `n − 1` chunks). The all-gather runs the same steps in reverse. On a power
//! of two the peers are RHD's distances (`n/2, ..., 1`), on other counts their ceilings.
//! HCCL cost: ReduceScatter and AllGather `⌈log2 p⌉α + (p−1)/p·nβ` (plus `(p−1)/p·nγ` for
//! ReduceScatter); AllReduce twice that.

use super::nb::{schedule_all_gather, schedule_peers, schedule_reduce_scatter};
use super::ring::RingParams;
use super::ring_reduce_scatter::RingTargets;
use oxccl_framework::platform::Rank;
use oxccl_framework::{Error, KernelCtx};

oxccl_framework::register_template! {
    name: "nhr_reduce_scatter",
    description: "log-step ring reduce-scatter whose steps move halving amounts, any group size",
}

oxccl_framework::register_template! {
    name: "nhr_all_gather",
    description: "log-step ring all-gather whose steps move doubling amounts, any group size",
}

/// NHR's held counts for a group of `n`: `..., ⌈n/4⌉, ⌈n/2⌉, n`, starting at 1.
pub fn nhr_schedule(n: usize) -> Vec<usize> {
    let mut held = vec![n.max(1)];
    while held[held.len() - 1] > 1 {
        held.push(held[held.len() - 1].div_ceil(2));
    }
    held.reverse();
    held
}

/// The group members `rank` exchanges with in the NHR templates over `order`, sorted.
pub fn nhr_peers(order: &[Rank], rank: Rank) -> Vec<Rank> {
    schedule_peers(order, rank, &nhr_schedule(order.len()))
}

/// Append an NHR reduce-scatter on `p.stream`: partial sums and the result in
/// `p.output`, at each chunk's offset.
pub fn nhr_reduce_scatter(ctx: &mut KernelCtx<'_>, p: &RingParams<'_>) -> Result<(), Error> {
    let targets = RingTargets {
        partials: p.output,
        partial_chunks: p.chunks,
        result: None,
    };
    nhr_reduce_scatter_into(ctx, p, &targets)
}

/// Append an NHR reduce-scatter on `p.stream` that reads `p.input` and writes `t`.
pub fn nhr_reduce_scatter_into(
    ctx: &mut KernelCtx<'_>,
    p: &RingParams<'_>,
    t: &RingTargets<'_>,
) -> Result<(), Error> {
    schedule_reduce_scatter(ctx, p, t, &nhr_schedule(p.order.len()))
}

/// Append an NHR all-gather on `p.stream`.
pub fn nhr_all_gather(ctx: &mut KernelCtx<'_>, p: &RingParams<'_>) -> Result<(), Error> {
    schedule_all_gather(ctx, p, &nhr_schedule(p.order.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_are_log_step_and_halving() {
        for n in 1..70 {
            let held = nhr_schedule(n);
            assert_eq!(held[0], 1);
            assert_eq!(held[held.len() - 1], n);
            assert_eq!(held.len() - 1, n.next_power_of_two().ilog2() as usize);
            assert!(held.windows(2).all(|w| w[0] < w[1] && w[1] <= 2 * w[0]));
        }
        assert_eq!(nhr_schedule(5), vec![1, 2, 3, 5]);
        assert_eq!(nhr_schedule(8), vec![1, 2, 4, 8]);
    }
}
