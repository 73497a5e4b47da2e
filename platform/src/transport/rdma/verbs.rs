//! The verbs the RDMA transport uses, as a trait: memory registration, reliable-connected
//! queue pairs, RDMA WRITE and WRITE_WITH_IMM, receives for the immediates, and
//! completion polling. Nothing else of libibverbs is needed, so everything above these
//! calls (the put protocol, completion bookkeeping, the receiver's posts) runs in CI
//! against [`super::fake`], and the real NIC is one more implementation (`ib`, feature
//! `rdma`).

use std::fmt;
use std::os::fd::BorrowedFd;

/// A device's port: where a rank's RDMA traffic leaves.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Port {
    pub device: String,
    pub port: u8,
}

impl fmt::Display for Port {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} port {}", self.device, self.port)
    }
}

/// A memory region registered with the device: where it is and its keys.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Registered {
    pub addr: u64,
    pub len: u64,
    /// The key local work requests name it by.
    pub lkey: u32,
    /// The key a peer's writes into it must carry.
    pub rkey: u32,
}

impl Registered {
    /// True when `addr..addr + len` lies inside the region.
    pub fn holds(&self, addr: u64, len: u64) -> bool {
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        addr >= self.addr && self.addr.checked_add(self.len).is_some_and(|e| end <= e)
    }
}

/// A queue pair's own identity on this device.
pub type QpId = usize;

/// What a peer needs to connect its queue pair to one of ours (ibverbs' endpoint: the
/// queue pair number, the port's LID, and the GID for RoCE).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct QpEndpoint {
    pub qp_num: u32,
    pub lid: u16,
    pub gid: [u8; 16],
}

/// The two operations a put-only link posts.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// RDMA WRITE: bytes into the peer's memory, nothing at the peer's side.
    Write,
    /// RDMA WRITE_WITH_IMM: the write, then a completion at the peer carrying the
    /// immediate (it consumes one of the peer's posted receives).
    WriteImm(u32),
}

/// One send work request.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct WorkRequest {
    pub wr_id: u64,
    pub op: SendOp,
    /// Source: address, length and the local key of the region holding it.
    pub local: (u64, u32, u32),
    /// Destination: address in the peer's memory and the key of its region.
    pub remote: (u64, u32),
}

/// How a work request ended (libibverbs' `ibv_wc_status`, the cases the transport tells
/// apart).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Status {
    Success,
    /// The peer's NIC refused the key or the range (`IBV_WC_REM_ACCESS_ERR`).
    RemoteAccess,
    /// The queue pair went to the error state before this request ran
    /// (`IBV_WC_WR_FLUSH_ERR`).
    Flushed,
    /// The peer had no receive posted for an immediate, past the retries
    /// (`IBV_WC_RNR_RETRY_EXC_ERR`).
    ReceiverNotReady,
    /// Any other status, by its libibverbs number.
    Other(u32),
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Status::Success => f.write_str("success"),
            Status::RemoteAccess => f.write_str("remote access error"),
            Status::Flushed => f.write_str("flushed: the queue pair is in the error state"),
            Status::ReceiverNotReady => f.write_str("receiver not ready, retries exceeded"),
            Status::Other(n) => write!(f, "work completion status {n}"),
        }
    }
}

/// A completion: of one of our sends, or of a receive an immediate consumed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    pub wr_id: u64,
    pub qp: QpId,
    pub status: Status,
    /// The immediate of a received WRITE_WITH_IMM.
    pub imm: Option<u32>,
}

/// A verbs call that failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VerbsError {
    #[error("queue pair {qp} is in the error state")]
    QpInError { qp: QpId },
    #[error("no queue pair {qp}")]
    NoQp { qp: QpId },
    #[error("{call} failed: {reason}")]
    Call { call: &'static str, reason: String },
}

/// The verbs of one device port (see the module).
pub trait Verbs: Send + Sync {
    /// The port this opened.
    fn port(&self) -> &Port;

    /// Register `len` bytes at `addr` for local use and remote writes.
    ///
    /// # Safety
    /// The memory must stay valid (and not be freed or moved) until the device goes: the
    /// NIC and peers write into it without this process's knowledge.
    unsafe fn register(&self, addr: *mut u8, len: usize) -> Result<Registered, VerbsError>;

    /// A new reliable-connected queue pair, and the endpoint a peer connects to.
    fn create_qp(&self) -> Result<(QpId, QpEndpoint), VerbsError>;

    /// Bring `qp` to ready-to-send, connected to the peer's `remote` endpoint.
    fn connect(&self, qp: QpId, remote: QpEndpoint) -> Result<(), VerbsError>;

    /// Post `wrs` on `qp`, in order, each signalled.
    fn post_send(&self, qp: QpId, wrs: &[WorkRequest]) -> Result<(), VerbsError>;

    /// Post one receive on `qp`, for one incoming immediate.
    fn post_recv(&self, qp: QpId, wr_id: u64) -> Result<(), VerbsError>;

    /// Move the completions of `qp`'s sends that are ready into `out`.
    fn poll_send(&self, qp: QpId, out: &mut Vec<Completion>) -> Result<(), VerbsError>;

    /// Move the completions of receives (of every queue pair) that are ready into `out`.
    fn poll_recv(&self, out: &mut Vec<Completion>) -> Result<(), VerbsError>;

    /// Completions the receive queue holds. Every posted receive may complete before it
    /// is polled, so receives posted over all queue pairs must stay within it: a queue
    /// that overflows breaks every link of the device.
    fn recv_capacity(&self) -> usize;

    /// A file descriptor that turns readable when a receive completes after
    /// [`Verbs::arm_recv`], for an event loop to sleep on instead of polling (a completion
    /// channel on a NIC).
    fn recv_fd(&self) -> BorrowedFd<'_>;

    /// Take the readiness `recv_fd` signalled, and ask for the next receive completion to
    /// signal it again. A completion that came before the arm is in the queue but not
    /// announced: poll after arming, then sleep.
    fn arm_recv(&self) -> Result<(), VerbsError>;
}
