//! AlltoAllV executors: rank `r` sends `sends[s]` to every rank `s` and receives
//! `recvs[s]` from it, with per-peer counts and displacements ([`VLayout::P2p`], one send
//! and one receive per rank, in rank order).
//!
//! [`VLayout::P2p`]: oxccl_framework::op::VLayout::P2p

pub mod pairwise;
pub mod put_pairwise;
pub mod relay_pairwise;
