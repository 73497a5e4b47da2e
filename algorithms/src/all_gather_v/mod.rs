//! AllGatherV executors: block `s` of every rank's output (`counts[s]` elements at
//! `displs[s]`, the same layout on every rank) becomes rank `s`'s input.
//!
//! The framework runs these operators in one iteration on the user's buffers in both
//! modes; staged, peers cannot reach those, so the executors move the blocks through the
//! CCL buffers themselves, in rounds of one piece of every block: the CCL buffer holds
//! one slot per rank ([`p2p_slot_bytes`] each) and round `t` moves bytes
//! `[t·slot, (t+1)·slot)` of every block. ReduceScatterV shares the round arithmetic.
//!
//! [`p2p_slot_bytes`]: crate::templates::p2p_slot_bytes

pub mod mesh;
pub mod relay_mesh;
pub mod ring;

use crate::templates::p2p_slot_bytes;
use oxccl_framework::{Error, KernelArgs, OpKind};

/// The rounds of a staged V operator: `slot` bytes per block and round.
#[derive(Copy, Clone, Debug)]
pub(crate) struct PieceRounds {
    pub slot: usize,
    pub rounds: usize,
}

impl PieceRounds {
    /// Rounds that move blocks of `counts` elements through slots of CCL buffers of
    /// `ccl_bytes` on `ranks` ranks.
    pub fn new(
        executor: &str,
        kind: OpKind,
        counts: &[usize],
        es: usize,
        ccl_bytes: usize,
    ) -> Result<Self, Error> {
        let slot = p2p_slot_bytes(counts.len(), ccl_bytes, es);
        if slot == 0 {
            return Err(Error::Unsupported {
                executor: executor.into(),
                op: kind,
                ranks: counts.len(),
                reason: format!(
                    "a CCL buffer of {ccl_bytes} bytes has no room for one element per rank"
                ),
            });
        }
        let largest = counts.iter().max().copied().unwrap_or(0) * es;
        Ok(PieceRounds {
            slot,
            rounds: largest.div_ceil(slot).max(1),
        })
    }

    /// `(byte offset within the block, byte length)` of round `t`'s piece of a block of
    /// `count` elements.
    pub fn piece(&self, count: usize, es: usize, t: usize) -> (usize, usize) {
        let bytes = count * es;
        let start = (t * self.slot).min(bytes);
        (start, self.slot.min(bytes - start))
    }
}

/// `(counts, displs)` of a blocks layout, or the error `executor` of `kind` reports.
pub(crate) fn block_layout<'a>(
    executor: &str,
    kind: OpKind,
    args: &'a KernelArgs,
) -> Result<(&'a [usize], &'a [usize]), Error> {
    args.op
        .layout()
        .and_then(|l| l.blocks())
        .ok_or_else(|| Error::BadProgram {
            executor: executor.into(),
            rank: 0,
            reason: format!("{kind} called without its per-rank counts and displacements"),
        })
}
