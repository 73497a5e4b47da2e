//! The canonical execution, and the deadlock check that reads it.
//!
//! One legal interleaving of all ranks' streams, computed without moving data: a FIFO
//! worklist of runnable streams, each run until it blocks. Copy and Reduce complete at
//! once; Post sets its notify and wakes a stream blocked on it; Wait consumes a set notify
//! or blocks its stream. The execution records, for every task, its position in the run
//! (`exec`), and for every wait the post it consumed (and for every post the wait that
//! consumed it, in the same `partner` vector). Running streams to their next block keeps
//! the ranks roughly in lockstep, so tasks close in happens-before are close in `exec`,
//! which keeps the backward searches of [`super::hb`] short.
//!
//! If the worklist empties while some stream is unfinished, every unfinished stream is
//! blocked on a Wait that nothing left can post: the program can deadlock (it does in this
//! interleaving, and the lost-wakeup proof shows the pairing of posts and waits is the same
//! in every interleaving, so then it does in all). Each stuck wait is reported with the
//! posts that could still have woken it.
//!
//! Streams may also wait for [`Fences`] before their first task: over a sequence of
//! operations, the device's epoch fence. A barrier is passed when the last stream or
//! barrier it names is done, and is laid out in the run as fence nodes (no task; their
//! `order` entry is `NONE`, their step [`Step::Fence`] and their stream [`FENCE_STREAM`]),
//! which carry its happens-before edges to the first task of every stream it starts.

use super::fence::Fences;
use super::index::{Index, TaskId, NONE};
use super::report::{Check, Collector};
use oxccl_platform::Task;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// The canonical execution.
pub(crate) struct Execution {
    /// Position of each task in the run (`NONE`: never ran).
    pub exec: Vec<u32>,
    /// The tasks in the order they ran (`NONE` at a fence node's position).
    pub order: Vec<TaskId>,
    /// For a wait, the post it consumed; for a post, the wait that consumed it.
    pub partner: Vec<TaskId>,
    /// Streams (global numbers) blocked forever at their cursor.
    pub stuck: Vec<u32>,
    /// What the task at each position is, with its notify key (the passes that only care
    /// about some kinds skip the others without touching the program).
    pub step: Vec<Step>,
    /// Global stream number of the task at each position ([`FENCE_STREAM`] for a fence
    /// node).
    pub stream_at: Vec<u32>,
    /// Positions of the stream predecessor and of the consumed post, by position (`NONE`
    /// if absent): the happens-before graph, laid out in time order.
    pub preds: Vec<[u32; 2]>,
    /// Next task of each stream.
    cursor: Vec<u32>,
}

impl Execution {
    /// Number of streams (global numbers run below it).
    pub(crate) fn streams(&self) -> usize {
        self.cursor.len()
    }

    /// The Copy and Reduce tasks, in the order they ran.
    pub(crate) fn data_tasks(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.order
            .iter()
            .zip(&self.step)
            .filter(|(_, s)| **s == Step::Data)
            .map(|(&t, _)| t)
    }
}

/// A task's kind as the synchronisation passes see it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Copy or Reduce.
    Data,
    /// A post of the notify with this key.
    Post(u32),
    /// A wait on the notify with this key.
    Wait(u32),
    /// A post or wait on a notify that does not exist (the link check reports it).
    Void,
    /// A fence node: no task, only happens-before edges (see [`Fences`]).
    Fence,
}

/// The stream number of fence nodes: no task's.
pub(crate) const FENCE_STREAM: u32 = NONE;

impl Execution {
    pub fn ran(&self, id: TaskId) -> bool {
        self.exec[id as usize] != NONE
    }
}

struct Runner<'a> {
    idx: &'a Index<'a>,
    ex: Execution,
    /// The post that set each notify, or `NONE`.
    set_by: Vec<TaskId>,
    blocked: HashMap<u32, VecDeque<u32>>,
    /// Position of the last task each stream ran (before its first task: of the barrier
    /// it started after).
    last_pos: Vec<u32>,
    ready: VecDeque<u32>,
    fences: &'a Fences,
    /// Per barrier, dependencies not yet done.
    unmet: Vec<u32>,
    /// Per barrier, its position once passed (`NONE`: before every task).
    passed_at: Vec<u32>,
    /// Barriers waiting on each stream, and on each barrier.
    after_stream: Vec<Vec<u32>>,
    after_barrier: Vec<Vec<u32>>,
    /// Streams starting after each barrier.
    starts: Vec<Vec<u32>>,
}

/// Run every stream of every rank to completion or to a permanent block.
pub(crate) fn run(idx: &Index<'_>) -> Execution {
    run_fenced(idx, &Fences::none(idx.streams.len()))
}

/// [`run`], each stream starting only once its barrier in `fences` is passed.
pub(crate) fn run_fenced(idx: &Index<'_>, fences: &Fences) -> Execution {
    let n = idx.task_count();
    let streams = idx.streams.len();
    let barriers = fences.barriers.len();
    let (mut after_stream, mut after_barrier) =
        (vec![Vec::new(); streams], vec![Vec::new(); barriers]);
    let mut starts = vec![Vec::new(); barriers];
    for (b, barrier) in fences.barriers.iter().enumerate() {
        barrier
            .streams
            .iter()
            .for_each(|&s| after_stream[s as usize].push(b as u32));
        barrier
            .barriers
            .iter()
            .for_each(|&d| after_barrier[d as usize].push(b as u32));
    }
    for (s, &b) in fences.start.iter().enumerate() {
        if b != NONE {
            starts[b as usize].push(s as u32);
        }
    }
    let mut r = Runner {
        idx,
        ex: Execution {
            exec: vec![NONE; n],
            order: Vec::with_capacity(n),
            partner: vec![NONE; n],
            stuck: Vec::new(),
            step: Vec::with_capacity(n),
            stream_at: Vec::with_capacity(n),
            preds: Vec::with_capacity(n),
            cursor: idx.streams.iter().map(|s| s.first).collect(),
        },
        last_pos: vec![NONE; streams],
        set_by: vec![NONE; idx.notify_keys()],
        blocked: HashMap::new(),
        ready: (0..streams as u32)
            .filter(|&s| fences.start.get(s as usize).is_none_or(|&b| b == NONE))
            .collect(),
        fences,
        unmet: fences
            .barriers
            .iter()
            .map(|b| (b.streams.len() + b.barriers.len()) as u32)
            .collect(),
        passed_at: vec![NONE; barriers],
        after_stream,
        after_barrier,
        starts,
    };
    for b in 0..barriers as u32 {
        if r.unmet[b as usize] == 0 {
            r.pass(b);
        }
    }
    while let Some(s) = r.ready.pop_front() {
        r.run_stream(s);
    }
    let mut ex = r.ex;
    ex.stuck = (0..idx.streams.len() as u32)
        .filter(|&s| {
            let info = &idx.streams[s as usize];
            ex.cursor[s as usize] < info.first + info.len
        })
        .collect();
    ex
}

impl Runner<'_> {
    fn run_stream(&mut self, s: u32) {
        let info = self.idx.streams[s as usize];
        let end = info.first + info.len;
        let mut id = self.ex.cursor[s as usize];
        while id < end {
            let mut consumed = NONE;
            let step = match self.idx.task(id) {
                Task::Post { notify } => match self.idx.notify_key(*notify) {
                    Some(key) => {
                        self.set_by[key as usize] = id;
                        self.wake(key);
                        Step::Post(key)
                    }
                    None => Step::Void,
                },
                Task::Wait { notify } => match self.idx.notify_key(*notify) {
                    Some(key) => {
                        let post = self.set_by[key as usize];
                        if post == NONE {
                            self.blocked.entry(key).or_default().push_back(s);
                            break;
                        }
                        self.set_by[key as usize] = NONE;
                        self.ex.partner[id as usize] = post;
                        self.ex.partner[post as usize] = id;
                        consumed = self.ex.exec[post as usize];
                        Step::Wait(key)
                    }
                    None => Step::Void,
                },
                Task::Copy { .. } | Task::Reduce { .. } => Step::Data,
            };
            self.record(id, s, step, consumed);
            id += 1;
        }
        self.ex.cursor[s as usize] = id;
        if id == end {
            for b in std::mem::take(&mut self.after_stream[s as usize]) {
                self.dependency_done(b);
            }
        }
    }

    fn dependency_done(&mut self, b: u32) {
        self.unmet[b as usize] -= 1;
        if self.unmet[b as usize] == 0 {
            self.pass(b);
        }
    }

    /// Lay out barrier `b`, all of whose dependencies are done, start its streams and
    /// tell the barriers after it.
    fn pass(&mut self, b: u32) {
        let barrier = &self.fences.barriers[b as usize];
        let deps: Vec<u32> = barrier
            .streams
            .iter()
            .map(|&s| self.last_pos[s as usize])
            .chain(barrier.barriers.iter().map(|&d| self.passed_at[d as usize]))
            .filter(|&p| p != NONE)
            .collect();
        let mut at = NONE;
        for dep in deps {
            at = match at {
                NONE => dep,
                prev => self.fence_node([prev, dep]),
            };
        }
        self.passed_at[b as usize] = at;
        for s in std::mem::take(&mut self.starts[b as usize]) {
            self.last_pos[s as usize] = at;
            self.ready.push_back(s);
        }
        for next in std::mem::take(&mut self.after_barrier[b as usize]) {
            self.dependency_done(next);
        }
    }

    /// Append a fence node with these predecessors; its position.
    fn fence_node(&mut self, preds: [u32; 2]) -> u32 {
        let pos = self.ex.order.len() as u32;
        self.ex.order.push(NONE);
        self.ex.step.push(Step::Fence);
        self.ex.stream_at.push(FENCE_STREAM);
        self.ex.preds.push(preds);
        pos
    }

    fn record(&mut self, id: TaskId, s: u32, step: Step, consumed: u32) {
        let pos = self.ex.order.len() as u32;
        self.ex.exec[id as usize] = pos;
        self.ex.order.push(id);
        self.ex.step.push(step);
        self.ex.stream_at.push(s);
        let pred = std::mem::replace(&mut self.last_pos[s as usize], pos);
        self.ex.preds.push([pred, consumed]);
    }

    fn wake(&mut self, key: u32) {
        if let Some(q) = self.blocked.get_mut(&key) {
            if let Some(s) = q.pop_front() {
                self.ready.push_back(s);
            }
            if q.is_empty() {
                self.blocked.remove(&key);
            }
        }
    }
}

/// Report every stuck wait with the posts that could have satisfied it.
pub(crate) fn check_deadlock(idx: &Index<'_>, ex: &Execution, out: &mut Collector) {
    if ex.stuck.is_empty() {
        return;
    }
    let mut pending: BTreeMap<u32, Vec<TaskId>> = BTreeMap::new();
    for id in idx.ids().filter(|&id| !ex.ran(id)) {
        if let Task::Post { notify } = idx.task(id) {
            if let Some(key) = idx.notify_key(*notify) {
                pending.entry(key).or_default().push(id);
            }
        }
    }
    for &s in &ex.stuck {
        let id = ex.cursor[s as usize];
        let Task::Wait { notify } = idx.task(id) else {
            continue;
        };
        let posts = idx.notify_key(*notify).and_then(|k| pending.get(&k));
        out.at(Check::Deadlock, Some(idx.loc(id)), || {
            let who = match posts {
                None => "no task left posts it".to_string(),
                Some(p) => format!(
                    "it could only be posted by {}, which never ran",
                    list(idx, p)
                ),
            };
            format!(
                "deadlock: {} waits forever on {}; {who}",
                idx.describe(id),
                idx.notify_name(*notify)
            )
        });
    }
}

/// Up to eight tasks by location, then how many more.
fn list(idx: &Index<'_>, ids: &[TaskId]) -> String {
    let shown: Vec<String> = ids.iter().take(8).map(|&i| idx.describe(i)).collect();
    let more = ids.len().saturating_sub(8);
    let tail = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!("{}{tail}", shown.join(", "))
}
