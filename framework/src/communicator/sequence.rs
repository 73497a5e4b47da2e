//! Sequences of calls prepared once and run many times: the framework's side of graph
//! mode (the `oxccl-graph` adapter captures, agrees and rebinds; this runs).
//!
//! A [`Step`] is one call prepared the way an eager call is (select_alg, planning, the
//! device's compile) but owned by its caller, not by the communicator's program cache,
//! so a cache eviction never touches it. [`Communicator::run_sequence`] runs a whole
//! sequence as consecutive calls of the rank: each step takes the next call number (so
//! graph launches and eager calls interleave on the same epochs), deposits its
//! signature on the agreement board when calls are checked, and every step goes to the
//! device in one submission when the device queues a rank's submissions
//! ([`oxccl_platform::Capabilities::queued_submissions`]): the steps are then ordered by
//! the epoch fence alone — step `k + 1` of a rank starts once the rank and its fence peers
//! finished step `k` — with no return to the calling thread in between — or when it
//! takes whole sequences ([`oxccl_platform::Capabilities::whole_sequences`]: the cuda
//! backend replays them as CUDA graphs, else runs them step by step itself).
//!
//! A step with no work (count 0) takes no call number and reaches no device: every rank
//! captured it alike (the capture is agreed when it is compiled), so every rank skips it.

use super::group_call::Agreement;
use super::{Communicator, Prepared, Shared};
use crate::agreement::{Deposit, Signature};
use crate::error::Error;
use crate::op::OpParam;
use oxccl_platform::{Submission, UserBuffers};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

/// One call bound to a step at launch: its operator and buffers.
pub type Bound<'a> = (OpParam, UserBuffers<'a>);

/// One call of a sequence, prepared for one rank.
#[derive(Clone, Debug)]
pub struct Step {
    op: OpParam,
    /// Bytes of the (input, output) bindings the step was prepared for (input `None`
    /// in place, so it also says the form).
    lens: (Option<usize>, usize),
    /// `None` when the call has no work.
    prepared: Option<Prepared>,
    signature: Signature,
    /// The communicator it was prepared on (a `Weak` keeps the allocation, so the
    /// address is never another communicator's).
    group: Weak<Shared>,
}

impl Step {
    /// The operator.
    pub fn op(&self) -> &OpParam {
        &self.op
    }

    /// Whether the step was prepared for in-place bindings.
    pub fn in_place(&self) -> bool {
        self.lens.0.is_none()
    }

    /// The byte lengths of the (input, output) it binds; input `None` in place.
    pub fn lens(&self) -> (Option<usize>, usize) {
        self.lens
    }

    /// The executor that runs it, `None` when it has no work.
    pub fn executor(&self) -> Option<&'static str> {
        self.prepared.as_ref().map(|p| p.selection.executor.name)
    }

    /// The prepared program, `None` when it has no work.
    pub fn prepared(&self) -> Option<&Prepared> {
        self.prepared.as_ref()
    }

    /// Check that `op` with `user` bound is the call the step was prepared for: the same
    /// operator and arguments, form and byte lengths. `index` names the step in the
    /// error.
    pub fn check_binding(
        &self,
        index: usize,
        op: &OpParam,
        user: &UserBuffers<'_>,
    ) -> Result<(), Error> {
        if *op != self.op {
            return Err(Error::GraphBinding {
                step: index,
                reason: format!(
                    "was captured as {} and is bound as {}",
                    Signature::new(self.signature.rank, &self.op, None),
                    Signature::new(self.signature.rank, op, None)
                ),
            });
        }
        let bound = user.lens_by_form();
        if user.is_in_place() != self.in_place() {
            let form = |in_place| if in_place { "in place" } else { "out of place" };
            return Err(Error::GraphBinding {
                step: index,
                reason: format!(
                    "was captured {} but is bound {}",
                    form(self.in_place()),
                    form(user.is_in_place())
                ),
            });
        }
        if bound != self.lens {
            return Err(Error::GraphBinding {
                step: index,
                reason: format!(
                    "was captured with {} but is bound with {}",
                    describe_lens(self.lens),
                    describe_lens(bound)
                ),
            });
        }
        Ok(())
    }
}

fn describe_lens((input, output): (Option<usize>, usize)) -> String {
    match input {
        Some(input) => format!("a {input}-byte input and a {output}-byte output"),
        None => format!("a {output}-byte buffer"),
    }
}

impl Communicator {
    /// Check `op` as a call with bindings of `lens` bytes ((input, output); input `None`
    /// in place) would be checked, without preparing anything.
    pub fn validate_step(&self, op: &OpParam, lens: (Option<usize>, usize)) -> Result<(), Error> {
        self.usable()?;
        Ok(op.validate(self.rank, self.size(), lens.0, lens.1)?)
    }

    /// Prepare `op` as one step of a sequence, for bindings of `lens` bytes ((input,
    /// output); input `None` in place): validated as a call with such buffers would be,
    /// then selected, planned and compiled. The step is the caller's; the program cache
    /// is neither read nor filled.
    pub fn prepare_step(&self, op: &OpParam, lens: (Option<usize>, usize)) -> Result<Step, Error> {
        self.validate_step(op, lens)?;
        let in_place = lens.0.is_none();
        let prepared = match op.has_work() {
            true => Some(self.build(op, in_place)?),
            false => None,
        };
        let executor = prepared.as_ref().map(|p| p.selection.executor.name);
        let scratch = prepared
            .as_ref()
            .map(|p| p.scratch_use.clone())
            .unwrap_or_default();
        Ok(Step {
            signature: Signature::new(self.rank, op, executor).with_scratch(scratch),
            op: op.clone(),
            lens,
            prepared,
            group: Arc::downgrade(&self.group),
        })
    }

    /// Run `steps` in order with `users` bound (one per step, each checked against its
    /// step), as consecutive calls of this rank; blocks until every step is done. Every
    /// rank of the communicator runs the same steps (see the module docs). The first
    /// error of a step is returned.
    pub fn run_sequence(&self, steps: &[Step], users: Vec<Bound<'_>>) -> Result<(), Error> {
        Self::run_sequences(vec![(self, steps, users)])
            .pop()
            .expect("one result per sequence")
    }

    /// Several ranks' sequences from one thread (a group launch: the ranks' steps go to
    /// the device together, as a group call's do). One result per entry, in order; all
    /// communicators must come from the same `init_all` (else every entry is refused).
    ///
    /// A sequence whose bindings do not fit its steps is refused on its rank before
    /// anything runs there, and still counts as its calls — one per step with work, as
    /// every launch of it does — so the ranks stay in step: with the call agreement the
    /// other ranks learn of the refusal at once ([`Error::PeerRefused`]); without it the
    /// communicator is stopped, so no peer waits out the timeout for the refused rank.
    pub fn run_sequences(
        runs: Vec<(&Communicator, &[Step], Vec<Bound<'_>>)>,
    ) -> Vec<Result<(), Error>> {
        let Some(group) = runs.first().map(|r| r.0.group.clone()) else {
            return Vec::new();
        };
        if let Some((stranger, ..)) = runs.iter().find(|r| !Arc::ptr_eq(&r.0.group, &group)) {
            let err = super::group_call::mixed_group(stranger);
            return runs.iter().map(|_| Err(err.clone())).collect();
        }
        let mut claims = Vec::with_capacity(runs.len());
        let mut results: Vec<Result<(), Error>> = Vec::with_capacity(runs.len());
        let mut bound = Vec::with_capacity(runs.len());
        for (slot, (comm, steps, users)) in runs.into_iter().enumerate() {
            match comm.claim() {
                Ok(claim) => claims.push(claim),
                Err(err) => {
                    results.push(Err(err));
                    continue;
                }
            }
            results.push(Ok(()));
            bound.push((slot, comm, steps, comm.bind_sequence(steps, users)));
        }
        let agreement = agreed_here(&group, &bound);
        let mut queued: Vec<Queued<'_, '_, '_>> = Vec::new();
        for (slot, comm, steps, runs) in bound {
            match runs {
                Ok(runs) => queued.extend(comm.queue(slot, runs, agreement)),
                Err(err) => results[slot] = Err(comm.refuse_sequence(steps, err)),
            }
        }
        run_queued(&group, queued, &mut results);
        drop(claims);
        results
    }

    /// `users` checked against `steps`: the steps with work and their buffers.
    fn bind_sequence<'s, 'a>(
        &self,
        steps: &'s [Step],
        users: Vec<Bound<'a>>,
    ) -> Result<Vec<(&'s Step, UserBuffers<'a>)>, Error> {
        self.usable()?;
        if steps.len() != users.len() {
            return Err(Error::GraphBinding {
                step: steps.len().min(users.len()),
                reason: format!(
                    "does not match: {} steps were captured and {} calls bound; bind one \
                     call per step",
                    steps.len(),
                    users.len()
                ),
            });
        }
        for (index, (step, (op, user))) in steps.iter().zip(&users).enumerate() {
            self.check_step(index, step)?;
            step.check_binding(index, op, user)?;
        }
        Ok(steps
            .iter()
            .zip(users)
            .filter(|(step, _)| step.prepared.is_some())
            .map(|(step, (_, user))| (step, user))
            .collect())
    }

    /// Number the steps as consecutive calls and deposit their signatures; each becomes
    /// a submission waiting on its call's gate.
    fn queue<'c, 's, 'a>(
        &'c self,
        slot: usize,
        runs: Vec<(&'s Step, UserBuffers<'a>)>,
        agreement: Agreement,
    ) -> Vec<Queued<'c, 's, 'a>> {
        let first = self.calls.fetch_add(runs.len() as u64, Ordering::Relaxed);
        (first..)
            .zip(runs)
            .map(|(call, (step, user))| {
                let prepared = step.prepared.as_ref().expect("steps with work");
                let gate = (agreement == Agreement::Board).then(|| {
                    let deposit = Deposit::Call(step.signature.clone());
                    self.group.board.deposit(call, self.rank, deposit)
                });
                Queued {
                    slot,
                    comm: self,
                    call,
                    agreement,
                    executor: prepared.selection.executor.name,
                    step,
                    submission: Submission {
                        compiled: prepared.compiled.clone(),
                        user,
                        epoch: super::group_call::epoch_of(call),
                        gate,
                    },
                }
            })
            .collect()
    }

    /// A sequence refused on this rank: it still consumes one call per step with work
    /// (see [`Communicator::run_sequences`]); returns `err`.
    fn refuse_sequence(&self, steps: &[Step], err: Error) -> Error {
        let calls = steps.iter().filter(|s| s.prepared.is_some()).count() as u64;
        let first = self.calls.fetch_add(calls, Ordering::Relaxed);
        let reason = crate::error::with_causes(&err);
        for call in first..first + calls {
            if self.group.config.check_calls {
                let refusal = Deposit::Refused(reason.clone());
                self.group.board.deposit(call, self.rank, refusal);
            }
            let epoch = super::group_call::epoch_of(call);
            if let Err(retired) = self.group.device.retire(self.rank, epoch) {
                return retired.into();
            }
        }
        if !self.group.config.check_calls && calls > 0 {
            self.stop_everywhere(oxccl_platform::AbortCause::CallFailed {
                rank: self.rank,
                reason,
            });
        }
        err
    }

    /// `step` was prepared by this rank of this communicator.
    fn check_step(&self, index: usize, step: &Step) -> Result<(), Error> {
        let here = step.group.as_ptr() == Arc::as_ptr(&self.group);
        if here && step.signature.rank == self.rank {
            return Ok(());
        }
        let which = if here { "this" } else { "another" };
        Err(Error::GraphBinding {
            step: index,
            reason: format!(
                "was compiled for rank {} of {which} communicator and is launched on rank {}; \
                 launch a graph on the communicator rank that compiled it",
                step.signature.rank, self.rank
            ),
        })
    }
}

/// One step of a sequence, numbered and ready for the device.
struct Queued<'c, 's, 'a> {
    /// The sequence's entry in the group launch.
    slot: usize,
    comm: &'c Communicator,
    call: u64,
    agreement: Agreement,
    executor: &'static str,
    step: &'s Step,
    submission: Submission<'a>,
}

/// Hand every queued step to the device — all at once when it queues a rank's
/// submissions or takes whole sequences, else the `k`-th step of every sequence together,
/// step by step — and settle each; a sequence's result is its first error.
fn run_queued(group: &Shared, queued: Vec<Queued<'_, '_, '_>>, results: &mut [Result<(), Error>]) {
    let device = &group.device;
    let capabilities = device.capabilities();
    let waves: Vec<Vec<Queued<'_, '_, '_>>> = if capabilities.queued_submissions
        || capabilities.whole_sequences
    {
        vec![queued]
    } else {
        let slots: Vec<usize> = queued.iter().map(|q| q.slot).collect();
        let mut pending: Vec<Option<Queued<'_, '_, '_>>> = queued.into_iter().map(Some).collect();
        oxccl_platform::device::waves(&slots)
            .into_iter()
            .map(|wave| wave.into_iter().filter_map(|i| pending[i].take()).collect())
            .collect()
    };
    for wave in waves {
        let mut submissions = Vec::with_capacity(wave.len());
        let mut settles = Vec::with_capacity(wave.len());
        for q in wave {
            submissions.push(q.submission);
            settles.push((q.slot, q.comm, (q.call, q.agreement), q.executor, q.step));
        }
        let outcomes = device.run_sequence_group(submissions);
        for ((slot, comm, (call, agreement), executor, step), outcome) in
            settles.into_iter().zip(outcomes)
        {
            let what = (Some(executor), Some((&step.op, step.in_place())));
            let settled = comm.settle_agreed(call, what, outcome, agreement);
            if results[slot].is_ok() {
                results[slot] = settled;
            }
        }
    }
}

/// How a group launch's calls are agreed: on the board, as every call's are; here, when
/// the launch holds the calls of every rank of the communicator, each bound, all at the
/// same call number, and the steps agree as the board would decide (the comparison it
/// makes, without its lock, rounds and gates); or not at all without the agreement.
#[allow(clippy::type_complexity)]
fn agreed_here(
    group: &Shared,
    bound: &[(
        usize,
        &Communicator,
        &[Step],
        Result<Vec<(&Step, UserBuffers<'_>)>, Error>,
    )],
) -> Agreement {
    if !group.config.check_calls {
        return Agreement::None;
    }
    let ranks = group.topology.ranks();
    let mut seen = vec![false; ranks];
    let mut runs = Vec::with_capacity(bound.len());
    for (_, comm, _, run) in bound {
        let Ok(run) = run else {
            return Agreement::Board;
        };
        if std::mem::replace(&mut seen[comm.rank], true) {
            return Agreement::Board;
        }
        runs.push((comm, run));
    }
    if runs.len() != ranks {
        return Agreement::Board;
    }
    let first = runs[0].0.calls.load(Ordering::Relaxed);
    let steps = runs[0].1.len();
    if runs
        .iter()
        .any(|(c, r)| c.calls.load(Ordering::Relaxed) != first || r.len() != steps)
    {
        return Agreement::Board;
    }
    runs.sort_by_key(|(comm, _)| comm.rank);
    for k in 0..steps {
        let deposits: Vec<Option<Deposit>> = runs
            .iter()
            .map(|(_, r)| Some(Deposit::Call(r[k].0.signature.clone())))
            .collect();
        if crate::agreement::verdict_of(first + k as u64, &deposits).is_err() {
            // The board decides it again and tells every rank.
            return Agreement::Board;
        }
    }
    Agreement::Local
}
