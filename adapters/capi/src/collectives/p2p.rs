//! Send, receive, barrier and the group calls.
//!
//! A send or receive is not a call of its own: it is one part of its communicator's
//! send/recv call, which the group fuses (see [`crate::group`]); outside a group the
//! part is that call alone.

// NCCL's argument lists are the ABI: they are as long as NCCL made them.
#![allow(clippy::too_many_arguments)]

use super::{begin, collective, rank_arg, OxcclStream};
use crate::buffers::Span;
use crate::group::{self, P2pPart, Pending};
use crate::handles::OxcclComm;
use crate::result::{guard, OxcclResult};
use crate::step::{Binding, Step};
use oxccl::OpParam;
use std::ffi::{c_int, c_void};

/// One send or receive of `count` elements at `buff`, to or from `peer`.
fn p2p(
    name: &str,
    buff: *const c_void,
    count: usize,
    datatype: c_int,
    peer: c_int,
    comm: *const OxcclComm,
    stream: *const OxcclStream,
    send: bool,
) -> OxcclResult {
    group::call(name, || {
        let (comm, stream, dtype) = begin(comm, stream, datatype)?;
        let peer = rank_arg("peer", peer, &comm)?;
        let what = if send { "sendbuff" } else { "recvbuff" };
        let span = Span::of(what, buff, count, dtype)?;
        Ok(Pending::P2p(P2pPart {
            comm,
            span,
            peer,
            send,
            stream,
        }))
    })
}

/// `ncclSend`.
///
/// # Safety
/// NCCL's contract: `sendbuff` holds `count` elements.
#[no_mangle]
pub unsafe extern "C" fn oxcclSend(
    sendbuff: *const c_void,
    count: usize,
    datatype: c_int,
    peer: c_int,
    comm: *mut OxcclComm,
    stream: *mut OxcclStream,
) -> OxcclResult {
    p2p(
        "oxcclSend",
        sendbuff,
        count,
        datatype,
        peer,
        comm,
        stream,
        true,
    )
}

/// `ncclRecv`.
///
/// # Safety
/// NCCL's contract: `recvbuff` holds `count` elements.
#[no_mangle]
pub unsafe extern "C" fn oxcclRecv(
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    peer: c_int,
    comm: *mut OxcclComm,
    stream: *mut OxcclStream,
) -> OxcclResult {
    p2p(
        "oxcclRecv",
        recvbuff,
        count,
        datatype,
        peer,
        comm,
        stream,
        false,
    )
}

/// A barrier: returns once every rank entered it.
///
/// # Safety
/// `comm` is a handle from oxccl (checked) or NULL.
#[no_mangle]
pub unsafe extern "C" fn oxcclBarrier(
    comm: *mut OxcclComm,
    stream: *mut OxcclStream,
) -> OxcclResult {
    collective("oxcclBarrier", comm, stream, |comm| {
        let binding = Binding::OutOfPlace {
            input: Span::EMPTY,
            output: Span::EMPTY,
        };
        Step::new(comm, OpParam::barrier(), binding)
    })
}

/// `ncclGroupStart`.
#[no_mangle]
pub extern "C" fn oxcclGroupStart() -> OxcclResult {
    guard("oxcclGroupStart", group::start)
}

/// `ncclGroupEnd`: runs the outermost group's calls; their first error.
#[no_mangle]
pub extern "C" fn oxcclGroupEnd() -> OxcclResult {
    guard("oxcclGroupEnd", group::end)
}
