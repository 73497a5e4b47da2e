//! The lost-wakeup check: no post can find its notify still set, in any interleaving.
//!
//! A notify is binary: a second post before the wait that resets it is lost. Watching the
//! canonical execution is not enough, since another interleaving may post earlier. The
//! check instead proves, per notify, over the posts `p1, p2, ...` in canonical order and
//! the waits `w1, w2, ...` that consumed them there:
//!
//! 1. every post is consumed (`wk` exists), so nothing is left set at the end;
//! 2. `p(k+1)` happens after `wk`;
//! 3. `wk` happens before the stream predecessor of `w(k+1)` (for a stream's first task,
//!    the fence it starts after), so two waits never race for one post.
//!
//! Happens-before (HB) is stream order plus the canonical post-to-wait edges. **Why this
//! is sound.** Take any interleaving, and the first event in it where a wait consumes a
//! post other than its canonical one, or a post finds its notify set. Before that event,
//! every executed wait consumed its canonical post, so every HB path ending at an executed
//! task consists of edges the interleaving respected: all its tasks ran before. If the
//! event is `p(k+1)`, condition 2 says `wk` ran before it, hence (inductively, by 2) all of
//! `p1..pk` and `w1..wk` ran, in alternation, and no later post of this notify could have
//! run (each needs the wait before it): the notify is clear. If the event is `w(k+1)`, its
//! stream predecessor ran, so by 3 all of `w1..wk` ran, and by 2 no post after `p(k+1)`
//! did: the notify, if set, is set by `p(k+1)`. Either way the event is not a violation,
//! so none exists: every interleaving pairs posts and waits exactly as the canonical one,
//! HB is a valid happens-before order in all of them, and the memory-conflict and
//! semantics checks, which reason along HB, hold for all of them too. Progress follows the
//! same way: a wait blocked forever in some interleaving would be blocked in the canonical
//! one, which the deadlock check reports.
//!
//! The check is linear: one pass over the canonical order, keeping the last post of each
//! notify, with one or two HB queries per post.

use super::hb::Hb;
use super::index::{Index, TaskId, NONE};
use super::report::{Check, Collector};
use super::schedule::{Execution, Step};
use oxccl_platform::Task;

/// Run the lost-wakeup check.
pub(crate) fn check(idx: &Index<'_>, ex: &Execution, hb: &mut Hb<'_>, out: &mut Collector) {
    let mut last_post = vec![NONE; idx.notify_keys()];
    for (&id, step) in ex.order.iter().zip(&ex.step) {
        let Step::Post(key) = *step else {
            continue;
        };
        let prev = std::mem::replace(&mut last_post[key as usize], id);
        if prev != NONE {
            follows(idx, ex, hb, prev, id, out);
        }
    }
    for &p in last_post.iter().filter(|&&p| p != NONE) {
        if ex.partner[p as usize] == NONE {
            out.at(Check::LostWakeup, Some(idx.loc(p)), || {
                format!(
                    "{} posts {}, and no wait ever consumes it: the notify is left set for the next operation",
                    idx.describe(p),
                    notify_of(idx, p)
                )
            });
        }
    }
}

/// Check that post `next` safely follows post `prev` on the same notify.
fn follows(
    idx: &Index<'_>,
    ex: &Execution,
    hb: &mut Hb<'_>,
    prev: TaskId,
    next: TaskId,
    out: &mut Collector,
) {
    let wait = ex.partner[prev as usize];
    if wait == NONE {
        out.at(Check::LostWakeup, Some(idx.loc(next)), || {
            format!(
                "lost wakeup: {} posts {} while the earlier post by {} is still set (no wait consumed it)",
                idx.describe(next),
                notify_of(idx, next),
                idx.describe(prev)
            )
        });
        return;
    }
    if !hb.ordered(wait, next) {
        out.at(Check::LostWakeup, Some(idx.loc(next)), || {
            format!(
                "lost wakeup: {} posts {} without being ordered after {}, which consumes the \
                 previous post by {}: in some interleaving the notify is still set",
                idx.describe(next),
                notify_of(idx, next),
                idx.describe(wait),
                idx.describe(prev)
            )
        });
        return;
    }
    let next_wait = ex.partner[next as usize];
    if next_wait == NONE {
        return;
    }
    if !hb.ordered_before(wait, next_wait) {
        out.at(Check::LostWakeup, Some(idx.loc(next_wait)), || {
            format!(
                "waits race on {}: {} is not ordered after {}, so it may consume the post by {} meant for the other",
                notify_of(idx, next),
                idx.describe(next_wait),
                idx.describe(wait),
                idx.describe(prev)
            )
        });
    }
}

fn notify_of(idx: &Index<'_>, post: TaskId) -> String {
    match idx.task(post) {
        Task::Post { notify } | Task::Wait { notify } => idx.notify_name(*notify),
        _ => String::new(),
    }
}
