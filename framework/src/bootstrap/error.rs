//! What can go wrong while the ranks of a job find each other.

use super::Refusal;
use crate::error::Cause;
use std::net::SocketAddr;
use std::time::Duration;

/// Why a rank could not join its job (or a root could not start). Every variant says what
/// was tried, what happened and what to do; io causes are kept as the source.
#[derive(Clone, Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error(
        "the root of the job at {addr} could not be reached within {waited:?}; start the \
         rank that created the unique id first, and check the address and the firewall"
    )]
    RootUnreachable {
        addr: SocketAddr,
        waited: Duration,
        #[source]
        source: Option<Cause>,
    },
    #[error("the bootstrap root could not listen on {addr}; choose another address or port")]
    Listen {
        addr: String,
        #[source]
        source: Cause,
    },
    #[error("bootstrap connection to {peer}: {what} failed")]
    Io {
        peer: String,
        /// What the rank or the root was doing.
        what: &'static str,
        #[source]
        source: Cause,
    },
    #[error("the root refused rank {rank}: {refusal}")]
    Refused { rank: usize, refusal: Refusal },
    #[error(
        "host {host} runs ranks {ranks}, which are not consecutive; place ranks in blocks \
         per host (mpirun --map-by slot, srun --distribution=block) or describe the \
         placement in OXCCL_TOPO_FILE"
    )]
    ScatteredHost { host: String, ranks: String },
    #[error("malformed bootstrap message from {peer}: {reason}")]
    Protocol { peer: String, reason: String },
    #[error("not a unique id: {reason} (expected the form `oxccl1-<ranks>-<secret>@<host:port>`)")]
    BadId { reason: String },
    #[error(
        "rank {rank} is not in 0..{ranks}: every rank of a job of {ranks} passes its own rank \
         and the same rank count"
    )]
    BadRank { rank: usize, ranks: usize },
    #[error(
        "{spec:?} names no address to reach the root by; give OXCCL_COMM_ID as host:port \
         (a name that resolves, or an IP address)"
    )]
    Resolve {
        spec: String,
        #[source]
        source: Option<Cause>,
    },
    #[error("no secure random bytes for the job's secret")]
    Random {
        #[source]
        source: Cause,
    },
    #[error(
        "the rendezvous file {path} did not appear within {waited:?}; rank 0 writes it once \
         it created the job's id (set OXCCL_COMM_ID=host:port where the ranks share no \
         file system)"
    )]
    NoRendezvousFile { path: String, waited: Duration },
    #[error("the rendezvous file {path}: {what} failed")]
    RendezvousFile {
        path: String,
        what: &'static str,
        #[source]
        source: Cause,
    },
}

impl BootstrapError {
    pub(crate) fn io(peer: impl ToString, what: &'static str, e: std::io::Error) -> Self {
        BootstrapError::Io {
            peer: peer.to_string(),
            what,
            source: std::sync::Arc::new(e),
        }
    }
}
