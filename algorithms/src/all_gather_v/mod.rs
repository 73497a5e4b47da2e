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
pub mod put_ring;
pub mod relay_mesh;
pub mod ring;

use crate::templates::p2p_slot_bytes;
use oxccl_framework::platform::Buf;
use oxccl_framework::{BufRange, Error, KernelArgs, KernelCtx, Mode, OpKind};

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

/// The body every AllGatherV executor shares; only the gather pattern differs.
///
/// The rank's own block goes to its place in the output (unless in place). Zero-copy,
/// `gather(ctx, buffer, chunks)` then runs once on the users' outputs, `chunks[s]` being
/// block `s` at its displacement. Staged, it runs in [`PieceRounds`] through CclOut: the
/// round's piece of the own input goes to the own slot, `gather` collects every slot, the
/// other slots go out to their blocks, and `after_round(ctx, last)` ends the round (a
/// "done reading your slots" handshake where the pattern needs one).
pub(crate) fn gather_v_blocks(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    executor: &str,
    mut gather: impl FnMut(&mut KernelCtx<'_>, BufRange, &[(usize, usize)]) -> Result<(), Error>,
    mut after_round: impl FnMut(&mut KernelCtx<'_>, bool) -> Result<(), Error>,
) -> Result<(), Error> {
    let kind = OpKind::AllGatherV;
    let (counts, displs) = block_layout(executor, kind, args)?;
    let (me, n, es) = (ctx.rank, ctx.ranks, args.op.dtype.size());
    if !args.aliased {
        let len = counts[me] * es;
        let (src, dst) = (
            args.input.at(me, 0, len),
            args.output.at(me, displs[me] * es, len),
        );
        ctx.main().copy(src, dst);
    }
    if n == 1 {
        return Ok(());
    }
    if args.mode == Mode::Direct {
        let chunks: Vec<(usize, usize)> =
            (0..n).map(|s| (displs[s] * es, counts[s] * es)).collect();
        return gather(ctx, args.output, &chunks);
    }
    let plan = PieceRounds::new(executor, kind, counts, es, args.ccl_bytes)?;
    ctx.reserve_rounds(plan.rounds, 4 * counts.len())?;
    let slots = BufRange {
        buf: Buf::CclOut,
        offset: 0,
        len: n * plan.slot,
    };
    for t in 0..plan.rounds {
        let pieces: Vec<(usize, usize)> = counts.iter().map(|&c| plan.piece(c, es, t)).collect();
        let chunks: Vec<(usize, usize)> = (0..n).map(|s| (s * plan.slot, pieces[s].1)).collect();
        let (at, len) = pieces[me];
        let (src, dst) = (args.input.at(me, at, len), slots.at(me, chunks[me].0, len));
        ctx.main().copy(src, dst);
        gather(ctx, slots, &chunks)?;
        for s in (0..n).filter(|&s| s != me) {
            let (at, len) = pieces[s];
            let src = slots.at(me, chunks[s].0, len);
            let dst = args.output.at(me, displs[s] * es + at, len);
            ctx.main().copy(src, dst);
        }
        after_round(ctx, t + 1 == plan.rounds)?;
    }
    Ok(())
}
