//! One description of a collective call, built once per operator and form.
//!
//! Every typed entry point of the facade (the eager methods of [`crate::Communicator`], the
//! calls added to a [`crate::Group`], and later graph capture and the C ABI) turns its
//! typed buffers into an [`OpCall`] through the constructors here, and hands that on. So
//! the rules of each operator are written once: which buffer lengths fit (checked here,
//! with the same errors everywhere), the count the operator runs on, and the byte view
//! of the buffers the device binds. What the framework checks for every caller (roots,
//! layouts, buffer sizes against the count) it checks when the call is submitted.
//!
//! A constructor that can refuse returns `Result<OpCall, Error>`; a submitter keeps a
//! refused call as the rank's call (see [`crate::Group::submit`]), so the other ranks
//! learn why at once instead of waiting for it.
//!
//! Gathers and scatters follow NCCL: the count is the per-rank block, the larger buffer
//! holds one block per rank (block `r` for rank `r`), and the in-place forms take that
//! larger buffer alone (`ranks` is the communicator's size).

use oxccl_framework::op::{P2pItem, VLayout};
use oxccl_framework::{Communicator as Inner, Error, GroupCall, OpKind, OpParam};
use oxccl_platform::{DataType, Element, Rank, ReduceOp, UserBuffers};

/// One rank's collective call: the operator with its count, and the buffers it binds.
pub struct OpCall<'a> {
    param: OpParam,
    user: UserBuffers<'a>,
}

impl<'a> OpCall<'a> {
    /// An untyped call on raw byte buffers.
    pub fn new(param: OpParam, user: UserBuffers<'a>) -> Self {
        OpCall { param, user }
    }

    /// The operator, its count, data type and layout.
    pub fn param(&self) -> &OpParam {
        &self.param
    }

    /// The buffers it binds.
    pub fn user(&self) -> &UserBuffers<'a> {
        &self.user
    }

    /// The operator and the buffers, for a submitter.
    pub fn into_parts(self) -> (OpParam, UserBuffers<'a>) {
        (self.param, self.user)
    }

    /// This call (or its refusal) as `comm`'s part of a group call.
    pub(crate) fn for_rank<'c>(call: Result<Self, Error>, comm: &'c Inner) -> GroupCall<'c, 'a> {
        match call {
            Ok(call) => GroupCall::Run(comm, call.param, call.user),
            Err(err) => GroupCall::Refused(comm, err),
        }
    }

    /// AllReduce of equal-length `send` into `recv`.
    pub fn all_reduce<T: Element>(
        send: &'a [T],
        recv: &'a mut [T],
        op: ReduceOp,
    ) -> Result<Self, Error> {
        Inner::same_length(send.len(), recv.len())?;
        Ok(Self::all_reduce_n(send, recv, send.len(), op))
    }

    /// AllReduce of the first `count` elements of `send` into `recv`.
    pub fn all_reduce_n<T: Element>(
        send: &'a [T],
        recv: &'a mut [T],
        count: usize,
        op: ReduceOp,
    ) -> Self {
        let param = OpParam::all_reduce(count, T::DTYPE, op);
        Self::new(param, out_of_place(send, recv))
    }

    /// AllReduce in place.
    pub fn all_reduce_in_place<T: Element>(buf: &'a mut [T], op: ReduceOp) -> Self {
        Self::new(OpParam::all_reduce(buf.len(), T::DTYPE, op), in_place(buf))
    }

    /// AllGather: `recv` holds exactly `ranks * send.len()` elements.
    pub fn all_gather<T: Element>(
        ranks: usize,
        send: &'a [T],
        recv: &'a mut [T],
    ) -> Result<Self, Error> {
        let count = OpKind::AllGather.block_count(ranks, send.len(), recv.len())?;
        let param = OpParam::all_gather(count, T::DTYPE);
        Ok(Self::new(param, out_of_place(send, recv)))
    }

    /// AllGather in place: `buf` holds one block per rank, the input in the rank's own.
    pub fn all_gather_in_place<T: Element>(ranks: usize, buf: &'a mut [T]) -> Result<Self, Error> {
        let count = OpKind::AllGather.in_place_block_count(ranks, buf.len())?;
        Ok(Self::new(
            OpParam::all_gather(count, T::DTYPE),
            in_place(buf),
        ))
    }

    /// ReduceScatter: `send` holds exactly `ranks * recv.len()` elements.
    pub fn reduce_scatter<T: Element>(
        ranks: usize,
        send: &'a [T],
        recv: &'a mut [T],
        op: ReduceOp,
    ) -> Result<Self, Error> {
        let count = OpKind::ReduceScatter.block_count(ranks, send.len(), recv.len())?;
        let param = OpParam::reduce_scatter(count, T::DTYPE, op);
        Ok(Self::new(param, out_of_place(send, recv)))
    }

    /// ReduceScatter in place: the result lands in the rank's own block of `buf`.
    pub fn reduce_scatter_in_place<T: Element>(
        ranks: usize,
        buf: &'a mut [T],
        op: ReduceOp,
    ) -> Result<Self, Error> {
        let count = OpKind::ReduceScatter.in_place_block_count(ranks, buf.len())?;
        let param = OpParam::reduce_scatter(count, T::DTYPE, op);
        Ok(Self::new(param, in_place(buf)))
    }

    /// Broadcast of the root's `send` into every `recv` (equal lengths).
    pub fn broadcast<T: Element>(
        send: &'a [T],
        recv: &'a mut [T],
        root: Rank,
    ) -> Result<Self, Error> {
        Inner::same_length(send.len(), recv.len())?;
        let param = rooted::<T>(OpKind::Broadcast, send.len(), ReduceOp::Sum, root);
        Ok(Self::new(param, out_of_place(send, recv)))
    }

    /// Broadcast in place: every `buf` becomes the root's.
    pub fn broadcast_in_place<T: Element>(buf: &'a mut [T], root: Rank) -> Self {
        let param = rooted::<T>(OpKind::Broadcast, buf.len(), ReduceOp::Sum, root);
        Self::new(param, in_place(buf))
    }

    /// Reduce of every rank's `send` into the root's `recv` (equal lengths).
    pub fn reduce<T: Element>(
        send: &'a [T],
        recv: &'a mut [T],
        op: ReduceOp,
        root: Rank,
    ) -> Result<Self, Error> {
        Inner::same_length(send.len(), recv.len())?;
        let param = rooted::<T>(OpKind::Reduce, send.len(), op, root);
        Ok(Self::new(param, out_of_place(send, recv)))
    }

    /// Reduce in place into the root's `buf`.
    pub fn reduce_in_place<T: Element>(buf: &'a mut [T], op: ReduceOp, root: Rank) -> Self {
        let param = rooted::<T>(OpKind::Reduce, buf.len(), op, root);
        Self::new(param, in_place(buf))
    }

    /// Scatter of the root's `send` (`ranks` blocks of `recv.len()`) into every `recv`.
    pub fn scatter<T: Element>(
        ranks: usize,
        send: &'a [T],
        recv: &'a mut [T],
        root: Rank,
    ) -> Result<Self, Error> {
        let count = OpKind::Scatter.block_count(ranks, send.len(), recv.len())?;
        let param = rooted::<T>(OpKind::Scatter, count, ReduceOp::Sum, root);
        Ok(Self::new(param, out_of_place(send, recv)))
    }

    /// Scatter in place: the rank's own block of `buf` becomes that block of the root's.
    pub fn scatter_in_place<T: Element>(
        ranks: usize,
        buf: &'a mut [T],
        root: Rank,
    ) -> Result<Self, Error> {
        let count = OpKind::Scatter.in_place_block_count(ranks, buf.len())?;
        let param = rooted::<T>(OpKind::Scatter, count, ReduceOp::Sum, root);
        Ok(Self::new(param, in_place(buf)))
    }

    /// Gather of every `send` into the root's `recv` (`ranks` blocks of `send.len()`).
    pub fn gather<T: Element>(
        ranks: usize,
        send: &'a [T],
        recv: &'a mut [T],
        root: Rank,
    ) -> Result<Self, Error> {
        let count = OpKind::Gather.block_count(ranks, send.len(), recv.len())?;
        let param = rooted::<T>(OpKind::Gather, count, ReduceOp::Sum, root);
        Ok(Self::new(param, out_of_place(send, recv)))
    }

    /// Gather in place: each rank's input is its own block of `buf`.
    pub fn gather_in_place<T: Element>(
        ranks: usize,
        buf: &'a mut [T],
        root: Rank,
    ) -> Result<Self, Error> {
        let count = OpKind::Gather.in_place_block_count(ranks, buf.len())?;
        let param = rooted::<T>(OpKind::Gather, count, ReduceOp::Sum, root);
        Ok(Self::new(param, in_place(buf)))
    }

    /// AlltoAll: `send` and `recv` both hold `ranks` blocks.
    pub fn all_to_all<T: Element>(
        ranks: usize,
        send: &'a [T],
        recv: &'a mut [T],
    ) -> Result<Self, Error> {
        let count = OpKind::AlltoAll.block_count(ranks, send.len(), recv.len())?;
        let param = OpParam::new(OpKind::AlltoAll, count, T::DTYPE, ReduceOp::Sum);
        Ok(Self::new(param, out_of_place(send, recv)))
    }

    /// AllGatherV over blocks of `counts[s]` elements at `displs[s]`.
    pub fn all_gather_v<T: Element>(
        send: &'a [T],
        recv: &'a mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Self {
        let param = blocks::<T>(OpKind::AllGatherV, counts, displs, ReduceOp::Sum);
        Self::new(param, out_of_place(send, recv))
    }

    /// AllGatherV in place: the rank's input is its own block of `buf`.
    pub fn all_gather_v_in_place<T: Element>(
        buf: &'a mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Self {
        let param = blocks::<T>(OpKind::AllGatherV, counts, displs, ReduceOp::Sum);
        Self::new(param, in_place(buf))
    }

    /// ReduceScatterV over blocks of `counts[s]` elements at `displs[s]`.
    pub fn reduce_scatter_v<T: Element>(
        send: &'a [T],
        recv: &'a mut [T],
        counts: &[usize],
        displs: &[usize],
        op: ReduceOp,
    ) -> Self {
        let param = blocks::<T>(OpKind::ReduceScatterV, counts, displs, op);
        Self::new(param, out_of_place(send, recv))
    }

    /// ReduceScatterV in place: the result lands in the rank's own block of `buf`.
    pub fn reduce_scatter_v_in_place<T: Element>(
        buf: &'a mut [T],
        counts: &[usize],
        displs: &[usize],
        op: ReduceOp,
    ) -> Self {
        let param = blocks::<T>(OpKind::ReduceScatterV, counts, displs, op);
        Self::new(param, in_place(buf))
    }

    /// AlltoAllV with MPI's per-peer counts and displacements (elements).
    pub fn all_to_all_v<T: Element>(
        send: &'a [T],
        send_counts: &[usize],
        send_displs: &[usize],
        recv: &'a mut [T],
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Self {
        let layout = VLayout::all_to_all_v(send_counts, send_displs, recv_counts, recv_displs);
        let param = OpParam::vector(OpKind::AlltoAllV, layout, T::DTYPE, ReduceOp::Sum);
        Self::new(param, out_of_place(send, recv))
    }

    /// Grouped sends out of `send` and receives into `recv` of one rank.
    pub fn send_recv<T: Element>(
        send: &'a [T],
        sends: &[P2pItem],
        recv: &'a mut [T],
        recvs: &[P2pItem],
    ) -> Self {
        let layout = VLayout::P2p {
            sends: sends.to_vec(),
            recvs: recvs.to_vec(),
        };
        let param = OpParam::vector(OpKind::SendRecv, layout, T::DTYPE, ReduceOp::Sum);
        Self::new(param, out_of_place(send, recv))
    }

    /// A send of all of `buf` to `peer`.
    pub fn send<T: Element>(buf: &'a [T], peer: Rank) -> Self {
        Self::send_recv(buf, &[whole(peer, buf.len())], &mut [], &[])
    }

    /// A receive of all of `buf` from `peer`.
    pub fn recv<T: Element>(buf: &'a mut [T], peer: Rank) -> Self {
        let item = whole(peer, buf.len());
        Self::send_recv(&[], &[], buf, &[item])
    }

    /// A Barrier.
    pub fn barrier() -> Self {
        Self::new(OpParam::barrier(), out_of_place::<u8>(&[], &mut []))
    }
}

impl std::fmt::Debug for OpCall<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (input, output) = self.user.lens_by_form();
        f.debug_struct("OpCall")
            .field("param", &self.param)
            .field("input_bytes", &input)
            .field("output_bytes", &output)
            .finish()
    }
}

/// Typed send and receive buffers as the device's byte view.
fn out_of_place<'a, T: Element>(send: &'a [T], recv: &'a mut [T]) -> UserBuffers<'a> {
    UserBuffers::OutOfPlace {
        input: bytemuck::cast_slice(send),
        output: bytemuck::cast_slice_mut(recv),
    }
}

/// One typed buffer, input and output at once, as the device's byte view.
fn in_place<T: Element>(buf: &mut [T]) -> UserBuffers<'_> {
    UserBuffers::InPlace(bytemuck::cast_slice_mut(buf))
}

/// A rooted operator of `count` elements of `T`.
fn rooted<T: Element>(kind: OpKind, count: usize, op: ReduceOp, root: Rank) -> OpParam {
    OpParam::rooted(kind, count, T::DTYPE, op, root)
}

/// AllGatherV or ReduceScatterV over blocks given by counts and displacements.
fn blocks<T: Element>(kind: OpKind, counts: &[usize], displs: &[usize], op: ReduceOp) -> OpParam {
    let dtype: DataType = T::DTYPE;
    let layout = VLayout::Blocks {
        counts: counts.to_vec(),
        displs: displs.to_vec(),
    };
    OpParam::vector(kind, layout, dtype, op)
}

/// A point-to-point item that moves a whole buffer of `count` elements.
fn whole(peer: Rank, count: usize) -> P2pItem {
    P2pItem {
        peer,
        offset: 0,
        count,
    }
}
