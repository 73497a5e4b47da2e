//! AllGatherV, ReduceScatterV and AlltoAllV: per-rank counts and displacements read from
//! the caller's `size_t` arrays (one entry per rank).

// NCCL's argument lists are the ABI: they are as long as NCCL made them.
#![allow(clippy::too_many_arguments)]

use super::{at_block, begin, collective, extent, read_array, OxcclStream};
use crate::buffers::Span;
use crate::handles::OxcclComm;
use crate::result::{CError, OxcclResult};
use crate::step::{Binding, Step};
use crate::types::reduce_op;
use oxccl::framework::op::VLayout;
use oxccl::{OpKind, OpParam, Rank, ReduceOp};
use std::ffi::{c_int, c_void};

/// The count `given` of this rank must be `counts[rank]`.
fn own_count(
    what: &str,
    given: usize,
    array: &str,
    counts: &[usize],
    rank: Rank,
) -> Result<(), CError> {
    if counts[rank] != given {
        return Err(CError::invalid(format!(
            "{what} {given} differs from {array}[{rank}] = {}; they must be equal",
            counts[rank]
        )));
    }
    Ok(())
}

/// AllGatherV over blocks of `recvcounts[r]` elements at `displs[r]` of `recvbuff`.
///
/// # Safety
/// NCCL's contract: the arrays hold nranks entries, `sendbuff` `sendcount` elements and
/// `recvbuff` every block.
#[no_mangle]
pub unsafe extern "C" fn oxcclAllGatherV(
    sendbuff: *const c_void,
    sendcount: usize,
    recvbuff: *mut c_void,
    recvcounts: *const usize,
    displs: *const usize,
    datatype: c_int,
    comm: *mut OxcclComm,
    stream: *mut OxcclStream,
) -> OxcclResult {
    collective("oxcclAllGatherV", || {
        let (comm, dtype) = begin(comm, stream, datatype)?;
        let (n, rank) = (comm.size(), comm.rank());
        // SAFETY: the arrays hold nranks entries each (this function's contract).
        let (counts, displs) = unsafe {
            (
                read_array("recvcounts", recvcounts, n)?,
                read_array("displs", displs, n)?,
            )
        };
        own_count("sendcount", sendcount, "recvcounts", &counts, rank)?;
        let recv = Span::of(
            "recvbuff",
            recvbuff,
            extent("recvcounts", &counts, &displs)?,
            dtype,
        )?;
        let binding = match at_block(sendbuff, recvbuff, displs[rank], 1, dtype) {
            true => Binding::InPlace(recv),
            false => Binding::OutOfPlace {
                input: Span::of("sendbuff", sendbuff, sendcount, dtype)?,
                output: recv,
            },
        };
        let layout = VLayout::Blocks { counts, displs };
        let param = OpParam::vector(OpKind::AllGatherV, layout, dtype, ReduceOp::Sum);
        Step::new(comm, param, binding)
    })
}

/// ReduceScatterV over blocks of `sendcounts[r]` elements at `displs[r]` of `sendbuff`.
///
/// # Safety
/// NCCL's contract: the arrays hold nranks entries, `recvbuff` `recvcount` elements and
/// `sendbuff` every block.
#[no_mangle]
pub unsafe extern "C" fn oxcclReduceScatterV(
    sendbuff: *const c_void,
    sendcounts: *const usize,
    displs: *const usize,
    recvbuff: *mut c_void,
    recvcount: usize,
    datatype: c_int,
    op: c_int,
    comm: *mut OxcclComm,
    stream: *mut OxcclStream,
) -> OxcclResult {
    collective("oxcclReduceScatterV", || {
        let (comm, dtype) = begin(comm, stream, datatype)?;
        let op = reduce_op(op)?;
        let (n, rank) = (comm.size(), comm.rank());
        // SAFETY: the arrays hold nranks entries each (this function's contract).
        let (counts, displs) = unsafe {
            (
                read_array("sendcounts", sendcounts, n)?,
                read_array("displs", displs, n)?,
            )
        };
        own_count("recvcount", recvcount, "sendcounts", &counts, rank)?;
        let send = Span::of(
            "sendbuff",
            sendbuff,
            extent("sendcounts", &counts, &displs)?,
            dtype,
        )?;
        let binding = match at_block(recvbuff, sendbuff, displs[rank], 1, dtype) {
            true => Binding::InPlace(send),
            false => Binding::OutOfPlace {
                input: send,
                output: Span::of("recvbuff", recvbuff, recvcount, dtype)?,
            },
        };
        let layout = VLayout::Blocks { counts, displs };
        let param = OpParam::vector(OpKind::ReduceScatterV, layout, dtype, op);
        Step::new(comm, param, binding)
    })
}

/// MPI_Alltoallv's shape.
///
/// # Safety
/// NCCL's contract: the four arrays hold nranks entries and the buffers every block.
#[no_mangle]
pub unsafe extern "C" fn oxcclAlltoAllV(
    sendbuff: *const c_void,
    sendcounts: *const usize,
    sdispls: *const usize,
    recvbuff: *mut c_void,
    recvcounts: *const usize,
    rdispls: *const usize,
    datatype: c_int,
    comm: *mut OxcclComm,
    stream: *mut OxcclStream,
) -> OxcclResult {
    collective("oxcclAlltoAllV", || {
        let (comm, dtype) = begin(comm, stream, datatype)?;
        let n = comm.size();
        // SAFETY: the arrays hold nranks entries each (this function's contract).
        let [send_counts, send_displs, recv_counts, recv_displs] = unsafe {
            [
                read_array("sendcounts", sendcounts, n)?,
                read_array("sdispls", sdispls, n)?,
                read_array("recvcounts", recvcounts, n)?,
                read_array("rdispls", rdispls, n)?,
            ]
        };
        let send_extent = extent("sendcounts", &send_counts, &send_displs)?;
        let recv_extent = extent("recvcounts", &recv_counts, &recv_displs)?;
        let binding = Binding::OutOfPlace {
            input: Span::of("sendbuff", sendbuff, send_extent, dtype)?,
            output: Span::of("recvbuff", recvbuff, recv_extent, dtype)?,
        };
        let layout = VLayout::all_to_all_v(&send_counts, &send_displs, &recv_counts, &recv_displs);
        let param = OpParam::vector(OpKind::AlltoAllV, layout, dtype, ReduceOp::Sum);
        Step::new(comm, param, binding)
    })
}
