//! Recording the way a communicator would: select_alg, then the planner, for every rank.
//!
//! The data type, [`Recording`], belongs to the planner; this adds the constructors that
//! start from a [`Config`] and let select_alg choose (or the config's override force) the
//! executor, so `oxccl check` and the tests prove exactly what a communicator with that
//! configuration would run. Nothing here builds a communicator or a device: the mode is
//! what a communicator with `config.zero_copy` on that topology would use
//! ([`crate::planner::mode_for`]).

pub use crate::planner::{RankRecording, Recording};

use crate::config::Config;
use crate::error::{ConfigError, Error};
use crate::op::OpParam;
use crate::planner::Setting;
use crate::select::{select_alg, SelectRequest, Selection};
use crate::topology::Topology;

impl Recording {
    /// Every rank's program for `op` with `config` (its topology decides the rank count;
    /// zero-copy when `config.zero_copy`).
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
        let topology = config.topology.as_ref().ok_or_else(|| ConfigError {
            var: "topology",
            value: String::new(),
            reason: "recording needs an explicit topology".into(),
            source: None,
        })?;
        check_config(&config, topology, ops.len())?;
        let setting = Setting {
            topology,
            mode: crate::planner::mode_for(config.zero_copy, topology),
            ccl_bytes: config.ccl_buffer_bytes,
            link_channels: config.link_channels,
            in_place,
        };
        let selection = agreed_selection(ops, &setting, &config)?;
        let entry = selection.executor;
        let executor = entry.instantiate();
        crate::planner::record_every_rank(
            entry.name,
            executor.as_ref(),
            selection.reason,
            ops,
            &setting.for_links(entry.constraints.links),
        )
    }
}

/// What a communicator of `ranks` ranks with `config` would refuse at creation.
fn check_config(config: &Config, topology: &Topology, ranks: usize) -> Result<(), Error> {
    if ranks != topology.ranks() {
        return Err(ConfigError {
            var: "ranks",
            value: ranks.to_string(),
            reason: format!(
                "one operation per rank needed, the topology has {}",
                topology.ranks()
            ),
            source: None,
        }
        .into());
    }
    topology.check_connected()?;
    config.algo.validate()?;
    if config.link_channels == 0 {
        // What the device refuses at creation (ConfigFault::NoLinkChannels).
        return Err(ConfigError::new(
            "link_channels",
            "0",
            "links need at least one notify channel (executors that alternate channels by \
             iteration use two, the default)",
        )
        .into());
    }
    Ok(())
}

/// select_alg's choice for every rank's call; an error when two ranks would run different
/// executors (a communicator's call agreement refuses that call too).
fn agreed_selection(
    ops: &[OpParam],
    setting: &Setting<'_>,
    config: &Config,
) -> Result<Selection, Error> {
    let ranks = setting.topology.ranks();
    let mut first: Option<Selection> = None;
    for (rank, op) in ops.iter().enumerate() {
        op.validate_shape(rank, ranks)?;
        if rank > 0 && *op == ops[rank - 1] {
            continue;
        }
        let req = SelectRequest {
            op,
            ranks,
            topology: setting.topology,
            bytes: SelectRequest::input_bytes(op, rank, ranks),
            ccl_bytes: setting.ccl_bytes,
            mode: setting.mode,
            in_place: setting.in_place,
            link_channels: setting.link_channels,
            tune: config.tune.as_deref(),
        };
        let selection = select_alg(&req, &config.algo)?;
        match &first {
            None => first = Some(selection),
            Some(f) if std::ptr::eq(f.executor, selection.executor) => {}
            Some(f) => {
                return Err(ConfigError {
                    var: "executor",
                    value: selection.executor.name.to_string(),
                    reason: format!(
                        "rank {rank} would run `{}` and rank 0 `{}`: every rank must run the \
                         same executor; force one with OXCCL_ALGO",
                        selection.executor.name, f.executor.name
                    ),
                    source: None,
                }
                .into())
            }
        }
    }
    first.ok_or_else(|| {
        ConfigError {
            var: "ranks",
            value: "0".into(),
            reason: "a recording needs at least one rank".into(),
            source: None,
        }
        .into()
    })
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
