//! AllReduce put RD: recursive doubling by puts of the whole vector, for put-only links
//! and small messages.
//!
//! MPICH's and Open MPI's small-message AllReduce, over puts: among `m = 2^k`
//! participants, at distance `d = 1, 2, .., m/2` each participant puts its partial sums
//! of the *whole* vector into its partner's receive slot for that step, and reduces the
//! partner's put with its own. `log2(m)` steps and as many puts per rank, where put RHD
//! takes `2log2(m)` steps with an Ack before each put and put mesh `2(n - 1)` puts: on a
//! network link (TCP) each message costs a system call and a wakeup on both ends, and
//! below a few KiB that is the whole cost. The price is bandwidth: every step moves the
//! whole vector, so the cost model picks it only for small messages.
//!
//! Non-powers of two fold pairwise first (`RhdShape`): the odd position of each of the
//! first `r = n - m` pairs puts its input into the even one's fold slot, which reduces it
//! and joins the doubling; at the end the even one puts the result into the odd one's
//! fold slot, which copies it into place (a put may not write a user buffer).
//!
//! Every step and the fold have their own receive slot (Scratch, `log2(m) + 1` slots of
//! an iteration's bytes), so the first iteration needs no Ack at all: a slot is written
//! once per iteration, and the device's entry fence guarantees that every peer finished
//! the previous operation, which consumed its slots. From the second iteration of a staged
//! loop on, each put waits for the receiver's Ack, which the receiver posts at the start
//! of the step, after everything it did in the previous iteration. The reduce takes the
//! lower participant's partial first, so every rank computes the same bits.
//!
//! Its partners are fixed by rank, so it cannot route around a broken link: it declares
//! `full_mesh`, and a topology with a broken or missing link refuses it (`relay-mesh` and
//! the rings run there).

use crate::templates::rhd::RhdShape;
use crate::templates::rhd_links;
use oxccl_framework::limits::MAX_BUFFER_BYTES;
use oxccl_framework::platform::{Buf, Link, Rank, Slice, StreamProgram};
use oxccl_framework::{
    ArgError, BufRange, Constraints, Error, Executor, KernelArgs, KernelCtx, LinkNeed, OpKind,
    Peers, PlanCtx, ResourceRequest,
};

/// The put RD AllReduce executor.
pub struct PutRdAllReduce;

const NAME: &str = "put-rd";

oxccl_framework::register_executor! {
    name: NAME,
    op: OpKind::AllReduce,
    description: "recursive doubling of the whole vector by puts into the partner's Scratch slot per step, reduced locally; non-powers of two fold pairwise; runs over put-only links (few messages, for small sizes)",
    constraints: Constraints {
        full_mesh: true,
        links: LinkNeed::Put,
        ..Constraints::ANY
    },
    preference: 4,
    make: || Box::new(PutRdAllReduce),
}

/// Receive slots of `n` ranks: one per doubling step, and the fold's.
fn slots(n: usize) -> usize {
    RhdShape::new(n).doubling().count() + 1
}

impl Executor for PutRdAllReduce {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let peers = rhd_links(ctx, NAME)?;
        let request = ResourceRequest::with_peers(Peers::List(peers));
        if ctx.ranks == 1 {
            return Ok(request);
        }
        // An iteration's slots fit in one CCL buffer's worth of Scratch (no product here
        // exceeds `ccl_bytes`, or `slots * es` when that is smaller than a slot set).
        let (slots, es) = (slots(ctx.ranks), ctx.op.dtype.size());
        let cap = (ctx.ccl_bytes / es / slots).max(1);
        Ok(ResourceRequest {
            scratch_bytes: cap.min(ctx.op.count) * es * slots,
            max_count_per_loop: Some(cap),
            ..request
        })
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        if ctx.ranks == 1 {
            args.copy_input_to_output(ctx);
            return Ok(());
        }
        Run::new(ctx, args)?.all_reduce(ctx)
    }
}

/// One iteration on one rank.
struct Run<'a> {
    args: &'a KernelArgs,
    shape: RhdShape,
    me: Rank,
    /// This rank's position's participant (`None`: an odd position that folds away).
    participant: Option<usize>,
    bytes: usize,
    /// The receive slots: `slots(n)` of `bytes` at the start of Scratch.
    area: BufRange,
    /// The fold's slot (the last).
    fold: usize,
    /// Wait for the receiver's Ack before each put (from the second iteration on).
    acks: bool,
}

impl<'a> Run<'a> {
    fn new(ctx: &KernelCtx<'_>, args: &'a KernelArgs) -> Result<Self, Error> {
        let shape = RhdShape::new(ctx.ranks);
        let op = &args.op;
        // An iteration is at most `max_count_per_loop` elements, whose slots fit in one
        // CCL buffer (see `resources`); checked all the same.
        let overflow = || {
            Error::Arg(ArgError::CountOverflow {
                count: op.count,
                dtype: op.dtype,
                ranks: ctx.ranks,
                limit: MAX_BUFFER_BYTES,
            })
        };
        let bytes = op.count.checked_mul(op.dtype.size()).ok_or_else(overflow)?;
        let slots = slots(ctx.ranks);
        Ok(Run {
            args,
            shape,
            me: ctx.rank,
            participant: shape.participant(ctx.rank),
            bytes,
            area: BufRange {
                buf: Buf::Scratch,
                offset: 0,
                len: slots.checked_mul(bytes).ok_or_else(overflow)?,
            },
            fold: slots - 1,
            acks: args.iteration > 0,
        })
    }

    /// Receive slot `i` of `rank`.
    fn slot(&self, rank: Rank, i: usize) -> Slice {
        self.area.at(rank, i * self.bytes, self.bytes)
    }

    /// The fold's slot.
    fn fold_slot(&self, rank: Rank) -> Slice {
        self.slot(rank, self.fold)
    }

    /// From the second iteration on, the Acks of one exchange on `link`: this rank says
    /// its slot is free when it `receives`, and waits for the peer's word when it
    /// `sends`.
    fn acks(&self, link: &Link, s: &mut StreamProgram, receives: bool, sends: bool) {
        if !self.acks {
            return;
        }
        if receives {
            link.tx_ack(s);
        }
        if sends {
            link.rx_ack(s);
        }
    }

    fn input(&self) -> Slice {
        self.args.input.at(self.me, 0, self.bytes)
    }

    fn output(&self) -> Slice {
        self.args.output.at(self.me, 0, self.bytes)
    }

    fn all_reduce(&self, ctx: &mut KernelCtx<'_>) -> Result<(), Error> {
        let folds = self.me < 2 * self.shape.r;
        let Some(v) = self.participant else {
            return self.fold_away(ctx, self.me ^ 1);
        };
        let mut partial = self.input();
        if folds {
            self.fold_in(ctx, self.me ^ 1)?;
            partial = self.output();
        }
        for (step, d) in self.shape.doubling().enumerate() {
            let partner = self.shape.position(v ^ d);
            self.exchange(ctx, partner, step, partial)?;
            partial = self.output();
        }
        if folds {
            self.unfold(ctx, self.me ^ 1)?;
        }
        Ok(())
    }

    /// One doubling step: put `partial` into `partner`'s slot `step`, reduce the
    /// partner's put with `partial` into the output.
    fn exchange(
        &self,
        ctx: &mut KernelCtx<'_>,
        partner: Rank,
        step: usize,
        partial: Slice,
    ) -> Result<(), Error> {
        let link = ctx.link(partner, 0)?;
        let s = ctx.stream(0);
        self.acks(&link, s, true, true);
        link.tx_async(s, &[(self.slot(partner, step), partial)]);
        Self::land(&link, s);
        // The partial is read by the put, which a put-only link completes before the
        // DataAck `land` waited for; the reduce may overwrite it now.
        let theirs = self.slot(self.me, step);
        let srcs = match self.me < partner {
            true => vec![partial, theirs],
            false => vec![theirs, partial],
        };
        s.reduce(srcs, self.output(), self.args.op.dtype, self.args.op.op);
        Ok(())
    }

    /// Wait for the peer's put to land and confirm it, then for the peer's confirmation
    /// of this rank's put (both nothing but the data signal on a non-RDMA link).
    fn land(link: &Link, s: &mut StreamProgram) {
        link.rx_async(s);
        link.rx_wait_done(s);
        link.tx_wait_done(s);
    }

    /// The odd position of a folded pair: put the input into `even`'s fold slot, then
    /// copy the result `even` puts into this rank's fold slot into place.
    fn fold_away(&self, ctx: &mut KernelCtx<'_>, even: Rank) -> Result<(), Error> {
        let link = ctx.link(even, 0)?;
        let s = ctx.stream(0);
        self.acks(&link, s, true, true);
        link.tx_async(s, &[(self.fold_slot(even), self.input())]);
        Self::land(&link, s);
        s.copy(self.fold_slot(self.me), self.output());
        Ok(())
    }

    /// The even position of a folded pair, first: reduce the odd one's input into the
    /// output.
    fn fold_in(&self, ctx: &mut KernelCtx<'_>, odd: Rank) -> Result<(), Error> {
        let link = ctx.link(odd, 0)?;
        let s = ctx.stream(0);
        self.acks(&link, s, true, false);
        link.rx_async(s);
        link.rx_wait_done(s);
        let srcs = vec![self.input(), self.fold_slot(self.me)];
        s.reduce(srcs, self.output(), self.args.op.dtype, self.args.op.op);
        Ok(())
    }

    /// The even position of a folded pair, last: put the result into the odd one's fold
    /// slot.
    fn unfold(&self, ctx: &mut KernelCtx<'_>, odd: Rank) -> Result<(), Error> {
        let link = ctx.link(odd, 0)?;
        let s = ctx.stream(0);
        self.acks(&link, s, false, true);
        link.tx_async(s, &[(self.fold_slot(odd), self.output())]);
        link.tx_wait_done(s);
        Ok(())
    }
}
