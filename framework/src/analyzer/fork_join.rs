//! The fork/join check: slave streams start from and end into the main stream.
//!
//! A slave stream (index 1 and up) must begin with a Wait on a local notify of its rank
//! that the main stream posts (the fork), and end with a Post to a local notify that the
//! main stream waits on (the join). Shape is not enough: the main stream must also
//! continue only after the slave, so the slave's last task has to happen before the main
//! stream's last task; a slave that never joins is reported even if it ends with some
//! post. Empty slave streams are allowed (an executor may request more than it uses).

use super::hb::Hb;
use super::index::{Index, StreamInfo, TaskId};
use super::report::{Check, Collector};
use super::schedule::Execution;
use oxccl_platform::{NotifyId, Task};
use std::collections::HashSet;

/// Run the fork/join check on every slave stream.
pub(crate) fn check(idx: &Index<'_>, ex: &Execution, hb: &mut Hb<'_>, out: &mut Collector) {
    let mut main: Option<Main> = None;
    for info in &idx.streams {
        if info.stream == 0 {
            let has_slaves = idx.rec.ranks[info.rank].program.streams.len() > 1;
            main = has_slaves.then(|| Main::new(idx, *info));
            continue;
        }
        let Some(main) = main.as_ref().filter(|m| m.info.rank == info.rank) else {
            continue;
        };
        if info.len > 0 {
            slave(idx, ex, hb, main, info, out);
        }
    }
}

/// A rank's main stream and the notifies it posts and waits on.
struct Main {
    info: StreamInfo,
    posts: HashSet<NotifyId>,
    waits: HashSet<NotifyId>,
}

impl Main {
    fn new(idx: &Index<'_>, info: StreamInfo) -> Self {
        let (mut posts, mut waits) = (HashSet::new(), HashSet::new());
        for id in info.first..info.first + info.len {
            match idx.task(id) {
                Task::Post { notify } => posts.insert(*notify),
                Task::Wait { notify } => waits.insert(*notify),
                _ => false,
            };
        }
        Main { info, posts, waits }
    }
}

fn slave(
    idx: &Index<'_>,
    ex: &Execution,
    hb: &mut Hb<'_>,
    main: &Main,
    info: &StreamInfo,
    out: &mut Collector,
) {
    let (first, last) = (info.first, info.first + info.len - 1);
    let is_local = |n: &NotifyId| n.rank == info.rank && n.index >= idx.rec.layout.local_base();
    let forked = match idx.task(first) {
        Task::Wait { notify } => is_local(notify) && main.posts.contains(notify),
        _ => false,
    };
    if !forked {
        out.at(Check::ForkJoin, Some(idx.loc(first)), || {
            format!(
                "slave stream {} of rank {} does not fork from the main stream: its first task, {}, \
                 is not a Wait on a local notify that stream 0 posts",
                info.stream,
                info.rank,
                idx.describe(first)
            )
        });
    }
    let joins = match idx.task(last) {
        Task::Post { notify } => is_local(notify) && main.waits.contains(notify),
        _ => false,
    };
    let main = &main.info;
    let main_last = main.first + main.len.max(1) - 1;
    let ordered = main.len > 0 && ex.ran(last) && ex.ran(main_last) && hb.ordered(last, main_last);
    if !joins || (ex.ran(last) && ex.ran(main_last) && !ordered) {
        out.at(Check::ForkJoin, Some(idx.loc(last)), || {
            never_joins(idx, info, last, joins)
        });
    }
}

fn never_joins(idx: &Index<'_>, info: &StreamInfo, last: TaskId, shaped: bool) -> String {
    let why = if shaped {
        "the main stream can finish before it".to_string()
    } else {
        format!(
            "its last task, {}, is not a Post to a local notify that stream 0 waits on",
            idx.describe(last)
        )
    };
    format!(
        "slave stream {} of rank {} never joins the main stream: {why}",
        info.stream, info.rank
    )
}
