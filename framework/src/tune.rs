//! Tuning tables: measured executor times that `select_alg` prefers over the cost model.
//!
//! INTERFACE SKELETON (being filled in): the types and signatures below are the contract
//! between `select` (which calls [`TuneTable::pick`]) and `oxccl tune` (which writes
//! tables with [`TuneTable::to_text`]).

use crate::op::OpKind;
use oxccl_platform::DataType;

/// One measurement: `executor` ran `op` on `ranks` ranks of topology `topology`
/// ([`crate::Topology::describe`]) with `bytes` per rank of `dtype` in `time_us`.
#[derive(Clone, Debug, PartialEq)]
pub struct TuneEntry {
    pub op: OpKind,
    pub ranks: usize,
    pub topology: String,
    pub dtype: DataType,
    pub bytes: usize,
    pub executor: String,
    pub time_us: f64,
}

/// What a lookup asks for.
#[derive(Clone, Debug)]
pub struct TuneKey<'a> {
    pub op: OpKind,
    pub ranks: usize,
    /// [`crate::Topology::describe`] of the communicator's topology.
    pub topology: &'a str,
    pub dtype: DataType,
    /// Bytes per rank of the operation's input (as `SelectRequest::bytes`).
    pub bytes: usize,
}

/// The measured choice for a key.
#[derive(Clone, Debug, PartialEq)]
pub struct TunedPick {
    pub executor: String,
    pub time_us: f64,
    /// The measured size the pick comes from.
    pub measured_bytes: usize,
}

/// A loaded tuning table.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TuneTable {
    pub entries: Vec<TuneEntry>,
}

impl TuneTable {
    /// The fastest measured executor among `candidates` for `key`, from the measurements
    /// of the size bucket `key.bytes` falls in; `None` when the table has none.
    pub fn pick(&self, key: &TuneKey<'_>, candidates: &[&str]) -> Option<TunedPick> {
        let _ = (key, candidates);
        None
    }
}
