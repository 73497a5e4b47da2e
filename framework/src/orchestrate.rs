//! What ends an operation on a device: the Close exchange appended to the planner's
//! program.
//!
//! The planner ([`crate::planner`]) builds a rank's program without any framework signal;
//! this module appends the two-phase Close exchange with every linked peer that today
//! keeps back-to-back operations apart (see
//! [`LinkSignal::Close`](oxccl_platform::LinkSignal::Close)). Everything that runs or
//! replays a program as a device would (the communicator, the analyzer's recording,
//! select_alg's model) plans through [`build_program`], so they all see the same tasks.

use crate::error::Error;
use crate::executor::{Executor, PlanCtx};
use crate::op::OpParam;
use crate::planner::{self, Planned, RankRecording, Recording, Setting};
use oxccl_platform::{Link, LinkKind, NotifyLayout, RankProgram};
use std::sync::Arc;

/// Plan `ctx.rank`'s part of the operation ([`planner::plan`]) and end it with the Close
/// exchange when the operation has work.
pub fn build_program(
    executor_name: &'static str,
    executor: &dyn Executor,
    ctx: &PlanCtx<'_>,
    layout: NotifyLayout,
) -> Result<Planned, Error> {
    let mut planned = planner::plan(executor_name, executor, ctx, layout)?;
    if ctx.op.has_work() {
        let links = planner::granted_links(executor_name, ctx, &planned.request)?;
        close_links(&mut planned.program, ctx.rank, &links, layout);
    }
    Ok(planned)
}

/// Plan every rank's part of `ops` (one per rank, `ops[rank]`) with `executor`,
/// registered as `name`; `reason` says why it runs. Each program ends as a device runs
/// it ([`build_program`]).
pub fn record_every_rank(
    name: &'static str,
    executor: &dyn Executor,
    reason: String,
    ops: &[OpParam],
    setting: &Setting<'_>,
) -> Result<Recording, Error> {
    let topology = setting.topology;
    if ops.len() != topology.ranks() || ops.is_empty() {
        return Err(crate::error::ConfigError {
            var: "ranks",
            value: ops.len().to_string(),
            reason: format!(
                "one operation per rank needed, the topology has {}",
                topology.ranks()
            ),
            source: None,
        }
        .into());
    }
    let layout = setting.layout();
    let ranks = ops
        .iter()
        .enumerate()
        .map(|(rank, op)| {
            let ctx = setting.ctx(rank, op);
            let planned = build_program(name, executor, &ctx, layout)?;
            Ok(RankRecording {
                program: Arc::new(planned.program),
                request: planned.request,
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
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

/// End the program with a two-phase Close exchange with every linked peer, on the main
/// stream: Close on link channel 0 to every peer, wait for every peer's, then the same on
/// channel 1. Afterwards no peer touches this rank's buffers and every notify this rank
/// posted in the operation was consumed, so the next operation may use any executor.
///
/// Why two phases: when this rank has seen a peer's phase-1 Close, the peer's kernel is
/// done, so every kernel notify this rank posted to it was consumed; but the peer may not
/// have consumed this rank's own Close yet, and an operation whose next post to that peer
/// is again a Close would post it twice (a lost wakeup). Phase 2 closes that gap: this
/// rank finishes only after the peer's phase-2 post, which follows the peer's consumption
/// of every phase-1 Close; and this rank's phase-2 Close of the next operation follows the
/// peer's phase-1 Close of that operation, which follows the peer's consumption of this
/// rank's phase-2 Close. Close is the framework's own signal, never used by executors.
fn close_links(
    program: &mut RankProgram,
    rank: usize,
    links: &[Option<LinkKind>],
    layout: NotifyLayout,
) {
    for channel in 0..2 {
        let peers: Vec<Link> = links
            .iter()
            .enumerate()
            .filter_map(|(peer, kind)| kind.map(|k| Link::new(rank, peer, k, channel, layout)))
            .collect();
        let main = &mut program.streams[0];
        peers.iter().for_each(|l| l.tx_close(main));
        peers.iter().for_each(|l| l.rx_close(main));
    }
}
