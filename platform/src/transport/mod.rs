//! Transports: how a rank reaches a peer that its own device does not serve.
//!
//! A device serves the ranks of one process; every other rank is reached through a
//! transport, chosen per peer from an ordered table (NCCL's `selectTransport`): the first
//! that can connect wins, and when none can, the error lists each candidate and why it
//! refused. The table, in order:
//!
//! - **in-process**: the peer is served by the same device (no transport at all: its
//!   buffers and signal words are the device's own);
//! - **shm** ([`shm`]): the peer is a process on the same host. Its CCL buffers, scratch
//!   and signal words live in shared-memory segments that this process maps, so the link
//!   is load/store, like threads of one process;
//! - **tcp** ([`tcp`]): peers on other hosts (or any peer, when forced), put-only: writes
//!   into the peer's registered buffers and posts of its signals, framed over sockets.
//!
//! Both put-only transports speak one protocol ([`put`]). The RDMA transport ([`rdma`]:
//! the protocol over RDMA WRITE and WRITE_WITH_IMM, tested against a fake fabric; real
//! devices behind feature `rdma`) is not in the table yet: no device uses its links.

pub mod put;
pub mod rdma;
pub mod shm;
pub mod tcp;

/// `wait` as the kernel's timeout, saturated (a wait past `i64::MAX` seconds is forever
/// for any caller here).
pub(crate) fn timespec(wait: std::time::Duration) -> rustix::time::Timespec {
    rustix::time::Timespec::try_from(wait).unwrap_or(rustix::time::Timespec {
        tv_sec: i64::MAX,
        tv_nsec: 0,
    })
}
