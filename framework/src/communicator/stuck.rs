//! A wait that timed out: which task should have posted what it waited for.
//!
//! The notify names its poster (a link notify's peer, or the waiting rank itself for a
//! local one). Every rank plans a call the same way from the same inputs (the call
//! agreement and the selection digest rest on it), so the waiting rank plans the poster's
//! program for the same call itself and looks for its Posts of the notify: the error then
//! says "rank 1 stream 0 task 4 should have posted it" or "no task of rank 1 posts it",
//! which tells a stuck peer from an executor that never posts. Only on the failure path.

use super::Communicator;
use crate::error::ExpectedPost;
use crate::op::{OpKind, OpParam};
use crate::planner;
use oxccl_platform::{NotifyId, RankProgram, Task, TaskLocation};

impl Communicator {
    /// Who should have posted `notify` in this rank's call `op` (`in_place`: the form
    /// called).
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
        let Ok(prepared) = self.prepare_valid(op, in_place) else {
            return ExpectedPost::Unknown;
        };
        if poster == self.rank {
            return posts_of(&prepared.program, notify);
        }
        if matches!(op.kind, OpKind::AlltoAllV | OpKind::SendRecv) {
            return ExpectedPost::OwnArguments { rank: poster };
        }
        let entry = prepared.selection.executor;
        let executor = entry.instantiate();
        let setting = self.setting(in_place);
        let ctx = setting.ctx(poster, op);
        match planner::plan(entry.name, executor.as_ref(), &ctx, layout) {
            Ok(planned) => posts_of(&planned.program, notify),
            Err(_) => ExpectedPost::Unknown,
        }
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
