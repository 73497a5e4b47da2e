//! Put ring: ring reduce-scatter and ring all-gather by puts, for put-only links.
//!
//! The pull ring ([`ring_reduce_scatter`](mod@super::ring_reduce_scatter)) reads the left
//! neighbour's partial sum out of the left neighbour's buffer, which a network link cannot
//! do. Here the sender writes: in every step a rank puts the chunk its right neighbour
//! needs into the right neighbour's *receive slot* (a range of its Scratch), signals, and
//! reduces (or copies) what its left neighbour put into its own slot, locally. Each step
//! is a [`put_step`]: the receiver's "slot free" Ack precedes every put, so a slot is never
//! overwritten before it was consumed, whatever ran before.
//!
//! Reduce-scatter, step `k` of `n - 1`, ring position `p`: send chunk `chunk_at[p-1-k]`
//! (its input in step 0, its partial sum afterwards), receive chunk `chunk_at[p-2-k]` and
//! reduce it with the own input into its partial; the last step receives `chunk_at[p]`,
//! which is then complete. All-gather, step `k`: send the chunk `chunk_at[p-k]` this rank
//! holds, receive `chunk_at[p-1-k]`. When the gathered buffer is a CCL buffer (staged
//! kernels gather into CclOut) the put lands straight in the right neighbour's copy of the
//! chunk; on user buffers (zero-copy) it lands in the slot and the receiver copies it into
//! place, since a put may not write a peer's user buffers.
//!
//! Where chunks come from and go to is the caller's: closures name, for a rank and a chunk
//! index, the slice of the input, of the partial sum, or of the gathered result, so one
//! template serves AllReduce, ReduceScatter, AllGather and their V forms.

use super::put_step::put_step;
use super::ring::{ring_position, RingPosition};
use oxccl_framework::platform::{DataType, Rank, ReduceOp, Slice};
use oxccl_framework::{BufRange, Error, KernelCtx, OpParam};

oxccl_framework::register_template! {
    name: "put_ring",
    description: "ring reduce-scatter and all-gather by puts into the right neighbour's Scratch slot, reduced locally; runs over put-only links",
}

/// The slice of chunk `c` on rank `r` (the rank is always this rank or a ring neighbour).
pub type ChunkSlice<'a> = &'a dyn Fn(Rank, usize) -> Slice;

/// One put ring, seen from one of its ranks.
#[derive(Clone, Copy, Debug)]
pub struct PutRing<'a> {
    /// The ring order: `order[i + 1]` is the right neighbour of `order[i]`, cyclically.
    pub order: &'a [Rank],
    /// The stream the ring runs on.
    pub stream: usize,
    /// The link channel of its handshakes.
    pub channel: usize,
    /// `chunk_at[i]`: the chunk ring position `i` owns after the reduce-scatter and holds
    /// first in the all-gather.
    pub chunk_at: &'a [usize],
    /// This rank's receive slot, the same range on every rank (Scratch): at least the
    /// largest chunk.
    pub slot: BufRange,
    pub dtype: DataType,
    pub op: ReduceOp,
}

/// Run `use_ring` with the put ring of a level-1 group: `group` in its own order
/// (position `i` holds chunk `i`), on the main stream and link `channel`, receiving in
/// `slot`, for `op`'s type and reduction (the `hier-put-ring` executors).
pub fn with_group_ring<R>(
    group: &[Rank],
    channel: usize,
    slot: BufRange,
    op: &OpParam,
    use_ring: impl FnOnce(&PutRing<'_>) -> R,
) -> R {
    let positions: Vec<usize> = (0..group.len()).collect();
    use_ring(&PutRing {
        order: group,
        stream: 0,
        channel,
        chunk_at: &positions,
        slot,
        dtype: op.dtype,
        op: op.op,
    })
}

impl PutRing<'_> {
    fn position(&self, ctx: &KernelCtx<'_>) -> Result<RingPosition, Error> {
        ring_position(ctx, self.order, self.channel, "put_ring")
    }

    /// The chunk of ring position `pos` (modulo the ring size).
    fn chunk_of(&self, pos: usize) -> usize {
        self.chunk_at[pos % self.order.len()]
    }
}

/// Append a put reduce-scatter: `input(me, c)` is this rank's contribution to chunk `c`,
/// `partial(me, c)` where its partial sum of `c` goes (and where the own chunk's result
/// ends). Both are local slices of the chunk's length; `partial` may alias `input`
/// (AllReduce in place), and may return one reused range for every chunk but the own one
/// (a partial is sent on in the step after it was made).
pub fn put_ring_reduce_scatter(
    ctx: &mut KernelCtx<'_>,
    ring: &PutRing<'_>,
    input: ChunkSlice<'_>,
    partial: ChunkSlice<'_>,
) -> Result<(), Error> {
    let at = ring.position(ctx)?;
    let (me, n, right) = (ctx.rank, at.n, at.right.remote);
    for k in 0..n.saturating_sub(1) {
        let send = ring.chunk_of(at.pos + 2 * n - 1 - k);
        let recv = ring.chunk_of(at.pos + 2 * n - 2 - k);
        let src = if k == 0 {
            input(me, send)
        } else {
            partial(me, send)
        };
        let put_dst = ring.slot.at(right, 0, src.len);
        let (own, dst) = (input(me, recv), partial(me, recv));
        let received = ring.slot.at(me, 0, dst.len);
        let (dtype, op) = (ring.dtype, ring.op);
        put_step(
            ctx,
            ring.stream,
            Some(&at.left),
            Some(&at.right),
            |s| s.copy(src, put_dst),
            |s| s.reduce(vec![received, own], dst, dtype, op),
        );
    }
    Ok(())
}

/// Append a put all-gather: `held(r, c)` is where rank `r` keeps chunk `c` (this rank's
/// own chunk is already there). With `into_place` the put writes the right neighbour's
/// `held` directly (it must then be a CCL buffer or Scratch); otherwise into its slot, and
/// the receiver copies the slot into place.
pub fn put_ring_all_gather(
    ctx: &mut KernelCtx<'_>,
    ring: &PutRing<'_>,
    held: ChunkSlice<'_>,
    into_place: bool,
) -> Result<(), Error> {
    let at = ring.position(ctx)?;
    let (me, n, right) = (ctx.rank, at.n, at.right.remote);
    for k in 0..n.saturating_sub(1) {
        let send = ring.chunk_of(at.pos + n - k);
        let recv = ring.chunk_of(at.pos + 2 * n - 1 - k);
        let src = held(me, send);
        let put_dst = match into_place {
            true => held(right, send),
            false => ring.slot.at(right, 0, src.len),
        };
        let dst = held(me, recv);
        let received = (!into_place).then(|| ring.slot.at(me, 0, dst.len));
        put_step(
            ctx,
            ring.stream,
            Some(&at.left),
            Some(&at.right),
            |s| s.copy(src, put_dst),
            |s| {
                if let Some(received) = received {
                    s.copy(received, dst)
                }
            },
        );
    }
    Ok(())
}
