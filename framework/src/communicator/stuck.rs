//! A wait that timed out: which task should have posted what it waited for.
//!
//! The notify names its poster (a link notify's peer, or the waiting rank itself for a
//! local one). Every rank plans a call the same way from the same inputs (the call
//! agreement and the selection digest rest on it), so the waiting rank plans the poster's
//! program for the same call itself and looks for its Posts of the notify: the error then
//! says "rank 1 stream 0 task 4 should have posted it" or "no task of rank 1 posts it",
//! which tells a stuck peer from an executor that never posts. Only on the failure path.
//!
//! What a rank does not know is the form its peer called in: ranks may call in place or
//! not independently (as in NCCL), neither the agreement nor the device carries the form,
//! and a form may change the program (an out-of-place call copies its input first, so
//! its Posts move). So a peer is planned in both forms; where they disagree, both answers
//! are given, each under its form.

use super::Communicator;
use crate::error::ExpectedPost;
use crate::op::{OpKind, OpParam};
use crate::planner;
use oxccl_platform::{NotifyId, Rank, RankProgram, Task, TaskLocation};

impl Communicator {
    /// Who should have posted `notify` in this rank's call `op` (`in_place`: the form
    /// this rank called).
    pub(crate) fn expected_post(
        &self,
        op: &OpParam,
        in_place: bool,
        notify: NotifyId,
    ) -> ExpectedPost {
        let layout = self.group.device.config().layout();
        let Some(poster) = layout.poster(notify) else {
            return ExpectedPost::Unknown;
        };
        if poster == self.rank {
            return match self.prepare_valid(op, in_place) {
                Ok(prepared) => posts_of(&prepared.program, notify),
                Err(_) => ExpectedPost::Unknown,
            };
        }
        if matches!(op.kind, OpKind::AlltoAllV | OpKind::SendRecv) {
            return ExpectedPost::OwnArguments { rank: poster };
        }
        let in_place_posts = self.peer_posts(op, true, poster, notify);
        let out_of_place_posts = self.peer_posts(op, false, poster, notify);
        match (in_place_posts, out_of_place_posts) {
            (Some(a), Some(b)) if a == b => a,
            (Some(in_place), Some(out_of_place)) => ExpectedPost::ByForm {
                in_place: Box::new(in_place),
                out_of_place: Box::new(out_of_place),
            },
            (Some(one), None) | (None, Some(one)) => one,
            (None, None) => ExpectedPost::Unknown,
        }
    }

    /// The Posts of `notify` in `poster`'s program for `op` called in the form
    /// `in_place`, selected and planned here; `None` when that form cannot be planned.
    fn peer_posts(
        &self,
        op: &OpParam,
        in_place: bool,
        poster: Rank,
        notify: NotifyId,
    ) -> Option<ExpectedPost> {
        let layout = self.group.device.config().layout();
        let entry = self.select_valid(op, in_place).ok()?.executor;
        let executor = entry.instantiate();
        // The executor's own mode, as the poster planned it (see `planner::executor_mode`).
        let setting = self.setting(in_place).for_links(entry.constraints.links);
        let ctx = setting.ctx(poster, op);
        let planned = planner::plan(entry.name, executor.as_ref(), &ctx, layout).ok()?;
        Some(posts_of(&planned.program, notify))
    }
}

/// The tasks of `program` that post `notify`.
fn posts_of(program: &RankProgram, notify: NotifyId) -> ExpectedPost {
    let mut tasks = Vec::new();
    for (stream, s) in program.streams.iter().enumerate() {
        for (task, t) in s.tasks.iter().enumerate() {
            if matches!(t, Task::Post { notify: n } if *n == notify) {
                tasks.push(TaskLocation {
                    rank: program.rank,
                    stream,
                    task,
                });
            }
        }
    }
    match tasks.is_empty() {
        true => ExpectedPost::Nobody { rank: program.rank },
        false => ExpectedPost::Tasks(tasks),
    }
}
