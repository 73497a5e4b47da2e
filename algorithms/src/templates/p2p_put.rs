//! Matched point-to-point transfers over put-only links: the sender writes into the
//! receiver's CclIn.
//!
//! The put-based twin of [`super::p2p`], with the same items, phases, byte streams and
//! slot size ([`p2p_slot_bytes`]); only the direction of the copy across the link
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

use super::p2p::{copy_to_self, items_with, stream_bytes, stream_parts};
use super::{p2p_slot_bytes, P2pParams};
use oxccl_framework::op::P2pItem;
use oxccl_framework::platform::{Buf, Rank};
use oxccl_framework::{BufRange, Error, KernelCtx};

oxccl_framework::register_template! {
    name: "p2p_put",
    description: "matched sends and receives, in phases; the sender writes into per-source slots of the receiver's CclIn",
}

/// Append the whole exchange of `p` on the main stream, by puts.
pub fn p2p_put_exchange(ctx: &mut KernelCtx<'_>, p: &P2pParams<'_>) -> Result<(), Error> {
    copy_to_self(ctx, p);
    let (me, es) = (ctx.rank, p.elem_size);
    let slot = p2p_slot_bytes(ctx.ranks, p.ccl_bytes, es);
    if slot == 0 {
        return Err(Error::BadProgram {
            executor: "p2p_put template".into(),
            rank: me,
            reason: format!(
                "a CCL buffer of {} bytes has no room for one element per rank",
                p.ccl_bytes
            ),
        });
    }
    let ccl_in = BufRange {
        buf: Buf::CclIn,
        offset: 0,
        len: p.ccl_bytes,
    };
    for phase in p.phases {
        let pairs = |peers: &[Rank], items: &[P2pItem]| -> Vec<(Rank, Vec<P2pItem>, usize)> {
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
        let outgoing = pairs(&phase.send_to, p.sends);
        let incoming = pairs(&phase.recv_from, p.recvs);
        let rounds = outgoing
            .iter()
            .chain(&incoming)
            .map(|(_, _, bytes)| bytes.div_ceil(slot))
            .max()
            .unwrap_or(0);
        ctx.reserve_rounds(rounds, 4 * (outgoing.len() + incoming.len()))?;
        for j in 0..rounds {
            let (lo, hi) = (j * slot, (j + 1) * slot);
            let active = |list: &[(Rank, Vec<P2pItem>, usize)]| {
                list.iter()
                    .filter(|(_, _, bytes)| *bytes > lo)
                    .cloned()
                    .collect::<Vec<_>>()
            };
            let (out_now, in_now) = (active(&outgoing), active(&incoming));
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
