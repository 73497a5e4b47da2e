//! The cuda backend as a user meets it: a typed error where there is no driver (what CI
//! checks), and, on a machine with a GPU, collectives on virtual ranks of one GPU with
//! host slices, a rank that never calls reported by the watchdog, and every rank
//! released. Every executor's results on the GPU: run the executor tests with
//! `OXCCL_TEST_DEVICE=cuda` (see the README).

#![cfg(feature = "cuda")]

use oxccl::{Communicator, Config, ReduceOp, Topology};
use std::time::{Duration, Instant};

fn config(ranks: usize, timeout: Duration) -> Config {
    Config {
        device: "cuda".into(),
        topology: Some(Topology::single_server(ranks)),
        exec_timeout: timeout,
        ccl_buffer_bytes: 1 << 20,
        ..Config::default()
    }
}

/// The GPU count, or `None` (and why, printed) when the tests that need one skip.
fn gpus() -> Option<usize> {
    match oxccl::platform::cuda::gpu_count() {
        Ok(0) => {
            eprintln!("skipped: the CUDA driver reports no GPU");
            None
        }
        Ok(n) => Some(n),
        Err(e) => {
            eprintln!("skipped: {e}");
            None
        }
    }
}

#[test]
fn without_a_driver_init_is_a_typed_error() {
    if gpus().is_some() {
        eprintln!("skipped: this machine has a GPU");
        return;
    }
    let err = Communicator::init_all(2, config(2, Duration::from_secs(5))).unwrap_err();
    let text = format!("{err}: {:?}", std::error::Error::source(&err));
    assert!(
        text.contains("CUDA") || text.contains("cuda"),
        "the error names CUDA: {text}"
    );
}

#[test]
fn all_reduce_on_virtual_ranks_of_one_gpu() {
    let Some(_) = gpus() else { return };
    for ranks in [1, 2, 4, 8] {
        let mut cfg = config(ranks, Duration::from_secs(20));
        cfg.gpus = vec![0];
        let comms = Communicator::init_all(ranks, cfg).unwrap();
        for count in [0usize, 1, 7, 1000, 300_000] {
            std::thread::scope(|s| {
                for comm in &comms {
                    s.spawn(move || {
                        let r = comm.rank() as f32;
                        let send: Vec<f32> = (0..count).map(|i| r + (i % 13) as f32).collect();
                        let mut recv = vec![-1f32; count];
                        comm.all_reduce(&send, &mut recv, ReduceOp::Sum)
                            .unwrap_or_else(|e| panic!("rank {}: {e}", comm.rank()));
                        let base = (ranks * (ranks - 1) / 2) as f32;
                        for (i, v) in recv.iter().enumerate() {
                            let want = base + (ranks * (i % 13)) as f32;
                            assert_eq!(*v, want, "{ranks} ranks, count {count}, element {i}");
                        }
                    });
                }
            });
        }
    }
}

#[test]
fn a_rank_that_never_calls_is_named_and_every_rank_returns() {
    let Some(_) = gpus() else { return };
    let mut cfg = config(2, Duration::from_millis(500));
    cfg.gpus = vec![0];
    cfg.check_calls = false;
    let comms = Communicator::init_all(2, cfg).unwrap();
    let started = Instant::now();
    let send = vec![1f32; 4096];
    let mut recv = vec![0f32; 4096];
    let err = comms[0]
        .all_reduce(&send, &mut recv, ReduceOp::Sum)
        .unwrap_err();
    let text = err.to_string();
    assert!(started.elapsed() < Duration::from_secs(10), "{text}");
    assert!(text.contains("rank 0"), "{text}");
    // The device stopped: the next call is refused at once.
    let again = comms[1]
        .all_reduce(&send, &mut recv, ReduceOp::Sum)
        .unwrap_err();
    assert!(again.to_string().contains("abort"), "{again}");
}

/// Virtual ranks of one GPU run zero-copy unless the config says to stage, so the two
/// every-executor tests below run the two modes.
#[test]
fn virtual_ranks_of_one_gpu_run_zero_copy_unless_told_to_stage() {
    let Some(_) = gpus() else { return };
    for (zero_copy, want) in [(true, oxccl::Mode::Direct), (false, oxccl::Mode::Staged)] {
        let mut cfg = config(4, Duration::from_secs(20));
        cfg.gpus = vec![0];
        cfg.zero_copy = zero_copy;
        let comms = Communicator::init_all(4, cfg).unwrap();
        assert_eq!(comms[0].framework().mode(), want, "zero_copy {zero_copy}");
    }
}

/// Every executor zero-copy (peers reach each other's user buffers on the GPU, the mode a
/// communicator of virtual ranks runs in).
#[test]
fn every_executor_zero_copy_on_2_4_and_8_virtual_ranks_of_one_gpu() {
    every_executor_on_2_4_and_8_virtual_ranks_of_one_gpu(true);
}

/// Every executor staged through the CCL buffers (`OXCCL_ZERO_COPY=0`, and the mode of
/// ranks on several GPUs).
#[test]
fn every_executor_staged_on_2_4_and_8_virtual_ranks_of_one_gpu() {
    every_executor_on_2_4_and_8_virtual_ranks_of_one_gpu(false);
}

/// Every registered executor of the collectives the harness checks, forced on 2, 4 and 8
/// virtual ranks of GPU 0 (one server, and two servers of half the ranks for the
/// executors made for several), against the scalar reference: every dtype at boundary
/// counts and one past the CCL buffer (each matrix thinned as on the host). An executor
/// that cannot run on a shape (it says so when forced) is checked on the other.
fn every_executor_on_2_4_and_8_virtual_ranks_of_one_gpu(zero_copy: bool) {
    use oxccl::platform::LinkAccess;
    use oxccl::OpKind;
    use oxccl_tests::{blocks, rooted, Setup};
    let Some(_) = gpus() else { return };
    let ccl = oxccl_tests::SMALL_CCL_BYTES;
    let kinds = [
        OpKind::AllReduce,
        OpKind::AllGather,
        OpKind::ReduceScatter,
        OpKind::Broadcast,
        OpKind::Reduce,
        OpKind::Gather,
        OpKind::Scatter,
        OpKind::AlltoAll,
        OpKind::Barrier,
    ];
    let registry = oxccl::registry().expect("registry");
    let mut failures = Vec::new();
    let mut checked = 0;
    for kind in kinds {
        for exec in registry.executors_for(kind) {
            for n in [2usize, 4, 8] {
                let shapes = [
                    Topology::single_server(n),
                    Topology::servers(vec![n / 2, n / 2])
                        .expect("shape")
                        .with_fabric_access(LinkAccess::LoadStore, LinkAccess::LoadStore),
                ];
                let mut outcomes = Vec::new();
                for topology in shapes {
                    let setup = Setup {
                        algo: Some(exec.name),
                        topology,
                        zero_copy,
                        ccl_bytes: ccl,
                        device: Some("cuda"),
                    };
                    let run = match kind {
                        OpKind::AllReduce => {
                            oxccl_tests::run_all_reduce(&setup, &oxccl_tests::full_matrix(n, ccl))
                        }
                        OpKind::AllGather | OpKind::ReduceScatter => {
                            blocks::run_blocks(kind, &setup, &blocks::block_matrix(kind, n, ccl))
                        }
                        OpKind::AlltoAll => {
                            oxccl_tests::all_to_all::run_all_to_all(&setup, |i, j| (i + j) % 3 == 0)
                        }
                        OpKind::Barrier => oxccl_tests::barrier::run_barriers(&setup),
                        _ => rooted::run_rooted(kind, &setup, &rooted::rooted_matrix(kind, n, ccl)),
                    };
                    outcomes.push(run);
                }
                let cannot = |e: &String| e.contains("cannot run");
                let ran = outcomes.iter().filter(|o| o.is_ok()).count();
                for e in outcomes.iter().filter_map(|o| o.as_ref().err()) {
                    if !cannot(e) {
                        failures.push(format!("{kind} {} on {n}: {e}", exec.name));
                    }
                }
                if ran == 0 && outcomes.iter().all(|o| o.as_ref().is_err_and(cannot)) {
                    eprintln!(
                        "{kind} {} cannot run on {n} ranks of either shape",
                        exec.name
                    );
                }
                checked += ran;
            }
        }
    }
    let mode = if zero_copy { "zero-copy" } else { "staged" };
    eprintln!("{checked} (executor, shape) pairs exact on the GPU, {mode}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
