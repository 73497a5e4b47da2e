//! Errors of the framework layer. Every message says what was asked, what was found, and
//! what to do about it.

use crate::op::OpKind;
use oxccl_platform::{DataType, DeviceError, Rank};

/// A collective call whose arguments cannot be right.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgError {
    #[error(
        "{which} buffer too short: the call needs {need} {dtype} elements but the buffer \
         holds {got}; pass a larger buffer or a smaller count"
    )]
    BufferTooShort {
        which: &'static str,
        need: usize,
        got: usize,
        dtype: DataType,
    },
    #[error(
        "send and receive buffers differ in length ({send} vs {recv} elements); this \
         collective needs them equal"
    )]
    LengthMismatch { send: usize, recv: usize },
    #[error(
        "{op} on {ranks} ranks needs {need_send} send and {need_recv} receive elements (one \
         block of {block} per rank), got {send} and {recv}; the larger buffer must hold \
         exactly {ranks} blocks of the smaller"
    )]
    BlockMismatch {
        op: OpKind,
        ranks: usize,
        block: usize,
        send: usize,
        recv: usize,
        need_send: usize,
        need_recv: usize,
    },
    #[error(
        "in-place {op} on {ranks} ranks needs a buffer of one block per rank, a multiple of \
         {ranks} elements; got {len}"
    )]
    NotDivisible {
        op: OpKind,
        ranks: usize,
        len: usize,
    },
    #[error("root {root} is not a rank of this communicator (ranks 0..{ranks})")]
    InvalidRoot { root: Rank, ranks: usize },
    #[error(
        "rank {rank} of a communicator of {ranks} ranks: a rank must be below the size, and a \
         communicator has at most {} ranks (oxccl::framework::limits::MAX_RANKS)",
        crate::limits::MAX_RANKS
    )]
    BadRank { rank: Rank, ranks: usize },
    #[error("{op} needs a root rank")]
    MissingRoot { op: OpKind },
    #[error("{op} cannot run in place; pass distinct send and receive buffers")]
    InPlaceUnsupported { op: OpKind },
    #[error("bad counts or displacements: {reason}")]
    BadLayout { reason: String },
    #[error(
        "count {count} of {dtype} on {ranks} ranks needs a buffer of more than {limit} bytes \
         (oxccl::framework::limits::MAX_BUFFER_BYTES); split the call"
    )]
    CountOverflow {
        count: usize,
        dtype: DataType,
        ranks: usize,
        limit: usize,
    },
}

/// A bad setting in the environment or in a `Config`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{var}={value:?} is invalid: {reason}")]
pub struct ConfigError {
    pub var: &'static str,
    pub value: String,
    pub reason: String,
}

/// Everything that can go wrong in the framework.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Arg(#[from] ArgError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("unknown operator `{given}`; known: {known}")]
    UnknownOperator { given: String, known: String },
    #[error("unknown algorithm `{name}` for {op}; registered for {op}: {known}")]
    UnknownAlgorithm {
        op: OpKind,
        name: String,
        known: String,
    },
    #[error("executor registry is inconsistent: {0}")]
    Registry(String),
    #[error(
        "the topology is disconnected: {} have no path of healthy links between them; \
         repair a link or drop a broken one (--broken, or `broken` in the topology file)",
        rank_groups(groups)
    )]
    Disconnected {
        /// The groups of ranks that reach each other, ascending, ordered by first rank.
        groups: Vec<Vec<Rank>>,
    },
    #[error("no executor can run {op} here: {reason}")]
    NoExecutor { op: OpKind, reason: String },
    #[error("executor `{executor}` cannot run {op} with {ranks} ranks: {reason}")]
    Unsupported {
        executor: String,
        op: OpKind,
        ranks: usize,
        reason: String,
    },
    #[error(
        "executor `{executor}` on rank {rank} needs the link to rank {peer}, which {why}; \
         choose an algorithm that avoids it"
    )]
    NoLink {
        executor: String,
        rank: Rank,
        peer: Rank,
        why: &'static str,
    },
    #[error("executor `{executor}` cannot run on these links: {access}")]
    PutOnlyLink {
        executor: String,
        /// The task, the peer's slice and whether it is read or written.
        access: crate::link_access::PutOnlyAccess,
    },
    #[error("executor `{executor}` built an invalid program for rank {rank}: {reason}")]
    BadProgram {
        executor: String,
        rank: Rank,
        reason: String,
    },
    #[error(
        "executor `{executor}` on rank {rank} would build a program of more than {limit} \
         tasks (oxccl::framework::limits::MAX_TASKS): the op is too large for the CCL \
         buffers it stages through; raise OXCCL_BUFFSIZE or split the call"
    )]
    TooManyTasks {
        executor: String,
        rank: Rank,
        limit: usize,
    },
    #[error(
        "call #{call} differs between ranks in its {field}: {detail}. Every rank must call \
         the same collectives in the same order with matching arguments; nothing was run"
    )]
    Mismatch {
        /// The call's number (each rank counts its calls on the communicator from 0).
        call: u64,
        field: &'static str,
        detail: String,
    },
    #[error("call #{call} was refused on rank {rank}, so no rank ran it: {reason}")]
    PeerRefused {
        call: u64,
        rank: Rank,
        reason: String,
    },
    #[error(
        "rank {rank} waited {waited:?} for ranks {absent:?} to make call #{call}{what}; \
         check that every rank calls the same collectives in the same order, or raise \
         OXCCL_EXEC_TIMEOUT. The communicator is aborted"
    )]
    CallTimeout {
        call: u64,
        rank: Rank,
        what: String,
        absent: Vec<Rank>,
        waited: std::time::Duration,
    },
    #[error(
        "rank {rank} already has a collective in flight (from another thread); a \
         communicator rank runs one collective at a time, so call it from one thread. \
         The call was refused and the communicator is unaffected"
    )]
    Busy { rank: Rank },
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error(
        "the communicator was aborted by an earlier failure and cannot run collectives: \
         {cause}. Create a new communicator"
    )]
    Aborted { cause: String },
}

/// `ranks {0} and {1,...,7}`: each group in braces, runs of three or more ranks shortened.
fn rank_groups(groups: &[Vec<Rank>]) -> String {
    let group = |g: &Vec<Rank>| {
        let mut parts: Vec<String> = Vec::new();
        let mut i = 0;
        while i < g.len() {
            let mut j = i;
            while j + 1 < g.len() && g[j + 1] == g[j] + 1 {
                j += 1;
            }
            match j - i {
                0 => parts.push(g[i].to_string()),
                1 => parts.push(format!("{},{}", g[i], g[j])),
                _ => parts.push(format!("{},...,{}", g[i], g[j])),
            }
            i = j + 1;
        }
        format!("{{{}}}", parts.join(","))
    };
    let all: Vec<String> = groups.iter().map(group).collect();
    match all.split_last() {
        Some((last, rest)) if !rest.is_empty() => {
            format!("ranks {} and {last}", rest.join(", "))
        }
        _ => format!("ranks {}", all.join("")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disconnected_names_the_groups() {
        let err = Error::Disconnected {
            groups: vec![vec![0], (1..8).collect()],
        };
        let text = err.to_string();
        assert!(
            text.contains("ranks {0} and {1,...,7} have no path"),
            "{text}"
        );
        assert!(text.contains("repair a link"), "{text}");
        let three = rank_groups(&[vec![0, 1], vec![2, 4, 5, 6], vec![3]]);
        assert_eq!(three, "ranks {0,1}, {2,4,...,6} and {3}");
    }
}
