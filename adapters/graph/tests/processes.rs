//! Graph mode with every rank in a process of its own (over shared memory, and over TCP
//! on loopback): every operator replayed and compared with eager calls, and a rank that
//! captured another sequence told so at compile on every rank, with the communicator
//! still usable afterwards. The test binary starts itself as the ranks.

mod common;

use common::replay_on;
use oxccl::{Communicator, Config, Error, OpCall, ReduceOp, UniqueId};
use oxccl_graph::Capture;
use oxccl_tests::{INHERITED_LAUNCH_VARS, SMALL_CCL_BYTES};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RANKS: usize = 3;
const CHILD: &str = "OXCCL_GRAPH_TEST_CHILD";

#[test]
fn ranks_in_processes_replay_and_hear_of_a_different_capture() {
    if std::env::var_os(CHILD).is_some() {
        return rank_process();
    }
    for transport in ["shm", "tcp"] {
        let id = UniqueId::create(RANKS, Duration::from_secs(120)).expect("root");
        let children: Vec<_> = (0..RANKS)
            .map(|rank| {
                let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
                for var in INHERITED_LAUNCH_VARS {
                    cmd.env_remove(var);
                }
                cmd.args([
                    "--exact",
                    "ranks_in_processes_replay_and_hear_of_a_different_capture",
                    "--nocapture",
                ])
                .env(CHILD, "1")
                .env("OXCCL_COMM_ID", id.to_string())
                .env("OXCCL_SIZE", RANKS.to_string())
                .env("OXCCL_RANK", rank.to_string())
                .env("OXCCL_TRANSPORT", transport)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn a rank")
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(300);
        for (rank, mut child) in children.into_iter().enumerate() {
            while child.try_wait().expect("wait").is_none() {
                if Instant::now() > deadline {
                    let _ = child.kill();
                    panic!("{transport}: a rank process did not finish in 300 s");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let out = child.wait_with_output().expect("output");
            assert!(
                out.status.success(),
                "{transport}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let said = String::from_utf8_lossy(&out.stdout);
            assert!(
                said.contains(&format!("rank {rank} ok")),
                "{transport}: {said}"
            );
        }
    }
}

/// One rank: the replays, then the mismatched capture, then an AllReduce.
fn rank_process() {
    let config = Config {
        ccl_buffer_bytes: SMALL_CCL_BYTES,
        exec_timeout: Duration::from_secs(60),
        ..Config::from_env().expect("config")
    };
    let comm = Communicator::init_launched(config).expect("join the job");
    for in_place in [false, true] {
        replay_on(&comm, in_place).unwrap_or_else(|e| panic!("rank {}: {e}", comm.rank()));
    }
    let mut capture = Capture::new();
    let a = vec![1i32; 16];
    let mut x = vec![0i32; 16];
    for count in [4, if comm.rank() == 2 { 16 } else { 8 }] {
        let call = OpCall::all_reduce_n(&a, &mut x, count, ReduceOp::Sum);
        capture.record(&call).unwrap();
    }
    let err = capture.compile(&comm).unwrap_err();
    let Error::CaptureMismatch {
        step,
        field,
        detail,
    } = &err
    else {
        panic!("rank {}: {err:?}", comm.rank());
    };
    assert_eq!((*step, *field), (1, "count"), "{err}");
    assert_eq!(detail, "ranks [0, 1] pass count 8; rank 2 passes count 16");
    let mut y = vec![comm.rank() as i32; 100];
    comm.all_reduce_in_place(&mut y, ReduceOp::Sum).unwrap();
    assert!(y.iter().all(|&v| v == 3), "{y:?}");
    println!("rank {} ok", comm.rank());
}
