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
//! CclOut or Scratch on a put-only link; on a load/store link (Direct mode is used only
//! when every link is load/store) it may be the peer's user buffer.

use oxccl_framework::platform::{Link, Rank, Slice};
use oxccl_framework::{Error, KernelCtx};

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
