//! A fabric of fake NICs in this process: the test double of [`Verbs`], so that the RDMA
//! transport's protocol runs in CI, where no RDMA device exists (and the kernel has no
//! soft-RoCE).
//!
//! It does what a reliable-connected NIC does to the transport, in order and at once: a
//! WRITE copies into the peer's registered memory after checking the remote key and the
//! range (a refusal completes with [`Status::RemoteAccess`] and moves the queue pair to the
//! error state, as RC does); a WRITE_WITH_IMM consumes one of the peer's posted receives
//! and completes it with the immediate (none posted: [`Status::ReceiverNotReady`]); a
//! queue pair in the error state flushes what is posted on it. It records every request,
//! and can misbehave on demand: lose send completions, deliver them in reverse order, or
//! put a queue pair into the error state.

use super::verbs::{
    Completion, Port, QpEndpoint, QpId, Registered, SendOp, Status, Verbs, VerbsError, WorkRequest,
};
use parking_lot::Mutex;
use rustix::event::{eventfd, EventfdFlags};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use std::collections::VecDeque;
use std::sync::Arc;

/// Fake NICs that reach each other.
#[derive(Clone, Default)]
pub struct Fabric {
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    regions: Vec<Region>,
    qps: Vec<Qp>,
    nics: Vec<Nic>,
}

struct Region {
    nic: usize,
    addr: u64,
    len: u64,
    key: u32,
}

struct Qp {
    nic: usize,
    /// This queue pair's id on its NIC.
    local: QpId,
    /// The peer queue pair (fabric-wide index), once connected.
    remote: Option<usize>,
    error: bool,
    recvs: VecDeque<u64>,
    sent: VecDeque<Completion>,
}

struct Nic {
    /// Fabric-wide index of each of this NIC's queue pairs, by local id.
    qps: Vec<usize>,
    received: VecDeque<Completion>,
    /// Readable after a receive completed while `armed` (the completion channel).
    bell: Arc<OwnedFd>,
    armed: bool,
    /// Send completions still to lose.
    lose: usize,
    /// What [`Verbs::recv_capacity`] says.
    recv_capacity: usize,
    reorder: bool,
    /// Every send request posted on this NIC, in order.
    log: Vec<WorkRequest>,
}

/// One fake NIC (a device port) of a [`Fabric`].
pub struct FakeNic {
    state: Arc<Mutex<State>>,
    index: usize,
    port: Port,
    bell: Arc<OwnedFd>,
}

impl Fabric {
    pub fn new() -> Self {
        Fabric::default()
    }

    /// A new NIC on the fabric, named `device` (port 1).
    pub fn nic(&self, device: &str) -> std::io::Result<Arc<FakeNic>> {
        let flags = EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK;
        let bell = Arc::new(eventfd(0, flags)?);
        let mut state = self.state.lock();
        state.nics.push(Nic {
            qps: Vec::new(),
            received: VecDeque::new(),
            bell: bell.clone(),
            armed: false,
            lose: 0,
            recv_capacity: 1 << 20,
            reorder: false,
            log: Vec::new(),
        });
        Ok(Arc::new(FakeNic {
            state: self.state.clone(),
            index: state.nics.len() - 1,
            port: Port {
                device: device.into(),
                port: 1,
            },
            bell,
        }))
    }
}

impl FakeNic {
    /// The next `n` send completions of this NIC vanish (the requests still run).
    pub fn lose_completions(&self, n: usize) {
        self.state.lock().nics[self.index].lose = n;
    }

    /// Each post's send completions come in reverse order.
    pub fn reorder_completions(&self, on: bool) {
        self.state.lock().nics[self.index].reorder = on;
    }

    /// Say that the receive queue holds `n` completions (a small NIC).
    pub fn set_recv_capacity(&self, n: usize) {
        self.state.lock().nics[self.index].recv_capacity = n;
    }

    /// Put queue pair `qp` into the error state (a cable pulled, a peer gone).
    pub fn fail_qp(&self, qp: QpId) {
        let mut state = self.state.lock();
        let global = state.nics[self.index].qps[qp];
        state.qps[global].error = true;
    }

    /// Every send request posted on this NIC so far.
    pub fn log(&self) -> Vec<WorkRequest> {
        self.state.lock().nics[self.index].log.clone()
    }

    fn qp(&self, state: &State, qp: QpId) -> Result<usize, VerbsError> {
        state.nics[self.index]
            .qps
            .get(qp)
            .copied()
            .ok_or(VerbsError::NoQp { qp })
    }
}

impl State {
    /// The region of `nic` with `key` that holds `addr..addr + len`.
    fn holds(&self, nic: usize, key: u32, addr: u64, len: u64) -> bool {
        self.regions.iter().any(|r| {
            r.nic == nic
                && r.key == key
                && Registered {
                    addr: r.addr,
                    len: r.len,
                    lkey: key,
                    rkey: key,
                }
                .holds(addr, len)
        })
    }

    /// Run one request of queue pair `from` (connected to `to`): its status.
    fn execute(&mut self, from: usize, to: usize, wr: &WorkRequest) -> Status {
        let (src, len, lkey) = wr.local;
        let (dst, rkey) = wr.remote;
        let len64 = u64::from(len);
        if len > 0 && !self.holds(self.qps[from].nic, lkey, src, len64) {
            return Status::Other(LOCAL_PROTECTION);
        }
        if !self.holds(self.qps[to].nic, rkey, dst, len64) {
            return Status::RemoteAccess;
        }
        if len > 0 {
            // SAFETY: both ranges lie in regions registered with `register`, whose caller
            // keeps them valid while the fabric lives; `copy` allows overlap.
            unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len as usize) };
        }
        if let SendOp::WriteImm(imm) = wr.op {
            let Some(recv) = self.qps[to].recvs.pop_front() else {
                return Status::ReceiverNotReady;
            };
            let (nic, qp) = (self.qps[to].nic, self.qps[to].local);
            let nic = &mut self.nics[nic];
            nic.received.push_back(Completion {
                wr_id: recv,
                qp,
                status: Status::Success,
                imm: Some(imm),
            });
            if std::mem::take(&mut nic.armed) {
                // A full counter only means it is readable already.
                let _ = rustix::io::write(&*nic.bell, &1u64.to_ne_bytes());
            }
        }
        Status::Success
    }
}

/// `IBV_WC_LOC_PROT_ERR`: a local key or range refused.
const LOCAL_PROTECTION: u32 = 4;

impl Verbs for FakeNic {
    fn port(&self) -> &Port {
        &self.port
    }

    unsafe fn register(&self, addr: *mut u8, len: usize) -> Result<Registered, VerbsError> {
        let mut state = self.state.lock();
        let key = state.regions.len() as u32 + 1;
        state.regions.push(Region {
            nic: self.index,
            addr: addr as u64,
            len: len as u64,
            key,
        });
        Ok(Registered {
            addr: addr as u64,
            len: len as u64,
            lkey: key,
            rkey: key,
        })
    }

    fn create_qp(&self) -> Result<(QpId, QpEndpoint), VerbsError> {
        let mut state = self.state.lock();
        let global = state.qps.len();
        let local = state.nics[self.index].qps.len();
        state.qps.push(Qp {
            nic: self.index,
            local,
            remote: None,
            error: false,
            recvs: VecDeque::new(),
            sent: VecDeque::new(),
        });
        state.nics[self.index].qps.push(global);
        let endpoint = QpEndpoint {
            qp_num: global as u32,
            lid: self.index as u16,
            gid: [0; 16],
        };
        Ok((local, endpoint))
    }

    fn connect(&self, qp: QpId, remote: QpEndpoint) -> Result<(), VerbsError> {
        let mut state = self.state.lock();
        let global = self.qp(&state, qp)?;
        let peer = remote.qp_num as usize;
        if state.qps.get(peer).map(|q| q.nic) != Some(usize::from(remote.lid)) {
            return Err(VerbsError::Call {
                call: "ibv_modify_qp(RTR)",
                reason: format!("no queue pair {} behind LID {}", remote.qp_num, remote.lid),
            });
        }
        state.qps[global].remote = Some(peer);
        Ok(())
    }

    fn post_send(&self, qp: QpId, wrs: &[WorkRequest]) -> Result<(), VerbsError> {
        let mut state = self.state.lock();
        let from = self.qp(&state, qp)?;
        let Some(to) = state.qps[from].remote else {
            return Err(VerbsError::Call {
                call: "ibv_post_send",
                reason: "the queue pair is not connected".into(),
            });
        };
        let mut done = Vec::with_capacity(wrs.len());
        for wr in wrs {
            state.nics[self.index].log.push(*wr);
            let status = match state.qps[from].error {
                true => Status::Flushed,
                false => state.execute(from, to, wr),
            };
            if status != Status::Success {
                state.qps[from].error = true;
            }
            done.push(Completion {
                wr_id: wr.wr_id,
                qp,
                status,
                imm: None,
            });
        }
        let nic = &mut state.nics[self.index];
        if nic.reorder {
            done.reverse();
        }
        let lost = nic.lose.min(done.len());
        nic.lose -= lost;
        state.qps[from].sent.extend(done.into_iter().skip(lost));
        Ok(())
    }

    fn post_recv(&self, qp: QpId, wr_id: u64) -> Result<(), VerbsError> {
        let mut state = self.state.lock();
        let global = self.qp(&state, qp)?;
        if state.qps[global].error {
            return Err(VerbsError::QpInError { qp });
        }
        state.qps[global].recvs.push_back(wr_id);
        Ok(())
    }

    fn poll_send(&self, qp: QpId, out: &mut Vec<Completion>) -> Result<(), VerbsError> {
        let mut state = self.state.lock();
        let global = self.qp(&state, qp)?;
        out.extend(state.qps[global].sent.drain(..));
        Ok(())
    }

    fn poll_recv(&self, out: &mut Vec<Completion>) -> Result<(), VerbsError> {
        let mut state = self.state.lock();
        out.extend(state.nics[self.index].received.drain(..));
        Ok(())
    }

    fn recv_capacity(&self) -> usize {
        self.state.lock().nics[self.index].recv_capacity
    }

    fn recv_fd(&self) -> BorrowedFd<'_> {
        self.bell.as_fd()
    }

    fn arm_recv(&self) -> Result<(), VerbsError> {
        let mut state = self.state.lock();
        let mut count = [0u8; 8];
        // Empty (EAGAIN) is the usual answer: nothing was signalled since the last arm.
        let _ = rustix::io::read(&*self.bell, &mut count);
        state.nics[self.index].armed = true;
        Ok(())
    }
}
