//! The collective functions: NCCL's arguments checked and turned into [`Step`]s (the
//! fixed-size operators here, the V operators in `vector`, send, receive, barrier and
//! the group calls in `p2p`).
//!
//! Each function checks its communicator (live, not finalized), its stream (NULL on
//! the host device, which has none), its data type and reduce op numbers, its roots and
//! peers, and every pointer ([`Span`]), recognises NCCL's in-place form, builds the step
//! (which the framework's validation, and on cuda the device, checks against the
//! buffers), and hands it to the group: run now, deferred to `oxcclGroupEnd`, or
//! recorded by a capture.
//!
//! A buffer NCCL leaves unused on some ranks (the send buffer of Broadcast and Scatter
//! off the root, the receive buffer of Reduce and Gather off the root) is never read as
//! a pointer there: oxccl binds a zeroed block of its own in its place, since the
//! caller may pass NULL or a smaller buffer. Every rank must use the same form (all in
//! place, or none): the form is part of what oxccl plans a call by.

// NCCL's argument lists are the ABI: they are as long as NCCL made them.
#![allow(clippy::too_many_arguments)]

mod p2p;
mod vector;

use crate::buffers::{byte_len, times, Span};
use crate::group::{self, Pending};
use crate::handles::{Comm, OxcclComm};
use crate::result::{CError, OxcclResult};
use crate::side::Block;
use crate::step::{Binding, Step};
use crate::types::{data_type, reduce_op};
use oxccl::{DataType, OpKind, OpParam, Rank, ReduceOp};
use std::ffi::{c_int, c_void};
use std::sync::Arc;

/// The C type behind `oxcclStream_t`: never constructed, only pointed to.
#[repr(C)]
pub struct OxcclStream {
    _opaque: [u8; 0],
}

/// The communicator, stream and data type a send or a receive starts with, checked in
/// that order (see [`collective`] for why the stream comes before the rest).
fn begin(
    comm: *const OxcclComm,
    stream: *const OxcclStream,
    datatype: c_int,
) -> Result<(Arc<Comm>, Option<usize>, DataType), CError> {
    let (comm, stream) = usable_on(comm, stream)?;
    Ok((comm, stream, data_type(datatype)?))
}

/// The communicator, usable, and the call's stream checked by its device: what every
/// call checks first (see [`collective`] for why the stream comes before the rest).
fn usable_on(
    comm: *const OxcclComm,
    stream: *const OxcclStream,
) -> Result<(Arc<Comm>, Option<usize>), CError> {
    let comm = Comm::usable(comm)?;
    let stream = comm.stream(stream)?;
    Ok((comm, stream))
}

/// A rank argument (`root`, `peer`) of `comm`.
fn rank_arg(what: &str, value: c_int, comm: &Comm) -> Result<Rank, CError> {
    usize::try_from(value)
        .ok()
        .filter(|&r| r < comm.size())
        .ok_or_else(|| {
            CError::invalid(format!(
                "{what} {value} is not a rank of this communicator (0 to {})",
                comm.size() - 1
            ))
        })
}

/// The buffer `what` of `elements` elements at `ptr` where the call uses it; elsewhere
/// (NCCL leaves it unused there) a zeroed block of oxccl's, kept in `owned`.
fn used_or_zeroed(
    comm: &Comm,
    owned: &mut Vec<Block>,
    used: bool,
    what: &str,
    ptr: *const c_void,
    elements: usize,
    dtype: DataType,
) -> Result<Span, CError> {
    if used {
        return Span::of(what, ptr, elements, dtype);
    }
    let block = comm.zeroed_block(byte_len("the unused buffer", elements, dtype)?)?;
    let span = block.span();
    owned.push(block);
    Ok(span)
}

/// Whether `ptr` is `base` plus `block` blocks of `count` elements (NCCL's in-place
/// pointers for gathers and scatters); `base` NULL never is.
fn at_block(
    ptr: *const c_void,
    base: *const c_void,
    block: usize,
    count: usize,
    dtype: DataType,
) -> bool {
    let offset = block
        .checked_mul(count)
        .and_then(|e| e.checked_mul(dtype.size()));
    !base.is_null() && offset.and_then(|o| (base as usize).checked_add(o)) == Some(ptr as usize)
}

/// The end of the furthest block of `counts` at `displs` (elements), refused when one
/// overflows.
fn extent(what: &str, counts: &[usize], displs: &[usize]) -> Result<usize, CError> {
    counts.iter().zip(displs).try_fold(0usize, |far, (c, d)| {
        d.checked_add(*c).map(|end| far.max(end)).ok_or_else(|| {
            CError::invalid(format!("{what}: displacement {d} plus count {c} overflows"))
        })
    })
}

/// Run the step `build` makes on the communicator `comm` (or its refusal) as exported
/// function `name`, on the caller's `stream`.
///
/// The communicator and the stream are checked before `build` runs: a stream inside a
/// CUDA graph capture is refused before the call allocates anything of its own (an
/// unused buffer's block), which in the capturing thread would invalidate the capture;
/// so is a call to be recorded by `oxcclGraphCaptureBegin`.
fn collective(
    name: &str,
    comm: *const OxcclComm,
    stream: *const OxcclStream,
    build: impl FnOnce(Arc<Comm>) -> Result<Step, CError>,
) -> OxcclResult {
    group::call(name, || {
        let (comm, stream) = usable_on(comm, stream)?;
        Ok(Pending::Step(build(comm)?.on_streams(stream)))
    })
}

/// `ncclAllReduce`.
///
/// # Safety
/// NCCL's contract: the buffers hold `count` elements and stay valid during the call.
#[no_mangle]
pub unsafe extern "C" fn oxcclAllReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    op: c_int,
    comm: *mut OxcclComm,
    stream: *mut OxcclStream,
) -> OxcclResult {
    collective("oxcclAllReduce", comm, stream, |comm| {
        let dtype = data_type(datatype)?;
        let op = reduce_op(op)?;
        let recv = Span::of("recvbuff", recvbuff, count, dtype)?;
        let binding = Binding::onto(recv, sendbuff == recvbuff.cast_const(), || {
            Span::of("sendbuff", sendbuff, count, dtype)
        })?;
        Step::new(comm, OpParam::all_reduce(count, dtype, op), binding)
    })
}

/// `ncclBroadcast`.
///
/// # Safety
/// NCCL's contract: `recvbuff` (and the root's `sendbuff`) hold `count` elements.
#[no_mangle]
pub unsafe extern "C" fn oxcclBroadcast(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
    comm: *mut OxcclComm,
    stream: *mut OxcclStream,
) -> OxcclResult {
    collective("oxcclBroadcast", comm, stream, |comm| {
        let dtype = data_type(datatype)?;
        let root = rank_arg("root", root, &comm)?;
        let recv = Span::of("recvbuff", recvbuff, count, dtype)?;
        let mut owned = Vec::new();
        let binding = Binding::onto(recv, sendbuff == recvbuff.cast_const(), || {
            let at_root = comm.rank() == root;
            used_or_zeroed(
                &comm, &mut owned, at_root, "sendbuff", sendbuff, count, dtype,
            )
        })?;
        let param = OpParam::rooted(OpKind::Broadcast, count, dtype, ReduceOp::Sum, root);
        Step::with_owned(comm, param, binding, owned)
    })
}

/// `ncclReduce`.
///
/// # Safety
/// NCCL's contract: `sendbuff` (and the root's `recvbuff`) hold `count` elements.
#[no_mangle]
pub unsafe extern "C" fn oxcclReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    op: c_int,
    root: c_int,
    comm: *mut OxcclComm,
    stream: *mut OxcclStream,
) -> OxcclResult {
    collective("oxcclReduce", comm, stream, |comm| {
        let dtype = data_type(datatype)?;
        let op = reduce_op(op)?;
        let root = rank_arg("root", root, &comm)?;
        let send = Span::of("sendbuff", sendbuff, count, dtype)?;
        let mut owned = Vec::new();
        let binding = Binding::from(send, sendbuff == recvbuff.cast_const(), || {
            let at_root = comm.rank() == root;
            used_or_zeroed(
                &comm, &mut owned, at_root, "recvbuff", recvbuff, count, dtype,
            )
        })?;
        let param = OpParam::rooted(OpKind::Reduce, count, dtype, op, root);
        Step::with_owned(comm, param, binding, owned)
    })
}

/// `ncclAllGather`.
///
/// # Safety
/// NCCL's contract: `sendbuff` holds `sendcount` elements, `recvbuff` nranks times that.
#[no_mangle]
pub unsafe extern "C" fn oxcclAllGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    sendcount: usize,
    datatype: c_int,
    comm: *mut OxcclComm,
    stream: *mut OxcclStream,
) -> OxcclResult {
    collective("oxcclAllGather", comm, stream, |comm| {
        let dtype = data_type(datatype)?;
        let total = times("sendcount", sendcount, comm.size())?;
        let recv = Span::of("recvbuff", recvbuff, total, dtype)?;
        let in_place = at_block(sendbuff, recvbuff, comm.rank(), sendcount, dtype);
        let binding = Binding::onto(recv, in_place, || {
            Span::of("sendbuff", sendbuff, sendcount, dtype)
        })?;
        Step::new(comm, OpParam::all_gather(sendcount, dtype), binding)
    })
}

/// `ncclReduceScatter`.
///
/// # Safety
/// NCCL's contract: `recvbuff` holds `recvcount` elements, `sendbuff` nranks times that.
#[no_mangle]
pub unsafe extern "C" fn oxcclReduceScatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    recvcount: usize,
    datatype: c_int,
    op: c_int,
    comm: *mut OxcclComm,
    stream: *mut OxcclStream,
) -> OxcclResult {
    collective("oxcclReduceScatter", comm, stream, |comm| {
        let dtype = data_type(datatype)?;
        let op = reduce_op(op)?;
        let total = times("recvcount", recvcount, comm.size())?;
        let send = Span::of("sendbuff", sendbuff, total, dtype)?;
        let in_place = at_block(recvbuff, sendbuff, comm.rank(), recvcount, dtype);
        let binding = Binding::from(send, in_place, || {
            Span::of("recvbuff", recvbuff, recvcount, dtype)
        })?;
        Step::new(comm, OpParam::reduce_scatter(recvcount, dtype, op), binding)
    })
}

/// `ncclAlltoAll`.
///
/// # Safety
/// NCCL's contract: both buffers hold nranks times `count` elements.
#[no_mangle]
pub unsafe extern "C" fn oxcclAlltoAll(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    comm: *mut OxcclComm,
    stream: *mut OxcclStream,
) -> OxcclResult {
    collective("oxcclAlltoAll", comm, stream, |comm| {
        let dtype = data_type(datatype)?;
        let total = times("count", count, comm.size())?;
        let binding = Binding::OutOfPlace {
            input: Span::of("sendbuff", sendbuff, total, dtype)?,
            output: Span::of("recvbuff", recvbuff, total, dtype)?,
        };
        let param = OpParam::new(OpKind::AlltoAll, count, dtype, ReduceOp::Sum);
        Step::new(comm, param, binding)
    })
}

/// `ncclGather`.
///
/// # Safety
/// NCCL's contract: `sendbuff` holds `count` elements, the root's `recvbuff` nranks
/// times that (every rank's, in place).
#[no_mangle]
pub unsafe extern "C" fn oxcclGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
    comm: *mut OxcclComm,
    stream: *mut OxcclStream,
) -> OxcclResult {
    collective("oxcclGather", comm, stream, |comm| {
        let dtype = data_type(datatype)?;
        let root = rank_arg("root", root, &comm)?;
        let total = times("count", count, comm.size())?;
        let mut owned = Vec::new();
        // In place, every rank's receive buffer is the one buffer.
        let in_place = at_block(sendbuff, recvbuff, comm.rank(), count, dtype);
        let used = in_place || comm.rank() == root;
        let recv = used_or_zeroed(&comm, &mut owned, used, "recvbuff", recvbuff, total, dtype)?;
        let binding = Binding::onto(recv, in_place, || {
            Span::of("sendbuff", sendbuff, count, dtype)
        })?;
        let param = OpParam::rooted(OpKind::Gather, count, dtype, ReduceOp::Sum, root);
        Step::with_owned(comm, param, binding, owned)
    })
}

/// `ncclScatter`.
///
/// # Safety
/// NCCL's contract: `recvbuff` holds `count` elements, the root's `sendbuff` nranks times
/// that (every rank's, in place).
#[no_mangle]
pub unsafe extern "C" fn oxcclScatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
    comm: *mut OxcclComm,
    stream: *mut OxcclStream,
) -> OxcclResult {
    collective("oxcclScatter", comm, stream, |comm| {
        let dtype = data_type(datatype)?;
        let root = rank_arg("root", root, &comm)?;
        let total = times("count", count, comm.size())?;
        let mut owned = Vec::new();
        // In place, every rank's send buffer is the one buffer.
        let in_place = at_block(recvbuff, sendbuff, comm.rank(), count, dtype);
        let used = in_place || comm.rank() == root;
        let send = used_or_zeroed(&comm, &mut owned, used, "sendbuff", sendbuff, total, dtype)?;
        let binding = Binding::from(send, in_place, || {
            Span::of("recvbuff", recvbuff, count, dtype)
        })?;
        let param = OpParam::rooted(OpKind::Scatter, count, dtype, ReduceOp::Sum, root);
        Step::with_owned(comm, param, binding, owned)
    })
}
