//! Call agreement: before data moves, the ranks of an operation agree on what it is.
//!
//! NCCL leaves mismatched calls undefined (ranks that call different collectives, counts,
//! types or roots), and they are the first cause of silent corruption and hangs its users
//! report. oxccl checks them: every call of every rank gets a sequence number (the
//! rank's count of calls on the communicator) and deposits its [`Signature`] — operator,
//! data type, reduce op, root, count or layout, and the executor `select_alg` chose — on
//! the communicator's [`CallBoard`] under that number. The last rank to deposit compares
//! them once and decides the call's [`Gate`]: every rank's launch is handed to the device
//! at once but waits on the gate, so no task runs before the verdict. A mismatch is then [`Error::Mismatch`] on every rank, naming the call, the
//! field and which ranks passed what, and no rank has moved a byte: the communicator stays
//! usable. A rank whose own call was refused (a bad argument) returns its error at once
//! and deposits the refusal, so the others learn it instead of waiting out
//! `exec_timeout` for it. Every call counts, refused or not: ranks stay in step as long
//! as they make the same sequence of calls, which is the contract of every CCL.
//!
//! Cost: in-process, one lock and one structural comparison per rank per call, and no
//! wake-up of its own: each rank's thread waits for its launch as it would anyway, and the
//! last rank to deposit opens the gate, which queues every rank's streams at once — the
//! check is folded into the first handshake every collective makes. A count-0 call,
//! which launches nothing, waits for the verdict itself. `OXCCL_CHECK_CALLS=0` turns the
//! check off (the README gives its measured cost).
//!
//! The point-to-point operators (AlltoAllV, send/recv) are compared pair by pair: the
//! non-empty sends of `a` to `b`, in call order, must have the counts of the non-empty
//! receives of `b` from `a`.

mod signature;

pub use signature::Signature;

use crate::error::Error;
use oxccl_platform::gate::deadline_after;
use oxccl_platform::{Gate, Rank};
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// The verdict on call `call` from every rank's deposit, in rank order (all present):
/// what the board decides when the last rank deposits, for a caller that holds every
/// rank's call at once.
pub fn verdict_of(call: u64, deposits: &[Option<Deposit>]) -> Result<(), Error> {
    signature::verdict(call, deposits)
}

/// What one rank deposits for one call.
#[derive(Clone, Debug)]
pub enum Deposit {
    /// The call passed its own checks and will run with this signature.
    Call(Signature),
    /// The call was refused on this rank before it could run.
    Refused(String),
}

/// The deposits of one call number, and the verdict once every rank is in.
struct Round {
    deposits: Vec<Option<Deposit>>,
    arrived: usize,
    verdict: Option<Result<(), Error>>,
    /// Ranks that have not read the verdict yet; the round is dropped at 0.
    unread: usize,
    /// Opened (or refused) with the verdict: the ranks' launches wait on it.
    gate: Arc<Gate>,
}

/// The agreement state of one communicator (shared by its in-process ranks).
pub struct CallBoard {
    ranks: usize,
    rounds: Mutex<BoardState>,
    changed: Condvar,
}

#[derive(Default)]
struct BoardState {
    rounds: HashMap<u64, Round>,
    /// Set when the communicator failed: waiters give up at once.
    failure: Option<Error>,
}

impl CallBoard {
    /// A board for `ranks` ranks.
    pub fn new(ranks: usize) -> Self {
        CallBoard {
            ranks,
            rounds: Mutex::new(BoardState::default()),
            changed: Condvar::new(),
        }
    }

    /// Deposit `rank`'s part of call `call` and return the call's gate, which the rank's
    /// launch waits on. The last deposit computes the verdict and decides the gate.
    pub fn deposit(&self, call: u64, rank: Rank, deposit: Deposit) -> Arc<Gate> {
        let mut state = self.rounds.lock();
        let round = state.rounds.entry(call).or_insert_with(|| Round {
            deposits: vec![None; self.ranks],
            arrived: 0,
            verdict: None,
            unread: self.ranks,
            gate: Arc::new(Gate::default()),
        });
        let gate = round.gate.clone();
        // A rank that refused its call returns its own error at once: it never reads
        // the verdict.
        if matches!(deposit, Deposit::Refused(_)) {
            round.unread -= 1;
        }
        if round.deposits[rank].replace(deposit).is_none() {
            round.arrived += 1;
        }
        if round.arrived < self.ranks {
            return gate;
        }
        let verdict = signature::verdict(call, &round.deposits);
        let decision = verdict
            .clone()
            .map_err(|e| Arc::new(e) as oxccl_platform::GateRefusal);
        if round.unread == 0 {
            state.rounds.remove(&call);
        } else {
            round.verdict = Some(verdict);
        }
        drop(state);
        self.changed.notify_all();
        gate.decide(decision);
        gate
    }

    /// Wait until every rank deposited call `call`, then return the verdict for `rank`.
    /// Gives up after `timeout`, naming the ranks that never called, or at once when the
    /// communicator fails meanwhile ([`CallBoard::fail`]).
    pub fn verdict(&self, call: u64, rank: Rank, timeout: Duration) -> Result<(), Error> {
        let mut state = self.rounds.lock();
        // The clock is read only when the verdict is not in yet (a group call of every
        // local rank finds it in at once).
        let mut deadline = None;
        loop {
            if let Some(round) = state.rounds.get_mut(&call) {
                if let Some(verdict) = round.verdict.clone() {
                    round.unread -= 1;
                    if round.unread == 0 {
                        state.rounds.remove(&call);
                    }
                    return verdict;
                }
            }
            if let Some(failure) = &state.failure {
                return Err(failure.clone());
            }
            let deadline = *deadline.get_or_insert_with(|| deadline_after(timeout));
            if self.changed.wait_until(&mut state, deadline).timed_out() {
                return Err(self.missing(&state, call, rank, timeout));
            }
        }
    }

    /// The error of `rank` that gave up after `waited` on call `call` before every rank
    /// deposited it: names the ranks that never did, and refuses the call's gate so that
    /// the other ranks' launches end now rather than each at its own timeout.
    pub fn timed_out(&self, call: u64, rank: Rank, waited: Duration) -> Error {
        let (error, gate) = {
            let state = self.rounds.lock();
            let gate = state.rounds.get(&call).map(|r| r.gate.clone());
            (self.missing(&state, call, rank, waited), gate)
        };
        if let Some(gate) = gate {
            gate.decide(Err(Arc::new(error.clone())));
        }
        error
    }

    /// The timeout error of `rank` waiting for call `call`.
    fn missing(&self, state: &BoardState, call: u64, rank: Rank, waited: Duration) -> Error {
        let round = state.rounds.get(&call);
        let absent: Vec<Rank> = (0..self.ranks)
            .filter(|&r| round.is_none_or(|round| round.deposits[r].is_none()))
            .collect();
        let what = round
            .and_then(|round| round.deposits[rank].as_ref())
            .map_or_else(String::new, |d| match d {
                Deposit::Call(sig) => format!(" ({sig})"),
                Deposit::Refused(_) => String::new(),
            });
        Error::CallTimeout {
            call,
            rank,
            what,
            absent,
            waited,
        }
    }

    /// The communicator failed: wake every waiter with `error`, and answer every later
    /// wait with it.
    pub fn fail(&self, error: &Error) {
        self.rounds
            .lock()
            .failure
            .get_or_insert_with(|| error.clone());
        self.changed.notify_all();
    }
}

#[cfg(test)]
mod tests;
