//! Ranks in separate processes run every operator through shared memory and over TCP on
//! loopback (`OXCCL_TRANSPORT=tcp`): real processes (the `collective_rank` binary), the
//! job's root in the test process, results compared with the reference in every rank.
//! Also: processes holding two ranks each, a peer killed mid-operation, calls staged
//! from device spans (the cuda backend's path across processes), and nothing left in
//! /dev/shm.

use oxccl::UniqueId;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const RANK_BIN: &str = env!("CARGO_BIN_EXE_collective_rank");

use oxccl_tests::INHERITED_LAUNCH_VARS as INHERITED;

fn job(ranks: usize) -> UniqueId {
    UniqueId::create(ranks, Duration::from_secs(120)).expect("root")
}

/// Start one process with `env` on top of the job's id.
fn spawn(id: &UniqueId, size: usize, env: &[(&str, String)]) -> Child {
    let mut cmd = Command::new(RANK_BIN);
    for var in INHERITED {
        cmd.env_remove(var);
    }
    cmd.env("OXCCL_COMM_ID", id.to_string())
        .env("OXCCL_SIZE", size.to_string())
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn a rank process")
}

/// One process of 4 ranks per rank, each with `OXCCL_RANK`, `OXCCL_TRANSPORT=transport`
/// and `env`.
fn spawn_ranks(id: &UniqueId, transport: &str, env: &[(&str, String)]) -> Vec<Child> {
    (0..4)
        .map(|r| {
            let mut all = vec![
                ("OXCCL_RANK", r.to_string()),
                ("OXCCL_TRANSPORT", transport.to_string()),
            ];
            all.extend_from_slice(env);
            spawn(id, 4, &all)
        })
        .collect()
}

fn finish(children: Vec<Child>) -> Vec<Output> {
    children
        .into_iter()
        .map(|c| c.wait_with_output().expect("wait for a rank process"))
        .collect()
}

/// Every process exited 0 and printed `rank R ok` for each of its ranks.
fn assert_all_ok(outputs: &[Output], ranks: usize) {
    let mut ok: Vec<usize> = Vec::new();
    for out in outputs {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        ok.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| {
                    l.strip_prefix("rank ")?
                        .strip_suffix(" ok")?
                        .parse::<usize>()
                        .ok()
                }),
        );
    }
    ok.sort();
    assert_eq!(ok, (0..ranks).collect::<Vec<_>>());
}

/// The job's segments still named in /dev/shm.
fn named_segments(id: &UniqueId) -> Vec<String> {
    let tag = id.job_tag();
    std::fs::read_dir("/dev/shm")
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(&tag))
                .collect()
        })
        .unwrap_or_default()
}

/// Every operator over 4 processes, reaching each other through `transport`.
fn every_operator_over_four_processes(transport: &str) {
    let id = job(4);
    let children = spawn_ranks(&id, transport, &[]);
    assert_all_ok(&finish(children), 4);
    assert_eq!(named_segments(&id), Vec::<String>::new());
}

#[test]
fn every_operator_over_four_processes_through_shared_memory() {
    every_operator_over_four_processes("shm");
}

#[test]
fn every_operator_over_four_processes_over_tcp() {
    every_operator_over_four_processes("tcp");
}

/// Every operator over 4 processes on the `staged-host` kind: each call bound as device
/// spans and staged through host memory, as the cuda backend runs a job of processes
/// (with host memory standing for the GPU's).
#[test]
fn every_operator_over_four_processes_on_staged_device_spans() {
    let id = job(4);
    let device = [(
        "OXCCL_DEVICE",
        oxccl_tests::staged_host::STAGED_HOST.to_string(),
    )];
    let children = spawn_ranks(&id, "shm", &device);
    assert_all_ok(&finish(children), 4);
    assert_eq!(named_segments(&id), Vec::<String>::new());
}

/// Every operator over 4 processes that map each other's user buffers
/// (`OXCCL_SHARED_BUFFERS=1`): the calls run zero-copy, every one on `alloc_shared`
/// memory.
#[test]
fn every_operator_over_four_processes_zero_copy_on_shared_buffers() {
    let id = job(4);
    let children = spawn_ranks(&id, "shm", &[("OXCCL_SHARED_BUFFERS", "1".into())]);
    assert_all_ok(&finish(children), 4);
    assert_eq!(named_segments(&id), Vec::<String>::new());
}

/// What each rank printed about how it runs `op` (`EXECUTOR MODE`), by rank.
fn plans_of(outputs: &[Output], op: &str) -> Vec<(usize, String)> {
    let marker = format!(" {op}: ");
    let mut plans: Vec<(usize, String)> = outputs
        .iter()
        .flat_map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| {
                    let (rank, plan) = l.strip_prefix("rank ")?.split_once(&marker)?;
                    Some((rank.parse().ok()?, plan.to_string()))
                })
                .collect::<Vec<_>>()
        })
        .collect();
    plans.sort();
    plans
}

/// Zero-copy per peer: two hosts (`OXCCL_HOSTID`) of two processes each, on shared
/// buffers. Ranks on one host meet through shared memory and map each other's user
/// buffers; the hosts meet over TCP, which reaches registered buffers only. Every
/// operator runs against the reference; AllReduce, AllGather, ReduceScatter and Broadcast
/// on their hierarchical put executors, Scatter, Gather and AlltoAll on put-mesh (whose
/// puts to the other host land in Scratch): all zero-copy (Direct), where a job across
/// hosts staged every call before.
#[test]
fn two_hosts_run_zero_copy_inside_each_and_stage_between() {
    let id = job(4);
    let children = (0..4)
        .map(|r| {
            let env = [
                ("OXCCL_RANK", r.to_string()),
                ("OXCCL_TRANSPORT", "auto".to_string()),
                ("OXCCL_HOSTID", format!("host-{}", r / 2)),
                ("OXCCL_SHARED_BUFFERS", "1".to_string()),
                // Every operator that has it runs the hierarchical put executor (at every
                // count of the matrix), whatever the model would pick.
                (
                    "OXCCL_ALGO",
                    "all_reduce=hier-put-ring;all_gather=hier-put-ring;\
                     reduce_scatter=hier-put-ring;broadcast=hier-put-ring;\
                     scatter=put-mesh;gather=put-mesh;all_to_all=put-mesh"
                        .to_string(),
                ),
            ];
            spawn(&id, 4, &env)
        })
        .collect();
    let outputs = finish(children);
    assert_all_ok(&outputs, 4);
    let direct = |algo: &str| -> Vec<(usize, String)> {
        (0..4).map(|r| (r, format!("{algo} Direct"))).collect()
    };
    for op in ["all_reduce", "all_gather", "reduce_scatter", "broadcast"] {
        assert_eq!(plans_of(&outputs, op), direct("hier-put-ring"), "{op}");
    }
    for op in ["scatter", "gather", "all_to_all"] {
        assert_eq!(plans_of(&outputs, op), direct("put-mesh"), "{op}");
    }
    assert_eq!(named_segments(&id), Vec::<String>::new());
}

/// Where peers map user buffers, a call on heap memory is refused (which shows that the
/// calls run zero-copy: staged ones take any memory), and every rank is released at once.
#[test]
fn a_zero_copy_job_refuses_buffers_its_peers_cannot_map() {
    let id = job(4);
    let env = [
        ("OXCCL_SHARED_BUFFERS", "1".to_string()),
        ("OXCCL_TEST_OPS", "private".to_string()),
    ];
    let start = std::time::Instant::now();
    let outputs = finish(spawn_ranks(&id, "shm", &env));
    let took = start.elapsed();
    let stderr: Vec<String> = outputs
        .iter()
        .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
        .collect();
    assert!(
        took < std::time::Duration::from_secs(25),
        "released, not timed out: took {took:?}; {stderr:?}"
    );
    assert!(outputs.iter().all(|o| !o.status.success()), "{stderr:?}");
    assert!(
        stderr
            .iter()
            .any(|e| e.contains("not in memory from alloc_shared")),
        "{stderr:?}"
    );
    assert_eq!(named_segments(&id), Vec::<String>::new());
}

/// A job of processes models its hosts with its rank 0's figures: rank 0 reads them
/// from its cache folder (made-up figures, kept there as if measured), the others have
/// none (`OXCCL_HOST_CACHE=off`: they would measure this machine), and every rank's cost
/// model has rank 0's.
#[test]
fn every_rank_of_a_job_models_its_host_with_rank_0s_figures() {
    use oxccl::platform::host::calibration::{figures_file_name, fit::Rate, HostFigures};
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let made_up = HostFigures {
        workers: cores,
        thread_gbps: 3.21,
        memory_gbps: 6.5,
        cache_bytes: 32 << 20,
        cache_gbps: 12.5,
        llc_bytes: 64 << 20,
        forward_gbps: Some(7.5),
        task_us: Some(0.0123),
        ladder: vec![
            Rate {
                footprint: 2 << 20,
                gbps: 20.0,
            },
            Rate {
                footprint: 256 << 20,
                gbps: 3.21,
            },
        ],
        quiet: true,
    };
    let dir = std::env::temp_dir().join(format!("oxccl-job-figures-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(figures_file_name(cores)), made_up.to_text()).unwrap();
    let id = job(4);
    let children = (0..4)
        .map(|r| {
            let cache = match r {
                0 => dir.to_string_lossy().into_owned(),
                _ => "off".to_string(),
            };
            let env = [
                ("OXCCL_RANK", r.to_string()),
                ("OXCCL_TEST_OPS", "private".to_string()),
                ("OXCCL_HOST_CACHE", cache),
                ("OXCCL_HOST_FIGURES", "measured".to_string()),
            ];
            spawn(&id, 4, &env)
        })
        .collect();
    let outputs = finish(children);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_all_ok(&outputs, 4);
    let rank_0s = format!("workers {cores} thread_gbps 3.21 task_us 0.0123");
    let expected: Vec<(usize, String)> = (0..4).map(|r| (r, rank_0s.clone())).collect();
    assert_eq!(plans_of(&outputs, "host_figures"), expected);
}

#[test]
fn two_processes_of_two_ranks_each() {
    two_processes_of_two_ranks("auto");
}

#[test]
fn two_processes_of_two_ranks_each_over_tcp() {
    two_processes_of_two_ranks("tcp");
}

#[test]
fn two_processes_of_two_ranks_each_on_shared_buffers() {
    two_processes_of_two_ranks("shared");
}

/// `shared`: shared memory between the processes, with user buffers mapped.
fn two_processes_of_two_ranks(transport: &str) {
    let id = job(4);
    let (transport, shared) = match transport {
        "shared" => ("shm", "1"),
        other => (other, "0"),
    };
    let children = ["0,1", "2,3"]
        .iter()
        .map(|ranks| {
            let env = [
                ("OXCCL_TEST_RANKS", ranks.to_string()),
                ("OXCCL_TEST_OPS", "quick".to_string()),
                ("OXCCL_TRANSPORT", transport.to_string()),
                ("OXCCL_SHARED_BUFFERS", shared.to_string()),
            ];
            spawn(&id, 4, &env)
        })
        .collect();
    assert_all_ok(&finish(children), 4);
    assert_eq!(named_segments(&id), Vec::<String>::new());
}

#[test]
fn a_killed_peer_fails_every_other_rank_within_seconds() {
    a_killed_peer_fails_every_other_rank("shm");
}

#[test]
fn a_killed_peer_over_tcp_fails_every_other_rank_within_seconds() {
    a_killed_peer_fails_every_other_rank("tcp");
}

/// Killed while its peers read and write its shared buffers in place: they fail as
/// promptly, and none of its segments is left in /dev/shm.
#[test]
fn a_killed_peer_on_shared_buffers_fails_every_other_rank_within_seconds() {
    a_killed_peer_fails_every_other_rank("shared");
}

/// `shared`: shared memory between the processes, with user buffers mapped.
fn a_killed_peer_fails_every_other_rank(transport: &str) {
    let id = job(4);
    let (transport, shared) = match transport {
        "shared" => ("shm", "1"),
        other => (other, "0"),
    };
    let env = [
        ("OXCCL_TEST_OPS", "loop".to_string()),
        ("OXCCL_SHARED_BUFFERS", shared.to_string()),
    ];
    let mut children = spawn_ranks(&id, transport, &env);
    // Every rank has run an AllReduce: the job is up.
    for child in &mut children {
        let mut line = String::new();
        let stdout = child.stdout.as_mut().expect("piped");
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)
            .expect("a line");
        assert!(line.contains("ready"), "{line:?}");
    }
    let victim = children.pop().expect("rank 3");
    let victim_pid = victim.id();
    let mut victim = victim;
    victim.kill().expect("SIGKILL rank 3");
    let killed = Instant::now();
    let _ = victim.wait();
    for (r, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().expect("wait");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "rank {r}: {err}");
        assert!(
            err.contains(&format!("rank 3 (process {victim_pid}) died")),
            "rank {r}: {err}"
        );
        // The job's table gives its host (this one).
        assert!(err.contains("died; it ran on host "), "rank {r}: {err}");
    }
    // Well before the 30 s exec timeout the ranks run with.
    assert!(
        killed.elapsed() < Duration::from_secs(10),
        "{:?}",
        killed.elapsed()
    );
    assert_eq!(named_segments(&id), Vec::<String>::new());
}
