//! Errors of the platform layer: what a device reports when a program cannot run.

use crate::ir::{NotifyId, Rank, Slice};
use std::time::Duration;

/// Where in a program something happened.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TaskLocation {
    pub rank: Rank,
    pub stream: usize,
    pub task: usize,
}

impl std::fmt::Display for TaskLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rank {} stream {} task {}",
            self.rank, self.stream, self.task
        )
    }
}

/// Why a device could not run a program.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DeviceError {
    #[error(
        "{at}: Wait on {notify_desc} timed out after {waited:?}; nobody posted it. \
         Check that every rank of the communicator called the same collective, or raise \
         OXCCL_EXEC_TIMEOUT"
    )]
    WaitTimeout {
        at: TaskLocation,
        notify: NotifyId,
        notify_desc: String,
        waited: Duration,
    },
    #[error(
        "{at}: Post on {notify_desc} found it already set: a lost wakeup (two posts before \
         one wait). The program is wrong; run `oxccl check` on its executor"
    )]
    LostWakeup {
        at: TaskLocation,
        notify: NotifyId,
        notify_desc: String,
    },
    #[error("{at}: invalid task: {reason}")]
    InvalidTask { at: TaskLocation, reason: String },
    #[error("{at}: slice {slice} is invalid: {reason}")]
    InvalidSlice {
        at: TaskLocation,
        slice: Slice,
        reason: String,
    },
    #[error("device cannot allocate {bytes} bytes for {what}: {reason}")]
    Alloc {
        what: &'static str,
        bytes: usize,
        reason: String,
    },
    #[error("rank {rank}: aborted because {cause}")]
    Aborted { rank: Rank, cause: String },
    #[error(
        "rank {rank} already has a collective in flight; a communicator runs one collective \
         at a time, so call it from one thread"
    )]
    Busy { rank: Rank },
    #[error("rank {rank}: not started because {cause}")]
    Refused { rank: Rank, cause: String },
    #[error(
        "rank {rank}: waited {waited:?} for its gate to open (the agreement of every rank \
         on the call); check that every rank makes the same calls, or raise OXCCL_EXEC_TIMEOUT"
    )]
    GateTimeout { rank: Rank, waited: Duration },
    #[error("bad device configuration: {0}")]
    Config(String),
}
