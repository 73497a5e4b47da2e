//! Host devices that reach each other's ranks over TCP on loopback: two devices of this
//! process stand for two hosts (the multi-process tests are in `tests/`), and a raw
//! socket plays a faulty or hostile peer.

use super::shm_tests::{request, run_ranks, run_requests, swap_and_check};
use super::tcp::ACCEPTED;
use super::HostDevice;
use crate::device::{CompileRequest, Device, DeviceConfig, RankProcess, Resource};
use crate::dtype::{DataType, ReduceOp};
use crate::error::{AbortCause, DeviceError, PeerLoss, SliceFault};
use crate::ir::{Buf, RankProgram, Slice};
use crate::notify::LinkSignal;
use crate::transport::rdma::fake::FakeNic;
use crate::transport::rdma::RdmaJob;
use crate::transport::tcp::wire::{Frame, Hello, Target, HELLO_LEN};
use crate::transport::tcp::{send, TcpError, TcpJob};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SECRET: [u8; 16] = *b"0123456789abcdef";

fn listener() -> (Arc<TcpListener>, SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind on loopback");
    let addr = l.local_addr().unwrap();
    (Arc::new(l), addr)
}

fn config(ranks: usize, local: Vec<usize>, job: TcpJob, timeout: Duration) -> DeviceConfig {
    DeviceConfig {
        local_ranks: local,
        ccl_bytes: 1 << 16,
        link_channels: 2,
        exec_timeout: timeout,
        host_threads: 1,
        zero_copy: false,
        tcp: Some(job),
        ..DeviceConfig::all_local(ranks)
    }
}

/// Devices serving ranks {0, 1} and {2, 3} of one job, reaching each other over TCP.
fn pair(timeout: Duration) -> (HostDevice, HostDevice) {
    pair_over(timeout, None)
}

/// [`pair`], the data and posts over RDMA when `nics` are given (device a's, device b's).
pub(super) fn pair_over(
    timeout: Duration,
    nics: Option<(Arc<FakeNic>, Arc<FakeNic>)>,
) -> (HostDevice, HostDevice) {
    pair_timed((timeout, timeout), nics)
}

/// [`pair_over`], device a with the first timeout and device b with the second.
pub(super) fn pair_timed(
    timeouts: (Duration, Duration),
    nics: Option<(Arc<FakeNic>, Arc<FakeNic>)>,
) -> (HostDevice, HostDevice) {
    match nics {
        Some((na, nb)) => pair_with(timeouts, (Some(na), Some(nb))),
        None => pair_with(timeouts, (None, None)),
    }
}

/// [`pair`], device a reaching b's ranks over RDMA through `nic`, and b not told about
/// RDMA (a job whose two sides disagree).
pub(super) fn pair_half_rdma(timeout: Duration, nic: Arc<FakeNic>) -> (HostDevice, HostDevice) {
    pair_with((timeout, timeout), (Some(nic), None))
}

fn pair_with(
    (timeout_a, timeout_b): (Duration, Duration),
    nics: (Option<Arc<FakeNic>>, Option<Arc<FakeNic>>),
) -> (HostDevice, HostDevice) {
    let (la, addr_a) = listener();
    let (lb, addr_b) = listener();
    let rdma = |nic: Arc<FakeNic>, peers: [bool; 4]| RdmaJob {
        verbs: nic,
        peers: peers.to_vec(),
    };
    let ra = nics.0.map(|n| rdma(n, [false, false, true, true]));
    let rb = nics.1.map(|n| rdma(n, [true, true, false, false]));
    let job = |listener, peers: [Option<SocketAddr>; 4], rdma| TcpJob {
        secret: SECRET,
        listener,
        peers: peers.to_vec(),
        rdma,
    };
    let ja = job(la, [None, None, Some(addr_b), Some(addr_b)], ra);
    let jb = job(lb, [Some(addr_a), Some(addr_a), None, None], rb);
    std::thread::scope(|s| {
        let b =
            s.spawn(|| HostDevice::new(config(4, vec![2, 3], jb, timeout_b)).expect("device b"));
        let a = HostDevice::new(config(4, vec![0, 1], ja, timeout_a)).expect("device a");
        (a, b.join().unwrap())
    })
}

#[test]
fn ranks_of_two_devices_exchange_data_and_signals_over_tcp() {
    let (a, b) = pair(Duration::from_secs(20));
    // Ranks 0 and 1 share a process, so they reach each other's user buffers; ranks 2
    // and 3, over TCP, never touch them.
    assert!(a.capabilities().peer_user_buffers);
    for (len, epochs) in [(4096, 1..=3u64), (0, 4..=4), (3 << 16, 5..=5)] {
        for epoch in epochs {
            swap_and_check(&a, &b, len.min(a.config().ccl_bytes), epoch);
        }
    }
}

/// Rank `r` reduces its input with itself straight into its peer's CclIn (no local
/// destination: the sum is made in a temporary and sent), then takes its own.
fn double_into_peer(dev: &HostDevice, r: usize, count: usize) -> RankProgram {
    let layout = dev.config().layout();
    let peer = r ^ 2;
    let len = count * 4;
    let mut p = RankProgram::new(r, 1);
    let s = &mut p.streams[0];
    let input = Slice::new(r, Buf::Input, 0, len);
    s.reduce_to(
        vec![input, input],
        vec![Slice::new(peer, Buf::CclIn, 0, len)],
        DataType::U32,
        ReduceOp::Sum,
    );
    s.post(layout.link(peer, r, 0, LinkSignal::DataSignal));
    s.wait(layout.link(r, peer, 0, LinkSignal::DataSignal));
    s.copy(
        Slice::new(r, Buf::CclIn, 0, len),
        Slice::new(r, Buf::Output, 0, len),
    );
    p
}

#[test]
fn a_reduction_into_a_tcp_peer_is_sent_from_a_temporary() {
    let (a, b) = pair(Duration::from_secs(20));
    double_into_peers_and_check(&a, &b);
}

/// Ranks {0, 1} of `a` and {2, 3} of `b` run [`double_into_peer`]; each output must be
/// its peer's input doubled.
pub(super) fn double_into_peers_and_check(a: &HostDevice, b: &HostDevice) {
    let count = 1001;
    let input = |r: usize| -> Vec<u8> {
        (0..count as u32)
            .flat_map(|i| (i.wrapping_mul(2654435761) ^ r as u32).to_le_bytes())
            .collect()
    };
    let doubled = |r: usize| -> Vec<u8> {
        input(r)
            .chunks(4)
            .flat_map(|c| {
                let v = u32::from_le_bytes(c.try_into().unwrap());
                v.wrapping_add(v).to_le_bytes()
            })
            .collect()
    };
    let (mut out_a, mut out_b) = (vec![vec![0u8; count * 4]; 2], vec![vec![0u8; count * 4]; 2]);
    let (in_a, in_b) = ([input(0), input(1)], [input(2), input(3)]);
    std::thread::scope(|s| {
        let rb = s.spawn(|| {
            let programs = vec![
                (double_into_peer(b, 2, count), vec![0]),
                (double_into_peer(b, 3, count), vec![1]),
            ];
            run_ranks(b, programs, &in_b, &mut out_b, 1)
        });
        let programs = vec![
            (double_into_peer(a, 0, count), vec![2]),
            (double_into_peer(a, 1, count), vec![3]),
        ];
        for r in run_ranks(a, programs, &in_a, &mut out_a, 1) {
            r.expect("rank of a");
        }
        for r in rb.join().unwrap() {
            r.expect("rank of b");
        }
    });
    assert_eq!(out_a, [doubled(2), doubled(3)]);
    assert_eq!(out_b, [doubled(0), doubled(1)]);
}

#[test]
fn a_program_may_only_write_a_tcp_peers_registered_buffers() {
    let (a, _b) = pair(Duration::from_secs(20));
    let compile = |p: RankProgram| a.compile(request(p, vec![2]));
    let fault = |err: DeviceError| match err {
        DeviceError::InvalidSlice { fault, .. } => fault,
        other => panic!("not a slice fault: {other}"),
    };
    let mut read = RankProgram::new(0, 1);
    read.streams[0].copy(
        Slice::new(2, Buf::CclIn, 0, 8),
        Slice::new(0, Buf::Output, 0, 8),
    );
    let f = fault(compile(read).unwrap_err());
    assert!(matches!(f, SliceFault::ReadOverPutLink { rank: 2 }), "{f}");
    let ccl = a.config().ccl_bytes;
    let mut past_end = RankProgram::new(0, 1);
    past_end.streams[0].copy(
        Slice::new(0, Buf::Input, 0, 8),
        Slice::new(2, Buf::CclOut, ccl - 4, 8),
    );
    let f = fault(compile(past_end).unwrap_err());
    assert!(matches!(f, SliceFault::OutOfBounds { .. }), "{f}");
    let mut user = RankProgram::new(0, 1);
    user.streams[0].copy(
        Slice::new(0, Buf::Input, 0, 8),
        Slice::new(2, Buf::Output, 0, 8),
    );
    let f = fault(compile(user).unwrap_err());
    assert!(
        matches!(f, SliceFault::UserBufferOutOfReach { rank: 2 }),
        "{f}"
    );
    let mut scratch = RankProgram::new(0, 1);
    scratch.streams[0].copy(
        Slice::new(0, Buf::Input, 0, 8),
        Slice::new(2, Buf::Scratch, 0, 8),
    );
    let f = fault(compile(scratch).unwrap_err());
    assert!(matches!(f, SliceFault::NoScratch), "{f}");
}

#[test]
fn scratch_is_exchanged_and_bounded_by_the_peers_announced_size() {
    let (a, b) = pair(Duration::from_secs(20));
    let (ida, idb) = std::thread::scope(|s| {
        let idb = s.spawn(|| b.alloc_scratch(100).expect("scratch b"));
        (
            a.alloc_scratch(100).expect("scratch a"),
            idb.join().unwrap(),
        )
    });
    assert_eq!(ida, idb);
    let compile = |at: usize| {
        let mut p = RankProgram::new(0, 1);
        p.streams[0].copy(
            Slice::new(0, Buf::Input, 0, 8),
            Slice::new(2, Buf::Scratch, at, 8),
        );
        a.compile(CompileRequest {
            program: Arc::new(p),
            scratch: Some(ida),
            peers: vec![2],
            local_notifies: 0,
            in_place: false,
            exit_fence: false,
            footprint: 0,
        })
    };
    compile(92).expect("inside the peer's scratch");
    let err = compile(93).unwrap_err();
    assert!(
        matches!(
            err,
            DeviceError::InvalidSlice {
                fault: SliceFault::OutOfBounds { buffer_len: 100 },
                ..
            }
        ),
        "{err}"
    );
}

/// The process id the job's table gives the rogue rank (not a real one: it is only named).
const ROGUE_PID: u32 = 4242;

/// A device serving rank 0 of 2, whose peer rank 1 is a raw socket of the test: the
/// rogue's connection to the device (on which it sends frames) and the device's to it,
/// which a compile that fences on rank 1 opens (connections are lazy).
fn device_with_rogue(timeout: Duration) -> (HostDevice, TcpStream, TcpStream) {
    device_with_rogue_of(2, timeout)
}

/// [`device_with_rogue`] in a job of `ranks`: ranks 2 and on are processes of other
/// hosts (pid `ROGUE_PID + rank`) that the device does not reach.
fn device_with_rogue_of(ranks: usize, timeout: Duration) -> (HostDevice, TcpStream, TcpStream) {
    let (dev_listener, dev_addr) = listener();
    let (rogue_listener, rogue_addr) = listener();
    let mut peers = vec![None; ranks];
    peers[1] = Some(rogue_addr);
    let job = TcpJob {
        secret: SECRET,
        listener: dev_listener,
        peers,
        rdma: None,
    };
    let others = (2..ranks).map(|r| RankProcess {
        pid: ROGUE_PID + r as u32,
        host: format!("host-{r}"),
    });
    let rogue = RankProcess {
        pid: ROGUE_PID,
        host: "rogue-host".into(),
    };
    let config = DeviceConfig {
        processes: [RankProcess::default(), rogue]
            .into_iter()
            .chain(others)
            .collect(),
        ..config(ranks, vec![0], job, timeout)
    };
    let hello = Hello {
        secret: SECRET,
        from: 1,
        to: 0,
        ranks: ranks as u32,
        ccl_bytes: config.ccl_bytes as u64,
        link_words: config.layout().local_base() as u64,
    };
    let dev = HostDevice::new(config).expect("device");
    assert_eq!(
        dev.tcp_connected(0),
        Vec::<usize>::new(),
        "nothing connects at init"
    );
    let mut outbound = TcpStream::connect(dev_addr).expect("connect to the device");
    outbound.write_all(&hello.encode()).unwrap();
    let mut answer = [0u8; 1];
    outbound.read_exact(&mut answer).unwrap();
    assert_eq!(answer[0], ACCEPTED);
    let rogue = std::thread::spawn(move || {
        let (mut inbound, _) = rogue_listener.accept().expect("the device connects");
        let mut h = [0u8; HELLO_LEN];
        inbound.read_exact(&mut h).expect("its hello");
        inbound.write_all(&[ACCEPTED]).unwrap();
        inbound
    });
    dev.compile(fence_on_rogue()).expect("connects to rank 1");
    let inbound = rogue.join().unwrap();
    assert_eq!(dev.tcp_connected(0), vec![1]);
    (dev, outbound, inbound)
}

/// A program of rank 0 that does nothing but fence on rank 1.
fn fence_on_rogue() -> CompileRequest {
    CompileRequest {
        program: Arc::new(RankProgram::new(0, 1)),
        scratch: None,
        peers: vec![1],
        local_notifies: 0,
        in_place: false,
        exit_fence: false,
        footprint: 0,
    }
}

/// Rank 0 of a [`device_with_rogue`], waiting for a signal from rank 1 that never comes.
fn wait_for_rogue(dev: &HostDevice) -> Result<(), DeviceError> {
    let layout = dev.config().layout();
    let mut p = RankProgram::new(0, 1);
    p.streams[0].wait(layout.link(0, 1, 0, LinkSignal::DataSignal));
    let mut out = [vec![0u8; 8]];
    run_ranks(dev, vec![(p, vec![1])], &[vec![0u8; 8]], &mut out, 1)
        .pop()
        .unwrap()
}

#[test]
fn a_zero_copy_call_does_not_wait_at_exit_for_a_peer_reached_over_tcp() {
    // A put-only peer never touches this rank's user buffers, so the exit fence leaves it
    // out: the rogue never finishes epoch 1, and the call returns all the same (it used
    // to wait for the rogue's Done frame, here until the timeout).
    let (dev, _outbound, _inbound) = device_with_rogue(Duration::from_secs(5));
    let mut p = RankProgram::new(0, 1);
    p.streams[0].copy(
        Slice::new(0, Buf::Input, 0, 8),
        Slice::new(0, Buf::Output, 0, 8),
    );
    let zero_copy = CompileRequest {
        exit_fence: true,
        footprint: 0,
        ..request(p, vec![1])
    };
    let mut out = [vec![0u8; 8]];
    let started = Instant::now();
    let result = run_requests(&dev, vec![zero_copy], (&[vec![3u8; 8]], &mut out), 1);
    assert!(matches!(result[..], [Ok(())]), "{result:?}");
    assert_eq!(out[0], vec![3u8; 8]);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "returned at once, not at the exit fence's timeout"
    );
    assert_eq!(dev.done_epoch(0).unwrap(), 1);
}

#[test]
fn an_out_of_bounds_write_from_a_peer_is_refused_before_a_byte_lands() {
    let (dev, mut rogue, _inbound) = device_with_rogue(Duration::from_secs(30));
    let ccl = dev.config().ccl_bytes;
    let ccl_in = dev.resource(0, Resource::CclIn).unwrap();
    assert_eq!(ccl_in.len, ccl);
    // SAFETY: the device's CclIn of rank 0, alive while `dev` is; nothing else runs.
    let tail = || {
        unsafe { std::slice::from_raw_parts((ccl_in.addr + ccl - 16) as *const u8, 16) }.to_vec()
    };
    let before = tail();
    let start = Instant::now();
    let attack = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        let frame = Frame::Write {
            target: Target::CclIn,
            offset: (ccl - 8) as u64,
            len: 16,
            epoch: 1,
        };
        let _ = send(&mut rogue, &frame.encode(), &[0xEE; 16]);
        rogue
    });
    let err = wait_for_rogue(&dev).unwrap_err();
    let _rogue = attack.join().unwrap();
    assert_eq!(tail(), before, "no byte of the refused write landed");
    match &err {
        DeviceError::Aborted {
            cause: AbortCause::PeerFailed { rank: 1, error },
            ..
        } => match &**error {
            DeviceError::Tcp(TcpError::OutOfBounds {
                from: 1,
                to: 0,
                len: 16,
                ..
            }) => {}
            other => panic!("not an out-of-bounds refusal: {other}"),
        },
        other => panic!("rank 0: {other}"),
    }
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "released, not timed out"
    );
}

#[test]
fn a_post_for_an_operation_its_receiver_already_ended_stops_the_device() {
    let (dev, mut rogue, _inbound) = device_with_rogue(Duration::from_secs(30));
    let layout = dev.config().layout();
    let mut out = [vec![0u8; 8]];
    let nothing = RankProgram::new(0, 1);
    let ended = run_ranks(&dev, vec![(nothing, vec![1])], &[vec![0u8; 8]], &mut out, 1);
    assert!(ended[0].is_ok(), "{ended:?}");
    // The rogue posts rank 0's Ack for epoch 1, which rank 0 already ended.
    let word = layout.link(0, 1, 0, LinkSignal::Ack).index as u64;
    send(&mut rogue, &Frame::Post { word, epoch: 1 }.encode(), &[]).unwrap();
    assert_the_rogues_frame_is_refused(&dev, "for operation 1, which rank 0 already ended");
}

/// Rank 0 of a [`device_with_rogue`], waiting for rank 1, is released well before its
/// timeout by the refusal of a frame rank 1 sent, which says `why`.
fn assert_the_rogues_frame_is_refused(dev: &HostDevice, why: &str) {
    let start = Instant::now();
    let err = wait_for_rogue(dev).unwrap_err();
    let DeviceError::Aborted {
        cause: AbortCause::PeerFailed { rank: 1, error },
        ..
    } = &err
    else {
        panic!("rank 0: {err}");
    };
    let DeviceError::Tcp(TcpError::BadFrame { from: 1, what, .. }) = &**error else {
        panic!("not a refused frame: {error}");
    };
    assert!(what.contains(why), "{what}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "released, not timed out"
    );
}

#[test]
fn a_connection_without_the_secret_is_dropped_and_the_job_goes_on() {
    let (a, b) = pair(Duration::from_secs(20));
    let addr = a
        .shared
        .config
        .tcp
        .as_ref()
        .unwrap()
        .listener
        .local_addr()
        .unwrap();
    let mut stranger = TcpStream::connect(addr).expect("the listener accepts");
    let mut hello = Hello {
        secret: [0; 16],
        from: 2,
        to: 0,
        ranks: 4,
        ccl_bytes: 1 << 16,
        link_words: a.config().layout().local_base() as u64,
    }
    .encode();
    hello[20] ^= 1;
    stranger.write_all(&hello).unwrap();
    // Frames after a bad hello are never read: the connection is closed instead.
    let _ = send(
        &mut stranger,
        &Frame::Post { word: 0, epoch: 1 }.encode(),
        &[],
    );
    stranger
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut answer = [0u8; 1];
    match stranger.read(&mut answer) {
        // Closed with unread bytes in its buffer, the socket may be reset instead.
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("not closed without an answer: {other:?}"),
    }
    // The real peers are untouched.
    swap_and_check(&a, &b, 64, 1);
}

#[test]
fn a_scratch_id_far_ahead_of_this_rank_is_refused() {
    let (dev, mut rogue, _inbound) = device_with_rogue(Duration::from_secs(30));
    let attack = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        let frame = Frame::Scratch {
            id: u64::MAX,
            bytes: 8,
        };
        let _ = send(&mut rogue, &frame.encode(), &[]);
        rogue
    });
    let err = wait_for_rogue(&dev).unwrap_err();
    let _rogue = attack.join().unwrap();
    match &err {
        DeviceError::Aborted {
            cause: AbortCause::PeerFailed { rank: 1, error },
            ..
        } => assert!(
            matches!(
                &**error,
                DeviceError::Tcp(TcpError::BadFrame { from: 1, .. })
            ),
            "{error}"
        ),
        other => panic!("rank 0: {other}"),
    }
}

#[test]
fn a_peer_whose_connection_ends_without_closing_releases_the_waiting_rank() {
    let (dev, rogue, inbound) = device_with_rogue(Duration::from_secs(30));
    let start = Instant::now();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        drop((rogue, inbound));
    });
    let err = wait_for_rogue(&dev).unwrap_err();
    killer.join().unwrap();
    assert_the_rogue_died(&err);
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "released, not timed out"
    );
}

/// A send that finds its peer's socket reset (the peer's process died, its kernel
/// answered with RST) reports the peer's death, as the end of a stream does, not the
/// send's own error.
#[test]
fn a_send_to_a_reset_peer_reports_the_peer_dead() {
    let (dev, _rogue, inbound) = device_with_rogue(Duration::from_secs(30));
    // Linger 0: the close resets the connection the device sends on.
    rustix::net::sockopt::set_socket_linger(&inbound, Some(Duration::ZERO)).unwrap();
    drop(inbound);
    std::thread::sleep(Duration::from_millis(200));
    let layout = dev.config().layout();
    let mut p = RankProgram::new(0, 1);
    p.streams[0].post(layout.link(1, 0, 0, LinkSignal::DataSignal));
    let mut out = [vec![0u8; 8]];
    let err = run_ranks(&dev, vec![(p, vec![1])], &[vec![0u8; 8]], &mut out, 1)
        .pop()
        .unwrap()
        .unwrap_err();
    assert_the_rogue_died(&err);
}

/// A peer that stopped for another rank's death relays it and exits, so a send to it can
/// find its socket reset before the receiver has read the relay. The send waits for the
/// receiver's account and names the rank the peer names, not the peer.
#[test]
fn a_send_to_a_peer_gone_after_relaying_a_loss_names_the_rank_lost_first() {
    let (dev, _rogue, _inbound) = device_with_rogue_of(3, Duration::from_secs(30));
    let shared = dev.shared.clone();
    let relayed = shared.config.lost(2, None, PeerLoss::Died);
    let receiver = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        shared.stop(relayed, None);
    });
    let err = dev.shared.tcp_send_failed(reset_sending(0, 1));
    receiver.join().unwrap();
    let named = format!(
        "rank 2 (process {}) died; it ran on host host-2",
        ROGUE_PID + 2
    );
    assert!(err.to_string().contains(&named), "{err}");
    assert!(matches!(err, DeviceError::Aborted { rank: 0, .. }), "{err}");
}

/// With no account from the receiver within the grace, the send blames the peer it
/// found gone.
#[test]
fn a_send_to_a_reset_peer_blames_it_when_nothing_else_stopped_the_device() {
    let (dev, _rogue, _inbound) = device_with_rogue_of(3, Duration::from_secs(30));
    let err = dev.shared.tcp_send_failed(reset_sending(0, 1));
    assert_the_rogue_died(&err);
    assert!(
        dev.shared.failure().is_some(),
        "the send stopped the device"
    );
}

/// The error of rank `from`'s send to rank `to`, whose connection was reset.
fn reset_sending(from: usize, to: usize) -> DeviceError {
    let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
    DeviceError::Tcp(TcpError::Send {
        from,
        to,
        source: Arc::new(reset),
    })
}

/// `err` is rank 0's call aborted because rank 1 of a [`device_with_rogue`] died, named
/// with its process and host.
fn assert_the_rogue_died(err: &DeviceError) {
    let named = format!("rank 1 (process {ROGUE_PID}) died; it ran on host rogue-host");
    assert!(err.to_string().contains(&named), "{err}");
    assert!(
        matches!(
            err,
            DeviceError::Aborted {
                rank: 0,
                cause: AbortCause::PeerProcess {
                    rank: 1,
                    loss: PeerLoss::Died,
                    ..
                },
            }
        ),
        "{err}"
    );
}

#[test]
fn a_peer_of_another_shape_is_refused_at_connect() {
    let (la, addr_a) = listener();
    let (lb, addr_b) = listener();
    let mk = |listener, peers: Vec<Option<SocketAddr>>| TcpJob {
        secret: SECRET,
        listener,
        peers,
        rdma: None,
    };
    let timeout = Duration::from_secs(5);
    let ca = config(2, vec![0], mk(la, vec![None, Some(addr_b)]), timeout);
    let cb = DeviceConfig {
        ccl_bytes: 1 << 17,
        ..config(2, vec![1], mk(lb, vec![Some(addr_a), None]), timeout)
    };
    let (a, b) = (HostDevice::new(ca).unwrap(), HostDevice::new(cb).unwrap());
    // The first compile that needs the peer connects; each side refuses the other.
    let fence_on = |dev: &HostDevice, rank, peer| {
        dev.compile(CompileRequest {
            program: Arc::new(RankProgram::new(rank, 1)),
            peers: vec![peer],
            ..fence_on_rogue()
        })
    };
    for err in [
        fence_on(&a, 0, 1).unwrap_err(),
        fence_on(&b, 1, 0).unwrap_err(),
    ] {
        assert!(
            matches!(err, DeviceError::Tcp(TcpError::Refused { .. })),
            "{err}"
        );
    }
}

/// A rank connects only to the peers its programs need, and a fence that is not mutual
/// (rank 0 fences on rank 2, which never fences on or sends to rank 0) gets its epochs
/// over the connection rank 0 opened.
#[test]
fn connections_are_opened_for_the_peers_a_program_needs_and_epochs_come_back_on_them() {
    let (a, b) = pair(Duration::from_secs(20));
    assert_eq!((a.tcp_connected(0), b.tcp_connected(0)), (vec![], vec![]));
    let alone = |rank| (RankProgram::new(rank, 1), vec![]);
    let data = [vec![0u8; 8], vec![0u8; 8]];
    let run_b = |epoch| {
        let mut out = [vec![0u8; 8], vec![0u8; 8]];
        run_ranks(&b, vec![alone(2), alone(3)], &data, &mut out, epoch)
    };
    let run_a = |epoch| {
        let mut out = [vec![0u8; 8], vec![0u8; 8]];
        let fenced = (RankProgram::new(0, 1), vec![2]);
        run_ranks(&a, vec![fenced, alone(1)], &data, &mut out, epoch)
    };
    let ok = |r: Vec<Result<(), DeviceError>>| assert!(r.iter().all(Result::is_ok), "{r:?}");
    // Rank 2 finishes epochs 1..=3 before rank 0 connects: its hello's answer says so.
    (1..=3).for_each(|e| ok(run_b(e)));
    (1..=3).for_each(|e| ok(run_a(e)));
    // Then side by side: each epoch rank 2 publishes reaches rank 0.
    std::thread::scope(|s| {
        let b = s.spawn(|| (4..=8).for_each(|e| ok(run_b(e))));
        (4..=8).for_each(|e| ok(run_a(e)));
        b.join().unwrap();
    });
    assert_eq!(
        a.tcp_connected(0),
        vec![2],
        "rank 0 connected to its fence peer only"
    );
    assert_eq!(a.tcp_connected(1), Vec::<usize>::new());
    assert_eq!(
        b.tcp_connected(0),
        Vec::<usize>::new(),
        "rank 2 opened nothing"
    );
}

/// Read one frame header from `stream` within `wait`; `None` when none came.
fn next_frame(stream: &mut TcpStream, wait: Duration) -> Option<Frame> {
    stream.set_read_timeout(Some(wait)).unwrap();
    let mut h = [0u8; crate::transport::tcp::wire::HEADER_LEN];
    match stream.read_exact(&mut h) {
        Ok(()) => Some(Frame::decode(&h).expect("a frame")),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            None
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn done_epochs_go_to_a_subscriber_only_as_far_as_it_asked() {
    let (dev, mut rogue, _inbound) = device_with_rogue(Duration::from_secs(20));
    let run = |epoch| {
        let mut out = [vec![0u8; 8]];
        let alone = (RankProgram::new(0, 1), vec![]);
        let r = run_ranks(&dev, vec![alone], &[vec![0u8; 8]], &mut out, epoch);
        assert!(r[0].is_ok(), "{r:?}");
    };
    // Frames that must come get seconds; an absence is checked for a short while.
    let (long, short) = (Duration::from_secs(10), Duration::from_millis(300));
    // The hello's answer: the current epoch. Then nothing: rank 1 asked for none.
    assert_eq!(next_frame(&mut rogue, long), Some(Frame::Done { epoch: 0 }));
    (1..=3).for_each(run);
    assert_eq!(next_frame(&mut rogue, short), None, "no lease, no epochs");
    // A Want gets the current epoch at once, then each up to its end.
    send(&mut rogue, &Frame::Want { until: 5 }.encode(), &[]).unwrap();
    assert_eq!(next_frame(&mut rogue, long), Some(Frame::Done { epoch: 3 }));
    (4..=7).for_each(run);
    assert_eq!(next_frame(&mut rogue, long), Some(Frame::Done { epoch: 4 }));
    assert_eq!(next_frame(&mut rogue, long), Some(Frame::Done { epoch: 5 }));
    assert_eq!(next_frame(&mut rogue, short), None, "the lease ended at 5");
}

#[test]
fn a_rank_asks_its_tcp_fence_peer_for_epochs_and_renews_the_lease() {
    use super::tcp::LEASE;
    let (dev, _rogue, mut inbound) = device_with_rogue(Duration::from_secs(20));
    let short = Duration::from_millis(300);
    let mut wants = Vec::new();
    for epoch in 1..=LEASE {
        // Rank 1 (the test) finished the epoch before: rank 0's entry fence needs at most
        // that (the one before it, over TCP).
        send(
            &mut inbound,
            &Frame::Done { epoch: epoch - 1 }.encode(),
            &[],
        )
        .unwrap();
        let mut out = [vec![0u8; 8]];
        let fenced = (RankProgram::new(0, 1), vec![1]);
        let r = run_ranks(&dev, vec![fenced], &[vec![0u8; 8]], &mut out, epoch);
        assert!(r[0].is_ok(), "epoch {epoch}: {r:?}");
    }
    while let Some(frame) = next_frame(&mut inbound, short) {
        wants.push(frame);
    }
    // The first call asks; the call whose need passes half the lease renews it.
    let renewed_at = LEASE / 2 + 1;
    assert_eq!(
        wants,
        [
            Frame::Want { until: LEASE },
            Frame::Want {
                until: renewed_at + LEASE
            }
        ]
    );
}

/// Rank 0 of a [`device_with_rogue`] at `epoch`: wait for rank 1's DataSignal, then take
/// the 8 bytes rank 1 wrote at the start of its CclIn.
fn take_from_rogue(dev: &HostDevice, epoch: u64) -> (Result<(), DeviceError>, Vec<u8>) {
    let layout = dev.config().layout();
    let mut p = RankProgram::new(0, 1);
    p.streams[0].wait(layout.link(0, 1, 0, LinkSignal::DataSignal));
    p.streams[0].copy(
        Slice::new(0, Buf::CclIn, 0, 8),
        Slice::new(0, Buf::Output, 0, 8),
    );
    let mut out = [vec![0u8; 8]];
    let r = run_ranks(dev, vec![(p, vec![1])], &[vec![0u8; 8]], &mut out, epoch);
    let [out] = out;
    (r.into_iter().next().unwrap(), out)
}

/// What the rogue (rank 1) sends rank 0 for its call of `epoch`: 8 bytes of `byte` at the
/// start of rank 0's CclIn, then the DataSignal that announces them.
fn rogue_put(rogue: &mut TcpStream, layout: &crate::notify::NotifyLayout, epoch: u64, byte: u8) {
    let write = Frame::Write {
        target: Target::CclIn,
        offset: 0,
        len: 8,
        epoch,
    };
    send(rogue, &write.encode(), &[byte; 8]).unwrap();
    let word = layout.link(0, 1, 0, LinkSignal::DataSignal).index as u64;
    send(rogue, &Frame::Post { word, epoch }.encode(), &[]).unwrap();
}

#[test]
fn a_peers_frames_for_the_next_call_land_when_this_rank_ends_its_current_one() {
    // A TCP peer may run a call ahead (its fence on this rank lags two): its bytes and
    // posts for epoch 2 come while rank 0 has not even started epoch 1. They must not
    // land in the CclIn epoch 1 still reads, nor set the signal epoch 1 waits on.
    let (dev, mut rogue, _inbound) = device_with_rogue(Duration::from_secs(20));
    let layout = dev.config().layout();
    let ccl_in = dev.resource(0, Resource::CclIn).unwrap();
    // SAFETY: the device's CclIn of rank 0, alive while `dev` is; read between calls.
    let head = || unsafe { std::slice::from_raw_parts(ccl_in.addr as *const u8, 8) }.to_vec();
    rogue_put(&mut rogue, &layout, 2, 0xB2);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(head(), [0; 8], "held: epoch 1 has not ended");
    rogue_put(&mut rogue, &layout, 1, 0xA1);
    let (first, out) = take_from_rogue(&dev, 1);
    assert!(first.is_ok(), "{first:?}");
    assert_eq!(out, [0xA1; 8], "epoch 1 took its own bytes, not epoch 2's");
    let (second, out) = take_from_rogue(&dev, 2);
    assert!(second.is_ok(), "{second:?}");
    assert_eq!(
        out, [0xB2; 8],
        "epoch 2's bytes and post landed when epoch 1 ended"
    );
}

#[test]
fn a_frame_two_calls_ahead_stops_the_device() {
    let (dev, mut rogue, _inbound) = device_with_rogue(Duration::from_secs(30));
    let layout = dev.config().layout();
    // Rank 0 finished nothing: a frame of epoch 3 is one the fence rules out.
    rogue_put(&mut rogue, &layout, 3, 0xEE);
    assert_the_rogues_frame_is_refused(&dev, "more than one operation ahead");
}

#[test]
fn a_call_that_posts_to_a_tcp_subscriber_sends_it_no_done() {
    // Rank 1 learns that rank 0 finished epoch e - 1 from rank 0's posts of e; a Done of
    // e would cost a message per call for nothing. A call without a post to rank 1 still
    // sends its Done.
    let (dev, mut rogue, mut inbound) = device_with_rogue(Duration::from_secs(20));
    let layout = dev.config().layout();
    let (long, short) = (Duration::from_secs(10), Duration::from_millis(300));
    assert_eq!(next_frame(&mut rogue, long), Some(Frame::Done { epoch: 0 }));
    send(&mut rogue, &Frame::Want { until: 10 }.encode(), &[]).unwrap();
    assert_eq!(next_frame(&mut rogue, long), Some(Frame::Done { epoch: 0 }));
    let word = layout.link(1, 0, 0, LinkSignal::DataSignal);
    let run = |epoch, post: bool| {
        let mut p = RankProgram::new(0, 1);
        if post {
            p.streams[0].post(word);
        }
        let mut out = [vec![0u8; 8]];
        let r = run_ranks(&dev, vec![(p, vec![1])], &[vec![0u8; 8]], &mut out, epoch);
        assert!(r[0].is_ok(), "epoch {epoch}: {r:?}");
    };
    run(1, true);
    let posted = Frame::Post {
        word: word.index as u64,
        epoch: 1,
    };
    let not_want = |f: &Option<Frame>| !matches!(f, Some(Frame::Want { .. }));
    let sent = std::iter::repeat_with(|| next_frame(&mut inbound, long)).find(not_want);
    assert_eq!(
        sent,
        Some(Some(posted)),
        "rank 0's fence asks with Wants, then the post"
    );
    assert_eq!(next_frame(&mut rogue, short), None, "no Done for epoch 1");
    run(2, false);
    assert_eq!(next_frame(&mut rogue, long), Some(Frame::Done { epoch: 2 }));
}

#[test]
fn a_call_fences_on_a_tcp_peer_one_call_further_back() {
    // Frames for the call after a rank's current one are held (see `tcp::early`), so a
    // call of epoch e needs its TCP peer to have finished e - 2, not e - 1.
    let (dev, _rogue, mut inbound) = device_with_rogue(Duration::from_secs(20));
    let run = |epoch| {
        let mut out = [vec![0u8; 8]];
        let fenced = (RankProgram::new(0, 1), vec![1]);
        run_ranks(&dev, vec![fenced], &[vec![0u8; 8]], &mut out, epoch)
            .pop()
            .unwrap()
    };
    // The rogue finished nothing.
    assert!(run(1).is_ok());
    assert!(run(2).is_ok(), "epoch 2 needs the peer's epoch 0 only");
    std::thread::scope(|s| {
        let third = s.spawn(|| run(3));
        std::thread::sleep(Duration::from_millis(300));
        assert!(!third.is_finished(), "epoch 3 waits for the peer's epoch 1");
        send(&mut inbound, &Frame::Done { epoch: 1 }.encode(), &[]).unwrap();
        assert!(third.join().unwrap().is_ok());
    });
}
