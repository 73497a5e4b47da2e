//! Matched point-to-point transfers over put-only links: the sender writes into the
//! receiver's CclIn.
//!
//! The put-based twin of [`super::p2p`], with the same items, phases, byte streams and
//! slot size ([`super::p2p_slot_bytes`]); only the direction of the copy across the link
//! changes. The receiver's CclIn holds one slot per *source* rank at `source * slot`; in
//! each round of a phase a rank
//!
//! 1. opens the slot of every source it receives from (Ack: "slot free");
//! 2. for every destination: waits for its Ack, writes the next piece of the stream from
//!    its input into the destination's slot, and posts the destination's DataSignal;
//! 3. for every source: waits for its DataSignal, confirms it on an RDMA-kind link
//!    (DataAck), and copies the piece from its own slot into its output;
//! 4. waits for the DataAck of every destination it wrote (RDMA; nothing on SDMA).
//!
//! Nothing a round waits for is posted later than step 3 of the same round by a peer that
//! finished the previous round, and every notify is posted once per round after the
//! previous round consumed it: no deadlock, no lost wakeup (the argument of
//! [`super::p2p`]). No task reads a peer's memory or writes its user buffers, so the
//! template runs over TCP and RDMA links.

use super::p2p::{active_from, checked_slot, copy_to_self, phase_parts, slots_range, stream_parts};
use super::P2pParams;
use oxccl_framework::{Error, KernelCtx};

oxccl_framework::register_template! {
    name: "p2p_put",
    description: "matched sends and receives, in phases; the sender writes into per-source slots of the receiver's CclIn",
}

/// Append the whole exchange of `p` on the main stream, by puts.
pub fn p2p_put_exchange(ctx: &mut KernelCtx<'_>, p: &P2pParams<'_>) -> Result<(), Error> {
    copy_to_self(ctx, p);
    let (me, es) = (ctx.rank, p.elem_size);
    let slot = checked_slot(ctx, p, "p2p_put template")?;
    let ccl_in = slots_range(p);
    for phase in p.phases {
        let (outgoing, incoming, rounds) = phase_parts(me, phase, p, slot);
        ctx.reserve_rounds(rounds, 4 * (outgoing.len() + incoming.len()))?;
        for j in 0..rounds {
            let (lo, hi) = (j * slot, (j + 1) * slot);
            let (out_now, in_now) = (active_from(&outgoing, lo), active_from(&incoming, lo));
            for (from, _, _) in &in_now {
                ctx.link(*from, p.channel)?.tx_ack(ctx.main());
            }
            for (to, items, _) in &out_now {
                let link = ctx.link(*to, p.channel)?;
                link.rx_ack(ctx.main());
                for (at, rel, len) in stream_parts(items, es, lo, hi) {
                    let src = p.input.at(me, at, len);
                    let dst = ccl_in.at(*to, me * slot + rel, len);
                    ctx.main().copy(src, dst);
                }
                link.tx_data_signal(ctx.main());
            }
            for (from, items, _) in &in_now {
                let link = ctx.link(*from, p.channel)?;
                link.rx_data_signal(ctx.main());
                link.rx_wait_done(ctx.main());
                for (at, rel, len) in stream_parts(items, es, lo, hi) {
                    let src = ccl_in.at(me, from * slot + rel, len);
                    let dst = p.output.at(me, at, len);
                    ctx.main().copy(src, dst);
                }
            }
            for (to, _, _) in &out_now {
                ctx.link(*to, p.channel)?.tx_wait_done(ctx.main());
            }
        }
    }
    Ok(())
}
