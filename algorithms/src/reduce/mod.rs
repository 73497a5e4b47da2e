//! Reduce executors: the root's output becomes the reduction of every rank's input.
//!
//! Only the root's output receives anything: a non-root's output is left as it was, as
//! NCCL leaves `recvbuff` unused off the root (a caller may pass a buffer it still
//! needs, or none: the C ABI binds a block of its own there). The executors that reduce
//! on the way to the root keep a non-root's partial reductions where [`Partials`] says.
//! A rank reads a peer's input or partials only after that peer said they are ready, and
//! says "done reading" before the peer's iteration may end.

pub mod mesh;
pub mod put_mesh;
pub mod put_rhd;
pub mod relay_mesh;
pub mod relay_reduce_scatter_gather;
pub mod ring;
pub mod tree;

use oxccl_framework::platform::{Buf, Rank};
use oxccl_framework::{BufRange, KernelArgs, Mode, PlanCtx, ResourceRequest};

/// Where each rank keeps what it reduces on the way to the root: the root in its output;
/// a non-root zero-copy ([`Mode::Direct`]) in Scratch from an offset, since its output is
/// the caller's buffer, and staged in its output, which is CclOut there and is not
/// copied out off the root (`OpParam::unused_buffer`).
#[derive(Copy, Clone, Debug)]
pub(crate) struct Partials {
    root: Rank,
    output: BufRange,
    off_root: BufRange,
}

impl Partials {
    /// The iteration's partials, a non-root's zero-copy ones `scratch_offset` bytes into
    /// its Scratch (the same offset on every rank: peers read them there).
    pub fn new(args: &KernelArgs, root: Rank, scratch_offset: usize) -> Self {
        let off_root = match args.mode {
            Mode::Direct => BufRange {
                buf: Buf::Scratch,
                offset: scratch_offset,
                len: args.output.len,
            },
            Mode::Staged => args.output,
        };
        Partials {
            root,
            output: args.output,
            off_root,
        }
    }

    /// Rank `rank`'s partials.
    pub fn of(&self, rank: Rank) -> BufRange {
        match rank == self.root {
            true => self.output,
            false => self.off_root,
        }
    }
}

/// `request` with Scratch for a non-root's zero-copy partials after the Scratch it
/// already asks for: one iteration's worth, every rank's iteration capped at one CCL
/// buffer (the staged loop's own cap). Every rank, the root too, asks the same, so their
/// loops and Scratch offsets agree.
pub(crate) fn with_partials(ctx: &PlanCtx<'_>, request: ResourceRequest) -> ResourceRequest {
    if ctx.mode != Mode::Direct || ctx.ranks == 1 {
        return request;
    }
    let es = ctx.op.dtype.size();
    let cap = (ctx.ccl_bytes / es).max(1);
    let cap = request.max_count_per_loop.map_or(cap, |c| c.min(cap));
    ResourceRequest {
        // Saturating: a request past the limits is refused by `ResourceRequest::check`.
        scratch_bytes: request
            .scratch_bytes
            .saturating_add(cap.min(ctx.op.count).saturating_mul(es)),
        max_count_per_loop: Some(cap),
        ..request
    }
}
