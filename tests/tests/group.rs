//! One thread drives every rank with group calls (nccl-tests' default mode).

use oxccl::{Communicator, Config, Group, ReduceOp};

#[test]
fn one_thread_runs_all_ranks() {
    for n in [1, 3, 8] {
        let comms = Communicator::init_all(n, Config::default()).unwrap();
        let sends: Vec<Vec<i64>> = (0..n)
            .map(|r| (0..1000).map(|i| (r * 1000 + i) as i64).collect())
            .collect();
        let mut recvs = vec![vec![0i64; 1000]; n];
        for _ in 0..3 {
            let mut group = Group::new();
            for ((comm, send), recv) in comms.iter().zip(&sends).zip(recvs.iter_mut()) {
                group.all_reduce(comm, send, recv, ReduceOp::Sum).unwrap();
            }
            group.run().unwrap();
            let want: Vec<i64> = (0..1000)
                .map(|i| (0..n).map(|r| (r * 1000 + i) as i64).sum())
                .collect();
            assert!(recvs.iter().all(|r| *r == want));
        }
    }
}
