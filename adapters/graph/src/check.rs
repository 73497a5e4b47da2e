//! `OXCCL_GRAPH_CHECK=1`: the analyzer proves the compiled sequence before it may run.
//!
//! Each step is recorded for every rank as the communicator would run it (its topology,
//! CCL buffer, link channels and mode) and proved alone ([`analyze`]); the steps are
//! then proved back to back under the device's epoch fence ([`analyze_sequence`]): no
//! deadlock, lost wakeup or unordered memory conflict between one step and the next.
//! Point-to-point steps (send/recv, AlltoAllV) are left out of the proof: their layouts
//! differ per rank, and a rank knows only its own; the sequence proof covers the
//! others in order. Every rank proves the same sequence, so every rank reaches the same
//! verdict.

use oxccl::framework::analyzer::{analyze, analyze_sequence, Recording};
use oxccl::framework::{Communicator, Step};
use oxccl::{Error, Mode};

/// Prove `steps` as `comm` runs them.
pub(crate) fn prove(comm: &Communicator, steps: &[Step]) -> Result<(), Error> {
    let mut recordings = Vec::new();
    for (index, step) in steps.iter().enumerate() {
        if step.prepared().is_none() {
            continue;
        }
        if step.op().kind.is_p2p() {
            tracing::info!(step = index, "graph check: point-to-point step left out");
            continue;
        }
        let mut config = comm.config().clone();
        config.topology = Some(comm.topology().clone());
        // The mode the communicator offers: the recording derives the executor's own
        // from it, as the communicator did (`prepared.mode`).
        config.zero_copy = comm.mode() == Mode::Direct;
        let recording = Recording::record(step.op(), step.in_place(), config)?;
        let report = analyze(&recording);
        if !report.passed() {
            return Err(Error::GraphCheck {
                report: format!("step {index} ({}): {report}", step.op().kind),
            });
        }
        recordings.push((index, recording));
    }
    if recordings.len() < 2 {
        return Ok(());
    }
    let recs: Vec<&Recording> = recordings.iter().map(|(_, r)| r).collect();
    let report = analyze_sequence(&recs).map_err(|e| Error::GraphCheck {
        report: e.to_string(),
    })?;
    if !report.passed() {
        let indices: Vec<usize> = recordings.iter().map(|(i, _)| *i).collect();
        return Err(Error::GraphCheck {
            report: format!(
                "steps {indices:?} back to back (operation k of the report is step \
                 indices[k]): {report}"
            ),
        });
    }
    Ok(())
}
