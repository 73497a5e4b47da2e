//! The relayed mesh all-gather: every rank the root of its own chunk, unlinked pairs
//! served through their common neighbours (see [`super`]).

use super::{distinct, linked_peers, peer_stream, relayed_pieces, RelayedPiece};
use oxccl_framework::{BufRange, Error, KernelCtx, OpKind};

/// A relayed mesh all-gather: after it, every `buffer[chunks[s]]` holds rank `s`'s
/// `buffer[chunks[s]]`, given every rank's own chunk in place (elements of `es` bytes).
/// First every linked peer's chunk, pulled on that peer's slave stream after a DataSignal
/// exchange on channel 0 ("my chunk is ready"); then, once those are in, a relay tells
/// every destination it serves (Ack, channel 1, one per destination) and each
/// destination pulls its pieces out of the relay's buffer on the relay's slave stream.
/// Needs `ranks - 1` slave streams and links to the healthy neighbours; `executor` and
/// `op` name the caller in the error of a pair without a relay. Nothing here says "done
/// reading": a caller that refills `buffer` next adds a round for it.
pub fn relayed_all_gather(
    ctx: &mut KernelCtx<'_>,
    buffer: BufRange,
    chunks: &[(usize, usize)],
    es: usize,
    executor: &str,
    op: OpKind,
) -> Result<(), Error> {
    let me = ctx.rank;
    let relayed = relayed_pieces(ctx.topology, chunks, es, executor, op)?;
    direct_phase(ctx, buffer, chunks)?;
    let mine: Vec<RelayedPiece> = relayed.iter().filter(|p| p.relay == me).copied().collect();
    for d in distinct(&mine, |p| p.dest) {
        ctx.link(d, 1)?.tx_ack(ctx.main());
    }
    let incoming: Vec<RelayedPiece> = relayed.iter().filter(|p| p.dest == me).copied().collect();
    let relays = distinct(&incoming, |p| p.relay);
    let streams: Vec<usize> = relays
        .iter()
        .map(|&k| peer_stream(me, ctx.ranks, k))
        .collect();
    streams.iter().for_each(|&s| ctx.fork(s..=s));
    for (&k, &slave) in relays.iter().zip(&streams) {
        let link = ctx.link(k, 1)?;
        let s = ctx.stream(slave);
        link.rx_ack(s);
        for p in incoming.iter().filter(|p| p.relay == k) {
            let (off, len) = p.piece;
            s.copy(buffer.at(k, off, len), buffer.at(me, off, len));
        }
    }
    streams.iter().for_each(|&s| ctx.join(s..=s));
    Ok(())
}

/// Every linked peer's chunk, pulled on the peer's slave stream after a DataSignal
/// exchange ("my chunk is ready").
fn direct_phase(
    ctx: &mut KernelCtx<'_>,
    buffer: BufRange,
    chunks: &[(usize, usize)],
) -> Result<(), Error> {
    let me = ctx.rank;
    let linked = linked_peers(ctx.topology, me);
    let streams: Vec<usize> = linked
        .iter()
        .map(|&p| peer_stream(me, ctx.ranks, p))
        .collect();
    streams.iter().for_each(|&s| ctx.fork(s..=s));
    for (&p, &slave) in linked.iter().zip(&streams) {
        let link = ctx.link(p, 0)?;
        let (off, len) = chunks[p];
        let s = ctx.stream(slave);
        link.tx_data_signal(s);
        link.rx_data_signal(s);
        s.copy(buffer.at(p, off, len), buffer.at(me, off, len));
    }
    streams.iter().for_each(|&s| ctx.join(s..=s));
    Ok(())
}
