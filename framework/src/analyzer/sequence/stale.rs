//! Waits that consume a post an earlier operation left set: the wait returns before its
//! own operation's post, so what it guards (data landed, buffer free) does not hold.

use super::super::index::{Index, NONE};
use super::super::report::{Check, Collector};
use super::super::schedule::{Execution, Step};
use oxccl_platform::Task;

/// Report every wait whose canonical post belongs to another operation.
pub(super) fn check(idx: &Index<'_>, ex: &Execution, out: &mut Collector) {
    for (&w, step) in ex.order.iter().zip(&ex.step) {
        if !matches!(step, Step::Wait(_)) {
            continue;
        }
        let p = ex.partner[w as usize];
        if p == NONE || idx.op_of(p) == idx.op_of(w) {
            continue;
        }
        out.at(Check::LostWakeup, Some(idx.loc(w)), || {
            let notify = match idx.task(w) {
                Task::Wait { notify } => idx.notify_name(*notify),
                _ => String::new(),
            };
            format!(
                "{} consumes the post by {} on {notify}, which operation {} left set: the wait \
                 returns before its own operation posts",
                idx.describe(w),
                idx.describe(p),
                idx.op_of(p)
            )
        });
    }
}
