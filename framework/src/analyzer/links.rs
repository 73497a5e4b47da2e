//! The link check: every cross-rank access goes over a link that exists, and every notify
//! a task names exists and may be used that way.
//!
//! A slice or a Post on another rank needs `Topology::link_kind` to name a link (it
//! answers `None` for a link that is broken or absent). Over a put-only link a task may
//! only write the peer's CclIn, CclOut or Scratch (see [`crate::link_access`]): a read of
//! any peer buffer, or a write of its user buffers, is reported with the link. Staged programs may not reach
//! another rank's user buffers, which only zero-copy devices expose. Waits are on the
//! rank's own notifies. Notify indices must lie in the owner's table: the link region,
//! whose notify for peer `p` only `p` posts, and the local region (fork/join and
//! executor-private notifies), which only the owner posts, up to the owner's requested
//! count ([`Recording::local_notifies`]).
//!
//! [`Recording::local_notifies`]: super::Recording::local_notifies

use super::bounds::show;
use super::index::{Index, TaskId};
use super::report::{Check, Collector};
use crate::executor::Mode;
use crate::link_access;
use oxccl_platform::{NotifyId, Rank, Task};

/// Run the link check over every task.
pub(crate) fn check(idx: &Index<'_>, out: &mut Collector) {
    for id in idx.ids() {
        let me = idx.loc(id).rank;
        match idx.task(id) {
            Task::Post { notify } => post(idx, id, me, *notify, out),
            Task::Wait { notify } => wait(idx, id, me, *notify, out),
            task => {
                put_only(idx, id, me, task, out);
                for s in task.reads().iter().chain(task.writes()) {
                    let broken = reach(idx, me, s.rank);
                    if let Some(why) = broken {
                        out.at(Check::Link, Some(idx.loc(id)), || {
                            format!("{} touches {}, but {why}", idx.describe(id), show(s))
                        });
                    } else if s.rank != me && s.buf.is_user() && idx.rec.mode == Mode::Staged {
                        out.at(Check::Link, Some(idx.loc(id)), || {
                            format!(
                                "{} touches {}, another rank's user buffer, which staged mode cannot reach",
                                idx.describe(id),
                                show(s)
                            )
                        });
                    }
                }
            }
        }
    }
}

/// Report every slice `task` reads, or every user buffer it writes, on a peer over a
/// put-only link (see [`crate::link_access`]), naming the task, the slice and the link.
fn put_only(idx: &Index<'_>, id: TaskId, me: Rank, task: &Task, out: &mut Collector) {
    let loc = idx.loc(id);
    for v in link_access::task_violations(&idx.rec.topology, me, loc.stream, loc.task, task) {
        out.at(Check::Link, Some(loc), || {
            format!(
                "{} {} {} over the put-only link {me}-{}: {}",
                idx.describe(id),
                if v.write { "writes" } else { "reads" },
                show(&v.slice),
                v.slice.rank,
                if v.write {
                    "a put-only link writes only the peer's CclIn, CclOut and Scratch"
                } else {
                    "a put-only link cannot read the peer's memory; let the peer put the \
                     data into this rank's CCL buffers or scratch instead"
                }
            )
        });
    }
}

/// Why `me` cannot reach `peer`, if it cannot.
fn reach(idx: &Index<'_>, me: Rank, peer: Rank) -> Option<String> {
    let n = idx.rec.rank_count();
    if peer >= n {
        return Some(format!(
            "rank {peer} does not exist (the communicator has {n} ranks)"
        ));
    }
    if peer == me || idx.rec.topology.link_kind(me, peer).is_some() {
        return None;
    }
    Some(format!(
        "the link between ranks {me} and {peer} is broken or does not exist"
    ))
}

fn post(idx: &Index<'_>, id: TaskId, me: Rank, n: NotifyId, out: &mut Collector) {
    if let Some(why) = reach(idx, me, n.rank) {
        out.at(Check::Link, Some(idx.loc(id)), || {
            format!(
                "{} posts notify {} of rank {}, but {why}",
                idx.describe(id),
                n.index,
                n.rank
            )
        });
        return;
    }
    if !exists(idx, id, n, out) {
        return;
    }
    let layout = idx.rec.layout;
    let problem = if n.index < layout.local_base() {
        let peer = n.index as usize / (layout.local_base() as usize / layout.ranks.max(1));
        if n.rank == me {
            Some("a link notify is posted by the peer it names, not by its owner".to_string())
        } else {
            (peer != me).then(|| format!("only rank {peer} may post it"))
        }
    } else {
        (n.rank != me).then(|| "a local notify is posted only by its owner".to_string())
    };
    if let Some(problem) = problem {
        out.at(Check::Link, Some(idx.loc(id)), || {
            format!(
                "{} posts {}: {problem}",
                idx.describe(id),
                idx.notify_name(n)
            )
        });
    }
}

fn wait(idx: &Index<'_>, id: TaskId, me: Rank, n: NotifyId, out: &mut Collector) {
    if n.rank != me {
        out.at(Check::Link, Some(idx.loc(id)), || {
            format!(
                "{} waits on notify {} of rank {}: a rank waits only on its own notifies",
                idx.describe(id),
                n.index,
                n.rank
            )
        });
        return;
    }
    exists(idx, id, n, out);
}

/// True when the notify is in its owner's table; reports it otherwise.
fn exists(idx: &Index<'_>, id: TaskId, n: NotifyId, out: &mut Collector) -> bool {
    if idx.notify_key(n).is_some() {
        return true;
    }
    out.at(Check::Link, Some(idx.loc(id)), || {
        let (base, local) = (idx.rec.layout.local_base(), idx.rec.local_notifies(n.rank));
        format!(
            "{} uses notify {} of rank {}, which does not exist: the table has {base} link \
             notifies and {local} local ones",
            idx.describe(id),
            n.index,
            n.rank
        )
    });
    false
}
