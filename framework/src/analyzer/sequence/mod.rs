//! Back-to-back operations: the analyzer's proof that a sequence of operations on one
//! communicator is safe under the device's **epoch fence**, the only thing that keeps
//! operations apart (programs end with the executor's last task, with no closing exchange).
//!
//! # The fence model
//!
//! Every call of a rank has an epoch, the communicator's call number (the same on every
//! rank for the same call). The device keeps, per rank, the last epoch it finished. For the
//! `k`-th operation of a sequence and rank `A` with granted peers `G_k(A)` (the links of
//! its [`ResourceRequest::peers`](crate::executor::ResourceRequest)):
//!
//! - **Calls are sequential per rank**: every stream of `A`'s operation `k+1` starts after
//!   every stream of `A`'s operation `k` ended.
//! - **Entry fence**: `A`'s operation `k+1` starts only after operation `k` ended on every
//!   peer in `G_{k+1}(A)` and, in the device's fence ([`FenceModel::DEVICE`]), also in
//!   `G_k(A)` (see "What the pairs found" below).
//! - **Exit fence** (operation `k` in [`Mode::Direct`](crate::executor::Mode::Direct), where peers touch `A`'s user
//!   buffers): `A`'s operation `k` ends only after it ended on every peer in `G_k(A)`; so
//!   `A`'s operation `k+1` also starts after those.
//! - A rank with no task in an operation (count 0, nothing to relay) still ends it, once its
//!   own fence let it start.
//! - **Notifies persist**: the binary contract spans operations. A post onto a notify that
//!   is still set is a lost wakeup; a wait nothing can satisfy is a deadlock; a wait that
//!   consumes a post an earlier operation left set returns too early.
//! - The CCL buffers and scratch are the communicator's, one memory for every operation;
//!   each call's user buffers are its own (the user may reuse them once the call returns).
//!
//! [`analyze_sequence`] indexes the operations together (`index`: streams of
//! operation 0, then 1, ...; shared notify keys; per-call user memories), turns the fence
//! into barriers before the first task of each stream (`fence`, built here in
//! `fences`), and runs the existing machinery on the whole: the canonical execution and its
//! deadlock check, the lost-wakeup proof, the memory-conflict check, plus two checks of
//! its own: the **grant rule** (`grants`) and waits that consume an earlier operation's
//! post (`stale`). Bounds, links, fork/join, peer-ready and semantics are properties of
//! one operation: [`super::analyze`] proves them per recording.
//!
//! # Why per-operation checks plus the fence cover any sequence
//!
//! Assume every operation passes [`super::analyze`] and the **grant rule**: a task of rank
//! `B` that touches a buffer of rank `A` or posts one of `A`'s notifies needs `B ∈ G(A)`
//! and `A ∈ G(B)` in that operation. Call `A` the owner and `B` a visitor. Take a task `x`
//! of operation `k` and a task `y` of a later operation touching the same memory or
//! notify; it is enough to order `x` before `y` for consecutive operations `k`, `k+1`
//! (later ones follow through the same per-rank sequence).
//!
//! - **Notifies.** A link notify of `A` is posted only by the one peer `B` it names, a
//!   local notify only by `A`. Within operation `k` every post is consumed (per-operation
//!   lost-wakeup check). `B`'s first post in `k+1` follows the end of `A`'s operation `k`
//!   (`A ∈ G_{k+1}(B)`, entry fence), hence every wait of `A` in `k`: the notify is clear,
//!   and no wait of `k+1` can take a post of `k` (`A`'s waits are sequential per call).
//! - **Memory.** User buffers are per call, so the memory is a CCL buffer or the scratch
//!   of an owner `A`. If `x` runs on `A`: when `y` runs on `A`, calls are sequential; when
//!   `y` runs on a visitor `B`, `A ∈ G_{k+1}(B)` and the entry fence orders `A`'s end
//!   before `B`'s start. If `x` runs on a visitor `C` of `A`, it is ordered as soon as `x`
//!   happens before `A`'s end of operation `k` (*owners outlive their visitors*), by the
//!   same two cases. In [`Mode::Direct`](crate::executor::Mode::Direct) the exit fence gives that for every executor
//!   (`C ∈ G_k(A)` by the grant rule). In [`Mode::Staged`](crate::executor::Mode::Staged) only two things give it: the
//!   executor's own handshakes (the owner waits for "done with your buffer"), or, when `y`
//!   runs on `A` itself, `C ∈ G_{k+1}(A)`, which the entry fence then waits for: always
//!   the case when the same executor runs again (its granted set does not change), not
//!   when the next executor grants fewer peers, and never for a third rank `y` on `B ∉
//!   {A, C}` that `A` does not gate.
//! - **Progress.** An operation's waits are satisfied by posts of the same operation, on
//!   ranks whose fences all open by induction on `k`: operation `k` ends everywhere, so
//!   every barrier of `k+1` passes.
//!
//! So the per-operation checks and the grant rule prove any sequence of executors that
//! keep *owners outlive their visitors*; the remaining staged cases are exactly what the
//! sequence check finds by running the pairs (a memory conflict naming both operations),
//! which is why it runs every pair of executors of an operator, and three operations
//! `first, second, first` so that a change of granted set is seen in both directions.
//!
//! With the device's fence ([`FenceModel::DEVICE`]) the staged case of `y` on `A` itself
//! is always covered (`C ∈ G_k(A)`), and the third-rank case whenever `C ∈ G_k(B) ∪
//! G_{k+1}(B)`, for instance after any executor that grants every peer. It is not covered
//! in general on shapes with broken links, where `B` may be linked to `A` and not to `C`
//! and write into `A`'s CCL buffers or Scratch (put and relay executors) while `C`, which
//! `A` did not wait for, still reads them; [`super::conformance::sequence_shapes`] has no
//! such shape, and pairs run within one operator.
//!
//! **What the pairs found.** Without Close, staged AllReduce executors where every peer
//! reads a rank's CCL buffers (mesh, relay-mesh, ...) followed by ones granting fewer
//! peers (ring, rhd, double and bidirectional rings) race on 8 ranks under the fence as
//! specified: the next executor rewrites the rank's CclOut while a former visitor may
//! still read it. A fence whose entry also waits for the peers granted in the previous
//! call ([`FenceModel::entry_previous`]) passes every ordered pair of AllReduce executors
//! on the whole sequence matrix; so does any executor that makes its owners outlive
//! their visitors. The host device implements that fence ([`FenceModel::DEVICE`]); the
//! first one stays as [`FenceModel::CURRENT_PEERS_ONLY`] for the test that shows the race.
//!
//! **Cost.** Happens-before queries across operations that the fences order by
//! themselves are answered from a bitset closure of the barriers
//! (`fence::Closure`) instead of a backward search through the later operation.

mod fences;
mod grants;
mod stale;
#[cfg(test)]
mod tests;

use super::hb::Hb;
use super::index::Index;
use super::recording::Recording;
use super::report::{Collector, Report};
use super::{lost_wakeup, memory, schedule};

/// Why a list of recordings is not a sequence of operations on one communicator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SequenceError {
    #[error(
        "a sequence needs at least two operations, got {got}: analyze a single one with `analyze`"
    )]
    TooShort { got: usize },
    #[error(
        "operation {op} has {ranks} ranks, operation 0 has {expected}: a sequence runs on one \
         communicator, record every operation on the same topology"
    )]
    Ranks {
        op: usize,
        ranks: usize,
        expected: usize,
    },
    #[error(
        "operation {op} was recorded with another topology or notify layout than operation 0: \
         record every operation with the same configuration"
    )]
    Communicator { op: usize },
    #[error(
        "operation {op} has CCL buffers of {bytes} bytes, operation 0 of {expected}: record \
         every operation with the same ccl_buffer_bytes"
    )]
    CclBytes {
        op: usize,
        bytes: usize,
        expected: usize,
    },
}

/// Which fence edges the model adds: the tests turn the device's off to show they are
/// needed, and [`analyze_sequence_with`] tries stronger fences.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FenceModel {
    /// Entry fence: operation `k+1` of `A` starts after operation `k` on `G_{k+1}(A)`.
    pub entry: bool,
    /// Exit fence in [`Mode::Direct`](crate::executor::Mode::Direct): operation `k` of `A`
    /// ends after operation `k` on `G_k(A)`.
    pub exit: bool,
    /// The entry fence also waits for the peers granted in the previous operation,
    /// `G_k(A)` (the device remembers the last submission's peers).
    pub entry_previous: bool,
}

impl FenceModel {
    /// The host device's fence: entry on this call's and the previous call's granted
    /// peers, exit in Direct mode (see the epoch fence in `oxccl_platform::device`).
    pub const DEVICE: FenceModel = FenceModel {
        entry: true,
        exit: true,
        entry_previous: true,
    };
    /// The fence as first specified: entry and exit on this call's granted peers only.
    /// Kept to show why the device remembers the previous call's peers (a staged mesh
    /// followed by a ring races under it).
    pub const CURRENT_PEERS_ONLY: FenceModel = FenceModel {
        entry: true,
        exit: true,
        entry_previous: false,
    };
    /// No fence edge: only each rank's calls in order.
    pub const NONE: FenceModel = FenceModel {
        entry: false,
        exit: false,
        entry_previous: false,
    };
}

/// Prove `recs`, run back to back in this order on one communicator, free of deadlocks,
/// lost wakeups and unordered memory conflicts under the epoch fence, and check the grant
/// rule. Failures name the operation's position (`Failure::op`).
pub fn analyze_sequence(recs: &[&Recording]) -> Result<Report, SequenceError> {
    analyze_sequence_with(recs, FenceModel::DEVICE)
}

/// [`analyze_sequence`] under a chosen fence model.
pub fn analyze_sequence_with(
    recs: &[&Recording],
    model: FenceModel,
) -> Result<Report, SequenceError> {
    compatible(recs)?;
    let idx = Index::sequence(recs);
    let grants = fences::grants(&idx);
    let (fences, closure) = fences::build(&idx, &grants, model);
    let mut out = Collector::default();
    grants::check(&idx, &grants, &mut out);
    let ex = schedule::run_fenced(&idx, &fences);
    schedule::check_deadlock(&idx, &ex, &mut out);
    stale::check(&idx, &ex, &mut out);
    let mut hb = Hb::new(&ex).with_closure(&closure);
    lost_wakeup::check(&idx, &ex, &mut hb, &mut out);
    memory::check(&idx, &ex, &mut hb, &mut out);
    Ok(out.into_report(idx.task_count()))
}

/// The recordings can be one communicator's operations.
fn compatible(recs: &[&Recording]) -> Result<(), SequenceError> {
    let Some((first, rest)) = recs.split_first().filter(|_| recs.len() >= 2) else {
        return Err(SequenceError::TooShort { got: recs.len() });
    };
    for (i, rec) in rest.iter().enumerate() {
        let op = i + 1;
        if rec.rank_count() != first.rank_count() {
            return Err(SequenceError::Ranks {
                op,
                ranks: rec.rank_count(),
                expected: first.rank_count(),
            });
        }
        if rec.layout != first.layout || rec.topology != first.topology {
            return Err(SequenceError::Communicator { op });
        }
        if rec.ccl_bytes != first.ccl_bytes {
            return Err(SequenceError::CclBytes {
                op,
                bytes: rec.ccl_bytes,
                expected: first.ccl_bytes,
            });
        }
    }
    Ok(())
}
