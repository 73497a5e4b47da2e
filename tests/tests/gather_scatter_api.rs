//! The typed eager and group calls of AllGather and ReduceScatter: results, NCCL's in-place
//! layout (the rank's data in its own block of the one buffer), and typed errors for
//! buffers that do not hold one block per rank.

use oxccl::{ArgError, Communicator, Config, Error, Group, OpKind, ReduceOp};

fn comms(n: usize) -> Vec<Communicator> {
    Communicator::init_all(n, Config::default()).unwrap()
}

/// Rank `r`'s send buffer of `len` elements.
fn send(r: usize, len: usize) -> Vec<i64> {
    (0..len).map(|i| (r * 1000 + i) as i64).collect()
}

#[test]
fn eager_all_gather_and_reduce_scatter_in_and_out_of_place() {
    let n = 3;
    let comms = comms(n);
    let gathered: Vec<i64> = (0..n).flat_map(|r| send(r, 4)).collect();
    std::thread::scope(|s| {
        for comm in &comms {
            let gathered = &gathered;
            s.spawn(move || {
                let r = comm.rank();
                let mut recv = vec![0i64; 4 * n];
                comm.all_gather(&send(r, 4), &mut recv).unwrap();
                assert_eq!(&recv, gathered);
                let mut buf = vec![-1i64; 4 * n];
                buf[4 * r..4 * r + 4].copy_from_slice(&send(r, 4));
                comm.all_gather_in_place(&mut buf).unwrap();
                assert_eq!(&buf, gathered);

                let want: Vec<i64> = (0..4)
                    .map(|i| (0..n).map(|q| send(q, 4 * n)[4 * r + i]).sum())
                    .collect();
                let mut recv = vec![0i64; 4];
                comm.reduce_scatter(&send(r, 4 * n), &mut recv, ReduceOp::Sum)
                    .unwrap();
                assert_eq!(recv, want);
                let mut buf = send(r, 4 * n);
                comm.reduce_scatter_in_place(&mut buf, ReduceOp::Sum)
                    .unwrap();
                assert_eq!(&buf[4 * r..4 * r + 4], &want[..]);
                assert_eq!(&buf[..4 * r], &send(r, 4 * n)[..4 * r], "other blocks kept");
            });
        }
    });
}

#[test]
fn group_all_gather_and_reduce_scatter() {
    let n = 4;
    let comms = comms(n);
    let sends: Vec<Vec<i64>> = (0..n).map(|r| send(r, 5)).collect();
    let mut recvs = vec![vec![0i64; 5 * n]; n];
    let mut group = Group::new();
    for ((comm, s), recv) in comms.iter().zip(&sends).zip(recvs.iter_mut()) {
        group.all_gather(comm, s, recv).unwrap();
    }
    group.run().unwrap();
    let gathered = sends.concat();
    assert!(recvs.iter().all(|r| *r == gathered));

    let mut bufs = vec![gathered.clone(); n];
    let mut group = Group::new();
    for (comm, buf) in comms.iter().zip(bufs.iter_mut()) {
        group
            .reduce_scatter_in_place(comm, buf, ReduceOp::Max)
            .unwrap();
    }
    group.run().unwrap();
    for (r, buf) in bufs.iter().enumerate() {
        assert_eq!(&buf[5 * r..5 * r + 5], &gathered[5 * r..5 * r + 5]);
    }
}

#[test]
fn buffers_without_one_block_per_rank_are_rejected() {
    let comms = comms(2);
    let err = comms[0]
        .all_gather(&[1.0f32; 3], &mut [0.0f32; 5])
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Arg(ArgError::BlockMismatch {
                op: OpKind::AllGather,
                need_recv: 6,
                recv: 5,
                ..
            })
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("6 receive elements"), "{err}");
    let err = comms[0]
        .reduce_scatter(&[1i32; 7], &mut [0i32; 3], ReduceOp::Sum)
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Arg(ArgError::BlockMismatch { need_send: 6, .. })
        ),
        "{err:?}"
    );
    let err = comms[0]
        .reduce_scatter_in_place(&mut [0u8; 5], ReduceOp::Sum)
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Arg(ArgError::NotDivisible {
                ranks: 2,
                len: 5,
                ..
            })
        ),
        "{err:?}"
    );
    let mut group = Group::new();
    let mut buf = [0u16; 3];
    assert!(group.all_gather_in_place(&comms[1], &mut buf).is_err());
}
