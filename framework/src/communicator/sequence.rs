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
//! finished step `k` — with no return to the calling thread in between.
//!
//! A step with no work (count 0) takes no call number and reaches no device: every rank
//! captured it alike (the capture is agreed when it is compiled), so every rank skips it.

use super::{Communicator, Prepared, Shared};
use crate::agreement::{Deposit, Signature};
use crate::error::Error;
use crate::op::OpParam;
use oxccl_platform::{Submission, UserBuffers};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

/// One call of a sequence, prepared for one rank.
#[derive(Clone, Debug)]
pub struct Step {
    op: OpParam,
    in_place: bool,
    /// Bytes of the (input, output) bindings the step was prepared for (input `None`
    /// in place).
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
        self.in_place
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

    /// Check that `user` binds what the step was prepared for: the same form and
    /// byte lengths. `index` names the step in the error.
    pub fn check_binding(&self, index: usize, user: &UserBuffers<'_>) -> Result<(), Error> {
        let bound = match user.lens() {
            (_, output) if user.is_in_place() => (None, output),
            (input, output) => (Some(input), output),
        };
        if user.is_in_place() != self.in_place {
            let form = |in_place| if in_place { "in place" } else { "out of place" };
            return Err(Error::GraphBinding {
                step: index,
                reason: format!(
                    "was captured {} but is bound {}",
                    form(self.in_place),
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
    /// Prepare `op` as one step of a sequence, for bindings of `lens` bytes ((input,
    /// output); input `None` in place): validated as a call with such buffers would be,
    /// then selected, planned and compiled. The step is the caller's; the program cache
    /// is neither read nor filled.
    pub fn prepare_step(
        &self,
        op: &OpParam,
        lens: (Option<usize>, usize),
    ) -> Result<Step, Error> {
        let (input, output) = lens;
        op.validate(self.rank, self.size(), input, output)?;
        let in_place = input.is_none();
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
            in_place,
            lens,
            prepared,
            group: Arc::downgrade(&self.group),
        })
    }

    /// Run `steps` in order with `users` bound (one per step, each checked against its
    /// step), as consecutive calls of this rank; blocks until every step is done. Every
    /// rank of the communicator runs the same steps (see the module docs). The first
    /// error of a step is returned; a step after a failed one ends without running when
    /// the failure stopped the communicator.
    pub fn run_sequence(&self, steps: &[Step], users: Vec<UserBuffers<'_>>) -> Result<(), Error> {
        if steps.len() != users.len() {
            return Err(Error::GraphBinding {
                step: steps.len().min(users.len()),
                reason: format!(
                    "is missing: {} steps were captured and {} bound",
                    steps.len(),
                    users.len()
                ),
            });
        }
        for (index, (step, user)) in steps.iter().zip(&users).enumerate() {
            self.check_step(index, step)?;
            step.check_binding(index, user)?;
        }
        if let Some(cause) = self.group.failure.lock().clone() {
            return Err(Error::Aborted { cause });
        }
        let _claim = self.claim()?;
        let runs: Vec<_> = steps
            .iter()
            .zip(users)
            .filter_map(|(step, user)| Some((step, step.prepared.as_ref()?, user)))
            .collect();
        let first = self.calls.fetch_add(runs.len() as u64, Ordering::Relaxed);
        let mut submissions = Vec::with_capacity(runs.len());
        let mut settles = Vec::with_capacity(runs.len());
        for (call, (step, prepared, user)) in (first..).zip(runs) {
            let gate = self.group.config.check_calls.then(|| {
                let deposit = Deposit::Call(step.signature.clone());
                self.group.board.deposit(call, self.rank, deposit)
            });
            submissions.push(Submission {
                compiled: prepared.compiled.clone(),
                user,
                epoch: super::group_call::epoch_of(call),
                gate,
            });
            let what = (step.op.clone(), step.in_place);
            settles.push((call, prepared.selection.executor.name, what));
        }
        let device = &self.group.device;
        let outcomes = match device.capabilities().queued_submissions {
            true => device.run(submissions),
            false => submissions
                .into_iter()
                .flat_map(|s| device.run(vec![s]))
                .collect(),
        };
        let mut result = Ok(());
        for ((call, executor, what), outcome) in settles.into_iter().zip(outcomes) {
            let settled = self.settle(call, (Some(executor), Some(&what)), outcome);
            if result.is_ok() {
                result = settled;
            }
        }
        result
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
