//! Barrier against AllReduce, several calls on the same communicators.

use super::*;

#[derive(Clone, Copy, Debug)]
enum BarrierStep {
    /// Every rank calls `barrier()`.
    AllBarrier,
    /// Every rank calls `all_reduce` on one element.
    AllReduce,
    /// One rank calls `all_reduce` on `count` (0 or 1) elements, the others `barrier()`.
    OneReduces { odd: usize, count: usize },
    /// One rank calls `barrier()`, the others `all_reduce` on one element.
    OneBarrier { odd: usize },
}

#[derive(Clone, Debug)]
struct BarrierCase {
    ranks: usize,
    steps: Vec<BarrierStep>,
}

fn barrier_case() -> impl Strategy<Value = BarrierCase> {
    let step = prop_oneof![
        2 => Just(BarrierStep::AllBarrier),
        1 => Just(BarrierStep::AllReduce),
        2 => (0usize..6, 0usize..2).prop_map(|(odd, count)| BarrierStep::OneReduces { odd, count }),
        1 => (0usize..6).prop_map(|odd| BarrierStep::OneBarrier { odd }),
    ];
    (1usize..=6, prop::collection::vec(step, 1..=5))
        .prop_map(|(ranks, steps)| BarrierCase { ranks, steps })
}

fn check_barrier_mix(case: &BarrierCase) {
    let n = case.ranks;
    let comms = comms(n);
    let start = Instant::now();
    // Per rank, per step: the outcome (an AllReduce's buffers, or empty ones).
    let per_rank: Vec<Vec<Outcome<f32>>> = std::thread::scope(|s| {
        let threads: Vec<_> = comms
            .iter()
            .map(|comm| {
                s.spawn(move || {
                    let rank = comm.rank();
                    let steps = case.steps.iter().map(|step| {
                        let reduce = match *step {
                            BarrierStep::AllBarrier => None,
                            BarrierStep::AllReduce => Some(1),
                            BarrierStep::OneReduces { odd, count } => {
                                (n == 1 || rank == odd % n).then_some(count)
                            }
                            BarrierStep::OneBarrier { odd } => {
                                (n > 1 && rank != odd % n).then_some(1)
                            }
                        };
                        let send = Guarded::<f32>::input(rank, reduce.unwrap_or(0));
                        let mut recv = Guarded::zeros(reduce.unwrap_or(0));
                        let result = match reduce {
                            Some(_) => comm.all_reduce(send.get(), recv.get_mut(), ReduceOp::Sum),
                            None => comm.barrier(),
                        };
                        Outcome {
                            rank,
                            result,
                            send,
                            recv,
                        }
                    });
                    steps.collect()
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    assert_prompt(start);
    for (k, step) in case.steps.iter().enumerate() {
        let outcomes: Vec<&Outcome<f32>> = per_rank.iter().map(|steps| &steps[k]).collect();
        for o in &outcomes {
            assert!(
                o.send.guards_intact() && o.recv.guards_intact(),
                "step {k}: rank {}: a guard was overwritten ({:?})",
                o.rank,
                o.result
            );
        }
        let mismatch = n > 1
            && matches!(
                step,
                BarrierStep::OneReduces { .. } | BarrierStep::OneBarrier { .. }
            );
        let results: Vec<&Result<(), Error>> = outcomes.iter().map(|o| &o.result).collect();
        if mismatch {
            assert!(
                results.iter().all(|r| r.is_err()),
                "step {k} {step:?}: a barrier against an AllReduce: expected Err on every rank, got {results:?}"
            );
            // A mismatch moves no byte.
            for o in &outcomes {
                assert_data("AllReduce refused", o.recv.get(), |_| 0);
            }
            continue;
        }
        assert!(
            results.iter().all(|r| r.is_ok()),
            "step {k} {step:?}: expected Ok on every rank (after {:?}), got {results:?}",
            &case.steps[..k]
        );
        for o in &outcomes {
            assert_data("AllReduce", o.recv.get(), |i| reduced(ReduceOp::Sum, n, i));
        }
    }
}

#[test]
fn api_barrier_mix() {
    fuzz("barrier_mix", barrier_case(), |case| {
        check_barrier_mix(&case)
    });
}
