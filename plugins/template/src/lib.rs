//! # oxccl-plugin-template
//!
//! The crate a vendor copies to ship its own oxccl executors. It depends on `oxccl` (to
//! write and register executors) and `oxccl-cli` (for its binary), and holds:
//!
//! - one executor, `one-stream-mesh`, an AllGather small enough to read in one sitting
//!   (this file);
//! - `src/main.rs`, the whole oxccl toolbox with this crate's executors registered:
//!   `cargo run -- perf all-gather --algo one-stream-mesh`, `check`, `tune`, `algs`;
//! - the tests a plugin should keep: the analyzer's conformance matrix
//!   (`tests/conformance.rs`), a topology with a broken link (`tests/broken_link.rs`),
//!   real data on the host device against a reference (`tests/host.rs`), and the binary's
//!   commands (`tests/cli.rs`).
//!
//! ## The executor
//!
//! `one-stream-mesh` gathers every block straight from its owner, one peer after another
//! on the main stream: after placing its own input in its block of the output, a rank
//! tells every peer "my block is ready" (a data signal), then, peer by peer, waits for that
//! peer's signal and copies the peer's block out of the peer's output. All signals are
//! posted before the first wait, so no rank waits on one that waits on it.
//!
//! In the staged eager mode the output is the rank's CCL buffer, which the next loop
//! iteration refills; an Ack round ("I am done reading your output") ends every
//! iteration so that nobody refills a block a peer is still copying. Zero-copy needs no
//! such round: a call returns only after every peer it was granted finished it.
//!
//! It reads from every peer, so it needs every pair of ranks linked and says so in its
//! [`Constraints`]: select_alg never picks it on a topology with a broken or missing link,
//! and forcing it there (`--algo`, `OXCCL_ALGO`) is refused with that reason.
//!
//! ## Registration
//!
//! [`oxccl::register_executor!`] adds an entry to a link-time registry (`inventory`).
//! Cargo links a crate only when the final binary or test names it, so each of them says
//! `use oxccl_plugin_template as _;`.

use oxccl::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, Peers, PlanCtx,
    ResourceRequest,
};

/// The executor's name: what `--algo` and `OXCCL_ALGO=all_gather=...` take.
pub const NAME: &str = "one-stream-mesh";

/// The link channel of the handshakes.
const CHANNEL: usize = 0;

/// AllGather pulling every peer's block in turn on the main stream.
#[derive(Clone, Copy, Debug, Default)]
pub struct OneStreamMesh;

oxccl::register_executor! {
    name: NAME,
    op: OpKind::AllGather,
    description: "every peer's block pulled in turn on the main stream, after one ready \
                  round (plugin template)",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 0,
    make: || Box::new(OneStreamMesh),
}

impl Executor for OneStreamMesh {
    fn resources(&self, _ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        Ok(ResourceRequest::with_peers(Peers::All))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let me = ctx.rank;
        let blocks = args.blocks(ctx.ranks);
        let (offset, len) = blocks[me];
        // In place, the input already is this rank's block of the output.
        if !args.aliased {
            let (input, own_block) = (args.input.at(me, 0, len), args.output.at(me, offset, len));
            ctx.main().copy(input, own_block);
        }
        let peers: Vec<usize> = (1..ctx.ranks).map(|step| (me + step) % ctx.ranks).collect();
        for &peer in &peers {
            ctx.link(peer, CHANNEL)?.tx_data_signal(ctx.main());
        }
        for &peer in &peers {
            let (offset, len) = blocks[peer];
            let from = args.output.at(peer, offset, len);
            let to = args.output.at(me, offset, len);
            ctx.link(peer, CHANNEL)?.rx_data_signal(ctx.main());
            ctx.main().copy(from, to);
        }
        if args.mode == Mode::Staged {
            for &peer in &peers {
                ctx.link(peer, CHANNEL)?.tx_ack(ctx.main());
            }
            for &peer in &peers {
                ctx.link(peer, CHANNEL)?.rx_ack(ctx.main());
            }
        }
        Ok(())
    }
}
