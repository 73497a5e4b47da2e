//! A flat index over every task of a recording.
//!
//! The checks talk about millions of tasks (a 1024-rank ring AllReduce has about ten
//! million), so each task gets a dense `u32` id: the streams of rank 0 first, then rank 1,
//! and so on, each stream's tasks consecutively. Per-task facts (when the canonical
//! execution ran it, which post a wait consumed) then live in plain vectors indexed by id,
//! and the stream predecessor of a task is simply the previous id when both share a
//! stream. Notifies get the same treatment: every valid [`NotifyId`] maps to a dense key.
//!
//! An index may also span a sequence of operations on one communicator (see
//! [`super::sequence`]): the streams of operation 0 come first, then those of operation 1,
//! and so on. Notifies and the CCL buffers and scratch are the communicator's and shared by
//! every operation; each call has its own user buffers, so Input and Output get a memory id
//! per operation.

use super::recording::Recording;
use oxccl_platform::{Buf, NotifyId, Rank, Task};
use std::fmt;

/// Dense id of a task.
pub(crate) type TaskId = u32;

/// "No task" / "no value" in the per-task vectors.
pub(crate) const NONE: u32 = u32::MAX;

/// Buffer slots per rank shared by every operation: CclIn, CclOut, Scratch.
const SHARED_SLOTS: usize = 3;

/// Buffer slots per rank and operation: Input, Output.
const USER_SLOTS: usize = 2;

/// Where a task sits.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Loc {
    /// The operation's position in a sequence (`None` when the index holds one operation).
    pub op: Option<usize>,
    pub rank: Rank,
    pub stream: usize,
    pub task: usize,
}

impl fmt::Display for Loc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(op) = self.op {
            write!(f, "op {op} ")?;
        }
        write!(
            f,
            "rank {} stream {} task {}",
            self.rank, self.stream, self.task
        )
    }
}

/// One stream's place in the flat numbering.
#[derive(Copy, Clone, Debug)]
pub(crate) struct StreamInfo {
    /// The operation (0 unless the index spans a sequence).
    pub op: usize,
    pub rank: Rank,
    pub stream: usize,
    pub first: TaskId,
    pub len: u32,
}

/// The flat index.
pub(crate) struct Index<'r> {
    /// The (first) operation: its topology, layout and rank count are every operation's.
    pub rec: &'r Recording,
    /// Every operation, in call order (one unless the index spans a sequence).
    pub recs: Vec<&'r Recording>,
    pub streams: Vec<StreamInfo>,
    /// Global stream number of every task.
    pub stream_of: Vec<u32>,
    /// Every task, by id (one load instead of four on the hot paths).
    tasks: Vec<&'r Task>,
    /// First notify key of every rank, plus the total at the end.
    notify_base: Vec<u32>,
}

impl<'r> Index<'r> {
    pub fn new(rec: &'r Recording) -> Self {
        Self::sequence(&[rec])
    }

    /// The index of operations run back to back on one communicator: `recs` must share
    /// the rank count and notify layout (the caller checks), and must not be empty.
    pub fn sequence(recs: &[&'r Recording]) -> Self {
        let rec = recs[0];
        let mut streams = Vec::new();
        let mut next = 0u64;
        for (op, r) in recs.iter().enumerate() {
            for (rank, r) in r.ranks.iter().enumerate() {
                for (stream, s) in r.program.streams.iter().enumerate() {
                    let len = s.tasks.len() as u64;
                    assert!(next + len < u64::from(NONE), "too many tasks to analyse");
                    streams.push(StreamInfo {
                        op,
                        rank,
                        stream,
                        first: next as u32,
                        len: len as u32,
                    });
                    next += len;
                }
            }
        }
        let mut stream_of = Vec::with_capacity(next as usize);
        let mut tasks = Vec::with_capacity(next as usize);
        for (g, s) in streams.iter().enumerate() {
            stream_of.resize(stream_of.len() + s.len as usize, g as u32);
            tasks.extend(&recs[s.op].ranks[s.rank].program.streams[s.stream].tasks);
        }
        let mut notify_base = vec![0u32];
        for rank in 0..rec.rank_count() {
            let local = recs.iter().map(|r| r.local_notifies(rank)).max();
            let len = rec.layout.table_len(local.unwrap_or(0)) as u32;
            notify_base.push(notify_base[rank] + len);
        }
        Index {
            rec,
            recs: recs.to_vec(),
            streams,
            stream_of,
            tasks,
            notify_base,
        }
    }

    /// Tasks over all ranks and streams.
    pub fn task_count(&self) -> usize {
        self.stream_of.len()
    }

    /// Every task id, rank by rank, stream by stream.
    pub fn ids(&self) -> std::ops::Range<TaskId> {
        0..self.task_count() as TaskId
    }

    pub fn task(&self, id: TaskId) -> &'r Task {
        self.tasks[id as usize]
    }

    pub fn loc(&self, id: TaskId) -> Loc {
        let s = &self.streams[self.stream_of[id as usize] as usize];
        Loc {
            op: (self.recs.len() > 1).then_some(s.op),
            rank: s.rank,
            stream: s.stream,
            task: (id - s.first) as usize,
        }
    }

    /// "rank r stream s task t (Kind)".
    pub fn describe(&self, id: TaskId) -> String {
        format!("{} ({})", self.loc(id), self.task(id).kind_name())
    }

    /// Total notify keys.
    pub fn notify_keys(&self) -> usize {
        *self.notify_base.last().unwrap_or(&0) as usize
    }

    /// The dense key of a notify, if it exists.
    pub fn notify_key(&self, n: NotifyId) -> Option<u32> {
        let base = *self.notify_base.get(n.rank)?;
        let end = *self.notify_base.get(n.rank + 1)?;
        (n.index < end - base).then(|| base + n.index)
    }

    /// A notify's description in the layout's words.
    pub fn notify_name(&self, n: NotifyId) -> String {
        self.rec.layout.describe(n)
    }

    /// The operation `id` belongs to.
    pub fn op_of(&self, id: TaskId) -> usize {
        self.streams[self.stream_of[id as usize] as usize].op
    }

    /// The memory a buffer of a rank is, in the first operation (Input and Output share
    /// one in place).
    pub fn mem(&self, rank: Rank, buf: Buf) -> usize {
        self.mem_in(0, rank, buf)
    }

    /// The memory a buffer of a rank is in operation `op`: the CCL buffers and scratch are
    /// the same memory in every operation, the user buffers are the call's own.
    pub fn mem_in(&self, op: usize, rank: Rank, buf: Buf) -> usize {
        let user = |second: bool| SHARED_SLOTS + USER_SLOTS * op + usize::from(second);
        let slot = match buf {
            Buf::CclIn => 0,
            Buf::CclOut => 1,
            Buf::Scratch => 2,
            Buf::Input => user(false),
            Buf::Output => user(!self.recs[op].in_place),
        };
        rank * self.slots_per_rank() + slot
    }

    fn slots_per_rank(&self) -> usize {
        SHARED_SLOTS + USER_SLOTS * self.recs.len()
    }

    /// Number of memory ids.
    pub fn mems(&self) -> usize {
        self.rec.rank_count() * self.slots_per_rank()
    }

    /// True when every slice of the task names an existing rank, ends before `usize::MAX`,
    /// and has the length of the others: the data-flow passes skip the other tasks, which
    /// the link and bounds checks report (and would overflow their arithmetic).
    pub fn addressable(&self, task: &Task) -> bool {
        let n = self.rec.rank_count();
        let len = task.writes().first().map(|s| s.len);
        task.reads()
            .iter()
            .chain(task.writes())
            .all(|s| s.rank < n && s.offset.checked_add(s.len).is_some() && Some(s.len) == len)
    }
}
