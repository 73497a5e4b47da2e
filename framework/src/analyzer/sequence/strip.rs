//! Recordings as they look without the per-operation Close exchange.
//!
//! Until the device's epoch fence replaces it, the orchestration ends every program with a
//! Close exchange with every linked peer. [`without_close`] removes those tasks (Post and
//! Wait on link notifies that [`NotifyLayout::describe`] names as Close), so the sequence
//! checks can prove today's executors safe under the fence alone. Once Close is gone from
//! the platform it finds nothing to remove.

use super::super::recording::Recording;
use oxccl_platform::{NotifyId, NotifyLayout, Task};
use std::sync::Arc;

/// True when `n` is a link notify carrying the Close signal.
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

/// `rec` with every Close task removed from every stream.
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
