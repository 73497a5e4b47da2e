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
