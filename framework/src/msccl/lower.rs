//! Lowering one rank's steps to tasks: a step's dependency wait, its message's data
//! signal or credit, its copy or reduction through [`Geometry`], its signal and credit
//! back, the dependency posts; and the credits a threadblock still awaits at its end.

use super::executor::{Imported, SlotPlan};
use super::geometry::{Geometry, Loc};
use super::model::{Step, StepKind};
use super::wiring::End;
use crate::error::Error;
use crate::executor::KernelCtx;
use oxccl_platform::Task;

/// Lowering one rank's steps.
pub(super) struct Lower<'a> {
    pub(super) imp: &'a Imported,
    pub(super) plan: &'a SlotPlan,
    pub(super) geometry: &'a Geometry<'a>,
}

impl Lower<'_> {
    /// Link channel and landing slot (a scratch chunk on the receiver) of message `end`.
    fn slot(&self, end: End) -> (usize, usize) {
        let c = &self.imp.wiring.connections[end.conn];
        let j = end.k % self.plan.slots;
        // Both below the file's bounds (channels, link channels, scratch positions).
        (
            c.chan * self.plan.slots + j,
            self.plan.landing[end.conn].saturating_add(j * c.max_cnt),
        )
    }

    pub(super) fn step(&self, ctx: &mut KernelCtx<'_>, t: usize, s: usize) -> Result<(), Error> {
        let rank = ctx.rank;
        let step = &self.imp.algo.gpus[rank].tbs[t].steps[s];
        if let Some(&e) = self.plan.edges.waits.get(&(t, s)) {
            let notify = ctx.notify(e);
            ctx.stream(t).wait(notify);
        }
        let wiring = &self.imp.wiring;
        let recv = wiring.recvs.get(&(rank, t, s)).copied();
        let send = wiring.sends.get(&(rank, t, s)).copied();
        let mut landing = None;
        let mut from_link = None;
        if let Some(end) = recv {
            let (channel, chunk) = self.slot(end);
            let link = ctx.link(wiring.connections[end.conn].from, channel)?;
            link.rx_data_signal(ctx.stream(t));
            landing = Some(Loc::Scratch(rank, chunk));
            from_link = Some(link);
        }
        let mut remote = None;
        let mut to_link = None;
        if let Some(end) = send {
            let c = &wiring.connections[end.conn];
            let (channel, chunk) = self.slot(end);
            let link = ctx.link(c.to, channel)?;
            if end.k >= self.plan.slots {
                link.rx_ack(ctx.stream(t));
            }
            remote = Some(Loc::Scratch(c.to, chunk));
            to_link = Some(link);
        }
        self.data(ctx, t, step, landing, remote);
        if let Some(link) = from_link {
            link.tx_ack(ctx.stream(t));
        }
        if let Some(link) = to_link {
            link.tx_data_signal(ctx.stream(t));
        }
        for &e in self.plan.edges.posts.get(&(t, s)).into_iter().flatten() {
            let notify = ctx.notify(e);
            ctx.stream(t).post(notify);
        }
        Ok(())
    }

    /// The step's copy or reduction, from and to the locations it names.
    fn data(
        &self,
        ctx: &mut KernelCtx<'_>,
        t: usize,
        step: &Step,
        landing: Option<Loc>,
        remote: Option<Loc>,
    ) {
        let src = self.geometry.local(step.src);
        let dst = self.geometry.local(step.dst);
        // (sources, destinations); a reduction has two sources.
        let (srcs, dsts): (Vec<Loc>, Vec<Loc>) = match step.kind {
            StepKind::Nop => return,
            StepKind::Send => (vec![src], remote.into_iter().collect()),
            StepKind::Recv => (landing.into_iter().collect(), vec![dst]),
            StepKind::RecvCopySend => (
                landing.into_iter().collect(),
                std::iter::once(dst).chain(remote).collect(),
            ),
            StepKind::RecvReduceSend => (
                landing.into_iter().chain([src]).collect(),
                remote.into_iter().collect(),
            ),
            StepKind::RecvReduceCopy => (landing.into_iter().chain([src]).collect(), vec![dst]),
            StepKind::RecvReduceCopySend => (
                landing.into_iter().chain([src]).collect(),
                std::iter::once(dst).chain(remote).collect(),
            ),
            StepKind::Copy => (vec![src], vec![dst]),
            StepKind::Reduce => (vec![dst, src], vec![dst]),
        };
        // Copying chunks onto themselves (an in-place file's `cpy` of its input into its
        // place in the output, when they are one buffer) moves nothing.
        let dsts: Vec<Loc> = match srcs[..] {
            [one] => dsts
                .into_iter()
                .filter(|&d| !self.geometry.same(one, d))
                .collect(),
            _ => dsts,
        };
        if dsts.is_empty() {
            return;
        }
        let locs: Vec<Loc> = srcs.iter().chain(&dsts).copied().collect();
        let (dtype, op) = (self.geometry.args.op.dtype, self.geometry.args.op.op);
        for run in self.geometry.runs(&locs, step.cnt) {
            let (from, to) = run.split_at(srcs.len());
            let task = match from {
                [one] => Task::Copy {
                    src: *one,
                    dsts: to.to_vec(),
                },
                _ => Task::Reduce {
                    srcs: from.to_vec(),
                    dsts: to.to_vec(),
                    dtype,
                    op,
                },
            };
            ctx.stream(t).tasks.push(task);
        }
    }

    /// The credits still owed to threadblock `t`'s sends: waited before it ends.
    pub(super) fn drain(&self, ctx: &mut KernelCtx<'_>, t: usize) -> Result<(), Error> {
        for (conn, c) in self.imp.wiring.connections.iter().enumerate() {
            if c.from != ctx.rank || c.send_tb != t {
                continue;
            }
            let total = c.messages.len();
            for k in total.saturating_sub(self.plan.slots)..total {
                let (channel, _) = self.slot(End { conn, k });
                let link = ctx.link(c.to, channel)?;
                link.rx_ack(ctx.stream(t));
            }
        }
        Ok(())
    }
}
