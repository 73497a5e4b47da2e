//! Non-uniform Bruck (NB) over a group of ranks, and the log-step ring schedule it shares
//! with NHR.
//!
//! Seen from group position `p`, chunk offset `j` is the chunk of position `p + j` (mod
//! `n`). A schedule is a sequence of held counts `1 = h_0 < h_1 < ... < h_K = n` with
//! `h_{k+1} <= 2 h_k`:
//!
//! - all-gather, steps `k = 0..K`: position `p` holds offsets `[0, h_k)` and pulls
//!   offsets `[h_k, h_{k+1})` from position `p + h_k`, which holds them as its own
//!   `[0, h_{k+1} - h_k)`; it is read by position `p − h_k` at the same time, over other
//!   bytes of its output;
//! - reduce-scatter, the transpose, steps `k = K−1..0`: position `p` pulls from position
//!   `p − h_k` the partial sums of offsets `[0, h_{k+1} − h_k)` (the source's offsets
//!   `[h_k, h_{k+1})`) and reduces them into its own; after step 0 offset 0, its own
//!   chunk, is complete. A partial sum a rank has not written yet is its input.
//!
//! Every rank moves `n − 1` chunks in `K = ⌈log2 n⌉` steps, for any `n`, with no fold.
//! NB takes `h_k = 2^k` (the last step moves what is left: the peer of step `k` is `2^k`
//! away); NHR ([`super::nhr`]) halves from the top instead, so that each reduce-scatter
//! step moves about half of what the step before did.
//!
//! Every step is a `pull_step` (read from the source, read by the reader), so the
//! input may be read-only and the output may alias it, and when a template returns nobody
//! reads this rank's buffers. A group of one does nothing (like the ring templates).
//! HCCL cost of NB: ReduceScatter and AllGather `⌈log2 p⌉α + (p−1)/p·nβ` (plus
//! `(p−1)/p·nγ` for ReduceScatter); AllReduce twice that.

use super::rhd::{copy_runs, group_position, pull_step, reduce_runs};
use super::ring::RingParams;
use super::ring_reduce_scatter::RingTargets;
use oxccl_framework::platform::{Rank, Slice};
use oxccl_framework::{Error, KernelCtx};

oxccl_framework::register_template! {
    name: "nb_reduce_scatter",
    description: "transposed Bruck: ceil(log2 n) steps, the peer of step k 2^k away, any group size",
}

oxccl_framework::register_template! {
    name: "nb_all_gather",
    description: "Bruck: ceil(log2 n) steps, the peer of step k 2^k away, any group size",
}

/// NB's held counts for a group of `n`: `1, 2, 4, ..., n`.
pub fn nb_schedule(n: usize) -> Vec<usize> {
    let mut held = vec![1];
    while held[held.len() - 1] < n {
        held.push((2 * held[held.len() - 1]).min(n));
    }
    held
}

/// The group members position `rank` exchanges with under the held counts `held`, sorted.
pub(crate) fn schedule_peers(order: &[Rank], rank: Rank, held: &[usize]) -> Vec<Rank> {
    let n = order.len();
    let Some(pos) = order.iter().position(|&r| r == rank) else {
        return Vec::new();
    };
    let mut peers: Vec<Rank> = held[..held.len() - 1]
        .iter()
        .flat_map(|&d| [order[(pos + d) % n], order[(pos + n - d) % n]])
        .collect();
    peers.sort_unstable();
    peers.dedup();
    peers.retain(|&r| r != rank);
    peers
}

/// The group members `rank` exchanges with in the NB templates over `order`, sorted.
pub fn nb_peers(order: &[Rank], rank: Rank) -> Vec<Rank> {
    schedule_peers(order, rank, &nb_schedule(order.len()))
}

/// The all-gather of the schedule `held` on `p.stream`.
pub(crate) fn schedule_all_gather(
    ctx: &mut KernelCtx<'_>,
    p: &RingParams<'_>,
    held: &[usize],
) -> Result<(), Error> {
    let (n, pos, me) = (p.order.len(), group_position(ctx, p.order)?, ctx.rank);
    for step in held.windows(2) {
        let (d, m) = (step[0], step[1] - step[0]);
        let source = ctx.link(p.order[(pos + d) % n], p.channel)?;
        let reader = ctx.link(p.order[(pos + n - d) % n], p.channel)?;
        let items: Vec<[Slice; 2]> = (d..d + m)
            .map(|j| {
                let (off, len) = p.chunks[p.chunk_at[(pos + j) % n]];
                [
                    p.output.at(source.remote, off, len),
                    p.output.at(me, off, len),
                ]
            })
            .collect();
        pull_step(ctx, p.stream, Some(source), Some(reader), |ctx| {
            copy_runs(ctx, p.stream, items)
        });
    }
    Ok(())
}

/// The reduce-scatter of the schedule `held` on `p.stream`, reading `p.input` and
/// writing `t`.
pub(crate) fn schedule_reduce_scatter(
    ctx: &mut KernelCtx<'_>,
    p: &RingParams<'_>,
    t: &RingTargets<'_>,
    held: &[usize],
) -> Result<(), Error> {
    let (n, pos, me) = (p.order.len(), group_position(ctx, p.order)?, ctx.rank);
    // Offsets `[0, written)` of every rank hold partial sums; the rest is still input.
    let mut written = 0;
    for (k, step) in held.windows(2).enumerate().rev() {
        let (d, m) = (step[0], step[1] - step[0]);
        let source = ctx.link(p.order[(pos + n - d) % n], p.channel)?;
        let reader = ctx.link(p.order[(pos + d) % n], p.channel)?;
        let side = |rank: Rank, offset: usize, c: usize| {
            let len = p.chunks[c].1;
            match offset < written {
                true => t.partials.at(rank, t.partial_chunks[c].0, len),
                false => p.input.at(rank, p.chunks[c].0, len),
            }
        };
        let items: Vec<[Slice; 3]> = (0..m)
            .map(|i| {
                let c = p.chunk_at[(pos + i) % n];
                let len = p.chunks[c].1;
                let dst = match t.result {
                    Some(result) if k == 0 && i == 0 => result.at(me, 0, len),
                    _ => t.partials.at(me, t.partial_chunks[c].0, len),
                };
                [side(source.remote, d + i, c), side(me, i, c), dst]
            })
            .collect();
        pull_step(ctx, p.stream, Some(source), Some(reader), |ctx| {
            reduce_runs(ctx, p, items)
        });
        written = written.max(m);
    }
    Ok(())
}

/// Append an NB reduce-scatter on `p.stream`: partial sums and the result in `p.output`,
/// at each chunk's offset.
pub fn nb_reduce_scatter(ctx: &mut KernelCtx<'_>, p: &RingParams<'_>) -> Result<(), Error> {
    let targets = RingTargets {
        partials: p.output,
        partial_chunks: p.chunks,
        result: None,
    };
    nb_reduce_scatter_into(ctx, p, &targets)
}

/// Append an NB reduce-scatter on `p.stream` that reads `p.input` and writes `t`.
pub fn nb_reduce_scatter_into(
    ctx: &mut KernelCtx<'_>,
    p: &RingParams<'_>,
    t: &RingTargets<'_>,
) -> Result<(), Error> {
    schedule_reduce_scatter(ctx, p, t, &nb_schedule(p.order.len()))
}

/// Append an NB all-gather on `p.stream`.
pub fn nb_all_gather(ctx: &mut KernelCtx<'_>, p: &RingParams<'_>) -> Result<(), Error> {
    schedule_all_gather(ctx, p, &nb_schedule(p.order.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the all-gather of `held` gives every position every chunk exactly once.
    fn gathers_everything(n: usize, held: &[usize]) -> bool {
        let mut has = vec![vec![false; n]; n];
        for (p, row) in has.iter_mut().enumerate() {
            row[p] = true;
        }
        for step in held.windows(2) {
            let (d, m) = (step[0], step[1] - step[0]);
            let before = has.clone();
            for p in 0..n {
                for j in d..d + m {
                    let c = (p + j) % n;
                    if has[p][c] || !before[(p + d) % n][c] {
                        return false;
                    }
                    has[p][c] = true;
                }
            }
        }
        has.iter().all(|row| row.iter().all(|&h| h))
    }

    #[test]
    fn schedules_are_log_step_and_complete() {
        for n in 1..70 {
            let held = nb_schedule(n);
            assert_eq!(held.len() - 1, n.next_power_of_two().ilog2() as usize);
            assert!(held.windows(2).all(|w| w[0] < w[1] && w[1] <= 2 * w[0]));
            assert!(gathers_everything(n, &held), "{n}");
        }
    }
}
