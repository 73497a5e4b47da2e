//! AllGatherV, ReduceScatterV and AlltoAllV: per-rank counts and displacements read from
//! the caller's `size_t` arrays (one entry per rank).

// NCCL's argument lists are the ABI: they are as long as NCCL made them.
#![allow(clippy::too_many_arguments)]

use super::{at_block, collective, extent, OxcclStream};
use crate::buffers::{read_array, Span};
use crate::handles::{Comm, OxcclComm};
use crate::result::{CError, OxcclResult};
use crate::step::{Binding, Step};
use crate::types::{data_type, reduce_op};
use oxccl::framework::op::VLayout;
use oxccl::{DataType, OpKind, OpParam, ReduceOp};
use std::ffi::{c_int, c_void};

/// The blocks of AllGatherV's receive buffer or ReduceScatterV's send buffer: the
/// `counts` and `displs` arrays (the first named `counts_arg`), this rank's own count
/// (`own`, named `own_arg`) checked against its entry, and the span of `buffer` (named
/// `buffer_arg`) that holds every block.
///
/// # Safety
/// The arrays, when not NULL and aligned, hold nranks entries each.
unsafe fn blocks(
    comm: &Comm,
    dtype: DataType,
    (counts_arg, counts): (&str, *const usize),
    displs: *const usize,
    (own_arg, own): (&str, usize),
    (buffer_arg, buffer): (&str, *const c_void),
) -> Result<(Vec<usize>, Vec<usize>, Span), CError> {
    let (n, rank) = (comm.size(), comm.rank());
    // SAFETY: the arrays hold nranks entries each (this function's contract).
    let (counts, displs) = unsafe {
        (
            read_array(counts_arg, counts, n)?,
            read_array("displs", displs, n)?,
        )
    };
    if counts[rank] != own {
        return Err(CError::invalid(format!(
            "{own_arg} {own} differs from {counts_arg}[{rank}] = {}; they must be equal",
            counts[rank]
        )));
    }
    let extent = extent(counts_arg, &counts, &displs)?;
    let span = Span::of(buffer_arg, buffer, extent, dtype)?;
    Ok((counts, displs, span))
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
    collective("oxcclAllGatherV", comm, stream, |comm| {
        let dtype = data_type(datatype)?;
        // SAFETY: the arrays hold nranks entries each (this function's contract).
        let (counts, displs, recv) = unsafe {
            blocks(
                &comm,
                dtype,
                ("recvcounts", recvcounts),
                displs,
                ("sendcount", sendcount),
                ("recvbuff", recvbuff),
            )
        }?;
        let in_place = at_block(sendbuff, recvbuff, displs[comm.rank()], 1, dtype);
        let binding = Binding::onto(recv, in_place, || {
            Span::of("sendbuff", sendbuff, sendcount, dtype)
        })?;
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
    collective("oxcclReduceScatterV", comm, stream, |comm| {
        let dtype = data_type(datatype)?;
        let op = reduce_op(op)?;
        // SAFETY: the arrays hold nranks entries each (this function's contract).
        let (counts, displs, send) = unsafe {
            blocks(
                &comm,
                dtype,
                ("sendcounts", sendcounts),
                displs,
                ("recvcount", recvcount),
                ("sendbuff", sendbuff),
            )
        }?;
        let in_place = at_block(recvbuff, sendbuff, displs[comm.rank()], 1, dtype);
        let binding = Binding::from(send, in_place, || {
            Span::of("recvbuff", recvbuff, recvcount, dtype)
        })?;
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
    collective("oxcclAlltoAllV", comm, stream, |comm| {
        let dtype = data_type(datatype)?;
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
