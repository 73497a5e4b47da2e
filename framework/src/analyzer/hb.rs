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
//!
//! Latest-first alone still visits every ancestor of `b` that ran after its latest
//! ancestor on `a`'s stream, and that can be a whole cluster's worth: a slave stream that
//! joined its main stream long ago, a peer whose last signal arrived many steps back,
//! while the main stream has heard from every rank since. So each query also asks the
//! *direct-edge index* ([`Direct`]): for every stream `c`, its waits grouped by the stream
//! whose post they consumed, with the latest such post so far. The first node the search
//! pops on a stream `c` is `b`'s latest ancestor there (positions only decrease), and if
//! some wait of `c` at or before it consumed a post of `a`'s stream at or after `a`, the
//! path `a -> post -> wait -> ... -> b` exists: the query ends after a binary search,
//! without walking the history in between. The index only finds paths, so answers are
//! those of the plain search; what it saves is the walk. Its lookups start where the same
//! group's last one ended and gallop from there ([`count_upto`]): the passes walk the
//! execution in order, so that is usually a few entries away, where a binary search over
//! a long group missed the cache at every step.

use super::fence::Closure;
use super::index::{TaskId, NONE};
use super::schedule::{Execution, Step, FENCE_STREAM};
use std::collections::BinaryHeap;

/// A reusable happens-before oracle over the graph the canonical execution laid out by
/// position ([`Execution::preds`]), so a search touches memory written close together in
/// time.
pub(crate) struct Hb<'a> {
    ex: &'a Execution,
    mark: Vec<u32>,
    epoch: u32,
    heap: BinaryHeap<u32>,
    /// Streams the current search has popped a node of (epoch-stamped like `mark`).
    stream_seen: Vec<u32>,
    direct: Direct,
    /// Over a sequence: the fences' own order of operations, answered without a search.
    closure: Option<&'a Closure>,
}

impl<'a> Hb<'a> {
    pub fn new(ex: &'a Execution) -> Self {
        let direct = Direct::new(ex);
        Hb {
            ex,
            mark: vec![0; ex.order.len()],
            epoch: 0,
            heap: BinaryHeap::new(),
            stream_seen: vec![0; direct.streams()],
            direct,
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
            self.stream_seen.fill(0);
            self.epoch = 1;
        }
        self.heap.clear();
        self.heap.push(eb);
        while let Some(x) = self.heap.pop() {
            let c = self.ex.stream_at[x as usize];
            if c != FENCE_STREAM && self.stream_seen[c as usize] != self.epoch {
                // The first pop on `c` is `b`'s latest ancestor there.
                self.stream_seen[c as usize] = self.epoch;
                if self.direct.latest_post(c, sa, x).is_some_and(|p| p >= ea) {
                    return true;
                }
            }
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

/// The direct-edge index: every stream's waits, grouped by the stream that posted what
/// each consumed, in stream order, with the latest such post up to each wait.
struct Direct {
    /// Per consumer stream, its groups: `groups[group_of[c]..group_of[c + 1]]`, sorted
    /// by poster.
    group_of: Vec<u32>,
    /// (poster stream, first entry); a group's entries end where the next group's start.
    groups: Vec<(u32, u32)>,
    /// (wait position, latest post position among the group's waits up to this one).
    entries: Vec<(u32, u32)>,
    /// Per group, where its last lookup ended: queries come in roughly increasing
    /// position (the passes walk the execution in order), so a lookup starts there and
    /// moves a few entries instead of binary-searching the whole run.
    cursor: Vec<u32>,
}

impl Direct {
    fn new(ex: &Execution) -> Self {
        let streams = ex.streams();
        // Waits that consumed a post, bucketed by consumer stream (counting sort, so each
        // bucket stays in position order).
        let consumed = |x: usize| match ex.step[x] {
            Step::Wait(_) => match ex.preds[x][1] {
                NONE => None,
                p => Some((ex.stream_at[x], ex.stream_at[p as usize], p)),
            },
            _ => None,
        };
        let mut start = vec![0u32; streams + 1];
        for x in 0..ex.step.len() {
            if let Some((c, _, _)) = consumed(x) {
                start[c as usize + 1] += 1;
            }
        }
        for c in 0..streams {
            start[c + 1] += start[c];
        }
        let mut fill = start.clone();
        // (poster, wait position, post position)
        let mut all = vec![(0u32, 0u32, 0u32); start[streams] as usize];
        for x in 0..ex.step.len() {
            if let Some((c, poster, p)) = consumed(x) {
                all[fill[c as usize] as usize] = (poster, x as u32, p);
                fill[c as usize] += 1;
            }
        }
        let mut group_of = Vec::with_capacity(streams + 1);
        let mut groups = Vec::new();
        let mut entries = Vec::with_capacity(all.len());
        for c in 0..streams {
            group_of.push(groups.len() as u32);
            let bucket = &mut all[start[c] as usize..start[c + 1] as usize];
            // Stable: each poster's waits stay in position order.
            bucket.sort_by_key(|e| e.0);
            let mut prev = None;
            let mut latest = 0;
            for &(poster, x, p) in bucket.iter() {
                if prev != Some(poster) {
                    groups.push((poster, entries.len() as u32));
                    prev = Some(poster);
                    latest = p;
                }
                latest = latest.max(p);
                entries.push((x, latest));
            }
        }
        group_of.push(groups.len() as u32);
        let cursor = groups.iter().map(|g| g.1).collect();
        Direct {
            group_of,
            groups,
            entries,
            cursor,
        }
    }

    fn streams(&self) -> usize {
        self.group_of.len() - 1
    }

    /// The latest position of a post of stream `poster` consumed by a wait of stream `c`
    /// at or before position `x`.
    fn latest_post(&mut self, c: u32, poster: u32, x: u32) -> Option<u32> {
        let (lo, hi) = (
            self.group_of[c as usize] as usize,
            self.group_of[c as usize + 1] as usize,
        );
        let g = lo
            + self.groups[lo..hi]
                .binary_search_by_key(&poster, |g| g.0)
                .ok()?;
        let first = self.groups[g].1 as usize;
        let end = match self.groups.get(g + 1) {
            Some(next) => next.1 as usize,
            None => self.entries.len(),
        };
        let run = &self.entries[first..end];
        let upto = count_upto(run, self.cursor[g] as usize - first, x);
        self.cursor[g] = (first + upto) as u32;
        upto.checked_sub(1).map(|i| run[i].1)
    }
}

/// The number of entries of `run` (sorted by position) at or before position `x`, found
/// by galloping from `hint` (the previous answer) towards it and binary-searching the
/// bracket: `O(log d)` for an answer `d` entries away from the hint.
fn count_upto(run: &[(u32, u32)], hint: usize, x: u32) -> usize {
    let at = hint.min(run.len());
    if at < run.len() && run[at].0 <= x {
        // Entries before `low` are at or before `x`.
        let (mut low, mut step) = (at + 1, 1);
        while low + step <= run.len() && run[low + step - 1].0 <= x {
            low += step;
            step *= 2;
        }
        let high = (low + step).min(run.len());
        low + run[low..high].partition_point(|e| e.0 <= x)
    } else {
        // Entries from `high` on are after `x`.
        let (mut high, mut step) = (at, 1);
        while high >= step && run[high - step].0 > x {
            high -= step;
            step *= 2;
        }
        let low = high.saturating_sub(step);
        low + run[low..high].partition_point(|e| e.0 <= x)
    }
}

#[cfg(test)]
mod tests {
    use super::count_upto;

    #[test]
    fn galloping_from_any_hint_agrees_with_a_binary_search() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        for len in [0usize, 1, 2, 3, 7, 64, 1000] {
            let mut pos = 0u32;
            let run: Vec<(u32, u32)> = (0..len)
                .map(|_| {
                    pos += 1 + next(5) as u32;
                    (pos, 0)
                })
                .collect();
            for _ in 0..500 {
                let x = next(u64::from(pos) + 10) as u32;
                let hint = next(len as u64 + 3) as usize;
                let want = run.partition_point(|e| e.0 <= x);
                assert_eq!(
                    count_upto(&run, hint, x),
                    want,
                    "len {len} hint {hint} x {x}"
                );
            }
        }
    }
}
