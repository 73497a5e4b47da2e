//! An MSCCL-IR algorithm as read from its file: plain data, before any check.

use crate::op::OpKind;

/// One `<algo>` element and everything inside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Algorithm {
    /// The `name` attribute, as written.
    pub name: String,
    pub coll: OpKind,
    /// `Simple`, `LL` or `LL128`: MSCCL's wire protocol, recorded but not used (the task
    /// IR has one protocol).
    pub proto: String,
    pub nchannels: usize,
    pub nchunksperloop: usize,
    pub ngpus: usize,
    /// The algorithm may run in place (`inplace="1"`).
    pub inplace: bool,
    /// The algorithm may run out of place: the `outofplace` attribute where given
    /// (microsoft/msccl's dialect), else the opposite of `inplace` (RCCL's dialect has
    /// the one flag).
    pub outofplace: bool,
    /// Bytes per rank from which the algorithm applies (`minBytes`, default 0).
    pub min_bytes: usize,
    /// Bytes per rank up to which it applies (`maxBytes`; absent or 0: no bound).
    pub max_bytes: Option<usize>,
    /// The root of a rooted collective (`root`, an oxccl extension, default 0).
    pub root: usize,
    pub gpus: Vec<Gpu>,
    /// Line of the `<algo>` element.
    pub line: u32,
}

/// One `<gpu>`: a rank's buffers and threadblocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gpu {
    pub id: usize,
    pub i_chunks: usize,
    pub o_chunks: usize,
    pub s_chunks: usize,
    /// In file order.
    pub tbs: Vec<Threadblock>,
    pub line: u32,
}

/// One `<tb>`: an ordered list of steps, sending to at most one peer and receiving from
/// at most one, on one channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Threadblock {
    pub id: usize,
    pub send: Option<usize>,
    pub recv: Option<usize>,
    pub chan: usize,
    pub steps: Vec<Step>,
    pub line: u32,
}

/// One `<step>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// The `s` attribute: the step's index in its threadblock.
    pub s: usize,
    pub kind: StepKind,
    pub src: ChunkRef,
    pub dst: ChunkRef,
    pub cnt: usize,
    /// `(depid, deps)`: the threadblock id and step index this step waits for.
    pub dep: Option<(usize, usize)>,
    pub hasdep: bool,
    pub line: u32,
}

/// A chunk offset into one of a rank's three buffers.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ChunkRef {
    pub buf: BufName,
    pub off: usize,
}

/// MSCCL's buffers: the user's input and output, and the algorithm's scratch.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BufName {
    Input,
    Output,
    Scratch,
}

impl BufName {
    /// The letter files use.
    pub const fn letter(self) -> &'static str {
        match self {
            BufName::Input => "i",
            BufName::Output => "o",
            BufName::Scratch => "s",
        }
    }
}

/// The nine step types.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum StepKind {
    /// `s`: send `src` to the send peer.
    Send,
    /// `r`: receive from the recv peer into `dst`.
    Recv,
    /// `rcs`: receive into `dst` and send the same data on.
    RecvCopySend,
    /// `rrs`: receive, reduce with `src`, send the result on (stored nowhere).
    RecvReduceSend,
    /// `rrc`: receive, reduce with `src`, store into `dst`.
    RecvReduceCopy,
    /// `rrcs`: receive, reduce with `src`, store into `dst` and send on.
    RecvReduceCopySend,
    /// `cpy`: local copy `src` to `dst`.
    Copy,
    /// `re`: local reduce, `dst = dst op src`.
    Reduce,
    /// `nop`: nothing; carries a dependency.
    Nop,
}

impl StepKind {
    /// Every type with the name files use.
    pub const ALL: [(&'static str, StepKind); 9] = [
        ("s", StepKind::Send),
        ("r", StepKind::Recv),
        ("rcs", StepKind::RecvCopySend),
        ("rrs", StepKind::RecvReduceSend),
        ("rrc", StepKind::RecvReduceCopy),
        ("rrcs", StepKind::RecvReduceCopySend),
        ("cpy", StepKind::Copy),
        ("re", StepKind::Reduce),
        ("nop", StepKind::Nop),
    ];

    /// The type named `name`.
    pub fn parse(name: &str) -> Option<StepKind> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|&(_, k)| k)
    }

    /// The name files use.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, k)| *k == self)
            .map_or("?", |(n, _)| n)
    }

    /// It sends a message to the threadblock's send peer.
    pub fn sends(self) -> bool {
        matches!(
            self,
            StepKind::Send
                | StepKind::RecvCopySend
                | StepKind::RecvReduceSend
                | StepKind::RecvReduceCopySend
        )
    }

    /// It takes a message from the threadblock's recv peer.
    pub fn receives(self) -> bool {
        matches!(
            self,
            StepKind::Recv
                | StepKind::RecvCopySend
                | StepKind::RecvReduceSend
                | StepKind::RecvReduceCopy
                | StepKind::RecvReduceCopySend
        )
    }

    /// It reads its `src` chunks.
    pub fn reads_src(self) -> bool {
        matches!(
            self,
            StepKind::Send
                | StepKind::RecvReduceSend
                | StepKind::RecvReduceCopy
                | StepKind::RecvReduceCopySend
                | StepKind::Copy
                | StepKind::Reduce
        )
    }

    /// It writes its `dst` chunks (a `re` also reads them).
    pub fn writes_dst(self) -> bool {
        matches!(
            self,
            StepKind::Recv
                | StepKind::RecvCopySend
                | StepKind::RecvReduceCopy
                | StepKind::RecvReduceCopySend
                | StepKind::Copy
                | StepKind::Reduce
        )
    }
}

/// The collective a `coll` attribute names, in either dialect.
pub fn parse_coll(name: &str) -> Option<OpKind> {
    let kind = match name.to_ascii_lowercase().replace(['_', '-'], "").as_str() {
        "allreduce" => OpKind::AllReduce,
        "allgather" => OpKind::AllGather,
        "reducescatter" => OpKind::ReduceScatter,
        "alltoall" => OpKind::AlltoAll,
        "broadcast" => OpKind::Broadcast,
        "reduce" => OpKind::Reduce,
        "gather" => OpKind::Gather,
        "scatter" => OpKind::Scatter,
        _ => return None,
    };
    Some(kind)
}
