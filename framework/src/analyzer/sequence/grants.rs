//! The grant rule: a task of rank `B` that touches a buffer of rank `A` or posts one of
//! `A`'s notifies needs `B` among `A`'s granted peers (or `A`'s fence does not wait for
//! `B`, and `A`'s next operation may reuse the memory while `B` still uses it) and `A`
//! among `B`'s (or `B`'s fence does not wait for `A`). Reported once per task and rank.

use super::super::index::{Index, TaskId};
use super::super::report::{Check, Collector};
use super::fences::granted;
use oxccl_platform::{Rank, Task};

/// Run the grant rule over every task of every operation.
pub(super) fn check(idx: &Index<'_>, out: &mut Collector) {
    let n = idx.rec.rank_count();
    let grants: Vec<Vec<Vec<Rank>>> = idx
        .recs
        .iter()
        .map(|rec| (0..n).map(|r| granted(rec, r)).collect())
        .collect();
    let mut touched: Vec<(Rank, String)> = Vec::new();
    for id in idx.ids() {
        let (op, me) = (idx.op_of(id), idx.loc(id).rank);
        touched.clear();
        match idx.task(id) {
            Task::Post { notify } => {
                touched.push((notify.rank, format!("posts {}", idx.notify_name(*notify))))
            }
            Task::Wait { .. } => {}
            task => {
                let reads = task.reads().iter().map(|s| ("reads", s));
                for (verb, s) in reads.chain(task.writes().iter().map(|s| ("writes", s))) {
                    touched.push((
                        s.rank,
                        format!(
                            "{verb} rank {} {:?}[{}..{}]",
                            s.rank,
                            s.buf,
                            s.offset,
                            s.offset.saturating_add(s.len)
                        ),
                    ));
                }
            }
        }
        let g = &grants[op];
        let mut seen: Vec<Rank> = Vec::new();
        for (owner, what) in &touched {
            let owner = *owner;
            if owner == me || owner >= n || seen.contains(&owner) {
                continue;
            }
            seen.push(owner);
            if g[owner].binary_search(&me).is_err() {
                report(
                    idx,
                    out,
                    id,
                    what,
                    owner,
                    me,
                    "its fence does not wait for rank",
                );
            } else if g[me].binary_search(&owner).is_err() {
                report(
                    idx,
                    out,
                    id,
                    what,
                    me,
                    owner,
                    "its fence does not wait for rank",
                );
            }
        }
    }
}

/// `id` touches `owner`... but `missing` is not among `granter`'s granted peers.
fn report(
    idx: &Index<'_>,
    out: &mut Collector,
    id: TaskId,
    what: &str,
    granter: Rank,
    missing: Rank,
    why: &str,
) {
    out.at(Check::Grant, Some(idx.loc(id)), || {
        format!(
            "{} {what}, but rank {missing} is not among rank {granter}'s granted peers in this \
             operation: {why} {missing}, so the operations before and after it are not ordered \
             with this task; request the link (ResourceRequest::peers)",
            idx.describe(id)
        )
    });
}
