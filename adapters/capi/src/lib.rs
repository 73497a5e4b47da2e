//! # oxccl-capi
//!
//! oxccl's C ABI: NCCL's functions renamed `oxccl*`, with NCCL's argument shapes and
//! NCCL's numbering of results, data types and reduce ops, so that a NCCL caller ports
//! by renaming. The library builds as `liboxccl_capi.so` (cdylib) and `liboxccl_capi.a`
//! (staticlib); the header is `include/oxccl.h`, written by hand and checked against the
//! library's exports by this crate's tests.
//!
//! How the parts fit:
//!
//! - `result`: the result codes, the mapping of [`oxccl::Error`] onto them, the calling
//!   thread's last error message, and `result::guard`, which every exported function
//!   runs its body in: a Rust panic never crosses the boundary, it becomes
//!   `oxcclInternalError` with the panic's message.
//! - `types`: NCCL's data type and reduce op numbers to oxccl's, refusing the ones oxccl
//!   lacks.
//! - `handles`: communicators behind opaque handles. A handle is looked up in a table of
//!   live communicators on every call, so a NULL, destroyed or made-up handle is an
//!   argument error rather than undefined behaviour, and a communicator destroyed on one
//!   thread while another thread's call runs stays alive until that call ends.
//! - `buffers`: raw pointers as checked byte spans (NULL, alignment for the data type,
//!   byte counts that overflow), and the one place that turns spans into slices.
//! - `step`: one rank's call as data, with its spans: built by the collective
//!   functions from NCCL's arguments (NCCL's in-place forms become oxccl's in-place
//!   binding; overlaps that are not an in-place form are refused, since two Rust slices
//!   must never alias), checked with the framework's own validation before anything
//!   runs, and turned into the framework's call when it runs.
//! - `group`: `oxcclGroupStart`/`oxcclGroupEnd`, per thread: deferred steps, a
//!   communicator's sends and receives fused into one call, and the calls of several
//!   communicators launched together (how one thread drives the ranks of
//!   `oxcclCommInitAll`).
//! - `memory`: `oxcclMemAlloc`/`oxcclMemFree`, user buffers the ranks in other processes
//!   of the host map (for zero-copy jobs: `OXCCL_SHARED_BUFFERS=1`), or device memory of
//!   the rank on cuda.
//! - `side`: which memory a communicator's pointers are (host memory, or its device's:
//!   cuda), and what differs between the two: bindings, oxccl's own blocks, copies,
//!   pointer checks and streams.
//! - `collectives`, `init` and `graph`: the exported functions.
//!
//! Every call is blocking. On the host device pointers are host memory and the `stream`
//! argument must be NULL; on cuda they are device pointers and the call waits for the
//! caller's stream before it runs (see `side`).

mod buffers;
mod collectives;
mod graph;
mod group;
mod handles;
mod init;
mod memory;
mod result;
mod side;
mod step;
mod types;
