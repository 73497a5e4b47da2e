//! Put RHD: recursive halving-doubling by puts, for put-only links.
//!
//! The same schedule as [`rhd`](super::rhd) (HCCL's `H-D_R`: `m = 2^k` participants, the
//! first `2(n - m)` positions folded pairwise), but every exchange is a [`put_step`]: the
//! sender writes what the receiver needs into the receiver's *receive area* (Scratch;
//! chunk `c` at `recv_chunks[c]`), signals, and the receiver reduces or copies it locally.
//!
//! - fold (reduce-scatter): the odd position puts its whole input into the even one's
//!   receive area; the even one reduces it with its own input into its partial sums;
//! - halving, distance `d = m/2 .. 1`: a participant puts its side (input at the first
//!   step unless it folded, partial sums afterwards) of the chunks its partner keeps, and
//!   reduces the partner's put of the chunks it keeps;
//! - unfold (reduce-scatter): the even position puts the odd one's reduced chunk;
//! - fold (all-gather): the odd position puts its chunk; doubling: a participant puts the
//!   chunks it holds; unfold: the even position puts every chunk the odd one lacks.
//!
//! All-gather puts land in the receiver's copy of the chunk when that is a CCL buffer
//! (`gather_into_place`, staged), otherwise in the receive area, copied into place by the
//! receiver (a put may not write a user buffer). The receive area is reused every step:
//! each step's Ack from the receiver precedes the put, after its consume of the previous
//! step, so nothing is overwritten early and no notify is posted twice.

use super::put_step::put_step;
use super::rhd::{group_position, merge_runs, RhdShape};
use super::ring::RingParams;
use super::ring_reduce_scatter::RingTargets;
use oxccl_framework::platform::{Link, Rank, Slice};
use oxccl_framework::{BufRange, Error, KernelCtx};
use std::ops::Range;

oxccl_framework::register_template! {
    name: "put_rhd",
    description: "recursive halving-doubling by puts into the partner's Scratch receive area, reduced locally; runs over put-only links",
}

/// An RHD group run by puts.
#[derive(Clone, Debug)]
pub struct PutRhd<'a> {
    /// The group, chunks, input and output, as for the pull templates.
    pub p: RingParams<'a>,
    /// This rank's receive area (Scratch), the same range on every rank.
    pub recv: BufRange,
    /// `(byte offset, byte length)` of chunk `c` within `recv`.
    pub recv_chunks: &'a [(usize, usize)],
    /// All-gather puts write the receiver's `p.output` directly (a CCL buffer).
    pub gather_into_place: bool,
}

/// This rank in a put RHD group.
struct Member<'r, 'a> {
    g: &'r PutRhd<'a>,
    shape: RhdShape,
    pos: usize,
}

impl Member<'_, '_> {
    fn link(&self, ctx: &KernelCtx<'_>, pos: usize) -> Result<Link, Error> {
        ctx.link(self.g.p.order[pos], self.g.p.channel)
    }

    fn chunks_of(&self, positions: Range<usize>) -> Vec<usize> {
        positions.map(|q| self.g.p.chunk_at[q]).collect()
    }

    fn recv_at(&self, rank: Rank, c: usize) -> Slice {
        let (off, len) = self.g.recv_chunks[c];
        self.g.recv.at(rank, off, len)
    }

    fn input(&self, rank: Rank, c: usize) -> Slice {
        let (off, len) = self.g.p.chunks[c];
        self.g.p.input.at(rank, off, len)
    }

    fn output(&self, rank: Rank, c: usize) -> Slice {
        let (off, len) = self.g.p.chunks[c];
        self.g.p.output.at(rank, off, len)
    }

    /// One step: put `sends` (local source, chunk) into `to`, and reduce (`Some`
    /// targets: `[received, own] -> dst`) or copy into place what `from` put.
    fn step(
        &self,
        ctx: &mut KernelCtx<'_>,
        from: Option<Link>,
        to: Option<Link>,
        puts: Vec<[Slice; 2]>,
        reduces: Vec<[Slice; 3]>,
        copies: Vec<[Slice; 2]>,
    ) {
        let (dtype, op) = (self.g.p.dtype, self.g.p.op);
        put_step(
            ctx,
            self.g.p.stream,
            from.as_ref(),
            to.as_ref(),
            |s| merge_runs(puts).into_iter().for_each(|[a, b]| s.copy(a, b)),
            |s| {
                for [a, b, dst] in merge_runs(reduces) {
                    s.reduce(vec![a, b], dst, dtype, op);
                }
                merge_runs(copies)
                    .into_iter()
                    .for_each(|[a, b]| s.copy(a, b));
            },
        );
    }

    /// Gather puts of `chunks` (held in `p.output`) to `to`, and the receiver's copies.
    fn gather_puts(&self, me: Rank, to: Rank, chunks: &[usize]) -> Vec<[Slice; 2]> {
        chunks
            .iter()
            .map(|&c| {
                let dst = match self.g.gather_into_place {
                    true => self.output(to, c),
                    false => self.recv_at(to, c),
                };
                [self.output(me, c), dst]
            })
            .collect()
    }

    fn gather_copies(&self, me: Rank, chunks: &[usize]) -> Vec<[Slice; 2]> {
        match self.g.gather_into_place {
            true => Vec::new(),
            false => chunks
                .iter()
                .map(|&c| [self.recv_at(me, c), self.output(me, c)])
                .collect(),
        }
    }

    /// Where a partial sum of chunk `c` goes (the result for the own chunk at `d == 1`).
    fn partial(&self, t: &RingTargets<'_>, me: Rank, c: usize, last: bool) -> Slice {
        let len = self.g.p.chunks[c].1;
        match t.result {
            Some(result) if last && c == self.g.p.chunk_at[self.pos] => result.at(me, 0, len),
            _ => t.partials.at(me, t.partial_chunks[c].0, len),
        }
    }

    fn fold_reduce(&self, ctx: &mut KernelCtx<'_>, t: &RingTargets<'_>) -> Result<(), Error> {
        let (pos, me) = (self.pos, ctx.rank);
        if pos >= 2 * self.shape.r {
            return Ok(());
        }
        let peer = self.link(ctx, pos ^ 1)?;
        let all: Vec<usize> = (0..self.g.p.chunks.len()).collect();
        if pos & 1 == 1 {
            let puts = all
                .iter()
                .map(|&c| [self.input(me, c), self.recv_at(peer.remote, c)])
                .collect();
            self.step(ctx, None, Some(peer), puts, vec![], vec![]);
        } else {
            let reduces = all
                .iter()
                .map(|&c| {
                    let dst = t
                        .partials
                        .at(me, t.partial_chunks[c].0, self.g.p.chunks[c].1);
                    [self.recv_at(me, c), self.input(me, c), dst]
                })
                .collect();
            self.step(ctx, Some(peer), None, vec![], reduces, vec![]);
        }
        Ok(())
    }

    fn halving(&self, ctx: &mut KernelCtx<'_>, t: &RingTargets<'_>) -> Result<(), Error> {
        let (shape, me) = (self.shape, ctx.rank);
        let Some(v) = shape.participant(self.pos) else {
            return Ok(());
        };
        for d in shape.halving() {
            let w = v ^ d;
            let link = self.link(ctx, shape.position(w))?;
            let first = d == shape.m / 2;
            let mine_partial = !first || v < shape.r;
            let side = |c: usize| match mine_partial {
                true => t
                    .partials
                    .at(me, t.partial_chunks[c].0, self.g.p.chunks[c].1),
                false => self.input(me, c),
            };
            let puts = self
                .chunks_of(shape.positions(RhdShape::block(w, d)))
                .into_iter()
                .map(|c| [side(c), self.recv_at(link.remote, c)])
                .collect();
            let reduces = self
                .chunks_of(shape.positions(RhdShape::block(v, d)))
                .into_iter()
                .map(|c| [self.recv_at(me, c), side(c), self.partial(t, me, c, d == 1)])
                .collect();
            self.step(ctx, Some(link), Some(link), puts, reduces, vec![]);
        }
        Ok(())
    }

    fn unfold_reduced(&self, ctx: &mut KernelCtx<'_>, t: &RingTargets<'_>) -> Result<(), Error> {
        let (pos, me) = (self.pos, ctx.rank);
        if pos >= 2 * self.shape.r {
            return Ok(());
        }
        let peer = self.link(ctx, pos ^ 1)?;
        let c = self.g.p.chunk_at[pos ^ 1];
        let len = self.g.p.chunks[c].1;
        if pos & 1 == 0 {
            let src = t.partials.at(me, t.partial_chunks[c].0, len);
            let puts = vec![[src, self.recv_at(peer.remote, c)]];
            self.step(ctx, None, Some(peer), puts, vec![], vec![]);
        } else {
            let c = self.g.p.chunk_at[pos];
            let dst = match t.result {
                Some(result) => result.at(me, 0, len),
                None => t.partials.at(me, t.partial_chunks[c].0, len),
            };
            let copies = vec![[self.recv_at(me, c), dst]];
            self.step(ctx, Some(peer), None, vec![], vec![], copies);
        }
        Ok(())
    }

    /// Odd position to even (`fold`) or even to odd (`!fold`) of `chunks`.
    fn pair_gather(
        &self,
        ctx: &mut KernelCtx<'_>,
        fold: bool,
        chunks: &[usize],
    ) -> Result<(), Error> {
        let (pos, me) = (self.pos, ctx.rank);
        if pos >= 2 * self.shape.r {
            return Ok(());
        }
        let peer = self.link(ctx, pos ^ 1)?;
        let sender = (pos & 1 == 1) == fold;
        if sender {
            let puts = self.gather_puts(me, peer.remote, chunks);
            self.step(ctx, None, Some(peer), puts, vec![], vec![]);
        } else {
            let copies = self.gather_copies(me, chunks);
            self.step(ctx, Some(peer), None, vec![], vec![], copies);
        }
        Ok(())
    }

    fn doubling(&self, ctx: &mut KernelCtx<'_>) -> Result<(), Error> {
        let (shape, me) = (self.shape, ctx.rank);
        let Some(v) = shape.participant(self.pos) else {
            return Ok(());
        };
        for d in shape.doubling() {
            let w = v ^ d;
            let link = self.link(ctx, shape.position(w))?;
            let mine = self.chunks_of(shape.positions(RhdShape::block(v, d)));
            let theirs = self.chunks_of(shape.positions(RhdShape::block(w, d)));
            let puts = self.gather_puts(me, link.remote, &mine);
            let copies = self.gather_copies(me, &theirs);
            self.step(ctx, Some(link), Some(link), puts, vec![], copies);
        }
        Ok(())
    }
}

fn member<'r, 'a>(ctx: &KernelCtx<'_>, g: &'r PutRhd<'a>) -> Result<Member<'r, 'a>, Error> {
    Ok(Member {
        g,
        shape: RhdShape::new(g.p.order.len()),
        pos: group_position(ctx, g.p.order)?,
    })
}

/// The chunks the odd position of a folded pair lacks after the doubling: all, or all
/// but its own (none outside a folded pair).
fn unfold_chunks(g: &PutRhd<'_>, pos: usize, has_own: bool) -> Vec<usize> {
    if pos >= 2 * RhdShape::new(g.p.order.len()).r {
        return Vec::new();
    }
    let own = g.p.chunk_at[pos | 1];
    (0..g.p.chunks.len())
        .filter(|&c| !has_own || c != own)
        .collect()
}

/// Append a put RHD reduce-scatter that reads `g.p.input` and writes `t`.
pub fn put_rhd_reduce_scatter(
    ctx: &mut KernelCtx<'_>,
    g: &PutRhd<'_>,
    t: &RingTargets<'_>,
) -> Result<(), Error> {
    let m = member(ctx, g)?;
    m.fold_reduce(ctx, t)?;
    m.halving(ctx, t)?;
    m.unfold_reduced(ctx, t)
}

/// Append a put RHD all-gather of the chunks in `g.p.output` (each rank's own chunk in
/// place).
pub fn put_rhd_all_gather(ctx: &mut KernelCtx<'_>, g: &PutRhd<'_>) -> Result<(), Error> {
    let m = member(ctx, g)?;
    let folded = match m.pos < 2 * m.shape.r {
        true => vec![g.p.chunk_at[m.pos | 1]],
        false => Vec::new(),
    };
    m.pair_gather(ctx, true, &folded)?;
    m.doubling(ctx)?;
    m.pair_gather(ctx, false, &unfold_chunks(g, m.pos, true))
}

/// Append a put RHD all-reduce: afterwards every member's `g.p.output` holds the
/// reduction of every member's `g.p.input`, partial sums kept in `g.p.output`.
pub fn put_rhd_all_reduce(ctx: &mut KernelCtx<'_>, g: &PutRhd<'_>) -> Result<(), Error> {
    let m = member(ctx, g)?;
    let targets = RingTargets {
        partials: g.p.output,
        partial_chunks: g.p.chunks,
        result: None,
    };
    m.fold_reduce(ctx, &targets)?;
    m.halving(ctx, &targets)?;
    m.doubling(ctx)?;
    m.pair_gather(ctx, false, &unfold_chunks(g, m.pos, false))
}
