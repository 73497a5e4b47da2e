//! The RDMA transport's protocol against the fake fabric: data and posts, completions lost,
//! reordered and failed, bounds, keys, and the connect info.

use super::fake::{Fabric, FakeNic};
use super::inbox::{Inbox, Posted};
use super::link::{ConnectInfo, RdmaLink};
use super::verbs::{QpEndpoint, QpId, Registered, SendOp, Status, Verbs, WorkRequest};
use super::*;
use crate::transport::put::{Hop, PutWire, Target};
use std::sync::Arc;
use std::time::Duration;

/// Bytes of each side's buffers.
const LEN: usize = 4096;
/// Guard bytes around the receiver's registered CclOut.
const GUARD: usize = 64;

/// Rank 0 (NIC "a") linked to rank 1 (NIC "b"): rank 0's source buffer, rank 1's CclIn
/// and CclOut (registered between guard bytes), the link and rank 1's inbox.
struct Pair {
    a: Arc<FakeNic>,
    b: Arc<FakeNic>,
    qp_a: QpId,
    src: Vec<u8>,
    src_region: Registered,
    ccl_in: Vec<u8>,
    /// GUARD bytes, CclOut (LEN), GUARD bytes.
    ccl_out: Vec<u8>,
    regions: Vec<RemoteRegion>,
}

impl Pair {
    fn new() -> Pair {
        let fabric = Fabric::new();
        let (a, b) = (fabric.nic("fake_a").unwrap(), fabric.nic("fake_b").unwrap());
        let mut src: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
        let mut ccl_in = vec![0u8; LEN];
        let mut ccl_out = vec![0xEEu8; LEN + 2 * GUARD];
        // SAFETY: the buffers live in the Pair, as long as the NICs are used.
        let (src_region, r_in, r_out) = unsafe {
            (
                a.register(src.as_mut_ptr(), LEN).unwrap(),
                b.register(ccl_in.as_mut_ptr(), LEN).unwrap(),
                b.register(ccl_out.as_mut_ptr().add(GUARD), LEN).unwrap(),
            )
        };
        let (qp_a, end_a) = a.create_qp().unwrap();
        let (qp_b, end_b) = b.create_qp().unwrap();
        a.connect(qp_a, end_b).unwrap();
        b.connect(qp_b, end_a).unwrap();
        let region = |target, r: Registered| RemoteRegion {
            target,
            addr: r.addr,
            len: r.len,
            rkey: r.rkey,
        };
        let regions = vec![region(Target::CclIn, r_in), region(Target::CclOut, r_out)];
        Pair {
            a,
            b,
            qp_a,
            src,
            src_region,
            ccl_in,
            ccl_out,
            regions,
        }
    }

    fn link(&self, timeout: Duration) -> RdmaLink<FakeNic> {
        self.link_into(self.regions.clone(), timeout)
    }

    /// The link with `regions` as what rank 1 advertised (a peer that lies about them).
    fn link_into(&self, regions: Vec<RemoteRegion>, timeout: Duration) -> RdmaLink<FakeNic> {
        let source = vec![self.src_region];
        RdmaLink::new(self.a.clone(), self.qp_a, (0, 1), regions, source, timeout)
    }

    fn inbox(&self) -> Inbox<FakeNic> {
        Inbox::new(self.b.clone(), 1, vec![(0, 0)]).unwrap()
    }

    fn out(&self) -> &[u8] {
        &self.ccl_out[GUARD..GUARD + LEN]
    }

    fn guards_intact(&self) -> bool {
        let (head, rest) = self.ccl_out.split_at(GUARD);
        let tail = &rest[LEN..];
        head.iter().chain(tail).all(|&b| b == 0xEE)
    }
}

const SECOND: Duration = Duration::from_secs(1);

fn hop(bytes: &[u8], target: Target, offset: u64, then_post: Option<u64>) -> Hop<'_> {
    Hop {
        target,
        offset,
        bytes,
        then_post,
        epoch: 3,
    }
}

fn taken(inbox: &mut Inbox<FakeNic>, current: u64) -> Vec<Posted> {
    let mut got = Vec::new();
    inbox.take(|_| current, |p| got.push(p)).unwrap();
    got
}

#[test]
fn a_hop_lands_in_the_peers_buffer_and_its_post_comes_after_it() {
    let p = Pair::new();
    let mut inbox = p.inbox();
    let mut link = p.link(SECOND);
    link.put(hop(&p.src[..1000], Target::CclOut, 100, Some(5)))
        .unwrap();
    assert_eq!(&p.out()[100..1100], &p.src[..1000]);
    assert!(p.out()[..100].iter().all(|&b| b == 0xEE), "nothing before");
    assert!(p.guards_intact());
    let log = p.a.log();
    assert_eq!(log.len(), 2);
    assert_eq!(log[0].op, SendOp::Write);
    assert!(matches!(log[1].op, SendOp::WriteImm(_)), "the post is last");
    let posted = taken(&mut inbox, 3);
    let want = Posted {
        qp: 0,
        peer: 0,
        word: 5,
        epoch: 3,
    };
    assert_eq!(posted, vec![want]);
}

#[test]
fn a_post_alone_and_many_posts_keep_the_receives_posted() {
    let p = Pair::new();
    let mut inbox = p.inbox();
    let mut link = p.link(SECOND);
    let mut seen = 0;
    for round in 0..3 {
        for i in 0..Inbox::<FakeNic>::DEPTH as u64 {
            link.post(i, round).unwrap();
        }
        let posted = taken(&mut inbox, round);
        assert_eq!(posted.len(), Inbox::<FakeNic>::DEPTH, "round {round}");
        assert!(posted.iter().all(|x| x.epoch == round && x.peer == 0));
        seen += posted.len();
    }
    assert_eq!(seen, 3 * Inbox::<FakeNic>::DEPTH);
    assert!(p.ccl_in.iter().all(|&b| b == 0), "a post moves no data");
}

#[test]
fn an_idle_inbox_sleeps_until_an_immediate_wakes_it() {
    let p = Pair::new();
    let mut inbox = p.inbox();
    let started = std::time::Instant::now();
    let none = inbox
        .wait(Duration::from_millis(30), |_| 0, |_| {})
        .unwrap();
    assert_eq!(none, 0);
    assert!(started.elapsed() >= Duration::from_millis(25), "it slept");
    let fd = p.b.recv_fd();
    let readable = || {
        use rustix::event::{poll, PollFd, PollFlags};
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        poll(&mut fds, Some(&zero)).unwrap() == 1
    };
    assert!(!readable(), "nothing signalled");
    std::thread::scope(|s| {
        let link = p.link(SECOND);
        s.spawn(move || {
            let mut link = link;
            std::thread::sleep(Duration::from_millis(20));
            link.post(7, 0).unwrap();
        });
        let started = std::time::Instant::now();
        let mut got = Vec::new();
        while got.is_empty() {
            inbox
                .wait(Duration::from_secs(5), |_| 0, |x| got.push(x))
                .unwrap();
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "woken, not timed out"
        );
        assert_eq!(got[0].word, 7);
    });
}

#[test]
fn completions_in_reverse_order_are_taken_all_the_same() {
    let p = Pair::new();
    let _inbox = p.inbox();
    p.a.reorder_completions(true);
    let mut link = p.link(SECOND);
    link.put(hop(&p.src[..64], Target::CclIn, 0, Some(1)))
        .unwrap();
    link.put(hop(&p.src[64..128], Target::CclIn, 64, Some(2)))
        .unwrap();
    assert_eq!(&p.ccl_in[..128], &p.src[..128]);
}

#[test]
fn a_lost_completion_is_an_error_naming_the_peer_and_the_request() {
    let p = Pair::new();
    let _inbox = p.inbox();
    p.a.lose_completions(1);
    let mut link = p.link(Duration::from_millis(50));
    let err = link
        .put(hop(&p.src[..8], Target::CclIn, 0, Some(1)))
        .unwrap_err();
    match &err {
        RdmaError::LostCompletion {
            rank, peer, wr_id, ..
        } => assert_eq!((*rank, *peer, *wr_id), (0, 1, 1), "{err}"),
        other => panic!("{other}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("rank 1") && text.contains("fake_a port 1"),
        "{text}"
    );
    // The next hop is not confused by the late completion of the lost one.
    link.put(hop(&p.src[8..16], Target::CclIn, 8, None))
        .unwrap();
}

#[test]
fn a_queue_pair_in_error_fails_every_hop_with_a_typed_error() {
    let p = Pair::new();
    let _inbox = p.inbox();
    p.a.fail_qp(p.qp_a);
    let mut link = p.link(SECOND);
    for _ in 0..2 {
        let err = link
            .put(hop(&p.src[..8], Target::CclIn, 0, None))
            .unwrap_err();
        let RdmaError::QueuePair { peer, status, .. } = err else {
            panic!("{err}");
        };
        assert_eq!((peer, status), (1, Status::Flushed));
    }
    assert!(p.ccl_in.iter().all(|&b| b == 0), "nothing written");
}

#[test]
fn an_immediate_with_no_receive_posted_fails_the_queue_pair() {
    let p = Pair::new();
    let mut link = p.link(SECOND);
    let err = link.post(1, 0).unwrap_err();
    assert!(
        matches!(
            err,
            RdmaError::QueuePair {
                status: Status::ReceiverNotReady,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_write_past_the_peers_buffer_is_refused_before_anything_is_posted() {
    let p = Pair::new();
    let mut link = p.link(SECOND);
    for offset in [LEN as u64 - 7, LEN as u64 + 1, u64::MAX - 3] {
        let err = link
            .put(hop(&p.src[..8], Target::CclOut, offset, Some(1)))
            .unwrap_err();
        assert!(matches!(err, RdmaError::OutOfBounds { .. }), "{err}");
    }
    let err = link
        .put(hop(&p.src[..8], Target::Scratch(3), 0, None))
        .unwrap_err();
    assert!(matches!(err, RdmaError::UnknownTarget { .. }), "{err}");
    assert!(p.a.log().is_empty(), "nothing reached the NIC");
    assert!(p.guards_intact());
}

#[test]
fn the_peers_nic_refuses_a_write_outside_what_it_registered() {
    let p = Pair::new();
    let _inbox = p.inbox();
    // A sender that lies about the region's size passes its own check; the NIC still
    // refuses the key's range, and the guard bytes after CclOut stay as they were.
    let mut regions = p.regions.clone();
    regions[1].len += GUARD as u64;
    let mut link = p.link_into(regions, SECOND);
    let err = link
        .put(hop(&p.src[..32], Target::CclOut, LEN as u64, None))
        .unwrap_err();
    let RdmaError::KeyRefused {
        target,
        offset,
        len,
        ..
    } = err
    else {
        panic!("{err}");
    };
    assert_eq!((target, offset, len), (Target::CclOut, LEN as u64, 32));
    assert!(p.guards_intact());
    // A forged request with another region's key is refused as well.
    let forged = WorkRequest {
        wr_id: 99,
        op: SendOp::Write,
        local: (p.src_region.addr, 8, p.src_region.lkey),
        remote: (p.regions[1].addr, p.regions[0].rkey),
    };
    let (qp, _) = p.a.create_qp().unwrap();
    let (qp_b, end_b) = p.b.create_qp().unwrap();
    p.a.connect(qp, end_b).unwrap();
    let _ = qp_b;
    p.a.post_send(qp, &[forged]).unwrap();
    let mut done = Vec::new();
    p.a.poll_send(qp, &mut done).unwrap();
    assert_eq!(done[0].status, Status::RemoteAccess);
    assert!(p.out().iter().all(|&b| b == 0xEE));
}

#[test]
fn a_source_outside_registered_memory_is_refused() {
    let p = Pair::new();
    let mut link = p.link(SECOND);
    let stray = vec![1u8; 16];
    let err = link.put(hop(&stray, Target::CclIn, 0, None)).unwrap_err();
    assert!(
        matches!(err, RdmaError::SourceNotRegistered { .. }),
        "{err}"
    );
}

#[test]
fn immediates_carry_the_word_and_the_epoch_near_the_receivers() {
    for (word, epoch, current) in [
        (0, 0, 0),
        (5, 3, 3),
        (MAX_IMM_WORD, 255, 256),
        (7, 256, 255),
        (9, 1000, 1001),
        (9, 1001, 1000),
        (1, 0, 100),
    ] {
        let imm = encode_imm(word, epoch).unwrap();
        assert_eq!(
            decode_imm(imm, current),
            (word, epoch),
            "{word} {epoch} {current}"
        );
    }
    assert!(matches!(
        encode_imm(MAX_IMM_WORD + 1, 0),
        Err(RdmaError::WordTooLarge { .. })
    ));
}

#[test]
fn connect_info_round_trips_and_refuses_what_is_cut_or_unknown() {
    let info = ConnectInfo {
        endpoint: QpEndpoint {
            qp_num: 0x1234,
            lid: 7,
            gid: [9; 16],
        },
        regions: vec![
            RemoteRegion {
                target: Target::CclIn,
                addr: 0x1000,
                len: 4096,
                rkey: 11,
            },
            RemoteRegion {
                target: Target::Scratch(2),
                addr: 0x9000,
                len: 64,
                rkey: 12,
            },
        ],
    };
    let bytes = info.encode();
    assert_eq!(ConnectInfo::decode(&bytes).unwrap(), info);
    for cut in [0, 10, bytes.len() - 1] {
        assert!(ConnectInfo::decode(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(ConnectInfo::decode(&longer).is_err());
    let mut unknown = bytes.clone();
    unknown[26] = 9;
    assert!(ConnectInfo::decode(&unknown)
        .unwrap_err()
        .contains("kind 9"));
    let mut huge = bytes;
    huge[22..26].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(ConnectInfo::decode(&huge).is_err());
}

#[test]
fn errors_name_the_device_port_and_peer() {
    let err = RdmaError::NoDevice {
        wanted: Some("mlx5_1".into()),
        found: vec!["mlx5_0".into()],
    };
    let text = err.to_string();
    assert!(text.contains("mlx5_1") && text.contains("mlx5_0"), "{text}");
    let port = Port {
        device: "mlx5_0".into(),
        port: 2,
    };
    let text = RdmaError::PortDown {
        port,
        state: "down".into(),
    }
    .to_string();
    assert!(text.contains("mlx5_0 port 2 is down"), "{text}");
}

#[test]
fn settings_come_from_the_environment_with_defaults_and_checks() {
    let none = Settings::from_vars(|_| None).unwrap();
    assert_eq!(
        none,
        Settings {
            device: None,
            port: 1,
            gid_index: 0,
            traffic_class: 0
        }
    );
    let vars = |name: &str| match name {
        "OXCCL_RDMA_DEVICE" => Some("mlx5_1".to_string()),
        "OXCCL_RDMA_PORT" => Some("2".into()),
        "OXCCL_RDMA_GID_INDEX" => Some(" 3 ".into()),
        "OXCCL_RDMA_TC" => Some("106".into()),
        _ => None,
    };
    let set = Settings::from_vars(vars).unwrap();
    assert_eq!(set.device.as_deref(), Some("mlx5_1"));
    assert_eq!((set.port, set.gid_index, set.traffic_class), (2, 3, 106));
    for (name, bad) in [
        ("OXCCL_RDMA_PORT", "0"),
        ("OXCCL_RDMA_PORT", "256"),
        ("OXCCL_RDMA_TC", "-1"),
        ("OXCCL_RDMA_GID_INDEX", "x"),
    ] {
        let err = Settings::from_vars(|n| (n == name).then(|| bad.to_string())).unwrap_err();
        let text = err.to_string();
        assert!(text.contains(name) && text.contains(bad), "{text}");
    }
}

#[test]
fn a_peer_region_whose_end_would_wrap_is_refused_before_posting() {
    let p = Pair::new();
    let mut regions = p.regions.clone();
    regions[0].addr = u64::MAX - 4;
    let mut link = p.link_into(regions, SECOND);
    let err = link
        .put(hop(&p.src[..8], Target::CclIn, 0, None))
        .unwrap_err();
    assert!(matches!(err, RdmaError::OutOfBounds { .. }), "{err}");
    assert!(p.a.log().is_empty(), "nothing reached the NIC");
}

/// The link of `p` with a registered bounce buffer of `bytes`.
fn link_with_bounce(p: &Pair, bytes: usize) -> RdmaLink<FakeNic> {
    let mut bounce = vec![0u8; bytes].into_boxed_slice();
    // SAFETY: the bounce buffer moves into the link, which outlives its use here.
    let region = unsafe { p.a.register(bounce.as_mut_ptr(), bytes) }.unwrap();
    p.link(SECOND).with_bounce(bounce, region)
}

#[test]
fn an_unregistered_source_is_staged_piece_by_piece_and_posted_after_the_last() {
    let p = Pair::new();
    let mut inbox = p.inbox();
    let mut link = link_with_bounce(&p, 64);
    // Memory no region holds: a user's buffer.
    let user: Vec<u8> = (0..1000u32).map(|i| (i * 13 % 256) as u8).collect();
    link.put(hop(&user, Target::CclOut, 50, Some(4))).unwrap();
    assert_eq!(&p.out()[50..1050], &user[..]);
    assert!(p.guards_intact());
    let log = p.a.log();
    let writes: Vec<_> = log.iter().filter(|w| w.op == SendOp::Write).collect();
    assert_eq!(writes.len(), 1000usize.div_ceil(64));
    assert!(writes.iter().all(|w| w.local.1 <= 64), "{log:?}");
    assert!(matches!(log.last().unwrap().op, SendOp::WriteImm(_)));
    assert_eq!(
        log.iter()
            .filter(|w| matches!(w.op, SendOp::WriteImm(_)))
            .count(),
        1,
        "one post, after the last piece"
    );
    assert_eq!(taken(&mut inbox, 3).len(), 1);
}

#[test]
fn a_staged_hop_past_the_end_is_refused_before_a_piece_moves() {
    let p = Pair::new();
    let mut link = link_with_bounce(&p, 64);
    let user = vec![7u8; 200];
    let err = link
        .put(hop(&user, Target::CclOut, (LEN - 100) as u64, None))
        .unwrap_err();
    assert!(matches!(err, RdmaError::OutOfBounds { .. }), "{err}");
    assert!(p.a.log().is_empty(), "nothing was posted");
    assert!(p.out().iter().all(|&b| b == 0xEE));
}

#[test]
fn without_a_bounce_buffer_an_unregistered_source_is_an_error() {
    let p = Pair::new();
    let mut link = p.link(SECOND);
    let user = vec![7u8; 200];
    let err = link.put(hop(&user, Target::CclIn, 0, None)).unwrap_err();
    assert!(
        matches!(err, RdmaError::SourceNotRegistered { .. }),
        "{err}"
    );
}

#[test]
fn a_region_announced_later_can_be_written() {
    let p = Pair::new();
    let mut link = p.link_into(vec![p.regions[0]], SECOND);
    let err = link
        .put(hop(&p.src[..8], Target::CclOut, 0, None))
        .unwrap_err();
    assert!(matches!(err, RdmaError::UnknownTarget { .. }), "{err}");
    link.add_regions([p.regions[1]]);
    link.put(hop(&p.src[..8], Target::CclOut, 0, None)).unwrap();
    assert_eq!(&p.out()[..8], &p.src[..8]);
}

#[test]
fn an_inbox_refuses_a_link_that_could_overflow_the_receive_queue() {
    let p = Pair::new();
    p.b.set_recv_capacity(2 * Inbox::<FakeNic>::DEPTH);
    let mut inbox = p.inbox();
    let (qp, _) = p.b.create_qp().unwrap();
    inbox.add_peer(qp, 2).expect("two links fit");
    let (qp, _) = p.b.create_qp().unwrap();
    let err = inbox.add_peer(qp, 3).unwrap_err();
    assert!(
        matches!(err, RdmaError::TooManyLinks { links: 3, capacity, .. } if capacity == 128),
        "{err}"
    );
    assert!(err.to_string().contains("fake_b"), "{err}");
}
