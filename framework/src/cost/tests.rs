//! Hand-built programs whose modelled time is known in closed form.

use super::*;
use crate::analyzer::RankRecording;
use crate::executor::{Mode, Peers, ResourceRequest};
use crate::op::OpParam;
use crate::topology::presets::{HCCS_GBPS, HCCS_LATENCY_US, ROCE_GBPS, ROCE_LATENCY_US};
use crate::topology::Processor;
use oxccl_platform::{Buf, DataType, LinkAccess, NotifyId, NotifyLayout, ReduceOp, Slice};
use std::sync::Arc;

const MB: usize = 1 << 20;

fn no_dispatch() -> CostParams {
    CostParams {
        dispatch_us: 0.0,
        ..CostParams::default()
    }
}

fn hccs_time(bytes: usize) -> f64 {
    HCCS_LATENCY_US * 1e-6 + bytes as f64 / (HCCS_GBPS * 1e9)
}

fn assert_close(got: f64, want: f64) {
    assert!(
        (got - want).abs() <= want * 1e-12,
        "modelled {got:e} s, expected {want:e} s"
    );
}

fn pull(from: usize, to: usize, bytes: usize) -> Task {
    Task::Copy {
        src: Slice::new(from, Buf::Input, 0, bytes),
        dsts: vec![Slice::new(to, Buf::Output, 0, bytes)],
    }
}

fn program(rank: usize, streams: Vec<Vec<Task>>) -> RankProgram {
    let mut p = RankProgram::new(rank, streams.len());
    for (s, tasks) in streams.into_iter().enumerate() {
        p.streams[s].tasks = tasks;
    }
    p
}

fn time(programs: &[RankProgram], topology: &Topology, params: &CostParams) -> f64 {
    let refs: Vec<&RankProgram> = programs.iter().collect();
    model_programs(&refs, topology, params).unwrap()
}

#[test]
fn one_pull_costs_latency_plus_bytes_over_bandwidth() {
    let programs = [
        program(0, vec![vec![]]),
        program(1, vec![vec![pull(0, 1, MB)]]),
    ];
    let t = time(&programs, &Topology::single_server(2), &no_dispatch());
    assert_close(t, hccs_time(MB));
}

#[test]
fn two_transfers_on_one_link_take_twice_as_long() {
    let topo = Topology::single_server(3);
    let shared = [
        program(0, vec![vec![]]),
        program(1, vec![vec![pull(0, 1, MB)], vec![pull(0, 1, MB)]]),
        program(2, vec![vec![]]),
    ];
    assert_close(
        time(&shared, &topo, &no_dispatch()),
        HCCS_LATENCY_US * 1e-6 + 2.0 * MB as f64 / (HCCS_GBPS * 1e9),
    );
    let separate = [
        program(0, vec![vec![]]),
        program(1, vec![vec![pull(0, 1, MB)], vec![pull(2, 1, MB)]]),
        program(2, vec![vec![]]),
    ];
    assert_close(time(&separate, &topo, &no_dispatch()), hccs_time(MB));
}

#[test]
fn copies_of_one_host_share_its_memory_system() {
    // The memory system alone: without the host's processor (its threads are below).
    let host = crate::topology::presets::host(3)
        .with_processor(None)
        .unwrap();
    let memory = crate::topology::presets::HOST_MEMORY_GBPS * 1e9;
    let local = |rank| Task::Copy {
        src: Slice::new(rank, Buf::Input, 0, MB),
        dsts: vec![Slice::new(rank, Buf::Output, 0, MB)],
    };
    // Alone, a local copy of 1 MiB is held by the memory system, not the copy engine.
    let one = [
        program(0, vec![vec![local(0)]]),
        program(1, vec![vec![]]),
        program(2, vec![vec![]]),
    ];
    assert_close(time(&one, &host, &no_dispatch()), MB as f64 / memory);
    // Three ranks copying at once share it: three times as long.
    let three = [
        program(0, vec![vec![local(0)]]),
        program(1, vec![vec![local(1)]]),
        program(2, vec![vec![local(2)]]),
    ];
    assert_close(
        time(&three, &host, &no_dispatch()),
        3.0 * MB as f64 / memory,
    );
    // A Reduce of two sources into one destination moves 1.5 MiB of copy bytes.
    let reduce = Task::Reduce {
        srcs: vec![
            Slice::new(0, Buf::Input, 0, MB),
            Slice::new(0, Buf::Output, 0, MB),
        ],
        dsts: vec![Slice::new(0, Buf::Output, 0, MB)],
        dtype: DataType::F32,
        op: ReduceOp::Sum,
    };
    assert_eq!(memory_bytes(&reduce), 1.5 * MB as f64);
    // Without a shared memory system the same three copies run side by side.
    let own = Topology::single_server(3);
    assert_close(
        time(&three, &own, &no_dispatch()),
        MB as f64 / (CostParams::default().copy_gbps * 1e9),
    );
}

#[test]
fn a_wait_ends_one_latency_after_the_remote_post() {
    let notify = NotifyId { rank: 1, index: 0 };
    let programs = [
        program(0, vec![vec![Task::Post { notify }]]),
        program(1, vec![vec![Task::Wait { notify }, pull(0, 1, MB)]]),
    ];
    let params = CostParams {
        dispatch_us: 2.0,
        ..CostParams::default()
    };
    // Post and Wait issue at d; the post lands at d + lat; the pull issues at 2d + lat.
    let want = 2.0 * 2e-6 + HCCS_LATENCY_US * 1e-6 + hccs_time(MB);
    assert_close(time(&programs, &Topology::single_server(2), &params), want);
}

#[test]
fn rdma_transfers_of_one_rank_share_its_nic() {
    let topo = Topology::servers(vec![1, 1, 1]).unwrap();
    let push = |to| Task::Copy {
        src: Slice::new(0, Buf::Input, 0, MB),
        dsts: vec![Slice::new(to, Buf::Output, 0, MB)],
    };
    let programs = [
        program(0, vec![vec![push(1)], vec![push(2)]]),
        program(1, vec![vec![]]),
        program(2, vec![vec![]]),
    ];
    let want = ROCE_LATENCY_US * 1e-6 + 2.0 * MB as f64 / (ROCE_GBPS * 1e9);
    assert_close(time(&programs, &topo, &no_dispatch()), want);
}

#[test]
fn rdma_transfers_of_a_server_share_its_nic_when_the_ranks_do() {
    // Ranks 0 and 1 (server 0) each push a MB to a rank of server 1 at once.
    let push = |from, to| Task::Copy {
        src: Slice::new(from, Buf::Input, 0, MB),
        dsts: vec![Slice::new(to, Buf::Output, 0, MB)],
    };
    let programs = [
        program(0, vec![vec![push(0, 2)]]),
        program(1, vec![vec![push(1, 3)]]),
        program(2, vec![vec![]]),
        program(3, vec![vec![]]),
    ];
    let per_rank = Topology::servers(vec![2, 2]).unwrap();
    let one_nic = MB as f64 / (ROCE_GBPS * 1e9);
    let want = ROCE_LATENCY_US * 1e-6 + one_nic;
    assert_close(time(&programs, &per_rank, &no_dispatch()), want);
    let per_server = per_rank.with_nic_scope(crate::topology::NicScope::Server);
    let want = ROCE_LATENCY_US * 1e-6 + 2.0 * one_nic;
    assert_close(time(&programs, &per_server, &no_dispatch()), want);
}

#[test]
fn local_work_runs_at_the_engine_bandwidths() {
    let reduce = Task::Reduce {
        srcs: vec![
            Slice::new(0, Buf::Input, 0, MB),
            Slice::new(0, Buf::Output, 0, MB),
            Slice::new(0, Buf::Scratch, 0, MB),
        ],
        dsts: vec![Slice::new(0, Buf::Output, 0, MB)],
        dtype: DataType::F32,
        op: ReduceOp::Sum,
    };
    let params = no_dispatch();
    let t = time(
        &[program(0, vec![vec![reduce]])],
        &Topology::single_server(1),
        &params,
    );
    assert_close(t, 2.0 * MB as f64 / (params.reduce_gbps * 1e9));
}

#[test]
fn broken_links_and_deadlocks_are_errors() {
    let topo = Topology::parse_spec("mesh8-cut").unwrap();
    let mut programs: Vec<RankProgram> = (0..8).map(|r| program(r, vec![vec![]])).collect();
    programs[1] = program(1, vec![vec![pull(0, 1, MB)]]);
    let refs: Vec<&RankProgram> = programs.iter().collect();
    let err = model_programs(&refs, &topo, &no_dispatch()).unwrap_err();
    assert!(
        matches!(
            err,
            CostError::NoLink {
                rank: 1,
                peer: 0,
                why: "is broken",
                ..
            }
        ),
        "{err}"
    );

    let notify = NotifyId { rank: 0, index: 3 };
    let stuck = [program(0, vec![vec![Task::Wait { notify }]])];
    let err = model_programs(&[&stuck[0]], &Topology::single_server(1), &no_dispatch());
    assert!(
        matches!(
            err,
            Err(CostError::Deadlock {
                rank: 0,
                task: 0,
                ..
            })
        ),
        "{err:?}"
    );
}

/// A Recording of a two-rank AllReduce-sized exchange, built by hand.
fn recording(programs: Vec<RankProgram>, count: usize) -> Recording {
    let topology = Topology::single_server(programs.len());
    let op = OpParam::all_reduce(count, DataType::F32, ReduceOp::Sum);
    Recording {
        ops: vec![op.clone(); programs.len()],
        op,
        layout: NotifyLayout {
            ranks: topology.ranks(),
            link_channels: 1,
        },
        topology,
        mode: Mode::Direct,
        in_place: false,
        executor: "hand-built",
        reason: String::new(),
        ccl_bytes: 0,
        ranks: programs
            .into_iter()
            .map(|p| RankRecording {
                program: Arc::new(p),
                request: ResourceRequest::with_peers(Peers::All),
                loops: Default::default(),
            })
            .collect(),
    }
}

#[test]
fn report_uses_the_nccl_tests_size_and_bus_factor() {
    let rec = recording(
        vec![
            program(0, vec![vec![pull(1, 0, MB)]]),
            program(1, vec![vec![pull(0, 1, MB)]]),
        ],
        MB / 4,
    );
    let report = model(&rec, &no_dispatch()).unwrap();
    assert_eq!(report.bytes, MB);
    assert_close(report.time_s, hccs_time(MB));
    assert_close(report.algbw_gbps, MB as f64 / hccs_time(MB) / 1e9);
    assert_close(report.busbw_gbps, report.algbw_gbps);
    assert_eq!((report.tasks, report.link_bytes), (2, 2.0 * MB as f64));
}

#[test]
fn chrome_trace_has_a_track_per_stream_and_blocked_waits() {
    let notify = NotifyId { rank: 1, index: 0 };
    let rec = recording(
        vec![
            program(0, vec![vec![pull(1, 0, MB), Task::Post { notify }]]),
            program(1, vec![vec![Task::Wait { notify }], vec![]]),
        ],
        MB / 4,
    );
    let mut out = Vec::new();
    let report = write_chrome_trace(&rec, &no_dispatch(), &mut out).unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    let named = |n: &str| events.iter().filter(|e| e["name"] == n).count();
    assert_eq!(named("process_name"), 2);
    assert_eq!(named("thread_name"), 3);
    let wait = events.iter().find(|e| e["name"] == "Wait").unwrap();
    assert_eq!(
        (wait["ph"].as_str(), wait["pid"].as_u64()),
        (Some("X"), Some(1))
    );
    let blocked = wait["args"]["blocked_us"].as_f64().unwrap();
    let want = hccs_time(MB) + HCCS_LATENCY_US * 1e-6;
    assert!((blocked * 1e-6 - want).abs() < want * 1e-9, "{blocked} us");
    assert!(events.iter().any(|e| e["name"] == "Copy from 1 (1.0 MiB)"));
    assert_eq!(json["otherData"]["bytes"], report.bytes);
}

/// Three ranks of one CPU host, each with its own processor figures.
fn host_of_three(processor: Processor) -> Topology {
    crate::topology::presets::host(3)
        .with_processor(Some(processor))
        .unwrap()
}

fn local_copy(rank: usize, bytes: usize) -> Task {
    Task::Copy {
        src: Slice::new(rank, Buf::Input, 0, bytes),
        dsts: vec![Slice::new(rank, Buf::Output, 0, bytes)],
    }
}

#[test]
fn a_small_operation_runs_on_one_thread_one_task_after_the_other() {
    let p = Processor {
        workers: 4,
        task_us: 0.5,
        wake_us: 7.0,
        thread_gbps: 2.0,
        inline_bytes: 4096,
        split_bytes: usize::MAX,
        ranks: crate::topology::RanksRun::InPool,
        // No cache: every byte at thread_gbps, over the memory system.
        cache_bytes: 0,
        cache_gbps: 1.0,
        llc_bytes: 0,
        forward_gbps: 0.0,
    };
    let one_task = p.task_us * 1e-6 + 1024.0 / (p.thread_gbps * 1e9);
    let three = [
        program(0, vec![vec![local_copy(0, 1024)]]),
        program(1, vec![vec![local_copy(1, 1024)]]),
        program(2, vec![vec![local_copy(2, 1024)]]),
    ];
    // Inline: one thread runs the three tasks (no wake-up, no dispatch), whatever the
    // workers.
    assert_close(
        time(&three, &host_of_three(p), &CostParams::default()),
        3.0 * one_task,
    );
    // A rank's program beyond the inline bytes puts the whole host on its workers: four
    // threads run the three at once, after a wake-up each.
    let big = Processor {
        inline_bytes: 1000,
        ..p
    };
    assert_close(
        time(&three, &host_of_three(big), &CostParams::default()),
        p.wake_us * 1e-6 + one_task,
    );
    // Ranks in processes of their own never share one thread (whatever inline_bytes
    // says), and start on their own (submitting) thread: no wake-up before their first
    // task.
    let apart = Processor {
        ranks: crate::topology::RanksRun::Processes,
        ..p
    };
    assert_close(
        time(&three, &host_of_three(apart), &CostParams::default()),
        one_task,
    );
}

#[test]
fn processes_pay_a_switch_per_round_of_waits_queued_on_the_cores() {
    // Four processes on two cores; each posts to the next and waits for its previous
    // twice over (two rounds; the second has two Waits back to back, one switch).
    let p = Processor {
        workers: 2,
        task_us: 0.0,
        wake_us: 10.0,
        thread_gbps: 1.0,
        inline_bytes: 0,
        split_bytes: usize::MAX,
        ranks: crate::topology::RanksRun::Processes,
        // No cache: every byte at thread_gbps, over the memory system.
        cache_bytes: 0,
        cache_gbps: 1.0,
        llc_bytes: 0,
        forward_gbps: 0.0,
    };
    let host = crate::topology::presets::host(4)
        .with_processor(Some(p))
        .unwrap();
    let ranks = 4;
    let rounds = |rounds: usize| -> Vec<RankProgram> {
        (0..ranks)
            .map(|r| {
                let next = (r + 1) % ranks;
                let notify = |rank, index| NotifyId { rank, index };
                let mut tasks = Vec::new();
                for i in 0..rounds as u32 {
                    let words = [2 * i, 2 * i + 1];
                    tasks.extend(words.map(|w| Task::Post {
                        notify: notify(next, w),
                    }));
                    tasks.extend(words.map(|w| Task::Wait {
                        notify: notify(r, w),
                    }));
                }
                program(r, vec![tasks])
            })
            .collect()
    };
    let switch = p.wake_us * 1e-6;
    // Each round, four switches on two cores: two switches' time.
    for n in [1, 2] {
        assert_close(
            time(&rounds(n), &host, &CostParams::default()),
            n as f64 * 2.0 * switch,
        );
    }
    // Threads of one device's pool: a parked wait's wake-up runs beside the others.
    let pool = Processor {
        inline_bytes: 1,
        ranks: crate::topology::RanksRun::InPool,
        ..p
    };
    let threads = time(
        &rounds(1),
        &host.with_processor(Some(pool)).unwrap(),
        &CostParams::default(),
    );
    assert!(threads < 2.0 * switch + switch, "{threads:e}");
}

/// Two workers slower than the memory system's share (so the threads are what binds),
/// on the threaded path (every program moves more than a byte), never splitting a task.
fn slow_threads() -> Processor {
    Processor {
        workers: 2,
        task_us: 1.0,
        wake_us: 3.0,
        thread_gbps: 1.0,
        inline_bytes: 1,
        split_bytes: usize::MAX,
        ranks: crate::topology::RanksRun::InPool,
        // No cache: every byte at thread_gbps, over the memory system.
        cache_bytes: 0,
        cache_gbps: 1.0,
        llc_bytes: 0,
        forward_gbps: 0.0,
    }
}

#[test]
fn a_host_runs_at_most_its_workers_tasks_at_once() {
    let p = slow_threads();
    let three = [
        program(0, vec![vec![local_copy(0, MB)]]),
        program(1, vec![vec![local_copy(1, MB)]]),
        program(2, vec![vec![local_copy(2, MB)]]),
    ];
    let work = p.task_us * 1e-6 + MB as f64 / (p.thread_gbps * 1e9);
    assert_close(
        time(&three, &host_of_three(p), &CostParams::default()),
        p.wake_us * 1e-6 + 3.0 * work / 2.0,
    );
    // One task alone runs on one thread, unless it is big enough to be split among the
    // idle workers.
    let one = [
        program(0, vec![vec![local_copy(0, MB)]]),
        program(1, vec![vec![]]),
        program(2, vec![vec![]]),
    ];
    let alone = time(&one, &host_of_three(p), &CostParams::default());
    assert_close(alone, p.wake_us * 1e-6 + work);
    let split = Processor {
        split_bytes: MB,
        ..p
    };
    let shared = time(&one, &host_of_three(split), &CostParams::default());
    assert_close(shared, p.wake_us * 1e-6 + work / 2.0);
}

#[test]
fn on_a_host_a_peer_is_memory_and_a_parked_wait_pays_a_wake_up() {
    let p = slow_threads();
    let notify = NotifyId { rank: 1, index: 0 };
    // Rank 1 pulls from rank 0 after rank 0's copy: no link latency or bandwidth, only
    // the threads; its wait was parked when the post came, so it is woken.
    let programs = [
        program(0, vec![vec![local_copy(0, MB), Task::Post { notify }]]),
        program(1, vec![vec![Task::Wait { notify }, pull(0, 1, MB)]]),
        program(2, vec![vec![]]),
    ];
    let work = p.task_us * 1e-6 + MB as f64 / (p.thread_gbps * 1e9);
    let wake = p.wake_us * 1e-6;
    assert_close(
        time(&programs, &host_of_three(p), &CostParams::default()),
        wake + work + wake + work,
    );
    // Processes of one host joined by TCP (put-only links) still cross their link:
    // its latency comes on top of the threads' time.
    let tcp = host_of_three(p).with_fabric_access(LinkAccess::Put, LinkAccess::Put);
    let over_links = time(&programs, &tcp, &CostParams::default());
    let latency = crate::topology::presets::HOST_LATENCY_US * 1e-6;
    assert!(
        over_links >= wake + work + latency + wake + work,
        "{over_links:e} s over put-only links"
    );
    // On the inline path the same programs cost their two tasks only.
    let inline = Processor {
        inline_bytes: MB,
        ..p
    };
    assert_close(
        time(&programs, &host_of_three(inline), &CostParams::default()),
        2.0 * work,
    );
}

#[test]
fn an_operation_the_cache_holds_moves_at_the_cached_rate_off_the_memory_bus() {
    // Threads fast enough that the memory system (24 GB/s, shared) would bind three
    // ranks' copies; a cache of 6 MiB.
    let p = Processor {
        thread_gbps: 20.0,
        cache_gbps: 40.0,
        llc_bytes: 0,
        cache_bytes: 6 * MB,
        workers: 3,
        task_us: 0.0,
        ..slow_threads()
    };
    let three = |bytes: usize| {
        [
            program(0, vec![vec![local_copy(0, bytes)]]),
            program(1, vec![vec![local_copy(1, bytes)]]),
            program(2, vec![vec![local_copy(2, bytes)]]),
        ]
    };
    let wake = p.wake_us * 1e-6;
    // 1 MiB each: 6 MiB of buffers in all, cached. Each thread at 40 GB/s, and the
    // memory system carries none of it.
    assert_close(
        time(&three(MB), &host_of_three(p), &CostParams::default()),
        wake + MB as f64 / 40e9,
    );
    // 4 MiB each: 24 MiB in all, a quarter of it cached. The memory system carries the
    // other three quarters of the three copies, 9 MiB at 24 GB/s, which binds: the
    // threads take 4 MiB at (0.25 / 40 + 0.75 / 20) ns per byte each.
    let memory = crate::topology::presets::HOST_MEMORY_GBPS * 1e9;
    let bus = 3.0 * 0.75 * 4.0 * MB as f64 / memory;
    let threads = 4.0 * MB as f64 * (0.25 / 40e9 + 0.75 / 20e9);
    assert!(bus > threads);
    assert_close(
        time(&three(4 * MB), &host_of_three(p), &CostParams::default()),
        wake + bus,
    );
    // Without a cache the memory system carries all of it.
    let uncached = Processor {
        cache_bytes: 0,
        ..p
    };
    assert_close(
        time(&three(MB), &host_of_three(uncached), &CostParams::default()),
        wake + 3.0 * MB as f64 / memory,
    );
}

#[test]
fn a_reduce_of_many_sources_splits_at_a_shorter_length_than_a_copy() {
    // A Reduce of 7 sources into one destination moves 4 times its length: at 256 KiB it
    // moves 1 MiB and is shared by the workers, where a Copy of 256 KiB is not.
    let p = Processor {
        split_bytes: MB,
        ..slow_threads()
    };
    let len = MB / 4;
    let reduce = Task::Reduce {
        srcs: (0..7)
            .map(|i| Slice::new(0, Buf::Scratch, i * len, len))
            .collect(),
        dsts: vec![Slice::new(0, Buf::Output, 0, len)],
        dtype: DataType::F32,
        op: ReduceOp::Sum,
    };
    assert_eq!(memory_bytes(&reduce), MB as f64);
    assert!(super::splits(&p, &reduce));
    assert!(!super::splits(&p, &local_copy(0, len)));
    let alone = |task: Task| {
        let programs = [
            program(0, vec![vec![task]]),
            program(1, vec![vec![]]),
            program(2, vec![vec![]]),
        ];
        time(&programs, &host_of_three(p), &CostParams::default())
    };
    let work = p.task_us * 1e-6 + MB as f64 / (p.thread_gbps * 1e9);
    assert_close(alone(reduce), p.wake_us * 1e-6 + work / 2.0);
    // The host device counts a task's traffic the same way.
    assert_eq!(oxccl_platform::host::traffic_bytes(len, 8), MB);
}

#[test]
fn a_footprint_counts_each_buffer_once_from_its_lowest_byte_to_its_highest() {
    let programs = [
        program(0, vec![vec![pull(1, 0, MB), pull(1, 0, MB)]]),
        program(1, vec![vec![local_copy(1, 2 * MB)]]),
        program(2, vec![vec![]]),
    ];
    // Rank 1's input (2 MiB, read by both) and output (2 MiB); rank 0's output (1 MiB).
    let sums = super::footprints(&programs, 2, |rank| Some(rank / 2));
    assert_eq!(sums, vec![5 * MB, 0]);
}

#[test]
fn a_cached_copy_to_several_destinations_costs_a_thread_more_only_past_the_last_level_cache() {
    let copy = |len: usize, dsts: usize| Task::Copy {
        src: Slice::new(0, Buf::Input, 0, len),
        dsts: (0..dsts)
            .map(|d| Slice::new(d, Buf::Output, 0, len))
            .collect(),
    };
    // A copy to several destinations streams by its program, whatever the footprint.
    let scope = |program_bytes| oxccl_platform::reduce::CopyScope {
        program_bytes,
        footprint: 1 << 30,
    };
    let within = Caches {
        cached: 0.5,
        passes_llc: false,
        footprint: 16 << 20,
    };
    let past = Caches {
        cached: 0.2,
        passes_llc: true,
        footprint: 64 << 20,
    };
    // Within the last-level cache, block by block: its source read once, as the memory
    // bus sees it.
    let cached = copy(512 << 10, 7);
    assert!(!oxccl_platform::reduce::copy_streams(
        512 << 10,
        7,
        scope(0)
    ));
    assert_eq!(
        thread_bytes(&cached, 7 * (512 << 10), within),
        memory_bytes(&cached)
    );
    assert_eq!(memory_bytes(&cached), 4.0 * (512 << 10) as f64);
    // Past it: more than a whole copy per destination.
    let per_destination = (512 << 10) as f64 * SCATTERED_COPY_COST;
    const { assert!(SCATTERED_COPY_COST > 1.0) };
    assert_eq!(
        thread_bytes(&cached, 7 * (512 << 10), past),
        7.0 * per_destination
    );
    // One that streams goes block by block: each block read once. It streams when it
    // writes enough itself, or when its program does and it writes enough to be worth it.
    let streamed = copy(4 << 20, 7);
    assert!(oxccl_platform::reduce::copy_streams(4 << 20, 7, scope(0)));
    assert_eq!(thread_bytes(&streamed, 0, past), memory_bytes(&streamed));
    let in_large = copy(256 << 10, 2);
    assert!(!oxccl_platform::reduce::copy_streams(
        256 << 10,
        2,
        scope(1 << 20)
    ));
    assert!(oxccl_platform::reduce::copy_streams(
        256 << 10,
        2,
        scope(64 << 20)
    ));
    assert!(!oxccl_platform::reduce::copy_streams(
        64 << 10,
        2,
        scope(64 << 20)
    ));
    let two_copies = 2.0 * (256 << 10) as f64 * SCATTERED_COPY_COST;
    assert_eq!(thread_bytes(&in_large, 1 << 20, past), two_copies);
    assert_eq!(
        thread_bytes(&in_large, 64 << 20, past),
        memory_bytes(&in_large)
    );
    // One destination is a copy either way.
    assert_eq!(thread_bytes(&copy(64 << 10, 1), 0, past), (64 << 10) as f64);
}
