//! Broadcast executors: every rank's output becomes the root's input.
//!
//! The root copies its input to its output (nothing to do in place, where they are one
//! buffer); every other rank pulls the data from a rank that already has it: the root
//! itself ([`mesh`]), its parent in a binomial tree ([`tree`]) or its predecessor in a
//! chain ([`ring`]). Pulls read the root's input and the other ranks' outputs, so a
//! rank's input is never read by a peer unless it is the root.

pub mod hier_levels;
pub mod hier_put_ring;
pub mod mesh;
pub mod mesh_push;
pub mod put_mesh;
pub mod relay_mesh;
pub mod relay_scatter_all_gather;
pub mod ring;
pub mod tree;

use crate::templates::healthy_ring_for;
use oxccl_framework::platform::{Link, Rank, StreamProgram};
use oxccl_framework::{Error, KernelArgs, OpKind, OpParam};

/// The root of a rooted operation (validated before any executor runs).
pub(crate) fn root_of(op: &OpParam, executor: &str) -> Result<Rank, Error> {
    op.root.ok_or_else(|| Error::BadProgram {
        executor: executor.into(),
        rank: 0,
        reason: format!("{} without a root", op.kind),
    })
}

/// The root's copy of its input to its output, unless they are one buffer.
pub(crate) fn root_keeps_its_data(ctx: &mut oxccl_framework::KernelCtx<'_>, args: &KernelArgs) {
    args.copy_input_to_output(ctx);
}

/// A chain through every rank along healthy links, starting at `root`: the ring of
/// [`healthy_ring_for`] rotated to begin at the root (its closing link is not used).
pub(crate) fn chain_from_root(
    topology: &oxccl_framework::Topology,
    root: Rank,
    executor: &str,
    op: OpKind,
) -> Result<Vec<Rank>, Error> {
    let mut order = healthy_ring_for(topology, executor, op)?;
    let at = order.iter().position(|&r| r == root).unwrap_or(0);
    order.rotate_left(at);
    Ok(order)
}

/// `rank`'s neighbours in `chain` (its predecessor and successor, where it has them).
pub(crate) fn chain_neighbours(chain: &[Rank], rank: Rank) -> (Option<Rank>, Option<Rank>) {
    let pos = chain.iter().position(|&r| r == rank).unwrap_or(0);
    let pred = pos.checked_sub(1).map(|p| chain[p]);
    (pred, chain.get(pos + 1).copied())
}

/// Pipelined chains signal chunk `k` alternately with Ack and DataSignal, so two chunks
/// may be in flight on a link without posting one notify twice before its wait.
pub(crate) fn tx_chunk(link: &Link, stream: &mut StreamProgram, k: usize) {
    match k % 2 {
        0 => link.tx_ack(stream),
        _ => link.tx_data_signal(stream),
    }
}

/// The wait matching [`tx_chunk`].
pub(crate) fn rx_chunk(link: &Link, stream: &mut StreamProgram, k: usize) {
    match k % 2 {
        0 => link.rx_ack(stream),
        _ => link.rx_data_signal(stream),
    }
}
