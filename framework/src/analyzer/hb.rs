//! Happens-before queries over the canonical execution's task graph.
//!
//! The graph has an edge from each task to the next task of its stream, and from each
//! post to the wait that consumed it in the canonical execution (the lost-wakeup check
//! proves that pairing is the same in every interleaving); over a sequence of operations,
//! also the fence edges, through fence nodes that belong to no stream
//! ([`super::fence`]). `a` happens before `b` when a path leads from `a` to `b`.
//!
//! A query searches backwards from `b` over predecessors. Every edge goes from a lower to a
//! higher canonical execution index, so predecessors that ran before `a` cannot lead to
//! `a` and are pruned; and reaching any task of `a`'s own stream that ran at or after `a`
//! proves the path, because stream order does the rest. The search is best-first, latest
//! task first (a max-heap on the execution index): it stops at the latest ancestor of `b`
//! on `a`'s stream, having visited only the ancestors that ran after that one. So a query
//! costs what the tasks between `b` and its nearest link to `a`'s stream cost, not what
//! the distance between `a` and `b` costs: a ring's all-gather write that must follow a
//! reduce-scatter read a thousand steps earlier finds the neighbour's last handshake a
//! step back and stops there. Visited marks are epoch-stamped, so a query costs nothing
//! to reset.

use super::fence::Closure;
use super::index::{TaskId, NONE};
use super::schedule::Execution;
use std::collections::BinaryHeap;

/// A reusable happens-before oracle over the graph the canonical execution laid out by
/// position ([`Execution::preds`]), so a search touches memory written close together in
/// time.
pub(crate) struct Hb<'a> {
    ex: &'a Execution,
    mark: Vec<u32>,
    epoch: u32,
    heap: BinaryHeap<u32>,
    /// Over a sequence: the fences' own order of operations, answered without a search.
    closure: Option<&'a Closure>,
}

impl<'a> Hb<'a> {
    pub fn new(ex: &'a Execution) -> Self {
        Hb {
            ex,
            mark: vec![0; ex.order.len()],
            epoch: 0,
            heap: BinaryHeap::new(),
            closure: None,
        }
    }

    /// Answer queries across operations that the fences order by themselves at once.
    pub fn with_closure(self, closure: &'a Closure) -> Self {
        Hb {
            closure: Some(closure),
            ..self
        }
    }

    /// True when `a` happens before `b` (or is `b`). Both must have run.
    pub fn ordered(&mut self, a: TaskId, b: TaskId) -> bool {
        if a == b {
            return true;
        }
        match self.ex.exec[b as usize] {
            NONE => false,
            eb => self.ordered_at(a, eb),
        }
    }

    /// True when `a` happens before what immediately precedes `b` on its stream: the
    /// previous task, or for a stream's first task the fence it started after. False when
    /// nothing precedes `b`, or either has not run.
    pub fn ordered_before(&mut self, a: TaskId, b: TaskId) -> bool {
        match self.ex.exec[b as usize] {
            NONE => false,
            eb => match self.ex.preds[eb as usize][0] {
                NONE => false,
                p => self.ordered_at(a, p),
            },
        }
    }

    /// True when `a` happens before (or is) the node at position `eb`.
    fn ordered_at(&mut self, a: TaskId, eb: u32) -> bool {
        let ea = self.ex.exec[a as usize];
        if ea == NONE || ea > eb {
            return false;
        }
        let (sa, sb) = (
            self.ex.stream_at[ea as usize],
            self.ex.stream_at[eb as usize],
        );
        if sb == sa || self.closure.is_some_and(|c| c.orders(sa, sb)) {
            return true;
        }
        self.search(sa, ea, eb)
    }

    fn search(&mut self, sa: u32, ea: u32, eb: u32) -> bool {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.mark.fill(0);
            self.epoch = 1;
        }
        self.heap.clear();
        self.heap.push(eb);
        while let Some(x) = self.heap.pop() {
            for y in self.ex.preds[x as usize] {
                if y == NONE || y < ea || self.mark[y as usize] == self.epoch {
                    continue;
                }
                if self.ex.stream_at[y as usize] == sa {
                    return true;
                }
                self.mark[y as usize] = self.epoch;
                self.heap.push(y);
            }
        }
        false
    }
}
