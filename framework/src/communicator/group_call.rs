//! One call of one or several ranks, from the calling thread to the device and back.
//!
//! For each rank's call: claim the rank (a second thread's call is refused, the
//! communicator untouched), number the call, validate and prepare it, and deposit its
//! signature (or its refusal) on the agreement board ([`crate::agreement`]). Every
//! compiled program then goes to the device at once as a submission of the call's epoch
//! (the call number plus one), each waiting on its call's gate; the device starts it when
//! every rank agreed (and its fence peers finished the previous epoch), or ends it
//! untouched when they did not, and the error each rank gets is the board's verdict. A
//! call that runs nothing on a rank (count 0, refused before it was described, failed
//! validation) still retires its epoch on the device, so no peer waits for it.

use super::{Communicator, Ready, ScratchUse, Shared};
use crate::agreement::{Deposit, Signature};
use crate::error::{with_causes, ConfigError, Error, ExpectedPost};
use crate::op::OpParam;
use oxccl_platform::{AbortCause, DeviceError, Submission, UserBuffers};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Clears a rank's busy flag when its call ends, on every path.
pub(super) struct BusyClaim<'a>(&'a AtomicBool);

impl Drop for BusyClaim<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// One rank's numbered call, before it runs.
struct Announced<'c, 'a> {
    comm: &'c Communicator,
    call: u64,
    run: Result<Option<Ready<'a>>, Error>,
    /// The executor that runs it (`None`: nothing to run, or refused).
    executor: Option<&'static str>,
    /// What it runs and in which form (in place or not), to name the task that should
    /// have posted a wait that timed out ([`Communicator::expected_post`]).
    what: Option<(OpParam, bool)>,
}

/// One rank's part of a group call.
pub enum GroupCall<'c, 'a> {
    /// Run `op` on this rank with these buffers.
    Run(&'c Communicator, OpParam, UserBuffers<'a>),
    /// A call its caller refused before it could be described (typed buffers that fit no
    /// block shape, say). It still counts as this rank's call, so that the other ranks
    /// learn why at once and every rank stays in step.
    Refused(&'c Communicator, Error),
}

impl<'c> GroupCall<'c, '_> {
    fn comm(&self) -> &'c Communicator {
        match self {
            GroupCall::Run(comm, ..) | GroupCall::Refused(comm, _) => comm,
        }
    }
}

impl Communicator {
    /// Run several ranks' collectives from one thread (NCCL's group call): every entry is
    /// validated and prepared, the ranks agree on each call ([`crate::agreement`]), then
    /// all run at once on their shared device. Returns one result per entry, in order.
    /// All communicators must come from the same `init_all`; a group that mixes
    /// communicators is refused whole, before any rank runs.
    pub fn execute_group(
        calls: Vec<(&Communicator, OpParam, UserBuffers<'_>)>,
    ) -> Vec<Result<(), Error>> {
        let calls = calls
            .into_iter()
            .map(|(comm, op, user)| GroupCall::Run(comm, op, user))
            .collect();
        Self::execute_calls(calls)
    }

    /// [`Communicator::execute_group`] with calls refused by their caller among them.
    pub fn execute_calls(calls: Vec<GroupCall<'_, '_>>) -> Vec<Result<(), Error>> {
        let Some(group) = calls.first().map(|c| c.comm().group.clone()) else {
            return Vec::new();
        };
        if let Some(stranger) = calls.iter().find(|c| !Arc::ptr_eq(&c.comm().group, &group)) {
            let err = mixed_group(stranger.comm());
            return calls.iter().map(|_| Err(err.clone())).collect();
        }
        let mut claims: Vec<BusyClaim<'_>> = Vec::with_capacity(calls.len());
        let mut results: Vec<Result<(), Error>> = Vec::with_capacity(calls.len());
        let mut announced = Vec::with_capacity(calls.len());
        for call in calls {
            let comm = call.comm();
            match comm.claim() {
                Ok(claim) => claims.push(claim),
                Err(err) => {
                    results.push(Err(err));
                    continue;
                }
            }
            let a = match call {
                GroupCall::Run(_, op, user) => comm.announce(op, user),
                GroupCall::Refused(_, err) => comm.announce_refused(err),
            };
            announced.push((results.len(), a));
            results.push(Ok(()));
        }
        run_announced(&group, announced, &mut results);
        drop(claims);
        results
    }

    /// Mark this rank busy for one call, or refuse the call (without touching the
    /// communicator) when another thread's call runs.
    pub(super) fn claim(&self) -> Result<BusyClaim<'_>, Error> {
        if self.busy.swap(true, Ordering::Acquire) {
            return Err(Error::Busy { rank: self.rank });
        }
        Ok(BusyClaim(&self.busy))
    }

    /// Number the call, validate and prepare it, and deposit its signature (or its
    /// refusal) on the agreement board; the execution waits on the call's gate.
    /// `op` is kept (moved, not copied) for a timeout's diagnosis.
    fn announce<'c, 'a>(&'c self, op: OpParam, user: UserBuffers<'a>) -> Announced<'c, 'a> {
        let call = self.calls.fetch_add(1, Ordering::Relaxed);
        let in_place = user.is_in_place();
        let mut run = self.checked_execution(&op, user);
        let (executor, scratch) = match &run {
            Ok(Some((_, name, scratch))) => (Some(*name), scratch.clone()),
            _ => (None, ScratchUse::default()),
        };
        if self.group.config.check_calls {
            let deposit = match &run {
                Ok(_) => {
                    Deposit::Call(Signature::new(self.rank, &op, executor).with_scratch(scratch))
                }
                Err(err) => Deposit::Refused(with_causes(err)),
            };
            let gate = self.group.board.deposit(call, self.rank, deposit);
            if let Ok(Some((ready, _, _))) = &mut run {
                ready.gate = Some(gate);
            }
        }
        Announced {
            comm: self,
            call,
            run: run.map(|prepared| prepared.map(|(e, _, _)| e)),
            executor,
            what: executor.map(|_| (op, in_place)),
        }
    }

    /// Number a call its caller refused and deposit the refusal.
    fn announce_refused<'c>(&'c self, err: Error) -> Announced<'c, 'static> {
        let call = self.calls.fetch_add(1, Ordering::Relaxed);
        if self.group.config.check_calls {
            let refusal = Deposit::Refused(with_causes(&err));
            self.group.board.deposit(call, self.rank, refusal);
        }
        Announced {
            comm: self,
            call,
            run: Err(err),
            executor: None,
            what: None,
        }
    }

    /// This rank's result of call `call`, run by `executor`, from what the device
    /// reported.
    ///
    /// A Wait that timed out in a call every rank agreed on (same collective, arguments
    /// and executor: the agreement checked) cannot be a missing or mismatched peer call:
    /// the executor's programs never post what they wait for, and the error says so
    /// ([`Error::ExecutorStuck`]). Without the agreement the device's own timeout stands,
    /// which asks to check the calls first ([`Error::WaitNeverPosted`]). Both name the
    /// task that should have posted ([`Communicator::expected_post`]).
    pub(super) fn settle(
        &self,
        call: u64,
        what: (Option<&'static str>, Option<(&OpParam, bool)>),
        outcome: Result<(), DeviceError>,
    ) -> Result<(), Error> {
        let agreement = match self.group.config.check_calls {
            true => Agreement::Board,
            false => Agreement::None,
        };
        self.settle_agreed(call, what, outcome, agreement)
    }

    /// [`Communicator::settle`] for a call agreed as `agreement` says.
    pub(super) fn settle_agreed(
        &self,
        call: u64,
        (executor, what): (Option<&'static str>, Option<(&OpParam, bool)>),
        outcome: Result<(), DeviceError>,
        agreement: Agreement,
    ) -> Result<(), Error> {
        let expected = |notify| {
            Box::new(match what {
                Some((op, in_place)) => self.expected_post(op, in_place, notify),
                None => ExpectedPost::Unknown,
            })
        };
        let board = &self.group.board;
        let checked = agreement == Agreement::Board;
        let agreed = agreement != Agreement::None;
        let err = match outcome {
            // The gate opened: read the (favourable) verdict so the round can go.
            Ok(()) if checked => return board.verdict(call, self.rank, Default::default()),
            Ok(()) => return Ok(()),
            // Refused before it started: the verdict says why, and nothing ran.
            Err(DeviceError::Refused { .. }) if checked => {
                return board.verdict(call, self.rank, Default::default());
            }
            Err(DeviceError::GateTimeout { waited, .. }) if checked => {
                board.timed_out(call, self.rank, waited)
            }
            Err(err @ DeviceError::WaitTimeout { notify, .. }) if agreed => Error::ExecutorStuck {
                call,
                executor: executor.unwrap_or("none"),
                expected: expected(notify),
                cause: err,
            },
            Err(err @ DeviceError::WaitTimeout { notify, .. }) => Error::WaitNeverPosted {
                call,
                expected: expected(notify),
                cause: err,
            },
            Err(err) => Error::Device(err),
        };
        self.group.fail_on(self.rank, &err);
        Err(err)
    }

    /// The verdict on a call that launched nothing (count 0), which the rank waits for
    /// itself.
    fn verdict_without_launch(&self, call: u64) -> Result<(), Error> {
        if !self.group.config.check_calls {
            return Ok(());
        }
        let timeout = self.group.config.exec_timeout;
        let verdict = self.group.board.verdict(call, self.rank, timeout);
        if let Err(err @ Error::CallTimeout { .. }) = &verdict {
            self.group.fail_on(self.rank, err);
        }
        verdict
    }
}

/// How the ranks agreed on a call before it ran.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Agreement {
    /// On the board: the call waited on its gate, and its verdict is read there.
    Board,
    /// By the caller, who held every rank's call at once (a group launch of every rank
    /// of the communicator): nothing to read.
    Local,
    /// Not at all (`OXCCL_CHECK_CALLS=0`, or across processes).
    None,
}

/// The device epoch of call number `call` (epoch 0 means "nothing done yet").
pub(super) fn epoch_of(call: u64) -> u64 {
    call + 1
}

/// Hand every announced call to the device at once; fill in each call's result.
fn run_announced(
    group: &Shared,
    announced: Vec<(usize, Announced<'_, '_>)>,
    results: &mut [Result<(), Error>],
) {
    let mut submissions = Vec::with_capacity(announced.len());
    let mut launched = Vec::with_capacity(announced.len());
    let mut idle = Vec::new();
    for (slot, a) in announced {
        let epoch = epoch_of(a.call);
        let run = match a.run {
            Ok(Some(ready)) => {
                submissions.push(Submission {
                    compiled: ready.compiled,
                    user: ready.user,
                    epoch,
                    gate: ready.gate,
                });
                launched.push((slot, a.comm, a.call, (a.executor, a.what)));
                continue;
            }
            Ok(None) => Ok(()),
            Err(err) => Err(err),
        };
        // Nothing runs on this rank for this call: its epoch is over.
        let retired = group.device.retire(a.comm.rank, epoch);
        match (run, retired) {
            (Err(err), _) => {
                // Without the agreement no peer learns of the refusal, and peers'
                // launches may already wait for this rank's tasks: stop them now.
                if !group.config.check_calls {
                    a.comm.stop_everywhere(AbortCause::CallFailed {
                        rank: a.comm.rank,
                        reason: with_causes(&err),
                    });
                }
                results[slot] = Err(err)
            }
            (Ok(()), Err(err)) => results[slot] = Err(err.into()),
            (Ok(()), Ok(())) => idle.push((slot, a.comm, a.call)),
        }
    }
    let outcomes = group.device.run(submissions);
    for ((slot, comm, call, (executor, what)), outcome) in launched.into_iter().zip(outcomes) {
        let what = what.as_ref().map(|(op, in_place)| (op, *in_place));
        results[slot] = comm.settle(call, (executor, what), outcome);
    }
    for (slot, comm, call) in idle {
        results[slot] = comm.verdict_without_launch(call);
    }
}

pub(super) fn mixed_group(stranger: &Communicator) -> Error {
    ConfigError {
        var: "group call",
        value: format!("rank {}", stranger.rank),
        reason: "all communicators of a group call must come from the same init_all; \
                 nothing was run"
            .into(),
        source: None,
    }
    .into()
}
