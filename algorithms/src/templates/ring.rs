//! Shared pieces of the ring templates: the ring, its neighbours, and the step handshake.
//!
//! Ring templates pull: in every step a rank reads the chunk its left neighbour prepared,
//! straight out of the left neighbour's buffer. One step on one link channel is:
//!
//! 1. `right.tx_data_signal`: "the chunk you read in this step is ready in my buffer";
//! 2. `left.rx_data_signal`: wait until the left neighbour's chunk is ready;
//! 3. the data task (a Reduce or Copy that reads the left neighbour's buffer);
//! 4. `left.tx_ack`: "I am done reading your buffer";
//! 5. `right.rx_ack`: wait until the right neighbour is done reading mine.
//!
//! Step 5 makes every exchange complete before the next step posts again, so no notify is
//! posted twice before its wait, and when the last step ends nobody reads this rank's
//! buffers any more. Because nobody writes into a peer, the input may be read-only and the
//! output may alias it (in-place).

use oxccl_framework::platform::{DataType, Link, Rank, ReduceOp};
use oxccl_framework::{BufRange, Error, KernelArgs, KernelCtx};

/// One ring over some ranks, seen from one of them.
#[derive(Clone, Debug)]
pub struct RingParams<'a> {
    /// The ring order: `order[i + 1]` is the right neighbour of `order[i]`, cyclically.
    pub order: &'a [Rank],
    /// The stream this ring runs on.
    pub stream: usize,
    /// The link channel its notifies use (two rings sharing a link need two channels).
    pub channel: usize,
    /// `(byte offset, byte length)` of each chunk, relative to `input`/`output`.
    pub chunks: &'a [(usize, usize)],
    /// `chunk_at[i]` is the chunk the rank at ring position `i` owns at the end of a
    /// reduce-scatter and at the start of an all-gather. Usually `i` itself.
    pub chunk_at: &'a [usize],
    pub input: BufRange,
    pub output: BufRange,
    pub dtype: DataType,
    pub op: ReduceOp,
}

impl<'a> RingParams<'a> {
    /// A ring on the main stream and link channel 0, over the iteration's buffers.
    pub fn on_main_stream(
        order: &'a [Rank],
        chunks: &'a [(usize, usize)],
        chunk_at: &'a [usize],
        args: &KernelArgs,
    ) -> Self {
        RingParams {
            order,
            stream: 0,
            channel: 0,
            chunks,
            chunk_at,
            input: args.input,
            output: args.output,
            dtype: args.op.dtype,
            op: args.op.op,
        }
    }
}

/// A rank's place in a ring.
pub(crate) struct RingPosition {
    pub pos: usize,
    pub n: usize,
    pub left: Link,
    pub right: Link,
}

/// Where `ctx.rank` sits in the ring `order`, with links on `channel` to both neighbours;
/// `template` names the caller in the error when the rank is not in the order.
pub(crate) fn ring_position(
    ctx: &KernelCtx<'_>,
    order: &[Rank],
    channel: usize,
    template: &str,
) -> Result<RingPosition, Error> {
    let n = order.len();
    let pos = order
        .iter()
        .position(|&r| r == ctx.rank)
        .ok_or_else(|| Error::BadProgram {
            executor: format!("{template} template"),
            rank: ctx.rank,
            reason: format!("rank {} is not in the ring order {:?}", ctx.rank, order),
        })?;
    let left = ctx.link(order[(pos + n - 1) % n], channel)?;
    let right = ctx.link(order[(pos + 1) % n], channel)?;
    Ok(RingPosition {
        pos,
        n,
        left,
        right,
    })
}

impl RingParams<'_> {
    /// Where `ctx.rank` sits in the ring, with links to both neighbours.
    pub(crate) fn position(&self, ctx: &KernelCtx<'_>) -> Result<RingPosition, Error> {
        ring_position(ctx, self.order, self.channel, "ring")
    }

    /// The chunk owned by ring position `pos` (taken modulo the ring size).
    pub(crate) fn chunk(&self, pos: usize) -> (usize, usize) {
        self.chunks[self.chunk_index(pos)]
    }

    /// The index of the chunk owned by ring position `pos` (taken modulo the ring size).
    pub(crate) fn chunk_index(&self, pos: usize) -> usize {
        self.chunk_at[pos % self.order.len()]
    }
}

/// The `ring_step` handshake around one data task.
pub(crate) fn ring_step(
    ctx: &mut KernelCtx<'_>,
    stream: usize,
    ring: &RingPosition,
    data_task: impl FnOnce(&mut KernelCtx<'_>),
) {
    ring.right.tx_data_signal(ctx.stream(stream));
    ring.left.rx_data_signal(ctx.stream(stream));
    data_task(ctx);
    ring.left.tx_ack(ctx.stream(stream));
    ring.right.rx_ack(ctx.stream(stream));
}
