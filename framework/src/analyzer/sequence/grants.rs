//! The grant rule: a task of rank `B` that touches a buffer of rank `A` or posts one of
//! `A`'s notifies needs `B` among `A`'s granted peers (or `A`'s fence does not wait for
//! `B`, and `A`'s next operation may reuse the memory while `B` still uses it) and `A`
//! among `B`'s (or `B`'s fence does not wait for `A`). Reported once per task and rank.

use super::super::bounds::show;
use super::super::index::{Index, TaskId};
use super::super::report::{Check, Collector};
use super::fences::Grants;
use oxccl_platform::{NotifyId, Rank, Slice, Task};

/// What a task does to another rank's notify or memory (described only when reported).
#[derive(Copy, Clone)]
enum Touch<'t> {
    Posts(NotifyId),
    Reads(&'t Slice),
    Writes(&'t Slice),
}

impl Touch<'_> {
    fn owner(&self) -> Rank {
        match self {
            Touch::Posts(n) => n.rank,
            Touch::Reads(s) | Touch::Writes(s) => s.rank,
        }
    }

    fn describe(&self, idx: &Index<'_>) -> String {
        match self {
            Touch::Posts(n) => format!("posts {}", idx.notify_name(*n)),
            Touch::Reads(s) => format!("reads {}", show(s)),
            Touch::Writes(s) => format!("writes {}", show(s)),
        }
    }
}

/// Run the grant rule over every task of every operation.
pub(super) fn check(idx: &Index<'_>, grants: &Grants, out: &mut Collector) {
    let n = idx.rec.rank_count();
    let (mut touches, mut seen): (Vec<Touch<'_>>, Vec<Rank>) = (Vec::new(), Vec::new());
    for id in idx.ids() {
        let (g, me) = (&grants[idx.op_of(id)], idx.loc(id).rank);
        let task = idx.task(id);
        touches.clear();
        match task {
            Task::Post { notify } => touches.push(Touch::Posts(*notify)),
            Task::Wait { .. } => {}
            task => touches.extend(
                task.reads()
                    .iter()
                    .map(Touch::Reads)
                    .chain(task.writes().iter().map(Touch::Writes)),
            ),
        }
        seen.clear();
        for &touch in &touches {
            let owner = touch.owner();
            if owner == me || owner >= n || seen.contains(&owner) {
                continue;
            }
            seen.push(owner);
            let missing = if g[owner].binary_search(&me).is_err() {
                Some((owner, me))
            } else if g[me].binary_search(&owner).is_err() {
                Some((me, owner))
            } else {
                None
            };
            if let Some((granter, missing)) = missing {
                report(idx, out, id, touch, granter, missing);
            }
        }
    }
}

/// `id` touches another rank, but `missing` is not among `granter`'s granted peers.
fn report(
    idx: &Index<'_>,
    out: &mut Collector,
    id: TaskId,
    touch: Touch<'_>,
    granter: Rank,
    missing: Rank,
) {
    out.at(Check::Grant, Some(idx.loc(id)), || {
        format!(
            "{} {}, but rank {missing} is not among rank {granter}'s granted peers in this \
             operation: its fence does not wait for rank {missing}, so the operations before \
             and after it are not ordered with this task; request the link \
             (ResourceRequest::peers)",
            idx.describe(id),
            touch.describe(idx)
        )
    });
}
