//! Recordings as they looked without the former per-operation Close exchange.
//!
//! Before the device's epoch fence, every program ended with a two-phase Close exchange
//! with every linked peer, on a link signal of its own. [`without_close`] removes those
//! tasks (Post and Wait on link notifies that [`NotifyLayout::describe`] names as Close),
//! so the sequence checks could prove the executors safe under the fence alone. The
//! platform has no Close signal any more and the planner appends no such tasks, so it now
//! finds nothing to remove: a recording comes back unchanged, and the checks that run
//! "as recorded and without Close" run the same programs twice.

use super::super::recording::Recording;
use oxccl_platform::{NotifyId, NotifyLayout, Task};
use std::sync::Arc;

/// True when `n` is a link notify carrying the (former) Close signal: never, now that
/// [`NotifyLayout::describe`] names no Close.
fn is_close(layout: &NotifyLayout, n: NotifyId, cache: &mut Vec<Option<bool>>) -> bool {
    let i = n.index as usize;
    if n.index >= layout.local_base() {
        return false;
    }
    if cache.len() <= i {
        cache.resize(i + 1, None);
    }
    *cache[i].get_or_insert_with(|| layout.describe(n).contains("(Close from"))
}

/// `rec` with every Close task removed from every stream (today: `rec` unchanged).
pub fn without_close(rec: &Recording) -> Recording {
    let mut out = rec.clone();
    let mut cache = Vec::new();
    for rank in &mut out.ranks {
        let mut program = (*rank.program).clone();
        for stream in &mut program.streams {
            stream.tasks.retain(|t| match t {
                Task::Post { notify } | Task::Wait { notify } => {
                    !is_close(&rec.layout, *notify, &mut cache)
                }
                _ => true,
            });
        }
        rank.program = Arc::new(program);
    }
    out
}
