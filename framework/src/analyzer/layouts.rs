//! Layouts of the vector operators for the conformance matrix (and for tests and `perf`):
//! uneven per-rank counts derived from one base count, with gaps between blocks and
//! send displacements in an order different from the peer order, so that an executor that
//! assumes equal, packed or ordered blocks fails.

use crate::op::{OpKind, OpParam, P2pItem, VLayout};
use oxccl_platform::{DataType, Rank, ReduceOp};

/// Rank `r`'s share for base count `count`: `count/2`, `count`, `3count/2` by `r % 3`, so
/// some ranks get 0 of a base count of 1.
pub fn uneven(count: usize, r: usize) -> usize {
    count * (r % 3 + 1) / 2
}

/// Elements rank `from` sends to rank `to` in the AlltoAllV layouts.
pub fn pair_count(count: usize, from: Rank, to: Rank) -> usize {
    uneven(count, from + 2 * to)
}

/// Every rank's parameters of `kind` on `ranks` ranks for base count `count`: the same
/// parameters for every rank except AlltoAllV and send/recv, whose layouts are per rank.
pub fn vector_ops(
    kind: OpKind,
    count: usize,
    ranks: usize,
    dtype: DataType,
    op: ReduceOp,
) -> Vec<OpParam> {
    match kind {
        OpKind::AllGatherV | OpKind::ReduceScatterV => {
            let counts: Vec<usize> = (0..ranks).map(|r| uneven(count, r)).collect();
            // A gap of `r` elements before block `r`.
            let displs = (0..ranks)
                .map(|r| counts[..r].iter().sum::<usize>() + r)
                .collect();
            let param = OpParam::vector(kind, VLayout::Blocks { counts, displs }, dtype, op);
            vec![param; ranks]
        }
        OpKind::AlltoAllV => (0..ranks)
            .map(|r| OpParam::vector(kind, all_to_all_v(count, r, ranks), dtype, op))
            .collect(),
        OpKind::SendRecv => (0..ranks)
            .map(|r| OpParam::vector(kind, send_recv(count, r, ranks), dtype, op))
            .collect(),
        _ => {
            let param = OpParam {
                root: kind.has_root().then_some(ranks / 2),
                ..OpParam::new(kind, count, dtype, op)
            };
            vec![param; ranks]
        }
    }
}

/// AlltoAllV of rank `r`: sends packed in descending peer order, receives packed in
/// ascending peer order with a gap of one element after each.
fn all_to_all_v(count: usize, r: Rank, ranks: usize) -> VLayout {
    let send_counts: Vec<usize> = (0..ranks).map(|p| pair_count(count, r, p)).collect();
    let recv_counts: Vec<usize> = (0..ranks).map(|p| pair_count(count, p, r)).collect();
    let mut send_displs = vec![0; ranks];
    let mut at = 0;
    for p in (0..ranks).rev() {
        send_displs[p] = at;
        at += send_counts[p];
    }
    let recv_displs = (0..ranks)
        .map(|p| recv_counts[..p].iter().sum::<usize>() + p)
        .collect::<Vec<_>>();
    VLayout::all_to_all_v(&send_counts, &send_displs, &recv_counts, &recv_displs)
}

/// Grouped send/recv of rank `r`: `count` elements to `r + 1` and `count / 2 + 1` to
/// `r + 2` (cyclically; a self-send on one or two ranks), receives listed in the opposite
/// order of the matching sends (except on one rank, where both are self-sends).
fn send_recv(count: usize, r: Rank, ranks: usize) -> VLayout {
    let (near, far) = (count, count / 2 + 1);
    let sends = vec![
        P2pItem {
            peer: (r + 1) % ranks,
            offset: 0,
            count: near,
        },
        P2pItem {
            peer: (r + 2) % ranks,
            offset: near,
            count: far,
        },
    ];
    let far_recv = P2pItem {
        peer: (r + 2 * ranks - 2) % ranks,
        offset: 0,
        count: far,
    };
    let near_recv = P2pItem {
        peer: (r + ranks - 1) % ranks,
        offset: far + 1,
        count: near,
    };
    // On one rank both sends go to itself and must be received in the same order.
    let recvs = match ranks {
        1 => vec![near_recv, far_recv],
        _ => vec![far_recv, near_recv],
    };
    VLayout::P2p { sends, recvs }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_generated_layout_is_valid_and_sends_match_receives() {
        for kind in [
            OpKind::AllGatherV,
            OpKind::ReduceScatterV,
            OpKind::AlltoAllV,
            OpKind::SendRecv,
        ] {
            for ranks in 1..=5 {
                for count in [0, 1, 7] {
                    let ops = vector_ops(kind, count, ranks, DataType::I32, ReduceOp::Sum);
                    for (r, op) in ops.iter().enumerate() {
                        let (i, o) = op.buffer_bytes(r, ranks);
                        op.validate(r, ranks, Some(i), o)
                            .unwrap_or_else(|e| panic!("{kind} {ranks} {count} rank {r}: {e}"));
                    }
                    let expected =
                        (0..ranks).flat_map(|r| crate::analyzer::expect::expected_output(&ops, r));
                    assert!(
                        expected.into_iter().all(|e| !matches!(
                            e.expected,
                            crate::analyzer::expect::Expected::Unmatched { .. }
                        )),
                        "{kind} {ranks} {count}"
                    );
                }
            }
        }
    }
}
