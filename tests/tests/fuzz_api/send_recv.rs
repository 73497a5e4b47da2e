//! Point-to-point: send_recv, send and recv.

use super::*;

/// What is wrong with a point-to-point call.
#[derive(Clone, Copy, Debug)]
enum P2pFault {
    None,
    /// One rank names a peer that is not a rank (`n + delta`, `usize::MAX`, ...) in one
    /// of its sends (`recv` false) or receives.
    Peer {
        recv: bool,
        item: usize,
        which: u8,
    },
    /// One rank's non-empty send or receive starts so that it wraps or ends past the
    /// buffer.
    Offset {
        recv: bool,
        item: usize,
        which: u8,
    },
    /// One rank's non-empty receive counts one element more or less than its send.
    RecvCount {
        item: usize,
        more: bool,
    },
    /// One rank's non-empty receive is moved onto another of its non-empty receives.
    Overlap {
        item: usize,
        onto: usize,
    },
}

#[derive(Clone, Debug)]
struct P2pCase {
    ranks: usize,
    dtype: Dtype,
    /// `counts[a][b]`: the counts of rank `a`'s sends to rank `b`, in order (the first
    /// `ranks` of each).
    counts: Vec<Vec<Vec<usize>>>,
    /// Drives the order in which each rank lists its items, and the gaps between its
    /// receives.
    shuffle: u64,
    /// `(a, b, count)`: one `send` of `count` elements from rank `a` to a rank `b != a`
    /// (both taken modulo the rank count) and its `recv`, instead of one grouped
    /// `send_recv` per rank (with at least two ranks).
    single: Option<(usize, usize, usize)>,
    fault: P2pFault,
    odd_rank: usize,
}

fn p2p_case() -> impl Strategy<Value = P2pCase> {
    let fault = prop_oneof![
        3 => Just(P2pFault::None),
        1 => (any::<bool>(), 0usize..8, any::<u8>())
            .prop_map(|(recv, item, which)| P2pFault::Peer { recv, item, which }),
        1 => (any::<bool>(), 0usize..8, any::<u8>())
            .prop_map(|(recv, item, which)| P2pFault::Offset { recv, item, which }),
        1 => (0usize..8, any::<bool>()).prop_map(|(item, more)| P2pFault::RecvCount { item, more }),
        1 => (0usize..8, 0usize..8).prop_map(|(item, onto)| P2pFault::Overlap { item, onto }),
    ];
    let list = prop_oneof![
        2 => Just(vec![]),
        3 => prop::collection::vec(0usize..12, 1..=3),
    ];
    let counts = prop::collection::vec(prop::collection::vec(list, 6), 6);
    let single = prop::option::weighted(0.25, (0usize..6, 0usize..6, 0usize..300));
    (
        1usize..=6,
        dtype(),
        counts,
        any::<u64>(),
        single,
        fault,
        0usize..6,
    )
        .prop_map(
            |(ranks, dtype, counts, shuffle, single, fault, odd_rank)| P2pCase {
                ranks,
                dtype,
                counts,
                shuffle,
                single,
                fault,
                odd_rank,
            },
        )
}

/// A small deterministic generator for the order of items.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n.max(1)
    }
}

/// One rank's items: `(peer, count)` per item, in listing order (the items for each peer
/// in their own order, the peers interleaved by `rng`).
fn interleave(per_peer: Vec<Vec<usize>>, rng: &mut Lcg) -> Vec<(usize, usize)> {
    let mut queues: Vec<(usize, std::collections::VecDeque<usize>)> = per_peer
        .into_iter()
        .enumerate()
        .map(|(p, counts)| (p, std::collections::VecDeque::from(counts)))
        .filter(|(_, q)| !q.is_empty())
        .collect();
    let mut items = Vec::new();
    while !queues.is_empty() {
        let k = rng.below(queues.len());
        let (peer, queue) = &mut queues[k];
        items.push((*peer, queue.pop_front().unwrap()));
        if queue.is_empty() {
            queues.swap_remove(k);
        }
    }
    items
}

/// Place `items` one after another, each after a gap of 0..=2 elements drawn from `rng`;
/// the items and the length of the buffer they fill.
fn place(items: &[(usize, usize)], rng: &mut Lcg) -> (Vec<P2pItem>, usize) {
    let mut at = 0;
    let placed = items
        .iter()
        .map(|&(peer, count)| {
            let offset = at + rng.below(3);
            at = offset + count;
            P2pItem {
                peer,
                offset,
                count,
            }
        })
        .collect();
    (placed, at + rng.below(3))
}

/// A peer that is not a rank of `n`.
fn bad_peer(n: usize, which: u8) -> usize {
    match which % 4 {
        0 => n,
        1 => n + 1 + which as usize / 4,
        2 => usize::MAX,
        _ => usize::MAX / 2,
    }
}

/// An offset for a non-empty item of `count` elements that wraps or ends past a buffer of
/// `len` elements of `elem` bytes.
fn bad_offset(len: usize, count: usize, elem: usize, which: u8) -> usize {
    match which % 5 {
        0 => usize::MAX,
        1 => usize::MAX - (count - 1) / 2,
        2 => len - count + 1,
        3 => len,
        _ => usize::MAX / elem,
    }
}

/// One rank's layout: its sends, its receives, and its buffer lengths.
struct P2pLayout {
    sends: Vec<P2pItem>,
    recvs: Vec<P2pItem>,
    send_len: usize,
    recv_len: usize,
}

fn p2p_layouts(case: &P2pCase) -> Vec<P2pLayout> {
    let n = case.ranks;
    (0..n)
        .map(|r| {
            let mut rng = Lcg(case.shuffle ^ (r as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let to: Vec<Vec<usize>> = (0..n).map(|b| case.counts[r][b].clone()).collect();
            let from: Vec<Vec<usize>> = (0..n).map(|a| case.counts[a][r].clone()).collect();
            let (sends, send_len) = place(&interleave(to, &mut rng), &mut rng);
            let (recvs, recv_len) = place(&interleave(from, &mut rng), &mut rng);
            P2pLayout {
                sends,
                recvs,
                send_len,
                recv_len,
            }
        })
        .collect()
}

/// Apply `fault` to one rank's layout; whether it changed anything.
fn p2p_fault(layout: &mut P2pLayout, fault: P2pFault, n: usize, elem: usize) -> bool {
    let non_empty = |items: &[P2pItem]| -> Vec<usize> {
        (0..items.len()).filter(|&i| items[i].count > 0).collect()
    };
    match fault {
        P2pFault::None => false,
        P2pFault::Peer { recv, item, which } => {
            let items = if recv {
                &mut layout.recvs
            } else {
                &mut layout.sends
            };
            let peer = bad_peer(n, which);
            match items.len() {
                0 => items.push(P2pItem {
                    peer,
                    offset: 0,
                    count: item % 2,
                }),
                len => items[item % len].peer = peer,
            }
            true
        }
        P2pFault::Offset { recv, item, which } => {
            let (items, len) = if recv {
                (&mut layout.recvs, layout.recv_len)
            } else {
                (&mut layout.sends, layout.send_len)
            };
            let picks = non_empty(items);
            let Some(&k) = picks.get(item % picks.len().max(1)) else {
                return false;
            };
            items[k].offset = bad_offset(len, items[k].count, elem, which);
            true
        }
        P2pFault::RecvCount { item, more } => {
            let picks = non_empty(&layout.recvs);
            let Some(&k) = picks.get(item % picks.len().max(1)) else {
                return false;
            };
            let it = &mut layout.recvs[k];
            if more {
                it.count += 1;
                layout.recv_len = layout.recv_len.max(it.offset + it.count);
            } else {
                it.count -= 1;
            }
            true
        }
        P2pFault::Overlap { item, onto } => {
            let picks = non_empty(&layout.recvs);
            if picks.len() < 2 {
                return false;
            }
            let k = picks[item % picks.len()];
            let others: Vec<usize> = picks.into_iter().filter(|&j| j != k).collect();
            let j = others[onto % others.len()];
            layout.recvs[k].offset = layout.recvs[j].offset;
            layout.recv_len = layout
                .recv_len
                .max(layout.recvs[k].offset + layout.recvs[k].count);
            true
        }
    }
}

fn check_p2p<T: Value>(case: &P2pCase) {
    match case.single {
        Some(single) if case.ranks >= 2 => check_single_p2p::<T>(case, single),
        _ => check_grouped_p2p::<T>(case),
    }
}

fn check_grouped_p2p<T: Value>(case: &P2pCase) {
    let n = case.ranks;
    let elem = std::mem::size_of::<T>();
    let mut layouts = p2p_layouts(case);
    let odd = odd_rank_out(n, case.odd_rank).or((n == 1).then_some(0));
    let changed = odd.is_some_and(|r| p2p_fault(&mut layouts[r], case.fault, n, elem));
    let outcomes = on_every_rank(n, |comm| {
        let rank = comm.rank();
        let l = &layouts[rank];
        let send = Guarded::<T>::tagged(rank, l.send_len);
        let mut recv = Guarded::<T>::zeros(l.recv_len);
        let result = comm.send_recv(send.get(), &l.sends, recv.get_mut(), &l.recvs);
        Outcome {
            rank,
            result,
            send,
            recv,
        }
    });
    if changed {
        assert_all_err(&outcomes, "send_recv with a bad or mismatched item");
        return;
    }
    assert_all_ok(&outcomes, "valid send_recv");
    // Receive k of b from a holds send k of a to b; the gaps are untouched.
    let layouts = p2p_layouts(case);
    for o in &outcomes {
        let b = o.rank;
        let mut want = vec![0u32; layouts[b].recv_len];
        let mut taken = vec![0usize; n];
        for item in &layouts[b].recvs {
            let a = item.peer;
            let send = layouts[a]
                .sends
                .iter()
                .filter(|s| s.peer == b)
                .nth(taken[a])
                .expect("a matching send");
            taken[a] += 1;
            for j in 0..item.count {
                want[item.offset + j] = tag(a, send.offset + j);
            }
        }
        assert_data(&format!("send_recv into rank {b}"), o.recv.get(), |i| {
            want[i]
        });
    }
}

/// One `send` from rank `a` to rank `b != a` of `count` elements; the other ranks call
/// `send_recv` with no items (every rank makes every call).
fn check_single_p2p<T: Value>(case: &P2pCase, (a, b, count): (usize, usize, usize)) {
    let n = case.ranks;
    let a = a % n;
    let b = (a + 1 + b % (n - 1)) % n;
    let odd = odd_rank_out(n, case.odd_rank).unwrap();
    // Faults: a bad peer on `odd`'s send or recv, or a receive of another length.
    let (mut send_peer, mut recv_peer, mut recv_len) = (b, a, count);
    let changed = match case.fault {
        P2pFault::Peer {
            recv: false, which, ..
        } if odd == a => {
            send_peer = bad_peer(n, which);
            true
        }
        P2pFault::Peer {
            recv: true, which, ..
        } if odd == b => {
            recv_peer = bad_peer(n, which);
            true
        }
        P2pFault::RecvCount { more, .. } if more || count > 0 => {
            recv_len = if more { count + 1 } else { count - 1 };
            true
        }
        _ => false,
    };
    let outcomes = on_every_rank(n, |comm| {
        let rank = comm.rank();
        let send = Guarded::<T>::tagged(rank, if rank == a { count } else { 0 });
        let mut recv = Guarded::<T>::zeros(if rank == b { recv_len } else { 0 });
        let result = if rank == a {
            comm.send(send.get(), send_peer)
        } else if rank == b {
            comm.recv(recv.get_mut(), recv_peer)
        } else {
            comm.send_recv(send.get(), &[], recv.get_mut(), &[])
        };
        Outcome {
            rank,
            result,
            send,
            recv,
        }
    });
    if changed {
        assert_all_err(&outcomes, "send/recv with a bad peer or another count");
        return;
    }
    assert_all_ok(&outcomes, "valid send/recv");
    assert_data("recv", outcomes[b].recv.get(), |i| tag(a, i));
}

#[test]
fn api_send_recv() {
    fuzz("send_recv", p2p_case(), |case| {
        with_dtype!(case.dtype, check_p2p(&case))
    });
}
