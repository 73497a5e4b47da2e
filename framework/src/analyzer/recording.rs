//! Recording: every rank's program for one operation, built by the real framework path
//! (select_alg, resource calculation, orchestration) on the `sim` device, with what the
//! checks and the cost model need to interpret it.

use crate::communicator::Communicator;
use crate::config::Config;
use crate::error::Error;
use crate::executor::{Mode, ResourceRequest};
use crate::op::OpParam;
use crate::topology::Topology;
use oxccl_platform::{Buf, NotifyLayout, Rank, RankProgram};
use std::sync::Arc;

/// One rank's part of a recording.
#[derive(Clone, Debug)]
pub struct RankRecording {
    pub program: Arc<RankProgram>,
    pub request: ResourceRequest,
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
    /// Build every rank's program for `op` with `config` (its topology decides the rank
    /// count; the device is replaced by the `sim` device, zero-copy when `config.zero_copy`).
    pub fn record(op: &OpParam, in_place: bool, config: Config) -> Result<Recording, Error> {
        let ranks = config.topology.as_ref().map_or(1, Topology::ranks);
        Self::record_each(&vec![op.clone(); ranks], in_place, config)
    }

    /// Like [`Recording::record`], with each rank's own parameters (`ops[rank]`), as the
    /// point-to-point vector operators need.
    pub fn record_each(
        ops: &[OpParam],
        in_place: bool,
        config: Config,
    ) -> Result<Recording, Error> {
        let topology = config
            .topology
            .clone()
            .ok_or_else(|| crate::error::ConfigError {
                var: "topology",
                value: String::new(),
                reason: "recording needs an explicit topology".into(),
            })?;
        let config = Config {
            device: "sim".to_string(),
            ..config
        };
        let (layout, ccl_bytes) = (
            NotifyLayout {
                ranks: topology.ranks(),
                link_channels: config.link_channels,
            },
            config.ccl_buffer_bytes,
        );
        if ops.len() != topology.ranks() {
            return Err(crate::error::ConfigError {
                var: "ranks",
                value: ops.len().to_string(),
                reason: format!(
                    "one operation per rank needed, the topology has {}",
                    topology.ranks()
                ),
            }
            .into());
        }
        let comms = Communicator::init_all(topology.ranks(), config)?;
        let prepared = comms
            .iter()
            .zip(ops)
            .map(|(c, op)| c.prepare(op, in_place))
            .collect::<Result<Vec<_>, _>>()?;
        let first = &prepared[0];
        Ok(Recording {
            op: ops[0].clone(),
            ops: ops.to_vec(),
            topology,
            mode: first.mode,
            in_place,
            executor: first.selection.executor.name,
            reason: first.selection.reason.clone(),
            layout,
            ccl_bytes,
            ranks: prepared
                .into_iter()
                .map(|p| RankRecording {
                    program: p.program,
                    request: p.request,
                })
                .collect(),
        })
    }

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
    use oxccl_platform::{DataType, ReduceOp};

    #[test]
    fn recording_without_executors_reports_the_selection_error() {
        // The framework crate registers no executor of its own.
        let config = Config {
            topology: Some(Topology::single_server(2)),
            ..Config::default()
        };
        let op = OpParam::all_reduce(10, DataType::F32, ReduceOp::Sum);
        let err = Recording::record(&op, false, config).unwrap_err();
        assert!(matches!(err, Error::NoExecutor { .. }), "{err:?}");
    }
}
