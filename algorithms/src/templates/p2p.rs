//! Matched point-to-point transfers: the sends and receives of AlltoAllV and send/recv.
//!
//! Each rank knows only its own items. The `k`-th send of `a` to `b` matches the `k`-th
//! receive of `b` from `a` and has the same count, so both ends see the same byte stream
//! per ordered pair: the concatenation of the pair's non-empty items, in call order. Empty
//! items are dropped on both ends; a pair whose stream is empty exchanges nothing, not even
//! a signal, and needs no link. Items to the rank itself are local copies.
//!
//! The transfers run in *phases* (an executor's choice: all peers at once, or one pair of
//! peers per step as in a pairwise exchange); in each phase a rank sends to some peers and
//! receives from others, and the peers agree on the phase of every pair.
//!
//! Neither end knows the other's offsets (no metadata is exchanged), so even where peers
//! may reach user buffers (zero-copy) the data goes through the sender's CclIn, which holds one slot of [`p2p_slot_bytes`] per destination rank at
//! `destination * slot` (both ends compute it without exchanging anything). The pair's
//! stream moves one slot-full per round; in each round of a phase a rank
//!
//! 1. copies the next piece for every destination into its slot and posts the
//!    destination's DataSignal ("piece ready");
//! 2. for every source: waits for its DataSignal, copies the piece out of the source's slot
//!    into its output, and posts the source's Ack ("slot free");
//! 3. waits for the Ack of every destination it wrote in step 1.
//!
//! Everything a round waits for is posted earlier in the same round by a peer that has
//! finished the previous round, so whatever the order of the items on each rank, nobody
//! deadlocks; and each notify is posted once per round, after the wait of the previous
//! round consumed it.

use oxccl_framework::op::P2pItem;
use oxccl_framework::platform::{Buf, Rank};
use oxccl_framework::{BufRange, Error, KernelArgs, KernelCtx};

oxccl_framework::register_template! {
    name: "p2p",
    description: "matched sends and receives, in phases; staged through per-destination CclIn slots",
}

/// One phase of a point-to-point exchange, seen from one rank.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct P2pPhase {
    /// Peers this rank sends to in the phase.
    pub send_to: Vec<Rank>,
    /// Peers this rank receives from in the phase.
    pub recv_from: Vec<Rank>,
}

/// Parameters of [`p2p_exchange`].
#[derive(Clone, Debug)]
pub struct P2pParams<'a> {
    /// This rank's sends (offsets into `input`), in call order.
    pub sends: &'a [P2pItem],
    /// This rank's receives (offsets into `output`), in call order.
    pub recvs: &'a [P2pItem],
    /// The phases, in order. A pair with data must be in exactly one phase, on both ends;
    /// pairs listed without data are skipped.
    pub phases: &'a [P2pPhase],
    /// The user's input and output.
    pub input: BufRange,
    pub output: BufRange,
    /// Bytes per element.
    pub elem_size: usize,
    /// Bytes of each CCL buffer.
    pub ccl_bytes: usize,
    /// The link channel of the handshakes.
    pub channel: usize,
}

impl<'a> P2pParams<'a> {
    /// The pairs of `sends` and `recvs` in `phases`, between the user's buffers of `args`,
    /// on link channel 0.
    pub fn on_user_buffers(
        args: &KernelArgs,
        sends: &'a [P2pItem],
        recvs: &'a [P2pItem],
        phases: &'a [P2pPhase],
    ) -> Self {
        P2pParams {
            sends,
            recvs,
            phases,
            input: args.input,
            output: args.output,
            elem_size: args.op.dtype.size(),
            ccl_bytes: args.ccl_bytes,
            channel: 0,
        }
    }
}

/// The peers `rank` exchanges data with (items with elements, other than itself), sorted.
pub fn p2p_peers(rank: Rank, sends: &[P2pItem], recvs: &[P2pItem]) -> Vec<Rank> {
    let mut peers: Vec<Rank> = sends
        .iter()
        .chain(recvs)
        .filter(|i| i.count > 0 && i.peer != rank)
        .map(|i| i.peer)
        .collect();
    peers.sort_unstable();
    peers.dedup();
    peers
}

/// Bytes of each destination's CclIn slot: the CCL buffer over the rank count, aligned
/// down to 128 bytes (to whole elements when smaller).
pub fn p2p_slot_bytes(ranks: usize, ccl_bytes: usize, elem_size: usize) -> usize {
    let per_rank = ccl_bytes / ranks.max(1);
    match per_rank / 128 * 128 {
        0 => per_rank / elem_size * elem_size,
        aligned => aligned,
    }
}

/// The non-empty items with `peer`, in call order.
pub(crate) fn items_with(items: &[P2pItem], peer: Rank) -> Vec<P2pItem> {
    items
        .iter()
        .filter(|i| i.peer == peer && i.count > 0)
        .copied()
        .collect()
}

/// Bytes of the stream of `items`.
pub(crate) fn stream_bytes(items: &[P2pItem], es: usize) -> usize {
    // Validated layouts keep every item within MAX_BUFFER_BYTES; saturating keeps a sum
    // of many items from wrapping.
    items
        .iter()
        .map(|i| i.count.saturating_mul(es))
        .fold(0, usize::saturating_add)
}

/// The parts of bytes `[lo, hi)` of the stream of `items`: `(byte offset in the rank's
/// buffer, byte offset from lo, length)`.
pub(crate) fn stream_parts(
    items: &[P2pItem],
    es: usize,
    lo: usize,
    hi: usize,
) -> Vec<(usize, usize, usize)> {
    let mut parts = Vec::new();
    let mut at = 0;
    for item in items {
        let (start, end) = (at, at + item.count * es);
        at = end;
        let (a, b) = (start.max(lo), end.min(hi));
        if a < b {
            parts.push((item.offset * es + a - start, a - lo, b - a));
        }
    }
    parts
}

/// Append the whole exchange of `p` on the main stream.
pub fn p2p_exchange(ctx: &mut KernelCtx<'_>, p: &P2pParams<'_>) -> Result<(), Error> {
    copy_to_self(ctx, p);
    through_slots(ctx, p)
}

/// The items a rank sends to itself, copied locally.
pub(crate) fn copy_to_self(ctx: &mut KernelCtx<'_>, p: &P2pParams<'_>) {
    let me = ctx.rank;
    let es = p.elem_size;
    let sends = items_with(p.sends, me);
    let recvs = items_with(p.recvs, me);
    for (s, r) in sends.iter().zip(&recvs) {
        let len = s.count.min(r.count) * es;
        let src = p.input.at(me, s.offset * es, len);
        let dst = p.output.at(me, r.offset * es, len);
        ctx.main().copy(src, dst);
    }
}

/// One peer's part of a phase: the peer, the items that name it, and their bytes.
pub(crate) type PeerPart = (Rank, Vec<P2pItem>, usize);

/// Bytes of one pair's slot in a CCL buffer; an error naming `template` when the buffer
/// has no room for one element per rank.
pub(crate) fn checked_slot(
    ctx: &KernelCtx<'_>,
    p: &P2pParams<'_>,
    template: &str,
) -> Result<usize, Error> {
    let slot = p2p_slot_bytes(ctx.ranks, p.ccl_bytes, p.elem_size);
    if slot == 0 {
        return Err(Error::BadProgram {
            executor: template.into(),
            rank: ctx.rank,
            reason: format!(
                "a CCL buffer of {} bytes has no room for one element per rank",
                p.ccl_bytes
            ),
        });
    }
    Ok(slot)
}

/// The peers this rank sends to and receives from in `phase` with something to move,
/// and the slot-fulls of the largest: (outgoing, incoming, rounds).
pub(crate) fn phase_parts(
    me: Rank,
    phase: &P2pPhase,
    p: &P2pParams<'_>,
    slot: usize,
) -> (Vec<PeerPart>, Vec<PeerPart>, usize) {
    let es = p.elem_size;
    let parts = |peers: &[Rank], items: &[P2pItem]| -> Vec<PeerPart> {
        peers
            .iter()
            .filter(|&&q| q != me)
            .map(|&q| {
                let its = items_with(items, q);
                let bytes = stream_bytes(&its, es);
                (q, its, bytes)
            })
            .filter(|(_, _, bytes)| *bytes > 0)
            .collect()
    };
    let outgoing = parts(&phase.send_to, p.sends);
    let incoming = parts(&phase.recv_from, p.recvs);
    let rounds = outgoing
        .iter()
        .chain(&incoming)
        .map(|(_, _, bytes)| bytes.div_ceil(slot))
        .max()
        .unwrap_or(0);
    (outgoing, incoming, rounds)
}

/// The parts that still have bytes from offset `lo` on.
pub(crate) fn active_from(list: &[PeerPart], lo: usize) -> Vec<PeerPart> {
    list.iter()
        .filter(|(_, _, bytes)| *bytes > lo)
        .cloned()
        .collect()
}

/// The CclIn range the slots live in.
pub(crate) fn slots_range(p: &P2pParams<'_>) -> BufRange {
    BufRange {
        buf: Buf::CclIn,
        offset: 0,
        len: p.ccl_bytes,
    }
}

/// Rounds of one slot-full per pair, per phase.
fn through_slots(ctx: &mut KernelCtx<'_>, p: &P2pParams<'_>) -> Result<(), Error> {
    let (me, es) = (ctx.rank, p.elem_size);
    let slot = checked_slot(ctx, p, "p2p template")?;
    let ccl_in = slots_range(p);
    for phase in p.phases {
        let (outgoing, incoming, rounds) = phase_parts(me, phase, p, slot);
        ctx.reserve_rounds(rounds, 3 * (outgoing.len() + incoming.len()))?;
        for j in 0..rounds {
            let (lo, hi) = (j * slot, (j + 1) * slot);
            let (out_now, in_now) = (active_from(&outgoing, lo), active_from(&incoming, lo));
            for (to, items, _) in &out_now {
                for (at, rel, len) in stream_parts(items, es, lo, hi) {
                    let src = p.input.at(me, at, len);
                    let dst = ccl_in.at(me, to * slot + rel, len);
                    ctx.main().copy(src, dst);
                }
                ctx.link(*to, p.channel)?.tx_data_signal(ctx.main());
            }
            for (from, items, _) in &in_now {
                let link = ctx.link(*from, p.channel)?;
                link.rx_data_signal(ctx.main());
                for (at, rel, len) in stream_parts(items, es, lo, hi) {
                    let src = ccl_in.at(*from, me * slot + rel, len);
                    let dst = p.output.at(me, at, len);
                    ctx.main().copy(src, dst);
                }
                link.tx_ack(ctx.main());
            }
            for (to, _, _) in &out_now {
                ctx.link(*to, p.channel)?.rx_ack(ctx.main());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(peer: Rank, offset: usize, count: usize) -> P2pItem {
        P2pItem {
            peer,
            offset,
            count,
        }
    }

    #[test]
    fn peers_skip_self_and_empty_items() {
        let sends = [item(2, 0, 3), item(1, 5, 0), item(0, 9, 4)];
        let recvs = [item(3, 0, 1), item(2, 4, 2)];
        assert_eq!(p2p_peers(0, &sends, &recvs), vec![2, 3]);
    }

    #[test]
    fn stream_parts_cut_items_at_round_boundaries() {
        // Two items of 3 and 4 elements (2 bytes each) at element offsets 10 and 20.
        let items = [item(1, 10, 3), item(1, 20, 4)];
        assert_eq!(stream_bytes(&items, 2), 14);
        assert_eq!(stream_parts(&items, 2, 0, 4), vec![(20, 0, 4)]);
        assert_eq!(stream_parts(&items, 2, 4, 10), vec![(24, 0, 2), (40, 2, 4)]);
        assert_eq!(stream_parts(&items, 2, 10, 16), vec![(44, 0, 4)]);
    }

    #[test]
    fn slots_are_aligned_and_fit_the_buffer() {
        assert_eq!(p2p_slot_bytes(3, 4096, 4), 1280);
        assert_eq!(p2p_slot_bytes(8, 100, 4), 12);
        assert_eq!(p2p_slot_bytes(8, 4, 4), 0);
    }
}
