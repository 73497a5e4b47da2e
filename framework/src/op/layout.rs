//! Per-rank layouts of the vector operators: AllGatherV, ReduceScatterV, AlltoAllV and
//! grouped send/recv.
//!
//! Counts and offsets are in elements. Each rank's layout is what that rank passed: for
//! AllGatherV and ReduceScatterV every rank passes the same per-rank counts and
//! displacements (as in HCCL); for AlltoAllV and send/recv each rank passes only its own
//! sends and receives, and the `k`-th send of `a` to `b` matches the `k`-th receive of `b`
//! from `a` (NCCL's matching rule). No metadata is exchanged: executors of these operators
//! move data through slots of the sender's CCL buffer whose positions both sides compute
//! from their own counts.

use crate::error::ArgError;
use crate::limits::{MAX_BUFFER_BYTES, MAX_P2P_ITEMS};
use oxccl_platform::Rank;

/// One send or receive of a vector operator: `count` elements at element `offset` of the
/// rank's input (send) or output (receive), to or from `peer`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct P2pItem {
    pub peer: Rank,
    pub offset: usize,
    pub count: usize,
}

impl P2pItem {
    /// One past the last element; `usize::MAX` when `offset + count` overflows, which
    /// [`VLayout::validate`] refuses, so a validated item never saturates.
    pub fn end(&self) -> usize {
        self.offset.saturating_add(self.count)
    }
}

/// The layout of a vector operator on one rank.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum VLayout {
    /// AllGatherV / ReduceScatterV: block `r` of the buffer that holds one block per rank
    /// (AllGatherV's output, ReduceScatterV's input) has `counts[r]` elements starting at
    /// element `displs[r]`. The same on every rank.
    Blocks {
        counts: Vec<usize>,
        displs: Vec<usize>,
    },
    /// AlltoAllV / send-recv: this rank's sends (from its input) and receives (into its
    /// output), in call order.
    P2p {
        sends: Vec<P2pItem>,
        recvs: Vec<P2pItem>,
    },
}

impl VLayout {
    /// AlltoAllV from MPI-style per-peer counts and displacements.
    pub fn all_to_all_v(
        send_counts: &[usize],
        send_displs: &[usize],
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> VLayout {
        let items = |counts: &[usize], displs: &[usize]| {
            counts
                .iter()
                .zip(displs)
                .enumerate()
                .map(|(peer, (&count, &offset))| P2pItem {
                    peer,
                    offset,
                    count,
                })
                .collect()
        };
        VLayout::P2p {
            sends: items(send_counts, send_displs),
            recvs: items(recv_counts, recv_displs),
        }
    }

    /// Blocks packed one after the other (displacements are the prefix sums of `counts`).
    pub fn packed_blocks(counts: &[usize]) -> VLayout {
        let displs = counts
            .iter()
            .scan(0usize, |at, &c| {
                let d = *at;
                *at = at.saturating_add(c);
                Some(d)
            })
            .collect();
        VLayout::Blocks {
            counts: counts.to_vec(),
            displs,
        }
    }

    /// `(counts, displs)` of a [`VLayout::Blocks`] layout.
    pub fn blocks(&self) -> Option<(&[usize], &[usize])> {
        match self {
            VLayout::Blocks { counts, displs } => Some((counts, displs)),
            VLayout::P2p { .. } => None,
        }
    }

    /// `(sends, recvs)` of a [`VLayout::P2p`] layout.
    pub fn p2p(&self) -> Option<(&[P2pItem], &[P2pItem])> {
        match self {
            VLayout::P2p { sends, recvs } => Some((sends, recvs)),
            VLayout::Blocks { .. } => None,
        }
    }

    /// Elements the blocked buffer must hold: the end of its furthest block (saturating:
    /// [`VLayout::validate`] refuses a block whose end overflows).
    pub fn blocks_extent(&self) -> usize {
        match self {
            VLayout::Blocks { counts, displs } => counts
                .iter()
                .zip(displs)
                .map(|(c, d)| c.saturating_add(*d))
                .max()
                .unwrap_or(0),
            VLayout::P2p { .. } => 0,
        }
    }

    /// Check the layout for a communicator of `ranks` ranks with elements of `elem_size`
    /// bytes: one count and displacement per rank, every block or item ending within
    /// [`MAX_BUFFER_BYTES`] (checked arithmetic: a displacement plus a count that wraps is
    /// refused, never wrapped), at most [`MAX_P2P_ITEMS`] items, peers in range, no two
    /// receives (or gathered blocks) writing the same element, and one item per peer in
    /// rank order for AlltoAllV.
    pub fn validate(
        &self,
        ranks: usize,
        elem_size: usize,
        all_to_all: bool,
    ) -> Result<(), ArgError> {
        let bad = |reason: String| Err(ArgError::BadLayout { reason });
        match self {
            VLayout::Blocks { counts, displs } => {
                if counts.len() != ranks || displs.len() != ranks {
                    return bad(format!(
                        "{} counts and {} displacements for {ranks} ranks; pass one of each per rank",
                        counts.len(),
                        displs.len()
                    ));
                }
                for (r, (&count, &offset)) in counts.iter().zip(displs).enumerate() {
                    checked_range("block", r, offset, count, elem_size)?;
                }
                // Each end was checked above: no sum wraps.
                no_overlap(
                    "block",
                    counts.iter().zip(displs).map(|(&c, &o)| (o, o + c)),
                )
            }
            VLayout::P2p { sends, recvs } => {
                let items = sends.len().saturating_add(recvs.len());
                if items > MAX_P2P_ITEMS {
                    return bad(format!(
                        "{items} sends and receives in one call; at most {MAX_P2P_ITEMS} are allowed, split the call"
                    ));
                }
                for (what, list) in [("send", sends), ("receive", recvs)] {
                    for (i, item) in list.iter().enumerate() {
                        checked_range(what, i, item.offset, item.count, elem_size)?;
                    }
                }
                if let Some(item) = sends.iter().chain(recvs).find(|i| i.peer >= ranks) {
                    return bad(format!(
                        "peer {} is not a rank of this communicator (ranks 0..{ranks})",
                        item.peer
                    ));
                }
                if all_to_all {
                    for (what, items) in [("send", sends), ("receive", recvs)] {
                        if !items.iter().map(|i| i.peer).eq(0..ranks) {
                            let peers: Vec<Rank> = items.iter().map(|i| i.peer).collect();
                            return bad(format!(
                                "all-to-all-v needs one {what} count per rank in rank order, got peers {peers:?}"
                            ));
                        }
                    }
                }
                no_overlap("receive", recvs.iter().map(|i| (i.offset, i.end())))
            }
        }
    }
}

/// `[offset, offset + count)` of item `index`, refused when its end in bytes overflows or
/// passes [`MAX_BUFFER_BYTES`].
fn checked_range(
    what: &str,
    index: usize,
    offset: usize,
    count: usize,
    elem_size: usize,
) -> Result<(usize, usize), ArgError> {
    let end = offset.checked_add(count);
    match end.and_then(|e| e.checked_mul(elem_size)) {
        Some(bytes) if bytes <= MAX_BUFFER_BYTES => Ok((offset, offset + count)),
        _ => Err(ArgError::BadLayout {
            reason: format!(
                "{what} {index} (displacement {offset}, count {count}) ends beyond {MAX_BUFFER_BYTES} bytes \
                 (oxccl::framework::limits::MAX_BUFFER_BYTES); displacements and counts must \
                 address the buffer passed"
            ),
        }),
    }
}

/// An error when two non-empty ranges of `ranges` (`(start, end)`, by index) overlap.
///
/// Every vector call validates its layout, so the usual one costs no allocation: ranges
/// that come in increasing order, each non-empty one starting at or after the end of the
/// one before (packed displacements, or gaps), are proven apart in one pass. Others are
/// sorted and compared neighbour by neighbour, which also finds the pair to report.
fn no_overlap(
    what: &str,
    ranges: impl Iterator<Item = (usize, usize)> + Clone,
) -> Result<(), ArgError> {
    let in_order = ranges
        .clone()
        .filter(|r| r.1 > r.0)
        .try_fold(0, |end, (start, next_end)| {
            (start >= end).then_some(next_end)
        })
        .is_some();
    if in_order {
        return Ok(());
    }
    let mut sorted: Vec<(usize, usize, usize)> = ranges
        .enumerate()
        .filter(|(_, r)| r.1 > r.0)
        .map(|(i, r)| (r.0, r.1, i))
        .collect();
    sorted.sort_unstable();
    for w in sorted.windows(2) {
        if w[1].0 < w[0].1 {
            return Err(ArgError::BadLayout {
                reason: format!(
                    "{what} {} [{}, {}) overlaps {what} {} [{}, {}); results would race",
                    w[0].2, w[0].0, w[0].1, w[1].2, w[1].0, w[1].1
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_blocks_have_prefix_sum_displacements() {
        let l = VLayout::packed_blocks(&[3, 0, 2]);
        assert_eq!(l.blocks(), Some((&[3, 0, 2][..], &[0, 3, 3][..])));
        assert_eq!(l.blocks_extent(), 5);
        assert!(l.validate(3, 4, false).is_ok());
        assert!(l.validate(4, 4, false).is_err());
    }

    #[test]
    fn overlapping_receives_are_refused() {
        let l = VLayout::all_to_all_v(&[1, 1], &[0, 1], &[2, 2], &[0, 1]);
        let err = l.validate(2, 1, true).unwrap_err().to_string();
        assert!(err.contains("overlaps"), "{err}");
        let ok = VLayout::all_to_all_v(&[1, 1], &[0, 1], &[2, 2], &[0, 2]);
        assert!(ok.validate(2, 1, true).is_ok());
        assert!(ok.validate(3, 1, true).is_err());
    }

    #[test]
    fn blocks_in_any_order_are_checked_for_overlap() {
        let blocks = |counts: &[usize], displs: &[usize]| VLayout::Blocks {
            counts: counts.to_vec(),
            displs: displs.to_vec(),
        };
        let overlap = |l: VLayout| l.validate(3, 4, false).unwrap_err().to_string();
        // In order with a gap, in reverse order, an empty block inside another: apart.
        assert!(blocks(&[2, 3, 1], &[0, 4, 7]).validate(3, 4, false).is_ok());
        assert!(blocks(&[2, 3, 1], &[9, 4, 0]).validate(3, 4, false).is_ok());
        assert!(blocks(&[4, 0, 1], &[0, 2, 4]).validate(3, 4, false).is_ok());
        // Block 0 overlaps block 2, out of order, with block 1 between them in memory.
        let err = overlap(blocks(&[3, 1, 2], &[4, 0, 6]));
        assert!(
            err.contains("block 0 [4, 7) overlaps block 2 [6, 8)"),
            "{err}"
        );
        // In increasing order, block 1 starting inside block 0.
        let err = overlap(blocks(&[3, 3, 1], &[0, 2, 9]));
        assert!(
            err.contains("block 0 [0, 3) overlaps block 1 [2, 5)"),
            "{err}"
        );
    }

    #[test]
    fn all_to_all_v_needs_one_item_per_rank_in_rank_order() {
        let item = |peer| P2pItem {
            peer,
            offset: peer,
            count: 1,
        };
        let layout = |sends: &[Rank], recvs: &[Rank]| VLayout::P2p {
            sends: sends.iter().map(|&p| item(p)).collect(),
            recvs: recvs.iter().map(|&p| item(p)).collect(),
        };
        assert!(layout(&[0, 1, 2], &[0, 1, 2]).validate(3, 4, true).is_ok());
        for (sends, recvs, what) in [
            (
                &[0, 2, 1][..],
                &[0, 1, 2][..],
                "one send count per rank in rank order, got peers [0, 2, 1]",
            ),
            (
                &[0, 1, 2],
                &[0, 1],
                "one receive count per rank in rank order, got peers [0, 1]",
            ),
        ] {
            let err = layout(sends, recvs)
                .validate(3, 4, true)
                .unwrap_err()
                .to_string();
            assert!(err.contains(what), "{err}");
        }
        // send/recv takes the items in any order.
        assert!(layout(&[2, 0], &[1]).validate(3, 4, false).is_ok());
    }

    #[test]
    fn wrapping_displacements_and_counts_are_refused() {
        let wraps = VLayout::all_to_all_v(&[1, 1], &[0, usize::MAX], &[1, 1], &[0, 1]);
        let err = wraps.validate(2, 4, true).unwrap_err().to_string();
        assert!(
            err.contains("send 1") && err.contains("MAX_BUFFER_BYTES"),
            "{err}"
        );
        let blocks = VLayout::Blocks {
            counts: vec![2, usize::MAX / 2],
            displs: vec![usize::MAX / 2 + 3, 0],
        };
        assert!(blocks.validate(2, 2, false).is_err());
        // Fits a usize in elements, not in bytes.
        let huge = VLayout::packed_blocks(&[usize::MAX / 4, 1]);
        assert!(huge.validate(2, 8, false).is_err());
        assert_eq!(
            VLayout::packed_blocks(&[usize::MAX, 5]).blocks_extent(),
            usize::MAX
        );
    }
}
