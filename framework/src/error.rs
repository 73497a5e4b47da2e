//! Errors of the framework layer. Every message says what was asked, what was found, and
//! what to do about it.
//!
//! # Causes are errors, descriptions are text
//!
//! An error that another error caused holds that error, typed, as its
//! [`std::error::Error::source`]: the `io::Error` of a topology or tuning file that cannot
//! be read, the `toml` error of one that cannot be parsed, the first fatal error of an
//! aborted communicator ([`Error::Aborted`]). Errors must be `Clone` (one failure is
//! reported to every rank), so a cause is shared: `Arc<Error>` where it is a framework
//! error, [`Cause`] (`Arc<dyn Error + Send + Sync>`, as wgpu's `InstanceError`) where it
//! comes from elsewhere. A message never repeats its source's text: print the chain
//! ([`chain`], [`with_causes`]; the CLI writes one `caused by:` line per cause).
//!
//! Text fields stay text where they are descriptions written here, not another error's
//! rendering: `reason` (what is wrong and what to do), `detail`, `why`, the registry's
//! inconsistency, and [`Error::PeerRefused`]'s `reason`, which is what another rank said
//! (it is deposited as text because a rank in another process can only send text).

use crate::op::OpKind;
use oxccl_platform::{DataType, DeviceError, Rank, TaskLocation};
use std::sync::Arc;

/// The error behind another one, shared so that the error holding it stays `Clone`.
pub type Cause = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// `err` followed by every error of its [`std::error::Error::source`] chain.
pub fn chain<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(err), |e| e.source())
}

/// `err` and its causes on one line, joined by `: ` (for a text that must stand alone,
/// such as the refusal another rank reads).
pub fn with_causes(err: &(dyn std::error::Error + 'static)) -> String {
    chain(err)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ")
}

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
    #[error(
        "{len} {dtype} elements are more than {limit} bytes \
         (oxccl::framework::limits::MAX_BUFFER_BYTES); allocate less"
    )]
    AllocTooLarge {
        len: usize,
        dtype: DataType,
        limit: usize,
    },
}

/// A bad setting in the environment, in a `Config` or on a command line.
#[derive(Debug, Clone)]
pub struct ConfigError {
    pub var: &'static str,
    pub value: String,
    /// What is wrong and what would be valid.
    pub reason: String,
    /// The error behind this one (a file that cannot be read or parsed), when there is one.
    pub source: Option<Cause>,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}={:?} is invalid: {}",
            self.var, self.value, self.reason
        )
    }
}

impl std::error::Error for ConfigError {
    /// The cause itself (not the `Arc` that shares it), so that it downcasts to its type.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        let cause: &(dyn std::error::Error + Send + Sync + 'static) = self.source.as_deref()?;
        Some(cause)
    }
}

impl ConfigError {
    /// `var=value` refused for `reason`, with no error behind it.
    pub fn new(var: &'static str, value: impl Into<String>, reason: impl Into<String>) -> Self {
        ConfigError {
            var,
            value: value.into(),
            reason: reason.into(),
            source: None,
        }
    }

    /// This error, caused by `source`.
    pub fn caused_by(self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        ConfigError {
            source: Some(Arc::new(source)),
            ..self
        }
    }
}

/// Everything that can go wrong in the framework.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Arg(#[from] ArgError),
    #[error(transparent)]
    Bootstrap(#[from] crate::bootstrap::BootstrapError),
    #[error(
        "rank {rank} has no transport to rank {peer} on host {host}; every candidate \
         refused: {}",
        refusals.iter().map(|(t, why)| format!("{t}: {why}")).collect::<Vec<_>>().join("; ")
    )]
    NoTransport {
        rank: Rank,
        peer: Rank,
        host: String,
        /// Each transport of the table, in order, with why it cannot connect.
        refusals: Vec<(&'static str, String)>,
    },
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
    /// An MSCCL-IR algorithm file that cannot be imported ([`crate::msccl`]).
    #[error("algorithm file {0}")]
    AlgoFile(#[from] crate::msccl::FileError),
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
    #[error(
        "executor `{executor}` asked for its plan as `{expected}`, but its resource request \
         carries {found}; kernel_run must read the type resources() stored \
         (ResourceRequest::with_plan)"
    )]
    PlanType {
        executor: String,
        expected: &'static str,
        /// The stored plan's type, or "no plan".
        found: &'static str,
    },
    #[error("executor `{executor}` cannot run on these links: {access}")]
    PutOnlyLink {
        executor: String,
        /// The task, the peer's slice and whether it is read or written.
        access: crate::link_access::PutOnlyAccess,
    },
    #[error(
        "executor `{executor}` ({op}) failed {failures} of {cases} conformance cases; the first: \
         {first}"
    )]
    Nonconforming {
        executor: String,
        op: crate::op::OpKind,
        failures: usize,
        cases: usize,
        /// The case (shape, type, count, reduce op, mode), the rank, stream and task at
        /// fault when known, and what is wrong.
        first: String,
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
    #[error(
        "the ranks captured different sequences: step {step} differs in its {field}: \
         {detail}. Every rank must capture the same collectives in the same order with \
         matching arguments; no graph was compiled"
    )]
    CaptureMismatch {
        /// The step's index in the captured sequence.
        step: usize,
        field: &'static str,
        detail: String,
    },
    #[error(
        "graph launch: step {step} {reason}; a launch binds buffers of the sizes and forms \
         captured, one call per step in capture order; nothing was run"
    )]
    GraphBinding { step: usize, reason: String },
    #[error(
        "the analyzer refused the captured sequence (OXCCL_GRAPH_CHECK=1), so no graph was \
         compiled: {report}"
    )]
    GraphCheck { report: String },
    #[error(
        "call #{call} was not run: executor {executor} requested {bytes} bytes of scratch on \
         rank {rank}, whose program touches rank {peer}'s scratch, and {peer_bytes} bytes on \
         rank {peer}. Scratch is symmetric (a device allocates each request on every rank, \
         so the two ranks would use different memory): the executor must request the same \
         scratch size on every rank; `oxccl check --algo {executor}` shows the tasks"
    )]
    AsymmetricScratch {
        call: u64,
        executor: &'static str,
        rank: Rank,
        bytes: usize,
        peer: Rank,
        peer_bytes: usize,
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
        "call #{call} was agreed by every rank (same collective, arguments and executor), \
         yet a wait in it was never posted (the cause below names it); {expected}: executor \
         `{executor}` deadlocks, its programs never post what they wait for. Run `oxccl \
         check --algo {executor}` on this shape"
    )]
    ExecutorStuck {
        call: u64,
        executor: &'static str,
        /// Who should have posted, from the poster's program for the same call (boxed:
        /// it keeps `Error` small on every `Result` path).
        expected: Box<ExpectedPost>,
        #[source]
        cause: DeviceError,
    },
    #[error(
        "call #{call}: a wait was never posted (the cause below names it); {expected}, if \
         every rank made this same call"
    )]
    WaitNeverPosted {
        call: u64,
        /// Who should have posted, from the program the poster runs for this call.
        expected: Box<ExpectedPost>,
        #[source]
        cause: DeviceError,
    },
    #[error("rank {rank}'s call failed first")]
    RankFailed {
        rank: Rank,
        /// Its error; also this error's `source()`.
        #[source]
        cause: Arc<Error>,
    },
    #[error(
        "the communicator was aborted by an earlier failure (the cause below) and cannot run \
         collectives. Create a new communicator"
    )]
    Aborted {
        /// The communicator's first fatal error, shared by every rank that reports the
        /// abort; it is also this error's `source()` (which downcasts to `Arc<Error>`).
        #[source]
        cause: Arc<Error>,
    },
}

/// `0,...,3,5`: ranks ascending, runs of three or more shortened.
pub(crate) fn rank_list(g: &[Rank]) -> String {
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
    parts.join(",")
}

/// `ranks {0} and {1,...,7}`: each group in braces, runs of three or more ranks shortened.
fn rank_groups(groups: &[Vec<Rank>]) -> String {
    let group = |g: &Vec<Rank>| format!("{{{}}}", rank_list(g));
    let all: Vec<String> = groups.iter().map(group).collect();
    match all.split_last() {
        Some((last, rest)) if !rest.is_empty() => {
            format!("ranks {} and {last}", rest.join(", "))
        }
        _ => format!("ranks {}", all.join("")),
    }
}

/// Who should have posted the notify a timed-out wait waited for: the poster's program for
/// the same call, planned again on the waiting rank (every rank plans a call the same way
/// from the same inputs), searched for its Posts of that notify.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExpectedPost {
    /// These tasks post it: the poster never ran them (it waits on something else, or is
    /// slow), or an earlier wait took the post.
    Tasks(Vec<TaskLocation>),
    /// No task of `rank`'s program for the call posts it.
    Nobody { rank: Rank },
    /// `rank` posts it from arguments of its own (a point-to-point call), which this rank
    /// does not know.
    OwnArguments { rank: Rank },
    /// The poster's program differs by the form it called in (which this rank does not
    /// know: ranks choose in place or not each for itself): the answer for each form.
    ByForm {
        in_place: Box<ExpectedPost>,
        out_of_place: Box<ExpectedPost>,
    },
    /// The poster's program could not be planned here.
    Unknown,
}

impl std::fmt::Display for ExpectedPost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExpectedPost::Tasks(tasks) => {
                let names: Vec<String> = tasks.iter().map(|t| format!("{t} (Post)")).collect();
                write!(
                    f,
                    "{} should have posted it and never did (it waits on something else, or \
                     an earlier wait took its post)",
                    names.join(", ")
                )
            }
            ExpectedPost::Nobody { rank } => {
                write!(f, "no task of rank {rank}'s program for this call posts it")
            }
            ExpectedPost::OwnArguments { rank } => write!(
                f,
                "rank {rank} should have posted it (its program follows its own \
                 point-to-point arguments, not known here)"
            ),
            ExpectedPost::ByForm {
                in_place,
                out_of_place,
            } => write!(
                f,
                "its program depends on the form it called in (not known here): in place, {in_place}; \
                 out of place, {out_of_place}"
            ),
            ExpectedPost::Unknown => {
                write!(
                    f,
                    "the poster's program for this call could not be planned here"
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_abort_keeps_its_cause_as_the_source() {
        let first = Error::Busy { rank: 3 };
        let err = Error::Aborted {
            cause: Arc::new(first),
        };
        let source = std::error::Error::source(&err).expect("a source");
        let shared = source
            .downcast_ref::<Arc<Error>>()
            .expect("the shared first error");
        assert!(matches!(**shared, Error::Busy { rank: 3 }));
        let text = with_causes(&err);
        assert!(text.starts_with("the communicator was aborted"), "{text}");
        assert!(text.contains(": rank 3 already has a collective"), "{text}");
        assert!(
            !err.to_string().contains("rank 3"),
            "no repeated cause: {err}"
        );
    }

    #[test]
    fn a_config_error_chains_to_its_cause() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let err = ConfigError::new("OXCCL_X", "v", "cannot use it").caused_by(io);
        let causes: Vec<String> = chain(&err).map(|e| e.to_string()).collect();
        assert_eq!(causes, ["OXCCL_X=\"v\" is invalid: cannot use it", "gone"]);
        assert!(chain(&err).nth(1).unwrap().is::<std::io::Error>());
    }

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
