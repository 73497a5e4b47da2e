//! AllGatherV and ReduceScatterV.

use super::*;

/// What is wrong with an AllGatherV or ReduceScatterV.
#[derive(Clone, Copy, Debug)]
enum BlocksFault {
    None,
    /// One rank passes another displacement for one block.
    DisplOnOneRank {
        block: usize,
        displ: Num,
    },
    /// One rank passes another count for one block.
    CountOnOneRank {
        block: usize,
        count: Num,
    },
    /// One rank's larger buffer is one element short.
    ShortOnOneRank,
}

#[derive(Clone, Debug)]
struct BlocksCase {
    gather: bool,
    ranks: usize,
    dtype: Dtype,
    op: ReduceOp,
    counts: Vec<Num>,
    /// Gap before each block (small), or a wild displacement.
    displs: Vec<Num>,
    fault: BlocksFault,
    odd_rank: usize,
}

fn blocks_case() -> impl Strategy<Value = BlocksCase> {
    let fault = prop_oneof![
        3 => Just(BlocksFault::None),
        1 => (0usize..5, num(20)).prop_map(|(block, displ)| BlocksFault::DisplOnOneRank { block, displ }),
        1 => (0usize..5, num(8)).prop_map(|(block, count)| BlocksFault::CountOnOneRank { block, count }),
        1 => Just(BlocksFault::ShortOnOneRank),
    ];
    (
        ranks(),
        any::<bool>(),
        dtype(),
        reduce_op(),
        fault,
        0usize..5,
    )
        .prop_flat_map(move |(ranks, gather, dtype, op, fault, odd_rank)| {
            // Occasionally one count or displacement too many or too few.
            let len = prop_oneof![8 => Just(ranks), 1 => Just(ranks + 1), 1 => Just(ranks - 1)];
            (len.clone(), len).prop_flat_map(move |(counts_len, displs_len)| {
                (
                    prop::collection::vec(num(6), counts_len),
                    prop::collection::vec(num(3), displs_len),
                )
                    .prop_map(move |(counts, displs)| BlocksCase {
                        gather,
                        ranks,
                        dtype,
                        op,
                        counts,
                        displs,
                        fault,
                        odd_rank,
                    })
            })
        })
}

/// Counts and displacements (packed with the small gaps; wild ones as they are) for
/// elements of `elem` bytes.
fn layout(counts: &[Num], gaps: &[Num], elem: usize) -> (Vec<usize>, Vec<usize>) {
    let counts: Vec<usize> = counts.iter().map(|c| c.get(elem)).collect();
    let mut at = 0usize;
    let displs = gaps
        .iter()
        .enumerate()
        .map(|(i, gap)| match gap {
            Num::Small(gap) => {
                let displ = at.saturating_add(*gap);
                at = displ.saturating_add(counts.get(i).copied().unwrap_or(0));
                displ
            }
            wild => wild.get(elem),
        })
        .collect();
    (counts, displs)
}

/// The elements the blocks span, if it is small enough to allocate.
fn extent(counts: &[usize], displs: &[usize]) -> Option<usize> {
    counts
        .iter()
        .zip(displs)
        .try_fold(0usize, |end, (c, d)| Some(end.max(d.checked_add(*c)?)))
        .filter(|&end| end <= 4096)
}

/// Whether the layout is one a correct call must accept: one block per rank, inside
/// `extent`, not overlapping.
fn valid_blocks(n: usize, counts: &[usize], displs: &[usize]) -> bool {
    if counts.len() != n || displs.len() != n || extent(counts, displs).is_none() {
        return false;
    }
    let mut spans: Vec<(usize, usize)> = counts
        .iter()
        .zip(displs)
        .filter(|(c, _)| **c > 0)
        .map(|(c, d)| (*d, d + c))
        .collect();
    spans.sort();
    spans.windows(2).all(|w| w[0].1 <= w[1].0)
}

fn check_blocks<T: Value>(case: &BlocksCase) {
    let n = case.ranks;
    let elem = std::mem::size_of::<T>();
    let (counts, displs) = layout(&case.counts, &case.displs, elem);
    let odd = odd_rank_out(n, case.odd_rank);
    let fault = if odd.is_some() {
        case.fault
    } else {
        BlocksFault::None
    };
    let big = extent(&counts, &displs).unwrap_or(16);
    let outcomes = on_every_rank(n, |comm| {
        let rank = comm.rank();
        let is_odd = Some(rank) == odd;
        let (mut counts, mut displs) = (counts.clone(), displs.clone());
        match fault {
            BlocksFault::DisplOnOneRank { block, displ } if is_odd && block < displs.len() => {
                displs[block] = displ.get(elem);
            }
            BlocksFault::CountOnOneRank { block, count } if is_odd && block < counts.len() => {
                counts[block] = count.get(elem);
            }
            _ => {}
        }
        let big = if is_odd && matches!(fault, BlocksFault::ShortOnOneRank) {
            big.saturating_sub(1)
        } else {
            big
        };
        let own = counts.get(rank).copied().unwrap_or(0).min(64);
        let (send, mut recv) = if case.gather {
            (Guarded::<T>::input(rank, own), Guarded::zeros(big))
        } else {
            (Guarded::input(rank, big), Guarded::zeros(own))
        };
        let result = if case.gather {
            comm.all_gather_v(send.get(), recv.get_mut(), &counts, &displs)
        } else {
            comm.reduce_scatter_v(send.get(), recv.get_mut(), &counts, &displs, case.op)
        };
        Outcome {
            rank,
            result,
            send,
            recv,
        }
    });
    let changed = match fault {
        BlocksFault::None => false,
        BlocksFault::DisplOnOneRank { block, .. } if counts.get(block).is_none_or(|&c| c == 0) => {
            // Where an empty block lies may or may not count as a difference.
            all_ok(&outcomes);
            return;
        }
        BlocksFault::DisplOnOneRank { block, displ } => {
            displs.get(block).is_some_and(|&d| d != displ.get(elem))
        }
        BlocksFault::CountOnOneRank { block, count } => {
            counts.get(block).is_some_and(|&c| c != count.get(elem))
        }
        BlocksFault::ShortOnOneRank => big > 0,
    };
    let what = if case.gather {
        "AllGatherV"
    } else {
        "ReduceScatterV"
    };
    if !all_ok(&outcomes) {
        assert!(
            changed || !valid_blocks(n, &counts, &displs),
            "a valid {what} was refused: counts {counts:?} displs {displs:?}: {:?}",
            results(&outcomes)
        );
        return;
    }
    assert!(
        !changed,
        "a mismatched or short {what} ran: {:?}",
        case.fault
    );
    assert!(
        counts.len() == n && displs.len() == n && extent(&counts, &displs).is_some(),
        "{what} ran with blocks outside the buffer: counts {counts:?} displs {displs:?}"
    );
    for o in &outcomes {
        if case.gather {
            for s in 0..n {
                let block = &o.recv.get()[displs[s]..displs[s] + counts[s]];
                if valid_blocks(n, &counts, &displs) {
                    assert_data(&format!("AllGatherV block {s}"), block, |i| input(s, i));
                }
            }
        } else {
            let at = displs[o.rank];
            assert_data("ReduceScatterV", o.recv.get(), |i| {
                reduced(case.op, n, at + i)
            });
        }
    }
}

#[test]
fn api_vector_blocks() {
    fuzz("vector_blocks", blocks_case(), |case| {
        with_dtype!(case.dtype, check_blocks(&case))
    });
}
