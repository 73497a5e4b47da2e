//! A recording: every rank's program for one operation, as the planner built them, with
//! what the analyzer's checks and the cost model need to interpret them.
//!
//! [`record_every_rank`] plans each rank with one executor; the
//! analyzer's `Recording::record` runs select_alg first, as a communicator would.

use super::Setting;
use crate::error::Error;
use crate::executor::{Executor, Mode, ResourceRequest};
use crate::op::OpParam;
use crate::topology::Topology;
use oxccl_platform::{Buf, NotifyLayout, Rank, RankProgram};
use std::sync::Arc;

/// Plan every rank's part of `ops` (one per rank, `ops[rank]`) with `executor`,
/// registered as `name`; `reason` says why it runs.
pub fn record_every_rank(
    name: &'static str,
    executor: &dyn Executor,
    reason: String,
    ops: &[OpParam],
    setting: &Setting<'_>,
) -> Result<Recording, Error> {
    let topology = setting.topology;
    if ops.len() != topology.ranks() || ops.is_empty() {
        return Err(crate::error::ConfigError::new(
            "ranks",
            ops.len().to_string(),
            format!(
                "one operation per rank needed, the topology has {}",
                topology.ranks()
            ),
        )
        .into());
    }
    let layout = setting.layout();
    let plan_rank = |rank: Rank| -> Result<RankRecording, Error> {
        let ctx = setting.ctx(rank, &ops[rank]);
        let planned = super::plan(name, executor, &ctx, layout)?;
        Ok(RankRecording {
            program: Arc::new(planned.program),
            request: planned.request,
            loops: planned.loops,
        })
    };
    let ranks = plan_in_parallel(ops.len(), plan_rank)?;
    Ok(Recording {
        op: ops[0].clone(),
        ops: ops.to_vec(),
        topology: topology.clone(),
        mode: setting.mode,
        in_place: setting.in_place,
        executor: name,
        reason,
        layout,
        ccl_bytes: setting.ccl_bytes,
        ranks,
    })
}

/// Ranks below which planning stays on the calling thread.
const PARALLEL_FROM: usize = 64;

/// `plan(rank)` for every rank, in rank order, on the cores this process may use (ranks
/// plan independently: planning is pure). The error returned is the lowest rank's, as a
/// sequential loop would return, so every caller sees the same one.
fn plan_in_parallel<T: Send>(
    ranks: usize,
    plan: impl Fn(Rank) -> Result<T, Error> + Sync,
) -> Result<Vec<T>, Error> {
    // Asked only for big jobs: on Linux it reads the affinity mask and cgroup files.
    let threads = match ranks < PARALLEL_FROM {
        true => 1,
        false => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    if threads < 2 {
        return (0..ranks).map(&plan).collect();
    }
    let per = ranks.div_ceil(threads);
    let plan = &plan;
    let parts: Vec<Result<Vec<T>, Error>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..ranks)
            .step_by(per)
            .map(|lo| scope.spawn(move || (lo..(lo + per).min(ranks)).map(plan).collect()))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    let mut out = Vec::with_capacity(ranks);
    for part in parts {
        out.extend(part?);
    }
    Ok(out)
}

/// One rank's part of a recording.
#[derive(Clone, Debug)]
pub struct RankRecording {
    pub program: Arc<RankProgram>,
    pub request: ResourceRequest,
    /// Where each loop iteration lies in `program` (empty for a hand-made program).
    pub loops: super::Loops,
}

/// Every rank's program for one operation.
#[derive(Clone, Debug)]
pub struct Recording {
    /// The operation (rank 0's parameters).
    pub op: OpParam,
    /// Every rank's parameters, indexed by rank: the same for all but the point-to-point
    /// vector operators, whose layouts differ per rank.
    pub ops: Vec<OpParam>,
    pub topology: Topology,
    pub mode: Mode,
    /// The user called the in-place form: Input and Output are the same memory.
    pub in_place: bool,
    pub executor: &'static str,
    /// Why select_alg chose the executor.
    pub reason: String,
    pub layout: NotifyLayout,
    /// Bytes of each CCL buffer (CclIn and CclOut).
    pub ccl_bytes: usize,
    /// Indexed by rank.
    pub ranks: Vec<RankRecording>,
}

impl Recording {
    /// Number of ranks.
    pub fn rank_count(&self) -> usize {
        self.ranks.len()
    }

    /// Bytes of `buf` on `rank`. In place, Input and Output are one buffer of the larger size.
    pub fn buffer_len(&self, rank: Rank, buf: Buf) -> usize {
        let (input, output) = self.ops[rank].buffer_bytes(rank, self.rank_count());
        match buf {
            Buf::Input | Buf::Output if self.in_place => input.max(output),
            Buf::Input => input,
            Buf::Output => output,
            Buf::CclIn | Buf::CclOut => self.ccl_bytes,
            Buf::Scratch => self.ranks[rank].request.scratch_bytes,
        }
    }

    /// Byte offsets of `rank`'s input and output data in the Input and Output buffers:
    /// `(0, 0)` out of place; in place, NCCL's convention
    /// ([`OpParam::in_place_offsets`]).
    pub fn user_offsets(&self, rank: Rank) -> (usize, usize) {
        match self.in_place {
            true => self.ops[rank].in_place_offsets(rank),
            false => (0, 0),
        }
    }

    /// True when `a` and `b` name the same memory on a rank (Input and Output in place).
    pub fn same_memory(&self, a: Buf, b: Buf) -> bool {
        a == b || (self.in_place && a.is_user() && b.is_user())
    }

    /// Local notifies (fork/join plus executor-private) of `rank`.
    pub fn local_notifies(&self, rank: Rank) -> usize {
        let r = &self.ranks[rank].request;
        2 * r.slave_streams + r.local_notifies
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fail(rank: Rank) -> Error {
        Error::BadProgram {
            executor: "test".into(),
            rank,
            reason: "planted".into(),
        }
    }

    #[test]
    fn parallel_planning_keeps_rank_order_and_the_lowest_ranks_error() {
        let ranks = 3 * PARALLEL_FROM + 5;
        let planned = plan_in_parallel(ranks, Ok).unwrap();
        assert_eq!(planned, (0..ranks).collect::<Vec<_>>());
        let bad = [ranks - 2, PARALLEL_FROM + 1];
        let err = plan_in_parallel(ranks, |r| match bad.contains(&r) {
            true => Err(fail(r)),
            false => Ok(r),
        })
        .unwrap_err();
        assert!(
            matches!(err, Error::BadProgram { rank, .. } if rank == PARALLEL_FROM + 1),
            "{err:?}"
        );
    }
}
