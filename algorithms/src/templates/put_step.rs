//! The put handshake: one step in which a rank writes into a peer's receive area and the
//! peer consumes it locally. The building block of the put-based templates (put ring,
//! put RHD), which run over put-only links (TCP, RDMA write): no task reads a peer's
//! buffer, and the only remote writes land in a peer's CclIn, CclOut or Scratch.
//!
//! One step, on one stream, receiving from `from` and sending to `to` (the same peer in a
//! pairwise exchange, the two ring neighbours in a ring):
//!
//! 1. `from.tx_ack`: "my receive area for you is free" (its last contents were consumed
//!    by step 6 of the previous step, earlier on this stream);
//! 2. `to.rx_ack`: wait until `to`'s receive area is free;
//! 3. the put: Copy tasks from local buffers into `to`'s receive area;
//! 4. `to.tx_data_signal`: "the data is in your receive area";
//! 5. `from.rx_data_signal`: wait for `from`'s data;
//! 6. the consume: local tasks (Reduce, Copy) over the receive area.
//!
//! The receiver says "free" before every put, in the same operation and after everything
//! it did with the area earlier (including a staged loop's copy out of CclOut), so the
//! step does not lean on anything outside the operation, not even the device's epoch
//! fence. Every post is consumed within the step (the Ack by step 2, the
//! DataSignal by step 5 of the peer), so consecutive steps and consecutive operations never
//! post a set notify. The receiver's Ack travels before the data, so a step costs two
//! signal latencies plus the data: the same as the pull ring's step.

use oxccl_framework::platform::{Link, StreamProgram};
use oxccl_framework::KernelCtx;

/// Append one put step on `stream`: receive from `from` (when some), send to `to` (when
/// some). `put` appends the writes into `to`'s receive area, `consume` the local work on
/// what `from` wrote.
pub fn put_step(
    ctx: &mut KernelCtx<'_>,
    stream: usize,
    from: Option<&Link>,
    to: Option<&Link>,
    put: impl FnOnce(&mut StreamProgram),
    consume: impl FnOnce(&mut StreamProgram),
) {
    let s = ctx.stream(stream);
    if let Some(from) = from {
        from.tx_ack(s);
    }
    if let Some(to) = to {
        to.rx_ack(s);
        put(s);
        to.tx_data_signal(s);
    }
    if let Some(from) = from {
        from.rx_data_signal(s);
        consume(s);
    }
}
