//! Store-and-forward through relays whose part is count-blind: the exchange of every pair
//! of ranks without a healthy link, for AlltoAll, AlltoAllV and send/recv.
//!
//! A pair `(s, r)` without a link has relays, their common healthy neighbours
//! ([`route`]). The bytes `s` sends to `r` are cut into one piece per relay
//! ([`relay_pieces`]); `s` **writes** its piece into a slot of relay `k`'s Scratch, and `r`
//! **reads** it from there. The relay moves no byte and needs no size: only the two ends,
//! which both know the pair's byte count, touch the data. That is what makes the pattern
//! work for the point-to-point operators, where a rank knows its own sends and receives
//! and nothing of the other ranks' (no metadata is exchanged, and the task IR has no
//! data-dependent control flow, so a relay could not act on a size it learned at run
//! time anyway).
//!
//! ## Slots
//!
//! Relay `k`'s Scratch holds, for each of its duties ([`relay_duties`], pair `(a, b)`,
//! `a < b`), two slots of [`relay_slot_bytes`]: `a -> b` then `b -> a`. Slot positions and
//! sizes follow from the topology and the CCL buffer size alone, so all ranks compute the
//! same ones and request the same Scratch size (the host device resolves a remote Scratch
//! through the reader's own allocation, so sizes must agree). A pair moves at most one
//! slot per relay per call: [`relay_capacity`] bytes. Larger transfers are refused by
//! [`check_relay_capacity`] in the executors' `resources()`.
//!
//! ## Rounds
//!
//! Every rank runs up to four rounds with its *relay peers* (the relays of its unlinked pairs
//! and the ends of the pairs it relays for; the relation is symmetric), each "post to all,
//! then wait for all", alternating the signal kind on one link channel:
//!
//! | round | signal | meaning of the post |
//! |---|---|---|
//! | 1 | DataSignal | my pieces are in your slots |
//! | 2 | Ack | every piece in my slots is in place (I heard round 1 from all my peers) |
//! | — | | read the pieces addressed to me out of my relays' slots |
//! | 3 | DataSignal | I am done reading your slots |
//! | 4 | Ack | nobody reads my slots any more (I heard round 3 from all my peers) |
//!
//! Rounds 3 and 4 guard the slots of a later loop iteration of the same operation
//! ([`RelayParams::slots_reused`]); a single-iteration operation leaves them out and relies
//! on the device's epoch fence to order the next operation's writes after this one's
//! reads. That holds zero-copy, where the exit fence returns relay `k`'s call only after
//! the reader `r` (a granted peer of `k`) finished it, and the writer `s` starts its next
//! call only after `k` finished this one (entry fence). **Staged it does not hold**: `k`'s
//! call ends after round 2, possibly before `r` read its pieces, and `r` is no peer of `s`
//! (the pair is unlinked), so `s` could write `k`'s slot again while `r` still reads it:
//! staged callers therefore set [`RelayParams::slots_reused`] and pay rounds 3 and 4.
//!
//! A rank may be a relay and an end on the same link (it relays for a pair of its peer,
//! and the peer relays for one of its own): the rounds are symmetric, so both roles share
//! each post and no notify is posted twice before its wait. Every pair of ranks without a
//! link runs the rounds in every call, with or without data between them, because the
//! relay cannot know whether there is any: **every relay and every end of an unlinked
//! pair must take part in the call.** The framework skips a rank whose own call has no
//! elements, so a point-to-point call in which such a rank has nothing of its own cannot
//! be relayed; its peers then fail with a wait timeout (`OXCCL_EXEC_TIMEOUT`) that names
//! the notify, never a hang.

use crate::templates::{relay_duties, relay_pieces, route, Route};
use oxccl_framework::platform::{Buf, Rank, Slice};
use oxccl_framework::{Error, KernelCtx, OpKind, Topology};

oxccl_framework::register_template! {
    name: "relay_slots",
    description: "unlinked pairs through their common neighbours: the ends write and read slots of the relays' Scratch, the relays only signal",
}

/// Ranks that `rank` cannot reach directly, ascending (the ends of its relayed pairs).
pub fn unlinked_peers(topology: &Topology, rank: Rank) -> Vec<Rank> {
    (0..topology.ranks())
        .filter(|&q| matches!(route(topology, rank, q, None), Some(Route::Relayed(_))))
        .collect()
}

/// The relay peers of `rank`: the relays of its unlinked pairs and the ends of the pairs it
/// relays for, ascending.
pub fn relay_peers(topology: &Topology, rank: Rank) -> Vec<Rank> {
    let mut peers: Vec<Rank> = unlinked_peers(topology, rank)
        .into_iter()
        .filter_map(|q| match route(topology, rank, q, None) {
            Some(Route::Relayed(relays)) => Some(relays),
            _ => None,
        })
        .flatten()
        .chain(
            relay_duties(topology, rank, None)
                .into_iter()
                .flat_map(|(a, b, _, _)| [a, b]),
        )
        .collect();
    peers.sort_unstable();
    peers.dedup();
    peers
}

/// Bytes of every relay slot: the CCL buffer over the slots of the busiest relay, aligned
/// down to 128 bytes (to whole elements when smaller); 0 when nothing is relayed.
pub fn relay_slot_bytes(topology: &Topology, ccl_bytes: usize, elem_size: usize) -> usize {
    let duties = (0..topology.ranks())
        .map(|k| relay_duties(topology, k, None).len())
        .max()
        .unwrap_or(0);
    if duties == 0 {
        return 0;
    }
    let per_slot = ccl_bytes / (2 * duties);
    match per_slot / 128 * 128 {
        0 => per_slot / elem_size * elem_size,
        aligned => aligned,
    }
}

/// Scratch bytes every rank requests: one slot pair per duty of the busiest relay.
pub fn relay_scratch_bytes(topology: &Topology, ccl_bytes: usize, elem_size: usize) -> usize {
    let duties = (0..topology.ranks())
        .map(|k| relay_duties(topology, k, None).len())
        .max()
        .unwrap_or(0);
    2 * duties * relay_slot_bytes(topology, ccl_bytes, elem_size)
}

/// The most bytes `from` can send to `to` in one call (`None`: they are linked).
pub fn relay_capacity(
    topology: &Topology,
    from: Rank,
    to: Rank,
    slot_bytes: usize,
    elem_size: usize,
) -> Option<usize> {
    match route(topology, from, to, None) {
        Some(Route::Relayed(relays)) => Some(relays.len() * (slot_bytes / elem_size) * elem_size),
        _ => None,
    }
}

/// The error of `executor` when `bytes` from `from` to `to` exceed what their relays carry
/// in one call.
pub fn check_relay_capacity(
    topology: &Topology,
    (executor, op): (&str, OpKind),
    (from, to, bytes): (Rank, Rank, usize),
    slot_bytes: usize,
    elem_size: usize,
) -> Result<(), Error> {
    match relay_capacity(topology, from, to, slot_bytes, elem_size) {
        Some(cap) if bytes > cap => Err(Error::Unsupported {
            executor: executor.into(),
            op,
            ranks: topology.ranks(),
            reason: format!(
                "ranks {from} and {to} have no healthy link, and their relays carry at most \
                 {cap} bytes per call (one slot of {slot_bytes} bytes each); {bytes} bytes \
                 were asked: split the call, or raise OXCCL_BUFFSIZE (the slots share one \
                 CCL buffer's worth of Scratch)"
            ),
        }),
        _ => Ok(()),
    }
}

/// Byte offset of the slot for `from -> to` in relay `relay`'s Scratch.
fn slot_offset(topology: &Topology, relay: Rank, from: Rank, to: Rank, slot: usize) -> usize {
    let (a, b) = (from.min(to), from.max(to));
    let d = relay_duties(topology, relay, None)
        .iter()
        .position(|&(x, y, _, _)| (x, y) == (a, b))
        .expect("a relay of a pair has the pair among its duties");
    (2 * d + usize::from(from > to)) * slot
}

/// Parameters of [`relay_exchange`].
#[derive(Clone, Debug)]
pub struct RelayParams<'a> {
    /// This rank's byte stream to each unlinked peer, as local slices in stream order; a
    /// peer missing here gets an empty stream.
    pub sends: &'a [(Rank, Vec<Slice>)],
    /// This rank's byte stream from each unlinked peer, as local slices in stream order.
    pub recvs: &'a [(Rank, Vec<Slice>)],
    pub elem_size: usize,
    /// [`relay_slot_bytes`] of the topology.
    pub slot_bytes: usize,
    /// The link channel of the rounds.
    pub channel: usize,
    /// The stream of the signal rounds.
    pub stream: usize,
    /// The first of the copy streams, one per relay of this rank ([`relays_of`]).
    pub first_copy_stream: usize,
    /// The first of the [`relay_notifies`] executor-private local notifies.
    pub first_notify: usize,
    /// Whether the slots are written again within the operation (a later loop iteration):
    /// then rounds 3 and 4 make sure every reader is done first. Without it they are left
    /// out, and the next operation's writes are ordered after the reads only by the
    /// device's epoch fence: zero-copy, relay `k`'s call ends after the reader's (exit
    /// fence) and the writer `s` starts its next call after `k`'s (entry fence). Staged
    /// nothing orders them: `k` ends after round 2, and the reader is not a peer of `s`,
    /// whose entry fence therefore does not wait for it (a gap the old two-phase close
    /// exchange covered): staged callers set it even for a single iteration.
    pub slots_reused: bool,
}

/// The parts of stream bytes `[lo, hi)` of `slices`, as `(sub-slice, offset from lo)`.
fn stream_parts(slices: &[Slice], lo: usize, hi: usize) -> Vec<(Slice, usize)> {
    let mut parts = Vec::new();
    let mut at = 0;
    for s in slices {
        let (start, end) = (at, at + s.len);
        at = end;
        let (a, b) = (start.max(lo), end.min(hi));
        if a < b {
            parts.push((
                Slice::new(s.rank, s.buf, s.offset + a - start, b - a),
                a - lo,
            ));
        }
    }
    parts
}

/// The stream of `list` with `peer` (empty when absent).
fn stream_of(list: &[(Rank, Vec<Slice>)], peer: Rank) -> &[Slice] {
    list.iter()
        .find(|(q, _)| *q == peer)
        .map_or(&[], |(_, s)| s.as_slice())
}

/// Every piece of the stream with unlinked `peer`: `(relay, sub-slice, offset in slot)`.
fn pieces(
    topology: &Topology,
    me: Rank,
    peer: Rank,
    stream: &[Slice],
    p: &RelayParams<'_>,
) -> Result<Vec<(Rank, Slice, usize)>, Error> {
    let Some(Route::Relayed(relays)) = route(topology, me, peer, None) else {
        return Ok(Vec::new());
    };
    let bytes: usize = stream.iter().map(|s| s.len).sum();
    let mut out = Vec::new();
    for (k, lo, len) in relay_pieces(&relays, (0, bytes), p.elem_size) {
        if len > p.slot_bytes {
            return Err(Error::BadProgram {
                executor: "relay_slots template".into(),
                rank: me,
                reason: format!(
                    "a piece of {len} bytes between ranks {me} and {peer} exceeds the relay \
                     slot of {} bytes (the executor must check the capacity first)",
                    p.slot_bytes
                ),
            });
        }
        out.extend(
            stream_parts(stream, lo, lo + len)
                .into_iter()
                .map(|(s, rel)| (k, s, rel)),
        );
    }
    Ok(out)
}

/// One "post to every peer, then wait for every peer" round on `p.stream`.
fn round(
    ctx: &mut KernelCtx<'_>,
    peers: &[Rank],
    p: &RelayParams<'_>,
    data_signal: bool,
) -> Result<(), Error> {
    let links = peers
        .iter()
        .map(|&q| ctx.link(q, p.channel))
        .collect::<Result<Vec<_>, _>>()?;
    for l in &links {
        match data_signal {
            true => l.tx_data_signal(ctx.stream(p.stream)),
            false => l.tx_ack(ctx.stream(p.stream)),
        }
    }
    for l in &links {
        match data_signal {
            true => l.rx_data_signal(ctx.stream(p.stream)),
            false => l.rx_ack(ctx.stream(p.stream)),
        }
    }
    Ok(())
}

/// The relays of `rank`'s unlinked pairs, ascending: the ranks whose slots it writes
/// and reads, one copy stream each.
pub fn relays_of(topology: &Topology, rank: Rank) -> Vec<Rank> {
    let mut relays: Vec<Rank> = unlinked_peers(topology, rank)
        .into_iter()
        .filter_map(|q| match route(topology, rank, q, None) {
            Some(Route::Relayed(relays)) => Some(relays),
            _ => None,
        })
        .flatten()
        .collect();
    relays.sort_unstable();
    relays.dedup();
    relays
}

/// Slave streams [`relay_exchange`] needs on `rank`: the rounds' stream and one copy
/// stream per relay, or none when the rank has no relay peers.
pub fn relay_streams(topology: &Topology, rank: Rank) -> usize {
    match relay_peers(topology, rank).is_empty() {
        true => 0,
        false => 1 + relays_of(topology, rank).len(),
    }
}

/// Executor-private local notifies [`relay_exchange`] needs on `rank`: two per copy stream.
pub fn relay_notifies(topology: &Topology, rank: Rank) -> usize {
    2 * relays_of(topology, rank).len()
}

/// Append the relayed exchange of every unlinked pair of this rank, and the relay duties
/// of this rank: the rounds on `p.stream`, the copies into and out of relay `i`'s slots
/// on stream `p.first_copy_stream + i`, so that they run on all relay links at once. The
/// caller forks and joins those [`relay_streams`] around it. Nothing when the rank has no
/// relay peers.
///
/// The rounds' stream and copy stream `i` meet through local notifies `p.first_notify +
/// 2i` ("my copies are done", posted after the writes and, when slots are reused, after
/// the reads) and `+ 2i + 1` ("read now", posted after round 2); each is posted at most
/// once before the wait that consumes it.
pub fn relay_exchange(ctx: &mut KernelCtx<'_>, p: &RelayParams<'_>) -> Result<(), Error> {
    let (me, topology) = (ctx.rank, ctx.topology);
    let peers = relay_peers(topology, me);
    if peers.is_empty() {
        return Ok(());
    }
    let relays = relays_of(topology, me);
    let unlinked = unlinked_peers(topology, me);
    let copy_stream = |k: Rank| {
        p.first_copy_stream
            + relays
                .binary_search(&k)
                .expect("the relay of a piece is a relay of this rank")
    };
    let (done, read_now) = (
        |i: usize| p.first_notify + 2 * i,
        |i: usize| p.first_notify + 2 * i + 1,
    );
    for &to in &unlinked {
        for (k, src, rel) in pieces(topology, me, to, stream_of(p.sends, to), p)? {
            let at = slot_offset(topology, k, me, to, p.slot_bytes) + rel;
            let dst = Slice::new(k, Buf::Scratch, at, src.len);
            ctx.stream(copy_stream(k)).copy(src, dst);
        }
    }
    for i in 0..relays.len() {
        let (n, s) = (ctx.notify(done(i)), p.first_copy_stream + i);
        ctx.stream(s).post(n);
        ctx.stream(p.stream).wait(n);
    }
    round(ctx, &peers, p, true)?;
    round(ctx, &peers, p, false)?;
    for i in 0..relays.len() {
        let (n, s) = (ctx.notify(read_now(i)), p.first_copy_stream + i);
        ctx.stream(p.stream).post(n);
        ctx.stream(s).wait(n);
    }
    for &from in &unlinked {
        for (k, dst, rel) in pieces(topology, me, from, stream_of(p.recvs, from), p)? {
            let at = slot_offset(topology, k, from, me, p.slot_bytes) + rel;
            let src = Slice::new(k, Buf::Scratch, at, dst.len);
            ctx.stream(copy_stream(k)).copy(src, dst);
        }
    }
    if p.slots_reused {
        for i in 0..relays.len() {
            let (n, s) = (ctx.notify(done(i)), p.first_copy_stream + i);
            ctx.stream(s).post(n);
            ctx.stream(p.stream).wait(n);
        }
        round(ctx, &peers, p, true)?;
        round(ctx, &peers, p, false)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mesh_broken(n: usize, pairs: &[(Rank, Rank)]) -> Topology {
        pairs.iter().fold(Topology::single_server(n), |t, &(a, b)| {
            t.with_broken(a, b).unwrap()
        })
    }

    #[test]
    fn relay_peers_are_symmetric() {
        let t = mesh_broken(8, &[(0, 1), (2, 3)]);
        for a in 0..8 {
            for b in 0..8 {
                assert_eq!(
                    relay_peers(&t, a).contains(&b),
                    relay_peers(&t, b).contains(&a),
                    "{a} {b}"
                );
            }
        }
        assert_eq!(relay_peers(&t, 0), vec![2, 3, 4, 5, 6, 7]);
        assert_eq!(relay_peers(&t, 4), vec![0, 1, 2, 3]);
        assert_eq!(unlinked_peers(&t, 3), vec![2]);
    }

    #[test]
    fn slots_are_distinct_and_fit_the_scratch() {
        let t = mesh_broken(8, &[(0, 1), (2, 3)]);
        let slot = relay_slot_bytes(&t, 4096, 4);
        assert_eq!(slot, 1024);
        assert_eq!(relay_scratch_bytes(&t, 4096, 4), 4096);
        let on_4 = [(0, 1), (1, 0), (2, 3), (3, 2)].map(|(a, b)| slot_offset(&t, 4, a, b, slot));
        assert_eq!(on_4, [0, 1024, 2048, 3072]);
        assert_eq!(relay_capacity(&t, 0, 1, slot, 4), Some(6 * 1024));
        assert_eq!(relay_capacity(&t, 0, 2, slot, 4), None);
        assert!(check_relay_capacity(&t, ("x", OpKind::SendRecv), (1, 0, 6145), slot, 4).is_err());
        assert!(check_relay_capacity(&t, ("x", OpKind::SendRecv), (1, 0, 6144), slot, 4).is_ok());
    }

    #[test]
    fn nothing_is_relayed_on_a_full_mesh() {
        let t = mesh_broken(5, &[]);
        assert_eq!(relay_slot_bytes(&t, 4096, 4), 0);
        assert!(relay_peers(&t, 2).is_empty());
    }

    #[test]
    fn stream_parts_cross_slices() {
        let s = [
            Slice::new(0, Buf::Input, 100, 8),
            Slice::new(0, Buf::Input, 40, 4),
        ];
        assert_eq!(
            stream_parts(&s, 6, 11),
            vec![
                (Slice::new(0, Buf::Input, 106, 2), 0),
                (Slice::new(0, Buf::Input, 40, 3), 2)
            ]
        );
    }
}
