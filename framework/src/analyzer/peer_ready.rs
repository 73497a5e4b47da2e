//! The peer-ready check: a task touches a peer's user buffers only after that peer has
//! entered the operation.
//!
//! In [`Mode::Direct`] a task of rank `a` may read rank `b`'s `Input` or read and write its
//! `Output` over a load/store link. Those buffers are the call's own: a device binds them
//! when `b` submits its call for this epoch and withdraws them when `b`'s call ends (the
//! host device's `peer_user` refuses a task that comes earlier with `Unbound`, or with
//! `OtherEpoch` while `b` still has its previous call bound). Nothing in the epoch fence
//! waits for `b` to *enter* a call; only the program can say so. `b`'s tasks run only once
//! its buffers are bound, so the rule is: every access of rank `a` to rank `b`'s `Input` or
//! `Output` (`a != b`) happens after at least one task of `b` in the same operation, the
//! "my data is ready" signal every built-in sends before a peer touches its buffers.
//! (That `b`'s buffers outlive the access is the exit fence's part: `b`'s call ends only
//! after `a`'s.) Staged programs are skipped: the link check already refuses any peer user
//! buffer there.
//!
//! **Cost.** Once a stream of `a` is ordered after `b`, every later task of that stream is
//! too, so each (stream, owner) pair is settled by its first access: later accesses of
//! the stream to the owner's buffers cost a hash lookup (none for a run of accesses to
//! one owner). An unordered first access is reported and settles the pair as well (the
//! fix, a signal from `b` before it, is the same for the accesses after it), so a broken
//! program costs no more than a correct one. A task's unsettled owners are answered
//! together by one search backwards over whole streams ([`Search`]) that stops once it
//! has reached all of them. Asking [`super::hb::Hb`] instead, once per owner, would
//! search back from each owner's first task, at the very start of the run: on a 512-rank
//! mesh, whose reduction reads every peer's Input in one task after a ready round on 511
//! slave streams, that walked the whole round again for each owner and took minutes.
//!
//! The rule needs no fold argument of its own: a folded window keeps every stream's
//! first tasks, and an access in a left-out iteration follows its copy in the window on
//! the same stream.

use super::bounds::show;
use super::index::{Index, TaskId, NONE};
use super::report::{Check, Collector};
use super::schedule::Execution;
use crate::executor::Mode;
use oxccl_platform::{Rank, Slice, Task};
use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

/// Run the peer-ready check over every Copy and Reduce that ran.
pub(crate) fn check(idx: &Index<'_>, ex: &Execution, out: &mut Collector) {
    if idx.recs.iter().all(|r| r.mode != Mode::Direct) {
        return;
    }
    let mut search = Search::new(idx, ex);
    // (stream of the visitor, owner): the first access was checked (and reported if it
    // was unordered).
    let mut settled: HashSet<(u32, Rank)> = HashSet::new();
    let mut last: Option<(u32, Rank)> = None;
    let mut touched: Vec<Touch> = Vec::new();
    for t in ex.data_tasks() {
        let op = idx.op_of(t);
        if idx.recs[op].mode != Mode::Direct {
            continue;
        }
        let task = idx.task(t);
        let me = idx.loc(t).rank;
        let stream = idx.stream_of[t as usize];
        let ranks = idx.recs[op].rank_count();
        touched.clear();
        let reads = task.reads().iter().map(|s| (s, false));
        for (s, write) in reads.chain(task.writes().iter().map(|s| (s, true))) {
            if s.rank == me || s.rank >= ranks || !s.buf.is_user() {
                continue;
            }
            // Consecutive tasks of a stream mostly touch the same peer: skip the hash.
            if last == Some((stream, s.rank)) || settled.contains(&(stream, s.rank)) {
                last = Some((stream, s.rank));
                continue;
            }
            let same = |x: &&mut Touch| x.slice.rank == s.rank && x.slice.buf == s.buf;
            match touched.iter_mut().find(same) {
                Some(x) => x.note(write),
                None => touched.push(Touch::new(*s, write)),
            }
        }
        if touched.is_empty() {
            continue;
        }
        let mut owners: Vec<Rank> = touched.iter().map(|x| x.slice.rank).collect();
        owners.sort_unstable();
        owners.dedup();
        let entered = search.entered(t, op, &owners);
        for x in &touched {
            let b = x.slice.rank;
            if let Ok(i) = owners.binary_search(&b) {
                if !entered[i] {
                    report(idx, out, t, x, search.idle(op, b));
                }
            }
        }
        owners.iter().for_each(|&b| {
            settled.insert((stream, b));
        });
    }
}

/// A peer's buffer one task touches.
struct Touch {
    slice: Slice,
    reads: bool,
    writes: bool,
}

impl Touch {
    fn new(slice: Slice, write: bool) -> Self {
        Touch {
            slice,
            reads: !write,
            writes: write,
        }
    }

    fn note(&mut self, write: bool) {
        self.reads |= !write;
        self.writes |= write;
    }
}

/// A stream's waits that consumed a post, in stream order: (wait position, poster stream,
/// post position).
type Waits = Arc<[(u32, u32, u32)]>;

/// Backward searches, stream by stream, for the owners that happen before a task.
///
/// Every task of a stream up to an ancestor of `t` is one too, so the ancestors of `t` are,
/// per stream, the tasks up to a *bound* (a position in the canonical execution). The
/// search starts with `t`'s stream bounded at `t`; every wait of a stream at or before its
/// bound that consumed a post raises the poster's stream to that post. An owner has
/// entered when one of its streams gets a bound at all (every task of the stream is at or
/// after its first). Nothing at or before a position below every wanted owner's first
/// task can reach one (edges go forward in the canonical execution), so such posts are
/// not followed. Streams are visited breadth first, so the usual handshake, a wait on
/// `t`'s own stream or on a slave stream it joined, answers within a hop or two.
///
/// It runs on one operation's execution, which has no fence nodes.
struct Search<'a, 'r> {
    idx: &'a Index<'r>,
    ex: &'a Execution,
    /// Ranks per operation: (operation, rank) is the key `op * ranks + rank`.
    ranks: usize,
    /// The key of every stream.
    key_of: Vec<usize>,
    /// Per key, the earliest position of a first task of its streams (`NONE`: it ran no
    /// task).
    first_pos: Vec<u32>,
    /// Per key, `epoch` while the current search still looks for it.
    want: Vec<u32>,
    /// Per stream, built on first use.
    waits: Vec<Option<Waits>>,
    /// Per stream, `epoch` once the current search reached it, with its bound and how
    /// many of its waits the search followed.
    seen: Vec<u32>,
    bound: Vec<u32>,
    followed: Vec<u32>,
    queue: VecDeque<u32>,
    epoch: u32,
}

impl<'a, 'r> Search<'a, 'r> {
    fn new(idx: &'a Index<'r>, ex: &'a Execution) -> Self {
        let ranks = idx.rec.rank_count();
        let keys = ranks * idx.recs.len();
        let key_of: Vec<usize> = idx.streams.iter().map(|s| s.op * ranks + s.rank).collect();
        let mut first_pos = vec![NONE; keys];
        for (s, &key) in idx.streams.iter().zip(&key_of) {
            if s.len > 0 && ex.ran(s.first) {
                first_pos[key] = first_pos[key].min(ex.exec[s.first as usize]);
            }
        }
        let streams = idx.streams.len();
        Search {
            idx,
            ex,
            ranks,
            key_of,
            first_pos,
            want: vec![0; keys],
            waits: vec![None; streams],
            seen: vec![0; streams],
            bound: vec![0; streams],
            followed: vec![0; streams],
            queue: VecDeque::new(),
            epoch: 0,
        }
    }

    /// True when `owner` ran no task in operation `op`.
    fn idle(&self, op: usize, owner: Rank) -> bool {
        self.first_pos[op * self.ranks + owner] == NONE
    }

    /// For each of `owners` (ranks of operation `op`), whether one of its tasks happens
    /// before `t`, which ran.
    fn entered(&mut self, t: TaskId, op: usize, owners: &[Rank]) -> Vec<bool> {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.want.fill(0);
            self.seen.fill(0);
            self.epoch = 1;
        }
        let epoch = self.epoch;
        let (mut left, mut floor) = (0usize, NONE);
        for &b in owners {
            let key = op * self.ranks + b;
            if self.first_pos[key] != NONE && self.want[key] != epoch {
                self.want[key] = epoch;
                left += 1;
                floor = floor.min(self.first_pos[key]);
            }
        }
        self.queue.clear();
        if left > 0 {
            let at = self.ex.exec[t as usize];
            left = self.raise(self.idx.stream_of[t as usize], at, left);
        }
        while let Some(c) = self.queue.pop_front() {
            if left == 0 {
                break;
            }
            let waits = self.waits_of(c);
            let (bound, mut i) = (self.bound[c as usize], self.followed[c as usize] as usize);
            while i < waits.len() && waits[i].0 <= bound && left > 0 {
                let (_, poster, post) = waits[i];
                if post >= floor {
                    left = self.raise(poster, post, left);
                }
                i += 1;
            }
            self.followed[c as usize] = i as u32;
        }
        owners
            .iter()
            .map(|&b| {
                let key = op * self.ranks + b;
                self.first_pos[key] != NONE && self.want[key] != epoch
            })
            .collect()
    }

    /// Make every task of stream `s` up to position `at` an ancestor; returns the owners
    /// still to find.
    fn raise(&mut self, s: u32, at: u32, mut left: usize) -> usize {
        let (i, epoch) = (s as usize, self.epoch);
        if self.seen[i] != epoch {
            self.seen[i] = epoch;
            self.bound[i] = at;
            self.followed[i] = 0;
            let key = self.key_of[i];
            if self.want[key] == epoch {
                // Found: no longer wanted in this search.
                self.want[key] = epoch.wrapping_sub(1);
                left -= 1;
            }
        } else if at > self.bound[i] {
            self.bound[i] = at;
        } else {
            return left;
        }
        self.queue.push_back(s);
        left
    }

    /// The waits of stream `s` that consumed a post (built once).
    fn waits_of(&mut self, s: u32) -> Waits {
        if let Some(w) = &self.waits[s as usize] {
            return w.clone();
        }
        let (idx, ex) = (self.idx, self.ex);
        let info = idx.streams[s as usize];
        let w: Waits = (info.first..info.first + info.len)
            .filter(|&id| ex.ran(id) && matches!(idx.task(id), Task::Wait { .. }))
            .filter_map(|id| match ex.partner[id as usize] {
                NONE => None,
                post => Some((
                    ex.exec[id as usize],
                    idx.stream_of[post as usize],
                    ex.exec[post as usize],
                )),
            })
            .collect();
        self.waits[s as usize] = Some(w.clone());
        w
    }
}

fn report(idx: &Index<'_>, out: &mut Collector, t: TaskId, x: &Touch, idle: bool) {
    out.at(Check::PeerReady, Some(idx.loc(t)), || {
        let verb = match (x.reads, x.writes) {
            (true, true) => "reads and writes",
            (false, true) => "writes",
            _ => "reads",
        };
        let b = x.slice.rank;
        let why = if idle {
            format!("rank {b} runs no task in this operation")
        } else {
            format!("no task of rank {b} in this operation happens before it")
        };
        format!(
            "{} {verb} {}, a user buffer of rank {b}, before rank {b} has entered the \
             operation: {why}, and a peer's Input and Output exist only once it has \
             submitted its call; signal from rank {b} that its buffers are ready before \
             touching them, e.g. tx_ack/rx_ack or a DataSignal round",
            idx.describe(t),
            show(&x.slice)
        )
    });
}
