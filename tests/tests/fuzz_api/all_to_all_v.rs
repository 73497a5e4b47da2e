//! AlltoAllV.

use super::*;

/// What is wrong with an AlltoAllV.
#[derive(Clone, Copy, Debug)]
enum AlltoAllVFault {
    None,
    /// One rank sends another count to one peer (a small one or a wild one).
    SendCount {
        peer: usize,
        count: Num,
    },
    /// One rank sends from a wild displacement.
    SendDispl {
        peer: usize,
        displ: Num,
    },
    /// One rank receives into a wild displacement.
    RecvDispl {
        peer: usize,
        displ: Num,
    },
}

#[derive(Clone, Debug)]
struct AlltoAllVCase {
    ranks: usize,
    dtype: Dtype,
    /// `counts[s][d]`: elements rank `s` sends to rank `d` (the first `ranks` of each).
    counts: Vec<Vec<usize>>,
    fault: AlltoAllVFault,
    odd_rank: usize,
}

fn all_to_all_v_case() -> impl Strategy<Value = AlltoAllVCase> {
    let fault = prop_oneof![
        2 => Just(AlltoAllVFault::None),
        1 => (0usize..5, num(5)).prop_map(|(peer, count)| AlltoAllVFault::SendCount { peer, count }),
        1 => (0usize..5, wild()).prop_map(|(peer, displ)| AlltoAllVFault::SendDispl { peer, displ }),
        1 => (0usize..5, wild()).prop_map(|(peer, displ)| AlltoAllVFault::RecvDispl { peer, displ }),
    ];
    let counts = prop::collection::vec(prop::collection::vec(0usize..5, 5), 5);
    (ranks(), dtype(), counts, fault, 0usize..5).prop_map(
        |(ranks, dtype, counts, fault, odd_rank)| AlltoAllVCase {
            ranks,
            dtype,
            counts,
            fault,
            odd_rank,
        },
    )
}

/// Packed displacements of `counts`.
fn packed(counts: &[usize]) -> Vec<usize> {
    counts
        .iter()
        .scan(0, |at, &c| {
            *at += c;
            Some(*at - c)
        })
        .collect()
}

/// Whether block `peer` of `counts` at displacement `displ` ends past the packed buffer.
fn out_of(counts: &[usize], peer: usize, displ: usize) -> bool {
    let len: usize = counts.iter().sum();
    counts[peer] > 0 && displ.checked_add(counts[peer]).is_none_or(|end| end > len)
}

fn check_all_to_all_v<T: Value>(case: &AlltoAllVCase) {
    let n = case.ranks;
    let elem = std::mem::size_of::<T>();
    let sends = |s: usize| case.counts[s][..n].to_vec();
    let recvs = |d: usize| (0..n).map(|s| case.counts[s][d]).collect::<Vec<_>>();
    let odd = odd_rank_out(n, case.odd_rank);
    let outcomes = on_every_rank(n, |comm| {
        let rank = comm.rank();
        let (mut send_counts, mut recv_counts) = (sends(rank), recvs(rank));
        let (mut send_displs, mut recv_displs) = (packed(&send_counts), packed(&recv_counts));
        let send = Guarded::<T>::input(rank, send_counts.iter().sum());
        let mut recv = Guarded::<T>::zeros(recv_counts.iter().sum());
        if Some(rank) == odd {
            match case.fault {
                AlltoAllVFault::None => {}
                AlltoAllVFault::SendCount { peer, count } => {
                    send_counts[peer % n] = count.get(elem)
                }
                AlltoAllVFault::SendDispl { peer, displ } => {
                    send_displs[peer % n] = displ.get(elem)
                }
                AlltoAllVFault::RecvDispl { peer, displ } => {
                    recv_displs[peer % n] = displ.get(elem)
                }
            }
        }
        let result = comm.all_to_all_v(
            send.get(),
            &send_counts,
            &send_displs,
            recv.get_mut(),
            &recv_counts,
            &recv_displs,
        );
        recv_counts.clear();
        Outcome {
            rank,
            result,
            send,
            recv,
        }
    });
    let changed = match (odd, case.fault) {
        (None, _) | (_, AlltoAllVFault::None) => false,
        (Some(r), AlltoAllVFault::SendCount { peer, count }) => {
            sends(r)[peer % n] != count.get(elem)
        }
        // A wild displacement of an empty block may be ignored.
        // Another displacement inside the buffer is this rank's own business: skip the
        // data check; one past the buffer must be refused.
        (
            Some(r),
            AlltoAllVFault::SendDispl { peer, displ } | AlltoAllVFault::RecvDispl { peer, displ },
        ) => {
            let counts = match case.fault {
                AlltoAllVFault::SendDispl { .. } => sends(r),
                _ => recvs(r),
            };
            let d = displ.get(elem);
            if counts[peer % n] > 0 && d == packed(&counts)[peer % n] {
                false
            } else if out_of(&counts, peer % n, d) {
                true
            } else {
                all_ok(&outcomes);
                return;
            }
        }
    };
    if changed {
        assert_all_err(&outcomes, "AlltoAllV with one bad rank");
        return;
    }
    if matches!(case.fault, AlltoAllVFault::None) || odd.is_none() {
        assert_all_ok(&outcomes, "valid AlltoAllV");
    }
    if !all_ok(&outcomes) {
        return;
    }
    for o in &outcomes {
        let d = o.rank;
        let (counts, displs) = (recvs(d), packed(&recvs(d)));
        for s in 0..n {
            let at = packed(&sends(s))[d];
            let block = &o.recv.get()[displs[s]..displs[s] + counts[s]];
            assert_data(&format!("AlltoAllV {s}->{d}"), block, |i| input(s, at + i));
        }
    }
}

#[test]
fn api_all_to_all_v() {
    fuzz("all_to_all_v", all_to_all_v_case(), |case| {
        with_dtype!(case.dtype, check_all_to_all_v(&case))
    });
}
