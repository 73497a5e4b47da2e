//! Put delivery: a write over a put-only link has landed only once its target has waited
//! for a post the writer sent after it.
//!
//! A device completes a put when the bytes are on their way, not when they are in the
//! peer's memory: the TCP transport when they are in the socket's buffer, RDMA when the
//! send queue took them. What orders their landing is the link itself: a post from the
//! writer to the target, issued after the put, travels behind it over the same link (the
//! host device's TCP connection; an RC queue pair), so when the target's wait for that
//! post returns, the put has landed. Happens-before through any other path proves
//! nothing: if rank `a` puts into rank `t`'s CclIn, then posts rank `c`, which posts `t`,
//! `t`'s wait for `c` may return while `a`'s bytes are still in flight.
//!
//! So a task that touches bytes a put of another rank wrote, and happens after that put,
//! must also happen after the target's wait for a post of the writer to the target that
//! the put happens before. The writer's own later tasks need nothing (its puts to one
//! peer travel in order). The memory-conflict check asks this of every kept put it finds
//! ordered before a later access ([`Delivery::landed`]).

use super::hb::Hb;
use super::index::{Index, TaskId, NONE};
use super::schedule::{Execution, Step};
use oxccl_platform::{LinkAccess, Rank, Task};
use std::collections::HashMap;

/// Every post a rank sent another over a put-only link, by (writer, target), in the order
/// of the canonical execution (position, task).
pub(crate) struct Delivery {
    /// The topology has a put-only link: without one, every write lands when it is done
    /// and [`Delivery::landed`] answers at once.
    puts: bool,
    posts: HashMap<(Rank, Rank), Vec<(u32, TaskId)>>,
}

impl Delivery {
    pub fn new(idx: &Index<'_>, ex: &Execution) -> Self {
        let mut posts: HashMap<(Rank, Rank), Vec<(u32, TaskId)>> = HashMap::new();
        let topology = &idx.rec.topology;
        let puts = !topology.all_load_store();
        let steps = ex.order.iter().zip(&ex.step).enumerate();
        for (pos, (&t, step)) in steps.filter(|_| puts) {
            if !matches!(step, Step::Post(_)) {
                continue;
            }
            let Task::Post { notify } = idx.task(t) else {
                continue;
            };
            let from = idx.loc(t).rank;
            if notify.rank != from
                && topology.link_access(from, notify.rank) == Some(LinkAccess::Put)
            {
                posts
                    .entry((from, notify.rank))
                    .or_default()
                    .push((pos as u32, t));
            }
        }
        Delivery { puts, posts }
    }

    /// Whether `put` (a task of another rank that wrote rank `owner`'s memory) has landed
    /// before `t`, which happens after it: `put` is local, over a load/store link, of
    /// `t`'s own rank, or followed by a post of its rank to `owner` whose wait happens
    /// before `t`.
    pub fn landed(
        &self,
        idx: &Index<'_>,
        ex: &Execution,
        hb: &mut Hb<'_>,
        put: TaskId,
        t: TaskId,
        owner: Rank,
    ) -> bool {
        if !self.puts {
            return true;
        }
        let writer = idx.loc(put).rank;
        if writer == owner || writer == idx.loc(t).rank {
            return true;
        }
        if idx.rec.topology.link_access(writer, owner) != Some(LinkAccess::Put) {
            return true;
        }
        let Some(posts) = self.posts.get(&(writer, owner)) else {
            return false;
        };
        let (from, until) = (ex.exec[put as usize], ex.exec[t as usize]);
        let start = posts.partition_point(|&(pos, _)| pos <= from);
        posts[start..]
            .iter()
            .take_while(|&&(pos, _)| pos < until)
            .any(|&(_, post)| {
                let wait = ex.partner[post as usize];
                wait != NONE && hb.ordered(put, post) && hb.ordered(wait, t)
            })
    }
}
