//! AlltoAllV executors: rank `r` sends `sends[s]` to every rank `s` and receives
//! `recvs[s]` from it, with per-peer counts and displacements ([`VLayout::P2p`], one send
//! and one receive per rank, in rank order).
//!
//! [`VLayout::P2p`]: oxccl_framework::op::VLayout::P2p

pub mod mesh;
pub mod pairwise;
pub mod put_mesh;
pub mod put_pairwise;
pub mod relay_pairwise;

use crate::templates::P2pPhase;
use oxccl_framework::platform::Rank;

/// The `n - 1` pairwise steps of rank `me`: step `k` sends to `me + k` and receives from
/// `me - k` (mod `n`).
pub(crate) fn pairwise_phases(me: Rank, n: usize) -> Vec<P2pPhase> {
    (1..n)
        .map(|k| P2pPhase {
            send_to: vec![(me + k) % n],
            recv_from: vec![(me + n - k) % n],
        })
        .collect()
}
