//! The typed eager and group calls of every operator beyond AllReduce, AllGather and
//! ReduceScatter: results with the executors select_alg picks, in and out of place where
//! the operator allows it, and typed errors for bad layouts, roots and in-place forms.

use oxccl::framework::op::P2pItem;
use oxccl::{ArgError, Communicator, Config, Error, Group, ReduceOp};

fn comms(n: usize) -> Vec<Communicator> {
    Communicator::init_all(n, Config::default()).unwrap()
}

/// Rank `r`'s data of `len` elements.
fn data(r: usize, len: usize) -> Vec<i64> {
    (0..len).map(|i| (r * 1000 + i) as i64).collect()
}

/// Run `body` on every rank, each on its own thread.
fn on_every_rank(n: usize, body: impl Fn(&Communicator) + Sync) {
    let comms = comms(n);
    std::thread::scope(|s| {
        for comm in &comms {
            let body = &body;
            s.spawn(move || body(comm));
        }
    });
}

#[test]
fn broadcast_and_reduce_in_and_out_of_place() {
    let n = 5;
    let root = 3;
    let sum: Vec<i64> = (0..7)
        .map(|i| (0..n).map(|r| data(r, 7)[i]).sum())
        .collect();
    on_every_rank(n, |comm| {
        let r = comm.rank();
        let mut recv = vec![0i64; 7];
        comm.broadcast(&data(r, 7), &mut recv, root).unwrap();
        assert_eq!(recv, data(root, 7));
        let mut buf = data(r, 7);
        comm.broadcast_in_place(&mut buf, root).unwrap();
        assert_eq!(buf, data(root, 7));

        let mut recv = vec![0i64; 7];
        comm.reduce(&data(r, 7), &mut recv, ReduceOp::Sum, root)
            .unwrap();
        let mut buf = data(r, 7);
        comm.reduce_in_place(&mut buf, ReduceOp::Sum, root).unwrap();
        if r == root {
            assert_eq!(recv, sum);
            assert_eq!(buf, sum);
        }
    });
}

#[test]
fn scatter_and_gather_in_and_out_of_place() {
    let (n, root, c) = (4, 1, 3);
    let gathered: Vec<i64> = (0..n).flat_map(|r| data(r, c)).collect();
    on_every_rank(n, |comm| {
        let r = comm.rank();
        let mut recv = vec![0i64; c];
        comm.scatter(&data(r, c * n), &mut recv, root).unwrap();
        assert_eq!(recv, data(root, c * n)[r * c..(r + 1) * c]);
        let mut buf = data(r, c * n);
        comm.scatter_in_place(&mut buf, root).unwrap();
        assert_eq!(
            buf[r * c..(r + 1) * c],
            data(root, c * n)[r * c..(r + 1) * c]
        );

        let mut recv = vec![0i64; c * n];
        comm.gather(&data(r, c), &mut recv, root).unwrap();
        let mut buf = vec![-1i64; c * n];
        buf[r * c..(r + 1) * c].copy_from_slice(&data(r, c));
        comm.gather_in_place(&mut buf, root).unwrap();
        if r == root {
            assert_eq!(recv, gathered);
            assert_eq!(buf, gathered);
        }
    });
}

#[test]
fn all_to_all_and_all_to_all_v() {
    let (n, c) = (3, 2);
    on_every_rank(n, |comm| {
        let r = comm.rank();
        let mut recv = vec![0i64; c * n];
        comm.all_to_all(&data(r, c * n), &mut recv).unwrap();
        let want: Vec<i64> = (0..n)
            .flat_map(|s| data(s, c * n)[r * c..(r + 1) * c].to_vec())
            .collect();
        assert_eq!(recv, want);

        // Rank r sends r + p + 1 elements to rank p, packed by peer; receives packed.
        let send_counts: Vec<usize> = (0..n).map(|p| r + p + 1).collect();
        let recv_counts: Vec<usize> = (0..n).map(|p| p + r + 1).collect();
        let displs = |counts: &[usize]| {
            counts
                .iter()
                .scan(0, |at, &c| {
                    *at += c;
                    Some(*at - c)
                })
                .collect::<Vec<_>>()
        };
        let (sd, rd) = (displs(&send_counts), displs(&recv_counts));
        let total = |counts: &[usize]| counts.iter().sum::<usize>();
        let mut recv = vec![0i64; total(&recv_counts)];
        comm.all_to_all_v(
            &data(r, total(&send_counts)),
            &send_counts,
            &sd,
            &mut recv,
            &recv_counts,
            &rd,
        )
        .unwrap();
        for p in 0..n {
            let p_displ: usize = (0..r).map(|q| p + q + 1).sum();
            let from_p = &data(p, 100)[p_displ..p_displ + recv_counts[p]];
            assert_eq!(
                &recv[rd[p]..rd[p] + recv_counts[p]],
                from_p,
                "rank {r} from {p}"
            );
        }
    });
}

#[test]
fn v_forms_of_all_gather_and_reduce_scatter() {
    let n = 4;
    let counts = [2, 0, 3, 1];
    let displs = [0, 3, 3, 7];
    on_every_rank(n, |comm| {
        let r = comm.rank();
        let mut recv = vec![-1i64; 8];
        comm.all_gather_v(&data(r, counts[r]), &mut recv, &counts, &displs)
            .unwrap();
        for s in 0..n {
            assert_eq!(recv[displs[s]..displs[s] + counts[s]], data(s, counts[s]));
        }
        let mut out = vec![0i64; counts[r]];
        comm.reduce_scatter_v(&data(r, 8), &mut out, &counts, &displs, ReduceOp::Max)
            .unwrap();
        let want: Vec<i64> = (0..counts[r])
            .map(|i| (0..n).map(|q| data(q, 8)[displs[r] + i]).max().unwrap())
            .collect();
        assert_eq!(out, want);
    });
}

#[test]
fn send_recv_pairs_and_grouped_items_in_any_order() {
    let n = 4;
    on_every_rank(n, |comm| {
        let r = comm.rank();
        // A plain exchange: even ranks send first, odd ranks receive first.
        let partner = r ^ 1;
        let mut got = vec![0i64; 5];
        if r % 2 == 0 {
            comm.send(&data(r, 5), partner).unwrap();
            comm.recv(&mut got, partner).unwrap();
        } else {
            comm.recv(&mut got, partner).unwrap();
            comm.send(&data(r, 5), partner).unwrap();
        }
        assert_eq!(got, data(partner, 5));

        // One call with a send to every other rank and a receive from each, listed in an
        // order that differs per rank.
        let peers: Vec<usize> = (1..n).map(|k| (r + k) % n).collect();
        let mut order = peers.clone();
        order.rotate_left(r % peers.len());
        let sends: Vec<P2pItem> = order
            .iter()
            .map(|&p| P2pItem {
                peer: p,
                offset: 2 * p,
                count: 2,
            })
            .collect();
        let recvs: Vec<P2pItem> = order
            .iter()
            .rev()
            .map(|&p| P2pItem {
                peer: p,
                offset: 2 * p,
                count: 2,
            })
            .collect();
        let mut recv = vec![-1i64; 2 * n];
        comm.send_recv(&data(r, 2 * n), &sends, &mut recv, &recvs)
            .unwrap();
        for p in peers {
            assert_eq!(recv[2 * p..2 * p + 2], data(p, 2 * n)[2 * r..2 * r + 2]);
        }
        comm.barrier().unwrap();
    });
}

#[test]
fn group_calls_of_rooted_operators_from_one_thread() {
    let (n, root) = (3, 2);
    let comms = comms(n);
    let sends: Vec<Vec<f32>> = (0..n).map(|r| vec![r as f32 + 1.0; 6]).collect();
    let mut recvs = vec![vec![0f32; 6]; n];
    let mut group = Group::new();
    for ((comm, s), recv) in comms.iter().zip(&sends).zip(recvs.iter_mut()) {
        group.reduce(comm, s, recv, ReduceOp::Sum, root).unwrap();
    }
    group.run().unwrap();
    assert_eq!(recvs[root], vec![6.0; 6]);
    let mut group = Group::new();
    for comm in &comms {
        group.barrier(comm);
    }
    group.run().unwrap();
}

#[test]
fn bad_layouts_roots_and_in_place_forms_get_typed_errors() {
    let comms = comms(2);
    let mut recv = vec![0i32; 4];
    let err = comms[0]
        .all_gather_v(&[1, 2], &mut recv, &[2], &[0])
        .unwrap_err();
    assert!(
        matches!(err, Error::Arg(ArgError::BadLayout { .. })),
        "{err}"
    );
    let err = comms[0]
        .all_gather_v(&[1, 2], &mut recv, &[2, 2], &[0, 1])
        .unwrap_err();
    assert!(err.to_string().contains("overlaps"), "{err}");
    let err = comms[0]
        .all_gather_v(&[1, 2], &mut recv[..3], &[2, 2], &[0, 2])
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Arg(ArgError::BufferTooShort {
                need: 4,
                got: 3,
                ..
            })
        ),
        "{err}"
    );
    let err = comms[1].send(&[1i32], 2).unwrap_err();
    assert!(err.to_string().contains("peer 2"), "{err}");
    let err = comms[0].broadcast(&[1i32], &mut [0], 5).unwrap_err();
    assert!(
        matches!(err, Error::Arg(ArgError::InvalidRoot { root: 5, ranks: 2 })),
        "{err}"
    );
    let mut buf = vec![0i32; 4];
    let err = comms[0]
        .execute(
            &oxccl::OpParam::new(
                oxccl::OpKind::AlltoAll,
                2,
                oxccl::DataType::I32,
                ReduceOp::Sum,
            ),
            oxccl::UserBuffers::InPlace(bytemuck::cast_slice_mut(&mut buf)),
        )
        .unwrap_err();
    assert!(
        matches!(err, Error::Arg(ArgError::InPlaceUnsupported { .. })),
        "{err}"
    );
}
