//! Puts: the one way to move data over a put-only link.
//!
//! Over a put-only link (TCP, RDMA write) a rank may only write into a peer's registered
//! buffers (CclIn, CclOut, Scratch) and signal it; it never reads a peer's memory. Every
//! put-based executor therefore moves data as *the holder writes it where the consumer
//! wants it*, in a handshake of three signals per link and exchange:
//!
//! 1. the receiver opens its destination (`tx_ack`: "the slot is free, write it"), once
//!    per sender, before it waits for anything, so no two ranks wait on each other;
//! 2. the sender waits for that, writes (one Copy or Reduce whose destination is the
//!    peer's slot and whose sources are local), and announces it (`tx_data_signal`);
//! 3. the receiver waits for the announcement, and on an RDMA-kind link confirms it
//!    (DataAck, `rx_wait_done`), which the sender awaits (`tx_wait_done`) before it may
//!    reuse its source: a put completes asynchronously.
//!
//! Each signal is posted once per exchange and consumed before the next one is posted
//! (the receiver's next `tx_ack` follows its wait for this exchange's data), so
//! iterations back to back lose no wakeup. The destination must be the peer's CclIn,
//! CclOut or Scratch on a put-only link; on a load/store link it may be the peer's user
//! buffer.
//!
//! ## Zero-copy per peer
//!
//! A zero-copy call (Direct mode) runs on user buffers, also where some links are
//! put-only (a job across hosts: shared memory inside each, the network between them).
//! A put-mesh executor then writes a peer's user buffer only over a load/store link; over
//! a put-only one its put **lands** in the peer's Scratch ([`landing`]), and the peer
//! copies it into place once it arrived ([`land_from_scratch`]). Staged, every put lands
//! in place (the destination is a CCL buffer). The Scratch and the iteration's cap come
//! from [`with_landing_scratch`], only where a landing may happen, so a job on one host
//! pays nothing for it.

use oxccl_framework::platform::{Buf, Link, LinkAccess, Rank, Slice};
use oxccl_framework::{Error, KernelCtx, Mode, PlanCtx, ResourceRequest};

oxccl_framework::register_template! {
    name: "put",
    description: "open a slot (Ack), write into the peer's buffer, signal; the receiver never lets a peer read it",
}

/// Receiver, step 1: open this rank's slots to every sender in `from`, on `stream`; the
/// links, to [`await_puts`] later.
pub fn open_for_puts(
    ctx: &mut KernelCtx<'_>,
    stream: usize,
    from: &[Rank],
) -> Result<Vec<Link>, Error> {
    let links = from
        .iter()
        .map(|&p| ctx.link(p, 0))
        .collect::<Result<Vec<_>, _>>()?;
    links.iter().for_each(|l| l.tx_ack(ctx.stream(stream)));
    Ok(links)
}

/// Sender, step 2: wait until `to` opened its slot, write every `(destination on the
/// peer, local source)` pair, signal. Returns the link, for [`finish_puts`].
pub fn put(
    ctx: &mut KernelCtx<'_>,
    stream: usize,
    to: Rank,
    writes: &[(Slice, Slice)],
) -> Result<Link, Error> {
    let link = ctx.link(to, 0)?;
    let s = ctx.stream(stream);
    link.rx_ack(s);
    link.tx_async(s, writes);
    Ok(link)
}

/// Receiver, step 3: wait until every sender's data landed, confirming each (RDMA).
pub fn await_puts(ctx: &mut KernelCtx<'_>, stream: usize, links: &[Link]) {
    for l in links {
        l.rx_async(ctx.stream(stream));
        l.rx_wait_done(ctx.stream(stream));
    }
}

/// Sender, end: wait until every receiver confirmed its write (RDMA; nothing on SDMA).
pub fn finish_puts(ctx: &mut KernelCtx<'_>, stream: usize, links: &[Link]) {
    for l in links {
        l.tx_wait_done(ctx.stream(stream));
    }
}

/// Whether a put of `ctx.rank` into `peer`'s buffer `buf` may write it as it is: a CCL
/// buffer or scratch always, a user buffer over a load/store link only.
pub fn lands_in_place(ctx: &KernelCtx<'_>, peer: Rank, buf: Buf) -> bool {
    !buf.is_user() || ctx.topology.link_access(ctx.rank, peer) != Some(LinkAccess::Put)
}

/// Where `ctx.rank`'s put of `dst` (on rank `dst.rank`) goes: `dst` itself where it
/// [`lands_in_place`], else the peer's Scratch at byte `slot`, from which the peer copies
/// it with [`land_from_scratch`] (see the module docs).
pub fn landing(ctx: &KernelCtx<'_>, dst: Slice, slot: usize) -> Slice {
    match lands_in_place(ctx, dst.rank, dst.buf) {
        true => dst,
        false => Slice::new(dst.rank, Buf::Scratch, slot, dst.len),
    }
}

/// The bytes of one landing slot of an iteration whose blocks are `blocks`
/// (`(byte offset, byte length)` each): the longest block, so slot `i` starts at
/// `i * slot_len(blocks)`.
pub fn slot_len(blocks: &[(usize, usize)]) -> usize {
    blocks.iter().map(|&(_, len)| len).max().unwrap_or(0)
}

/// Receiver, after [`await_puts`]: copy what `from` put for `dst` (one of this rank's
/// buffers) out of this rank's Scratch at byte `slot` into `dst`, on `stream`; nothing
/// where the put landed in place.
pub fn land_from_scratch(
    ctx: &mut KernelCtx<'_>,
    stream: usize,
    from: Rank,
    dst: Slice,
    slot: usize,
) {
    if dst.len == 0 || lands_in_place(ctx, from, dst.buf) {
        return;
    }
    let me = ctx.rank;
    ctx.stream(stream)
        .copy(Slice::new(me, Buf::Scratch, slot, dst.len), dst);
}

/// The request of a put-mesh executor that may land puts in Scratch (zero-copy with
/// put-only links somewhere; see the module docs): `request` plus `slots` landing slots of
/// one block each, the block (the iteration's count) capped at `block_cap` elements and at
/// the operation's count. The condition is the same on every rank (mode and topology), so
/// every rank loops alike; staged, or with every link load/store, `request` as it is.
pub fn with_landing_scratch(
    ctx: &PlanCtx<'_>,
    request: ResourceRequest,
    slots: usize,
    block_cap: usize,
) -> ResourceRequest {
    if ctx.mode == Mode::Staged || ctx.topology.all_load_store() || ctx.ranks == 1 {
        return request;
    }
    let es = ctx.op.dtype.size();
    let cap = block_cap.max(1);
    ResourceRequest {
        scratch_bytes: slots * cap.min(ctx.op.count) * es,
        max_count_per_loop: Some(cap),
        ..request
    }
}
