//! Real RDMA devices through libibverbs (feature `rdma`): finding the device and port a
//! rank's RDMA links leave from, with a typed error for each way that fails, and
//! [`IbNic`], the verbs of [`super::Verbs`] on that port.
//!
//! Built on `ibverbs-sys` directly rather than the `ibverbs` crate: that crate's queue
//! pairs borrow their context (so they cannot live in a device beside it), and it has no
//! RDMA WRITE or registration of memory it did not allocate, both of which the transport
//! is made of.
//!
//! **Not run on hardware**: this machine and CI have no RDMA device and no soft-RoCE, so
//! [`IbNic`] is compiled and linted but has never executed; the protocol above it is
//! tested against [`super::fake`]. The queue-pair setup follows the usual RC sequence
//! (INIT with remote-write access, RTR with the peer's QPN, LID and GID, RTS), as
//! rdma-core's `ibv_rc_pingpong` does.

use super::verbs::{Completion, QpEndpoint, QpId, Registered, SendOp, Status, Verbs, WorkRequest};
use super::{RdmaError, Settings, VerbsError};
use crate::transport::rdma::Port;
use ibverbs_sys as ffi;
use parking_lot::Mutex;
use std::ffi::CStr;
use std::os::fd::BorrowedFd;
use std::os::raw::c_int;
use std::ptr::null_mut;
use std::sync::Arc;

/// Every device libibverbs lists, with its name, handed to `visit` while the list lives
/// (it is freed afterwards, on every path); the first `Some` that `visit` returns.
/// `Err(())`: no list at all (no RDMA subsystem in the kernel).
fn visit_devices<R>(
    mut visit: impl FnMut(*mut ffi::ibv_device, String) -> Option<R>,
) -> Result<Option<R>, ()> {
    let mut count = 0;
    // SAFETY: `count` is a valid out-pointer; a null list means none (or no subsystem).
    let list = unsafe { ffi::ibv_get_device_list(&mut count) };
    if list.is_null() {
        return Err(());
    }
    let n = usize::try_from(count).unwrap_or(0);
    let found = (0..n).find_map(|i| {
        // SAFETY: `list` holds `count` device pointers until it is freed below.
        let device = unsafe { *list.add(i) };
        // SAFETY: a listed device; a non-null name is a NUL-terminated string it owns.
        let name = unsafe { ffi::ibv_get_device_name(device) };
        let name = match name.is_null() {
            true => format!("device {i}"),
            false => unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned(),
        };
        visit(device, name)
    });
    // SAFETY: `list` came from `ibv_get_device_list` and is freed once, after the last
    // use of its devices (a context opened from one outlives the list).
    unsafe { ffi::ibv_free_device_list(list) };
    Ok(found)
}

/// The names of the RDMA devices libibverbs lists here (none when the kernel has no RDMA
/// subsystem).
pub fn device_names() -> Vec<String> {
    let mut names = Vec::new();
    let _ = visit_devices(|_, name| {
        names.push(name);
        None::<()>
    });
    names
}

/// The device and port `settings` name (the first device when none is named), checked
/// to exist and to be active.
pub fn probe(settings: &Settings) -> Result<Port, RdmaError> {
    let found = device_names();
    let name = match &settings.device {
        Some(wanted) if found.contains(wanted) => wanted.clone(),
        Some(wanted) => {
            return Err(RdmaError::NoDevice {
                wanted: Some(wanted.clone()),
                found,
            })
        }
        None => found.first().cloned().ok_or(RdmaError::NoDevice {
            wanted: None,
            found: Vec::new(),
        })?,
    };
    let port = Port {
        device: name,
        port: settings.port,
    };
    match port_state(&port)? {
        ffi::ibv_port_state::IBV_PORT_ACTIVE => Ok(port),
        state => Err(RdmaError::PortDown {
            state: state_name(state).into(),
            port,
        }),
    }
}

/// The state of `port`, from a context opened for the query.
fn port_state(port: &Port) -> Result<ffi::ibv_port_state::Type, RdmaError> {
    let failed = |what: &str| RdmaError::PortDown {
        port: port.clone(),
        state: format!("unreadable ({what})"),
    };
    let named = |d, name: String| (name == port.device).then(|| query(d, port.port));
    match visit_devices(named) {
        Err(()) => Err(failed("the device list is gone")),
        Ok(None) => Err(failed("the device went away")),
        Ok(Some(state)) => state.map_err(|e| failed(&e)),
    }
}

/// Open `device`, read port `port`'s state, close it.
fn query(device: *mut ffi::ibv_device, port: u8) -> Result<ffi::ibv_port_state::Type, String> {
    // SAFETY: `device` comes from a live device list.
    let ctx = unsafe { ffi::ibv_open_device(device) };
    if ctx.is_null() {
        return Err(format!(
            "ibv_open_device: {}",
            std::io::Error::last_os_error()
        ));
    }
    let mut attr = ffi::ibv_port_attr::default();
    // SAFETY: `ctx` is open and `attr` a valid out-pointer of the type the call fills.
    let errno = unsafe { ffi::ibv_query_port(ctx, port, &mut attr as *mut _ as *mut _) };
    // SAFETY: opened above, closed once.
    unsafe { ffi::ibv_close_device(ctx) };
    match errno {
        0 => Ok(attr.state),
        e => Err(format!(
            "ibv_query_port: {}",
            std::io::Error::from_raw_os_error(e)
        )),
    }
}

fn state_name(state: ffi::ibv_port_state::Type) -> &'static str {
    match state {
        ffi::ibv_port_state::IBV_PORT_NOP => "in no state (NOP)",
        ffi::ibv_port_state::IBV_PORT_DOWN => "down",
        ffi::ibv_port_state::IBV_PORT_INIT => "initializing",
        ffi::ibv_port_state::IBV_PORT_ARMED => "armed",
        ffi::ibv_port_state::IBV_PORT_ACTIVE_DEFER => "active, deferred",
        _ => "in an unknown state",
    }
}

/// Entries of each queue pair's send completion queue.
const CQ_DEPTH: c_int = 1024;
/// Entries of the receive completion queue every queue pair shares (64 bytes each: 1 MiB), enough for 256 links of `Inbox::DEPTH` receives.
const RECV_CQ_DEPTH: c_int = 16384;
/// Send requests a queue pair holds at once.
const MAX_SEND_WR: u32 = 256;
/// Receives a queue pair holds at once (the inbox keeps `Inbox::DEPTH` posted).
const MAX_RECV_WR: u32 = 256;
/// Completions taken per poll call.
const POLL_BATCH: usize = 16;

/// One device port, opened: its protection domain, the completion queue of every
/// receive, and per queue pair its own send completion queue (so a link polls only its
/// own completions).
pub struct IbNic {
    port: Port,
    settings: Settings,
    ctx: *mut ffi::ibv_context,
    pd: *mut ffi::ibv_pd,
    /// Wakes a thread asleep on its descriptor when `recv_cq` gets a completion (armed).
    channel: *mut ffi::ibv_comp_channel,
    recv_cq: *mut ffi::ibv_cq,
    lid: u16,
    mtu: ffi::ibv_mtu,
    gid: [u8; 16],
    owned: Mutex<Owned>,
}

/// What the NIC created and frees when it goes.
#[derive(Default)]
struct Owned {
    /// Per queue pair (by [`QpId`]): it and its send completion queue.
    qps: Vec<(*mut ffi::ibv_qp, *mut ffi::ibv_cq)>,
    mrs: Vec<*mut ffi::ibv_mr>,
}

// SAFETY: libibverbs objects may be used from any thread (its verbs are thread safe);
// the lists of them are behind a lock.
unsafe impl Send for IbNic {}
// SAFETY: as above.
unsafe impl Sync for IbNic {}

fn call_failed(call: &'static str) -> VerbsError {
    VerbsError::Call {
        call,
        reason: std::io::Error::last_os_error().to_string(),
    }
}

fn errno_failed(call: &'static str, errno: c_int) -> VerbsError {
    VerbsError::Call {
        call,
        reason: std::io::Error::from_raw_os_error(errno).to_string(),
    }
}

impl IbNic {
    /// Open the device and port `settings` name (see [`probe`]).
    pub fn open(settings: &Settings) -> Result<Arc<IbNic>, RdmaError> {
        let port = probe(settings)?;
        let failed = |what, source| RdmaError::verbs(&port, None, what, source);
        let ctx = open_named(&port.device).map_err(|e| failed("opening the device", e))?;
        let mut nic = IbNic {
            port: port.clone(),
            settings: settings.clone(),
            ctx,
            pd: null_mut(),
            channel: null_mut(),
            recv_cq: null_mut(),
            lid: 0,
            mtu: ffi::IBV_MTU_1024,
            gid: [0; 16],
            owned: Mutex::new(Owned::default()),
        };
        nic.set_up()
            .map_err(|e| failed("setting the device up", e))?;
        Ok(Arc::new(nic))
    }

    /// The port's LID, MTU and GID; the protection domain and the receive queue.
    fn set_up(&mut self) -> Result<(), VerbsError> {
        let mut attr = ffi::ibv_port_attr::default();
        // SAFETY: `ctx` is open; `attr` is the type the call fills.
        let errno =
            unsafe { ffi::ibv_query_port(self.ctx, self.port.port, &mut attr as *mut _ as *mut _) };
        if errno != 0 {
            return Err(errno_failed("ibv_query_port", errno));
        }
        self.lid = attr.lid;
        self.mtu = attr.active_mtu;
        let mut gid = ffi::ibv_gid { raw: [0; 16] };
        let index = c_int::try_from(self.settings.gid_index).unwrap_or(c_int::MAX);
        // SAFETY: as above; `gid` is a valid out-pointer.
        if unsafe { ffi::ibv_query_gid(self.ctx, self.port.port, index, &mut gid) } == 0 {
            // SAFETY: every bit pattern of the union is a valid byte array.
            self.gid = unsafe { gid.raw };
        }
        // SAFETY: `ctx` is open.
        self.pd = unsafe { ffi::ibv_alloc_pd(self.ctx) };
        if self.pd.is_null() {
            return Err(call_failed("ibv_alloc_pd"));
        }
        // SAFETY: `ctx` is open.
        self.channel = unsafe { ffi::ibv_create_comp_channel(self.ctx) };
        if self.channel.is_null() {
            return Err(call_failed("ibv_create_comp_channel"));
        }
        // Non-blocking, so that arming drains its events without waiting.
        rustix::io::ioctl_fionbio(self.recv_fd(), true).map_err(|e| VerbsError::Call {
            call: "ioctl(FIONBIO) on the completion channel",
            reason: std::io::Error::from(e).to_string(),
        })?;
        // SAFETY: as above; the channel is live, no context pointer.
        self.recv_cq =
            unsafe { ffi::ibv_create_cq(self.ctx, RECV_CQ_DEPTH, null_mut(), self.channel, 0) };
        if self.recv_cq.is_null() {
            return Err(call_failed("ibv_create_cq"));
        }
        Ok(())
    }

    fn qp(&self, qp: QpId) -> Result<(*mut ffi::ibv_qp, *mut ffi::ibv_cq), VerbsError> {
        self.owned
            .lock()
            .qps
            .get(qp)
            .copied()
            .ok_or(VerbsError::NoQp { qp })
    }

    fn modify(
        &self,
        qp: *mut ffi::ibv_qp,
        attr: &mut ffi::ibv_qp_attr,
        mask: ffi::ibv_qp_attr_mask,
        call: &'static str,
    ) -> Result<(), VerbsError> {
        // SAFETY: `qp` is one of this NIC's queue pairs; `attr` is filled for `mask`.
        let errno = unsafe { ffi::ibv_modify_qp(qp, attr, mask.0 as c_int) };
        match errno {
            0 => Ok(()),
            e => Err(errno_failed(call, e)),
        }
    }

    /// Take up to [`POLL_BATCH`] completions at a time from `cq` until it is empty.
    fn poll(
        &self,
        cq: *mut ffi::ibv_cq,
        mut each: impl FnMut(&ffi::ibv_wc),
    ) -> Result<(), VerbsError> {
        // SAFETY: the context outlives its queues; providers fill `ops.poll_cq`.
        let poll = unsafe { (*self.ctx).ops.poll_cq }.ok_or(VerbsError::Call {
            call: "ibv_poll_cq",
            reason: "the provider has no poll_cq".into(),
        })?;
        loop {
            // SAFETY: a work completion is plain data; zeroes are a valid one.
            let mut wcs: [ffi::ibv_wc; POLL_BATCH] = unsafe { std::mem::zeroed() };
            // SAFETY: `cq` is live and `wcs` has room for POLL_BATCH entries.
            let n = unsafe { poll(cq, POLL_BATCH as c_int, wcs.as_mut_ptr()) };
            if n < 0 {
                return Err(errno_failed("ibv_poll_cq", -n));
            }
            let n = n as usize;
            wcs[..n].iter().for_each(&mut each);
            if n < POLL_BATCH {
                return Ok(());
            }
        }
    }
}

fn status_of(wc: &ffi::ibv_wc) -> Status {
    match wc.error() {
        None => Status::Success,
        Some((ffi::ibv_wc_status::IBV_WC_REM_ACCESS_ERR, _)) => Status::RemoteAccess,
        Some((ffi::ibv_wc_status::IBV_WC_WR_FLUSH_ERR, _)) => Status::Flushed,
        Some((ffi::ibv_wc_status::IBV_WC_RNR_RETRY_EXC_ERR, _)) => Status::ReceiverNotReady,
        Some((other, _)) => Status::Other(other),
    }
}

/// Open the listed device named `name`.
fn open_named(name: &str) -> Result<*mut ffi::ibv_context, VerbsError> {
    // SAFETY: a listed device; the context outlives the list.
    let open = |d, n: String| (n == name).then(|| unsafe { ffi::ibv_open_device(d) });
    match visit_devices(open) {
        Err(()) => Err(call_failed("ibv_get_device_list")),
        Ok(Some(ctx)) if !ctx.is_null() => Ok(ctx),
        Ok(_) => Err(call_failed("ibv_open_device")),
    }
}

impl Verbs for IbNic {
    fn port(&self) -> &Port {
        &self.port
    }

    unsafe fn register(&self, addr: *mut u8, len: usize) -> Result<Registered, VerbsError> {
        let access = ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE
            | ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE;
        // SAFETY: the caller keeps the memory valid while the NIC lives.
        let mr = unsafe { ffi::ibv_reg_mr(self.pd, addr.cast(), len, access.0 as c_int) };
        if mr.is_null() {
            return Err(call_failed("ibv_reg_mr"));
        }
        self.owned.lock().mrs.push(mr);
        // SAFETY: a registered region, read once.
        let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        Ok(Registered {
            addr: addr as u64,
            len: len as u64,
            lkey,
            rkey,
        })
    }

    fn create_qp(&self) -> Result<(QpId, QpEndpoint), VerbsError> {
        // SAFETY: the context is open.
        let send_cq = unsafe { ffi::ibv_create_cq(self.ctx, CQ_DEPTH, null_mut(), null_mut(), 0) };
        if send_cq.is_null() {
            return Err(call_failed("ibv_create_cq"));
        }
        let mut init = ffi::ibv_qp_init_attr {
            qp_context: null_mut(),
            send_cq,
            recv_cq: self.recv_cq,
            srq: null_mut(),
            cap: ffi::ibv_qp_cap {
                max_send_wr: MAX_SEND_WR,
                max_recv_wr: MAX_RECV_WR,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: ffi::ibv_qp_type::IBV_QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: the protection domain and queues are live; `init` is filled.
        let qp = unsafe { ffi::ibv_create_qp(self.pd, &mut init) };
        if qp.is_null() {
            let err = call_failed("ibv_create_qp");
            // SAFETY: created above, used by nothing.
            unsafe { ffi::ibv_destroy_cq(send_cq) };
            return Err(err);
        }
        let id = {
            let mut owned = self.owned.lock();
            owned.qps.push((qp, send_cq));
            owned.qps.len() - 1
        };
        // SAFETY: a queue pair attribute set is plain data; zeroes are its defaults.
        let mut attr: ffi::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = ffi::ibv_qp_state::IBV_QPS_INIT;
        attr.pkey_index = 0;
        attr.port_num = self.port.port;
        attr.qp_access_flags = ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
        use ffi::ibv_qp_attr_mask as M;
        self.modify(
            qp,
            &mut attr,
            M::IBV_QP_STATE | M::IBV_QP_PKEY_INDEX | M::IBV_QP_PORT | M::IBV_QP_ACCESS_FLAGS,
            "ibv_modify_qp(INIT)",
        )?;
        // SAFETY: a live queue pair.
        let qp_num = unsafe { (*qp).qp_num };
        Ok((
            id,
            QpEndpoint {
                qp_num,
                lid: self.lid,
                gid: self.gid,
            },
        ))
    }

    fn connect(&self, qp: QpId, remote: QpEndpoint) -> Result<(), VerbsError> {
        let (qp, _) = self.qp(qp)?;
        use ffi::ibv_qp_attr_mask as M;
        // SAFETY: as in `create_qp`.
        let mut attr: ffi::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = ffi::ibv_qp_state::IBV_QPS_RTR;
        attr.path_mtu = self.mtu;
        attr.dest_qp_num = remote.qp_num;
        attr.rq_psn = 0;
        attr.max_dest_rd_atomic = 1;
        attr.min_rnr_timer = 12;
        attr.ah_attr.dlid = remote.lid;
        attr.ah_attr.port_num = self.port.port;
        if remote.gid != [0; 16] {
            attr.ah_attr.is_global = 1;
            attr.ah_attr.grh.dgid = ffi::ibv_gid { raw: remote.gid };
            attr.ah_attr.grh.sgid_index = u8::try_from(self.settings.gid_index).unwrap_or(u8::MAX);
            attr.ah_attr.grh.hop_limit = 0xff;
            attr.ah_attr.grh.traffic_class = self.settings.traffic_class;
        }
        let rtr = M::IBV_QP_STATE
            | M::IBV_QP_AV
            | M::IBV_QP_PATH_MTU
            | M::IBV_QP_DEST_QPN
            | M::IBV_QP_RQ_PSN
            | M::IBV_QP_MAX_DEST_RD_ATOMIC
            | M::IBV_QP_MIN_RNR_TIMER;
        self.modify(qp, &mut attr, rtr, "ibv_modify_qp(RTR)")?;
        attr.qp_state = ffi::ibv_qp_state::IBV_QPS_RTS;
        attr.timeout = 14;
        attr.retry_cnt = 7;
        attr.rnr_retry = 7;
        attr.sq_psn = 0;
        attr.max_rd_atomic = 1;
        let rts = M::IBV_QP_STATE
            | M::IBV_QP_TIMEOUT
            | M::IBV_QP_RETRY_CNT
            | M::IBV_QP_RNR_RETRY
            | M::IBV_QP_SQ_PSN
            | M::IBV_QP_MAX_QP_RD_ATOMIC;
        self.modify(qp, &mut attr, rts, "ibv_modify_qp(RTS)")
    }

    fn post_send(&self, qp: QpId, wrs: &[WorkRequest]) -> Result<(), VerbsError> {
        if wrs.is_empty() {
            return Ok(());
        }
        let (qp, _) = self.qp(qp)?;
        let mut sges: Vec<ffi::ibv_sge> = wrs
            .iter()
            .map(|w| ffi::ibv_sge {
                addr: w.local.0,
                length: w.local.1,
                lkey: w.local.2,
            })
            .collect();
        // SAFETY: a send work request is plain data; zeroes are a valid empty one.
        let mut list: Vec<ffi::ibv_send_wr> =
            wrs.iter().map(|_| unsafe { std::mem::zeroed() }).collect();
        for (i, w) in wrs.iter().enumerate() {
            let wr = &mut list[i];
            wr.wr_id = w.wr_id;
            wr.send_flags = ffi::ibv_send_flags::IBV_SEND_SIGNALED.0;
            wr.wr.rdma = ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
                remote_addr: w.remote.0,
                rkey: w.remote.1,
            };
            match w.op {
                SendOp::Write => wr.opcode = ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE,
                SendOp::WriteImm(imm) => {
                    wr.opcode = ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM;
                    wr.__bindgen_anon_1.imm_data = imm.to_be();
                }
            }
        }
        // Chain the requests and point each at its scatter entry, through one base
        // pointer per vector (neither moves again before the call).
        let (base, sge) = (list.as_mut_ptr(), sges.as_mut_ptr());
        for (i, w) in wrs.iter().enumerate() {
            // SAFETY: `i` is within both vectors.
            unsafe {
                let wr = &mut *base.add(i);
                if w.local.1 > 0 {
                    wr.sg_list = sge.add(i);
                    wr.num_sge = 1;
                }
                if i + 1 < wrs.len() {
                    wr.next = base.add(i + 1);
                }
            }
        }
        // SAFETY: the context outlives its queue pairs; providers fill `ops.post_send`.
        let post = unsafe { (*self.ctx).ops.post_send }.ok_or(VerbsError::Call {
            call: "ibv_post_send",
            reason: "the provider has no post_send".into(),
        })?;
        let mut bad = null_mut();
        // SAFETY: the list and its scatter entries live until the call returns (the NIC
        // copies the requests); sources lie in registered regions (checked by the link).
        let errno = unsafe { post(qp, base, &mut bad) };
        match errno {
            0 => Ok(()),
            e => Err(errno_failed("ibv_post_send", e)),
        }
    }

    fn post_recv(&self, qp: QpId, wr_id: u64) -> Result<(), VerbsError> {
        let (qp, _) = self.qp(qp)?;
        let mut wr = ffi::ibv_recv_wr {
            wr_id,
            next: null_mut(),
            sg_list: null_mut(),
            num_sge: 0,
        };
        // SAFETY: as in `post_send`.
        let post = unsafe { (*self.ctx).ops.post_recv }.ok_or(VerbsError::Call {
            call: "ibv_post_recv",
            reason: "the provider has no post_recv".into(),
        })?;
        let mut bad = null_mut();
        // SAFETY: a receive with no buffer (an immediate carries no payload).
        let errno = unsafe { post(qp, &mut wr, &mut bad) };
        match errno {
            0 => Ok(()),
            e => Err(errno_failed("ibv_post_recv", e)),
        }
    }

    fn poll_send(&self, qp: QpId, out: &mut Vec<Completion>) -> Result<(), VerbsError> {
        let (_, cq) = self.qp(qp)?;
        self.poll(cq, |wc| {
            out.push(Completion {
                wr_id: wc.wr_id(),
                qp,
                status: status_of(wc),
                imm: None,
            })
        })
    }

    fn poll_recv(&self, out: &mut Vec<Completion>) -> Result<(), VerbsError> {
        let qps: Vec<u32> = {
            let owned = self.owned.lock();
            // SAFETY: live queue pairs.
            owned
                .qps
                .iter()
                .map(|&(q, _)| unsafe { (*q).qp_num })
                .collect()
        };
        self.poll(self.recv_cq, |wc| {
            let qp = qps
                .iter()
                .position(|&n| n == wc.qp_num)
                .unwrap_or(usize::MAX);
            out.push(Completion {
                wr_id: wc.wr_id(),
                qp,
                status: status_of(wc),
                imm: wc.imm_data().map(u32::from_be),
            })
        })
    }

    fn recv_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the channel (and its descriptor) lives as long as the NIC.
        unsafe { BorrowedFd::borrow_raw((*self.channel).fd) }
    }

    fn recv_capacity(&self) -> usize {
        RECV_CQ_DEPTH as usize
    }

    fn arm_recv(&self) -> Result<(), VerbsError> {
        self.drain_events();
        // SAFETY: the context outlives its queues; providers fill `ops.req_notify_cq`.
        let notify = unsafe { (*self.ctx).ops.req_notify_cq }.ok_or(VerbsError::Call {
            call: "ibv_req_notify_cq",
            reason: "the provider has no req_notify_cq".into(),
        })?;
        // SAFETY: the receive queue is live; 0: every completion, not only solicited.
        match unsafe { notify(self.recv_cq, 0) } {
            0 => Ok(()),
            e => Err(errno_failed("ibv_req_notify_cq", e)),
        }
    }
}

impl IbNic {
    /// Acknowledge every event the channel holds (each `ibv_get_cq_event` must be acked
    /// before the queue may be destroyed).
    fn drain_events(&self) {
        loop {
            let (mut cq, mut context) = (null_mut(), null_mut());
            // SAFETY: the channel is live and non-blocking: no event is EAGAIN.
            if unsafe { ffi::ibv_get_cq_event(self.channel, &mut cq, &mut context) } != 0 {
                return;
            }
            // SAFETY: `cq` is the queue the event was for.
            unsafe { ffi::ibv_ack_cq_events(cq, 1) };
        }
    }
}

impl Drop for IbNic {
    /// Queue pairs first, then their queues, the regions, the domain, the device.
    fn drop(&mut self) {
        let owned = std::mem::take(&mut *self.owned.lock());
        // SAFETY: each object was created by this NIC, is destroyed once, in the order
        // libibverbs requires (nothing refers to it any more when it goes).
        unsafe {
            for (qp, cq) in owned.qps {
                ffi::ibv_destroy_qp(qp);
                ffi::ibv_destroy_cq(cq);
            }
            for mr in owned.mrs {
                ffi::ibv_dereg_mr(mr);
            }
            if !self.recv_cq.is_null() {
                ffi::ibv_destroy_cq(self.recv_cq);
            }
            if !self.channel.is_null() {
                ffi::ibv_destroy_comp_channel(self.channel);
            }
            if !self.pd.is_null() {
                ffi::ibv_dealloc_pd(self.pd);
            }
            ffi::ibv_close_device(self.ctx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without a device (CI, this machine) the probe says so, naming what it found; with
    /// one (`OXCCL_RDMA_TEST_DEVICE` names it) the probe finds it active.
    #[test]
    fn the_probe_finds_the_named_device_or_says_there_is_none() {
        let settings = Settings::from_env().expect("settings");
        match std::env::var("OXCCL_RDMA_TEST_DEVICE") {
            Ok(device) => {
                let settings = Settings {
                    device: Some(device.clone()),
                    ..settings
                };
                let port = probe(&settings).unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(port.device, device);
            }
            Err(_) if !device_names().is_empty() => {
                eprintln!(
                    "skipped: this machine has RDMA devices {:?}; name one in \
                     OXCCL_RDMA_TEST_DEVICE to probe it",
                    device_names()
                );
            }
            Err(_) => {
                let err = IbNic::open(&settings).err().expect("no device to open");
                assert!(matches!(err, RdmaError::NoDevice { .. }), "{err}");
                let err = probe(&settings).unwrap_err();
                assert!(matches!(err, RdmaError::NoDevice { .. }), "{err}");
                let named = Settings {
                    device: Some("mlx5_9".into()),
                    ..settings
                };
                let err = probe(&named).unwrap_err().to_string();
                assert!(err.contains("mlx5_9") && err.contains("none"), "{err}");
            }
        }
    }

    /// On the device `OXCCL_RDMA_TEST_DEVICE` names: a link over a loopback pair of queue
    /// pairs writes into a registered buffer, and its post comes out of the inbox. Skipped
    /// (saying so) without one: this is the only test of the verbs on real hardware.
    #[test]
    fn a_hop_over_a_loopback_queue_pair_lands_and_posts() {
        use super::super::inbox::Inbox;
        use super::super::link::RdmaLink;
        use super::super::RemoteRegion;
        use crate::transport::put::{Hop, PutWire, Target};
        use std::time::Duration;
        let Ok(device) = std::env::var("OXCCL_RDMA_TEST_DEVICE") else {
            eprintln!("skipped: no RDMA device named in OXCCL_RDMA_TEST_DEVICE");
            return;
        };
        let settings = Settings {
            device: Some(device),
            ..Settings::from_env().expect("settings")
        };
        let nic = IbNic::open(&settings).unwrap_or_else(|e| panic!("{e}"));
        let mut src: Vec<u8> = (0..8192u32).map(|i| (i % 253) as u8).collect();
        let mut dst = vec![0u8; 8192];
        // SAFETY: both buffers outlive the NIC's use of them in this test.
        let (from, to) = unsafe {
            (
                nic.register(src.as_mut_ptr(), src.len()).unwrap(),
                nic.register(dst.as_mut_ptr(), dst.len()).unwrap(),
            )
        };
        let (qp_a, end_a) = nic.create_qp().unwrap();
        let (qp_b, end_b) = nic.create_qp().unwrap();
        nic.connect(qp_a, end_b).unwrap();
        nic.connect(qp_b, end_a).unwrap();
        let mut inbox = Inbox::new(nic.clone(), 1, vec![(qp_b, 0)]).unwrap();
        let region = RemoteRegion {
            target: Target::CclIn,
            addr: to.addr,
            len: to.len,
            rkey: to.rkey,
        };
        let timeout = Duration::from_secs(5);
        let mut link = RdmaLink::new(nic.clone(), qp_a, (0, 1), vec![region], vec![from], timeout);
        let hop = Hop {
            target: Target::CclIn,
            offset: 100,
            bytes: &src[..4000],
            then_post: Some(3),
            epoch: 9,
        };
        link.put(hop).unwrap_or_else(|e| panic!("{e}"));
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + timeout;
        while got.is_empty() && std::time::Instant::now() < deadline {
            inbox
                .wait(Duration::from_millis(100), |_| 9, |p| got.push(p))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!(got.len(), 1, "one post");
        assert_eq!((got[0].word, got[0].epoch), (3, 9));
        assert_eq!(&dst[100..4100], &src[..4000]);
    }
}
