//! A failure on one rank releases every other rank at once. The executor below fails on
//! rank 1 (a copy past the end of its input, refused when the device checks the bound
//! buffer against the compiled program's extent) while
//! every other rank waits for a signal rank 1 would have sent: without the release they
//! would wait out the one-minute timeout.

use oxccl::platform::{Buf, ConfigFault, Slice};
use oxccl::{
    Communicator, Config, Constraints, DeviceError, Error, Executor, KernelArgs, KernelCtx, OpKind,
    Peers, PlanCtx, ReduceOp, ResourceRequest,
};
use std::time::{Duration, Instant};

struct FaultyOnRankOne;

oxccl::register_executor! {
    name: "faulty-on-rank-one",
    op: OpKind::AllReduce,
    description: "test only: rank 1 reads past its input, the others wait for it",
    constraints: Constraints::ANY,
    preference: -100,
    make: || Box::new(FaultyOnRankOne),
}

impl Executor for FaultyOnRankOne {
    fn resources(&self, _: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        Ok(ResourceRequest::with_peers(Peers::All))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        if ctx.rank == 1 {
            let past_the_end = args.input.offset + args.input.len;
            let src = Slice::new(1, Buf::Input, past_the_end, 8);
            ctx.main().copy(src, Slice::new(1, Buf::Output, 0, 8));
        } else {
            ctx.link(1, 0)?.rx_data_signal(ctx.main());
        }
        Ok(())
    }
}

#[test]
fn a_device_error_on_one_rank_releases_the_others_at_once() {
    let mut config = Config::default();
    assert_eq!(config.exec_timeout, Duration::from_secs(60));
    config
        .algo
        .set(Some(OpKind::AllReduce), "faulty-on-rank-one");
    let comms = Communicator::init_all(4, config).unwrap();
    let start = Instant::now();
    let results: Vec<Result<(), Error>> = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .iter()
            .map(|c| s.spawn(move || c.all_reduce(&[1u64; 4], &mut [0u64; 4], ReduceOp::Sum)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "took {:?}",
        start.elapsed()
    );
    for (rank, result) in results.iter().enumerate() {
        match (rank, result) {
            (
                1,
                Err(Error::Device(DeviceError::Config(ConfigFault::UserBufferTooShort {
                    buf: Buf::Input,
                    ..
                }))),
            ) => {}
            (_, Err(Error::Device(DeviceError::Aborted { cause, .. }))) => {
                let cause = cause.to_string();
                assert!(cause.contains("rank 1 failed"), "{cause}")
            }
            // Rank 1's submission failed before this rank reached the device: the
            // communicator's failure record says why.
            (_, Err(Error::Aborted { cause })) => {
                let chain = oxccl::framework::error::with_causes(cause.as_ref());
                assert!(chain.contains("the user's Input has"), "{chain}")
            }
            (rank, other) => panic!("rank {rank}: {other:?}"),
        }
    }
    // The failed program left the communicator in an unknown state: it says so.
    let err = comms[0].barrier().unwrap_err();
    assert!(matches!(err, Error::Aborted { .. }), "{err:?}");
}

/// `abort` from another thread ends a call that waits for a rank that never comes, at
/// once, and the communicator refuses every later call.
#[test]
fn abort_from_another_thread_ends_a_waiting_call() {
    let config = Config {
        exec_timeout: Duration::from_secs(60),
        ..Config::default()
    };
    let comms = Communicator::init_all(2, config).expect("init");
    let start = Instant::now();
    let result = std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            let send = vec![1.0f32; 1024];
            let mut recv = vec![0.0f32; 1024];
            // Rank 1 never calls: this waits until the abort.
            comms[0].all_reduce(&send, &mut recv, ReduceOp::Sum)
        });
        std::thread::sleep(Duration::from_millis(100));
        comms[0].abort();
        waiting.join().expect("rank 0's thread")
    });
    let err = result.expect_err("aborted");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    let text = oxccl::framework::error::with_causes(&err);
    assert!(text.contains("aborted by its user"), "{text}");
    let mut buf = vec![0.0f32; 4];
    let later = comms[1].all_reduce_in_place(&mut buf, ReduceOp::Sum);
    assert!(
        later.is_err(),
        "an aborted communicator refuses later calls"
    );
}
