//! The planner: from an executor and an operation to one rank's resource request and
//! program, with no device and no communicator.
//!
//! Planning is a pure function of data every rank shares: the executor, the operation,
//! the topology, the rank, the notify layout (rank count and link channels), the mode
//! (staged through the CCL buffers, or direct on user buffers), whether the call is in
//! place, and the CCL buffer size ([`PlanCtx`] plus [`NotifyLayout`]). It asks the
//! executor for its [`ResourceRequest`] (HCCL's `CalcResRequest`), grants the links the
//! request names (a broken or missing link is an error naming the pair), then runs the
//! orchestration loop ([`plan_program`]): per iteration it stages user data through the CCL
//! buffers when the mode says so and lets the executor append one iteration's tasks
//! through a [`KernelCtx`](crate::executor::KernelCtx) that carries the request's typed
//! plan. Last it checks the program against the grant, so no program reaches
//! anyone with a task over a link that was not granted.
//!
//! Three callers share it, which is why it sits below them all:
//! - the communicator, which hands the program to its device;
//! - select_alg's cost model, which plans candidates it will never run;
//! - the analyzer's recording, which plans every rank to prove the programs right.
//!
//! [`Recording`] is the planner's answer for every rank of one operation, the data the
//! analyzer checks and the cost model replays; [`sample`] plans only a few ranks of a
//! symmetric topology, for estimates at cluster scale.
//!
//! The planner appends no framework signal of its own: back-to-back operations are kept
//! apart by the device's epoch fence (`oxccl_platform::device`), not by tasks.

mod iteration;
mod links;
pub mod loops;
mod program;
pub mod recording;
pub mod sample;

pub(crate) use iteration::{block_sides, inside_iteration};
pub use loops::{Iterations, LoopMark, Loops};
pub use program::plan_program;
pub use recording::{record_every_rank, RankRecording, Recording};

use crate::error::Error;
use crate::executor::{Executor, LinkNeed, Mode, PlanCtx, ResourceRequest};
use crate::op::OpParam;
use crate::topology::Topology;
use oxccl_platform::{NotifyLayout, Rank, RankProgram};

/// What every rank plans with, besides its rank and its operation: the same on every
/// rank of a communicator.
#[derive(Copy, Clone, Debug)]
pub struct Setting<'a> {
    pub topology: &'a Topology,
    /// How the orchestration loop binds the executor's buffers: the mode the
    /// communicator offers, until [`Setting::for_links`] gives an executor's own.
    pub mode: Mode,
    /// Bytes of each CCL buffer.
    pub ccl_bytes: usize,
    /// Notify channels per link.
    pub link_channels: usize,
    /// The in-place form was called.
    pub in_place: bool,
}

impl<'a> Setting<'a> {
    /// The notify layout of the communicator.
    pub fn layout(&self) -> NotifyLayout {
        NotifyLayout {
            ranks: self.topology.ranks(),
            link_channels: self.link_channels,
        }
    }

    /// The setting an executor that needs `need` of its links plans with: its own mode
    /// ([`executor_mode`]), derived from the one the communicator offers.
    pub fn for_links(self, need: LinkNeed) -> Setting<'a> {
        Setting {
            mode: executor_mode(self.mode, self.topology, need),
            ..self
        }
    }

    /// The planning context of `rank` for `op`.
    pub fn ctx(&self, rank: Rank, op: &'a OpParam) -> PlanCtx<'a> {
        PlanCtx {
            rank,
            ranks: self.topology.ranks(),
            op,
            topology: self.topology,
            mode: self.mode,
            ccl_bytes: self.ccl_bytes,
            link_channels: self.link_channels,
            in_place: self.in_place,
        }
    }
}

/// One rank's plan: what it asked for and what it will run.
#[derive(Clone, Debug)]
pub struct Planned {
    pub request: ResourceRequest,
    pub program: RankProgram,
    /// Where each loop iteration lies in `program`.
    pub loops: Loops,
}

/// The mode a communicator offers: [`Mode::Direct`] (zero-copy on user buffers) when the
/// device lets peers reach user buffers (`zero_copy`) and either every link of `topology`
/// is load/store, or every link inside its servers is and some server has two ranks or
/// more (a job across hosts whose ranks on one host share memory), or no link is (every
/// peer is reached by puts: then no peer touches a rank's user buffers, and Direct spares
/// each call its copies into and out of the CCL buffers; the host device's exit fence
/// leaves put-only peers out, so it costs no wait). Anything else stages. Each executor
/// runs in the mode [`executor_mode`] derives from this one. One rule for the
/// communicator, the analyzer's recordings and `oxccl check`, so what is proved is what
/// runs.
pub fn mode_for(zero_copy: bool, topology: &Topology) -> Mode {
    let shares = topology.all_load_store() || topology.load_store_within_servers();
    match zero_copy && (shares || topology.all_put()) {
        true => Mode::Direct,
        false => Mode::Staged,
    }
}

/// The mode an executor that needs `need` of its links runs in on a communicator that
/// offers `offered` ([`mode_for`]) on `topology`: zero-copy **per peer**, after NCCL's
/// registered buffers (the peers that map a rank's buffers use them; the network path
/// bounces).
///
/// A put-only link reaches a peer's registered CCL buffers and scratch, never its user
/// buffers. Where every link is load/store, every executor runs as offered. Where only
/// the links inside servers are (a job across hosts), every executor that can run there
/// runs on user buffers, each in its own way:
/// - one that declares [`LinkNeed::LoadStoreWithinServer`] loads and stores inside a
///   server and puts into registered buffers across servers;
/// - a put executor ([`LinkNeed::Put`]) writes a peer's user buffer only over a
///   load/store link; across a put-only one its put lands in the peer's Scratch, which
///   the peer copies into place (the put-mesh executors: see the algorithms' `put`
///   template), or it never writes a peer's user buffer at all (put rings, halving and
///   doubling, which put into Scratch zero-copy).
///
/// The put audit, the conformance matrix's put-only shapes and the link-need test prove
/// each in Direct mode with those links put-only; the planner refuses a program that
/// would cross one anyway. An executor that needs load/store everywhere cannot run there
/// and stages (its refusal says why). Each candidate of a selection is planned, modelled
/// and run in its own mode. Where every link is put-only, a put executor runs Direct:
/// it reads its own input and writes its own output, and its peers' puts land in its
/// CCL buffers or Scratch.
pub fn executor_mode(offered: Mode, topology: &Topology, need: LinkNeed) -> Mode {
    match offered {
        Mode::Direct if topology.all_load_store() || need != LinkNeed::LoadStore => Mode::Direct,
        _ => Mode::Staged,
    }
}

/// Plan `ctx.rank`'s part of `ctx.op` with `executor` (registered as `name`): its
/// resource request, then its program.
pub fn plan(
    name: &'static str,
    executor: &dyn Executor,
    ctx: &PlanCtx<'_>,
    layout: NotifyLayout,
) -> Result<Planned, Error> {
    plan_iterations(name, executor, ctx, layout, Iterations::All)
}

/// [`plan`], building only the iterations `which` names (see [`Iterations`]).
pub fn plan_iterations(
    name: &'static str,
    executor: &dyn Executor,
    ctx: &PlanCtx<'_>,
    layout: NotifyLayout,
    which: Iterations,
) -> Result<Planned, Error> {
    // The loop derives offsets from the op's count, blocks and layout without checking
    // each product again: that rests on the shape being valid, so the planner checks it
    // itself rather than trusting every caller (a plugin may call it directly).
    ctx.op.validate_shape(ctx.rank, ctx.ranks)?;
    let request = executor.resources(ctx)?;
    let (program, loops) = plan_program(name, executor, ctx, &request, layout, which)?;
    Ok(Planned {
        request,
        program,
        loops,
    })
}

/// The link kind to every peer `ctx.rank` is granted by `request` (`None`: not
/// requested), as the planner grants them.
pub fn granted_links(
    name: &'static str,
    ctx: &PlanCtx<'_>,
    request: &ResourceRequest,
) -> Result<Vec<Option<oxccl_platform::LinkKind>>, Error> {
    links::grant_links(name, ctx, request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::{KernelArgs, KernelCtx, Peers};
    use crate::op::OpKind;
    use oxccl_platform::{DataType, ReduceOp};

    /// Zero-copy per peer: offered where servers are load/store inside and one has two
    /// ranks; taken by an executor that needs load/store only inside servers, or by any
    /// where every link is load/store.
    #[test]
    fn zero_copy_is_offered_per_peer_and_taken_per_executor() {
        use oxccl_platform::LinkAccess::{LoadStore, Put};
        let spec = |s: &str| Topology::parse_spec(s).unwrap();
        let one_host = spec("host4");
        let two_hosts = spec("2x8");
        let every_link_put = spec("2x8").with_fabric_access(Put, Put);
        let one_rank_each = Topology::servers(vec![1, 1, 1])
            .unwrap()
            .with_fabric_access(LoadStore, Put);
        assert_eq!(mode_for(true, &one_host), Mode::Direct);
        assert_eq!(mode_for(true, &two_hosts), Mode::Direct);
        assert_eq!(mode_for(false, &two_hosts), Mode::Staged);
        assert_eq!(
            mode_for(true, &every_link_put),
            Mode::Direct,
            "no staging copies"
        );
        assert_eq!(mode_for(true, &one_rank_each), Mode::Direct);
        assert_eq!(
            executor_mode(Mode::Direct, &one_rank_each, LinkNeed::Put),
            Mode::Direct
        );
        let mixed = spec("2x8").with_fabric_access(Put, LoadStore);
        assert_eq!(
            mode_for(true, &mixed),
            Mode::Staged,
            "load/store only across"
        );
        let every_need = [
            LinkNeed::LoadStore,
            LinkNeed::LoadStoreWithinServer,
            LinkNeed::Put,
        ];
        for need in every_need {
            assert_eq!(executor_mode(Mode::Direct, &one_host, need), Mode::Direct);
            assert_eq!(executor_mode(Mode::Staged, &two_hosts, need), Mode::Staged);
        }
        let on_two_hosts = |need| executor_mode(Mode::Direct, &two_hosts, need);
        assert_eq!(on_two_hosts(LinkNeed::LoadStoreWithinServer), Mode::Direct);
        assert_eq!(
            on_two_hosts(LinkNeed::Put),
            Mode::Direct,
            "zero-copy per peer"
        );
        assert_eq!(on_two_hosts(LinkNeed::LoadStore), Mode::Staged);
    }

    /// Out of place, staged through 64 KiB CCL buffers, on `topology`.
    fn staged_on(topology: &Topology) -> Setting<'_> {
        Setting {
            topology,
            mode: Mode::Staged,
            ccl_bytes: 1 << 16,
            link_channels: 2,
            in_place: false,
        }
    }

    /// Stores its rank count as its plan in `resources()`, and reads it back as `T`.
    struct Planned<T>(std::marker::PhantomData<T>);

    impl<T: std::any::Any + Send + Sync> Executor for Planned<T> {
        fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
            Ok(ResourceRequest::with_peers(Peers::List(vec![])).with_plan(ctx.ranks as u32))
        }

        fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
            ctx.plan::<T>()?;
            args.copy_input_to_output(ctx);
            Ok(())
        }
    }

    fn plan_with<T: std::any::Any + Send + Sync>() -> Result<super::Planned, Error> {
        let topology = Topology::single_server(4);
        let op = OpParam::all_reduce(1 << 20, DataType::F32, ReduceOp::Sum);
        let setting = staged_on(&topology);
        let executor = Planned::<T>(std::marker::PhantomData);
        plan("planned", &executor, &setting.ctx(1, &op), setting.layout())
    }

    #[test]
    fn the_plan_reaches_every_iteration_typed() {
        let planned = plan_with::<u32>().unwrap();
        assert_eq!(planned.request.plan.get::<u32>(), Some(&4));
        // 4 MiB staged through 64 KiB: 64 iterations, each a stage-in, the kernel's copy
        // and a stage-out, every one of them given the plan.
        assert_eq!(planned.program.task_count(), 64 * 3);
    }

    /// Staged, the result is copied out of CclOut into every rank's output but a
    /// non-root's of Reduce and Gather, which the operator leaves alone: CclOut holds
    /// nothing of this call there (zeros, or an earlier call's data).
    #[test]
    fn staged_plans_copy_nothing_into_an_output_the_operator_leaves_alone() {
        struct CopyThrough;
        impl Executor for CopyThrough {
            fn resources(&self, _: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
                Ok(ResourceRequest::with_peers(Peers::List(vec![])))
            }
            fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
                args.copy_input_to_output(ctx);
                Ok(())
            }
        }
        let topology = Topology::single_server(4);
        let setting = staged_on(&topology);
        let writes_output = |op: &OpParam, rank| {
            let planned = plan(
                "copy",
                &CopyThrough,
                &setting.ctx(rank, op),
                setting.layout(),
            );
            let program = planned.unwrap().program;
            let writes = program.streams.iter().flat_map(|s| &s.tasks);
            writes
                .flat_map(|t| t.writes())
                .any(|w| w.buf == oxccl_platform::Buf::Output)
        };
        for kind in [OpKind::Reduce, OpKind::Gather] {
            let op = OpParam::rooted(kind, 1 << 15, DataType::F32, ReduceOp::Sum, 2);
            assert!(writes_output(&op, 2), "{kind}: the root's output");
            assert!(!writes_output(&op, 1), "{kind}: a non-root's output");
        }
        for kind in [OpKind::Broadcast, OpKind::Scatter] {
            let op = OpParam::rooted(kind, 1 << 15, DataType::F32, ReduceOp::Sum, 2);
            assert!(writes_output(&op, 1), "{kind}: every rank's output");
        }
    }

    #[test]
    fn a_plan_of_another_type_is_a_typed_error_naming_both() {
        let err = plan_with::<String>().unwrap_err();
        assert!(
            matches!(&err, Error::PlanType { executor, expected, found }
                if executor == "planned" && expected.contains("String") && *found == "u32"),
            "{err:?}"
        );
    }

    #[test]
    fn an_invalid_shape_is_refused_before_the_executor_is_asked() {
        let topology = Topology::single_server(4);
        let setting = staged_on(&topology);
        // Root 9 of 4 ranks, and a count whose blocks times the ranks pass every limit.
        let bad_root = OpParam::rooted(OpKind::Broadcast, 8, DataType::F32, ReduceOp::Sum, 9);
        let huge = OpParam::all_gather(usize::MAX / 2, DataType::F32);
        let executor = Planned::<u32>(std::marker::PhantomData);
        for op in [bad_root, huge] {
            let err =
                plan("planned", &executor, &setting.ctx(1, &op), setting.layout()).unwrap_err();
            assert!(matches!(err, Error::Arg(_)), "{op:?}: {err:?}");
        }
    }
}
