//! The task IR: the narrow waist between algorithms and backends.
//!
//! Every collective becomes, for each rank, a [`RankProgram`]: a list of streams, each an
//! ordered list of [`Task`]s. Stream 0 is the main stream; the others are slave streams that
//! fork from it and join it again. Tasks name memory symbolically with [`Slice`]s (rank,
//! buffer kind, byte offset, byte length), so a program is relocatable: the host device binds
//! the slices to real memory at launch, the `sim` device records them for the analyzer, and
//! graph mode rebinds the user's buffers on every replay.
//!
//! Synchronisation uses binary notifies ([`NotifyId`]): `Post` sets a notify to 1 (a second
//! post before a wait is a lost wakeup), `Wait` blocks its stream until the notify is 1 and
//! resets it to 0.

use crate::dtype::{DataType, ReduceOp};
use std::fmt;

/// Index of a rank in its communicator.
pub type Rank = usize;

/// Which buffer of a rank a [`Slice`] points into.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Buf {
    /// The user's send buffer (read-only to every program).
    Input,
    /// The user's receive buffer (the same memory as `Input` for in-place ops).
    Output,
    /// Per-communicator staging buffer, remotely accessible, `OXCCL_BUFFSIZE` bytes.
    CclIn,
    /// Per-communicator staging buffer, remotely accessible, `OXCCL_BUFFSIZE` bytes.
    CclOut,
    /// Per-executor extra space, sized by the executor's resource request.
    Scratch,
}

impl Buf {
    /// Every buffer kind.
    pub const ALL: [Buf; 5] = [
        Buf::Input,
        Buf::Output,
        Buf::CclIn,
        Buf::CclOut,
        Buf::Scratch,
    ];

    /// True for the user's buffers, whose memory changes from op to op.
    pub const fn is_user(self) -> bool {
        matches!(self, Buf::Input | Buf::Output)
    }
}

/// A byte range of one rank's buffer.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Slice {
    pub rank: Rank,
    pub buf: Buf,
    pub offset: usize,
    pub len: usize,
}

impl Slice {
    pub const fn new(rank: Rank, buf: Buf, offset: usize, len: usize) -> Self {
        Slice {
            rank,
            buf,
            offset,
            len,
        }
    }

    /// One past the last byte; `usize::MAX` when `offset + len` overflows, so a bounds
    /// check `end() <= region_len` against any real region refuses such a slice.
    pub const fn end(&self) -> usize {
        self.offset.saturating_add(self.len)
    }

    /// A sub-range, `offset` bytes into this slice.
    ///
    /// Saturating: an out-of-range sub-slice stays out of range (devices and the analyzer
    /// refuse it) instead of wrapping around to a valid one.
    pub fn sub(&self, offset: usize, len: usize) -> Slice {
        Slice::new(self.rank, self.buf, self.offset.saturating_add(offset), len)
    }

    /// True when both slices share at least one byte of the same buffer.
    pub fn overlaps(&self, other: &Slice) -> bool {
        self.rank == other.rank
            && self.buf == other.buf
            && self.len > 0
            && other.len > 0
            && self.offset < other.end()
            && other.offset < self.end()
    }
}

impl fmt::Display for Slice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rank {} {:?}[{}..{}]",
            self.rank,
            self.buf,
            self.offset,
            self.end()
        )
    }
}

/// A binary notify, owned by (and waited on by) one rank.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NotifyId {
    /// The rank that owns the notify; only this rank may wait on it.
    pub rank: Rank,
    /// Index into the owner's notify table (see [`crate::notify::NotifyLayout`]).
    pub index: u32,
}

/// One step of a stream.
#[derive(Clone, Debug, PartialEq)]
pub enum Task {
    /// One read, one or more writes of the same length.
    Copy { src: Slice, dsts: Vec<Slice> },
    /// `dsts = op(srcs...)` element-wise; list a destination among the sources to accumulate.
    Reduce {
        srcs: Vec<Slice>,
        dsts: Vec<Slice>,
        dtype: DataType,
        op: ReduceOp,
    },
    /// Set a notify (possibly a remote rank's: that is how a link signals).
    Post { notify: NotifyId },
    /// Block the stream until a local notify is set, then reset it.
    Wait { notify: NotifyId },
}

impl Task {
    /// The slices the task reads.
    pub fn reads(&self) -> &[Slice] {
        match self {
            Task::Copy { src, .. } => std::slice::from_ref(src),
            Task::Reduce { srcs, .. } => srcs,
            Task::Post { .. } | Task::Wait { .. } => &[],
        }
    }

    /// The slices the task writes.
    pub fn writes(&self) -> &[Slice] {
        match self {
            Task::Copy { dsts, .. } | Task::Reduce { dsts, .. } => dsts,
            Task::Post { .. } | Task::Wait { .. } => &[],
        }
    }

    /// Bytes the task moves (the length of one destination), 0 for Post/Wait.
    pub fn bytes(&self) -> usize {
        self.writes().first().map_or(0, |s| s.len)
    }

    /// A short name for traces and errors.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Task::Copy { .. } => "Copy",
            Task::Reduce { .. } => "Reduce",
            Task::Post { .. } => "Post",
            Task::Wait { .. } => "Wait",
        }
    }
}

/// The ordered tasks of one stream.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StreamProgram {
    pub tasks: Vec<Task>,
}

/// Everything one rank runs for one collective (or one captured graph).
#[derive(Clone, Debug, PartialEq)]
pub struct RankProgram {
    pub rank: Rank,
    /// Stream 0 is the main stream; the others are slave streams.
    pub streams: Vec<StreamProgram>,
}

impl RankProgram {
    /// An empty program with `streams` streams (at least the main one).
    pub fn new(rank: Rank, streams: usize) -> Self {
        RankProgram {
            rank,
            streams: vec![StreamProgram::default(); streams.max(1)],
        }
    }

    /// Total number of tasks over all streams.
    pub fn task_count(&self) -> usize {
        self.streams.iter().map(|s| s.tasks.len()).sum()
    }
}

/// Builder helpers: executors and templates append tasks through these.
impl StreamProgram {
    /// Append `Post(notify)`.
    pub fn post(&mut self, notify: NotifyId) {
        self.tasks.push(Task::Post { notify });
    }

    /// Append `Wait(notify)`.
    pub fn wait(&mut self, notify: NotifyId) {
        self.tasks.push(Task::Wait { notify });
    }

    /// Append a copy of `src` into `dst`; empty copies are skipped. Slices of unequal
    /// lengths are appended as given (never a panic): the analyzer and the devices refuse
    /// them, naming the task.
    pub fn copy(&mut self, src: Slice, dst: Slice) {
        if src.len > 0 || dst.len > 0 {
            self.tasks.push(Task::Copy {
                src,
                dsts: vec![dst],
            });
        }
    }

    /// Append a copy of `src` into every slice of `dsts`, in one task (devices read the
    /// source once for all of them); empty copies and an empty `dsts` are skipped.
    pub fn copy_to(&mut self, src: Slice, dsts: Vec<Slice>) {
        if dsts.first().is_some_and(|d| src.len > 0 || d.len > 0) {
            self.tasks.push(Task::Copy { src, dsts });
        }
    }

    /// Append `dsts = op(srcs...)`, one result written to several places; empty reductions
    /// are skipped.
    pub fn reduce_to(&mut self, srcs: Vec<Slice>, dsts: Vec<Slice>, dtype: DataType, op: ReduceOp) {
        if dsts.first().is_none_or(|d| d.len == 0) {
            return;
        }
        self.tasks.push(Task::Reduce {
            srcs,
            dsts,
            dtype,
            op,
        });
    }

    /// Append `dst = op(srcs...)`; empty reductions are skipped. A single source is a copy.
    pub fn reduce(&mut self, srcs: Vec<Slice>, dst: Slice, dtype: DataType, op: ReduceOp) {
        if dst.len == 0 {
            return;
        }
        if srcs.len() == 1 {
            if srcs[0] != dst {
                self.copy(srcs[0], dst);
            }
            return;
        }
        self.tasks.push(Task::Reduce {
            srcs,
            dsts: vec![dst],
            dtype,
            op,
        });
    }
}
