//! The ranks agree that they captured the same sequence.
//!
//! In two rounds: the shapes first (before anything is built, so a rank that captured
//! another sequence never allocates or compiles for it: resources the ranks build
//! together, such as scratch, would otherwise differ between them), then the executors
//! each rank's select_alg chose and whether every step could be prepared.
//!
//! Each step becomes a fixed [`Record`] of [`WORDS`] integers; the ranks exchange their
//! step counts, then their records (padded to the longest capture), with two AllGathers
//! per round on the communicator being compiled for — so the check is the same for ranks
//! in one process and in many, and costs two small collective pairs per compile, never
//! per launch. Every rank compares every rank's records and reaches the same verdict.
//!
//! What is compared mirrors the eager call agreement (`oxccl::framework::agreement`):
//! operator, data type, reduce op (of operators that reduce), root, count (the block
//! counts of AllGatherV / ReduceScatterV, by digest; not the per-rank layouts of the
//! point-to-point operators, which legitimately differ), the form (in place or not) and
//! the executor `select_alg` chose (by digest of its name).

use crate::MAX_STEPS;
use oxccl::framework::digest::Digest;
use oxccl::framework::op::VLayout;
use oxccl::{Communicator, DataType, Error, OpKind, OpParam, ReduceOp};

/// Integers per step record.
const WORDS: usize = 8;

/// What a record's first word says.
const PRESENT: u64 = 1;
const REFUSED: u64 = 2;

/// The fields of a record after the status word, with their names in errors.
const FIELDS: [&str; WORDS] = [
    "validity",
    "operator",
    "data type",
    "reduce op",
    "root",
    "count",
    "form",
    "executor",
];

type Record = [u64; WORDS];

/// What this rank knows of one step: its operator and form, and the executor once the
/// step is prepared (`None` before, or when it has no work).
pub(crate) struct Mine<'s> {
    pub op: &'s OpParam,
    pub in_place: bool,
    pub executor: Option<&'static str>,
}

/// Agree on `steps` (this rank's, each described or refused) with every rank of `comm`.
/// Returns this rank's own error of a refused step when that is the first difference.
pub(crate) fn agree(comm: &Communicator, steps: &[Result<Mine<'_>, Error>]) -> Result<(), Error> {
    let mine: Vec<Record> = steps.iter().map(record_of).collect();
    let counts = comm.all_gather_to_vec(&[mine.len() as u64])?;
    // Every rank reads the same counts, so every rank refuses alike.
    let longest = counts.iter().copied().max().unwrap_or(0);
    let Some(longest) = usize::try_from(longest).ok().filter(|&l| l <= MAX_STEPS) else {
        return Err(Error::CaptureMismatch {
            step: MAX_STEPS,
            field: "length",
            detail: format!("a rank reports {longest} steps, more than {MAX_STEPS}"),
        });
    };
    let mut send = vec![0u64; longest * WORDS];
    for (slot, record) in send.chunks_exact_mut(WORDS).zip(&mine) {
        slot.copy_from_slice(record);
    }
    comm.size()
        .checked_mul(send.len())
        .ok_or_else(|| Error::CaptureMismatch {
            step: longest,
            field: "length",
            detail: format!(
                "{longest} steps on {} ranks do not fit in memory",
                comm.size()
            ),
        })?;
    let all = comm.all_gather_to_vec(&send)?;
    let record = |rank: usize, step: usize| -> Option<Record> {
        (step < counts[rank] as usize).then(|| {
            let at = (rank * longest + step) * WORDS;
            all[at..at + WORDS].try_into().expect("WORDS words")
        })
    };
    for step in 0..longest {
        let records: Vec<Option<Record>> = (0..comm.size()).map(|r| record(r, step)).collect();
        if records.windows(2).all(|w| w[0] == w[1]) && records[0].is_some_and(|r| r[0] == PRESENT) {
            continue;
        }
        if let Some(Err(own)) = steps.get(step) {
            return Err(own.clone());
        }
        return Err(difference(step, &records, &counts, steps));
    }
    Ok(())
}

/// The record of one step.
fn record_of(step: &Result<Mine<'_>, Error>) -> Record {
    let Ok(step) = step else {
        return [REFUSED, 0, 0, 0, 0, 0, 0, 0];
    };
    let op = step.op;
    let index = |found: Option<usize>| found.map_or(u64::MAX, |i| i as u64);
    let count = match op.layout.as_deref() {
        None => op.count as u64,
        Some(VLayout::Blocks { counts, .. }) => {
            let mut d = Digest::new();
            counts.iter().for_each(|&c| {
                d.usize(c);
            });
            d.finish()
        }
        Some(VLayout::P2p { .. }) => 0,
    };
    [
        PRESENT,
        index(OpKind::ALL.iter().position(|k| *k == op.kind)),
        index(DataType::ALL.iter().position(|d| *d == op.dtype)),
        match op.kind.reduces() {
            true => index(ReduceOp::ALL.iter().position(|o| *o == op.op)),
            false => u64::MAX,
        },
        op.root.map_or(u64::MAX, |r| r as u64),
        count,
        u64::from(step.in_place),
        step.executor.map_or(0, executor_digest),
    ]
}

fn executor_digest(name: &str) -> u64 {
    Digest::new().str(name).finish()
}

/// The error for the first step whose records differ.
fn difference(
    step: usize,
    records: &[Option<Record>],
    counts: &[u64],
    mine: &[Result<Mine<'_>, Error>],
) -> Error {
    if records.iter().any(Option::is_none) {
        return Error::CaptureMismatch {
            step,
            field: "length",
            detail: by_value(counts.iter().map(|c| format!("{c} steps")).collect()),
        };
    }
    let records: Vec<Record> = records.iter().map(|r| r.expect("checked")).collect();
    if let Some(refused) = records.iter().position(|r| r[0] == REFUSED) {
        return Error::CaptureMismatch {
            step,
            field: "arguments",
            detail: format!("rank {refused} refused the step (its own error says why)"),
        };
    }
    let word = (1..WORDS)
        .find(|&w| records.iter().any(|r| r[w] != records[0][w]))
        .expect("records differ");
    let own = mine.get(step).and_then(|s| s.as_ref().ok());
    let values = records.iter().map(|r| show(word, r[word], own)).collect();
    Error::CaptureMismatch {
        step,
        field: FIELDS[word],
        detail: by_value(values),
    }
}

/// Word `word` of a record, as the user passed it.
fn show(word: usize, value: u64, own: Option<&Mine<'_>>) -> String {
    let at = |len: usize| (value < len as u64).then_some(value as usize);
    match word {
        1 => at(OpKind::ALL.len()).map_or("?".into(), |i| OpKind::ALL[i].to_string()),
        2 => at(DataType::ALL.len()).map_or("?".into(), |i| DataType::ALL[i].to_string()),
        3 => at(ReduceOp::ALL.len()).map_or("none".into(), |i| format!("{:?}", ReduceOp::ALL[i])),
        4 => match value {
            u64::MAX => "no root".into(),
            root => format!("root {root}"),
        },
        5 => match own.and_then(|s| s.op.layout.as_ref()) {
            Some(_) => format!("block counts (digest {value:#x})"),
            None => format!("count {value}"),
        },
        6 => ["out of place", "in place"][usize::from(value == 1)].into(),
        _ => match own.and_then(|s| s.executor) {
            Some(name) if executor_digest(name) == value => format!("executor {name}"),
            _ if value == 0 => "no executor (nothing to run)".into(),
            _ => format!("another executor (digest {value:#x})"),
        },
    }
}

/// `ranks 0, 1 pass X; rank 2 passes Y` from each rank's value.
fn by_value(values: Vec<String>) -> String {
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (rank, value) in values.into_iter().enumerate() {
        match groups.iter_mut().find(|(v, _)| *v == value) {
            Some((_, ranks)) => ranks.push(rank),
            None => groups.push((value, vec![rank])),
        }
    }
    groups
        .into_iter()
        .map(|(value, ranks)| match ranks.as_slice() {
            [one] => format!("rank {one} passes {value}"),
            many => format!("ranks {many:?} pass {value}"),
        })
        .collect::<Vec<_>>()
        .join("; ")
}
