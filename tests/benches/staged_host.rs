//! What staging through host memory costs a job of processes: an AllReduce of 64 MiB
//! (f32, sum) between two ranks joined over shared memory (`init_rank`, a thread each),
//! on the host device and on the `staged-host` kind (the cuda backend's path across
//! processes, with host memory standing for the GPU's: each call's input copied in and
//! its output copied back by `memcpy`). Prints the time per call of each, and their
//! ratio, for three rounds measured in turn (the machine is shared: compare within a
//! round).
//!
//!     cargo bench -p oxccl-tests --bench staged_host

use oxccl::framework::transport::TransportChoice;
use oxccl::{Communicator, Config, DataType, OpParam, ReduceOp};
use oxccl_tests::staged_host::STAGED_HOST;
use oxccl_tests::{execute_on, Aligned};
use std::time::{Duration, Instant};

const BYTES: usize = 64 << 20;
const WARMUP: u32 = 2;
const CALLS: u32 = 5;

fn join(n: usize, device: &str) -> Vec<Communicator> {
    let config = Config {
        device: device.into(),
        transport: TransportChoice::Shm,
        ..Config::default()
    };
    let joined = oxccl_tests::join_ranks(n, |_| config.clone());
    joined.into_iter().map(|c| c.expect("init")).collect()
}

/// Seconds per call on `device`, after the warm-up calls.
fn per_call(device: &str) -> f64 {
    let comms = join(2, device);
    let param = OpParam::all_reduce(BYTES / 4, DataType::F32, ReduceOp::Sum);
    let timed: Vec<Duration> = std::thread::scope(|s| {
        let ranks: Vec<_> = comms
            .iter()
            .map(|comm| {
                let param = &param;
                s.spawn(move || {
                    let send = Aligned::filled(1, BYTES);
                    let mut recv = Aligned::zeroed(BYTES);
                    for _ in 0..WARMUP {
                        execute_on(comm, param, false, &send, &mut recv).expect("call");
                    }
                    let start = Instant::now();
                    for _ in 0..CALLS {
                        execute_on(comm, param, false, &send, &mut recv).expect("call");
                    }
                    start.elapsed()
                })
            })
            .collect();
        ranks.into_iter().map(|h| h.join().expect("rank")).collect()
    });
    let slowest = timed.into_iter().max().unwrap_or_default();
    slowest.as_secs_f64() / f64::from(CALLS)
}

fn main() {
    println!(
        "# AllReduce of {} MiB, 2 ranks over shared memory",
        BYTES >> 20
    );
    println!("# round  host ms  staged-host ms  staged/host");
    for round in 1..=3 {
        let host = per_call("host");
        let staged = per_call(STAGED_HOST);
        println!(
            "{round:7}  {:7.1}  {:14.1}  {:11.2}",
            host * 1e3,
            staged * 1e3,
            staged / host
        );
    }
}
