//! Put mesh: every rank puts its blocks into every peer's receive slots, signals, and
//! each reduces (or copies) locally; for put-only links and small messages. One slave
//! stream per peer carries the put, the signal and the wait for that peer, so the
//! exchanges with all peers overlap; the reduce runs on the main stream after the join.
//!
//! The pull mesh reads every peer's input; a network link cannot. Here a reduce-scatter is
//! one round: rank `q` puts its contribution to block `c` into slot `q` of rank `c`'s
//! receive area (Scratch, one slot per sender, [`PutMesh::slot_of`]) and posts `c`'s
//! signal; when every peer's signal arrived, `c` reduces its own contribution and the
//! `n - 1` slots in one Reduce task. An all-gather is one round too: the rank puts its
//! block into every peer's copy of it (staged, the gathered buffer is CclOut, which a put
//! may write) or into that peer's slot (zero-copy, the gathered buffer is the user's,
//! which it may not), and each rank copies its slots into place.
//!
//! Safety between rounds and operations: a round writes a peer's slots only when the peer
//! cannot still be using them. The first round of an operation relies on the device's
//! entry fence (the peer finished the previous operation before this one starts) and on
//! the analyzer's proof that every notify posted within an operation is consumed within
//! it. A later
//! round must be preceded by something the peer did after it last used the target: a
//! *ready* exchange ([`PutMesh::ready`]: a signal to and from each peer before the put)
//! when nothing else orders them, as between two iterations of a staged loop of one
//! phase. An AllReduce needs none
//! between its two phases, nor between iterations: a peer's all-gather put follows its
//! reduce (which consumed its slots) and the next iteration's reduce-scatter put follows
//! its all-gather wait. The two phases of one iteration use different signals (the caller
//! says which), so a rank that raced ahead never posts a signal its peer has not consumed.

use super::mesh::mesh_peer;
use super::peer_round::Round;
use super::put_ring::ChunkSlice;
use oxccl_framework::platform::{Buf, DataType, Link, Rank, ReduceOp, Slice, StreamProgram};
use oxccl_framework::{BufRange, Error, KernelArgs, KernelCtx};

oxccl_framework::register_template! {
    name: "put_mesh",
    description: "one round of puts into every peer's Scratch slots (or staged CclOut), reduced or copied locally; runs over put-only links",
}

/// One put mesh over every rank, on the main stream.
#[derive(Clone, Copy, Debug)]
pub struct PutMesh {
    /// The link channel of its signals.
    pub channel: usize,
    /// This rank's receive area (Scratch), the same on every rank: one slot per rank.
    pub slots: BufRange,
    /// Bytes of one slot: at least the largest block.
    pub slot_len: usize,
    /// Begin with a ready round (see the module docs).
    pub ready: bool,
    /// The signal of the round's data (alternate between consecutive rounds).
    pub signal: Round,
    pub dtype: DataType,
    pub op: ReduceOp,
}

impl PutMesh {
    /// The mesh of an operation of one phase (AllGather, ReduceScatter): `ranks` slots of
    /// `slot_len` bytes at the start of Scratch, on channel 0, the DataSignal; a ready round
    /// from the second iteration of a staged loop on.
    pub fn one_phase(args: &KernelArgs, ranks: usize, slot_len: usize) -> Self {
        PutMesh {
            channel: 0,
            slots: BufRange {
                buf: Buf::Scratch,
                offset: 0,
                len: ranks * slot_len,
            },
            slot_len,
            ready: args.iteration > 0,
            signal: Round::DataSignal,
            dtype: args.op.dtype,
            op: args.op.op,
        }
    }

    /// Slot of `sender` in `rank`'s receive area, `len` bytes.
    pub fn slot_of(&self, rank: Rank, sender: Rank, len: usize) -> Slice {
        self.slots.at(rank, sender * self.slot_len, len)
    }

    /// Append one round: on slave stream `i` (serving peer [`mesh_peer`]`(me, n, i)`, so
    /// that no rank is everybody's first target), an optional ready exchange, the put to
    /// the peer and its signal, the wait for the peer's signal and `after_wait(peer)`;
    /// then, joined on the main stream, `consume`. Needs `n - 1` slave streams.
    fn round(
        &self,
        ctx: &mut KernelCtx<'_>,
        mut put: impl FnMut(&mut StreamProgram, Rank),
        mut after_wait: impl FnMut(&mut StreamProgram, Rank),
        consume: impl FnOnce(&mut StreamProgram),
    ) -> Result<(), Error> {
        let (me, n) = (ctx.rank, ctx.ranks);
        let peers = n - 1;
        if peers == 0 {
            return Ok(());
        }
        let ready = self.ready.then_some(match self.signal {
            Round::Ack => Round::DataSignal,
            Round::DataSignal => Round::Ack,
        });
        ctx.fork(1..=peers);
        for slave in 1..=peers {
            let link = ctx.link(mesh_peer(me, n, slave), self.channel)?;
            let s = ctx.stream(slave);
            if let Some(ready) = ready {
                signal(&link, s, ready);
                wait(&link, s, ready);
            }
            put(s, link.remote);
            signal(&link, s, self.signal);
            wait(&link, s, self.signal);
            after_wait(s, link.remote);
        }
        ctx.join(1..=peers);
        consume(ctx.main());
        Ok(())
    }
}

/// Post `round`'s signal to the peer of `link`.
fn signal(link: &Link, s: &mut StreamProgram, round: Round) {
    match round {
        Round::Ack => link.tx_ack(s),
        Round::DataSignal => link.tx_data_signal(s),
    }
}

/// Wait for the peer's `round` signal.
fn wait(link: &Link, s: &mut StreamProgram, round: Round) {
    match round {
        Round::Ack => link.rx_ack(s),
        Round::DataSignal => link.rx_data_signal(s),
    }
}

/// Append a put reduce-scatter: `input(me, c)` is this rank's contribution to block `c`
/// (local), `result` where this rank's block, reduced over every rank, goes.
pub fn put_mesh_reduce_scatter(
    ctx: &mut KernelCtx<'_>,
    m: &PutMesh,
    input: ChunkSlice<'_>,
    result: Slice,
) -> Result<(), Error> {
    let (me, n) = (ctx.rank, ctx.ranks);
    let mut srcs = vec![input(me, me)];
    srcs.extend(
        (0..n)
            .filter(|&q| q != me)
            .map(|q| m.slot_of(me, q, result.len)),
    );
    let (dtype, op) = (m.dtype, m.op);
    m.round(
        ctx,
        |s, peer| {
            let src = input(me, peer);
            s.copy(src, m.slot_of(peer, me, src.len));
        },
        |_, _| {},
        |s| s.reduce(srcs, result, dtype, op),
    )
}

/// Append a put all-gather: `held(r, c)` is where rank `r` keeps block `c`; this rank's
/// own block is already in place. With `into_place` the puts write the peers' `held`
/// directly (a CCL buffer or Scratch), otherwise their slots, copied into place locally.
pub fn put_mesh_all_gather(
    ctx: &mut KernelCtx<'_>,
    m: &PutMesh,
    held: ChunkSlice<'_>,
    into_place: bool,
) -> Result<(), Error> {
    let me = ctx.rank;
    let src = held(me, me);
    m.round(
        ctx,
        |s, peer| {
            let dst = match into_place {
                true => held(peer, me),
                false => m.slot_of(peer, me, src.len),
            };
            s.copy(src, dst);
        },
        |s, peer| {
            if !into_place {
                let dst = held(me, peer);
                s.copy(m.slot_of(me, peer, dst.len), dst);
            }
        },
        |_| {},
    )
}
